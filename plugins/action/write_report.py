# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of inferops.runbooks.write_report: a runbook report's JSON and JUnit XML files, and the
run's page, in one step.

The files are the controller's, so they are written here, directly, each atomically (a temporary
file in the same directory, then a rename); the managed host is not contacted. Rendering is
``plugin_utils/_render``'s and ``plugin_utils/_rollout_page``'s.

The run's page (``<run>.html``) shows every host of the play that has a report so far: the reports
are those the play's hosts kept in this run (``publish_report`` keeps each host's, this action the one
given, a deployment's its nodes'; ``plugin_utils/_run_results``), so nothing is read back from the
report directory and a report of an earlier run beside them is never mixed in; reading them costs a
small file each, where each host's variables composed through hostvars cost every host the whole play.
It is written again after each host's report, one host at a time (a lock of the run: the last one
written holds every report kept before it). Its name, the role and the earliest start among the run's
hosts (their ``<role>_started_at`` facts, set as the role begins, and their reports' starts), is
chosen by the first report written and kept for the run: a host that fails early and reports first
names the page as the others will. The batches are the play's own (its ``serial``). A multi-node
deployment's report also gets its own page, ``<deployment>.html``.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
import typing as t

from ansible import constants as C
from ansible.plugins.action import ActionBase
from ansible.utils.helpers import pct_to_int

from ansible_collections.inferops.runbooks.plugins.plugin_utils import _render, _rollout_page, _run_results
from ansible_collections.inferops.runbooks.plugins.plugin_utils._plain import plain

ARGUMENT_SPEC: dict[str, t.Any] = {
    "report": {"type": "dict", "required": True},
    "report_dir": {"type": "path", "required": True},
}
DIR_MODE = 0o755
FILE_MODE = 0o644
RUN = "run"  # what the page's name is kept under: the run's, not a host's


def write_atomically(path: str, text: str) -> bool:
    """Write ``text`` to ``path`` unless it already holds exactly that; True when written.

    Only a regular file is ever replaced: the rename would put a regular file in place of a device,
    a pipe or a link (a report path that is, or links to, ``/dev/null`` would replace the link, or
    with the link resolved the controller's ``/dev/null`` itself), so such a path is refused."""
    try:
        existing = os.lstat(path)
    except FileNotFoundError:
        existing = None
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        raise OSError(errno.EEXIST, f"{path} exists and is not a regular file ({stat.filemode(existing.st_mode)}); the report is not written over it")
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read() == text:
                return False
    except (OSError, UnicodeDecodeError):
        pass
    directory = os.path.dirname(path) or "."
    handle_fd, temporary = tempfile.mkstemp(prefix=".report-", dir=directory)
    try:
        with os.fdopen(handle_fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temporary, FILE_MODE)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    return True


class ActionModule(ActionBase):
    """Writes a runbook report's files on the controller; see the module docs."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def run(self, tmp: t.Any = None, task_vars: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
        result: dict[str, t.Any] = super().run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        report = plain(args["report"])
        report_dir = args["report_dir"]
        try:
            files = _render.report_files(report, report_dir)
        except ValueError as exc:
            result.update(failed=True, msg=f"write_report: {exc}")
            return result
        try:
            with _run_results.locked(_run_results.page_kind(str(report.get("role")))):
                return self._write(result, report, report_dir, files, task_vars or {})
        except OSError as exc:
            result.update(failed=True, files=files, msg=f"write_report: the run's reports cannot be kept on the controller ({C.DEFAULT_LOCAL_TMP}): {exc}")
            return result

    def _write(
        self, result: dict[str, t.Any], report: dict[str, t.Any], report_dir: str, files: dict[str, str], task_vars: dict[str, t.Any]
    ) -> dict[str, t.Any]:
        """The report's files and the pages, written under the run's lock of the pages."""
        texts = {files["json"]: _render.report_json(report), files["junit"]: _render.junit_xml(report, report_dir)}
        try:
            pages = self._pages(report, report_dir, task_vars)
        except ValueError as exc:
            result.update(failed=True, msg=f"write_report: the run's page: {exc}")
            return result
        texts.update(pages)
        if self._task.check_mode:
            result.update(changed=True, files=files, pages=list(pages), msg="check mode: the report files were not written")
            return result
        try:
            os.makedirs(report_dir, mode=DIR_MODE, exist_ok=True)
            changed = [write_atomically(path, text) for path, text in texts.items()]
        except OSError as exc:
            result.update(failed=True, files=files, msg=f"cannot write the report files in {report_dir} on the controller: {exc}")
            return result
        result.update(changed=any(changed), files=files, pages=list(pages))
        return result

    def _pages(self, report: dict[str, t.Any], report_dir: str, task_vars: dict[str, t.Any]) -> dict[str, str]:
        """{path: text} of the run's page, and of the deployment's page for a deployment's report."""
        directory = report_dir.rstrip("/") or "/"
        pages: dict[str, str] = {}
        if _render.is_deployment(report):
            pages[f"{directory}/{report.get('deployment')}{_render.form_of(report).file_suffix}.html"] = _rollout_page.deployment_page(report)
        hosts = [str(host) for host in task_vars.get("ansible_play_hosts_all") or []]
        reports = run_reports(report, hosts)
        if reports:
            name = page_name(str(report.get("role")), reports, hosts, task_vars.get("hostvars"))
            pages[f"{directory}/{name}.html"] = _rollout_page.run_page(reports, _rollout_page.batches_of(hosts, self._serial(len(hosts))), name)
        return pages

    def _serial(self, host_count: int) -> list[int]:
        """The play's batch sizes (``serial``, percentages made counts); [] for one batch."""
        try:
            serial = self._task.get_play().serial or []
        except AttributeError:
            return []
        sizes = serial if isinstance(serial, list) else [serial]
        try:
            return [pct_to_int(size, host_count) for size in sizes]
        except (TypeError, ValueError):
            return []


def _fact(hostvars: t.Any, host: str, name: str) -> t.Any:
    """A host's fact (None when it has none), as plain data."""
    try:
        return plain(hostvars[host].get(name)) if hostvars is not None else None
    except (KeyError, TypeError):
        return None


def run_starts(role: str, hosts: list[str], hostvars: t.Any) -> list[float]:
    """When each of the run's hosts began the role (its ``<role>_started_at`` fact, seconds since the
    epoch), whether or not it has reported yet."""
    starts = []
    for host in hosts:
        try:
            starts.append(float(_fact(hostvars, host, f"{role}_started_at")))
        except (TypeError, ValueError):
            continue
    return starts


def page_name(role: str, reports: list[dict[str, t.Any]], hosts: list[str], hostvars: t.Any) -> str:
    """The run's page name, chosen by the first report written in this run (from every host's start:
    read once, not for each report) and kept for the others."""
    kind = _run_results.page_kind(role)
    kept = _run_results.read([RUN], kind).get(RUN) or {}
    if isinstance(kept.get("name"), str):
        return str(kept["name"])
    name = _rollout_page.run_name(reports, run_starts(role, hosts, hostvars))
    _run_results.keep(RUN, kind, {"name": name})
    return name


def own_reports(report: dict[str, t.Any]) -> dict[str, dict[str, t.Any]]:
    """The reports this one stands for, by host: its host's, or a deployment's nodes'."""
    if not _render.is_deployment(report):
        return {str(report.get("host")): report}
    nodes = [plain(node) for node in report.get("node_reports") or []]
    return {str(node.get("host")): node for node in nodes if isinstance(node, dict)}


def run_reports(report: dict[str, t.Any], hosts: list[str]) -> list[dict[str, t.Any]]:
    """The reports of the run's hosts so far, in play order: the ones the play's hosts kept in this run,
    and this report's own (kept here for the hosts after it)."""
    role = report.get("role")
    kind = _run_results.report_kind(str(role))
    own = own_reports(report)
    for host, mine in own.items():
        _run_results.keep(host, kind, mine)
    kept = _run_results.read([host for host in hosts if host not in own], kind)
    reports = []
    for host in hosts:
        found = own.get(host) or kept.get(host)
        if found is not None and (host in own or (found.get("role") == role and found.get("verdict") != "skipped")):
            reports.append(found)
    return reports + [mine for host, mine in own.items() if host not in hosts]
