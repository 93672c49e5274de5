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
    """Run a command and return (return code, stdout, stderr) as text: the runner of code that runs
    outside a module (a look run as a plain process, the controller); a module passes its own,
    built on AnsibleModule.run_command."""
    # a look run as a plain process on the host has no AnsibleModule (modules pass their run_command)
    # pylint: disable-next=ansible-bad-function
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
        # streamed: read as it comes and stopped once enough is read (run_command returns the output whole)
        # pylint: disable-next=ansible-bad-function
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
            # journalctl --follow never ends: polled as records come, for as long as the look lasts
            # pylint: disable-next=ansible-bad-function
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


# -- one invocation's journal read with journalctl --grep -------------------------------------


class GrepUnavailable(SystemdError):
    """journalctl cannot search (built without PCRE2, or the search failed): read everything instead."""


# the header fields journalctl's export format always prints; asking for no other field makes the
# entries' cursors the only thing it writes for each (the stream the lines are numbered by)
_NO_FIELD = "__INFEROPS_NO_FIELD"
_CURSOR_MARK = b"__CURSOR="


def grep_command(argv: t.Sequence[str], pattern: str) -> list[str]:
    """journal_command's arguments with journalctl's own search for ``pattern`` (PCRE2; all lower
    case, so it matches without regard to case)."""
    argv = list(argv)
    argv[1:1] = ["--grep=" + pattern, "--case-sensitive=false"]
    return argv


def cursor_command(argv: t.Sequence[str]) -> list[str]:
    """journal_command's arguments printing the entries' cursors only (no field of theirs)."""
    return [("--output-fields=" + _NO_FIELD) if item.startswith("--output-fields=") else item for item in argv]


class _Numbering:
    """Where entries are in the stream of every entry's cursor (journalctl -o export printing
    header fields only), read as it comes: the number of an entry in the range read, from its
    cursor, in one pass over the stream with bytes operations only (never a Python step per entry)."""

    def __init__(self, stream: t.IO[bytes], end: str) -> None:
        self._read = getattr(stream, "read1", stream.read)
        self._data = b""
        self._pos = 0
        self._base = 0  # entries wholly before self._data[self._pos:]
        self._end = _CURSOR_MARK + end.encode() + b"\n"
        self.ended = False
        self.last = 0  # the number of the end entry, once seen

    def find(self, cursor: str) -> int | None:
        """The number of the entry with this cursor (1 for the first); None when it comes after the
        end entry, or the stream ends first. Entries must be asked for in the journal's order."""
        needle = _CURSOR_MARK + cursor.encode() + b"\n"
        while True:
            at = self._data.find(needle, self._pos)
            end_at = self._data.find(self._end, self._pos)
            if end_at >= 0 and (at < 0 or end_at < at):
                self.last = self._base + self._data.count(_CURSOR_MARK, self._pos, end_at) + 1
                return self.last if needle == self._end else None
            if at >= 0:
                number = self._base + self._data.count(_CURSOR_MARK, self._pos, at) + 1
                self._base, self._pos = number, at + len(needle)
                if needle == self._end:
                    self.last = number
                return number
            if self.ended or not self._more():
                return None

    def count_to_end(self) -> int:
        """The number of the end entry (all the entries of the range)."""
        return self.find(self._end[len(_CURSOR_MARK) : -1].decode()) or self.last

    def _more(self) -> bool:
        chunk = self._read(READ_CHUNK)
        if not chunk:
            self.ended = True
            return False
        rest = self._data[self._pos :]
        # the last cursor mark may be cut short: what comes before it holds neither cursor looked for
        cut = rest.rfind(_CURSOR_MARK)
        if cut > 0:
            self._base += rest.count(_CURSOR_MARK, 0, cut)
            rest = rest[cut:]
        self._data, self._pos = rest + chunk, 0
        return True


def cursor_fields(cursor: str) -> dict[str, str]:
    """A journal cursor's parts (``s`` the sequence number id, ``i`` the sequence number in hex, ...)."""
    return dict(part.split("=", 1) for part in cursor.split(";") if "=" in part)


class _SdJournalNumbering:
    """The same numbers as _Numbering, counted by libsystemd itself (``sd_journal_next_skip`` over
    the unit's and the invocation's field matches, through ctypes): the entries are stepped over in
    C without reading any of their fields, a few ctypes calls for each entry looked for. The entries
    are told apart by their sequence numbers, so all of the range must share one sequence number id
    (raises GrepUnavailable otherwise, and where libsystemd cannot be loaded: the caller then counts
    with _Numbering)."""

    LOCAL_ONLY = 1

    def __init__(self, unit: str, invocation_id: str, start: str | None, end: str) -> None:
        import ctypes

        self._ctypes = ctypes
        try:
            lib = ctypes.CDLL("libsystemd.so.0")
            self._libc = ctypes.CDLL(None)
        except OSError as exc:
            raise GrepUnavailable(f"libsystemd cannot be loaded ({exc})") from None
        for name in ("sd_journal_next_skip", "sd_journal_previous_skip"):
            getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_uint64]
        for name in ("sd_journal_seek_head", "sd_journal_next", "sd_journal_close"):
            getattr(lib, name).argtypes = [ctypes.c_void_p]
        lib.sd_journal_add_match.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.sd_journal_seek_cursor.argtypes = lib.sd_journal_test_cursor.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.sd_journal_get_cursor.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
        self._libc.free.argtypes = [ctypes.c_void_p]
        self._lib = lib
        handle = ctypes.c_void_p()
        if lib.sd_journal_open(ctypes.byref(handle), self.LOCAL_ONLY) < 0:
            raise GrepUnavailable("libsystemd cannot open the journal")
        self._j: t.Any = handle
        self.position = 0
        self.last = 0
        self._step = 64
        ids = {cursor_fields(end).get("s")}
        try:
            for match in (f"_SYSTEMD_INVOCATION_ID={invocation_id}",):
                data = match.encode()
                if lib.sd_journal_add_match(self._j, data, len(data)) < 0:
                    raise GrepUnavailable("libsystemd refused a journal match")
            if start:
                ids.add(cursor_fields(start).get("s"))
                if lib.sd_journal_seek_cursor(self._j, start.encode()) < 0 or lib.sd_journal_next(self._j) <= 0:
                    raise GrepUnavailable("libsystemd cannot seek to the cursor")
                if lib.sd_journal_test_cursor(self._j, start.encode()) <= 0:
                    raise GrepUnavailable("the journal no longer holds the last entry read")
            elif lib.sd_journal_seek_head(self._j) < 0:
                raise GrepUnavailable("libsystemd cannot seek to the journal's head")
            if len(ids) != 1 or None in ids:
                raise GrepUnavailable("the range spans more than one journal sequence")
        except BaseException:
            self.close()
            raise
        self._id = ids.pop()
        self._end = end

    def close(self) -> None:
        if getattr(self, "_j", None):
            self._lib.sd_journal_close(self._j)
            self._j = None

    def _seqnum(self) -> int:
        pointer = self._ctypes.c_void_p()
        if self._lib.sd_journal_get_cursor(self._j, self._ctypes.byref(pointer)) < 0 or not pointer.value:
            raise GrepUnavailable("libsystemd gave no cursor")
        try:
            fields = cursor_fields(self._ctypes.string_at(pointer.value).decode())
        finally:
            self._libc.free(pointer)
        if fields.get("s") != self._id:
            raise GrepUnavailable("the range spans more than one journal sequence")
        return int(fields["i"], 16)

    def _move(self, to: int) -> None:
        if to > self.position:
            moved = self._lib.sd_journal_next_skip(self._j, to - self.position)
        else:
            moved = -self._lib.sd_journal_previous_skip(self._j, self.position - to)
        if moved != to - self.position:
            raise GrepUnavailable("libsystemd did not step as asked")
        self.position = to

    def find(self, cursor: str) -> int | None:
        fields = cursor_fields(cursor)
        if fields.get("s") != self._id:
            raise GrepUnavailable("the range spans more than one journal sequence")
        target = int(fields["i"], 16)
        end = int(cursor_fields(self._end)["i"], 16)
        if target > end:
            return None
        while True:
            before = self.position
            moved = self._lib.sd_journal_next_skip(self._j, self._step)
            if moved <= 0:
                return None
            self.position += moved
            seqnum = self._seqnum()
            if seqnum < target:
                self._step = min(self._step * 2, 1 << 22)
                continue
            if seqnum == target:
                return self._found(target, end)
            low, high = before, self.position  # the entry is after low and before high
            while high - low > 1:
                middle = (low + high) // 2
                self._move(middle)
                seqnum = self._seqnum()
                if seqnum == target:
                    self._step = max(64, (middle - before))
                    return self._found(target, end)
                low, high = (middle, high) if seqnum < target else (low, middle)
            self._move(low)
            return None

    def _found(self, target: int, end: int) -> int:
        if target == end:
            self.last = self.position
        return self.position

    def count_to_end(self) -> int:
        return self.find(self._end) or self.last


def last_entry(argv: t.Sequence[str], popen: t.Callable[..., t.Any] = subprocess.Popen) -> dict[str, t.Any] | None:
    """The last record the journal_command ``argv`` reads now (its header fields), or None."""
    argv = [*cursor_command(argv), "--lines=1"]
    records = list(JournalReader([item for item in argv if not item.startswith(("--cursor=", "--after-cursor="))], popen=popen))
    return records[-1] if records else None


class GrepRead:
    """One invocation's records after a cursor read with ``journalctl --grep``: only the records
    holding something the rules need are read (``pattern``: RuleSet.grep_pattern), every other one
    counted by its place in the stream of all the records' cursors (``Scanner.skip_plain``); when a
    record read opens a traceback, the records after it are read whole until it ends.

    ``feed(record)`` classifies one record (a Scanner's feed_records, or a caller's wrapper of it);
    ``scanner`` is asked whether a traceback is open and told the lines skipped. After ``read``:
    ``cursor``, ``realtime``, ``count`` (records in the range, read or not), ``read_records`` (records
    read), ``gap`` (as JournalFollower's) and ``tail`` (the last ``tail_lines`` records' text).
    Raises GrepUnavailable when journalctl cannot search: nothing is then known of the range, and the
    caller reads it the usual way with a fresh scanner.
    """

    def __init__(
        self,
        scanner: t.Any,
        feed: t.Callable[[dict[str, t.Any]], None],
        unit: str,
        invocation_id: str,
        pattern: str,
        cursor: str | None = None,
        tail_lines: int = 0,
        journalctl: str = "journalctl",
        popen: t.Callable[..., t.Any] = subprocess.Popen,
        libsystemd: bool = True,
    ) -> None:
        self.scanner = scanner
        self.feed = feed
        self.unit = unit
        self.invocation_id = invocation_id
        # how the records not handed over were counted: by libsystemd stepping over them, or from
        # journalctl's stream of every record's cursor (where libsystemd cannot be used)
        self.libsystemd = libsystemd
        self.counted_by: str | None = None
        self.base = journal_command(unit, invocation_id, None, None, journalctl)
        # the invocation alone names the same records (an invocation id is one unit's), and one match
        # costs journalctl and libsystemd less per record than two
        self.searched = [item for item in self.base if not item.startswith("_SYSTEMD_UNIT=")]
        self.pattern = pattern
        self.start = cursor
        self.cursor = cursor
        self.realtime: int | None = None
        self.count = 0
        self.read_records = 0
        self.gap: str | None = None
        self.tail_lines = tail_lines
        self.tail: list[str] = []
        self._popen = popen

    def _from_start(self, argv: list[str]) -> list[str]:
        if self.start:
            argv.insert(1, "--cursor=" + self.start)
        return argv

    def read(self) -> int:
        end = last_entry(self.base, self._popen)
        if end is None or end.get("__CURSOR") == self.start:
            return 0
        end_cursor = str(end["__CURSOR"])
        numbering: t.Any = None
        numbers = None
        if self.libsystemd:
            try:
                numbering = _SdJournalNumbering(self.unit, self.invocation_id, self.start, end_cursor)
                self.counted_by = "libsystemd"
            except GrepUnavailable:
                numbering = None
        # two streams read side by side as they come (the records found, every record's cursor)
        # pylint: disable-next=ansible-bad-function
        grep = self._popen(self._from_start(grep_command(self.searched, self.pattern)), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            shift = 0
            if numbering is None:
                # pylint: disable-next=ansible-bad-function
                numbers = self._popen(self._from_start(cursor_command(self.base)), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                numbering = _Numbering(numbers.stdout, end_cursor)
                self.counted_by = "journalctl cursors"
                shift = self._check_start(numbering)
            fed = 0
            for record in read_records(grep.stdout):
                cursor = str(record.get("__CURSOR") or "")
                if cursor == self.start:
                    continue
                number = numbering.find(cursor)
                if number is None:
                    break
                number -= shift
                if number <= fed:
                    continue  # read already, with the traceback before it
                self.scanner.skip_plain(number - fed - 1)
                self._take(record)
                fed = number
                if self.scanner.open_traceback is not None and cursor != end_cursor:
                    fed = self._read_traceback(cursor, end_cursor, fed)
            total = int(numbering.count_to_end()) - shift
        finally:
            err = self._stop(grep)
            if numbers is not None:
                self._stop(numbers)
            if isinstance(numbering, _SdJournalNumbering):
                numbering.close()
        if grep.returncode not in (0, 1, -9) or (grep.returncode == 1 and err):
            raise GrepUnavailable(f"journalctl --grep failed (rc={grep.returncode}): {err or 'no error output'}")
        self.scanner.skip_plain(total - fed)
        self.count = total
        self.cursor = end_cursor
        self.realtime = _to_int(str(end.get("__REALTIME_TIMESTAMP", ""))) or self.realtime
        if self.tail_lines > 0:
            self.tail = self._tail(end_cursor, total)
        return total

    def _check_start(self, numbering: _Numbering) -> int:
        """1 when the stream starts with the start cursor's own entry (numbers count after it); else
        0, and the gap noted when there was a start cursor."""
        if not self.start:
            return 0
        if numbering.find(self.start) == 1:
            return 1
        self.gap = "the journal no longer holds the last entry read (rotated or vacuumed away): the entries that followed it may be lost"
        raise GrepUnavailable(self.gap)

    def _take(self, record: dict[str, t.Any]) -> None:
        self.read_records += 1
        self.feed(record)

    def _read_traceback(self, cursor: str, end_cursor: str, fed: int) -> int:
        """Read every record after ``cursor`` until the open traceback ends (or the range does)."""
        argv = [*self.base[:1], "--after-cursor=" + cursor, *self.base[1:]]
        for record in JournalReader(argv, popen=self._popen):
            self._take(record)
            fed += 1
            if self.scanner.open_traceback is None or record.get("__CURSOR") == end_cursor:
                break
        return fed

    def _tail(self, end_cursor: str, total: int) -> list[str]:
        argv = [*self.base[:1], "--reverse", "--cursor=" + end_cursor, f"--lines={min(self.tail_lines, total)}", *self.base[1:]]
        records = list(JournalReader(argv, limit=min(self.tail_lines, total), popen=self._popen))
        return [message_text(record) for record in reversed(records)]

    @staticmethod
    def _stop(process: t.Any) -> str:
        if process.poll() is None:
            process.kill()
        err = process.stderr.read() if process.stderr else b""
        process.stdout.close()
        if process.stderr:
            process.stderr.close()
        process.wait()
        return err.decode("utf-8", "replace").strip() if isinstance(err, bytes) else str(err or "").strip()
