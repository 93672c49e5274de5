"""The simulator's vLLM multi-node mode (data parallel over nodes): two real processes, node 0 with
the API server and a headless node, that hand shake over TCP on 127.0.0.1."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.unit.harness.test_simulator import StartSim, free_port

API_READY = "Application startup complete."
HEADLESS = "data parallel engine(s) in headless mode, with head node address tcp://127.0.0.1:"
ENGINES_READY = "init engine (profile, create kv cache, warmup model) took"


@pytest.fixture
def dist() -> Iterator[dict[str, str]]:
    """What both nodes share: vLLM, 4 ranks over 2 nodes, node 0's data parallel address and RPC port."""
    yield {
        "SIM_ENGINE": "vllm",
        "SIM_NNODES": "2",
        "SIM_TP": "4",
        "SIM_DIST_INIT_ADDR": f"127.0.0.1:{free_port()}",
        "SIM_DIST_TIMEOUT": "10",
        "SIM_PEER_TIMEOUT": "0.5",
    }


def test_node_0_serves_only_once_the_headless_node_came_along_and_the_headless_node_never_listens(start_sim: StartSim, dist: dict[str, str]) -> None:
    node0 = start_sim(**dist, SIM_NODE_RANK="0")
    node0.wait_for("vLLM API server version")
    time.sleep(1.0)  # the whole start takes about 1 s at this speed: node 0 waits for the handshake
    assert API_READY not in node0.text and node0.status("/health") is None and node0.proc.poll() is None
    node1 = start_sim(**dist, SIM_NODE_RANK="1")
    node0.wait_for(API_READY)
    node1.wait_for(ENGINES_READY)
    assert node0.wait_status("/health", 200) == 200 and node0.status("/v1/models") == 200
    assert f"Launching 2 {HEADLESS}{dist['SIM_DIST_INIT_ADDR'].split(':')[1]}." in node1.text
    # the headless node: engines only, no API server and no port at all
    time.sleep(0.3)
    assert node1.proc.poll() is None and node1.status("/health") is None
    for line in ("vLLM API server version", "Starting vLLM API server", API_READY, "Uvicorn running"):
        assert line not in node1.text
    assert HEADLESS not in node0.text
    assert node1.terminate()[0] == 0


def test_a_headless_node_that_crashes_fails_with_its_engine_core_and_node_0_follows(start_sim: StartSim, dist: dict[str, str]) -> None:
    node0 = start_sim(**dist, SIM_NODE_RANK="0")
    node1 = start_sim(**dist, SIM_NODE_RANK="1", SIM_SCENARIO="crash", SIM_PHASE="loading_weights", SIM_FAILURE="cuda_oom")
    assert node1.wait_exit() == 1
    assert "EngineCore failed to start." in node1.text and "torch.OutOfMemoryError" in node1.text
    assert node0.wait_exit() == 1
    fatal = node0.text.index("EngineCore encountered a fatal error.")
    assert "Connection closed by peer [127.0.0.1]:" in node0.text[fatal:] and API_READY not in node0.text


def test_a_headless_node_whose_node_0_is_lost_fails_with_the_distributed_error(start_sim: StartSim, dist: dict[str, str]) -> None:
    node0 = start_sim(**dist, SIM_NODE_RANK="0")
    node1 = start_sim(**dist, SIM_NODE_RANK="1")
    node0.wait_for(API_READY)
    node1.wait_for(ENGINES_READY)
    assert node0.terminate()[0] == 0
    assert node1.wait_exit() == 1
    assert "EngineCore encountered a fatal error." in node1.text and "Connection closed by peer" in node1.text
