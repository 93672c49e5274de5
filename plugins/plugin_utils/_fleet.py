# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet's decisions in a rolling restart: the batches (a number, a percent or a ramp, canary
first), the serving floor before a batch leaves, the fleet gate after it, the failure tolerance and
the bake's looks.

Private to the collection; may change at any time. Standard library only, no Ansible imports: each
function decides from what it is given (what was seen is gathered by the action fleet_gate).
"""

from __future__ import annotations

import dataclasses
import typing as t
import urllib.parse

from ansible_collections.inferops.runbooks.plugins.plugin_utils._options import Step, is_target_address

# what a deployment is when it serves
SERVING = None


def batch_sizes(steps: t.Sequence[Step], total: int) -> list[int]:
    """Deployments per batch for ``total`` deployments, as Ansible's ``serial`` takes a ramp: each
    step in turn, the last one repeated; the canary first (a ramp that does not start with one
    deployment gets a batch of one before it); a percent is of ``total``."""
    if total <= 0:
        return []
    sizes = [step.of(total) for step in steps] or [1]
    if sizes[0] != 1:
        sizes = [1, *sizes]
    batches: list[int] = []
    left = total
    while left > 0:
        size = min(sizes[min(len(batches), len(sizes) - 1)], left)
        batches.append(size)
        left -= size
    return batches


@dataclasses.dataclass(frozen=True)
class FloorCheck:
    """The serving floor before a batch leaves: which of the other deployments serve, and why the others do not."""

    needed: int
    total: int
    leaving: tuple[str, ...]
    serving: tuple[str, ...]
    not_serving: dict[str, str]

    @property
    def met(self) -> bool:
        return len(self.serving) >= self.needed

    @property
    def reachable(self) -> bool:
        """Whether the floor can be met at all with the batch out."""
        return self.total - len(self.leaving) >= self.needed

    def line(self) -> str:
        others = "; ".join(f"{name}: {why}" for name, why in self.not_serving.items()) or "none"
        return (
            f"serving floor {self.needed} of {self.total} deployment(s) with {', '.join(self.leaving) or 'nothing'} out:"
            f" {len(self.serving)} serve ({', '.join(self.serving) or 'none'}); not serving: {others}"
        )


def judge_floor(deployments: t.Sequence[str], looks: t.Mapping[str, str | None], leaving: t.Sequence[str], needed: int) -> FloorCheck:
    """The floor with the deployments of ``leaving`` out: ``looks`` maps each other deployment to
    None when it serves, or why it does not (one not looked at does not serve)."""
    others = [name for name in deployments if name not in leaving]
    serving = tuple(name for name in others if name in looks and looks[name] is SERVING)
    not_serving = {name: str(looks.get(name) or "not looked at") for name in others if name not in serving}
    return FloorCheck(needed, len(deployments), tuple(leaving), serving, not_serving)


def floor_failure(check: FloorCheck, waited: float) -> str:
    """The message of a run stopped by the floor, before the batch is touched."""
    why = (
        f"it cannot be met with the batch out ({check.total - len(check.leaving)} other deployment(s))"
        if not check.reachable
        else f"not met after {waited:.0f} s (sglang_capacity_timeout)"
    )
    return f"The serving floor (sglang_min_serving) is {why}; stopping before the batch is touched: {check.line()}"


@dataclasses.dataclass(frozen=True)
class Tolerance:
    within: bool
    msg: str


def judge_tolerance(failed: t.Sequence[str], total: int, max_fail_percentage: float, canary: str | None) -> Tolerance:
    """Whether the run goes on with these failed deployments among ``total``: never after a failed
    canary; otherwise while they are at most ``max_fail_percentage`` percent of the play's deployments."""
    if not failed:
        return Tolerance(True, "no deployment failed")
    share = 100.0 * len(failed) / max(total, 1)
    names = ", ".join(failed)
    if canary is not None and canary in failed:
        return Tolerance(False, f"the canary {canary} failed: the run stops there (failed: {names})")
    if share > max_fail_percentage:
        return Tolerance(
            False,
            f"{len(failed)} of {total} deployment(s) failed ({share:.0f}%: {names}), more than sglang_max_fail_percentage"
            f" {max_fail_percentage:g}%: the run stops here",
        )
    return Tolerance(
        True,
        f"{len(failed)} of {total} deployment(s) failed ({share:.0f}%: {names}), within sglang_max_fail_percentage {max_fail_percentage:g}%: the run goes on",
    )


def new_fatal(probe: t.Mapping[str, t.Any], fatal_before: int) -> bool:
    """Whether a probe's journal holds more fatal lines than the start had."""
    return len((probe.get("journal") or {}).get("fatal") or []) > fatal_before


def bake_look(probe: t.Mapping[str, t.Any], judged_invocation: str | None, fatal_before: int) -> str | None:
    """One look of the bake at a host (service_probe's result on the invocation the start was judged
    on): None while it serves as it did, otherwise what went wrong."""
    if new_fatal(probe, fatal_before):
        fatal = probe["journal"]["fatal"]
        event = fatal[-1] if isinstance(fatal[-1], t.Mapping) else {}
        return f"a new fatal line in its journal: {event.get('message') or event.get('line') or event.get('class') or 'fatal'}"
    unit = probe.get("unit") or {}
    now = unit.get("InvocationID")
    if judged_invocation and now and now != judged_invocation:
        return f"the unit was started again (invocation {now}, the start judged was {judged_invocation})"
    if unit.get("ActiveState") not in (None, "active"):
        return f"the unit is {unit.get('ActiveState')} ({unit.get('SubState')})"
    health = probe.get("health") or {}
    if health and health.get("status") != 200:
        return f"its health check answered {health.get('status') or health.get('error') or 'nothing'}"
    return None


def generation_url(smoke_url: str, worker_url: str | None, address: str) -> str:
    """Where the controller sends a deployment's one generation: the smoke URL's route on the worker
    (as the router reaches it), or on the host's address when the smoke URL is the host's loopback."""
    smoke = urllib.parse.urlsplit(smoke_url)
    if worker_url:
        worker = urllib.parse.urlsplit(worker_url)
        return urllib.parse.urlunsplit((worker.scheme, worker.netloc, smoke.path, smoke.query, ""))
    host = smoke.hostname or ""
    if not is_target_address(host, ()):
        return smoke_url
    netloc = f"[{address}]" if ":" in address else address
    port = f":{smoke.port}" if smoke.port else ""
    return urllib.parse.urlunsplit((smoke.scheme, f"{netloc}{port}", smoke.path, smoke.query, ""))


def worker_state(listed: t.Sequence[t.Mapping[str, t.Any]], worker_url: str) -> str | None:
    """The gateway's view of one worker: None when it lists it healthy, otherwise why not."""
    entry = next((worker for worker in listed if worker.get("url") == worker_url), None)
    if entry is None:
        return f"not listed by the router ({worker_url})"
    if entry.get("is_healthy") is False or entry.get("healthy") is False:
        return f"listed by the router as unhealthy ({worker_url})"
    return None
