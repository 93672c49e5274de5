"""Which tests each version's run executes: the integration tests shared out between the two
whole-suite versions (every test on one of them, the every_version ones on both; taken at run time
when the two run side by side), the pure core's unit tests where the Python differs, the
ansible-core unit tests everywhere."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.lanes import CLAIMS_ENV, Case, Claims, LaneError, runs_here

REPO = Path(__file__).resolve().parents[3]


def integration(module: str, names: list[str], every_version: tuple[str, ...] = ()) -> list[Case]:
    return [Case(f"tests/integration/{module}::{name}", unit=False, every_version=name in every_version) for name in names]


SUITE = [
    Case("tests/unit/test_core.py::test_pure", unit=True),
    Case("tests/unit/test_filters.py::test_through_ansible", unit=True, ansible=True),
    *integration("test_a.py", ["test_first", "test_versions", "test_crash[0]", "test_crash[1]", "test_crash[2]"], every_version=("test_versions",)),
    *integration("test_b.py", ["test_only"]),
]


def selected(lane: str) -> set[str]:
    return {case.nodeid for case, kept in zip(SUITE, runs_here(SUITE, lane)) if kept}


def names(nodeids: set[str]) -> set[str]:
    return {nodeid.rsplit("::", 1)[1] for nodeid in nodeids if nodeid.startswith("tests/integration/")}


def test_each_integration_test_runs_on_one_whole_suite_version_and_the_every_version_ones_on_both() -> None:
    oldest, newest = names(selected("oldest")), names(selected("newest"))
    everything = names({case.nodeid for case in SUITE})
    assert oldest | newest == everything
    assert oldest & newest == {"test_versions"}
    # in each module, in the order collected, alternately: the oldest takes the first (and so the odd
    # test out: the newest also runs the pure core's unit tests)
    assert oldest == {"test_first", "test_versions", "test_crash[1]", "test_only"}
    assert newest == {"test_versions", "test_crash[0]", "test_crash[2]"}


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


def collected(lane: str, *paths: str, claims: Path | None = None, plan: bool = False) -> subprocess.CompletedProcess[str]:
    """pytest's collection (``plan``: its setup plan, which runs the setup hooks but no fixture) for a lane."""
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "--setup-plan" if plan else "--collect-only", *paths]
    env = {name: value for name, value in os.environ.items() if name != CLAIMS_ENV}  # this run's own lane may share by claims
    env |= {"INFEROPS_LANE": lane, **({CLAIMS_ENV: str(claims)} if claims else {})}
    return subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_a_test_is_taken_once_whichever_version_comes_first(tmp_path: Path) -> None:
    first, second = Claims(tmp_path), Claims(tmp_path)
    assert first.take("tests/integration/test_a.py::test_crash[0]")
    assert not second.take("tests/integration/test_a.py::test_crash[0]")
    assert not first.take("tests/integration/test_a.py::test_crash[0]")
    assert second.take("tests/integration/test_a.py::test_crash[1]")
    assert len(list(tmp_path.iterdir())) == 2


def test_versions_that_take_their_tests_collect_every_shared_one() -> None:
    for lane in ("oldest", "newest"):
        chosen = {case.nodeid for case, kept in zip(SUITE, runs_here(SUITE, lane, claimed=True)) if kept}
        assert names(chosen) == names({case.nodeid for case in SUITE})


def test_side_by_side_each_shared_test_runs_on_the_version_that_takes_it_first(tmp_path: Path) -> None:
    """The hooks on the real suite (setup plans: the setup hooks run, no fixture does): the version
    that comes first takes every shared test, the other skips them all but the every_version ones."""
    paths = ("tests/integration/test_journal_scan.py", "tests/integration/test_ansible_versions.py")
    first = collected("newest", *paths, claims=tmp_path, plan=True)
    second = collected("oldest", *paths, claims=tmp_path, plan=True)
    assert first.returncode in (0, 5) and "skipped" not in first.stdout, first.stdout[-2000:]
    taken = {path.read_text().split()[1] for path in tmp_path.iterdir()}
    assert taken and all(nodeid.startswith("tests/integration/test_journal_scan.py::") for nodeid in taken), taken
    assert f"SKIPPED [{len(taken)}] " in second.stdout and "taken by the other whole-suite version" in second.stdout, second.stdout[-2000:]
    assert "test_ansible_versions.py" in second.stdout


def test_pytest_collects_what_the_lane_selects() -> None:
    """The hook on the real suite: the oldest version runs no pure core unit test, every other kill
    point, and the every_version tests; the two together run every integration test."""
    paths = ("tests/unit/plugins/plugin_utils/test_rollout.py", "tests/unit/plugins/filter/test_filters.py", "tests/integration")
    oldest, newest = collected("oldest", *paths).stdout, collected("newest", *paths).stdout
    assert "test_rollout.py" not in oldest and "test_filters.py::" in oldest, oldest[-2000:]
    killed = [line.split("[")[1] for line in oldest.splitlines() if "repairs_what_a_dead_controller_left[" in line]
    expected = ["kill-at-drain-good]", "kill-at-wait-good]", "kill-at-wait-crashing]", "awx-at-wait-good]", "int-at-drain-good]"]
    assert killed == expected, oldest[-2000:]

    def integration_tests(listing: str) -> set[str]:
        return {line for line in listing.splitlines() if line.startswith("tests/integration/")}

    everything = integration_tests(collected("", "tests/integration").stdout)
    assert integration_tests(oldest) | integration_tests(newest) == everything
    both = integration_tests(oldest) & integration_tests(newest)
    assert "tests/integration/test_ansible_versions.py::test_restart_then_precheck" in both
    assert len(both) < len(everything) / 4, both
    refused = collected("olde", "tests/unit/harness/test_lanes.py")
    assert refused.returncode != 0 and "INFEROPS_LANE='olde' names no lane" in refused.stderr + refused.stdout
