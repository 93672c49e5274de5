"""The engines' drain on a stop against the unit's TimeoutStopSec (module_utils/_shutdown): vLLM's
--shutdown-timeout, and SGLang's drain that only systemd bounds. The real systemctl output is read on
the test fleet (tests/integration/test_vllm_playbooks.py)."""

from __future__ import annotations

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils._hostcall.unit_info import unit_info
from ansible_collections.inferops.runbooks.plugins.module_utils._shutdown import (
    TEARDOWN_SECONDS,
    engine_of_command,
    graceful_shutdown,
    shutdown_timeout,
    timespan_seconds,
)

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
    assert graceful_shutdown({}, "vllm.service") == {"engine": None, "shutdown_timeout": None, "stop_timeout": None, "cut_short": False, "warning": None}
    assert graceful_shutdown({}, "sglang.service", "sglang", drain_before_stop=False)["warning"] is None


# SGLang's command lines as units run them: a virtualenv's python, the sglang CLI, a container
SGLANG_EXEC_START = (
    "{ path=/opt/sglang/bin/python ; argv[]=/opt/sglang/bin/python -m sglang.launch_server --model-path /models/m --tp 8 --port 30000 ;"
    " ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }"
)


@pytest.mark.parametrize(
    ("command", "engine"),
    [
        (SGLANG_EXEC_START, "sglang"),
        ("sglang serve --model-path /models/m", "sglang"),
        ("/usr/bin/docker run --rm --gpus all lmsysorg/sglang:latest python3 -m sglang.launch_server --model-path /m", "sglang"),
        (EXEC_START.replace("{}", ""), "vllm"),
        ("/opt/vllm/bin/vllm serve /models/m --port 8000", "vllm"),
        ("/usr/bin/python3 -m http.server", None),
    ],
)
def test_the_engine_is_read_from_the_command_line(command: str, engine: str | None) -> None:
    assert engine_of_command(command) == engine


def test_sglang_without_a_drain_before_the_stop_is_told_how_long_it_may_drain() -> None:
    """SGLang's sigterm_watchdog waits for its requests without a bound: TimeoutStopSec is the limit."""
    found = graceful_shutdown({"ExecStart": SGLANG_EXEC_START, "TimeoutStopUSec": "1min 30s"}, "sglang.service", drain_before_stop=False)
    assert (found["engine"], found["stop_timeout"], found["sglang_drain_limit"], found["cut_short"]) == ("sglang", 90, 90, False)
    assert "sglang.service" in found["warning"] and "may drain for 90 s (TimeoutStopSec)" in found["warning"]
    assert "no bound of its own" in found["warning"] and "no load URL" in found["warning"]


def test_sglang_with_no_stop_timeout_is_told_the_stop_waits_as_long_as_a_request_runs() -> None:
    found = graceful_shutdown({"ExecStart": SGLANG_EXEC_START, "TimeoutStopUSec": "infinity"}, "sglang.service", "sglang", drain_before_stop=False)
    assert found["sglang_drain_limit"] is None
    assert "no limit: systemd waits as long as a request runs" in found["warning"]


@pytest.mark.parametrize("drain_before_stop", [True, None])
def test_sglang_with_a_drain_before_the_stop_or_none_said_gets_the_limit_and_no_warning(drain_before_stop: bool | None) -> None:
    found = graceful_shutdown({"ExecStart": SGLANG_EXEC_START, "TimeoutStopUSec": "20s"}, "sglang.service", drain_before_stop=drain_before_stop)
    assert (found["sglang_drain_limit"], found["warning"]) == (20, None)


def test_the_given_engine_wins_over_the_command_line_and_vllm_keeps_its_check() -> None:
    """A wrapper script hides the engine: the role's engine says it."""
    wrapped = {"ExecStart": "/usr/local/bin/start-server.sh", "TimeoutStopUSec": "10s"}
    assert graceful_shutdown(wrapped, "llm.service", "sglang", drain_before_stop=False)["sglang_drain_limit"] == 10
    vllm = {"ExecStart": EXEC_START.replace("{}", "--shutdown-timeout 60"), "TimeoutStopUSec": "10s"}
    found = graceful_shutdown(vllm, "vllm.service", "vllm", drain_before_stop=False)
    assert (found["engine"], found["cut_short"], found["shutdown_timeout"]) == ("vllm", True, 60)
    assert "sglang_drain_limit" not in found


class FakeSystemctl:
    """systemctl as unit_info calls it: show's state properties, then ExecStart and TimeoutStopUSec."""

    check_mode = False

    def __init__(self, exec_start: str, stop: str) -> None:
        self.exec_start, self.stop = exec_start, stop
        self.warnings: list[str] = []

    def run(self, argv: list[str]) -> tuple[int, str, str]:
        if "--property=ExecStart" in argv:
            return 0, f"ExecStart={self.exec_start}\nTimeoutStopUSec={self.stop}\n", ""
        state = "Id=sglang.service\nLoadState=loaded\nActiveState=active\nSubState=running\nMainPID=42\nNRestarts=0\nInvocationID=ab\n"
        return 0, state, ""

    def bin_path(self, name: str) -> str:
        return f"/usr/bin/{name}"

    def warn(self, text: str) -> None:
        self.warnings.append(text)


@pytest.mark.parametrize(("drain_before_stop", "warned"), [(False, True), (True, False), (None, False)])
def test_unit_info_warns_for_sglang_when_no_drain_precedes_the_stop(drain_before_stop: bool | None, warned: bool) -> None:
    host = FakeSystemctl(SGLANG_EXEC_START, "2min")
    result = unit_info({"unit": "sglang.service", "engine": "auto", "drain_before_stop": drain_before_stop}, host)
    assert result["graceful_shutdown"]["sglang_drain_limit"] == 120
    assert bool(host.warnings) is warned and all("may drain for 120 s" in text for text in host.warnings)
