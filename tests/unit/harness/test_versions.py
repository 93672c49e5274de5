"""The ansible-core matrix (tests/ansible-core-versions.txt) agrees with meta/runtime.yml and
requirements-dev.txt, and the versions harness reads it and plans its fleets' networks strictly."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.harness.versions import (
    REAL_VLLM_TESTS,
    REPO_ROOT,
    REQUIREMENTS_FILE,
    VersionsError,
    VersionVenv,
    fleet_nets,
    load_matrix,
    parse_matrix,
    pick,
    pinned,
    plan_lanes,
    support_pins,
)


def minor_number(minor: str) -> int:
    return int(minor.split(".")[1])


def test_the_matrix_covers_what_meta_runtime_claims() -> None:
    versions = load_matrix()
    minors = [minor_number(v.minor) for v in versions]
    assert minors == list(range(minors[0], minors[-1] + 1)), "one line per minor version, in order, none missing"
    assert pick(versions, "oldest") == versions[0] and pick(versions, "newest") == versions[-1]
    runtime = yaml.safe_load((REPO_ROOT / "meta" / "runtime.yml").read_text())
    assert runtime["requires_ansible"] == f">={versions[0].minor}.0,<2.{minors[-1] + 1}.0"


def test_the_dev_line_is_the_development_venv_pin() -> None:
    dev = pick(load_matrix(), "dev")
    assert pinned(REQUIREMENTS_FILE.read_text(), ["ansible-core"]) == [f"ansible-core=={dev.release}"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2.16.19 3.11\n", "versions.txt:1: expected 'release python runs'"),
        ("2.16 3.11 oldest\n", "versions.txt:1: '2.16' is not an ansible-core release"),
        ("2.16.19 3.11 oldest\n2.17.1 py3 newest\n", "versions.txt:2: 'py3' is not a Python version"),
        ("2.16.19 3.11 oldest\n2.17.1 3.11 latest\n", "versions.txt:2: runs must be one of"),
        ("2.16.19 3.11 oldest\n2.17.1 3.11 short\n", "exactly one line must say 'dev'"),
    ],
)
def test_a_bad_matrix_line_is_named(text: str, message: str) -> None:
    with pytest.raises(VersionsError, match=re.escape(message)):
        parse_matrix(text, "versions.txt")


def test_networks_side_by_side() -> None:
    assert fleet_nets(3, {}) == ["10.213", "10.214", "10.215"]
    assert fleet_nets(2, {"INFEROPS_FLEET_NET": "10.224"}) == ["10.224", "10.225"]
    assert fleet_nets(2, {"INFEROPS_VERSION_NETS": "10.224, 10.227 10.228"}) == ["10.224", "10.227"]
    with pytest.raises(VersionsError, match="names 1 network"):
        fleet_nets(2, {"INFEROPS_VERSION_NETS": "10.224"})
    with pytest.raises(VersionsError, match=re.escape("INFEROPS_FLEET_NET='10.254'")):
        fleet_nets(3, {"INFEROPS_FLEET_NET": "10.254"})


def test_each_version_gets_the_test_tools_not_the_development_tools() -> None:
    pins = support_pins("ansible-core==2.19.14\nansible-lint==26.10.1\npytest==9.2.0  # tests\nhypothesis==6.170.15\nruff==0.17.6\n")
    assert pins == ["pytest==9.2.0", "hypothesis==6.170.15"]
    with pytest.raises(VersionsError, match="pins no pytest"):
        support_pins("ansible-core==2.19.14\n")


def test_the_real_vllm_runs_once_last_in_the_short_lane_on_the_newest_version(tmp_path: Path) -> None:
    versions = load_matrix()
    venvs = [VersionVenv(v, tmp_path / v.minor, Path(sys.executable), ()) for v in versions]
    newest = next(venv for venv in venvs if venv.version.runs == "newest")
    lanes = plan_lanes(venvs, pick(versions, "dev"), tmp_path / "fleet", env={}, real_vllm=newest)
    assert len(lanes) == 3
    runs = [run for lane in lanes for run in lane]
    real = [run for run in runs if run.env.get("INFEROPS_REAL_VLLM") == "1"]
    assert len(real) == 1 and lanes[-1][-1] is real[0]
    assert real[0].argv[-1] == REAL_VLLM_TESTS and real[0].argv[0] == str(newest.python)
    assert real[0].env["INFEROPS_FLEET_HOSTS"] == "1" and real[0].env["INFEROPS_FLEET_DIR"].endswith("fleet-real-vllm")
    # every other pytest run skips the real vLLM's tests, whatever the caller's environment says
    assert all(run.env.get("INFEROPS_REAL_VLLM", "0") == "0" for run in runs if run is not real[0])


def test_an_interrupted_runner_stops_its_runs_and_all_they_started(tmp_path: Path) -> None:
    """A run still going when the runner is interrupted is stopped, with its children (a run that
    ignores the interrupt is killed after the grace time), so that nothing it started is left."""
    import signal
    import subprocess

    from tests.harness.versions import Run, stop_runs

    child_pid = tmp_path / "child.pid"
    stubborn = (
        "import signal, subprocess, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
        f"p = subprocess.Popen(['sleep', '300']); open({str(child_pid)!r}, 'w').write(str(p.pid)); time.sleep(300)"
    )
    run = Run("stubborn", [sys.executable, "-c", stubborn], {"INFEROPS_FLEET_DIR": str(tmp_path / "no-fleet")}, tmp_path / "log")
    proc = subprocess.Popen(run.argv, start_new_session=True)
    deadline = time.monotonic() + 30
    while not child_pid.exists() or not child_pid.read_text():
        assert time.monotonic() < deadline, "the run never started its child"
        time.sleep(0.05)
    child = int(child_pid.read_text())
    stop_runs([(run, proc)], grace=1)
    assert proc.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and "zombie" not in _state(child):
        assert time.monotonic() < deadline, "the run's child was left running"
        time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return "zombie"


def test_an_interrupted_runner_starts_no_further_run_of_a_lane(tmp_path: Path) -> None:
    """SIGTERM while a lane's first run goes on: that run is stopped and the lane's next run never
    starts (the lanes did go on with their next runs while the runner waited for them to end)."""
    import os
    import signal
    import threading

    from tests.harness.versions import Run, execute

    running, second_started = tmp_path / "first-running", tmp_path / "second-started"
    env = {"INFEROPS_FLEET_DIR": str(tmp_path / "no-fleet"), "INFEROPS_FLEET_NET": "10.250"}
    first = Run("first", [sys.executable, "-c", f"import time; open({str(running)!r}, 'w'); time.sleep(300)"], env, tmp_path / "first.log")
    second = Run("second", [sys.executable, "-c", f"open({str(second_started)!r}, 'w')"], env, tmp_path / "second.log")

    def interrupt_once_the_first_runs() -> None:
        deadline = time.monotonic() + 60
        while not running.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=interrupt_once_the_first_runs, daemon=True).start()
    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        execute([[first, second]])
    assert time.monotonic() - began < 120, "the runner waited for the lane instead of stopping it"
    assert first.returncode is not None and first.returncode != 0
    assert not second_started.exists(), "the lane's next run started after the interrupt"


def test_the_runs_that_share_tests_get_one_claims_directory_of_their_own_removed_after(tmp_path: Path) -> None:
    """Each execution its own directory: this very test runs inside a lane whose claims must survive it."""
    from tests.harness.lanes import CLAIMS_ENV
    from tests.harness.versions import Run, execute

    env = {"INFEROPS_FLEET_DIR": str(tmp_path / "no-fleet"), "INFEROPS_FLEET_NET": "10.250"}
    script = f"import os, sys; d = os.environ.get({CLAIMS_ENV!r}, ''); open(sys.argv[1], 'w').write(d + ' ' + str(os.path.isdir(d)))"
    runs = [
        Run(name, [sys.executable, "-c", script, str(tmp_path / f"{name}.seen")], dict(env), tmp_path / f"{name}.log", shares_tests=shares)
        for name, shares in (("oldest", True), ("newest", True), ("short", False))
    ]
    assert execute([[runs[0]], [runs[1]], [runs[2]]]) == 0
    seen = {run.name: (tmp_path / f"{run.name}.seen").read_text().split() for run in runs}
    assert seen["oldest"] == seen["newest"] and seen["oldest"][1] == "True", seen
    assert seen["short"] == ["False"], seen
    assert not Path(seen["oldest"][0]).exists()
