# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vLLM's graceful shutdown against systemd's stop timeout.

Since vLLM 0.18, ``--shutdown-timeout N`` makes SIGTERM stop taking new requests and let the running
ones finish for up to N seconds (default 0: they are aborted at once). systemd sends SIGKILL when the
unit has not stopped within ``TimeoutStopSec``: a stop timeout shorter than the drain (and the
engine's teardown after it) kills the drain half-way, and with it the requests it was finishing.
Standard library only, no Ansible imports.
"""

from __future__ import annotations

import re
import typing as t

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


def graceful_shutdown(values: t.Mapping[str, str], unit: str) -> dict[str, t.Any]:
    """What the unit's stop does to vLLM's drain: ``shutdown_timeout`` (None: no drain asked for),
    ``stop_timeout`` (seconds, None: systemd waits without end), ``cut_short`` and a ``warning``."""
    drain = shutdown_timeout(values.get("ExecStart", ""))
    stop = timespan_seconds(values.get("TimeoutStopUSec", ""))
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
