# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of inferops.runbooks.precheck: the read-only check of a running server, as one
phase.

Check every variable, read the unit and the run record the last rollout left, take one look (unit,
journal, health), generate one token, measure the server against its baseline, add the current
start to the host's start history once it ended; then the report, whose verdict is the first check
that failed (``plugin_utils/_runbook_report``). Each step runs one of the collection's modules on
the host; whether a step runs is one of the small functions below, each asked of what was seen.
"""

from __future__ import annotations

import typing as t

from ansible_collections.inferops.runbooks.plugins.plugin_utils._phase import Result, Steps
from ansible_collections.inferops.runbooks.plugins.plugin_utils._precheck_phase import PrecheckPhase
from ansible_collections.inferops.runbooks.plugins.plugin_utils._runtime import PhaseAction


class ActionModule(PhaseAction):
    """The precheck of one host; see the module docs (its body: ``plugin_utils/_precheck_phase``)."""

    ARGUMENT_SPEC: t.ClassVar[dict[str, t.Any]] = {}

    def run_phase(self, steps: Steps, args: dict[str, t.Any], task_vars: dict[str, t.Any]) -> Result:
        del args
        return PrecheckPhase(steps, task_vars, bool(self._task.check_mode)).run()
