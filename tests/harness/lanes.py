"""Which tests a run on one ansible-core version executes (``INFEROPS_LANE``, set by
``tests/harness/versions.py``; unset, as in ``make unit`` and ``make integration-dev``, runs all).

- The pure core's unit tests do not depend on ansible-core: they run in the development venv
  (``make unit``, the oldest Python) and on the newest version (the newest Python). The unit tests
  that exercise ansible-core (marked ``ansible``) run on every version.
- The integration tests are shared out between the two whole-suite versions (oldest and newest):
  in each module, in the order collected, every other test (a parametrized test's cases one by one)
  runs on one and the others on the other, so each version runs half of every module's tests and
  together they run all. The oldest takes each module's first test, so the odd test out of a module
  too: the newest also runs the pure core's unit tests (when it took the odd tests out as well, it
  ran 16 minutes longer than the oldest; shared out module by module, still 6). The tests marked
  ``every_version`` (the ones whose subject is what differs between ansible-core versions) run on
  both. A test is two to eight real playbook runs against real systemd hosts: running each on both
  doubled the suite's time without testing another code path.
"""

from __future__ import annotations

import dataclasses
import typing as t

LANES = ("dev", "oldest", "newest", "short")
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


def runs_here(cases: t.Sequence[Case], lane: str) -> list[bool]:
    """For each case, whether the lane runs it."""
    check_lane(lane)
    seen: dict[str, int] = {}
    keep = []
    for case in cases:
        if not lane:
            keep.append(True)
        elif case.unit:
            keep.append(case.ansible or lane in PURE_UNIT_LANES)
        elif lane in CASE_SHARE and not case.every_version:
            index = seen.get(case.module, 0)
            seen[case.module] = index + 1
            keep.append(index % len(CASE_SHARE) == CASE_SHARE[lane])
        else:
            keep.append(True)
    return keep
