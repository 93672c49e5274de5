# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of inferops.runbooks.settle: the last phase of the role sglang_restart.

Once a configuration that passed serves (the new one, the previous one after a rollback, or the one
never stopped), the worker goes back into the router with the registration the run record kept (the
user's restore hooks ran just before, in the role); the run record is settled where the host ends
(``done`` once nothing is left to undo); and the host's report is assembled from what the run observed
(``module_utils/_runbook_report``: its verdict and reason). The decisions are ``_rollout.decide``'s,
over what the role observed, with the outcome of putting the host back.
"""

from __future__ import annotations

import time
import typing as t

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.inferops.runbooks.plugins.module_utils import _rollout
from ansible_collections.inferops.runbooks.plugins.module_utils._runbook_report import runbook_report
from ansible_collections.inferops.runbooks.plugins.plugin_utils._phase import Result, StepFailed, Steps
from ansible_collections.inferops.runbooks.plugins.plugin_utils._router import Router, RouterError

ARGUMENT_SPEC: dict[str, t.Any] = {}
ROLE = "sglang_restart"
PUT_BACK = "Settle | Add this worker to the router again"


def role_state(steps: Steps) -> dict[str, t.Any]:
    """What the role observed up to here, as its variables say (vars/main.yml)."""
    checked = steps.variable("sglang_restart__checked", {}) or {}
    hook_failure = steps.variable("sglang_restart_traffic_failure")
    return {
        "options": checked.get("options") or {},
        "run_id": str(steps.variable("sglang_restart_run_id", "") or ""),
        "rollout": steps.variable("sglang_restart__rollout", {}) or {},
        "observed": steps.variable("sglang_restart__observed", {}) or {},
        "plan": steps.variable("sglang_restart_plan", {}) or {},
        "router": str(steps.variable("sglang_restart__router", "") or ""),
        "registration": steps.variable("sglang_restart__worker_registration", {}) or {},
        "removed": boolean(steps.variable("sglang_restart_traffic_removed", False) or False, strict=False),
        "restore_hooks": list(steps.variable("sglang_restart__restore_hooks", []) or []),
        "hook_failure": hook_failure if isinstance(hook_failure, dict) else None,
    }


def record_updates(decision: t.Mapping[str, t.Any], plan: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """What the run record keeps of where the host ends; ``done`` also says nothing is out of rotation
    and the change is settled."""
    done = decision["settled_step"] == "done"
    return {
        "outcome": decision["state"],
        "repairs": list(plan.get("repairs") or []),
        "traffic": {"out": False} if done else {},
        "change_flags": {"settled": True} if done else {},
    }


def with_traffic(observed: t.Mapping[str, t.Any], restored: bool | None, failure: t.Mapping[str, t.Any] | None, hooks: list[t.Any]) -> dict[str, t.Any]:
    """What the role observed, with this phase's outcome of putting the host back into rotation."""
    deploy = observed.get("deploy")
    if not isinstance(deploy, dict) or not isinstance(deploy.get("traffic"), dict):
        return dict(observed)
    traffic = {
        **deploy["traffic"],
        "restored": bool(restored),
        "restore_hooks": hooks if restored is not None else [],
        "error": failure.get("msg") if failure else None,
    }
    return {**observed, "deploy": {**deploy, "traffic": traffic}}


class ActionModule(ActionBase):
    """The settle phase of one host; see the module docs."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def run(self, tmp: t.Any = None, task_vars: dict[str, t.Any] | None = None) -> Result:
        task_vars = task_vars or {}
        result: Result = super().run(tmp, task_vars)
        del tmp
        self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        steps = Steps(self, task_vars)
        state = role_state(steps)
        decision = _rollout.decide(state["rollout"])
        failure = state["hook_failure"]
        restored: bool | None = None
        try:
            if decision["restore_wanted"] and failure is None:
                failure = self._put_back(steps, state, decision)
                restored = state["removed"] and failure is None
            elif decision["restore_wanted"]:
                restored = False
            decision = _rollout.decide({**state["rollout"], "restore_failed": failure is not None})
            if decision["record_wanted"]:
                self._record(steps, state, decision["settled_step"], record_updates(decision, state["plan"]))
        except StepFailed as failed:
            # the record cannot be written: the host fails here, as a failed task would
            result.update(failed=True, msg=str(failed))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        observed = with_traffic(state["observed"], restored, failure, state["restore_hooks"])
        try:
            report = runbook_report(observed, ROLE)
        except ValueError as exc:
            result.update(failed=True, msg=f"The report cannot be assembled: {exc}")
            report = {}
        result.update(changed=restored is True, steps=steps.done, decision=decision, traffic={"restored": restored, "failure": failure}, report=report)
        return result

    def _put_back(self, steps: Steps, state: t.Mapping[str, t.Any], decision: t.Mapping[str, t.Any]) -> dict[str, t.Any] | None:
        """The run record notes the step first; the worker is added back when this run (or an earlier
        one) took it out of the router; the failure, or None."""
        if decision["record_wanted"]:
            self._record(steps, state, "restore", {})
        if not (state["removed"] and state["router"]):
            return None
        options = state["options"]
        router = Router(state["router"], str(steps.variable("sglang_restart_router_api_key", "") or "") or None)
        started = time.monotonic()
        try:
            router.put_back(state["registration"], str(steps.variable("sglang_restart_api_key", "") or "") or None, int(options.get("router_timeout") or 0))
        except RouterError as error:
            steps.note(PUT_BACK, {"failed": True}, time.monotonic() - started)
            return {"step": PUT_BACK, "msg": str(error)}
        steps.note(PUT_BACK, {}, time.monotonic() - started)
        return None

    def _record(self, steps: Steps, state: t.Mapping[str, t.Any], step: str, updates: t.Mapping[str, t.Any]) -> None:
        steps.module(
            "settle",
            f"Settle | Note in the run record that the host is at {step}",
            "inferops.runbooks.run_record",
            {"unit": state["options"]["unit"], "run_id": state["run_id"], "step": step, **({"updates": dict(updates)} if updates else {})},
        )
