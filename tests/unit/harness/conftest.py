"""Fixtures of the simulator's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.unit.harness.test_simulator import SimProcess, StartSim


@pytest.fixture
def start_sim() -> Iterator[StartSim]:
    """``start_sim(port=None, **SIM_env)``: a simulator subprocess, killed at the end of the test."""
    started: list[SimProcess] = []

    def start(port: int | None = None, **env: str) -> SimProcess:
        sim = SimProcess(port, **env)
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.close()
