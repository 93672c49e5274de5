# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters over the journal classifier: thin shells around plugins/module_utils/_classifier.py."""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import (
    ENGINES,
    RuleError,
    check_rules,
    classify,
    classify_line,
)


def _rules(engine: str, extra_rules: t.Any, disabled_rules: t.Any, filter_name: str) -> t.Any:
    """The rules, checked as the roles check them before anything restarts: a user's rule that
    backtracks without bound is refused, naming it, before any line is read."""
    if engine not in ENGINES:
        raise AnsibleFilterError(f"{filter_name}: engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if disabled_rules is not None and not isinstance(disabled_rules, (list, tuple)):
        raise AnsibleFilterError(f"{filter_name}: disabled_rules must be a list of rule ids, got {type(disabled_rules).__name__}")
    try:
        return check_rules(engine, extra_rules, disabled_rules, shipped=False)
    except RuleError as exc:
        raise AnsibleFilterError(f"{filter_name}: {exc}") from None


def classify_journal(
    journal: t.Any,
    extra_rules: list[dict[str, t.Any]] | None = None,
    disabled_rules: list[str] | None = None,
    engine: str = "auto",
    strict: bool = False,
) -> dict[str, t.Any]:
    """Classify a whole journal or engine log and return the report with its verdict."""
    rules = _rules(engine, extra_rules, disabled_rules, "classify_journal")
    if journal is not None and not isinstance(journal, (str, bytes, list, tuple, dict)):
        raise AnsibleFilterError(f"classify_journal: input must be text, a list of lines or a list of journal records, got {type(journal).__name__}")
    try:
        return classify(journal, strict=bool(strict), rules=rules)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"classify_journal: {exc}") from None


def journal_line_class(
    line: t.Any,
    extra_rules: list[dict[str, t.Any]] | None = None,
    disabled_rules: list[str] | None = None,
    engine: str = "auto",
) -> dict[str, t.Any]:
    """Classify one line: its class and the rule that decided it."""
    if not isinstance(line, (str, bytes)):
        raise AnsibleFilterError(f"journal_line_class: input must be one line of text, got {type(line).__name__}")
    return classify_line(line, rules=_rules(engine, extra_rules, disabled_rules, "journal_line_class"))


class FilterModule:
    """inferops.runbooks journal filters."""

    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {"classify_journal": classify_journal, "journal_line_class": journal_line_class}
