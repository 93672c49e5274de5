"""Which tests each version's run executes: every integration test function on both whole-suite
versions, each parametrized case on one of them, the pure core's unit tests where the Python differs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.lanes import Case, LaneError, runs_here

REPO = Path(__file__).resolve().parents[3]


def integration(function: str, cases: int) -> list[Case]:
    if cases == 0:
        return [Case(f"tests/integration/test_x.py::{function}", unit=False, function=f"tests/integration/test_x.py::{function}")]
    nodeid = f"tests/integration/test_x.py::{function}"
    return [Case(f"{nodeid}[{index}]", unit=False, function=nodeid, parametrized=True) for index in range(cases)]


SUITE = [
    Case("tests/unit/test_core.py::test_pure", unit=True),
    Case("tests/unit/test_filters.py::test_through_ansible", unit=True, ansible=True),
    *integration("test_plain", 0),
    *integration("test_crash", 5),
    *integration("test_killed", 7),
    *integration("test_one_case", 1),
]


def selected(lane: str) -> set[str]:
    return {case.nodeid for case, kept in zip(SUITE, runs_here(SUITE, lane)) if kept}


def test_every_parametrized_case_runs_on_exactly_one_whole_suite_version_and_every_function_on_both() -> None:
    oldest, newest = selected("oldest"), selected("newest")
    parametrized = {case.nodeid for case in SUITE if case.parametrized}
    assert parametrized & oldest & newest == set()
    assert parametrized <= oldest | newest

    def functions(lane: set[str]) -> set[str]:
        return {nodeid.split("[")[0].rsplit("::", 1)[1] for nodeid in lane if nodeid.startswith("tests/integration/")}

    assert functions(newest) == {"test_plain", "test_crash", "test_killed", "test_one_case"}
    assert functions(oldest) == {"test_plain", "test_crash", "test_killed"}  # a single case runs on the newest
    # alternately, in the order collected: the newest takes the first case of each function
    assert "tests/integration/test_x.py::test_killed[0]" in newest and "tests/integration/test_x.py::test_killed[1]" in oldest
    assert len([nodeid for nodeid in newest if "test_killed" in nodeid]) == 4


def test_the_pure_core_runs_on_the_newest_only_and_ansible_unit_tests_everywhere() -> None:
    for lane in ("oldest", "short"):
        assert "tests/unit/test_core.py::test_pure" not in selected(lane)
        assert "tests/unit/test_filters.py::test_through_ansible" in selected(lane)
    assert {"tests/unit/test_core.py::test_pure", "tests/unit/test_filters.py::test_through_ansible"} <= selected("newest")


def test_without_a_lane_everything_runs_and_a_short_run_shares_nothing_out() -> None:
    assert selected("") == {case.nodeid for case in SUITE}
    assert {case.nodeid for case in SUITE if not case.unit} <= selected("short")


def test_an_unknown_lane_is_refused_by_name() -> None:
    with pytest.raises(LaneError, match=r"INFEROPS_LANE='olde' names no lane \(one of: dev, oldest, newest, short"):
        runs_here(SUITE, "olde")


def test_pytest_collects_what_the_lane_selects() -> None:
    """The hook on the real suite: the oldest version deselects the pure core and every other kill point."""
    env = {**os.environ, "INFEROPS_LANE": "oldest"}
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", "tests/unit/plugins/module_utils/test_rollout.py"]
    args += ["tests/unit/plugins/filter/test_filters.py", "tests/integration/test_controller_killed.py"]
    proc = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    collected = proc.stdout
    assert "test_rollout.py" not in collected and "test_filters.py::" in collected, collected[-2000:]
    killed = [line for line in collected.splitlines() if "repairs_what_a_dead_controller_left[" in line]
    assert [line.split("[")[1] for line in killed] == ["kill-at-deploy-good]", "kill-at-restore-good]", "kill-at-rollback_wait-crashing]"], collected[-2000:]
    proc = subprocess.run(args, cwd=REPO, env={**os.environ, "INFEROPS_LANE": "olde"}, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0 and "INFEROPS_LANE='olde' names no lane" in proc.stderr + proc.stdout
