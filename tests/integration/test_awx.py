"""What an AWX job of the restart template goes through, with ansible-runner (what AWX runs jobs
with): the survey's defaults as extra variables, the role's own heartbeat and poll interval, and a
long cold start whose KV cache allocation stays silent for 40 s. AWX (and CI) take a job that prints
nothing for long for hung: the events must keep coming, never more than 30 s apart."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.figures import record
from tests.harness.fleet import Fleet
from tests.integration.conftest import REPO, RunRunner

UNIT = "sglang.service"
LONGEST_SILENCE = 30.0
ELAPSED = re.compile(r", (?:\d+m)?\d+s elapsed.*")
# the KV cache phase: 0.6 of it silent, a line, 0.4 silent (tests/harness/simulator/sglang_sim.py)
LONG_START = {"SIM_SPEED": "0.15", "SIM_WARMUP_SECONDS": "1", "SIM_KV_SECONDS": "70"}


def survey_answers(playbook: str) -> dict[str, Any]:
    """What AWX sends when every survey question is answered with its default (empty ones are not sent)."""
    spec = json.loads((REPO / "awx" / "surveys" / f"{playbook}.json").read_text())["spec"]
    return {question["variable"]: question["default"] for question in spec if question["default"] != ""}


def created(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["created"]).timestamp()


def test_heartbeat_keeps_runner_events_under_30s_apart(fleet: Fleet, host: str, tmp_path: Path, run_runner: RunRunner) -> None:
    fleet.set_scenario(host, **LONG_START)
    fleet.ssh(host, f"systemctl start {UNIT}")
    answers = survey_answers("restart_sglang")
    assert answers["sglang_restart_heartbeat"] == 30
    answers["sglang_restart_soak"] = 2  # the soak is not what this test is about
    runner = run_runner("playbooks/restart_sglang.yml", tmp_path, limit=host, extravars=answers, timeout=600)
    stdout = runner.stdout.read()
    assert runner.rc == 0, stdout[-6000:]
    assert f"{host} {UNIT}: PASS (ready)" in stdout

    events = sorted((e for e in runner.events if "created" in e), key=lambda e: e["counter"])
    # the wait: from its first progress line to its last
    wait = [i for i, e in enumerate(events) if str(e.get("stdout") or "").startswith(f"{host}: {UNIT} ")]
    during = events[wait[0] : wait[-1] + 1]
    stamps = [created(e) for e in during]
    gaps = [later - earlier for earlier, later in zip(stamps, stamps[1:])]
    waited = stamps[-1] - stamps[0]
    record(
        f"AWX heartbeat: {len(during)} ansible-runner events during a {waited:.0f} s wait; longest gap {max(gaps):.1f} s "
        f"(heartbeat {answers['sglang_restart_heartbeat']} s, poll interval 5 s, limit {LONGEST_SILENCE:.0f} s)"
    )
    assert waited > 2 * LONGEST_SILENCE, "the cold start was too short to need a heartbeat"
    assert max(gaps) < LONGEST_SILENCE, [round(g, 1) for g in gaps]
    # the KV cache phase is known by its first line (0.6 of it in): until then the wait shows weight
    # loading (its progress as far as it got), and only the heartbeat shows it again within the phase
    lines = [str(e["stdout"]) for e in during if str(e.get("stdout") or "").startswith(f"{host}: {UNIT} ")]
    statuses = [ELAPSED.sub("", line) for line in lines]
    silent = (f"{UNIT} loading weights", f"{UNIT} allocating kv cache")
    heartbeats = [line for line, before, status in zip(lines[1:], statuses, statuses[1:]) if any(s in before and s in status for s in silent)]
    assert heartbeats, lines
