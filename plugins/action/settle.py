# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of inferops.runbooks.settle: the last phase of the role sglang_restart.

Once a configuration that passed serves (the new one, the previous one after a rollback, or the one
never stopped), the worker goes back into the router with the registration the run record kept (the
user's restore hooks ran just before, in the role); the run record is settled where the host ends
(``done`` once nothing is left to undo); and the host's report is assembled from what the run observed
(``plugin_utils/_runbook_report``: its verdict and reason). The decisions are ``_rollout.decide``'s,
over what the role observed, with the outcome of putting the host back.
"""

from __future__ import annotations

import typing as t

from ansible_collections.inferops.runbooks.plugins.plugin_utils import _run_results
from ansible_collections.inferops.runbooks.plugins.plugin_utils._phase import Result, Steps
from ansible_collections.inferops.runbooks.plugins.plugin_utils._runtime import PhaseAction
from ansible_collections.inferops.runbooks.plugins.plugin_utils._settle_phase import SettlePhase

ARGUMENT_SPEC: dict[str, t.Any] = {
    # what the prepare phase returned (its context)
    "context": {"type": "dict", "required": True},
    # what the restart phase returned
    "restarted": {"type": "dict", "default": {}},
    # a failed step, and a failed restore hook, the role's rescues kept (only this run's count)
    "failure": {"type": "raw"},
    "traffic_failure": {"type": "raw"},
    # the unit and the report directory as given, for the report of a run whose variables were refused
    "unit": {"type": "raw"},
    "report_dir": {"type": "raw"},
}


class ActionModule(PhaseAction):
    """The settle phase of one host; see the module docs (its body: ``plugin_utils/_settle_phase``)."""

    ARGUMENT_SPEC = ARGUMENT_SPEC

    def run_phase(self, steps: Steps, args: dict[str, t.Any], task_vars: dict[str, t.Any]) -> Result:
        result = SettlePhase(steps, task_vars, bool(self._task.check_mode)).run(args)
        # what the report step of every host compares its start with (lookup run_starts), and what the
        # rolling playbook's fleet gate counts as failed after every batch
        host, report = str(task_vars.get("inventory_hostname", "")), result.get("report") or {}
        _run_results.keep(host, _run_results.START, result.get("fleet_start") or {})
        _run_results.keep(host, _run_results.VERDICT, {"verdict": report.get("verdict"), "reason": report.get("reason")})
        return result
