"""The start_history module run as Ansible runs it (its file, its arguments as JSON), against stand-ins
for systemctl and journalctl that print a unit's configuration and a real start's journal records
(tests/unit/data/corpus): recorded once per invocation, bounded, the limits learned, a corrupt history
ignored."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.unit.conftest import corpus_logs

pytestmark = pytest.mark.ansible  # exercises ansible-core: runs on every version (tests/harness/lanes.py)

REPO = Path(__file__).resolve().parents[4]
MODULE = REPO / "plugins" / "modules" / "start_history.py"


def fake_tools(bin_dir: Path, etc: Path, journal: list[dict[str, Any]]) -> None:
    dropin = etc / "50-inferops-deploy.conf"
    show = (
        "ExecStart={ path=/opt/sglang/bin/python ; argv[]=/opt/sglang/bin/python -m sglang.launch_server --tp 4 ; "
        "ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }\n"
        f"FragmentPath={etc / 'sglang.service'}\nDropInPaths={dropin}\nEnvironmentFiles=\nEnvironment=\n"
    )
    (etc / "show.txt").write_text(show, encoding="utf-8")
    (etc / "journal.json").write_text("".join(json.dumps(record) + "\n" for record in journal), encoding="utf-8")
    for name, text in (("systemctl", f"#!/bin/sh\ncat {etc / 'show.txt'}\n"), ("journalctl", f"#!/bin/sh\ncat {etc / 'journal.json'}\n")):
        path = bin_dir / name
        path.write_text(text, encoding="utf-8")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)


def run(tmp_path: Path, **args: Any) -> dict[str, Any]:
    arguments = tmp_path / "args.json"
    arguments.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"state_dir": str(tmp_path / "state"), **args}}), encoding="utf-8")
    env = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join([str(REPO / "collections"), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run([sys.executable, str(MODULE), str(arguments)], capture_output=True, text=True, env=env, check=False)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.fixture
def host(tmp_path: Path) -> Path:
    found = next(log for log in corpus_logs() if log.name == "sglang-ready-01.log")
    # journal records 10 ms apart: their journal time is what the history reads, not the text's
    records = [
        {"MESSAGE": line, "__REALTIME_TIMESTAMP": str(1_741_436_944_000_000 + number * 10_000), "_PID": "7"}
        for number, line in enumerate(found.body.splitlines())
    ]
    (tmp_path / "bin").mkdir()
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "50-inferops-deploy.conf").write_text("[Service]\nEnvironment=A=1\n", encoding="utf-8")
    fake_tools(tmp_path / "bin", tmp_path / "etc", records)
    return tmp_path


def test_a_start_is_recorded_once_and_limits_are_learned_after_three(host: Path) -> None:
    first = run(host)
    assert first["added"] is False and first["starts"] == 0 and first["problem"] is None
    assert {limit["source"] for limit in first["stall_limits"].values()} == {"default"}
    for number in range(3):
        result = run(host, invocation_id=f"{number:032x}", outcome="pass", reason="ready", waited=30.5, size=2, stall_limit=900)
        assert result["added"] is True and result["changed"] is True
    again = run(host, invocation_id=f"{2:032x}", outcome="pass", size=2)
    assert again["added"] is False and again["starts"] == 2
    history = json.loads((host / "state" / "sglang.service.history.json").read_text(encoding="utf-8"))
    assert [start["invocation_id"] for start in history["starts"]] == [f"{1:032x}", f"{2:032x}"]
    assert history["starts"][0]["config"] == again["config"]
    # two good starts kept: with min_good 2, learned; the explicit limit wins
    learned = run(host, min_good=2, stall_limits={"warming_up": 600})
    assert learned["stall_limits"]["loading_weights"]["source"] == "learned"
    assert learned["learned_stall_limits"]["warming_up"] == 600
    assert len(learned["good_starts"]) == 2


def test_a_changed_drop_in_starts_a_new_baseline(host: Path) -> None:
    run(host, invocation_id="a" * 32, outcome="pass")
    before = run(host)
    (host / "etc" / "50-inferops-deploy.conf").write_text("[Service]\nEnvironment=A=2\n", encoding="utf-8")
    after = run(host)
    assert before["config"] != after["config"]
    assert len(before["good_starts"]) == 1 and after["good_starts"] == []


def test_a_corrupt_history_is_reported_and_replaced(host: Path) -> None:
    (host / "state").mkdir()
    (host / "state" / "sglang.service.history.json").write_text("{broken", encoding="utf-8")
    result = run(host, invocation_id="b" * 32, outcome="fail", reason="fatal_log")
    assert "failed" not in result or not result["failed"]
    assert "is ignored: not JSON" in result["problem"]
    assert result["added"] is True and result["starts"] == 1


def test_check_mode_writes_nothing(host: Path) -> None:
    result = run(host, invocation_id="c" * 32, outcome="pass", _ansible_check_mode=True)
    assert result["added"] is False and not (host / "state").exists()
