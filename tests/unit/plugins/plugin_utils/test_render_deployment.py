"""A multi-node deployment's report as people and CI read it (plugin_utils/_render, on the report of
plugin_utils/_deployment.deployment_verdict): the same functions as a host's report, one screen, one
JUnit test case, its own set_stats figures and files named after the deployment, for both roles."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any

from ansible_collections.inferops.runbooks.plugins.plugin_utils._deployment import deployment_verdict
from ansible_collections.inferops.runbooks.plugins.plugin_utils._render import junit_xml, report_files, report_json, stats, summary_lines
from tests.unit.plugins.module_utils.observations import (
    AFTER_ID,
    CRASHED,
    STARTED,
    UNIT,
    precheck_report,
    probe_result,
    restart_report,
    wait_result,
)

NODE1_FATAL_AT = 1_800_000_001_337_123  # journal time in microseconds: 08:00:01.337 UTC
NODE0_FATAL_AT = NODE1_FATAL_AT + 1_549_000


def node(rank: int) -> dict[str, Any]:
    return {"deployment": "dsr1", "multi_node": True, "rank": rank, "hosts": ["sim1", "sim2"], "peers": {}}


def first_fatal(message: str, realtime: int, line: int, ranks: list[str]) -> dict[str, Any]:
    return {"message": message, "rule": "common-python-exception", "ranks": ranks, "line": line, "timestamp": None, "realtime": realtime}


def crashed_restart() -> dict[str, Any]:
    """Node 1 crashes first (its KeyError is the root cause); node 0, not started, gets gloo's error after it."""
    crash = first_fatal("KeyError: 'model.layers.61.mlp.experts.255.down_proj.weight_scale_inv'", NODE1_FATAL_AT, 79, ["TP9"])
    consequence = first_fatal("RuntimeError: Connection closed by peer [10.226.2.2]:35348", NODE0_FATAL_AT, 87, ["TP0", "TP1"])
    zero = wait_result(CRASHED, "fail", "peer_failed", "sim2 (node 1 of dsr1) failed (fatal_log)", first_fatal=consequence, ended_at=STARTED + 11)
    zero.update(phase=None, progress=None)
    one = wait_result(CRASHED, "fail", "fatal_log", "fatal line in sglang.service's journal: KeyError", first_fatal=crash, ended_at=STARTED + 10)
    return deployment_verdict("dsr1", [restart_report(host="sim2", node=node(1), wait=one), restart_report(host="sim1", node=node(0), wait=zero)])


def failed_precheck() -> dict[str, Any]:
    """Node 0's health answers 503, node 1's placeholder 200; nothing fatal logged."""
    zero = precheck_report(host="sim1", node=node(0), probe=probe_result(status=503))
    one = precheck_report(host="sim2", node=node(1))
    return deployment_verdict("dsr1", [zero, one])


def test_the_deployment_report_carries_the_role_unit_engine_and_every_nodes_report() -> None:
    report = crashed_restart()
    assert (report["role"], report["deployment"], report["unit"], report["engine"]) == ("sglang_restart", "dsr1", UNIT, "sglang")
    assert [node["host"] for node in report["node_reports"]] == ["sim1", "sim2"]  # by rank
    assert report["node_reports"][1]["fatal"] and report["node_reports"][1]["reason"] == "fatal_log"


def test_a_restart_summary_names_the_root_cause_with_its_first_fatal_line_and_traceback_then_every_node() -> None:
    lines = summary_lines(crashed_restart(), "/r")
    assert lines[:4] == [
        f"deployment dsr1 (2 nodes: sim1, sim2) {UNIT}: FAIL (fatal_log) after 8.2 s waiting",
        "sim2 (node 1): fatal line in sglang.service's journal: KeyError",
        "root cause: sim2 (node 1), fatal_log",
        "  first fatal line [common-python-exception] on TP9 at 08:00:01.337 UTC, journal line 79: "
        "KeyError: 'model.layers.61.mlp.experts.255.down_proj.weight_scale_inv'",
    ]
    nodes = lines.index("nodes:")
    traceback = lines[4:nodes]
    assert traceback and all(line.startswith("    | ") for line in traceback) and "    | ..." in traceback
    assert lines[nodes + 1 :] == [
        f"  sim1 node 0: FAIL (peer_failed), not started, health connection refused, invocation {AFTER_ID}",
        "    first fatal line 1.549 s after the root cause [common-python-exception] on TP0,TP1 at 08:00:02.886 UTC, journal line 87: "
        "RuntimeError: Connection closed by peer [10.226.2.2]:35348",
        f"  sim2 node 1 (root cause): FAIL (fatal_log), starting, health connection refused (placeholder, not counted), invocation {AFTER_ID}",
        "reports: /r/dsr1.json and .junit.xml",
    ]


def test_a_precheck_summary_reads_the_same_with_its_own_headline() -> None:
    lines = summary_lines(failed_precheck(), "/r")
    assert lines[0] == f"deployment dsr1 (2 nodes: sim1, sim2) {UNIT}: precheck FAIL (health_failed) - read-only, nothing was restarted"
    assert lines[1].startswith("sim1 (node 0): http://127.0.0.1:30000/health_generate answered HTTP 503 (probed from sim1), not 200")
    assert lines[2] == "root cause: sim1 (node 0), health_failed"
    assert f"  sim1 node 0 (root cause): FAIL (health_failed), ready, health 503, invocation {AFTER_ID}" in lines
    assert f"  sim2 node 1: PASS (ready), ready, health 200 (placeholder, not counted), invocation {AFTER_ID}" in lines
    assert lines[-1] == "reports: /r/dsr1.precheck.json and .precheck.junit.xml"
    # a node that reached no phase: a precheck read no journal, a restart did not start
    unread = deployment_verdict("dsr1", [precheck_report(host="sim1", node=node(0), probe={}), precheck_report(host="sim2", node=node(1))])
    assert any(line.startswith("  sim1 node 0 (root cause): FAIL (health_failed), no journal, health not probed") for line in summary_lines(unread))


def test_a_passing_deployment_and_a_dry_run() -> None:
    passed = deployment_verdict("dsr1", [restart_report(host=host, node=node(rank)) for rank, host in enumerate(("sim1", "sim2"))])
    lines = summary_lines(passed, "/r")
    assert lines[0] == f"deployment dsr1 (2 nodes: sim1, sim2) {UNIT}: PASS (ready) after 8.2 s waiting"
    assert lines[1] == "all 2 nodes passed; node 0 (sim1): sglang.service is ready after 8s" and "root cause" not in " ".join(lines)
    dry = deployment_verdict("dsr1", [restart_report(host=host, node=node(rank), check_mode=True) for rank, host in enumerate(("sim1", "sim2"))])
    assert dry["verdict"] == "skipped" and not summary_lines(dry, "/r")[-1].startswith("reports:")  # no files for a dry run
    suites = ET.fromstring(junit_xml(dry))
    assert suites.find("./testsuite").get("skipped") == "1" and suites.find("./testsuite/testcase/skipped") is not None  # type: ignore[union-attr]


def test_junit_of_a_deployment_is_one_test_case_with_the_nodes_as_properties() -> None:
    report = crashed_restart()
    suites = ET.fromstring(junit_xml(report, "/r"))
    assert (suites.get("name"), suites.get("tests"), suites.get("failures"), suites.get("time")) == ("inferops.runbooks.sglang_restart", "1", "1", "8.2")
    [case] = suites.findall("./testsuite/testcase")
    assert (case.get("classname"), case.get("name")) == ("sglang_restart.dsr1", f"restart {UNIT} on 2 nodes")
    properties = {p.get("name"): p.get("value") for p in suites.iter("property")}
    assert properties == {
        "deployment": "dsr1",
        "unit": UNIT,
        "verdict": "fail",
        "reason": "fatal_log",
        "root_cause": "sim2",
        "node0": f"sim1 fail (peer_failed) invocation {AFTER_ID}",
        "node1": f"sim2 fail (fatal_log) invocation {AFTER_ID}",
    }
    failure = case.find("failure")
    assert failure is not None and failure.get("type") == "fatal_log" and (failure.get("message") or "").startswith("sim2 (node 1): ")
    text = (failure.text or "").splitlines()
    assert "sim2 node 1 (root cause): fail (fatal_log) fatal line in sglang.service's journal: KeyError" in text
    assert "  first fatal line: KeyError: 'model.layers.61.mlp.experts.255.down_proj.weight_scale_inv'" in text
    assert (case.findtext("system-out") or "").splitlines() == summary_lines(report, "/r")
    checked = ET.fromstring(junit_xml(failed_precheck()))
    assert checked.get("name") == "inferops.runbooks.sglang_precheck"
    assert checked.find("./testsuite/testcase").get("name") == f"precheck {UNIT} on 2 nodes"  # type: ignore[union-attr]


def test_stats_of_a_deployment_keep_each_roles_figures() -> None:
    assert stats(crashed_restart()) == {
        "deployment": True,
        "verdict": "fail",
        "reason": "fatal_log",
        "root_cause": "sim2",
        "elapsed": 8.2,
        "unit": UNIT,
        "nodes": {
            "sim1": {"rank": 0, "verdict": "fail", "reason": "peer_failed", "invocation_id": AFTER_ID},
            "sim2": {"rank": 1, "verdict": "fail", "reason": "fatal_log", "invocation_id": AFTER_ID},
        },
    }
    assert stats(failed_precheck()) == {
        "deployment": True,
        "verdict": "fail",
        "reason": "health_failed",
        "root_cause": "sim1",
        "unit": UNIT,
        "nodes": {"sim1": "fail", "sim2": "pass"},
    }


def test_files_are_named_after_the_deployment_and_it_renders_again_from_its_json() -> None:
    report, checked = crashed_restart(), failed_precheck()
    assert report_files(report, "/r") == {"json": "/r/dsr1.json", "junit": "/r/dsr1.junit.xml"}
    assert report_files(checked, "/r/") == {"json": "/r/dsr1.precheck.json", "junit": "/r/dsr1.precheck.junit.xml"}
    for each in (report, checked):
        again = json.loads(report_json(each))
        assert again == each
        assert summary_lines(again, "/r") == summary_lines(each, "/r") and junit_xml(again, "/r") == junit_xml(each, "/r")
