# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The inference engines the collection knows, one driver file each.

Private to the collection; may change at any time. Standard library only, no Ansible imports (runs
on the managed host).

Everything that differs between engines lives in its driver (``_engines/<name>.py``): its rule pack
and what it changes in the common rules, the server figures it exports and logs, its version and
timing lines, whether its health endpoint generates. The rest of the collection asks a driver and
never branches on an engine's name. Adding an engine is a driver file, its rule pack in
``_rule_packs`` and its tests, and one line in ``DRIVERS`` below.
"""

from __future__ import annotations

import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils._engines import sglang, vllm
from ansible_collections.inferops.runbooks.plugins.module_utils._engines._driver import DecodeLog, EngineDriver, LoadSource

__all__ = ["AUTO", "DRIVERS", "ENGINE_NAMES", "DecodeLog", "EngineDriver", "LoadSource", "drivers_for", "get"]

DRIVERS: t.Dict[str, EngineDriver] = {driver.name: driver for driver in (sglang.DRIVER, vllm.DRIVER)}
# the journal's engine is not known: every driver's rules and figures apply
AUTO = "auto"
ENGINE_NAMES: t.Tuple[str, ...] = (AUTO, *DRIVERS)


def get(name: str) -> EngineDriver:
    """The driver of engine ``name``; KeyError naming the engines known otherwise."""
    try:
        return DRIVERS[name]
    except (KeyError, TypeError):
        raise KeyError(f"engine {name!r} is not one of {', '.join(DRIVERS)}") from None


def drivers_for(name: str | None) -> t.Tuple[EngineDriver, ...]:
    """The drivers that apply to a journal of engine ``name``: that engine's, or every driver for
    ``auto`` (or no name)."""
    driver = DRIVERS.get(name or AUTO)
    if driver is not None:
        return (driver,)
    return tuple(DRIVERS.values())
