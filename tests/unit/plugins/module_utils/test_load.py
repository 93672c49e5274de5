"""The drain's read of a server's load (module_utils/_load), over real HTTP on 127.0.0.1: a server of
the test's own (http.server in a thread) that guards its paths with an API key as SGLang does, the
simulator itself, and the server_load module file run by itself."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
import typing as t
from collections.abc import Iterator
from pathlib import Path

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils import _load
from tests.unit.harness.test_simulator import SimProcess, free_port
from tests.unit.plugins.module_utils.test_deploy import GET_LOAD, METRICS, VLLM_METRICS

KEY = "sk-drain-test-4f1b"
REPO = Path(__file__).resolve().parents[4]
MODULE = REPO / "plugins" / "modules" / "server_load.py"

# SGLang 0.5.23's /v1/loads (entrypoints/v1_loads.py: no aggregate; every core figure of each rank)
V1_LOADS = {
    "timestamp": "2026-12-03T12:00:00+00:00",
    "version": "0.5.23",
    "accelerator": "NVIDIA H100 80GB HBM3",
    "num_accelerators": 8,
    "loads": [
        {"timestamp": 1.0, "dp_rank": 0, "num_running_reqs": 2, "num_waiting_reqs": 1, "num_used_tokens": 900, "num_total_tokens": 415290},
        {"timestamp": 1.0, "dp_rank": 1, "num_running_reqs": 1, "num_waiting_reqs": 0, "num_used_tokens": 300, "num_total_tokens": 415290},
    ],
}


class Route(t.NamedTuple):
    status: int
    body: bytes
    keyed: bool = True  # guarded by the API key, as SGLang guards every path but /health* and /metrics


class LoadServer:
    """A server whose answers the test sets (a route may answer differently at each read, the last answer
    repeating); it records every request's path and Authorization header."""

    def __init__(self, routes: dict[str, list[Route]], api_key: str | None = KEY, delay: float = 0.0) -> None:
        self.routes, self.api_key, self.delay = routes, api_key, delay
        self.seen: list[tuple[str, str | None]] = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.seen.append((self.path, self.headers.get("Authorization")))
                time.sleep(owner.delay)
                answers = owner.routes.get(self.path)
                route = (answers.pop(0) if len(answers) > 1 else answers[0]) if answers else Route(404, b'{"detail":"Not Found"}', keyed=False)
                if route.keyed and owner.api_key and self.headers.get("Authorization") != f"Bearer {owner.api_key}":
                    route = Route(401, b'{"error":"Unauthorized"}')
                self.send_response(route.status)
                self.send_header("Content-Length", str(len(route.body)))
                self.end_headers()
                self.wfile.write(route.body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str = "/v1/loads") -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def serve() -> Iterator[t.Callable[..., LoadServer]]:
    servers: list[LoadServer] = []

    def start(routes: dict[str, list[Route]], **options: t.Any) -> LoadServer:
        servers.append(LoadServer(routes, **options))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def as_json(value: object) -> bytes:
    return json.dumps(value).encode()


def wait(url: str, engine: str = "sglang", api_key: str | None = KEY, timeout: float = 5.0, interval: float = 0.1, **options: t.Any) -> _load.DrainResult:
    return _load.wait_until_idle(url, engine, api_key, timeout, interval, _load.http_fetch(), **options)


# -- what the engines' answers mean -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "body", "expected"),
    [
        ("/v1/loads", as_json(V1_LOADS), 4),
        ("/v1/loads", as_json({"version": "0.5.20", "loads": [{"dp_rank": 0, "num_running_reqs": 4}], "aggregate": {"total_reqs": 6}}), 6),
        ("/v1/loads", as_json({"version": "0.5.23", "loads": []}), None),
        ("/v1/loads", as_json({"loads": [{"dp_rank": 0, "num_running_reqs": 1}]}), None),  # no waiting figure: not a count
        ("/v1/loads", b"<html>gateway</html>", None),
        ("/get_load", as_json(GET_LOAD), 5),
        ("/get_load", as_json([{"dp_rank": 0}]), None),
        ("/metrics", METRICS.encode(), 3),
        ("/metrics", b"# HELP sglang:num_running_reqs\nsglang:prompt_tokens_total 9.0\n", None),  # metrics without the gauges
    ],
)
def test_sglang_answers_are_read_as_its_source_writes_them(endpoint: str, body: bytes, expected: int | None) -> None:
    known = {target.path: target for target in _load.endpoints("sglang")}
    assert known[endpoint].running(body) == expected


def test_vllm_metrics_count_running_and_waiting_once() -> None:
    (metrics,) = _load.endpoints("vllm")
    assert (metrics.path, metrics.keyed, metrics.running(VLLM_METRICS.encode())) == ("/metrics", False, 3)


def test_the_endpoints_are_asked_in_the_engine_order_the_load_urls_own_path_first() -> None:
    paths = [url for url, _endpoint in _load.plan("http://127.0.0.1:30000/v1/loads", "sglang")]
    assert paths == ["http://127.0.0.1:30000/v1/loads", "http://127.0.0.1:30000/get_load", "http://127.0.0.1:30000/metrics"]
    paths = [url for url, _endpoint in _load.plan("http://127.0.0.1:30000/metrics", "sglang")]
    assert paths == ["http://127.0.0.1:30000/metrics", "http://127.0.0.1:30000/v1/loads", "http://127.0.0.1:30000/get_load"]
    assert [url for url, _endpoint in _load.plan("http://127.0.0.1:8000/metrics", "vllm")] == ["http://127.0.0.1:8000/metrics"]
    # a path the engine does not publish its load at is asked alone, as given
    assert [url for url, _endpoint in _load.plan("http://127.0.0.1:9000/custom/load?x=1", "sglang")] == ["http://127.0.0.1:9000/custom/load?x=1"]


@pytest.mark.parametrize(
    ("url", "engine", "problem"),
    [
        ("ftp://127.0.0.1/v1/loads", "sglang", "must be an http:// or https:// URL with a host"),
        ("http:///v1/loads", "sglang", "must be an http:// or https:// URL with a host"),
        ("http://127.0.0.1:30000/v1/loads", "trtllm", "no load endpoints are known for engine 'trtllm'"),
    ],
)
def test_a_load_url_or_engine_that_cannot_be_read_is_refused(url: str, engine: str, problem: str) -> None:
    with pytest.raises(_load.LoadError, match=problem):
        wait(url, engine)
    with pytest.raises(_load.LoadError, match="unknown_load must be one of wait, proceed, got 'maybe'"):
        wait("http://127.0.0.1:30000/v1/loads", unknown_load="maybe")


# -- the wait, over real HTTP -----------------------------------------------------------------------


def test_a_keyed_server_is_read_with_its_key_until_it_runs_nothing(serve: t.Callable[..., LoadServer]) -> None:
    busy, idle = dict(V1_LOADS), {**V1_LOADS, "loads": [{"dp_rank": 0, "num_running_reqs": 0, "num_waiting_reqs": 0}]}
    server = serve({"/v1/loads": [Route(200, as_json(busy)), Route(200, as_json(busy)), Route(200, as_json(idle))]})
    drain = wait(server.url())
    assert (drain["running_at_start"], drain["running_at_stop"], drain["reads"], drain["timed_out"]) == (4, 0, 3, False), drain
    assert (drain["url"], drain["load_status"], drain["known"]) == (server.url(), 200, True)
    assert server.seen == [("/v1/loads", f"Bearer {KEY}")] * 3
    assert drain["msg"].startswith(f"drain: 4 request(s) running as it began, 0 request(s) running at the stop (read at {server.url()}), after ")


def test_without_the_key_a_401_is_no_load_and_the_keyless_metrics_are_read(serve: t.Callable[..., LoadServer]) -> None:
    metrics = Route(200, METRICS.encode(), keyed=False)
    routes = {"/v1/loads": [Route(200, as_json(V1_LOADS))], "/get_load": [Route(200, as_json(GET_LOAD))], "/metrics": [metrics]}
    server = serve(routes)
    drain = wait(server.url(), api_key=None, timeout=0.5)
    assert (drain["running_at_stop"], drain["url"], drain["timed_out"]) == (3, server.url("/metrics"), True), drain
    assert [(attempt["status"], attempt["error"]) for attempt in drain["seen"]] == [(200, None)]  # the endpoint that answered first from then on
    first = server.seen[:3]
    assert first == [("/v1/loads", None), ("/get_load", None), ("/metrics", None)]
    assert {path for path, _auth in server.seen[3:]} == {"/metrics"}


def test_a_key_the_server_refuses_is_said_and_never_sent_to_the_metrics(serve: t.Callable[..., LoadServer]) -> None:
    server = serve({"/v1/loads": [Route(200, as_json(V1_LOADS))], "/metrics": [Route(404, b"", keyed=False)]})
    reading = _load.read_load(_load.plan(server.url(), "sglang"), "sk-wrong", _load.http_fetch())
    assert reading["running"] is None and reading["listening"] is True
    assert [(attempt["status"], attempt["error"]) for attempt in reading["attempts"]] == [
        (401, "the API key was refused"),
        (404, "HTTP 404"),
        (404, "HTTP 404"),
    ]
    assert [auth for _path, auth in server.seen] == ["Bearer sk-wrong", "Bearer sk-wrong", None]


def test_a_server_without_v1_loads_is_read_at_get_load(serve: t.Callable[..., LoadServer]) -> None:
    idle = [{**rank, "num_reqs": 0} for rank in GET_LOAD]
    server = serve({"/get_load": [Route(200, as_json(GET_LOAD)), Route(200, as_json(idle))]})
    drain = wait(server.url())
    assert (drain["running_at_start"], drain["running_at_stop"], drain["url"], drain["timed_out"]) == (5, 0, server.url("/get_load"), False), drain
    # /v1/loads answered 404 once; the second read went to /get_load first
    assert [path for path, _auth in server.seen] == ["/v1/loads", "/get_load", "/get_load"]


def test_an_unreadable_load_is_waited_on_until_the_timeout(serve: t.Callable[..., LoadServer]) -> None:
    server = serve({"/v1/loads": [Route(200, as_json(V1_LOADS))]})  # keyed, no key given, no metrics
    started = time.monotonic()
    drain = wait(server.url(), api_key=None, timeout=1.0, interval=0.2)
    assert time.monotonic() - started >= 1.0
    assert (drain["known"], drain["running_at_start"], drain["running_at_stop"], drain["timed_out"]) == (False, None, None, True), drain
    assert drain["reads"] >= 4 and drain["load_status"] == 401
    assert drain["seen"][0] == {"url": server.url(), "status": 401, "running": None, "error": "the server wants its API key"}
    assert drain["msg"].startswith(f"drain: running requests not known ({server.url()}: the server wants its API key; ")
    assert "; waited until the drain timeout, after 1" in drain["msg"]


def test_an_unreadable_load_ends_the_wait_at_once_when_told_to_proceed(serve: t.Callable[..., LoadServer]) -> None:
    server = serve({"/v1/loads": [Route(200, b'{"loads": "soon"}')], "/metrics": [Route(200, b"up 1\n", keyed=False)]})
    drain = wait(server.url(), timeout=30, unknown_load="proceed")
    assert (drain["known"], drain["reads"], drain["timed_out"], drain["unknown_load"]) == (False, 1, False, "proceed"), drain
    assert drain["seen"][0]["error"] == "the answer holds no figure of running requests"
    assert "went on without it, as told (unknown load: proceed)" in drain["msg"]


def test_a_server_that_does_not_answer_in_time_is_not_known(serve: t.Callable[..., LoadServer]) -> None:
    server = serve({"/v1/loads": [Route(200, as_json(V1_LOADS))]}, delay=1.5)
    reading = _load.read_load(_load.plan(server.url(), "sglang")[:1], KEY, _load.http_fetch(), timeout=0.3)
    assert reading["running"] is None and reading["attempts"][0]["error"] == "no answer within 0.3 s"


def test_a_closed_port_ends_the_wait_at_once() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1/loads"
    drain = wait(url, timeout=30)
    assert (drain["listening"], drain["known"], drain["reads"], drain["timed_out"]) == (False, False, 1, False), drain
    assert len(drain["seen"]) == 1 and drain["seen"][0]["error"] == _load.REFUSED
    assert drain["msg"] == f"drain: nothing listens at {url} (connection refused): no request can run there, after {drain['seconds']} s"


# -- the simulator and the module ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed_sim() -> Iterator[SimProcess]:
    """The simulator as SGLang with --api-key, each generation running 2 s."""
    sim = SimProcess(SIM_API_KEY=KEY, SIM_TP="1", SIM_GENERATE_SECONDS="2")
    try:
        assert sim.wait_status("/health", 200, timeout=30) == 200
        yield sim
    finally:
        sim.close()


def in_flight(sim: SimProcess) -> threading.Thread:
    """A generation sent with the key; returns once the server counts it."""
    request = {"text": "hi", "sampling_params": {"max_new_tokens": 4}}
    worker = threading.Thread(target=sim.request, args=("POST", "/generate", request), kwargs={"headers": {"Authorization": f"Bearer {KEY}"}})
    worker.start()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and "sglang:num_running_reqs{" not in _running_line(sim):
        time.sleep(0.02)
    return worker


def _running_line(sim: SimProcess) -> str:
    answer = sim.request("GET", "/metrics")
    lines = answer[1].decode().splitlines() if answer else []
    return next((line for line in lines if line.startswith("sglang:num_running_reqs{") and not line.endswith(" 0.0")), "")


def test_the_drain_of_the_simulator_with_a_key_waits_for_the_request_in_flight(keyed_sim: SimProcess) -> None:
    worker = in_flight(keyed_sim)
    drain = wait(f"http://127.0.0.1:{keyed_sim.port}/v1/loads", timeout=10, interval=0.2)
    worker.join(5)
    assert (drain["running_at_start"], drain["running_at_stop"], drain["timed_out"], drain["load_status"]) == (1, 0, False, 200), drain
    assert drain["url"] == f"http://127.0.0.1:{keyed_sim.port}/v1/loads" and drain["seconds"] >= 1.0


def run_module(args: dict[str, t.Any], tmp: Path) -> dict[str, t.Any]:
    args_file = tmp / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=str(REPO / "collections"))
    done = subprocess.run([sys.executable, str(MODULE), str(args_file)], cwd=tmp, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    result: dict[str, t.Any] = json.loads(done.stdout)
    return result


def test_the_module_reads_the_simulator_without_showing_its_key(keyed_sim: SimProcess, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{keyed_sim.port}/v1/loads"
    worker = in_flight(keyed_sim)
    keyed = run_module({"url": url, "api_key": KEY, "timeout": 10, "interval": 0.2}, tmp_path)
    worker.join(5)
    assert keyed["changed"] is False and KEY not in json.dumps(keyed)
    assert (keyed["drain"]["running_at_start"], keyed["drain"]["running_at_stop"], keyed["drain"]["timed_out"]) == (1, 0, False), keyed
    # without the key: 401 twice, then /metrics (keyless) says it
    keyless = run_module({"url": url, "timeout": 5, "interval": 0.2}, tmp_path)
    assert keyless["drain"]["url"] == f"http://127.0.0.1:{keyed_sim.port}/metrics" and keyless["drain"]["running_at_stop"] == 0, keyless
    worker_node = run_module({"url": url, "node_rank": 1}, tmp_path)
    assert worker_node["drain"]["reads"] == 0 and "its requests enter at node 0" in worker_node["drain"]["msg"]
    refused = run_module({"url": url, "engine": "trtllm"}, tmp_path)
    assert refused["failed"] is True and "value of engine must be one of" in refused["msg"]
