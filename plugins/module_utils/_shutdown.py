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
# seconds after the drain in which vLLM's engine process frees its device before it is killed: the
# longest window its source gives it (vllm/v1/engine/utils.py, ROCM_ENGINE_PROCESS_SHUTDOWN_TIMEOUT_S, 0.32.0)
TEARDOWN_SECONDS = 15
_FLAG = re.compile(r"(?:^|\s)--shutdown[-_]timeout(?:=|\s+)(\d+)(?=\s|;|$)")
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


def shutdown_timeout(exec_start: str) -> int | None:
    """The seconds of ``--shutdown-timeout`` in ExecStart's command line (systemctl show's ``argv[]=``
    field, or a plain command line), None when it is not given."""
    argv = _ARGV.findall(exec_start) or [exec_start]
    for command in argv:
        found = _FLAG.search(command)
        if found:
            return int(found.group(1))
    return None


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
        return _unbounded_stop(engine, stop, unit, drain_before_stop, known=bool(values.get("TimeoutStopUSec")))
    found = _vllm_stop(shutdown_timeout(exec_start), stop, unit)
    return {"engine": engine, **found}


def _unbounded_stop(engine: str, stop: float | None, unit: str, drain_before_stop: bool | None, known: bool) -> dict[str, t.Any]:
    warning = None
    if drain_before_stop is False and known:
        limit = "no limit: systemd waits as long as a request runs (TimeoutStopSec=infinity)" if stop is None else f"{stop:g} s (TimeoutStopSec)"
        warning = (
            f"{unit}: no drain precedes the stop (no load URL), and SGLang drains its running requests on SIGTERM with no bound of its own"
            f" (sigterm_watchdog); it may drain for {limit}, then systemd kills it and the requests still running are lost."
            " Set a load URL to drain before the stop, or TimeoutStopSec to the longest request you will wait for, in a drop-in."
        )
    return {
        "engine": engine,
        "shutdown_timeout": None,
        "stop_timeout": stop,
        "cut_short": False,
        "sglang_drain_limit": stop,
        "drain_before_stop": drain_before_stop,
        "warning": warning,
    }


def _vllm_stop(drain: int | None, stop: float | None, unit: str) -> dict[str, t.Any]:
    needed = None if not drain else drain + TEARDOWN_SECONDS
    cut_short = needed is not None and stop is not None and stop < needed
    warning = None
    if cut_short:
        warning = (
            f"{unit}: vLLM drains running requests for up to {drain} s on a stop (--shutdown-timeout {drain}), but systemd kills"
            f" the unit after TimeoutStopSec={stop:g}s: the drain would be cut short and its requests lost. Set TimeoutStopSec"
            f" to at least {needed} s (the drain plus {TEARDOWN_SECONDS} s to stop the engine), in a drop-in: [Service] TimeoutStopSec={needed}"
        )
    return {"shutdown_timeout": drain, "stop_timeout": stop, "cut_short": cut_short, "warning": warning}
