# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engines' graceful shutdown against systemd's stop timeout.

Since vLLM 0.18, ``--shutdown-timeout N`` makes SIGTERM stop taking new requests and let the running
ones finish for up to N seconds (default 0: they are aborted at once). systemd sends SIGKILL when the
unit has not stopped within ``TimeoutStopSec``: a stop timeout shorter than the drain (and the
engine's teardown after it) kills the drain half-way, and with it the requests it was finishing.

SGLang drains on SIGTERM with no bound of its own: its ``sigterm_watchdog`` answers health 503 and
waits until its running requests are done (no flag bounds it; ``SGL_FORCE_SHUTDOWN`` exits at once).
``TimeoutStopSec`` is then the only limit: when no drain precedes the stop (no load URL to watch),
the stop itself is the drain, and a request still running when systemd kills the unit is lost.
Standard library only, no Ansible imports.
"""

from __future__ import annotations

import re
import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils import _engines

# what systemctl show is asked for
PROPERTIES = ("ExecStart", "TimeoutStopUSec")
# seconds after the drain in which an engine's process frees its device before it is killed: the longest
# of the drivers' (``teardown_seconds``)
TEARDOWN_SECONDS = max(driver.teardown_seconds for driver in _engines.DRIVERS.values())
_ARGV = re.compile(r"argv\[\]=(.*?)(?: ; \w+=|\s*\}|$)")
_SPAN = re.compile(r"(\d+(?:\.\d+)?)\s*(us|ms|s|min|h|d|w|M|y)?(?=\s|$)")
_UNIT_SECONDS = {"us": 1e-6, "ms": 1e-3, "s": 1, None: 1, "min": 60, "h": 3600, "d": 86400, "w": 604800, "M": 2629800, "y": 31557600}


def show_values(text: str) -> dict[str, str]:
    """``systemctl show -p ...`` output: one ``Key=value`` a line (the first of a repeated key kept)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, equals, value = line.partition("=")
        if equals:
            values.setdefault(key.strip(), value.strip())
    return values


def shutdown_timeout(exec_start: str, engine: str | None = None) -> int | None:
    """The seconds of the engine's drain flag (vLLM's ``--shutdown-timeout``; any driver's when the engine
    is not known) in ExecStart's command line (systemctl show's ``argv[]=`` field, or a plain command
    line), None when it is not given."""
    found = _drain_flag(exec_start, engine)
    return None if found is None else found[1]


def _drain_flag(exec_start: str, engine: str | None) -> tuple[_engines.EngineDriver, int] | None:
    """The driver whose drain flag the command line gives, and its seconds."""
    argv = _ARGV.findall(exec_start) or [exec_start]
    for command in argv:
        for driver in _flag_drivers(engine):
            found = t.cast("re.Pattern[str]", driver.drain_flag).search(command)
            if found:
                return driver, int(found.group(1))
    return None


def _flag_drivers(engine: str | None) -> list[_engines.EngineDriver]:
    """The drivers whose drain a flag of the command line bounds: the engine's, or every such driver."""
    drivers = [_engines.get(engine)] if engine in _engines.DRIVERS else _engines.DRIVERS.values()
    return [driver for driver in drivers if driver.stop_drain == "flag" and driver.drain_flag is not None]


def timespan_seconds(text: str) -> float | None:
    """A systemd time span in seconds (``1min 30s``, ``90``, ``500ms``); None for ``infinity``, empty
    or text that is not a time span."""
    text = text.strip()
    if not text or text == "infinity":
        return None
    total, position = 0.0, 0
    for match in _SPAN.finditer(text):
        if text[position : match.start()].strip():
            return None
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    return total if position and not text[position:].strip() else None


def engine_of_command(exec_start: str) -> str | None:
    """The engine whose server ExecStart's command line runs, or None when it names none."""
    for driver in _engines.DRIVERS.values():
        if driver.command_pattern is not None and driver.command_pattern.search(exec_start):
            return driver.name
    return None


def graceful_shutdown(values: t.Mapping[str, str], unit: str, engine: str | None = None, drain_before_stop: bool | None = None) -> dict[str, t.Any]:
    """What the unit's stop does to the engine's drain: ``engine`` (given, or read from ExecStart),
    ``shutdown_timeout`` (vLLM's; None: no drain asked for), ``stop_timeout`` (seconds, None: systemd
    waits without end), ``cut_short`` and a ``warning``; for an engine that drains without a bound of
    its own (SGLang), ``sglang_drain_limit``: the seconds it may drain on SIGTERM before systemd kills
    it (None: no limit), with a warning that says so when ``drain_before_stop`` is false (no load URL:
    the stop itself is the drain)."""
    exec_start = values.get("ExecStart", "")
    if engine not in _engines.DRIVERS:
        engine = engine_of_command(exec_start)
    stop = timespan_seconds(values.get("TimeoutStopUSec", ""))
    if engine is not None and _engines.get(engine).stop_drain == "unbounded":
        return _unbounded_stop(_engines.get(engine), stop, unit, drain_before_stop, known=bool(values.get("TimeoutStopUSec")))
    found = _flag_bounded_stop(_drain_flag(exec_start, engine), stop, unit)
    return {"engine": engine, **found}


def _unbounded_stop(driver: _engines.EngineDriver, stop: float | None, unit: str, drain_before_stop: bool | None, known: bool) -> dict[str, t.Any]:
    warning = None
    if drain_before_stop is False and known:
        limit = "no limit: systemd waits as long as a request runs (TimeoutStopSec=infinity)" if stop is None else f"{stop:g} s (TimeoutStopSec)"
        warning = (
            f"{unit}: no drain precedes the stop (no load URL), and {driver.drain_words};"
            f" it may drain for {limit}, then systemd kills it and the requests still running are lost."
            " Set a load URL to drain before the stop, or TimeoutStopSec to the longest request you will wait for, in a drop-in."
        )
    return {
        "engine": driver.name,
        "shutdown_timeout": None,
        "stop_timeout": stop,
        "cut_short": False,
        "sglang_drain_limit": stop,
        "drain_before_stop": drain_before_stop,
        "warning": warning,
    }


def _flag_bounded_stop(flag: tuple[_engines.EngineDriver, int] | None, stop: float | None, unit: str) -> dict[str, t.Any]:
    driver, drain = flag if flag is not None else (None, None)
    needed = None if not drain or driver is None else drain + driver.teardown_seconds
    cut_short = needed is not None and stop is not None and stop < needed
    warning = None
    if cut_short and driver is not None:
        teardown = driver.teardown_seconds
        warning = (
            f"{unit}: {driver.drain_words} for up to {drain} s on a stop ({driver.drain_flag_name} {drain}), but systemd kills"
            f" the unit after TimeoutStopSec={stop:g}s: the drain would be cut short and its requests lost. Set TimeoutStopSec"
            f" to at least {needed} s (the drain plus {teardown} s to stop the engine), in a drop-in: [Service] TimeoutStopSec={needed}"
        )
    return {"shutdown_timeout": drain, "stop_timeout": stop, "cut_short": cut_short, "warning": warning}
