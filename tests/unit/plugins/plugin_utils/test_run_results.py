"""What the hosts keep on the controller for the others to read (the starts the report step compares,
the verdicts the fleet gate counts): one file per host and kind, read back for the hosts asked, an
earlier play's replaced when the host keeps it again."""

from __future__ import annotations

from pathlib import Path

import ansible.constants as C
import pytest

from ansible_collections.inferops.runbooks.plugins.action import fleet_gate
from ansible_collections.inferops.runbooks.plugins.lookup.run_starts import LookupModule
from ansible_collections.inferops.runbooks.plugins.plugin_utils import _run_results


def test_the_starts_kept_are_read_for_the_hosts_asked_only(tmp_path: Path) -> None:
    base = str(tmp_path)
    _run_results.keep("gpu1", _run_results.START, {"gpu1": {"config": "c1", "total": 100.0}}, base)
    _run_results.keep("gpu2", _run_results.START, {"gpu2": {"config": "c1", "total": 300.0}}, base)
    _run_results.keep("gpu3", _run_results.START, {}, base)  # its start failed: nothing to compare with
    assert _run_results.starts(["gpu1", "gpu2", "gpu3", "never-settled"], base) == {
        "gpu1": {"config": "c1", "total": 100.0},
        "gpu2": {"config": "c1", "total": 300.0},
    }
    assert _run_results.starts(["gpu2"], base) == {"gpu2": {"config": "c1", "total": 300.0}}
    # the host settles again in a later play of the run, and fails there
    _run_results.keep("gpu1", _run_results.START, {}, base)
    assert _run_results.starts(["gpu1", "gpu2"], base) == {"gpu2": {"config": "c1", "total": 300.0}}


def test_a_host_name_never_escapes_the_directory(tmp_path: Path) -> None:
    base = tmp_path / "run"
    _run_results.keep("../../etc/x", _run_results.START, {"../../etc/x": {"config": "c", "total": 1.0}}, str(base))
    assert [path.parent for path in tmp_path.rglob("*.json")] == [base / "inferops-results" / "start"]
    assert _run_results.starts(["../../etc/x"], str(base)) == {"../../etc/x": {"config": "c", "total": 1.0}}


def test_the_lookup_reads_the_run_s_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(C, "DEFAULT_LOCAL_TMP", str(tmp_path))
    _run_results.keep("gpu1", _run_results.START, {"gpu1": {"config": "c1", "total": 90.0}}, None)
    assert LookupModule().run([["gpu1", "gpu2"]], {}) == [{"gpu1": {"config": "c1", "total": 90.0}}]


def test_the_fleet_gate_reads_the_verdicts_and_bakes_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(C, "DEFAULT_LOCAL_TMP", str(tmp_path))
    _run_results.keep("a0", _run_results.VERDICT, {"verdict": "pass", "reason": "ready"})
    _run_results.keep("a1", _run_results.VERDICT, {"verdict": "fail", "reason": "fatal_log"})
    _run_results.keep("b0", _run_results.VERDICT, {"verdict": "pass", "reason": "ready"})
    _run_results.keep("b0", _run_results.BAKE, {"verdict": "fail", "msg": "the unit restarted"})
    _run_results.keep("c0", _run_results.VERDICT, {"verdict": "pass", "reason": "ready"})
    found = fleet_gate.failed_deployments({"dsr1": ["a0", "a1"], "b0": ["b0"], "c0": ["c0"], "never-ran": ["d0"]})
    assert found == {"dsr1": "fatal_log", "b0": "bake_failed: the unit restarted"}
