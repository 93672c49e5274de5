# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shapes of the data that flows through the collection: journal report, event, unit state,
health result, and the wait's verdict and reasons.

Standard library only, no Ansible imports. These are contracts for the type checker: at run time
they are plain dicts (they travel as JSON between the target and the controller).
"""

from __future__ import annotations

import typing as t

# why a wait ended; `ready` is the reason of a pass
Reason = t.Literal[
    "ready",
    "fatal_log",
    "unit_failed",
    "unit_inactive",
    "restarted",
    "stalled",
    "budget_exhausted",
    "health_never_passed",
    "soak_failed",
    "journal_gap",
    "unreachable",
    "probe_failed",
    "peer_failed",
    "lease_lost",
    "invalid_options",
    "invalid_rules",
]


class Event(t.TypedDict, total=False):
    """One family of journal lines: deduplicated across ranks and repeats."""

    message: str
    key: str
    count: int
    ranks: list[str]
    rule: str | None
    reason: str | None
    level: str
    first_line: int
    last_line: int
    first_timestamp: str | None
    last_timestamp: str | None
    first_realtime: int | None
    context: list[str] | None
    traceback: list[str] | None
    suggested_rule: dict[str, t.Any] | None


class Progress(t.TypedDict, total=False):
    phase: str
    description: str
    percent: int | None
    done: int | None
    total: int | None
    text: str
    line: int


class Report(t.TypedDict, total=False):
    """The classifier's report of some journal lines (one slice, or a whole wait merged)."""

    verdict: str
    reason: str
    ready: bool
    ready_line: int | None
    phase: str
    phases: list[dict[str, t.Any]]
    progress: Progress | None
    fatal: list[Event]
    allowlisted: list[Event]
    unrecognized: list[Event]
    counts: dict[str, int]
    lines: int
    blob_lines: int
    dropped_events: int
    stale_rules: list[dict[str, t.Any]]
    strict: bool


class JournalSliceReport(Report, total=False):
    """What service_probe returns as ``journal``: a slice's report and where to continue."""

    cursor: str | None
    records: int
    invocation_id: str | None
    last_realtime: int | None
    tail: list[str]
    gap: str | None


class UnitState(t.TypedDict, total=False):
    """``systemctl show`` properties of the unit; numeric ones as ints."""

    Id: str
    LoadState: str
    ActiveState: str
    SubState: str
    MainPID: int
    NRestarts: int
    InvocationID: str
    ExecMainPID: int
    ExecMainStatus: int
    ExecMainCode: int
    Result: str
    ActiveEnterTimestampMonotonic: int
    StateChangeTimestampMonotonic: int
    ExecMainStartTimestampMonotonic: int


class HealthResult(t.TypedDict):
    """One HTTP health probe: ``up`` once a TCP connection was accepted, ``status`` the HTTP status."""

    url: str
    up: bool
    status: int | None
    error: str | None
    seconds: float


class ProbeResult(t.TypedDict):
    """What one service_probe call returns (the parts the wait reads)."""

    unit: UnitState
    journal: JournalSliceReport
    health: HealthResult | None


NodeStateName = t.Literal["waiting", "ready", "passed", "failed"]


class FatalLine(t.TypedDict, total=False):
    """The first fatal line of one node's start: where and when the journal got it."""

    message: str
    rule: str | None
    ranks: list[str]
    line: int | None
    timestamp: str | None
    realtime: int | None  # the journal record's __REALTIME_TIMESTAMP, microseconds since the epoch


class NodeState(t.TypedDict, total=False):
    """What one node's wait tells the other nodes of its deployment (the coordination channel)."""

    host: str
    rank: int
    state: NodeStateName
    reason: str | None
    msg: str | None
    phase: str
    first_fatal: FatalLine | None
    at: float  # seconds since the epoch when this state was written
