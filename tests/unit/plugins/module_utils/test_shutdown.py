"""vLLM's drain on a stop (--shutdown-timeout) against the unit's TimeoutStopSec (module_utils/_shutdown).
The real systemctl output is read on the test fleet (tests/integration/test_vllm_playbooks.py)."""

from __future__ import annotations

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils._shutdown import TEARDOWN_SECONDS, graceful_shutdown, shutdown_timeout, timespan_seconds

# ExecStart= as systemctl show prints it (systemd 252)
EXEC_START = (
    "{ path=/opt/vllm/bin/python ; argv[]=/opt/vllm/bin/python -m vllm.entrypoints.openai.api_server --model /models/m {} --port 8000 ;"
    " ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }"
)


@pytest.mark.parametrize(
    ("flags", "seconds"),
    [("--shutdown-timeout 60", 60), ("--shutdown-timeout=45", 45), ("--shutdown_timeout 5", 5), ("", None), ("--shutdown-timeout-x 5", None)],
)
def test_the_drain_is_read_from_the_command_line(flags: str, seconds: int | None) -> None:
    assert shutdown_timeout(EXEC_START.replace("{}", flags)) == seconds
    assert shutdown_timeout(f"vllm serve /models/m {flags}".strip()) == seconds


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1min 30s", 90), ("20s", 20), ("90", 90), ("500ms", 0.5), ("1h 2min", 3720), ("infinity", None), ("", None), ("soon", None), ("1min 30x", None)],
)
def test_systemd_time_spans(text: str, seconds: float | None) -> None:
    assert timespan_seconds(text) == seconds


def test_a_stop_shorter_than_the_drain_and_the_teardown_is_cut_short_and_says_what_to_set() -> None:
    found = graceful_shutdown({"ExecStart": EXEC_START.replace("{}", "--shutdown-timeout 60"), "TimeoutStopUSec": "1min 10s"}, "vllm.service")
    assert (found["shutdown_timeout"], found["stop_timeout"], found["cut_short"]) == (60, 70, True)
    assert f"TimeoutStopSec={60 + TEARDOWN_SECONDS}" in found["warning"] and "vllm.service" in found["warning"]


@pytest.mark.parametrize(
    ("flags", "stop"),
    [("--shutdown-timeout 60", f"{60 + TEARDOWN_SECONDS}s"), ("--shutdown-timeout 60", "infinity"), ("", "5s"), ("--shutdown-timeout 0", "5s")],
)
def test_no_warning_when_the_stop_waits_long_enough_or_nothing_drains(flags: str, stop: str) -> None:
    found = graceful_shutdown({"ExecStart": EXEC_START.replace("{}", flags), "TimeoutStopUSec": stop}, "vllm.service")
    assert (found["cut_short"], found["warning"]) == (False, None)


def test_an_unreadable_unit_says_nothing() -> None:
    assert graceful_shutdown({}, "vllm.service") == {"shutdown_timeout": None, "stop_timeout": None, "cut_short": False, "warning": None}
