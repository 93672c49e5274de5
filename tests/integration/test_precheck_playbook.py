"""playbooks/precheck_sglang.yml for real: the read-only pre-deploy check against systemd hosts running
the simulator.

Each test starts the simulator in one host with a scenario, waits until the start has ended (the ready
marker is in the journal of the current invocation, or the unit failed), runs the precheck on that host
only (``limit``) and checks the verdict, the reason, and that nothing was restarted.
"""

from __future__ import annotations

import json
import re
import shlex
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.fleet import Fleet
from tests.integration.conftest import RunPlaybook

PLAYBOOK = "playbooks/precheck_sglang.yml"
UNIT = "sglang.service"
FAST = {"SIM_SPEED": "0.15", "SIM_WARMUP_SECONDS": "1"}
READY_LINE = "The server is fired up and ready to roll!"
# The simulator's unit restarts on failure: for a crash that stays crashed (the state a precheck
# finds after a lost start), a runtime drop-in turns that off while the test runs.
NO_RESTART_DIR = f"/run/systemd/system/{UNIT}.d"
NO_RESTART = f"{NO_RESTART_DIR}/precheck-test-no-restart.conf"


def start(fleet: Fleet, host: str, timeout: float = 60, **scenario: str) -> None:
    """Start the simulator with a scenario and wait until its start has ended: the ready marker is in
    the current invocation's journal (and health answers 200 unless the scenario says otherwise), or
    the unit failed."""
    fleet.set_scenario(host, **FAST, **scenario)
    fleet.ssh(host, f"systemctl restart {UNIT}")
    check = (
        f"id=$(systemctl show -p InvocationID --value {UNIT}); "
        f"state=$(systemctl show -p ActiveState --value {UNIT}); "
        f'if [ "$state" = failed ]; then echo failed; '
        f"elif journalctl -q -o cat _SYSTEMD_INVOCATION_ID=$id | grep -qF {shlex.quote(READY_LINE)}; then echo ready; "
        "else echo starting; fi"
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fleet.ssh(host, check).stdout.strip() in ("ready", "failed"):
            time.sleep(0.5)  # health turns 200 right after the ready line
            return
        time.sleep(0.5)
    raise AssertionError(f"{host}: the start did not end within {timeout} s")


def stay_crashed(fleet: Fleet, host: str) -> None:
    """No automatic restart while the test runs: a crash stays crashed, as a precheck finds it."""
    fleet.ssh(host, f"mkdir -p {NO_RESTART_DIR} && printf '[Service]\\nRestart=no\\n' > {NO_RESTART} && systemctl daemon-reload")


@pytest.fixture
def host(fleet: Fleet) -> Iterator[str]:
    """The first host, simulator stopped, failed state and scenario cleared (before and after)."""
    name = fleet.hosts[0]
    fleet.reset(name)
    yield name
    fleet.ssh(name, f"rm -rf {NO_RESTART_DIR}; systemctl daemon-reload")
    fleet.reset(name)


def test_healthy_host_passes_and_is_not_touched(fleet: Fleet, host: str, run_playbook: RunPlaybook) -> None:
    """ok scenario, started and ready: PASS (ready), exit 0, the same InvocationID and main PID after
    the check; --check runs the same check."""
    start(fleet, host)
    before = fleet.unit_property(host, "InvocationID"), fleet.unit_property(host, "MainPID")
    run = run_playbook(PLAYBOOK, limit=host)
    out = run.output
    assert run.returncode == 0, run
    assert f"{host} {UNIT}: precheck PASS (ready)" in out
    assert "health: HTTP 200" in out
    assert "fatal: none" in out
    assert "[sglang-cute-dsl-package-walk] x8 on 8 ranks (TP0..TP7)" in out
    assert before[0] in out
    assert (fleet.unit_property(host, "InvocationID"), fleet.unit_property(host, "MainPID")) == before

    run = run_playbook(PLAYBOOK, "--check", limit=host)
    out = run.output
    assert run.returncode == 0, run
    assert f"{host} {UNIT}: precheck PASS (ready) [check mode]" in out
    assert (fleet.unit_property(host, "InvocationID"), fleet.unit_property(host, "MainPID")) == before


def test_crashed_host_fails_with_the_evidence_and_is_not_restarted(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """The current invocation crashed (CUDA OOM while loading weights) and the unit failed: FAIL
    (fatal_log, the cause, as the restart names it) with the fatal message and the unit's state and
    health beside it, non-zero exit, no restart (InvocationID, NRestarts and ActiveState unchanged);
    the report files carry the verdict and a JUnit failure."""
    stay_crashed(fleet, host)
    start(fleet, host, SIM_SCENARIO="crash", SIM_FAILURE="cuda_oom")
    assert fleet.unit_property(host, "ActiveState") == "failed"
    before = fleet.unit_property(host, "InvocationID"), fleet.unit_property(host, "NRestarts")

    run = run_playbook(PLAYBOOK, limit=host, extra_vars={"sglang_precheck_report_dir": str(tmp_path)})
    out = run.output
    assert run.returncode != 0, run
    assert f"{host} {UNIT}: precheck FAIL (fatal_log)" in out
    # a long message: searched in the unfolded output (ansible-core 2.16 folds it at 80 columns)
    assert f"{UNIT} is failed (failed), not active (running)" in run.flat and "; health: " in run.flat
    assert "CUDA out of memory" in out
    assert "[sglang-scheduler-failure]" in out
    assert (fleet.unit_property(host, "InvocationID"), fleet.unit_property(host, "NRestarts")) == before
    assert fleet.unit_property(host, "ActiveState") == "failed"

    report = json.loads((tmp_path / f"{host}.precheck.json").read_text())
    assert report["verdict"] == "fail" and report["reason"] == "fatal_log"
    assert report["health"]["status"] != 200
    assert report["invocation_id"] == before[0]
    assert report["state"]["active_state"] == "failed"
    assert any("CUDA out of memory" in ev["message"] for ev in report["fatal"])
    suites = ET.parse(tmp_path / f"{host}.precheck.junit.xml").getroot()
    assert suites.get("failures") == "1"
    failure = suites.find("./testsuite/testcase/failure")
    assert failure is not None and failure.get("type") == "fatal_log"
    assert "CUDA out of memory" in (failure.text or "")


def test_a_secret_the_server_prints_is_redacted_from_the_precheck(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """The server printed its API key in its arguments and in its fatal line: given as
    sglang_precheck_redact (comma-separated text, as a survey sends it), the key is in no output
    and no report; without it, the report would carry it (the check proves the line is there)."""
    key = "sk-precheck-Zq4rWm8xTyLp"
    stay_crashed(fleet, host)
    start(fleet, host, SIM_SCENARIO="crash", SIM_FAILURE="scheduler_exception", SIM_API_KEY=key, SIM_LEAK_API_KEY="1")

    bare = run_playbook(PLAYBOOK, limit=host, extra_vars={"sglang_precheck_report_dir": str(tmp_path / "bare")})
    assert key in (tmp_path / "bare" / f"{host}.precheck.json").read_text(), bare

    extra = {"sglang_precheck_report_dir": str(tmp_path / "redacted"), "sglang_precheck_redact": f"{key}, unused"}
    run = run_playbook(PLAYBOOK, "-vvv", limit=host, extra_vars=extra)
    assert run.returncode != 0, run
    assert f"{host} {UNIT}: precheck FAIL (fatal_log)" in run.output
    report = (tmp_path / "redacted" / f"{host}.precheck.json").read_text()
    assert key not in run.output and key not in report
    assert "[redacted]" in json.dumps(json.loads(report)["fatal"])


def test_health_503_fails_with_health_failed(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """Ready marker logged, unit running, but health answers 503: FAIL (health_failed)."""
    start(fleet, host, SIM_SCENARIO="health_503")
    before = fleet.unit_property(host, "InvocationID")
    run = run_playbook(PLAYBOOK, limit=host)
    out = run.output
    assert run.returncode != 0, run
    assert f"{host} {UNIT}: precheck FAIL (health_failed)" in out
    assert "answered HTTP 503" in out
    assert fleet.unit_property(host, "InvocationID") == before


def test_unknown_error_passes_unless_strict(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """An unrecognized warning is reported with a suggested rule and passes; with strict mode (given as
    text, the way an AWX survey sends it) it fails as unrecognized_strict. Report files for both:
    the pass has no JUnit failure, the strict fail has one."""
    start(fleet, host, SIM_SCENARIO="unknown_error")
    before = fleet.unit_property(host, "InvocationID")
    passed, strict = tmp_path / "pass", tmp_path / "strict"

    run = run_playbook(PLAYBOOK, limit=host, extra_vars={"sglang_precheck_report_dir": str(passed)})
    out = run.output
    assert run.returncode == 0, run
    assert f"{host} {UNIT}: precheck PASS (ready)" in out
    assert "unrecognized (reported, not failing): 1" in out
    assert "Frobnicator returned error state 7, continuing" in out
    assert "suggested rule for sglang_precheck_extra_rules" in out
    report = json.loads((passed / f"{host}.precheck.json").read_text())
    assert report["verdict"] == "pass" and report["reason"] == "ready" and report["invocation_id"] == before
    assert len(report["unrecognized"]) == 1
    suites = ET.parse(passed / f"{host}.precheck.junit.xml").getroot()
    assert suites.get("failures") == "0" and suites.find("./testsuite/testcase/failure") is None

    run = run_playbook(PLAYBOOK, limit=host, extra_vars={"sglang_precheck_strict": "true", "sglang_precheck_report_dir": str(strict)})
    out = run.output
    assert run.returncode != 0, run
    assert f"{host} {UNIT}: precheck FAIL (unrecognized_strict)" in out
    assert "unrecognized (strict mode: failing): 1" in out
    report = json.loads((strict / f"{host}.precheck.json").read_text())
    assert report["verdict"] == "fail" and report["reason"] == "unrecognized_strict"
    failure = ET.parse(strict / f"{host}.precheck.junit.xml").getroot().find("./testsuite/testcase/failure")
    assert failure is not None and failure.get("type") == "unrecognized_strict"
    assert fleet.unit_property(host, "InvocationID") == before


def test_unit_that_does_not_exist_is_refused(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """A unit name that does not exist: a clear refusal, reported (unit_not_found), non-zero exit."""
    run = run_playbook(PLAYBOOK, limit=host, extra_vars={"sglang_precheck_unit": "no-such-server.service", "sglang_precheck_report_dir": str(tmp_path)})
    out = run.flat
    assert run.returncode != 0, run
    assert f"Refusing to check no-such-server.service on {host}: there is no such systemd unit (LoadState=not-found)" in out
    assert f"{host} no-such-server.service: precheck FAIL (unit_not_found)" in out
    report = json.loads((tmp_path / f"{host}.precheck.json").read_text())
    assert report["verdict"] == "fail" and report["reason"] == "unit_not_found"


STATE_FILE = f"/var/lib/inferops/{UNIT}.journal.json"


def test_a_second_precheck_reads_only_what_came_after_the_first(fleet: Fleet, host: str, run_playbook: RunPlaybook) -> None:
    """The precheck keeps the cursor and what it judged on the host: the next precheck of the same
    invocation takes it up (and passes the same), a corrupt state file is reported and ignored, and a
    new invocation starts over."""
    fleet.ssh(host, f"rm -f {STATE_FILE}")
    start(fleet, host)
    first = run_playbook(PLAYBOOK, limit=host)
    assert first.returncode == 0, first
    kept = json.loads(fleet.ssh(host, f"cat {STATE_FILE}").stdout)
    assert kept["invocation_id"] == fleet.unit_property(host, "InvocationID") and kept["cursor"]
    assert kept["scanner"]["ready_line"] is not None
    second = run_playbook(PLAYBOOK, "-v", limit=host)
    assert second.returncode == 0, second
    assert f"{host} {UNIT}: precheck PASS (ready)" in second.output
    assert re.search(r"resumed_at\W{0,3} ?\d+", second.output), second.output[-3000:]
    fleet.ssh(host, f"echo '{{not json' > {STATE_FILE}")
    corrupt = run_playbook(PLAYBOOK, limit=host)
    assert corrupt.returncode == 0, corrupt
    assert "is ignored" in corrupt.flat and f"{host} {UNIT}: precheck PASS (ready)" in corrupt.output
    assert json.loads(fleet.ssh(host, f"cat {STATE_FILE}").stdout)["cursor"]
    start(fleet, host)
    again = run_playbook(PLAYBOOK, limit=host)
    assert again.returncode == 0, again
    assert json.loads(fleet.ssh(host, f"cat {STATE_FILE}").stdout)["invocation_id"] == fleet.unit_property(host, "InvocationID")
    fleet.ssh(host, f"rm -f {STATE_FILE}")
