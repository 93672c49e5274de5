"""The run's page reads the reports the play's hosts kept on the controller in this run, never every
host's variables for every host: each report written keeps its own for the hosts after it, a deployment's
keeps its nodes', and the page's name is chosen once, by the first report written."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ansible.constants as C
import pytest

from ansible_collections.inferops.runbooks.plugins.action import write_report
from ansible_collections.inferops.runbooks.plugins.plugin_utils import _run_results

REPORTS = Path(__file__).resolve().parents[2] / "data" / "reports"
KIND = _run_results.report_kind("sglang_restart")


def real_report(host: str, name: str = "rolled-back-sim1") -> dict[str, Any]:
    return {**json.loads((REPORTS / f"{name}.json").read_text()), "host": host}


class CountingHostvars(dict[str, Any]):
    """hostvars that count how often a host's variables are composed."""

    def __init__(self, values: dict[str, Any]) -> None:
        super().__init__(values)
        self.reads = 0

    def __getitem__(self, host: str) -> Any:
        self.reads += 1
        return super().__getitem__(host)


@pytest.fixture(autouse=True)
def run_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setattr(C, "DEFAULT_LOCAL_TMP", str(tmp_path))
    yield tmp_path


def test_the_page_holds_the_reports_kept_so_far_in_play_order_and_keeps_its_own() -> None:
    hosts = ["gpu1", "gpu2", "gpu3", "gpu4", "gpu5"]
    _run_results.keep("gpu2", KIND, real_report("gpu2"))
    _run_results.keep("gpu1", KIND, real_report("gpu1", "rolled-back-sim2"))
    _run_results.keep("gpu4", KIND, {**real_report("gpu4"), "verdict": "skipped"})  # a check-mode run that refused nothing
    _run_results.keep("gpu5", KIND, {**real_report("gpu5"), "role": "sglang_precheck"})  # another role's
    own = real_report("gpu3")
    assert [report["host"] for report in write_report.run_reports(own, hosts)] == ["gpu1", "gpu2", "gpu3"]
    assert _run_results.read(["gpu3"], KIND)["gpu3"] == own
    # a report of a host outside the play still shows, last
    assert [report["host"] for report in write_report.run_reports(real_report("extra"), hosts)][-1] == "extra"


def test_a_deployments_report_keeps_its_nodes_reports() -> None:
    nodes = [real_report("node1"), real_report("node2", "rolled-back-sim2")]
    deployment = {**real_report("node1"), "deployment": "dsr1", "node_reports": nodes, "nodes": [{"host": "node1"}, {"host": "node2"}]}
    assert [report["host"] for report in write_report.run_reports(deployment, ["node1", "node2", "other"])] == ["node1", "node2"]
    assert set(_run_results.read(["node1", "node2"], KIND)) == {"node1", "node2"}


def test_the_name_is_chosen_once_from_every_hosts_start_and_kept() -> None:
    hosts = [f"gpu{index}" for index in range(1, 9)]
    hostvars = CountingHostvars({host: {"sglang_restart_started_at": 1796299080.25 if host == "gpu8" else None} for host in hosts})
    first = write_report.page_name("sglang_restart", [real_report("gpu1")], hosts, hostvars)
    assert first == "restart-20261203T115800Z", first  # gpu8 began first, though it has not reported
    assert hostvars.reads == len(hosts)
    for host in hosts[1:]:
        assert write_report.page_name("sglang_restart", [real_report(host)], hosts, hostvars) == first
    assert hostvars.reads == len(hosts), "the hosts' variables were composed again for a later report"


def test_forks_that_write_at_once_leave_a_page_with_every_report(tmp_path: Path) -> None:
    """Each fork keeps its report, then writes the page under the run's lock: whichever writes last
    read every report kept before it, so the page left holds them all."""
    hosts = [f"gpu{index}" for index in range(1, 13)]
    pages: list[list[str]] = []

    def publish(host: str) -> None:
        report = real_report(host)
        _run_results.keep(host, KIND, report)
        with _run_results.locked(_run_results.page_kind("sglang_restart")):
            pages.append([found["host"] for found in write_report.run_reports(report, hosts)])

    threads = [threading.Thread(target=publish, args=(host,)) for host in hosts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert pages[-1] == hosts, pages
