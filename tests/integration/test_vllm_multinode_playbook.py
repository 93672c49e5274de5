"""vLLM data parallel over nodes for real: playbooks/restart_vllm.yml against one deployment of two
systemd hosts, whose simulators (vllm.service, SIM_ENGINE=vllm) hand shake over the test network.

dp is sim1 (node 0: ``vllm serve ... --data-parallel-address --data-parallel-rpc-port``, the API
server on port 8000) and sim2 (node 1: ``--headless``, no HTTP at all). Every test starts from
stopped hosts with the scenarios of the deployment, started once so that the playbook has
something to restart.
"""

from __future__ import annotations

import json
import typing as t
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.fleet import Fleet
from tests.integration.conftest import QUICK, RunPlaybook

PLAYBOOK = "playbooks/restart_vllm.yml"
UNIT = "vllm.service"
SCENARIO_FILE = "/etc/vllm-sim/scenario.env"
HEALTH = "http://127.0.0.1:8000/health"
RPC_PORT = 13345
FAST = {"SIM_SPEED": "0.15", "SIM_WARMUP_SECONDS": "1", "SIM_TP": "4", "SIM_NNODES": "2", "SIM_DIST_TIMEOUT": "30"}
NODES = ("sim1", "sim2")
CLEAR = f"systemctl stop {UNIT}; systemctl reset-failed {UNIT} 2>/dev/null; rm -rf {SCENARIO_FILE} /etc/systemd/system/{UNIT}.d; systemctl daemon-reload; true"


class Deployment:
    """The two hosts as the vLLM deployment dp: the inventory, the scenarios, the units' facts."""

    def __init__(self, fleet: Fleet, directory: Path) -> None:
        self.fleet = fleet
        lines = []
        for line in fleet.inventory.read_text().splitlines():
            host = line.split(" ", 1)[0]
            if host in NODES:
                line += f" sglang_deployment=dp sglang_node_rank={NODES.index(host)}"
            lines.append(line)
        self.inventory = directory / "inventory.ini"
        self.inventory.write_text("\n".join(lines) + "\n")

    def scenario(self, host: str, **extra: str) -> None:
        env = {**FAST, "SIM_NODE_RANK": str(NODES.index(host)), "SIM_DIST_INIT_ADDR": f"{self.fleet.address('sim1')}:{RPC_PORT}", **extra}
        text = "".join(f"{key}={value}\\n" for key, value in env.items())
        self.fleet.ssh(host, f"mkdir -p /etc/vllm-sim && printf '{text}' > {SCENARIO_FILE}")

    def start_all(self) -> dict[str, str]:
        """Both nodes started and ready (node 0's API up, node 1's engines ready); their InvocationIDs."""
        for host in NODES:
            self.scenario(host)
            self.fleet.ssh(host, f"systemctl start --no-block {UNIT}")
        for host, ready in zip(NODES, ("Application startup complete", "init engine (profile")):
            self.fleet.ssh(host, f"timeout 60 sh -c 'until journalctl -u {UNIT} --no-pager | grep -q \"{ready}\"; do sleep 0.3; done'")
        return {host: self.invocation(host) for host in NODES}

    def invocation(self, host: str) -> str:
        return self.fleet.unit_property(host, "InvocationID", unit=UNIT)

    def monotonic(self, host: str, prop: str) -> int:
        return int(self.fleet.unit_property(host, prop, unit=UNIT))


@pytest.fixture
def deployment(fleet: Fleet, tmp_path: Path) -> Iterator[Deployment]:
    assert len(fleet.hosts) >= 2, "needs 2 hosts (INFEROPS_FLEET_HOSTS)"
    for host in NODES:
        fleet.reset(host)
        fleet.ssh(host, CLEAR)
    yield Deployment(fleet, tmp_path)
    for host in NODES:
        fleet.ssh(host, CLEAR)
        fleet.reset(host)


def run_restart(run_playbook: RunPlaybook, deployment: Deployment, reports: Path, **extra: object) -> t.Any:
    extra_vars = {**QUICK, "vllm_hosts": ",".join(NODES), "sglang_restart_report_dir": str(reports), **extra}
    return run_playbook(PLAYBOOK, extra_vars=extra_vars, inventory=deployment.inventory)


def test_the_deployment_restarts_as_one_and_passes_with_its_headless_node_never_probed(
    deployment: Deployment, run_playbook: RunPlaybook, tmp_path: Path
) -> None:
    before = deployment.start_all()
    reports = tmp_path / "reports"
    run = run_restart(run_playbook, deployment, reports)
    assert run.returncode == 0, run
    out = run.output
    assert f"deployment dp (2 nodes: sim1, sim2) {UNIT}: PASS (ready)" in out
    assert "sim2 node 1: PASS (ready)" in out and "health not probed (headless, no HTTP)" in out
    after = {host: deployment.invocation(host) for host in NODES}
    assert all(after[host] != before[host] for host in NODES), (before, after)
    stopped = max(deployment.monotonic(host, "InactiveEnterTimestampMonotonic") for host in NODES)
    assert stopped < min(deployment.monotonic(host, "ExecMainStartTimestampMonotonic") for host in NODES)

    report = json.loads((reports / "dp.json").read_text())
    assert report["verdict"] == "pass" and report["root_cause"] is None
    nodes = {node["host"]: node for node in report["nodes"]}
    assert nodes["sim2"]["health"]["headless"] is True and nodes["sim2"]["health"]["history"] == []
    assert nodes["sim1"]["health"]["status"] == 200
    assert {node["invocation_id"] for node in report["node_reports"]} == set(after.values())
    assert deployment.fleet.health("sim1", url=HEALTH) == "200" and deployment.fleet.health("sim2", url=HEALTH) == "down"
    assert ET.parse(reports / "dp.junit.xml").getroot().get("failures") == "0"


def test_a_headless_node_that_crashes_fails_the_deployment_whole_with_its_evidence(deployment: Deployment, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    deployment.start_all()
    phases = {"SIM_START_SECONDS": "20", "SIM_LOAD_SECONDS": "3"}
    deployment.scenario("sim2", SIM_SCENARIO="crash", SIM_PHASE="loading_weights", SIM_FAILURE="cuda_oom", **phases)
    deployment.scenario("sim1", **phases)
    no_restart = f"/etc/systemd/system/{UNIT}.d/90-no-restart.conf"
    for host in NODES:
        deployment.fleet.ssh(host, f"mkdir -p $(dirname {no_restart}) && printf '[Service]\\nRestart=no\\n' > {no_restart} && systemctl daemon-reload")
    reports = tmp_path / "reports"
    run = run_restart(run_playbook, deployment, reports)
    out = run.output
    assert run.returncode != 0, run
    assert f"deployment dp (2 nodes: sim1, sim2) {UNIT}: FAIL (fatal_log)" in out
    # the headless node's own evidence (its worker's, then its engine core's line), node 0's consequence after it
    assert "root cause: sim2 (node 1), fatal_log" in out and "WorkerProc failed to start." in out
    assert "health not probed (headless, no HTTP)" in out

    report = json.loads((reports / "dp.json").read_text())
    root = report["root_cause"]
    assert isinstance(root, dict) and root["host"] == "sim2"
    nodes = {node["host"]: node for node in report["nodes"]}
    assert nodes["sim1"]["verdict"] == "fail" and nodes["sim1"]["reason"] in ("peer_failed", "fatal_log")
    assert nodes["sim1"]["reason"] == "fatal_log" or "sim2 (node 1 of dp) failed (fatal_log)" in nodes["sim1"]["msg"]
    consequence = nodes["sim1"]["first_fatal"]
    assert consequence and "EngineCore encountered a fatal error." in consequence["message"], nodes["sim1"]
    assert nodes["sim1"]["after_root_cause"] > 0
    assert "EngineCore failed to start." in json.dumps(report["node_reports"][1]["fatal"])
    failure = ET.parse(reports / "dp.junit.xml").getroot().find("./testsuite/testcase/failure")
    assert failure is not None and failure.get("type") == "fatal_log" and "sim2 (node 1)" in (failure.get("message") or "")
    # fast: every node's wait ended within seconds of node 1's fatal line
    fatal_at = root["first_fatal"]["realtime"] / 1e6
    assert 0 < max(float(node["ended_at"]) for node in report["node_reports"]) - fatal_at < 15


def test_the_precheck_judges_the_headless_node_from_its_unit_and_journal_and_node_0_from_its_health(
    deployment: Deployment, run_playbook: RunPlaybook, tmp_path: Path
) -> None:
    """precheck_vllm.yml: node 0 with its health and one token, the headless node from its unit and
    journal (never probed: nothing listens); then the headless node stopped fails the deployment."""
    before = deployment.start_all()
    reports = tmp_path / "reports"
    extra_vars = {"vllm_hosts": ",".join(NODES), "sglang_precheck_report_dir": str(reports)}
    run = run_playbook("playbooks/precheck_vllm.yml", extra_vars=extra_vars, inventory=deployment.inventory)
    out = run.output
    assert run.returncode == 0, run
    assert f"deployment dp (2 nodes: sim1, sim2) {UNIT}: precheck PASS (ready)" in out
    assert "sim2 node 1: PASS (ready)" in out and "health not probed (headless, no HTTP)" in out
    report = json.loads((reports / "dp.precheck.json").read_text())
    nodes = {node["host"]: node for node in report["nodes"]}
    assert nodes["sim2"]["health"]["headless"] is True and nodes["sim1"]["health"]["status"] == 200
    assert {host: deployment.invocation(host) for host in NODES} == before

    deployment.fleet.ssh("sim2", f"systemctl stop {UNIT}")
    run = run_playbook("playbooks/precheck_vllm.yml", extra_vars=extra_vars, inventory=deployment.inventory)
    assert run.returncode != 0, run
    assert f"deployment dp (2 nodes: sim1, sim2) {UNIT}: precheck FAIL" in run.output
    nodes = {node["host"]: node for node in json.loads((reports / "dp.precheck.json").read_text())["nodes"]}
    assert nodes["sim2"]["verdict"] == "fail" and nodes["sim2"]["health"].get("status") is None
