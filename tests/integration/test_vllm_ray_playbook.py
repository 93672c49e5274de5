"""vLLM over nodes with Ray for real: playbooks/restart_vllm.yml against one deployment of two systemd
hosts whose simulators (vllm.service, SIM_ENGINE=vllm, SIM_RAY=1) form a Ray cluster over the test
network.

sim1 is node 0: its unit starts the Ray head, then ``vllm serve ... --distributed-executor-backend
ray``, whose placement group waits for the worker; sim2 is node 1, a Ray worker (``ray start
--address=sim1:6379 --block``): Ray's lines only, no HTTP. Both are stopped before either starts,
started together and judged as one; the worker is ready once its journal shows it joined and blocks.
"""

from __future__ import annotations

import json
import typing as t
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.fleet import Fleet
from tests.integration.conftest import QUICK, RunPlaybook
from tests.integration.test_vllm_multinode_playbook import CLEAR, NODES, UNIT, Deployment

PLAYBOOK = "playbooks/restart_vllm.yml"
RAY = {"SIM_RAY": "1"}
READY_LINES = ("Application startup complete", "This command will now block forever")


@pytest.fixture
def cluster(fleet: Fleet, tmp_path: Path) -> Iterator[Deployment]:
    assert len(fleet.hosts) >= 2, "needs 2 hosts (INFEROPS_FLEET_HOSTS)"
    for host in NODES:
        fleet.reset(host)
        fleet.ssh(host, CLEAR)
    yield Deployment(fleet, tmp_path)
    for host in NODES:
        fleet.ssh(host, CLEAR)
        fleet.reset(host)


def start_cluster(cluster: Deployment) -> dict[str, str]:
    """Both nodes started and ready (node 0's API up, the worker joined); their InvocationIDs."""
    for host in NODES:
        cluster.scenario(host, **RAY)
        cluster.fleet.ssh(host, f"systemctl start --no-block {UNIT}")
    for host, ready in zip(NODES, READY_LINES):
        cluster.fleet.ssh(host, f"timeout 60 sh -c 'until journalctl -u {UNIT} --no-pager | grep -q \"{ready}\"; do sleep 0.3; done'")
    return {host: cluster.invocation(host) for host in NODES}


def run_restart(run_playbook: RunPlaybook, cluster: Deployment, reports: Path) -> t.Any:
    extra_vars = {**QUICK, "vllm_hosts": ",".join(NODES), "sglang_restart_report_dir": str(reports)}
    return run_playbook(PLAYBOOK, extra_vars=extra_vars, inventory=cluster.inventory)


def test_the_ray_cluster_restarts_as_one_and_passes_with_its_worker_judged_from_its_journal(
    cluster: Deployment, run_playbook: RunPlaybook, tmp_path: Path
) -> None:
    before = start_cluster(cluster)
    reports = tmp_path / "reports"
    run = run_restart(run_playbook, cluster, reports)
    assert run.returncode == 0, run
    out = run.output
    assert f"deployment dp (2 nodes: sim1, sim2) {UNIT}: PASS (ready)" in out
    assert "sim2 node 1: PASS (ready)" in out and "health not probed (headless, no HTTP)" in out
    after = {host: cluster.invocation(host) for host in NODES}
    assert all(after[host] != before[host] for host in NODES), (before, after)
    stopped = max(cluster.monotonic(host, "InactiveEnterTimestampMonotonic") for host in NODES)
    assert stopped < min(cluster.monotonic(host, "ExecMainStartTimestampMonotonic") for host in NODES)
    report = json.loads((reports / "dp.json").read_text())
    assert report["verdict"] == "pass" and report["root_cause"] is None
    nodes = {node["host"]: node for node in report["nodes"]}
    assert nodes["sim2"]["health"]["headless"] is True and nodes["sim1"]["health"]["status"] == 200


def test_a_worker_that_dies_while_joining_fails_the_deployment_whole_with_its_evidence(cluster: Deployment, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    start_cluster(cluster)
    phases = {"SIM_START_SECONDS": "3", "SIM_LOAD_SECONDS": "3"}
    cluster.scenario("sim2", SIM_SCENARIO="crash", SIM_PHASE="loading_weights", **RAY, **phases)
    cluster.scenario("sim1", **RAY, **phases)
    no_restart = f"/etc/systemd/system/{UNIT}.d/90-no-restart.conf"
    for host in NODES:
        cluster.fleet.ssh(host, f"mkdir -p $(dirname {no_restart}) && printf '[Service]\\nRestart=no\\n' > {no_restart} && systemctl daemon-reload")
    reports = tmp_path / "reports"
    run = run_restart(run_playbook, cluster, reports)
    out = run.output
    assert run.returncode != 0, run
    # the worker joined (ready on its own evidence), then its raylet died during its soak, before node 0 served
    assert f"deployment dp (2 nodes: sim1, sim2) {UNIT}: FAIL (soak_failed)" in out
    assert "root cause: sim2 (node 1), soak_failed" in out and "[vllm-ray-subprocesses-exited]" in out
    assert "sim1 node 0: FAIL" in out and "health not probed (headless, no HTTP)" in out
    report = json.loads((reports / "dp.json").read_text())
    root = report["root_cause"]
    assert isinstance(root, dict) and root["host"] == "sim2"
    nodes = {node["host"]: node for node in report["nodes"]}
    assert nodes["sim1"]["verdict"] == "fail" and nodes["sim1"]["reason"] in ("peer_failed", "fatal_log")
