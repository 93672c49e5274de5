# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading a systemd unit's state and its journal, on the managed host.

Standard library only, no Ansible imports. ``systemctl show`` gives the unit's state; ``journalctl
-o json`` gives its records, streamed one line at a time so a long journal is never held in memory.

The journal is selected with field matches (``_SYSTEMD_UNIT=``, ``_SYSTEMD_INVOCATION_ID=``) rather
than ``-u``: with ``-u``, ``--after-cursor`` could skip an entry before systemd's December 2023 fix.
"""

from __future__ import annotations

import collections
import json
import re
import subprocess
import typing as t

SHOW_PROPERTIES = (
    "Id",
    "LoadState",
    "ActiveState",
    "SubState",
    "MainPID",
    "NRestarts",
    "InvocationID",
    "ExecMainPID",
    "ExecMainStatus",
    "ExecMainCode",
    "Result",
    "ActiveEnterTimestampMonotonic",
    "StateChangeTimestampMonotonic",
    "ExecMainStartTimestampMonotonic",
)
INTEGER_PROPERTIES = frozenset(
    (
        "MainPID",
        "NRestarts",
        "ExecMainPID",
        "ExecMainStatus",
        "ExecMainCode",
        "ActiveEnterTimestampMonotonic",
        "StateChangeTimestampMonotonic",
        "ExecMainStartTimestampMonotonic",
    )
)
# what, of the unit's state, tells that the process we watch is not the one we started
IDENTITY_PROPERTIES = ("ActiveState", "SubState", "MainPID", "NRestarts", "InvocationID")
OUTPUT_FIELDS = ("MESSAGE", "_PID", "__CURSOR", "__REALTIME_TIMESTAMP")

_INVOCATION_ID = re.compile(r"^[0-9a-f]{32}$")
_UNIT_SUFFIXES = (".service", ".socket", ".target", ".scope", ".slice", ".mount", ".timer", ".path", ".device", ".swap", ".automount")


class SystemdError(RuntimeError):
    """systemctl or journalctl failed, with their error output in the message."""


Runner = t.Callable[[t.Sequence[str]], t.Tuple[int, str, str]]


def run_command(argv: t.Sequence[str]) -> tuple[int, str, str]:
    """Run a command and return (return code, stdout, stderr) as text."""
    process = subprocess.run(list(argv), capture_output=True, check=False)
    return process.returncode, process.stdout.decode("utf-8", "replace"), process.stderr.decode("utf-8", "replace")


def unit_name(unit: str) -> str:
    """The full unit name: ``sglang`` -> ``sglang.service``."""
    unit = unit.strip()
    if not unit:
        raise ValueError("the unit name is empty")
    return unit if unit.endswith(_UNIT_SUFFIXES) else unit + ".service"


def is_invocation_id(value: str) -> bool:
    return bool(_INVOCATION_ID.match(value))


# -- systemctl show ----------------------------------------------------------------------------


def show_command(unit: str, properties: t.Sequence[str] = SHOW_PROPERTIES, systemctl: str = "systemctl") -> list[str]:
    return [systemctl, "show", "--no-pager", "-p", ",".join(properties), unit_name(unit)]


def parse_show(text: str) -> dict[str, t.Any]:
    """``systemctl show`` output (``Key=value`` lines) to a dict; known numeric properties as ints.

    Values may contain ``=``; an empty numeric value (``[not set]`` on old systemd prints nothing)
    becomes 0; ``InvocationID`` is ``""`` for a unit that never ran.
    """
    result: dict[str, t.Any] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep or not key:
            continue
        if key in INTEGER_PROPERTIES:
            result[key] = _to_int(value)
        else:
            result[key] = value
    return result


def _to_int(value: str) -> int:
    value = value.strip()
    try:
        return int(value)
    except ValueError:
        return 0


def unit_state(unit: str, runner: Runner = run_command, systemctl: str = "systemctl") -> dict[str, t.Any]:
    """The unit's current state (SHOW_PROPERTIES, numeric ones as ints); raises SystemdError."""
    rc, out, err = runner(show_command(unit, systemctl=systemctl))
    if rc != 0:
        raise SystemdError(f"systemctl show {unit_name(unit)} failed (rc={rc}): {err.strip() or out.strip()}")
    state = parse_show(out)
    for name in SHOW_PROPERTIES:
        state.setdefault(name, 0 if name in INTEGER_PROPERTIES else "")
    return state


def identity(state: t.Mapping[str, t.Any]) -> tuple[t.Any, ...]:
    """What must not change while one start is being watched."""
    return tuple(state.get(name) for name in IDENTITY_PROPERTIES)


# -- journalctl -------------------------------------------------------------------------------


def journal_command(
    unit: str,
    invocation_id: str | None = None,
    cursor: str | None = None,
    since: str | None = None,
    journalctl: str = "journalctl",
) -> list[str]:
    """journalctl arguments for a unit's records as JSON, one object per line.

    ``invocation_id``: only that invocation's records (None: every invocation of the unit);
    ``cursor``: only records after it; ``since``: only records since that time (journalctl syntax).
    """
    if invocation_id is not None and not is_invocation_id(invocation_id):
        raise ValueError(f"invocation id {invocation_id!r} is not 32 hexadecimal digits")
    argv = [journalctl, "--no-pager", "--quiet", "-o", "json", "--output-fields=" + ",".join(OUTPUT_FIELDS)]
    if cursor:
        argv.append("--after-cursor=" + cursor)
    if since:
        argv.append("--since=" + since)
    argv.append("_SYSTEMD_UNIT=" + unit_name(unit))
    if invocation_id is not None:
        argv.append("_SYSTEMD_INVOCATION_ID=" + invocation_id)
    return argv


class JournalReader:
    """Streams ``journalctl -o json`` records from a subprocess, one line at a time.

    After iteration: ``cursor`` is the cursor of the last record read (None if none), ``count``
    the number of records, ``realtime`` the last record's ``__REALTIME_TIMESTAMP`` (microseconds).
    ``tail`` keeps the cleaned text of the last ``tail_lines`` messages.
    """

    def __init__(self, argv: t.Sequence[str], limit: int | None = None, tail_lines: int = 0, popen: t.Callable[..., t.Any] = subprocess.Popen) -> None:
        self.argv = list(argv)
        self.limit = limit
        self.cursor: str | None = None
        self.realtime: int | None = None
        self.count = 0
        self.tail: collections.deque[str] = collections.deque(maxlen=max(tail_lines, 0) or None)
        self._keep_tail = tail_lines > 0
        self._popen = popen

    def __iter__(self) -> t.Iterator[dict[str, t.Any]]:
        if self.limit is not None and self.limit <= 0:
            return
        process = self._popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        exhausted = False
        try:
            for raw in process.stdout:
                record = _json_record(raw)
                if record is None:
                    continue
                self.count += 1
                self.cursor = record.get("__CURSOR") or self.cursor
                self.realtime = _to_int(str(record.get("__REALTIME_TIMESTAMP", ""))) or self.realtime
                if self._keep_tail:
                    self.tail.append(message_text(record.get("MESSAGE")))
                yield record
                if self.limit is not None and self.count >= self.limit:
                    break
            else:
                exhausted = True
        finally:
            if not exhausted and process.poll() is None:
                process.kill()
            err = process.stderr.read() if process.stderr else b""
            process.stdout.close()
            if process.stderr:
                process.stderr.close()
            rc = process.wait()
        if exhausted and rc != 0:
            text = err.decode("utf-8", "replace").strip() if isinstance(err, bytes) else str(err).strip()
            raise SystemdError(f"{self.argv[0]} failed (rc={rc}): {text or 'no error output'}")


def _json_record(raw: bytes | str) -> dict[str, t.Any] | None:
    if not raw.strip():
        return None
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def message_text(message: t.Any) -> str:
    """A journal MESSAGE as the text a terminal would show last (a tqdm line: its latest state)."""
    if isinstance(message, list):
        try:
            message = bytes(message).decode("utf-8", "replace")
        except (TypeError, ValueError):
            return ""
    text = message if isinstance(message, str) else "" if message is None else str(message)
    if "\r" in text:
        parts = [part for part in text.split("\r") if part.strip()]
        text = parts[-1] if parts else ""
    return text.rstrip()


# -- one invocation's journal, read in steps into one Scanner ---------------------------------


class JournalSlice:
    """The journal records of one invocation after a cursor, read in one or more steps.

    ``make_scanner`` returns a fresh classifier Scanner (``_classifier.Scanner``); every step's
    records go to the same one. The slice remembers where the last still-open Python traceback
    started, so that ``finish(hold_traceback=True)`` can stop before it: the next slice then reads
    the traceback whole instead of classifying half of it.
    """

    def __init__(
        self,
        make_scanner: t.Callable[[], t.Any],
        unit: str,
        invocation_id: str | None,
        cursor: str | None = None,
        since: str | None = None,
        tail_lines: int = 0,
        journalctl: str = "journalctl",
        popen: t.Callable[..., t.Any] = subprocess.Popen,
    ) -> None:
        self._make_scanner = make_scanner
        self.unit = unit
        self.invocation_id = invocation_id
        self.start_cursor = cursor
        self.cursor = cursor
        self.since = since
        self.tail_lines = tail_lines
        self.journalctl = journalctl
        self._popen = popen
        self.scanner = make_scanner()
        self.records = 0
        self.realtime: int | None = None
        self.tail: collections.deque[str] = collections.deque(maxlen=max(tail_lines, 1))
        self._open: t.Any = None
        self._header_records = 0
        self._header_cursor: str | None = None

    def _command(self, cursor: str | None) -> list[str]:
        return journal_command(self.unit, self.invocation_id, cursor, self.since, self.journalctl)

    def read(self) -> int:
        """Read what the journal holds after the current cursor; returns the number of records read."""
        reader = JournalReader(self._command(self.cursor), popen=self._popen)
        for record in reader:
            before = self.cursor
            self.scanner.feed_records((record,))
            opened = self.scanner.open_traceback
            if opened is not None and opened != self._open:
                self._header_records, self._header_cursor = self.records, before
            self._open = opened
            self.records += 1
            self.cursor = record.get("__CURSOR") or self.cursor
            self.realtime = reader.realtime or self.realtime
            if self.tail_lines > 0:
                self.tail.append(message_text(record.get("MESSAGE")))
        return reader.count

    @property
    def traceback_open(self) -> bool:
        return self.scanner.open_traceback is not None

    @property
    def pending_header(self) -> str | None:
        """The first line of the traceback still open, if any."""
        opened = self.scanner.open_traceback
        return None if opened is None else str(opened[1])

    def finish(self, hold_traceback: bool = False) -> tuple[dict[str, t.Any], str | None]:
        """The report of what was read, and the cursor to continue from.

        With ``hold_traceback`` and a traceback still open at the end, the report and the cursor
        stop before the traceback's first line (its records are read again, once, to get there).
        """
        if not (hold_traceback and self.traceback_open):
            return self.scanner.finish(), self.cursor
        scanner = self._make_scanner()
        self.tail.clear()
        replay = JournalReader(self._command(self.start_cursor), limit=self._header_records, popen=self._popen)
        count = 0
        for record in replay:
            scanner.feed_records((record,))
            count += 1
            if self.tail_lines > 0:
                self.tail.append(message_text(record.get("MESSAGE")))
        self.scanner = scanner
        self.records = count
        self.cursor = self._header_cursor if count else self.start_cursor
        self._open = None
        return scanner.finish(), self.cursor
