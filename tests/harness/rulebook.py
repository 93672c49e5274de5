"""ansible-rulebook for the Event-Driven Ansible test, in a venv of its own.

Its pins (``tests/requirements-rulebook.txt``) are not the development tools', so it is installed once
per machine with pip, outside the repository, beside the ansible-core venvs (``$INFEROPS_VENV_CACHE``,
default ``/var/cache/inferops-venvs`` as root), in ``ansible-rulebook-<key>``, where ``<key>`` hashes
the interpreter's version and the requirements file. It needs Java 17 (Debian's
``openjdk-17-jre-headless``, installed by ``scripts/setup.sh``).

CLI (from the repository root)::

    python -m tests.harness.rulebook setup     # create the venv (cached)
    python -m tests.harness.rulebook path      # where its ansible-rulebook is
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tests.harness.fleet import file_lock
from tests.harness.versions import default_cache_dir, python_version

REPO_ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO_ROOT / "tests" / "requirements-rulebook.txt"
COMPLETE_STAMP = ".inferops-complete"
INTERPRETER = Path("/usr/bin/python3")


class RulebookError(RuntimeError):
    """The venv could not be created."""


def venv_path(cache_dir: Path | None = None, interpreter: Path = INTERPRETER) -> Path:
    version = python_version(interpreter) or "unknown"
    key = hashlib.sha256(version.encode() + REQUIREMENTS.read_bytes()).hexdigest()[:10]
    return (cache_dir or default_cache_dir()) / f"ansible-rulebook-py{version}-{key}"


def java_missing() -> str | None:
    """Why ansible-rulebook cannot run here, or None."""
    if shutil.which("java") is None:
        return "no java on PATH: ansible-rulebook needs Java 17 (apt-get install openjdk-17-jre-headless; scripts/setup.sh does)"
    return None


def ensure(cache_dir: Path | None = None) -> Path:
    """The venv's ansible-rulebook executable; the venv is created first when missing (under a lock)."""
    path = venv_path(cache_dir)
    executable = path / "bin" / "ansible-rulebook"
    if (path / COMPLETE_STAMP).is_file():
        return executable
    path.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(path.with_name(path.name + ".lock")):
        if (path / COMPLETE_STAMP).is_file():
            return executable
        started = time.monotonic()
        shutil.rmtree(path, ignore_errors=True)
        steps = [
            [str(INTERPRETER), "-m", "venv", str(path)],
            [str(path / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r", str(REQUIREMENTS)],
        ]
        for step in steps:
            proc = subprocess.run(step, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                shutil.rmtree(path, ignore_errors=True)
                raise RulebookError(f"{' '.join(step)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
        (path / COMPLETE_STAMP).write_text(REQUIREMENTS.read_text(encoding="utf-8"), encoding="utf-8")
        print(f"rulebook: venv {path} created in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return executable


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.harness.rulebook", description=__doc__.split("\n", 1)[0])
    parser.add_argument("cmd", choices=("setup", "path"))
    args = parser.parse_args(argv)
    try:
        executable = ensure() if args.cmd == "setup" else venv_path() / "bin" / "ansible-rulebook"
    except RulebookError as error:
        print(f"rulebook: {error}", file=sys.stderr)
        return 1
    print(executable)
    return 0


if __name__ == "__main__":
    sys.exit(main())
