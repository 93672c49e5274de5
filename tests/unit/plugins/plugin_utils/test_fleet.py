"""The fleet's decisions (plugin_utils/_fleet): batches canary first, the serving floor, the
tolerance, the bake's looks, where a generation goes and what the gateway's list says."""

from __future__ import annotations

import pytest

from ansible_collections.inferops.runbooks.plugins.plugin_utils import _fleet
from ansible_collections.inferops.runbooks.plugins.plugin_utils._deployment import Deployment, Node, rollout
from ansible_collections.inferops.runbooks.plugins.plugin_utils._options import Step, parse_batch_size

JUDGED = "a" * 32


def sizes(batch_size: object, total: int) -> list[int]:
    steps, problem = parse_batch_size(batch_size)
    assert problem is None
    return _fleet.batch_sizes(steps, total)


@pytest.mark.parametrize(
    ("batch_size", "total", "expected"),
    [
        (1, 4, [1, 1, 1, 1]),  # today's default: the canary, then one at a time
        (2, 6, [1, 2, 2, 1]),  # a number: the canary, then batches of it
        ([1, 2], 3, [1, 2]),  # a ramp that starts with the canary
        ([1, 5, "25%"], 40, [1, 5, 10, 10, 10, 4]),  # Ansible's own example, the last step repeated
        ("25%", 8, [1, 2, 2, 2, 1]),  # a percent of the play's deployments, the canary before it
        ("10%", 5, [1, 1, 1, 1, 1]),  # a percent rounds down, to 1 at least
        ("100%", 5, [1, 4]),
        ([3, 1], 6, [1, 3, 1, 1]),  # a ramp that does not start with 1 gets the canary first
        ("1, 2", 3, [1, 2]),  # AWX text
        (5, 1, [1]),
    ],
)
def test_batches_follow_the_ramp_canary_first(batch_size: object, total: int, expected: list[int]) -> None:
    assert sizes(batch_size, total) == expected
    assert sum(expected) == total


def test_no_deployment_no_batch() -> None:
    assert _fleet.batch_sizes([Step(2)], 0) == []


def test_the_rollout_counts_hosts_of_whole_deployments_per_ramp_step() -> None:
    pair = Deployment("pair", (Node("a0", 0), Node("a1", 1)), True)
    singles = [Deployment(name, (Node(name, 0),), False) for name in ("s1", "s2", "s3")]
    steps, _error = parse_batch_size([1, 2])
    plan = rollout([singles[0], pair, *singles[1:]], steps)
    assert plan["batches"] == [["s1"], ["pair", "s2"], ["s3"]]
    assert plan["serial"] == [1, 3, 1]
    assert plan["members"] == {"s1": ["s1"], "pair": ["a0", "a1"], "s2": ["s2"], "s3": ["s3"]}


def test_the_floor_is_met_by_the_other_deployments_that_serve() -> None:
    check = _fleet.judge_floor(["h1", "h2", "h3", "h4"], {"h2": None, "h3": None, "h4": "no generation"}, ["h1"], 2)
    assert check.met and check.reachable
    assert check.serving == ("h2", "h3") and check.not_serving == {"h4": "no generation"}


def test_the_floor_is_not_met_and_the_message_names_who_serves_and_who_does_not() -> None:
    check = _fleet.judge_floor(["h1", "h2", "h3"], {"h2": None, "h3": "not listed by the router (http://h3:30000)"}, ["h1"], 2)
    assert not check.met and check.reachable
    message = _fleet.floor_failure(check, 30)
    assert "sglang_min_serving" in message and "not met after 30 s (sglang_capacity_timeout)" in message
    assert "1 serve (h2)" in message and "h3: not listed by the router" in message and "with h1 out" in message


def test_the_batch_counts_as_not_serving_once_it_leaves() -> None:
    """Its own deployments are no part of the floor, even when they serve now."""
    check = _fleet.judge_floor(["h1", "h2", "h3"], {"h1": None, "h2": None, "h3": None}, ["h1", "h2"], 2)
    assert not check.met and not check.reachable
    assert "cannot be met with the batch out (1 other deployment(s))" in _fleet.floor_failure(check, 0)


def test_a_deployment_not_looked_at_does_not_serve() -> None:
    check = _fleet.judge_floor(["h1", "h2"], {}, ["h1"], 1)
    assert check.not_serving == {"h2": "not looked at"} and not check.met


def test_no_floor_is_always_met() -> None:
    assert _fleet.judge_floor(["h1"], {}, ["h1"], 0).met


@pytest.mark.parametrize(
    ("failed", "total", "percentage", "within"),
    [
        ([], 3, 0, True),
        (["h2"], 3, 0, False),  # the default: the first failure stops the run
        (["h2"], 3, 34, True),  # 33% of 3
        (["h2"], 3, 33, False),
        (["h2", "h3"], 3, 34, False),
        (["h2", "h3"], 4, 50, True),
        (["h1"], 3, 100, False),  # the canary always stops the run
    ],
)
def test_the_tolerance_counts_the_play_s_failed_deployments(failed: list[str], total: int, percentage: float, within: bool) -> None:
    tolerance = _fleet.judge_tolerance(failed, total, percentage, "h1")
    assert tolerance.within is within
    for name in failed:
        assert name in tolerance.msg


def test_a_failed_canary_is_named_as_such() -> None:
    assert "the canary h1 failed" in _fleet.judge_tolerance(["h1"], 3, 100, "h1").msg


def probe(**changes: object) -> dict[str, object]:
    look: dict[str, object] = {
        "unit": {"InvocationID": JUDGED, "ActiveState": "active", "SubState": "running"},
        "journal": {"fatal": []},
        "health": {"status": 200},
    }
    look.update(changes)
    return look


def test_a_host_that_serves_as_it_did_passes_the_look() -> None:
    assert _fleet.bake_look(probe(), JUDGED, 0) is None
    assert _fleet.bake_look(probe(journal={"fatal": [{"message": "old"}]}), JUDGED, 1) is None  # a fatal line the start had


def test_only_a_fatal_line_the_start_did_not_have_is_new() -> None:
    assert _fleet.new_fatal(probe(journal={"fatal": [{"message": "new"}]}), 0)
    assert not _fleet.new_fatal(probe(journal={"fatal": [{"message": "old"}]}), 1)
    assert not _fleet.new_fatal(probe(), 0)


@pytest.mark.parametrize(
    ("look", "said"),
    [
        (probe(unit={"InvocationID": "b" * 32, "ActiveState": "active"}), "the unit was started again"),
        (probe(unit={"InvocationID": JUDGED, "ActiveState": "failed", "SubState": "failed"}), "the unit is failed (failed)"),
        (probe(journal={"fatal": [{"message": "Scheduler hit an exception"}]}), "a new fatal line in its journal: Scheduler hit an exception"),
        (probe(health={"status": None, "error": "connection refused"}), "its health check answered connection refused"),
        (probe(health={"status": 503}), "its health check answered 503"),
    ],
)
def test_a_host_that_fails_in_the_bake_says_why(look: dict[str, object], said: str) -> None:
    why = _fleet.bake_look(look, JUDGED, 0)
    assert why is not None and said in why


@pytest.mark.parametrize(
    ("smoke", "worker", "address", "expected"),
    [
        ("http://127.0.0.1:30000/v1/completions", None, "10.0.0.2", "http://10.0.0.2:30000/v1/completions"),
        ("http://localhost:8000/v1/completions", None, "fd00::2", "http://[fd00::2]:8000/v1/completions"),
        ("https://gpu1.example:30000/v1/completions", None, "10.0.0.2", "https://gpu1.example:30000/v1/completions"),
        ("http://127.0.0.1:30000/v1/completions", "http://10.0.0.9:31000", "10.0.0.2", "http://10.0.0.9:31000/v1/completions"),
    ],
)
def test_the_generation_goes_to_the_server_s_route_on_its_address(smoke: str, worker: str | None, address: str, expected: str) -> None:
    assert _fleet.generation_url(smoke, worker, address) == expected


def test_the_gateway_s_list_says_whether_a_worker_serves() -> None:
    listed = [{"url": "http://h1:30000", "is_healthy": True}, {"url": "http://h2:30000", "is_healthy": False}]
    assert _fleet.worker_state(listed, "http://h1:30000") is None
    assert "unhealthy" in str(_fleet.worker_state(listed, "http://h2:30000"))
    assert "not listed" in str(_fleet.worker_state(listed, "http://h3:30000"))
