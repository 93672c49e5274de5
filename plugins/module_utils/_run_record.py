# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The run record: what a rollout did to a host and must undo, kept on the host itself.

Private to the collection; may change at any time. Standard library only, no Ansible imports.

A rollout writes the record before each step that changes something (write-ahead): which run, which
step it is about to take, the files it changes (with the hashes of their previous and new content;
``<file>.previous`` holds the previous content), the invocation the unit ran before the stop, and
whether the host was taken out of rotation (the router's worker registration, to put it back). A
controller that dies at any point leaves the record behind, and the next run starts from it and from
what it sees on the host (``_rollout.reconcile``). The record never holds a secret: no file content,
no key (a worker's API key is added back from the run's own variables when it is registered again).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
import typing as t

VERSION = 1
STATE_DIR = "/var/lib/inferops"
# the steps a rollout writes before it takes them, in order; "done" once nothing is left to undo
STEPS = (
    "silence",
    "drain",
    "deploy",
    "restart",
    "start",
    "wait",
    "smoke",
    "passed",
    "rollback",
    "rollback_wait",
    "rolled_back",
    "rollback_failed",
    "failed",
    "restore",
    "done",
)
WORKER_KEYS = ("url", "priority", "cost", "worker_type", "bootstrap_port")
FILE_KEYS = ("path", "kind", "existed", "previous_sha256", "new_sha256")

Record = dict[str, t.Any]


class RecordError(Exception):
    """The record cannot be used as it is (corrupt, foreign, from a newer collection)."""


def record_path(unit: str, state_dir: str = STATE_DIR) -> str:
    if not unit or "/" in unit or unit.startswith("."):
        raise RecordError(f"unit {unit!r} cannot name a run record")
    return os.path.join(state_dir, unit + ".json")


def sha256_of(path: str) -> str | None:
    """The hash of a file's content; None when there is no such file."""
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except FileNotFoundError:
        return None


def parse_state(text: str, unit: str, readable: int, kind: str, error: type[RecordError] = RecordError) -> dict[str, t.Any]:
    """A state file's JSON object, checked: of version ``readable`` or older (``kind`` names it in the
    message), for this unit. Raises ``error`` saying what is wrong."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise error(f"not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise error(f"not a JSON object but {type(data).__name__}")
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise error(f"no version number (version={version!r})")
    if version > readable:
        raise error(f"written by a newer collection ({kind} version {version}, this collection reads {readable})")
    if data.get("unit") != unit:
        raise error(f"names another unit ({data.get('unit')!r}, not {unit!r})")
    return data


def parse(text: str, unit: str) -> Record:
    """The record in ``text``, checked: a dict of this collection's version or older, for this unit,
    at a known step. Raises RecordError saying what is wrong."""
    record = parse_state(text, unit, VERSION, "record")
    if record.get("step") not in STEPS:
        raise RecordError(f"at an unknown step {record.get('step')!r}")
    for key, kind in (("change", dict), ("traffic", dict)):
        if record.get(key) is not None and not isinstance(record[key], kind):
            raise RecordError(f"{key} is not an object")
    files = (record.get("change") or {}).get("files", [])
    if not isinstance(files, list) or not all(isinstance(f, dict) and isinstance(f.get("path"), str) for f in files):
        raise RecordError("change.files is not a list of files with a path")
    return record


_Parsed = t.TypeVar("_Parsed")


def read_state(path: str, what: str, parse_text: t.Callable[[str], _Parsed]) -> tuple[_Parsed | None, str | None]:
    """One of the collection's state files (run record, start history, canary store): (parsed, None),
    (None, None) when there is none, or (None, problem) when it cannot be read or ``parse_text``
    refuses it with a RecordError."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None, None
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"{what} {path} cannot be read: {exc}"
    try:
        return parse_text(text), None
    except RecordError as exc:
        return None, f"{what} {path} is ignored: {exc}"


def read(path: str, unit: str) -> tuple[Record | None, str | None]:
    """(record, None), (None, None) when there is none, or (None, problem) when it cannot be used."""
    return read_state(path, "the run record", lambda text: parse(text, unit))


def write(path: str, record: Record) -> None:
    """Replace the record whole and durably: written aside in the same directory, synced, renamed."""
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    handle, staging = tempfile.mkstemp(prefix=".record-", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(record, out, indent=1, sort_keys=True)
            out.write("\n")
            out.flush()
            os.fsync(out.fileno())
        os.chmod(staging, 0o644)
        os.replace(staging, path)
    except BaseException:
        if os.path.exists(staging):
            os.unlink(staging)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def clean_worker(worker: t.Any) -> dict[str, t.Any]:
    """A worker's registration without anything secret (its API key comes from the run's variables)."""
    if not isinstance(worker, dict):
        return {}
    return {key: worker[key] for key in WORKER_KEYS if worker.get(key) is not None}


def clean_files(files: t.Any) -> list[dict[str, t.Any]]:
    """The changed files as the record keeps them: paths and hashes, never their content."""
    kept = []
    for entry in files if isinstance(files, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("path"), str):
            kept.append({key: entry.get(key) for key in FILE_KEYS})
    return kept


def advance(
    previous: Record | None,
    unit: str,
    run_id: str,
    step: str,
    updates: t.Mapping[str, t.Any] | None = None,
    now: float | None = None,
) -> Record:
    """The record after this run reached ``step``: the earlier record's pending undo work carried
    over (a host still out of rotation, a change never proven) unless ``updates`` settles it."""
    if step not in STEPS:
        raise RecordError(f"unknown step {step!r} (one of {', '.join(STEPS)})")
    record: Record = {
        "version": VERSION,
        "unit": unit,
        "change": None,
        "traffic": None,
        "before_invocation": None,
        "history": [],
    }
    if previous:
        record.update({key: previous.get(key) for key in ("change", "traffic", "before_invocation", "run_id", "started_at", "silence")})
        record["history"] = list(previous.get("history") or [])[-20:]
    if record.get("run_id") != run_id:
        record["started_at"] = round(time.time() if now is None else now, 3)
        record["history"] = [*record["history"], {"run_id": run_id, "took_over_at": previous.get("step") if previous else None}][-20:]
    record.update(run_id=run_id, step=step, updated_at=round(time.time() if now is None else now, 3))
    for key, value in (updates or {}).items():
        if key == "traffic":
            value = _merge_traffic(record.get("traffic"), value)
        elif key == "change":
            value = {**value, "files": clean_files(value.get("files"))} if isinstance(value, dict) else None
        elif key == "change_flags":
            # proven / settled marked on the change the host's record holds, whatever the caller knows of it
            if isinstance(record.get("change"), dict) and isinstance(value, dict):
                record["change"] = {**record["change"], **{flag: bool(value[flag]) for flag in ("proven", "settled") if flag in value}}
            continue
        elif key not in ("before_invocation", "outcome", "repairs", "silence"):
            raise RecordError(f"a run record has no field {key!r}")
        record[key] = value
    return record


def _merge_traffic(earlier: t.Any, update: t.Any) -> dict[str, t.Any] | None:
    """A host taken out of rotation stays out until a run puts it back (``out: false``)."""
    if update is None:
        return None
    merged = dict(earlier) if isinstance(earlier, dict) else {}
    merged.update(update)
    if "worker" in update:
        merged["worker"] = clean_worker(update.get("worker")) or clean_worker((earlier or {}).get("worker"))
    return merged
