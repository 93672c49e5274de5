# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of inferops.runbooks.publish_report: a runbook role's report, in one step (a
multi-node deployment's judged here from its nodes' reports, ``_deployment.deployment_verdict``).

The summary is shown (in one piece, as the wait shows its progress lines), the outcome published as ``set_stats`` data
(``ansible_stats``, which the strategy takes from any action's result that did not fail: so the
host fails on its verdict in the task after this one), the files written by
inferops.runbooks.write_report. The managed host is not contacted.
"""

from __future__ import annotations

import typing as t

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.inferops.runbooks.plugins.plugin_utils import _render, _run_results
from ansible_collections.inferops.runbooks.plugins.plugin_utils._deployment import TopologyError, deployment_verdict
from ansible_collections.inferops.runbooks.plugins.plugin_utils._plain import plain

display = Display()

ARGUMENT_SPEC: dict[str, t.Any] = {
    "report": {"type": "dict", "required": True},
    "report_dir": {"type": "str", "default": ""},
    "publish": {"type": "bool", "default": True},
    "node": {"type": "dict", "default": {}},
}


def reporter(node: t.Mapping[str, t.Any], host: str, batch: t.Sequence[str]) -> bool:
    """Whether this host shows, publishes and writes the report: a single host always; of a multi-node
    deployment's nodes, the first one in the play's batch (node 0 unless it is gone)."""
    if not node.get("multi_node"):
        return True
    return next((name for name in node.get("hosts") or [host] if name in batch), host) == host


def node_reports(node: t.Mapping[str, t.Any], hostvars: t.Mapping[str, t.Any], fact: str) -> list[dict[str, t.Any]]:
    """The reports the nodes of a deployment assembled so far (their ``<role>_report`` facts)."""
    found = [plain((hostvars.get(host) or {}).get(fact)) for host in node.get("hosts") or []]
    return [report for report in found if isinstance(report, dict) and report]


def published_name(report: t.Mapping[str, t.Any], host: str) -> str:
    """What the artifacts are published under: the deployment, or the host."""
    return str(report.get("deployment")) if _render.is_deployment(report) else host


def stats(report: t.Mapping[str, t.Any], host: str) -> dict[str, t.Any]:
    """The set_stats data of the report: {role: {host or deployment: figures}}, aggregated over the run."""
    data = {str(report["role"]): {published_name(report, host): _render.stats(dict(report))}}
    return {"data": data, "per_host": False, "aggregate": True}


class ActionModule(ActionBase):
    """Shows, publishes and writes a runbook report; see the module docs."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def run(self, tmp: t.Any = None, task_vars: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
        result: dict[str, t.Any] = super().run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        task_vars = task_vars or {}
        report, node = plain(args["report"]), plain(args["node"])
        if report.get("role") not in _render.FORMS:
            result.update(
                failed=True, msg=f"publish_report: the report must be one of inferops.runbooks.runbook_report (with a role of {', '.join(_render.FORMS)})"
            )
            return result
        host = str(task_vars.get("inventory_hostname", ""))
        try:
            # for the run's page that the hosts after this one write (write_report)
            _run_results.keep(host, _run_results.report_kind(str(report["role"])), report)
        except OSError as exc:
            display.warning(f"{host}: its report is not kept for the run's page: {exc}")
        if node.get("multi_node"):
            hostvars = t.cast(t.Mapping[str, t.Any], task_vars.get("hostvars") or {})
            try:
                report = deployment_verdict(str(node.get("deployment")), node_reports(node, hostvars, f"{report['role']}_report"))
            except TopologyError as exc:
                result.update(failed=True, msg=f"publish_report: {exc}")
                return result
        publish = args["publish"] and reporter(node, host, [str(name) for name in task_vars.get("ansible_play_batch") or [host]])
        shown = publish and report.get("verdict") != "skipped"
        summary = _render.summary_lines(report, args["report_dir"]) if shown else []
        if publish:
            result["ansible_stats"] = stats(report, host)
        if shown and args["report_dir"]:
            written = self._write(report, args["report_dir"], task_vars)
            if written.get("failed"):
                result.update(failed=True, msg=written.get("msg"))
                return result
            result["changed"] = bool(written.get("changed"))
        if shown:
            # one message, so that the summaries of a batch's hosts never interleave; the result keeps
            # it for -v and the callbacks that read results
            display.display("\n".join(summary))
            result["msg"] = summary
        # what the step after this one fails the host with
        result["verdict"] = report.get("verdict")
        if report.get("verdict") == "fail":
            headline = (summary or _render.summary_lines(report, args["report_dir"]) or [""])[0]
            result["failure"] = f"{headline} - {report.get('msg')}"
        return result

    def _write(self, report: dict[str, t.Any], report_dir: str, task_vars: dict[str, t.Any]) -> dict[str, t.Any]:
        """The files, written in check mode too: they are the controller's, not the target's."""
        task = self._task.copy()
        task.args = {"report": report, "report_dir": report_dir}
        task.check_mode = False
        writer = self._shared_loader_obj.action_loader.get(
            "inferops.runbooks.write_report",
            task=task,
            connection=self._connection,
            play_context=self._play_context,
            loader=self._loader,
            templar=self._templar,
            shared_loader_obj=self._shared_loader_obj,
        )
        written: dict[str, t.Any] = writer.run(task_vars=task_vars)
        return written
