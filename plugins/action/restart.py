# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of inferops.runbooks.restart: the restart phase of the role sglang_restart.

Stop the unit (and wait for its old process and its port) or restart it in place, follow the new
start until it is ready (the wait_ready action, with the stall limits the host's start history
taught), generate one token, add the start to the start history, measure it against the host's
baseline, and note in the run record that the configuration passed. Each step runs one of the
collection's modules on the host and writes the run record before it is taken, so that a controller
killed at any point leaves the next run what it needs; a failed step is kept for the report.
The nodes of a deployment run it at the same time, in the same task, and go through its parts (stop,
start, verify) together through the deployment's channel on the controller (``_channel.Rendezvous``):
every node is stopped before any is started, and started before the waits.
A change whose start failed (or whose canary failed against the baseline) is rolled back in the same
phase (``plugin_utils/_rollback``), as is a change deployed before a step that failed ahead of this
phase (kept as ``sglang_restart_failure``): then nothing else is stopped or started.
"""

from __future__ import annotations

import typing as t

from ansible_collections.inferops.runbooks.plugins.plugin_utils._phase import Result, Steps
from ansible_collections.inferops.runbooks.plugins.plugin_utils._restart_phase import RestartPhase
from ansible_collections.inferops.runbooks.plugins.plugin_utils._runtime import PhaseAction

ARGUMENT_SPEC: dict[str, t.Any] = {
    # what the prepare phase returned (its context)
    "context": {"type": "dict", "required": True},
    # a failed step a rescue of the role kept (only this run's counts)
    "failure": {"type": "raw"},
    # each node of this host's deployment: what its prepare phase returned for the others (its peer)
    "peers": {"type": "dict", "default": {}},
}


class ActionModule(PhaseAction):
    """The restart phase of one host; see the module docs (its body: ``plugin_utils/_restart_phase``)."""

    ARGUMENT_SPEC = ARGUMENT_SPEC

    def run_phase(self, steps: Steps, args: dict[str, t.Any], task_vars: dict[str, t.Any]) -> Result:
        return RestartPhase(steps, task_vars, bool(self._task.check_mode)).run(args)
