"""The wait of a headless node of a vLLM data parallel deployment (``--headless``, rank >= 1):
no HTTP, so never health-probed; ready from its own journal (the engine core's ``init engine ...
took`` line) once node 0 passed; failed by its own fatal line or by its peer's failure.

The journal lines are vLLM's own formats (vllm/entrypoints/cli/serve.py run_headless,
vllm/v1/engine/core.py), classified by the real vLLM rules.
"""

from __future__ import annotations

import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import Scanner, load_rules
from ansible_collections.inferops.runbooks.plugins.module_utils._types import NodeState, ProbeResult
from ansible_collections.inferops.runbooks.plugins.plugin_utils._wait import PEER_SETTLE, Outcome, Probe, Settings, Wait, worker_roles
from tests.unit.plugins.plugin_utils.test_wait import INVOCATION, Clock, health, unit

RULES = load_rules("vllm")
HEADLESS_LOG = (
    "INFO 12-05 14:00:01 [__init__.py:216] Automatically detected platform cuda.",
    "INFO 12-05 14:00:03 [serve.py:212] Launching 2 data parallel engine(s) in headless mode, with head node address tcp://10.0.0.1:13345.",
    "INFO 12-05 14:00:09 [gpu_model_runner.py:2602] Starting to load model /models/llama...",
    "INFO 12-05 14:00:40 [gpu_model_runner.py:2653] Model loading took 14.99 GiB and 30.2 seconds",
    "INFO 12-05 14:00:52 [kv_cache_utils.py:1087] GPU KV cache size: 476,592 tokens",
    "INFO 12-05 14:01:10 [core.py:218] init engine (profile, create kv cache, warmup model) took 28.51 seconds",
)
LOADING, READY = 3, len(HEADLESS_LOG)
DIED = "ERROR 12-05 14:00:41 [core.py:719] EngineCore failed to start."


class Target:
    """A headless node's journal, classified slice by slice with vLLM's rules."""

    def __init__(self, lines: t.Sequence[str] = HEADLESS_LOG) -> None:
        self.lines, self.read = list(lines), 0

    def probe(self, upto: int | None = None) -> ProbeResult:
        end = self.read if upto is None else upto
        scanner = Scanner(RULES, line_offset=self.read)
        for line in self.lines[self.read : end]:
            scanner.feed_line(line)
        self.read = end
        report = scanner.finish()
        report.update(cursor=f"c{scanner.line_number}", records=end, invocation_id=INVOCATION, tail=[], gap=None)
        return t.cast(ProbeResult, {"unit": unit(), "journal": report, "health": None})


def headless_wait(clock: Clock, engine: str = "vllm") -> Wait:
    args = {"unit": "vllm.service", "engine": engine, "deployment": "dp", "node_rank": 1, "peers": {"gpu0": 0}, "soak": 4.0, "poll_interval": 5.0}
    return Wait(Settings.from_args(args, "gpu1"), clock(), rng=lambda: 0.5)


def node0(state: str, reason: str | None = None, msg: str | None = None) -> dict[str, NodeState]:
    return {"gpu0": t.cast(NodeState, {"host": "gpu0", "rank": 0, "state": state, "reason": reason, "msg": msg, "phase": "loading_weights", "at": 0.0})}


def turn(wait: Wait, clock: Clock, seconds: float, observation: ProbeResult, peers: dict[str, NodeState]) -> Probe | Outcome:
    clock.now += seconds
    early = wait.peers_seen(peers, clock())
    return early if isinstance(early, Outcome) else wait.observe(observation, clock())


def test_the_engine_driver_decides_what_a_worker_node_serves() -> None:
    assert worker_roles("vllm") == {"worker_http": "none", "worker_ready_phase": "warming_up"}
    assert worker_roles("sglang")["worker_http"] == "placeholder"
    # the engine not known: probed as a placeholder, never counted
    assert worker_roles("auto")["worker_http"] == "placeholder"
    assert worker_roles(None)["worker_http"] == "placeholder"


def test_a_headless_node_is_never_probed_and_passes_on_its_journal_once_node_0_passed() -> None:
    clock, target = Clock(), Target()
    wait = headless_wait(clock)
    assert wait.headless and not wait.begin().health
    probes = [turn(wait, clock, 0.1, target.probe(0), node0("waiting")), turn(wait, clock, 5, target.probe(LOADING), node0("waiting"))]
    assert wait.node_state()["state"] == "waiting" and wait.node_state()["phase"] == "loading_weights"
    probes.append(turn(wait, clock, 5, target.probe(READY), node0("waiting")))
    assert wait.node_state()["state"] == "ready"
    for _look in range(3):
        probes.append(turn(wait, clock, 2, target.probe(), node0("ready")))
    assert all(isinstance(probe, Probe) and not probe.health and not probe.health_early for probe in probes)
    messages = " ".join(wait.take_messages())
    assert "gpu1 (node 1 of dp): vllm.service ready (own evidence; headless, no HTTP)" in messages
    outcome = turn(wait, clock, 2, target.probe(), node0("passed"))
    assert isinstance(outcome, Outcome) and (outcome.verdict, outcome.reason) == ("pass", "ready")
    assert "its own journal shows its engines ready" in outcome.msg and "headless node: no HTTP, not probed" in outcome.msg
    result = wait.result()
    assert result["health"]["headless"] is True and result["health"]["history"] == []


def test_a_headless_node_without_its_engines_ready_never_passes() -> None:
    clock, target = Clock(), Target()
    wait = headless_wait(clock)
    wait.begin()
    turn(wait, clock, 0.1, target.probe(0), node0("waiting"))
    for _look in range(5):
        assert isinstance(turn(wait, clock, 5, target.probe(READY - 1), node0("passed")), Probe)
    assert wait.node_state()["state"] == "waiting"


def test_its_own_fatal_line_fails_a_headless_node_with_that_evidence() -> None:
    clock, target = Clock(), Target([*HEADLESS_LOG[:LOADING], DIED])
    wait = headless_wait(clock)
    wait.begin()
    turn(wait, clock, 0.1, target.probe(0), node0("waiting"))
    outcome = turn(wait, clock, 5, target.probe(LOADING + 1), node0("waiting"))
    assert isinstance(outcome, Outcome) and outcome.reason == "fatal_log" and "EngineCore failed to start" in outcome.msg
    state = wait.node_state()
    assert state["state"] == "failed" and (state["first_fatal"] or {}).get("rule") == "vllm-engine-dead"


def test_a_headless_node_stops_waiting_when_node_0_failed() -> None:
    clock, target = Clock(), Target()
    wait = headless_wait(clock)
    wait.begin()
    turn(wait, clock, 0.1, target.probe(0), node0("waiting"))
    turn(wait, clock, 2, target.probe(LOADING), node0("waiting"))
    clock.now += 1
    last_look = wait.peers_seen(node0("failed", "fatal_log", "fatal line in vllm.service's journal: torch.OutOfMemoryError"), clock())
    assert isinstance(last_look, Probe) and not last_look.health and 0 < last_look.watch <= PEER_SETTLE
    outcome = wait.observe(target.probe(), clock())
    assert isinstance(outcome, Outcome) and outcome.reason == "peer_failed"
    assert outcome.msg.startswith("gpu0 (node 0 of dp) failed (fatal_log): fatal line in vllm.service's journal: torch.OutOfMemoryError")


def test_node_0_of_a_vllm_deployment_keeps_its_health_gates() -> None:
    clock = Clock()
    args = {"unit": "vllm.service", "engine": "vllm", "deployment": "dp", "node_rank": 0, "peers": {"gpu1": 1}}
    wait = Wait(Settings.from_args(args, "gpu0"), clock(), rng=lambda: 0.5)
    assert not wait.headless and not wait.placeholder_health
    clock.now += 1
    wait.begin()
    probe = wait.observe(Target().probe(READY), clock())
    assert isinstance(probe, Probe) and probe.health
    assert health(200)["status"] == 200
