"""playbooks/restart_sglang.yml for real: ansible-playbook against systemd hosts running the simulator.

Every test starts from hosts whose simulator is stopped and reset; the scenario is set per test. The
simulator's cold start is shortened (SIM_SPEED, SIM_WARMUP_SECONDS) and the role's waits with it.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.figures import record
from tests.harness.fleet import Fleet
from tests.integration.conftest import QUICK, RunPlaybook, RunRunner, flat
from tests.integration.test_wait_ready import journal_time

PLAYBOOK = "playbooks/restart_sglang.yml"
FREE_PLAYBOOK = Path(__file__).parent / "playbooks" / "restart_free.yml"
UNIT = "sglang.service"
FAST = {"SIM_SPEED": "0.15", "SIM_WARMUP_SECONDS": "1", "SIM_TP": "8"}
API_KEY = "sk-inferops-test-7f3a9c2e5b1d"


def invocation(fleet: Fleet, host: str) -> str:
    return fleet.unit_property(host, "InvocationID")


def start_all(fleet: Fleet, hosts: list[str]) -> dict[str, str]:
    """Start the simulator everywhere (ok scenario) and return the InvocationIDs."""
    for host in hosts:
        fleet.set_scenario(host, **FAST)
        fleet.ssh(host, f"systemctl start {UNIT}")
    ids = {host: invocation(fleet, host) for host in hosts}
    assert all(len(i) == 32 for i in ids.values()), ids
    return ids


@pytest.mark.every_version  # the operator's and the pipeline's first run: on both whole-suite versions
def test_ok_restart_passes_and_reports(fleet: Fleet, hosts: list[str], tmp_path: Path, run_runner: RunRunner) -> None:
    """The ok scenario passes through ansible-runner (the CI path): exit 0, the summary names the
    allowlisted CUTE_DSL warning of all 8 ranks, set_stats artifacts, JSON and JUnit reports."""
    host = hosts[0]
    before = start_all(fleet, [host])[host]
    reports = tmp_path / "reports"
    runner = run_runner(PLAYBOOK, tmp_path / "runner", limit=host, extravars={**QUICK, "sglang_restart_report_dir": str(reports)})
    stdout = runner.stdout.read()
    assert runner.rc == 0, stdout[-6000:]
    assert runner.status == "successful"
    # no templating in the role that a newer ansible-core deprecates
    assert "DEPRECATION WARNING" not in stdout, stdout[-6000:]

    # the summary: a pass, the CUTE_DSL warning allowlisted on every rank, progress lines shown
    assert f"{host} {UNIT}: PASS (ready)" in stdout
    assert "[sglang-cute-dsl-package-walk] x8 on 8 ranks (TP0..TP7)" in stdout
    assert "fatal: none" in stdout

    # the new invocation runs and serves
    after = invocation(fleet, host)
    assert after != before
    assert fleet.unit_property(host, "ActiveState") == "active"
    assert fleet.health(host) == "200"

    # set_stats -> ansible-runner artifact data (what AWX shows as artifacts)
    stats = [e for e in runner.events if e.get("event") == "playbook_on_stats"]
    artifacts = stats[-1]["event_data"]["artifact_data"]["sglang_restart"][host]
    assert artifacts["verdict"] == "pass"
    assert artifacts["reason"] == "ready"
    assert artifacts["invocation_id"] == after
    assert artifacts["previous_invocation_id"] == before
    assert float(artifacts["elapsed"]) > 0

    # the JSON report: the whole evidence
    report = json.loads((reports / f"{host}.json").read_text())
    assert report["verdict"] == "pass" and report["reason"] == "ready"
    assert report["invocation_id"] == after and report["previous_invocation_id"] == before
    assert report["fatal"] == []
    cute = [e for e in report["allowlisted"] if e["rule"] == "sglang-cute-dsl-package-walk"]
    assert cute and cute[0]["count"] == 8 and len(cute[0]["ranks"]) == 8
    assert [t["phase"] for t in report["timeline"]], report["timeline"]

    # the JUnit report: one passing test case
    suites = ET.parse(reports / f"{host}.junit.xml").getroot()
    assert suites.tag == "testsuites" and suites.get("failures") == "0"
    cases = suites.findall("./testsuite/testcase")
    assert len(cases) == 1
    assert cases[0].find("failure") is None and cases[0].find("skipped") is None
    props = {p.get("name"): p.get("value") for p in suites.iter("property")}
    assert props["verdict"] == "pass" and props["invocation_id"] == after


def test_rolling_restart_stops_at_the_first_failed_host(fleet: Fleet, hosts: list[str], run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """Canary first, one host at a time: sim1 is restarted and healthy, sim2 crashes in CUDA graph
    capture and fails the run, sim3 is never touched (same InvocationID), the exit code is non-zero."""
    assert len(hosts) >= 3, "needs 3 hosts"
    first, second, third = hosts[:3]
    before = start_all(fleet, [first, second, third])
    fleet.set_scenario(second, **FAST, SIM_SCENARIO="crash", SIM_PHASE="capturing_cuda_graphs", SIM_FAILURE="cuda_oom")

    run = run_playbook(PLAYBOOK, extra_vars={**QUICK, "sglang_restart_report_dir": str(tmp_path)})
    out = run.output
    assert run.returncode != 0, run

    # the canary: restarted, active, healthy
    assert invocation(fleet, first) != before[first]
    assert fleet.unit_property(first, "ActiveState") == "active"
    assert fleet.health(first) == "200"
    assert f"{first} {UNIT}: PASS (ready)" in out

    # the failed host: restarted, failed fast with its evidence
    assert invocation(fleet, second) != before[second]
    assert f"{second} {UNIT}: FAIL (fatal_log)" in out
    assert "CUDA out of memory" in out
    failed = json.loads((tmp_path / f"{second}.json").read_text())
    assert failed["verdict"] == "fail" and failed["reason"] == "fatal_log" and failed["fatal"]
    junit = ET.parse(tmp_path / f"{second}.junit.xml").getroot()
    failure = junit.find("./testsuite/testcase/failure")
    assert failure is not None and failure.get("type") == "fatal_log"

    # the host after it: never touched
    assert invocation(fleet, third) == before[third]
    assert f"[{third}]" not in out
    assert not (tmp_path / f"{third}.json").exists()


def test_check_mode_changes_nothing(fleet: Fleet, hosts: list[str], run_playbook: RunPlaybook) -> None:
    """--check on the whole fleet: exit 0, every host says what would happen, no InvocationID changes."""
    before = start_all(fleet, hosts)
    pids = {h: fleet.unit_property(h, "MainPID") for h in hosts}
    run = run_playbook(PLAYBOOK, "--check", extra_vars=QUICK)
    out = run.output
    assert run.returncode == 0, run
    for host in hosts:
        assert f"CHECK MODE: {UNIT} on {host} was not touched." in out
        assert invocation(fleet, host) == before[host]
        assert fleet.unit_property(host, "MainPID") == pids[host]
    assert "A real run would stop it" in out


def test_preflight_says_how_long_sglang_may_drain_when_no_drain_precedes_the_stop(fleet: Fleet, hosts: list[str], run_playbook: RunPlaybook) -> None:
    """SGLang's sigterm_watchdog has no bound of its own: with no load URL (as in the rulebooks) the stop is the
    drain, and the unit's TimeoutStopSec, read by the preflight, is how long it may last."""
    host = hosts[0]
    start_all(fleet, [host])
    stop = fleet.unit_property(host, "TimeoutStopUSec")
    run = run_playbook(PLAYBOOK, "--check", limit=host, extra_vars={**QUICK, "sglang_restart_load_url": ""})
    assert run.returncode == 0, run
    out = flat(run.output)
    assert "no drain precedes the stop (no load URL)" in out and "no bound of its own" in out, run.output[-4000:]
    seconds = sum(int(value) * {"min": 60, "s": 1}[unit] for value, unit in re.findall(r"(\d+)(min|s)\b", stop))
    assert f"it may drain for {seconds} s (TimeoutStopSec)" in out, (stop, run.output[-4000:])
    # with a load URL the drain comes first: nothing to say
    drained = run_playbook(PLAYBOOK, "--check", limit=host, extra_vars=QUICK)
    assert drained.returncode == 0 and "no drain precedes the stop" not in flat(drained.output)


def test_preflight_refuses_a_unit_that_does_not_exist(fleet: Fleet, hosts: list[str], run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """A unit name that does not exist, or a rule id that does not: a clear refusal on the canary,
    nothing restarted anywhere."""
    before = start_all(fleet, hosts)
    run = run_playbook(PLAYBOOK, extra_vars={**QUICK, "sglang_restart_unit": "no-such-server.service", "sglang_restart_report_dir": str(tmp_path)})
    out = run.flat
    assert run.returncode != 0, run
    assert f"Refusing to restart no-such-server.service on {hosts[0]}: there is no such systemd unit (LoadState=not-found)" in out
    assert "Nothing was stopped or started" in out
    # no wait followed a start: none of its progress lines ("<host>: <unit> <status>, <time> elapsed")
    assert re.search(r"no-such-server\.service [^,]*, \S+ elapsed", out) is None, out
    for host in hosts:
        assert invocation(fleet, host) == before[host]
    report = json.loads((tmp_path / f"{hosts[0]}.json").read_text())
    assert report["verdict"] == "fail" and report["reason"] == "unit_not_found"
    assert not (tmp_path / f"{hosts[1]}.json").exists()

    # a typo in the user's rules is found on the controller before anything restarts
    run = run_playbook(PLAYBOOK, extra_vars={**QUICK, "sglang_restart_disabled_rules": ["no-such-rule"]})
    out = run.output
    assert run.returncode != 0, run
    assert "disabled rule id(s) no-such-rule match no rule" in out
    assert f"{hosts[0]} {UNIT}: FAIL (invalid_rules)" in out
    assert "Restart | Stop the unit" not in out
    for host in hosts:
        assert invocation(fleet, host) == before[host]


def test_api_key_is_never_printed(fleet: Fleet, hosts: list[str], run_playbook: RunPlaybook) -> None:
    """The server requires an API key; the smoke test sends it from the target and generates a token.
    At -vvv the key appears nowhere in the output. A wrong key fails the smoke test (HTTP 401)."""
    host = hosts[0]
    fleet.set_scenario(host, **FAST, SIM_API_KEY=API_KEY)
    extra = {**QUICK, "sglang_restart_smoke_test": True, "sglang_restart_api_key": API_KEY}
    run = run_playbook(PLAYBOOK, "-vvv", extra_vars=extra, limit=host)
    out = run.output
    assert run.returncode == 0, run
    assert "smoke test: HTTP 200, generated" in out
    # the key was passed on the command line (-e); ansible-playbook echoes no command line, so any
    # occurrence would be a leak from a task
    assert API_KEY not in out

    wrong = "sk-wrong-key-0000"
    run = run_playbook(PLAYBOOK, "-v", extra_vars={**extra, "sglang_restart_api_key": wrong}, limit=host)
    out = run.output
    assert run.returncode != 0, run
    assert "FAIL (smoke_failed)" in out
    assert "smoke test: HTTP 401" in out
    assert wrong not in out and API_KEY not in out


def test_playbook_runs_by_its_collection_name_with_survey_values(fleet: Fleet, hosts: list[str], run_playbook: RunPlaybook) -> None:
    """ansible-playbook inferops.runbooks.restart_sglang works from a clone (ansible.cfg + symlink),
    with every value given as text the way an AWX survey sends it."""
    host = hosts[0]
    fleet.set_scenario(host, **FAST)
    survey = {key: str(value) for key, value in QUICK.items()}
    survey |= {
        "sglang_batch_size": "2",
        "sglang_restart_strict": "false",
        "sglang_restart_smoke_test": "true",
        "sglang_restart_stall_limits": "capturing_cuda_graphs: 90",
        "sglang_restart_disabled_rules": "sglang-kernel-config-missing, common-deprecated-pynvml",
        "sglang_restart_extra_rules": "- {id: local-moe-config, pattern: 'Using default MoE config', reason: tuned configs not shipped here}",
    }
    run = run_playbook("inferops.runbooks.restart_sglang", extra_vars=survey, limit=host)
    out = run.output
    assert run.returncode == 0, run
    assert f"{host} {UNIT}: PASS (ready)" in out
    assert "smoke test: HTTP 200" in out
    # the shipped rule is off, the user's rule from the YAML text took over its lines
    assert "[local-moe-config] x8 on 8 ranks" in out
    assert "[sglang-kernel-config-missing]" not in out
    assert fleet.unit_property(host, "ActiveState") == "active"


@pytest.mark.parametrize(("phase", "failure"), [("loading_weights", "cuda_oom"), ("capturing_cuda_graphs", "nccl")])
def test_a_crash_fails_the_host_soon_after_its_fatal_line(
    fleet: Fleet, hosts: list[str], run_playbook: RunPlaybook, tmp_path: Path, phase: str, failure: str
) -> None:
    """The whole role, reports written: how long from the fatal line reaching the journal to the failed run."""
    host = hosts[0]
    start_all(fleet, [host])
    fleet.set_scenario(host, **FAST, SIM_SCENARIO="crash", SIM_PHASE=phase, SIM_FAILURE=failure)
    run = run_playbook(PLAYBOOK, extra_vars={**QUICK, "sglang_restart_report_dir": str(tmp_path)}, limit=host)
    ended = time.time()
    assert run.returncode != 0, run
    report = json.loads((tmp_path / f"{host}.json").read_text())
    assert report["reason"] == "fatal_log" and report["fatal"], report["msg"]
    printed = journal_time(fleet, host, report["invocation_id"], "Scheduler hit an exception")
    delay, decided = ended - printed, float(report["ended_at"]) - printed
    record(
        f"\nrestart role, crash in {phase} ({failure}): the wait failed {decided:.2f} s after the fatal line reached the journal, "
        f"the host {delay:.2f} s after it (reports written)"
    )
    # the wait's decision is the collection's; the role's tail after it (history, reports, record) is a
    # fixed list of tasks whose time is Ansible's per task and grows with the machine's load
    assert decided < 10, decided
    assert delay < decided + 30, delay


def test_free_strategy_with_fewer_forks_than_hosts(fleet: Fleet, hosts: list[str], run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """The role on three hosts at once under strategy: free with --forks 2: at most two waits run
    at a time and the third queues for a fork (its server has long been up when its wait starts), none
    is lost, and each host gets its own right verdict (the crash is caught even if the wait began after it)."""
    assert len(hosts) >= 3, "needs 3 hosts"
    chosen = hosts[:3]
    before = start_all(fleet, chosen)
    fleet.set_scenario(chosen[1], **FAST, SIM_SCENARIO="crash", SIM_PHASE="capturing_cuda_graphs", SIM_FAILURE="cuda_oom")

    run = run_playbook(FREE_PLAYBOOK, "--forks", "2", extra_vars={**QUICK, "sglang_restart_report_dir": str(tmp_path)}, limit=",".join(chosen))
    assert run.returncode != 0, run

    reports = {host: json.loads((tmp_path / f"{host}.json").read_text()) for host in chosen}
    assert [reports[host]["verdict"] for host in chosen] == ["pass", "fail", "pass"], {h: r["msg"] for h, r in reports.items()}
    assert reports[chosen[1]]["reason"] in ("fatal_log", "unit_failed", "restarted"), reports[chosen[1]]["msg"]
    for host in chosen:
        assert reports[host]["previous_invocation_id"] == before[host]
        assert reports[host]["invocation_id"] not in ("", before[host])

    # each wait prints progress lines from its first probe to its verdict: never more than two open at once
    waits = [line.split(":", 1)[0] for line in run.stdout.splitlines() if re.match(r"sim\d+: sglang\.service ", line)]
    assert set(waits) == set(chosen), waits
    spans = {host: (waits.index(host), len(waits) - 1 - waits[::-1].index(host)) for host in chosen}
    most = max(sum(1 for first, last in spans.values() if first <= index <= last) for index in range(len(waits)))
    assert most <= 2, spans
    record(f"\nstrategy free, --forks 2, 3 hosts: waits shown in order {[host for host, _lines in itertools.groupby(waits)]}, at most {most} at once")


def test_free_strategy_when_the_last_host_fails_first(fleet: Fleet, hosts: list[str], run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """Under the free strategy the last host of the play crashes at once while the others still
    wait: each host still gets its own report and verdict (the end-of-play fleet summary once broke
    the hosts that reached it while others had no report yet, and its failure, run once, was passed
    on to the waiting hosts)."""
    chosen = hosts[:3]
    slow = {**FAST, "SIM_SPEED": "0.5"}
    for host in chosen[:2]:
        fleet.set_scenario(host, **slow)
        fleet.ssh(host, f"systemctl start {UNIT}")
    fleet.set_scenario(chosen[2], **FAST, SIM_SCENARIO="crash", SIM_PHASE="loading_weights")
    fleet.ssh(chosen[2], f"systemctl start {UNIT}")

    run = run_playbook(FREE_PLAYBOOK, extra_vars={**QUICK, "sglang_restart_report_dir": str(tmp_path)}, limit=",".join(chosen))
    assert run.returncode != 0, run
    reports = {host: json.loads((tmp_path / f"{host}.json").read_text()) for host in chosen if (tmp_path / f"{host}.json").exists()}
    assert {host: report["verdict"] for host, report in reports.items()} == dict(zip(chosen, ["pass", "pass", "fail"])), run
    assert "ansible_failed_task" not in run.output and "HostVarsVars" not in run.output, run


VAULTED_KEY = "sk-vault-k3y-Qz8wXhm2Pf7rTbLc"


def key_pieces(key: str) -> list[str]:
    """The key, and each run of it between digits long enough to be its own (the event key masks digits)."""
    return [key, *(piece for piece in re.split(r"\d+", key) if len(piece) >= 6)]


def leaks(text: str, key: str) -> list[str]:
    return [piece for piece in key_pieces(key) if piece in text]


def test_an_api_key_the_server_prints_in_its_fatal_line_leaves_no_trace(
    fleet: Fleet, hosts: list[str], run_playbook: RunPlaybook, run_runner: RunRunner, tmp_path: Path
) -> None:
    """The key passed the recommended way (an ansible-vault file), printed by the server in its
    arguments and in the fatal line of its crash: at -vvvv through ansible-playbook and through
    ansible-runner, it appears in no output, event, artifact or report; the fatal line is reported
    with the key as [redacted]."""
    host = hosts[0]
    start_all(fleet, [host])
    fleet.set_scenario(host, **FAST, SIM_SCENARIO="crash", SIM_FAILURE="scheduler_exception", SIM_API_KEY=VAULTED_KEY, SIM_LEAK_API_KEY="1")
    env = fleet.ansible_env()
    password, secrets = tmp_path / "vault-password", tmp_path / "secrets.yml"
    password.write_text("inferops-test-vault-password\n")
    secrets.write_text(f"sglang_restart_api_key: {VAULTED_KEY}\n")
    subprocess.run(["ansible-vault", "encrypt", "--vault-password-file", str(password), str(secrets)], env=env, check=True, capture_output=True)
    assert VAULTED_KEY not in secrets.read_text()
    vault = ["--vault-password-file", str(password), "-e", f"@{secrets}"]
    extra = {**QUICK, "sglang_restart_smoke_test": True}

    reports = tmp_path / "reports"
    run = run_playbook(PLAYBOOK, "-vvvv", *vault, extra_vars={**extra, "sglang_restart_report_dir": str(reports)}, limit=host)
    assert run.returncode != 0, run
    assert f"{host} {UNIT}: FAIL (fatal_log)" in run.output
    assert leaks(run.output, VAULTED_KEY) == []
    # the server did print it: the fatal line is in the report, with the key taken out on the target
    report = json.loads((reports / f"{host}.json").read_text())
    assert "[redacted]" in json.dumps(report["fatal"]), report["fatal"]

    start_all(fleet, [host])
    fleet.set_scenario(host, **FAST, SIM_SCENARIO="crash", SIM_FAILURE="scheduler_exception", SIM_API_KEY=VAULTED_KEY, SIM_LEAK_API_KEY="1")
    runner = run_runner(
        PLAYBOOK,
        tmp_path / "runner",
        limit=host,
        cmdline=" ".join(vault),
        extravars={**extra, "sglang_restart_report_dir": str(tmp_path / "runner-reports")},
        verbosity=4,
    )
    assert runner.rc != 0 and runner.status == "failed", runner.stdout.read()[-4000:]
    assert leaks(json.dumps(list(runner.events)), VAULTED_KEY) == []
    written = [path for path in tmp_path.rglob("*") if path.is_file() and path not in (password, secrets)]
    assert any(path.name == f"{host}.json" for path in written) and any("artifacts" in path.parts for path in written)
    found = {str(path): leaks(path.read_text(errors="replace"), VAULTED_KEY) for path in written}
    assert {path: pieces for path, pieces in found.items() if pieces} == {}
