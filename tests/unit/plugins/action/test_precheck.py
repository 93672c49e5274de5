"""The precheck phase's decisions and its smoke test's reading of answers, on every path."""

from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.plugin_utils._phase import bearer, secrets
from ansible_collections.inferops.runbooks.plugins.plugin_utils._precheck_phase import (
    generates_wanted,
    headless_look,
    headless_ready_phase,
    history_wanted,
    look_summary,
    start_ended,
    start_passed,
)
from ansible_collections.inferops.runbooks.plugins.plugin_utils._runbook_report import runbook_report
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


@pytest.mark.parametrize(
    ("engine", "rank", "phase"),
    [
        ("vllm", 1, "warming_up"),
        ("vllm", 2, "warming_up"),
        ("vllm", 0, None),
        ("sglang", 1, None),
        ("auto", 1, None),
    ],
)
def test_only_a_vllm_node_of_rank_1_or_more_is_judged_headless(engine: str, rank: int, phase: str | None) -> None:
    assert headless_ready_phase({"engine": engine}, {"rank": rank, "multi_node": rank > 0}) == phase


def test_a_headless_node_is_ready_once_its_journal_reached_its_ready_phase_and_its_health_is_not_probed() -> None:
    warming = headless_look({"unit": ACTIVE, "journal": {"ready": False, "phase": "warming_up", "fatal": []}}, "warming_up")
    loading = headless_look({"unit": ACTIVE, "journal": {"ready": False, "phase": "loading_weights", "fatal": []}}, "warming_up")
    assert warming["journal"]["ready"] and not loading["journal"]["ready"]
    assert warming["health"] == {"headless": True, "probed": False} and warming["unit"] == ACTIVE


def headless_observed(journal: dict[str, Any], unit: dict[str, Any] | None = None) -> dict[str, Any]:
    unit = ACTIVE if unit is None else unit
    probe = headless_look({"unit": unit, "journal": journal}, "warming_up")
    options = {"unit": "vllm.service", "engine": "vllm", "smoke_test": True, "canary": False, "history": True, "health_url": "http://127.0.0.1:8000/health"}
    return observed(unit="vllm.service", options=options, node={"rank": 1, "multi_node": True, "deployment": "llama_dp"}, state=unit, probe=probe)


def test_the_precheck_of_a_headless_node_passes_on_its_unit_and_journal_and_sends_nothing() -> None:
    seen = headless_observed({"ready": False, "phase": "warming_up", "fatal": [], "invocation_id": "abc", "verdict": "pass"})
    report = runbook_report(seen, "sglang_precheck")
    assert report["verdict"] == "pass", report
    assert "headless" in report["msg"]
    assert not generates_wanted(seen, "smoke_test")


@pytest.mark.parametrize(
    ("journal", "unit", "reason"),
    [
        ({"ready": False, "phase": "loading_weights", "fatal": []}, ACTIVE, "not_ready"),
        ({"ready": False, "phase": "warming_up", "fatal": [{"message": "EngineCore failed to start."}]}, ACTIVE, "fatal_log"),
        ({"ready": False, "phase": "warming_up", "fatal": []}, {**ACTIVE, "ActiveState": "failed", "SubState": "failed"}, "unit_not_active"),
    ],
)
def test_the_precheck_of_a_headless_node_fails_on_its_unit_or_journal(journal: dict[str, Any], unit: dict[str, Any], reason: str) -> None:
    report = runbook_report(headless_observed(journal, unit), "sglang_precheck")
    assert report["verdict"] == "fail" and report["reason"] == reason, report
