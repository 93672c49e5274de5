"""The simulator's cold starts, as printed, read the way the classifier must read real ones."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import classify

SIMULATOR = Path(__file__).resolve().parents[2] / "harness" / "simulator" / "sglang_sim.py"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def simulated_start(seconds: float, **scenario: str) -> bytes:
    env = dict(os.environ, SIM_SPEED="0.1", SIM_WARMUP_SECONDS="0.5", SIM_PORT=str(free_port()), **scenario)
    try:
        return subprocess.run([sys.executable, str(SIMULATOR)], env=env, capture_output=True, timeout=seconds, check=False).stdout
    except subprocess.TimeoutExpired as expired:
        return expired.stdout or b""


def events(report: dict[str, Any], event_class: str) -> dict[str | None, dict[str, Any]]:
    return {event["rule"]: event for event in report[event_class]}


def test_ok_start_passes_with_the_seed_warning_allowlisted_on_eight_ranks() -> None:
    report = classify(simulated_start(6, SIM_SCENARIO="ok"), engine="sglang")
    assert report["verdict"] == "pass"
    assert report["phase"] == "ready"
    assert report["unrecognized"] == []
    walk = events(report, "allowlisted")["sglang-cute-dsl-package-walk"]
    assert walk["count"] == 8 and len(walk["ranks"]) == 8


@pytest.mark.parametrize("phase", ["loading_weights", "capturing_cuda_graphs"])
def test_crash_fails_with_the_exception_as_one_event(phase: str) -> None:
    report = classify(simulated_start(8, SIM_SCENARIO="crash", SIM_PHASE=phase, SIM_FAILURE="cuda_oom"), engine="sglang")
    assert report["verdict"] == "fail"
    assert report["fatal"][0]["message"].startswith("torch.OutOfMemoryError: CUDA out of memory")
    assert report["fatal"][0]["context"] == "Scheduler hit an exception"
    assert report["phase"] == phase


def test_unknown_error_is_one_unrecognized_event() -> None:
    report = classify(simulated_start(6, SIM_SCENARIO="unknown_error"), engine="sglang")
    assert report["verdict"] == "pass"
    assert [event["message"] for event in report["unrecognized"]] == ["Frobnicator returned error state 7, continuing"]
