# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""From raw journal or engine output to parsed lines.

Handles the three input forms (journalctl JSON records, journalctl text, raw engine output),
terminal noise (carriage-return progress updates, ANSI colours, control characters, invalid
UTF-8) and the prefixes engines and libraries put before a message (timestamps, tensor-parallel
ranks, levels, loggers). Standard library only.
"""

from __future__ import annotations

import json
import re
import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils import _engines

BLOB_PLACEHOLDER = "[blob data]"
# What the classifier reads of one line at most: a longer one (a dumped tensor, a huge request) is
# cut, with a note saying how much was left out, so that no line costs more than this many.
MAX_LINE_CHARS = 16_384
LINE_CUT_MARK = " [... "
LINE_CUT_NOTE = LINE_CUT_MARK + "{} more characters not read]"

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# A tqdm bar followed, without a newline, by the next log record ("...?it/s][2025-02-09 ... TP0] Using ...").
_BAR_WITH_TAIL = re.compile(r"^(.*?\d+/\d+ \[[^\]]*\])(\S.*)$")

_JOURNAL_PREFIX = re.compile(
    r"^(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)?|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)"
    r" \S+ ([^\s:\[]+)(?:\[(\d+)\])?: "
)
_PLATFORM_ERROR_PREFIX = re.compile(r"^ERROR \d{4}-\d\d-\d\dT[\d:.]+Z ")
_GPU_PREFIX = re.compile(r"^\[gpu(?:_id)?=(\d+)\] ")
_WORKER_PREFIX = re.compile(r"^\((\w+)(?: rank=(\d+))? pid=(\d+)\) ")
_TORCH_RANK_PREFIX = re.compile(r"^\[rank(\d+)\]: ?")
_LEADING_TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?) ")

_LEVEL_NAMES = {"WARN": "WARNING", "FATAL": "CRITICAL", "W": "WARNING", "E": "ERROR", "I": "INFO", "F": "CRITICAL", "D": "DEBUG"}
_LEVEL_WORDS = r"DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL"
_PYLOG_LEVEL = re.compile(rf"^- (?:(\S+) - )?({_LEVEL_WORDS}) - (?:\[[\w.]+\] - )?")
_UVICORN_LEVEL = re.compile(rf"^({_LEVEL_WORDS}):\s+")
_BRACKET_LEVEL = re.compile(rf"^\[({_LEVEL_WORDS})\] ")
_GLOG_LEVEL = re.compile(r"^\[([WEIF])\d{3,4} [\d:.]+ ([\w.]+:\d+)\] ")
_NCCL_LEVEL = re.compile(r"^\S+:\d+:\d+ \[\d+\] (?:\S+ )?NCCL (INFO|WARN|ERROR) ")
_PYTHON_WARNING = re.compile(r"\b\w*Warning: ")
_PREFIX_OPENERS = ("[", "(")
_LEVEL_INITIALS = frozenset("DIWECF")

TRACEBACK_HEADER = "Traceback (most recent call last):"
_CHAIN_MARKERS = ("During handling of the above exception", "The above exception was the direct cause")
# Lower-case words without which a line's structure holds nothing but information: a traceback
# header, journalctl's blob placeholder, and a progress bar glued to the next record.
STRUCTURE_WORDS = (TRACEBACK_HEADER.lower(), BLOB_PLACEHOLDER, "%|", "completed |")
_JOURNAL_FIELD = re.compile(r"^_{0,2}[A-Z0-9_]+$")


class ParsedLine:
    """One log line taken apart: where it came from and what it says."""

    __slots__ = ("level", "logger", "message", "number", "rank", "stream", "tagged", "text", "timestamp")

    def __init__(self, number: int, text: str) -> None:
        self.number = number
        self.text = text
        self.message = text
        self.level = "none"
        self.logger: str | None = None
        self.rank: str | None = None
        self.timestamp: str | None = None
        # Lines of a traceback all carry the same level/location prefix (vLLM's): it names the stream.
        self.stream: str | None = None
        # True when the line carries an engine prefix, so it starts a new record (not a traceback line).
        self.tagged = False

    def opens_traceback(self) -> bool:
        return self.message.rstrip().endswith(TRACEBACK_HEADER)

    def chains_traceback(self) -> bool:
        return self.message.startswith(_CHAIN_MARKERS)

    def is_frame(self) -> bool:
        """An indented traceback frame, source line, caret marker, or an empty line."""
        return not self.message.strip() or self.message[:1] in (" ", "\t")


def decode(raw: bytes | str) -> str:
    if isinstance(raw, bytes):
        return raw.decode("utf-8", "replace")
    return raw


def clean(raw: bytes | str) -> list[str]:
    """Terminal output to the text a reader sees: the latest state of a carriage-return line,
    without colours or control characters; a bar glued to the next record becomes two lines."""
    text = decode(raw)
    if "\r" in text:
        segments = [segment for segment in text.split("\r") if segment.strip()]
        text = segments[-1] if segments else ""
    if len(text) > MAX_LINE_CHARS:
        text = text[:MAX_LINE_CHARS] + LINE_CUT_NOTE.format(len(text) - MAX_LINE_CHARS)
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if not text.isprintable():
        text = _CONTROL.sub("", text)
    text = text.rstrip()
    glued = _BAR_WITH_TAIL.match(text) if "/" in text and ("%|" in text or "Completed |" in text) else None
    if glued and ("%|" in glued.group(1) or "Completed |" in glued.group(1)):
        return [glued.group(1), glued.group(2)]
    return [text]


def parse(text: str, number: int, pid: str | None = None) -> ParsedLine:
    """Strip the journal, platform, engine and logging prefixes off a cleaned line."""
    line = ParsedLine(number, text)
    rest = text
    journal = _JOURNAL_PREFIX.match(rest)
    if journal:
        pid = pid or journal.group(2)
        rest = rest[journal.end() :]
    if rest.startswith("ERROR "):
        rest = _PLATFORM_ERROR_PREFIX.sub("", rest, count=1)
    rest = _strip_engine_prefixes(line, rest)
    rest = _strip_level(line, rest)
    if line.rank is None and pid:
        line.rank = f"pid{pid}"
    line.message = rest
    return line


class _EnginePrefixes:
    """The drivers' line prefixes (``_engines``), as ``parse`` tries them: those without a level with the
    common rank prefixes, those with one before the common levels."""

    ranked: t.Tuple[re.Pattern[str], ...] = ()
    levelled: t.Tuple[t.Tuple[re.Pattern[str], str], ...] = ()
    openers: str = "".join(_PREFIX_OPENERS)


def _read_engine_prefixes() -> None:
    prefixes = [prefix for driver in _engines.DRIVERS.values() for prefix in driver.line_prefixes]
    ranked = [prefix for prefix in prefixes if "level" not in prefix.pattern.groupindex]
    _EnginePrefixes.ranked = tuple(prefix.pattern for prefix in ranked)
    _EnginePrefixes.levelled = tuple((prefix.pattern, prefix.openers) for prefix in prefixes if "level" in prefix.pattern.groupindex)
    _EnginePrefixes.openers = "".join(sorted(set("".join(_PREFIX_OPENERS) + "".join(prefix.openers for prefix in ranked))))


_engines.on_change(_read_engine_prefixes)


def _strip_engine_prefixes(line: ParsedLine, rest: str) -> str:
    # every rank prefix starts with one of a few characters: most lines are told at once
    while rest[:1] and rest[:1] in _EnginePrefixes.openers:
        match = _engine_prefix(rest)
        if match is not None:
            _take_engine_prefix(line, match, nested=True)
        elif (match := _WORKER_PREFIX.match(rest)) is not None:
            line.rank = f"rank{match.group(2)}" if match.group(2) else f"pid{match.group(3)}"
            line.stream = match.group(0)
        elif (match := _TORCH_RANK_PREFIX.match(rest)) is not None:
            line.rank = f"rank{match.group(1)}"
        elif (match := _GPU_PREFIX.match(rest)) is not None:
            line.rank = f"gpu{match.group(1)}"
        else:
            return rest
        line.tagged = True
        rest = rest[match.end() :]
    return rest


def _engine_prefix(rest: str) -> re.Match[str] | None:
    for pattern in _EnginePrefixes.ranked:
        match = pattern.match(rest)
        if match is not None:
            return match
    return None


def _take_engine_prefix(line: ParsedLine, match: re.Match[str], nested: bool) -> None:
    """What a driver's prefix holds, into the line: its timestamp, ranks, level and logger; a level with a
    logger names the stream. Of rank prefixes nested in each other (a wrapper's around the engine's own),
    the innermost one's timestamp is the line's; a level prefix's is taken only when none was found."""
    found = match.groupdict()
    timestamp, rank, level, logger = found.get("timestamp"), found.get("rank"), found.get("level"), found.get("logger")
    line.timestamp = (timestamp or line.timestamp) if nested else (line.timestamp or timestamp)
    line.rank = (rank or "").strip() or line.rank
    if level:
        line.level = _level(level)
        if logger:
            line.stream = f"{line.stream or ''}{level} {logger}"
    line.logger = logger or line.logger
    line.tagged = True


def _strip_level(line: ParsedLine, rest: str) -> str:
    first = rest[:1]
    if not first:
        return rest
    stamp = _LEADING_TIMESTAMP.match(rest) if first.isdecimal() else None
    if stamp:
        line.timestamp = line.timestamp or stamp.group(1)
        rest = rest[stamp.end() :]
        line.tagged = True
        pylog = _PYLOG_LEVEL.match(rest)
        if pylog:
            line.logger, line.level = pylog.group(1), _level(pylog.group(2))
            return rest[pylog.end() :]
        return rest
    for pattern, openers in _EnginePrefixes.levelled:
        engine = pattern.match(rest) if first in openers else None
        if engine is not None:
            _take_engine_prefix(line, engine, nested=False)
            return rest[engine.end() :]
    if first in _LEVEL_INITIALS:
        level = _uvicorn_level(line, rest)
        if level is not None:
            return level
    elif first == "[":
        level = _bracket_level(line, rest)
        if level is not None:
            return level
    nccl = _NCCL_LEVEL.match(rest) if "NCCL " in rest else None
    if nccl:
        line.level = _level(nccl.group(1))
        line.tagged = True
        return rest[nccl.group(0).rindex("NCCL ") :]
    if "Warning: " in rest and _PYTHON_WARNING.search(rest):
        line.level = "WARNING"
    return rest


def _uvicorn_level(line: ParsedLine, rest: str) -> str | None:
    """uvicorn's ``LEVEL:  ``; the rest of the line."""
    match = _UVICORN_LEVEL.match(rest)
    if match:
        line.level = _level(match.group(1))
        line.tagged = True
        return rest[match.end() :]
    return None


def _bracket_level(line: ParsedLine, rest: str) -> str | None:
    """``[LEVEL] `` or glog's ``[W0530 12:00:00.123 file.cc:42] ``; the rest of the line."""
    match = _BRACKET_LEVEL.match(rest)
    if match:
        line.level = _level(match.group(1))
        line.tagged = True
        return rest[match.end() :]
    glog = _GLOG_LEVEL.match(rest)
    if glog:
        line.level, line.logger = _level(glog.group(1)), glog.group(2)
        line.tagged = True
        return rest[glog.end() :]
    return None


def _level(word: str) -> str:
    word = word.upper()
    return _LEVEL_NAMES.get(word, word)


# -- input forms ------------------------------------------------------------------------------

FORM_JSON = "journal_json"
FORM_JOURNAL_TEXT = "journal_text"
FORM_RAW = "raw"


def detect_form(sample: str) -> str:
    """Tell journalctl JSON, journalctl text and raw engine output apart from the first lines."""
    lines = [line for line in sample.splitlines()[:20] if line.strip()]
    if not lines:
        return FORM_RAW
    if lines[0].lstrip().startswith("{"):
        try:
            record = json.loads(lines[0])
        except ValueError:
            record = None
        # a journal record, even one without MESSAGE: every key is a journal field name
        if isinstance(record, dict) and record and all(isinstance(key, str) and _JOURNAL_FIELD.match(key) for key in record):
            return FORM_JSON
    journal = sum(1 for line in lines if _JOURNAL_PREFIX.match(line) or line.startswith("-- "))
    return FORM_JOURNAL_TEXT if journal * 2 >= len(lines) else FORM_RAW


def record_message(record: t.Mapping[str, t.Any]) -> bytes | str:
    """MESSAGE of a journal record: a string, or bytes (journalctl -o export), or the list of byte
    values of journalctl -o json when the message holds control characters (tqdm's carriage
    returns) or invalid UTF-8; a list that is not bytes (a value over 255 or negative) is empty."""
    message = record.get("MESSAGE", "")
    if isinstance(message, (bytes, str)):
        return message
    if isinstance(message, list):
        try:
            return bytes(message)
        except (TypeError, ValueError):
            return ""
    if message is None:
        return ""
    return message if isinstance(message, str) else str(message)
