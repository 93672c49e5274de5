# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Host side: what the rollout's phases read and write on the managed host, as plain functions.

Private to the collection; may change at any time. Standard library only. The modules unit_info,
run_record, server_load and start_history are thin shells over these functions and their argument
specs (``CALLS``). A phase runs the same functions as one plain Python process over the connection
(``cli``, the options as JSON on stdin, validated on the controller against the same specs), so
that it builds and sends no module payload for them; the module is its way when that cannot be done.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils import _engines, _history, _load, _run_record
from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import RuleError, load_rules
from ansible_collections.inferops.runbooks.plugins.module_utils._options import UNIT_OPTIONS, merged
from ansible_collections.inferops.runbooks.plugins.module_utils._shutdown import PROPERTIES, graceful_shutdown, show_values
from ansible_collections.inferops.runbooks.plugins.module_utils._systemd import (
    JournalReader,
    SystemdError,
    is_invocation_id,
    journal_command,
    run_command,
    unit_name,
    unit_name_problem,
    unit_state,
)

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
        return run_command(argv)

    def bin_path(self, name: str) -> str:
        found = shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), *self.SEARCHED]))
        if not found:
            raise CallFailed(f"Failed to find required executable {name!r} in paths: {os.environ.get('PATH', '')}")
        return found

    def warn(self, text: str) -> None:
        self.warnings.append(text)


# -- unit_info --------------------------------------------------------------------------------------

UNIT_INFO_SPEC = merged(UNIT_OPTIONS)


def unit_info(params: Params, host: Host) -> Result:
    unit = params["unit"]
    problem = unit_name_problem(unit)
    if problem:
        raise CallFailed(f"unit {unit!r} {problem}")
    systemctl = host.bin_path("systemctl")
    try:
        state = unit_state(unit, host.run, systemctl)
    except SystemdError as exc:
        raise CallFailed(str(exc)) from None
    return {"changed": False, "unit": state, "graceful_shutdown": _stop_and_drain(host, systemctl, unit)}


def _stop_and_drain(host: Host, systemctl: str, unit: str) -> dict[str, object]:
    """vLLM's drain on a stop against the unit's stop timeout; a warning when the stop would cut it short."""
    code, out, _err = host.run([systemctl, "show", unit, "--no-pager", *(f"--property={name}" for name in PROPERTIES)])
    found = graceful_shutdown(show_values(out) if code == 0 else {}, unit)
    if found["warning"]:
        host.warn(str(found["warning"]))
    return found


# -- run_record -------------------------------------------------------------------------------------

RUN_RECORD_SPEC: dict[str, t.Any] = {
    "unit": {"type": "str", "required": True},
    "state_dir": {"type": "path", "default": _run_record.STATE_DIR},
    "step": {"type": "str", "choices": list(_run_record.STEPS)},
    "run_id": {"type": "str"},
    "updates": {"type": "dict", "default": {}},
    "files": {"type": "list", "elements": "path", "default": []},
}


def run_record(params: Params, host: Host) -> Result:
    try:
        path = _run_record.record_path(params["unit"], params["state_dir"])
    except _run_record.RecordError as exc:
        raise CallFailed(str(exc)) from None
    record, problem = _run_record.read(path, params["unit"])
    recorded = [entry["path"] for entry in ((record or {}).get("change") or {}).get("files") or []]
    host_files = {
        name: {"sha256": _run_record.sha256_of(name), "previous_sha256": _run_record.sha256_of(name + ".previous")} for name in [*params["files"], *recorded]
    }
    changed = False
    if params["step"]:
        try:
            advanced = _run_record.advance(record, params["unit"], params["run_id"], params["step"], params["updates"])
        except _run_record.RecordError as exc:
            raise CallFailed(f"run record of {params['unit']}: {exc}", path=path) from None
        record = advanced
        if not host.check_mode:
            try:
                _run_record.write(path, advanced)
            except OSError as exc:
                raise CallFailed(f"cannot write the run record {path}: {exc}", path=path) from None
        changed = True
    return {"changed": changed, "path": path, "record": record, "problem": problem, "host_files": host_files}


# -- server_load ------------------------------------------------------------------------------------

SERVER_LOAD_SPEC: dict[str, t.Any] = {
    "url": {"type": "str", "required": True},
    "engine": {"type": "str", "default": "sglang", "choices": list(_engines.ENGINE_NAMES)},
    "api_key": {"type": "str", "no_log": True},
    "timeout": {"type": "float", "default": 300},
    "interval": {"type": "float", "default": 5},
    "unknown_load": {"type": "str", "default": "wait", "choices": list(_load.UNKNOWN_LOAD)},
    "node_rank": {"type": "int", "default": 0},
    "validate_certs": {"type": "bool", "default": True},
}


def server_load(params: Params, host: Host) -> Result:
    del host
    if params["node_rank"] >= 1:
        return {"changed": False, "drain": _load.not_read_on_a_worker_node(params["url"], params["node_rank"])}
    try:
        drain = _load.wait_until_idle(
            params["url"],
            params["engine"],
            params["api_key"] or None,
            params["timeout"],
            params["interval"],
            _load.http_fetch(params["validate_certs"]),
            params["unknown_load"],
        )
    except _load.LoadError as exc:
        raise CallFailed(f"server_load: {exc}") from None
    return {"changed": False, "drain": drain}


# -- start_history ----------------------------------------------------------------------------------

START_HISTORY_SPEC: dict[str, t.Any] = {
    "unit": {"type": "str", "default": "sglang.service"},
    "state_dir": {"type": "path", "default": _run_record.STATE_DIR},
    "invocation_id": {"type": "str"},
    "outcome": {"type": "str", "choices": list(_history.OUTCOMES)},
    "reason": {"type": "str"},
    "waited": {"type": "float"},
    "size": {"type": "int", "default": _history.DEFAULT_SIZE},
    "min_good": {"type": "int", "default": _history.DEFAULT_MIN_GOOD},
    "stall_factor": {"type": "float", "default": _history.DEFAULT_STALL_FACTOR},
    "stall_floor": {"type": "float", "default": _history.DEFAULT_STALL_FLOOR},
    "slow_ratio": {"type": "float", "default": _history.DEFAULT_SLOW_RATIO},
    "fail_on_new": {"type": "bool", "default": False},
    "stall_limit": {"type": "float", "default": 900},
    "stall_limits": {"type": "dict", "default": {}},
    "engine": {"type": "str", "default": "sglang", "choices": list(_engines.ENGINE_NAMES)},
    "extra_rules": {"type": "list", "elements": "dict", "default": []},
    "disabled_rules": {"type": "list", "elements": "str", "default": []},
    "redact": {"type": "list", "elements": "str", "default": [], "no_log": True},
}


def start_history(params: Params, host: Host) -> Result:
    if params["size"] < 1 or params["min_good"] < 1:
        raise CallFailed(f"size and min_good must be at least 1, got {params['size']} and {params['min_good']}")
    invocation = (params["invocation_id"] or "").strip() or None
    if invocation is not None and not is_invocation_id(invocation):
        raise CallFailed(f"invocation_id must be 32 hexadecimal digits, got {invocation!r}")
    try:
        unit = unit_name(params["unit"])
        path = _history.history_path(unit, params["state_dir"])
        rules = load_rules(params["engine"], params["extra_rules"], params["disabled_rules"])
    except (RuleError, ValueError, _history.HistoryError) as exc:
        raise CallFailed(str(exc)) from None
    history, problem = _history.read(path, unit)
    systemctl = host.bin_path("systemctl")
    rc, out, err = host.run([systemctl, "show", "--no-pager", "-p", ",".join(_history.CONFIG_PROPERTIES), unit])
    if rc != 0:
        raise CallFailed(f"systemctl show {unit} failed (rc={rc}): {(err or out).strip()}")
    config = _history.config_of(out)
    entry: dict[str, t.Any] | None = None
    summary: dict[str, t.Any] = _history.summary(history, config, None, params["min_good"], params["slow_ratio"])
    added = False
    if invocation is not None:
        observer = _history.StartObserver(rules=rules, secrets=params["redact"])
        journalctl = host.bin_path("journalctl")
        try:
            for record in JournalReader(journal_command(unit, invocation, journalctl=journalctl)):
                observer.feed(record)
        except SystemdError as exc:
            raise CallFailed(str(exc), path=path) from None
        entry = observer.entry(params["outcome"], params["reason"], invocation, config, params["waited"])
        # compared with the history before it: a start is not new against itself
        summary = _history.summary(history, config, entry, params["min_good"], params["slow_ratio"])
        if params["fail_on_new"] and entry["outcome"] == "pass" and summary["new_unrecognized"]:
            entry.update(outcome="fail", reason="new_lines")
        updated, added = _history.append(history, unit, entry, params["size"])
        if added and not host.check_mode:
            try:
                _history.write(path, updated)
            except OSError as exc:
                raise CallFailed(f"cannot write the start history {path}: {exc}", path=path) from None
        history = updated
    good = _history.good_starts(history, config)
    limits = _history.stall_limits(
        good,
        explicit={phase: float(limit) for phase, limit in (params["stall_limits"] or {}).items()},
        default=params["stall_limit"],
        min_good=params["min_good"],
        factor=params["stall_factor"],
        floor=params["stall_floor"],
    )
    written = added and not host.check_mode
    return {
        "changed": written,
        "path": path,
        "problem": problem,
        "config": config,
        "added": written,
        "entry": entry,
        "starts": len((history or {}).get("starts") or []),
        "good_starts": [{"phases": start.get("phases") or {}, "total": start.get("total")} for start in good],
        "stall_limits": limits,
        "learned_stall_limits": _history.learned_limits(limits),
        "summary": summary,
    }


class Call(t.NamedTuple):
    spec: dict[str, t.Any]
    required_by: dict[str, str]
    run: t.Callable[[Params, Host], Result]


# by module name: the modules' argument specs (AnsibleModule's, and the controller's check for a plain run)
CALLS: dict[str, Call] = {
    "unit_info": Call(UNIT_INFO_SPEC, {}, unit_info),
    "run_record": Call(RUN_RECORD_SPEC, {"step": "run_id"}, run_record),
    "server_load": Call(SERVER_LOAD_SPEC, {}, server_load),
    "start_history": Call(START_HISTORY_SPEC, {"invocation_id": "outcome"}, start_history),
}


def run_module(module: t.Any, name: str) -> None:
    """A module's whole run: the call with the module's parameters, its result or its failure."""
    try:
        result = CALLS[name].run(module.params, ModuleHost(module))
    except CallFailed as exc:
        module.fail_json(msg=str(exc), **exc.extra)
    module.exit_json(**result)


def cli() -> None:
    """A call as a plain process: ``{"call", "params", "check_mode"}`` as JSON on stdin (the params
    validated by the controller), the result as JSON on stdout."""
    request = json.loads(sys.stdin.read() or "{}")
    host = PlainHost(bool(request.get("check_mode")))
    call = CALLS.get(str(request.get("call")))
    try:
        if call is None:
            raise CallFailed(f"no such call: {request.get('call')!r}")
        result = call.run(request.get("params") or {}, host)
    except CallFailed as exc:
        result = {"failed": True, "msg": str(exc), **exc.extra}
    if host.warnings:
        result["warnings"] = host.warnings
    sys.stdout.write(json.dumps(result))
