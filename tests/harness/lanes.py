"""Which tests a run on one ansible-core version executes (``INFEROPS_LANE``, set by
``tests/harness/versions.py``; unset, as in ``make unit`` and ``make integration-dev``, runs all).

- The pure core's unit tests do not depend on ansible-core: they run in the development venv
  (``make unit``, the oldest Python) and on the newest version (the newest Python). The unit tests
  that exercise ansible-core (marked ``ansible``) run on every version.
- The integration tests are shared out between the two whole-suite versions (oldest and newest).
  Run side by side (``tests/harness/versions.py`` gives both the same ``INFEROPS_CLAIMS``
  directory), both collect every one and, in the order collected, each runs the next test the other
  has not taken yet (``Claims``: a file created once per test), so that the two end together
  whatever each test takes: a split fixed in advance left one version 6 to 9 minutes behind the
  other (a version run alone takes them all). Without that directory (``INFEROPS_LANE`` set by
  hand), in each module every other test (a parametrized test's cases one by one) runs on one and
  the others on the other, the oldest taking the first. The tests marked ``every_version`` (the
  ones whose subject is what differs between ansible-core versions) run on both. A test is two to
  eight real playbook runs against real systemd hosts: running each on both doubled the suite's
  time without testing another code path.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import typing as t
from pathlib import Path

LANES = ("dev", "oldest", "newest", "short")
CLAIMS_ENV = "INFEROPS_CLAIMS"  # the directory where the two whole-suite versions take their tests
# which of a module's alternating integration tests each whole-suite lane runs
CASE_SHARE = {"oldest": 0, "newest": 1}
# the lanes that run the pure core's unit tests (and the development venv's `make unit`)
PURE_UNIT_LANES = frozenset({"newest"})


class LaneError(ValueError):
    """INFEROPS_LANE names no lane."""


@dataclasses.dataclass(frozen=True)
class Case:
    """What the selection needs to know of one collected test."""

    nodeid: str
    unit: bool
    ansible: bool = False  # a unit test that exercises ansible-core
    every_version: bool = False  # an integration test that runs on both whole-suite versions

    @property
    def module(self) -> str:
        return self.nodeid.split("::", 1)[0]


def check_lane(lane: str) -> str:
    if lane and lane not in LANES:
        raise LaneError(f"INFEROPS_LANE={lane!r} names no lane (one of: {', '.join(LANES)}, or unset for every test)")
    return lane


def is_shared(case: Case, lane: str) -> bool:
    """Whether the case is one of those the two whole-suite versions share out."""
    return lane in CASE_SHARE and not case.unit and not case.every_version


def runs_here(cases: t.Sequence[Case], lane: str, claimed: bool = False) -> list[bool]:
    """For each case, whether the lane collects it (``claimed``: the shared cases are all collected,
    and taken at run time with Claims)."""
    check_lane(lane)
    seen: dict[str, int] = {}
    keep = []
    for case in cases:
        if not lane:
            keep.append(True)
        elif case.unit:
            keep.append(case.ansible or lane in PURE_UNIT_LANES)
        elif is_shared(case, lane) and not claimed:
            index = seen.get(case.module, 0)
            seen[case.module] = index + 1
            keep.append(index % len(CASE_SHARE) == CASE_SHARE[lane])
        else:
            keep.append(True)
    return keep


class Claims:
    """The shared tests taken by the whole-suite versions run side by side: the first to create a
    test's file in the directory runs it (O_EXCL: exactly one of them)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    @classmethod
    def from_env(cls) -> Claims | None:
        directory = os.environ.get(CLAIMS_ENV, "")
        return cls(directory) if directory else None

    def take(self, nodeid: str) -> bool:
        """True when this run takes the test (no other took it before)."""
        path = self.directory / hashlib.sha256(nodeid.encode()).hexdigest()[:32]
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        try:
            os.write(fd, f"{os.environ.get('INFEROPS_LANE', '')} {nodeid}\n".encode())
        finally:
            os.close(fd)
        return True
