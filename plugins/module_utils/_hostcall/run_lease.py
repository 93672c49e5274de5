# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host's lease (``_lease``): read, acquire, renew or release it for a run.

Private to the collection; may change at any time. Host side: standard library only. The module
run_lease is a shell over ``CALL``; a phase runs ``cli`` as a plain process (``_hostcall``).
"""

from __future__ import annotations

import time
import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils import _lease, _run_record
from ansible_collections.inferops.runbooks.plugins.module_utils._hostcall import Call, CallFailed, Host, Params, Result, serve

RUN_LEASE_SPEC: dict[str, t.Any] = {
    "unit": {"type": "str", "required": True},
    "state_dir": {"type": "path", "default": _run_record.STATE_DIR},
    "action": {"type": "str", "default": "read", "choices": ["read", "acquire", "renew", "release"]},
    "run_id": {"type": "str"},
    "holder": {"type": "dict", "default": {}},
    "stale_after": {"type": "float", "default": 600},
}


def run_lease(params: Params, host: Host) -> Result:
    action, run_id = params["action"], params["run_id"] or ""
    if action != "read" and not run_id:
        raise CallFailed(f"run_lease: action {action} needs a run_id")
    try:
        path = _lease.lease_path(params["unit"], params["state_dir"])
    except _lease.LeaseError as exc:
        raise CallFailed(str(exc)) from None
    try:
        found = _lease_action(path, params, run_id, host.check_mode)
    except (_lease.LeaseError, OSError) as exc:
        raise CallFailed(f"run_lease: {exc}", path=path) from None
    now = time.time()
    lease = found.get("lease")
    changed = action != "read" and not host.check_mode and bool(found.get("outcome") or found.get("held") or found.get("released"))
    return {
        **found,
        "changed": changed and found.get("outcome") != "held",
        "path": path,
        "age": _lease.age(lease, now),
        "holder": _lease.describe(lease, now) if lease else None,
        "previous_holder": _lease.describe(found["previous"], now) if found.get("previous") else None,
    }


def _lease_action(path: str, params: Params, run_id: str, check_mode: bool) -> dict[str, t.Any]:
    action = params["action"]
    if action == "read" or check_mode:
        return {"lease": _lease.read(path)}
    if action == "acquire":
        return _lease.acquire(path, params["unit"], {**params["holder"], "run_id": run_id}, params["stale_after"])
    if action == "renew":
        return _lease.renew(path, run_id)
    return _lease.release(path, run_id)


CALL = Call(RUN_LEASE_SPEC, {}, run_lease)


def cli() -> None:
    serve(CALL)
