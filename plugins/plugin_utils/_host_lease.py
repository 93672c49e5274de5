# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rollout's side of the host's lease (``module_utils/_lease`` on the host): who this run is, taking
the lease before anything changes (or waiting for it, bounded), renewing it between steps, releasing it
at the end; and what a run says when another run holds the host.

Private to the collection; may change at any time. Controller side.
"""

from __future__ import annotations

import getpass
import os
import socket
import time
import typing as t

from ansible_collections.inferops.runbooks.plugins.plugin_utils._phase import Result, StepFailed, Steps

MODULE = "inferops.runbooks.run_lease"
STAGE = "lease"
TAKE = "Lease | Take the host's lease before anything changes"
RENEW = "Lease | Renew the host's lease"
RELEASE = "Lease | Release the host's lease"
# outcomes of a take after which this run holds the host
HOLDING = ("taken", "renewed", "taken_over")
# seconds between two tries while waiting for another run's lease
RETRY = 5.0
# between the steps of one phase, a heartbeat younger than this (or than a quarter of lock_stale, when
# that is less) is not renewed again: it cannot have gone stale, and each renewal is a round trip to the host
RENEW_AFTER = 5.0


def holder(task_vars: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """This run as the lease names it to a second run: the controller, its ansible-playbook process
    (the parent of the worker that runs the phase), the user, the AWX job, the play."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return {
        "controller": socket.gethostname(),
        "pid": os.getppid(),
        "user": user,
        "awx_job_id": task_vars.get("awx_job_id") or task_vars.get("tower_job_id"),
        "playbook": str(task_vars.get("ansible_play_name") or ""),
    }


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists, owned by someone else
    return True


def dead_here(lease: t.Any) -> bool:
    """A lease taken by a run on this controller whose ansible-playbook process is gone (killed,
    cancelled): abandoned now, whatever the age of its heartbeat."""
    if not isinstance(lease, t.Mapping) or lease.get("controller") != socket.gethostname():
        return False
    pid = lease.get("pid")
    return isinstance(pid, int) and not isinstance(pid, bool) and pid > 1 and not process_alive(pid)


def held_message(host: str, unit: str, holder_text: str, waited: float) -> str:
    waited_text = f" after waiting {waited:.0f} s for it" if waited >= 1 else ""
    return (
        f"{host} {unit} is held by another run: {holder_text}. Refused{waited_text}, nothing was touched"
        " (sglang_restart_lock_wait waits for it; a lease silent for sglang_restart_lock_stale seconds is taken over)."
    )


def lost_message(holder_text: str | None) -> str:
    return (
        f"changed by someone else during this run: the host's lease is now held by {holder_text or 'nobody (the lease was removed)'};"
        " this run touched nothing more once it saw that"
    )


def waiting_line(host: str, holder_text: str, waited: float, limit: float) -> str:
    return f"{host}: waiting for the host's lease, held by {holder_text}: {waited:.0f}s of {limit:.0f}s"


class HostLease:
    """The lease of one host's unit for one run, through the run_lease call."""

    def __init__(self, steps: Steps, unit: str, run_id: str, stale_after: float = float("inf"), clock: t.Callable[[], float] = time.monotonic) -> None:
        self.steps = steps
        self.unit = unit
        self.run_id = run_id
        self.renew_after = min(RENEW_AFTER, stale_after / 4)
        self.clock = clock
        self.renewed_at: float | None = None

    def _call(self, step: str, action: str, **more: t.Any) -> Result:
        return self.steps.module(STAGE, step, MODULE, {"unit": self.unit, "action": action, "run_id": self.run_id, **more})

    def read(self) -> Result:
        return self.steps.module(STAGE, "Lease | Read the host's lease", MODULE, {"unit": self.unit, "action": "read"}, always=True)

    def take(
        self,
        who: t.Mapping[str, t.Any],
        stale_after: float,
        wait_for: float,
        say: t.Callable[[str], None],
        host: str,
        clock: t.Callable[[], float] = time.monotonic,
        sleep: t.Callable[[float], None] = time.sleep,
    ) -> Result:
        """The lease taken for this run (``outcome`` in HOLDING); StepFailed with reason ``host_held``
        naming the holder when another live run keeps it past ``wait_for`` seconds."""
        started = clock()
        why = "stopped renewing it"
        while True:
            taken = self._call(TAKE, "acquire", holder=dict(who), stale_after=stale_after)
            if taken.get("outcome") in HOLDING:
                if taken.get("outcome") == "taken_over":
                    taken["taken_over_from"] = f"a run that {why} ({taken.get('previous_holder')})"
                    say(f"{host}: took over the lease of {taken['taken_over_from']}: what it left is repaired")
                return taken
            if dead_here(taken.get("lease")):
                why, stale_after = "ran on this controller and whose process is gone", 0.0
                continue
            waited = clock() - started
            holder_text = str(taken.get("holder") or "another run")
            if waited >= wait_for:
                msg = held_message(host, self.unit, holder_text, waited)
                raise StepFailed(STAGE, TAKE, {"failed": True, "changed": False, "reason": "host_held", "msg": msg, "holder": taken.get("lease")})
            say(waiting_line(host, holder_text, waited, wait_for))
            sleep(min(RETRY, max(wait_for - waited, 0.1)))

    def renew(self, stage: str = STAGE) -> Result:
        """The heartbeat renewed; StepFailed with reason ``lease_lost`` when another run holds the host now."""
        renewed = self._call(RENEW, "renew")
        if not renewed.get("held"):
            raise StepFailed(stage, RENEW, {"failed": True, "changed": False, "reason": "lease_lost", "msg": lost_message(renewed.get("holder"))})
        self.renewed_at = self.clock()
        return renewed

    def renew_when_due(self, stage: str = STAGE) -> None:
        """``renew`` between the steps of a phase: the first time, then once ``renew_after`` has passed."""
        if self.renewed_at is None or self.clock() - self.renewed_at >= self.renew_after:
            self.renew(stage)

    def renewed_before(self, at: t.Any) -> None:
        """The heartbeat renewed at ``at`` (epoch seconds) by another part of this run: the prepare
        phase's take, the wait's looks; ``renew_when_due`` counts from the latest renewal."""
        if not isinstance(at, (int, float)) or isinstance(at, bool):
            return
        age = time.time() - float(at)
        if age < 0:
            return
        renewed = self.clock() - age
        if self.renewed_at is None or renewed > self.renewed_at:
            self.renewed_at = renewed

    def renewed_wall_clock(self) -> float | None:
        """When the heartbeat was last renewed, in epoch seconds (for the next phase's ``renewed_before``)."""
        if self.renewed_at is None:
            return None
        return round(time.time() - (self.clock() - self.renewed_at), 3)

    def release(self) -> Result:
        return self.steps.module(STAGE, RELEASE, MODULE, {"unit": self.unit, "action": "release", "run_id": self.run_id}, may_fail=True)
