"""The rollout's side of the host's lease (plugin_utils/_host_lease.py): a second run waits for the
lease, bounded, naming the holder, then refuses; a lease whose controller process is gone is taken
over at once; the decisions of a run that does not hold the host (plugin_utils/_rollout.decide) touch
nothing; and settle's last word on the host (plugin_utils/_settle_phase.py) finds what contradicts the verdict."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.plugin_utils import _host_lease, _rollout
from ansible_collections.inferops.runbooks.plugins.plugin_utils import _settle_phase as settle
from ansible_collections.inferops.runbooks.plugins.plugin_utils._phase import StepFailed

HOLDER = "run 20261204T180000Z-1 from ops@bastion, since 2026-12-04 18:00:00 UTC, last heartbeat 3 s ago"


class Steps:
    """Answers the run_lease calls from a list, and keeps what was asked."""

    def __init__(self, answers: list[dict[str, Any]]) -> None:
        self.answers = answers
        self.asked: list[dict[str, Any]] = []

    def module(self, stage: str, step: str, name: str, args: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.asked.append(dict(args))
        return self.answers.pop(0)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_held_host_is_waited_for_then_refused_naming_the_holder() -> None:
    held = {"outcome": "held", "holder": HOLDER, "lease": {"run_id": "other", "controller": "elsewhere"}}
    steps, clock, said = Steps([dict(held) for _try in range(10)]), Clock(), []
    lease = _host_lease.HostLease(steps, "sglang.service", "mine")  # type: ignore[arg-type]
    with pytest.raises(StepFailed) as refused:
        lease.take({}, 600, 12, said.append, "sim1", clock, clock.sleep)
    result = refused.value.failure["result"]
    assert refused.value.failure["stage"] == "lease" and result["reason"] == "host_held"
    assert HOLDER in result["msg"] and "after waiting 12 s" in result["msg"] and "nothing was touched" in result["msg"]
    assert said and all(HOLDER in line and line.startswith("sim1: waiting for the host's lease") for line in said)
    assert _rollout.held_elsewhere(refused.value.failure) == "host_held"


def test_without_a_wait_a_held_host_is_refused_at_once() -> None:
    steps = Steps([{"outcome": "held", "holder": HOLDER, "lease": {}}])
    with pytest.raises(StepFailed, match="Refused, nothing was touched"):
        _host_lease.HostLease(steps, "sglang.service", "mine").take({}, 600, 0, print, "sim1")  # type: ignore[arg-type]
    assert len(steps.asked) == 1


def test_the_lease_of_a_dead_process_of_this_controller_is_taken_over_at_once() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = {"outcome": "held", "holder": HOLDER, "lease": {"controller": socket.gethostname(), "pid": gone.pid}}
    steps, said = Steps([dead, {"outcome": "taken_over", "previous_holder": HOLDER}]), []
    taken = _host_lease.HostLease(steps, "sglang.service", "mine").take({}, 600, 0, said.append, "sim1")  # type: ignore[arg-type]
    assert taken["outcome"] == "taken_over" and steps.asked[-1]["stale_after"] == 0.0
    assert not _host_lease.dead_here({"controller": socket.gethostname(), "pid": os.getpid()})
    assert not _host_lease.dead_here({"controller": "another-controller", "pid": gone.pid})


def test_a_lost_lease_stops_the_run_with_who_holds_it_now() -> None:
    steps = Steps([{"held": False, "holder": HOLDER}])
    with pytest.raises(StepFailed) as lost:
        _host_lease.HostLease(steps, "sglang.service", "mine").renew()  # type: ignore[arg-type]
    assert _rollout.held_elsewhere(lost.value.failure) == "lease_lost"
    assert lost.value.failure["result"]["msg"].startswith("changed by someone else during this run") and HOLDER in lost.value.failure["result"]["msg"]


@pytest.mark.parametrize(("held", "state"), [("host_held", "held_elsewhere"), ("lease_lost", "changed_elsewhere")])
def test_a_run_that_does_not_hold_the_host_touches_nothing(held: str, state: str) -> None:
    observed = {"held_elsewhere": held, "failed": True, "deploy_applied": True, "new_start_failed": True, "out_of_rotation": True, "change_requested": True}
    decision = _rollout.decide(observed)
    assert decision["state"] == state
    assert not any(decision[key] for key in ("restart_needed", "rollback_wanted", "restore_wanted", "record_wanted", "serving"))


def test_a_failure_of_another_stage_is_not_a_lease_of_another_run() -> None:
    assert _rollout.held_elsewhere({"stage": "lease", "result": {"msg": "cannot lock"}}) is None
    assert _rollout.held_elsewhere({"stage": "wait", "result": {"reason": "lease_lost"}}) is None


CHANGED = [{"path": "/etc/systemd/system/sglang.service.d/50-inferops-deploy.conf", "content": "NEW", "previous": "OLD", "existed": True}]
SEEN = {"wait": {"invocation_id": "a" * 32}, "rollback": {"wait": {"invocation_id": "b" * 32}}}


def test_a_passed_deploy_must_find_its_start_and_its_files() -> None:
    expected = settle.expected_end("new_configuration", SEEN, CHANGED)
    assert expected is not None
    path = CHANGED[0]["path"]
    new = {path: {"sha256": _rollout.content_sha256("NEW")}}
    assert settle.contradictions(expected, {"ActiveState": "active", "InvocationID": "a" * 32}, new) == []
    found = settle.contradictions(expected, {"ActiveState": "active", "InvocationID": "c" * 32}, {path: {"sha256": _rollout.content_sha256("OLD")}})
    assert found == [f"the unit runs invocation {'c' * 32}, not {'a' * 32} that this run judged", f"{path} is not what this run left (other content)"]


def test_a_rollback_must_find_the_previous_files_and_a_stopped_unit_is_said() -> None:
    expected = settle.expected_end("rolled_back", SEEN, CHANGED)
    assert expected is not None and expected["invocation_id"] == "b" * 32
    assert settle.contradictions(expected, {"ActiveState": "inactive", "SubState": "dead"}, {}) == ["the unit is inactive (dead)"]
    assert settle.expected_end("rollback_failed", SEEN, CHANGED) is None


def test_between_the_steps_of_a_phase_a_fresh_heartbeat_is_not_renewed_again() -> None:
    clock, steps = Clock(), Steps([{"held": True}] * 4)
    lease = _host_lease.HostLease(steps, "sglang.service", "mine", clock=clock)  # type: ignore[arg-type]
    lease.renew_when_due()
    clock.sleep(_host_lease.RENEW_AFTER - 0.1)
    lease.renew_when_due()
    assert len(steps.asked) == 1
    clock.sleep(0.1)
    lease.renew_when_due()
    lease.renew()  # asked for outright (after the wait, before a rollback): always sent
    assert [args["action"] for args in steps.asked] == ["renew"] * 3


def test_a_short_stale_limit_shortens_the_time_a_heartbeat_is_not_renewed_again() -> None:
    clock, steps = Clock(), Steps([{"held": True}] * 2)
    lease = _host_lease.HostLease(steps, "sglang.service", "mine", stale_after=2.0, clock=clock)  # type: ignore[arg-type]
    lease.renew_when_due()
    clock.sleep(0.5)
    lease.renew_when_due()
    assert len(steps.asked) == 2


def test_a_renewal_by_another_part_of_the_run_counts_and_an_old_or_odd_one_does_not() -> None:
    """The prepare phase's take and the wait's looks renew the heartbeat too: the phase after them does
    not renew it again within renew_after; a renewal older than that, from the future or not a time is
    no reason to skip one."""
    clock, steps = Clock(), Steps([{"held": True}] * 5)
    lease = _host_lease.HostLease(steps, "sglang.service", "mine", clock=clock)  # type: ignore[arg-type]
    lease.renewed_before(time.time() - 1.0)
    lease.renew_when_due()
    assert steps.asked == []
    assert lease.renewed_wall_clock() == pytest.approx(time.time() - 1.0, abs=0.5)
    for odd in (time.time() - 60, time.time() + 60, "soon", True, None):
        fresh = _host_lease.HostLease(steps, "sglang.service", "mine", clock=clock)  # type: ignore[arg-type]
        fresh.renewed_before(odd)
        fresh.renew_when_due()
    assert len(steps.asked) == 5 and lease.renewed_wall_clock() is not None
    assert _host_lease.HostLease(steps, "sglang.service", "mine").renewed_wall_clock() is None  # type: ignore[arg-type]
