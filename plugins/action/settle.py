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

from ansible.plugins.action import ActionBase

from ansible_collections.inferops.runbooks.plugins.module_utils import _rollout
from ansible_collections.inferops.runbooks.plugins.module_utils._runbook_report import fleet_starts, runbook_report
from ansible_collections.inferops.runbooks.plugins.plugin_utils import _observed
from ansible_collections.inferops.runbooks.plugins.plugin_utils._phase import Result, StepFailed, Steps
from ansible_collections.inferops.runbooks.plugins.plugin_utils._router import Router, RouterError

ARGUMENT_SPEC: dict[str, t.Any] = {}
ROLE = "sglang_restart"
PUT_BACK = "Settle | Add this worker to the router again"


def role_state(steps: Steps, check_mode: bool) -> dict[str, t.Any]:
    """What the run observed up to here: the prepare phase's facts (its registered result) with the
    failures the role's rescues kept, and what the restart phase saw."""
    facts = _observed.phase_facts(
        steps.variable("sglang_restart__prepared"), steps.variable("sglang_restart_failure"), steps.variable("sglang_restart_traffic_failure")
    )
    restarted = steps.variable("sglang_restart__restart", {}) or {}
    seen = dict(restarted.get("seen") or {}) if isinstance(restarted, dict) else {}
    task_vars = steps.task_vars
    address = str(task_vars.get("ansible_host") or task_vars.get("inventory_hostname", ""))
    return {
        "facts": facts,
        "seen": seen,
        "options": _observed.options_of(facts),
        "run_id": str(facts.get("sglang_restart_run_id") or ""),
        "rollout": _observed.rollout_after(facts, seen, check_mode),
        "plan": _observed.mapping(facts.get("sglang_restart_plan")),
        "router": _observed.router_of(facts),
        "registration": _observed.registration_of(facts, address),
        "removed": _observed.flag(facts.get("sglang_restart_traffic_removed")),
        "hook_failure": facts["sglang_restart_traffic_failure"],
        "run": {
            "host": str(task_vars.get("inventory_hostname", "")),
            "unit": steps.variable("sglang_restart_unit", ""),
            "address": address,
            "check_mode": check_mode,
        },
    }


def report_dir(options: t.Mapping[str, t.Any], steps: Steps) -> str:
    """Where the report files go: the checked option, or as given when the variables were refused (the
    report of the refusal)."""
    if options:
        return str(options.get("report_dir") or "")
    given = steps.variable("sglang_restart_report_dir", "")
    return given if isinstance(given, str) else ""


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
        state = role_state(steps, bool(self._task.check_mode))
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
            steps.close()
            self._remove_tmp_path(self._connection._shell.tmpdir)
        traffic = {"restored": restored, "failure": failure}
        went_back = {"restored": restored, "error": failure.get("msg") if failure else None}
        try:
            report = runbook_report(_observed.report_input(state["facts"], state["seen"], decision, went_back, state["run"]), ROLE)
        except ValueError as exc:
            result.update(failed=True, msg=f"The report cannot be assembled: {exc}")
            report = {}
        result.update(
            changed=restored is True,
            steps=steps.done,
            decision=decision,
            traffic=traffic,
            report=report,
            report_dir=report_dir(state["options"], steps),
            # what the report step of the play's other hosts compares their starts with
            fleet_start=fleet_starts([report]),
        )
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
