"""The wait of one node of a multi-node deployment (plugin_utils/_wait.py with peers), and the
coordination channel its waits share (plugin_utils/_channel.py).

The journal slices are the real cold start of tests/unit/data/corpus; a node of rank >= 1 ends its
start with the line SGLang's engine logs when it starts the placeholder health server.
"""

from __future__ import annotations

import typing as t
from pathlib import Path

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils._types import NodeState, ProbeResult
from ansible_collections.inferops.runbooks.plugins.plugin_utils._channel import ChannelError, FileChannel
from ansible_collections.inferops.runbooks.plugins.plugin_utils._wait import JOIN_LIMIT, PEER_POLL, PEER_SETTLE, Outcome, Probe, Wait, run_wait
from tests.unit.plugins.plugin_utils.test_wait import CAPTURING, FATAL, LOADING, READY, READY_LOG, REFUSED, Clock, Target, health, new_wait

DUMMY_SERVER = "[2025-03-08 12:29:30] Starting dummy health check server at 0.0.0.0:30000"
NODE1_LOG = [*READY_LOG[:CAPTURING], DUMMY_SERVER]
PEER_LOST = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:5000"


def node_wait(clock: Clock, rank: int, peers: dict[str, int]) -> Wait:
    return new_wait(clock, host=f"gpu{rank}", deployment="dsr1", node_rank=rank, peers=peers, soak=4.0)


def peer(host: str, rank: int, state: str, reason: str | None = None, msg: str | None = None, at: float = 0.0) -> dict[str, NodeState]:
    return {host: t.cast(NodeState, {"host": host, "rank": rank, "state": state, "reason": reason, "msg": msg, "phase": "loading_weights", "at": at})}


def step(wait: Wait, clock: Clock, seconds: float, observation: ProbeResult, peers: dict[str, NodeState] | None = None) -> Probe | Outcome:
    """One turn of run_wait's loop: the peers as the channel shows them, then a probe's result."""
    clock.now += seconds
    if peers is not None:
        early = wait.peers_seen(peers, clock())
        if isinstance(early, Outcome):
            return early
    return wait.observe(observation, clock())


def test_node_0_passes_only_once_every_other_node_is_ready() -> None:
    clock, target = Clock(), Target()
    wait = node_wait(clock, 0, {"gpu1": 1})
    wait.begin()
    for seconds, upto, answer in ((0.1, 0, None), (5, LOADING, REFUSED), (5, CAPTURING, REFUSED), (5, READY, health(200))):
        assert isinstance(step(wait, clock, seconds, target.probe(upto, answer=answer), peer("gpu1", 1, "waiting")), Probe)
    # healthy through the soak and beyond, but node 1 is not ready: no pass, and no busy loop either
    for _look in range(4):
        probe = step(wait, clock, 2, target.probe(answer=health(200)), peer("gpu1", 1, "waiting"))
        assert isinstance(probe, Probe) and 0 < probe.watch <= PEER_POLL
    assert wait.node_state()["state"] == "ready"
    assert any("waiting for gpu1 (node 1: waiting, loading weights)" in message for message in wait.take_messages())
    outcome = step(wait, clock, 2, target.probe(answer=health(200)), peer("gpu1", 1, "ready"))
    assert isinstance(outcome, Outcome) and (outcome.verdict, outcome.reason) == ("pass", "ready")
    result = wait.result()
    assert result["deployment"] == "dsr1" and result["node_rank"] == 0 and result["peers"]["gpu1"]["state"] == "ready"
    assert wait.node_state()["state"] == "passed"


def test_a_node_of_rank_1_never_counts_its_placeholder_health_and_waits_for_node_0() -> None:
    clock, target = Clock(), Target(NODE1_LOG)
    wait = node_wait(clock, 1, {"gpu0": 0})
    wait.begin()
    # the placeholder answers 200 while the node still loads: recorded, never a gate
    assert isinstance(step(wait, clock, 0.1, target.probe(0), peer("gpu0", 0, "waiting")), Probe)
    assert isinstance(step(wait, clock, 5, target.probe(LOADING, answer=health(200)), peer("gpu0", 0, "waiting")), Probe)
    assert wait.soak_started is None and wait.node_state()["state"] == "waiting"
    # its own evidence: the schedulers are ready and the placeholder server starts
    assert isinstance(step(wait, clock, 5, target.probe(len(NODE1_LOG), answer=health(200)), peer("gpu0", 0, "waiting")), Probe)
    assert wait.node_state()["state"] == "ready"
    for _look in range(3):
        assert isinstance(step(wait, clock, 2, target.probe(answer=health(200)), peer("gpu0", 0, "ready")), Probe)
    messages = " ".join(wait.take_messages())
    assert "gpu1 (node 1 of dsr1): sglang.service ready (own evidence; placeholder health 200, not counted)" in messages
    assert "waiting for gpu0 (node 0: ready" in messages
    outcome = step(wait, clock, 2, target.probe(answer=health(200)), peer("gpu0", 0, "passed"))
    assert isinstance(outcome, Outcome) and outcome.verdict == "pass" and "placeholder health was not counted" in outcome.msg
    assert wait.result()["health"]["placeholder"] is True


def test_a_failed_peer_ends_the_wait_after_a_last_look_at_its_own_journal() -> None:
    clock, target = Clock(), Target([*READY_LOG[:LOADING], PEER_LOST])
    wait = node_wait(clock, 0, {"gpu1": 1})
    wait.begin()
    step(wait, clock, 0.1, target.probe(0), peer("gpu1", 1, "waiting"))
    step(wait, clock, 2, target.probe(LOADING - 5, answer=REFUSED), peer("gpu1", 1, "waiting"))
    clock.now += 1
    failed = peer("gpu1", 1, "failed", "fatal_log", "fatal line in sglang.service's journal: KeyError: 'model.layers.61'")
    last_look = wait.peers_seen(failed, clock())
    assert isinstance(last_look, Probe) and 0 < last_look.watch <= PEER_SETTLE and not last_look.health
    # the last look finds nothing new: the node fails because its peer did, naming it
    outcome = wait.observe(target.probe(LOADING - 3), clock())
    assert isinstance(outcome, Outcome) and outcome.reason == "peer_failed"
    assert outcome.msg.startswith("gpu1 (node 1 of dsr1) failed (fatal_log): fatal line in sglang.service's journal: KeyError")
    assert wait.node_state()["state"] == "failed" and wait.result()["failed"]


def test_the_last_look_keeps_the_consequence_this_node_logged() -> None:
    clock, target = Clock(), Target([*READY_LOG[:LOADING], PEER_LOST])
    wait = node_wait(clock, 0, {"gpu1": 1})
    wait.begin()
    step(wait, clock, 0.1, target.probe(0), peer("gpu1", 1, "waiting"))
    assert isinstance(wait.peers_seen(peer("gpu1", 1, "failed", "fatal_log", "KeyError"), clock()), Probe)
    consequence = target.probe(LOADING + 1)
    consequence["journal"]["fatal"][0]["first_realtime"] = 1_700_000_003_000_000
    outcome = wait.observe(consequence, clock())
    assert isinstance(outcome, Outcome) and outcome.reason == "fatal_log" and "Connection closed by peer" in outcome.msg
    first = wait.result()["first_fatal"]
    assert first["realtime"] == 1_700_000_003_000_000 and first["line"] == LOADING + 1


def test_a_peer_that_never_starts_waiting_fails_the_deployment_after_the_join_limit() -> None:
    clock, target = Clock(), Target()
    wait = node_wait(clock, 0, {"gpu1": 1, "gpu2": 2})
    wait.begin()
    step(wait, clock, 0.1, target.probe(0), peer("gpu1", 1, "waiting"))
    clock.now += JOIN_LIMIT + 1
    outcome = wait.peers_seen(peer("gpu1", 1, "waiting"), clock())
    assert isinstance(outcome, Outcome) and outcome.reason == "peer_failed"
    assert "gpu2 (node 2 of dsr1) did not start waiting within 1m00s" in outcome.msg and "forks" in outcome.msg


def test_a_fatal_line_on_this_node_is_published_with_its_journal_time(tmp_path: Path) -> None:
    """run_wait with a real channel directory: the node publishes waiting, then failed with its
    first fatal line; a peer reading the channel sees it."""
    clock, target = Clock(), Target(READY_LOG[:LOADING] + FATAL)
    wait = node_wait(clock, 1, {"gpu0": 0})
    channel = FileChannel(str(tmp_path), "gpu1", ["gpu0"], clock=clock)
    looks = iter([target.probe(0), target.probe(LOADING), target.probe(LOADING + len(FATAL))])

    def transport(probe: Probe) -> ProbeResult:
        clock.now += probe.watch or 0.1
        observation = next(looks)
        for event in observation["journal"]["fatal"]:
            event["first_realtime"] = 1_700_000_000_500_000
        return observation

    result = run_wait(wait, transport, clock, clock.sleep, lambda _message: None, channel)
    assert result["verdict"] == "fail" and result["reason"] == "fatal_log"
    seen = FileChannel(str(tmp_path), "gpu0", ["gpu1"]).read()["gpu1"]
    assert seen["state"] == "failed" and seen["reason"] == "fatal_log" and seen["rank"] == 1
    assert seen["first_fatal"] is not None and seen["first_fatal"]["realtime"] == 1_700_000_000_500_000
    assert "CUDA out of memory" in seen["first_fatal"]["message"] and seen["at"] == pytest.approx(clock())


def test_run_wait_ends_within_the_peer_poll_when_a_peer_fails(tmp_path: Path) -> None:
    clock, target = Clock(), Target()
    wait = node_wait(clock, 0, {"gpu1": 1})
    channel = FileChannel(str(tmp_path), "gpu0", ["gpu1"], clock=clock)
    other = FileChannel(str(tmp_path), "gpu1", ["gpu0"], clock=clock)
    other.publish(peer("gpu1", 1, "waiting")["gpu1"])
    windows: list[float] = []

    def transport(probe: Probe) -> ProbeResult:
        windows.append(probe.watch)
        clock.now += probe.watch or 0.1
        if clock.now > 1010:
            other.publish(peer("gpu1", 1, "failed", "stalled", "no progress in phase loading weights for 15m00s")["gpu1"])
        return target.probe(min(target.read + 5, LOADING))

    failed_at = 1010.0
    result = run_wait(wait, transport, clock, clock.sleep, lambda _message: None, channel)
    assert result["reason"] == "peer_failed" and "gpu1 (node 1 of dsr1) failed (stalled)" in result["msg"]
    # every look before the failure was at most PEER_POLL long; then one last look of at most PEER_SETTLE
    assert max(windows[:-1]) <= PEER_POLL and windows[-1] <= PEER_SETTLE
    assert clock.now - failed_at <= PEER_POLL + PEER_SETTLE + 0.5
    assert FileChannel(str(tmp_path), "gpu1", ["gpu0"]).read()["gpu0"]["reason"] == "peer_failed"


def test_the_channel_ignores_missing_and_half_written_files_and_refuses_a_missing_directory(tmp_path: Path) -> None:
    channel = FileChannel(str(tmp_path), "gpu0", ["gpu1", "gpu2"])
    (tmp_path / "gpu1.json").write_text('{"state": "fail')
    assert channel.read() == {}
    with pytest.raises(ChannelError, match="does not exist on the controller"):
        FileChannel(str(tmp_path / "nope"), "gpu0", [])


def test_the_last_look_does_not_blame_this_node_for_the_stall_its_peer_caused() -> None:
    """Node 0 waits at a collective for node 1, which hung: when node 1's stall is reported, node
    0's own stall limit may run out during its last look; it still fails because of its peer."""
    clock, target = Clock(), Target()
    wait = new_wait(clock, host="gpu0", deployment="dsr1", node_rank=0, peers={"gpu1": 1}, stall_limit=8.0)
    wait.begin()
    step(wait, clock, 0.1, target.probe(LOADING), peer("gpu1", 1, "waiting"))
    clock.now += 7.5
    assert isinstance(wait.peers_seen(peer("gpu1", 1, "failed", "stalled", "no progress in phase loading weights for 9s"), clock()), Probe)
    clock.now += 3.0  # the last look: 10.5 s without progress here too
    outcome = wait.observe(target.probe(), clock())
    assert isinstance(outcome, Outcome) and outcome.reason == "peer_failed" and "failed (stalled)" in outcome.msg
