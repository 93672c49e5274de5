# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of inferops.runbooks.prepare: a rollout's first phase, up to the drain hooks.

Check every variable (on the play's first host, every host's), read the unit, render the change on the
controller, read the run record an earlier run left and reconcile it with the host (completing a
rollback cut short), compare the change with the host's files, take over a host left out of rotation,
deploy the change (backups, write, daemon-reload, refuse a change that breaks the unit), and take the
host out of rotation before its stop (the run record first, then the router: ``plugin_utils/_router``). Each
step runs one of the collection's or ansible-core's modules on the host; what to do is decided by
``plugin_utils/_prepare``. A failed step is kept as ``sglang_restart_failure`` for the rest of the role
(rollback, restore, report) instead of failing the task.
"""

from __future__ import annotations

import functools
import typing as t

from ansible_collections.inferops.runbooks.plugins.plugin_utils._phase import Result, Steps
from ansible_collections.inferops.runbooks.plugins.plugin_utils._prepare_phase import PreparePhase, task_diff, template_renderer
from ansible_collections.inferops.runbooks.plugins.plugin_utils._runtime import PhaseAction


class ActionModule(PhaseAction):
    """The prepare phase of one host; see the module docs (its body: ``plugin_utils/_prepare_phase``)."""

    ARGUMENT_SPEC: t.ClassVar[dict[str, t.Any]] = {}

    def run_phase(self, steps: Steps, args: dict[str, t.Any], task_vars: dict[str, t.Any]) -> Result:
        del args
        # the templates render with this action's loader and templar; copy's --diff is this task's
        render = template_renderer(self._loader, self._templar, task_vars)
        return PreparePhase(steps, task_vars, bool(self._task.check_mode), render, functools.partial(task_diff, self._task)).run()
