"""Reports as people and CI read them (plugin_utils/_render): the summary, the JUnit XML, the set_stats
data and the file names, the same sections for both roles, on reports built from real logs."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils import _run_record
from ansible_collections.inferops.runbooks.plugins.plugin_utils import _render
from ansible_collections.inferops.runbooks.plugins.plugin_utils._render import cut, junit_xml, report_files, report_json, stats, summary_lines
from tests.unit.plugins.module_utils.observations import (
    CRASHED,
    HEALTH_URL,
    HOST,
    UNIT,
    failed_step,
    precheck_report,
    probe_result,
    restart_report,
    unit_state,
    wait_result,
)


def crashed_restart() -> dict[str, Any]:
    return restart_report(wait=wait_result(CRASHED, "fail", "fatal_log", "fatal line in sglang.service's journal: NCCL error"))


def test_restart_summary_reads_top_down() -> None:
    lines = summary_lines(restart_report(), "/tmp/reports")
    assert lines[0] == f"{HOST} {UNIT}: PASS (ready) after 8.2 s waiting, 42.5 s in all"
    assert lines[1] == "sglang.service is ready after 8s"
    assert lines[2] == "invocation a2c5d06342d1487fb9ab9885ca002311 (before: b5871ab499424ab8a48417ad5fa31aca), automatic restarts: 0"
    assert lines[3] == "phases: loading_weights 1.3 s > ready 6.9 s"
    assert lines[4] == f"health: HTTP 200 from {HEALTH_URL}, 2 success(es) in a row"
    assert "fatal: none" in lines
    assert any(line.startswith("  [common-custom-allreduce-disabled] x4 on 4 ranks (TP0..TP3): Custom allreduce is disabled") for line in lines)
    # the stale-rule list the wait returns is shown (it once was dropped from the restart's summary)
    assert "stale rules (past their expires date): local-old-notice" in lines
    assert lines[-1] == f"reports: /tmp/reports/{HOST}.json and .junit.xml"


def test_fatal_events_show_ranks_lines_and_a_short_traceback() -> None:
    lines = summary_lines(crashed_restart())
    assert lines[0].startswith(f"{HOST} {UNIT}: FAIL (fatal_log)")
    fatal = lines.index("FATAL: 2 event(s)")
    assert lines[fatal + 1].startswith("  [common-python-exception] x2 on TP3,TP7, journal line 27-81: RuntimeError: NCCL error")
    traceback = [line for line in lines if line.startswith("    | ")]
    assert "    | ..." in traceback and len(traceback) <= 2 * 7
    assert not any(line.startswith("last journal lines") for line in lines)  # the fatal lines say it


def test_journal_gaps_are_reported_by_both_roles() -> None:
    gap = "journal entries between cursor s=1;i=2a and s=1;i=3f were rotated or vacuumed away before they were read"
    probe = probe_result()
    probe["journal"]["gap"] = gap
    for report in (restart_report(wait=wait_result(journal_gaps=[gap])), precheck_report(probe=probe)):
        assert report["journal_gaps"] == [gap]
        lines = summary_lines(report)
        assert any(line.startswith("journal gaps (entries rotated or vacuumed away before they were read") for line in lines)
        assert f"  {gap}" in lines
    assert restart_report()["journal_gaps"] == [] and precheck_report()["journal_gaps"] == []


def test_last_journal_lines_only_for_a_failure_without_a_fatal_line() -> None:
    stalled = restart_report(wait=wait_result(verdict="fail", reason="stalled", msg="no progress in phase loading weights for 15m00s", fatal=[]))
    lines = summary_lines(stalled)
    assert lines[-3:] == ["last journal lines:", "    | line one", "    | line two"]


def test_both_roles_share_the_health_line_and_the_evidence_sections() -> None:
    failed_health = {"status": None, "up": False, "error": "connection refused", "url": HEALTH_URL}
    restart_lines = summary_lines(restart_report(wait=wait_result(verdict="fail", reason="health_never_passed", msg="m", health=failed_health)))
    precheck_lines = summary_lines(precheck_report(probe=probe_result(status=None, error="connection refused")))
    expected = f"health: no answer (connection refused) from {HEALTH_URL}"
    assert expected in restart_lines and expected in precheck_lines
    # the same evidence of the same journal reads the same in both
    start = restart_lines.index("fatal: none")
    assert restart_lines[start : start + 4] == precheck_lines[precheck_lines.index("fatal: none") :][:4]


def test_precheck_summary() -> None:
    lines = summary_lines(precheck_report(check_mode=True), "/tmp/reports")
    assert lines[0] == f"{HOST} {UNIT}: precheck PASS (ready) [check mode] - read-only, nothing was restarted"
    assert lines[2] == "unit: active (running), main PID 4242, invocation a2c5d06342d1487fb9ab9885ca002311, automatic restarts: 0"
    assert lines[3] == f"health: HTTP 200 from {HEALTH_URL}"
    assert lines[4].startswith("journal: ") and ", ready marker at line " in lines[4]
    assert lines[-1] == f"reports: /tmp/reports/{HOST}.precheck.json and .precheck.junit.xml"
    # no look at the journal (the unit does not exist): no journal sections at all
    refused = summary_lines(precheck_report(state=unit_state(load="not-found", invocation=""), probe={}))
    assert refused[0].endswith("precheck FAIL (unit_not_found) - read-only, nothing was restarted")
    assert not any(line.startswith(("unit:", "journal:", "fatal:", "FATAL")) for line in refused)


def test_unrecognized_lines_suggest_a_rule_for_the_role_variable() -> None:
    event = {"message": "Frobnicator returned error state 7, continuing", "count": 1, "ranks": ["TP0"], "first_line": 812, "last_line": 812}
    event["suggested_rule"] = {"id": "local-frobnicator-returned-error-state", "pattern": r"Frobnicator returned error state [-+]?[\d.]+, continuing"}
    for report in (restart_report(wait=wait_result(unrecognized=[event])), precheck_report()):
        report["unrecognized"] = [event]
        lines = summary_lines(report)
        assert "unrecognized (reported, not failing): 1" in lines
        assert "  x1 on TP0, journal line 812: Frobnicator returned error state 7, continuing" in lines
        suggestion = next(line for line in lines if "suggested rule" in line)
        assert suggestion.startswith(f"    suggested rule for {report['role']}_extra_rules: ")
        assert json.loads(suggestion.split(": ", 1)[1]) == event["suggested_rule"]


def test_every_refused_variable_is_listed() -> None:
    problems = ["sglang_restart_budget must be a number of seconds > 0, got 0", "sglang_restart_soak must be a number of seconds >= 0, got -1"]
    failure = failed_step(
        "validate", "Refusing to run sglang_restart on gpu-node-01, nothing was touched: " + "; ".join(problems), reason="invalid_options", problems=problems
    )
    lines = summary_lines(restart_report(failure=failure, options={}, before={}, wait={}))
    assert lines[0].startswith(f"{HOST} {UNIT}: FAIL (invalid_options)")
    assert "failed step: Validate | a step" in lines
    assert [line for line in lines if line.startswith("refused: ")] == [f"refused: {problem}" for problem in problems]
    # nothing ran: no invocation, no journal evidence to show
    assert not any(line.startswith(("invocation", "fatal", "allowlisted", "unrecognized")) for line in lines)


def test_junit_of_a_failed_restart() -> None:
    report = crashed_restart()
    report["last_lines"] = ["\x1b[31mred\x1b[0m and a bell \x07"]
    suites = ET.fromstring(junit_xml(report))
    assert (suites.tag, suites.get("name"), suites.get("failures"), suites.get("time")) == ("testsuites", "inferops.runbooks.sglang_restart", "1", "42.5")
    suite = suites.find("testsuite")
    assert suite is not None and suite.get("name") == f"sglang_restart.{HOST}" and suite.get("timestamp") == "2027-01-15T08:00:00"
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties["verdict"] == "fail" and properties["fatal_events"] == "2" and properties["wait_seconds"] == "8.2"
    case = suite.find("testcase")
    assert case is not None and case.get("name") == f"restart {UNIT}"
    failure = case.find("failure")
    assert failure is not None and failure.get("type") == "fatal_log"
    text = failure.text or ""
    assert "NCCL error" in text and "Traceback (most recent call last):" in text
    assert "[31mred[0m and a bell " in text and "\x1b" not in text and "\x07" not in text
    assert (case.findtext("system-out") or "").splitlines() == summary_lines(report)


def test_junit_of_a_dry_run_and_of_a_precheck() -> None:
    skipped = ET.fromstring(junit_xml(restart_report(check_mode=True)))
    assert skipped.get("failures") == "0" and skipped.find("./testsuite/testcase/skipped") is not None
    checked = ET.fromstring(junit_xml(precheck_report(probe=probe_result(status=503))))
    properties = {p.get("name"): p.get("value") for p in checked.iter("property")}
    assert properties["health_status"] == "503" and properties["check_mode"] == "false" and properties["active_state"] == "active"
    failure = checked.find("./testsuite/testcase/failure")
    assert failure is not None and failure.get("type") == "health_failed"
    assert checked.find("./testsuite/testcase").get("name") == f"precheck {UNIT}"  # type: ignore[union-attr]


def test_stats_keep_their_documented_keys() -> None:
    assert stats(crashed_restart()) == {
        "verdict": "fail",
        "reason": "fatal_log",
        "elapsed": 8.2,
        "total_elapsed": 42.5,
        "invocation_id": "a2c5d06342d1487fb9ab9885ca002311",
        "previous_invocation_id": "b5871ab499424ab8a48417ad5fa31aca",
        "unit": UNIT,
        "fatal": 2,
        "unrecognized": 0,
        "survived_lines": 0,
        # a restart that deployed nothing and was not rolled back
        "state": None,
        "config_changed": None,
        "rollback_verdict": None,
        "rollback_reason": None,
        "rollback_elapsed": 0,
        "rollback_invocation_id": "",
        "traffic_removed": None,
        "traffic_restored": None,
        "repairs": [],
        # no performance canary ran
        "canary_verdict": None,
        "canary_output_tokens_per_s": None,
        "canary_baseline_output_tokens_per_s": None,
    }
    repaired = {**crashed_restart(), "repairs": ["out of rotation since run r1 stopped at step drain: put back once the host serves"]}
    assert stats(repaired)["repairs"] == repaired["repairs"]
    checked = stats(precheck_report())
    canary = {"canary_verdict", "canary_output_tokens_per_s", "canary_baseline_output_tokens_per_s"}
    assert set(checked) == {
        "verdict",
        "reason",
        "unit",
        "invocation_id",
        "active_state",
        "health_status",
        "fatal",
        "unrecognized",
        "allowlisted",
        "request_errors",
        "survived_lines",
        "counts",
        *canary,
    }
    assert (checked["active_state"], checked["health_status"], checked["allowlisted"]) == ("active", 200, len(precheck_report()["allowlisted"]))


def test_report_files_and_json() -> None:
    assert report_files(restart_report(), "") == {}
    assert report_files(restart_report(), "/r/") == {"json": f"/r/{HOST}.json", "junit": f"/r/{HOST}.junit.xml"}
    assert report_files(precheck_report(), "/r") == {"json": f"/r/{HOST}.precheck.json", "junit": f"/r/{HOST}.precheck.junit.xml"}
    report = restart_report()
    assert json.loads(report_json(report)) == report


def test_a_mapping_that_is_no_report_is_refused() -> None:
    with pytest.raises(ValueError, match="not a runbook report"):
        summary_lines({"verdict": "pass"})


@pytest.mark.parametrize(("text", "limit", "expected"), [("short", 10, "short"), ("a b c d e f g h", 6, "a..."), ("x" * 20, 10, "x" * 7 + "...")])
def test_cut(text: str, limit: int, expected: str) -> None:
    assert cut(text, limit) == expected


@pytest.mark.parametrize(
    ("drain", "expected"),
    [
        ({"seconds": 1.2, "load_status": 200, "running_at_stop": 0, "timed_out": False}, "drain: 0 request(s) running at the stop, after 1.2 s"),
        (
            {"seconds": 9.4, "load_status": 200, "running_at_start": 1, "running_at_stop": 0, "timed_out": False},
            "drain: 1 request(s) running as it began, 0 request(s) running at the stop, after 9.4 s",
        ),
        (
            {"seconds": 60.1, "load_status": 200, "running_at_stop": 3, "timed_out": True},
            "drain: 3 request(s) running at the stop, after 60.1 s (drain timeout reached)",
        ),
        (
            {"seconds": 0.6, "load_status": -1, "running_at_stop": None, "timed_out": False},
            "drain: running requests not known at the stop (http://127.0.0.1:30000/get_load: no answer), after 0.6 s",
        ),
        (
            {"seconds": 0.4, "load_status": 404, "running_at_stop": None, "timed_out": False},
            "drain: running requests not known at the stop (http://127.0.0.1:30000/get_load: HTTP 404), after 0.4 s",
        ),
    ],
)
def test_the_drain_line_says_what_the_load_endpoint_answered(drain: dict[str, Any], expected: str) -> None:
    traffic = {"removed": False, "restored": False, "drain": {"load_url": "http://127.0.0.1:30000/get_load", **drain}}
    report = restart_report(deploy={"state": "restarted", "restart_needed": True, "traffic": traffic})
    assert expected in summary_lines(report, None)


LOADS = "http://127.0.0.1:30000/v1/loads"


@pytest.mark.parametrize(
    ("drain", "expected"),
    [
        (
            {
                "url": LOADS,
                "running_at_start": 1,
                "running_at_stop": 0,
                "known": True,
                "listening": True,
                "timed_out": False,
                "seconds": 7.3,
                "seen": [{"url": LOADS, "status": 200, "running": 0, "error": None}],
            },
            f"drain: 1 request(s) running as it began, 0 request(s) running at the stop (read at {LOADS}), after 7.3 s",
        ),
        (
            {
                "url": None,
                "running_at_start": None,
                "running_at_stop": None,
                "known": False,
                "listening": True,
                "timed_out": True,
                "seconds": 300.0,
                "seen": [
                    {"url": LOADS, "status": 401, "running": None, "error": "the server wants its API key"},
                    {"url": "http://127.0.0.1:30000/get_load", "status": 401, "running": None, "error": "the server wants its API key"},
                    {"url": "http://127.0.0.1:30000/metrics", "status": 404, "running": None, "error": "HTTP 404"},
                ],
            },
            f"drain: running requests not known ({LOADS}: the server wants its API key; http://127.0.0.1:30000/get_load: the server wants its API key;"
            " http://127.0.0.1:30000/metrics: HTTP 404); waited until the drain timeout, after 300.0 s",
        ),
        (
            {"url": None, "running_at_stop": None, "known": False, "listening": False, "timed_out": False, "seconds": 0.0, "seen": []},
            f"drain: nothing listens at {LOADS} (connection refused): no request can run there, after 0.0 s",
        ),
        ({"node_rank": 1, "seen": []}, "drain: node 1 of a multi-node server: its requests enter at node 0, nothing to read here"),
    ],
)
def test_the_drain_line_says_what_every_load_endpoint_answered(drain: dict[str, Any], expected: str) -> None:
    traffic = {"removed": False, "restored": False, "drain": {"load_url": LOADS, **drain}}
    report = restart_report(deploy={"state": "restarted", "restart_needed": True, "traffic": traffic})
    assert expected in summary_lines(report, None)


def left_by_a_killed_rollout() -> dict[str, Any]:
    """The run_record module's result on a host whose rollout was killed during its wait (out of the router)."""
    traffic = {"out": True, "router_url": "http://r:8080", "worker": {"url": "http://h:30000"}}
    record = _run_record.advance(None, UNIT, "run-7", "drain", {"traffic": traffic}, now=1)
    return {"record": _run_record.advance(record, UNIT, "run-7", "wait", now=2), "problem": None}


def test_a_precheck_fails_a_host_an_interrupted_rollout_left_naming_the_run_and_the_step() -> None:
    report = precheck_report(record=left_by_a_killed_rollout())
    assert (report["verdict"], report["reason"]) == ("fail", "interrupted_run")
    assert "out of rotation (run run-7 stopped at step wait); run the same rollout again" in report["msg"]
    assert not any(line.startswith("also:") for line in summary_lines(report)), "said once, in the message"
    # a healthy host whose last rollout settled passes
    settled = _run_record.advance(left_by_a_killed_rollout()["record"], UNIT, "run-8", "done", {"traffic": {"out": False}}, now=3)
    assert precheck_report(record={"record": settled, "problem": None})["verdict"] == "pass"


def test_a_precheck_that_fails_for_its_cause_still_says_what_the_rollout_left() -> None:
    report = precheck_report(record=left_by_a_killed_rollout(), probe=probe_result(status=None, error="connection refused", active="failed", sub="failed"))
    assert report["reason"] == "unit_not_active"
    assert f"also: {HOST} is out of rotation (run run-7 stopped at step wait); run the same rollout again to repair it" in summary_lines(report)


def test_the_fleet_lines_group_the_hosts_by_where_they_stand_in_the_plays_order() -> None:
    hosts = ["gpu3", "gpu1", "gpu2", "gpu4", "gpu5"]
    reports = [{"host": "gpu1", "state": "rolled_back"}, {"host": "gpu2", "state": "new_configuration"}, {"host": "gpu3", "state": "new_configuration"}]
    slow = [{"host": "gpu2", "text": "gpu2: start took 80.0 s, 2.7x the median of its 2 peers on the same configuration"}]
    assert _render.fleet_lines(hosts, reports, slow) == [
        "fleet: 5 host(s) in the play, 3 reached, 2 not touched",
        "  new configuration: gpu3 gpu2",
        "  ROLLED BACK (serving the previous configuration): gpu1",
        "  not touched: gpu4 gpu5",
        "  slower than its peers: gpu2: start took 80.0 s, 2.7x the median of its 2 peers on the same configuration",
    ]
    assert _render.fleet_lines(["gpu1"], [], []) == ["fleet: 1 host(s) in the play, 0 reached, 1 not touched", "  not touched: gpu1"]
