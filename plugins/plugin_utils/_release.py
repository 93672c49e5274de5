# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""After a stop, before a start: the unit's leftovers waited on and killed, its GPUs free
(inferops.runbooks.unit_leftovers on the host, ``release_outcome`` deciding).

Private to the collection; may change at any time. Controller side.
"""

from __future__ import annotations

import typing as t

from ansible.utils.display import Display

from ansible_collections.inferops.runbooks.plugins.plugin_utils._phase import StepFailed, Steps

display = Display()


# -- the decision -----------------------------------------------------------------------------------


def _named(found: t.Sequence[t.Mapping[str, t.Any]]) -> str:
    return ", ".join(f"{entry.get('pid')} ({entry.get('name')})" for entry in found)


def _holder(entry: t.Mapping[str, t.Any]) -> str:
    return f"{entry.get('pid')} ({entry.get('name')}) holds {entry.get('used_memory')} on GPU {entry.get('gpu_index')} ({entry.get('gpu_uuid')})"


def release_outcome(found: t.Mapping[str, t.Any], unit: str) -> dict[str, t.Any]:
    """Whether the next start may begin after the release ``found`` (the unit_leftovers call's
    ``leftovers``): ``ok``; ``msg``, the failure's words naming the processes; ``line``, the progress
    line when something was left (None when the stop left nothing)."""
    left, remaining = list(found.get("left") or []), list(found.get("remaining") or [])
    gpus = found.get("gpus") or {}
    holders = list(gpus.get("holders") or [])
    signals = list(found.get("signals") or [])
    line = None
    if left:
        sent = " then ".join(signals) or "no signal"
        line = f"{unit}: {len(left)} process(es) outlived the stop in {found.get('control_group')}: {_named(left)}; sent {sent} (systemctl kill)"
        line += f", {len(remaining)} still running" if remaining else ", none left"
    if remaining:
        msg = (
            f"{len(remaining)} process(es) of {unit} still run after its stop, its kill signal and SIGKILL: {_named(remaining)}"
            f" (control group {found.get('control_group')}); the next start is not begun."
        )
        return {"ok": False, "msg": msg, "line": line}
    if holders:
        msg = (
            f"The GPUs of {unit} are still held after its stop: {'; '.join(_holder(entry) for entry in holders)}"
            " (nvidia-smi --query-compute-apps); a new start would run out of GPU memory, so it is not begun."
        )
        return {"ok": False, "msg": msg, "line": line}
    return {"ok": True, "msg": "", "line": line}


def release_leftovers(steps: Steps, stage: str, prefix: str, options: t.Mapping[str, t.Any], host: str) -> dict[str, t.Any]:
    """What the stop left (the module's ``leftovers``), a progress line when something was left;
    StepFailed naming the processes when one still runs or holds the unit's GPUs."""
    unit = str(options["unit"])
    step = f"{prefix} | Wait until no process of the unit is left and its GPUs are free"
    read = steps.module(stage, step, "inferops.runbooks.unit_leftovers", {"unit": unit, "timeout": float(options["release_timeout"])})
    found = dict(read.get("leftovers") or {})
    outcome = release_outcome(found, unit)
    if outcome["line"]:
        display.display(f"{host}: {outcome['line']}")
    if not outcome["ok"]:
        failed = {"failed": True, "msg": outcome["msg"], "leftovers": found}
        raise StepFailed(stage, f"{prefix} | The start needs the unit's processes gone and its GPUs free", failed)
    return found
