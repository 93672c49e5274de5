"""The wait's progress lines with the ETA the host's start history gives (plugins/plugin_utils/_wait.py,
Settings.history_starts), on the real start of tests/unit/data/corpus: the expected time left, recalibrated
at each phase marker; nothing without a history."""

from __future__ import annotations

import re
import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils import _history
from tests.unit.conftest import CORPUS, CorpusLog
from tests.unit.plugins.plugin_utils.test_wait import CAPTURING, LOADING, Clock, Target, new_wait

# three earlier good starts of this server: its real start, 10x slower (a large model)
REAL = _history.observe(CorpusLog(CORPUS / "logs" / "sglang-ready-01.log").body.splitlines(), "pass")


def good_starts(factors: t.Sequence[float] = (9.0, 10.0, 11.0)) -> list[dict[str, t.Any]]:
    starts = []
    for factor in factors:
        phases = {phase: round(seconds * factor, 1) for phase, seconds in REAL["phases"].items()}
        starts.append({"phases": phases, "total": round(sum(phases.values()), 1)})
    return starts


def test_progress_lines_carry_an_eta_recalibrated_at_each_phase() -> None:
    clock, target = Clock(), Target()
    starts = good_starts()
    wait = new_wait(clock, heartbeat=30, stall_limit=1000, history_starts=starts)
    wait.begin()
    medians = _history.phase_medians(starts)
    clock.now += 5
    wait.observe(target.probe(LOADING), clock())
    (loading,) = wait.take_messages()
    # weight loading just began: what it and every phase after it usually take
    left = sum(value for phase, value in medians.items() if phase != "starting")
    assert f"5s elapsed, about {_history.human(left)} left (last 3 good starts: 3m45s-4m35s)" in loading, loading
    clock.now += 40
    wait.observe(target.probe(CAPTURING), clock())
    (capturing,) = wait.take_messages()
    later = sum(value for phase, value in medians.items() if phase not in ("starting", "loading_weights"))
    assert re.search(rf"45s elapsed, about {_history.human(later)} left", capturing), capturing


def test_without_a_history_the_progress_line_is_as_before() -> None:
    clock, target = Clock(), Target()
    wait = new_wait(clock)
    wait.begin()
    clock.now += 5
    wait.observe(target.probe(LOADING), clock())
    (shown,) = wait.take_messages()
    assert shown == "gpu1: sglang.service loading weights, 5s elapsed, 4 lines allowlisted"


def test_the_wait_result_keeps_the_eta_given_at_each_phase_marker() -> None:
    clock, target = Clock(), Target()
    starts = good_starts()
    wait = new_wait(clock, heartbeat=30, stall_limit=1000, history_starts=starts)
    wait.begin()
    clock.now += 5
    wait.observe(target.probe(LOADING), clock())
    clock.now += 10
    wait.observe(target.probe(LOADING + 1), clock())  # the same phase: no new mark
    clock.now += 30
    wait.observe(target.probe(CAPTURING), clock())
    eta = wait.result()["eta"]
    assert (eta["starts"], eta["low"], eta["high"]) == (3, min(s["total"] for s in starts), max(s["total"] for s in starts))
    assert [mark["phase"] for mark in eta["given"]] == ["loading_weights", wait.total["phase"]]
    first, last = eta["given"]
    assert (first["at"], last["at"]) == (5.0, 45.0)
    # each mark: when it was given, what was left, and so when the start was expected to be ready
    assert all(mark["ends_at"] == round(mark["at"] + mark["remaining"], 1) for mark in eta["given"])
    assert first["remaining"] > last["remaining"] > 0


def test_without_a_history_the_wait_gives_no_eta() -> None:
    clock, target = Clock(), Target()
    wait = new_wait(clock)
    wait.begin()
    clock.now += 5
    wait.observe(target.probe(LOADING), clock())
    assert wait.result()["eta"] is None
