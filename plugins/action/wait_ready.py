# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of inferops.runbooks.wait_ready: arguments, transport and display around the
wait's state machine (plugins/plugin_utils/_wait.py), which makes every decision.

Each probe is one service_probe run on the managed host that long-polls for up to the poll
interval. A lost connection is retried on a reset connection with exponential backoff and jitter
within the budget, as ansible-core's reboot action does; a probe that fails for another reason
ends the wait at once.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import time
import typing as t
import zipfile

from ansible import constants as C
from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.module_utils.common.parameters import remove_values
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.inferops.runbooks.plugins.module_utils import _probe
from ansible_collections.inferops.runbooks.plugins.module_utils._options import wait_argument_spec, wait_option_problems
from ansible_collections.inferops.runbooks.plugins.module_utils._types import ProbeResult
from ansible_collections.inferops.runbooks.plugins.plugin_utils._channel import ChannelError, FileChannel, channel_directory
from ansible_collections.inferops.runbooks.plugins.plugin_utils._once import rule_problems_once
from ansible_collections.inferops.runbooks.plugins.plugin_utils._wait import ConnectionLost, Probe, ProbeFailed, Settings, Wait, run_wait

display = Display()

PROBE_MODULE = "inferops.runbooks.service_probe"
ARGUMENT_SPEC = wait_argument_spec()
TAIL_LINES = 20


class Transport:
    """Runs service_probe for the wait, turning Ansible's ways of failing into the wait's."""

    def __init__(self, action: ActionModule, wait: Wait, args: t.Mapping[str, t.Any], task_vars: dict[str, t.Any]) -> None:
        self.action = action
        self.wait = wait
        self.args = args
        self.task_vars = task_vars

    def __call__(self, probe: Probe) -> ProbeResult:
        if probe.reset_connection:
            self.reset_connection()
        return self.run_module(probe)

    def run_module(self, probe: Probe) -> ProbeResult:
        try:
            result = self.action._execute_module(module_name=PROBE_MODULE, module_args=self.module_args(probe), task_vars=self.task_vars)
        except AnsibleConnectionFailure as exc:
            raise ConnectionLost(str(exc)) from None
        if result.get("unreachable"):
            raise ConnectionLost(str(result.get("msg") or "host unreachable"))
        if result.get("failed"):
            raise ProbeFailed(str(result.get("msg") or "failed without a message"))
        return t.cast(ProbeResult, result)

    def module_args(self, probe: Probe) -> dict[str, t.Any]:
        args, wait = self.args, self.wait
        module_args: dict[str, t.Any] = {
            "unit": args["unit"],
            "engine": args["engine"],
            "extra_rules": args["extra_rules"],
            "disabled_rules": args["disabled_rules"],
            "strict": args["strict"],
            "redact": args["redact"],
            "watch": probe.watch,
            "tail_lines": TAIL_LINES,
            "validate_certs": args["validate_certs"],
        }
        if probe.pinning:
            module_args["invocation_id"] = wait.invocation_id
            return {key: value for key, value in module_args.items() if value is not None}
        module_args.update(
            invocation_id=wait.invocation_id,
            cursor=wait.cursor,
            line_offset=int(wait.total["lines"]),
            phase=wait.total["phase"],
            health_early=probe.health_early,
        )
        if probe.health:
            module_args.update(health_url=args["health_url"], health_timeout=probe.health_timeout or args["health_timeout"])
            if probe.health_every > 0:
                module_args.update(health_every=probe.health_every, health_needed=probe.health_needed, health_known=wait.health_known())
        return {key: value for key, value in module_args.items() if value is not None}

    def reset_connection(self) -> None:
        try:
            self.action._connection.reset()
        except Exception as exc:  # a reset that fails is retried with the next call anyway
            display.vvv(f"wait_ready: connection reset failed: {exc}", host=self.wait.settings.host)


BOOT = """import os, sys
bundle = sys.argv[1]
lib = bundle[:-4]
if not os.path.isdir(lib):
    import zipfile
    zipfile.ZipFile(bundle).extractall(lib + ".part")
    os.rename(lib + ".part", lib)
sys.path.insert(0, lib)
from ansible_collections.inferops.runbooks.plugins.module_utils._probe import cli
cli()
"""
BUNDLE_PACKAGE = "ansible_collections/inferops/runbooks/plugins/module_utils"


def probe_bundle() -> bytes:
    """The probe's code for the managed host: the collection's module_utils (standard library only,
    with their subpackages) in their package, with the package markers that keep another
    ansible_collections from shadowing it."""
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


def known_python(action: ActionBase, task_vars: t.Mapping[str, t.Any]) -> str | None:
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


class FastTransport(Transport):
    """Transport whose looks after the first run as a plain Python process on the managed host: the
    probe's code (stdlib only) is copied there once per wait, so that a look pays neither AnsiballZ's
    payload nor compiling it again (Python keeps the bytecode). The first look too when the host's
    Python is known; otherwise the first look, and every look after the fast way failed to set up or
    to run, is the service_probe module."""

    def __init__(self, action: ActionModule, wait: Wait, args: t.Mapping[str, t.Any], task_vars: dict[str, t.Any]) -> None:
        super().__init__(action, wait, args, task_vars)
        self.python: str | None = None
        self.bundle: str | None = None
        self.directory: str | None = None
        # a node of a deployment keeps the module's looks: the plain process's set-up (copying the code,
        # then compiling it in the first look) delays that node's first sight of its journal, and the
        # node that stalled first, the deployment's root cause, is named by when each node saw its last progress
        self.usable = not action._play_context.become and bool(getattr(action._connection, "has_pipelining", False)) and not wait.in_deployment
        self.known_python = known_python(action, task_vars)

    def __call__(self, probe: Probe) -> ProbeResult:
        if probe.reset_connection:
            self.reset_connection()
        elif self.usable and self.bundle is None and self.known_python:
            self.install(self.known_python)
        # after a lost connection (the host may have rebooted, its copy gone) the first look is the module's
        if not self.usable or self.bundle is None or (probe.pinning and probe.reset_connection):
            result = self.run_module(probe)
            if self.usable and self.bundle is None and result.get("python"):
                self.install(str(t.cast(t.Mapping[str, t.Any], result)["python"]))
            return result
        return self.run_fast(probe)

    def install(self, python: str) -> None:
        """Copy the probe's code to a directory of its own under the remote temporary directory."""
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
            self.action._transfer_data(bundle, probe_bundle())
        except (AnsibleError, OSError) as exc:
            display.vvv(f"wait_ready: looks stay module runs ({exc})", host=self.wait.settings.host)
            self.usable = False
            return
        self.python, self.bundle = python, bundle

    def run_fast(self, probe: Probe) -> ProbeResult:
        cmd = " ".join(shlex.quote(word) for word in (str(self.python), "-c", BOOT, str(self.bundle)))
        try:
            ran = self.action._low_level_execute_command(cmd, sudoable=False, in_data=json.dumps(self.module_args(probe)))
        except AnsibleConnectionFailure as exc:
            raise ConnectionLost(str(exc)) from None
        try:
            result = json.loads(ran.get("stdout") or "")
        except ValueError:
            display.vvv(
                f"wait_ready: the probe did not run (rc={ran.get('rc')}: {str(ran.get('stderr'))[-300:]}); looks are module runs again",
                host=self.wait.settings.host,
            )
            self.usable = False
            return self.run_module(probe)
        result = remove_values(result, set(self.args.get("redact") or []))
        if result.get("failed"):
            raise ProbeFailed(str(result.get("msg") or "failed without a message"))
        return t.cast(ProbeResult, result)

    def cleanup(self) -> None:
        if self.directory is None:
            return
        try:
            self.action._low_level_execute_command(f"rm -rf {shlex.quote(self.directory)}", sudoable=False)
        except AnsibleError as exc:
            display.vvv(f"wait_ready: could not remove {self.directory}: {exc}", host=self.wait.settings.host)
        self.directory = None


class ActionModule(ActionBase):
    """Waits for an inference server's unit to become ready, with progress and fail-fast; see the module docs."""

    TRANSFERS_FILES = False
    _requires_connection = True
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def run(self, tmp: t.Any = None, task_vars: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        problems = wait_option_problems(args)
        if problems:
            result.update(failed=True, reason="invalid_options", msg="; ".join(problems))
            return result
        # checked before the first probe, so that a bad rule fails at once; once per run for the same rules
        rule_problems = rule_problems_once(args["engine"], args["extra_rules"], args["disabled_rules"])
        if rule_problems:
            result.update(failed=True, reason="invalid_rules", msg=rule_problems[0])
            return result
        if self._task.check_mode:
            result.update(changed=False, skipped=True, msg="check mode: not waiting")
            return result
        host = str(task_vars.get("inventory_hostname", "host"))
        wait = Wait(Settings.from_args(args, host), time.monotonic())
        channel = None
        if wait.in_deployment:
            try:
                channel = FileChannel(channel_directory(C.DEFAULT_LOCAL_TMP, args["channel"]), host, wait.settings.peers)
            except ChannelError as exc:
                result.update(failed=True, reason="invalid_options", msg=str(exc))
                return result
        transport = FastTransport(self, wait, args, task_vars)
        try:
            result.update(run_wait(wait, transport, time.monotonic, time.sleep, display.display, channel))
        except BaseException as exc:
            if channel is not None and wait.outcome is None:
                # the other nodes must not wait for a node whose wait broke down
                channel.publish(
                    {"host": host, "rank": wait.settings.node_rank, "state": "failed", "reason": "probe_failed", "msg": f"the wait broke down: {exc}"}
                )
            raise
        finally:
            transport.cleanup()
        result["ended_at"] = round(time.time(), 3)
        return result
