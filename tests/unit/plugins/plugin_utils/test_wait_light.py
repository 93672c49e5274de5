"""The wait's looks are few: each ends at the next heartbeat or at a change, and health is probed
within a look (plugin_utils/_wait.py), with the same verdicts as looks every few seconds."""

from __future__ import annotations

import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils._types import ProbeResult
from ansible_collections.inferops.runbooks.plugins.plugin_utils._wait import Outcome, Probe, Settings, Wait
from tests.unit.plugins.plugin_utils.test_wait import LOADING, READY, REFUSED, Clock, Target, health


def wait_with(clock: Clock, **settings: t.Any) -> Wait:
    values: dict[str, t.Any] = {"unit": "sglang.service", "host": "gpu1", "soak": 10.0, "health_successes": 2, "budget": 3600.0, "stall_limit": 900.0}
    values.update(settings)
    return Wait(Settings(**values), clock(), rng=lambda: 0.5)


def with_answers(observation: ProbeResult, *answers: t.Any, watched: float = 0.0) -> ProbeResult:
    result = dict(observation)
    result.update(health=answers[-1] if answers else None, health_history=list(answers), watched=watched)
    return t.cast(ProbeResult, result)


def test_by_default_a_quiet_look_lasts_until_just_before_the_next_heartbeat() -> None:
    clock, target = Clock(), Target()
    wait = wait_with(clock)
    wait.begin()
    clock.now += 0.5
    step = wait.observe(with_answers(target.probe(LOADING), REFUSED, watched=0.1), clock())
    assert isinstance(step, Probe) and 20 <= step.watch <= 28, step
    assert step.health and step.health_every > 0


def test_every_look_returns_in_time_for_a_heartbeat_line() -> None:
    """Looks that take their whole window, with a second of overhead each: a line at least every 30 s."""
    clock, target = Clock(), Target()
    wait = wait_with(clock, heartbeat=30, stall_limit=10000)
    step: t.Any = wait.begin()
    clock.now += 1
    step = wait.observe(with_answers(target.probe(LOADING), REFUSED, watched=0.1), clock())
    shown = [clock.now] if wait.take_messages() else []
    for _look in range(40):
        assert isinstance(step, Probe)
        clock.now += step.pause + step.watch + 1.0
        step = wait.observe(with_answers(target.probe(), REFUSED, watched=step.watch), clock())
        shown += [clock.now] if wait.take_messages() else []
    gaps = [later - earlier for earlier, later in zip(shown, shown[1:])]
    assert len(gaps) > 30 and max(gaps) <= 30, gaps
    assert wait.probes < 50, "a look every heartbeat, not every few seconds"


def test_answers_within_one_look_count_in_order_towards_the_health_gate() -> None:
    clock, target = Clock(), Target()
    wait = wait_with(clock)
    wait.begin()
    clock.now += 1
    wait.observe(with_answers(target.probe(LOADING), REFUSED), clock())
    clock.now += 5
    step = wait.observe(with_answers(target.probe(READY), health(503), health(200), health(200)), clock())
    assert wait.streak == 2 and wait.soak_started is not None
    assert isinstance(step, Probe) and not step.health_early and step.health_needed == 0
    assert [entry["status"] for entry in wait.history][-2:] == [503, 200]


def test_a_failing_answer_within_the_soak_still_fails_it() -> None:
    clock, target = Clock(), Target()
    wait = wait_with(clock)
    wait.begin()
    clock.now += 1
    wait.observe(with_answers(target.probe(READY), health(200), health(200)), clock())
    clock.now += 3
    outcome = wait.observe(with_answers(target.probe(), health(200), health(503)), clock())
    assert isinstance(outcome, Outcome) and outcome.reason == "soak_failed"


def test_the_next_look_asks_for_the_successes_still_needed_and_names_the_last_answer() -> None:
    clock, target = Clock(), Target()
    wait = wait_with(clock, health_successes=3)
    wait.begin()
    clock.now += 1
    step = wait.observe(with_answers(target.probe(READY), health(503), health(200)), clock())
    assert isinstance(step, Probe) and step.health_needed == 2 and wait.health_known() == "200"
    clock.now += 1
    step = wait.observe(with_answers(target.probe(), REFUSED), clock())
    assert isinstance(step, Probe) and step.health_needed == 3 and wait.health_known() == "down"
