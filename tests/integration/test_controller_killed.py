"""A rollout whose controller dies: ansible-playbook killed (SIGKILL of its process group) or
cancelled the way AWX cancels a job (SIGINT, then SIGTERM, to ansible-runner's process group) at a
step boundary of a deploy with drain, then the same command run again. Every case must end with the
host in the router, the unit active and healthy, on the new configuration when it passes and on the
previous one otherwise, the report naming what was repaired and the run record settled.

The kill points are the steps the run record on the host names (written before each step is taken):
the test watches the record and kills the controller the moment it reaches the step.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.figures import record
from tests.harness.fleet import Fleet
from tests.harness.gateway import Gateway
from tests.integration.conftest import REPO, RunPlaybook, flat
from tests.integration.test_deploy_playbook import (
    ADMIN_KEY,
    DROPIN,
    NEW_MODEL,
    OLD_MODEL,
    PLAYBOOK,
    QUICK,
    deploy_vars,
    read_file,
    report,
    served_model,
    start_with,
    workers,
)

RECORD = "/var/lib/inferops/sglang.service.json"
PRECHECK = "playbooks/precheck_sglang.yml"
GOOD = f"[Service]\nEnvironment=SIM_MODEL={NEW_MODEL}\n"
CRASHING = f"[Service]\nEnvironment=SIM_MODEL={NEW_MODEL} SIM_SCENARIO=crash SIM_PHASE=loading_weights\n"
# a good configuration whose generations take 20 s: the smoke test is still running when the controller dies
SLOW_SMOKE = f"[Service]\nEnvironment=SIM_MODEL={NEW_MODEL} SIM_GENERATE_SECONDS=20\n"
# (step the controller is killed at, the new configuration, how): each case is two real runs (and a
# precheck between them); the two whole-suite versions run every other test of this module
# (tests/harness/lanes.py). How: kill = SIGKILL of ansible-playbook's process group; int = Ctrl-C (SIGINT
# to its process group); term = SIGTERM to its process group (an execution node going away); awx = AWX's
# cancel of an ansible-runner job (SIGINT, then SIGTERM). The points not run here (after the stop, after
# the pass, in the rollback's first step, after a rollback passed) are replayed with every other point, for
# a good and a crashing configuration, in the unit tests of the decisions
# (tests/unit/plugins/plugin_utils/test_rollout.py).
POINTS = [
    ("drain", GOOD, "kill"),
    ("deploy", GOOD, "kill"),
    ("wait", GOOD, "kill"),
    ("restore", GOOD, "kill"),
    ("wait", CRASHING, "kill"),
    ("rollback_wait", CRASHING, "kill"),
    ("wait", GOOD, "awx"),
    ("smoke", SLOW_SMOKE, "kill"),
    ("drain", GOOD, "int"),
    ("wait", CRASHING, "term"),
]
SIGNALS = {"kill": signal.SIGKILL, "int": signal.SIGINT, "term": signal.SIGTERM}


def host_record(fleet: Fleet, host: str) -> dict[str, object]:
    proc = fleet.ssh(host, f"cat {RECORD}", check=False)
    if proc.returncode != 0:
        return {}
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def wait_for_step(fleet: Fleet, host: str, process: subprocess.Popen[bytes], step: str, output: Path, timeout: float = 300) -> None:
    """Until the run record on the host names ``step`` for a run that is not the earlier one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if host_record(fleet, host).get("step") == step:
            return
        if process.poll() is not None:
            break
        time.sleep(0.1)
    raise AssertionError(f"the run never reached step {step} (rc {process.poll()}):\n{output.read_text(errors='replace')[-4000:]}")


def playbook_command(fleet: Fleet, extra: dict[str, object], host: str) -> list[str]:
    return [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(fleet.inventory), PLAYBOOK, "--limit", host, "-e", json.dumps(extra)]


def runner_command(fleet: Fleet, extra: dict[str, object], host: str, private: Path) -> list[str]:
    """ansible-runner's own command line, as an AWX execution node starts a job."""
    (private / "env").mkdir(parents=True, exist_ok=True)
    (private / "env" / "extravars").write_text(json.dumps(extra))
    (private / "inventory").mkdir(exist_ok=True)
    (private / "inventory" / "hosts").write_text(fleet.inventory.read_text())
    return [str(Path(sys.executable).parent / "ansible-runner"), "run", str(private), "-p", str(REPO / PLAYBOOK), "--limit", host, "--project-dir", str(REPO)]


def stop(process: subprocess.Popen[bytes], how: str) -> None:
    if how in SIGNALS:
        os.killpg(process.pid, SIGNALS[how])
    else:  # AWX's cancel: SIGINT to the process group, then SIGTERM when it is still there a moment later
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    # what the killed controller's connections left on the host goes with them
    with_leftovers = subprocess.run(["pgrep", "-g", str(process.pid)], capture_output=True, check=False)
    if with_leftovers.returncode == 0:
        os.killpg(process.pid, signal.SIGKILL)


def settled_step(fleet: Fleet, host: str, quiet: float = 2.0, timeout: float = 30.0) -> object:
    """The step the run record names once it stopped changing: a module the dead controller had already
    sent over its persistent ssh connection still runs to its end on the host."""
    deadline = time.monotonic() + timeout
    step, since = host_record(fleet, host).get("step"), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < quiet:
        time.sleep(0.25)
        now = host_record(fleet, host).get("step")
        if now != step:
            step, since = now, time.monotonic()
    return step


def case_id(step: str, dropin: str, how: str) -> str:
    return f"{how}-at-{step}-{'crashing' if dropin == CRASHING else 'good'}"


def precheck_names_the_interrupted_run(fleet: Fleet, run_playbook: RunPlaybook, host: str, reports: Path, step: str) -> None:
    """What a pipeline sees before the next deploy: the host fails its precheck, naming the run and the step
    where its record stands. A phase the dead controller's worker was running may still take the record one
    step further (the rest of a wait, then its record) after it looked settled: the step read after the precheck counts too."""
    checked = run_playbook(PRECHECK, extra_vars={"sglang_precheck_report_dir": str(reports)}, limit=host)
    steps = {step, str(host_record(fleet, host).get("step") or step)}
    assert checked.returncode != 0, checked
    data = json.loads((reports / f"{host}.precheck.json").read_text())
    # a crashed start is named by its cause first (fatal_log); what the rollout left is said beside it.
    # A start is issued right after the run record names its step (in the same phase), so a controller
    # killed at that step can leave that start in progress (not_ready).
    left = data["msg"] if data["reason"] == "interrupted_run" else data["run_record"]["left"]
    assert data["reason"] in ("interrupted_run", "fatal_log", "unit_not_active", "health_failed", "not_ready"), data
    named = [name for name in steps if f"stopped at step {name}" in left]
    assert named and "run the same rollout again" in left, data
    assert f"stopped at step {named[0]}" in flat(checked.output), checked


@pytest.mark.parametrize(("step", "dropin", "how"), POINTS, ids=[case_id(*point) for point in POINTS])
def test_the_same_command_run_again_repairs_what_a_dead_controller_left(
    fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path, step: str, dropin: str, how: str
) -> None:
    url = workers(fleet, [host])[host]
    # putting the worker back is one step of the settle phase, as long as the router takes to list it
    # again: a gateway that first looks at an added worker 3 s later keeps the run at that step long
    # enough to be killed there
    with Gateway(admin_key=ADMIN_KEY, startup_delay=3.0 if step == "restore" else 0) as router:
        start_with(fleet, [host], router=router)
        extra = deploy_vars(router, tmp_path / "reports", sglang_restart_dropin_content=dropin, sglang_restart_smoke_test=dropin == SLOW_SMOKE)
        env = {**fleet.ansible_env(), "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
        cmd = runner_command(fleet, extra, host, tmp_path / "runner") if how == "awx" else playbook_command(fleet, extra, host)
        output = tmp_path / "killed.out"
        with output.open("wb") as out:
            process = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for_step(fleet, host, process, step, output)
        finally:
            stop(process, how)
        # (the record first: a phase the dead controller's worker was running goes on to its end - with
        # ansible-core 2.17+, whose workers start their own session - and the router takes 3 s there)
        record_left = settled_step(fleet, host, quiet=5.0 if step == "restore" else 2.0)
        left = {
            "in router": url in router.registered(),
            "unit": fleet.unit_property(host, "ActiveState"),
            "health": fleet.health(host),
            "record": record_left,
            "new drop-in written": read_file(fleet, host, DROPIN) == dropin,
        }
        # the worker of the last phase (settle) finished the run on its own: nothing is left to repair
        finished = left["record"] == "done" and bool(left["in router"])
        # killed before it wrote anything or took the host out, a run leaves nothing to repair
        must_repair = not finished and (left["new drop-in written"] or not left["in router"])
        if must_repair and left["record"] not in (None, "done"):
            precheck_names_the_interrupted_run(fleet, run_playbook, host, tmp_path / "precheck", str(left["record"]))

        again = run_playbook(PLAYBOOK, extra_vars=extra, limit=host)
        out = flat(again.output)
        passes = dropin != CRASHING
        assert (again.returncode == 0) == passes, again
        assert url in router.registered(), (left, router.changes(), again)
        assert fleet.unit_property(host, "ActiveState") == "active"
        assert fleet.health(host) == "200"
        assert served_model(fleet, host) == (NEW_MODEL if passes else OLD_MODEL)
        assert read_file(fleet, host, DROPIN) == (dropin if passes else f"[Service]\nEnvironment=SIM_MODEL={OLD_MODEL}\n")
        if finished and passes:
            # the new configuration in place and serving: verified, nothing restarted (no report for a skip)
            assert f"already on the new configuration (nothing restarted): {host}" in out, again
            state, repaired = "unchanged", "nothing (the killed run's last phase finished on its own)"
        else:
            data = report(tmp_path / "reports", host)
            assert bool(data["repairs"]) or not must_repair, (left, data)
            assert data["state"] == ("new_configuration" if passes or step == "passed" else "rolled_back") or (passes and data["state"] == "unchanged"), data
            state, repaired = data["state"], "; ".join(map(str, data["repairs"]))
        settled = host_record(fleet, host)
        assert settled.get("step") == "done" and settled.get("traffic", {}).get("out") is False, settled  # type: ignore[union-attr]
        assert ADMIN_KEY not in out
    record(
        f"\nkilled ({how}) at {step}, {'good' if passes else 'crashing'} configuration: left {left}; "
        f"the rerun ({again.elapsed:.0f} s) ended {state}, repaired: {repaired}"
    )


def test_a_second_run_after_a_clean_pass_only_reads_the_router(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """Nothing to repair and nothing to change: the router is only read from (not at all, here), the unit not
    restarted, and the configuration in place is still proven healthy before the run passes."""
    with Gateway(admin_key=ADMIN_KEY) as router:
        start_with(fleet, [host], router=router)
        extra = deploy_vars(router, tmp_path, sglang_restart_dropin_content=GOOD)
        first = run_playbook(PLAYBOOK, extra_vars=extra, limit=host)
        assert first.returncode == 0, first
        calls = len(router.calls)
        invocation = fleet.unit_property(host, "InvocationID")
        again = run_playbook(PLAYBOOK, extra_vars=extra, limit=host)
        assert again.returncode == 0, again
        assert all(call.verb == "list" for call in router.calls[calls:]), router.calls[calls:]
        assert fleet.unit_property(host, "InvocationID") == invocation
        assert f"already on the new configuration (nothing restarted): {host}" in flat(again.output), again
        assert "REPAIRED" not in again.output


def test_an_unchanged_configuration_whose_server_is_unhealthy_does_not_pass(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """The change is already in place, but the server it runs answers 503: the run fails instead of
    passing on "already in place", and nothing is restarted."""
    start_with(fleet, [host], dropin=GOOD, SIM_SCENARIO="health_503")
    invocation = fleet.unit_property(host, "InvocationID")
    run = run_playbook(
        PLAYBOOK,
        extra_vars={**QUICK, "sglang_restart_budget": 20, "sglang_restart_report_dir": str(tmp_path), "sglang_restart_dropin_content": GOOD},
        limit=host,
    )
    assert run.returncode != 0, run
    data = report(tmp_path, host)
    assert data["verdict"] == "fail" and data["state"] == "unchanged", data
    assert fleet.unit_property(host, "InvocationID") == invocation


def test_a_corrupt_run_record_is_reported_and_the_run_does_nothing_unsafe(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """A record no run of this collection could have written (cut short mid-file): the deploy says so,
    ignores it, and does its own work with the usual gates; the host ends in the router, serving the new
    configuration, with a record of its own."""
    url = workers(fleet, [host])[host]
    with Gateway(admin_key=ADMIN_KEY) as router:
        start_with(fleet, [host], router=router)
        fleet.ssh(host, f'mkdir -p /var/lib/inferops && printf %s \'{{"version": 1, "unit": "sglang.se\' > {RECORD}')
        run = run_playbook(PLAYBOOK, extra_vars=deploy_vars(router, tmp_path, sglang_restart_dropin_content=GOOD), limit=host)
        assert run.returncode == 0, run
        assert url in router.registered()
        data = report(tmp_path, host)
        assert data["state"] == "new_configuration", data
        assert any("run record" in str(repair) and "ignored" in str(repair) for repair in data["repairs"]), data["repairs"]
        assert served_model(fleet, host) == NEW_MODEL
        assert host_record(fleet, host).get("step") == "done"
