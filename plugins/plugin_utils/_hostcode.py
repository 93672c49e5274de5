# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side helper: the collection's host code run as a plain Python process over the connection.

Private to the collection; may change at any time. The module_utils that an entry point imports
(standard library only: the probe's look, a phase's calls) reach the host as a zip of their source. For
the wait's many looks the first look brings it on stdin, before its options, and unpacks it into a
directory of its own under the remote temporary directory; each look runs ``python -c BOOT <entry>
<directory>`` with its options as JSON on stdin and its result as JSON on stdout (Python keeps the
bytecode there), and one command removes the directory at the end. A phase's few calls carry their own
code on stdin instead (``BOOT_CARRIED``): one round trip each, where keeping the code and removing it
cost one more per phase. A call pays neither building an AnsiballZ payload on the controller (a fifth to
a third of a CPU second for each distinct module in a run) nor sending one. Whatever cannot be done this
way (no pipelining, become, an unknown interpreter, a remote temporary directory that is neither
absolute nor under ``~/``, a process that does not answer) is left to the module, which is always the
fallback. A bundle holds the entry points' import closure, read from their source (every
import of the collection's module_utils, at any depth of the code, as ansible-core finds a module's),
and nothing else: controller code never reaches a host.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.util
import io
import json
import marshal
import os
import re
import secrets
import shlex
import typing as t
import zipfile

from ansible import constants as C
from ansible.errors import AnsibleError
from ansible.utils.display import Display

from ansible_collections.inferops.runbooks.plugins.module_utils import _hostcall
from ansible_collections.inferops.runbooks.plugins.module_utils._hostcall import (
    run_lease,
    run_record,
    server_load,
    server_sleep,
    start_history,
    unit_info,
    unit_leftovers,
)
from ansible_collections.inferops.runbooks.plugins.plugin_utils._run_dir import built_once

display = Display()

BOOT = """import base64, importlib, os, sys
entry, lib = sys.argv[1], os.path.expanduser(sys.argv[2])
if sys.argv[3:] == ["deliver"]:
    import io, zipfile
    os.umask(0o077)
    os.makedirs(os.path.dirname(lib), exist_ok=True)
    zipfile.ZipFile(io.BytesIO(base64.b64decode(sys.stdin.readline()))).extractall(lib + ".part")
    os.rename(lib + ".part", lib)
sys.path.insert(0, lib)
importlib.import_module("ansible_collections.inferops.runbooks.plugins.module_utils." + entry).cli()
"""
# a phase's call carries its code on stdin (one base64 line, then the options), imported from the zip
# (zipimport: only what the call imports is read, from the bytecode compiled on the controller when the
# host's Python is of its version, from the source otherwise); the zip lives as long as the call
BOOT_CARRIED = """import base64, importlib, os, sys, tempfile
entry = sys.argv[1]
handle, bundle = tempfile.mkstemp(prefix="inferops-call-", suffix=".zip")
try:
    with os.fdopen(handle, "wb") as out:
        out.write(base64.b64decode(sys.stdin.readline()))
    sys.path.insert(0, bundle)
    importlib.import_module("ansible_collections.inferops.runbooks.plugins.module_utils." + entry).cli()
finally:
    os.unlink(bundle)
"""
PACKAGE = "ansible_collections.inferops.runbooks.plugins.module_utils"
BUNDLE_PACKAGE = PACKAGE.replace(".", "/")
MODULE_UTILS = os.path.dirname(os.path.dirname(_hostcall.__file__))

# the phases' calls by module name (module_utils/_hostcall/<name>.py): their specs check a plain
# call's arguments here, and their modules are the entry points of a phase's bundle
HOST_CALLS: dict[str, _hostcall.Call] = {
    module.__name__.rsplit(".", 1)[1]: module.CALL for module in (unit_info, run_record, run_lease, server_load, server_sleep, start_history, unit_leftovers)
}
CALL_ENTRIES = tuple(f"_hostcall.{name}" for name in HOST_CALLS)
PROBE_ENTRIES = ("_probe",)


def source_path(name: str) -> str | None:
    """The file of module_utils module ``name`` (``_probe``, ``_engines``, ``_engines.sglang``); None when there is none."""
    base = os.path.join(MODULE_UTILS, *name.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return path
    return None


# an import statement at the start of a line: ``from <module> import <names>`` (the names in
# parentheses over several lines, or up to the line's end) or ``import <modules>``
_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+(?P<module>\.*[\w.]*)[ \t]+import[ \t]+(?P<names>\([^)]*\)|[^\n#;]*)|import[ \t]+(?P<modules>[\w., \t]+))", re.M)


def imported_names(name: str) -> set[str]:
    """The module_utils modules that module ``name`` imports, anywhere in its code, with the packages
    they are in (a package's ``__init__`` runs before its module). Read from the import statements'
    text, not from a syntax tree: this runs for each phase on each host, and parsing the closure
    would cost the controller several times what zipping it does."""
    path = t.cast(str, source_path(name))
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found = {module for match in _IMPORT.finditer(text) for module in _imported_by(match, package)}
    with_packages = {".".join(parts[:depth]) for parts in (module.split(".") for module in found) for depth in range(1, len(parts) + 1)}
    return {module for module in with_packages if source_path(module)}


def _imported_by(statement: re.Match[str], package: str) -> set[str]:
    """The module_utils modules one import statement names (relative to module_utils)."""
    if statement["modules"] is not None:
        words = (item.split()[0] for item in statement["modules"].split(",") if item.strip())
        return {word[len(PACKAGE) + 1 :] for word in words if word.startswith(PACKAGE + ".")}
    module = _relative_to_module_utils(statement["module"], package)
    if module is None:
        return set()
    # ``from <package> import <name>`` imports a module when there is one of that name
    taken = (f"{module}.{item.split()[0]}".strip(".") for item in statement["names"].strip("()").split(",") if item.split())
    return {*([module] if module else []), *(name for name in taken if source_path(name))}


def _relative_to_module_utils(module: str, package: str) -> str | None:
    """An imported module's name relative to module_utils ("" for module_utils itself); None outside it."""
    level = len(module) - len(module.lstrip("."))
    if level:
        parts = package.split(".") if package else []
        if level - 1 > len(parts):
            return None
        return ".".join([*parts[: len(parts) - level + 1], *([module[level:]] if module[level:] else [])])
    if module == PACKAGE:
        return ""
    return module[len(PACKAGE) + 1 :] if module.startswith(PACKAGE + ".") else None


def import_closure(entries: t.Iterable[str]) -> list[str]:
    """The entry points and every module_utils module they import, directly or not, sorted."""
    seen: set[str] = set()
    todo = list(entries)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(imported_names(name) - seen)
    return sorted(seen)


@functools.lru_cache(maxsize=None)
def code_bundle(entries: tuple[str, ...], compiled: bool = False) -> bytes:
    """The module_utils that ``entries`` need (``import_closure``), in their package, with the package
    markers that keep another ansible_collections on the host from shadowing them; ``compiled``, each
    with its bytecode beside it (``unchecked_pyc``, for an import from the zip)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bundle:
        parts = BUNDLE_PACKAGE.split("/")
        members = [("/".join(parts[:depth]) + "/__init__.py", b"") for depth in range(1, len(parts) + 1)]
        for name in import_closure(entries):
            path = t.cast(str, source_path(name))
            with open(path, "rb") as handle:
                members.append((BUNDLE_PACKAGE + "/" + os.path.relpath(path, MODULE_UTILS), handle.read()))
        for member, source in members:
            bundle.writestr(member, source)
            if compiled:
                bundle.writestr(member[:-3] + ".pyc", unchecked_pyc(source, member))
    return buffer.getvalue()


def unchecked_pyc(source: bytes, name: str) -> bytes:
    """``source``'s bytecode as an unchecked hash-based .pyc (PEP 552): a Python of the controller's
    version imports it without compiling or checking the source beside it; any other rejects its magic
    number and compiles the source."""
    code = compile(source, name, "exec", dont_inherit=True)
    return importlib.util.MAGIC_NUMBER + (0b01).to_bytes(4, "little") + importlib.util.source_hash(source) + marshal.dumps(code)


def run_bundle(entries: tuple[str, ...], directory: str | None = None, compiled: bool = False) -> bytes:
    """``code_bundle(entries, compiled)``, built once per run: every phase of every host runs in a process of
    its own, forked before any of them built it, so the bundle is kept in the run's local temporary
    directory (``directory``, default Ansible's, removed at the run's end) and read from there; the
    forks that ask at the same moment wait for the first one's."""
    directory = directory if directory is not None else str(C.DEFAULT_LOCAL_TMP)
    named = "\0".join([*entries, "compiled" if compiled else "source"])
    path = os.path.join(directory, "inferops-code-" + hashlib.sha256(named.encode()).hexdigest()[:16] + ".zip")
    return built_once(path, _kept_bundle, lambda: code_bundle(entries, compiled), _write_bundle)


def _kept_bundle(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def _write_bundle(path: str, data: bytes) -> None:
    written = f"{path}.{os.getpid()}"
    with open(written, "wb") as handle:
        handle.write(data)
    os.replace(written, path)


@functools.lru_cache(maxsize=None)
def carried_bundle(entries: tuple[str, ...]) -> str:
    """``run_bundle(entries)``, compiled, as the one base64 line that a carried call sends first."""
    return base64.b64encode(run_bundle(entries, compiled=True)).decode("ascii")


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


def home_quoted(path: str) -> str:
    """``path`` quoted for the host's shell, a leading ``~/`` left for the shell to expand."""
    if path.startswith("~/"):
        return "~/" + shlex.quote(path[2:])
    return shlex.quote(path)


def usable(action: t.Any) -> bool:
    """Whether the plain way can work on this connection: options on stdin need pipelining, and a
    plain process does not become another user."""
    return not action._play_context.become and bool(getattr(action._connection, "has_pipelining", False))


class HostCode:
    """The code's copy on one host for one phase (or one wait): what ``entries`` (module_utils modules
    with a ``cli``) need, delivered with the first call into a directory of its own and run from there
    by the calls after it, removed by ``cleanup``; or, ``carried``, sent with each call (a phase's few
    calls), never kept."""

    def __init__(self, action: t.Any, label: str, entries: tuple[str, ...], carried: bool = False) -> None:
        self.action = action
        self.label = label
        self.entries = entries
        self.carried = carried
        self.python: str | None = None
        # where the first call unpacks the code (under the remote temporary directory), once it has
        self.directory: str | None = None
        self.delivered = False

    @property
    def installed(self) -> bool:
        return self.python is not None

    def install(self, python: str) -> bool:
        """Note the host's Python and name the code's directory; nothing runs on the host until the
        first call, which brings the code (``BOOT``'s ``deliver``): a round trip to make a directory
        and a transfer to fill it are saved."""
        if not self.carried:
            remote_tmp = str(self.action.get_shell_option("remote_tmp", default="~/.ansible/tmp")).rstrip("/")
            if not remote_tmp.startswith(("/", "~/")) or "$" in remote_tmp:
                display.vvv(f"{self.label}: remote_tmp {remote_tmp} is not a plain path; modules run instead", host=self.host)
                return False
            self.directory = f"{remote_tmp}/inferops-probe-{secrets.token_hex(6)}"
        self.python = python
        return True

    def run(self, entry: str, options: t.Mapping[str, t.Any]) -> dict[str, t.Any] | None:
        """The result of module_utils ``<entry>.cli()`` (one of ``entries``) with ``options``; None when
        the process did not answer (the caller runs the module instead). A lost connection raises, as a
        module's would."""
        if entry not in self.entries:
            raise ValueError(f"{entry} is not in the code copied for {self.label} ({', '.join(self.entries)})")
        if self.carried:
            cmd = " ".join(shlex.quote(word) for word in (str(self.python), "-c", BOOT_CARRIED, entry))
            stdin = carried_bundle((entry,)) + "\n" + json.dumps(options)
        else:
            deliver = [] if self.delivered else ["deliver"]
            cmd = " ".join(shlex.quote(word) for word in (str(self.python), "-c", BOOT, entry, str(self.directory), *deliver))
            code = "" if self.delivered else base64.b64encode(run_bundle(self.entries)).decode("ascii") + "\n"
            stdin = code + json.dumps(options)
            # from the first try on, the directory may exist: cleanup removes it whatever the answer
            self.delivered = True
        ran = self.action._low_level_execute_command(cmd, sudoable=False, in_data=stdin)
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
        if self.directory is None or not self.delivered:
            return
        try:
            self.action._low_level_execute_command(f"rm -rf -- {home_quoted(self.directory)}", sudoable=False)
        except AnsibleError as exc:
            display.vvv(f"{self.label}: could not remove {self.directory}: {exc}", host=self.host)
        self.directory = None
        self.delivered = False

    @property
    def host(self) -> str | None:
        return getattr(getattr(self.action, "_play_context", None), "remote_addr", None)
