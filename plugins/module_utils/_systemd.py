# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading a systemd unit's state and its journal, on the managed host.

Standard library only, no Ansible imports. ``systemctl show`` gives the unit's state; ``journalctl
-o export`` gives its records, streamed as they come so a long journal is never held in memory.

The journal is selected with field matches (``_SYSTEMD_UNIT=``, ``_SYSTEMD_INVOCATION_ID=``) rather
than ``-u``: with ``-u``, ``--after-cursor`` could skip an entry before systemd's December 2023 fix.
"""

from __future__ import annotations

import collections
import json
import os
import re
import select
import subprocess
import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils._lines import clean, record_message

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
# journalctl's export format: binary-safe (a message with a carriage return or invalid UTF-8 comes
# as its bytes, not as a JSON array of numbers, and a long one whole: -o json prints null for a
# field over 4096 bytes unless --all), and faster to read (bench/classify_bench.py measures both).
JOURNAL_FORMAT = "export"
READ_CHUNK = 1 << 20

_INVOCATION_ID = re.compile(r"^[0-9a-f]{32}$")
_UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.@\\-]+$")
UNIT_NAME_MAX = 255
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


def unit_name_problem(unit: str) -> str | None:
    """Why ``unit`` cannot name a unit (``is empty``, ...), or None when it can."""
    name = unit.strip()
    if not name:
        return "is empty: name the systemd unit of the server (sglang.service)"
    if len(name) > UNIT_NAME_MAX:
        return f"is longer than the {UNIT_NAME_MAX} characters systemd allows"
    if not _UNIT_NAME.match(name) or name.startswith((".", "-", "@")):
        return "is not a systemd unit name (letters, digits and : - _ . @ only, as in sglang.service or sglang@0.service)"
    return None


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
    """journalctl arguments for a unit's records in journalctl's export format (see RecordDecoder).

    ``invocation_id``: only that invocation's records (None: every invocation of the unit);
    ``cursor``: only records after it; ``since``: only records since that time (journalctl syntax).
    """
    if invocation_id is not None and not is_invocation_id(invocation_id):
        raise ValueError(f"invocation id {invocation_id!r} is not 32 hexadecimal digits")
    argv = [journalctl, "--no-pager", "--quiet", "-o", JOURNAL_FORMAT, "--output-fields=" + ",".join(OUTPUT_FIELDS)]
    if cursor:
        argv.append("--after-cursor=" + cursor)
    if since:
        argv.append("--since=" + since)
    argv.append("_SYSTEMD_UNIT=" + unit_name(unit))
    if invocation_id is not None:
        argv.append("_SYSTEMD_INVOCATION_ID=" + invocation_id)
    return argv


class JournalReader:
    """Streams ``journalctl -o export`` (or ``-o json``) records from a subprocess, as they come.

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
            for record in read_records(process.stdout):
                self.count += 1
                self.cursor = record.get("__CURSOR") or self.cursor
                self.realtime = _to_int(str(record.get("__REALTIME_TIMESTAMP", ""))) or self.realtime
                if self._keep_tail:
                    self.tail.append(message_text(record))
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


def read_records(stream: t.IO[bytes]) -> t.Iterator[dict[str, t.Any]]:
    """Journal records from journalctl's output as it comes (see RecordDecoder)."""
    decoder = RecordDecoder()
    read = getattr(stream, "read1", stream.read)
    while True:
        chunk = read(READ_CHUNK)
        if not chunk:
            break
        yield from decoder.feed(chunk)
    yield from decoder.finish()


class RecordDecoder:
    """journalctl's output to records, fed in pieces of any size: ``-o export`` (``NAME=value``
    lines, or for a binary value ``NAME``, its length as 64-bit little-endian and the bytes; an
    empty line ends a record) or ``-o json`` (one object per line), told apart by the first byte.
    Field values are text; a binary one (export) is bytes."""

    def __init__(self) -> None:
        self._buffer = b""
        self._json: bool | None = None
        self._record: dict[str, t.Any] = {}

    def feed(self, data: bytes) -> list[dict[str, t.Any]]:
        self._buffer += data
        if self._json is None and self._buffer:
            self._json = self._buffer.startswith(b"{")
        return self._json_lines() if self._json else self._export_fields()

    def finish(self) -> list[dict[str, t.Any]]:
        """What is left at the end of the output: a last line without its newline, a last record
        without its empty line."""
        records = self.feed(b"\n")
        if self._record:
            records.append(self._record)
            self._record = {}
        return records

    def _json_lines(self) -> list[dict[str, t.Any]]:
        lines = self._buffer.split(b"\n")
        self._buffer = lines.pop()
        return [record for record in map(_json_record, lines) if record is not None]

    def _export_fields(self) -> list[dict[str, t.Any]]:
        records = []
        buffer, record, position = self._buffer, self._record, 0
        while True:
            newline = buffer.find(b"\n", position)
            if newline < 0:
                break
            if newline == position:
                if record:
                    records.append(record)
                    record = {}
                position += 1
                continue
            equals = buffer.find(b"=", position, newline)
            if equals >= 0:
                record[buffer[position:equals].decode("ascii", "replace")] = buffer[equals + 1 : newline].decode("utf-8", "replace")
                position = newline + 1
                continue
            start = newline + 9
            end = start + int.from_bytes(buffer[newline + 1 : start], "little")
            if len(buffer) < start or len(buffer) <= end:
                break
            record[buffer[position:newline].decode("ascii", "replace")] = buffer[start:end]
            position = end + 1
        self._buffer, self._record = buffer[position:], record
        return records


def _json_record(raw: bytes | str) -> dict[str, t.Any] | None:
    if not raw.strip():
        return None
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def message_text(record: t.Mapping[str, t.Any]) -> str:
    """A journal record's MESSAGE as the text a terminal would show last (a tqdm line: its latest state)."""
    return clean(record_message(record))[-1]


# -- one invocation's journal, read once or followed ------------------------------------------


class JournalSlice:
    """The journal records of one invocation (or of every invocation) after a cursor, read at once
    into one classifier Scanner (``_classifier.Scanner``)."""

    def __init__(
        self,
        scanner: t.Any,
        unit: str,
        invocation_id: str | None,
        cursor: str | None = None,
        since: str | None = None,
        tail_lines: int = 0,
        journalctl: str = "journalctl",
        popen: t.Callable[..., t.Any] = subprocess.Popen,
    ) -> None:
        self.scanner = scanner
        self.argv = journal_command(unit, invocation_id, cursor, since, journalctl)
        self.cursor = cursor
        self.records = 0
        self.tail: collections.deque[str] = collections.deque(maxlen=max(tail_lines, 1))
        self._keep_tail = tail_lines > 0
        self._popen = popen

    def read(self) -> int:
        """Read and classify what the journal holds; returns the number of records read."""
        reader = JournalReader(self.argv, popen=self._popen)
        for record in reader:
            self.scanner.feed_records((record,))
            if self._keep_tail:
                self.tail.append(self.scanner.redact(message_text(record)))
        self.records += reader.count
        self.cursor = reader.cursor or self.cursor
        return reader.count


class JournalFollower:
    """One invocation's journal from a cursor: what it holds now (``catch_up``), then what comes
    (``poll``, over a single ``journalctl --follow``).

    The catch-up starts *at* the cursor's entry (``--cursor``) and drops it: when that entry is no
    longer in the journal (rotated and vacuumed away before it was read past), the entries between
    it and the next one read may be lost, and ``gap`` says so.
    """

    CHUNK = 1 << 16

    def __init__(self, unit: str, invocation_id: str, cursor: str | None = None, journalctl: str = "journalctl") -> None:
        self.unit = unit
        self.invocation_id = invocation_id
        self.journalctl = journalctl
        self.start_cursor = cursor
        self.cursor = cursor
        self.realtime: int | None = None
        self.count = 0
        self.gap: str | None = None
        self._decoder = RecordDecoder()
        self._process: t.Any = None

    def __enter__(self) -> JournalFollower:
        return self

    def __exit__(self, *exc: object) -> None:
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.kill()
        process.stdout.close()
        process.wait()

    def catch_up(self) -> t.Iterator[dict[str, t.Any]]:
        """The records the journal holds now, after the cursor."""
        argv = journal_command(self.unit, self.invocation_id, None, None, self.journalctl)
        if self.start_cursor:
            argv.insert(1, "--cursor=" + self.start_cursor)
        first = True
        for record in JournalReader(argv):
            if first and self.start_cursor:
                first = False
                if record.get("__CURSOR") == self.start_cursor:
                    continue
                self.gap = "the journal no longer holds the last entry read (rotated or vacuumed away): the entries that followed it may be lost"
            first = False
            yield self._take(record)

    def poll(self, timeout: float, wakers: t.Sequence[int] = (), hangups: t.Sequence[int] = ()) -> list[dict[str, t.Any]]:
        """The records that arrived within ``timeout`` seconds (waiting only until the first does, or
        until one of ``wakers`` is readable or one of ``hangups`` is hung up: a process's pidfd, the
        pipe back to the caller)."""
        if self._process is None:
            argv = journal_command(self.unit, self.invocation_id, self.cursor, None, self.journalctl)
            argv[1:1] = ["--follow", "--no-tail"]
            self._process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        stream = self._process.stdout
        poller = select.poll()
        for fd in hangups:
            poller.register(fd, select.POLLERR | select.POLLHUP)
        for fd in wakers:
            poller.register(fd, select.POLLIN)
        poller.register(stream.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
        events = poller.poll(max(timeout, 0.0) * 1000)
        ready = any(fd == stream.fileno() for fd, _event in events)
        data = b""
        while ready:
            chunk = os.read(stream.fileno(), self.CHUNK)
            if not chunk:
                break
            data += chunk
            ready = bool(select.select([stream], [], [], 0)[0])
        return [self._take(record) for record in self._decoder.feed(data)]

    def _take(self, record: dict[str, t.Any]) -> dict[str, t.Any]:
        self.count += 1
        self.cursor = record.get("__CURSOR") or self.cursor
        self.realtime = _to_int(str(record.get("__REALTIME_TIMESTAMP", ""))) or self.realtime
        return record
