# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Classification rules: validation and compilation of rule packs and users' own rules.

Standard library only: this runs on managed hosts too.

Speed: every rule's pattern is reduced, once, to the literal words any of its matches must contain
(``Tail``/``required_literals``). One search for all those words tells which rules can match a line
at all, so a line is tried against a handful of rules instead of all of them, and a whole block of
lines that holds none of the words (nor a level word, a traceback header or a control byte) is
counted as ordinary information without being looked at line by line.
"""

from __future__ import annotations

import datetime
import importlib
import json
import math
import re
import select
import signal
import subprocess
import sys
import time
import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils import _engines
from ansible_collections.inferops.runbooks.plugins.module_utils._lines import STRUCTURE_WORDS
from ansible_collections.inferops.runbooks.plugins.module_utils._rule_packs import COMMON

# request_error: a line about one request (a model name that does not exist, a bad parameter): counted,
# never a failure alone; survived: an ERROR line after which the engine's own code carries on (falls
# back, retries, skips one item): a warning, counted and shown with its source file, never a failure alone
CLASSES = ("fatal", "allowlisted", "request_error", "survived", "unrecognized", "ready", "progress", "info")
PHASES = ("starting", "loading_weights", "allocating_kv_cache", "capturing_cuda_graphs", "warming_up", "ready")
LEVELS = ("none", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
ENGINES = _engines.ENGINE_NAMES

REQUIRED_KEYS = ("id", "pattern", "reason")
# where the user's own rules come from, as their labels say: rule 'site-x' (extra rules #1)
USER_SOURCE = "extra rules"
# file: the engine's source file that logs the line; where a line names the file that logged it (vLLM's
# ``[repo_utils.py:47]``), the rule holds only for lines of that file
OPTIONAL_KEYS = ("class", "reference", "expires", "phase", "levels", "progress_bar", "file")

# The order in which shipped rules are tried: a specific allowlist entry beats a generic fatal
# shape (and so does a request-level entry: an ERROR line about one request), a fatal shape beats
# a progress milestone ("Capture cuda graph failed"), and the warning vocabulary only catches what
# nothing else claimed. A survived line's rule names its message family and its file: it beats the
# generic fatal shapes (an ERROR level), and its own guard keeps a line naming the engine's death fatal.
CLASS_PRECEDENCE = ("allowlisted", "request_error", "survived", "fatal", "ready", "progress", "info", "unrecognized")

# What a rule sees of a line at most: a longer line is cut (see _lines.MAX_LINE_CHARS); the
# adversarial probes are this long.
PROBE_CHARS = 16_384
# CPU seconds one rule may spend on one probe: a linear pattern needs about a millisecond, one that
# backtracks over the whole probe from every position (``\w+@``) half a second.
PROBE_CPU_SECONDS = 0.25
# CPU seconds after which the probe process is ended (by the kernel, in the middle of a search): a
# pattern that backtracks without bound is refused after half a second of CPU, not after the
# wall-clock timeout below.
PROBE_KILL_CPU_SECONDS = 2 * PROBE_CPU_SECONDS
# Wall-clock seconds after which a probe that has not answered is taken as hung: a backstop. Where
# the kernel ends a runaway probe by its CPU time (setitimer), the backstop is long, so that a busy
# controller (a probe waiting for a core: 3 s of wall-clock time went by on a machine running 14
# processes for its 2 cores) never has a linear rule refused as hung.
PROBE_HANG_SECONDS = 30.0 if hasattr(signal, "setitimer") else 3.0
PROBES: tuple[tuple[str, str], ...] = (
    ("a run of word characters", "a" * PROBE_CHARS),
    ("a run of word characters and a colon at the end", "a" * (PROBE_CHARS - 1) + ":"),
    ("words and single spaces", "ab " * (PROBE_CHARS // 3)),
    ("a run of spaces", " " * (PROBE_CHARS - 1) + "a"),
    ("a run of colons", ":" * PROBE_CHARS),
    ("words and colons", "a:" * (PROBE_CHARS // 2)),
    ("a run of digits", "1" * PROBE_CHARS),
    ("a path", "/a" * (PROBE_CHARS // 2)),
    ("an error line of word characters", "ERROR: " + "x" * (PROBE_CHARS - 7)),
    ("tabs and dots", "\t." * (PROBE_CHARS // 2)),
)

# A level a line can carry only when it holds one of these words (see _lines._strip_level): the
# rules restricted to such levels need no literal of their own.
LEVEL_WORDS = ("warn", "error", "critical", "fatal", *(f"[{letter}{digit}" for letter in "wef" for digit in "0123456789"))
QUIET_LEVELS = frozenset(("none", "DEBUG", "INFO"))

_DIGIT_OUTSIDE_ESCAPES = re.compile(r"(?<![\\{,])\d(?![\d,]*\})")
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "reason": (str,),
    "class": (str,),
    "reference": (str,),
    "phase": (str,),
    "progress_bar": (bool,),
    "file": (str,),
}
_TYPE_WORDS = {str: "a string", bool: "true or false"}


class RuleError(ValueError):
    """A rule that cannot be used, with the rule named in the message."""


class Rule:
    """One compiled rule."""

    __slots__ = (
        "expires",
        "file",
        "file_name",
        "id",
        "levels",
        "literals",
        "pattern",
        "phase",
        "progress_bar",
        "reason",
        "reference",
        "regex",
        "rule_class",
        "shape_regex",
        "source",
    )

    def __init__(self, spec: t.Mapping[str, t.Any], source: str, default_class: str) -> None:
        self.source = source
        self.id = str(spec["id"])
        self.rule_class = str(spec.get("class", default_class))
        self.pattern = pattern_text(spec["pattern"])
        self.reason = str(spec["reason"])
        self.reference = str(spec.get("reference") or "")
        self.phase = spec.get("phase")
        self.levels = tuple(spec["levels"]) if spec.get("levels") else None
        self.progress_bar = bool(spec.get("progress_bar", False))
        self.expires = _parse_expiry(spec.get("expires"), self.label)
        self.file = str(spec.get("file") or "") or None
        self.file_name = self.file.rsplit("/", 1)[-1] if self.file else None
        self.regex = _compile(self.pattern, self.label)
        self.shape_regex = _digits_relaxed(self.pattern) if self.digit_sensitive else None
        if self.file_name and any(character.isdigit() for character in self.file_name):
            # lines of two files whose names differ only in digits share a digit-masked shape
            by_file = re.sub(r"\\\d|\d", r"\\d", re.escape(self.file_name))
            self.shape_regex = re.compile(f"{by_file}|{self.shape_regex.pattern}" if self.shape_regex else by_file, re.IGNORECASE)
        self.literals = required_literals(self.regex)

    @property
    def label(self) -> str:
        return f"rule {self.id!r} ({self.source})"

    @property
    def digit_sensitive(self) -> bool:
        """True when the pattern names literal digits: lines that differ only in digits may classify differently."""
        return bool(_DIGIT_OUTSIDE_ESCAPES.search(self.pattern))

    @property
    def needs_level(self) -> bool:
        """True when the rule applies only to lines logged at WARNING or above."""
        return self.levels is not None and not QUIET_LEVELS.intersection(self.levels)

    def is_stale(self, today: datetime.date) -> bool:
        return self.expires is not None and self.expires < today

    def applies_to(self, level: str) -> bool:
        return self.levels is None or level in self.levels

    def logged_by(self, location: str | None) -> bool:
        """Whether a line logged at ``location`` (``repo_utils.py:47``, as vLLM prints it; None when the
        line does not say) can be this rule's: any line for a rule without a file, or a line that does not
        say where it was logged; else only a line of the rule's file."""
        if self.file_name is None or not location:
            return True
        return location.rsplit(":", 1)[0].rsplit("/", 1)[-1] == self.file_name

    def describe(self) -> dict[str, t.Any]:
        return {
            "id": self.id,
            "class": self.rule_class,
            "reason": self.reason,
            "reference": self.reference,
            "expires": self.expires.isoformat() if self.expires else None,
            "source": self.source,
            "file": self.file,
        }


def pattern_text(pattern: t.Any) -> str:
    """A rule's pattern as one regular expression: a string as it is, a list as "any of these"."""
    if isinstance(pattern, str):
        return pattern
    return "|".join(f"(?:{alternative})" for alternative in pattern)


def _compile(pattern: str, label: str) -> t.Pattern[str]:
    try:
        return re.compile(pattern, re.IGNORECASE)
    except (re.error, RecursionError, OverflowError) as exc:
        raise RuleError(f"{label}: invalid regular expression {pattern!r}: {exc}") from None


def _digits_relaxed(pattern: str) -> t.Pattern[str]:
    """The pattern with every literal digit made a wildcard digit, for matching digit-masked lines;
    when that is not a valid pattern, one that matches any line with a digit."""
    relaxed = re.sub(r"\\d-\\d", r"\\d", _DIGIT_OUTSIDE_ESCAPES.sub(r"\\d", pattern))
    try:
        return re.compile(relaxed, re.IGNORECASE)
    except re.error:
        return re.compile(r"\d")


def _parse_expiry(value: t.Any, label: str) -> datetime.date | None:
    if value in (None, ""):
        return None
    if isinstance(value, datetime.date):
        return value
    try:
        return datetime.date.fromisoformat(str(value))
    except ValueError:
        raise RuleError(f"{label}: 'expires' must be a date as YYYY-MM-DD, got {value!r}") from None


# -- what a pattern's matches must contain ------------------------------------------------------

_PARSER: t.Any = None


def _parser() -> t.Any:
    global _PARSER
    if _PARSER is None:
        try:
            _PARSER = importlib.import_module("re._parser")
        except ImportError:  # Python < 3.11
            _PARSER = importlib.import_module("sre_parse")
    return _PARSER


def required_literals(regex: t.Pattern[str]) -> tuple[str, ...] | None:
    """Lower-case ASCII words of which every match of ``regex`` contains at least one, or None
    when no such words can be named (``.``, ``\\d+``, a back-reference...)."""
    try:
        parsed = _parser().parse(regex.pattern, regex.flags)
    except Exception:
        return None
    found = _required(list(parsed))
    return tuple(sorted(found)) if found else None


def _required(items: list[tuple[t.Any, t.Any]]) -> frozenset[str] | None:
    """The best set of words one of which every match of this sequence contains."""
    options: list[frozenset[str]] = []
    run: list[str] = []
    for op, value in _flattened(items):
        name = str(op)
        if name == "LITERAL":
            run.append(chr(value))
            continue
        options.extend(_run_words(run))
        run = []
        if name == "BRANCH":
            alternatives = [_required(list(branch)) for branch in value[1]]
            if all(alternatives):
                options.append(frozenset().union(*t.cast("list[frozenset[str]]", alternatives)))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") and value[0] >= 1:
            inner = _required(list(value[2]))
            if inner:
                options.append(inner)
        elif name == "ATOMIC_GROUP":
            inner = _required(list(value))
            if inner:
                options.append(inner)
    options.extend(_run_words(run))
    if not options:
        return None
    return max(options, key=lambda words: (min(len(word) for word in words), -len(words)))


def _flattened(items: list[tuple[t.Any, t.Any]]) -> t.Iterator[tuple[t.Any, t.Any]]:
    """The items with groups opened: a group's text is part of the surrounding run."""
    for op, value in items:
        if str(op) == "SUBPATTERN":
            yield from _flattened(list(value[-1]))
        else:
            yield op, value


def _run_words(run: list[str]) -> list[frozenset[str]]:
    """A run of literal characters as required words; a non-ASCII character matches ASCII ones
    under case folding (K, the Kelvin sign, matches k), so the run is split there."""
    words = re.split(r"[^\x00-\x7f]", "".join(run).lower())
    return [frozenset((word,)) for word in words if word]


# How common each character is in lower-cased inference server logs (percent of all characters;
# measured on the test corpus): a search for many words is fast when it looks for each word from
# its rarest character, and only there checks the word around it.
_CHARACTER_PERCENT = {
    " ": 9.0, "e": 7.2, "a": 4.9, "n": 4.8, "t": 4.6, "o": 4.5, "s": 4.1, "i": 4.0, "l": 4.0, "r": 3.8, "_": 3.2,
    "c": 2.9, "p": 2.7, "d": 2.6, "0": 2.3, "u": 2.1, "m": 2.0, ",": 1.9, "g": 1.8, "2": 1.7, "f": 1.6, "h": 1.5,
    "=": 1.5, "/": 1.5, "1": 1.5, "b": 1.3, ":": 1.3, ".": 1.2, "k": 1.0, "-": 1.0, "3": 0.9, "y": 0.9, "v": 0.8,
    "w": 0.7, "5": 0.6, "4": 0.6, "'": 0.6, "9": 0.5, "]": 0.5, "x": 0.4, "6": 0.4, "q": 0.4, "z": 0.4, "8": 0.4,
    '"': 0.35, "[": 0.3, "7": 0.3, "j": 0.2, "(": 0.2, ")": 0.1, "^": 0.2,
}  # fmt: skip
_RARE_PERCENT = 0.05


def _percent(character: str) -> float:
    return _CHARACTER_PERCENT.get(character, _RARE_PERCENT)


def _anchors(words: set[str]) -> dict[str, str]:
    """For each word, the character the search looks for first: few, rare characters that
    together cover every word (greedy set cover)."""
    chosen: set[str] = set()
    uncovered = set(words)
    while uncovered:
        holders: dict[str, int] = {}
        for word in uncovered:
            for character in set(word):
                holders[character] = holders.get(character, 0) + 1
        best = min(holders, key=lambda character: (_percent(character) / holders[character], character))
        chosen.add(best)
        uncovered = {word for word in uncovered if best not in word}
    return {word: min((character for character in word if character in chosen), key=_percent) for word in words}


def word_search_source(words: t.Iterable[str]) -> tuple[str, dict[str, frozenset[str]]]:
    """One regular expression that finds the words (any of them), and for each character it can
    report (the match) the words that may be there.

    Each word is looked for from its rarest character (``x(?<=ex)(?=it)`` for ``exit``); words are
    grouped by that character, so the search skips every position whose character starts no
    group, and a match at a position means one of that group's words is there. Every occurrence
    of every word is found: its rare character is a position the search stops at.
    """
    anchors = _anchors({word for word in words if word})
    groups: dict[str, list[str]] = {}
    for word, anchor in anchors.items():
        groups.setdefault(anchor, []).append(word)
    branches = []
    for anchor in sorted(groups, key=lambda character: (-_percent(character), character)):
        checks = []
        for word in sorted(groups[anchor]):
            at = word.index(anchor)
            before = f"(?<={re.escape(word[: at + 1])})" if at else ""
            after = f"(?={re.escape(word[at + 1 :])})" if at + 1 < len(word) else ""
            checks.append(before + after)
        body = "" if "" in checks else "(?:" + "|".join(checks) + ")"
        branches.append(re.escape(anchor) + body)
    return "|".join(branches), {anchor: frozenset(group) for anchor, group in groups.items()}


# How common each character is in a busy server's serving lines, lower-cased (percent; measured on
# the corpus's decode-batch, prefill-batch, HTTP access and engine-stats lines as bench/week_journal.py
# cycles them). journalctl --grep's search (PCRE2, interpreted) begins a match attempt at every
# character that can begin one of the pattern's branches: the grep pattern looks for each word from
# characters rare in such lines, so that a serving line costs few attempts.
_SERVING_PERCENT = {
    " ": 13.223, "e": 7.45, "0": 6.277, ":": 5.418, "n": 4.399, "t": 4.382, "1": 3.978, "-": 3.697, "2": 3.623, ",": 2.793,
    "o": 2.564, "r": 2.492, ".": 2.439, "u": 2.421, "h": 2.226, "3": 2.202, "#": 2.199, "a": 2.103, "c": 1.978, "q": 1.888,
    "k": 1.764, "g": 1.756, "5": 1.748, "i": 1.571, "p": 1.482, "s": 1.331, "6": 1.297, "9": 1.211, "l": 0.941, "7": 0.915,
    "8": 0.877, "]": 0.851, "[": 0.851, "4": 0.796, "d": 0.781, "w": 0.727, "/": 0.674, "f": 0.621, "b": 0.497, '"': 0.479,
    "%": 0.248, "m": 0.222, "(": 0.142, ")": 0.142, "y": 0.107, "v": 0.098, "_": 0.063, "=": 0.018, "x": 0.018, "?": 0.009,
    "&": 0.009,
}  # fmt: skip
_SERVING_RARE = 0.001


def grep_search_source(words: t.Iterable[str], first: str = "common") -> str:
    """One regular expression (PCRE2 and Python alike) that finds any of the words: a word that holds
    another is left out (a line holding it holds the other), each word is looked for from the
    character of it that serving lines hold least often (a weighted set cover over the words), and
    the branches are tried commonest character first (``first="rare"``: the other way round)."""
    wanted = {word for word in words if word}
    wanted = {word for word in wanted if not any(other != word and other in word for other in wanted)}

    def percent(character: str) -> float:
        return _SERVING_PERCENT.get(character, _SERVING_RARE)

    chosen: set[str] = set()
    uncovered = set(wanted)
    while uncovered:
        holders: dict[str, int] = {}
        for word in uncovered:
            for character in set(word):
                holders[character] = holders.get(character, 0) + 1
        best = min(holders, key=lambda character: (percent(character) / holders[character], character))
        chosen.add(best)
        uncovered = {word for word in uncovered if best not in word}
    groups: dict[str, list[str]] = {}
    for word in wanted:
        groups.setdefault(min((c for c in word if c in chosen), key=lambda c: (percent(c), c)), []).append(word)
    branches = []
    for anchor in sorted(groups, key=lambda character: (-percent(character) if first == "common" else percent(character), character)):
        # (before, after) around the anchor; words that differ only in their last character share one check
        ends: dict[tuple[str, str], set[str]] = {}
        for word in groups[anchor]:
            at = word.index(anchor)
            before, after = word[: at + 1], word[at + 1 :]
            ends.setdefault((before, after[:-1]), set()).add(after[-1:])
        checks = []
        for (before, stem), lasts in sorted(ends.items()):
            last = re.escape(lasts.pop()) if len(lasts) == 1 else "[" + "".join(re.escape(c) for c in sorted(lasts)) + "]"
            after = re.escape(stem) + last
            checks.append((f"(?<={re.escape(before)})" if len(before) > 1 else "") + (f"(?={after})" if after else ""))
        body = "" if "" in checks else "(?:" + "|".join(checks) + ")"
        # (*PRUNE): a match attempt at this character that fails tries no other branch (none begins
        # with it), so an attempt costs one branch, not all of them (PCRE2; Python's re has no verbs)
        branches.append(re.escape(anchor) + (PRUNE if body else "") + body)
    return "|".join(branches)


PRUNE = "(*PRUNE)"


# Bytes that make the classifier look at a line whatever words it holds (a control byte, a carriage
# return, anything not ASCII: see _classifier._SPECIAL_BYTES), in PCRE2's syntax for a UTF-8 subject.
GREP_SPECIAL = r"[\x00-\x08\x0b-\x1f\x7f]|[^\x00-\x7f]"


def grep_pattern_source(word_search: str) -> str | None:
    """``journalctl --grep``'s pattern for the lines the classifier must read: the words of the
    rules, the level words and the structure words (``word_search_source``'s search, which PCRE2
    reads as Python does: escaped punctuation, fixed-length look-arounds), or a special byte.

    PCRE2 only (``(*PRUNE)``; without it, Python's re reads it alike). Lower case but for that verb:
    journalctl is told to match without regard to case (``--case-sensitive=false``), as the
    classifier lower-cases a line before its word search; None when a word holds an upper-case
    letter."""
    if any(character.isupper() for character in word_search.replace(PRUNE, "")):
        return None
    return f"{word_search}|{GREP_SPECIAL}"


# -- validation -----------------------------------------------------------------------------------


def validate_rule(spec: t.Any, source: str, index: int, default_class: str) -> Rule:
    """Check one rule given as a mapping and compile it; raise RuleError naming it."""
    where = f"{source} rule #{index + 1}"
    if not isinstance(spec, t.Mapping):
        raise RuleError(f"{where}: a rule must be a mapping with id, pattern and reason, got {_type_name(spec)}")
    if isinstance(spec.get("id"), str) and spec["id"]:
        where = f"rule {spec['id']!r} ({source} #{index + 1})"
    unknown = sorted(str(key) for key in set(spec) - set(REQUIRED_KEYS) - set(OPTIONAL_KEYS))
    if unknown:
        raise RuleError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(REQUIRED_KEYS + OPTIONAL_KEYS)}")
    missing = [key for key in REQUIRED_KEYS if spec.get(key) is None or spec.get(key) == "" or spec.get(key) == []]
    if missing:
        raise RuleError(f"{where}: missing required field(s) {', '.join(missing)}")
    for key, types in _FIELD_TYPES.items():
        value = spec.get(key)
        if value is not None and not isinstance(value, types):
            raise RuleError(f"{where}: {key!r} must be {_TYPE_WORDS[types[0]]}, got {_type_name(value)} {value!r}")
    _check_pattern(where, spec["pattern"])
    expires = spec.get("expires")
    if expires is not None and not isinstance(expires, (str, datetime.date)):
        raise RuleError(f"{where}: 'expires' must be a date as YYYY-MM-DD, got {_type_name(expires)} {expires!r}")
    _check_choice(where, "class", spec.get("class", default_class), CLASSES)
    if spec.get("phase") is not None:
        _check_choice(where, "phase", spec["phase"], PHASES)
    levels = spec.get("levels")
    if levels is not None:
        if not isinstance(levels, (list, tuple)):
            raise RuleError(f"{where}: 'levels' must be a list of {', '.join(LEVELS)}, got {_type_name(levels)} {levels!r}")
        for level in levels:
            _check_choice(where, "levels", level, LEVELS)
    return Rule(spec, f"{source} #{index + 1}", default_class)


def _check_pattern(where: str, pattern: t.Any) -> None:
    """A pattern is a string, or a list of strings meaning "any of these" (never a character class)."""
    if isinstance(pattern, str):
        return
    if isinstance(pattern, (list, tuple)):
        bad = [f"#{number} ({_type_name(item)} {item!r})" for number, item in enumerate(pattern, 1) if not isinstance(item, str) or not item]
        if bad:
            raise RuleError(f"{where}: 'pattern' given as a list must hold non-empty strings (any of them matches); not so: {', '.join(bad)}")
        return
    raise RuleError(f"{where}: 'pattern' must be a string (a regular expression) or a list of them, got {_type_name(pattern)} {pattern!r}")


def _check_choice(where: str, key: str, value: t.Any, choices: tuple[str, ...]) -> None:
    if not isinstance(value, str) or value not in choices:
        raise RuleError(f"{where}: {key} {value!r} is not one of {', '.join(choices)}")


def _type_name(value: t.Any) -> str:
    """The YAML-ish name of a value's type, never an internal class name."""
    if value is None:
        return "null"
    for types, name in (((bool,), "a boolean"), ((int, float), "a number"), ((str,), "a string"), ((t.Mapping,), "a mapping"), ((list, tuple), "a list")):
        if isinstance(value, types):
            return name
    return "a value of another type"


_ZERO_DIGITS = str.maketrans("0123456789", "0000000000")


def groups_words(groups: t.Mapping[str, frozenset[str]]) -> set[str]:
    return {word for group in groups.values() for word in group}


class RuleSet:
    """Rules in the order they are tried: users' rules first, then the shipped packs by precedence."""

    def __init__(self, rules: list[Rule]) -> None:
        self.rules = rules
        self._digit_sensitive = [(rule.shape_regex, required_literals(rule.shape_regex)) for rule in rules if rule.shape_regex is not None]
        # rules with no word to look for, tried on every line their levels allow
        self._unworded = tuple(index for index, rule in enumerate(rules) if rule.literals is None)
        rule_words = {word for rule in rules for word in rule.literals or ()}
        source, groups = word_search_source(rule_words | set(LEVEL_WORDS) | set(STRUCTURE_WORDS))
        self._word_search_source = source
        self._word_search: t.Pattern[str] | None = None  # compiled when first needed (a look may need none)
        # where a line can hold nothing but information unless one of these is found in it; None
        # when some rule can match a line without any word (then every line is looked at)
        self.line_search: t.Pattern[bytes] | None = None
        self.searchable = all(rule.literals is not None or rule.needs_level for rule in rules)
        if self.searchable:
            self.line_search = re.compile(source.encode("latin-1"))
        self._grep_pattern: str | None = None
        self._grep_built = False
        # a character the search stops at -> the words looked for from it, each with its rules
        self._words_at: dict[str, tuple[tuple[str, tuple[int, ...]], ...]] = {}
        for anchor, group in groups.items():
            words = tuple((word, tuple(index for index, rule in enumerate(rules) if word in (rule.literals or ()))) for word in sorted(group))
            self._words_at[anchor] = tuple((word, indexes) for word, indexes in words if indexes)
        self._words_at_byte = {anchor.encode("latin-1"): words for anchor, words in self._words_at.items()}
        # the searched words that hold digits, digits masked: two lines of one digit-masked shape
        # hold the same words, unless one of these is in the shape
        self.digit_words = tuple(sorted({word.translate(_ZERO_DIGITS).encode("latin-1") for word in groups_words(groups) if any(c.isdigit() for c in word)}))

    @property
    def grep_pattern(self) -> str | None:
        """The line search for journalctl --grep (PCRE2), None when it cannot stand for the line
        search. Built when first asked for: only a precheck's read of the journal needs it."""
        if not self._grep_built and self.searchable:
            self._grep_built = True
            # a line whose only words are those of rules of class info (an HTTP access line) is
            # information whichever of them matches: journalctl need not hand it over
            grep_words = {word for rule in self.rules if rule.rule_class != "info" for word in rule.literals or ()}
            self._grep_pattern = grep_pattern_source(grep_search_source(grep_words | set(LEVEL_WORDS) | set(STRUCTURE_WORDS)))
        return self._grep_pattern

    def shape_is_ambiguous(self, masked_line: str) -> bool:
        """True when a digit-sensitive rule might match some line of this digit-masked shape,
        so the shape's lines must each be matched on their own."""
        if not self._digit_sensitive:
            return False
        lowered = masked_line.lower() if masked_line.isascii() else None
        for regex, words in self._digit_sensitive:
            if lowered is not None and words is not None and not any(word in lowered for word in words):
                continue
            if regex.search(masked_line):
                return True
        return False

    def match(self, message: str, level: str, anchors: t.Iterable[bytes] | None = None, location: str | None = None) -> Rule | None:
        """The first rule, in order, whose pattern is found in the message and whose levels (and file,
        where the line names the ``location`` that logged it) allow it.

        ``anchors``: what ``line_search.findall`` found in the lower-cased line the message comes
        from (the line holds the message), to spare searching the message again."""
        for index in self._candidates(message, anchors):
            rule = self.rules[index]
            if rule.applies_to(level) and rule.logged_by(location) and rule.regex.search(message):
                return rule
        return None

    def _candidates(self, message: str, anchors: t.Iterable[bytes] | None) -> t.Iterable[int]:
        """Indexes of the rules that can match: those holding a word found in the message (a rule
        cannot match without one), and those without words."""
        if not message.isascii():
            return range(len(self.rules))
        lowered = message.lower()
        found = set(self._unworded)
        if anchors is None:
            if self._word_search is None:
                self._word_search = re.compile(self._word_search_source)
            groups = [self._words_at[anchor] for anchor in set(self._word_search.findall(lowered))]
        else:
            groups = [self._words_at_byte[anchor] for anchor in anchors]
        for words in groups:
            for word, indexes in words:
                if word in lowered:
                    found.update(indexes)
        return sorted(found)

    def stale(self, today: datetime.date | None = None) -> list[dict[str, t.Any]]:
        today = today or datetime.date.today()
        return [rule.describe() for rule in self.rules if rule.is_stale(today)]


def build_ruleset(
    packs: t.Sequence[tuple[str, t.Sequence[t.Mapping[str, t.Any]]]],
    extra_rules: t.Sequence[t.Any] | None = None,
    disabled: t.Iterable[t.Any] | None = None,
) -> RuleSet:
    """Compile shipped packs and users' extra rules into one ordered RuleSet.

    ``packs`` is a list of (pack name, rules); ``extra_rules`` are the user's rules (class
    defaults to ``allowlisted``); ``disabled`` lists rule ids to leave out.
    """
    if extra_rules is not None and not isinstance(extra_rules, (list, tuple)):
        raise RuleError(f"extra rules must be a list of rules, got {_type_name(extra_rules)}")
    disabled_ids = _disabled_ids(disabled)
    user = [validate_rule(spec, USER_SOURCE, index, "allowlisted") for index, spec in enumerate(extra_rules or ())]
    shipped: list[Rule] = []
    for pack_name, specs in packs:
        shipped.extend(validate_rule(spec, f"pack {pack_name}", index, "info") for index, spec in enumerate(specs))
    _check_unique_ids(user + shipped)
    known = {rule.id for rule in user + shipped}
    unknown_disabled = sorted(disabled_ids - known)
    if unknown_disabled:
        raise RuleError(f"disabled rule id(s) {', '.join(unknown_disabled)} match no rule; known ids include {', '.join(sorted(known)[:8])}, ...")
    shipped.sort(key=lambda rule: CLASS_PRECEDENCE.index(rule.rule_class))
    return RuleSet([rule for rule in user + shipped if rule.id not in disabled_ids])


def _disabled_ids(disabled: t.Iterable[t.Any] | None) -> set[str]:
    if disabled is None:
        return set()
    if isinstance(disabled, (str, bytes)) or not isinstance(disabled, (list, tuple, set, frozenset)):
        raise RuleError(f"disabled rules must be a list of rule ids, got {_type_name(disabled)} {disabled!r}")
    entries = list(disabled)
    bad = [f"#{number} ({_type_name(entry)} {entry!r})" for number, entry in enumerate(entries, 1) if not isinstance(entry, str) or not entry]
    if bad:
        raise RuleError(f"disabled rules must be rule ids (non-empty strings); not so: {', '.join(bad)}")
    return set(entries)


def _check_unique_ids(rules: list[Rule]) -> None:
    seen: dict[str, Rule] = {}
    for rule in rules:
        if rule.id in seen:
            raise RuleError(f"{rule.label}: duplicate id, already used by {seen[rule.id].label}")
        seen[rule.id] = rule


def load_rules(engine: str = "auto", extra_rules: t.Sequence[t.Any] | None = None, disabled: t.Iterable[t.Any] | None = None) -> RuleSet:
    """The shipped packs for an engine (with that engine's changes to common rules) plus the
    user's rules, compiled."""
    return build_ruleset(engine_packs(engine), extra_rules, disabled)


def engine_packs(engine: str) -> list[tuple[str, list[dict[str, t.Any]]]]:
    """The shipped packs of an engine's journal, by pack name: its driver's, then the common rules
    with its changes; every driver's (and the common rules unchanged) for ``auto``."""
    names = _engines.engine_names()
    if not isinstance(engine, str) or engine not in names:
        raise RuleError(f"engine {engine!r} is not one of {', '.join(names)}")
    drivers = _engines.drivers_for(engine)
    changes = drivers[0].rule_changes if engine in _engines.DRIVERS else {}
    common = [dict(spec, **changes.get(spec["id"], {})) for spec in COMMON]
    return [*((driver.name, list(driver.rule_pack)) for driver in drivers), ("common", common)]


# -- bounded matching -----------------------------------------------------------------------------


def check_rules(
    engine: str = "auto", extra_rules: t.Sequence[t.Any] | None = None, disabled_rules: t.Iterable[t.Any] | None = None, shipped: bool = True
) -> RuleSet:
    """Everything ``load_rules`` checks, and that no rule takes long on the adversarial probes
    (``PROBES``, and probes made from each pattern's own repeats, as long as the longest line a
    rule sees).

    The probes run in a child Python process, killed when a probe spends more than
    PROBE_KILL_CPU_SECONDS of CPU (or does not answer within PROBE_HANG_SECONDS), so a pattern
    that backtracks without end is refused in about a second. Raises RuleError naming the rule,
    its pattern and the probe. With ``shipped`` false only the user's rules are tried (the shipped
    packs are tried by the collection's tests): what a filter or a module on the target pays, and
    nothing at all when there are no user rules. A pattern that passed is not tried again in the
    same process.

    Every caller that takes users' rules checks them with this: the roles' validation and the wait
    on the controller, the filters, and journal_scan.
    """
    ruleset = load_rules(engine, extra_rules, disabled_rules)
    probe_rules([rule for rule in ruleset.rules if shipped or rule.source.startswith(f"{USER_SOURCE} #")])
    return ruleset


# How many probes are made from one pattern's repeats at most.
MAX_PUMPED_PROBES = 12
# The end of a probe made from a repeat: the first of these that makes the pattern fail on a short
# form of the probe (the end of the text, then characters that a class rarely holds all of), matched
# from the probe's start: searched, a pattern that also matches an empty text at the end, as (x+)*$
# does, is found there whatever the stopper, and its long probe was never tried.
PROBE_STOPPERS = ("", "!", " ", ",", ":", ";", "=", "/", "#", "@", "~", "-", ".", "\t", "\x01", "a", "0", "_", "\u00a7")
# Characters tried, in this order, for one that a class matches.
_SAMPLE_CHARACTERS = "a0 _x!,:;=/#@~-.\tA\x01\u00a7"
_CATEGORIES = {
    "CATEGORY_DIGIT": r"\d",
    "CATEGORY_NOT_DIGIT": r"\D",
    "CATEGORY_SPACE": r"\s",
    "CATEGORY_NOT_SPACE": r"\S",
    "CATEGORY_WORD": r"\w",
    "CATEGORY_NOT_WORD": r"\W",
    "CATEGORY_LINEBREAK": r"\n",
    "CATEGORY_NOT_LINEBREAK": r"[^\n]",
}
_REPEATS = ("MAX_REPEAT", "MIN_REPEAT")  # a possessive repeat gives nothing back: no backtracking into it
_CHARACTER_OPS = ("LITERAL", "NOT_LITERAL", "ANY", "IN")
# patterns that passed every probe in this process
_BOUNDED: set[str] = set()


def pumped_probes(pattern: str) -> list[tuple[str, str]]:
    """(text before, text repeated) for each repeat of the pattern that can run long: the probe is
    the text before (what the pattern needs to reach the repeat, shortest), then what the repeat's
    body matches, over and over, then a character that ends the match. This is how a nested or
    overlapping repeat (``(x+)+y``, ``(x|xx)*y``) is made to backtrack whatever its characters are,
    which the fixed probes (runs of a few characters) cannot do."""
    try:
        parsed = _parser().parse(pattern, re.IGNORECASE)
    except Exception:
        return []
    found: list[tuple[str, str]] = []
    _pumps(list(parsed), "", found)
    return found


def _pumps(items: list[tuple[t.Any, t.Any]], before: str, found: list[tuple[str, str]]) -> None:
    text = before
    for op, value in items:
        name = str(op)
        if len(found) >= MAX_PUMPED_PROBES or len(text) > PROBE_CHARS // 2:
            return
        if name in _REPEATS and value[1] > 1:
            pump = _sample(list(value[2]), eager=True)
            if pump and (text, pump) not in found:
                found.append((text, pump))
        if name in (*_REPEATS, "POSSESSIVE_REPEAT"):
            _pumps(list(value[2]), text, found)
        elif name == "SUBPATTERN":
            _pumps(list(value[-1]), text, found)
        elif name == "ATOMIC_GROUP":
            _pumps(list(value), text, found)
        elif name == "BRANCH":
            for branch in value[1]:
                _pumps(list(branch), text, found)
        elif name in ("ASSERT", "ASSERT_NOT"):
            _pumps(list(value[1]), text, found)
        elif name == "GROUPREF_EXISTS":
            for branch in value[1:]:
                if branch is not None:
                    _pumps(list(branch), text, found)
        text += _sample([(op, value)], eager=False)


def _sample(items: list[tuple[t.Any, t.Any]], eager: bool) -> str:
    """A text the items match: the shortest, or with ``eager`` each repeat once at least (so that a
    repeat's body gives something to repeat). Anchors, look-arounds and back-references add nothing.
    At most PROBE_CHARS characters."""
    parts: list[str] = []
    size = 0
    for op, value in items:
        name = str(op)
        part = ""
        if name in _CHARACTER_OPS:
            part = _matching_character(name, value)
        elif name == "SUBPATTERN":
            part = _sample(list(value[-1]), eager)
        elif name == "ATOMIC_GROUP":
            part = _sample(list(value), eager)
        elif name == "BRANCH":
            branches = [_sample(list(branch), eager) for branch in value[1]]
            part = next((branch for branch in branches if branch), "") if eager else branches[0]
        elif name in (*_REPEATS, "POSSESSIVE_REPEAT"):
            low, high = value[0], value[1]
            count = min(max(low, 1), high) if eager else low
            body = _sample(list(value[2]), eager) if count else ""
            part = body * min(count, PROBE_CHARS // len(body) + 1) if body else ""
        elif name == "GROUPREF_EXISTS":
            part = _sample(list(value[1]), eager)
        parts.append(part)
        size += len(part)
        if size >= PROBE_CHARS:
            break
    return "".join(parts)[:PROBE_CHARS]


def _matching_character(name: str, value: t.Any) -> str:
    """A character one character item matches (a literal: itself), or "" when none is found."""
    if name == "LITERAL":
        return chr(value)
    return next((character for character in _SAMPLE_CHARACTERS if _accepts(name, value, character)), "")


def _accepts(name: str, value: t.Any, character: str) -> bool:
    """Whether one character item matches ``character``, case-insensitively."""
    variants = {character, character.lower(), character.upper()}
    if name == "LITERAL":
        return chr(value) in variants
    if name == "NOT_LITERAL":
        return chr(value) not in variants
    if name == "ANY":
        return character != "\n"
    if name != "IN":
        return False
    negated, hit = False, False
    for item, argument in value:
        kind = str(item)
        if kind == "NEGATE":
            negated = True
        elif kind == "LITERAL":
            hit = hit or chr(argument) in variants
        elif kind == "RANGE":
            hit = hit or any(argument[0] <= ord(variant) <= argument[1] for variant in variants)
        elif kind == "CATEGORY":
            hit = hit or re.match(_CATEGORIES.get(str(argument), "."), character) is not None
    return hit != negated


_PROBE_CHILD = """
import json, re, signal, sys, time
limit, size, stoppers, fixed, rules = json.loads(sys.stdin.readline())
timer = getattr(signal, "setitimer", None)
if timer is not None:
    # past the limit the kernel ends the process, in the middle of a search if need be
    signal.signal(signal.SIGPROF, signal.SIG_DFL)
for rule, (pattern, pumps) in enumerate(rules):
    regex = re.compile(pattern, re.IGNORECASE)
    for probe, job in enumerate(fixed + pumps):
        print("start", rule, probe, flush=True)
        if timer is not None:
            timer(signal.ITIMER_PROF, limit)
        started = time.process_time()
        if isinstance(job, str):
            regex.search(job)
        else:
            before, pump = job
            for stopper in stoppers:
                if regex.match(before + pump * 4 + stopper) is None:
                    regex.search(before + pump * max(1, (size - len(before) - 1) // len(pump)) + stopper)
                    break
        seconds = time.process_time() - started
        if timer is not None:
            timer(signal.ITIMER_PROF, 0)
        print("done", rule, probe, seconds, flush=True)
"""


def probe_rules(rules: t.Sequence[Rule], probes: t.Sequence[tuple[str, str]] = PROBES) -> None:
    """Raise RuleError for the first rule that spends more than PROBE_CPU_SECONDS on a probe, is
    killed for spending more than PROBE_KILL_CPU_SECONDS, or does not finish one within
    PROBE_HANG_SECONDS. Rules whose pattern already passed in this process are not tried again."""
    todo = [rule for rule in rules if rule.pattern not in _BOUNDED]
    if not todo:
        return
    pumps = [pumped_probes(rule.pattern) for rule in todo]
    jobs: list[t.Any] = [PROBE_KILL_CPU_SECONDS, PROBE_CHARS, list(PROBE_STOPPERS), [text for _name, text in probes]]
    jobs.append([[rule.pattern, [list(pump) for pump in rule_pumps]] for rule, rule_pumps in zip(todo, pumps)])
    try:
        # read as it reports each probe, to stop one that backtracks without bound at its deadline (run_command waits
        # for the end); the probe runs on the controller too, outside any module
        # pylint: disable-next=ansible-bad-function
        child = subprocess.Popen([sys.executable, "-c", _PROBE_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as exc:
        raise RuleError(f"could not start the rule probe process ({sys.executable or 'no Python interpreter'}): {exc}") from None
    try:
        if child.stdin is None or child.stdout is None:
            raise RuleError("the rule probe process has no pipes")
        child.stdin.write(json.dumps(jobs) + "\n")
        child.stdin.close()
        for rule_index, probe_index, seconds in _probe_results(child):
            rule = todo[rule_index]
            if probe_index < len(probes):
                probe = f"{probes[probe_index][0]} ({PROBE_CHARS} characters)"
            else:
                probe = _pumped_name(*pumps[rule_index][probe_index - len(probes)])
            where = f"{rule.label}: pattern {rule.pattern!r}"
            if seconds is None:
                raise RuleError(f"{where} did not finish within {PROBE_HANG_SECONDS:g} s on {probe}: it backtracks without bound; rewrite it")
            if seconds == math.inf:
                raise RuleError(
                    f"{where} did not finish within {PROBE_KILL_CPU_SECONDS:g} s of CPU on {probe}: it backtracks without bound"
                    " (nested or overlapping repeats such as (a+)+ or (a|aa)+ try every way to split a line, a repeat such as \\w+ or .*"
                    " is tried from every position); rewrite it, anchor it or bound the repeat ({1,64})"
                )
            if seconds > PROBE_CPU_SECONDS:
                raise RuleError(
                    f"{where} took {seconds:.2f} s on {probe}, more than {PROBE_CPU_SECONDS:g} s: its cost grows faster than the line"
                    " (a repeat such as \\w+ or .* tried from every position); anchor it or bound the repeat ({1,64})"
                )
        _BOUNDED.update(rule.pattern for rule in todo)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()


def _pumped_name(before: str, pump: str) -> str:
    after = f" after {_cut(before)}" if before else ""
    return f"{_cut(pump)} over and over{after} (up to {PROBE_CHARS} characters, made from the pattern's repeats)"


def _cut(text: str, limit: int = 40) -> str:
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "..."


def _probe_results(child: subprocess.Popen[str]) -> t.Iterator[tuple[int, int, float | None]]:
    """(rule, probe, CPU seconds) as the child reports them; seconds None for a probe that hangs,
    infinite for one the CPU limit ended."""
    stdout = t.cast(t.IO[str], child.stdout)
    started: tuple[int, int] | None = None
    while True:
        deadline = time.monotonic() + PROBE_HANG_SECONDS
        ready, _w, _x = select.select([stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            if started is not None:
                yield started[0], started[1], None
            raise RuleError(f"the rule probe process stopped answering (rc={child.poll()})")
        line = stdout.readline()
        if not line:
            code = child.wait()
            if started is not None and hasattr(signal, "SIGPROF") and code == -signal.SIGPROF:
                yield started[0], started[1], math.inf
            if code != 0:
                raise RuleError(f"the rule probe process failed: {(child.stderr.read() if child.stderr else '').strip()[-500:]}")
            return
        word, *numbers = line.split()
        if word == "start":
            started = (int(numbers[0]), int(numbers[1]))
        elif word == "done":
            started = None
            yield int(numbers[0]), int(numbers[1]), float(numbers[2])
