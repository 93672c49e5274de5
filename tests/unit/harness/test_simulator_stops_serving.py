"""The simulator's servers that stay up and stop serving after they were ready: wedged, engine_dead."""

from __future__ import annotations

import contextlib
import threading
import time

from tests.unit.harness.test_simulator import READY, StartSim

GENERATE = {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 3}}


def test_wedged_holds_generation_while_health_answers_200_and_stops_on_sigterm(start_sim: StartSim) -> None:
    sim = start_sim(SIM_SCENARIO="wedged", SIM_WEDGE_AFTER="0.5")
    sim.wait_for(READY)
    assert sim.wait_status("/health", 200) == 200
    assert sim.request("POST", "/generate", GENERATE)[0] == 200  # type: ignore[index]
    time.sleep(0.8)
    held: list[object] = []

    def generate() -> None:
        with contextlib.suppress(OSError):
            held.append(sim.request("POST", "/generate", GENERATE))

    worker = threading.Thread(target=generate, daemon=True)
    worker.start()
    worker.join(1.5)
    assert worker.is_alive(), "a wedged server answered a generation"
    assert sim.status("/health_generate") == 200
    assert sim.status("/health") == 200
    metrics = sim.request("GET", "/metrics")[1].decode()  # type: ignore[index]
    assert 'sglang:num_running_reqs{model_name="/models/DeepSeek-R1"} 1.0' in metrics
    tokens_before = metrics.split("sglang:generation_tokens_total", 1)[1].splitlines()[0]
    time.sleep(0.3)
    assert sim.request("GET", "/metrics")[1].decode().split("sglang:generation_tokens_total", 1)[1].splitlines()[0] == tokens_before  # type: ignore[index]
    output_after_ready = sim.text.split(READY, 1)[1]
    assert "Traceback" not in output_after_ready  # a wedged scheduler says nothing
    returncode, seconds = sim.terminate()
    assert returncode == 0 and seconds < 3


def test_engine_dead_answers_health_and_fails_generation_at_once(start_sim: StartSim) -> None:
    sim = start_sim(SIM_ENGINE="vllm", SIM_SCENARIO="engine_dead", SIM_WEDGE_AFTER="0.3")
    assert sim.wait_status("/health", 200, timeout=15) == 200
    sim.wait_for("EngineDeadError")
    status, body = sim.request("POST", "/v1/completions", {"model": "m", "prompt": "x", "max_tokens": 1})  # type: ignore[misc]
    assert status == 500 and b"EngineDeadError" in body
    assert sim.status("/health") == 200
    assert "ERROR" in sim.text and "EngineCore encountered a fatal error." in sim.text
    assert sim.proc.poll() is None  # the API server lives on


def test_sglang_engine_dead_logs_the_scheduler_exception_and_keeps_running(start_sim: StartSim) -> None:
    sim = start_sim(SIM_SCENARIO="engine_dead", SIM_WEDGE_AFTER="0.3")
    sim.wait_for(READY)
    sim.wait_for("RuntimeError: CUDA error: an illegal memory access was encountered")
    assert "Scheduler hit an exception: Traceback (most recent call last):" in sim.text.split(READY, 1)[1]
    assert sim.request("POST", "/generate", GENERATE)[0] == 500  # type: ignore[index]
    assert sim.status("/health_generate") == 200
    assert sim.proc.poll() is None
