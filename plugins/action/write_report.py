# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of inferops.runbooks.write_report: a runbook report's JSON and JUnit XML files, in one step.

The files are the controller's, so they are written here, directly, each atomically (a temporary
file in the same directory, then a rename); the managed host is not contacted. Rendering is
``module_utils/_render``'s.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
import typing as t

from ansible.plugins.action import ActionBase

from ansible_collections.inferops.runbooks.plugins.module_utils import _render
from ansible_collections.inferops.runbooks.plugins.plugin_utils._plain import plain

ARGUMENT_SPEC: dict[str, t.Any] = {
    "report": {"type": "dict", "required": True},
    "report_dir": {"type": "path", "required": True},
}
DIR_MODE = 0o755
FILE_MODE = 0o644


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
        texts = {files["json"]: _render.report_json(report), files["junit"]: _render.junit_xml(report, report_dir)}
        if self._task.check_mode:
            result.update(changed=True, files=files, msg="check mode: the report files were not written")
            return result
        try:
            os.makedirs(report_dir, mode=DIR_MODE, exist_ok=True)
            changed = [write_atomically(path, text) for path, text in texts.items()]
        except OSError as exc:
            result.update(failed=True, files=files, msg=f"cannot write the report files in {report_dir} on the controller: {exc}")
            return result
        result.update(changed=any(changed), files=files)
        return result
