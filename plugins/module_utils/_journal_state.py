# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a precheck already judged of an invocation's journal, kept on the host for the next one.

Private to the collection; may change at any time. Standard library only, no Ansible imports.

One file per unit in the host's state directory (``<state_dir>/<unit>.journal.json``, next to the
run record): the invocation, the cursor of the last record judged and the classifier's state at
that record (``Scanner.state``: counts, events, phases, the ready line; never a secret: events are
redacted before they are kept). The next precheck of the same invocation reads only what came after
the cursor; another invocation starts over; a file that cannot be used is reported and ignored.
"""

from __future__ import annotations

import json
import os
import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils._run_record import STATE_DIR, RecordError, read_state, write

VERSION = 1
SUFFIX = ".journal.json"


def state_path(unit: str, state_dir: str = STATE_DIR) -> str:
    if not unit or "/" in unit or unit.startswith("."):
        raise ValueError(f"unit {unit!r} cannot name a journal state file")
    return os.path.join(state_dir, unit + SUFFIX)


def parse(text: str, unit: str) -> dict[str, t.Any]:
    """The state in ``text``, checked; raises RecordError saying what is wrong."""
    try:
        state = json.loads(text)
    except ValueError as exc:
        raise RecordError(f"not JSON ({exc})") from None
    if not isinstance(state, dict):
        raise RecordError("not a JSON object")
    if state.get("version") != VERSION:
        raise RecordError(f"of another version ({state.get('version')!r}, this collection reads {VERSION})")
    if state.get("unit") != unit:
        raise RecordError(f"of another unit ({state.get('unit')!r})")
    if not isinstance(state.get("cursor"), str) or not isinstance(state.get("invocation_id"), str) or not isinstance(state.get("scanner"), dict):
        raise RecordError("without a cursor, an invocation or the classifier's state")
    return state


def load(path: str, unit: str) -> tuple[dict[str, t.Any] | None, str | None]:
    """(state, None), (None, None) when there is none, or (None, problem) when it cannot be used."""
    state, problem = read_state(path, "the journal state", lambda text: parse(text, unit))
    return state, problem and f"{problem}: the journal is read from the start"


def save(path: str, unit: str, invocation_id: str, cursor: str, scanner: t.Mapping[str, t.Any], extra: t.Mapping[str, t.Any] | None = None) -> None:
    """Replace the state whole and durably (written aside, synced, renamed)."""
    state = {"version": VERSION, "unit": unit, "invocation_id": invocation_id, "cursor": cursor, "scanner": dict(scanner)}
    state.update(extra or {})
    write(path, state)
