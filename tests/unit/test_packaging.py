"""The repository is the collection: it finds itself from a clone and builds a clean tarball."""

from __future__ import annotations

import dataclasses
import json
import os
import re
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


# ---- the built tarball, installed as a user installs it, with this ansible-core's own tools ----

DOCUMENTED_KINDS = ("module", "filter", "role")
# ansible-core 2.21's ansible-doc -t role warns that a collection it ships inside itself
# (ansible._protomatter) has no version: a warning about ansible-core, not about this collection
CORE_OWN_WARNING = re.compile(
    r"\[WARNING\]: Collection at '[^']*/ansible/_internal/[^']*' does not have a MANIFEST\.json file.*?cannot detect version\.\s*", re.S
)


@dataclasses.dataclass(frozen=True)
class Installed:
    """The collection built from the repository and installed from its tarball into a directory of its own."""

    collections: Path
    env: dict[str, str]
    install: subprocess.CompletedProcess[str]

    @property
    def root(self) -> Path:
        return self.collections / "ansible_collections" / "inferops" / "runbooks"

    def run(self, *cmd: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN / cmd[0]), *cmd[1:]], cwd=self.collections, env=self.env, capture_output=True, text=True, timeout=180, check=False)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """``ansible-galaxy collection build`` in the repository, then ``ansible-galaxy collection install``
    of the tarball (offline: the collection needs nothing else) into a directory that, with no
    ansible.cfg but an empty one, is the only place the collection can be found."""
    work = tmp_path_factory.mktemp("installed")
    built = ansible("ansible-galaxy", "collection", "build", "--output-path", str(work / "dist"))
    assert built.returncode == 0, built.stdout + built.stderr
    tarball = next((work / "dist").glob("inferops-runbooks-*.tar.gz"))
    (work / "ansible.cfg").write_text("[defaults]\n", encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env.update(
        ANSIBLE_CONFIG=str(work / "ansible.cfg"),
        ANSIBLE_HOME=str(work / "home"),
        ANSIBLE_COLLECTIONS_PATH=str(work / "collections"),
        ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false",
        ANSIBLE_NOCOLOR="1",
    )
    collections = work / "collections"
    collections.mkdir()
    install = subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "install", "--offline", "-p", str(collections), str(tarball)],
        cwd=collections,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    return Installed(collections, env, install)


def problems(stderr: str) -> str:
    """What a run of ansible-doc or ansible-galaxy said was wrong (its warnings and errors), but
    ansible-core's warning about its own internal collection."""
    return CORE_OWN_WARNING.sub("", stderr).strip()


def test_the_built_tarball_installs_on_this_ansible_core(installed: Installed) -> None:
    """ansible-galaxy of the version under test installs the tarball: a version that
    meta/runtime.yml's requires_ansible does not admit is refused or warned about."""
    out = installed.install.stdout + installed.install.stderr
    assert installed.install.returncode == 0, out
    assert "does not support Ansible version" not in out, out
    assert not problems(installed.install.stderr), out
    manifest = json.loads((installed.root / "MANIFEST.json").read_text(encoding="utf-8"))
    galaxy = (REPO / "galaxy.yml").read_text(encoding="utf-8")
    assert f"version: {manifest['collection_info']['version']}\n" in galaxy


def shipped(kind: str) -> list[str]:
    """The documented plugins of a kind the repository holds, by their full names."""
    files = {
        "module": REPO.glob("plugins/modules/*.py"),
        "filter": REPO.glob("plugins/filter/*.yml"),
        "role": (path.parents[1] for path in REPO.glob("roles/*/meta/argument_specs.yml")),
    }[kind]
    return sorted(f"inferops.runbooks.{path.stem if kind != 'role' else path.name}" for path in files)


@pytest.mark.parametrize("kind", DOCUMENTED_KINDS)
def test_every_plugin_of_the_installed_collection_is_documented(installed: Installed, kind: str) -> None:
    """ansible-doc of the version under test lists every module, filter and role of the installed
    collection and shows each one's documentation, from the installed copy, with no warning."""
    assert installed.install.returncode == 0, installed.install.stdout + installed.install.stderr
    listing = installed.run("ansible-doc", "-l", "-t", kind, "--json", "inferops.runbooks")
    assert listing.returncode == 0 and not problems(listing.stderr), listing.stderr
    names = sorted(json.loads(listing.stdout))
    assert names == shipped(kind)

    shown = installed.run("ansible-doc", "-t", kind, "--json", *names)
    assert shown.returncode == 0 and not problems(shown.stderr), shown.stderr
    docs = json.loads(shown.stdout)
    assert sorted(docs) == names
    for name, doc in docs.items():
        where = doc["path"] if kind == "role" else doc["doc"]["filename"]
        assert Path(where).resolve().is_relative_to(installed.root.resolve()), (name, where)
        if kind == "role":
            assert doc["entry_points"]["main"]["short_description"], name
        else:
            assert doc["doc"]["short_description"] and doc["examples"] and doc["return"], name
