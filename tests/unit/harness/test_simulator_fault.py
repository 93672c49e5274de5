"""The simulator's fault file (tests/harness/simulator/sglang_sim.py, with_fault): read by the simulator,
not by systemd, its KEY=VALUE lines (quoted as the fleet writes them) override the unit's environment."""

from __future__ import annotations

import shlex
from pathlib import Path

from tests.harness.simulator.sglang_sim import Config, with_fault


def test_the_fault_file_overrides_the_scenario(tmp_path: Path) -> None:
    fault = tmp_path / "fault.env"
    fault.write_text(f"SIM_SCENARIO={shlex.quote('hang')}\nSIM_PHASE=loading_weights\n# a comment\nSIM_MODEL={shlex.quote('/models/a b')}\n", encoding="utf-8")
    env = with_fault({"SIM_FAULT_FILE": str(fault), "SIM_SCENARIO": "ok", "SIM_TP": "4"})
    assert env["SIM_SCENARIO"] == "hang" and env["SIM_TP"] == "4" and env["SIM_MODEL"] == "/models/a b"
    assert Config.from_env(env).scenario == "hang"


def test_without_a_fault_file_the_environment_is_as_given(tmp_path: Path) -> None:
    given = {"SIM_FAULT_FILE": str(tmp_path / "none.env"), "SIM_SCENARIO": "ok"}
    assert with_fault(given) == given
