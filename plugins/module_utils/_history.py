# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A host's start history: what its last starts of a unit looked like, and what that predicts.

Private to the collection; may change at any time. Standard library only, no Ansible imports (runs
on the targets, and on the controller for the estimators).

One JSON file per unit, ``<state_dir>/<unit>.history.json`` next to the run record (``_run_record``:
the same atomic write, the same versioning), bounded to the last N starts. Each entry is one start
(one systemd invocation): its outcome, total time, each phase's duration (from the classifier's phase
markers, timed by the journal), the engine's own timings where it logs them (SGLang's
``Engine startup timings (s): load_weight=...``, vLLM's ``... took N seconds``), the model and engine
version where the journal names them, a fingerprint of the unit's configuration, and the masked
templates of the line groups the report holds (numbers, ids, paths and rank prefixes masked, secrets
redacted first) with their counts. A file that is corrupt, about another unit or from a newer
collection is reported and ignored, never fatal.

The estimators read only good starts (``outcome == "pass"``) on the same configuration fingerprint: a
changed ExecStart, drop-in or environment file starts a new baseline.
"""

from __future__ import annotations

import calendar
import hashlib
import re
import statistics
import time
import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils import _engines
from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import REDACTED, Scanner, mask
from ansible_collections.inferops.runbooks.plugins.module_utils._lines import clean, parse, record_message
from ansible_collections.inferops.runbooks.plugins.module_utils._rules import PHASES, RuleSet, load_rules
from ansible_collections.inferops.runbooks.plugins.module_utils._run_record import STATE_DIR, RecordError, parse_state, read_state, record_path
from ansible_collections.inferops.runbooks.plugins.module_utils._run_record import write as _write_json

VERSION = 1
DEFAULT_SIZE = 20
DEFAULT_MIN_GOOD = 3
DEFAULT_STALL_FACTOR = 1.5
DEFAULT_STALL_FLOOR = 60.0
DEFAULT_SLOW_RATIO = 2.0
# the good starts an estimate looks at, newest first
RECENT_GOOD = 10
OUTCOMES = ("pass", "fail")
# the phases a start goes through before it is ready: each has a duration
TIMED_PHASES = PHASES[:-1]
EVENT_CLASSES = ("fatal", "allowlisted", "unrecognized")
MAX_TEMPLATES = 200
MAX_TEMPLATE_CHARS = 240
MAX_TIMINGS = 32
_TIME_RING = 4096

History = dict[str, t.Any]
Entry = dict[str, t.Any]


class HistoryError(RecordError):
    """The history cannot be used as it is (corrupt, foreign, from a newer collection)."""


# -- templates ---------------------------------------------------------------------------------

# rank prefixes left in a message once its numbers are masked (``[DP0 TP1]``, ``TP3``, ``rank7``)
_RANK = re.compile(r"\b(?:DP|PP|TP|EP|ATTN_CP|MOE_DP|rank|gpu|pid|gpu_id=)<n>")
_RANKS = re.compile(r"<rank>(?:[\s,]+<rank>)+")
_SPACES = re.compile(r"\s+")


def template(line: str | bytes, secrets: t.Sequence[str] = ()) -> str:
    """A line's message family: journal, timestamp, rank and level prefixes removed, secrets
    redacted, then numbers, hexadecimal ids and paths masked, rank names left in the text masked too.
    The same line from rank TP3 at 12:29:21 and from ``DP0 TP1`` an hour later has one template."""
    texts = clean(line)
    message = parse(texts[-1] if texts else "", 0).message.strip()
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        message = message.replace(secret, REDACTED)
    masked = _RANKS.sub("<rank>", _RANK.sub("<rank>", mask(message)))
    masked = _SPACES.sub(" ", masked).strip()
    return masked[:MAX_TEMPLATE_CHARS]


# -- the configuration fingerprint ---------------------------------------------------------------

# runtime fields systemctl show adds to ExecStart=: they change with every start
_EXEC_RUNTIME = re.compile(r"\s*;\s*(?:start_time|stop_time|pid|code|status)=[^;}]*")


def exec_start_text(value: str) -> str:
    """ExecStart= as ``systemctl show`` prints it, without the fields that change at each start."""
    return _SPACES.sub(" ", _EXEC_RUNTIME.sub("", value or "")).strip()


def fingerprint(
    exec_start: str,
    dropins: t.Mapping[str, str | bytes | None] | None = None,
    environment_files: t.Mapping[str, str | bytes | None] | None = None,
    environment: str = "",
) -> str:
    """The hash of what configures a start: ExecStart (runtime fields removed), each drop-in's path and
    content, each environment file's path and content, and the unit's Environment= (contents are
    hashed, never stored)."""
    digest = hashlib.sha256()

    def add(label: str, value: str | bytes | None) -> None:
        data = b"\0absent" if value is None else value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
        digest.update(label.encode("utf-8", "surrogateescape") + b"\0" + hashlib.sha256(data).digest())

    add("exec_start", exec_start_text(exec_start))
    add("environment", environment or "")
    for kind, files in (("dropin", dropins or {}), ("environment_file", environment_files or {})):
        for path in sorted(files):
            add(f"{kind}:{path}", files[path])
    return digest.hexdigest()[:16]


# -- one start, observed ----------------------------------------------------------------------

_TIMING_PAIR = re.compile(r"([A-Za-z_][\w.]*)\s*[=:]\s*([\d.]+)")
_TOOK = re.compile(r"^(.{3,80}?)\s+took\s+(?:[\d.]+\s*[KMG]i?B(?:\s+memory)?\s+and\s+)?([\d.]+)\s*s(?:ec(?:ond)?s?)?\b", re.IGNORECASE)
_MODEL = re.compile(r"(?:\bmodel_path=|\bmodel=|'model':\s*)'([^']{1,300})'")
_STAMP = re.compile(r"^(?:(?:\d{4}-)?(\d\d)-(\d\d)[ T])?(\d\d):(\d\d):(\d\d)(?:[.,](\d+))?")


def _timestamp_seconds(text: str | None, day: tuple[int, int] | None = None) -> tuple[float, tuple[int, int]] | None:
    """(seconds, (month, day)) of an engine timestamp (``2025-03-08 12:29:21``, vLLM's ``03-08 12:29:21``,
    or ``12:29:21`` on the day of the last dated one). Only differences matter: the year is left out."""
    found = _STAMP.match(text or "")
    if not found:
        return None
    month, mday, hours, minutes, seconds, fraction = found.groups()
    when = (int(month), int(mday)) if month else (day or (1, 1))
    moment = calendar.timegm((2000, when[0], when[1], int(hours), int(minutes), int(seconds), 0, 0, 0))
    return moment + (float("0." + fraction) if fraction else 0.0), when


class StartObserver:
    """Reads one start's journal (records with ``__REALTIME_TIMESTAMP``, or lines with engine
    timestamps) and builds its history entry: phases timed, engine timings, model, version, templates.

    Uses the classifier (``_classifier.Scanner``) for the phases and the line groups, so that the
    history says what the report says."""

    def __init__(self, engine: str = "auto", rules: RuleSet | None = None, secrets: t.Sequence[str] = ()) -> None:
        self.secrets = [secret for secret in secrets if secret]
        self.scanner = Scanner(rules or load_rules(engine), secrets=self.secrets)
        self.first: float | None = None
        self.last: float | None = None
        self.marks: dict[str, float] = {}
        self.engine_timings: dict[str, float] = {}
        self.model: str | None = None
        self.engine_version: str | None = None
        drivers = _engines.drivers_for(engine)
        self._timings_patterns = [driver.timings_pattern for driver in drivers if driver.timings_pattern is not None]
        self._version_words = tuple(word for driver in drivers for word in driver.version_words)
        self._version_patterns = [pattern for driver in drivers for pattern in driver.version_patterns]
        self._times: list[float | None] = [None] * _TIME_RING
        self._phases_seen = 0
        self._day: tuple[int, int] | None = None
        self._offsets: dict[str, float] = {}

    def feed(self, item: t.Mapping[str, t.Any] | str | bytes) -> None:
        """One journal record (a dict) or one line of text."""
        if isinstance(item, t.Mapping):
            raw = record_message(item)
            realtime = item.get("__REALTIME_TIMESTAMP")
            moment = int(realtime) / 1e6 if isinstance(realtime, (int, str)) and str(realtime).isdigit() else None
            pid = item.get("_PID")
            self.scanner.feed_line(raw, str(pid) if pid else None)
        else:
            raw = item
            moment = None
            self.scanner.feed_line(raw)
        texts = clean(raw)
        parsed = parse(texts[-1] if texts else "", 0)
        if moment is None:
            moment = self._line_time(parsed.timestamp)
        self._at(moment)
        self._look(parsed.message)

    def _line_time(self, stamp: str | None) -> float | None:
        found = _timestamp_seconds(stamp, self._day)
        if found is None:
            return None
        seconds, self._day = found
        # each timestamp form is its own clock (loggers of one process print local time, UTC, or no
        # date at all): the first reading of a form more than an hour off the others joins it to them
        form = str(len((stamp or "").split(".")[0].split(",")[0]))
        offset = self._offsets.get(form)
        if offset is None:
            offset = self._offsets[form] = self.last - seconds if self.last is not None and abs(self.last - seconds) > 3600 else 0.0
        seconds += offset
        # a clock that goes back by hours went past midnight
        if self.last is not None and seconds < self.last - 43200:
            self._offsets[form] = offset + 86400
            seconds += 86400
        return seconds

    def _at(self, moment: float | None) -> None:
        if moment is not None:
            self.first = moment if self.first is None else min(self.first, moment)
            self.last = moment if self.last is None else max(self.last, moment)
        self._times[self.scanner.line_number % _TIME_RING] = moment if moment is not None else self.last
        phases = self.scanner.phases
        while self._phases_seen < len(phases):
            mark = phases[self._phases_seen]
            self._phases_seen += 1
            number = int(mark.get("line") or 0)
            at = self._times[number % _TIME_RING] if self.scanner.line_number - number < _TIME_RING else None
            at = at if at is not None else self.last
            if at is not None and mark["phase"] not in self.marks:
                self.marks[mark["phase"]] = at
        ready = self.scanner.ready_line
        if ready is not None and "ready" not in self.marks:
            at = self._times[ready % _TIME_RING] if self.scanner.line_number - ready < _TIME_RING else None
            at = at if at is not None else self.last
            if at is not None:
                self.marks["ready"] = at

    def _look(self, message: str) -> None:
        if "took" in message or "timings" in message:
            timings = next((found for found in (pattern.search(message) for pattern in self._timings_patterns) if found), None)
            if timings:
                for name, value in _TIMING_PAIR.findall(timings.group(1)):
                    self._timing(name, value)
            else:
                took = _TOOK.search(message)
                if took:
                    self._timing(template(took.group(1)).lower(), took.group(2))
        if self.model is None and "model" in message:
            found = _MODEL.search(message)
            if found:
                self.model = self._redact(found.group(1))
        if self.engine_version is None and any(word in message.lower() for word in self._version_words):
            for pattern in self._version_patterns:
                found = pattern.search(message)
                if found:
                    self.engine_version = found.group(1)
                    break

    def _timing(self, name: str, value: str) -> None:
        try:
            seconds = float(value)
        except ValueError:
            return
        if name in self.engine_timings or len(self.engine_timings) < MAX_TIMINGS:
            # every rank logs its own: the slowest is the start's
            self.engine_timings[name] = max(seconds, self.engine_timings.get(name, 0.0))

    def _redact(self, text: str) -> str:
        for secret in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(secret, REDACTED)
        return text

    def entry(
        self,
        outcome: str,
        reason: str | None = None,
        invocation_id: str | None = None,
        config: str | None = None,
        waited: float | None = None,
        ended_at: float | None = None,
    ) -> Entry:
        """The history entry of this start: ``outcome`` pass or fail (the wait's verdict)."""
        report = self.scanner.finish()
        self._at(None)
        if outcome not in OUTCOMES:
            raise HistoryError(f"outcome {outcome!r} is not one of {', '.join(OUTCOMES)}")
        start = self.first
        marks = sorted(((at, phase) for phase, at in self.marks.items()), key=lambda mark: (mark[0], PHASES.index(mark[1])))
        if start is not None and "starting" not in self.marks:
            marks.insert(0, (start, "starting"))
        phases: dict[str, float] = {}
        ended_in = "starting"
        for index, (at, phase) in enumerate(marks):
            if phase == "ready":
                break
            ended_in = phase
            following = marks[index + 1][0] if index + 1 < len(marks) else self.last
            if following is not None:
                phases[phase] = round(max(following - at, 0.0), 1)
        ready_at = self.marks.get("ready")
        end = ready_at if ready_at is not None else self.last
        total = round(end - start, 1) if start is not None and end is not None else None
        return {
            "invocation_id": invocation_id,
            "ended_at": round(time.time() if ended_at is None else ended_at, 3),
            "outcome": outcome,
            "reason": reason,
            "total": total,
            "waited": round(waited, 1) if waited is not None else None,
            "phases": phases,
            "ended_in": "ready" if ready_at is not None else ended_in,
            "engine_timings": dict(self.engine_timings),
            "model": self.model,
            "engine_version": self.engine_version,
            "config": config,
            "templates": templates_of(report, self.secrets),
        }


def templates_of(report: t.Mapping[str, t.Any], secrets: t.Sequence[str] = ()) -> dict[str, dict[str, t.Any]]:
    """The templates of a classifier report's line groups, with their counts and classes (fatal ones
    first, then the most frequent, at most MAX_TEMPLATES)."""
    found: dict[str, dict[str, t.Any]] = {}
    for event_class in EVENT_CLASSES:
        for event in report.get(event_class) or []:
            name = template(str(event.get("message") or ""), secrets)
            if not name:
                continue
            kept = found.setdefault(name, {"count": 0, "class": event_class})
            kept["count"] += int(event.get("count") or 1)
    order = sorted(found.items(), key=lambda item: (item[1]["class"] != "fatal", -item[1]["count"], item[0]))
    return dict(order[:MAX_TEMPLATES])


def observe(
    source: t.Iterable[t.Mapping[str, t.Any] | str | bytes],
    outcome: str,
    engine: str = "auto",
    secrets: t.Sequence[str] = (),
    **details: t.Any,
) -> Entry:
    """The history entry of a start from its journal records or lines."""
    observer = StartObserver(engine, secrets=secrets)
    for item in source:
        observer.feed(item)
    return observer.entry(outcome, **details)


# -- the store ---------------------------------------------------------------------------------


def history_path(unit: str, state_dir: str = STATE_DIR) -> str:
    """``<state_dir>/<unit>.history.json``, next to the run record ``<unit>.json``."""
    return record_path(unit + ".history", state_dir)


def empty(unit: str) -> History:
    return {"version": VERSION, "unit": unit, "starts": []}


def parse_history(text: str, unit: str) -> History:
    """The history in ``text``, checked; raises HistoryError saying what is wrong."""
    history = parse_state(text, unit, VERSION, "history", HistoryError)
    starts = history.get("starts")
    if not isinstance(starts, list):
        raise HistoryError("starts is not a list")
    for number, entry in enumerate(starts, 1):
        problem = _entry_problem(entry)
        if problem:
            raise HistoryError(f"start {number} {problem}")
    return history


def _entry_problem(entry: t.Any) -> str | None:
    if not isinstance(entry, dict):
        return "is not an object"
    if entry.get("outcome") not in OUTCOMES:
        return f"has an unknown outcome {entry.get('outcome')!r}"
    phases = entry.get("phases")
    if not isinstance(phases, dict) or not all(isinstance(value, (int, float)) and not isinstance(value, bool) for value in phases.values()):
        return "has no phase durations"
    if not isinstance(entry.get("templates", {}), dict):
        return "has templates that are not an object"
    return None


def read(path: str, unit: str) -> tuple[History | None, str | None]:
    """(history, None), (None, None) when there is none, or (None, problem) when it cannot be used."""
    return read_state(path, "the start history", lambda text: parse_history(text, unit))


def append(history: History | None, unit: str, entry: Entry, size: int = DEFAULT_SIZE) -> tuple[History, bool]:
    """The history with ``entry`` added, bounded to the last ``size`` starts; (history, False) when a
    start of the same invocation is already in it (a precheck run twice on one start adds it once)."""
    if size < 1:
        raise HistoryError(f"a history keeps at least 1 start, not {size}")
    problem = _entry_problem(entry)
    if problem:
        raise HistoryError(f"the new start {problem}")
    kept = empty(unit) if history is None else {**history, "version": VERSION, "unit": unit}
    starts = list(kept.get("starts") or [])
    invocation = entry.get("invocation_id")
    if invocation and any(start.get("invocation_id") == invocation for start in starts):
        kept["starts"] = starts[-size:]
        return kept, False
    kept["starts"] = [*starts, entry][-size:]
    return kept, True


def write(path: str, history: History) -> None:
    """Replace the history whole and durably (the run record's write: aside, synced, renamed)."""
    _write_json(path, history)


# -- estimators --------------------------------------------------------------------------------


def human(seconds: float) -> str:
    """``2m10s``, ``45s``, ``1h02m`` (as the wait's progress lines)."""
    seconds = int(max(seconds, 0) + 0.5)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def good_starts(history: History | None, config: str | None = None, recent: int = RECENT_GOOD) -> list[Entry]:
    """The last ``recent`` good starts, oldest first; on configuration ``config`` only when given."""
    starts = [entry for entry in (history or {}).get("starts") or [] if entry.get("outcome") == "pass"]
    if config is not None:
        starts = [entry for entry in starts if entry.get("config") == config]
    return starts[-recent:] if recent > 0 else starts


def phase_medians(starts: t.Sequence[t.Mapping[str, t.Any]]) -> dict[str, float]:
    """Each phase's median duration over the starts that timed it."""
    medians: dict[str, float] = {}
    for phase in TIMED_PHASES:
        values = [float(entry["phases"][phase]) for entry in starts if phase in (entry.get("phases") or {})]
        if values:
            medians[phase] = float(statistics.median(values))
    return medians


def eta(starts: t.Sequence[t.Mapping[str, t.Any]], phase: str, elapsed_in_phase: float) -> dict[str, t.Any] | None:
    """The expected remaining time of a start now in ``phase`` for ``elapsed_in_phase`` seconds,
    recalibrated at each phase marker: the medians of the phases still to come, plus what the
    current phase usually has left (never below zero). None without a good start to learn from."""
    if not starts or phase not in PHASES:
        return None
    medians = phase_medians(starts)
    if phase == "ready":
        remaining = 0.0
    else:
        after = TIMED_PHASES[TIMED_PHASES.index(phase) + 1 :]
        remaining = sum(medians.get(name, 0.0) for name in after) + max(0.0, medians.get(phase, 0.0) - max(elapsed_in_phase, 0.0))
    totals = [float(entry["total"]) for entry in starts if isinstance(entry.get("total"), (int, float))]
    span = f"last {len(starts)} good start{'s' if len(starts) != 1 else ''}"
    if totals:
        span += f": {human(min(totals))}" + (f"-{human(max(totals))}" if human(max(totals)) != human(min(totals)) else "")
    return {
        "remaining": round(remaining, 1),
        "starts": len(starts),
        "low": min(totals) if totals else None,
        "high": max(totals) if totals else None,
        "text": f"about {human(remaining)} left ({span})",
    }


def stall_limits(
    starts: t.Sequence[t.Mapping[str, t.Any]],
    explicit: t.Mapping[str, float] | None = None,
    default: float | None = None,
    min_good: int = DEFAULT_MIN_GOOD,
    factor: float = DEFAULT_STALL_FACTOR,
    floor: float = DEFAULT_STALL_FLOOR,
) -> dict[str, dict[str, t.Any]]:
    """Each timed phase's stall limit and where it came from: ``explicit`` (the user's per-phase limit,
    always first), ``learned`` (with ``min_good`` good starts that timed the phase: ``factor`` times the
    longest of them, at least ``floor``, never above ``default``: a learned limit only tightens the
    configured one) or ``default`` (the configured limit for every phase)."""
    limits: dict[str, dict[str, t.Any]] = {}
    for phase in TIMED_PHASES:
        if explicit and phase in explicit:
            limits[phase] = {"limit": float(explicit[phase]), "source": "explicit", "detail": "the stall limit given for this phase"}
            continue
        values = [float(entry["phases"][phase]) for entry in starts if phase in (entry.get("phases") or {})]
        if len(values) >= max(min_good, 1):
            longest = max(values)
            limit = round(max(floor, factor * longest), 1)
            detail = f"{factor:g}x the longest of the last {len(values)} good starts ({human(longest)})"
            if limit == floor and factor * longest < floor:
                detail += f", raised to the floor of {human(floor)}"
            if default is not None and limit > default:
                limit = float(default)
                detail += f", capped at the configured stall limit of {human(default)}"
            limits[phase] = {"limit": limit, "source": "learned", "detail": detail}
        elif default is not None:
            have = f"{len(values)} good start{'s' if len(values) != 1 else ''} timed it, {min_good} needed to learn"
            limits[phase] = {"limit": float(default), "source": "default", "detail": have}
    return limits


def learned_limits(limits: t.Mapping[str, t.Mapping[str, t.Any]]) -> dict[str, float]:
    """The per-phase limits to give the wait (explicit and learned; the default needs no entry)."""
    return {phase: float(limit["limit"]) for phase, limit in limits.items() if limit.get("source") in ("explicit", "learned")}


def slow_phases(
    phases: t.Mapping[str, float], starts: t.Sequence[t.Mapping[str, t.Any]], ratio: float = DEFAULT_SLOW_RATIO, min_good: int = 1
) -> list[dict[str, t.Any]]:
    """The phases of this start that took ``ratio`` times their usual (median) time or more:
    ``loading weights took 3.1x its usual 2m50s``."""
    if len(starts) < max(min_good, 1):
        return []
    medians = phase_medians(starts)
    slow = []
    for phase in TIMED_PHASES:
        seconds, usual = phases.get(phase), medians.get(phase)
        if seconds is None or not usual or usual <= 0:
            continue
        times = float(seconds) / usual
        if times >= ratio:
            slow.append(
                {
                    "phase": phase,
                    "seconds": float(seconds),
                    "usual": round(usual, 1),
                    "ratio": round(times, 1),
                    "text": f"{phase.replace('_', ' ')} took {times:.1f}x its usual {human(usual)}",
                }
            )
    return slow


def novelty(templates: t.Iterable[str], history: History | None, recent: int = RECENT_GOOD) -> dict[str, dict[str, t.Any]]:
    """For each template of this start: ``seen`` in k of the last n good starts, ``new`` (in none of
    them, nor in a failed start), or ``failed_only`` (only ever in failed starts). Every configuration
    counts: a warning is not new because a flag changed."""
    starts = (history or {}).get("starts") or []
    good = good_starts(history, None, recent)
    failed = [entry for entry in starts if entry.get("outcome") == "fail"]
    seen_good = [set((entry.get("templates") or {}).keys()) for entry in good]
    seen_failed = set().union(*[set((entry.get("templates") or {}).keys()) for entry in failed]) if failed else set()
    ever_good = set().union(*[set((entry.get("templates") or {}).keys()) for entry in starts if entry.get("outcome") == "pass"]) if starts else set()
    result: dict[str, dict[str, t.Any]] = {}
    for name in templates:
        count = sum(1 for names in seen_good if name in names)
        if count:
            status, text = "seen", f"seen in {count} of the last {len(good)} good starts"
        elif name in seen_failed and name not in ever_good:
            status, text = "failed_only", "seen before only in failed starts"
        elif not good and not failed:
            status, text = "unknown", "no earlier start recorded"
        else:
            status, text = "new", f"new: in none of the last {len(good)} good starts"
        result[name] = {"status": status, "seen_in": count, "of": len(good), "text": text}
    return result


def summary(
    history: History | None,
    config: str | None,
    entry: Entry | None = None,
    min_good: int = DEFAULT_MIN_GOOD,
    slow_ratio: float = DEFAULT_SLOW_RATIO,
) -> dict[str, t.Any]:
    """What the history says about one start, for a report: the baseline, slow phases, new templates."""
    baseline = good_starts(history, config)
    result: dict[str, t.Any] = {
        "config": config,
        "starts": len((history or {}).get("starts") or []),
        "good_starts": len(baseline),
        "baseline": {"phases": phase_medians(baseline), "low": None, "high": None},
        "slow": [],
        "templates": {},
        "new_unrecognized": [],
    }
    totals = [float(e["total"]) for e in baseline if isinstance(e.get("total"), (int, float))]
    if totals:
        result["baseline"].update(low=min(totals), high=max(totals))
    if entry is not None:
        result["slow"] = slow_phases(entry.get("phases") or {}, baseline, slow_ratio, min_good=min_good)
        templates = entry.get("templates") or {}
        result["templates"] = novelty(templates.keys(), history)
        # what fail_on_new fails on: unrecognized groups in none of the recent good starts
        result["new_unrecognized"] = [
            name for name, seen in result["templates"].items() if seen["status"] in ("new", "failed_only") and templates[name].get("class") == "unrecognized"
        ]
    return result


# -- the unit's configuration, read on the host ---------------------------------------------------

CONFIG_PROPERTIES = ("ExecStart", "FragmentPath", "DropInPaths", "EnvironmentFiles", "Environment")


def read_bytes(path: str) -> bytes | None:
    """A file's content; None when it cannot be read (absent, or not ours to read)."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def config_of(show_text: str, read_file: t.Callable[[str], bytes | None] = read_bytes) -> str:
    """The fingerprint of a unit from ``systemctl show -p ExecStart,FragmentPath,DropInPaths,EnvironmentFiles,Environment``:
    the unit file, each drop-in and each environment file are read (hashed, never kept)."""
    values: dict[str, list[str]] = {}
    for line in show_text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values.setdefault(key, []).append(value)
    files: dict[str, bytes | None] = {}
    for key in ("FragmentPath", "DropInPaths"):
        for value in values.get(key, []):
            for path in value.split():
                files[path] = read_file(path)
    environment_files: dict[str, bytes | None] = {}
    for value in values.get("EnvironmentFiles", []):
        path = value.split(" (", 1)[0].strip()
        if path:
            environment_files[path] = read_file(path)
    return fingerprint("\n".join(values.get("ExecStart", [])), files, environment_files, "\n".join(values.get("Environment", [])))


# -- the fleet: a host's start against its peers' on the same configuration ------------------------

DEFAULT_FLEET_RATIO = 2.0
# fewer peers than this on a configuration say nothing about what is usual for it
FLEET_MIN_PEERS = 2


def fleet_compare(
    starts: t.Mapping[str, t.Mapping[str, t.Any]],
    ratio: float = DEFAULT_FLEET_RATIO,
    min_peers: int = FLEET_MIN_PEERS,
) -> dict[str, dict[str, t.Any]]:
    """Each host's start (``{"config", "total"}``: its configuration fingerprint and the seconds from its
    first journal line to its ready marker) against the median of its peers' (the other hosts with the
    same fingerprint and a time): ``{"peers", "median", "ratio", "slow", "text"}``. A host with fewer
    than ``min_peers`` (at least 2) such peers, or without a time, has no entry: nothing to compare with.
    ``slow`` when its start took ``ratio`` times the median or more: ``sim2: start took 3m10s, 3.2x the
    median of its 3 peers on the same configuration (59s)``."""
    timed = {
        str(host): (str(start["config"]), float(start["total"]))
        for host, start in starts.items()
        if isinstance(start, t.Mapping)
        and start.get("config")
        and isinstance(start.get("total"), (int, float))
        and not isinstance(start.get("total"), bool)
        and float(start["total"]) > 0
    }
    least = max(int(min_peers), FLEET_MIN_PEERS)
    compared: dict[str, dict[str, t.Any]] = {}
    for host, (config, total) in sorted(timed.items()):
        peers = sorted(peer for peer, (other, _total) in timed.items() if peer != host and other == config)
        if len(peers) < least:
            continue
        median = float(statistics.median(timed[peer][1] for peer in peers))
        times = total / median if median > 0 else 0.0
        compared[host] = {
            "host": host,
            "config": config,
            "total": total,
            "peers": peers,
            "median": round(median, 1),
            "ratio": round(times, 1),
            "slow": median > 0 and times >= ratio,
            "text": f"{host}: start took {human(total)}, {times:.1f}x the median of its {len(peers)} peers on the same configuration ({human(median)})",
        }
    return compared


def fleet_outliers(
    starts: t.Mapping[str, t.Mapping[str, t.Any]],
    ratio: float = DEFAULT_FLEET_RATIO,
    min_peers: int = FLEET_MIN_PEERS,
) -> list[dict[str, t.Any]]:
    """The hosts whose start was much slower than their peers' on the same configuration (``fleet_compare``),
    the slowest against its peers first."""
    slow = [found for found in fleet_compare(starts, ratio, min_peers).values() if found["slow"]]
    return sorted(slow, key=lambda found: (-found["ratio"], found["host"]))
