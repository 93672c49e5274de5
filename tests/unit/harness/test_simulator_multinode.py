"""The simulator's multi-node mode: two real processes that rendezvous over TCP on 127.0.0.1."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator

import pytest

from tests.unit.harness.test_simulator import READY, SIGQUIT, STAMP, SimProcess, StartSim, free_port

PLACEHOLDER_LINE = "Starting dummy health check server at 127.0.0.1:"
PEER_LOST = "Connection closed by peer [127.0.0.1]:"


@pytest.fixture
def dist() -> Iterator[dict[str, str]]:
    """What both nodes of a 2-node server share: TP4 over 2 nodes, node 0's dist-init address."""
    yield {"SIM_NNODES": "2", "SIM_TP": "4", "SIM_DIST_INIT_ADDR": f"127.0.0.1:{free_port()}", "SIM_DIST_TIMEOUT": "10", "SIM_PEER_TIMEOUT": "0.5"}


def test_node_0_waits_at_the_rendezvous_until_node_1_joins_then_both_start(start_sim: StartSim, dist: dict[str, str]) -> None:
    node0 = start_sim(**dist, SIM_NODE_RANK="0")
    node0.wait_for("Init torch distributed begin.")
    time.sleep(1.0)  # the whole start takes about 1 s at this speed: node 0 is held at the rendezvous
    assert "Init torch distributed ends" not in node0.text and node0.proc.poll() is None
    node1 = start_sim(**dist, SIM_NODE_RANK="1")
    node0.wait_for(READY)
    node1.wait_for(PLACEHOLDER_LINE)
    # node 0 runs the API and ranks TP0-1; node 1 runs ranks TP2-3 and a placeholder
    assert re.search(rf"^\[{STAMP} TP1\] Load weight begin", node0.text, re.MULTILINE) and "TP2]" not in node0.text
    assert re.search(rf"^\[{STAMP} TP3\] Load weight begin", node1.text, re.MULTILINE) and "TP0]" not in node1.text
    assert "nnodes=2, node_rank=1" in node1.text and f"dist_init_addr='{dist['SIM_DIST_INIT_ADDR']}'" in node1.text
    assert READY not in node1.text and "Uvicorn running" not in node1.text
    assert node0.wait_status("/health_generate", 200) == 200 and node0.status("/v1/models") == 200
    assert node1.status("/health_generate") == 200 and node1.status("/health") == 200 and node1.status("/v1/models") == 404
    assert node1.terminate()[0] == 0


def test_a_node_that_dies_makes_the_other_fail_after_the_distributed_timeout(start_sim: StartSim, dist: dict[str, str]) -> None:
    node0 = start_sim(**dist, SIM_NODE_RANK="0")
    node1 = start_sim(**dist, SIM_NODE_RANK="1", SIM_SCENARIO="crash", SIM_PHASE="loading_weights", SIM_FAILURE="scheduler_exception")
    assert node1.wait_exit() == -signal.SIGKILL
    crashed_at = time.monotonic()
    assert re.search(rf"^\[{STAMP} TP3\] Scheduler hit an exception", node1.text, re.MULTILINE)
    assert node0.wait_exit() == -signal.SIGKILL
    assert time.monotonic() - crashed_at >= 0.3  # node 0 fails only once its timeout ran out
    header = re.search(rf"^\[{STAMP} TP0\] Scheduler hit an exception: Traceback \(most recent call last\):$", node0.text, re.MULTILINE)
    assert header and PEER_LOST in node0.text[header.end() :]
    assert re.search(rf"^RuntimeError: \[\.\./third_party/gloo/gloo/transport/tcp/pair\.cc:534\] {re.escape(PEER_LOST)}\d+$", node0.text, re.MULTILINE)
    assert SIGQUIT in node0.text and READY not in node0.text


def test_with_peer_loss_hang_the_survivor_logs_watchdog_timeouts_and_hangs(start_sim: StartSim, dist: dict[str, str]) -> None:
    node0 = start_sim(**dist, SIM_NODE_RANK="0", SIM_PEER_LOSS="hang")
    node1 = start_sim(**dist, SIM_NODE_RANK="1")
    node0.wait_for(READY)
    node1.wait_for(PLACEHOLDER_LINE)
    node1.proc.send_signal(signal.SIGKILL)
    node0.wait_for("Watchdog caught collective operation timeout")
    time.sleep(0.3)
    assert node0.proc.poll() is None
    assert re.search(r"^\[rank1\]:\[E ProcessGroupNCCL\.cpp:616\] \[Rank 1\] Watchdog caught collective operation timeout", node0.text, re.MULTILINE)
    assert node0.terminate()[0] == 0


def test_a_rendezvous_nobody_joins_times_out_like_torch_distributed(start_sim: StartSim, dist: dict[str, str]) -> None:
    node0 = start_sim(**{**dist, "SIM_DIST_TIMEOUT": "0.5"}, SIM_NODE_RANK="0")
    assert node0.wait_exit() == -signal.SIGKILL
    assert "torch.distributed.DistStoreError: Timed out after 2 seconds waiting for clients. 1/2 clients joined." in node0.text
    node1 = start_sim(**{**dist, "SIM_DIST_TIMEOUT": "0.5"}, SIM_NODE_RANK="1")
    assert node1.wait_exit() == -signal.SIGKILL
    assert "torch.distributed.DistNetworkError: The client socket has timed out after 500ms while trying to connect to (127.0.0.1, " in node1.text


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"SIM_NNODES": "2", "SIM_NODE_RANK": "2", "SIM_DIST_INIT_ADDR": "127.0.0.1:5000"}, "SIM_NODE_RANK=2 must be below SIM_NNODES=2"),
        ({"SIM_NNODES": "2"}, "SIM_DIST_INIT_ADDR='' must be HOST:PORT"),
        ({"SIM_NNODES": "3", "SIM_TP": "4", "SIM_DIST_INIT_ADDR": "127.0.0.1:5000"}, "SIM_TP=4 must be a multiple of SIM_NNODES=3"),
    ],
)
def test_a_bad_multi_node_configuration_is_refused(env: dict[str, str], words: str) -> None:
    sim = SimProcess(**env)
    try:
        assert sim.wait_exit() == 2
        assert words in sim.stderr()
    finally:
        sim.close()
