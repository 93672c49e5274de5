"""The rollout page (plugin_utils/_rollout_page): timelines drawn to scale from real reports (the JSON
written by a real rolled-back deploy on the test fleet, tests/unit/data/reports/) and from reports
built on real corpus logs; the journal's text escaped; batches in order; a bounded size."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import classify, load_rules
from ansible_collections.inferops.runbooks.plugins.plugin_utils import _rollout_page as page
from tests.unit.conftest import corpus_lines
from tests.unit.plugins.module_utils.observations import CRASHED, precheck_report, restart_report, wait_result

REPORTS = Path(__file__).resolve().parents[2] / "data" / "reports"
HOSTILE = "</td><script>alert(document.cookie)</script><img src=x onerror=alert(1)>"
RECT = re.compile(r"<rect class='segment' data-kind='([^']*)' data-seconds='([^']*)' x='([^']*)' y='0' width='([^']*)'")


def real(name: str) -> dict[str, Any]:
    """A report the write_report action wrote in a real run: sim1 passed on the new drop-in, sim2
    crashed while loading weights and was rolled back."""
    data: dict[str, Any] = json.loads((REPORTS / f"rolled-back-{name}.json").read_text())
    return data


def rects(html: str) -> list[tuple[str, float, float, float]]:
    """(kind, seconds, x, width) of every drawn segment, in page order."""
    return [(kind, float(seconds), float(x), float(width)) for kind, seconds, x, width in RECT.findall(html)]


def test_a_real_rolled_back_host_is_drawn_in_order_from_its_start_to_its_end() -> None:
    report = real("sim2")
    drawn = page.timeline(report)
    kinds = [segment.kind for segment in drawn.segments]
    # the start's phases timed by its journal (the start history's record), then the wait seeing the crash
    assert kinds[:4] == ["before", "starting", "loading_weights", "failed"], kinds
    assert [segment.seconds for segment in drawn.segments[1:3]] == [report["history"]["start"]["phases"][phase] for phase in kinds[1:3]]
    assert kinds[4] == "rollback_prepare" and kinds[-1] == "rollback ready", kinds
    # contiguous: each segment begins where the one before it ended, the last ends with the run
    for before, after in zip(drawn.segments, drawn.segments[1:]):
        assert after.start == pytest.approx(before.start + before.seconds, abs=0.11), (before, after)
    last = drawn.segments[-1]
    assert last.start + last.seconds == pytest.approx(report["total_elapsed"], abs=0.11)
    # the crash came in loading weights: the failed start's phases end at the fatal line
    loading = drawn.segments[2]
    assert drawn.fatal_at == pytest.approx(loading.start + loading.seconds, abs=0.11)
    # the drain is in the label of the time before the start, and out of the router from it on (the
    # start's first line or the wait's first look, whichever came first, less the drain)
    assert "drain 2.4 s" in drawn.segments[0].label
    wait_start = report["ended_at"] - report["elapsed"] - page.started(report)
    began = min(wait_start, drawn.segments[1].start)
    assert drawn.out_of_router == (pytest.approx(began - 2.4, abs=0.11), report["total_elapsed"])
    # the rollback's own start, timed by its journal too, ends with the run
    rollback = [segment for segment in drawn.segments if segment.kind.startswith("rollback ") and segment.kind != "rollback ready"]
    recorded = report["rollback"]["history"]["start"]["phases"]
    assert {segment.kind.split(" ", 1)[1]: segment.seconds for segment in rollback} == recorded
    assert [segment.kind for segment in rollback] == [f"rollback {phase}" for phase in page.PHASE_LABELS if phase in recorded]
    assert last.kind == "rollback ready" and last.seconds == report["rollback"]["timeline"][-1]["duration"]


def test_a_start_that_crashed_before_the_wait_looked_is_out_of_the_router_before_its_first_line() -> None:
    # the failed start's journal began 3 s before the wait's first look (a fast crash): the host left
    # the router before that line, so the band begins there less the drain, and the fatal line is inside it
    report = real("sim2")
    wait_start = report["ended_at"] - report["elapsed"] - page.started(report)
    phases = report["history"]["start"]["phases"]
    phases["starting"] = round(phases["starting"] + wait_start - 3.0, 1)
    drawn = page.timeline(report)
    first = next(segment for segment in drawn.segments if segment.kind == "starting")
    assert first.start < wait_start - 2.9, (first, wait_start)
    assert drawn.out_of_router is not None and drawn.fatal_at is not None
    assert drawn.out_of_router[0] == pytest.approx(max(first.start - 2.4, 0.0), abs=0.11)
    assert drawn.out_of_router[0] <= first.start <= drawn.fatal_at


def test_every_bar_of_a_page_shares_one_scale() -> None:
    reports = [real("sim1"), real("sim2")]
    html = page.run_page(reports, [["sim1"], ["sim2"]])
    drawn = rects(html)
    assert len(drawn) == sum(len(page.timeline(report).segments) for report in reports)
    longest = max(report["total_elapsed"] for report in reports)
    for kind, seconds, _x, width in drawn:
        assert width == pytest.approx(seconds / longest * page.WIDTH, abs=0.02), kind
    # the marker of sim2's first fatal line sits at its time on the same scale
    marker = re.search(r"<line class='fatal-marker' data-seconds='([^']*)' x1='([^']*)'", html)
    assert marker is not None and float(marker.group(2)) == pytest.approx(float(marker.group(1)) / longest * page.WIDTH, abs=0.02)


def test_the_first_fatal_line_comes_with_its_time_its_ranks_and_its_traceback_folded() -> None:
    html = page.run_page([real("sim2")])
    first = html.index("<div class='fatal first-fatal'>first fatal line at 2026-12-03 12:01:33 (26.2 s into the run), journal line 71, ")
    assert "rule common-python-exception; the same line 1 time(s) on 1 rank(s): TP1:<br><code>torch.OutOfMemoryError" in html
    traceback = html.index(
        "<details class='fatal traceback'><summary>traceback, 26 lines</summary><pre>[2026-12-03 12:01:33 TP1] Scheduler hit an exception: Traceback"
    )
    following = html.index("<div class='fatal'>fatal x1 on pid297 [sglang-scheduler-failure]: Received sigquit from a child process.")
    assert first < traceback < following


def test_batches_come_canary_first_and_hosts_not_reached_are_named() -> None:
    assert page.batches_of(["a", "b", "c", "d", "e", "f"], [1, 2]) == [["a"], ["b", "c"], ["d", "e"], ["f"]]
    assert page.batches_of(["a", "b", "c"], []) == [["a", "b", "c"]]
    assert page.batches_of(["a", "b"], [0]) == [["a", "b"]]
    html = page.run_page([real("sim2"), real("sim1")], page.batches_of(["sim1", "sim2", "sim3", "sim4"], [1, 2]))
    sections = re.findall(r"<section class='batch' data-batch='(\d+)'><h2>([^<]*)</h2>", html)
    assert sections == [("0", "canary: sim1"), ("1", "batch 1: sim2, sim3"), ("2", "batch 2: sim4")]
    assert html.index("data-host='sim1'") < html.index("data-host='sim2'") < html.index("data-host='sim3'")
    assert "<div class='host not-reached' data-host='sim4'>" in html
    assert "passed: <b>1</b>" in html and "rolled back: <b>1</b>" in html and "not reached: <b>2</b>" in html


def test_the_run_is_named_after_its_earliest_start() -> None:
    assert page.run_name([real("sim2"), real("sim1")]) == "restart-20261203T120034Z"
    # a host of the run that began earlier and has not reported yet names it too
    earlier = page.started(real("sim1"))
    assert earlier is not None and page.run_name([real("sim2"), real("sim1")], [earlier - 60.5]) == "restart-20261203T115933Z"
    assert page.run_name([precheck_report()]).startswith("precheck-")
    with pytest.raises(ValueError, match="at least one report"):
        page.run_name([])


def hostile_report() -> dict[str, Any]:
    """A crashed start (a real corpus log) whose journal also held a line with markup in it: a real
    corpus warning with a hostile tail, classified by the real classifier (unrecognized), and the
    same tail on the fatal line and in its traceback."""
    rules = load_rules("sglang")
    lines = (f"Warning: {entry['line']} {HOSTILE}" for entry in corpus_lines() if entry["label"] == "info" and entry["engine"] == "sglang")
    unrecognized = next(found for found in (classify(line, rules=rules)["unrecognized"] for line in lines) if found)
    wait = wait_result(CRASHED, "fail", "fatal_log", f"fatal line: {HOSTILE}")
    wait["unrecognized"] = unrecognized + wait["unrecognized"]
    assert wait["unrecognized"] and HOSTILE in wait["unrecognized"][0]["message"]
    wait["fatal"][0]["message"] += HOSTILE
    wait["fatal"][0]["traceback"] = [*wait["fatal"][0].get("traceback", []), HOSTILE]
    return restart_report(wait=wait)


def test_journal_text_is_escaped_everywhere() -> None:
    report = hostile_report()
    html = page.run_page([report], title=f"run {HOSTILE}")
    assert "<script" not in html and "<img" not in html and "onerror=alert(1)>" not in html
    assert html.count("&lt;script&gt;alert(document.cookie)&lt;/script&gt;") >= 4  # title, message, unrecognized, fatal, traceback
    # nothing is loaded from anywhere
    assert not re.search(r"\s(src|href)=|url\(|@import", html.replace("&lt;img src=x", ""))


def test_a_flood_of_lines_and_a_long_traceback_stay_bounded() -> None:
    report = copy.deepcopy(hostile_report())
    report["unrecognized"] = [{**report["unrecognized"][0], "message": f"{index} " + "x" * 5000} for index in range(2000)]
    report["fatal"][0]["traceback"] = [f'  File "/x.py", line {index}, in f' for index in range(10_000)]
    html = page.run_page([report])
    assert len(html.encode()) < 60_000
    assert "... 1988 more in the JSON report" in html and "... 9960 more line(s)" in html


def test_usual_durations_and_slow_phases_come_from_the_history() -> None:
    report = real("sim1")
    report["history"]["start"]["phases"]["loading_weights"] = 3.0
    report["history"] = {
        **report["history"],
        "usual": {"loading_weights": 1.2, "ready": 2.0},
        "slow": [{"phase": "loading_weights", "ratio": 2.5, "text": "loading weights took 2.5x its usual 1s"}],
        "fleet": {"slow": True, "text": "sim1: start took 9s, 3.1x the median of its 2 peers on the same configuration (3s)"},
    }
    html = page.run_page([report])
    assert "loading weights: 3 s <span class='slow'>(loading weights took 2.5x its usual 1s)</span>" in html
    assert "3.1x the median of its 2 peers" in html


def test_a_deployment_page_draws_each_node_with_the_root_cause() -> None:
    nodes = [{**real("sim1"), "node_rank": 0, "deployment": "ds"}, {**real("sim2"), "node_rank": 1, "deployment": "ds"}]
    report = {"role": "sglang_restart", "deployment": "ds", "verdict": "fail", "reason": "fatal_log", "msg": "sim2 (node 1): crashed", "nodes": [{}, {}]}
    report.update(root_cause={"host": "sim2", "rank": 1, "reason": "fatal_log"}, node_reports=nodes)
    html = page.deployment_page(report)
    assert "root cause: sim2 (node 1), fatal_log" in html and "node 1" in html
    assert html.count("<svg class='bar'") == 2
    with pytest.raises(ValueError, match="no node reports"):
        page.deployment_page({**report, "node_reports": []})


def test_a_precheck_and_a_refused_restart_are_drawn_without_a_wait() -> None:
    look = page.timeline(precheck_report())
    assert [segment.kind for segment in look.segments] == ["look"]
    refused = restart_report(wait={}, failure={"stage": "validate", "step": "Validate | a step", "result": {"failed": True, "msg": "bad budget"}})
    drawn = page.timeline(refused)
    assert [segment.label for segment in drawn.segments] == ["validate (no wait)"] and drawn.fatal_at is None
    assert "bad budget" in page.run_page([refused])


def test_the_bench_prints_the_size_and_time_of_a_run_page() -> None:
    """bench/rollout_page.py (make bench), run small so that it cannot rot."""
    bench = Path(__file__).resolve().parents[4] / "bench" / "rollout_page.py"
    proc = subprocess.run([sys.executable, str(bench), "--hosts", "4", "--repeats", "1"], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rollout page of a 4-host run (median of 1):" in proc.stdout and "within the limits" in proc.stdout
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert [row.split("|")[1].strip() for row in rows] == ["page size", "page rendered", "page rendered and written", "every rewrite of the run (1 to 4 hosts)"]


def test_the_canary_figures_stand_against_their_baseline() -> None:
    from tests.unit.plugins.module_utils.observations import STARTED, options
    from tests.unit.plugins.plugin_utils.test_runbook_report import canary_result

    waited = wait_result(ended_at=STARTED + 20.0)  # the wait_ready action notes when the wait ended
    report = restart_report(options=options(canary=True, canary_on_fail="fail"), canary=canary_result(812), wait=waited)
    html = page.run_page([report])
    assert "performance canary: <b>FAIL</b>: slower than the baseline" in html
    assert "<li>decode 812 tok/s (baseline 1,604, -49%: FAIL)</li>" in html and "<li>TTFT p90 400 ms (baseline 400 ms, +0%: ok)</li>" in html
    assert "after the wait (canary)" in html
