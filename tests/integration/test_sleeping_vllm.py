"""A vLLM in sleep mode, for real on the test fleet: the simulator's vllm.service with its sleep mode
(SIM_SLEEP_MODE, as --enable-sleep-mode with VLLM_SERVER_DEV_MODE=1) and an API key, put to sleep with
POST /sleep. The precheck reports it as sleeping without waking it (no generation: it stays asleep and
its journal holds no wake-up), passes by default and fails with sglang_precheck_sleeping=fail; a
restart says the server slept and gates the new start as usual."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.fleet import Fleet
from tests.integration.conftest import QUICK, RunPlaybook, flat

UNIT = "vllm.service"
SCENARIO_FILE = "/etc/vllm-sim/scenario.env"
API_KEY = "sk-inferops-sleep-4c1d"
BASE = "http://127.0.0.1:8000"


@pytest.fixture
def host(fleet: Fleet) -> Iterator[str]:
    name = fleet.hosts[0]
    clear = f"systemctl stop {UNIT}; systemctl reset-failed {UNIT} 2>/dev/null; rm -f {SCENARIO_FILE}; true"
    fleet.reset(name)
    fleet.ssh(name, clear)
    yield name
    fleet.ssh(name, clear)


def call(fleet: Fleet, host: str, method: str, path: str) -> str:
    """One request to the server inside the host: its status and body."""
    code = (
        "import urllib.request as u\n"
        f"r = u.urlopen(u.Request({BASE + path!r}, method={method!r}, data=b'' if {method!r} == 'POST' else None), timeout=30)\n"
        "print(r.status, r.read().decode())"
    )
    return fleet.ssh(host, f"python3 -c {shlex.quote(code)}").stdout.strip()


def journal(fleet: Fleet, host: str) -> str:
    return fleet.ssh(host, f"journalctl -u {UNIT} --no-pager -o cat").stdout


def start_asleep(fleet: Fleet, host: str) -> None:
    env = f"SIM_SPEED=0.15\\nSIM_WARMUP_SECONDS=1\\nSIM_SLEEP_MODE=1\\nSIM_API_KEY={API_KEY}\\n"
    fleet.ssh(host, f"mkdir -p /etc/vllm-sim && printf '{env}' > {SCENARIO_FILE} && systemctl start {UNIT}")
    ready = "python3 -c 'import urllib.request as u; u.urlopen(\"http://127.0.0.1:8000/health\", timeout=5)'"
    fleet.wait_for(host, ready, timeout=60)
    assert call(fleet, host, "POST", "/sleep") == "200"
    assert call(fleet, host, "GET", "/is_sleeping") == '200 {"is_sleeping": true}'


def test_a_sleeping_vllm_is_reported_as_sleeping_and_not_woken(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    start_asleep(fleet, host)
    given = {"vllm_hosts": host, "sglang_precheck_report_dir": str(tmp_path), "sglang_precheck_api_key": API_KEY}
    precheck = run_playbook("playbooks/precheck_vllm.yml", extra_vars=given)
    assert precheck.returncode == 0, precheck
    report = json.loads((tmp_path / f"{host}.precheck.json").read_text())
    assert (report["verdict"], report["reason"]) == ("pass", "sleeping"), report["msg"]
    assert "and asleep (vLLM sleep mode" in report["msg"] and report["sleep"]["sleeping"] is True
    # vLLM's check generates one token by default: not while it sleeps
    assert report["smoke_test"]["passed"] is None, report["smoke_test"]
    assert call(fleet, host, "GET", "/is_sleeping") == '200 {"is_sleeping": true}'
    assert "wake up the engine" not in journal(fleet, host) and "POST /v1/completions" not in journal(fleet, host)
    assert API_KEY not in precheck.output

    # a pipeline that needs the server awake: the same state fails it, with the same reason
    strict = run_playbook("playbooks/precheck_vllm.yml", extra_vars={**given, "sglang_precheck_sleeping": "fail"})
    assert strict.returncode != 0, strict
    assert json.loads((tmp_path / f"{host}.precheck.json").read_text())["reason"] == "sleeping"
    assert call(fleet, host, "GET", "/is_sleeping") == '200 {"is_sleeping": true}'


def test_a_restart_of_a_sleeping_vllm_says_so_and_gates_as_usual(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    start_asleep(fleet, host)
    given = {**QUICK, "vllm_hosts": host, "sglang_restart_report_dir": str(tmp_path), "sglang_restart_api_key": API_KEY}
    restart = run_playbook("playbooks/restart_vllm.yml", extra_vars=given)
    assert restart.returncode == 0, restart
    out = flat(restart.output)
    assert f"{host}: {UNIT} was asleep (vLLM sleep mode) before the restart; the new start is gated as usual" in out
    assert f"{host} {UNIT}: PASS (ready)" in out
    report = json.loads((tmp_path / f"{host}.json").read_text())
    assert report["sleep_before"]["sleeping"] is True and report["smoke_test"]["passed"] is True
    assert call(fleet, host, "GET", "/is_sleeping") == '200 {"is_sleeping": false}'
