# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The unit's state and its stop against vLLM's drain, as the phases read them before a restart or a check.

Private to the collection; may change at any time. Host side: standard library only. The module
unit_info is a shell over ``CALL``; a phase runs ``cli`` as a plain process (``_hostcall``).
"""

from __future__ import annotations

from ansible_collections.inferops.runbooks.plugins.module_utils import _engines
from ansible_collections.inferops.runbooks.plugins.module_utils._hostcall import Call, CallFailed, Host, Params, Result, serve
from ansible_collections.inferops.runbooks.plugins.module_utils._option_specs import UNIT_OPTIONS, merged
from ansible_collections.inferops.runbooks.plugins.module_utils._shutdown import PROPERTIES, graceful_shutdown, show_values
from ansible_collections.inferops.runbooks.plugins.module_utils._systemd import SystemdError, unit_name_problem, unit_state

UNIT_INFO_SPEC = merged(
    UNIT_OPTIONS,
    {
        # the engine the unit runs (auto: read from ExecStart), and whether the rollout drains before the stop
        "engine": {"type": "str", "default": _engines.AUTO, "choices": list(_engines.ENGINE_NAMES)},
        "drain_before_stop": {"type": "bool"},
    },
)


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
    stop = _stop_and_drain(host, systemctl, unit, params.get("engine"), params.get("drain_before_stop"))
    return {"changed": False, "unit": state, "graceful_shutdown": stop}


def _stop_and_drain(host: Host, systemctl: str, unit: str, engine: str | None, drain_before_stop: bool | None) -> dict[str, object]:
    """The engine's drain on a stop against the unit's stop timeout; a warning when the stop would cut
    vLLM's short, or when SGLang's is bounded by systemd alone (no drain before the stop)."""
    code, out, _err = host.run([systemctl, "show", unit, "--no-pager", *(f"--property={name}" for name in PROPERTIES)])
    found = graceful_shutdown(show_values(out) if code == 0 else {}, unit, engine, drain_before_stop)
    if found["warning"]:
        host.warn(str(found["warning"]))
    return found


CALL = Call(UNIT_INFO_SPEC, {}, unit_info)


def cli() -> None:
    serve(CALL)
