# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The run record on the host: read it, with the sha256 of the files it names and the host's lease, and
advance it by one step.

Private to the collection; may change at any time. Host side: standard library only. The module
run_record is a shell over ``CALL``; a phase runs ``cli`` as a plain process (``_hostcall``).
"""

from __future__ import annotations

import time
import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils import _lease, _run_record
from ansible_collections.inferops.runbooks.plugins.module_utils._hostcall import Call, CallFailed, Host, Params, Result, serve

RUN_RECORD_SPEC: dict[str, t.Any] = {
    "unit": {"type": "str", "required": True},
    "state_dir": {"type": "path", "default": _run_record.STATE_DIR},
    "step": {"type": "str", "choices": list(_run_record.STEPS)},
    "run_id": {"type": "str"},
    "updates": {"type": "dict", "default": {}},
    "files": {"type": "list", "elements": "path", "default": []},
}


def run_record(params: Params, host: Host) -> Result:
    try:
        path = _run_record.record_path(params["unit"], params["state_dir"])
    except _run_record.RecordError as exc:
        raise CallFailed(str(exc)) from None
    record, problem = _run_record.read(path, params["unit"])
    recorded = [entry["path"] for entry in ((record or {}).get("change") or {}).get("files") or []]
    host_files = {
        name: {"sha256": _run_record.sha256_of(name), "previous_sha256": _run_record.sha256_of(name + ".previous")} for name in [*params["files"], *recorded]
    }
    changed = False
    if params["step"]:
        try:
            advanced = _run_record.advance(record, params["unit"], params["run_id"], params["step"], params["updates"])
        except _run_record.RecordError as exc:
            raise CallFailed(f"run record of {params['unit']}: {exc}", path=path) from None
        record = advanced
        if not host.check_mode:
            try:
                _run_record.write(path, advanced)
            except OSError as exc:
                raise CallFailed(f"cannot write the run record {path}: {exc}", path=path) from None
        changed = True
    lease = _lease_seen(params["unit"], params["state_dir"])
    return {"changed": changed, "path": path, "record": record, "problem": problem, "host_files": host_files, **lease}


def _lease_seen(unit: str, state_dir: str) -> dict[str, t.Any]:
    """The host's lease beside the record: which run holds the host, in words, and how fresh its heartbeat is."""
    try:
        lease = _lease.read(_lease.lease_path(unit, state_dir))
    except _lease.LeaseError as exc:
        return {"lease": None, "lease_holder": None, "lease_age": None, "lease_problem": str(exc)}
    now = time.time()
    return {"lease": lease, "lease_holder": _lease.describe(lease, now) if lease else None, "lease_age": _lease.age(lease, now)}


CALL = Call(RUN_RECORD_SPEC, {"step": "run_id"}, run_record)


def cli() -> None:
    serve(CALL)
