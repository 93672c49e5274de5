# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Host side: what the rollout's phases read and write on the managed host, as plain functions.

Private to the collection; may change at any time. Standard library only. Each call is a module of
this package: its function, its argument spec and its ``cli``; the modules unit_info,
run_record, server_load and start_history are thin shells over them (``run_module``). A phase runs
the same function as one plain Python process over the connection (the call's ``cli``, the options as
JSON on stdin, validated on the controller against the same spec), so that it builds and sends no
module payload for it; the module is its way when that cannot be done. This package imports nothing
of the collection: a call's payload, or the code a phase copies to the host, holds what the call
imports and no more.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import typing as t

Params = t.Mapping[str, t.Any]
Result = dict[str, t.Any]


class CallFailed(Exception):
    """A call that failed: its message and what else its result says (as ``fail_json`` takes them)."""

    def __init__(self, msg: str, **extra: t.Any) -> None:
        super().__init__(msg)
        self.extra = extra


class Host(t.Protocol):
    """What a call needs of the host: run a command, find a program, warn; and whether it may change anything."""

    check_mode: bool

    def run(self, argv: t.Sequence[str]) -> tuple[int, str, str]: ...

    def bin_path(self, name: str) -> str: ...

    def warn(self, text: str) -> None: ...


class ModuleHost:
    """The host as an AnsibleModule sees it (the modules' shell)."""

    def __init__(self, module: t.Any) -> None:
        self.module = module
        self.check_mode = bool(module.check_mode)

    def run(self, argv: t.Sequence[str]) -> tuple[int, str, str]:
        rc, out, err = self.module.run_command(list(argv))
        return int(rc), str(out), str(err)

    def bin_path(self, name: str) -> str:
        return str(self.module.get_bin_path(name, required=True))

    def warn(self, text: str) -> None:
        self.module.warn(text)


class PlainHost:
    """The host as a plain process sees it (``cli``)."""

    SEARCHED = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")

    def __init__(self, check_mode: bool) -> None:
        self.check_mode = check_mode
        self.warnings: list[str] = []

    def run(self, argv: t.Sequence[str]) -> tuple[int, str, str]:
        # a plain process on the host has no AnsibleModule to run its commands
        # pylint: disable-next=ansible-bad-function
        process = subprocess.run(list(argv), capture_output=True, check=False)
        return process.returncode, process.stdout.decode("utf-8", "replace"), process.stderr.decode("utf-8", "replace")

    def bin_path(self, name: str) -> str:
        found = shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), *self.SEARCHED]))
        if not found:
            raise CallFailed(f"Failed to find required executable {name!r} in paths: {os.environ.get('PATH', '')}")
        return found

    def warn(self, text: str) -> None:
        self.warnings.append(text)


class Call(t.NamedTuple):
    """A call: the module's argument spec and ``required_by``, and the function."""

    spec: dict[str, t.Any]
    required_by: dict[str, str]
    run: t.Callable[[Params, Host], Result]


def run_module(module: t.Any, call: Call) -> None:
    """A module's whole run: the call with the module's parameters, its result or its failure."""
    try:
        result = call.run(module.params, ModuleHost(module))
    except CallFailed as exc:
        module.fail_json(msg=str(exc), **exc.extra)
    module.exit_json(**result)


def serve(call: Call) -> None:
    """A call as a plain process: ``{"params", "check_mode"}`` as JSON on stdin (the params validated
    by the controller), the result as JSON on stdout."""
    request = json.loads(sys.stdin.read() or "{}")
    host = PlainHost(bool(request.get("check_mode")))
    try:
        result = call.run(request.get("params") or {}, host)
    except CallFailed as exc:
        result = {"failed": True, "msg": str(exc), **exc.extra}
    if host.warnings:
        result["warnings"] = host.warnings
    sys.stdout.write(json.dumps(result))
