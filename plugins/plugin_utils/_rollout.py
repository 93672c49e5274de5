# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rollout's decisions, from what was observed: pure functions, no Ansible imports.

``reconcile`` reads the run record an earlier run left on the host (``_run_record``) beside what the
host shows now (its files, its unit) and what this run asks for, and says what is left to repair: a
host out of rotation to put back once it serves a configuration that passed, a change whose start
never passed to finish or roll back, a start still in progress to wait on instead of restarting, a
rollback cut short to complete. ``decide`` takes what the run then observed and says what to do next
(restart, verify in place, roll back, put back into rotation) and where the host ends (``state``).
The role's tasks carry out what these say; they decide nothing themselves.
"""

from __future__ import annotations

import hashlib
import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils._run_record import Record

# the steps during which the earlier run's new start may still be running
STARTING = ("start", "wait", "smoke")
ROLLING_BACK = ("rollback", "rollback_wait")
ACTIVE_STATES = ("active", "activating", "reloading")


def reconcile(
    record: Record | None,
    problem: str | None,
    host_files: t.Mapping[str, t.Mapping[str, t.Any]],
    unit: t.Mapping[str, t.Any],
    requested: t.Sequence[t.Mapping[str, t.Any]],
) -> dict[str, t.Any]:
    """What an earlier, interrupted run left to repair.

    ``host_files``: for each file of the record's change, ``{"sha256": ..., "previous_sha256": ...}``
    of the file and of its ``.previous`` now (None: absent). ``unit``: ``systemctl show`` of the unit.
    ``requested``: this run's files, each with ``path`` and ``new_sha256``.
    """
    plan: dict[str, t.Any] = {
        "pending": False,
        "run_id": None,
        "step": None,
        "problem": problem,
        "repairs": [],
        "out_of_rotation": False,
        "worker": {},
        "router_url": "",
        "hooks_ran": False,
        "unproven": [],
        "restore_files": [],
        "inflight": False,
        "before_invocation": None,
        "foreign": [],
    }
    if not record or record.get("step") == "done":
        return plan
    plan.update(run_id=record.get("run_id"), step=record.get("step"), before_invocation=record.get("before_invocation"))
    where = f"run {record.get('run_id')} stopped at step {record.get('step')}"
    traffic = record.get("traffic") or {}
    if traffic.get("out"):
        plan.update(out_of_rotation=True, worker=traffic.get("worker") or {}, router_url=traffic.get("router_url") or "", hooks_ran=bool(traffic.get("hooks")))
        plan["repairs"].append(f"out of rotation since {where}: put back once the host serves a configuration that passed")
    change = record.get("change") or {}
    if change and not change.get("proven") and not change.get("settled"):
        _reconcile_change(plan, record, change, host_files, unit, requested, where)
    plan["pending"] = bool(plan["repairs"])
    return plan


def _reconcile_change(
    plan: dict[str, t.Any],
    record: Record,
    change: t.Mapping[str, t.Any],
    host_files: t.Mapping[str, t.Mapping[str, t.Any]],
    unit: t.Mapping[str, t.Any],
    requested: t.Sequence[t.Mapping[str, t.Any]],
    where: str,
) -> None:
    written, unwritten = [], []
    for entry in change.get("files") or []:
        now = host_files.get(entry["path"], {})
        current = now.get("sha256")
        if current is not None and current == entry.get("new_sha256"):
            written.append(entry)
        elif current == entry.get("previous_sha256"):
            unwritten.append(entry)
        else:
            plan["foreign"].append(entry["path"])
    if plan["foreign"]:
        plan["repairs"].append(f"{', '.join(plan['foreign'])} changed on the host since {where}: left as it is, not rolled back")
    step = record.get("step")
    if step in ROLLING_BACK:
        plan["restore_files"] = [_backup(entry, host_files) for entry in written]
        plan["repairs"].append(f"the rollback of {where} is completed: the previous configuration is put back first")
        return
    if step in ("rolled_back", "rollback_failed", "failed"):
        return
    plan["unproven"] = [{"path": entry["path"], "existed": bool(entry.get("existed"))} for entry in written]
    if written:
        plan["repairs"].append(f"the change of {where} never passed its start: this run's start proves it or rolls it back")
    same_change = {(f["path"], f["new_sha256"]) for f in requested} == {(f["path"], f["new_sha256"]) for f in change.get("files") or []}
    running_new = unit.get("ActiveState") in ACTIVE_STATES and unit.get("InvocationID") not in ("", None, record.get("before_invocation"))
    if step in STARTING and same_change and written and not unwritten and not plan["foreign"] and running_new:
        plan["inflight"] = True
        plan["repairs"].append(f"the start of {where} is still in progress (invocation {unit.get('InvocationID')}): waited on, not restarted")


def _backup(entry: t.Mapping[str, t.Any], host_files: t.Mapping[str, t.Mapping[str, t.Any]]) -> dict[str, t.Any]:
    backup_ok = not entry.get("existed") or host_files.get(entry["path"], {}).get("previous_sha256") == entry.get("previous_sha256")
    return {"path": entry["path"], "existed": bool(entry.get("existed")), "backup_intact": backup_ok}


def held_elsewhere(failure: t.Any) -> str | None:
    """``host_held`` (another run held the host: this one touched nothing) or ``lease_lost`` (another
    run took the host over during this one) when the failed step was the host's lease; else None."""
    if not isinstance(failure, t.Mapping) or failure.get("stage") != "lease":
        return None
    reason = (failure.get("result") or {}).get("reason")
    return str(reason) if reason in ("host_held", "lease_lost") else None


# what a run does on a host that another run holds: nothing at all
HANDS_OFF = {
    "restart_needed": False,
    "verify_in_place": False,
    "rollback_wanted": False,
    "serving": False,
    "restore_wanted": False,
    "rollback_reason": None,
    "record_wanted": False,
}


def decide(observed: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """What the rollout does next and where the host ends, from what this run observed.

    Keys read (all optional): check_mode, failed (a step failed and was rescued), stopped (the unit
    was stopped by this run), change_requested, change_pending (files differ from the host's, or an
    earlier run's change was never proven), force_restart, inflight, unit_active, deploy_applied,
    new_start_failed, rollback_enabled, rollback_restarted, rollback_passed, out_of_rotation (by this
    run or an earlier one), verified (the in-place check of an unchanged host passed), unproven_in_place
    (an earlier run's change that never passed is on the host), rollback_unfinished (an earlier run's
    rollback was cut short: its files are put back and the unit restarted), traffic_managed (a router or
    drain hooks are configured), repairs_pending (an earlier run left something to repair),
    restore_failed (putting the host back into rotation failed), canary_failed (the start passed its
    gates, but its performance canary failed against the host's baseline, and a failed canary is to fail
    the host rather than only warn).

    A change whose canary failed is rolled back like a change whose start failed (``rollback_reason``
    ``performance_regression`` rather than ``start_failed``); a plain restart whose canary failed has
    nothing to roll back to and still serves (healthy, only slower): the host fails, but is put back
    into rotation.

    ``held_elsewhere`` (``host_held``, ``lease_lost``): another run holds the host, so this one does
    nothing more there: no restart, no rollback, no router, no run record (``state`` ``held_elsewhere``
    or ``changed_elsewhere``).
    """
    get = observed.get
    if get("held_elsewhere"):
        state = "held_elsewhere" if get("held_elsewhere") == "host_held" else "changed_elsewhere"
        return {**HANDS_OFF, "state": state, "settled_step": "failed"}
    force = bool(get("force_restart") or get("rollback_unfinished"))
    restart_needed = not get("change_requested") or bool(get("change_pending")) or force
    if not restart_needed and get("change_requested") and not get("unit_active"):
        restart_needed = True  # the configuration is in place but nothing runs it
    verify_in_place = not restart_needed and not get("check_mode")
    regressed = bool(get("canary_failed")) and not get("new_start_failed")
    rollback_wanted = bool(
        not get("check_mode") and get("deploy_applied") and (get("new_start_failed") or regressed) and (get("rollback_enabled", True) or not get("stopped"))
    )
    rollback_passed = bool(get("rollback_restarted") and get("rollback_passed"))
    # the unit was stopped for this start: by this run, or by the earlier run whose start is waited on
    stopped = bool(get("stopped") or get("inflight"))
    serving = (
        rollback_passed
        or (verify_in_place and bool(get("verified")))
        or (restart_needed and stopped and not get("new_start_failed") and not rollback_wanted)
        or (bool(get("failed")) and not stopped and not get("unproven_in_place"))
    )
    restore_wanted = bool(not get("check_mode") and serving and get("out_of_rotation"))
    state = _state(observed, restart_needed, rollback_wanted, rollback_passed)
    return {
        "restart_needed": restart_needed,
        "verify_in_place": verify_in_place,
        "rollback_wanted": rollback_wanted,
        "serving": serving,
        "restore_wanted": restore_wanted,
        "state": state,
        "rollback_reason": ("performance_regression" if regressed else "start_failed") if rollback_wanted else None,
        "record_wanted": record_wanted(observed),
        "settled_step": settled_step(observed, serving, restore_wanted, state),
    }


def record_wanted(observed: t.Mapping[str, t.Any]) -> bool:
    """Whether the run keeps a run record on the host: when it changes files or can take the host out
    of rotation, or when an earlier run left something to repair. Never in check mode."""
    get = observed.get
    return bool(not get("check_mode") and (get("change_requested") or get("traffic_managed") or get("repairs_pending")))


def settled_step(observed: t.Mapping[str, t.Any], serving: bool, restore_wanted: bool, state: str) -> str:
    """Where the run record ends: ``done`` when nothing is left to undo (the host serves a configuration
    that passed and is in rotation), ``restore`` when it serves but is still out of rotation, otherwise
    the failure (``rollback_failed``, ``failed``), for the precheck to report and the next run to repair."""
    back_in_rotation = not observed.get("out_of_rotation") or (restore_wanted and not observed.get("restore_failed"))
    if serving and back_in_rotation:
        return "done"
    if state in ("rollback_failed", "failed"):
        return state
    return "restore" if serving else "failed"


def _state(observed: t.Mapping[str, t.Any], restart_needed: bool, rollback_wanted: bool, rollback_passed: bool) -> str:
    """check_mode, not_restarted (failed before the stop; any change was put back), unchanged (the
    new configuration was already in place), rolled_back, rollback_failed, failed (down, not rolled
    back), new_configuration, restarted (passed, no change)."""
    get = observed.get
    if get("check_mode"):
        return "check_mode"
    if get("failed") and not get("stopped") and not get("inflight"):
        return "not_restarted"
    if not restart_needed:
        return "unchanged"
    if get("rollback_restarted") and rollback_passed:
        return "rolled_back"
    if rollback_wanted:
        return "rollback_failed"
    if get("new_start_failed"):
        return "failed"
    if get("deploy_applied"):
        return "new_configuration"
    return "restarted"


def change_entries(
    files: t.Sequence[t.Mapping[str, t.Any]], host_files: t.Mapping[str, t.Mapping[str, t.Any]], unproven: t.Sequence[t.Mapping[str, t.Any]]
) -> list[dict[str, t.Any]]:
    """The changed files as the run record keeps them. A file an earlier run wrote and never proved
    keeps that run's backup: its previous content is the ``.previous`` copy on the host, not what the
    file holds now."""
    pending = {entry["path"] for entry in unproven}
    entries = []
    for entry in files:
        path = entry["path"]
        if path in pending:
            previous = host_files.get(path, {}).get("previous_sha256")
        else:
            previous = content_sha256(entry["previous"]) if entry.get("existed") and isinstance(entry.get("previous"), str) else None
        entries.append(
            {
                "path": path,
                "kind": entry.get("kind"),
                "existed": bool(entry.get("existed")),
                "previous_sha256": previous,
                "new_sha256": content_sha256(entry.get("content") or ""),
            }
        )
    return entries


def content_sha256(text: str) -> str:
    """The hash of a text's UTF-8 bytes: what ``_run_record.sha256_of`` gives for a file holding it."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def interrupted(record: t.Any) -> str | None:
    """What an interrupted run left undone, in words, or None: a host out of rotation, a
    configuration whose start never passed."""
    if not isinstance(record, t.Mapping) or record.get("step") in (None, "done"):
        return None
    where = f"run {record.get('run_id')} stopped at step {record.get('step')}"
    left = []
    if (record.get("traffic") or {}).get("out"):
        left.append("out of rotation")
    change = record.get("change") or {}
    if change and not change.get("proven") and not change.get("settled"):
        left.append("on a configuration whose start never passed")
    if not left:
        return None
    return f"{' and '.join(left)} ({where}); run the same rollout again to repair it"


# -- what became of a start (the restart and rollback phases, the report) ------------------------


def generated(answer: t.Mapping[str, t.Any]) -> bool:
    """A smoke test's answer is a 200 with at least one choice."""
    body = answer.get("json")
    choices = body.get("choices") if isinstance(body, t.Mapping) else None
    return answer.get("status") == 200 and bool(choices)


def smoke_failed(options: t.Mapping[str, t.Any], smoke: t.Mapping[str, t.Any]) -> bool:
    """The smoke test ran (it answered something or nothing) and generated nothing."""
    return bool(options.get("smoke_test")) and "status" in smoke and not generated(smoke)


def new_lines(options: t.Mapping[str, t.Any], history: t.Mapping[str, t.Any]) -> list[t.Any]:
    """With ``fail_on_new``, the unrecognized line groups the start logged that the host's last good
    starts did not (the start history's comparison); none otherwise."""
    if not options.get("fail_on_new"):
        return []
    summary = history.get("summary")
    found = summary.get("new_unrecognized") if isinstance(summary, t.Mapping) else None
    return list(found) if isinstance(found, list) else []


def canary_failed(options: t.Mapping[str, t.Any], canary: t.Mapping[str, t.Any]) -> bool:
    """The canary ran, failed against the host's baseline, and a failed canary fails the host
    (``canary_on_fail: fail``) rather than only warning."""
    judged = canary.get("canary")
    verdict = judged.get("verdict") if isinstance(judged, t.Mapping) else None
    return bool(options.get("canary")) and options.get("canary_on_fail", "fail") == "fail" and verdict == "fail"


def start_outcome(
    options: t.Mapping[str, t.Any],
    failure: t.Any,
    wait: t.Mapping[str, t.Any],
    smoke: t.Mapping[str, t.Any],
    history: t.Mapping[str, t.Any],
    canary: t.Mapping[str, t.Any],
) -> dict[str, bool]:
    """What became of the new start: ``start_failed`` (a step failed, the wait failed or the smoke test
    generated nothing), ``new_start_failed`` (that, or a line group new since the last good starts
    with ``fail_on_new``), ``canary_failed``. A wait that did not run fails nothing by itself."""
    smoke_bad = smoke_failed(options, smoke)
    start_bad = failure is not None or wait.get("verdict", "pass") == "fail" or smoke_bad
    return {
        "smoke_failed": smoke_bad,
        "start_failed": start_bad,
        "new_start_failed": start_bad or bool(new_lines(options, history)),
        "canary_failed": canary_failed(options, canary),
    }


def rollback_passed(failure: t.Any, wait: t.Mapping[str, t.Any]) -> bool:
    """The rollback's own start passed its wait, and nothing in the rollback failed."""
    return failure is None and wait.get("verdict") == "pass"


def rollback_settled_step(passed: bool, stopped: bool) -> str:
    """Where the run record stands after a rollback: the previous configuration serves again (or the
    unit was never stopped), or the rollback failed."""
    return "rolled_back" if passed or not stopped else "rollback_failed"


def after_restart(observed: t.Mapping[str, t.Any], seen: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The rollout's observation (``decide``'s input) once the restart phase ran, from what the phase saw
    (``seen``): its failed step, whether it stopped the unit, what its start and its canary came to."""
    outcome = seen.get("outcome") or {}
    failed = bool(observed.get("failed")) or isinstance(seen.get("failure"), t.Mapping)
    return {
        **observed,
        "held_elsewhere": observed.get("held_elsewhere") or held_elsewhere(seen.get("failure")),
        "failed": failed,
        "stopped": bool(seen.get("stopped")),
        "new_start_failed": failed or bool(outcome.get("new_start_failed")),
        "canary_failed": bool(outcome.get("canary_failed")),
        "verified": (seen.get("wait") or {}).get("verdict") == "pass",
    }


def after_rollback(observed: t.Mapping[str, t.Any], rolled_back: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The observation once the rollback ran: whether it started the previous configuration, and whether that passed."""
    return {**observed, "rollback_restarted": rolled_back.get("started_at") is not None, "rollback_passed": bool(rolled_back.get("passed"))}
