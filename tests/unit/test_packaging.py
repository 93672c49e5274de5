"""The repository is the collection: it finds itself from a clone and builds a clean tarball."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.ansible  # exercises ansible-core: runs on every version (tests/harness/lanes.py)

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
FORBIDDEN_IN_TARBALL = (
    ".venv/",
    ".ansible/",
    "tests/output/",
    "__pycache__",
    ".pytest_cache",
    ".build/",
    "collections/ansible_collections/",
    ".git/",
    "bench/",
)


def ansible(*cmd: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    return subprocess.run([str(BIN / cmd[0]), *cmd[1:]], cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=False)


def test_galaxy_build_gives_a_clean_tarball(tmp_path: Path) -> None:
    built = ansible("ansible-galaxy", "collection", "build", "--output-path", str(tmp_path))
    assert built.returncode == 0, built.stdout + built.stderr
    tarball = next(tmp_path.glob("inferops-runbooks-*.tar.gz"))
    with tarfile.open(tarball) as archive:
        names = archive.getnames()
    assert "plugins/module_utils/_classifier.py" in names
    # Event-Driven Ansible finds these in an installed collection: inferops.runbooks.serving_watch, .restart_on_stall
    assert "extensions/eda/plugins/event_source/serving_watch.py" in names
    assert "extensions/eda/rulebooks/restart_on_stall.yml" in names
    assert "galaxy.yml" not in names and "MANIFEST.json" in names
    leaked = [name for name in names if any(part in name + "/" for part in FORBIDDEN_IN_TARBALL)]
    assert not leaked, leaked


@pytest.mark.parametrize(
    ("kind", "name"),
    [("filter", "classify_journal"), ("filter", "journal_line_class"), ("module", "journal_scan"), ("module", "service_probe"), ("module", "wait_ready")],
)
def test_every_plugin_is_documented(kind: str, name: str) -> None:
    doc = ansible("ansible-doc", "-t", kind, f"inferops.runbooks.{name}")
    assert doc.returncode == 0, doc.stderr
    assert "EXAMPLES" in doc.stdout and "RETURN" in doc.stdout


@pytest.mark.parametrize("role", ["sglang_restart", "sglang_precheck"])
def test_the_roles_are_documented(role: str) -> None:
    doc = ansible("ansible-doc", "-t", "role", f"inferops.runbooks.{role}")
    assert doc.returncode == 0, doc.stderr
    assert f"{role}_health_url" in doc.stdout


@pytest.mark.parametrize(
    "playbook",
    ["playbooks/restart_sglang.yml", "inferops.runbooks.restart_sglang", "playbooks/precheck_sglang.yml", "inferops.runbooks.precheck_sglang"],
)
def test_playbook_is_found_from_a_clone(playbook: str) -> None:
    check = ansible("ansible-playbook", playbook, "--syntax-check")
    assert check.returncode == 0, check.stdout + check.stderr
