"""The rollout's decisions (plugin_utils/_rollout.py) and its run record (module_utils/_run_record.py):
every kill point of a deploy with drain, replayed as the record the killed run left and what the host
shows, and the decision the next run takes from it."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils import _run_record
from ansible_collections.inferops.runbooks.plugins.plugin_utils import _rollout

UNIT = "sglang.service"
DROPIN = "/etc/systemd/system/sglang.service.d/50-inferops-deploy.conf"
OLD = "[Service]\nEnvironment=SIM_MODEL=/models/old\n"
NEW = "[Service]\nEnvironment=SIM_MODEL=/models/new\n"
WORKER = {"url": "http://10.0.0.5:30000", "priority": 50, "api_key": "sk-secret"}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# the steps in the order the phases write them (prepare: deploy, drain; restart: restart, wait, smoke,
# passed, rollback; settle: restore): the change is written before the host leaves the rotation
ORDER = ["deploy", "drain", "restart", "wait", "smoke", "passed", "rollback", "rollback_wait", "rolled_back", "restore"]


def killed_at(step: str) -> dict[str, Any]:
    """The record a run leaves when it is killed right after writing ``step``."""
    change = {"files": [{"path": DROPIN, "kind": "drop-in", "existed": True, "previous_sha256": sha(OLD), "new_sha256": sha(NEW)}], "proven": False}
    updates: dict[str, dict[str, Any]] = {
        "deploy": {"change": change},
        "drain": {"traffic": {"out": True, "router_url": "http://router:8080", "worker": WORKER, "hooks": False}},
        "restart": {"before_invocation": "inv-old"},
        "passed": {"change_flags": {"proven": True}},
        "rolled_back": {"change_flags": {"settled": True}},
    }
    rolling_back = step in ("rollback", "rollback_wait", "rolled_back")
    record = None
    for index, taken in enumerate(ORDER[: ORDER.index(step) + 1]):
        if taken in ("smoke", "passed") and rolling_back:
            continue  # a change rolled back never passed
        record = _run_record.advance(record, UNIT, "run-1", taken, updates.get(taken, {}), now=index + 1)
    assert record is not None and record["step"] == step
    return record


def host(content: str | None, backup: str | None = OLD) -> dict[str, dict[str, Any]]:
    return {DROPIN: {"sha256": sha(content) if content is not None else None, "previous_sha256": sha(backup) if backup is not None else None}}


def unit(active: str = "active", invocation: str = "inv-old") -> dict[str, Any]:
    return {"ActiveState": active, "InvocationID": invocation}


REQUESTED = [{"path": DROPIN, "new_sha256": sha(NEW)}]


def test_no_record_and_a_settled_record_repair_nothing() -> None:
    assert not _rollout.reconcile(None, None, {}, unit(), REQUESTED)["pending"]
    done = _run_record.advance(killed_at("restore"), UNIT, "run-1", "done", {"traffic": {"out": False}})
    plan = _rollout.reconcile(done, None, host(NEW), unit(), REQUESTED)
    assert not plan["pending"] and not plan["out_of_rotation"] and plan["repairs"] == []


def test_killed_after_the_drain_record_the_host_goes_back_once_it_serves() -> None:
    plan = _rollout.reconcile(killed_at("drain"), None, host(NEW), unit(), REQUESTED)
    assert plan["pending"] and plan["out_of_rotation"]
    assert plan["worker"] == {"url": WORKER["url"], "priority": 50}, "never the API key"
    assert plan["router_url"] == "http://router:8080"
    assert plan["unproven"] == [{"path": DROPIN, "existed": True}], "the files were written before the drain"
    assert not plan["inflight"]


@pytest.mark.parametrize("written", [True, False])
def test_killed_while_the_files_were_written(written: bool) -> None:
    """A file written is an unproven change (its backup kept, its start still to pass); a file not
    yet written is this run's own change again. The host is still in rotation."""
    plan = _rollout.reconcile(killed_at("deploy"), None, host(NEW if written else OLD), unit(), REQUESTED)
    assert plan["unproven"] == ([{"path": DROPIN, "existed": True}] if written else [])
    assert not plan["inflight"] and plan["foreign"] == [] and not plan["out_of_rotation"]


def test_killed_during_the_smoke_test_the_start_is_waited_on_and_tested_again() -> None:
    plan = _rollout.reconcile(killed_at("smoke"), None, host(NEW), unit("active", "inv-new"), REQUESTED)
    assert plan["inflight"] and plan["out_of_rotation"] and plan["unproven"]


def test_killed_after_the_stop_the_unit_is_started_not_waited_on() -> None:
    for state in (unit("inactive", "inv-old"), unit("failed", "inv-old")):
        plan = _rollout.reconcile(killed_at("restart"), None, host(NEW), state, REQUESTED)
        assert plan["unproven"] and not plan["inflight"]


def test_killed_during_the_wait_the_start_in_progress_is_waited_on() -> None:
    plan = _rollout.reconcile(killed_at("wait"), None, host(NEW), unit("active", "inv-new"), REQUESTED)
    assert plan["inflight"] and plan["before_invocation"] == "inv-old"
    assert any("still in progress" in repair for repair in plan["repairs"])


def test_a_start_in_progress_of_another_change_is_not_taken_for_this_runs() -> None:
    other = [{"path": DROPIN, "new_sha256": sha("[Service]\nEnvironment=SIM_MODEL=/models/third\n")}]
    plan = _rollout.reconcile(killed_at("wait"), None, host(NEW), unit("active", "inv-new"), other)
    assert not plan["inflight"] and plan["unproven"], "the unproven change keeps its backup, this run restarts"


def test_a_crashed_start_in_progress_is_restarted_not_waited_on() -> None:
    plan = _rollout.reconcile(killed_at("wait"), None, host(NEW), unit("failed", "inv-new"), REQUESTED)
    assert not plan["inflight"] and plan["unproven"]


def test_killed_after_the_pass_only_the_rotation_is_left() -> None:
    plan = _rollout.reconcile(killed_at("passed"), None, host(NEW), unit("active", "inv-new"), REQUESTED)
    assert plan["out_of_rotation"] and plan["unproven"] == [] and not plan["inflight"]


def test_killed_during_a_rollback_it_is_completed_from_the_backup() -> None:
    plan = _rollout.reconcile(killed_at("rollback"), None, host(NEW), unit("failed", "inv-new"), REQUESTED)
    assert plan["restore_files"] == [{"path": DROPIN, "existed": True, "backup_intact": True}]
    damaged = _rollout.reconcile(killed_at("rollback"), None, host(NEW, backup="something else\n"), unit(), REQUESTED)
    assert damaged["restore_files"] == [{"path": DROPIN, "existed": True, "backup_intact": False}]
    # the files already put back: nothing left to restore
    restored = _rollout.reconcile(killed_at("rollback_wait"), None, host(OLD), unit("activating", "inv-3"), REQUESTED)
    assert restored["restore_files"] == [] and restored["out_of_rotation"] and not restored["inflight"]


def test_killed_after_a_rollback_passed_only_the_rotation_is_left() -> None:
    plan = _rollout.reconcile(killed_at("rolled_back"), None, host(OLD), unit("active", "inv-3"), REQUESTED)
    assert plan["out_of_rotation"] and plan["unproven"] == [] and plan["restore_files"] == []


def test_a_file_changed_by_someone_else_is_left_alone() -> None:
    plan = _rollout.reconcile(killed_at("wait"), None, host("edited by hand\n"), unit("active", "inv-new"), REQUESTED)
    assert plan["foreign"] == [DROPIN] and plan["unproven"] == [] and not plan["inflight"]


# -- decide -----------------------------------------------------------------------------------


def test_a_plain_restart_that_passes() -> None:
    decision = _rollout.decide({"stopped": True, "new_start_failed": False})
    assert decision["restart_needed"] and decision["serving"] and decision["state"] == "restarted"
    assert not decision["restore_wanted"] and not decision["rollback_wanted"]


def test_a_change_already_in_place_is_verified_not_passed_blindly() -> None:
    observed = {"change_requested": True, "change_pending": False, "unit_active": True, "out_of_rotation": True}
    unhealthy = _rollout.decide({**observed, "verified": False, "new_start_failed": True})
    assert unhealthy["verify_in_place"] and not unhealthy["restart_needed"]
    assert not unhealthy["serving"] and not unhealthy["restore_wanted"] and unhealthy["state"] == "unchanged"
    healthy = _rollout.decide({**observed, "verified": True})
    assert healthy["serving"] and healthy["restore_wanted"]
    # in place but nothing runs it: started
    assert _rollout.decide({**observed, "unit_active": False})["restart_needed"]


def test_a_failed_new_start_is_rolled_back_and_stays_out_until_the_rollback_passes() -> None:
    failed = {"change_requested": True, "change_pending": True, "deploy_applied": True, "stopped": True, "new_start_failed": True, "out_of_rotation": True}
    decision = _rollout.decide(failed)
    assert decision["rollback_wanted"] and not decision["serving"] and not decision["restore_wanted"]
    assert decision["state"] == "rollback_failed"
    rolled_back = _rollout.decide({**failed, "rollback_restarted": True, "rollback_passed": True})
    assert rolled_back["serving"] and rolled_back["restore_wanted"] and rolled_back["state"] == "rolled_back"
    no_rollback = _rollout.decide({**failed, "rollback_enabled": False})
    assert not no_rollback["rollback_wanted"] and no_rollback["state"] == "failed" and not no_rollback["restore_wanted"]


def test_a_start_waited_on_for_an_earlier_run_counts_as_this_runs_start() -> None:
    observed = {"change_requested": True, "change_pending": True, "deploy_applied": True, "inflight": True, "out_of_rotation": True}
    assert _rollout.decide({**observed, "new_start_failed": False})["restore_wanted"]
    failed = _rollout.decide({**observed, "new_start_failed": True})
    assert failed["rollback_wanted"] and not failed["serving"] and failed["state"] == "rollback_failed"


def test_a_failure_before_the_stop_serves_the_old_start_unless_it_runs_an_unproven_change() -> None:
    before_stop = {"failed": True, "change_requested": True, "change_pending": True, "deploy_applied": True, "out_of_rotation": True}
    decision = _rollout.decide(before_stop)
    assert decision["state"] == "not_restarted" and decision["serving"] and decision["restore_wanted"]
    assert not _rollout.decide({**before_stop, "unproven_in_place": True})["restore_wanted"]


def test_a_change_whose_canary_failed_is_rolled_back_as_a_performance_regression() -> None:
    slow = {"change_requested": True, "change_pending": True, "deploy_applied": True, "stopped": True, "out_of_rotation": True}
    slow = {**slow, "new_start_failed": False, "canary_failed": True}
    decision = _rollout.decide(slow)
    assert decision["rollback_wanted"] and decision["rollback_reason"] == "performance_regression"
    # healthy but slower: not back into rotation until the previous configuration passed again
    assert not decision["serving"] and not decision["restore_wanted"] and decision["state"] == "rollback_failed"
    rolled_back = _rollout.decide({**slow, "rollback_restarted": True, "rollback_passed": True})
    assert rolled_back["serving"] and rolled_back["restore_wanted"] and rolled_back["state"] == "rolled_back"
    # a start that failed its gates is a failed start, whatever its canary said
    assert _rollout.decide({**slow, "new_start_failed": True})["rollback_reason"] == "start_failed"
    assert _rollout.decide({**slow, "canary_failed": False})["rollback_reason"] is None
    # told not to roll back: the slower change stays and serves (the host still fails, in the report)
    kept = _rollout.decide({**slow, "rollback_enabled": False})
    assert not kept["rollback_wanted"] and kept["serving"] and kept["restore_wanted"] and kept["state"] == "new_configuration"


def test_a_plain_restart_whose_canary_failed_has_nothing_to_roll_back_and_still_serves() -> None:
    decision = _rollout.decide({"stopped": True, "new_start_failed": False, "canary_failed": True, "out_of_rotation": True})
    assert not decision["rollback_wanted"] and decision["rollback_reason"] is None
    assert decision["serving"] and decision["restore_wanted"] and decision["state"] == "restarted"


def test_the_restart_phase_adds_what_it_saw_and_the_rollback_what_it_came_to() -> None:
    before = {"change_requested": True, "change_pending": True, "deploy_applied": True, "out_of_rotation": True, "failed": False}
    crashed = _rollout.after_restart(before, {"stopped": True, "wait": {"verdict": "fail"}, "outcome": {"new_start_failed": True, "canary_failed": False}})
    assert (crashed["stopped"], crashed["new_start_failed"], crashed["verified"], crashed["failed"]) == (True, True, False, False)
    assert _rollout.decide(crashed)["rollback_wanted"]
    rolled = _rollout.after_rollback(crashed, {"started_at": 1796313384.2, "passed": True})
    assert _rollout.decide(rolled)["state"] == "rolled_back" and _rollout.decide(rolled)["restore_wanted"]
    not_started = _rollout.after_rollback(crashed, {"started_at": None, "passed": False})
    assert _rollout.decide(not_started)["state"] == "rollback_failed"
    # a failed step of the phase, or one kept before it, fails the new start; a kept failure stopped nothing
    step_failed = _rollout.after_restart(before, {"stopped": True, "failure": {"step": "Restart | Stop the unit"}})
    assert step_failed["failed"] and step_failed["new_start_failed"]
    kept = _rollout.after_restart({**before, "failed": True}, {"stopped": False})
    assert kept["new_start_failed"] and _rollout.decide(kept)["state"] == "not_restarted" and _rollout.decide(kept)["rollback_wanted"]
    passed = _rollout.after_restart(before, {"stopped": True, "wait": {"verdict": "pass"}, "outcome": {"new_start_failed": False, "canary_failed": False}})
    assert _rollout.decide(passed)["state"] == "new_configuration" and not _rollout.decide(passed)["rollback_wanted"]


def test_check_mode_decides_nothing() -> None:
    decision = _rollout.decide({"check_mode": True, "change_requested": True, "change_pending": True, "out_of_rotation": True})
    assert decision["state"] == "check_mode" and not decision["restore_wanted"] and not decision["rollback_wanted"]
    assert not decision["record_wanted"]


@pytest.mark.parametrize(
    ("observed", "wanted"),
    [
        ({"stopped": True}, False),  # a plain restart without a router keeps no record
        ({"stopped": True, "traffic_managed": True}, True),
        ({"change_requested": True}, True),
        ({"stopped": True, "repairs_pending": True}, True),
    ],
)
def test_a_record_is_kept_when_the_run_can_leave_something_to_undo(observed: dict[str, Any], wanted: bool) -> None:
    assert _rollout.decide(observed)["record_wanted"] is wanted


def test_where_the_record_settles() -> None:
    passed = {"change_requested": True, "change_pending": True, "deploy_applied": True, "stopped": True, "out_of_rotation": True}
    assert _rollout.decide(passed)["settled_step"] == "done"
    assert _rollout.decide({**passed, "restore_failed": True})["settled_step"] == "restore", "serving but still out of rotation"
    failed = {**passed, "new_start_failed": True}
    assert _rollout.decide(failed)["settled_step"] == "rollback_failed"
    assert _rollout.decide({**failed, "rollback_enabled": False})["settled_step"] == "failed"
    assert _rollout.decide({**failed, "rollback_restarted": True, "rollback_passed": True})["settled_step"] == "done"
    assert _rollout.decide({"stopped": True})["settled_step"] == "done", "in rotation all along"


def test_a_rollback_cut_short_forces_the_restart_even_with_the_change_in_place() -> None:
    in_place = {"change_requested": True, "change_pending": False, "unit_active": True}
    assert not _rollout.decide(in_place)["restart_needed"]
    assert _rollout.decide({**in_place, "rollback_unfinished": True})["restart_needed"]


def replay(step: str, files: dict[str, dict[str, Any]], state: dict[str, Any], start_fails: bool) -> dict[str, Any]:
    """The next run after a kill at ``step``: its plan from the record, then its decision once its own
    start (or the start it waited on) passed or failed, as the role's vars gather them."""
    plan = _rollout.reconcile(killed_at(step), None, files, state, REQUESTED)
    if plan["restore_files"]:
        files = host(OLD)  # reconcile_rollback.yml puts the previous files back first
    pending = files[DROPIN]["sha256"] != sha(NEW) or bool(plan["unproven"])
    observed = {
        "change_requested": True,
        "change_pending": pending,
        "rollback_unfinished": bool(plan["restore_files"]),
        "inflight": plan["inflight"],
        "unit_active": state["ActiveState"] == "active",
        "deploy_applied": pending,
        "stopped": pending or bool(plan["restore_files"]),
        "out_of_rotation": plan["out_of_rotation"],
        "traffic_managed": True,
        "repairs_pending": plan["pending"],
        "unproven_in_place": bool(plan["unproven"]),
    }
    decision = _rollout.decide(observed)
    if decision["verify_in_place"]:
        observed["verified"] = not start_fails
    observed["new_start_failed"] = start_fails
    if start_fails and _rollout.decide(observed)["rollback_wanted"]:
        observed.update(rollback_restarted=True, rollback_passed=True)
    return {"plan": plan, **_rollout.decide(observed)}


KILL_POINTS = [
    ("deploy", host(NEW), unit()),
    ("deploy", host(OLD), unit()),
    ("drain", host(NEW), unit()),
    ("restart", host(NEW), unit("inactive")),
    ("wait", host(NEW), unit("activating", "inv-new")),
    ("wait", host(NEW), unit("failed", "inv-new")),
    ("smoke", host(NEW), unit("active", "inv-new")),
    ("passed", host(NEW), unit("active", "inv-new")),
    ("rollback", host(NEW), unit("failed", "inv-new")),
    ("rollback_wait", host(OLD), unit("activating", "inv-3")),
    ("rolled_back", host(OLD), unit("active", "inv-3")),
    ("restore", host(NEW), unit("active", "inv-new")),
]
# a crashing configuration at every point but those after its start passed
REPLAYS = [(*point, fails) for point in KILL_POINTS for fails in (False, True) if not (fails and point[0] in ("passed", "restore"))]


REPLAY_IDS = [f"{case[0]}-{case[2]['ActiveState']}-{'crashing' if case[3] else 'good'}" for case in REPLAYS]


@pytest.mark.parametrize(("step", "files", "state", "start_fails"), REPLAYS, ids=REPLAY_IDS)
def test_every_kill_point_ends_serving_in_rotation_with_the_record_settled(
    step: str, files: dict[str, dict[str, Any]], state: dict[str, Any], start_fails: bool
) -> None:
    """Whatever step the earlier run died at, the next run ends with the host serving a configuration that
    passed, back in rotation if it was taken out, and its record settled (done): never left drained."""
    outcome = replay(step, files, state, start_fails)
    assert outcome["serving"], outcome
    assert outcome["restore_wanted"] or not outcome["plan"]["out_of_rotation"], outcome
    assert outcome["settled_step"] == "done", outcome
    assert outcome["record_wanted"]
    expected = {"rolled_back"} if start_fails else {"new_configuration", "unchanged"}
    assert outcome["state"] in expected, outcome


# -- the record itself ------------------------------------------------------------------------


def test_the_record_keeps_no_secret_and_carries_pending_work_over(tmp_path: Path) -> None:
    record = killed_at("wait")
    assert "sk-secret" not in json.dumps(record)
    path = _run_record.record_path(UNIT, str(tmp_path))
    _run_record.write(path, record)
    loaded, problem = _run_record.read(path, UNIT)
    assert problem is None and loaded == record
    # the next run takes it over: the host stays out of rotation and the change unproven until settled
    taken_over = _run_record.advance(loaded, UNIT, "run-2", "wait", now=9)
    assert taken_over["traffic"]["out"] and taken_over["change"]["proven"] is False
    assert taken_over["history"][-1] == {"run_id": "run-2", "took_over_at": "wait"}
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".record-")]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "not JSON"),
        ("[]", "not a JSON object"),
        ('{"unit": "sglang.service", "step": "wait"}', "no version number"),
        ('{"version": 99, "unit": "sglang.service", "step": "wait"}', "newer collection"),
        ('{"version": 1, "unit": "vllm.service", "step": "wait"}', "another unit"),
        ('{"version": 1, "unit": "sglang.service", "step": "teleport"}', "unknown step"),
        ('{"version": 1, "unit": "sglang.service", "step": "wait", "change": {"files": "all"}}', "change.files"),
    ],
)
def test_a_corrupt_foreign_or_newer_record_is_reported_and_ignored(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "sglang.service.json"
    path.write_text(text)
    record, said = _run_record.read(str(path), UNIT)
    assert record is None and said and problem in said and str(path) in said
    plan = _rollout.reconcile(record, said, {}, unit(), REQUESTED)
    assert not plan["pending"] and plan["problem"] == said
    # advancing starts a new record over it
    assert _run_record.advance(record, UNIT, "run-2", "drain")["history"] == [{"run_id": "run-2", "took_over_at": None}]


def test_a_bad_step_or_field_or_unit_is_refused() -> None:
    with pytest.raises(_run_record.RecordError, match="unknown step"):
        _run_record.advance(None, UNIT, "run-1", "teleport")
    with pytest.raises(_run_record.RecordError, match="no field"):
        _run_record.advance(None, UNIT, "run-1", "drain", {"content": "x"})
    with pytest.raises(_run_record.RecordError, match="cannot name"):
        _run_record.record_path("../etc/passwd")


def test_change_entries_keep_an_earlier_runs_backup() -> None:
    files = [{"path": DROPIN, "kind": "drop-in", "existed": True, "previous": NEW, "content": NEW}]
    plain = _rollout.change_entries(files, host(NEW), [])
    assert plain[0]["previous_sha256"] == sha(NEW)
    kept = _rollout.change_entries(files, host(NEW, backup=OLD), [{"path": DROPIN, "existed": True}])
    assert kept[0]["previous_sha256"] == sha(OLD) and kept[0]["new_sha256"] == sha(NEW)
    assert "content" not in kept[0] and "previous" not in kept[0]


def test_change_flags_mark_the_change_the_host_holds_and_keep_its_files() -> None:
    record = killed_at("wait")
    proven = _run_record.advance(record, UNIT, "run-1", "passed", {"change_flags": {"proven": True}})
    assert proven["change"]["proven"] is True and proven["change"]["files"] == record["change"]["files"]
    # no change in the record: nothing to mark, nothing invented
    assert _run_record.advance(None, UNIT, "run-1", "passed", {"change_flags": {"proven": True}})["change"] is None
