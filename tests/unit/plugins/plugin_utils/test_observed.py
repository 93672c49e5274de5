"""What a run observed, gathered from the phases' results (plugin_utils/_observed.py): the rollout's
observation and the report's input, on the paths a run takes, against the report built from them."""

from __future__ import annotations

from typing import Any

from ansible_collections.inferops.runbooks.plugins.plugin_utils import _observed, _rollout
from ansible_collections.inferops.runbooks.plugins.plugin_utils._runbook_report import runbook_report

HOOKS = ["hooks/lb.yml"]
ROUTER = "http://127.0.0.1:30080"
DROPIN = "/etc/systemd/system/sglang.service.d/50-inferops-deploy.conf"


def facts(**changes: Any) -> dict[str, Any]:
    """The prepare phase's facts of a deploy with a router and hooks, as it returns them."""
    base: dict[str, Any] = {
        "sglang_restart_checked": {
            "options": {
                "unit": "sglang.service",
                "port": 30000,
                "router_url": ROUTER,
                "worker_url": "",
                "drain_hooks": HOOKS,
                "restore_hooks": HOOKS,
                "rollback": True,
                "force_restart": False,
            },
            "node": {"multi_node": False, "rank": 0},
        },
        "sglang_restart_before": {"unit": {"ActiveState": "active", "InvocationID": "a" * 32}},
        "sglang_restart_deploy_files": [{"kind": "dropin", "path": DROPIN, "existed": True, "changed": True, "content": "secret", "previous": "old"}],
        "sglang_restart_deploy_applied": True,
        "sglang_restart_plan": {"repairs": [], "pending": False},
        "sglang_restart_router_worker": {"url": "http://gpu1:30000", "priority": 5, "registered": True},
        "sglang_restart_traffic_removed": True,
        "sglang_restart_drain_hooks_ran": True,
        "sglang_restart_failure": None,
        "sglang_restart_traffic_failure": None,
        "sglang_restart_started_at": 1796313384.0,
        "sglang_restart_reloaded": {"stdout_lines": ["LoadState=loaded", "LoadError="]},
        "sglang_restart_verify": {},
    }
    return {**base, **changes}


RUN = {"host": "gpu1", "unit": "sglang.service", "address": "gpu1", "check_mode": False}
PASSED = {"stopped": True, "wait": {"verdict": "pass", "reason": "ready"}, "outcome": {"new_start_failed": False, "canary_failed": False}}


def test_flags_given_as_text_by_an_older_ansible_core_read_as_flags() -> None:
    assert _observed.flag("True") and _observed.flag(True) and not _observed.flag("False") and not _observed.flag("") and not _observed.flag(None)
    observed = _observed.rollout_before_restart(facts(sglang_restart_deploy_applied="False", sglang_restart_traffic_removed="True"), False)
    assert not observed["deploy_applied"] and observed["out_of_rotation"]


def test_before_the_restart_a_deploy_with_a_router_is_pending_and_out_of_rotation() -> None:
    observed = _observed.rollout_before_restart(facts(), False)
    assert observed["change_requested"] and observed["change_pending"] and observed["traffic_managed"] and observed["out_of_rotation"]
    assert not observed["failed"] and observed["unit_active"] and not observed["restore_failed"]
    kept = _observed.rollout_before_restart(facts(sglang_restart_failure={"stage": "drain", "step": "Drain | Run the drain hooks", "result": {}}), False)
    assert kept["failed"] and kept["new_start_failed"]


def test_the_phases_own_observation_wins_and_a_failed_restore_hook_is_added() -> None:
    rollout = {**_rollout.after_restart(_observed.rollout_before_restart(facts(), False), PASSED)}
    after = _observed.rollout_after(facts(sglang_restart_traffic_failure={"step": "Restore | Run the restore hooks", "msg": "x"}), {"rollout": rollout}, False)
    assert after["restore_failed"] and _rollout.decide(after)["settled_step"] == "restore"
    # a phase that did not finish: what it saw, over the observation before it
    assert _observed.rollout_after(facts(), PASSED, False)["verified"]


def test_the_report_of_a_deploy_that_passed_and_went_back_into_the_router() -> None:
    seen = {**PASSED, "drain": {"running_at_start": 0}}
    decision = _rollout.decide(_rollout.after_restart(_observed.rollout_before_restart(facts(), False), seen))
    observed = _observed.report_input(facts(), seen, decision, {"restored": True, "error": None}, RUN)
    deploy = observed["deploy"]
    assert deploy["state"] == "new_configuration" and deploy["deploy"]["files"] == [{"kind": "dropin", "path": DROPIN, "existed": True, "changed": True}]
    assert deploy["deploy"]["verify"] == ["LoadState=loaded"]
    assert deploy["traffic"] == {
        "router_url": ROUTER,
        "worker_url": "http://gpu1:30000",
        "registered": True,
        "removed": True,
        "drain": {"running_at_start": 0},
        "drain_hooks": HOOKS,
        "restored": True,
        "restore_hooks": HOOKS,
        "error": None,
    }
    assert not deploy["rollback"]["attempted"] and deploy["rollback"]["wait"] == {}
    report = runbook_report(observed, "sglang_restart")
    assert (report["verdict"], report["state"]) == ("pass", "new_configuration")


def test_the_report_of_a_rolled_back_deploy_whose_router_refused_the_worker() -> None:
    rolled = {
        "files_restored": True,
        "started_at": 1796313400.0,
        "wait": {"verdict": "pass", "reason": "ready"},
        "passed": True,
        "failure": None,
        "canary": {"canary": {"verdict": "pass"}},
    }
    seen = {"stopped": True, "wait": {"verdict": "fail", "reason": "fatal_log"}, "outcome": {"new_start_failed": True}, "rollback": rolled}
    rollout = _rollout.after_rollback(_rollout.after_restart(_observed.rollout_before_restart(facts(), False), seen), rolled)
    decision = _rollout.decide({**rollout, "restore_failed": True})
    observed = _observed.report_input(facts(), seen, decision, {"restored": False, "error": "The router answered 500"}, RUN)
    rollback = observed["deploy"]["rollback"]
    assert rollback["attempted"] and rollback["restarted"] and rollback["wait"]["verdict"] == "pass" and rollback["canary"] == {"verdict": "pass"}
    assert observed["deploy"]["traffic"]["error"] == "The router answered 500" and decision["settled_step"] == "restore"
    assert runbook_report(observed, "sglang_restart")["verdict"] == "fail"


def test_a_refused_run_has_no_deploy_section_and_its_failure_is_reported() -> None:
    refused = {
        "sglang_restart_checked": {"failed": True, "msg": "bad"},
        "sglang_restart_failure": {"stage": "validate", "step": "Validate", "result": {"msg": "bad"}},
    }
    observed = _observed.report_input(refused, {}, _rollout.decide(_observed.rollout_before_restart(refused, False)), {"restored": None}, RUN)
    assert observed["deploy"] == {} and observed["failure"]["stage"] == "validate"
    assert runbook_report(observed, "sglang_restart")["verdict"] == "fail"


def test_what_a_rescue_kept_counts_for_its_own_run_only() -> None:
    failed_hook = {"run_id": "run-2", "stage": "drain", "step": "Drain | Run the drain hooks", "result": {"msg": "lb refused"}}
    prepared = {"sglang_restart_run_id": "run-2", "sglang_restart_failure": None}
    facts = _observed.phase_facts(prepared, failed_hook, {"run_id": "run-2", "step": "Restore | Run the restore hooks", "msg": "x"})
    assert facts["sglang_restart_failure"] == failed_hook and facts["sglang_restart_traffic_failure"]["msg"] == "x"
    # an earlier run of the role in the same play kept these: this run forgets them
    earlier = _observed.phase_facts(prepared, {**failed_hook, "run_id": "run-1"}, {"run_id": "run-1", "msg": "x"})
    assert earlier["sglang_restart_failure"] is None and earlier["sglang_restart_traffic_failure"] is None
    # the phase's own failure comes first
    own = {"stage": "validate", "step": "Validate", "result": {"msg": "bad"}}
    assert _observed.phase_facts({**prepared, "sglang_restart_failure": own}, failed_hook, None)["sglang_restart_failure"] == own
    assert _observed.phase_facts(None, None, None) == {"sglang_restart_failure": None, "sglang_restart_traffic_failure": None}
