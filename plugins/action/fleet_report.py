# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of inferops.runbooks.fleet_report: where the play's hosts stand, shown and
published in one step (``plugin_utils/_render.fleet_lines``, ``_history.fleet_outliers``)."""

from __future__ import annotations

import typing as t

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.inferops.runbooks.plugins.module_utils import _history
from ansible_collections.inferops.runbooks.plugins.plugin_utils import _render
from ansible_collections.inferops.runbooks.plugins.plugin_utils._plain import plain
from ansible_collections.inferops.runbooks.plugins.plugin_utils._runbook_report import fleet_starts

display = Display()

ARGUMENT_SPEC: dict[str, t.Any] = {
    "hosts": {"type": "list", "elements": "str", "required": True},
    "reports": {"type": "list", "elements": "raw", "required": True},
    "ratio": {"type": "float", "default": _history.DEFAULT_FLEET_RATIO},
}


class ActionModule(ActionBase):
    """Shows where the play's hosts stand and publishes the slow starts; see the module docs."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def run(self, tmp: t.Any = None, task_vars: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
        result: dict[str, t.Any] = super().run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        if not args["ratio"] >= 1:
            result.update(failed=True, msg=f"fleet_report: ratio must be a number >= 1, got {args['ratio']}")
            return result
        reports = [report for report in plain(args["reports"]) if isinstance(report, dict) and report]
        outliers = _history.fleet_outliers(fleet_starts(reports), args["ratio"])
        lines = _render.fleet_lines([str(host) for host in args["hosts"]], reports, outliers)
        display.display("\n".join(lines))
        result.update(msg=lines, ansible_stats={"data": {"sglang_restart_fleet": {"slow_starts": outliers}}, "per_host": False, "aggregate": False})
        return result
