"""One run per host, for real: a rollout is under way on a test host (a deploy through a router, its new
start still being waited on, or the host out of the router), and a second run is started on the same
host, as a person, an AWX job, a pipeline or a rulebook would start it. The second run refuses before it
touches anything, naming the first (its run, controller, user, since when, last heartbeat), or waits for
it with ``sglang_restart_lock_wait``; the first run ends as it would have alone, and no report says
what the host contradicts.

The router is the real SGLang Model Gateway on this machine (tests/harness/gateway.py), whose log
tells every call it answered: the second run must make none but reads.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

from tests.harness.fleet import Fleet
from tests.harness.gateway import Gateway, behind_gateway
from tests.integration.conftest import REPO, RunPlaybook, flat
from tests.integration.test_controller_killed import host_record, playbook_command, stop, wait_for_step
from tests.integration.test_deploy_playbook import (
    ADMIN_KEY,
    DROPIN,
    DROPIN_DIR,
    FAST,
    NEW_MODEL,
    OLD_DROPIN,
    OLD_MODEL,
    PLAYBOOK,
    QUICK,
    UNIT,
    deploy_vars,
    read_file,
    report,
    served_model,
    workers,
)

NEW = f"[Service]\nEnvironment=SIM_MODEL={NEW_MODEL}\n"
NEW2_MODEL = "/models/DeepSeek-V3.2"
NEW2 = f"[Service]\nEnvironment=SIM_MODEL={NEW2_MODEL}\n"
CRASH = f"[Service]\nEnvironment=SIM_MODEL={NEW_MODEL} SIM_SCENARIO=crash SIM_PHASE=warming_up\n"
# what the rulebooks' restart adds to the usual run (extensions/eda/rulebooks/restart_on_stall.yml)
RULEBOOK_VARS = {"sglang_restart_smoke_test": True, "sglang_restart_load_url": ""}


def start_slow(fleet: Fleet, host: str) -> None:
    """The simulator on the previous configuration, whose starts spend 10 s warming up: a second run
    started during the first one's wait finds it still waiting."""
    fleet.set_scenario(host, **{**FAST, "SIM_WARMUP_SECONDS": "10"})
    fleet.ssh(host, f"mkdir -p {DROPIN_DIR} && printf %s {shlex.quote(OLD_DROPIN)} > {DROPIN} && systemctl daemon-reload && systemctl restart {UNIT}")


class FirstRun:
    """The first run, in the background, as the operator's ansible-playbook."""

    def __init__(self, fleet: Fleet, host: str, extra: dict[str, object], output: Path) -> None:
        self.output = output
        env = {**fleet.ansible_env(), "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
        with output.open("wb") as out:
            self.process = subprocess.Popen(
                playbook_command(fleet, extra, host), cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def finish(self, timeout: float = 300) -> int:
        try:
            return self.process.wait(timeout=timeout)
        finally:
            if self.process.poll() is None:
                stop(self.process, "kill")

    def text(self) -> str:
        return flat(self.output.read_text(errors="replace"))


def refused_naming(second: object, data: dict[str, object], first_run: str) -> None:
    """The second run's refusal: before anything, naming the first run and where it comes from."""
    out = flat(str(getattr(second, "output", "")))
    assert getattr(second, "returncode", 0) != 0, second
    assert data["verdict"] == "fail" and data["reason"] == "host_held", data
    msg = str(data["msg"])
    assert f"held by another run: run {first_run} from " in msg and "last heartbeat" in msg and "nothing was touched" in msg, msg
    assert f"run {first_run} from " in out, out


def test_a_plain_restart_during_a_deploy_is_refused_and_the_deploy_ends_as_alone(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    start_slow(fleet, host)
    url = workers(fleet, [host])[host]
    with Gateway(admin_key=ADMIN_KEY) as router:
        behind_gateway(router, fleet, [host])
        first = FirstRun(fleet, host, deploy_vars(router, tmp_path / "first", sglang_restart_dropin_content=NEW), tmp_path / "first.out")
        try:
            wait_for_step(fleet, host, first.process, "wait", first.output)
            first_run = str(host_record(fleet, host)["run_id"])
            invocation = fleet.unit_property(host, "InvocationID")
            calls = len(router.calls)
            second = run_playbook(PLAYBOOK, extra_vars=deploy_vars(router, tmp_path / "second"), limit=host)
            refused_naming(second, report(tmp_path / "second", host), first_run)
            # the second run touched nothing: the start being waited on, the router, the run record
            assert fleet.unit_property(host, "InvocationID") == invocation
            assert router.calls[calls:] == [] or all(call.verb == "list" for call in router.calls[calls:]), router.calls[calls:]
            assert host_record(fleet, host)["run_id"] == first_run
        finally:
            rc = first.finish()
        assert rc == 0, first.text()
        data = report(tmp_path / "first", host)
        assert data["verdict"] == "pass" and data["state"] == "new_configuration", data
        assert served_model(fleet, host) == NEW_MODEL and read_file(fleet, host, DROPIN) == NEW
        assert url in router.registered()
        assert host_record(fleet, host).get("step") == "done"
        assert fleet.ssh(host, f"test -e /var/lib/inferops/{UNIT}.lease", check=False).returncode != 0, "the lease is released at the end"


def test_a_deploy_during_a_crashing_deploy_is_refused_and_the_first_rolls_back(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    start_slow(fleet, host)
    url = workers(fleet, [host])[host]
    with Gateway(admin_key=ADMIN_KEY) as router:
        behind_gateway(router, fleet, [host])
        first = FirstRun(fleet, host, deploy_vars(router, tmp_path / "first", sglang_restart_dropin_content=CRASH), tmp_path / "first.out")
        try:
            wait_for_step(fleet, host, first.process, "wait", first.output)
            first_run = str(host_record(fleet, host)["run_id"])
            second = run_playbook(PLAYBOOK, extra_vars=deploy_vars(router, tmp_path / "second", sglang_restart_dropin_content=NEW), limit=host)
            refused_naming(second, report(tmp_path / "second", host), first_run)
        finally:
            rc = first.finish()
        assert rc != 0, first.text()
        data = report(tmp_path / "first", host)
        assert data["verdict"] == "fail" and data["state"] == "rolled_back", data
        # the host is what the first run's report says: the previous configuration, serving, in the router
        assert served_model(fleet, host) == OLD_MODEL and read_file(fleet, host, DROPIN) == OLD_DROPIN
        assert fleet.health(host) == "200" and url in router.registered()


def test_a_second_deploy_waits_for_the_first_and_then_runs(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """With sglang_restart_lock_wait the second deploy, started while the host is out of the router,
    waits (its progress lines name the first run), then deploys once the first run released the host."""
    start_slow(fleet, host)
    url = workers(fleet, [host])[host]
    with Gateway(admin_key=ADMIN_KEY) as router:
        behind_gateway(router, fleet, [host])
        first = FirstRun(fleet, host, deploy_vars(router, tmp_path / "first", sglang_restart_dropin_content=NEW), tmp_path / "first.out")
        try:
            wait_for_step(fleet, host, first.process, "drain", first.output)
            first_run = str(host_record(fleet, host)["run_id"])
            extra = deploy_vars(router, tmp_path / "second", sglang_restart_dropin_content=NEW2, sglang_restart_lock_wait=240)
            second = run_playbook(PLAYBOOK, extra_vars=extra, limit=host)
        finally:
            rc = first.finish()
        assert rc == 0, first.text()
        assert report(tmp_path / "first", host)["state"] == "new_configuration"
        assert second.returncode == 0, second
        assert f"waiting for the host's lease, held by run {first_run} from " in flat(second.output), second
        data = report(tmp_path / "second", host)
        assert data["verdict"] == "pass" and data["state"] == "new_configuration", data
        assert served_model(fleet, host) == NEW2_MODEL and url in router.registered()


def test_a_rulebooks_restart_during_a_persons_deploy_is_refused(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """The restart a rulebook runs (the same playbook with the rulebooks' variables: smoke test on, no
    drain) started while a person's deploy holds the host: refused, naming the person's run; the deploy
    passes. The rulebook itself, with the real ansible-rulebook, is tests/integration/test_eda_rulebook.py."""
    start_slow(fleet, host)
    url = workers(fleet, [host])[host]
    with Gateway(admin_key=ADMIN_KEY) as router:
        behind_gateway(router, fleet, [host])
        first = FirstRun(fleet, host, deploy_vars(router, tmp_path / "first", sglang_restart_dropin_content=NEW), tmp_path / "first.out")
        try:
            wait_for_step(fleet, host, first.process, "wait", first.output)
            first_run = str(host_record(fleet, host)["run_id"])
            extra = {**QUICK, "sglang_restart_report_dir": str(tmp_path / "rulebook"), **RULEBOOK_VARS}
            second = run_playbook(PLAYBOOK, extra_vars=extra, limit=host)
            refused_naming(second, report(tmp_path / "rulebook", host), first_run)
            # the precheck a pipeline runs meanwhile names the rollout that holds the host
            checked = run_playbook("playbooks/precheck_sglang.yml", extra_vars={"sglang_precheck_report_dir": str(tmp_path / "pre")}, limit=host)
            pre = json.loads((tmp_path / "pre" / f"{host}.precheck.json").read_text())
            assert pre["reason"] == "rollout_in_progress" and f"run {first_run} from " in pre["msg"], pre
            assert pre["run_record"]["held_by_run"] == first_run and checked.returncode != 0
        finally:
            rc = first.finish()
        assert rc == 0, first.text()
        assert served_model(fleet, host) == NEW_MODEL and url in router.registered()
