"""The fleet in a rolling restart, for real (playbooks/restart_sglang.yml on the test hosts): the
serving floor (sglang_min_serving) that stops a run before anything is touched, a ramp of batches,
the failure tolerance (sglang_max_fail_percentage) and the bake (sglang_batch_pause).

The simulators listen on every address (start_with, SERVED_TO_CONTROLLER): the floor and the fleet gate send one
generation from the controller to each server, as a router would. The router path runs the real
SGLang Model Gateway on this machine (tests/harness/gateway.py), whose own health check decides
which workers it lists healthy.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.fleet import Fleet
from tests.harness.gateway import Gateway, behind_gateway
from tests.integration.conftest import QUICK as ROLE_QUICK
from tests.integration.conftest import RunPlaybook, flat
from tests.integration.test_deploy_playbook import (
    ADMIN_KEY,
    DROPIN,
    NEW_MODEL,
    OLD_DROPIN,
    OLD_MODEL,
    invocation,
    read_file,
    report,
    served_model,
    start_with,
)

PLAYBOOK = "playbooks/restart_sglang.yml"
QUICK = {**ROLE_QUICK, "sglang_restart_soak": 1, "sglang_restart_router_timeout": 10, "sglang_restart_drain_timeout": 30}
NEW_DROPIN = f"[Service]\nEnvironment=SIM_MODEL={NEW_MODEL}\n"


def deploy_on(host: str, scenario: str) -> str:
    """A drop-in template: the new model everywhere, and a scenario on one host."""
    return "[Service]\nEnvironment=SIM_MODEL=" + NEW_MODEL + "{% if inventory_hostname == '" + host + "' %} " + scenario + "{% endif %}\n"


@pytest.fixture
def three(fleet: Fleet, hosts: list[str]) -> Iterator[list[str]]:
    if len(hosts) < 3:
        pytest.skip("needs 3 test hosts")
    yield hosts[:3]


def test_a_floor_that_cannot_be_met_stops_the_run_before_anything_is_touched(fleet: Fleet, three: list[str], run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """Two of three deployments must serve while the canary is out; the third host is down: the
    canary's batch waits for the floor, names who does not serve, and the run stops untouched."""
    first, second, third = three
    before = start_with(fleet, three)
    fleet.ssh(third, "systemctl stop sglang")
    extra = {
        **QUICK,
        "sglang_restart_dropin_content": NEW_DROPIN,
        "sglang_restart_report_dir": str(tmp_path),
        "sglang_min_serving": 2,
        "sglang_capacity_timeout": 6,
    }
    run = run_playbook(PLAYBOOK, extra_vars=extra, limit=",".join(three))
    out = flat(run.output)
    assert run.returncode != 0, run
    assert "fleet gate: waiting for the serving floor" in out, run
    assert f"not serving: {third}: no generation from http://{fleet.address(third)}:30000/v1/completions" in out, run
    assert "The serving floor (sglang_min_serving) is not met after" in out and f"1 serve ({second})" in out, run
    assert f"with {first} out" in out
    assert invocation(fleet, first) == before[first] and invocation(fleet, second) == before[second]
    assert read_file(fleet, first, DROPIN) == OLD_DROPIN
    assert not list(tmp_path.glob("*.json")), "no host reached the role"


def test_a_bad_rollout_option_is_refused_before_anything_is_touched(fleet: Fleet, three: list[str], run_playbook: RunPlaybook) -> None:
    before = start_with(fleet, three[:1])
    extra = {**QUICK, "sglang_batch_size": "150%", "sglang_min_serving": "abc", "sglang_max_fail_percentage": 120}
    run = run_playbook(PLAYBOOK, extra_vars=extra, limit=",".join(three))
    out = flat(run.output)
    assert run.returncode != 0
    assert "Refusing the rollout, nothing was touched" in out, run
    assert "sglang_batch_size must be a whole number >= 1, a percent" in out and "got '150%'" in out
    assert "sglang_min_serving must be a whole number >= 0 or a percent" in out and "got 'abc'" in out
    assert "sglang_max_fail_percentage must be a percentage from 0 to 100, got 120" in out
    assert "Traceback" not in out
    assert invocation(fleet, three[0]) == before[three[0]]


def test_a_ramp_behind_a_router_keeps_the_floor_and_restarts_the_rest_together(
    fleet: Fleet, three: list[str], run_playbook: RunPlaybook, tmp_path: Path
) -> None:
    """A ramp [1, 2] over 3 hosts: the canary alone, then the two others together; the floor (1)
    is checked through the router before each batch, and the canary serves before they leave."""
    first, second, third = three
    start_with(fleet, three)
    with Gateway(admin_key=ADMIN_KEY) as router:
        urls = behind_gateway(router, fleet, three)
        extra = {
            **QUICK,
            "sglang_restart_dropin_content": NEW_DROPIN,
            "sglang_restart_router_url": router.url,
            "sglang_restart_router_api_key": ADMIN_KEY,
            "sglang_restart_report_dir": str(tmp_path),
            "sglang_batch_size": [1, 2],
            "sglang_min_serving": 1,
            "sglang_capacity_timeout": 30,
        }
        run = run_playbook(PLAYBOOK, extra_vars=extra, limit=",".join(three))
        changes = router.changes()
    out = flat(run.output)
    assert run.returncode == 0, run
    assert all(served_model(fleet, host) == NEW_MODEL for host in three)
    # the canary out and back first; then the two others out together, before either came back
    assert changes[:2] == [("remove", urls[first]), ("add", urls[first])], changes
    assert set(changes[2:4]) == {("remove", urls[second]), ("remove", urls[third])}, changes
    assert set(changes[4:]) == {("add", urls[second]), ("add", urls[third])}, changes
    assert f"serving floor 1 of 3 deployment(s) with {second}, {third} out: 1 serve ({first})" in out, run
    assert "no deployment failed" in out


def test_a_failure_within_the_tolerance_lets_the_run_go_on(fleet: Fleet, three: list[str], run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """34% of 3 deployments: sim2's new start crashes, is rolled back, the run goes on to sim3,
    and the run ends failed, sim2 failed."""
    first, second, third = three
    start_with(fleet, three)
    template = tmp_path / "deploy.conf.j2"
    template.write_text(deploy_on(second, "SIM_SCENARIO=crash SIM_PHASE=loading_weights"))
    extra = {**QUICK, "sglang_restart_dropin_template": str(template), "sglang_restart_report_dir": str(tmp_path / "reports"), "sglang_max_fail_percentage": 34}
    run = run_playbook(PLAYBOOK, extra_vars=extra, limit=",".join(three))
    out = flat(run.output)
    assert run.returncode != 0, run
    assert served_model(fleet, first) == NEW_MODEL and served_model(fleet, third) == NEW_MODEL, run
    assert served_model(fleet, second) == OLD_MODEL
    assert report(tmp_path / "reports", second)["state"] == "rolled_back"
    assert f"1 of 3 deployment(s) failed (33%: {second}), within sglang_max_fail_percentage 34%: the run goes on" in out, run
    recap = run.stdout[run.stdout.rindex("PLAY RECAP") :]
    assert f"{second}" in recap and "failed=1" in recap


def test_the_bake_catches_a_host_that_dies_after_its_start_passed(fleet: Fleet, three: list[str], run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """sim2's new configuration crashes 6 s after it is ready, after its start passed: the bake
    (20 s) catches it, the host fails (bake_failed) and the run stops before sim3."""
    first, second, third = three
    before = start_with(fleet, three)
    template = tmp_path / "deploy.conf.j2"
    template.write_text(deploy_on(second, "SIM_SCENARIO=ready_then_crash SIM_CRASH_AFTER_READY=6"))
    extra = {**QUICK, "sglang_restart_dropin_template": str(template), "sglang_batch_pause": 20}
    run = run_playbook(PLAYBOOK, extra_vars=extra, limit=",".join(three))
    out = flat(run.output)
    assert run.returncode != 0, run
    assert f"bake of {first}: baked: served through 20 s" in out, run
    assert f"bake of {second}: bake_failed: a new fatal line in its journal" in out, run
    assert f"1 of 3 deployment(s) failed (33%: {second}), more than sglang_max_fail_percentage 0%: the run stops here" in out, run
    assert invocation(fleet, third) == before[third]


def test_the_bake_catches_a_canary_that_wedged_after_its_start_passed(fleet: Fleet, three: list[str], run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """The canary's new configuration wedges 3 s after it is ready: its health still answers 200 and its
    journal says nothing, but the generation after the bake's first look gets no token: the canary fails
    (bake_failed) and the run stops before the second host."""
    first, second = three[:2]
    before = start_with(fleet, [first, second])
    template = tmp_path / "deploy.conf.j2"
    template.write_text(deploy_on(first, "SIM_SCENARIO=wedged SIM_WEDGE_AFTER=3"))
    extra = {**QUICK, "sglang_restart_dropin_template": str(template), "sglang_batch_pause": 12}
    run = run_playbook(PLAYBOOK, extra_vars=extra, limit=f"{first},{second}")
    out = flat(run.output)
    assert run.returncode != 0, run
    assert f"bake of {first}: bake_failed: no generation from http://{fleet.address(first)}:30000/v1/completions" in out, run
    assert fleet.health(first) == "200", "the wedged server still answers its health check"
    assert invocation(fleet, second) == before[second]
