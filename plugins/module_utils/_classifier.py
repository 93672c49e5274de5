# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The journal classifier: parsed lines -> classified events -> a report with a verdict.

One implementation for every caller: the filters on the controller, the modules on the target.
Standard library only, no Ansible imports.

Speed: a log is mostly lines that need nothing but counting, and lines repeat with only their
numbers changed (timestamps, ranks, counters, progress figures). Lines are therefore looked up
by their *shape* (digits masked) and only the first line of each shape, and every line that can
matter (errors, warnings, milestones, tracebacks), goes through the full parse and rule match.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils._lines import (
    BLOB_PLACEHOLDER,
    FORM_JSON,
    LINE_CUT_MARK,
    MAX_LINE_CHARS,
    TRACEBACK_HEADER,
    ParsedLine,
    clean,
    decode,
    detect_form,
    parse,
    record_message,
)
from ansible_collections.inferops.runbooks.plugins.module_utils._report import EVENT_CLASSES, MAX_EVENTS_PER_CLASS, rank_order, verdict_of
from ansible_collections.inferops.runbooks.plugins.module_utils._rule_packs import ANY_EXCEPTION_RULES
from ansible_collections.inferops.runbooks.plugins.module_utils._rules import (
    CLASSES,
    ENGINES,
    PHASES,
    Rule,
    RuleError,
    RuleSet,
    check_rules,
    load_rules,
)

__all__ = ["ENGINES", "RuleError", "Scanner", "check_rules", "classify", "classify_line", "load_rules"]

MAX_TRACEBACK_LINES = 60
# how far after a request-level line its traceback may begin (vLLM prints it on the next line)
REQUEST_TRACEBACK_GAP = 2
# the classes of a line after which the engine's code carries on: the traceback it logs is of its class,
# unless the traceback's exception names a failure of the server
CARRIES_ON = ("request_error", "survived")
MAX_SHAPES = 50_000
# bytes of line shapes the cache may hold: one long line each time must not make memory grow
MAX_SHAPE_BYTES = 1 << 24
# event keys remembered (message -> key); each message is a line read whole, at most MAX_LINE_CHARS
MAX_KEYS = 256
TEXT_CHUNK = 1 << 22
REDACTED = "[redacted]"

_DIGIT_MASK = bytes.maketrans(b"0123456789", b"0000000000")
# Shape-cache decisions: only count the line, keep it as the latest bar state, apply its rule, count
# a blob, or open a traceback.
_COUNT, _BAR, _RULED, _BLOB_KIND, _OPENS_KIND = "count", "bar", "ruled", "blob", "opens"


class _Decision:
    """What every line of one digit-masked shape shares: how to count it, the rule that decided,
    the event key of its message, and whether its lines carry a stream prefix (a worker's or a
    vLLM level and location: such a line never belongs to a traceback without one)."""

    __slots__ = ("counted", "key", "kind", "rule", "streamed")

    def __init__(self, kind: str, rule: Rule | None = None, counted: str = "info", key: str | None = None, streamed: bool = False) -> None:
        self.kind = kind
        self.rule = rule
        self.counted = rule.rule_class if rule is not None else counted
        self.key = key
        self.streamed = streamed


_INFO = _Decision(_COUNT)
_INFO_STREAMED = _Decision(_COUNT, streamed=True)
_BLOB = _Decision(_BLOB_KIND)
_OPENS = _Decision(_OPENS_KIND)


# a path component is at most 255 bytes: the bound keeps the search linear on long words
_PATH = r"(?P<path>(?:[\w.\-~]{0,255}/[\w.\-]+){2,}/?)"
_HEX = r"(?P<hex>\b0x[0-9a-fA-F]+\b|\b(?=[a-fA-F]*\d+[a-fA-F])[0-9a-fA-F]+\b(?<=\w{8}))"
_NUM = r"(?P<num>[-+]?\d+(?:\.\d+)?)"
_MASKABLE = re.compile(f"{_PATH}|{_HEX}|{_NUM}")
_MASKABLE_NO_PATH = re.compile(f"{_HEX}|{_NUM}")
_MASK_TEXT = {"path": "<path>", "hex": "<id>", "num": "<n>"}
_MASK_REGEX = {"path": r"\S+", "hex": r"[0-9a-fA-Fx]+", "num": r"[-+]?[\d.]+"}
_BAR_FIGURES = re.compile(r"(\d+)%.{0,512}?(\d+)/(\d+)")
_SLUG = re.compile(r"[^a-z0-9]+")
# an HTTP server's access line (uvicorn's, after its level): logged by another thread while a
# scheduler prints a traceback, it interleaves with the traceback's lines and does not end it
_HTTP_ACCESS = re.compile(r"\S+:\d+ - \"[A-Z]+ \S+ HTTP/[\d.]+\" \d{3}\b")


def mask(message: str) -> str:
    """The message with numbers, paths and ids replaced: identical failures on different ranks
    or at different times share this key."""
    # a path has two slashes at least: without them, the (costlier) path search is left out
    masker = _MASKABLE if message.count("/") >= 2 else _MASKABLE_NO_PATH
    return masker.sub(lambda match: _MASK_TEXT[match.lastgroup or "num"], message)


def suggest_rule(message: str, event_class: str = "allowlisted") -> dict[str, t.Any]:
    """An allowlist rule a user can paste: the message family as a pattern, variable parts masked."""
    text = message.strip()[:160]
    parts: list[str] = []
    position = 0
    for match in _MASKABLE.finditer(text):
        parts.append(_escape(text[position : match.start()]))
        parts.append(_MASK_REGEX[match.lastgroup or "num"])
        position = match.end()
    parts.append(_escape(text[position:]))
    words = _SLUG.sub("-", mask(text).lower().replace("<n>", "").replace("<path>", "").replace("<id>", "")).strip("-")
    return {
        "id": "local-" + "-".join(words.split("-")[:6]),
        "class": event_class,
        "pattern": "".join(parts),
        "reason": "say here why this line is harmless, before you add the rule",
        "reference": f"seen on {datetime.date.today().isoformat()}",
    }


def _escape(literal: str) -> str:
    """re.escape, but leaving spaces readable: the pattern is for people to paste and review."""
    return re.escape(literal).replace("\\ ", " ")


class Event:
    """Lines of one class and one message family, deduplicated across ranks and repeats."""

    __slots__ = (
        "context",
        "count",
        "event_class",
        "first_line",
        "first_timestamp",
        "key",
        "last_line",
        "last_timestamp",
        "level",
        "message",
        "ranks",
        "rule",
        "traceback",
    )

    def __init__(self, event_class: str, rule: Rule | None, line: ParsedLine, key: str, message: str) -> None:
        self.event_class = event_class
        self.rule = rule
        self.key = key
        self.message = message
        self.level = line.level
        self.count = 0
        self.ranks: set[str] = set()
        self.first_line = self.last_line = line.number
        self.first_timestamp = self.last_timestamp = line.timestamp
        self.context: str | None = None
        self.traceback: list[str] | None = None

    def add(self, line: ParsedLine, count: int = 1) -> None:
        self.count += count
        if line.rank:
            self.ranks.add(line.rank)
        self.last_line = line.number
        self.last_timestamp = line.timestamp or self.last_timestamp

    def as_dict(self) -> dict[str, t.Any]:
        result: dict[str, t.Any] = {
            "message": self.message,
            "count": self.count,
            "ranks": sorted(self.ranks, key=rank_order),
            "rule": self.rule.id if self.rule else None,
            "reason": self.rule.reason if self.rule else None,
            "level": self.level,
            "first_line": self.first_line,
            "last_line": self.last_line,
            "first_timestamp": self.first_timestamp,
            "last_timestamp": self.last_timestamp,
            "key": self.key,
        }
        if self.context:
            result["context"] = self.context
        if self.traceback is not None:
            result["traceback"] = self.traceback
        if self.event_class == "unrecognized":
            result["suggested_rule"] = suggest_rule(self.message)
        if self.event_class == "survived":
            # the engine's source file that logged it, whose code carries on after it
            result["file"] = self.rule.file if self.rule else None
        return result


def _bar_line(data: bytes, found: tuple[int, int, int, Rule]) -> tuple[bytes, int, str | None, Rule]:
    start, end, number, rule = found
    return data[start:end], number, None, rule


def _latest_update(shape: bytes) -> bytes:
    """The part of a carriage-return line a terminal would show last."""
    shape = shape.rstrip(b"\r")
    return shape[shape.rfind(b"\r") + 1 :]


_SPECIAL_BYTES = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f-\xff]")
# what makes cleaning change a line (control bytes, a carriage return, ANSI colours) or split it (a bar)
_FRAME_UNSAFE = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f|]")


def _redact_cut_secret(text: str, cut: int, secrets: t.Sequence[str]) -> str:
    """Replace the beginning of a secret that a line cut left just before the cut mark."""
    head = text[:cut]
    for secret in secrets:
        for length in range(len(secret) - 1, 3, -1):
            if head.endswith(secret[:length]):
                return head[:-length] + REDACTED + text[cut:]
    return text


class _OpenTraceback:
    """A traceback being read: header, frames, and (once seen) the exception line."""

    def __init__(self, header: ParsedLine) -> None:
        self.header = header
        self.stream = header.stream
        self.lines = [header.text]
        self.dropped = 0
        self.exception: ParsedLine | None = None
        self._last: ParsedLine | None = header
        self._last_frame = (header.number, header.text)
        context = header.message.rstrip()[: -len(TRACEBACK_HEADER)].rstrip(" :")
        self.context = context or None
        # the request-level rule of the line that logged this traceback (vLLM's logger.exception about one request)
        self.request_rule: Rule | None = None

    @property
    def last(self) -> ParsedLine:
        """The last line added (a bare frame is parsed only if asked for)."""
        if self._last is None:
            self._last = ParsedLine(*self._last_frame)
        return self._last

    def add(self, line: ParsedLine) -> None:
        self._last = line
        self._append(line.text)

    def add_frame(self, number: int, text: str) -> None:
        """A frame line that parsing leaves as it is (see Scanner._add_frame)."""
        self._last, self._last_frame = None, (number, text)
        self._append(text)

    def _append(self, text: str) -> None:
        if len(self.lines) < MAX_TRACEBACK_LINES:
            self.lines.append(text)
        else:
            # keep the head and the tail: the tail names the exception
            del self.lines[MAX_TRACEBACK_LINES // 3]
            self.lines.append(text)
            self.dropped += 1

    def text(self) -> list[str]:
        lines = list(self.lines)
        while lines and not lines[-1].strip():
            lines.pop()
        if self.dropped:
            lines.insert(MAX_TRACEBACK_LINES // 3, f"... {self.dropped} lines left out ...")
        return lines

    @property
    def line_count(self) -> int:
        return len(self.lines) + self.dropped


class Scanner:
    """Streams log input and aggregates it into a report. Memory stays bounded by the evidence kept.

    ``secrets``: strings (an API key) replaced by ``[redacted]`` in everything the report holds
    (event messages, keys, contexts, tracebacks, suggested rules, progress text) and in
    ``open_traceback``; ``redact`` does the same for a caller's own text (a tail of lines).
    """

    def __init__(self, rules: RuleSet, strict: bool = False, line_offset: int = 0, secrets: t.Sequence[str] = ()) -> None:
        self.rules = rules
        self.strict = strict
        self.line_number = line_offset
        self.counts = dict.fromkeys(CLASSES, 0)
        self.events: dict[str, dict[tuple[str | None, str], Event]] = {name: {} for name in EVENT_CLASSES}
        self.dropped_events = 0
        self.ready_line: int | None = None
        self.phase = "starting"
        self.phases: list[dict[str, t.Any]] = []
        self.progress: dict[str, t.Any] | None = None
        self.blob_lines = 0
        self._shapes: dict[bytes, _Decision] = {}
        self._keys: dict[str, str] = {}
        self._frames: set[bytes] = set()
        self._traceback_rules: dict[tuple[str | None, ...], tuple[str, Rule | None]] = {}
        # the last request-level line: (its stream prefix, line number, rule)
        self._request_line: tuple[str | None, int, Rule] | None = None
        self._shape_bytes = 0
        self._pending_bar: tuple[bytes, int, str | None, Rule] | None = None
        self._traceback: _OpenTraceback | None = None
        self._tail = b""
        self._secrets = sorted({secret for secret in secrets if secret}, key=len, reverse=True)
        self._secret_bytes = [secret.encode("utf-8", "surrogateescape") for secret in self._secrets]
        self._words = rules.line_search

    @property
    def open_traceback(self) -> tuple[int, str] | None:
        """Line number and text of the first line of a Python traceback still being read, if any:
        a caller reading a live journal can stop before it and read it whole next time."""
        if self._traceback is None:
            return None
        return self._traceback.header.number, self.redact(self._traceback.header.text)

    @property
    def traceback_reached_exception(self) -> bool:
        """Whether the open traceback has reached its exception line (what follows can only continue it)."""
        return self._traceback is not None and self._traceback.exception is not None

    def redact(self, text: str) -> str:
        """The text with every secret replaced (also a secret's beginning where a long line was cut)."""
        if not self._secrets:
            return text
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        cut = text.find(LINE_CUT_MARK)
        if cut > 0:
            text = _redact_cut_secret(text, cut, self._secrets)
        return text

    # -- input ------------------------------------------------------------------------------

    def feed_text(self, chunk: bytes | str) -> None:
        """Feed raw engine output or journalctl text; lines may span chunks."""
        if isinstance(chunk, str):
            chunk = chunk.encode("utf-8", "surrogateescape")
        if self._tail:
            # complete the line left over from the previous chunk on its own, without copying the chunk
            head, newline, chunk = chunk.partition(b"\n")
            if not newline:
                self._tail += head
                return
            line, self._tail = self._tail + head, b""
            self.feed_line(line)
        complete = chunk.rfind(b"\n") + 1
        self._tail = chunk[complete:]
        self._scan_block(chunk[:complete])

    def feed_records(self, records: t.Iterable[t.Mapping[str, t.Any]]) -> None:
        """Feed journal records (``journalctl -o export`` or ``-o json`` records, as dicts)."""
        for record in records:
            pid = record.get("_PID")
            self.feed_line(record_message(record), str(pid) if pid else None)

    def feed_line(self, raw: bytes | str, pid: str | None = None) -> None:
        """Feed one line (one journal record's message)."""
        data = raw.encode("utf-8", "surrogateescape") if isinstance(raw, str) else raw
        self.line_number += 1
        shape = _latest_update(data.translate(_DIGIT_MASK))
        found = None
        if self._traceback is None and self._shapes.get(shape) is None:
            found = self._words_in(data)
            if found is not None and not found:
                self.counts["info"] += 1
                self._learn_plain(shape)
                return
        if not self._add_frame(data):
            self._take(shape, data, pid, found)

    def _words_in(self, line: bytes) -> set[bytes] | None:
        """What the word search finds in the line: an empty set when it holds no word any rule
        needs, no level word, no traceback header (then the full path would find it ordinary
        information); None when it cannot tell (a control or non-ASCII byte, a rule without words)."""
        words = self._words
        if words is None or _SPECIAL_BYTES.search(line):
            return None
        return set(words.findall(line.lower()))

    def _streamed_info(self, shape: bytes, line: bytes) -> _Decision | None:
        """For a line of a shape known to hold nothing any rule needs, read while a traceback is
        open: _INFO_STREAMED (and remembered for the shape) when the line carries a stream prefix
        and the traceback none, so that it is counted without being looked at again."""
        traceback = self._traceback
        if traceback is None or traceback.stream is not None or _SPECIAL_BYTES.search(line) or len(line) > MAX_LINE_CHARS:
            return None
        if parse(line.decode("utf-8", "replace").rstrip(), self.line_number).stream is None:
            return None
        self._shapes[shape] = _INFO_STREAMED
        return _INFO_STREAMED

    def _learn_plain(self, shape: bytes) -> None:
        """Remember a shape whose line holds no searched word: every line of it holds none, unless
        a searched word has digits that the mask hides."""
        if len(self._shapes) >= MAX_SHAPES or self._shape_bytes + len(shape) > MAX_SHAPE_BYTES:
            return
        if self.rules.digit_words:
            lowered = shape.lower()
            if any(word in lowered for word in self.rules.digit_words):
                return
        self._shape_bytes += len(shape)
        self._shapes[shape] = _INFO

    def _add_frame(self, line: bytes) -> bool:
        """Add a frame line (indented, or blank) to the open traceback the cheap way, when that is
        what the full path would do: a traceback without prefixes before its exception line, and a
        line that cleaning leaves as it is (no control byte, no progress bar, not too long)."""
        traceback = self._traceback
        if traceback is None or traceback.exception is not None or traceback.stream is not None:
            return False
        if line[:1] not in (b" ", b"\t") and line.strip():
            return False
        if len(line) > MAX_LINE_CHARS or _FRAME_UNSAFE.search(line):
            return False
        traceback.add_frame(self.line_number, line.decode("utf-8", "replace").rstrip())
        return True

    def _scan_block(self, data: bytes) -> None:
        """Classify the complete lines of ``data`` (it ends with a newline, or is empty).

        This loop runs once per line of a possibly huge log, so the common cases are inline and
        counted in locals; everything else goes through ``_take``. Raw lines are sliced out of
        ``data`` only when needed: the digit mask keeps every line's length and position. A line
        of a new shape that holds nothing any rule looks for is counted without being parsed.
        """
        shapes = data.translate(_DIGIT_MASK).split(b"\n")
        shapes.pop()
        cache = self._shapes
        counts = self.counts
        number = self.line_number
        info = progress = 0
        start = 0
        latest_bar: tuple[int, int, int, Rule] | None = None
        tracing = self._traceback is not None
        words_in = self._words_in
        # shapes of lines taken as bare traceback frames (what makes one is the same for every line of a shape)
        frames = self._frames
        for shape in shapes:
            number += 1
            end = start + len(shape)
            if b"\r" in shape:
                shape = shape.rstrip(b"\r")
                shape = shape[shape.rfind(b"\r") + 1 :]
            if tracing and shape in frames and len(shape) == end - start:
                traceback = self._traceback
                if traceback is not None and traceback.stream is None and (traceback.exception is None or not shape.strip()):
                    traceback.add_frame(number, data[start:end].decode("utf-8", "replace").rstrip())
                    start = end + 1
                    continue
            known = cache.get(shape)
            if tracing and known is not None and not self._outside_traceback(known):
                known = self._streamed_info(shape, data[start:end]) if known is _INFO else None
            if known is _INFO:
                info += 1
            elif known is not None and known.kind is _COUNT:
                counts[known.counted] += 1
            elif known is not None and known.kind is _BAR:
                progress += 1
                latest_bar = (start, end, number, known.rule)  # type: ignore[assignment]
            else:
                raw = data[start:end]
                start = end + 1
                found = None
                if known is not None:
                    self.line_number = number
                    if latest_bar is not None:
                        self._pending_bar, latest_bar = _bar_line(data, latest_bar), None
                    self._take(shape, raw, None)
                    tracing = self._traceback is not None
                    continue
                if not tracing:
                    found = words_in(raw)
                    if found is not None and not found:
                        info += 1
                        self._learn_plain(shape)
                        continue
                self.line_number = number
                if tracing and self._add_frame(raw):
                    if len(frames) < MAX_SHAPES and len(shape) == len(raw):
                        frames.add(shape)
                    continue
                if latest_bar is not None:
                    self._pending_bar, latest_bar = _bar_line(data, latest_bar), None
                self._take(shape, raw, None, found)
                tracing = self._traceback is not None
                continue
            start = end + 1
        if latest_bar is not None:
            self._pending_bar = _bar_line(data, latest_bar)
        self.line_number = number
        counts["info"] += info
        counts["progress"] += progress

    def _take(self, shape: bytes, raw: bytes, pid: str | None, found: set[bytes] | None = None) -> None:
        """One line at number ``self.line_number``: from the shape cache, or classified from scratch
        (``found``: what the word search found in it, if it was searched)."""
        secret = self._secret_bytes and any(secret in raw for secret in self._secret_bytes)
        known = None if secret else self._shapes.get(shape)
        if known is not None and self._outside_traceback(known):
            self._take_known(shape, known, raw, pid)
            return
        before = self._traceback
        if known is not None and before is not None and self._ends_traceback(shape, known, raw, pid):
            return
        decision = self._classify_raw(raw, self.line_number, pid, found)
        if decision is None or secret:
            return
        # a line read while a traceback was open is remembered only when the traceback did not
        # change how it was read (see _outside_traceback)
        if (before is None or (decision.streamed and before.stream is None)) and self._learn(shape):
            self._shapes[shape] = decision

    def _ends_traceback(self, shape: bytes, known: _Decision, raw: bytes, pid: str | None) -> bool:
        """For a line of a known shape read while a traceback is open: True when the traceback took
        the line, or the line closed it and was then taken as its shape says (outside a traceback,
        a line classifies as its shape does, so no rule needs trying again)."""
        traceback = self._traceback
        segments = clean(raw)
        if traceback is None or len(segments) != 1:
            return False
        line = parse(segments[0], self.line_number, pid)
        if self._continue_traceback(traceback, line):
            return True
        if self._traceback is not None:
            return False
        self._take_known(shape, known, raw, pid, line)
        return True

    def _outside_traceback(self, known: _Decision) -> bool:
        """Whether a line of a known shape is classified as if no traceback were open: none is, or
        the line carries a stream prefix and the open traceback has none."""
        traceback = self._traceback
        return traceback is None or (known.streamed and traceback.stream is None)

    def _learn(self, shape: bytes) -> bool:
        """Whether to keep the decision for this shape: within the cache's bounds, and only when
        every line of the shape classifies alike."""
        if len(self._shapes) >= MAX_SHAPES or self._shape_bytes + len(shape) > MAX_SHAPE_BYTES:
            return False
        if self.rules.shape_is_ambiguous(decode(shape)):
            return False
        self._shape_bytes += len(shape)
        return True

    def _take_known(self, shape: bytes, known: _Decision, raw: bytes, pid: str | None, line: ParsedLine | None = None) -> None:
        """A line whose shape was seen before: count it, and look closer only where it adds something
        (``line``: the line parsed already, if it was)."""
        if known is _OPENS:
            self._open_traceback(line or parse(clean(raw)[-1], self.line_number, pid))
            return
        if known is _BLOB:
            self.blob_lines += 1
        if known.kind is _BAR and known.rule is not None:
            self._pending_bar = (raw, self.line_number, pid, known.rule)
        if known.kind is not _RULED or known.rule is None:
            self.counts[known.counted] += 1
            return
        rule = known.rule
        self.counts[rule.rule_class] += 1
        if rule.rule_class in self.events or self._adds_to_state(rule):
            self._apply(rule, line or parse(clean(raw)[-1], self.line_number, pid), known.key)
        else:
            # a milestone already passed stays passed: from now on lines of this shape are only counted
            self._shapes[shape] = _Decision(_COUNT, rule, streamed=known.streamed)

    def _adds_to_state(self, rule: Rule) -> bool:
        advances = rule.phase is not None and PHASES.index(rule.phase) > PHASES.index(self.phase)
        return advances or (rule.rule_class == "ready" and self.ready_line is None)

    # -- classification -----------------------------------------------------------------------

    def _classify_raw(self, raw: bytes | str, number: int, pid: str | None, found: set[bytes] | None = None) -> _Decision | None:
        """Classify a line from scratch; returns what lines of the same shape can reuse, if anything."""
        segments = clean(raw)
        decisions = [self._classify_segment(parse(text, number, pid), found) for text in segments]
        return decisions[0] if len(decisions) == 1 else None

    def _classify_segment(self, line: ParsedLine, found: set[bytes] | None = None) -> _Decision | None:
        if self._traceback is not None and self._continue_traceback(self._traceback, line):
            return None
        if line.message == BLOB_PLACEHOLDER:
            self.blob_lines += 1
            self.counts["info"] += 1
            return _BLOB
        if line.opens_traceback():
            self._open_traceback(line)
            return _OPENS
        rule = self.rules.match(line.message, line.level, found, line.logger)
        if rule is None or rule.rule_class == "info":
            self.counts["info"] += 1
            return _INFO if line.stream is None else _INFO_STREAMED
        self.counts[rule.rule_class] += 1
        key = self._key(line.message) if rule.rule_class in self.events else None
        self._apply(rule, line, key)
        return _Decision(_BAR if rule.progress_bar else _RULED, rule, key=key, streamed=line.stream is not None)

    def _open_traceback(self, header: ParsedLine) -> None:
        """Open a traceback; one that a request-level line logged (right after it, with the same
        stream prefix as vLLM prints it, or none as SGLang does) is that request's, unless its
        exception names a failure of the server."""
        traceback = self._traceback = _OpenTraceback(header)
        request = self._request_line
        if request is not None and header.stream in (request[0], None) and 0 < header.number - request[1] <= REQUEST_TRACEBACK_GAP:
            traceback.request_rule = request[2]

    def _apply(self, rule: Rule, line: ParsedLine, key: str | None = None) -> None:
        """What a classified line adds to the report (its count is already taken)."""
        if rule.rule_class in CARRIES_ON:
            self._request_line = (line.stream, line.number, rule)
        if rule.rule_class in self.events:
            self._record(rule.rule_class, rule, line, key=key)
        elif rule.rule_class == "ready" and self.ready_line is None:
            self.ready_line = line.number
        if rule.phase:
            self._enter_phase(rule.phase, line)
        if rule.progress_bar:
            # this bar line is newer than any bar state still waiting to be read
            self._pending_bar = None
            self._read_bar(line)

    def _record(self, event_class: str, rule: Rule | None, line: ParsedLine, key: str | None = None) -> Event | None:
        bucket = self.events[event_class]
        event_key = (rule.id if rule else None, key if key is not None else self._key(line.message))
        event = bucket.get(event_key)
        if event is None:
            if len(bucket) >= MAX_EVENTS_PER_CLASS:
                self.dropped_events += 1
                return None
            event = bucket[event_key] = Event(event_class, rule, line, event_key[1], self.redact(line.message.strip()))
        event.add(line)
        return event

    def _key(self, message: str) -> str:
        """The event key of a message: secrets out first, then numbers, paths and ids masked.
        Remembered for the messages seen last: the same failure is logged again and again."""
        key = self._keys.get(message)
        if key is None:
            if len(self._keys) >= MAX_KEYS:
                self._keys.clear()
            key = self._keys[message] = mask(self.redact(message.strip()))
        return key

    def _enter_phase(self, phase: str, line: ParsedLine) -> None:
        if PHASES.index(phase) <= PHASES.index(self.phase) and self.phases:
            return
        self._flush_bar()
        self.phase = phase
        self.phases.append({"phase": phase, "line": line.number, "timestamp": line.timestamp})

    def _read_bar(self, line: ParsedLine) -> None:
        figures = _BAR_FIGURES.search(line.message)
        if not figures:
            return
        percent, done, total = (int(value) for value in figures.groups())
        description = self.redact(line.message[: figures.start()].rstrip(" :|"))
        unit = "shards" if "shard" in description.lower() else "batches" if "batch" in description.lower() else "steps"
        self.progress = {
            "phase": self.phase,
            "description": description,
            "percent": percent,
            "done": done,
            "total": total,
            "text": f"{self.phase.replace('_', ' ')} {percent}% ({done}/{total} {unit})",
            "line": line.number,
        }

    def _flush_bar(self) -> None:
        """Read the latest bar state, deferred so that a bar updated a million times is read once."""
        if self._pending_bar is None:
            return
        raw, number, pid, rule = self._pending_bar
        self._pending_bar = None
        line = parse(clean(raw)[0], number, pid)
        if rule.phase:
            self._enter_phase(rule.phase, line)
        self._read_bar(line)

    # -- tracebacks -----------------------------------------------------------------------------

    def _continue_traceback(self, traceback: _OpenTraceback, line: ParsedLine) -> bool:
        """Add the line to the open traceback if it belongs there; close the traceback when it ends."""
        if line.stream != traceback.stream or (line.tagged and _HTTP_ACCESS.match(line.message)):
            return False
        if traceback.exception is not None:
            # an indented line right after the exception line continues its message (pydantic's
            # ValidationError details, exception notes): "  Value error, User-specified max_model_len ..."
            if line.chains_traceback() or not line.message.strip() or self._continues_exception(traceback, line):
                traceback.add(line)
                return True
            if line.opens_traceback() and (traceback.last.chains_traceback() or not traceback.last.message.strip()):
                traceback.exception = None
                traceback.add(line)
                return True
            self._close_traceback()
            return False
        if line.is_frame() or line.chains_traceback() or line.opens_traceback():
            traceback.add(line)
            return True
        if line.tagged and traceback.stream is None:
            self._close_traceback()
            return False
        traceback.exception = line
        traceback.add(line)
        return True

    @staticmethod
    def _continues_exception(traceback: _OpenTraceback, line: ParsedLine) -> bool:
        """An indented line right after the exception line, or after such a line."""
        if line.message[:1] not in (" ", "\t"):
            return False
        last = traceback.last
        return last is traceback.exception or last.message[:1] in (" ", "\t")

    def _close_traceback(self) -> None:
        traceback = self._traceback
        if traceback is None:
            return
        self._traceback = None
        header, last_number = traceback.header, traceback.last.number
        if traceback.exception is not None:
            summary = traceback.exception
        else:
            summary = parse(f"{header.message.strip()} (traceback cut short; last line: {traceback.last.message.strip()})", header.number)
        summary.rank = header.rank or summary.rank
        summary.timestamp = header.timestamp or summary.timestamp
        summary.number = header.number
        event_class, rule = self._traceback_rule(summary, header, traceback.request_rule)
        self.counts[event_class] += traceback.line_count
        event = self._record(event_class, rule, summary)
        if event is not None:
            event.last_line = max(event.last_line, last_number)
            if event.traceback is None:
                event.context = None if traceback.context is None else self.redact(traceback.context)
                event.traceback = [self.redact(text) for text in traceback.text()]

    def _traceback_rule(self, summary: ParsedLine, header: ParsedLine, request_rule: Rule | None = None) -> tuple[str, Rule | None]:
        """The class and rule of a traceback, from its exception line or its header; remembered,
        as the same traceback is logged by every rank. A request-level line's traceback is
        request-level, unless a fatal rule that names a failure (not just an exception) matches it."""
        asked = (summary.message, summary.level, header.message, header.level, request_rule.id if request_rule else None)
        found = self._traceback_rules.get(asked)
        if found is None:
            rule = self.rules.match(summary.message, summary.level, location=summary.logger) or self.rules.match(
                header.message, header.level, location=header.logger
            )
            event_class = "allowlisted" if rule is not None and rule.rule_class == "allowlisted" else "fatal"
            if event_class == "fatal" and (rule is None or rule.rule_class != "fatal"):
                rule = self.rules.match(TRACEBACK_HEADER, "none")
            if request_rule is not None and event_class == "fatal" and (rule is None or rule.id in ANY_EXCEPTION_RULES):
                event_class, rule = request_rule.rule_class, request_rule
            if len(self._traceback_rules) >= MAX_KEYS:
                self._traceback_rules.clear()
            found = self._traceback_rules[asked] = (event_class, rule)
        return found

    # -- lines not read, and what was judged so far -------------------------------------------------

    def skip_plain(self, count: int) -> None:
        """Count ``count`` lines that were not read because they hold nothing any rule, level or
        traceback needs (``journalctl --grep`` left them out): ordinary information, as the full
        read would have found them. Only between lines, with no traceback open."""
        if count <= 0:
            return
        if self._traceback is not None or self._tail:
            raise ValueError("lines can be skipped only between lines, with no traceback open")
        self.counts["info"] += count
        self.line_number += count

    def fingerprint(self) -> str:
        """What a saved state was judged with: the rules (in order, as compiled), strict mode and the
        secrets (hashed together): a state judged otherwise is not taken up again."""
        rules = [[rule.id, rule.rule_class, rule.pattern, rule.levels, rule.phase, rule.progress_bar, rule.reason] for rule in self.rules.rules]
        text = json.dumps([STATE_VERSION, rules, self.strict, self._secrets], sort_keys=True, default=str)
        return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()

    def state(self) -> dict[str, t.Any] | None:
        """What was judged so far, as JSON-able data that ``restore`` takes up again (the caches
        are left out: they only make reading faster); None while a traceback is open (it is read
        whole next time) or a partial line is pending."""
        if self._traceback is not None or self._tail:
            return None
        pending = None
        if self._pending_bar is not None:
            raw, number, pid, rule = self._pending_bar
            pending = [raw.decode("latin-1"), number, pid, rule.id]
        return {
            "fingerprint": self.fingerprint(),
            "line_number": self.line_number,
            "counts": dict(self.counts),
            "events": {name: [_event_state(event) for event in bucket.values()] for name, bucket in self.events.items()},
            "dropped_events": self.dropped_events,
            "ready_line": self.ready_line,
            "phase": self.phase,
            "phases": self.phases,
            "progress": self.progress,
            "blob_lines": self.blob_lines,
            "pending_bar": pending,
        }

    def restore(self, state: t.Mapping[str, t.Any]) -> None:
        """Take up a ``state`` of the same rules; raises ValueError (nothing changed) when it cannot."""
        try:
            if state.get("fingerprint") != self.fingerprint():
                raise ValueError("it was judged with other rules, strict mode or secrets")
            by_id = {rule.id: rule for rule in self.rules.rules}
            events: dict[str, dict[tuple[str | None, str], Event]] = {name: {} for name in EVENT_CLASSES}
            for name, saved in state["events"].items():
                for item in saved:
                    event = _event_from_state(name, item, by_id)
                    events[name][(event.rule.id if event.rule else None, event.key)] = event
            counts = {name: int(state["counts"][name]) for name in CLASSES}
            pending = state.get("pending_bar")
            pending_bar = None if pending is None else (str(pending[0]).encode("latin-1"), int(pending[1]), pending[2], by_id[pending[3]])
            phase = str(state["phase"])
            if phase not in PHASES:
                raise ValueError(f"unknown phase {phase!r}")
            values = (int(state["line_number"]), int(state["dropped_events"]), int(state["blob_lines"]))
            ready_line = None if state.get("ready_line") is None else int(state["ready_line"])
            phases, progress = list(state["phases"]), state.get("progress")
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, UnicodeEncodeError) as exc:
            raise ValueError(f"the saved state cannot be taken up: {exc}") from None
        self.line_number, self.dropped_events, self.blob_lines = values
        self.counts, self.events, self._pending_bar = counts, events, pending_bar
        self.ready_line, self.phase, self.phases, self.progress = ready_line, phase, phases, progress
        self._traceback, self._tail = None, b""

    # -- report ------------------------------------------------------------------------------

    def finish(self) -> dict[str, t.Any]:
        """Flush what is pending and build the report."""
        if self._tail:
            tail, self._tail = self._tail, b""
            self.feed_line(tail)
        self._flush_bar()
        self._close_traceback()
        return self.report()

    def report(self) -> dict[str, t.Any]:
        report: dict[str, t.Any] = {
            "ready": self.ready_line is not None,
            "ready_line": self.ready_line,
            "phase": self.phase,
            "phases": self.phases,
            "progress": self.progress,
            "counts": dict(self.counts),
            "lines": self.line_number,
            "blob_lines": self.blob_lines,
            "dropped_events": self.dropped_events,
            "stale_rules": self.rules.stale(),
            "strict": self.strict,
        }
        for event_class, bucket in self.events.items():
            report[event_class] = _sorted_events(bucket)
        report["verdict"], report["reason"] = verdict_of(report)
        return report


STATE_VERSION = 2
_EVENT_FIELDS = ("count", "first_line", "last_line", "first_timestamp", "last_timestamp", "level", "context", "traceback")


def _event_state(event: Event) -> dict[str, t.Any]:
    state = {name: getattr(event, name) for name in _EVENT_FIELDS}
    state.update(rule=event.rule.id if event.rule else None, key=event.key, message=event.message, ranks=sorted(event.ranks))
    return state


def _event_from_state(event_class: str, state: t.Mapping[str, t.Any], rules: t.Mapping[str, Rule]) -> Event:
    if event_class not in EVENT_CLASSES:
        raise ValueError(f"unknown event class {event_class!r}")
    rule = None if state["rule"] is None else rules[state["rule"]]
    event = Event(event_class, rule, ParsedLine(int(state["first_line"]), ""), str(state["key"]), str(state["message"]))
    for name in _EVENT_FIELDS:
        setattr(event, name, state[name])
    event.ranks = {str(rank) for rank in state["ranks"]}
    return event


def _sorted_events(bucket: dict[tuple[str | None, str], Event]) -> list[dict[str, t.Any]]:
    return [event.as_dict() for event in sorted(bucket.values(), key=lambda event: event.first_line)]


# -- one-call helpers ------------------------------------------------------------------------


def classify(
    source: t.Any,
    engine: str = "auto",
    extra_rules: t.Sequence[t.Any] | None = None,
    disabled: t.Iterable[str] | None = None,
    strict: bool = False,
    rules: RuleSet | None = None,
) -> dict[str, t.Any]:
    """Classify a whole log given as text (any of the three forms), bytes, a list of lines,
    a list of journal records, or an open binary file."""
    ruleset = rules or load_rules(engine, extra_rules, disabled)
    scanner = Scanner(ruleset, strict=strict)
    _feed(scanner, source)
    return scanner.finish()


def _feed(scanner: Scanner, source: t.Any) -> None:
    if source is None:
        return
    if isinstance(source, (str, bytes)):
        _feed_text(scanner, source)
    elif hasattr(source, "read"):
        for chunk in iter(lambda: source.read(TEXT_CHUNK), b""):
            scanner.feed_text(chunk)
    elif isinstance(source, t.Mapping):
        scanner.feed_records([source])
    else:
        items = list(source)
        if all(isinstance(item, t.Mapping) for item in items):
            scanner.feed_records(items)
        else:
            for item in items:
                if not isinstance(item, (str, bytes)):
                    raise TypeError(f"cannot classify a list item of type {type(item).__name__}: give strings or journal records")
                scanner.feed_line(item)


def _feed_text(scanner: Scanner, text: str | bytes) -> None:
    if detect_form(decode(text[:8192])) == FORM_JSON:
        scanner.feed_records(_json_records(decode(text)))
        return
    for start in range(0, len(text), TEXT_CHUNK):
        scanner.feed_text(text[start : start + TEXT_CHUNK])


def _json_records(text: str) -> t.Iterator[t.Mapping[str, t.Any]]:
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"journal JSON line {number} is not valid JSON: {exc}") from None
        if isinstance(record, dict):
            yield record


def classify_line(line: str | bytes, engine: str = "auto", rules: RuleSet | None = None) -> dict[str, t.Any]:
    """The class of a single line, and the rule that decided it."""
    ruleset = rules or load_rules(engine)
    texts = clean(line)
    parsed = parse(texts[-1] if texts else "", 1)
    if len(texts) > 1:
        first = parse(texts[0], 1)
        if (
            ruleset.match(first.message, first.level, location=first.logger) is not None
            and ruleset.match(parsed.message, parsed.level, location=parsed.logger) is None
        ):
            parsed = first
    rule = ruleset.match(parsed.message, parsed.level, location=parsed.logger)
    event_class = rule.rule_class if rule else "info"
    if parsed.opens_traceback():
        event_class = "fatal"
    return {
        "class": event_class,
        "rule": rule.id if rule else None,
        "reason": rule.reason if rule else None,
        "phase": rule.phase if rule else None,
        "message": parsed.message,
        "level": parsed.level,
        "rank": parsed.rank,
        "timestamp": parsed.timestamp,
    }
