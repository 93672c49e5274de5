"""inferops.runbooks.journal_scan on a real journal: the invocation's verdict, cursors, check mode."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tests.harness.fleet import Fleet
from tests.integration.conftest import RunPlaybook

PLAYBOOK = Path(__file__).parent / "playbooks" / "journal_scan.yml"
FAST = {"SIM_SPEED": "0.15", "SIM_WARMUP_SECONDS": "1", "SIM_TP": "8"}


def start(fleet: Fleet, host: str, done: str, **scenario: str) -> str:
    """Restart the simulator with a scenario, wait until ``done`` holds, return the InvocationID."""
    fleet.set_scenario(host, **FAST, **scenario)
    fleet.ssh(host, "systemctl restart sglang.service")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if done == "healthy" and fleet.health(host) == "200":
            return fleet.unit_property(host, "InvocationID")
        if done == "failed" and fleet.unit_property(host, "ActiveState") == "failed":
            return fleet.unit_property(host, "InvocationID")
        time.sleep(0.5)
    raise AssertionError(f"{host}: the simulator was not {done} within 60 s")


def scan(run_playbook: RunPlaybook, host: str, tmp_path: Path) -> dict[str, Any]:
    result_file = tmp_path / "scan.json"
    run = run_playbook(PLAYBOOK, limit=host, extra_vars={"result_file": str(result_file)})
    assert run.returncode == 0, run
    results: dict[str, Any] = json.loads(result_file.read_text())
    return results


def test_scan_of_a_ready_invocation_passes_and_continues_from_its_cursor(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    invocation = start(fleet, host, "healthy")
    results = scan(run_playbook, host, tmp_path)
    whole, after, check = results["whole"], results["after"], results["check"]
    assert whole["invocation_id"] == invocation
    assert whole["verdict"] == "pass" and whole["phase"] == "ready"
    assert not whole["changed"]
    walk = [event for event in whole["allowlisted"] if event["rule"] == "sglang-cute-dsl-package-walk"]
    assert walk[0]["count"] == 8 and len(walk[0]["ranks"]) == 8
    assert len(whole["last_lines"]) == 5
    assert whole["cursor"]
    # the second scan reads only what came after the cursor (the health checks' access lines, if any)
    assert after["lines"] >= whole["lines"]
    assert after["counts"].get("ready", 0) == 0 and after["allowlisted"] == []
    # check mode reads the same invocation and changes nothing
    assert check["verdict"] == "pass" and check["invocation_id"] == invocation and not check["changed"]


def test_scan_of_a_crashed_invocation_fails_with_the_traceback(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    fleet.ssh(
        host, "mkdir -p /run/systemd/system/sglang.service.d && printf '[Service]\\nRestart=no\\n' > /run/systemd/system/sglang.service.d/no-restart.conf"
    )
    fleet.ssh(host, "systemctl daemon-reload")
    try:
        invocation = start(fleet, host, "failed", SIM_SCENARIO="crash", SIM_PHASE="loading_weights", SIM_FAILURE="cuda_oom")
        whole = scan(run_playbook, host, tmp_path)["whole"]
    finally:
        fleet.ssh(host, "rm -f /run/systemd/system/sglang.service.d/no-restart.conf && systemctl daemon-reload")
    assert whole["invocation_id"] == invocation
    assert whole["verdict"] == "fail"
    first = whole["fatal"][0]
    assert first["message"].startswith("torch.OutOfMemoryError: CUDA out of memory")
    assert first["context"] == "Scheduler hit an exception"
    assert first["traceback"][-1].startswith("torch.OutOfMemoryError")
    assert any("sigquit" in event["message"] for event in whole["fatal"])


PROBE_GREP = Path(__file__).parent / "playbooks" / "probe_grep.yml"
# what a report says of the journal: the same whichever way it was read
REPORT_KEYS = ("verdict", "reason", "ready", "ready_line", "phase", "phases", "progress", "fatal", "allowlisted", "unrecognized", "counts", "blob_lines")


def probe_four_ways(run_playbook: RunPlaybook, host: str, tmp_path: Path) -> dict[str, Any]:
    result_file = tmp_path / "probes.json"
    run = run_playbook(PROBE_GREP, limit=host, extra_vars={"result_file": str(result_file)})
    assert run.returncode == 0, run
    results: dict[str, Any] = json.loads(result_file.read_text())
    return results


def same_report(one: dict[str, Any], other: dict[str, Any]) -> None:
    for key in REPORT_KEYS:
        assert one[key] == other[key], key


def test_the_grep_read_gives_the_full_reads_report_on_a_real_journal(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """A ready start (CUTE_DSL warnings on 8 ranks, tqdm bars, access lines): journalctl --grep hands
    over fewer records and the report is the full read's; the state kept is taken up by the next read."""
    start(fleet, host, "healthy")
    probes = probe_four_ways(run_playbook, host, tmp_path)
    full, grep, first, second = probes["full"], probes["grep"], probes["first"], probes["second"]
    assert full["verdict"] == "pass" and full["reading"]["grep"] is False
    assert grep["reading"]["grep"] is True and grep["reading"]["fallback"] is None
    assert grep["reading"]["records_read"] < full["reading"]["records_read"]
    same_report(grep, full)
    assert grep["lines"] <= first["lines"] and first["reading"]["state_saved"]
    assert second["reading"]["resumed_at"] == first["lines"] and second["reading"]["records_read"] <= second["lines"] - first["lines"]
    assert second["verdict"] == "pass" and second["ready_line"] == full["ready_line"] and second["phases"] == full["phases"]
    if grep["lines"] == full["lines"]:
        assert grep["tail"] == full["tail"] and len(grep["tail"]) == 20


def test_the_grep_read_keeps_a_traceback_whole(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """A crash during weight loading: the traceback's frames hold no searched word, they are read by
    cursor after its first line, and the fatal event is the full read's."""
    fleet.ssh(
        host, "mkdir -p /run/systemd/system/sglang.service.d && printf '[Service]\\nRestart=no\\n' > /run/systemd/system/sglang.service.d/no-restart.conf"
    )
    fleet.ssh(host, "systemctl daemon-reload")
    try:
        start(fleet, host, "failed", SIM_SCENARIO="crash", SIM_PHASE="loading_weights", SIM_FAILURE="cuda_oom")
        probes = probe_four_ways(run_playbook, host, tmp_path)
    finally:
        fleet.ssh(host, "rm -f /run/systemd/system/sglang.service.d/no-restart.conf && systemctl daemon-reload")
    full, grep = probes["full"], probes["grep"]
    assert full["verdict"] == "fail" and grep["reading"]["grep"] is True
    same_report(grep, full)
    assert grep["fatal"][0]["traceback"] == full["fatal"][0]["traceback"] and len(full["fatal"][0]["traceback"]) > 3
