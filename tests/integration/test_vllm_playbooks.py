"""playbooks/restart_vllm.yml and precheck_vllm.yml for real, against the simulator's vLLM mode:
vllm.service (tests/harness/simulator/vllm.service), port 8000, /health, vLLM's log lines. The
playbooks' own defaults find it; nothing but the host and the short timings is given."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.fleet import Fleet
from tests.integration.conftest import QUICK, RunPlaybook

UNIT = "vllm.service"
SCENARIO_FILE = "/etc/vllm-sim/scenario.env"


@pytest.fixture
def host(fleet: Fleet) -> Iterator[str]:
    """The first host with both simulated servers stopped, their failed state and scenarios cleared."""
    name = fleet.hosts[0]
    clear = f"systemctl stop {UNIT}; systemctl reset-failed {UNIT} 2>/dev/null; rm -f {SCENARIO_FILE}; true"
    fleet.reset(name)
    fleet.ssh(name, clear)
    yield name
    fleet.ssh(name, clear)


def test_restart_and_precheck_vllm_by_name(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    fleet.ssh(host, f"mkdir -p /etc/vllm-sim && printf 'SIM_SPEED=0.15\\nSIM_WARMUP_SECONDS=1\\n' > {SCENARIO_FILE} && systemctl start {UNIT}")
    before = fleet.unit_property(host, "InvocationID", unit=UNIT)

    restart = run_playbook("playbooks/restart_vllm.yml", extra_vars={**QUICK, "vllm_hosts": host, "sglang_restart_report_dir": str(tmp_path)})
    assert restart.returncode == 0, restart
    assert f"{host} {UNIT}: PASS (ready)" in restart.output
    after = fleet.unit_property(host, "InvocationID", unit=UNIT)
    assert after != before
    assert fleet.health(host, url="http://127.0.0.1:8000/health") == "200"
    report = json.loads((tmp_path / f"{host}.json").read_text())
    assert (report["verdict"], report["unit"], report["engine"], report["invocation_id"]) == ("pass", UNIT, "vllm", after)
    assert report["fatal"] == []
    # vLLM's own lines were classified with vLLM's rules
    assert any(event["rule"].startswith("vllm-") for event in report["allowlisted"]), report["allowlisted"]

    precheck = run_playbook("playbooks/precheck_vllm.yml", extra_vars={"vllm_hosts": host, "sglang_precheck_report_dir": str(tmp_path)})
    assert precheck.returncode == 0, precheck
    checked = json.loads((tmp_path / f"{host}.precheck.json").read_text())
    assert (checked["verdict"], checked["unit"], checked["invocation_id"]) == ("pass", UNIT, after)
    # vLLM's check generates one token by default (its /health does not generate)
    assert checked["smoke_test"]["enabled"] and checked["smoke_test"]["passed"] is True, checked["smoke_test"]
    assert fleet.unit_property(host, "InvocationID", unit=UNIT) == after
    # the SGLang unit next to it was never started
    assert fleet.unit_property(host, "ActiveState") == "inactive"


DRAIN_DROPIN = "/etc/systemd/system/vllm.service.d/drain.conf"


def test_the_preflight_warns_when_the_stop_would_cut_vllms_drain_short(fleet: Fleet, host: str, run_playbook: RunPlaybook) -> None:
    """vllm.service stops within TimeoutStopSec=20 (the unit's); a command line that asks vLLM to drain its
    running requests for 60 s on a stop is warned about, with the TimeoutStopSec to set, and the restart goes on."""
    command = "/usr/bin/python3 -u /opt/sglang-sim/sglang_sim.py --shutdown-timeout 60"
    dropin = f"[Service]\\nExecStart=\\nExecStart={command}\\n"
    fleet.ssh(host, f"mkdir -p {Path(DRAIN_DROPIN).parent} && printf '{dropin}' > {DRAIN_DROPIN} && systemctl daemon-reload")
    try:
        fleet.ssh(host, f"mkdir -p /etc/vllm-sim && printf 'SIM_SPEED=0.15\\nSIM_WARMUP_SECONDS=1\\n' > {SCENARIO_FILE} && systemctl start {UNIT}")
        restart = run_playbook("playbooks/restart_vllm.yml", extra_vars={**QUICK, "vllm_hosts": host})
        assert restart.returncode == 0, restart
        assert "--shutdown-timeout 60" in restart.output and "TimeoutStopSec=20s" in restart.output, restart.output
        assert "TimeoutStopSec=75" in restart.output, restart.output
    finally:
        fleet.ssh(host, f"rm -f {DRAIN_DROPIN} && systemctl daemon-reload")
