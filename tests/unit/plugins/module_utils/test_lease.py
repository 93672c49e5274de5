"""The host's lease (module_utils/_lease.py and the run_lease call): taken once, by one run at a time,
even by runs that ask at the same moment in separate processes; renewed and released only by its
holder; taken over only when its heartbeat is stale."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils import _hostcall, _lease
from ansible_collections.inferops.runbooks.plugins.plugin_utils._hostcode import HOST_CALLS

UNIT = "sglang.service"


def holder(run_id: str) -> dict[str, object]:
    return {"run_id": run_id, "controller": "bastion", "pid": 4242, "user": "ops", "awx_job_id": 17}


def test_a_free_lease_is_taken_and_names_its_holder(tmp_path: Path) -> None:
    path = _lease.lease_path(UNIT, str(tmp_path))
    taken = _lease.acquire(path, UNIT, holder("run-a"), 600, now=1000.0)
    assert taken["outcome"] == "taken"
    on_disk = json.loads(Path(path).read_text())
    assert on_disk["run_id"] == "run-a" and on_disk["taken_at"] == on_disk["heartbeat_at"] == 1000.0
    text = _lease.describe(on_disk, 1012.0)
    assert "run run-a from ops@bastion (process 4242), AWX job 17" in text and "last heartbeat 12 s ago" in text


def test_a_live_lease_refuses_a_second_run_and_a_stale_one_is_taken_over(tmp_path: Path) -> None:
    path = _lease.lease_path(UNIT, str(tmp_path))
    _lease.acquire(path, UNIT, holder("run-a"), 600, now=1000.0)
    refused = _lease.acquire(path, UNIT, holder("run-b"), 600, now=1500.0)
    assert refused["outcome"] == "held" and refused["lease"]["run_id"] == "run-a" and refused["age"] == 500.0
    assert json.loads(Path(path).read_text())["run_id"] == "run-a"
    taken = _lease.acquire(path, UNIT, holder("run-b"), 600, now=1601.0)
    assert taken["outcome"] == "taken_over" and taken["previous"]["run_id"] == "run-a"
    assert json.loads(Path(path).read_text())["run_id"] == "run-b"


def test_only_the_holder_renews_or_releases(tmp_path: Path) -> None:
    path = _lease.lease_path(UNIT, str(tmp_path))
    _lease.acquire(path, UNIT, holder("run-a"), 600, now=1000.0)
    assert _lease.renew(path, "run-a", now=1030.0)["held"] is True
    assert json.loads(Path(path).read_text())["heartbeat_at"] == 1030.0
    lost = _lease.renew(path, "run-b", now=1031.0)
    assert lost["held"] is False and lost["lease"]["run_id"] == "run-a"
    assert _lease.release(path, "run-b")["released"] is False and Path(path).exists()
    assert _lease.release(path, "run-a")["released"] is True and not Path(path).exists()
    assert _lease.renew(path, "run-a")["held"] is False


def test_a_torn_lease_file_counts_as_none(tmp_path: Path) -> None:
    path = _lease.lease_path(UNIT, str(tmp_path))
    Path(path).write_text('{"run_id": "run-a", "heartb')
    assert _lease.acquire(path, UNIT, holder("run-b"), 600)["outcome"] == "taken"


@pytest.mark.parametrize("unit", ["", "../etc/passwd", ".hidden"])
def test_a_unit_that_cannot_name_a_lease_is_refused(tmp_path: Path, unit: str) -> None:
    with pytest.raises(_lease.LeaseError, match="cannot name a lease"):
        _lease.lease_path(unit, str(tmp_path))


def _race(path: str, run_id: str, start: multiprocessing.synchronize.Event, results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    start.wait()
    results.put((run_id, _lease.acquire(path, UNIT, holder(run_id), 600)["outcome"]))


def test_runs_that_take_it_at_the_same_moment_get_it_once(tmp_path: Path) -> None:
    path = _lease.lease_path(UNIT, str(tmp_path))
    context = multiprocessing.get_context("fork")
    start, results = context.Event(), context.Queue()
    racers = [context.Process(target=_race, args=(path, f"run-{n}", start, results)) for n in range(8)]
    for racer in racers:
        racer.start()
    start.set()
    outcomes = dict(results.get(timeout=30) for _racer in racers)
    for racer in racers:
        racer.join(timeout=30)
    winners = [run for run, outcome in outcomes.items() if outcome == "taken"]
    assert len(winners) == 1 and sorted(set(outcomes.values())) == ["held", "taken"]
    assert json.loads(Path(path).read_text())["run_id"] == winners[0]


class Host:
    check_mode = False

    def run(self, argv: object) -> tuple[int, str, str]:
        raise AssertionError("the lease runs no command")

    def bin_path(self, name: str) -> str:
        raise AssertionError("the lease needs no program")

    def warn(self, text: str) -> None:
        raise AssertionError(text)


def test_the_call_takes_refuses_and_reads(tmp_path: Path) -> None:
    call = HOST_CALLS["run_lease"]
    base = {"unit": UNIT, "state_dir": str(tmp_path), "holder": {}, "stale_after": 600.0}
    first = call.run({**base, "action": "acquire", "run_id": "run-a"}, Host())
    assert first["outcome"] == "taken" and first["changed"] is True
    second = call.run({**base, "action": "acquire", "run_id": "run-b"}, Host())
    assert second["outcome"] == "held" and second["changed"] is False and second["holder"].startswith("run run-a from ")
    seen = HOST_CALLS["run_record"].run({"unit": UNIT, "state_dir": str(tmp_path), "step": None, "run_id": None, "updates": {}, "files": []}, Host())
    assert seen["lease"]["run_id"] == "run-a" and seen["lease_holder"].startswith("run run-a")
    with pytest.raises(_hostcall.CallFailed, match="needs a run_id"):
        call.run({**base, "action": "renew", "run_id": None}, Host())
    assert os.listdir(tmp_path) == sorted(os.listdir(tmp_path))
