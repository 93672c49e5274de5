"""The perf_canary module file run by itself (its arguments in a file, as one debugs a module) against
simulators over real HTTP on 127.0.0.1: the first canary becomes the baseline, the next one passes,
a slower server fails, and check mode sends nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing as t
from pathlib import Path

from tests.unit.harness.test_simulator import SimProcess
from tests.unit.plugins.conftest import SIM_KEY

REPO = Path(__file__).resolve().parents[4]
MODULE = REPO / "plugins" / "modules" / "perf_canary.py"


def run_module(args: dict[str, t.Any], tmp: Path, check_mode: bool = False) -> dict[str, t.Any]:
    args_file = tmp / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check_mode}}))
    env = dict(os.environ, PYTHONPATH=str(REPO / "collections"))
    done = subprocess.run([sys.executable, str(MODULE), str(args_file)], cwd=tmp, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    result: dict[str, t.Any] = json.loads(done.stdout)
    return result


def canary_args(sim: SimProcess, state_dir: Path, **extra: t.Any) -> dict[str, t.Any]:
    return {
        "unit": "sglang.service",
        "url": f"http://127.0.0.1:{sim.port}",
        "api_key": SIM_KEY,
        "requests": 8,
        "concurrency": 4,
        "prompt_tokens": 32,
        "max_tokens": 24,
        "host": "sim1",
        "hardware": "1x simulated GPU",
        "state_dir": str(state_dir),
        # loose enough for the timing noise of a busy test machine; the slow server is ten times slower
        "thresholds": {"throughput": "-50%", "ttft_p90": "+200%", "itl_p90": "+200%"},
        **extra,
    }


def test_a_baseline_then_a_pass_then_a_slower_server_fails(fast_sim: SimProcess, slow_sim: SimProcess, tmp_path: Path) -> None:
    first = run_module(canary_args(fast_sim, tmp_path, run_id="run-1"), tmp_path)
    assert first["canary"]["verdict"] == "inconclusive" and first["changed"] is True, first
    assert first["canary"]["becomes_baseline"] is True
    warmup = first["canary"]["warmup"]  # one round at the canary's concurrency, short, not measured
    assert (warmup["requests"], warmup["ok_requests"], warmup["max_tokens"]) == (4, 4, 16), warmup
    assert [sample["index"] for sample in first["canary"]["samples"]] == list(range(8))
    assert first["canary"]["server"]["ttft"]["count"] == 8, first["canary"]["server"]  # the server's own figures leave it out too
    assert first["store"] == str(tmp_path / "sglang.service.canary.json") and first["problem"] is None
    assert SIM_KEY not in json.dumps(first)
    second = run_module(canary_args(fast_sim, tmp_path, engine="sglang", warmup=0), tmp_path)
    assert second["canary"]["verdict"] == "pass", second["canary"]["lines"]
    assert second["canary"]["warmup"]["requests"] == 0
    assert second["canary"]["server"]["ttft"]["count"] == 8
    slow = run_module(canary_args(slow_sim, tmp_path, engine="vllm"), tmp_path)
    assert slow["canary"]["verdict"] == "fail", slow["canary"]["lines"]
    assert slow["canary"]["lines"][0].endswith(": FAIL)") and slow["canary"]["baseline_runs"] == 2
    stored = json.loads((tmp_path / "sglang.service.canary.json").read_text())
    assert [entry["verdict"] for entry in stored["entries"]] == ["inconclusive", "pass", "fail"]
    assert [entry["baseline"] for entry in stored["entries"]] == [True, True, False]
    assert stored["entries"][0]["run_id"] == "run-1" and "samples" not in stored["entries"][0]


def test_check_mode_sends_nothing_and_writes_nothing(fast_sim: SimProcess, tmp_path: Path) -> None:
    result = run_module(canary_args(fast_sim, tmp_path), tmp_path, check_mode=True)
    assert result["canary"]["verdict"] == "skipped" and result["changed"] is False
    assert not (tmp_path / "sglang.service.canary.json").exists()


def test_a_corrupt_store_is_reported_and_set_aside(fast_sim: SimProcess, tmp_path: Path) -> None:
    (tmp_path / "sglang.service.canary.json").write_text("{oops")
    result = run_module(canary_args(fast_sim, tmp_path), tmp_path)
    assert "is ignored: not JSON" in result["problem"]
    assert result["set_aside"] == str(tmp_path / "sglang.service.canary.json.unusable")
    assert result["canary"]["verdict"] == "inconclusive" and result["canary"]["becomes_baseline"] is True


def test_refusals_name_the_problem(tmp_path: Path) -> None:
    off_loopback = run_module({"unit": "sglang.service", "url": "http://10.1.2.3:30000", "state_dir": str(tmp_path)}, tmp_path)
    assert off_loopback["failed"] is True and "loopback" in off_loopback["msg"]
    bad = run_module({"unit": "sglang.service", "thresholds": {"throughput": "<= 5%"}, "state_dir": str(tmp_path)}, tmp_path)
    assert bad["failed"] is True and "must be '>= N%'" in bad["msg"]
    assert not list(tmp_path.glob("*.canary.json"))
