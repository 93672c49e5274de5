"""The phases' run(), whole, as ansible-core tests its reboot action: the real ActionModule of each phase,
built with a real Task and PlayContext and a stubbed connection, its steps answered from a script
(``ScriptedSteps``: the answers the collection's modules, commands and the wait gave on real hosts) and
recorded, so that the order of the steps, the rollback trigger and the failure mapping are tested without
a host. The phases on real systemd hosts are the integration tests."""

from __future__ import annotations

import base64
import time
import typing as t
from pathlib import Path
from unittest.mock import MagicMock

import pytest
from ansible import constants as C
from ansible.errors import AnsibleActionFail
from ansible.parsing.dataloader import DataLoader
from ansible.playbook.play_context import PlayContext
from ansible.playbook.task import Task

from ansible_collections.inferops.runbooks.plugins.action import prepare, restart, settle
from ansible_collections.inferops.runbooks.plugins.plugin_utils._alertmanager import Alertmanager, silence_host
from ansible_collections.inferops.runbooks.plugins.plugin_utils._phase import StepFailed
from ansible_collections.inferops.runbooks.plugins.plugin_utils._restart_phase import EXPIRE_SILENCE
from ansible_collections.inferops.runbooks.plugins.plugin_utils._role_options import ROLE_SPECS
from ansible_collections.inferops.runbooks.plugins.plugin_utils._settle_phase import EXPIRE
from tests.harness import alerting
from tests.unit.plugins.action.test_restart_phases import options

UNIT = "sglang.service"
DROPIN = f"/etc/systemd/system/{UNIT}.d/50-inferops-deploy.conf"
BEFORE = {"ActiveState": "active", "InvocationID": "a" * 32, "MainPID": 0, "LoadState": "loaded"}
NEW_START = {"verdict": "pass", "reason": "ready", "msg": "ready", "invocation_id": "b" * 32, "elapsed": 12.0}
CRASHED = {"verdict": "fail", "reason": "fatal_log", "msg": "fatal line: CUDA out of memory", "invocation_id": "b" * 32, "elapsed": 4.0}
ROLLBACK_START = {**NEW_START, "invocation_id": "c" * 32}
HOLDER = "run other from ops@bastion, since 2026-12-04 18:00:00 UTC, last heartbeat 2 s ago"


class ScriptedSteps:
    """A phase's steps answered from a script: each module, command and action gives the next answer
    queued for its name (an empty answer when none is), and every call is kept, in order."""

    def __init__(self, answers: dict[str, list[dict[str, t.Any]]] | None = None) -> None:
        self.answers = {name: list(found) for name, found in (answers or {}).items()}
        self.calls: list[tuple[str, dict[str, t.Any]]] = []
        self.done: list[dict[str, t.Any]] = []
        self.warnings: list[str] = []
        self.discovered: dict[str, t.Any] = {}

    def _answer(self, stage: str, step: str, name: str, args: t.Mapping[str, t.Any], may_fail: bool = False) -> dict[str, t.Any]:
        self.calls.append((name, dict(args)))
        queued = self.answers.get(name) or []
        result = dict(queued.pop(0)) if queued else {"changed": False}
        self.done.append({"step": step, "outcome": "failed" if result.get("failed") else "ok"})
        if result.get("failed") and not may_fail:
            raise StepFailed(stage, step, result)
        return result

    def module(self, stage: str, step: str, name: str, args: t.Mapping[str, t.Any], *, may_fail: bool = False, **_: t.Any) -> dict[str, t.Any]:
        return self._answer(stage, step, name, args, may_fail)

    def command(self, stage: str, step: str, argv: t.Sequence[str], msg: str = "") -> dict[str, t.Any]:
        if argv[0] == "sh":
            name = "sh wait_port_free" if "/proc/net/tcp" in argv[2] else "sh wait_gone"
        else:
            name = " ".join(argv[:2]) if argv[0] == "systemctl" else argv[0]
        return self._answer(stage, step, name, {"argv": list(argv)})

    def run_action(self, name: str, args: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
        return self._answer("", name, name, args, may_fail=True)

    def variable(self, name: str, default: t.Any = None) -> t.Any:
        return default

    def note(self, step: str, result: t.Mapping[str, t.Any], seconds: float) -> None:
        self.done.append({"step": step})

    def close(self) -> None:
        pass

    def names(self) -> list[str]:
        """The calls in order, each by its module, command or action, with a lease or record call's verb or step."""
        shown = []
        for name, args in self.calls:
            short = name.removeprefix("inferops.runbooks.").removeprefix("ansible.builtin.")
            if short in ("run_lease", "run_record") and (args.get("action") or args.get("step")):
                short += f":{args.get('action') or args.get('step')}"
            shown.append(short)
        return shown


def phase(cls: type, args: dict[str, t.Any], steps: ScriptedSteps, check_mode: bool = False) -> t.Any:
    task = Task()
    task.args = args
    task.check_mode = check_mode
    connection = MagicMock()  # the connection is never used: every step goes through the scripted steps
    # a remote temporary directory that already exists (no "-tmp-" in its name: never removed), for the
    # phases that transfer files
    connection._shell.tmpdir = "/scripted/steps"
    action = cls(task=task, connection=connection, play_context=PlayContext(), loader=DataLoader(), templar=None, shared_loader_obj=None)
    action.make_steps = lambda task_vars: steps
    return action


def restart_options(**changes: t.Any) -> dict[str, t.Any]:
    """The checked options of a restart without a drain, a smoke test or a canary."""
    return options(load_url="", stop_first=True, canary=False, smoke_test=False, release_timeout=30, drain_timeout=60, router_timeout=10, **changes)


def context(**changes: t.Any) -> dict[str, t.Any]:
    """What the prepare phase returns for a plain restart of an unchanged host that it holds."""
    base: dict[str, t.Any] = {
        "sglang_restart_run_id": "20261204T190000Z-1",
        "sglang_restart_started_at": 1796410800.0,
        "sglang_restart_failure": None,
        "sglang_restart_checked": {"options": restart_options(), "node": {"multi_node": False, "rank": 0}},
        "sglang_restart_before": {"unit": BEFORE},
        "sglang_restart_deploy_files": [],
        "sglang_restart_deploy_applied": False,
        "sglang_restart_plan": {"repairs": [], "pending": False},
        "sglang_restart_lease": {"holds": True, "outcome": "taken"},
    }
    return {**base, **changes}


def deployed(**changes: t.Any) -> dict[str, t.Any]:
    """A deploy of a new drop-in, written before the restart phase."""
    files = [{"kind": "dropin", "path": DROPIN, "existed": True, "changed": True, "content": "NEW", "previous": "OLD"}]
    return context(**{"sglang_restart_deploy_files": files, "sglang_restart_deploy_applied": True, **changes})


RUN = {"inventory_hostname": "gpu1"}


def test_a_plain_restart_stops_starts_waits_and_keeps_the_lease_alive() -> None:
    # the lease renewed as the phase begins; its later steps come within RENEW_AFTER of it
    steps = ScriptedSteps({"inferops.runbooks.run_lease": [{"held": True}] * 3, "inferops.runbooks.wait_ready": [NEW_START]})
    result = phase(restart.ActionModule, {"context": context(), "peers": {}}, steps).run(task_vars=RUN)
    assert steps.names() == [
        "run_lease:renew",
        "start_history",
        "systemctl stop",
        "unit_leftovers",
        "sh wait_port_free",
        "systemctl start",
        "wait_ready",
        "start_history",
    ]
    wait_args = steps.calls[steps.names().index("wait_ready")][1]
    assert wait_args["lease_run_id"] == "20261204T190000Z-1" and wait_args["previous_invocation_id"] == "a" * 32
    assert result["changed"] and result["decision"]["state"] == "restarted" and not result.get("failed")
    assert result["seen"]["wait"]["verdict"] == "pass" and "failure" not in result["seen"]


def test_a_lease_the_prepare_phase_took_a_moment_ago_is_not_renewed_again_before_the_stop() -> None:
    steps = ScriptedSteps({"inferops.runbooks.run_lease": [{"held": True}] * 3, "inferops.runbooks.wait_ready": [NEW_START]})
    taken = {"holds": True, "outcome": "taken", "renewed_at": time.time()}
    result = phase(restart.ActionModule, {"context": context(sglang_restart_lease=taken), "peers": {}}, steps).run(task_vars=RUN)
    assert steps.names()[:2] == ["start_history", "systemctl stop"] and "run_lease:renew" not in steps.names()
    assert result["decision"]["state"] == "restarted"


def test_a_deploy_whose_start_failed_is_rolled_back_and_its_rollback_waited_on() -> None:
    steps = ScriptedSteps(
        {
            "inferops.runbooks.run_lease": [{"held": True}] * 4,
            "inferops.runbooks.wait_ready": [CRASHED, ROLLBACK_START],
            "ansible.builtin.command": [{"stdout": "LoadState=loaded\nLoadError=\nInvocationID=" + "b" * 32}],
        }
    )
    result = phase(restart.ActionModule, {"context": deployed(), "peers": {}}, steps).run(task_vars=RUN)
    names = steps.names()
    # the new start failed: the lease is renewed, then the previous file is put back before the previous start
    crashed = names.index("wait_ready")
    assert names[crashed + 1 :] == [
        "start_history",
        "run_lease:renew",
        "run_record:rollback",
        "systemctl stop",
        "copy",
        "systemd_service",
        "command",
        "unit_leftovers",
        "sh wait_port_free",
        "run_record:rollback_wait",
        "systemctl start",
        "wait_ready",
        "start_history",
        "run_record:rolled_back",
    ]
    copied = steps.calls[names.index("copy")][1]
    assert copied == {"src": f"{DROPIN}.previous", "dest": DROPIN, "remote_src": True}
    assert result["decision"]["state"] == "rolled_back" and result["seen"]["rollback"]["passed"] is True


def test_a_gpu_still_held_after_the_stop_fails_the_run_before_the_start() -> None:
    holder = {"pid": 4242, "name": "VLLM::EngineCor", "used_memory": "71234 MiB", "gpu_uuid": "GPU-5e3b", "gpu_index": 0}
    leftovers = {"control_group": f"/system.slice/{UNIT}", "left": [], "signals": [], "remaining": [], "gpus": {"checked": True, "holders": [holder]}}
    steps = ScriptedSteps({"inferops.runbooks.run_lease": [{"held": True}] * 3, "inferops.runbooks.unit_leftovers": [{"leftovers": leftovers}]})
    result = phase(restart.ActionModule, {"context": context(), "peers": {}}, steps).run(task_vars=RUN)
    names = steps.names()
    assert names[names.index("systemctl stop") + 1] == "unit_leftovers" and "systemctl start" not in names and "wait_ready" not in names
    failure = result["seen"]["failure"]
    assert failure["step"] == "Restart | The start needs the unit's processes gone and its GPUs free"
    assert "4242 (VLLM::EngineCor) holds 71234 MiB on GPU 0 (GPU-5e3b)" in failure["result"]["msg"]


def test_after_a_failure_before_the_stop_only_the_change_is_rolled_back() -> None:
    failed = {"run_id": "20261204T190000Z-1", "stage": "drain", "step": "Drain | Run the drain hooks", "result": {"msg": "lb refused"}}
    steps = ScriptedSteps(
        {"inferops.runbooks.run_lease": [{"held": True}], "ansible.builtin.command": [{"stdout": "LoadState=loaded\nInvocationID=" + "a" * 32}]}
    )
    result = phase(restart.ActionModule, {"context": deployed(), "failure": failed, "peers": {}}, steps).run(task_vars=RUN)
    names = steps.names()
    assert "systemctl start" not in names and "systemctl stop" not in names and "wait_ready" not in names
    assert names[:3] == ["run_lease:renew", "run_record:rollback", "copy"] and names[-1] == "run_record:rolled_back"
    assert result["seen"]["rollback"]["files_restored"] and result["seen"]["rollback"]["started_at"] is None
    assert result["decision"]["state"] == "not_restarted"


def test_check_mode_touches_nothing() -> None:
    steps = ScriptedSteps()
    result = phase(restart.ActionModule, {"context": deployed(), "peers": {}}, steps, check_mode=True).run(task_vars=RUN)
    assert steps.calls == [] and result["msg"] == "check mode: nothing stopped or started" and not result["changed"]


def test_a_node_whose_peer_lags_stops_before_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(C, "DEFAULT_LOCAL_TMP", str(tmp_path))
    node = {"multi_node": True, "deployment": "dsr1", "rank": 0, "hosts": ["gpu1", "gpu2"], "peers": {"gpu2": 1}}
    checked = {"options": restart_options(), "node": node}
    peers = {"gpu1": {"run_id": "20261204T190000Z-1", "reached_preflight": True}, "gpu2": {"run_id": "20261204T190001Z-2", "reached_preflight": False}}
    steps = ScriptedSteps({"inferops.runbooks.run_lease": [{"held": True}]})
    result = phase(restart.ActionModule, {"context": context(sglang_restart_checked=checked), "peers": peers}, steps).run(task_vars=RUN)
    assert steps.names() == ["run_lease:renew"]
    failure = result["seen"]["failure"]
    assert failure["stage"] == "deployment" and "gpu2 did not get through the preflight step" in failure["result"]["msg"]
    assert "systemctl stop" not in steps.names()


def test_a_host_held_by_another_run_is_left_alone() -> None:
    held = {"stage": "lease", "step": "Lease | Take the host's lease before anything changes", "result": {"reason": "host_held", "msg": f"held by {HOLDER}"}}
    refused = deployed(sglang_restart_failure=held, sglang_restart_deploy_applied=False, sglang_restart_lease={"holds": False})
    steps = ScriptedSteps()
    result = phase(restart.ActionModule, {"context": refused, "peers": {}}, steps).run(task_vars=RUN)
    assert steps.calls == [] and result["decision"]["state"] == "held_elsewhere" and not result["changed"]
    settled = ScriptedSteps()
    report = phase(settle.ActionModule, {"context": refused, "restarted": result}, settled).run(task_vars=RUN)
    assert settled.calls == [], "no router, no run record, no lease release"
    assert report["report"]["verdict"] == "fail" and report["report"]["reason"] == "host_held" and HOLDER in report["report"]["msg"]


def test_a_run_whose_lease_was_taken_over_during_its_wait_does_not_roll_back() -> None:
    lost = {**CRASHED, "reason": "lease_lost", "msg": f"changed by someone else during this run: the host's lease is now held by {HOLDER}"}
    steps = ScriptedSteps({"inferops.runbooks.run_lease": [{"held": True}] * 3, "inferops.runbooks.wait_ready": [lost]})
    result = phase(restart.ActionModule, {"context": deployed(), "peers": {}}, steps).run(task_vars=RUN)
    assert "run_record:rollback" not in steps.names() and "copy" not in steps.names()
    assert result["decision"]["state"] == "changed_elsewhere"
    settled = ScriptedSteps()
    report = phase(settle.ActionModule, {"context": deployed(), "restarted": result}, settled).run(task_vars=RUN)
    assert settled.calls == []
    assert report["report"]["reason"] == "lease_lost" and report["report"]["msg"].startswith("changed by someone else during this run")


def test_a_failed_start_expires_its_silence_before_the_rollback_and_settle_does_not_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's alerts fire from the moment its new start failed, not after the rollback's own cold start."""
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    problem = alerting.missing(alerting.ALERTMANAGER)
    if problem:
        pytest.fail(problem)
    with alerting.Alertmanager({"route": {"receiver": "nobody"}, "receivers": [{"name": "nobody"}]}) as server:
        alertmanager = Alertmanager(server.url)
        silence_id, _warning = silence_host(alertmanager, "gpu1", 600, "20261204T190000Z-1")
        assert silence_id
        silence = {"id": silence_id, "url": server.url, "host": "gpu1", "ends_at": 0}
        checked = {"options": restart_options(alertmanager_url=server.url), "node": {"multi_node": False, "rank": 0}}
        prepared = deployed(sglang_restart_silence=silence, sglang_restart_checked=checked)
        steps = ScriptedSteps(
            {
                "inferops.runbooks.run_lease": [{"held": True}] * 4,
                "inferops.runbooks.wait_ready": [CRASHED, ROLLBACK_START],
                "ansible.builtin.command": [{"stdout": "LoadState=loaded\nLoadError=\nInvocationID=" + "b" * 32}],
            }
        )
        restarted = phase(restart.ActionModule, {"context": prepared, "peers": {}}, steps).run(task_vars=RUN)
        done = [step["step"] for step in steps.done]
        assert done.index(EXPIRE_SILENCE) < done.index("Rollback | Stop the unit of the failed start")
        assert alertmanager.silence(silence_id)["status"]["state"] == "expired"
        assert restarted["seen"]["silence"] == {"id": silence_id, "expired": True}

        settled_steps = ScriptedSteps(
            {
                "inferops.runbooks.run_lease": [{"released": True}],
                "inferops.runbooks.unit_info": [{"unit": {"ActiveState": "active", "InvocationID": "c" * 32}}],
            }
        )
        settled = phase(settle.ActionModule, {"context": prepared, "restarted": restarted}, settled_steps).run(task_vars=RUN)
    assert EXPIRE not in [step["step"] for step in settled_steps.done]
    assert settled["report"]["silence"] == {"id": silence_id, "url": server.url, "expired": True}
    assert settled["report"]["state"] == "rolled_back" and "silence_warnings" not in settled["report"]
    # the run record keeps no silence for the next run to expire
    records = [args for name, args in settled_steps.calls if name == "inferops.runbooks.run_record"]
    assert [record["updates"]["silence"] for record in records if "silence" in record.get("updates", {})] == [None], records


@pytest.mark.parametrize(
    ("renewed_ago", "calls"),
    [
        (None, ["unit_info", "run_lease:release"]),
        (60.0, ["run_lease:renew", "unit_info", "run_lease:release"]),
    ],
    ids=["renewed-by-the-restart-a-moment-ago", "renewed-a-minute-ago"],
)
def test_settle_of_a_passed_restart_reads_the_host_and_releases_the_lease(renewed_ago: float | None, calls: list[str]) -> None:
    """The heartbeat the restart phase renewed a moment ago is not renewed again; one renewed longer ago
    than renew_after is, before anything else (it may have gone to another run)."""
    steps = ScriptedSteps({"inferops.runbooks.run_lease": [{"held": True}] * 3, "inferops.runbooks.wait_ready": [NEW_START]})
    restarted = phase(restart.ActionModule, {"context": context(), "peers": {}}, steps).run(task_vars=RUN)
    assert restarted["lease_renewed_at"] == pytest.approx(time.time(), abs=5)
    if renewed_ago is not None:
        restarted["lease_renewed_at"] = time.time() - renewed_ago
    settled = ScriptedSteps(
        {
            "inferops.runbooks.run_lease": [{"held": True}, {"released": True}] if renewed_ago else [{"released": True}],
            "inferops.runbooks.unit_info": [{"unit": {"ActiveState": "active", "InvocationID": "b" * 32}}],
        }
    )
    result = phase(settle.ActionModule, {"context": context(), "restarted": restarted}, settled).run(task_vars=RUN)
    assert settled.names() == calls
    assert result["report"]["verdict"] == "pass" and result["decision"]["state"] == "restarted"


def test_settle_finds_a_lease_taken_over_since_its_last_renewal_and_touches_nothing() -> None:
    steps = ScriptedSteps({"inferops.runbooks.run_lease": [{"held": True}] * 3, "inferops.runbooks.wait_ready": [NEW_START]})
    restarted = phase(restart.ActionModule, {"context": context(), "peers": {}}, steps).run(task_vars=RUN)
    restarted["lease_renewed_at"] = time.time() - 60
    settled = ScriptedSteps({"inferops.runbooks.run_lease": [{"held": False, "holder": HOLDER}]})
    result = phase(settle.ActionModule, {"context": context(), "restarted": restarted}, settled).run(task_vars=RUN)
    assert settled.names() == ["run_lease:renew"], "no read of the host, no record, no release of another run's lease"
    assert result["report"]["reason"] == "lease_lost" and HOLDER in result["report"]["msg"]


def test_settle_says_when_someone_else_restarted_the_host_during_the_run() -> None:
    steps = ScriptedSteps({"inferops.runbooks.run_lease": [{"held": True}] * 3, "inferops.runbooks.wait_ready": [NEW_START]})
    restarted = phase(restart.ActionModule, {"context": context(), "peers": {}}, steps).run(task_vars=RUN)
    settled = ScriptedSteps(
        {
            "inferops.runbooks.run_lease": [{"released": True}],
            "inferops.runbooks.unit_info": [{"unit": {"ActiveState": "active", "InvocationID": "d" * 32}}],
        }
    )
    result = phase(settle.ActionModule, {"context": context(), "restarted": restarted}, settled).run(task_vars=RUN)
    report = result["report"]
    assert report["verdict"] == "fail" and report["reason"] == "changed_elsewhere", report
    assert f"the unit runs invocation {'d' * 32}, not {'b' * 32}" in report["msg"]


def test_a_phase_refuses_an_argument_it_does_not_declare() -> None:
    steps = ScriptedSteps()
    with pytest.raises(AnsibleActionFail, match="contxt"):
        phase(restart.ActionModule, {"context": context(), "contxt": {}}, steps).run(task_vars=RUN)
    assert steps.calls == []


# -- the prepare phase ------------------------------------------------------------------------------

PREPARE_RUN = {"inventory_hostname": "gpu1", "ansible_play_hosts_all": ["gpu1"], "playbook_dir": "/tmp"}


def checked(**changes: t.Any) -> dict[str, t.Any]:
    """What check_options answers for variables it accepts."""
    defaults = {name: spec.get("default") for name, spec in ROLE_SPECS["sglang_restart"].items()}
    return {"changed": False, "options": {**defaults, **restart_options(**changes)}, "node": {"multi_node": False, "rank": 0}}


def prepare_steps(*, lease: dict[str, t.Any] | None = None, **more: list[dict[str, t.Any]]) -> ScriptedSteps:
    return ScriptedSteps(
        {
            "inferops.runbooks.check_options": [checked()],
            "inferops.runbooks.run_lease": [lease or {"outcome": "taken"}],
            "inferops.runbooks.unit_info": [{"unit": BEFORE}],
            "inferops.runbooks.run_record": [{"record": None, "host_files": {}}],
            **more,
        }
    )


def test_prepare_of_a_plain_restart_checks_holds_the_host_reads_it_and_changes_nothing() -> None:
    steps = prepare_steps()
    result = phase(prepare.ActionModule, {}, steps).run(task_vars=PREPARE_RUN)
    assert steps.names() == ["check_options", "run_lease:acquire", "unit_info", "run_record"]
    assert steps.calls[0][1] == {"role": "sglang_restart", "hosts": ["gpu1"]}
    assert not result["changed"] and not result["refused"] and result["failure"] is None
    context = result["context"]
    lease = context["sglang_restart_lease"]
    assert lease == {"holds": True, "outcome": "taken", "taken_over": None, "renewed_at": pytest.approx(time.time(), abs=5)}
    assert context["sglang_restart_before"]["unit"] == BEFORE and context["sglang_restart_deploy_files"] == []
    # the restart phase takes this context as its argument
    assert result["peer"] == {"run_id": context["sglang_restart_run_id"], "reached_preflight": False}


def test_prepare_of_a_deploy_notes_the_change_before_writing_it_and_refuses_nothing_that_loads() -> None:
    steps = prepare_steps(**{"ansible.builtin.slurp": [{"content": base64.b64encode(b"OLD").decode()}]})
    steps.answers["inferops.runbooks.check_options"] = [checked(dropin_content="NEW")]
    steps.answers["ansible.builtin.command"] = [{"stdout_lines": ["LoadState=loaded", "LoadError="]}, {"rc": 0, "stderr_lines": []}]
    steps.answers["ansible.builtin.copy"] = [{"changed": True}, {"changed": True}]
    result = phase(prepare.ActionModule, {}, steps).run(task_vars=PREPARE_RUN)
    names = steps.names()
    assert names[:5] == ["check_options", "run_lease:acquire", "unit_info", "run_record", "slurp"]
    # the run record names the change before the first write; the backup is written before the new content
    assert names[5:] == ["run_record:deploy", "copy", "file", "copy", "systemd_service", "command", "command"], names
    backup, written = (args for name, args in steps.calls if name == "ansible.builtin.copy")
    assert backup["dest"] == f"{DROPIN}.previous" and backup["content"] == "OLD"
    assert written == {"content": "NEW", "dest": DROPIN}
    assert result["changed"] and result["failure"] is None and result["context"]["sglang_restart_deploy_applied"] is True


def test_prepare_refuses_a_host_another_run_holds_before_reading_anything_else() -> None:
    steps = prepare_steps(lease={"outcome": "held", "holder": HOLDER, "lease": {"run_id": "other", "controller": "bastion", "pid": 1}})
    result = phase(prepare.ActionModule, {}, steps).run(task_vars={**PREPARE_RUN, "sglang_restart_lock_wait": 0})
    assert steps.names() == ["check_options", "run_lease:acquire"]
    failure = result["failure"]
    assert failure["result"]["reason"] == "host_held" and HOLDER in failure["result"]["msg"], failure
    assert not result["changed"] and not result["drain_hooks_due"]


def test_prepare_in_check_mode_only_reads_the_lease_and_writes_nothing() -> None:
    steps = prepare_steps(**{"ansible.builtin.slurp": [{"content": base64.b64encode(b"OLD").decode()}]})
    steps.answers["inferops.runbooks.check_options"] = [checked(dropin_content="NEW")]
    steps.answers["inferops.runbooks.run_lease"] = [{"lease": None}]
    result = phase(prepare.ActionModule, {}, steps, check_mode=True).run(task_vars=PREPARE_RUN)
    names = steps.names()
    assert names[:2] == ["check_options", "run_lease:read"] and "run_record:deploy" not in names
    assert [args for name, args in steps.calls if name == "ansible.builtin.copy"] == [{"content": "NEW", "dest": DROPIN}]
    assert not result["changed"] and result["context"]["sglang_restart_lease"]["holds"] is False


def test_prepare_refused_variables_touch_nothing_on_the_host() -> None:
    refusal = {"failed": True, "msg": "sglang_restart_port must be 1 to 65535, not 0", "reason": "invalid_options"}
    steps = ScriptedSteps({"inferops.runbooks.check_options": [refusal]})
    result = phase(prepare.ActionModule, {}, steps).run(task_vars=PREPARE_RUN)
    assert steps.names() == ["check_options"]
    assert result["refused"] and "sglang_restart_port" in result["msg"] and not result["changed"]
