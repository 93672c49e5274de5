# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""After a unit's stop: its processes waited on, then signalled (not in check mode), and who holds its GPUs.

Private to the collection; may change at any time. Host side: standard library only. The module
unit_leftovers is a shell over ``CALL``; a phase runs ``cli`` as a plain process (``_hostcall``).
"""

from __future__ import annotations

import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils import _leftovers
from ansible_collections.inferops.runbooks.plugins.module_utils._hostcall import Call, CallFailed, Host, Params, Result, serve
from ansible_collections.inferops.runbooks.plugins.module_utils._shutdown import show_values
from ansible_collections.inferops.runbooks.plugins.module_utils._systemd import unit_name_problem

UNIT_LEFTOVERS_SPEC: dict[str, t.Any] = {
    "unit": {"type": "str", "required": True},
    "timeout": {"type": "float", "default": 120},
    "gpu_wait": {"type": "float", "default": 10},
    "check_gpus": {"type": "bool", "default": True},
}


def unit_leftovers(params: Params, host: Host) -> Result:
    unit = params["unit"]
    problem = unit_name_problem(unit)
    if problem:
        raise CallFailed(f"unit {unit!r} {problem}")
    if params["timeout"] < 0 or params["gpu_wait"] < 0:
        raise CallFailed(f"unit_leftovers: timeout and gpu_wait must be 0 or more, got {params['timeout']} and {params['gpu_wait']}")
    systemctl = host.bin_path("systemctl")
    code, out, err = host.run([systemctl, "show", unit, "--no-pager", *(f"--property={name}" for name in _leftovers.SHOW_PROPERTIES)])
    if code != 0:
        raise CallFailed(f"systemctl show {unit} failed (rc={code}): {(err or out).strip()}")
    release = _leftovers.Release(unit, show_values(out), host.run, systemctl)
    if host.check_mode:
        found: dict[str, t.Any] = {"control_group": release.group, "left": _leftovers.processes(release.wait_empty(0)), "signals": [], "remaining": []}
    else:
        found = release.processes(params["timeout"])
    if params["check_gpus"]:
        found["gpus"] = release.gpus(_leftovers.find_program("nvidia-smi"), 0 if host.check_mode else params["gpu_wait"])
    else:
        found["gpus"] = {"checked": False, "why_not": "not asked"}
    return {"changed": bool(found["signals"]), "leftovers": found}


CALL = Call(UNIT_LEFTOVERS_SPEC, {}, unit_leftovers)


def cli() -> None:
    serve(CALL)
