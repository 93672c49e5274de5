# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The wait through a cold start, as a state machine: observations in, the next probe or a verdict out.

Standard library only, no Ansible imports, no I/O: the clock, the sleep, the probe and the display
are passed in (``run_wait``), so every decision is unit-tested with fixture observations.

One observation is one ``service_probe`` result: the unit's state, the journal slice read since
the last one (already classified on the target), and an optional health probe. The wait folds it
into its state (the merged report, the health streak, the progress clock) and decides, in this
order: a fatal line (``fatal_log``, or ``soak_failed`` after the gates opened), the watched start
was replaced (``restarted``), the unit failed or stopped, the soak, a stall, the gates
(the ready marker, K consecutive health successes), the pass, and the budget.

A node of a multi-node deployment (``peers`` set) also observes the other nodes' waits between
probes (``peers_seen``, fed from the deployment's coordination channel): a peer that failed ends
this wait (``peer_failed``) after a last look at this node's own journal, so that the consequences
it logged are in the evidence. Node 0 passes only when every other node is ready; a node of rank
>= 1 passes only when node 0 passed. A node of rank >= 1 serves a placeholder health endpoint that
answers 200 unconditionally: its answers are recorded and never counted; its gates are the unit,
its own journal's readiness evidence and no fatal line. A node of rank >= 1 of an engine whose
workers serve no HTTP at all (the driver's ``worker_http``: vLLM's ``--headless`` data parallel
nodes) is never health-probed; its journal's readiness is the driver's ``worker_ready_phase``.
"""

from __future__ import annotations

import dataclasses
import random
import typing as t
from collections import deque

from ansible_collections.inferops.runbooks.plugins.module_utils import _history
from ansible_collections.inferops.runbooks.plugins.module_utils._engines import drivers_for
from ansible_collections.inferops.runbooks.plugins.module_utils._option_specs import DEFAULT_UNIT
from ansible_collections.inferops.runbooks.plugins.module_utils._report import empty_report, merge_reports, phase_index
from ansible_collections.inferops.runbooks.plugins.module_utils._systemd import identity
from ansible_collections.inferops.runbooks.plugins.module_utils._types import (
    FatalLine,
    HealthResult,
    NodeState,
    ProbeResult,
    Reason,
    Report,
    UnitState,
)

SWITCH_LIMIT = 30.0  # how long a restarted unit may keep its old invocation before the restart counts as lost
SWITCH_PAUSE = 0.5
HEALTH_PAUSE = 1.0  # between health probes, so that a probe returning at once does not hammer the server
HEALTH_SOAK_PACE = 5.0  # how often health is probed during the soak (within a look), at most
TAIL_LINES = 20
HISTORY_MAX = 50
BACKOFF_BASE = 1.0
BACKOFF_MAX = 10.0
EXIT_SETTLE = 1.0  # after the unit's process exited, how long its last journal lines are waited for
PEER_POLL = 2.0  # a node of a deployment looks at its peers at least this often
# after a peer failed, how long the last look at this node's journal may watch for the consequence there
# (a distributed error once the peer's connection closed); the look returns at the fatal line, so this
# bounds only a node that logs none. 3 s, then 8 s, missed node 0's consequence on a loaded machine (load 14 on 2 cores).
PEER_SETTLE = 15.0
JOIN_LIMIT = 60.0  # how long a peer may take to start its wait before the deployment counts as broken
# a heartbeat is shown early enough that the next look, taking as long as the longest recent one and
# half again, cannot make it late
TURNS_KEPT = 10
TURN_MARGIN = 1.5
LOOK_MARGIN = 2.0  # a look ends at least this long (or half again its recent overhead) before a heartbeat is due


@dataclasses.dataclass(frozen=True)
class Settings:
    """The wait's options (see the wait_ready module documentation)."""

    unit: str = DEFAULT_UNIT
    host: str = "host"
    budget: float = 3600.0
    stall_limit: float = 900.0
    stall_limits: t.Mapping[str, float] = dataclasses.field(default_factory=dict)
    health_successes: int = 2
    health_timeout: float = 30.0
    soak: float = 10.0
    poll_interval: float = 30.0
    heartbeat: float = 30.0
    strict: bool = False
    connection_retries: int = 5
    invocation_id: str | None = None
    previous_invocation_id: str | None = None
    deployment: str | None = None
    node_rank: int = 0
    peers: t.Mapping[str, int] = dataclasses.field(default_factory=dict)  # the deployment's other nodes: host -> rank
    # what a node of rank >= 1 serves over HTTP (the engine driver's worker_http): placeholder or none
    worker_http: str = "placeholder"
    # for worker_http none: the phase of the node's own journal that proves it ready (None: its ready lines)
    worker_ready_phase: str | None = None
    # the host's recent good starts on this configuration (start_history's good_starts): an ETA in the progress lines
    history_starts: t.Sequence[t.Mapping[str, t.Any]] = ()

    @classmethod
    def from_args(cls, args: t.Mapping[str, t.Any], host: str) -> Settings:
        names = {field.name for field in dataclasses.fields(cls)}
        values = {name: args[name] for name in names if name in args and args[name] is not None}
        values["stall_limits"] = {phase: float(limit) for phase, limit in (args.get("stall_limits") or {}).items()}
        values["peers"] = {str(peer): int(rank) for peer, rank in (args.get("peers") or {}).items()}
        values.update(worker_roles(args.get("engine")))
        return cls(host=host, **values)

    def node(self, host: str | None = None) -> str:
        """``sim2 (node 1 of dsr1)``: a host named with its place in the deployment."""
        host = host or self.host
        rank = self.node_rank if host == self.host else self.peers.get(host)
        return f"{host} (node {rank} of {self.deployment})" if self.deployment else host


def worker_roles(engine: str | None) -> dict[str, t.Any]:
    """What the nodes of rank >= 1 of ``engine`` serve (``worker_http``) and which phase of their
    journal proves them ready; a placeholder when the engine is not known (``auto``: probed, not counted)."""
    drivers = drivers_for(engine)
    if len(drivers) != 1 or drivers[0].worker_http != "none":
        return {"worker_http": "placeholder", "worker_ready_phase": None}
    return {"worker_http": "none", "worker_ready_phase": drivers[0].worker_ready_phase}


@dataclasses.dataclass(frozen=True)
class Probe:
    """The next service_probe call: how long it may watch, whether it probes health, what it reads."""

    watch: float
    health: bool = True
    health_early: bool = True
    health_timeout: float | None = None
    pause: float = 0.0  # sleep this long before the call
    health_every: float = 0.0  # probe health at this pace within the look once the port is open (0: once, at its end)
    health_needed: int = 0  # end the look once health answered 200 this many times in a row (with health_early)
    reset_connection: bool = False
    pinning: bool = False  # the first look: which invocation to watch


@dataclasses.dataclass(frozen=True)
class Outcome:
    verdict: t.Literal["pass", "fail"]
    reason: Reason
    msg: str


Step = t.Union[Probe, Outcome]


def human(seconds: float) -> str:
    """``2m10s``, ``45s``, ``1h02m``."""
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def health_text(health: t.Mapping[str, t.Any] | None) -> str:
    if not health:
        return "health not probed"
    if health.get("status") is not None:
        return f"health {health['status']}"
    return f"health: {health.get('error') or 'no answer'}"


class _Failed(Exception):
    def __init__(self, reason: Reason, msg: str) -> None:
        super().__init__(msg)
        self.reason: Reason = reason
        self.msg = msg


class Wait:
    """One host's wait. Call ``begin`` once, then ``observe`` with each probe's result (or
    ``connection_lost`` / ``probe_failed``) until an ``Outcome`` comes back; ``result`` is the
    wait's whole account. ``messages`` collects the progress lines to show."""

    def __init__(self, settings: Settings, now: float, rng: t.Callable[[], float] = random.random) -> None:
        self.settings = settings
        self.started = now
        self.now = now
        self.rng = rng
        self.invocation_id = settings.invocation_id
        self.total: Report = t.cast(Report, empty_report(settings.strict))
        self.cursor: str | None = None
        self.baseline: UnitState | None = None
        self.state: UnitState = t.cast(UnitState, {})
        self.health: HealthResult | None = None
        self.history: list[dict[str, t.Any]] = []
        self.ever_up = False
        self.streak = 0
        self.timeline: list[dict[str, t.Any]] = []
        # the ETA the progress lines gave, the first one of each phase (reported with the wait's result)
        self.eta_given: list[dict[str, t.Any]] = []
        self.progress_mark: tuple[t.Any, ...] | None = None
        self.progress_at = now
        self.soak_started: float | None = None
        self.soak_identity: tuple[t.Any, ...] | None = None
        self.pinned = False
        self.probes = 0
        self.failures = 0  # connection failures in a row
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.gaps: list[str] = []
        self.messages: list[str] = []
        self.outcome: Outcome | None = None
        self.exited: Outcome | None = None  # the unit's process exited: one last look at its journal
        self.detected: float | None = None
        self.peer_states: dict[str, NodeState] = {}
        self.peer_failure: tuple[str, NodeState] | None = None
        # when a look last renewed the heartbeat of the run's lease (on this wait's clock)
        self.lease_renewed_at: float | None = None
        self._last_status: str | None = None
        self._last_shown = float("-inf")
        self._turns: deque[float] = deque(maxlen=TURNS_KEPT)  # seconds between looks
        self._overheads: deque[float] = deque(maxlen=TURNS_KEPT)  # seconds of a look not spent watching

    # -- time ------------------------------------------------------------------------------------

    def elapsed(self, now: float | None = None) -> float:
        return (self.now if now is None else now) - self.started

    def remaining(self) -> float:
        return self.settings.budget - self.elapsed()

    # -- the protocol ----------------------------------------------------------------------------

    def begin(self) -> Probe:
        return Probe(watch=0.0, health=False, pinning=True)

    def observe(self, result: ProbeResult, now: float) -> Step:
        self._turns.append(now - self.now)
        self._overheads.append(max(now - self.now - float(t.cast(t.Mapping[str, t.Any], result).get("watched") or 0.0), 0.0))
        self.now = now
        self.probes += 1
        self.failures = 0
        if self.exited is not None:
            return self._last_look(result)
        try:
            if not self.pinned:
                waiting = self._pin(result)
                if waiting is not None:
                    if self.peer_failure is not None:
                        return self._end(Outcome("fail", "peer_failed", self._peer_failure_message()))
                    return waiting
            self._absorb(result)
            self._check()
            if self.peer_failure is not None:
                return self._end(Outcome("fail", "peer_failed", self._peer_failure_message()))
            if self._passed():
                return self._end(Outcome("pass", "ready", self._pass_message()))
            if self.remaining() <= 0:
                self._out_of_budget()
        except _Failed as failure:
            if failure.reason in ("unit_failed", "unit_inactive", "restarted") and self.pinned and self.remaining() > 0:
                # the watched process is gone; journald may still be storing what it wrote last, and a
                # fatal line there is the cause, whether or not systemd already started another one
                self.exited = Outcome("fail", failure.reason, failure.msg)
                return Probe(watch=min(EXIT_SETTLE, self.remaining()), health=False)
            return self._end(Outcome("fail", failure.reason, failure.msg))
        return self._next_probe()

    def _last_look(self, result: ProbeResult) -> Outcome:
        """After the unit's process exited: its last lines decide whether a fatal line explains it."""
        exited = t.cast(Outcome, self.exited)
        self._absorb(result)
        if self.total["fatal"]:
            reason: Reason = "soak_failed" if self.soak_started is not None else "fatal_log"
            first = str(self.total["fatal"][0].get("message", ""))[:300]
            return self._end(Outcome("fail", reason, f"fatal line in {self.settings.unit}'s journal: {first} ({exited.msg})"))
        return self._end(exited)

    def connection_lost(self, problem: str, now: float) -> Step:
        """The probe could not reach the host: retry after an exponential backoff with jitter,
        within the budget, with a fresh connection; give up after ``connection_retries`` in a row."""
        self.now = now
        self.failures += 1
        retries = self.settings.connection_retries
        if self.failures > retries:
            return self._end(Outcome("fail", "unreachable", f"lost the connection to {self.settings.host} {self.failures} times in a row: {problem}"))
        delay = min(BACKOFF_MAX, BACKOFF_BASE * 2 ** (self.failures - 1)) * (0.5 + self.rng() / 2)
        if self.remaining() <= 0:
            return self._end(Outcome("fail", "unreachable", f"lost the connection to {self.settings.host} as the budget ran out: {problem}"))
        delay = min(delay, max(self.remaining(), 0.0))
        self._show(f"connection lost ({problem.strip()[:120]}), retry {self.failures}/{retries} in {delay:.1f}s", force=True)
        probe_health = self.pinned and not self.headless
        return Probe(watch=0.0 if not self.pinned else self._window(), health=probe_health, pause=delay, reset_connection=True, pinning=not self.pinned)

    # -- the other nodes of a deployment ---------------------------------------------------------

    @property
    def in_deployment(self) -> bool:
        return bool(self.settings.peers)

    @property
    def placeholder_health(self) -> bool:
        """Nodes of rank >= 1 answer health from a placeholder server: 200 proves nothing about generation."""
        return self.settings.node_rank >= 1

    @property
    def headless(self) -> bool:
        """A node of rank >= 1 that serves no HTTP at all (vLLM's --headless): never health-probed."""
        return self.placeholder_health and self.settings.worker_http == "none"

    def _own_ready(self) -> bool:
        """This node's journal shows it ready: its ready lines, or a headless node's ready phase."""
        phase = self.settings.worker_ready_phase
        if self.headless and phase is not None:
            return phase_index(self.total["phase"]) >= phase_index(phase)
        return bool(self.total["ready"])

    def peers_seen(self, states: t.Mapping[str, NodeState], now: float) -> Step | None:
        """The other nodes' waits as the coordination channel shows them. A failed peer ends this
        wait after one last look at this node's journal (returned as the next probe); a peer that
        never started its wait ends it after JOIN_LIMIT. None: carry on."""
        if self.outcome is not None or not self.in_deployment or self.peer_failure is not None:
            return None
        self.now = now
        self.peer_states = {host: dict(states[host]) for host in self.settings.peers if host in states}  # type: ignore[misc]
        failed = [(host, state) for host, state in self.peer_states.items() if state.get("state") == "failed"]
        if failed:
            # the peer that failed on its own account, before one that only followed another
            self.peer_failure = min(failed, key=lambda item: (item[1].get("reason") == "peer_failed", item[1].get("at") or 0.0))
            host, state = self.peer_failure
            self._show(f"{self.settings.node(host)} failed ({state.get('reason')}); a last look at this node's journal", force=True)
            return Probe(watch=round(min(PEER_SETTLE, max(self.remaining(), 0.0)), 2), health=False, health_early=False)
        missing = [host for host in self.settings.peers if host not in self.peer_states]
        if missing and self.elapsed() > JOIN_LIMIT:
            names = ", ".join(self.settings.node(host) for host in missing)
            return self._end(
                Outcome(
                    "fail",
                    "peer_failed",
                    f"{names} did not start waiting within {human(JOIN_LIMIT)}: every node of a deployment must be waited on at once "
                    "(forks must be at least the number of nodes restarted together)",
                )
            )
        return None

    def _peer_failure_message(self) -> str:
        host, state = self.peer_failure or ("?", t.cast(NodeState, {}))
        return f"{self.settings.node(host)} failed ({state.get('reason')}): {str(state.get('msg') or '')[:300]}"

    def _peers_allow_pass(self) -> bool:
        """Node 0 needs every other node ready; a node of rank >= 1 needs node 0 passed."""
        for host, rank in self.settings.peers.items():
            state = self.peer_states.get(host, {}).get("state")
            if state not in (("passed",) if rank == 0 else ("ready", "passed")):
                return False
        return True

    def _waiting_for(self) -> str:
        pending = []
        for host, rank in sorted(self.settings.peers.items(), key=lambda item: item[1]):
            state = self.peer_states.get(host, {})
            if state.get("state") not in (("passed",) if rank == 0 else ("ready", "passed")):
                name, where = str(state.get("state") or "no news"), str(state.get("phase") or "not started").replace("_", " ")
                pending.append(f"{host} (node {rank}: {name}{'' if where == name else ', ' + where})")
        return ", ".join(pending)

    def first_fatal(self) -> FatalLine | None:
        """This node's first fatal line, with the journal's time of it when the probe gave one."""
        events = self.total["fatal"]
        if not events:
            return None
        first = min(events, key=lambda event: event.get("first_line") or 0)
        return {
            "message": str(first.get("message", ""))[:500],
            "rule": first.get("rule"),
            "ranks": list(first.get("ranks") or []),
            "line": first.get("first_line"),
            "timestamp": first.get("first_timestamp"),
            "realtime": first.get("first_realtime"),
        }

    def node_state(self) -> NodeState:
        """What this wait tells the other nodes of its deployment."""
        outcome = self.outcome
        if outcome is not None:
            name: t.Literal["waiting", "ready", "passed", "failed"] = "passed" if outcome.verdict == "pass" else "failed"
        else:
            name = "ready" if self.soak_started is not None else "waiting"
        return {
            "host": self.settings.host,
            "rank": self.settings.node_rank,
            "state": name,
            "reason": outcome.reason if outcome else None,
            "msg": outcome.msg[:500] if outcome else None,
            "phase": self.total["phase"],
            "first_fatal": self.first_fatal(),
        }

    def probe_failed(self, msg: str, now: float) -> Outcome:
        self.now = now
        return self._end(Outcome("fail", "probe_failed", f"service_probe failed on {self.settings.host}: {msg}"))

    # -- which start to watch --------------------------------------------------------------------

    def _pin(self, result: ProbeResult) -> Probe | None:
        """The given invocation, or the unit's current one; after a restart (``previous_invocation_id``)
        wait until the unit runs a new one."""
        state = result["unit"]
        current = state.get("InvocationID") or ""
        previous = self.settings.previous_invocation_id
        # the start the look read: systemd may have restarted the unit while the look waited for a
        # dying start's traceback, and the start to judge is the one the restart made, not its successor
        read = str(result["journal"].get("invocation_id") or "")
        if read and read not in (previous, current) and result["journal"].get("records"):
            current = read
        self.state = state
        if self.invocation_id is None and previous and current == previous:
            if self.elapsed() > min(SWITCH_LIMIT, self.settings.budget):
                reason: Reason = "unit_inactive" if state.get("ActiveState") != "active" else "restarted"
                raise _Failed(reason, f"{self.settings.unit} still runs invocation {previous} after {human(self.elapsed())}: the restart did not happen")
            return Probe(watch=0.0, health=False, pause=SWITCH_PAUSE, pinning=True)
        if self.invocation_id is None:
            if not current:
                raise _Failed("unit_inactive", f"{self.settings.unit} has never run (no InvocationID; ActiveState={state.get('ActiveState')})")
            self.invocation_id = current
        self.baseline = state if state.get("InvocationID") == self.invocation_id else None
        self.pinned = True
        return None

    # -- folding an observation in ---------------------------------------------------------------

    def _absorb(self, result: ProbeResult) -> None:
        self._check_lease(t.cast(t.Mapping[str, t.Any], result).get("lease"))
        self.state = result["unit"]
        journal = result["journal"]
        if journal.get("invocation_id") == self.invocation_id:
            self.total = t.cast(Report, merge_reports(self.total, journal))
            self.cursor = journal.get("cursor") or self.cursor
            self.tail.extend(journal.get("tail") or [])
            gap = journal.get("gap")
            if gap:
                self.gaps.append(gap)
                self._show(f"journal gap: {gap}", force=True)
        self._note_phase()
        self._note_progress()
        answers = t.cast(t.Mapping[str, t.Any], result).get("health_history") or ([result["health"]] if result.get("health") is not None else [])
        for answer in answers:
            self._note_health(t.cast(HealthResult, answer))
        self._show(self._status())

    def _check_lease(self, lease: t.Any) -> None:
        """Another run holds the host now (it took the lease over as a dead run's): this wait's start
        is no longer this run's to judge."""
        if isinstance(lease, t.Mapping) and lease.get("held") is False:
            holder = lease.get("holder") or "nobody (the lease was removed)"
            raise _Failed("lease_lost", f"changed by someone else during this run: the host's lease is now held by {holder}")
        if isinstance(lease, t.Mapping) and lease.get("held") and not lease.get("problem"):
            self.lease_renewed_at = self.now

    def _note_phase(self) -> None:
        phase = self.total["phase"]
        if self.timeline and self.timeline[-1]["phase"] == phase:
            return
        at = round(self.elapsed(), 1)
        if self.timeline:
            self.timeline[-1]["duration"] = round(at - self.timeline[-1]["started"], 1)
        self.timeline.append({"phase": phase, "started": at, "duration": None})

    def _note_progress(self) -> None:
        counts = self.total.get("counts") or {}
        progress = self.total.get("progress") or {}
        mark = (self.total["phase"], counts.get("progress", 0), counts.get("ready", 0), progress.get("done"), progress.get("percent"))
        if mark != self.progress_mark:
            self.progress_mark = mark
            self.progress_at = self.now

    def _note_health(self, health: HealthResult) -> None:
        self.health = health
        self.ever_up = self.ever_up or bool(health.get("up"))
        status = health.get("status")
        self.streak = self.streak + 1 if status == 200 else 0
        label = status if status is not None else (health.get("error") or "no answer")
        if not self.history or self.history[-1]["status"] != label:
            self.history.append({"status": label, "at": round(self.elapsed(), 1)})
            del self.history[:-HISTORY_MAX]

    # -- the decisions ---------------------------------------------------------------------------

    def _check(self) -> None:
        try:
            self._check_same_start()
        except _Failed as replaced:
            self._check_journal(then=replaced.msg)  # a fatal line of the watched start explains its end
            raise
        self._check_journal()
        self._check_unit()
        if self.peer_failure is not None:
            return  # the last look after a peer failed: a stall here is the peer's doing, not news
        if self.soak_started is not None:
            self._check_soak()
            return
        self._check_stall()
        if self._gates_open():
            self.soak_started = self.now
            self.soak_identity = self._identity()
            self._show(self._status(), force=True)

    def _check_same_start(self) -> None:
        state, base, unit = self.state, self.baseline, self.settings.unit
        restarts = int(state.get("NRestarts") or 0) - int(base.get("NRestarts") or 0) if base else 0
        if state.get("InvocationID") != self.invocation_id or restarts > 0:
            before = f"{base.get('NRestarts')} -> " if base else "now "
            raise _Failed(
                "restarted",
                f"{unit} was restarted during the start (InvocationID {self.invocation_id} -> {state.get('InvocationID') or 'none'}, "
                f"NRestarts {before}{state.get('NRestarts')}): the start is lost",
            )
        if base and base.get("MainPID") and state.get("MainPID") and state.get("MainPID") != base.get("MainPID"):
            raise _Failed("restarted", f"{unit}'s main process changed ({base.get('MainPID')} -> {state.get('MainPID')}) during the start")

    def _check_journal(self, then: str = "") -> None:
        unit = self.settings.unit
        if self.total["fatal"]:
            first = self.total["fatal"][0]
            reason: Reason = "soak_failed" if self.soak_started is not None else "fatal_log"
            after = f" ({then})" if then else ""
            raise _Failed(reason, f"fatal line in {unit}'s journal: {str(first.get('message', ''))[:300]}{after}")
        if self.settings.strict and self.total["unrecognized"]:
            first = self.total["unrecognized"][0]
            raise _Failed("fatal_log", f"strict mode: unrecognized line in {unit}'s journal: {str(first.get('message', ''))[:300]}")
        if self.settings.strict and self.gaps:
            raise _Failed("journal_gap", f"strict mode: {unit}'s journal has a gap: {self.gaps[0]}")

    def _check_unit(self) -> None:
        state, unit = self.state, self.settings.unit
        active, sub = state.get("ActiveState"), state.get("SubState")
        how = f"Result={state.get('Result')}, ExecMainCode={state.get('ExecMainCode')}, ExecMainStatus={state.get('ExecMainStatus')}"
        if active == "failed":
            raise _Failed("unit_failed", f"{unit} failed ({how})")
        if sub == "auto-restart":
            raise _Failed("unit_failed", f"{unit}'s main process exited ({how}); systemd is about to restart it")
        if active in ("inactive", "deactivating"):
            raise _Failed("unit_inactive", f"{unit} is {active} ({sub}; {how}): it was stopped or exited")

    def _check_soak(self) -> None:
        if self._identity() != self.soak_identity:
            raise _Failed("soak_failed", f"{self.settings.unit} changed during the post-ready soak: {self._identity()} (was {self.soak_identity})")
        if not self.placeholder_health and self._health_status() != 200:
            raise _Failed("soak_failed", f"{health_text(self.health)} during the post-ready soak (after {human(self.now - (self.soak_started or 0))})")

    def _check_stall(self) -> None:
        limit = self.stall_limit()
        quiet = self.now - self.progress_at
        if limit is not None and quiet > limit:
            phase = self.total["phase"].replace("_", " ")
            raise _Failed("stalled", f"no progress in phase {phase} for {human(quiet)} (stall limit {human(limit)})")

    def _gates_open(self) -> bool:
        return (
            self.state.get("ActiveState") == "active"
            and self._own_ready()
            and (self.placeholder_health or self.streak >= self.settings.health_successes)
            and not self.total["fatal"]
        )

    def _passed(self) -> bool:
        if self.soak_started is None:
            return False
        healthy = self.placeholder_health or self._health_status() == 200
        return self.now - self.soak_started >= self.settings.soak and healthy and self._peers_allow_pass()

    def _out_of_budget(self) -> t.NoReturn:
        budget, spent = human(self.settings.budget), human(self.elapsed())
        if self.soak_started is not None and self.in_deployment:
            raise _Failed("budget_exhausted", f"budget of {budget} spent ({spent}): this node was ready, still waiting for {self._waiting_for()}")
        if self.placeholder_health:
            where = "ready (its own evidence)" if self._own_ready() else f"in phase {self.total['phase'].replace('_', ' ')}"
            raise _Failed("budget_exhausted", f"budget of {budget} spent ({spent}) {where}")
        if self.total["ready"] or self.ever_up:
            raise _Failed(
                "health_never_passed",
                f"budget of {budget} spent ({spent}): the server answered HTTP but health never passed "
                f"({self.streak}/{self.settings.health_successes} successes; last {health_text(self.health)})",
            )
        raise _Failed("budget_exhausted", f"budget of {budget} spent ({spent}) in phase {self.total['phase'].replace('_', ' ')}")

    def _health_status(self) -> int | None:
        return self.health["status"] if self.health else None

    def health_known(self) -> str | None:
        """The last answer, as service_probe's health_known names it (a look ends when it differs)."""
        if not self.health:
            return None
        if self.health.get("status") is not None:
            return str(self.health["status"])
        return "up" if self.health.get("up") else "down"

    def _identity(self) -> tuple[t.Any, ...]:
        return identity(self.state)

    def stall_limit(self) -> float | None:
        phase = self.total["phase"]
        if phase in self.settings.stall_limits:
            return self.settings.stall_limits[phase]
        if phase == "ready":
            return None  # the marker is in: waiting for health is the budget's business
        return self.settings.stall_limit

    # -- the next probe --------------------------------------------------------------------------

    def _next_probe(self) -> Probe:
        warm = phase_index(self.total["phase"]) >= phase_index("warming_up")
        pause = min(HEALTH_PAUSE, max(self.remaining(), 0.0)) if warm and self.soak_started is None else 0.0
        timeout = max(1.0, min(self.settings.health_timeout, self.remaining() + 1.0))
        soaking = self.soak_started is not None
        if self.headless:
            return Probe(watch=self._window(), health=False, health_early=False)
        return Probe(
            watch=self._window(pause),
            health=True,
            health_early=not soaking,
            health_timeout=timeout,
            pause=pause,
            health_every=min(self.settings.poll_interval, HEALTH_SOAK_PACE) if soaking else HEALTH_PAUSE,
            health_needed=0 if soaking else max(self.settings.health_successes - self.streak, 1),
        )

    def _window(self, pause: float = 0.0) -> float:
        """How long the next probe may watch: up to the poll interval, never past the budget, the
        stall limit, the end of the soak, or the moment the look must return for the next heartbeat."""
        left = max(self.remaining() - pause, 0.0)
        window = min(self.settings.poll_interval, self.settings.heartbeat, left)
        margin = max(LOOK_MARGIN, TURN_MARGIN * max(self._overheads, default=0.0))
        beat = self.settings.heartbeat - (self.now + pause - max(self._last_shown, self.started)) - margin
        window = min(window, max(beat, 1.0))
        if self.in_deployment:
            window = min(window, PEER_POLL)
        limit = self.stall_limit()
        if self.soak_started is not None:
            soak_left = self.settings.soak - (self.now + pause - self.soak_started)
            if soak_left > 0 or not self.in_deployment:  # after the soak a node of a deployment waits for its peers
                window = min(window, max(soak_left, 0.0))
        elif limit is not None:
            window = min(window, max(limit - (self.now + pause - self.progress_at), 0.0) + 0.2)
        return round(max(window, 0.0), 2)

    # -- display ---------------------------------------------------------------------------------

    def _status(self) -> str:
        total, phase = self.total, self.total["phase"]
        progress = total.get("progress")
        if self.placeholder_health and (self.soak_started is not None or phase == "ready"):
            placeholder = "headless, no HTTP" if self.headless else f"placeholder {health_text(self.health)}, not counted"
            if self.soak_started is not None and self.now - self.soak_started >= self.settings.soak and self._waiting_for():
                return f"ready (own evidence; {placeholder}), waiting for {self._waiting_for()}"
            return f"ready (own evidence; {placeholder})" + (f", soaking {human(self.settings.soak)}" if self.soak_started is not None else "")
        if self.soak_started is not None:
            if self.in_deployment and self.now - self.soak_started >= self.settings.soak and self._waiting_for():
                return f"ready ({health_text(self.health)}), waiting for {self._waiting_for()}"
            return f"ready, soaking {human(self.settings.soak)} ({health_text(self.health)})"
        if phase == "ready":
            return f"ready marker seen, {health_text(self.health)} ({self.streak}/{self.settings.health_successes} successes)"
        if phase == "warming_up":
            return f"warming up, {health_text(self.health)}"
        if progress and progress.get("phase") == phase:
            return str(progress.get("text") or phase.replace("_", " "))
        return phase.replace("_", " ")

    def _show(self, text: str, force: bool = False) -> None:
        """A progress line when the status changed, and at least every heartbeat: a heartbeat is due
        when waiting for the next look could take it past the heartbeat."""
        next_look = TURN_MARGIN * max(self._turns, default=0.0)
        if not force and text == self._last_status and self.now - self._last_shown + next_look < self.settings.heartbeat:
            return
        self._last_status, self._last_shown = text, self.now
        allowlisted = (self.total.get("counts") or {}).get("allowlisted", 0)
        extra = f", {allowlisted} lines allowlisted" if allowlisted else ""
        self.messages.append(f"{self.settings.node()}: {self.settings.unit} {text}, {human(self.elapsed())} elapsed{self._eta()}{extra}")

    def _eta(self) -> str:
        """``, about 6m left (last 5 good starts: 8m02s-9m40s)`` from the host's start history; "" without one."""
        phase = self.total["phase"]
        if not self.settings.history_starts or not self.timeline or phase == "ready" or self.outcome is not None:
            return ""
        found = _history.eta(self.settings.history_starts, phase, self.elapsed() - self.timeline[-1]["started"])
        if not found:
            return ""
        if not self.eta_given or self.eta_given[-1]["phase"] != phase:
            at = round(self.elapsed(), 1)
            self.eta_given.append({"phase": phase, "at": at, "remaining": found["remaining"], "ends_at": round(at + found["remaining"], 1)})
            del self.eta_given[:-HISTORY_MAX]
        return f", {found['text']}"

    def eta_result(self) -> dict[str, t.Any] | None:
        """The ETA the wait gave from the host's start history: the good starts it came from, their
        range, and the ETA at each phase marker (``at``, ``remaining``, ``ends_at``, in seconds of the
        wait); None without a history."""
        starts = self.settings.history_starts
        if not starts:
            return None
        totals = [float(entry["total"]) for entry in starts if isinstance(entry.get("total"), (int, float))]
        return {"starts": len(starts), "low": min(totals) if totals else None, "high": max(totals) if totals else None, "given": list(self.eta_given)}

    def take_messages(self) -> list[str]:
        messages, self.messages = self.messages, []
        return messages

    # -- the end ---------------------------------------------------------------------------------

    def _pass_message(self) -> str:
        if self.headless:
            return (
                f"{self.settings.unit} is ready after {human(self.elapsed())}: active, its own journal shows its engines ready, nothing fatal, "
                f"stayed up through a {human(self.settings.soak)} soak, and node 0 passed (a headless node: no HTTP, not probed)"
            )
        if self.placeholder_health:
            return (
                f"{self.settings.unit} is ready after {human(self.elapsed())}: active, its own journal shows its schedulers ready, nothing fatal, "
                f"stayed up through a {human(self.settings.soak)} soak, and node 0 passed (its placeholder health was not counted)"
            )
        return (
            f"{self.settings.unit} is ready after {human(self.elapsed())}: active, health passed {self.streak} times, ready marker seen, "
            f"nothing fatal, stayed healthy through a {human(self.settings.soak)} soak"
        )

    def _end(self, outcome: Outcome) -> Outcome:
        self.outcome = outcome
        if outcome.verdict == "fail":
            self.detected = round(self.elapsed(), 1)
            self._show(f"failing ({outcome.reason}): {outcome.msg[:200]}", force=True)
        if self.timeline and self.timeline[-1]["duration"] is None:
            self.timeline[-1]["duration"] = round(self.elapsed() - self.timeline[-1]["started"], 1)
        return outcome

    def result(self) -> dict[str, t.Any]:
        """The wait's account: verdict, reason, evidence, timeline, health."""
        outcome = self.outcome or Outcome("fail", "budget_exhausted", "the wait did not end")
        base: t.Mapping[str, t.Any] = self.baseline or {}
        total = self.total
        health: t.Mapping[str, t.Any] = self.health or {}
        result: dict[str, t.Any] = {
            "changed": False,
            "verdict": outcome.verdict,
            "reason": outcome.reason,
            "msg": outcome.msg,
            "elapsed": round(self.elapsed(), 1),
            "timeline": self.timeline,
            "phase": total["phase"],
            "progress": total.get("progress"),
            "fatal": total["fatal"],
            "allowlisted": total["allowlisted"],
            "request_error": total.get("request_error") or [],
            "survived": total.get("survived") or [],
            "unrecognized": total["unrecognized"],
            "counts": total.get("counts") or {},
            "stale_rules": total.get("stale_rules") or [],
            "lines": total.get("lines", 0),
            "journal_gaps": list(self.gaps),
            "health": {
                "status": health.get("status"),
                "up": health.get("up", False),
                "error": health.get("error"),
                "successes": self.streak,
                "history": self.history,
            },
            "invocation_id": self.invocation_id,
            "restarts": max(int(self.state.get("NRestarts") or 0) - int(base.get("NRestarts") or 0), 0),
            "unit": self.state,
            "probes": self.probes,
            "first_fatal": self.first_fatal(),
            "eta": self.eta_result(),
        }
        if self.placeholder_health:
            result["health"]["placeholder"] = True
            result["health"]["headless"] = self.headless
        if self.in_deployment:
            result.update(deployment=self.settings.deployment, node_rank=self.settings.node_rank, peers=self.peer_states)
        if outcome.verdict == "fail":
            result["failed"] = True
            result["last_lines"] = list(self.tail)
            result["detected"] = self.detected
        return result


class ConnectionLost(Exception):
    """The transport could not reach the host (the probe may be retried on a new connection)."""


class ProbeFailed(Exception):
    """The probe ran and failed (bad arguments, systemctl missing): retrying would not help."""


Transport = t.Callable[[Probe], ProbeResult]


class Channel(t.Protocol):
    """Where the nodes of one deployment tell each other how their waits go."""

    def publish(self, state: NodeState) -> None: ...

    def read(self) -> t.Mapping[str, NodeState]: ...


def run_wait(
    wait: Wait,
    transport: Transport,
    clock: t.Callable[[], float],
    sleep: t.Callable[[float], None],
    show: t.Callable[[str], None],
    channel: Channel | None = None,
) -> dict[str, t.Any]:
    """Drive a wait to its outcome: pause, probe, observe, show, until an Outcome; with a channel,
    publish this node's state whenever it changes and look at the peers' before every probe."""
    step: Step = wait.begin()
    published = _publish(wait, channel, None)
    while isinstance(step, Probe):
        if channel is not None:
            step = wait.peers_seen(channel.read(), clock()) or step
            for message in wait.take_messages():
                show(message)
            if not isinstance(step, Probe):
                break
        if step.pause > 0:
            sleep(step.pause)
        try:
            result = transport(step)
        except ConnectionLost as exc:
            step = wait.connection_lost(str(exc), clock())
        except ProbeFailed as exc:
            step = wait.probe_failed(str(exc), clock())
        else:
            step = wait.observe(result, clock())
        for message in wait.take_messages():
            show(message)
        published = _publish(wait, channel, published)
    _publish(wait, channel, published)
    return wait.result()


def _publish(wait: Wait, channel: Channel | None, last: NodeState | None) -> NodeState | None:
    if channel is None:
        return None
    state = wait.node_state()
    if state != last:
        channel.publish(state)
    return state
