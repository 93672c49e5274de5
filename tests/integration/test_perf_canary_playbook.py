"""The performance canary of playbooks/restart_sglang.yml and playbooks/precheck_sglang.yml, for
real: systemd hosts running the simulator, whose decode speed and time to first token a drop-in
sets (SIM_TOKENS_PER_SECOND, SIM_TTFT_SECONDS). A restart measures the first canary, which becomes
the baseline; a deploy that makes the server ten times slower passes every health gate, fails its
canary, is rolled back as a performance_regression, and the previous configuration serves again, as
fast as before. The precheck's canary of a server in service is judged against the same baseline
without starting one, and fails (or only warns about) a server that got slower."""

from __future__ import annotations

import json
import shlex
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.harness.fleet import Fleet
from tests.integration.conftest import QUICK, RunPlaybook, flat

PLAYBOOK = "playbooks/restart_sglang.yml"
PRECHECK = "playbooks/precheck_sglang.yml"
UNIT = "sglang.service"
DROPIN_DIR = f"/etc/systemd/system/{UNIT}.d"
DROPIN = f"{DROPIN_DIR}/50-inferops-deploy.conf"
STORE = f"/var/lib/inferops/{UNIT}.canary.json"
HEALTH_GENERATE = "python3 -c 'import urllib.request as u; u.urlopen(\"http://127.0.0.1:30000/health_generate\", timeout=5)'"
FAST = {"SIM_SPEED": "0.15", "SIM_WARMUP_SECONDS": "1", "SIM_TP": "2"}
GOOD_DROPIN = "[Service]\nEnvironment=SIM_TOKENS_PER_SECOND=200 SIM_TTFT_SECONDS=0.2\n"
SLOW_DROPIN = "[Service]\nEnvironment=SIM_TOKENS_PER_SECOND=20 SIM_TTFT_SECONDS=0.2\n"
CANARY = {
    "sglang_restart_canary": True,
    "sglang_restart_canary_requests": 8,
    "sglang_restart_canary_concurrency": 4,
    "sglang_restart_canary_prompt_tokens": 16,
    "sglang_restart_canary_max_tokens": 32,
    # wide enough for the timing noise of a test machine shared with other test runs: a rollback start's
    # canary measured beside the other lanes of `make test` read 40 % less throughput and twice the TTFT
    # p90 of its baseline (a TTFT of 200 ms); the slow deploy is 90 % slower and its TTFT the same
    "sglang_restart_canary_thresholds": {"throughput": "-60%", "ttft_p90": "+300%", "itl_p90": "+200%"},
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
        # the server's own decode figures, from the Decode batch lines it logged in the journal during the load
        journal = canary["journal"]
        assert journal["lines"] >= 1 and journal["gen_throughput_median"] > 0, journal
        assert canary["lines"][-1].startswith("server log: gen throughput ") and canary["lines"][-1] in first.flat

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


PRECHECK_CANARY = {name.replace("sglang_restart_", "sglang_precheck_"): value for name, value in CANARY.items()}


def precheck(run_playbook: RunPlaybook, host: str, directory: Path, **extra: object) -> tuple[int, dict[str, object], str]:
    run = run_playbook(PRECHECK, limit=host, extra_vars={**PRECHECK_CANARY, "sglang_precheck_report_dir": str(directory), **extra})
    data = json.loads((directory / f"{host}.precheck.json").read_text())
    assert isinstance(data, dict)
    return run.returncode, data, run.flat


def test_the_precheck_measures_the_server_in_service_against_the_baseline(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    fleet.ssh(host, f"rm -f {STORE} {STORE}.unusable")
    fleet.set_scenario(host, **FAST)
    fleet.ssh(host, f"mkdir -p {DROPIN_DIR} && printf %s {shlex.quote(GOOD_DROPIN)} > {DROPIN} && systemctl daemon-reload && systemctl start {UNIT}")
    # a server in service: its start over and generating (a precheck of a start under way fails, as it should)
    fleet.wait_for(host, HEALTH_GENERATE)
    try:
        # no baseline yet: inconclusive, and a canary of a server in service does not start one
        code, data, out = precheck(run_playbook, host, tmp_path / "first")
        canary = data["canary"]
        assert isinstance(canary, dict)
        assert (code, data["verdict"], canary["verdict"], canary["becomes_baseline"]) == (0, "pass", "inconclusive", False), canary
        assert "a canary of a server in service does not start one" in out

        # a restart's canary starts it; the precheck's then passes against it and adds to it
        restart = run_playbook(PLAYBOOK, limit=host, extra_vars={**QUICK, **CANARY})
        assert restart.returncode == 0, restart
        code, data, out = precheck(run_playbook, host, tmp_path / "pass")
        canary = data["canary"]
        assert isinstance(canary, dict)
        assert (code, data["verdict"], canary["verdict"], canary["baseline_runs"]) == (0, "pass", "pass", 1), canary["lines"]
        assert "performance canary: PASS, against the median of 1 baseline canary" in out
        assert canary["journal"]["lines"] >= 1, canary["journal"]

        # the server restarted by hand ten times slower: still healthy, but the precheck fails it
        fleet.ssh(host, f"printf %s {shlex.quote(SLOW_DROPIN)} > {DROPIN} && systemctl daemon-reload && systemctl restart {UNIT}")
        fleet.wait_for(host, HEALTH_GENERATE)
        code, data, out = precheck(run_playbook, host, tmp_path / "slow")
        canary = data["canary"]
        assert isinstance(canary, dict)
        assert (data["verdict"], data["reason"], canary["verdict"], canary["baseline_runs"]) == ("fail", "performance_regression", "fail", 2), data["msg"]
        assert code != 0
        assert f"{UNIT} is in service but slower than the host's baseline: decode " in str(data["msg"])
        failure = ET.parse(tmp_path / "slow" / f"{host}.precheck.junit.xml").getroot().find("./testsuite/testcase/failure")
        assert failure is not None and failure.get("type") == "performance_regression"
        properties = {p.get("name"): p.get("value") for p in ET.parse(tmp_path / "slow" / f"{host}.precheck.junit.xml").getroot().iter("property")}
        assert properties["canary_verdict"] == "fail"

        # or only warns
        code, data, out = precheck(run_playbook, host, tmp_path / "warn", sglang_precheck_canary_on_fail="warn")
        assert (code, data["verdict"], data["reason"]) == (0, "pass", "ready"), data["msg"]
        assert "(warning: the performance canary failed: decode " in str(data["msg"])
        assert "(warning only: sglang_precheck_canary_on_fail is warn)" in out

        stored = json.loads(fleet.ssh(host, f"cat {STORE}").stdout)
        verdicts = [(entry["verdict"], entry["baseline"]) for entry in stored["entries"]]
        assert verdicts == [("inconclusive", False), ("inconclusive", True), ("pass", True), ("fail", False), ("fail", False)]
    finally:
        fleet.ssh(host, f"rm -f {STORE} {STORE}.unusable", check=False)


def test_bad_precheck_canary_variables_are_refused_before_anything_runs(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """Bad canary variables are refused with the others, naming them, before the look."""
    bad = {
        "sglang_precheck_canary": True,
        "sglang_precheck_health_url": f"http://{host}:30000/health_generate",
        "sglang_precheck_allow_remote_health": True,
        "sglang_precheck_canary_floors": {"ttft_p90": "fast"},
        "sglang_precheck_canary_concurrency": 0,
        "sglang_precheck_report_dir": str(tmp_path),
    }
    run = run_playbook(PRECHECK, limit=host, extra_vars=bad)
    assert run.returncode != 0, run
    data = json.loads((tmp_path / f"{host}.precheck.json").read_text())
    assert data["reason"] == "invalid_options", data
    problems = " ".join(data["problems"])
    assert "sglang_precheck_canary loads the server of sglang_precheck_health_url, which must then be on loopback" in problems
    assert "sglang_precheck_canary_floors: floor of ttft_p90 must be a number of ms" in problems
    assert "sglang_precheck_canary_concurrency must be a whole number >= 1, got 0" in problems
