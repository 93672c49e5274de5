"""Fixtures for integration tests against real systemd hosts (systemd-nspawn containers over SSH).

``fleet`` (session): a booted :class:`tests.harness.fleet.Fleet` of ``$INFEROPS_FLEET_HOSTS`` hosts
(default 4: two deployments of two nodes), torn down at the end of the session, also when tests fail or on Ctrl-C.
With ``$INFEROPS_REAL_VLLM=1`` its hosts also see the real vLLM install and models, installed first
when missing (tests/harness/real_vllm.py).
``sim_host`` (function): the first host with the simulator stopped, reset and without a scenario.
``ansible_bin``: the directory of the ansible executables of this interpreter's venv.
``run_playbook``: a callable that runs ``ansible-playbook`` for real against the fleet.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.fleet import Fleet, missing_prerequisites
from tests.harness.real_vllm import RealVllm, real_vllm_wanted

DEFAULT_HOSTS = 4
# the restart role's timings for the simulator's cold start of a few seconds
QUICK = {
    "sglang_restart_soak": 2,
    "sglang_restart_poll_interval": 1,
    "sglang_restart_heartbeat": 5,
    "sglang_restart_budget": 120,
    "sglang_restart_stall_limit": 60,
    "sglang_restart_release_timeout": 30,
}


@pytest.fixture(scope="session")
def fleet() -> Iterator[Fleet]:
    if os.geteuid() != 0:
        pytest.skip("needs root: boots systemd-nspawn containers (make test runs as root)")
    problems = missing_prerequisites()
    if problems:
        pytest.fail("cannot boot the test fleet: " + "; ".join(problems))
    count = int(os.environ.get("INFEROPS_FLEET_HOSTS", DEFAULT_HOSTS))
    # the lane that runs the real vLLM (tests/integration/test_real_vllm.py) installs it first (cached)
    # and lets its hosts see it
    real = RealVllm.plan().ensure() if real_vllm_wanted() else None
    booted = Fleet(binds=real.binds if real else (), extra_packages=real.host_packages if real else ())
    try:
        booted.up(count)
        yield booted
    finally:
        booted.down()
    leftovers = booted.leftovers()
    assert not leftovers, f"fleet teardown left things behind: {leftovers}"


@pytest.fixture
def host(fleet: Fleet) -> Iterator[str]:
    """The first host: simulator stopped, failed state, scenario and deployed configuration cleared (before and after)."""
    name = fleet.hosts[0]
    fleet.reset(name)
    yield name
    fleet.reset(name)


@pytest.fixture
def hosts(fleet: Fleet) -> Iterator[list[str]]:
    """Every host, cleared as ``host`` is."""
    for name in fleet.hosts:
        fleet.reset(name)
    yield fleet.hosts
    for name in fleet.hosts:
        fleet.reset(name)


@pytest.fixture(scope="session")
def ansible_bin() -> Path:
    return Path(sys.executable).parent


REPO = Path(__file__).resolve().parents[2]


class PlaybookRun:
    """The outcome of one ansible-playbook run: exit code, output, and wall time."""

    def __init__(self, process: subprocess.CompletedProcess[str], elapsed: float) -> None:
        self.returncode = process.returncode
        self.stdout = process.stdout
        self.stderr = process.stderr
        self.elapsed = elapsed

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    @property
    def flat(self) -> str:
        """The output as one line: what to search for a long message in."""
        return flat(self.output)

    def __repr__(self) -> str:
        return f"PlaybookRun(rc={self.returncode}, elapsed={self.elapsed:.1f}s)\n{self.stdout[-6000:]}\n{self.stderr[-2000:]}"


RunPlaybook = Callable[..., PlaybookRun]


def flat(output: str) -> str:
    """Output with the callback's folding undone: ansible-core 2.16 wraps long values at 80
    columns, as YAML scalars (a quote inside a single-quoted one is doubled)."""
    return " ".join(output.split()).replace("''", "'")


@pytest.fixture(scope="session")
def run_playbook(fleet: Fleet, ansible_bin: Path) -> RunPlaybook:
    """``run_playbook(playbook, *args, extra_vars={...}, limit=None, timeout=600, inventory=None)``: a real
    ``ansible-playbook`` run from the repository root against the fleet's inventory (or another one)."""

    def run(
        playbook: str | Path,
        *args: str,
        extra_vars: dict[str, object] | None = None,
        limit: str | None = None,
        timeout: float = 600,
        inventory: Path | None = None,
    ) -> PlaybookRun:
        cmd = [str(ansible_bin / "ansible-playbook"), "-i", str(inventory or fleet.inventory), str(playbook), *args]
        if extra_vars:
            cmd += ["-e", json.dumps(extra_vars)]
        if limit:
            cmd += ["--limit", limit]
        env = fleet.ansible_env()
        env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
        started = time.monotonic()
        process = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        return PlaybookRun(process, time.monotonic() - started)

    return run


RunRunner = Callable[..., Any]


@pytest.fixture(scope="session")
def run_runner(fleet: Fleet) -> RunRunner:
    """``run_runner(playbook, private_data_dir, limit=..., extravars={...}, **options)``: the same run
    through ansible_runner.run(), the way a pipeline or AWX starts it; returns the Runner."""
    import ansible_runner

    def run(playbook: str | Path, private_data_dir: Path, **options: Any) -> Any:
        private_data_dir.mkdir(parents=True, exist_ok=True)
        env = fleet.ansible_env()
        env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
        options = {"inventory": str(fleet.inventory), "quiet": True, "timeout": 300, **options}
        return ansible_runner.run(private_data_dir=str(private_data_dir), project_dir=str(REPO), playbook=str(REPO / playbook), envvars=env, **options)

    return run
