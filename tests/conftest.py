"""Session-wide pytest hooks: a run on one ansible-core version selects its tests
(``tests/harness/lanes.py``), the measured figures go at the end of the run's output, and no test
may leave the controller's device nodes broken."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from typing import Any

import pytest

from tests.figures import RECORDED
from tests.harness.lanes import Case, Claims, LaneError, check_lane, is_shared, runs_here

UNIT_TESTS = "tests/unit/"  # pytest node ids use "/" on every platform

# the device nodes every tool on the controller (ssh, systemd-nspawn, Ansible) relies on
DEVICES = {"/dev/null": (1, 3), "/dev/zero": (1, 5), "/dev/urandom": (1, 9)}


def broken_devices() -> list[str]:
    """The controller's device nodes that are no longer the character devices they must be."""
    broken = []
    for path, (major, minor) in DEVICES.items():
        try:
            info = os.lstat(path)
        except OSError as exc:
            broken.append(f"{path}: {exc.strerror}")
            continue
        if not stat.S_ISCHR(info.st_mode) or (os.major(info.st_rdev), os.minor(info.st_rdev)) != (major, minor):
            broken.append(f"{path} is no longer character device {major},{minor} ({stat.filemode(info.st_mode)})")
    return broken


def repair_devices() -> None:
    """Put the device nodes back (as root), so that one test's damage does not fail every test after it."""
    for path, (major, minor) in DEVICES.items():
        try:
            info = os.lstat(path)
            if stat.S_ISCHR(info.st_mode) and (os.major(info.st_rdev), os.minor(info.st_rdev)) == (major, minor):
                continue
            os.unlink(path)
        except FileNotFoundError:
            pass
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        os.chmod(path, 0o666)


@pytest.fixture(autouse=True)
def _device_nodes_intact() -> Iterator[None]:
    """Fails the test during which a device node of the controller was replaced (a rename or a copy
    onto /dev/null through a link, a report written to a device), names what broke, and repairs it."""
    before = broken_devices()
    yield
    after = [problem for problem in broken_devices() if problem not in before]
    if after:
        if os.geteuid() == 0:
            repair_devices()
        pytest.fail("this test left the controller's device nodes broken (repaired now): " + "; ".join(after))


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "ansible: a unit test that exercises ansible-core (run on every version)")
    config.addinivalue_line("markers", "every_version: an integration test run on both whole-suite versions (not shared out)")
    try:
        check_lane(os.environ.get("INFEROPS_LANE", ""))
    except LaneError as exc:
        raise pytest.UsageError(str(exc)) from None


def lane_case(item: Any) -> Case:
    return Case(
        nodeid=item.nodeid,
        unit=item.nodeid.startswith(UNIT_TESTS),
        ansible=item.get_closest_marker("ansible") is not None,
        every_version=item.get_closest_marker("every_version") is not None,
    )


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    lane = os.environ.get("INFEROPS_LANE", "")
    if not lane:
        return
    keep = runs_here([lane_case(item) for item in items], lane, claimed=Claims.from_env() is not None)
    deselected = [item for item, kept in zip(items, keep) if not kept]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item, kept in zip(items, keep) if kept]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: Any) -> None:
    """A shared test the other whole-suite version took is skipped here, before any fixture of it."""
    claims = Claims.from_env()
    if claims is not None and is_shared(lane_case(item), os.environ.get("INFEROPS_LANE", "")) and not claims.take(item.nodeid):
        pytest.skip("taken by the other whole-suite version")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if RECORDED:
        terminalreporter.section("measured figures")
        for text in RECORDED:
            terminalreporter.write_line(text)
