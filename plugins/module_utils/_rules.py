# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Classification rules: validation and compilation of rule packs and users' own rules.

Standard library only: this runs on managed hosts too.
"""

from __future__ import annotations

import datetime
import re
import typing as t

CLASSES = ("fatal", "allowlisted", "unrecognized", "ready", "progress", "info")
PHASES = ("starting", "loading_weights", "allocating_kv_cache", "capturing_cuda_graphs", "warming_up", "ready")
LEVELS = ("none", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

REQUIRED_KEYS = ("id", "pattern", "reason")
OPTIONAL_KEYS = ("class", "reference", "expires", "phase", "levels", "progress_bar")

# The order in which shipped rules are tried: a specific allowlist entry beats a generic fatal
# shape, a fatal shape beats a progress milestone ("Capture cuda graph failed"), and the warning
# vocabulary only catches what nothing else claimed.
CLASS_PRECEDENCE = ("allowlisted", "fatal", "ready", "progress", "info", "unrecognized")

_DIGIT_OUTSIDE_ESCAPES = re.compile(r"(?<![\\{,])\d(?![\d,]*\})")


class RuleError(ValueError):
    """A rule that cannot be used, with the rule named in the message."""


class Rule:
    """One compiled rule."""

    __slots__ = ("expires", "id", "levels", "pattern", "phase", "progress_bar", "reason", "reference", "regex", "rule_class", "shape_regex", "source")

    def __init__(self, spec: t.Mapping[str, t.Any], source: str, default_class: str) -> None:
        self.source = source
        self.id = str(spec["id"])
        self.rule_class = str(spec.get("class", default_class))
        self.pattern = str(spec["pattern"])
        self.reason = str(spec["reason"])
        self.reference = str(spec.get("reference") or "")
        self.phase = spec.get("phase")
        self.levels = tuple(spec["levels"]) if spec.get("levels") else None
        self.progress_bar = bool(spec.get("progress_bar", False))
        self.expires = _parse_expiry(spec.get("expires"), self.label)
        self.regex = _compile(self.pattern, self.label)
        self.shape_regex = _digits_relaxed(self.pattern) if self.digit_sensitive else None

    @property
    def label(self) -> str:
        return f"rule {self.id!r} ({self.source})"

    @property
    def digit_sensitive(self) -> bool:
        """True when the pattern names literal digits: lines that differ only in digits may classify differently."""
        return bool(_DIGIT_OUTSIDE_ESCAPES.search(self.pattern))

    def is_stale(self, today: datetime.date) -> bool:
        return self.expires is not None and self.expires < today

    def applies_to(self, level: str) -> bool:
        return self.levels is None or level in self.levels

    def describe(self) -> dict[str, t.Any]:
        return {
            "id": self.id,
            "class": self.rule_class,
            "reason": self.reason,
            "reference": self.reference,
            "expires": self.expires.isoformat() if self.expires else None,
            "source": self.source,
        }


def _compile(pattern: str, label: str) -> t.Pattern[str]:
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
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


def validate_rule(spec: t.Any, source: str, index: int, default_class: str) -> Rule:
    """Check one rule given as a mapping and compile it; raise RuleError naming it."""
    where = f"{source} rule #{index + 1}"
    if not isinstance(spec, t.Mapping):
        raise RuleError(f"{where}: a rule must be a mapping with id, pattern and reason, got {type(spec).__name__}")
    if spec.get("id"):
        where = f"rule {spec['id']!r} ({source} #{index + 1})"
    unknown = sorted(set(spec) - set(REQUIRED_KEYS) - set(OPTIONAL_KEYS))
    if unknown:
        raise RuleError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(REQUIRED_KEYS + OPTIONAL_KEYS)}")
    missing = [key for key in REQUIRED_KEYS if spec.get(key) in (None, "")]
    if missing:
        raise RuleError(f"{where}: missing required field(s) {', '.join(missing)}")
    _check_choice(where, "class", spec.get("class", default_class), CLASSES)
    if spec.get("phase") is not None:
        _check_choice(where, "phase", spec["phase"], PHASES)
    levels = spec.get("levels")
    if levels is not None:
        if not isinstance(levels, (list, tuple)):
            raise RuleError(f"{where}: 'levels' must be a list of {', '.join(LEVELS)}")
        for level in levels:
            _check_choice(where, "levels", level, LEVELS)
    return Rule(spec, f"{source} #{index + 1}", default_class)


def _check_choice(where: str, key: str, value: t.Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise RuleError(f"{where}: {key} {value!r} is not one of {', '.join(choices)}")


class RuleSet:
    """Rules in the order they are tried: users' rules first, then the shipped packs by precedence."""

    def __init__(self, rules: list[Rule]) -> None:
        self.rules = rules
        self._digit_sensitive = [rule.shape_regex for rule in rules if rule.shape_regex is not None]

    def shape_is_ambiguous(self, masked_line: str) -> bool:
        """True when a digit-sensitive rule might match some line of this digit-masked shape,
        so the shape's lines must each be matched on their own."""
        return any(regex.search(masked_line) for regex in self._digit_sensitive)

    def match(self, message: str, level: str) -> Rule | None:
        for rule in self.rules:
            if rule.applies_to(level) and rule.regex.search(message):
                return rule
        return None

    def stale(self, today: datetime.date | None = None) -> list[dict[str, t.Any]]:
        today = today or datetime.date.today()
        return [rule.describe() for rule in self.rules if rule.is_stale(today)]


def build_ruleset(
    packs: t.Sequence[tuple[str, t.Sequence[t.Mapping[str, t.Any]]]],
    extra_rules: t.Sequence[t.Any] | None = None,
    disabled: t.Iterable[str] | None = None,
) -> RuleSet:
    """Compile shipped packs and users' extra rules into one ordered RuleSet.

    ``packs`` is a list of (pack name, rules); ``extra_rules`` are the user's rules (class
    defaults to ``allowlisted``); ``disabled`` lists rule ids to leave out.
    """
    if extra_rules is not None and not isinstance(extra_rules, (list, tuple)):
        raise RuleError(f"extra rules must be a list of rules, got {type(extra_rules).__name__}")
    disabled_ids = set(disabled or ())
    user = [validate_rule(spec, "extra rules", index, "allowlisted") for index, spec in enumerate(extra_rules or ())]
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


def _check_unique_ids(rules: list[Rule]) -> None:
    seen: dict[str, Rule] = {}
    for rule in rules:
        if rule.id in seen:
            raise RuleError(f"{rule.label}: duplicate id, already used by {seen[rule.id].label}")
        seen[rule.id] = rule
