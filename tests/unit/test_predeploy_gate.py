"""scripts/predeploy_gate.py refuses bad input before it runs anything (the runs are tested in
tests/integration/test_predeploy_gate.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.ansible  # exercises ansible-core: runs on every version (tests/harness/lanes.py)

REPO = Path(__file__).resolve().parents[2]
GATE = REPO / "scripts" / "predeploy_gate.py"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "hosts[?verdict =="], "the policy 'hosts[?verdict ==' is not a JMESPath expression"),
        (["--playbook", "restart_sglangg"], "--playbook 'restart_sglangg': no such playbook (shipped: precheck_sglang, precheck_vllm, restart_sglang"),
        (["-e", "budget"], "-e 'budget': expected KEY=VALUE or @FILE"),
    ],
)
def test_bad_input_is_refused_before_anything_runs(args: list[str], message: str, tmp_path: Path) -> None:
    cmd = [sys.executable, str(GATE), "-i", str(REPO / "inventory" / "example.yml"), "--summary", str(tmp_path / "s.json"), *args]
    run = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 2
    assert message in run.stderr
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "s.json").exists()
