"""The simulator's vLLM-over-Ray mode (SIM_RAY=1): node 0 starts the Ray head, then vllm serve, whose
placement group waits for the worker node; the worker (ray start --address --block) logs Ray's
lines only and serves no HTTP. Two real processes over TCP on 127.0.0.1."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.unit.harness.test_simulator import StartSim, free_port

API_READY = "Application startup complete."
BLOCKS = "This command will now block forever until terminated by a signal."
RAYLET_DIED = "Some Ray subprocesses exited unexpectedly:"


@pytest.fixture
def ray() -> Iterator[dict[str, str]]:
    """What both nodes share: vLLM over Ray, 4 ranks over 2 nodes, the head's address."""
    yield {
        "SIM_ENGINE": "vllm",
        "SIM_RAY": "1",
        "SIM_NNODES": "2",
        "SIM_TP": "4",
        "SIM_DIST_INIT_ADDR": f"127.0.0.1:{free_port()}",
        "SIM_DIST_TIMEOUT": "10",
        "SIM_PEER_TIMEOUT": "0.5",
    }


def test_node_0_starts_the_head_and_serves_only_once_the_worker_joined_and_the_worker_logs_rays_lines_only(start_sim: StartSim, ray: dict[str, str]) -> None:
    node0 = start_sim(**ray, SIM_NODE_RANK="0")
    node0.wait_for("No current placement group found.")
    time.sleep(1.0)
    assert API_READY not in node0.text and node0.proc.poll() is None
    assert node0.text.index("Ray runtime started.") < node0.text.index("vLLM API server version")
    assert "To add another node to this Ray cluster, run" in node0.text and BLOCKS not in node0.text
    node1 = start_sim(**ray, SIM_NODE_RANK="1")
    node0.wait_for(API_READY)
    node1.wait_for(BLOCKS)
    assert node0.wait_status("/health", 200) == 200
    time.sleep(0.3)
    assert node1.proc.poll() is None and node1.status("/health") is None
    assert "Ray runtime started." in node1.text and "vLLM" not in node1.text and "Next steps" not in node1.text
    assert node1.terminate()[0] == 0


def test_a_worker_whose_raylet_dies_while_joining_exits_1_with_rays_lines_and_node_0_follows(start_sim: StartSim, ray: dict[str, str]) -> None:
    node0 = start_sim(**ray, SIM_NODE_RANK="0")
    node1 = start_sim(**ray, SIM_NODE_RANK="1", SIM_SCENARIO="crash", SIM_PHASE="loading_weights")
    assert node1.wait_exit() == 1
    assert node1.text.index(BLOCKS) < node1.text.index(RAYLET_DIED) < node1.text.index("Remaining processes will be killed.")
    assert node0.wait_exit() == 1
    assert "EngineCore encountered a fatal error." in node0.text and API_READY not in node0.text


def test_node_0_without_its_worker_fails_on_its_placement_group(start_sim: StartSim, ray: dict[str, str]) -> None:
    node0 = start_sim(**{**ray, "SIM_DIST_TIMEOUT": "1"}, SIM_NODE_RANK="0")
    assert node0.wait_exit() == 1
    assert "ValueError: Cannot provide a placement group of placement_group_specs=" in node0.text


def test_a_worker_whose_head_is_gone_exits_1_with_its_raylets_death(start_sim: StartSim, ray: dict[str, str]) -> None:
    node0 = start_sim(**ray, SIM_NODE_RANK="0")
    node1 = start_sim(**ray, SIM_NODE_RANK="1")
    node0.wait_for(API_READY)
    assert node0.terminate()[0] == 0
    assert node1.wait_exit() == 1 and RAYLET_DIED in node1.text
