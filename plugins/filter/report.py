# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters over the runbook report: thin shells around plugins/plugin_utils/_runbook_report.py and _render.py.

Both roles build and render their report through these, so a restart and a precheck read alike.
"""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.runbooks.plugins.module_utils import _history
from ansible_collections.inferops.runbooks.plugins.plugin_utils import _render
from ansible_collections.inferops.runbooks.plugins.plugin_utils._plain import plain
from ansible_collections.inferops.runbooks.plugins.plugin_utils._runbook_report import ROLES, fleet_section, fleet_starts, with_fleet
from ansible_collections.inferops.runbooks.plugins.plugin_utils._runbook_report import runbook_report as build_report


def _report(report: t.Any, filter_name: str) -> dict[str, t.Any]:
    report = plain(report)
    if not isinstance(report, dict) or report.get("role") not in _render.FORMS:
        raise AnsibleFilterError(f"{filter_name}: input must be a report of inferops.runbooks.runbook_report (with a role of {', '.join(ROLES)})")
    return report


def runbook_report(observed: t.Any, role: str) -> dict[str, t.Any]:
    """The report of one host's run of a role, with its verdict."""
    if not isinstance(observed, t.Mapping):
        raise AnsibleFilterError("runbook_report: input must be a mapping of what the role observed")
    try:
        return build_report(plain(observed), str(role))
    except ValueError as exc:
        raise AnsibleFilterError(f"runbook_report: {exc}") from None


def report_summary(report: t.Any, report_dir: str = "") -> list[str]:
    """The one-screen summary, as a list of lines."""
    return _render.summary_lines(_report(report, "report_summary"), str(report_dir or ""))


def report_junit(report: t.Any, report_dir: str = "") -> str:
    """The JUnit XML document."""
    return _render.junit_xml(_report(report, "report_junit"), str(report_dir or ""))


def report_stats(report: t.Any) -> dict[str, t.Any]:
    """What set_stats publishes for the host."""
    return _render.stats(_report(report, "report_stats"))


def _ratio(ratio: t.Any, filter_name: str) -> float:
    try:
        value = float(ratio)
    except (TypeError, ValueError):
        value = 0.0
    if not value >= 1:
        raise AnsibleFilterError(f"{filter_name}: ratio must be a number >= 1, got {ratio!r}")
    return value


def _reports(reports: t.Any, filter_name: str) -> list[dict[str, t.Any]]:
    if not isinstance(reports, (list, tuple)):
        raise AnsibleFilterError(f"{filter_name}: the reports must be a list of reports of inferops.runbooks.runbook_report")
    return [report for report in plain(reports) if isinstance(report, dict)]


def report_fleet(report: t.Any, reports: t.Any, ratio: t.Any = _history.DEFAULT_FLEET_RATIO) -> dict[str, t.Any]:
    """The report with history.fleet: its start against its peers' on the same configuration, from
    their reports, or from their starts alone (a mapping of host to start, as the settle phase hands
    each host's on: far less to template than every report)."""
    own, limit = _report(report, "report_fleet"), _ratio(ratio, "report_fleet")
    if isinstance(reports, t.Mapping):
        return with_fleet(own, plain(reports), limit)
    return fleet_section(own, _reports(reports, "report_fleet"), limit)


def fleet_outliers(reports: t.Any, ratio: t.Any = _history.DEFAULT_FLEET_RATIO) -> list[dict[str, t.Any]]:
    """The hosts whose start was much slower than their peers' on the same configuration."""
    return _history.fleet_outliers(fleet_starts(_reports(reports, "fleet_outliers")), _ratio(ratio, "fleet_outliers"))


class FilterModule:
    """inferops.runbooks report filters."""

    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {
            "runbook_report": runbook_report,
            "report_summary": report_summary,
            "report_junit": report_junit,
            "report_stats": report_stats,
            "report_fleet": report_fleet,
            "fleet_outliers": fleet_outliers,
        }
