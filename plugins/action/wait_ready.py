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

import time
import typing as t

from ansible import constants as C
from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.inferops.runbooks.plugins.module_utils._types import ProbeResult
from ansible_collections.inferops.runbooks.plugins.plugin_utils._channel import ChannelError, FileChannel, channel_directory
from ansible_collections.inferops.runbooks.plugins.plugin_utils._hostcode import PROBE_ENTRIES, HostCode, known_python, usable
from ansible_collections.inferops.runbooks.plugins.plugin_utils._once import rule_problems_once
from ansible_collections.inferops.runbooks.plugins.plugin_utils._options import wait_argument_spec, wait_option_problems
from ansible_collections.inferops.runbooks.plugins.plugin_utils._redact import hidden
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
            "lease_run_id": args.get("lease_run_id"),
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


class FastTransport(Transport):
    """Transport whose looks after the first run as a plain Python process on the managed host: the
    probe's code (stdlib only) comes with the first of them and stays there for the wait, so that a look
    pays neither AnsiballZ's payload nor compiling it again (Python keeps the bytecode). The first look too when the host's
    Python is known; otherwise the first look, and every look after the fast way failed to set up or
    to run, is the service_probe module."""

    def __init__(self, action: ActionModule, wait: Wait, args: t.Mapping[str, t.Any], task_vars: dict[str, t.Any]) -> None:
        super().__init__(action, wait, args, task_vars)
        self.code = HostCode(action, "wait_ready", PROBE_ENTRIES)
        # a node of a deployment keeps the module's looks: the plain process's set-up (unpacking the code,
        # then compiling it in the first look) delays that node's first sight of its journal, and the
        # node that stalled first, the deployment's root cause, is named by when each node saw its last progress
        self.usable = usable(action) and not wait.in_deployment
        self.known_python = known_python(action, task_vars)

    def __call__(self, probe: Probe) -> ProbeResult:
        if probe.reset_connection:
            self.reset_connection()
        elif self.usable and not self.code.installed and self.known_python:
            self.usable = self.code.install(self.known_python)
        # after a lost connection (the host may have rebooted, its copy gone) the first look is the module's
        if not self.usable or not self.code.installed or (probe.pinning and probe.reset_connection):
            result = self.run_module(probe)
            if self.usable and not self.code.installed and result.get("python"):
                self.usable = self.code.install(str(t.cast(t.Mapping[str, t.Any], result)["python"]))
            return result
        return self.run_fast(probe)

    def run_fast(self, probe: Probe) -> ProbeResult:
        try:
            result = self.code.run("_probe", self.module_args(probe))
        except AnsibleConnectionFailure as exc:
            raise ConnectionLost(str(exc)) from None
        if result is None:
            self.usable = False
            return self.run_module(probe)
        result = hidden(result, self.args.get("redact") or [])
        if result.get("failed"):
            raise ProbeFailed(str(result.get("msg") or "failed without a message"))
        return t.cast(ProbeResult, result)

    def cleanup(self) -> None:
        self.code.cleanup()


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
            result.update(changed=False, waited=False, msg="check mode: not waiting")
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
        if wait.lease_renewed_at is not None:
            # on the wall clock: the phase after the wait does not renew the heartbeat again at once
            result["lease_renewed_at"] = round(time.time() - (time.monotonic() - wait.lease_renewed_at), 3)
        return result
