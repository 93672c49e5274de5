# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The inference engines the collection knows, one driver file each.

Private to the collection; may change at any time. Standard library only, no Ansible imports (runs
on the managed host).

Everything that differs between engines lives in its driver (``_engines/<name>.py``): its rule pack
and what it changes in the common rules, the prefixes its logger writes, the server figures it
exports and logs, where it publishes its load, its version and timing lines, its defaults (port,
paths, unit), how it drains on a stop, whether its health endpoint generates. The rest of the
collection asks a driver and never branches on an engine's name. Adding an engine is a driver file,
its rule pack in ``_rule_packs`` and its tests, and one line in ``DRIVERS`` below.

Ansible's documentation is static YAML, so the engine choices of the modules' and filters'
DOCUMENTATION, the doc fragments and ``specs/options.yml`` (the roles' argument specs) are written
out there; their argument specs take them from ``ENGINE_NAMES``, and a unit test
(``tests/unit/engines/test_documented_engines.py``) fails until every document lists the drivers'
names. So are the serving watch's engine table (an Event-Driven Ansible source, run by file path
outside the collection's imports) and the vLLM playbooks' defaults, each checked against the
drivers by that test.

A driver added at run time (``register``, as the tests' own engine is) is asked like the others.
"""

from __future__ import annotations

import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils._engines import sglang, vllm
from ansible_collections.inferops.runbooks.plugins.module_utils._engines._driver import DecodeLog, EngineDriver, LinePrefix, LoadSource

__all__ = [
    "AUTO",
    "DRIVERS",
    "ENGINE_NAMES",
    "DecodeLog",
    "EngineDriver",
    "LinePrefix",
    "LoadSource",
    "drivers_for",
    "engine_names",
    "get",
    "on_change",
    "register",
    "unregister",
]

DRIVERS: t.Dict[str, EngineDriver] = {driver.name: driver for driver in (sglang.DRIVER, vllm.DRIVER)}
# the journal's engine is not known: every driver's rules and figures apply
AUTO = "auto"
# the engine choices of the argument specs (``engine_names()`` also holds drivers registered since)
ENGINE_NAMES: t.Tuple[str, ...] = (AUTO, *DRIVERS)
# what is called after a driver was registered or unregistered: the tables made from the drivers
_LISTENERS: t.List[t.Callable[[], None]] = []


def engine_names() -> t.Tuple[str, ...]:
    """``auto`` and the name of every driver."""
    return (AUTO, *DRIVERS)


def register(driver: EngineDriver) -> None:
    """Add (or replace) an engine's driver."""
    DRIVERS[driver.name] = driver
    _changed()


def unregister(name: str) -> None:
    """Remove an engine's driver."""
    del DRIVERS[name]
    _changed()


def on_change(listener: t.Callable[[], None]) -> None:
    """Call ``listener`` now and after every change of ``DRIVERS``: how a table made once from the drivers
    (the line prefixes) follows them."""
    _LISTENERS.append(listener)
    listener()


def _changed() -> None:
    for listener in _LISTENERS:
        listener()


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
