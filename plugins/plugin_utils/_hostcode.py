# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side helper: the collection's host code run as a plain Python process over the connection.

Private to the collection; may change at any time. The collection's module_utils (standard library
only) are copied once into a directory of their own under the remote temporary directory; each call
then runs ``python -c BOOT <entry> <bundle>`` with its options as JSON on stdin and its result as
JSON on stdout. A call pays neither building an AnsiballZ payload on the controller (a fifth to a third
of a CPU second for each distinct module in a run) nor sending one; Python keeps the bytecode on
the host. Whatever cannot be done this way (no pipelining, become, an unknown interpreter, a copy
that fails) is left to the module, which is always the fallback.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import typing as t
import zipfile

from ansible.errors import AnsibleError
from ansible.utils.display import Display

from ansible_collections.inferops.runbooks.plugins.module_utils import _probe

display = Display()

BOOT = """import importlib, os, sys
entry, bundle = sys.argv[1], sys.argv[2]
lib = bundle[:-4]
if not os.path.isdir(lib):
    import zipfile
    zipfile.ZipFile(bundle).extractall(lib + ".part")
    os.rename(lib + ".part", lib)
sys.path.insert(0, lib)
importlib.import_module("ansible_collections.inferops.runbooks.plugins.module_utils." + entry).cli()
"""
BUNDLE_PACKAGE = "ansible_collections/inferops/runbooks/plugins/module_utils"


def code_bundle() -> bytes:
    """The collection's module_utils (with their subpackages) in their package, with the package
    markers that keep another ansible_collections on the host from shadowing them."""
    source = os.path.dirname(_probe.__file__)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bundle:
        parts = BUNDLE_PACKAGE.split("/")
        for depth in range(1, len(parts)):
            bundle.writestr("/".join(parts[:depth]) + "/__init__.py", "")
        for directory, subdirectories, names in os.walk(source):
            subdirectories[:] = sorted(name for name in subdirectories if not name.startswith((".", "__pycache__")))
            inside = os.path.relpath(directory, source)
            package = BUNDLE_PACKAGE if inside == "." else f"{BUNDLE_PACKAGE}/{inside}"
            for name in sorted(names):
                if name.endswith(".py"):
                    with open(os.path.join(directory, name), "rb") as handle:
                        bundle.writestr(f"{package}/{name}", handle.read())
            if "__init__.py" not in names:
                bundle.writestr(f"{package}/__init__.py", "")
    return buffer.getvalue()


def known_python(action: t.Any, task_vars: t.Mapping[str, t.Any]) -> str | None:
    """The host's Python as Ansible knows it before running anything there: the inventory's
    ``ansible_python_interpreter`` (unless left to discovery), or the one an earlier task discovered."""
    given = task_vars.get("ansible_python_interpreter")
    if given is not None:
        try:
            value = action._templar.template(given)
        except AnsibleError:
            value = None
        if isinstance(value, str) and value.startswith("/"):
            return str(value)
    facts = task_vars.get("ansible_facts")
    found = facts.get("discovered_interpreter_python") if isinstance(facts, t.Mapping) else None
    return str(found) if isinstance(found, str) and found.startswith("/") else None


def usable(action: t.Any) -> bool:
    """Whether the plain way can work on this connection: options on stdin need pipelining, and a
    plain process does not become another user."""
    return not action._play_context.become and bool(getattr(action._connection, "has_pipelining", False))


class HostCode:
    """The code's copy on one host for one phase (or one wait): installed on first use, removed by ``cleanup``."""

    def __init__(self, action: t.Any, label: str) -> None:
        self.action = action
        self.label = label
        self.python: str | None = None
        self.bundle: str | None = None
        self.directory: str | None = None

    @property
    def installed(self) -> bool:
        return self.bundle is not None

    def install(self, python: str) -> bool:
        """Copy the code to a directory of its own under the remote temporary directory."""
        try:
            remote_tmp = self.action.get_shell_option("remote_tmp", default="~/.ansible/tmp")
            made = self.action._low_level_execute_command(
                f"umask 77 && mkdir -p {remote_tmp} && mktemp -d {remote_tmp}/inferops-probe-XXXXXXXX", sudoable=False
            )
            directory = str(made.get("stdout", "")).strip()
            if made.get("rc") != 0 or not directory.startswith("/"):
                raise AnsibleError(f"mktemp failed: {made.get('stderr')}")
            self.directory = directory
            bundle = f"{directory}/probe.zip"
            self.action._transfer_data(bundle, code_bundle())
        except (AnsibleError, OSError) as exc:
            display.vvv(f"{self.label}: the collection's code could not be copied, modules run instead ({exc})", host=self.host)
            return False
        self.python, self.bundle = python, bundle
        return True

    def run(self, entry: str, options: t.Mapping[str, t.Any]) -> dict[str, t.Any] | None:
        """The result of module_utils ``<entry>.cli()`` with ``options``; None when the process did not
        answer (the caller runs the module instead). A lost connection raises, as a module's would."""
        cmd = " ".join(shlex.quote(word) for word in (str(self.python), "-c", BOOT, entry, str(self.bundle)))
        ran = self.action._low_level_execute_command(cmd, sudoable=False, in_data=json.dumps(options))
        try:
            result = json.loads(ran.get("stdout") or "")
        except ValueError:
            result = None
        if not isinstance(result, dict):
            display.vvv(
                f"{self.label}: the plain process did not run (rc={ran.get('rc')}: {str(ran.get('stderr'))[-300:]}); modules run instead", host=self.host
            )
            return None
        return result

    def cleanup(self) -> None:
        if self.directory is None:
            return
        try:
            self.action._low_level_execute_command(f"rm -rf {shlex.quote(self.directory)}", sudoable=False)
        except AnsibleError as exc:
            display.vvv(f"{self.label}: could not remove {self.directory}: {exc}", host=self.host)
        self.directory = self.bundle = None

    @property
    def host(self) -> str | None:
        return getattr(getattr(self.action, "_play_context", None), "remote_addr", None)
