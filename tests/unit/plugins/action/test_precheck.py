"""The precheck phase's decisions and its smoke test's reading of answers, on every path."""

from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.action.precheck import generates_wanted, history_wanted, look_summary, start_ended, start_passed
from ansible_collections.inferops.runbooks.plugins.plugin_utils._phase import bearer, secrets
from ansible_collections.inferops.runbooks.plugins.plugin_utils._smoke import FALLBACK_MODEL, first_model, generated, models_url
from ansible_collections.inferops.runbooks.plugins.plugin_utils._start import server_url

READY_JOURNAL = {"ready": True, "ready_line": 42, "fatal": [], "verdict": "pass", "invocation_id": "abc", "lines": 50}
ACTIVE = {"LoadState": "loaded", "ActiveState": "active", "SubState": "running", "InvocationID": "abc", "Result": "success"}


def observed(**changes: Any) -> dict[str, Any]:
    """What a precheck of a healthy single-node server saw, with ``changes``."""
    base: dict[str, Any] = {
        "host": "gpu0",
        "unit": "sglang.service",
        "options": {"unit": "sglang.service", "smoke_test": True, "canary": True, "history": True, "health_url": "http://127.0.0.1:30000/health_generate"},
        "node": {"rank": 0, "multi_node": False},
        "state": ACTIVE,
        "probe": {"unit": ACTIVE, "journal": READY_JOURNAL, "health": {"status": 200, "ok": True}},
        "record": {},
        "smoke": {},
        "smoke_journal": {},
        "failure": None,
        "check_mode": False,
        "started_at": 1_700_000_000.0,
        "history": {},
        "canary": {},
    }
    return {**base, **changes}


def test_a_healthy_server_gets_the_smoke_test_the_canary_and_its_history() -> None:
    seen = observed()
    assert generates_wanted(seen, "smoke_test") and generates_wanted(seen, "canary") and history_wanted(seen)


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"options": {"unit": "sglang.service", "smoke_test": False, "canary": False}}, "off"),
        ({"node": {"rank": 1, "multi_node": True}}, "a node of rank 1 serves no API"),
        ({"probe": {"unit": ACTIVE, "journal": {**READY_JOURNAL, "fatal": [{"message": "CUDA out of memory"}]}, "health": {"status": 200}}}, "fatal line"),
        ({"probe": {"unit": ACTIVE, "journal": READY_JOURNAL, "health": {"status": 503}}}, "health 503"),
        ({"state": {**ACTIVE, "LoadState": "not-found"}, "probe": {}}, "no such unit"),
        ({"failure": {"stage": "probe", "step": "Validate | x", "result": {"failed": True, "reason": "invalid_options", "msg": "bad"}}}, "refused"),
    ],
)
def test_nothing_is_generated_once_a_check_failed_or_where_it_is_off(changes: dict[str, Any], why: str) -> None:
    seen = observed(**changes)
    assert not generates_wanted(seen, "smoke_test"), why
    assert not generates_wanted(seen, "canary"), why


def test_a_failed_smoke_test_stops_the_canary() -> None:
    seen = observed(smoke={"status": 500, "msg": "Internal Server Error"})
    assert not generates_wanted(seen, "canary")


@pytest.mark.parametrize(
    ("unit", "journal", "ended", "passed"),
    [
        (ACTIVE, READY_JOURNAL, True, True),
        (ACTIVE, {**READY_JOURNAL, "fatal": [{"message": "x"}]}, True, False),
        (ACTIVE, {**READY_JOURNAL, "ready": False}, False, False),
        ({**ACTIVE, "ActiveState": "failed"}, {**READY_JOURNAL, "ready": False}, True, False),
        ({**ACTIVE, "ActiveState": "inactive"}, {}, True, False),
    ],
)
def test_a_start_ends_when_ready_or_stopped_and_passes_when_ready_without_a_fatal_line(
    unit: dict[str, Any], journal: dict[str, Any], ended: bool, passed: bool
) -> None:
    probe = {"unit": unit, "journal": journal}
    assert start_ended(probe) is ended
    assert start_passed(probe) is passed


def test_no_history_without_an_invocation_or_with_history_off_or_options_refused() -> None:
    assert not history_wanted(observed(probe={"unit": ACTIVE, "journal": {**READY_JOURNAL, "invocation_id": ""}}))
    assert not history_wanted(observed(options={"unit": "sglang.service", "history": False}))
    assert not history_wanted(observed(options={}))


def test_the_smoke_test_reads_the_model_list_and_the_answer() -> None:
    assert models_url("http://127.0.0.1:8000/v1/completions") == "http://127.0.0.1:8000/v1/models"
    assert first_model({"status": 200, "json": {"data": [{"id": "Qwen/Qwen3-0.6B"}, {"id": "other"}]}}) == "Qwen/Qwen3-0.6B"
    for unreadable in ({"status": 401, "json": {"detail": "Unauthorized"}}, {"status": -1, "msg": "refused"}, {"status": 200, "json": ["x"]}, {}):
        assert first_model(unreadable) == FALLBACK_MODEL
    assert generated({"status": 200, "json": {"choices": [{"text": " Paris"}]}})
    assert not generated({"status": 200, "json": {"choices": []}})
    assert not generated({"status": 500, "json": {"choices": [{"text": "x"}]}})
    assert not generated({"status": 200, "json": None})


def test_secrets_and_headers_come_from_the_key_and_the_users_list() -> None:
    assert secrets("sk-1", "a, b ,,c") == ["sk-1", "a", "b", "c"]
    assert secrets("", ["x", None, 3]) == ["x", "3"]
    assert secrets(None, None) == []
    assert bearer("sk-1") == {"Authorization": "Bearer sk-1"}
    assert bearer("") == {}


def test_verbose_output_shows_the_look_without_the_journal_lines() -> None:
    probe = {"unit": ACTIVE, "journal": {**READY_JOURNAL, "tail": ["secret line"], "reading": {"resumed_at": 12}}, "health": {"status": 200, "ok": True}}
    summary = look_summary(probe)
    assert summary["journal"]["reading"] == {"resumed_at": 12}
    assert "tail" not in summary["journal"]
    assert server_url("https://10.0.0.1:30000/health_generate?x=1") == "https://10.0.0.1:30000"
