"""scripts/predeploy_gate.py for real: ansible_runner.run() of the precheck and of the restart against
the test hosts, the set_stats artifacts collected into one JSON summary and one JUnit file, and the
JMESPath policy deciding, including policies that fail."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.fleet import Fleet
from tests.integration.conftest import REPO

GATE = REPO / "scripts" / "predeploy_gate.py"
UNIT = "sglang.service"
FAST = {"SIM_SPEED": "0.15", "SIM_WARMUP_SECONDS": "1"}
NO_UNRECOGNIZED = "length(hosts[?verdict == 'fail']) == `0` && length(hosts[?unrecognized > `0`]) == `0`"


@pytest.fixture
def pair(fleet: Fleet) -> Iterator[list[str]]:
    hosts = fleet.hosts[:2]
    assert len(hosts) == 2, "needs 2 hosts"
    for host in hosts:
        fleet.reset(host)
    yield hosts
    for host in hosts:
        fleet.reset(host)


def serve(fleet: Fleet, host: str, **scenario: str) -> None:
    """Start the simulated server and wait until it answers health (its start is over)."""
    fleet.set_scenario(host, **FAST, **scenario)
    fleet.ssh(host, f"systemctl restart {UNIT}")
    deadline = time.monotonic() + 60
    while fleet.health(host) != "200":
        assert time.monotonic() < deadline, f"{host}: not serving after 60 s"
        time.sleep(0.5)


def gate(fleet: Fleet, out: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], ET.Element]:
    summary, junit = out / "gate.json", out / "gate.junit.xml"
    summary.unlink(missing_ok=True)
    cmd = [sys.executable, str(GATE), "-i", str(fleet.inventory), "--summary", str(summary), "--junit", str(junit), *args]
    run = subprocess.run(cmd, cwd=out, env=fleet.ansible_env(), capture_output=True, text=True, timeout=300, check=False)
    assert summary.is_file(), run.stdout[-4000:] + run.stderr[-2000:]
    return run, json.loads(summary.read_text()), ET.parse(junit).getroot()


def test_precheck_gate_passes_then_a_stricter_policy_fails(fleet: Fleet, pair: list[str], tmp_path: Path) -> None:
    clean, noisy = pair
    serve(fleet, clean)
    serve(fleet, noisy, SIM_SCENARIO="unknown_error")

    run, summary, junit = gate(fleet, tmp_path, "--limit", ",".join(pair))
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "PLAY [Check SGLang servers before a deploy (read-only)]" in run.stdout  # streamed as it ran
    assert run.stdout.strip().splitlines()[-1].startswith("predeploy_gate: PASS")
    reports = {h["host"]: h for h in summary["hosts"]}
    assert set(reports) == set(pair) and summary["counts"] == {"pass": 2}
    assert reports[clean]["unrecognized"] == 0 and reports[noisy]["unrecognized"] == 1
    assert reports[noisy]["invocation_id"] == fleet.unit_property(noisy, "InvocationID")
    assert junit.get("tests") == "3" and junit.get("failures") == "0"

    # the same run under a policy that allows no unrecognized line anywhere
    run, summary, junit = gate(fleet, tmp_path, "--limit", ",".join(pair), "--policy", NO_UNRECOGNIZED)
    assert run.returncode == 1, run.stdout[-4000:] + run.stderr[-2000:]
    last = run.stdout.strip().splitlines()[-1]
    assert last.startswith(f"predeploy_gate: FAIL - policy failed: {NO_UNRECOGNIZED} evaluated to false"), last
    assert summary["gate"]["passed"] is False
    policy = junit.find("./testsuite/testcase[@name='policy']/failure")
    assert policy is not None and policy.get("type") == "policy"


def test_restart_gate_fails_with_the_evidence(fleet: Fleet, pair: list[str], tmp_path: Path) -> None:
    host = pair[0]
    serve(fleet, host)
    fleet.set_scenario(host, **FAST, SIM_SCENARIO="crash", SIM_PHASE="loading_weights", SIM_FAILURE="cuda_oom")
    quick = ["-e", "sglang_restart_poll_interval=1", "-e", "sglang_restart_budget=120", "-e", "sglang_restart_release_timeout=30"]
    run, summary, junit = gate(fleet, tmp_path, "--playbook", "restart_sglang", "--limit", host, *quick)
    assert run.returncode == 1, run.stdout[-4000:] + run.stderr[-2000:]
    assert "CUDA out of memory" in run.stdout
    [report] = summary["hosts"]
    assert (report["host"], report["kind"], report["verdict"], report["reason"]) == (host, "sglang_restart", "fail", "fatal_log")
    assert report["fatal"] >= 1
    failure = junit.find(f"./testsuite/testcase[@name='{host}']/failure")
    assert failure is not None and failure.get("type") == "fatal_log"
    assert "hosts not passing: " + f"{host} fail (fatal_log)" in run.stdout
