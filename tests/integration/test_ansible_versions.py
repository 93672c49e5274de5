"""The short run of each supported ansible-core version: tests/harness/versions.py runs this file (with
the unit tests) in every version's venv, so that the restart and the precheck are proven on each
minor version, not only on the development one. It is part of the whole integration suite as well.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.harness.fleet import Fleet
from tests.harness.versions import REQUIREMENTS_FILE, pinned
from tests.integration.conftest import QUICK, RunPlaybook

pytestmark = pytest.mark.every_version  # its subject is the version: run on both whole-suite versions

UNIT = "sglang.service"
FAST = {"SIM_SPEED": "0.15", "SIM_WARMUP_SECONDS": "1"}


def expected_release() -> str:
    """The release under test: the versions harness says which; by default the development pin."""
    return os.environ.get("INFEROPS_ANSIBLE_CORE") or pinned(REQUIREMENTS_FILE.read_text(encoding="utf-8"), ["ansible-core"])[0].split("==")[1]


def test_runs_on_the_ansible_core_under_test(ansible_bin: Path) -> None:
    """The playbooks below run with the ansible-core release the matrix names, not another one."""
    version = subprocess.run([str(ansible_bin / "ansible-playbook"), "--version"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert f"[core {expected_release()}]" in version.splitlines()[0], version


def test_restart_then_precheck(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """A restart through a simulated cold start passes with its reports, and the precheck after it
    passes on the new invocation without restarting anything."""
    fleet.set_scenario(host, **FAST)
    fleet.ssh(host, f"systemctl start {UNIT}")
    before = fleet.unit_property(host, "InvocationID")

    restart = run_playbook("playbooks/restart_sglang.yml", extra_vars={**QUICK, "sglang_restart_report_dir": str(tmp_path)}, limit=host)
    assert restart.returncode == 0, restart
    assert f"{host} {UNIT}: PASS (ready)" in restart.output
    after = fleet.unit_property(host, "InvocationID")
    assert after != before
    report = json.loads((tmp_path / f"{host}.json").read_text())
    assert (report["verdict"], report["invocation_id"], report["previous_invocation_id"]) == ("pass", after, before)

    precheck = run_playbook("playbooks/precheck_sglang.yml", extra_vars={"sglang_precheck_report_dir": str(tmp_path)}, limit=host)
    assert precheck.returncode == 0, precheck
    checked = json.loads((tmp_path / f"{host}.precheck.json").read_text())
    assert (checked["verdict"], checked["invocation_id"]) == ("pass", after)
    assert fleet.unit_property(host, "InvocationID") == after
