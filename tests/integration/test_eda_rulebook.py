"""Event-Driven Ansible for real: ansible-rulebook (tests/requirements-rulebook.txt, its own venv) runs the
collection's rulebook ``inferops.runbooks.restart_on_stall`` with the collection's event source
(``inferops.runbooks.serving_watch``) against simulator hosts, and the rule runs the collection's restart
playbook with the ansible-core under test.

Four servers, reached over HTTP from this machine as the rulebook's host reaches its servers:

* ``once`` (API key): wedges (health 200, generation held forever) after its first start only; the
  rule restarts it and it serves again;
* ``healthy`` (API key): serves throughout; never touched (the key works, or its generation would fail);
* ``again``: wedges after every start, also right after the rule's restart: it is restarted once, and its
  next event, after the event source's quiet period, falls within the rule's throttle window;
* ``dead`` (vLLM, ``vllm.service``): its engine dies behind a live API server (health 200, generation
  answered 500) after its first start only; the vLLM rule restarts it with ``restart_vllm`` and it serves again.

The figures: from the wedge to the event, from the event to a serving host (the new start's ready line),
and what the event source costs a server (requests per interval, CPU per look).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import runpy
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.figures import record
from tests.harness import rulebook
from tests.harness.fleet import Fleet
from tests.integration.conftest import QUICK, REPO
from tests.integration.test_wait_ready import journal_time

UNIT = "sglang.service"
PORT = 30000
VLLM_UNIT = "vllm.service"
VLLM_PORT = 8000
VLLM_SCENARIO_FILE = "/etc/vllm-sim/scenario.env"
SOURCE = REPO / "extensions" / "eda" / "plugins" / "event_source" / "serving_watch.py"
RULEBOOK = "inferops.runbooks.restart_on_stall"
FAST = {"SIM_SPEED": "0.15", "SIM_WARMUP_SECONDS": "1", "SIM_TP": "2", "SIM_HOST": "0.0.0.0"}
API_KEY = "sk-inferops-eda-4e1c7a93"
WEDGE_AFTER = 12  # seconds after ready: the rulebook is up by then
REWEDGE_AFTER = 40  # seconds after ready: longer than the restart's gates (smoke test included), so that it passes
INTERVAL = 2
GENERATION_TIMEOUT = 3
FAILURES = 2  # failed generations in a row that make an event (the default): a loaded machine's slow answer is not one
QUIET_PERIOD = 60  # longer than the restart here
READY = "The server is fired up and ready to roll!"
EVENT_LOG = "serving_watch: not serving: "


def url(fleet: Fleet, host: str, port: int = PORT) -> str:
    return f"http://{fleet.address(host)}:{port}"


def serves(fleet: Fleet, host: str, api_key: str = "", vllm: bool = False) -> bool:
    """Whether the server generates one token now (from this machine)."""
    if vllm:
        path, payload = f"{url(fleet, host, VLLM_PORT)}/v1/completions", {"model": "/models/DeepSeek-R1", "prompt": "Hello", "max_tokens": 1}
    else:
        path, payload = f"{url(fleet, host)}/generate", {"text": "Hello", "sampling_params": {"max_new_tokens": 1}}
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
    request = urllib.request.Request(path, data=json.dumps(payload).encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=3) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def wait_until(what: str, check: Any, timeout: float, every: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)


def invocations_since(fleet: Fleet, host: str, since: float, unit: str = UNIT) -> list[str]:
    """The unit's invocations that started after ``since`` (epoch seconds), in order."""
    out = fleet.ssh(host, f"journalctl -u {unit} -o json --no-pager --output-fields=_SYSTEMD_INVOCATION_ID --since @{int(since)}").stdout
    seen: list[str] = []
    for line in out.splitlines():
        invocation = json.loads(line).get("_SYSTEMD_INVOCATION_ID")
        if invocation and invocation not in seen:
            seen.append(invocation)
    return seen


def access_lines(fleet: Fleet, host: str, invocation: str, since: float, until: float) -> dict[str, int]:
    """How many of the event source's requests the server logged between two times: /metrics, /generate."""
    out = fleet.ssh(
        host, f"journalctl -o cat --no-pager _SYSTEMD_INVOCATION_ID={invocation} --since @{since:.3f} --until @{until:.3f} | grep -F HTTP/1.1", check=False
    ).stdout
    return {"metrics": out.count('"GET /metrics '), "generate": out.count('"POST /generate ')}


def events_in(log: str) -> list[dict[str, Any]]:
    return [json.loads(line.split(EVENT_LOG, 1)[1]) for line in log.splitlines() if EVENT_LOG in line]


def epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def write_inventory(fleet: Fleet, path: Path, keyed: set[str], vllm: str) -> None:
    """The fleet's inventory, the restart's quick timings for the simulator, the API key of the keyed hosts,
    and the vLLM host in the group restart_vllm.yml restarts."""
    lines = []
    for line in fleet.inventory.read_text(encoding="utf-8").splitlines():
        name = line.split(" ", 1)[0]
        lines.append(f"{line} sglang_restart_api_key={API_KEY}" if name in keyed and "ansible_host=" in line else line)
    lines += [f"{key}={value}" for key, value in QUICK.items()]
    lines += ["", "[vllm]", vllm]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@contextlib.contextmanager
def running_rulebook(fleet: Fleet, tmp_path: Path, servers: list[dict[str, str]], inventory: Path) -> Iterator[Path]:
    """ansible-rulebook running the collection's rulebook; yields its log file. Stopped (with every
    process it started: they all carry the run's directory) at the end."""
    problem = rulebook.java_missing()
    if problem:
        pytest.fail(problem)
    executable = rulebook.ensure()
    variables = {
        "inferops_servers": servers,
        "inferops_watch_interval": INTERVAL,
        "inferops_watch_generation_timeout": GENERATION_TIMEOUT,
        "inferops_watch_failures": FAILURES,
        "inferops_watch_quiet_period": QUIET_PERIOD,
    }
    (tmp_path / "vars.json").write_text(json.dumps(variables), encoding="utf-8")
    work = tmp_path / "rulebook"
    work.mkdir()
    env = fleet.ansible_env()
    env.update({"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "TMPDIR": str(work), "ANSIBLE_FORCE_COLOR": "0"})
    log = tmp_path / "rulebook.log"
    cmd = [str(executable), "-r", RULEBOOK, "-i", str(inventory), "--vars", str(tmp_path / "vars.json"), "-v"]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        yield log
    finally:
        stop(proc, str(work))


def stop(proc: subprocess.Popen[bytes], marker: str) -> None:
    """SIGINT to ansible-rulebook's process group, then SIGKILL; then any playbook it started (by the
    run's directory in its command line: ansible-runner gives it a session of its own)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if marker.encode() in (entry / "cmdline").read_bytes():
                    os.kill(int(entry.name), signal.SIGKILL)


def test_rulebook_restarts_the_host_that_stopped_serving_once(fleet: Fleet, hosts: list[str], tmp_path: Path) -> None:
    assert len(hosts) >= 4, f"the test needs 4 hosts (INFEROPS_FLEET_HOSTS), the fleet has {len(hosts)}"
    once, healthy, again, dead = hosts[:4]
    try:
        rulebook_restarts(fleet, once, healthy, again, dead, tmp_path)
    finally:
        fleet.ssh(dead, f"systemctl stop {VLLM_UNIT}; systemctl reset-failed {VLLM_UNIT}; rm -f {VLLM_SCENARIO_FILE}", check=False)


def rulebook_restarts(fleet: Fleet, once: str, healthy: str, again: str, dead: str, tmp_path: Path) -> None:
    started = time.time()
    fleet.set_scenario(once, **FAST, SIM_API_KEY=API_KEY)
    fleet.set_fault(once, SIM_SCENARIO="wedged", SIM_WEDGE_AFTER=WEDGE_AFTER)  # read at start: this start only
    fleet.set_scenario(healthy, **FAST, SIM_API_KEY=API_KEY)
    fleet.set_scenario(again, **FAST, SIM_SCENARIO="wedged", SIM_WEDGE_AFTER=REWEDGE_AFTER)
    fleet.set_fault(dead, SIM_SCENARIO="engine_dead", SIM_WEDGE_AFTER=WEDGE_AFTER)
    vllm_scenario = "".join(f"{key}={value}\\n" for key, value in FAST.items())
    fleet.ssh(dead, f"mkdir -p /etc/vllm-sim && printf '{vllm_scenario}' > {VLLM_SCENARIO_FILE}")
    for host in (once, healthy, again):
        fleet.ssh(host, f"systemctl start {UNIT}")
    fleet.ssh(dead, f"systemctl start {VLLM_UNIT}")

    def all_serve() -> bool:
        return serves(fleet, once, API_KEY) and serves(fleet, healthy, API_KEY) and serves(fleet, again) and serves(fleet, dead, vllm=True)

    wait_until("the four servers serve", all_serve, 90)
    fleet.set_fault(once)
    fleet.set_fault(dead)
    first = {host: fleet.unit_property(host, "InvocationID") for host in (once, healthy, again)}
    first[dead] = fleet.unit_property(dead, "InvocationID", unit=VLLM_UNIT)
    wedged_at = journal_time(fleet, once, first[once], READY) + WEDGE_AFTER

    servers = [
        {"host": once, "url": url(fleet, once), "api_key": API_KEY},
        {"host": healthy, "url": url(fleet, healthy), "api_key": API_KEY},
        {"host": again, "url": url(fleet, again)},
        {"host": dead, "url": url(fleet, dead, VLLM_PORT), "engine": "vllm"},
    ]
    inventory = tmp_path / "inventory.ini"
    write_inventory(fleet, inventory, keyed={once, healthy}, vllm=dead)
    with running_rulebook(fleet, tmp_path, servers, inventory) as log:
        watched_from = time.time()

        def done() -> bool:
            text = log.read_text(encoding="utf-8", errors="replace")
            assert "Source error" not in text, text[-6000:]
            again_events = [e for e in events_in(text) if e["host"] == again]
            restarted = fleet.unit_property(once, "InvocationID") != first[once] and fleet.unit_property(dead, "InvocationID", unit=VLLM_UNIT) != first[dead]
            return len(again_events) >= 2 and restarted and serves(fleet, once, API_KEY) and serves(fleet, dead, vllm=True)

        wait_until("a second event for the host that wedges again, and the first host serving again", done, 240, every=1)
        watched_until = time.time()
    output = log.read_text(encoding="utf-8", errors="replace")
    events = events_in(output)
    by_host = {host: [e for e in events if e["host"] == host] for host in (once, healthy, again, dead)}

    # the wedged host: one event (its generation timed out, with the evidence), one restart that passed, serving
    assert len(by_host[once]) == 1, events
    event = by_host[once][0]
    assert event["condition"] == "generation_failed", event
    assert "no answer within 3 s" in event["evidence"]["generation"], event
    assert len(event["evidence"]["failed_generations"]) == FAILURES, event
    assert event["evidence"]["requests_running"] >= 1, event
    assert event["url"] == url(fleet, once)
    assert output.count(f"{once} {UNIT}: PASS (ready)") == 1, output[-6000:]
    restarted = invocations_since(fleet, once, started)
    assert len(restarted) == 2 and restarted[0] == first[once], restarted
    assert serves(fleet, once, API_KEY)

    # the healthy host (key-protected) beside it: no event, not touched
    assert by_host[healthy] == [], events
    assert invocations_since(fleet, healthy, started) == [first[healthy]]
    assert f"{healthy} {UNIT}:" not in output

    # the host that wedges again right after its restart: two events, one restart within the throttle window
    assert len(by_host[again]) >= 2, events
    assert output.count(f"{again} {UNIT}: PASS (ready)") == 1, output[-6000:]
    assert len(invocations_since(fleet, again, started)) == 2

    # the vLLM whose engine died behind a live API: its generation answered 500; restarted by restart_vllm, serving
    assert len(by_host[dead]) == 1, events
    assert by_host[dead][0]["condition"] == "generation_failed" and by_host[dead][0]["engine"] == "vllm", by_host[dead]
    assert "HTTP 500" in by_host[dead][0]["evidence"]["generation"] and "EngineDeadError" in by_host[dead][0]["evidence"]["generation"]
    assert output.count(f"{dead} {VLLM_UNIT}: PASS (ready)") == 1, output[-6000:]
    assert len(invocations_since(fleet, dead, started, VLLM_UNIT)) == 2
    assert serves(fleet, dead, vllm=True)

    # the figures
    to_event = epoch(event["observed_at"]) - wedged_at
    new_ready = journal_time(fleet, once, restarted[1], READY)
    to_serving = new_ready - epoch(event["observed_at"])
    seen = access_lines(fleet, healthy, first[healthy], watched_from, watched_until)
    intervals = (watched_until - watched_from) / INTERVAL
    record(
        f"EDA rulebook ({INTERVAL} s interval, {GENERATION_TIMEOUT} s generation timeout, {FAILURES} failures): wedge -> event {to_event:.1f} s, "
        f"event -> the restarted server's ready line {to_serving:.1f} s (the simulator's cold start, about 4 s, and the playbook's start); "
        f"a serving server got {seen['metrics'] / intervals:.2f} /metrics reads and {seen['generate'] / intervals:.2f} one-token generations "
        f"per interval over {watched_until - watched_from:.0f} s"
    )
    assert to_event > 0, "an event before the wedge"
    assert seen["generate"] <= intervals + 1, seen


def test_event_source_cost_per_server(fleet: Fleet, hosts: list[str]) -> None:
    """The event source alone (as ansible-rulebook runs it: its main() on a queue) on one serving server for
    a while: the CPU it spends per look, and the requests the server sees."""
    host = hosts[0]
    fleet.set_scenario(host, **FAST)
    fleet.ssh(host, f"systemctl start {UNIT}")
    wait_until("the server serves", lambda: serves(fleet, host), 60)
    invocation = fleet.unit_property(host, "InvocationID")
    main = runpy.run_path(str(SOURCE))["main"]
    queue: asyncio.Queue[Any] = asyncio.Queue()
    interval, seconds = 0.5, 10.0
    args = {"servers": [{"host": host, "url": url(fleet, host)}], "interval": interval}
    since, cpu = time.time(), time.process_time()
    with contextlib.suppress(asyncio.TimeoutError):
        asyncio.run(asyncio.wait_for(main(queue, args), timeout=seconds))
    cpu, until = time.process_time() - cpu, time.time()
    time.sleep(1)  # the journal gets the last access lines
    seen = access_lines(fleet, host, invocation, since, until)
    assert queue.empty(), "a serving server raised an event"
    assert seen["metrics"] >= seconds / interval - 2, seen
    assert seen["generate"] <= seen["metrics"], seen
    record(
        f"serving_watch cost per server: {1000 * cpu / seen['metrics']:.2f} ms CPU per look ({seen['metrics']} looks in {until - since:.0f} s: "
        f"{seen['metrics']} /metrics reads, {seen['generate']} one-token generations; none while tokens are being generated)"
    )


def test_a_bad_option_stops_the_rulebook_with_what_is_wrong(tmp_path: Path) -> None:
    """What a user sees when a server's URL is not one: ansible-rulebook stops at once, the option named."""
    problem = rulebook.java_missing()
    if problem:
        pytest.fail(problem)
    variables = {"inferops_servers": [{"host": "gpu-node-01", "url": "http://192.0.2.11:30000"}, {"host": "gpu-node-02", "url": "192.0.2.12:8000"}]}
    (tmp_path / "vars.json").write_text(json.dumps(variables), encoding="utf-8")
    (tmp_path / "inventory.ini").write_text("gpu-node-01\ngpu-node-02\n", encoding="utf-8")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    cmd = [str(rulebook.ensure()), "-r", RULEBOOK, "-i", str(tmp_path / "inventory.ini"), "--vars", str(tmp_path / "vars.json")]
    run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 1, run.stdout + run.stderr
    wanted = "serving_watch: option servers[1].url='192.0.2.12:8000' is not allowed: the server's base URL, http(s)://address:port (no path)"
    assert wanted in run.stdout + run.stderr, run.stdout + run.stderr
