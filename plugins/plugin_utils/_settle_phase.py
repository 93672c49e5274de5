# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The body of the settle phase of the role sglang_restart (``plugins/action/settle.py``, which runs it):
the worker back into the router, the run record settled, the host read once more, the report assembled;
and the small decisions each step asks.

Private to the collection; may change at any time. Controller side.
"""

from __future__ import annotations

import time
import typing as t

from ansible_collections.inferops.runbooks.plugins.plugin_utils import _observed, _rollout, _silences
from ansible_collections.inferops.runbooks.plugins.plugin_utils._host_lease import HostLease
from ansible_collections.inferops.runbooks.plugins.plugin_utils._phase import PhaseBody, Result, StepFailed, Steps
from ansible_collections.inferops.runbooks.plugins.plugin_utils._router import Router, RouterError
from ansible_collections.inferops.runbooks.plugins.plugin_utils._runbook_report import fleet_starts, runbook_report
from ansible_collections.inferops.runbooks.plugins.plugin_utils._runtime import advance_record, optional_mapping

ROLE = "sglang_restart"
PUT_BACK = "Settle | Add this worker to the router again"
LAST_WORD = "Settle | Read the host at the end of the run"
EXPIRE = "Settle | Expire the host's silence in Alertmanager"
# the states in which the run ends with the host serving what it judged
SERVING_STATES = ("restarted", "new_configuration", "unchanged", "rolled_back")


def expected_end(state: str, seen: t.Mapping[str, t.Any], changed: t.Sequence[t.Mapping[str, t.Any]]) -> dict[str, t.Any] | None:
    """What the host must show at the end of a run that ends serving: the invocation its last wait
    judged, and each changed file's hash (the new content, or the previous one after a rollback; None:
    the file must not exist). None when the run ends otherwise (nothing it says can be contradicted
    by a serving host)."""
    if state not in SERVING_STATES:
        return None
    rolled_back = state == "rolled_back"
    wait = _observed.mapping(_observed.mapping(seen.get("rollback")).get("wait") if rolled_back else seen.get("wait"))
    files: dict[str, str | None] = {}
    for entry in changed:
        if rolled_back:
            files[str(entry["path"])] = _rollout.content_sha256(entry["previous"]) if entry.get("existed") and isinstance(entry.get("previous"), str) else None
        else:
            files[str(entry["path"])] = _rollout.content_sha256(str(entry.get("content") or ""))
    return {"invocation_id": str(wait.get("invocation_id") or ""), "files": files}


def contradictions(expected: t.Mapping[str, t.Any], unit: t.Mapping[str, t.Any], files: t.Mapping[str, t.Any]) -> list[str]:
    """What the host shows against what the run judged, in words; none when they agree."""
    found = []
    if unit and unit.get("ActiveState") not in _rollout.ACTIVE_STATES:
        found.append(f"the unit is {unit.get('ActiveState')} ({unit.get('SubState')})")
    elif unit and expected["invocation_id"] and unit.get("InvocationID") != expected["invocation_id"]:
        found.append(f"the unit runs invocation {unit.get('InvocationID')}, not {expected['invocation_id']} that this run judged")
    for path, sha in expected["files"].items():
        now = (files.get(path) or {}).get("sha256") if path in files else sha
        if now != sha:
            found.append(f"{path} is not what this run left ({'absent' if now is None else 'other content'})")
    return found


def role_state(args: t.Mapping[str, t.Any], task_vars: t.Mapping[str, t.Any], check_mode: bool) -> dict[str, t.Any]:
    """What the run observed up to here, from this phase's arguments: the prepare phase's context with
    the failures the role's rescues kept, and what the restart phase saw."""
    facts = _observed.phase_facts(optional_mapping(args["context"]), args["failure"], args["traffic_failure"])
    seen = dict(optional_mapping(args["restarted"]).get("seen") or {})
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
        "holds_lease": bool(_observed.mapping(facts.get("sglang_restart_lease")).get("holds")),
        # when the run last renewed the lease: the restart phase's last look, or the prepare phase's take
        "lease_renewed_at": optional_mapping(args["restarted"]).get("lease_renewed_at")
        or _observed.mapping(facts.get("sglang_restart_lease")).get("renewed_at"),
        "hook_failure": facts["sglang_restart_traffic_failure"],
        "silence_warnings": [str(warning) for warning in [*(facts.get("sglang_restart_silence_warnings") or []), *(seen.get("silence_warnings") or [])]],
        "run": {
            "host": str(task_vars.get("inventory_hostname", "")),
            "unit": str(args["unit"] or ""),
            "address": address,
            "check_mode": check_mode,
        },
    }


def report_dir(options: t.Mapping[str, t.Any], args: t.Mapping[str, t.Any]) -> str:
    """Where the report files go: the checked option, or as given when the variables were refused (the
    report of the refusal)."""
    if options:
        return str(options.get("report_dir") or "")
    given = args["report_dir"]
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


class SettlePhase(PhaseBody):
    """The settle phase of one host: its steps taken through ``steps``, with the task's variables and
    check mode; ``run`` takes the phase's checked arguments and returns the task's result."""

    def run(self, args: dict[str, t.Any]) -> Result:
        steps, task_vars = self.steps, self.task_vars
        state = role_state(args, task_vars, self.check_mode)
        lease = self._lease(state)
        failure = state["hook_failure"]
        restored: bool | None = None
        decision = _rollout.decide(state["rollout"])
        result: Result = {}
        try:
            if lease is not None and not state["rollout"].get("held_elsewhere"):
                self._still_held(lease, state)
                decision = _rollout.decide(state["rollout"])
            if decision["restore_wanted"] and failure is None:
                failure = self._put_back(steps, state, decision)
                restored = state["removed"] and failure is None
            elif decision["restore_wanted"]:
                restored = False
            decision = _rollout.decide({**state["rollout"], "restore_failed": failure is not None})
            expired = self._expire_silence(steps, state, decision)
            if decision["record_wanted"]:
                self._record(steps, state, decision["settled_step"], {**record_updates(decision, state["plan"]), **expired})
            if lease is not None and not decision["state"].endswith("_elsewhere"):
                self._last_word(steps, state, decision)
                lease.release()
        except StepFailed as failed:
            # the record cannot be written: the host fails here, as a failed task would
            result.update(failed=True, msg=str(failed))
        went_back = {"restored": restored, "error": failure.get("msg") if failure else None}
        try:
            report = runbook_report(_observed.report_input(state["facts"], state["seen"], decision, went_back, state["run"]), ROLE)
            report.update(_silences.report_section(state["facts"].get("sglang_restart_silence"), state["silence_warnings"]))
        except ValueError as exc:
            result.update(failed=True, msg=f"The report cannot be assembled: {exc}")
            report = {}
        result.update(
            changed=restored is True,
            decision=decision,
            traffic={"restored": restored, "failure": failure},
            report=report,
            report_dir=report_dir(state["options"], args),
            # what the report step of the play's other hosts compares their starts with
            fleet_start=fleet_starts([report]),
            **({"warnings": list(state["silence_warnings"])} if state["silence_warnings"] else {}),
        )
        return result

    def _expire_silence(self, steps: Steps, state: dict[str, t.Any], decision: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
        """The run's silence expired once the host is back in the router (or failed, so that its alerts fire;
        the restart phase expired it already when the new start failed); the run record's update: no silence
        left, or the silence kept for the next run to expire."""
        silence = state["facts"].get("sglang_restart_silence")
        if not _silences.expire_wanted(silence, str(decision.get("state") or "")):
            return {}
        if not _silences.expired_by_restart(state["seen"]):
            problem = _silences.expire(steps, state["options"], silence, state["run"]["host"], EXPIRE)
            if problem:
                state["silence_warnings"].append(problem)
                return {}
        state["facts"]["sglang_restart_silence"] = {**silence, "expired": True}
        return {"silence": None}

    def _lease(self, state: t.Mapping[str, t.Any]) -> HostLease | None:
        """The run's lease, when it holds one, known renewed when the run last renewed it."""
        if not state["holds_lease"]:
            return None
        stale_after = float(state["options"].get("lock_stale") or float("inf"))
        lease = HostLease(self.steps, state["options"]["unit"], state["run_id"], stale_after)
        lease.renewed_before(state["lease_renewed_at"])
        return lease

    def _still_held(self, lease: HostLease, state: dict[str, t.Any]) -> None:
        """This run still holds the host; otherwise it ends here (another run took it over), touching
        nothing. A heartbeat renewed a moment ago (within ``renew_after``, well inside lock_stale) cannot
        have been taken over since, and is not renewed again."""
        try:
            lease.renew_when_due()
        except StepFailed as lost:
            if _rollout.held_elsewhere(lost.failure) is None:
                raise
            state["seen"]["failure"] = lost.failure
            state["rollout"] = {**state["rollout"], "held_elsewhere": "lease_lost"}

    def _last_word(self, steps: Steps, state: dict[str, t.Any], decision: t.Mapping[str, t.Any]) -> None:
        """The host read once more at the end: a run that passed must find the unit running the start it
        judged and the files it left; otherwise someone changed the host during the run, and the report
        says so instead of a verdict the host contradicts."""
        expected = expected_end(decision["state"], state["seen"], _observed.changed_files(state["facts"]))
        if expected is None:
            return
        unit = steps.module("settle", LAST_WORD, "inferops.runbooks.unit_info", {"unit": state["options"]["unit"]}, may_fail=True).get("unit") or {}
        files: dict[str, t.Any] = {}
        if expected["files"]:
            read = steps.module(
                "settle",
                LAST_WORD,
                "inferops.runbooks.run_record",
                {"unit": state["options"]["unit"], "files": list(expected["files"])},
                may_fail=True,
            )
            files = dict(read.get("host_files") or {})
        found = contradictions(expected, unit, files)
        if found and _observed.failure_of(state["facts"], state["seen"]) is None:
            msg = f"changed by someone else during this run: {'; '.join(found)}"
            state["seen"]["failure"] = {"stage": "settle", "step": LAST_WORD, "result": {"failed": True, "reason": "changed_elsewhere", "msg": msg}}

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
        advance_record(steps, "settle", f"Settle | Note in the run record that the host is at {step}", state["options"]["unit"], state["run_id"], step, updates)
