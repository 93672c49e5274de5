"""The start history across hosts and in the machine-readable outputs (issue 20): the fleet view
(``_history.fleet_compare``/``fleet_outliers``, ``_runbook_report.fleet_section``, the filters of the same
names), the history facts in the JSON report, the JUnit properties and ``set_stats``, and the rollback's start
in the report. The starts are the real start of tests/unit/data/corpus, stretched."""

from __future__ import annotations

import copy
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils import _history
from ansible_collections.inferops.runbooks.plugins.plugin_utils import _render
from ansible_collections.inferops.runbooks.plugins.plugin_utils._runbook_report import fleet_section, fleet_starts
from tests.unit.plugins.module_utils.observations import restart_report, wait_result
from tests.unit.plugins.module_utils.test_history import history_result, scaled, start

REAL = start()


def timed(total: float, config: str = "cfg-a") -> dict[str, Any]:
    return {"config": config, "total": total}


# -- the fleet view --------------------------------------------------------------------------------


def test_a_host_much_slower_than_its_peers_on_the_same_configuration_is_named() -> None:
    starts = {"sim1": timed(59.0), "sim2": timed(190.0), "sim3": timed(57.0), "sim4": timed(61.0)}
    (slow,) = _history.fleet_outliers(starts)
    assert slow["text"] == "sim2: start took 3m10s, 3.2x the median of its 3 peers on the same configuration (59s)"
    assert (slow["host"], slow["peers"], slow["median"], slow["ratio"]) == ("sim2", ["sim1", "sim3", "sim4"], 59.0, 3.2)
    compared = _history.fleet_compare(starts)
    assert not compared["sim1"]["slow"] and compared["sim1"]["peers"] == ["sim2", "sim3", "sim4"]
    # the threshold is the caller's: 3.5x names nobody, 3.2x names sim2
    assert _history.fleet_outliers(starts, 3.5) == []
    assert [found["host"] for found in _history.fleet_outliers(starts, 3.2)] == ["sim2"]


@pytest.mark.parametrize(
    "starts",
    [
        # one peer only: nothing to call usual
        {"sim1": timed(59.0), "sim2": timed(190.0)},
        # three hosts, but the slow one is alone on its configuration
        {"sim1": timed(59.0), "sim2": timed(190.0, "cfg-b"), "sim3": timed(57.0)},
        # a peer without a time does not count
        {"sim1": timed(59.0), "sim2": timed(190.0), "sim3": {"config": "cfg-a", "total": None}},
    ],
    ids=["one-peer", "other-configuration", "peer-without-a-time"],
)
def test_a_host_with_fewer_than_two_peers_on_its_configuration_is_never_named(starts: dict[str, Any]) -> None:
    assert _history.fleet_outliers(starts, 1.0) == []
    assert "sim2" not in _history.fleet_compare(starts, 1.0)


def test_min_peers_below_two_is_raised_to_two() -> None:
    assert _history.fleet_outliers({"sim1": timed(10.0), "sim2": timed(100.0)}, 2.0, min_peers=1) == []


def host_report(host: str, factor: float, config: str = "cfg-a", outcome: str = "pass", added: bool = True) -> dict[str, Any]:
    """The restart's report of a host whose start was the real one stretched ``factor`` times."""
    earlier = [scaled(REAL, factor, f"{n:032x}", config) for n in range(3)]
    this = scaled(REAL, factor, "e" * 32, config)
    this["outcome"] = outcome
    history = history_result(earlier, this, config)
    history.update(entry=this, added=added)
    return restart_report(host=host, history=history, history_before=history)


def test_the_reports_compare_recorded_good_starts_only() -> None:
    reports = [host_report("sim1", 10.0), host_report("sim2", 32.0), host_report("sim3", 10.0), host_report("sim4", 10.0)]
    assert set(fleet_starts(reports)) == {"sim1", "sim2", "sim3", "sim4"}
    assert fleet_starts(reports)["sim2"]["total"] == reports[1]["history"]["start"]["total"]
    # a failed start, a start already recorded (verified in place), a host without history: no time to compare
    others = [host_report("sim5", 10.0, outcome="fail"), host_report("sim6", 10.0, added=False), restart_report(host="sim7")]
    assert set(fleet_starts(others)) == set()
    slow = fleet_section(reports[1], reports + others)
    assert slow["history"]["fleet"]["slow"] and slow["history"]["fleet"]["ratio"] == 3.2
    assert slow["history"]["fleet"]["text"].startswith("sim2: start took ")
    usual = fleet_section(reports[0], reports)
    assert usual["history"]["fleet"]["slow"] is False
    # a report without a history section is left as it is; before the comparison fleet is null
    assert fleet_section(others[2], reports) == others[2]
    assert reports[0]["history"]["fleet"] is None
    # the canary host of a rolling play: no peers yet
    assert fleet_section(reports[1], reports[:2])["history"]["fleet"] is None
    # the host's own report need not be among the play's yet, and an earlier one of it counts for nothing
    assert fleet_section(reports[1], [reports[0], *reports[2:]])["history"]["fleet"] == slow["history"]["fleet"]
    stale = host_report("sim2", 10.0)
    assert fleet_section(reports[1], [stale, reports[0], *reports[2:]])["history"]["fleet"] == slow["history"]["fleet"]


def test_the_filters_compare_the_play_and_refuse_a_bad_ratio() -> None:
    from ansible.errors import AnsibleFilterError

    from ansible_collections.inferops.runbooks.plugins.filter.report import FilterModule

    filters = FilterModule().filters()
    reports = [host_report("sim1", 10.0), host_report("sim2", 32.0), host_report("sim3", 10.0)]
    (slow,) = filters["fleet_outliers"]([*reports, None, "x"], 2)
    assert slow["host"] == "sim2" and "2 peers on the same configuration" in slow["text"]
    assert filters["report_fleet"](reports[1], reports, "2.5")["history"]["fleet"]["slow"]
    # from the peers' starts alone (what the settle phase returns), the same comparison
    starts = {host: start for report in reports for host, start in fleet_starts([report]).items()}
    assert filters["report_fleet"](reports[1], starts, "2.5") == filters["report_fleet"](reports[1], reports, "2.5")
    assert filters["report_fleet"](reports[0], {"sim2": starts["sim2"]})["history"]["fleet"] is None  # one peer: nothing to compare
    for bad in (0.5, "x", None):
        with pytest.raises(AnsibleFilterError, match="ratio must be a number >= 1"):
            filters["fleet_outliers"](reports, bad)
    with pytest.raises(AnsibleFilterError, match="must be a list of reports"):
        filters["fleet_outliers"]({"sim1": reports[0]})


# -- the history facts in the JSON report, JUnit and set_stats ------------------------------------------


def slow_start_report() -> dict[str, Any]:
    """A start whose weight loading took 3x its usual time, with an ETA from three good starts, after which
    the fleet compared it with two peers."""
    earlier = [scaled(REAL, 10.0, f"{n:032x}") for n in range(3)]
    this = scaled(REAL, 10.0, "e" * 32)
    this["phases"]["loading_weights"] = round(this["phases"]["loading_weights"] * 3, 1)
    this["total"] = round(sum(this["phases"].values()), 1)
    history = history_result(earlier, this)
    history.update(entry=this)
    before = {**history, "stall_limits": _history.stall_limits(earlier, default=900.0)}
    eta = {
        "starts": 3,
        "low": 100.0,
        "high": 110.0,
        "given": [
            {"phase": "starting", "at": 0.5, "remaining": 100.0, "ends_at": 100.5},
            {"phase": "warming_up", "at": 95.0, "remaining": 3.0, "ends_at": 98.0},
        ],
    }
    timeline = [{"phase": "loading_weights", "started": 1.0, "duration": 90.0}, {"phase": "ready", "started": 101.0, "duration": 5.0}]
    report = restart_report(wait=wait_result(eta=eta, timeline=timeline), history=history, history_before=before)
    peers = [host_report("sim2", 10.0), host_report("sim3", 10.0)]
    return fleet_section(report, [report, *peers], 1.5)


def test_the_json_report_carries_the_history_facts() -> None:
    report = slow_start_report()
    history = report["history"]
    assert report["verdict"] == "pass"
    assert [item["phase"] for item in history["slow"]] == ["loading_weights"] and history["slow"][0]["ratio"] == 3.0
    assert history["slow"][0]["text"].startswith("loading weights took 3.0x its usual ")
    # the limit of the phase the wait ended in (ready has none), with the ETA's baseline and its error
    assert history["stall_limit"] is None
    assert (history["eta"]["starts"], history["eta"]["ready_at"], history["eta"]["error"]) == (3, 101.0, 3.0)
    assert history["start"]["outcome"] == "pass" and history["start"]["total"] == report["history"]["start"]["total"]
    assert history["new_templates"] == 0
    assert history["fleet"]["peers"] == ["sim2", "sim3"]
    # the keys the report had before are unchanged
    before = {"path", "problem", "config", "recorded", "starts", "good_starts", "low", "high", "slow", "templates", "new_unrecognized", "stall_limits"}
    assert before <= set(history)
    text = "\n".join(_render.summary_lines(report))
    assert "ETA: ready 1m41s into the wait, 3s later than the ETA at the last phase marker" in text
    assert "  slow: loading weights took 3.0x its usual " in text


def test_a_stalled_start_says_which_limit_applied_and_where_it_came_from() -> None:
    earlier = [scaled(REAL, 10.0, f"{n:032x}") for n in range(3)]
    this = scaled(REAL, 10.0, "e" * 32)
    this.update(outcome="fail", reason="stalled")
    history = history_result(earlier, this)
    before = {**history, "stall_limits": _history.stall_limits(earlier, default=900.0)}
    wait = wait_result(verdict="fail", reason="stalled", msg="no progress", phase="loading_weights")
    report = restart_report(wait=wait, history=history, history_before=before)
    limit = report["history"]["stall_limit"]
    assert (limit["phase"], limit["source"]) == ("loading_weights", "learned") and limit["limit"] < 900
    figures = _render.stats(report)["history"]
    assert (figures["stall_limit"], figures["stall_limit_phase"], figures["stall_limit_source"]) == (limit["limit"], "loading_weights", "learned")
    assert figures["eta_starts"] is None and figures["fleet_slow"] is None


def test_set_stats_and_junit_carry_the_history_facts_and_keep_their_keys() -> None:
    report = slow_start_report()
    figures = _render.stats(report)
    plain = restart_report()
    # the figures published before are all still there, unchanged; history is added
    assert set(_render.stats(plain)) - {"history"} == {name for name, _path in _render.FORMS["sglang_restart"].stats}
    history = figures["history"]
    assert history["slow_phases"] == {"loading_weights": 3.0}
    assert (history["good_starts"], history["eta_starts"], history["eta_error"], history["new_templates"]) == (3, 3, 3.0, 0)
    assert (history["fleet_ratio"], history["fleet_peers"], history["fleet_slow"]) == (report["history"]["fleet"]["ratio"], 2, True)
    suite = ET.fromstring(_render.junit_xml(report)).find("testsuite")
    assert suite is not None
    properties = {prop.get("name"): prop.get("value") for prop in suite.iter("property")}
    assert properties["history_good_starts"] == "3" and properties["history_eta_error"] == "3.0"
    assert properties["history_slow"].startswith("loading weights took 3.0x its usual ")
    assert properties["history_fleet"].startswith(f"{report['host']}: start took ") and properties["history_fleet_slow"] == "true"
    # without a history section: no history properties, the others as before
    bare = copy.deepcopy(plain)
    bare.pop("history", None)
    names = {prop.get("name") for prop in ET.fromstring(_render.junit_xml(bare)).iter("property")}
    assert not any(name.startswith("history_") for name in names)


# -- the rollback's start ---------------------------------------------------------------------------


def test_the_rollback_start_recorded_in_the_history_is_in_the_report() -> None:
    this = scaled(REAL, 10.0, "r" * 32, "cfg-previous")
    recorded = {**history_result([], this, "cfg-previous"), "entry": this}
    rollback = {"attempted": True, "restarted": True, "files_restored": True, "wait": wait_result(), "history": recorded}
    report = restart_report(deploy={"state": "rolled_back", "rollback": rollback})
    recorded_there = report["rollback"]["history"]
    assert (recorded_there["recorded"], recorded_there["config"], recorded_there["problem"], recorded_there["slow"]) == (True, "cfg-previous", None, [])
    assert recorded_there["start"]["outcome"] == "pass" and recorded_there["start"]["total"] == this["total"]
    failed = restart_report(deploy={"state": "rolled_back", "rollback": {**rollback, "history": {"failed": True, "msg": "cannot write"}}})
    assert failed["rollback"]["history"] == {"recorded": False, "problem": "cannot write"}
    assert restart_report(deploy={"state": "rolled_back", "rollback": {**rollback, "history": {}}})["rollback"]["history"] is None
