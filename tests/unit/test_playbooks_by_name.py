"""Every playbook is found the ways a user calls it: by path from playbooks/ itself with no
ansible.cfg and no installed collection (the collection is found in playbooks/collections, next to
the playbook), and by its collection name from the repository root (through ./ansible.cfg)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.ansible  # exercises ansible-core: runs on every version (tests/harness/lanes.py)

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLAYBOOKS = ("restart_sglang", "precheck_sglang", "restart_vllm", "precheck_vllm")


def ansible_playbook(cwd: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """ansible-playbook with no ANSIBLE_* settings and an empty home: nothing installed where Ansible
    looks by default (~/.ansible/collections), so only what the checkout provides counts."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env |= {"ANSIBLE_HOME": str(tmp_path / "home"), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run([str(BIN / "ansible-playbook"), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("name", PLAYBOOKS)
def test_found_from_the_playbooks_directory(name: str, tmp_path: Path) -> None:
    run = ansible_playbook(REPO / "playbooks", tmp_path, f"{name}.yml", "-i", "../inventory/example.yml", "--list-tasks")
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"inferops.runbooks.sglang_{name.split('_')[0]} : " in run.stdout


@pytest.mark.parametrize("name", PLAYBOOKS)
def test_found_by_name_from_the_root(name: str, tmp_path: Path) -> None:
    run = ansible_playbook(REPO, tmp_path, f"inferops.runbooks.{name}", "-i", "inventory/example.yml", "--syntax-check")
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_vllm_playbooks_target_the_vllm_group(tmp_path: Path) -> None:
    run = ansible_playbook(REPO / "playbooks", tmp_path, "restart_vllm.yml", "-i", "../inventory/example.yml", "--list-hosts")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "gpu-node-11" in run.stdout and "gpu-node-01" not in run.stdout
