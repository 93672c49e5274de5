"""The verdicts of the roles, decided in one place (plugin_utils/_runbook_report): the restart's from
its stages and the wait, the precheck's from its ordered checks, on observations built from real logs."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import classify, load_rules
from ansible_collections.inferops.runbooks.plugins.plugin_utils._render import junit_xml, stats, summary_lines
from ansible_collections.inferops.runbooks.plugins.plugin_utils._runbook_report import runbook_report
from tests.unit.conftest import corpus_logs
from tests.unit.plugins.module_utils.observations import (
    AFTER_ID,
    BEFORE_ID,
    CRASHED,
    HEALTH_URL,
    HOST,
    READY,
    SMOKE_URL,
    UNIT,
    failed_step,
    options,
    precheck_report,
    probe_result,
    restart_report,
    unit_state,
    wait_result,
)

# -- sglang_restart -------------------------------------------------------------------------------


def test_a_passed_wait_is_a_passed_restart_with_its_evidence() -> None:
    report = restart_report()
    assert (report["verdict"], report["reason"]) == ("pass", "ready")
    assert report["role"] == "sglang_restart" and report["host"] == HOST and report["unit"] == UNIT
    assert report["invocation_id"] == AFTER_ID and report["previous_invocation_id"] == BEFORE_ID
    assert report["total_elapsed"] == 42.5 and report["started_at"] == "2027-01-15T08:00:00Z"
    assert report["health"]["url"] == HEALTH_URL and report["health"]["successes"] == 2
    assert report["stale_rules"][0]["id"] == "local-old-notice"
    assert report["failed_stage"] is None and report["problems"] == []
    assert report["smoke_test"] == {"enabled": False, "url": SMOKE_URL, "status": None, "passed": None, "text": None, "msg": None}


def test_a_failed_wait_is_a_failed_restart_with_the_fatal_events() -> None:
    report = restart_report(wait=wait_result(CRASHED, "fail", "fatal_log", "fatal line in sglang.service's journal: NCCL error"))
    assert (report["verdict"], report["reason"]) == ("fail", "fatal_log")
    assert report["msg"].startswith("fatal line in")
    assert any("NCCL error" in event["message"] for event in report["fatal"])
    assert report["last_lines"] == ["line one", "line two"]


def test_check_mode_is_skipped() -> None:
    report = restart_report(check_mode=True, wait={"changed": False, "skipped": True})
    assert (report["verdict"], report["reason"], report["msg"]) == ("skipped", "check_mode", "check mode: nothing was restarted")


def test_refused_variables_keep_their_reason_and_every_problem() -> None:
    problems = ["sglang_restart_disabled_rules: disabled rule id(s) nope match no rule"]
    failure = failed_step("validate", "Refusing to run sglang_restart on gpu-node-01, nothing was touched: ...", reason="invalid_rules", problems=problems)
    report = restart_report(failure=failure, options={}, before={}, wait={})
    assert (report["verdict"], report["reason"], report["failed_stage"]) == ("fail", "invalid_rules", "validate")
    assert report["problems"] == problems
    assert report["unit"] == UNIT  # the variable as given names the unit when the check failed


@pytest.mark.parametrize(
    ("load_state", "reason", "what"),
    [("not-found", "unit_not_found", "there is no such systemd unit"), ("masked", "unit_not_loaded", "the unit is not loaded")],
)
def test_a_unit_that_is_not_loaded_is_refused(load_state: str, reason: str, what: str) -> None:
    failure = failed_step("preflight", "sglang.service is not loaded")
    report = restart_report(failure=failure, before=unit_state(load=load_state, active="inactive", sub="dead", invocation=""), wait={})
    assert (report["verdict"], report["reason"]) == ("fail", reason)
    assert report["msg"].startswith(f"Refusing to restart {UNIT} on {HOST}: {what} (LoadState={load_state}). Nothing was stopped or started.")


@pytest.mark.parametrize(
    ("stage", "before", "reason"),
    [("preflight", {}, "preflight_failed"), ("restart", unit_state(invocation=BEFORE_ID), "restart_failed"), ("wait", unit_state(), "wait_error")],
)
def test_a_failed_stage_gives_its_reason_and_keeps_the_message(stage: str, before: dict[str, Any], reason: str) -> None:
    report = restart_report(failure=failed_step(stage, "Timeout when waiting for 127.0.0.1:30000 to stop."), before=before, wait={})
    assert (report["verdict"], report["reason"], report["failed_stage"]) == ("fail", reason, stage)
    assert report["msg"] == "Timeout when waiting for 127.0.0.1:30000 to stop."


def test_a_failure_never_has_an_empty_message() -> None:
    report = restart_report(failure=failed_step("restart", ""), wait={})
    assert report["msg"] == "the restart step failed without a message"
    # a wait that returned no verdict (it refused its own arguments) keeps what it said
    report = restart_report(wait={"failed": True, "msg": "health_successes must be >= 1"})
    assert (report["verdict"], report["reason"], report["msg"]) == ("fail", "wait_error", "health_successes must be >= 1")
    report = restart_report(wait={"failed": True})
    assert report["msg"] == "the wait ended without a verdict"


def test_a_failed_smoke_test_fails_the_restart() -> None:
    smoke = {"status": 401, "msg": "Status code was 401 and not [200]: HTTP Error 401: Unauthorized", "json": {"error": "unauthorized"}}
    report = restart_report(options=options(smoke_test=True), smoke=smoke)
    assert (report["verdict"], report["reason"]) == ("fail", "smoke_failed")
    assert report["msg"] == f"smoke test: HTTP 401 from {SMOKE_URL} - Status code was 401 and not [200]: HTTP Error 401: Unauthorized"
    passed = restart_report(options=options(smoke_test=True), smoke={"status": 200, "json": {"choices": [{"text": " Paris"}]}})
    assert (passed["verdict"], passed["smoke_test"]["passed"], passed["smoke_test"]["text"]) == ("pass", True, " Paris")
    # a 200 that generated nothing is no pass either
    assert restart_report(options=options(smoke_test=True), smoke={"status": 200, "json": {"choices": []}})["reason"] == "smoke_failed"


def test_a_node_that_sends_no_smoke_test_passes_on_its_wait() -> None:
    """A node of rank >= 1 of a multi-node deployment: the smoke test goes through node 0 only, the
    node's own task is skipped, and its verdict is its wait's."""
    report = restart_report(options=options(smoke_test=True), smoke={"changed": False, "skipped": True, "false_condition": "sglang_restart__node.rank == 0"})
    assert (report["verdict"], report["reason"]) == ("pass", "ready")
    assert report["smoke_test"]["passed"] is None


def test_unknown_role_is_refused() -> None:
    with pytest.raises(ValueError, match="role must be one of sglang_restart, sglang_precheck"):
        runbook_report({}, "sglang_rollback")


# -- sglang_precheck ------------------------------------------------------------------------------


def test_a_healthy_server_passes_the_precheck() -> None:
    report = precheck_report()
    assert (report["verdict"], report["reason"]) == ("pass", "ready")
    assert report["msg"].startswith(f"{UNIT} is active (running), health answered 200, ready marker at journal line ")
    assert report["state"] == {"load_state": "loaded", "active_state": "active", "sub_state": "running", "result": "success", "main_pid": 4242, "n_restarts": 0}
    assert report["checked_at"] == "2027-01-15T08:00:00Z" and report["elapsed"] == 42.5
    assert report["last_lines"] == ["last line"] and report["journal_verdict"] == "pass"


CRASHED_UNIT = probe_result(CRASHED, status=None, error="connection refused", active="failed", sub="failed", result="exit-code")
FAILED_UNIT = probe_result(READY, status=None, error="connection refused", active="failed", sub="failed", result="exit-code")

# Each row breaks one more thing than the checks after it look at: the first failing check decides.
# A fatal line comes first, as in the restart's wait: it names the cause of a failed unit or health.
PRECHECKS = [
    ("invalid_options", {"failure": failed_step("validate", "Refusing ...", reason="invalid_options", problems=["x"]), "state": {}, "probe": {}}),
    ("unit_not_found", {"state": unit_state(load="not-found", active="inactive", sub="dead", invocation=""), "probe": {}}),
    ("probe_failed", {"failure": failed_step("probe", "journalctl failed (rc=1): no journal"), "probe": {}}),
    ("fatal_log", {"probe": CRASHED_UNIT}),
    ("unit_not_active", {"probe": FAILED_UNIT}),
    ("health_failed", {"probe": probe_result(status=503)}),
    ("not_ready", {"probe": probe_result(until_ready=True)}),
]


@pytest.mark.parametrize(("reason", "observed"), PRECHECKS, ids=[reason for reason, _observed in PRECHECKS])
def test_the_first_failing_check_decides(reason: str, observed: dict[str, Any]) -> None:
    report = precheck_report(**observed)
    assert (report["verdict"], report["reason"]) == ("fail", reason), report["msg"]
    assert report["msg"]


def test_precheck_messages_say_why() -> None:
    report = precheck_report(probe=CRASHED_UNIT)
    assert report["msg"] == (
        f"The current invocation logged 2 fatal event(s); {UNIT} is failed (failed), not active (running), Result=exit-code; "
        f"health: {HEALTH_URL} did not answer: connection refused (probed from {HOST}), not 200; "
        "first: RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"
    )
    assert precheck_report(probe=FAILED_UNIT)["msg"] == f"{UNIT} is failed (failed), not active (running), Result=exit-code"
    assert precheck_report(probe=probe_result(CRASHED))["msg"].startswith(
        f"The current invocation logged 2 fatal event(s); {UNIT} is active (running); health: {HEALTH_URL} answered HTTP 200; first: "
    )
    assert "answered HTTP 503 (probed from gpu-node-01), not 200" in precheck_report(probe=probe_result(CRASHED, status=503))["msg"]
    assert "did not answer: connection refused" in precheck_report(probe=probe_result(status=None, error="connection refused"))["msg"]
    refused = precheck_report(state=unit_state(load="not-found", invocation=""), probe={})
    assert refused["msg"].startswith(
        f"Refusing to check {UNIT} on {HOST}: there is no such systemd unit (LoadState=not-found). Nothing was started or stopped."
    )
    assert refused["journal_verdict"] is None and refused["fatal"] == []


FAILED_STARTS = [log for log in corpus_logs() if log.outcome == "crashed"]
# how a server left as its failed start ended answers: still running but not serving, refusing, gone
LEFT_AS_IT_ENDED = [
    ("running, health 503", {"active": "active", "sub": "running"}, 503, None),
    ("running, health refused", {"active": "active", "sub": "running"}, None, "connection refused"),
    ("failed, health refused", {"active": "failed", "sub": "failed", "result": "exit-code"}, None, "connection refused"),
    ("restarting, health timed out", {"active": "activating", "sub": "auto-restart", "result": "exit-code"}, None, "timed out after 30 s"),
]


@pytest.mark.parametrize("log", FAILED_STARTS, ids=[log.name for log in FAILED_STARTS])
@pytest.mark.parametrize(("unit", "status", "error"), [row[1:] for row in LEFT_AS_IT_ENDED], ids=[row[0] for row in LEFT_AS_IT_ENDED])
def test_a_failed_start_is_named_by_its_fatal_line_with_health_beside_it(log: Any, unit: dict[str, Any], status: int | None, error: str | None) -> None:
    """The real journal of a failed start and a failed look at the unit and health: the reason is
    fatal_log, as the restart's wait decides, never health_failed or unit_not_active; the health
    answer and the unit's state stay in the report, its message, its summary, stats and JUnit."""
    engine = log.name.split("-", 1)[0]
    journal = classify(log.body, rules=load_rules(engine))
    assert journal["fatal"], f"{log.name}: the classifier finds no fatal line in a failed start"
    journal["tail"] = log.body.splitlines()[-3:]
    probe = {"unit": unit_state(**unit), "journal": journal, "health": {"url": HEALTH_URL, "up": status is not None, "status": status, "error": error}}
    report = precheck_report(probe=probe, options=options(engine=engine))

    assert (report["verdict"], report["reason"]) == ("fail", "fatal_log"), report["msg"]
    assert report["health"] == probe["health"]
    assert (report["state"]["active_state"], report["state"]["sub_state"]) == (unit["active"], unit["sub"])
    assert report["first_fatal"]["message"] == journal["fatal"][0]["message"]
    answer = f"answered HTTP {status}" if status is not None else f"did not answer: {error}"
    assert f"; health: {HEALTH_URL} {answer} (probed from {HOST}), not 200; first: " in report["msg"]
    assert report["msg"].startswith(f"The current invocation logged {len(journal['fatal'])} fatal event(s); {UNIT} is {unit['active']} ({unit['sub']})")

    lines = summary_lines(report)
    assert lines[0].startswith(f"{HOST} {UNIT}: precheck FAIL (fatal_log)")
    assert "health: " in lines[1]
    assert f"health: {f'HTTP {status}' if status is not None else f'no answer ({error})'} from {HEALTH_URL}" in lines
    assert (stats(report)["reason"], stats(report)["health_status"]) == ("fatal_log", status)
    failure = ET.fromstring(junit_xml(report)).find("./testsuite/testcase/failure")
    assert failure is not None and failure.get("type") == "fatal_log"


def test_a_placeholder_node_with_a_fatal_line_fails_on_it() -> None:
    """A node of rank >= 1 answers health from a placeholder: not counted, and said so beside the
    fatal line that fails it."""
    report = precheck_report(probe=probe_result(CRASHED), node={"deployment": "dsr1", "rank": 1})
    assert (report["verdict"], report["reason"]) == ("fail", "fatal_log")
    assert "; health: answered by a placeholder (not counted); first: RuntimeError: NCCL error" in report["msg"]


def test_strict_mode_fails_on_unrecognized_lines() -> None:
    probe = probe_result()
    probe["journal"]["unrecognized"] = [{"message": "Frobnicator returned error state 7, continuing", "count": 1}]
    assert precheck_report(probe=probe)["reason"] == "ready"
    strict = precheck_report(probe=probe, options=options(strict=True))
    assert (strict["reason"], strict["strict"]) == ("unrecognized_strict", True)
    assert "Frobnicator returned error state 7" in strict["msg"]


@pytest.mark.parametrize(
    "drain",
    [
        {"seconds": "10.6", "load_status": "200", "running_at_stop": "0", "timed_out": "False"},
        {"seconds": 10.6, "load_status": 200, "running_at_stop": 0, "timed_out": False},
    ],
)
def test_the_drain_figures_are_numbers_whichever_way_ansible_templated_them(drain: dict[str, Any]) -> None:
    traffic = {"removed": "True", "restored": True, "error": None, "drain": {"load_url": "http://127.0.0.1:30000/get_load", **drain}}
    report = restart_report(deploy={"state": "new_configuration", "restart_needed": True, "traffic": traffic})
    expected = {"seconds": 10.6, "load_status": 200, "running_at_stop": 0, "timed_out": False}
    assert report["traffic"]["drain"] == {"load_url": "http://127.0.0.1:30000/get_load", **expected}
    assert report["traffic"]["removed"] is True and report["traffic"]["restored"] is True


def test_what_ran_as_the_drain_began_is_a_number_too() -> None:
    traffic = {"drain": {"seconds": "9.4", "load_status": "200", "running_at_start": "2", "running_at_stop": "0", "timed_out": "False"}}
    drain = restart_report(deploy={"state": "new_configuration", "restart_needed": True, "traffic": traffic})["traffic"]["drain"]
    assert (drain["running_at_start"], drain["running_at_stop"], drain["seconds"]) == (2, 0, 9.4)


def test_a_drain_that_could_not_read_the_load_has_no_figure() -> None:
    traffic = {"removed": False, "restored": False, "drain": {"seconds": "60.2", "load_status": "None", "running_at_stop": "", "timed_out": "True"}}
    drain = restart_report(deploy={"state": "new_configuration", "restart_needed": True, "traffic": traffic})["traffic"]["drain"]
    assert (drain["load_status"], drain["running_at_stop"], drain["timed_out"]) == (None, None, True)


def test_a_start_that_dies_on_its_smoke_test_shows_the_journal_read_after_it() -> None:
    """Ready (health 200), then the first generation killed the engine: the journal read again after
    the failed request (plugin_utils/_smoke) is the evidence, its first fatal line in the message."""
    fatal = {
        "message": "RuntimeError: Unsupported CPU attention configuration: head_dim=16",
        "rule": "common-python-exception",
        "count": 1,
        "ranks": [],
        "first_line": 90,
        "traceback": ["Traceback (most recent call last):", "RuntimeError: Unsupported CPU attention configuration: head_dim=16"],
    }
    # vLLM logs "WorkerProc hit an exception." on a line of its own before the traceback
    header = {"message": "WorkerProc hit an exception.", "rule": "common-error-level", "count": 1, "ranks": [], "first_line": 89}
    after = {"fatal": [header, fatal], "allowlisted": [], "unrecognized": [], "counts": {"fatal": 1}, "last_lines": ["EngineCore encountered a fatal error."]}
    smoke = {"status": 500, "msg": "Status code was 500 and not [200]: HTTP Error 500: Internal Server Error"}
    report = restart_report(options=options(smoke_test=True), smoke=smoke, smoke_journal=after)
    assert (report["verdict"], report["reason"]) == ("fail", "smoke_failed")
    assert report["msg"].endswith(f"; then a fatal line in {UNIT}'s journal: RuntimeError: Unsupported CPU attention configuration: head_dim=16")
    assert report["fatal"] == [header, fatal] and report["first_fatal"]["message"] == header["message"]
    assert report["last_lines"] == ["EngineCore encountered a fatal error."]
    # a smoke test that passed keeps the wait's evidence, whatever was read after it
    passed = restart_report(options=options(smoke_test=True), smoke={"status": 200, "json": {"choices": [{"text": " Paris"}]}}, smoke_journal=after)
    assert passed["verdict"] == "pass" and passed["fatal"] == []


# -- the performance canary -----------------------------------------------------------------------


def canary_result(tps: float, baseline_tps: float | None = 1604.0) -> dict[str, Any]:
    """What the perf_canary module returns for a load of ``tps`` output tokens/s, judged against one
    baseline canary of ``baseline_tps`` (none when None)."""
    from ansible_collections.inferops.runbooks.plugins.module_utils import _canary

    figures = {
        "requests": 16,
        "ok_requests": 16,
        "errors": 0,
        "error_examples": [],
        "output_tokens": 2048,
        "wall_s": 2048 / tps,
        "output_tokens_per_s": tps,
        "ttft_median_s": 0.3,
        "ttft_p90_s": 0.4,
        "itl_median_s": 0.01,
        "itl_p90_s": 0.012,
        "itl_samples": 2032,
    }
    history = (
        []
        if baseline_tps is None
        else [{"host": HOST, "hardware": "8x NVIDIA H200", "model": "m", "baseline": True, "figures": {**figures, "output_tokens_per_s": baseline_tps}}]
    )
    verdict = _canary.judge(figures, history, HOST, "8x NVIDIA H200", "m")
    canary = {**verdict, "figures": figures, "server": None, "samples": [{"index": 0, "ok": True}], "model": "m", "hardware": "8x NVIDIA H200"}
    return {"changed": True, "canary": canary, "store": "/var/lib/inferops/sglang.service.canary.json", "problem": None}


def test_a_start_slower_than_its_baseline_fails_as_a_performance_regression() -> None:
    report = restart_report(options=options(canary=True, canary_on_fail="fail"), canary=canary_result(812))
    assert (report["verdict"], report["reason"]) == ("fail", "performance_regression")
    assert report["msg"] == "the start passed its gates, but is slower than the host's baseline: decode 812 tok/s (baseline 1,604, -49%: FAIL)"
    assert report["canary"]["verdict"] == "fail" and report["canary"]["samples"] == [{"index": 0, "ok": True}]
    lines = summary_lines(report)
    assert "performance canary: FAIL, against the median of 1 baseline canary - slower than the baseline: decode" in lines
    assert "  decode 812 tok/s (baseline 1,604, -49%: FAIL)" in lines
    assert "  TTFT p90 400 ms (baseline 400 ms, +0%: ok)" in lines
    figures = stats(report)
    assert (figures["canary_verdict"], figures["canary_output_tokens_per_s"], figures["canary_baseline_output_tokens_per_s"]) == ("fail", 812, 1604)


def test_a_failed_canary_only_warns_when_told_to() -> None:
    report = restart_report(options=options(canary=True, canary_on_fail="warn"), canary=canary_result(812))
    assert (report["verdict"], report["reason"]) == ("pass", "ready")
    assert report["msg"].endswith("(warning: the performance canary failed: decode 812 tok/s (baseline 1,604, -49%: FAIL))")
    assert any(line.startswith("performance canary: FAIL") and "warning only" in line for line in summary_lines(report))


def test_a_canary_within_its_thresholds_or_without_a_baseline_passes_the_start() -> None:
    passed = restart_report(options=options(canary=True), canary=canary_result(1580))
    assert (passed["verdict"], passed["canary"]["verdict"]) == ("pass", "pass")
    assert "  decode 1,580 tok/s (baseline 1,604, -1%: ok)" in summary_lines(passed)
    first = restart_report(options=options(canary=True), canary=canary_result(1580, baseline_tps=None))
    assert (first["verdict"], first["canary"]["verdict"], first["canary"]["becomes_baseline"]) == ("pass", "inconclusive", True)
    lines = summary_lines(first)
    assert any(line.startswith("performance canary: INCONCLUSIVE - no baseline yet for m on") for line in lines)
    assert "  decode 1,580 tok/s" in lines


def test_a_canary_that_could_not_run_is_inconclusive_never_a_failure() -> None:
    broken = {"failed": True, "msg": "perf_canary: the canary cannot run: /v1/models answered 401"}
    report = restart_report(options=options(canary=True), canary=broken)
    assert report["verdict"] == "pass"
    assert report["canary"]["verdict"] == "inconclusive" and "answered 401" in report["canary"]["reason"]


def test_no_canary_section_without_the_canary() -> None:
    report = restart_report(canary={"changed": False, "skipped": True})
    assert report["canary"] == {"enabled": False, "on_fail": "fail", "verdict": None, "reason": None, "lines": []}
    assert not any(line.startswith("performance canary") for line in summary_lines(report))


def test_a_change_rolled_back_for_its_canary_shows_both_canaries() -> None:
    rollback_canary = canary_result(1590)["canary"]
    deploy = {
        "state": "rolled_back",
        "restart_needed": True,
        "deploy": {"requested": True, "changed": True, "applied": True, "files": []},
        "rollback": {"enabled": True, "attempted": True, "files_restored": True, "restarted": True, "wait": wait_result(), "canary": rollback_canary},
        "traffic": {},
        "repairs": [],
    }
    report = restart_report(options=options(canary=True), canary=canary_result(812), deploy=deploy)
    assert (report["verdict"], report["reason"], report["state"]) == ("fail", "performance_regression", "rolled_back")
    assert report["rollback"]["verdict"] == "pass" and report["rollback"]["canary"]["verdict"] == "pass"
    lines = summary_lines(report)
    assert lines[0].startswith(f"{HOST} {UNIT}: FAIL (performance_regression): rolled back, serving the previous configuration again")
    assert lines[1].startswith("new configuration: FAIL (performance_regression)")
    assert "  decode 812 tok/s (baseline 1,604, -49%: FAIL)" in lines
    assert lines[lines.index("rollback canary: PASS") + 1] == "  decode 1,590 tok/s (baseline 1,604, -1%: ok)"


HEAD_DIM_16 = "RuntimeError: Unsupported CPU attention configuration: head_dim=16"


def test_a_precheck_whose_one_token_fails_fails_with_the_journal_read_after_it() -> None:
    """The look passed (active, health 200, ready, nothing fatal), then the smoke test's generation
    killed the engine: smoke_failed, the journal read again after the request as the evidence."""
    traceback = ["Traceback (most recent call last):", HEAD_DIM_16]
    fatal = {"message": HEAD_DIM_16, "rule": "common-python-exception", "count": 1, "ranks": [], "first_line": 90, "traceback": traceback}
    after = {"fatal": [fatal], "allowlisted": [], "unrecognized": [], "counts": {"fatal": 1}, "last_lines": ["EngineCore encountered a fatal error."]}
    smoke = {"status": 500, "msg": "Status code was 500 and not [200]: HTTP Error 500: Internal Server Error"}
    report = precheck_report(options=options(smoke_test=True), smoke=smoke, smoke_journal=after)
    assert (report["verdict"], report["reason"]) == ("fail", "smoke_failed")
    assert report["msg"].startswith(f"smoke test: HTTP 500 from {SMOKE_URL}")
    assert report["msg"].endswith(f"; then a fatal line in {UNIT}'s journal: {HEAD_DIM_16}")
    assert report["fatal"] == [fatal] and report["first_fatal"]["message"] == HEAD_DIM_16
    assert report["last_lines"] == ["EngineCore encountered a fatal error."]
    assert report["smoke_test"]["enabled"] and report["smoke_test"]["passed"] is False


def test_a_precheck_with_the_smoke_test_passes_when_it_generated_and_names_no_smoke_when_off() -> None:
    generated = {"status": 200, "json": {"choices": [{"text": " Paris"}]}}
    report = precheck_report(options=options(smoke_test=True), smoke=generated)
    assert (report["verdict"], report["reason"]) == ("pass", "ready") and report["msg"].endswith(", one token generated")
    assert report["smoke_test"]["passed"] is True and report["smoke_test"]["text"] == " Paris"
    # off (SGLang's default), or not run: the look decides alone
    assert precheck_report(options=options(smoke_test=False), smoke={"status": 500})["verdict"] == "pass"
    off = precheck_report()
    assert off["verdict"] == "pass" and off["smoke_test"]["passed"] is None and "generated" not in off["msg"]


def test_a_precheck_that_failed_before_the_smoke_test_keeps_its_own_reason() -> None:
    """The smoke test runs only after a look that passed; a failed look's reason comes first anyway."""
    report = precheck_report(options=options(smoke_test=True), probe=probe_result(status=503), smoke={"status": 500})
    assert report["reason"] == "health_failed"


# -- the precheck's performance canary ------------------------------------------------------------


def test_a_precheck_whose_server_is_slower_than_its_baseline_fails_as_a_performance_regression() -> None:
    report = precheck_report(options=options(canary=True, canary_on_fail="fail"), canary=canary_result(812))
    assert (report["verdict"], report["reason"]) == ("fail", "performance_regression")
    assert report["msg"] == f"{UNIT} is in service but slower than the host's baseline: decode 812 tok/s (baseline 1,604, -49%: FAIL)"
    assert report["canary"]["verdict"] == "fail" and report["canary"]["samples"] == [{"index": 0, "ok": True}]
    assert "  decode 812 tok/s (baseline 1,604, -49%: FAIL)" in summary_lines(report)
    failure = ET.fromstring(junit_xml(report)).find("./testsuite/testcase/failure")
    assert failure is not None and failure.get("type") == "performance_regression"
    properties = {p.get("name"): p.get("value") for p in ET.fromstring(junit_xml(report)).iter("property")}
    assert properties["canary_verdict"] == "fail"
    assert (stats(report)["canary_verdict"], stats(report)["canary_output_tokens_per_s"]) == ("fail", 812)


def test_a_precheck_canary_only_warns_when_told_to_and_a_failed_look_comes_first() -> None:
    warned = precheck_report(options=options(canary=True, canary_on_fail="warn"), canary=canary_result(812))
    assert (warned["verdict"], warned["reason"]) == ("pass", "ready")
    assert warned["msg"].endswith("(warning: the performance canary failed: decode 812 tok/s (baseline 1,604, -49%: FAIL))")
    assert any("warning only: sglang_precheck_canary_on_fail is warn" in line for line in summary_lines(warned))
    unhealthy = precheck_report(options=options(canary=True), canary=canary_result(812), probe=probe_result(status=503))
    assert unhealthy["reason"] == "health_failed"


def test_a_precheck_canary_that_passes_or_has_no_baseline_passes_and_none_is_no_section() -> None:
    passed = precheck_report(options=options(canary=True), canary=canary_result(1580))
    assert (passed["verdict"], passed["canary"]["verdict"]) == ("pass", "pass")
    first = precheck_report(options=options(canary=True), canary=canary_result(1580, baseline_tps=None))
    assert (first["verdict"], first["canary"]["verdict"]) == ("pass", "inconclusive")
    off = precheck_report(canary={"changed": False, "skipped": True})
    assert off["canary"]["verdict"] is None and not any(line.startswith("performance canary") for line in summary_lines(off))


# SGLang's http_server.py (0.4.7 to 0.5.23): logger.error(f"[http_server] Error: {e}"), then the error response
TOO_LONG = "[2025-03-08 12:31:{:02d}] [http_server] Error: The input (9000 tokens) is longer than the model's context length (4096 tokens)."


def test_request_errors_are_counted_and_named_never_a_failure_unless_past_the_limit() -> None:
    body = next(log for log in corpus_logs() if log.name == READY).body
    served = body.rstrip("\n") + "\n" + "\n".join(TOO_LONG.format(second) for second in (2, 7, 9)) + "\n"
    probe = probe_result()
    probe["journal"] = {**classify(served, rules=load_rules("sglang")), "tail": ["last line"]}
    report = precheck_report(probe=probe)
    assert report["reason"] == "ready", report["msg"]
    assert report["request_errors"] == {"count": 3, "first": TOO_LONG.format(2).split("] ", 1)[1], "rule": "sglang-request-error"}
    assert "3 request(s) answered with an error in this invocation (not a failure)" in report["msg"]
    assert "request errors (one request each, not failing): 3 line(s)" in "\n".join(summary_lines(report))
    assert stats(report)["request_errors"] == 3
    assert precheck_report(probe=probe, options=options(request_error_limit=3))["reason"] == "ready"
    limited = precheck_report(probe=probe, options=options(request_error_limit=2))
    assert (limited["verdict"], limited["reason"]) == ("fail", "request_errors")
    assert "answered 3 request(s) with an error (request_error_limit 2)" in limited["msg"]
