# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host's start history: a start that ended added to it, and what its good starts teach (stall limits, ETA, new lines).

Private to the collection; may change at any time. Host side: standard library only. The module
start_history is a shell over ``CALL``; a phase runs ``cli`` as a plain process (``_hostcall``).
"""

from __future__ import annotations

import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils import _engines, _history, _run_record
from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import RuleError, load_rules
from ansible_collections.inferops.runbooks.plugins.module_utils._hostcall import Call, CallFailed, Host, Params, Result, serve
from ansible_collections.inferops.runbooks.plugins.module_utils._option_specs import DEFAULT_ENGINE, DEFAULT_UNIT
from ansible_collections.inferops.runbooks.plugins.module_utils._systemd import JournalReader, SystemdError, is_invocation_id, journal_command, unit_name

START_HISTORY_SPEC: dict[str, t.Any] = {
    "unit": {"type": "str", "default": DEFAULT_UNIT},
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
    "engine": {"type": "str", "default": DEFAULT_ENGINE, "choices": list(_engines.ENGINE_NAMES)},
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


CALL = Call(START_HISTORY_SPEC, {"invocation_id": "outcome"}, start_history)


def cli() -> None:
    serve(CALL)
