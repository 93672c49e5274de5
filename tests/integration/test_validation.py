"""Nothing is touched when a variable or a rule is wrong: each mistake that once restarted a real
server before failing is refused on the controller, with a message naming the variable, its value
and what is allowed, and the unit's InvocationID is the same afterwards.

The simulator runs on the first host (it is never restarted); each case runs the restart playbook
against that host only, with a short budget.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.fleet import Fleet
from tests.integration.conftest import RunPlaybook

RESTART = "playbooks/restart_sglang.yml"
PRECHECK = "playbooks/precheck_sglang.yml"
UNIT = "sglang.service"
FAST = {"SIM_SPEED": "0.15", "SIM_WARMUP_SECONDS": "1"}
QUICK = {"sglang_restart_budget": 20, "sglang_restart_poll_interval": 1, "sglang_restart_soak": 1, "sglang_restart_release_timeout": 10}
# a list pattern means "any of these" strings; one with something else in it is refused
PATTERN_LIST = [{"id": "local-either", "pattern": ["Frobnicator", 1], "reason": "a list of patterns holds strings"}]
PATTERN_NUMBER = [{"id": "local-number", "pattern": 1, "reason": "a number is not a pattern"}]

# (variables, reason, what the message must say)
CASES: dict[str, tuple[dict[str, Any], str, str]] = {
    "health-url-file": ({"sglang_restart_health_url": "file:///etc/passwd"}, "invalid_options", "sglang_restart_health_url must be an http:// or https:// URL"),
    "health-url-gopher": ({"sglang_restart_health_url": "gopher://x"}, "invalid_options", "got 'gopher://x'"),
    "health-url-metadata": (
        {"sglang_restart_health_url": "http://169.254.169.254/latest/meta-data/"},
        "invalid_options",
        "sglang_restart_health_url must point at the target itself",
    ),
    "smoke-url-remote": (
        {"sglang_restart_smoke_test": True, "sglang_restart_smoke_url": "http://192.0.2.80/v1/completions"},
        "invalid_options",
        "the API key would be sent to it",
    ),
    "budget-0": ({"sglang_restart_budget": 0}, "invalid_options", "sglang_restart_budget must be a number of seconds > 0, got 0"),
    "budget-negative": ({"sglang_restart_budget": -1}, "invalid_options", "sglang_restart_budget must be a number of seconds > 0, got -1"),
    "health-successes-0": ({"sglang_restart_health_successes": 0}, "invalid_options", "sglang_restart_health_successes must be a whole number >= 1, got 0"),
    "soak-negative": ({"sglang_restart_soak": -5}, "invalid_options", "sglang_restart_soak must be a number of seconds >= 0, got -5"),
    "stall-limit-0": ({"sglang_restart_stall_limit": 0}, "invalid_options", "sglang_restart_stall_limit must be a number of seconds > 0, got 0"),
    "stall-limits-broken-yaml": ({"sglang_restart_stall_limits": "capturing_cuda_graphs: [90"}, "invalid_options", "stall_limits is not valid YAML text"),
    "stall-limits-unknown-phase": ({"sglang_restart_stall_limits": "compiling: 90"}, "invalid_options", "stall_limits: 'compiling' is not a phase"),
    "unit-empty": ({"sglang_restart_unit": ""}, "invalid_options", "sglang_restart_unit is empty"),
    "rule-pattern-list": ({"sglang_restart_extra_rules": PATTERN_LIST}, "invalid_rules", "local-either"),
    "rule-pattern-number": ({"sglang_restart_extra_rules": PATTERN_NUMBER}, "invalid_rules", "local-number"),
    "disabled-rules-not-ids": ({"sglang_restart_disabled_rules": [1, None]}, "invalid_options", "item #1 is 1, item #2 is null"),
    # timeouts of 0 or less: health_timeout 0 once restarted the server and failed only then
    "health-timeout-0": ({"sglang_restart_health_timeout": 0}, "invalid_options", "sglang_restart_health_timeout must be a number of seconds > 0, got 0"),
    "health-timeout-negative": (
        {"sglang_restart_health_timeout": "-2.5"},
        "invalid_options",
        "sglang_restart_health_timeout must be a number of seconds > 0, got -2.5",
    ),
    "router-timeout-0": ({"sglang_restart_router_timeout": 0}, "invalid_options", "sglang_restart_router_timeout must be a whole number of seconds > 0, got 0"),
    "drain-timeout-negative": (
        {"sglang_restart_drain_timeout": -30},
        "invalid_options",
        "sglang_restart_drain_timeout must be a whole number of seconds > 0, got -30",
    ),
    "release-timeout-0": (
        {"sglang_restart_release_timeout": "0"},
        "invalid_options",
        "sglang_restart_release_timeout must be a whole number of seconds > 0, got 0",
    ),
    "smoke-timeout-negative": (
        {"sglang_restart_smoke_test": True, "sglang_restart_smoke_timeout": -1},
        "invalid_options",
        "sglang_restart_smoke_timeout must be a whole number of seconds > 0, got -1",
    ),
}
# the precheck's: (variables, what the message must say)
PRECHECK_CASES: dict[str, tuple[dict[str, Any], str]] = {
    "health-url-metadata": ({"sglang_precheck_health_url": "http://169.254.169.254/"}, "sglang_precheck_health_url must point at the target itself"),
    "health-timeout-0": ({"sglang_precheck_health_timeout": 0}, "sglang_precheck_health_timeout must be a number of seconds > 0, got 0"),
    "health-timeout-negative": ({"sglang_precheck_health_timeout": -1}, "sglang_precheck_health_timeout must be a number of seconds > 0, got -1"),
}


@pytest.fixture(scope="module")
def running(fleet: Fleet) -> Iterator[str]:
    """The first host with the simulator started once for every case (no case may restart it)."""
    host = fleet.hosts[0]
    fleet.reset(host)
    fleet.set_scenario(host, **FAST)
    fleet.ssh(host, f"systemctl start {UNIT}")
    yield host
    fleet.reset(host)


def assert_refused(out: str, host: str, reason: str, message: str, head: str) -> None:
    assert f"{host} {head}FAIL ({reason})" in out, out[-4000:]
    assert message in out, out[-4000:]
    assert "FAIL (unknown)" not in out and "non-zero return code" not in out
    assert "Restart | Stop the unit" not in out and "Traceback" not in out


@pytest.mark.parametrize("case", CASES)
def test_a_mistake_is_refused_before_anything_is_touched(fleet: Fleet, running: str, run_playbook: RunPlaybook, case: str, tmp_path: Path) -> None:
    variables, reason, message = CASES[case]
    before = fleet.unit_property(running, "InvocationID")
    run = run_playbook(RESTART, extra_vars={**QUICK, **variables, "sglang_restart_report_dir": str(tmp_path)}, limit=running)
    assert run.returncode != 0, run
    assert_refused(run.flat, running, reason, message, f"{variables.get('sglang_restart_unit', UNIT) or '(no unit)'}: ")
    assert fleet.unit_property(running, "InvocationID") == before
    report = json.loads((tmp_path / f"{running}.json").read_text())
    assert (report["verdict"], report["reason"], report["failed_stage"]) == ("fail", reason, "validate")
    assert report["problems"] and any(message in problem for problem in report["problems"])


@pytest.mark.parametrize("case", PRECHECK_CASES)
def test_the_precheck_refuses_the_same_way(fleet: Fleet, running: str, run_playbook: RunPlaybook, case: str, tmp_path: Path) -> None:
    variables, message = PRECHECK_CASES[case]
    before = fleet.unit_property(running, "InvocationID")
    run = run_playbook(PRECHECK, extra_vars={**variables, "sglang_precheck_report_dir": str(tmp_path)}, limit=running)
    assert run.returncode != 0, run
    assert_refused(run.flat, running, "invalid_options", message, f"{UNIT}: precheck ")
    assert fleet.unit_property(running, "InvocationID") == before
    report = json.loads((tmp_path / f"{running}.precheck.json").read_text())
    assert (report["verdict"], report["reason"]) == ("fail", "invalid_options")
    assert any(message in problem for problem in report["problems"])


def test_a_typo_on_a_later_host_stops_the_rolling_restart_before_the_canary(fleet: Fleet, running: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """The last host's own variables are wrong: the canary's validation refuses the whole run; no
    host is touched, and the later hosts never run a task."""
    last = fleet.hosts[-1]
    inventory = tmp_path / "last-host.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {last: {"sglang_restart_health_successes": 0}}}}))
    before = fleet.unit_property(running, "InvocationID")
    run = run_playbook(RESTART, "-i", str(inventory), extra_vars=QUICK)
    out = run.flat
    assert run.returncode != 0, run
    assert_refused(out, running, "invalid_options", f"sglang_restart_health_successes must be a whole number >= 1, got 0 (on {last})", f"{UNIT}: ")
    assert f"[{last}]" not in out
    assert fleet.unit_property(running, "InvocationID") == before
