# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host's lease: which rollout holds the host, from where, since when, and whether it still lives.

Private to the collection; may change at any time. Standard library only, no Ansible imports.

A rollout takes the lease (``<state_dir>/<unit>.lease``, beside the run record) before it changes
anything on the host, renews its heartbeat while it works, and releases it at its end. A second run
finds the lease held and refuses (or waits); a lease whose heartbeat is older than the taker's stale
limit belongs to a run that died, and is taken over. Every change of the lease happens under an
exclusive ``flock`` of ``<unit>.lease.lock``, so two runs that take it at the same moment cannot both
get it; the heartbeat is the host's clock, so the age of a lease never depends on a controller's.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
import typing as t

VERSION = 1
# seconds without a heartbeat after which a lease is a dead run's, unless the taker says otherwise
DEFAULT_STALE = 600
HOLDER_KEYS = ("run_id", "controller", "pid", "user", "awx_job_id", "playbook")
Lease = dict[str, t.Any]


class LeaseError(Exception):
    """The lease cannot be used as it is (a unit that cannot name one, a directory that cannot be written)."""


def lease_path(unit: str, state_dir: str) -> str:
    if not unit or "/" in unit or unit.startswith("."):
        raise LeaseError(f"unit {unit!r} cannot name a lease")
    return os.path.join(state_dir, unit + ".lease")


def parse(text: str) -> Lease | None:
    """The lease in ``text``; None when it is not one (a torn or foreign file counts as no lease)."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("run_id"), str) or not isinstance(data.get("heartbeat_at"), (int, float)):
        return None
    return data


def read(path: str) -> Lease | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return parse(handle.read())
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise LeaseError(f"the lease {path} cannot be read: {exc}") from None


def age(lease: t.Mapping[str, t.Any] | None, now: float) -> float | None:
    """Seconds since the lease's last heartbeat."""
    return None if lease is None else round(max(now - float(lease["heartbeat_at"]), 0.0), 1)


def is_stale(lease: t.Mapping[str, t.Any], now: float, stale_after: float) -> bool:
    return (age(lease, now) or 0.0) > stale_after


def acquire_decision(current: Lease | None, run_id: str, now: float, stale_after: float) -> str:
    """``taken`` (free), ``renewed`` (this run's already), ``taken_over`` (a dead run's) or ``held``."""
    if current is None:
        return "taken"
    if current.get("run_id") == run_id:
        return "renewed"
    return "taken_over" if is_stale(current, now, stale_after) else "held"


def new_lease(holder: t.Mapping[str, t.Any], unit: str, now: float) -> Lease:
    lease: Lease = {key: holder.get(key) for key in HOLDER_KEYS}
    lease.update(version=VERSION, unit=unit, taken_at=round(now, 3), heartbeat_at=round(now, 3))
    return lease


@contextlib.contextmanager
def locked(path: str) -> t.Iterator[None]:
    """The lease's file lock, held exclusively for one read-decide-write."""
    directory = os.path.dirname(path)
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        descriptor = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise LeaseError(f"cannot lock the lease {path}: {exc}") from None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def write(path: str, lease: Lease) -> None:
    """Replace the lease whole: written aside, synced, renamed (a reader never sees half of one)."""
    handle, staging = tempfile.mkstemp(prefix=".lease-", dir=os.path.dirname(path))
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(lease, out, sort_keys=True)
            out.write("\n")
            out.flush()
            os.fsync(out.fileno())
        os.chmod(staging, 0o644)
        os.replace(staging, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(staging)
        raise


def acquire(path: str, unit: str, holder: t.Mapping[str, t.Any], stale_after: float, now: float | None = None) -> dict[str, t.Any]:
    """Take the lease for ``holder["run_id"]``, or say who holds it. ``outcome`` is one of
    ``acquire_decision``'s; ``lease`` is the lease after the call (the holder's when ``held``),
    ``previous`` the dead run's lease that was taken over, ``age`` its heartbeat's age then."""
    with locked(path):
        moment = time.time() if now is None else now
        current = read(path)
        outcome = acquire_decision(current, str(holder["run_id"]), moment, stale_after)
        result: dict[str, t.Any] = {"outcome": outcome, "age": age(current, moment), "previous": None}
        if outcome == "held":
            result["lease"] = current
            return result
        lease = {**current, "heartbeat_at": round(moment, 3)} if outcome == "renewed" and current else new_lease(holder, unit, moment)
        write(path, lease)
        result.update(lease=lease, previous=current if outcome == "taken_over" else None)
        return result


def renew(path: str, run_id: str, now: float | None = None) -> dict[str, t.Any]:
    """The heartbeat of ``run_id``'s lease set to now; ``held`` False (with the lease found, if any)
    when the run no longer holds it: another run took it over, or someone removed it."""
    with locked(path):
        moment = time.time() if now is None else now
        current = read(path)
        if current is None or current.get("run_id") != run_id:
            return {"held": False, "lease": current, "age": age(current, moment)}
        lease = {**current, "heartbeat_at": round(moment, 3)}
        write(path, lease)
        return {"held": True, "lease": lease, "age": 0.0}


def release(path: str, run_id: str) -> dict[str, t.Any]:
    """The lease removed when ``run_id`` holds it; another run's lease is left as it is."""
    with locked(path):
        current = read(path)
        if current is None or current.get("run_id") != run_id:
            return {"released": False, "lease": current}
        os.unlink(path)
        return {"released": True, "lease": None}


def describe(lease: t.Mapping[str, t.Any], now: float) -> str:
    """The holder in words: run, from where, since when, last heartbeat."""
    where = f"{lease.get('user') or 'someone'}@{lease.get('controller') or 'an unknown controller'}"
    if lease.get("pid"):
        where += f" (process {lease['pid']})"
    if lease.get("awx_job_id"):
        where += f", AWX job {lease['awx_job_id']}"
    taken = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(lease.get("taken_at") or lease["heartbeat_at"])))
    return f"run {lease.get('run_id')} from {where}, since {taken}, last heartbeat {age(lease, now):.0f} s ago"
