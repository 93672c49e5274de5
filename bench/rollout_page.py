"""The rollout page's cost on the controller for a 16-host run (make bench; docs/benchmarks.md).

16 restart reports from real content: the reports a real rolled-back deploy wrote on the test fleet
(tests/unit/data/reports/: a pass, a crash rolled back), each host's evidence replaced by what the real
classifier makes of a real corpus log (tests/unit/data/corpus/logs/: a start on 8 ranks that got
ready, and crashes), one host in four a crash rolled back. Timed in the same process, median of
``--repeats``: the page of the whole run (what the write_report action renders after the last
host's report), and written to a file as the action writes it; beside them, as the baseline, the
JSON of the 16 reports (``_render.report_json``, what the action already renders for each host).
Also the cost over a whole run: the page is rendered again after each host's report, 1 host, then
2, ... then 16.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(REPO), str(REPO / "collections")]

from ansible_collections.inferops.runbooks.plugins.action.write_report import write_atomically  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import classify, load_rules  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.plugin_utils import _render, _rollout_page  # noqa: E402
from tests.unit.conftest import corpus_logs  # noqa: E402

REPORTS = REPO / "tests" / "unit" / "data" / "reports"
READY_LOG = "sglang-ready-01.log"
LIMIT_BYTES = 1_000_000
LIMIT_SECONDS = 1.0


def evidence(log_name: str) -> dict[str, Any]:
    """What the real classifier makes of a real corpus log."""
    body = next(log for log in corpus_logs() if log.name == log_name).body
    found = classify(body, rules=load_rules("sglang"))
    return {key: found[key] for key in ("fatal", "allowlisted", "unrecognized", "counts", "lines")}


def run_reports(hosts: int) -> list[dict[str, Any]]:
    """``hosts`` reports of one run: every fourth host a crash rolled back, the others a pass."""
    passed = json.loads((REPORTS / "rolled-back-sim1.json").read_text())
    crashed = json.loads((REPORTS / "rolled-back-sim2.json").read_text())
    ready = evidence(READY_LOG)
    crashes = [log.name for log in corpus_logs() if log.name.startswith("sglang-") and log.name != READY_LOG]
    reports = []
    for index in range(hosts):
        failed = index % 4 == 3
        report = copy.deepcopy(crashed if failed else passed)
        report.update(evidence(crashes[index % len(crashes)]) if failed else copy.deepcopy(ready))
        report["host"] = f"gpu-node-{index + 1:02d}"
        # a little spread, as a real fleet has
        report["timeline"] = [{**step, "duration": round(float(step["duration"]) * (1 + index % 5 / 10), 1)} for step in report["timeline"]]
        reports.append(report)
    return reports


def timed(action: Callable[[], Any], repeats: int) -> float:
    """The median wall time of ``action``, in seconds."""
    times = []
    for _repeat in range(repeats):
        began = time.perf_counter()
        action()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def measure(hosts: int, repeats: int) -> dict[str, float]:
    reports = run_reports(hosts)
    batches = _rollout_page.batches_of([str(report["host"]) for report in reports], [1, 4])
    page = _rollout_page.run_page(reports, batches)
    with tempfile.TemporaryDirectory(prefix="rollout-page-bench-") as directory:
        target = f"{directory}/page.html"

        def render_and_write() -> None:
            text = _rollout_page.run_page(reports, batches)
            write_atomically(target, text + str(time.perf_counter()))  # a new text every time: always written

        return {
            "page_bytes": float(len(page.encode())),
            "json_bytes": float(sum(len(_render.report_json(report).encode()) for report in reports)),
            "page_seconds": timed(lambda: _rollout_page.run_page(reports, batches), repeats),
            "page_written_seconds": timed(render_and_write, repeats),
            "json_seconds": timed(lambda: [_render.report_json(report) for report in reports], repeats),
            "whole_run_seconds": timed(lambda: [_rollout_page.run_page(reports[: count + 1], batches) for count in range(hosts)], max(1, repeats // 5)),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args(argv)
    if args.hosts < 1 or args.repeats < 1:
        parser.error("--hosts and --repeats must be at least 1")
    figures = measure(args.hosts, args.repeats)
    ratio = figures["page_seconds"] / figures["json_seconds"] if figures["json_seconds"] else float("nan")
    print(f"rollout page of a {args.hosts}-host run (median of {args.repeats}):")
    print(
        f"| page size | {figures['page_bytes'] / 1e3:.1f} kB (limit {LIMIT_BYTES / 1e6:g} MB; "
        f"the {args.hosts} JSON reports: {figures['json_bytes'] / 1e3:.1f} kB) |"
    )
    print(
        f"| page rendered | {figures['page_seconds'] * 1e3:.1f} ms "
        f"({ratio:.1f}x the JSON of the {args.hosts} reports, {figures['json_seconds'] * 1e3:.1f} ms) |"
    )
    print(f"| page rendered and written | {figures['page_written_seconds'] * 1e3:.1f} ms (limit {LIMIT_SECONDS:g} s) |")
    print(f"| every rewrite of the run (1 to {args.hosts} hosts) | {figures['whole_run_seconds'] * 1e3:.1f} ms |")
    within = figures["page_bytes"] < LIMIT_BYTES and figures["page_written_seconds"] < LIMIT_SECONDS
    print("within the limits" if within else "OVER THE LIMITS")
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
