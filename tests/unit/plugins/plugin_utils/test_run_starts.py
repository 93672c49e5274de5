"""The good starts kept on the controller for the report step's compare: one file per host, read back
for the hosts asked, an earlier play's replaced when the host settles again."""

from __future__ import annotations

from pathlib import Path

import ansible.constants as C
import pytest

from ansible_collections.inferops.runbooks.plugins.lookup.run_starts import LookupModule
from ansible_collections.inferops.runbooks.plugins.plugin_utils import _run_starts


def test_the_starts_kept_are_read_for_the_hosts_asked_only(tmp_path: Path) -> None:
    base = str(tmp_path)
    _run_starts.keep("gpu1", {"gpu1": {"config": "c1", "total": 100.0}}, base)
    _run_starts.keep("gpu2", {"gpu2": {"config": "c1", "total": 300.0}}, base)
    _run_starts.keep("gpu3", {}, base)  # its start failed: nothing to compare with
    assert _run_starts.read(["gpu1", "gpu2", "gpu3", "never-settled"], base) == {
        "gpu1": {"config": "c1", "total": 100.0},
        "gpu2": {"config": "c1", "total": 300.0},
    }
    assert _run_starts.read(["gpu2"], base) == {"gpu2": {"config": "c1", "total": 300.0}}
    # the host settles again in a later play of the run, and fails there
    _run_starts.keep("gpu1", {}, base)
    assert _run_starts.read(["gpu1", "gpu2"], base) == {"gpu2": {"config": "c1", "total": 300.0}}


def test_a_host_name_never_escapes_the_directory(tmp_path: Path) -> None:
    base = tmp_path / "run"
    _run_starts.keep("../../etc/x", {"../../etc/x": {"config": "c", "total": 1.0}}, str(base))
    assert [path.parent for path in tmp_path.rglob("*.json")] == [base / "inferops-starts"]
    assert _run_starts.read(["../../etc/x"], str(base)) == {"../../etc/x": {"config": "c", "total": 1.0}}


def test_the_lookup_reads_the_run_s_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(C, "DEFAULT_LOCAL_TMP", str(tmp_path))
    _run_starts.keep("gpu1", {"gpu1": {"config": "c1", "total": 90.0}}, None)
    assert LookupModule().run([["gpu1", "gpu2"]], {}) == [{"gpu1": {"config": "c1", "total": 90.0}}]
