"""A stop that leaves an engine process behind, for real: the simulator's unit with ``KillMode=process``
and an engine process (SIM_ORPHAN_SECONDS) that ignores SIGTERM and outlives the main process. The
restart waits for it, kills it when it does not go, says so in its progress line and its report, and
the new start passes. No nvidia-smi is installed on the test hosts: the GPU check's parsing and
decision are unit tests on nvidia-smi's formats (tests/unit/plugins/module_utils/test_leftovers.py);
a fake nvidia-smi here would only exercise the same code over SSH."""

from __future__ import annotations

import json
from pathlib import Path

from tests.harness.fleet import Fleet
from tests.integration.conftest import QUICK, RunPlaybook, flat

PLAYBOOK = "playbooks/restart_sglang.yml"
UNIT = "sglang.service"
FAST = {"SIM_SPEED": "0.15", "SIM_WARMUP_SECONDS": "1", "SIM_TP": "2"}
DROP_IN = f"/etc/systemd/system/{UNIT}.d/killmode.conf"
ENGINE = "VLLM::EngineCor"


def engine_pids(fleet: Fleet, host: str) -> list[int]:
    """The simulator's engine processes in the host, by their name."""
    found = fleet.ssh(host, f"pgrep -x {ENGINE!r} || true").stdout.split()
    return sorted(int(pid) for pid in found)


def start_with_an_orphan(fleet: Fleet, host: str, orphan_seconds: int) -> int:
    """The unit started with KillMode=process and an engine process; that process's pid."""
    fleet.ssh(host, f"mkdir -p {Path(DROP_IN).parent} && printf '[Service]\\nKillMode=process\\n' > {DROP_IN} && systemctl daemon-reload")
    fleet.set_scenario(host, **FAST, SIM_ORPHAN_SECONDS=orphan_seconds)
    fleet.ssh(host, f"systemctl start {UNIT}")
    fleet.wait_for(host, f"pgrep -x {ENGINE!r}", timeout=30)
    (pid,) = engine_pids(fleet, host)
    return pid


def test_an_orphan_that_ignores_the_stop_is_killed_before_the_new_start(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    orphan = start_with_an_orphan(fleet, host, orphan_seconds=600)
    # the stop alone leaves it: systemd with KillMode=process signals the main process only
    reports = tmp_path / "reports"
    run = run_playbook(PLAYBOOK, limit=host, extra_vars={**QUICK, "sglang_restart_release_timeout": 4, "sglang_restart_report_dir": str(reports)})
    assert run.returncode == 0, run
    out = flat(run.output)
    said = f"{UNIT}: 1 process(es) outlived the stop in /system.slice/{UNIT}: {orphan} ({ENGINE}); sent SIGTERM then SIGKILL (systemctl kill), none left"
    assert said in out, run.output[-5000:]
    assert f"{host} {UNIT}: PASS (ready)" in out
    report = json.loads((reports / f"{host}.json").read_text())
    leftovers = report["leftovers"]
    assert leftovers["left"] == [{"pid": orphan, "name": ENGINE}] and leftovers["signals"] == ["SIGTERM", "SIGKILL"] and leftovers["remaining"] == []
    assert 4 <= leftovers["waited"] < 30 and leftovers["gpus"]["checked"] is False
    # the old engine process is gone; the new start has its own
    assert orphan not in engine_pids(fleet, host) and len(engine_pids(fleet, host)) == 1
    assert fleet.health(host) == "200"


def test_an_orphan_that_exits_within_the_release_timeout_is_waited_for(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    orphan = start_with_an_orphan(fleet, host, orphan_seconds=5)
    reports = tmp_path / "reports"
    run = run_playbook(PLAYBOOK, limit=host, extra_vars={**QUICK, "sglang_restart_report_dir": str(reports)})
    assert run.returncode == 0, run
    out = flat(run.output)
    assert f"1 process(es) outlived the stop in /system.slice/{UNIT}" not in out, run.output[-5000:]
    leftovers = json.loads((reports / f"{host}.json").read_text())["leftovers"]
    # gone by itself while the restart waited: nothing left to signal
    assert leftovers["left"] == [] and leftovers["signals"] == [] and 1 <= leftovers["waited"] < 15, leftovers
    assert orphan not in engine_pids(fleet, host)
    assert f"{host} {UNIT}: PASS (ready)" in out
