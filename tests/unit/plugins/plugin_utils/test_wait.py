"""The wait's state machine (plugin_utils/_wait.py), driven by fixture observations.

The journal slices are real: a real SGLang cold start (tests/unit/data/corpus/logs/sglang-ready-01.log)
and real fatal lines, classified by the real classifier as the probe module would on the target.
Only the unit's state, the health answers and the clock are made up, one step at a time.
"""

from __future__ import annotations

import re
import typing as t

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import Scanner, load_rules
from ansible_collections.inferops.runbooks.plugins.module_utils._types import HealthResult, ProbeResult
from ansible_collections.inferops.runbooks.plugins.plugin_utils._wait import (
    ConnectionLost,
    Outcome,
    Probe,
    ProbeFailed,
    Settings,
    Wait,
    run_wait,
)
from tests.unit.conftest import CORPUS, CorpusLog

INVOCATION = "5c6f1b0d2a0e4f7b9a3c8e1d2f4a6b8c"
OLD_INVOCATION = "0" * 32
READY_LOG = CorpusLog(CORPUS / "logs" / "sglang-ready-01.log").body.splitlines()
RULES = load_rules("sglang")


def until(needle: str) -> int:
    """The number of lines of the real start up to and including the first one containing ``needle``."""
    return next(number for number, line in enumerate(READY_LOG, 1) if needle in line)


LOADING = until("Load weight begin")
CAPTURING = until("Capture cuda graph begin") if any("Capture cuda graph begin" in line for line in READY_LOG) else until("Load weight end")
READY = until("The server is fired up and ready to roll!")
FATAL = [
    "[2025-03-08 12:29:22 TP1] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1748, in run_scheduler_process',
    "    scheduler.event_loop_overlap()",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.99 GiB.",
    "[2025-03-08 12:29:23] Received sigquit from a child process. It usually means the child failed.",
]


def unit(**changes: t.Any) -> dict[str, t.Any]:
    state = {"ActiveState": "active", "SubState": "running", "MainPID": 4242, "NRestarts": 0, "InvocationID": INVOCATION, "Result": "success"}
    state.update(changes)
    return state


def health(status: int | None, error: str | None = None) -> HealthResult:
    return {"url": "http://127.0.0.1:30000/health_generate", "up": status is not None, "status": status, "error": error, "seconds": 0.01}


REFUSED = health(None, "connection refused")


class Target:
    """The managed host as the probe module sees it: a journal that grows, classified slice by slice."""

    def __init__(self, lines: t.Sequence[str] = READY_LOG) -> None:
        self.lines = list(lines)
        self.read = 0

    def probe(
        self, upto: int | None = None, state: dict[str, t.Any] | None = None, answer: HealthResult | None = None, extra: t.Sequence[str] = ()
    ) -> ProbeResult:
        """One observation: the journal lines from the last one read up to line ``upto`` (plus ``extra``)."""
        end = self.read if upto is None else upto
        new = self.lines[self.read : end] + list(extra)
        scanner = Scanner(RULES, line_offset=self.read)
        for line in new:
            scanner.feed_line(line)
        self.read = end
        report = scanner.finish()
        report.update(cursor=f"c{scanner.line_number}", records=len(new), invocation_id=INVOCATION, tail=new[-20:], gap=None)
        return t.cast(ProbeResult, {"unit": state or unit(), "journal": report, "health": answer})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def new_wait(clock: Clock, **settings: t.Any) -> Wait:
    values: dict[str, t.Any] = {"unit": "sglang.service", "host": "gpu1", "soak": 10.0, "health_successes": 2, "poll_interval": 5.0, "budget": 600.0}
    values.update(settings)
    return Wait(Settings(**values), clock(), rng=lambda: 0.5)


def drive(wait: Wait, clock: Clock, steps: t.Iterable[tuple[float, ProbeResult]]) -> Outcome:
    """Feed observations, each ``seconds`` after the last, until the wait decides."""
    step: t.Any = wait.begin()
    for seconds, observation in steps:
        assert isinstance(step, Probe), f"the wait ended early: {step}"
        clock.now += seconds
        step = wait.observe(observation, clock())
        if isinstance(step, Outcome):
            return step
    raise AssertionError(f"the wait did not end; next step {step}")


def good_start(target: Target) -> list[tuple[float, ProbeResult]]:
    return [
        (0.1, target.probe(0)),
        (5, target.probe(LOADING, answer=REFUSED)),
        (5, target.probe(CAPTURING, answer=REFUSED)),
        (5, target.probe(READY, answer=health(200))),
        (1, target.probe(answer=health(200))),
        (5, target.probe(answer=health(200))),
        (6, target.probe(answer=health(200))),
    ]


def test_a_clean_start_passes_after_k_successes_and_the_soak() -> None:
    clock, target = Clock(), Target()
    wait = new_wait(clock)
    outcome = drive(wait, clock, good_start(target))
    assert (outcome.verdict, outcome.reason) == ("pass", "ready"), outcome.msg
    result = wait.result()
    assert result["health"]["successes"] >= 2 and result["invocation_id"] == INVOCATION
    assert result["timeline"][0]["phase"] == "starting" and result["timeline"][-1]["phase"] == "ready"
    assert "failed" not in result and result["lines"] == READY
    messages = wait.take_messages()
    assert any("soaking 10s" in message for message in messages) and all(message.startswith("gpu1: sglang.service ") for message in messages)


def test_the_wait_knows_when_a_look_last_renewed_the_runs_lease() -> None:
    """What the phase after the wait needs to skip renewing a heartbeat a moment old: the time of the last
    look that renewed it, not of a look whose renewal failed."""
    clock, target = Clock(), Target()
    wait = new_wait(clock)
    held: dict[str, t.Any] = {"held": True, "holder": None}
    steps = [(seconds, t.cast(ProbeResult, {**observation, "lease": held})) for seconds, observation in good_start(target)]
    steps[-1] = (steps[-1][0], t.cast(ProbeResult, {**steps[-1][1], "lease": {"held": True, "problem": "the lease could not be renewed: disk full"}}))
    outcome = drive(wait, clock, steps)
    assert outcome.verdict == "pass"
    assert wait.lease_renewed_at == pytest.approx(clock.now - steps[-1][0])


def test_k_consecutive_successes_broken_by_one_failure_start_again() -> None:
    clock, target = Clock(), Target()
    wait = new_wait(clock, health_successes=3)
    steps = [
        (0.1, target.probe(READY)),
        (1, target.probe(answer=health(200))),
        (1, target.probe(answer=health(200))),
        (1, target.probe(answer=health(503))),
        (1, target.probe(answer=health(200))),
        (1, target.probe(answer=health(200))),
    ]
    with pytest.raises(AssertionError, match="did not end"):
        drive(wait, clock, steps)
    assert wait.soak_started is None and wait.streak == 2
    assert isinstance(wait.observe(target.probe(answer=health(200)), clock()), Probe)
    assert wait.soak_started == clock(), "the third success in a row opens the gates"


def test_a_fatal_line_fails_at_once_with_the_traceback() -> None:
    clock = Clock()
    target = Target(READY_LOG[:LOADING] + FATAL)
    outcome = drive(new_wait(clock), clock, [(0.1, target.probe(0)), (5, target.probe(LOADING)), (2, target.probe(LOADING + len(FATAL)))])
    assert (outcome.verdict, outcome.reason) == ("fail", "fatal_log")
    assert "CUDA out of memory" in outcome.msg or "Scheduler hit an exception" in outcome.msg


def test_evidence_of_a_failure_keeps_the_last_lines_and_when_it_was_seen() -> None:
    clock = Clock()
    target = Target(READY_LOG[:LOADING] + FATAL)
    wait = new_wait(clock)
    drive(wait, clock, [(0.1, target.probe(0)), (3, target.probe(LOADING + len(FATAL)))])
    result = wait.result()
    assert result["failed"] is True and result["detected"] == pytest.approx(3.1)
    assert result["last_lines"][-1] == FATAL[-1] and len(result["last_lines"]) <= 20
    assert any(event.get("traceback") for event in result["fatal"])


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        (unit(ActiveState="failed", SubState="failed", Result="exit-code", ExecMainStatus=1), "unit_failed"),
        (unit(ActiveState="activating", SubState="auto-restart"), "unit_failed"),
        (unit(ActiveState="inactive", SubState="dead"), "unit_inactive"),
        (unit(ActiveState="deactivating", SubState="stop-sigterm"), "unit_inactive"),
        (unit(InvocationID="f" * 32), "restarted"),
        (unit(NRestarts=1), "restarted"),
        (unit(MainPID=5151), "restarted"),
    ],
)
def test_the_unit_going_away_fails_the_start(state: dict[str, t.Any], reason: str) -> None:
    clock, target = Clock(), Target()
    steps = [(0.1, target.probe(0)), (5, target.probe(LOADING, state=state)), (1, target.probe(state=state))]
    outcome = drive(new_wait(clock), clock, steps)
    assert (outcome.verdict, outcome.reason) == ("fail", reason), outcome.msg


def test_a_fatal_line_stored_just_after_the_process_died_still_names_the_crash() -> None:
    """journald may store a dying process's last lines after systemd saw it exit: one last look."""
    clock = Clock()
    target = Target(READY_LOG[:LOADING] + FATAL)
    exited = unit(ActiveState="activating", SubState="auto-restart", Result="signal", ExecMainStatus=9)
    wait = new_wait(clock)
    wait.begin()
    wait.observe(target.probe(0), clock())
    step = wait.observe(target.probe(LOADING, state=exited), clock())
    assert isinstance(step, Probe) and not step.health and step.watch == 1.0
    outcome = wait.observe(target.probe(LOADING + len(FATAL), state=exited), clock())
    assert isinstance(outcome, Outcome) and outcome.reason == "fatal_log" and "systemd is about to restart it" in outcome.msg


def test_a_crash_names_the_fatal_line_even_when_the_unit_failed_in_the_same_look() -> None:
    clock = Clock()
    target = Target(READY_LOG[:LOADING] + FATAL)
    failed = unit(ActiveState="failed", SubState="failed", Result="exit-code")
    outcome = drive(new_wait(clock), clock, [(0.1, target.probe(0)), (2, target.probe(LOADING + len(FATAL), state=failed))])
    assert outcome.reason == "fatal_log"


def test_the_first_look_pins_the_start_it_read_though_systemd_restarted_the_unit_meanwhile() -> None:
    """The first look waited for a dying start's traceback and systemd restarted the unit: the start
    to judge is the one the look read (the restart's), not its successor that systemd started."""
    clock, target = Clock(), Target(FATAL)
    wait = new_wait(clock)
    restarted = unit(InvocationID="f" * 32, NRestarts=1, SubState="auto-restart")
    outcome = drive(wait, clock, [(5.1, target.probe(len(FATAL), state=restarted))])
    assert (outcome.verdict, outcome.reason) == ("fail", "fatal_log"), outcome
    assert "torch.OutOfMemoryError" in outcome.msg and "was restarted during the start" in outcome.msg, outcome.msg
    assert wait.result()["invocation_id"] == INVOCATION


@pytest.mark.parametrize("fatal_seen", ["in the look that sees the restart", "only in the last look after it"])
def test_a_crash_that_systemd_already_restarted_is_named_by_its_fatal_line(fatal_seen: str) -> None:
    """The verdict depends on what the watched start logged, not on whether the look came before
    or after systemd's automatic restart."""
    clock = Clock()
    target = Target(READY_LOG[:LOADING] + FATAL)
    replaced = unit(InvocationID="f" * 32, NRestarts=1)
    seen = LOADING + len(FATAL) if fatal_seen.startswith("in the look") else LOADING
    steps = [(0.1, target.probe(0)), (5, target.probe(seen, state=replaced)), (1, target.probe(LOADING + len(FATAL), state=replaced))]
    outcome = drive(new_wait(clock), clock, steps)
    assert outcome.reason == "fatal_log", outcome.msg
    assert "was restarted during the start" in outcome.msg and "NRestarts 0 -> 1" in outcome.msg, outcome.msg


def test_no_progress_within_the_phase_stall_limit_fails_as_stalled() -> None:
    clock, target = Clock(), Target()
    wait = new_wait(clock, stall_limit=100, stall_limits={"loading_weights": 20})
    steps = [(0.1, target.probe(0)), (5, target.probe(LOADING))] + [(5, target.probe()) for _step in range(5)]
    outcome = drive(wait, clock, steps)
    assert outcome.reason == "stalled" and "loading weights" in outcome.msg and "stall limit 20s" in outcome.msg
    assert 20 < clock() - wait.progress_at <= 25


def test_the_probe_window_ends_at_the_stall_limit_and_the_soak() -> None:
    clock, target = Clock(), Target()
    wait = new_wait(clock, stall_limit=3, poll_interval=5)
    wait.begin()
    step = wait.observe(target.probe(LOADING), clock())
    assert isinstance(step, Probe) and step.watch == pytest.approx(3.2)
    step = wait.observe(target.probe(READY, answer=health(200)), clock())
    step = wait.observe(target.probe(answer=health(200)), clock())
    assert isinstance(step, Probe) and wait.soak_started is not None and step.watch <= 10 and step.health_early is False


def test_the_budget_ending_during_a_probe_fails_as_budget_exhausted() -> None:
    clock, target = Clock(), Target()
    wait = new_wait(clock, budget=8, stall_limit=100)
    wait.begin()
    clock.now += 0.1
    step = wait.observe(target.probe(LOADING), clock())
    assert isinstance(step, Probe) and step.watch == 5
    clock.now += 5
    step = wait.observe(target.probe(), clock())
    assert isinstance(step, Probe) and step.watch == pytest.approx(8 - 5.1, abs=0.01), "the last window is cut to the budget"
    clock.now += 4  # the probe overran the budget (a slow health answer, a slow connection)
    outcome = wait.observe(target.probe(), clock())
    assert isinstance(outcome, Outcome) and outcome.reason == "budget_exhausted" and "loading weights" in outcome.msg


def test_health_that_never_passes_fails_as_health_never_passed() -> None:
    clock, target = Clock(), Target()
    steps = [(0.1, target.probe(READY, answer=health(503)))] + [(2, target.probe(answer=health(503))) for _step in range(10)]
    outcome = drive(new_wait(clock, budget=15), clock, steps)
    assert outcome.reason == "health_never_passed" and "0/2 successes" in outcome.msg and "health 503" in outcome.msg


@pytest.mark.parametrize(
    ("soak_look", "words"),
    [
        ({"answer": health(503)}, "health 503 during the post-ready soak"),
        ({"answer": health(200), "extra": FATAL}, "fatal line"),
        ({"answer": health(200), "state": unit(MainPID=777)}, "main process changed"),
    ],
)
def test_trouble_during_the_soak_fails_as_soak_failed(soak_look: dict[str, t.Any], words: str) -> None:
    clock, target = Clock(), Target()
    last_look = target.probe(state=soak_look["state"]) if "state" in soak_look else target.probe()
    steps = [(0.1, target.probe(READY, answer=health(200))), (1, target.probe(answer=health(200))), (3, target.probe(**soak_look)), (1, last_look)]
    outcome = drive(new_wait(clock), clock, steps)
    assert outcome.reason in ("soak_failed", "restarted") and words in outcome.msg, outcome
    if "state" not in soak_look:
        assert outcome.reason == "soak_failed"


def test_strict_mode_fails_on_an_unrecognized_line_and_on_a_journal_gap() -> None:
    clock, target = Clock(), Target()
    outcome = drive(new_wait(clock, strict=True), clock, [(0.1, target.probe(0, extra=["Frobnicator returned error state 7, continuing"]))])
    assert outcome.reason == "fatal_log" and "strict mode" in outcome.msg
    clock, target = Clock(), Target()
    look = target.probe(LOADING)
    look["journal"]["gap"] = "the journal no longer holds the last entry read"
    wait = new_wait(clock, strict=True)
    outcome = drive(wait, clock, [(0.1, look)])
    assert outcome.reason == "journal_gap"
    lenient = new_wait(clock)
    lenient.begin()
    assert isinstance(lenient.observe(look, clock()), Probe) and lenient.result()["journal_gaps"] == [look["journal"]["gap"]]


def test_after_a_restart_the_wait_watches_the_new_invocation_only() -> None:
    clock, target = Clock(), Target()
    wait = new_wait(clock, previous_invocation_id=OLD_INVOCATION)
    assert wait.begin().pinning
    step = wait.observe(target.probe(0, state=unit(InvocationID=OLD_INVOCATION)), clock())
    assert isinstance(step, Probe) and step.pinning and step.pause > 0
    step = wait.observe(target.probe(0), clock())
    assert isinstance(step, Probe) and not step.pinning and wait.invocation_id == INVOCATION


def test_a_restart_that_never_happens_fails_after_the_switch_limit() -> None:
    clock, target = Clock(), Target()
    wait = new_wait(clock, previous_invocation_id=OLD_INVOCATION)
    old = unit(InvocationID=OLD_INVOCATION)
    outcome = drive(wait, clock, [(10, target.probe(0, state=old)) for _step in range(5)])
    assert outcome.reason == "restarted" and "the restart did not happen" in outcome.msg


def test_a_unit_that_never_ran_fails_as_inactive() -> None:
    clock, target = Clock(), Target()
    outcome = drive(new_wait(clock), clock, [(0.1, target.probe(0, state=unit(InvocationID="", ActiveState="inactive", MainPID=0)))])
    assert outcome.reason == "unit_inactive" and "never run" in outcome.msg


def test_a_connection_lost_and_regained_goes_on_with_backoff() -> None:
    clock, target = Clock(), Target()
    wait = new_wait(clock)
    wait.begin()
    wait.observe(target.probe(LOADING), clock())
    delays = []
    for _step in range(3):
        step = wait.connection_lost("ssh: connect to host gpu1 port 22: Connection refused", clock())
        assert isinstance(step, Probe) and step.reset_connection
        delays.append(step.pause)
    assert delays == [0.75, 1.5, 3.0], "exponential, with jitter (0.5 + rng/2 of the step)"
    assert isinstance(wait.observe(target.probe(READY, answer=health(200)), clock()), Probe)
    assert wait.failures == 0, "a probe that gets through resets the count"
    assert any("connection lost" in message and "retry 3/5" in message for message in wait.take_messages())


def test_too_many_lost_connections_fail_as_unreachable() -> None:
    clock, target = Clock(), Target()
    wait = new_wait(clock, connection_retries=2)
    wait.begin()
    wait.observe(target.probe(LOADING), clock())
    wait.connection_lost("reset", clock())
    wait.connection_lost("reset", clock())
    outcome = wait.connection_lost("reset", clock())
    assert isinstance(outcome, Outcome) and outcome.reason == "unreachable" and "3 times in a row" in outcome.msg


def test_backoff_never_sleeps_past_the_budget() -> None:
    clock, target = Clock(), Target()
    wait = new_wait(clock, budget=10, connection_retries=10)
    wait.begin()
    wait.observe(target.probe(LOADING), clock())
    clock.now += 9.5
    for _step in range(5):
        step = wait.connection_lost("reset", clock())
    assert isinstance(step, Probe) and step.pause <= 0.5


def test_run_wait_drives_the_loop_with_the_given_clock_sleep_and_transport() -> None:
    """The loop itself: pauses are slept, a lost connection is retried, a failed probe ends the wait."""
    clock, target = Clock(), Target()
    looks = iter([target.probe(0), ConnectionLost("Connection reset by peer"), target.probe(LOADING), ProbeFailed("systemctl not found")])
    calls: list[Probe] = []
    shown: list[str] = []

    def transport(probe: Probe) -> ProbeResult:
        calls.append(probe)
        clock.now += probe.watch
        look = next(looks)
        if isinstance(look, Exception):
            raise look
        return look

    result = run_wait(new_wait(clock), transport, clock, clock.sleep, shown.append)
    assert result["reason"] == "probe_failed" and "systemctl not found" in result["msg"]
    assert [call.reset_connection for call in calls] == [False, False, True, False]
    assert calls[0].pinning and not calls[0].health
    assert any("connection lost" in line for line in shown) and any("failing (probe_failed)" in line for line in shown)


def test_progress_is_shown_on_change_and_at_least_every_heartbeat() -> None:
    clock, target = Clock(), Target()
    wait = new_wait(clock, heartbeat=30, stall_limit=1000)
    wait.begin()
    clock.now += 5
    wait.observe(target.probe(LOADING), clock())
    assert len(wait.take_messages()) == 1
    for _step in range(4):
        clock.now += 5
        wait.observe(target.probe(), clock())
    assert wait.take_messages() == [], "nothing changed, and the heartbeat is not due"
    clock.now += 5
    wait.observe(target.probe(), clock())
    # 25 s after the last line: the next look, 5 s away, could come too late for the heartbeat
    (beat,) = wait.take_messages()
    assert "30s elapsed" in beat and "loading weights" in beat


def test_a_look_during_weight_loading_shows_the_progress_bar_of_the_real_log() -> None:
    """What the integration tests cannot assert under load (a look may miss a phase shorter than the
    poll interval): a look that sees the bar shows its figures."""
    clock, target = Clock(), Target()
    wait = new_wait(clock)
    wait.begin()
    halfway = next(index for index, line in enumerate(READY_LOG) if "checkpoint shards:  50%" in line)
    clock.now += 1
    wait.observe(target.probe(halfway + 1), clock())
    (shown,) = wait.take_messages()
    assert re.search(r"loading weights 50% \(7/14 shards\), 1s elapsed", shown), shown


def test_the_heartbeat_is_never_late_when_looks_take_longer() -> None:
    """Ten minutes of nothing new, looks 5 to 8 s apart (a loaded controller): a line at least every
    heartbeat, and not much more often."""
    clock, target = Clock(), Target()
    wait = new_wait(clock, heartbeat=30, stall_limit=10000, budget=3600)
    wait.begin()
    wait.observe(target.probe(LOADING), clock())
    shown = [clock.now] if wait.take_messages() else []
    for step in range(100):
        clock.now += 5 + (step * 7 % 4)
        wait.observe(target.probe(), clock())
        shown += [clock.now] if wait.take_messages() else []
    gaps = [later - earlier for earlier, later in zip(shown, shown[1:])]
    assert len(gaps) > 20 and max(gaps) <= 30 and min(gaps) >= 15, gaps
