"""The restart and rollback phases' decisions (plugin_utils/_restart_phase.py, plugin_utils/_rollback.py, plugin_utils/_start.py,
plugin_utils/_rollout.py: what became of a start), on every path; the phases themselves run in the
integration tests on real systemd hosts."""

from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.plugin_utils import _restart_phase as restart
from ansible_collections.inferops.runbooks.plugins.plugin_utils import _rollback as rollback
from ansible_collections.inferops.runbooks.plugins.plugin_utils import _rollout, _start
from ansible_collections.inferops.runbooks.plugins.plugin_utils import _settle_phase as settle

# answers as the real uri module gave them from the simulator (one token), without the request
GENERATED = {
    "status": 200,
    "msg": "OK (317 bytes)",
    "json": {"object": "text_completion", "choices": [{"index": 0, "text": " Paris", "finish_reason": "length"}]},
}
REFUSED = {"status": 401, "msg": "HTTP Error 401: Unauthorized", "json": {"error": "Unauthorized"}}
NO_ANSWER = {"status": -1, "msg": "Status code was -1 and not [200]: Request failed: <urlopen error [Errno 111] Connection refused>"}
EMPTY = {"status": 200, "json": {"object": "text_completion", "choices": []}}
CANARY_FAIL = {"canary": {"verdict": "fail", "lines": ["decode 12.1 tok/s vs 30.2 (-60%, FAIL)"]}}
CANARY_PASS = {"canary": {"verdict": "pass", "lines": ["decode 30.0 tok/s vs 30.2 (-1%, pass)"]}}
NEW_GROUP = {"summary": {"new_unrecognized": [{"key": "W <date> some new warning", "count": 1}]}}


def options(**changes: Any) -> dict[str, Any]:
    """The checked options of sglang_restart that the phases read, with ``changes``."""
    base: dict[str, Any] = {
        "unit": "sglang.service",
        "engine": "sglang",
        "extra_rules": [],
        "disabled_rules": [],
        "strict": False,
        "health_url": "http://127.0.0.1:30000/health_generate",
        "health_timeout": 10,
        "budget": 1800,
        "stall_limit": 600,
        "stall_limits": {"loading_weights": 900},
        "health_successes": 2,
        "soak": 30,
        "poll_interval": 5,
        "heartbeat": 30,
        "smoke_test": True,
        "smoke_url": "http://127.0.0.1:30000/v1/completions",
        "smoke_model": "",
        "smoke_timeout": 60,
        "canary": True,
        "canary_on_fail": "fail",
        "canary_requests": 8,
        "canary_concurrency": 2,
        "canary_prompt_tokens": 64,
        "canary_max_tokens": 32,
        "canary_thresholds": {},
        "canary_floors": {},
        "history": True,
        "history_size": 20,
        "history_min_good": 3,
        "history_stall_factor": 3.0,
        "history_stall_floor": 60,
        "history_slow_ratio": 1.5,
        "fail_on_new": False,
        "port": 30000,
        "stop_first": False,
        "lock_stale": 600,
    }
    return {**base, **changes}


# -- what became of a start ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "generated"),
    [(GENERATED, True), (REFUSED, False), (NO_ANSWER, False), (EMPTY, False), ({}, False), ({"status": 200, "json": "not json"}, False)],
)
def test_an_answer_generated_only_with_a_200_and_a_choice(answer: dict[str, Any], generated: bool) -> None:
    assert _rollout.generated(answer) is generated


def test_the_smoke_test_fails_only_when_it_ran_and_generated_nothing() -> None:
    assert _rollout.smoke_failed(options(), REFUSED) and _rollout.smoke_failed(options(), NO_ANSWER)
    assert not _rollout.smoke_failed(options(), GENERATED)
    # did not run (node 1, the wait failed), or is off
    assert not _rollout.smoke_failed(options(), {}) and not _rollout.smoke_failed(options(smoke_test=False), REFUSED)


def test_a_failed_canary_fails_the_start_only_when_it_is_on_and_set_to_fail() -> None:
    assert _rollout.canary_failed(options(), CANARY_FAIL)
    assert not _rollout.canary_failed(options(), CANARY_PASS) and not _rollout.canary_failed(options(), {})
    assert not _rollout.canary_failed(options(canary_on_fail="warn"), CANARY_FAIL)
    assert not _rollout.canary_failed(options(canary=False), CANARY_FAIL)
    # could not run at all: inconclusive, never a failure
    assert not _rollout.canary_failed(options(), {"failed": True, "msg": "no model listed"})


@pytest.mark.parametrize(
    ("failure", "wait", "smoke", "history", "opts", "expected"),
    [
        (None, {"verdict": "pass"}, GENERATED, {}, {}, (False, False)),
        (None, {"verdict": "fail"}, {}, {}, {}, (True, True)),
        (None, {"verdict": "pass"}, REFUSED, {}, {}, (True, True)),
        ({"stage": "restart", "step": "Restart | Stop the unit"}, {}, {}, {}, {}, (True, True)),
        # a wait that did not run fails nothing by itself
        (None, {}, {}, {}, {}, (False, False)),
        # a line group new since the last good starts fails the start only with fail_on_new
        (None, {"verdict": "pass"}, GENERATED, NEW_GROUP, {}, (False, False)),
        (None, {"verdict": "pass"}, GENERATED, NEW_GROUP, {"fail_on_new": True}, (False, True)),
    ],
)
def test_what_became_of_a_start(
    failure: Any, wait: dict[str, Any], smoke: dict[str, Any], history: dict[str, Any], opts: dict[str, Any], expected: tuple[bool, bool]
) -> None:
    outcome = _rollout.start_outcome(options(**opts), failure, wait, smoke, history, CANARY_PASS)
    assert (outcome["start_failed"], outcome["new_start_failed"]) == expected
    assert outcome["canary_failed"] is False
    assert _rollout.start_outcome(options(**opts), failure, wait, smoke, history, CANARY_FAIL)["canary_failed"] is True


def test_a_rollback_passes_only_when_its_wait_passed_and_nothing_failed() -> None:
    assert _rollout.rollback_passed(None, {"verdict": "pass"})
    assert not _rollout.rollback_passed(None, {"verdict": "fail"}) and not _rollout.rollback_passed(None, {})
    assert not _rollout.rollback_passed({"step": "Rollback | The smoke test must generate", "msg": "smoke test: HTTP 401"}, {"verdict": "pass"})
    assert _rollout.rollback_settled_step(True, True) == "rolled_back"
    # the unit was never stopped: the files are back and the old server still serves
    assert _rollout.rollback_settled_step(False, False) == "rolled_back"
    assert _rollout.rollback_settled_step(False, True) == "rollback_failed"


# -- the restart phase ---------------------------------------------------------------------------------


def test_the_nodes_of_a_deployment_are_stopped_before_any_starts() -> None:
    assert restart.PARTS == ("stop", "start", "verify")
    assert not restart.stops_first(options(), {"multi_node": False})
    assert restart.stops_first(options(stop_first=True), {"multi_node": False}) and restart.stops_first(options(), {"multi_node": True})


def test_the_wait_tells_the_new_start_from_the_right_invocation() -> None:
    before = {"InvocationID": "a" * 32}
    state = {"inflight_invocation": "", "verify_in_place": False, "before": before}
    assert restart.previous_invocation(state) == "a" * 32
    # an earlier run's start is waited on: told from the invocation before that run's stop
    assert restart.previous_invocation({**state, "inflight_invocation": "b" * 32}) == "b" * 32
    # a host verified in place is watched in the invocation it runs; a unit never started has none
    assert restart.previous_invocation({**state, "verify_in_place": True}) is None
    assert restart.previous_invocation({**state, "before": {"InvocationID": ""}}) is None


def test_a_node_goes_on_only_when_every_peer_got_through_its_preflight() -> None:
    node = {"multi_node": True, "deployment": "dsr1", "rank": 0, "hosts": ["gpu0", "gpu1", "gpu2"], "peers": {"gpu1": 1, "gpu2": 2}}

    # what each node's prepare phase returned for the others (its peer), as the role passes it (a node whose
    # check was refused got through no preflight)
    def prepared(reached: object) -> dict[str, Any]:
        return {"run_id": "r", "reached_preflight": reached}

    assert restart.lagging(node, {"gpu1": prepared(True), "gpu2": prepared(True)}) == []
    assert restart.lagging(node, {"gpu1": prepared(True), "gpu2": prepared(False)}) == ["gpu2"]
    # ansible-core before 2.19 hands a templated boolean over as its text; a node that returned nothing lags
    assert restart.lagging(node, {"gpu1": prepared("True"), "gpu2": {}}) == ["gpu2"]
    assert restart.lagging(node, {"gpu1": prepared(True)}) == ["gpu2"]
    # the parts of the phase itself: the nodes wait for each other through the channel (test_rendezvous.py),
    # at most as long as a drain, a stop and the release of the port take
    assert restart.rendezvous_timeout(options(drain_timeout=600, release_timeout=60)) == 660 + restart.RENDEZVOUS_MARGIN


def test_the_nodes_of_one_restart_share_a_channel_named_by_node_0s_run() -> None:
    node = {"multi_node": True, "deployment": "dsr1", "hosts": ["gpu0", "gpu1"]}
    peers = {"gpu0": {"run_id": "20261203T101010Z-42"}, "gpu1": {"run_id": "20261203T101011Z-7"}}
    assert restart.channel_name(node, peers) == "20261203T101010Z-42-dsr1"
    assert restart.channel_name({"multi_node": False}, peers) is None


def test_the_drain_reads_in_slices_until_no_request_runs_or_its_time_is_spent() -> None:
    assert restart.drain_interval(options(poll_interval=0.2)) == 1.0 and restart.drain_interval(options(poll_interval=30)) == 5.0
    assert restart.drain_interval(options(poll_interval=2)) == 2.0
    # a slice that ran out of time goes on while the timeout has time beyond it
    assert restart.drain_goes_on({"timed_out": True}, 300.0)
    assert not restart.drain_goes_on({"timed_out": True}, restart.DRAIN_SLICE)
    assert not restart.drain_goes_on({"timed_out": False, "running_at_stop": 0}, 300.0)
    slices = [
        {"running_at_start": 3, "running_at_stop": 1, "reads": 10, "seconds": 20.0, "timed_out": True, "msg": "1 running"},
        {"running_at_start": 1, "running_at_stop": 0, "reads": 4, "seconds": 7.5, "timed_out": False, "msg": "0 running"},
    ]
    whole = restart.drain_seen(slices, 28.04)
    assert (whole["running_at_start"], whole["running_at_stop"], whole["reads"], whole["seconds"], whole["timed_out"]) == (3, 0, 14, 28.0, False)
    assert whole["msg"] == "0 running"


# -- the rollback phase --------------------------------------------------------------------------------


def test_the_rollback_reads_the_unit_as_systemctl_shows_it() -> None:
    shown = "LoadState=loaded\nLoadError=\nInvocationID=0f1e2d3c4b5a69788796a5b4c3d2e1f0\n"
    assert rollback.unit_properties(shown) == {"LoadState": "loaded", "LoadError": "", "InvocationID": "0f1e2d3c4b5a69788796a5b4c3d2e1f0"}
    assert rollback.unit_properties("") == {}


def test_a_rollback_whose_smoke_test_failed_says_what_answered() -> None:
    assert rollback.smoke_failure(options(), REFUSED) == "smoke test: HTTP 401 from http://127.0.0.1:30000/v1/completions - HTTP Error 401: Unauthorized"
    assert rollback.smoke_failure(options(), {"status": -1}).startswith("smoke test: no answer from ")


# -- one start followed (_start) -----------------------------------------------------------------------


def test_the_wait_uses_what_the_history_taught_only_when_it_was_read() -> None:
    read = {"learned_stall_limits": {"loading_weights": 420}, "good_starts": [{"total": 300}]}
    learned = _start.wait_args(options(), ["sk-1"], read, "a" * 32)
    assert learned["stall_limits"] == {"loading_weights": 420} and learned["history_starts"] == [{"total": 300}]
    assert learned["previous_invocation_id"] == "a" * 32 and learned["redact"] == ["sk-1"]
    for unread in ({}, {"failed": True, "msg": "unreadable"}, {"skipped": True}, {"good_starts": [{"total": 300}]}):
        configured = _start.wait_args(options(), [], unread, None)
        assert configured["stall_limits"] == {"loading_weights": 900} and configured["history_starts"] == []
        assert "previous_invocation_id" not in configured


def test_the_canary_and_the_scan_are_asked_of_the_server_of_the_health_url() -> None:
    args = _start.canary_args(options(health_url="http://10.0.0.5:30000/health?x=1"), "", "gpu0", run_id="r1")
    assert args["url"] == "http://10.0.0.5:30000" and "api_key" not in args and "model" not in args and args["run_id"] == "r1"
    keyed = _start.canary_args(options(smoke_model="qwen"), "sk-1", "gpu0")
    assert keyed["api_key"] == "sk-1" and keyed["model"] == "qwen"
    assert _start.scan_args(options(), "", [])["invocation"] == "current"
    assert _start.port_host(options(health_url="http://[::1]:30000/health")) == "::1"


def test_what_a_phase_keeps_of_a_result_names_no_secret() -> None:
    answer = {**GENERATED, "url": "http://127.0.0.1:30000/v1/completions", "invocation": {"module_args": {"headers": {"Authorization": "Bearer sk-1"}}}}
    assert "invocation" not in _start.kept_answer(answer) and _start.kept_answer(answer)["json"] == GENERATED["json"]
    assert _start.kept({"verdict": "pass", "invocation": {"module_args": {"redact": ["sk-1"]}}}) == {"verdict": "pass"}


def test_one_token_and_the_canary_come_after_a_passed_wait_on_node_0() -> None:
    ready = _start.Seen(wait={"verdict": "pass"})
    assert _start.generates_wanted(options(), ready, 0) and not _start.generates_wanted(options(), ready, 1)
    assert not _start.generates_wanted(options(), _start.Seen(wait={"verdict": "fail"}), 0)
    assert not _start.generates_wanted(options(smoke_test=False), ready, 0)
    assert _start.canary_wanted(options(), ready, 0)
    assert _start.canary_wanted(options(), _start.Seen(wait={"verdict": "pass"}, smoke=GENERATED), 0)
    assert not _start.canary_wanted(options(), _start.Seen(wait={"verdict": "pass"}, smoke=REFUSED), 0)
    assert not _start.canary_wanted(options(canary=False), ready, 0) and not _start.canary_wanted(options(), ready, 1)


def test_the_rollback_is_given_the_files_the_change_wrote_and_nothing_else() -> None:
    files = [{"path": "/etc/x.conf", "kind": "dropin", "existed": True, "changed": True, "content": "secret"}, "not a file"]
    args = rollback.rollback_args(options(), files, stopped=True, run_id="r1")
    assert args["files"] == [{"path": "/etc/x.conf", "kind": "dropin", "existed": True}]
    assert (args["stopped"], args["run_id"]) == (True, "r1")


# -- the settle phase ----------------------------------------------------------------------------------


def test_the_record_settles_done_only_when_nothing_is_left_to_undo() -> None:
    plan = {"repairs": ["the host was left out of rotation"]}
    done = settle.record_updates({"settled_step": "done", "state": "new_configuration"}, plan)
    assert done == {"outcome": "new_configuration", "repairs": plan["repairs"], "traffic": {"out": False}, "change_flags": {"settled": True}}
    out = settle.record_updates({"settled_step": "restore", "state": "restarted"}, {})
    assert out == {"outcome": "restarted", "repairs": [], "traffic": {}, "change_flags": {}}
