"""Fixtures of the plugins' tests: simulators to measure (the performance canary's tests)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.unit.harness.test_simulator import SimProcess

SIM_KEY = "sk-canary-test"


def started(**env: str) -> SimProcess:
    """A simulator with one rank and an API key, once it generates."""
    sim = SimProcess(SIM_API_KEY=SIM_KEY, SIM_TP="1", **env)
    try:
        assert sim.wait_status("/health_generate", 200, timeout=30) == 200
    except BaseException:
        sim.close()  # never left running when it does not come up
        raise
    return sim


@pytest.fixture(scope="module")
def fast_sim() -> Iterator[SimProcess]:
    """SGLang flavour: 400 tokens/s a request after a TTFT of 50 ms."""
    sim = started(SIM_TOKENS_PER_SECOND="400", SIM_TTFT_SECONDS="0.05")
    yield sim
    sim.close()


@pytest.fixture(scope="module")
def slow_sim() -> Iterator[SimProcess]:
    """vLLM flavour: 50 tokens/s a request, 2 requests at a time (the others queue)."""
    sim = started(SIM_ENGINE="vllm", SIM_TOKENS_PER_SECOND="50", SIM_TTFT_SECONDS="0.1", SIM_MAX_RUNNING="2")
    yield sim
    sim.close()
