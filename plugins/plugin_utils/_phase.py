# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every phase of a rollout does around its decisions: run the collection's modules on the
managed host (as a plain process where it can, ``_hostcode``; otherwise ``_execute_module``, as
ansible-core's ``reboot`` action does) and commands over the connection, name each step, keep the
first failed step for the report, and read the role's variables as the role sees them.

Private to the collection; may change at any time. Controller side.
"""

from __future__ import annotations

import contextlib
import shlex
import time
import typing as t

from ansible.errors import AnsibleError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.inferops.runbooks.plugins.module_utils import _hostcall
from ansible_collections.inferops.runbooks.plugins.plugin_utils._hostcode import CALL_ENTRIES, HOST_CALLS, HostCode, known_python, usable
from ansible_collections.inferops.runbooks.plugins.plugin_utils._plain import plain
from ansible_collections.inferops.runbooks.plugins.plugin_utils._redact import hidden

Result = dict[str, t.Any]


COLLECTION = "inferops.runbooks."


def checked_params(call: _hostcall.Call, args: t.Mapping[str, t.Any]) -> tuple[dict[str, t.Any], set[str]] | None:
    """The call's parameters, with their defaults, as AnsibleModule would make them on the host, and
    the values its spec keeps out of the output; None when they are wrong (the module then says so)
    or hold a path that only the host could expand (relative, ``~``, ``$VAR``)."""
    paths = [name for name, option in call.spec.items() if "path" in (option.get("type"), option.get("elements"))]
    spec = {name: {**option, **{key: "str" for key in ("type", "elements") if option.get(key) == "path"}} for name, option in call.spec.items()}
    validated = ArgumentSpecValidator(spec, required_by=call.required_by).validate(dict(args))
    if validated.error_messages:
        return None
    params = dict(validated.validated_parameters)
    for name in paths:
        found = params.get(name)
        values: list[t.Any] = found if isinstance(found, list) else [found]
        if any(isinstance(value, str) and (not value.startswith("/") or "$" in value) for value in values):
            return None
    return params, set(validated._no_log_values)


class StepFailed(Exception):
    """A step of a phase failed: its stage, its name and its result, as a rescue would keep them."""

    def __init__(self, stage: str, step: str, result: t.Mapping[str, t.Any]) -> None:
        super().__init__(f"{step}: {result.get('msg', 'failed')}")
        self.failure: dict[str, t.Any] = {"stage": stage, "step": step, "result": dict(result)}


class Steps:
    """Runs a phase's steps through one action plugin and keeps what each did (shown with ``-v``)."""

    def __init__(self, action: t.Any, task_vars: dict[str, t.Any]) -> None:
        self.action = action
        self.task_vars = task_vars
        self.done: list[dict[str, t.Any]] = []
        # the modules' warnings, passed on to the phase's result for Ansible to show
        self.warnings: list[str] = []
        # the host's Python, when a module's run discovered it: passed on as a fact (as a module task
        # does), so that the later phases know it before they run anything on the host
        self.discovered: dict[str, t.Any] = {}
        # the collection's code on the host for plain calls: not tried yet (None), not usable (False)
        self.code: HostCode | t.Literal[False] | None = None

    def module(
        self,
        stage: str,
        step: str,
        name: str,
        args: t.Mapping[str, t.Any],
        *,
        may_fail: bool = False,
        always: bool = False,
        secret: bool = False,
        shown: t.Callable[[Result], t.Mapping[str, t.Any]] | None = None,
    ) -> Result:
        """Runs module ``name`` on the host; StepFailed unless it passed or ``may_fail``. With
        ``always`` it runs in check mode as well (a read that the module cannot do in check mode);
        ``secret`` when its arguments carry a secret (its output is censored at -vvv, as no_log does);
        ``shown`` picks what ``-v`` shows of its result."""
        started = time.monotonic()
        with self.outside_check_mode(always), self.censored(secret):
            result: Result = self.plain_call(name, args) or self.action._execute_module(module_name=name, module_args=dict(args), task_vars=self.task_vars)
        self.note(step, result, time.monotonic() - started)
        facts = result.get("ansible_facts")
        if isinstance(facts, t.Mapping) and facts.get("discovered_interpreter_python"):
            self.discovered = {"discovered_interpreter_python": facts["discovered_interpreter_python"]}
        self.warnings.extend(str(warning) for warning in result.get("warnings") or [] if str(warning) not in self.warnings)
        if shown is not None and not result.get("failed"):
            self.done[-1]["saw"] = dict(shown(result))
        if (result.get("failed") or result.get("unreachable")) and not may_fail:
            raise StepFailed(stage, step, result)
        return result

    def plain_call(self, name: str, args: t.Mapping[str, t.Any]) -> Result | None:
        """The collection's module ``name`` run as a plain process over the connection (its arguments
        checked here against its own spec, ``_hostcode.HOST_CALLS``); None when it cannot be, or when it
        did not run: then the module runs, and says what is wrong with its arguments."""
        call = HOST_CALLS.get(name.removeprefix(COLLECTION)) if name.startswith(COLLECTION) else None
        if call is None or self.code is False:
            return None
        params = checked_params(call, args)
        if params is None:
            return None
        if self.code is None:
            python = self.discovered.get("discovered_interpreter_python") or known_python(self.action, self.task_vars)
            if python is None:
                return None  # the module runs, and discovers it
            code = HostCode(self.action, name, CALL_ENTRIES, carried=True)
            self.code = code if usable(self.action) and code.install(python) else False
            if self.code is False:
                return None
        request = {"params": params[0], "check_mode": bool(self.action._task.check_mode)}
        result = self.code.run(f"_hostcall.{name.removeprefix(COLLECTION)}", request)
        if result is None:
            self.code = False
            return None
        return t.cast(Result, hidden(result, params[1]))

    def close(self) -> None:
        """Removes the collection's code from the host, when a plain call copied it there."""
        if self.code:
            self.code.cleanup()

    def command(self, stage: str, step: str, argv: t.Sequence[str], msg: str = "") -> Result:
        """Runs a command on the host over the connection, as ansible-core's ``reboot`` action runs its
        own (no module to build and send); StepFailed when it exits non-zero, with ``msg`` and what it
        printed. Never in check mode: the phases that call it return their plan before."""
        started = time.monotonic()
        ran = self.action._low_level_execute_command(" ".join(shlex.quote(str(word)) for word in argv), sudoable=True)
        result: Result = {"rc": ran.get("rc"), "stdout": str(ran.get("stdout") or ""), "stderr": str(ran.get("stderr") or "")}
        if ran.get("rc") != 0:
            printed = (result["stderr"] or result["stdout"]).strip()
            result.update(failed=True, msg=" ".join(part for part in (msg or f"{argv[0]} exited with {ran.get('rc')}.", printed) if part))
        self.note(step, result, time.monotonic() - started)
        if result.get("failed"):
            raise StepFailed(stage, step, result)
        return result

    def note(self, step: str, result: t.Mapping[str, t.Any], seconds: float) -> None:
        outcome = "failed" if result.get("failed") else "skipped" if result.get("skipped") else "ok"
        # "ended" in epoch seconds, the clock of the hosts' journals: when each step of the outage happened
        self.done.append({"step": step, "outcome": outcome, "seconds": round(seconds, 2), "ended": round(time.time(), 3)})

    @contextlib.contextmanager
    def outside_check_mode(self, always: bool) -> t.Iterator[None]:
        task = self.action._task
        saved = task.check_mode
        if always:
            task.check_mode = False
        try:
            yield
        finally:
            task.check_mode = saved

    @contextlib.contextmanager
    def censored(self, secret: bool) -> t.Iterator[None]:
        # the task's flag censors the module's own logging, the connection's play context what the
        # connection prints at -vvv (the module's whole output)
        holders = [self.action._task, self.action._play_context, getattr(self.action._connection, "_play_context", None)]
        holders = [holder for holder in holders if holder is not None]
        saved = [holder.no_log for holder in holders]
        if secret:
            for holder in holders:
                holder.no_log = True
        try:
            yield
        finally:
            for holder, value in zip(holders, saved):
                holder.no_log = value

    def variable(self, name: str, default: t.Any = None) -> t.Any:
        """A role variable templated as the role's tasks would see it; ``default`` when unset."""
        if name not in self.task_vars:
            return default
        try:
            return plain(self.action._templar.template(self.task_vars[name]))
        except AnsibleError:
            return default

    def run_action(self, name: str, args: t.Mapping[str, t.Any]) -> Result:
        """Runs another action plugin (of the collection, or ``copy``) with ``args``, as ansible-core's
        ``template`` action runs ``copy``."""
        task = self.action._task.copy()
        task.args = dict(args)
        other = self.action._shared_loader_obj.action_loader.get(
            name,
            task=task,
            connection=self.action._connection,
            play_context=self.action._play_context,
            loader=self.action._loader,
            templar=self.action._templar,
            shared_loader_obj=self.action._shared_loader_obj,
        )
        started = time.monotonic()
        if getattr(other, "TRANSFERS_FILES", False) and self.action._connection._shell.tmpdir is None:
            # made by this phase, the remote temporary directory is kept for the phase's other transfers
            # (the action that makes it removes it) and removed once, with the phase's end
            self.action._make_tmp_path()
        result: Result = other.run(task_vars=self.task_vars)
        self.note(name, result, time.monotonic() - started)
        return result


class PhaseBody:
    """The body of a phase of one host, apart from its action plugin: its steps taken through ``steps``
    (a unit test gives a stand-in that answers from a script), with the task's variables and check mode."""

    def __init__(self, steps: Steps, task_vars: dict[str, t.Any], check_mode: bool) -> None:
        self.steps = steps
        self.task_vars = task_vars
        self.check_mode = check_mode


def secrets(api_key: t.Any, redact: t.Any) -> list[str]:
    """The texts taken out of every result on the target: the API key, and the user's list of
    secrets (a list, or comma-separated text from an AWX survey)."""
    found = [str(api_key)] if api_key not in (None, "") else []
    if isinstance(redact, str):
        found += [item.strip() for item in redact.split(",") if item.strip()]
    elif isinstance(redact, (list, tuple)):
        found += [str(item) for item in redact if item not in (None, "")]
    return found


def bearer(api_key: t.Any) -> dict[str, str]:
    """The request headers that carry an API key; none without one."""
    return {"Authorization": f"Bearer {api_key}"} if api_key not in (None, "") else {}
