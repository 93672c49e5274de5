"""Multi-node deployments for real: playbooks/restart_sglang.yml against two deployments of two
systemd hosts each, whose simulators rendezvous over the test network.

dsr1 is sim1 (node 0) and sim2 (node 1); qwen is sim3 (node 0) and sim4 (node 1). Node 1 of each
connects to node 0's dist-init address; node 0 serves the API, node 1 a placeholder health server.
Every test starts from stopped hosts with the scenarios of a 2-node server (TP16), started once so
that the playbook has something to restart.
"""

from __future__ import annotations

import json
import shlex
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.figures import record
from tests.harness.fleet import Fleet
from tests.integration.conftest import QUICK, RunPlaybook

PLAYBOOK = "playbooks/restart_sglang.yml"
UNIT = "sglang.service"
LEASE = f"/var/lib/inferops/{UNIT}.lease"
DIST_PORT = 5000
FAST = {"SIM_SPEED": "0.15", "SIM_WARMUP_SECONDS": "1", "SIM_TP": "16", "SIM_NNODES": "2", "SIM_DIST_TIMEOUT": "30"}
DEPLOYMENTS = {"dsr1": ("sim1", "sim2"), "qwen": ("sim3", "sim4")}


class Topology:
    """The four hosts as two deployments: the inventory, the scenarios, the units' facts."""

    def __init__(self, fleet: Fleet, directory: Path) -> None:
        self.fleet = fleet
        self.directory = directory
        self.ranks = {host: rank for hosts in DEPLOYMENTS.values() for rank, host in enumerate(hosts)}
        self.node0 = {host: hosts[0] for hosts in DEPLOYMENTS.values() for host in hosts}
        self.inventory = self.write_inventory(self.ranks)

    def write_inventory(self, ranks: dict[str, int], name: str = "inventory.ini") -> Path:
        """The fleet's inventory with sglang_deployment and sglang_node_rank on every host."""
        lines = []
        for line in self.fleet.inventory.read_text().splitlines():
            host = line.split(" ", 1)[0]
            if host in ranks:
                deployment = next(name for name, hosts in DEPLOYMENTS.items() if host in hosts)
                line += f" sglang_deployment={deployment} sglang_node_rank={ranks[host]}"
            lines.append(line)
        path = self.directory / name
        path.write_text("\n".join(lines) + "\n")
        return path

    def scenario(self, host: str, **extra: str) -> None:
        address = self.fleet.address(self.node0[host])
        env = {**FAST, "SIM_NODE_RANK": str(self.ranks[host]), "SIM_DIST_INIT_ADDR": f"{address}:{DIST_PORT}", **extra}
        self.fleet.set_scenario(host, **env)

    def start_all(self, **scenarios: dict[str, str]) -> dict[str, str]:
        """Every node started (the ok scenario, or the host's in ``scenarios``) and ready; their InvocationIDs."""
        for host in self.ranks:
            self.scenario(host, **scenarios.get(host, {}))
            self.fleet.ssh(host, f"systemctl start --no-block {UNIT}")
        for host in self.ranks:
            ready = "The server is fired up" if self.ranks[host] == 0 else "Starting dummy health check server"
            self.fleet.ssh(host, f"timeout 60 sh -c 'until journalctl -u {UNIT} --no-pager | grep -q \"{ready}\"; do sleep 0.3; done'")
        return {host: self.invocation(host) for host in self.ranks}

    def invocation(self, host: str) -> str:
        return self.fleet.unit_property(host, "InvocationID")

    def monotonic(self, host: str, prop: str) -> int:
        """A ``*TimestampMonotonic`` of the unit: the kernel's clock, shared by the containers."""
        return int(self.fleet.unit_property(host, prop))


@pytest.fixture
def topology(fleet: Fleet, tmp_path: Path) -> Iterator[Topology]:
    assert len(fleet.hosts) >= 4, "needs 4 hosts (INFEROPS_FLEET_HOSTS)"
    for host in fleet.hosts:
        fleet.reset(host)
    yield Topology(fleet, tmp_path)
    for host in fleet.hosts:
        fleet.reset(host)


def deployment_report(reports: Path, name: str) -> dict[str, object]:
    return dict(json.loads((reports / f"{name}.json").read_text()))


def test_two_deployments_restart_one_after_the_other_and_pass(topology: Topology, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """Canary deployment first, then the second: every node stopped before any started, both nodes
    started within seconds, one PASS and one report (JSON, one JUnit test case) per deployment; the
    smoke test goes through node 0 only, and the other node passes on its own gates."""
    before = topology.start_all()
    reports = tmp_path / "reports"
    extra = {**QUICK, "sglang_restart_report_dir": str(reports), "sglang_restart_smoke_test": True}
    run = run_playbook(PLAYBOOK, extra_vars=extra, inventory=topology.inventory)
    assert run.returncode == 0, run
    out = run.output
    for name, (node0, node1) in DEPLOYMENTS.items():
        assert f"deployment {name} (2 nodes: {node0}, {node1}) {UNIT}: PASS (ready)" in out
        assert f"{node1} node 1: PASS (ready)" in out and "(placeholder, not counted)" in out
        assert "smoke_failed" not in out
        after = {host: topology.invocation(host) for host in (node0, node1)}
        assert all(after[host] != before[host] for host in after), (before, after)
        stopped = max(topology.monotonic(host, "InactiveEnterTimestampMonotonic") for host in after)
        started = [topology.monotonic(host, "ExecMainStartTimestampMonotonic") for host in after]
        assert stopped < min(started), "a node was started before every node of its deployment had stopped"
        spread = (max(started) - min(started)) / 1e6
        assert spread < 5, f"{name}: the nodes started {spread:.1f} s apart"
        record(f"multi-node: deployment {name}'s two nodes started {spread:.2f} s apart")

        report = deployment_report(reports, name)
        assert report["verdict"] == "pass" and report["root_cause"] is None
        nodes = {node["host"]: node for node in report["nodes"]}  # type: ignore[attr-defined]
        assert nodes[node1]["health"]["placeholder"] is True and nodes[node0]["health"]["status"] == 200
        assert {node["invocation_id"] for node in report["node_reports"]} == set(after.values())  # type: ignore[attr-defined]
        suites = ET.parse(reports / f"{name}.junit.xml").getroot()
        assert len(suites.findall("./testsuite/testcase")) == 1 and suites.get("failures") == "0"
        assert not (reports / f"{node0}.json").exists() and not (reports / f"{node1}.json").exists()
        assert topology.fleet.health(node0) == "200"
    # canary first: the second deployment was started only after the first passed
    first_started = max(topology.monotonic(host, "ExecMainStartTimestampMonotonic") for host in DEPLOYMENTS["dsr1"])
    assert min(topology.monotonic(host, "ExecMainStartTimestampMonotonic") for host in DEPLOYMENTS["qwen"]) > first_started + 2e6


def test_a_crash_on_node_1_fails_the_canary_deployment_fast_and_names_node_1(topology: Topology, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """Node 1 of the canary crashes while loading weights: the run fails within seconds of its fatal
    line, the report names node 1 and its line as the root cause and node 0's distributed error as a
    consequence, and the second deployment is never touched."""
    before = topology.start_all()
    # a start phase long enough that every node's wait follows its invocation before node 1 crashes, even on a
    # loaded machine (8 s was not: the waits began 11 s after the restart while both lanes ran): a crash before
    # that is restarted by systemd and the wait would watch the new invocation
    phases = {"SIM_START_SECONDS": "20", "SIM_LOAD_SECONDS": "3"}
    topology.scenario("sim2", SIM_SCENARIO="crash", SIM_PHASE="loading_weights", SIM_FAILURE="scheduler_exception", **phases)
    topology.scenario("sim1", **phases)
    # no automatic restart of either node: on a loaded machine systemd could restart one before its wait
    # reads its fatal line (node 1's, or node 0's consequence), and the wait would see a restart first
    no_restart = f"/etc/systemd/system/{UNIT}.d/90-no-restart.conf"
    for node in ("sim1", "sim2"):
        topology.fleet.ssh(node, f"mkdir -p $(dirname {no_restart}) && printf '[Service]\\nRestart=no\\n' > {no_restart} && systemctl daemon-reload")
    reports = tmp_path / "reports"
    run = run_playbook(PLAYBOOK, extra_vars={**QUICK, "sglang_restart_report_dir": str(reports)}, inventory=topology.inventory)
    out = run.output
    assert run.returncode != 0, run
    assert f"deployment dsr1 (2 nodes: sim1, sim2) {UNIT}: FAIL (fatal_log)" in out
    assert "root cause: sim2 (node 1), fatal_log" in out
    assert "KeyError: 'model.layers.61.mlp.experts.255.down_proj.weight_scale_inv'" in out

    report = deployment_report(reports, "dsr1")
    root = report["root_cause"]
    assert isinstance(root, dict) and root["host"] == "sim2" and "KeyError" in json.dumps(report["node_reports"][1]["fatal"])  # type: ignore[index]
    nodes = {node["host"]: node for node in report["nodes"]}  # type: ignore[attr-defined]
    consequence = nodes["sim1"]["first_fatal"]
    assert consequence and "Connection closed by peer" in consequence["message"], nodes["sim1"]
    assert nodes["sim1"]["after_root_cause"] > 0 and nodes["sim1"]["reason"] in ("peer_failed", "fatal_log")
    failure = ET.parse(reports / "dsr1.junit.xml").getroot().find("./testsuite/testcase/failure")
    assert failure is not None and failure.get("type") == "fatal_log" and "sim2 (node 1)" in (failure.get("message") or "")
    # the deployment's page (a bar per node) and the run's, beside the reports
    page = (reports / "dsr1.html").read_text()
    assert "root cause: sim2 (node 1), fatal_log" in page and page.count("<svg class='bar'") == 2
    assert len(list(reports.glob("restart-*.html"))) == 1

    # fast: every node's wait ended within seconds of node 1's fatal line (journal time)
    fatal_at = root["first_fatal"]["realtime"] / 1e6
    last_end = max(float(node["ended_at"]) for node in report["node_reports"])  # type: ignore[attr-defined]
    delay = last_end - fatal_at
    after = nodes["sim1"]["after_root_cause"]
    record(f"multi-node: node 1's crash failed the whole deployment {delay:.1f} s after its fatal line (node 0's own error came {after:.1f} s after it)")
    assert 0 < delay < 15

    # the second deployment: never touched
    assert {host: topology.invocation(host) for host in DEPLOYMENTS["qwen"]} == {host: before[host] for host in DEPLOYMENTS["qwen"]}
    assert "[sim3]" not in out and "[sim4]" not in out and not (reports / "qwen.json").exists()


def test_a_hang_on_node_1_fails_the_deployment_as_stalled_naming_node_1(topology: Topology, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """Node 1 stops making progress (alive, silent); node 0 goes on loading, then waits for it at the
    next collective. The stall limit fails node 1 first, and the deployment names it."""
    topology.start_all()
    # tqdm's updates reach the journal only with the bar's closing newline: after "Load weight begin" node 1's
    # journal stays silent (it hangs mid-bar), node 0's next line is its bar's end 9 s later, then it waits
    # for node 1 in silence. With a stall limit past those 9 s, node 1 stalls first whatever the machine's load.
    topology.scenario("sim2", SIM_SCENARIO="hang", SIM_PHASE="loading_weights", SIM_LOAD_SECONDS="10")
    topology.scenario("sim1", SIM_LOAD_SECONDS="10")
    reports = tmp_path / "reports"
    extra = {**QUICK, "sglang_restart_stall_limit": 12, "sglang_restart_report_dir": str(reports)}
    run = run_playbook(PLAYBOOK, extra_vars=extra, limit="sim1,sim2", inventory=topology.inventory)
    out = run.output
    assert run.returncode != 0, run
    assert f"deployment dsr1 (2 nodes: sim1, sim2) {UNIT}: FAIL (stalled)" in out
    assert "root cause: sim2 (node 1), stalled" in out, out[out.find("deployment dsr1 (2 nodes") :][:3000]
    report = deployment_report(reports, "dsr1")
    nodes = {node["host"]: node for node in report["nodes"]}  # type: ignore[attr-defined]
    assert "no progress in phase loading weights" in nodes["sim2"]["msg"]
    assert nodes["sim1"]["reason"] == "peer_failed" and "sim2 (node 1 of dsr1) failed (stalled)" in nodes["sim1"]["msg"]
    assert topology.fleet.unit_property("sim2", "ActiveState") == "active"  # hung, not dead


def test_a_topology_with_two_rank_0_hosts_is_refused_before_anything_restarts(topology: Topology, run_playbook: RunPlaybook) -> None:
    before = topology.start_all()
    inventory = topology.write_inventory({**topology.ranks, "sim2": 0}, "two-rank-0.ini")
    run = run_playbook(PLAYBOOK, extra_vars=QUICK, inventory=inventory)
    assert run.returncode != 0, run
    assert "Refusing the deployments before anything restarts: deployment dsr1: sim1 and sim2 all have node rank 0" in run.flat
    assert "Restart | Stop the unit" not in run.output
    assert {host: topology.invocation(host) for host in before} == before


def test_a_change_to_deploy_on_a_deployment_is_refused_before_anything_restarts(topology: Topology, run_playbook: RunPlaybook) -> None:
    before = topology.start_all()
    change = {"sglang_restart_dropin_content": "[Service]\nEnvironment=SIM_SPEED=0.2\n"}
    run = run_playbook(PLAYBOOK, extra_vars={**QUICK, **change}, inventory=topology.inventory)
    assert run.returncode != 0, run
    assert "sglang_restart_dropin_content given for a node of the multi-node deployment dsr1" in run.flat
    assert "Restart | Stop the unit" not in run.output and "Deploy |" not in run.output
    assert {host: topology.invocation(host) for host in before} == before


def test_the_precheck_checks_node_0_with_the_full_gates_and_the_other_nodes_with_theirs(topology: Topology, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """dsr1 is healthy; qwen's node 0 answers health 503 while its node 1's placeholder answers 200:
    dsr1 passes, qwen fails as one deployment naming node 0, and nothing is restarted."""
    before = topology.start_all(sim3={"SIM_SCENARIO": "health_503"})
    reports = tmp_path / "reports"
    run = run_playbook("playbooks/precheck_sglang.yml", extra_vars={"sglang_precheck_report_dir": str(reports)}, inventory=topology.inventory)
    out = run.output
    assert run.returncode != 0, run
    assert f"deployment dsr1 (2 nodes: sim1, sim2) {UNIT}: precheck PASS (ready)" in out
    assert f"deployment qwen (2 nodes: sim3, sim4) {UNIT}: precheck FAIL (health_failed)" in out
    assert "root cause: sim3 (node 0), health_failed" in out
    assert "sim4 node 1: PASS (ready), ready, health 200 (placeholder, not counted)" in out
    qwen = json.loads((reports / "qwen.precheck.json").read_text())
    nodes = {node["host"]: node for node in qwen["nodes"]}
    assert qwen["verdict"] == "fail" and nodes["sim4"]["verdict"] == "pass" and nodes["sim4"]["health"]["status"] == 200
    assert json.loads((reports / "dsr1.precheck.json").read_text())["verdict"] == "pass"
    assert len(ET.parse(reports / "qwen.precheck.junit.xml").getroot().findall("./testsuite/testcase")) == 1
    assert not (reports / "sim3.precheck.json").exists()
    assert {host: topology.invocation(host) for host in before} == before


def test_a_node_whose_unit_is_missing_stops_its_deployment_at_the_preflight(topology: Topology, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """dsr1's node 1 names a unit that does not exist: it fails its preflight, node 0 stops at the
    preflight gate, and nothing is stopped on any node of either deployment."""
    before = topology.start_all()
    inventory = tmp_path / "missing-unit.ini"
    lines = topology.inventory.read_text().splitlines()
    inventory.write_text("\n".join(line + " sglang_restart_unit=no-such-server.service" if line.startswith("sim2 ") else line for line in lines) + "\n")
    run = run_playbook(PLAYBOOK, extra_vars=QUICK, inventory=inventory)
    assert run.returncode != 0, run
    assert "Deployment dsr1: sim2 did not get through the preflight step, so nothing more is done on sim1 (node 0)" in run.flat
    assert {host: topology.invocation(host) for host in before} == before


def test_a_deployment_one_of_whose_nodes_another_run_holds_is_refused_whole(topology: Topology, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """dsr1's node 1 is held by a live run from another controller (its lease, a fresh heartbeat): the
    deployment is refused whole, naming the holder; no node of it (nor of the second deployment) is
    stopped, node 0's own lease is released at the end, and the other run's lease is left as it was."""
    before = topology.start_all()
    now = time.time()  # the test hosts share this machine's clock
    other = {
        "version": 1,
        "unit": UNIT,
        "run_id": "20261206T000000Z-777",
        "controller": "awx-node-7",
        "pid": 4242,
        "user": "ops",
        "awx_job_id": 91,
        "playbook": "Restart SGLang servers",
        "taken_at": round(now - 30, 3),
        "heartbeat_at": round(now, 3),
    }
    held = json.dumps(other, sort_keys=True)
    topology.fleet.ssh("sim2", f"mkdir -p /var/lib/inferops && printf '%s\\n' {shlex.quote(held)} > {LEASE}")
    reports = tmp_path / "reports"
    run = run_playbook(PLAYBOOK, extra_vars={**QUICK, "sglang_restart_report_dir": str(reports)}, inventory=topology.inventory)
    assert run.returncode != 0, run
    assert f"sim2 {UNIT} is held by another run: run 20261206T000000Z-777 from ops@awx-node-7 (process 4242), AWX job 91" in run.flat
    assert "Deployment dsr1: sim2 did not get through the preflight step, so nothing more is done on sim1 (node 0)" in run.flat
    assert {host: topology.invocation(host) for host in before} == before
    assert json.loads(topology.fleet.ssh("sim2", f"cat {LEASE}").stdout) == other
    for host in ("sim1", "sim3", "sim4"):
        assert topology.fleet.ssh(host, f"test -e {LEASE}", check=False).returncode != 0, f"{host} is left leased"
    report = deployment_report(reports, "dsr1")
    assert report["verdict"] == "fail", report
    root = report["root_cause"]
    assert isinstance(root, dict) and root["host"] == "sim2" and root["reason"] == "host_held", root
    assert not (reports / "qwen.json").exists()
