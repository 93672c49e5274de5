"""The performance canary of playbooks/restart_sglang.yml, for real: systemd hosts running the
simulator, whose decode speed and time to first token a drop-in sets (SIM_TOKENS_PER_SECOND,
SIM_TTFT_SECONDS). A restart measures the first canary, which becomes the baseline; a deploy that
makes the server ten times slower passes every health gate, fails its canary, is rolled back as a
performance_regression, and the previous configuration serves again, as fast as before."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from tests.harness.fleet import Fleet
from tests.integration.conftest import QUICK, RunPlaybook, flat

PLAYBOOK = "playbooks/restart_sglang.yml"
UNIT = "sglang.service"
DROPIN_DIR = f"/etc/systemd/system/{UNIT}.d"
DROPIN = f"{DROPIN_DIR}/50-inferops-deploy.conf"
STORE = f"/var/lib/inferops/{UNIT}.canary.json"
FAST = {"SIM_SPEED": "0.15", "SIM_WARMUP_SECONDS": "1", "SIM_TP": "2"}
GOOD_DROPIN = "[Service]\nEnvironment=SIM_TOKENS_PER_SECOND=200 SIM_TTFT_SECONDS=0.2\n"
SLOW_DROPIN = "[Service]\nEnvironment=SIM_TOKENS_PER_SECOND=20 SIM_TTFT_SECONDS=0.2\n"
CANARY = {
    "sglang_restart_canary": True,
    "sglang_restart_canary_requests": 8,
    "sglang_restart_canary_concurrency": 4,
    "sglang_restart_canary_prompt_tokens": 16,
    "sglang_restart_canary_max_tokens": 32,
    # wide enough for the timing noise of a test machine shared with other test runs (a TTFT of 200 ms
    # is late by tens of ms there); the slow deploy is 90 % slower
    "sglang_restart_canary_thresholds": {"throughput": "-40%", "ttft_p90": "+100%", "itl_p90": "+200%"},
}


def report(directory: Path, host: str) -> dict[str, object]:
    data = json.loads((directory / f"{host}.json").read_text())
    assert isinstance(data, dict)
    return data


def test_a_deploy_that_slows_the_server_is_rolled_back_as_a_performance_regression(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    fleet.ssh(host, f"rm -f {STORE} {STORE}.unusable")
    fleet.set_scenario(host, **FAST)
    fleet.ssh(host, f"mkdir -p {DROPIN_DIR} && printf %s {shlex.quote(GOOD_DROPIN)} > {DROPIN} && systemctl daemon-reload && systemctl start {UNIT}")
    try:
        # a plain restart: the first canary has no baseline, is inconclusive and becomes the baseline
        first = run_playbook(PLAYBOOK, limit=host, extra_vars={**QUICK, **CANARY, "sglang_restart_report_dir": str(tmp_path / "first")})
        assert first.returncode == 0, first
        data = report(tmp_path / "first", host)
        canary = data["canary"]
        assert isinstance(canary, dict)
        assert (data["verdict"], canary["verdict"], canary["becomes_baseline"]) == ("pass", "inconclusive", True), canary
        assert canary["figures"]["errors"] == 0 and len(canary["samples"]) == 8
        assert canary["server"]["ttft"]["metric"] == "sglang:time_to_first_token_seconds"
        assert "performance canary: INCONCLUSIVE - no baseline yet" in first.flat

        # a deploy ten times slower: healthy, but rolled back for its canary
        deploy = {**QUICK, **CANARY, "sglang_restart_dropin_content": SLOW_DROPIN, "sglang_restart_report_dir": str(tmp_path / "slow")}
        slow = run_playbook(PLAYBOOK, limit=host, extra_vars=deploy)
        out = flat(slow.output)
        assert slow.returncode != 0, slow
        data = report(tmp_path / "slow", host)
        canary = data["canary"]
        assert isinstance(canary, dict)
        assert (data["verdict"], data["reason"], data["state"]) == ("fail", "performance_regression", "rolled_back"), data["msg"]
        assert canary["verdict"] == "fail" and canary["baseline_runs"] == 1
        assert canary["lines"][0].startswith("decode ") and canary["lines"][0].endswith(": FAIL)")
        assert f"{host} {UNIT}: FAIL (performance_regression): rolled back, serving the previous configuration again" in out
        assert "  " + canary["lines"][0] in slow.output
        rollback = data["rollback"]
        assert isinstance(rollback, dict) and rollback["verdict"] == "pass"
        # the previous configuration measured again: as fast as the baseline
        assert rollback["canary"]["verdict"] == "pass", rollback["canary"]
        assert "rollback canary: PASS" in slow.output
        # the previous configuration is back and serves
        assert fleet.ssh(host, f"cat {DROPIN}").stdout == GOOD_DROPIN
        assert fleet.health(host) == "200"
        # the store: the baseline, the failed canary (not a baseline), the rollback's
        stored = json.loads(fleet.ssh(host, f"cat {STORE}").stdout)
        verdicts = [(entry["verdict"], entry["baseline"]) for entry in stored["entries"]]
        assert verdicts == [("inconclusive", True), ("fail", False), ("pass", True)]
    finally:
        fleet.ssh(host, f"rm -f {STORE} {STORE}.unusable", check=False)
