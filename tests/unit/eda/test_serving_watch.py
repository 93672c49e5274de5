"""The serving_watch event source: its options, its reading of /metrics, and its main() as ansible-rulebook
runs it (on a queue), against simulator processes over real HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import json
import runpy
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.harness.test_simulator import SimProcess, free_port

SOURCE = Path(__file__).resolve().parents[3] / "extensions" / "eda" / "plugins" / "event_source" / "serving_watch.py"
WATCH: dict[str, Any] = runpy.run_path(str(SOURCE))
API_KEY = "sk-watch-test"
QUICK = {"interval": 0.3, "generation_timeout": 1, "failures": 1}

# SGLang's /metrics (the names of 0.4.x and 0.5.x), two TP ranks' label sets
SGLANG_METRICS = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="0"} 2.0
sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="1"} 1.0
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="m"} 1.234e+05
"""
# vLLM's: prometheus_client writes a _created series beside each counter
VLLM_METRICS = """\
vllm:num_requests_running{engine="0",model_name="tiny"} 1.0
vllm:generation_tokens_total{engine="0",model_name="tiny"} 57.0
vllm:generation_tokens_created{engine="0",model_name="tiny"} 1.7e+09
"""


def run_watch(args: dict[str, Any], seconds: float) -> list[dict[str, Any]]:
    """main() for a while, as ansible-rulebook runs it; the events it put on the queue."""
    queue: asyncio.Queue[Any] = asyncio.Queue()
    with contextlib.suppress(asyncio.TimeoutError):
        asyncio.run(asyncio.wait_for(WATCH["main"](queue, args), timeout=seconds))
    events = []
    while not queue.empty():
        events.append(queue.get_nowait())
    return events


@pytest.fixture
def sims() -> Iterator[list[SimProcess]]:
    started: list[SimProcess] = []
    yield started
    for sim in started:
        sim.close()


def serving(sims: list[SimProcess], **env: str) -> SimProcess:
    sim = SimProcess(SIM_SPEED="0.03", SIM_WARMUP_SECONDS="0.3", **env)
    sims.append(sim)
    assert sim.wait_status("/health", 200, timeout=30) == 200
    return sim


def server(sim: SimProcess, name: str = "gpu-1", **extra: str) -> dict[str, str]:
    return {"host": name, "url": f"http://127.0.0.1:{sim.port}", **extra}


# ---- options --------------------------------------------------------------------------------------

GOOD = {"servers": [{"host": "gpu-1", "url": "http://10.0.0.1:30000"}]}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "option servers=None is not allowed: a non-empty list of servers"),
        ({"servers": []}, "option servers=[] is not allowed"),
        ({"servers": ["gpu-1"]}, "option servers[0]='gpu-1' is not allowed: a mapping with host and url"),
        ({"servers": [{"url": "http://a:1"}]}, "option servers[0].host=None is not allowed: the server's inventory host name"),
        ({"servers": [{"host": "a,b", "url": "http://a:1"}]}, "option servers[0].host='a,b' is not allowed"),
        ({"servers": [{"host": "a", "url": "a:30000"}]}, "option servers[0].url='a:30000' is not allowed: the server's base URL"),
        ({"servers": [{"host": "a", "url": "http://a:30000/health"}]}, "servers[0].url='http://a:30000/health' is not allowed"),
        ({"servers": [{"host": "a", "url": "http://a:99999"}]}, "servers[0].url='http://a:99999' is not allowed"),
        ({"servers": [{"host": "a", "url": "http://a:1", "engine": "tgi"}]}, "option servers[0].engine='tgi' is not allowed: one of sglang, vllm"),
        ({"servers": [{"host": "a", "url": "http://a:1", "port": 1}]}, "option servers[0].port=1 is not allowed: a server knows only host, url"),
        ({"servers": [{"host": "a", "url": "http://a:1"}, {"host": "a", "url": "http://b:1"}]}, "option servers='a' is not allowed: each host once"),
        ({**GOOD, "interval": "soon"}, "option interval='soon' is not allowed: a number of seconds >= 0.1"),
        ({**GOOD, "interval": 0}, "option interval=0 is not allowed: a number of seconds >= 0.1"),
        ({**GOOD, "failures": 1.5}, "option failures=1.5 is not allowed: a whole number >= 1"),
        ({**GOOD, "failures": True}, "option failures=True is not allowed"),
        ({**GOOD, "start_grace": -1}, "option start_grace=-1 is not allowed: a number of seconds >= 0"),
        ({**GOOD, "engine": "tgi"}, "option engine='tgi' is not allowed: one of sglang, vllm"),
        ({**GOOD, "api_key": 7}, "option api_key=7 is not allowed: a string"),
        ({**GOOD, "intervall": 5}, "option intervall=5 is not allowed: the options are api_key, engine, failures"),
    ],
)
def test_bad_options_are_refused_with_name_value_and_what_is_allowed(args: dict[str, Any], message: str) -> None:
    with pytest.raises(WATCH["OptionError"]) as error:
        WATCH["check_options"](args)
    assert str(error.value).startswith("serving_watch: ")
    assert message in str(error.value)


def test_options_take_defaults_text_from_variables_and_server_overrides() -> None:
    # numbers come as text when a rulebook templates them from variables
    options = WATCH["check_options"](
        {
            "servers": [{"host": "a", "url": "http://a:30000/"}, {"host": "b", "url": "https://b:8000", "engine": "vllm", "api_key": "k2", "model": "m"}],
            "api_key": "k1",
            "interval": "10",
            "failures": "3",
            "eda_feedback_queue": object(),  # what ansible-rulebook adds for sources with feedback
        }
    )
    first, second = options.servers
    assert (first.url, first.engine, first.api_key) == ("http://a:30000", "sglang", "k1")
    assert (second.engine, second.api_key, second.model) == ("vllm", "k2", "m")
    assert (options.interval, options.failures, options.generation_timeout, options.quiet_period) == (10.0, 3, 30.0, 1800.0)


def test_metrics_are_summed_over_label_sets_and_need_both_names() -> None:
    parse = WATCH["parse_metrics"]
    assert parse(SGLANG_METRICS, "sglang") == WATCH["Counters"](running=3.0, tokens=123400.0)
    assert parse(VLLM_METRICS, "vllm") == WATCH["Counters"](running=1.0, tokens=57.0)
    assert parse(SGLANG_METRICS, "vllm") is None
    assert parse("sglang:num_running_reqs 1\n", "sglang") is None
    assert parse("<html>404</html>", "sglang") is None


# ---- main() against simulated servers --------------------------------------------------------------


def test_a_serving_server_raises_nothing_and_costs_at_most_one_generation_per_interval(sims: list[SimProcess]) -> None:
    sim = serving(sims, SIM_API_KEY=API_KEY)
    before = sim.text.count('"POST /generate ')
    events = run_watch({"servers": [server(sim, api_key=API_KEY)], **QUICK}, 3.0)
    assert events == []
    generations = sim.text.count('"POST /generate ') - before
    looks = sim.text.count('"GET /metrics ')
    assert 1 <= generations <= looks <= 3.0 / QUICK["interval"] + 1, (generations, looks)
    assert '"POST /generate HTTP/1.1" 401' not in sim.text  # the key went with the generation


def test_a_wrong_api_key_is_a_failed_generation(sims: list[SimProcess]) -> None:
    sim = serving(sims, SIM_API_KEY=API_KEY)
    (event,) = run_watch({"servers": [server(sim, api_key="wrong")], **QUICK, "quiet_period": 60}, 2.0)
    assert event["inferops"]["condition"] == "generation_failed"
    assert event["inferops"]["evidence"]["generation"].startswith("HTTP 401 after ")


def test_a_wedged_server_raises_one_event_with_its_evidence_then_is_left_alone(sims: list[SimProcess]) -> None:
    sim = serving(sims, SIM_SCENARIO="wedged")
    answered = sim.text.count('"POST /generate ')  # the warmup's
    events = run_watch({"servers": [server(sim)], **QUICK, "quiet_period": 60}, 4.0)
    assert len(events) == 1, events
    event = events[0]["inferops"]
    assert events[0]["meta"] == {"hosts": "gpu-1"}
    assert (event["host"], event["condition"], event["engine"]) == ("gpu-1", "generation_failed", "sglang")
    assert event["summary"] == f"gpu-1 (sglang, http://127.0.0.1:{sim.port}) is not serving: a one-token generation timed out"
    assert event["evidence"]["generation"].startswith("no answer within 1 s after ")
    assert event["evidence"]["requests_running"] >= 1  # the held generation
    # left alone in the quiet period: one generation in all
    assert sim.text.count('"POST /generate ') == answered  # a held request is never answered, so never logged
    assert sim.text.count('"GET /metrics ') == 2  # before and after the generation, then nothing


def hold_a_request(sim: SimProcess) -> None:
    with contextlib.suppress(OSError):  # the server goes away at the end of the test
        sim.request("POST", "/generate", {"text": "held"})


def test_requests_held_while_the_token_counter_stands_still_are_a_stall(sims: list[SimProcess]) -> None:
    sim = serving(sims, SIM_SCENARIO="wedged")
    threading.Thread(target=hold_a_request, args=(sim,), daemon=True).start()
    events = run_watch({"servers": [server(sim)], **QUICK, "failures": 100, "stall_for": 1.0}, 3.0)
    event = events[0]["inferops"]
    assert event["condition"] == "tokens_stalled", event
    assert "requests running and no token generated for " in event["summary"]
    assert event["evidence"]["seconds_since_a_token"] >= 1.0


def test_a_dead_vllm_engine_behind_a_live_api_fails_its_generation(sims: list[SimProcess]) -> None:
    sim = serving(sims, SIM_ENGINE="vllm", SIM_SCENARIO="engine_dead")
    (event,) = run_watch({"servers": [server(sim, engine="vllm")], **QUICK, "failures": 2, "quiet_period": 60}, 3.0)
    body = event["inferops"]
    assert body["condition"] == "generation_failed"
    assert body["summary"].endswith("a one-token generation failed, 2 times in a row")
    assert len(body["evidence"]["failed_generations"]) == 2
    assert "EngineDeadError" in body["evidence"]["generation"]
    assert sim.status("/health") == 200  # what a health check alone sees


def test_a_port_gone_for_the_grace_period_is_an_event(sims: list[SimProcess]) -> None:
    gone = free_port()
    events = run_watch({"servers": [{"host": "gone", "url": f"http://127.0.0.1:{gone}"}], **QUICK, "start_grace": 1.5, "quiet_period": 60}, 2.5)
    (event,) = events
    assert event["inferops"]["condition"] == "port_gone"
    assert event["inferops"]["summary"].startswith(f"gone (sglang, http://127.0.0.1:{gone}) is not serving: the port refused connections for ")
    assert "Connection refused" in event["inferops"]["evidence"]["metrics"]


def test_a_cold_start_within_the_grace_period_raises_nothing(sims: list[SimProcess]) -> None:
    starting = SimProcess(SIM_SPEED="1", SIM_TP="2")  # a 20 s cold start: the port refuses connections
    sims.append(starting)
    assert run_watch({"servers": [server(starting)], **QUICK, "start_grace": 60}, 2.0) == []
    assert '"POST /generate ' not in starting.text


def test_a_server_that_never_becomes_ready_is_an_event_after_the_grace_period(sims: list[SimProcess]) -> None:
    sim = SimProcess(SIM_SPEED="0.03", SIM_WARMUP_SECONDS="0.3", SIM_SCENARIO="health_503")
    sims.append(sim)
    sim.wait_for("Uvicorn running on")
    (event,) = run_watch({"servers": [server(sim)], **QUICK, "start_grace": 1.0, "quiet_period": 60}, 2.5)
    body = event["inferops"]
    assert body["condition"] == "never_ready", body
    assert "generation answered 503 (not ready) for " in body["summary"]
    assert body["evidence"]["generation"].startswith("HTTP 503 after ")


# ---- vLLM's sleep mode ----------------------------------------------------------------------------


def asleep(sim: SimProcess) -> None:
    assert sim.request("POST", "/sleep") == (200, b"")
    assert sim.request("GET", "/is_sleeping") == (200, b'{"is_sleeping": true}')


def test_a_sleeping_vllm_is_never_probed_with_a_generation_nor_reported(sims: list[SimProcess]) -> None:
    """Its engine is dead too: a generation would fail, and waking it would cost a reload of its weights.
    The sleep state is read first, with the key, and nothing else is asked while it sleeps."""
    sim = serving(sims, SIM_ENGINE="vllm", SIM_SCENARIO="engine_dead", SIM_SLEEP_MODE="1", SIM_API_KEY=API_KEY)
    asleep(sim)
    events = run_watch({"servers": [server(sim, engine="vllm", api_key=API_KEY, model="m")], **QUICK, "failures": 1, "start_grace": 0.5}, 2.5)
    assert events == []
    assert '"POST /v1/completions ' not in sim.text and "wake up the engine" not in sim.text
    assert sim.text.count('"GET /is_sleeping ') >= 3 and '"GET /metrics ' not in sim.text
    assert sim.request("GET", "/is_sleeping") == (200, b'{"is_sleeping": true}')


def test_a_vllm_that_wakes_up_is_watched_again(sims: list[SimProcess]) -> None:
    sim = serving(sims, SIM_ENGINE="vllm", SIM_SCENARIO="engine_dead", SIM_SLEEP_MODE="1", SIM_WAKE_SECONDS="0.1")
    asleep(sim)
    threading.Timer(1.0, sim.request, args=("POST", "/wake_up")).start()
    (event,) = run_watch({"servers": [server(sim, engine="vllm", model="m")], **QUICK, "quiet_period": 60}, 3.0)
    assert event["inferops"]["condition"] == "generation_failed" and "EngineDeadError" in event["inferops"]["evidence"]["generation"]


def test_a_server_without_the_sleep_route_is_asked_once(sims: list[SimProcess]) -> None:
    sim = serving(sims, SIM_ENGINE="vllm")  # no VLLM_SERVER_DEV_MODE: /is_sleeping answers 404
    assert run_watch({"servers": [server(sim, engine="vllm", model="m")], **QUICK}, 2.0) == []
    assert sim.text.count('"GET /is_sleeping ') == 1 and '"POST /v1/completions ' in sim.text
    sglang = serving(sims)
    assert run_watch({"servers": [server(sglang)], **QUICK}, 1.0) == []
    assert '"GET /is_sleeping ' not in sglang.text  # SGLang has no sleep mode: never asked


# ---- the host's lease -----------------------------------------------------------------------------


def lease_file(directory: Path, unit: str, heartbeat_at: float) -> Path:
    path = directory / f"{unit}.lease"
    path.write_text(json.dumps({"run_id": "20261204T180000Z-7", "user": "ops", "controller": "bastion", "heartbeat_at": heartbeat_at}))
    return path


def test_a_wedged_server_held_by_a_rollout_raises_no_event(sims: list[SimProcess], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The lease is read with the command given (here cat of a file on this machine, as ssh would print it
    from the host): a live rollout holds the host, so its wedged server raises nothing, and the log says who holds it."""
    sim = serving(sims, SIM_SCENARIO="wedged")
    lease_file(tmp_path, "sglang.service", time.time() + 3600)
    with caplog.at_level("WARNING"):
        events = run_watch({"servers": [server(sim)], **QUICK, "lease_command": ["cat", f"{tmp_path}/{{unit}}.lease"]}, 3.0)
    assert events == []
    assert "gpu-1 is held by a rollout (run 20261204T180000Z-7 from ops@bastion): no event" in caplog.text


@pytest.mark.parametrize("lease", ["stale", "absent"])
def test_a_stale_or_absent_lease_holds_nothing_back(sims: list[SimProcess], tmp_path: Path, lease: str) -> None:
    sim = serving(sims, SIM_SCENARIO="wedged")
    if lease == "stale":
        lease_file(tmp_path, "sglang.service", time.time() - 700)
    events = run_watch({"servers": [server(sim)], **QUICK, "quiet_period": 60, "lease_command": ["cat", f"{tmp_path}/{{unit}}.lease"]}, 4.0)
    assert len(events) == 1 and events[0]["inferops"]["condition"] == "generation_failed", events


def test_a_bad_lease_command_is_refused() -> None:
    with pytest.raises(WATCH["OptionError"], match="option lease_command='ssh host' is not allowed: a list of words"):
        WATCH["check_options"]({**GOOD, "lease_command": "ssh host"})
