"""The playbooks run from wherever a user stands: from playbooks/ itself (where the repository's
ansible.cfg is not read; Ansible finds the collection in playbooks/collections, next to the
playbook), and from the repository root through ./ansible.cfg. No ANSIBLE_CONFIG is set for either."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.fleet import Fleet
from tests.integration.conftest import REPO

UNIT = "sglang.service"
QUICK = "sglang_restart_soak=2 sglang_restart_poll_interval=1 sglang_restart_heartbeat=5 sglang_restart_budget=120"


@pytest.fixture
def host(fleet: Fleet) -> Iterator[str]:
    name = fleet.hosts[0]
    fleet.reset(name)
    fleet.set_scenario(name, SIM_SPEED="0.15", SIM_WARMUP_SECONDS="1")
    fleet.ssh(name, f"systemctl start {UNIT}")
    yield name
    fleet.reset(name)


def ansible_playbook(fleet: Fleet, ansible_bin: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = fleet.ansible_env()
    env.pop("ANSIBLE_CONFIG", None)
    cmd = [str(ansible_bin / "ansible-playbook"), *args, "-i", str(fleet.inventory)]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_from_the_playbooks_directory_and_from_the_root(fleet: Fleet, host: str, ansible_bin: Path) -> None:
    before = fleet.unit_property(host, "InvocationID")
    restart = ansible_playbook(fleet, ansible_bin, REPO / "playbooks", "restart_sglang.yml", "--limit", host, "-e", QUICK)
    assert restart.returncode == 0, restart.stdout[-4000:] + restart.stderr[-2000:]
    assert f"{host} {UNIT}: PASS (ready)" in restart.stdout
    after = fleet.unit_property(host, "InvocationID")
    assert after != before

    precheck = ansible_playbook(fleet, ansible_bin, REPO, "playbooks/precheck_sglang.yml", "--limit", host)
    assert precheck.returncode == 0, precheck.stdout[-4000:] + precheck.stderr[-2000:]
    assert fleet.unit_property(host, "InvocationID") == after
