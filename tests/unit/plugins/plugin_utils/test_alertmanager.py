"""Alertmanager's silences from the controller (plugin_utils/_alertmanager.py), against a real Alertmanager
(Debian's prometheus-alertmanager, started per test on 127.0.0.1 with its own configuration and storage
in a temporary directory, stopped at the end); for what it never answers (an answer that repeats the
key it was sent, one that never comes), a small server on 127.0.0.1 that answers as told."""

from __future__ import annotations

import datetime
import json
import socket
import threading
import time
import typing as t
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.inferops.runbooks.plugins.plugin_utils._alertmanager import (
    Alertmanager,
    AlertmanagerError,
    expire_silence,
    host_matchers,
    silence_comment,
    silence_duration,
    silence_host,
)
from tests.harness import alerting

CONFIG = {"route": {"receiver": "nobody"}, "receivers": [{"name": "nobody"}]}
KEY = "am-key-5d2e91"
PROXY_SECRET = "proxy-secret-77c0"


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def alertmanager() -> Iterator[alerting.Alertmanager]:
    problem = alerting.missing(alerting.ALERTMANAGER)
    if problem:
        pytest.fail(problem)
    with alerting.Alertmanager(CONFIG) as server:
        yield server
    assert server.proc is not None and server.proc.poll() is not None, "Alertmanager left running"
    assert not server.dir.exists(), "Alertmanager's directory left behind"


def post_alert(server: alerting.Alertmanager, **labels: str) -> None:
    """An alert as Prometheus sends it for the rule InferenceServerNotServing."""
    alert = {"labels": {"alertname": "InferenceServerNotServing", "condition": "tokens_stalled", **labels}, "annotations": {"summary": "x"}}
    request = urllib.request.Request(f"{server.url}/api/v2/alerts", data=json.dumps([alert]).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as answer:
        assert answer.status == 200


def silenced_by(server: alerting.Alertmanager, host: str) -> list[str]:
    alerts = [a for a in server.get("/api/v2/alerts") if a["labels"].get("inventory_host") == host]
    assert len(alerts) == 1, alerts
    return list(alerts[0]["status"]["silencedBy"])


def when(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_a_host_silenced_for_its_restart_and_expired_after(alertmanager: alerting.Alertmanager) -> None:
    client = Alertmanager(alertmanager.url, bearer_token=KEY, headers={"X-Proxy-Auth": PROXY_SECRET})
    post_alert(alertmanager, inventory_host="gpu-node-01", engine="sglang")
    post_alert(alertmanager, inventory_host="gpu-node-02", engine="sglang")
    before = time.time()
    silence_id, warning = silence_host(client, "gpu-node-01", 900, "run-20261204-0042", engine="sglang")
    assert warning is None and silence_id
    shown = client.silence(silence_id)
    assert shown["status"]["state"] == "active"
    assert shown["matchers"] == host_matchers("gpu-node-01", "sglang")
    assert "run-20261204-0042" in shown["comment"] and "gpu-node-01" in shown["comment"]
    assert shown["createdBy"] == "inferops.runbooks"
    assert before - 2 <= when(shown["startsAt"]) <= time.time() + 1
    assert abs(when(shown["endsAt"]) - when(shown["startsAt"]) - 900) < 2
    # the host's alert is silenced, the other host's is not
    deadline = time.monotonic() + 10
    while silenced_by(alertmanager, "gpu-node-01") != [silence_id] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert silenced_by(alertmanager, "gpu-node-01") == [silence_id]
    assert silenced_by(alertmanager, "gpu-node-02") == []

    assert expire_silence(client, silence_id, "gpu-node-01") is None
    assert client.silence(silence_id)["status"]["state"] == "expired"
    deadline = time.monotonic() + 10
    while silenced_by(alertmanager, "gpu-node-01") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert silenced_by(alertmanager, "gpu-node-01") == []
    # expiring it again (a run replayed after the controller died) is no error
    assert expire_silence(client, silence_id, "gpu-node-01") is None


def test_a_silence_of_the_host_alone_matches_every_engine(alertmanager: alerting.Alertmanager) -> None:
    client = Alertmanager(alertmanager.url)
    post_alert(alertmanager, inventory_host="gpu-node-03", engine="vllm")
    silence_id, warning = silence_host(client, "gpu-node-03", 60, "run-7")
    assert warning is None and silence_id
    assert [m["name"] for m in client.silence(silence_id)["matchers"]] == ["inventory_host"]
    deadline = time.monotonic() + 10
    while silenced_by(alertmanager, "gpu-node-03") != [silence_id] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert silenced_by(alertmanager, "gpu-node-03") == [silence_id]


def test_what_alertmanager_refuses_is_a_clear_message(alertmanager: alerting.Alertmanager) -> None:
    client = Alertmanager(alertmanager.url)
    warning = expire_silence(client, "00000000-0000-4000-8000-000000000000", "gpu-node-01")
    assert warning == (
        "gpu-node-01's silence 00000000-0000-4000-8000-000000000000 was not expired (it ends by itself at its end time): "
        f"Alertmanager {alertmanager.url} answered 500 (silence not found) when asked to expire silence 00000000-0000-4000-8000-000000000000"
    )
    with pytest.raises(AlertmanagerError, match=r"answered 422 \(matchers in body should have at least 1 items\) when asked for a silence"):
        client.create_silence([], 60, "nothing matched")
    with pytest.raises(AlertmanagerError, match="A silence must last more than 0 seconds, got 0"):
        client.create_silence(host_matchers("gpu-node-01"), 0, "no time")


def test_alertmanager_unreachable_is_a_warning() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = Alertmanager(f"http://127.0.0.1:{port}/", bearer_token=KEY, timeout=3)
    silence_id, warning = silence_host(client, "gpu-node-01", 600, "run-1")
    assert silence_id is None
    assert warning is not None and warning.startswith(
        f"gpu-node-01's alerts are not silenced during its restart: Alertmanager http://127.0.0.1:{port} could not be reached ("
    )
    assert "refused" in warning.lower() and KEY not in warning
    assert expire_silence(client, "3f1e0c2a-0000-4000-8000-000000000000", "gpu-node-01") is not None


class Scripted:
    """A server on 127.0.0.1 that answers every request as told, keeping each request's headers."""

    def __init__(self, status: int, body: bytes, delay: float = 0.0) -> None:
        self.headers: list[dict[str, str]] = []
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            def answer(self) -> None:
                scripted.headers.append(dict(self.headers))
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                time.sleep(delay)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_DELETE = do_GET = answer

            def log_message(self, format: str, *args: t.Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Scripted:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def test_the_key_and_headers_are_sent_and_never_shown() -> None:
    echo = json.dumps({"message": f"bad token Bearer {KEY}, proxy said {PROXY_SECRET}"}).encode()
    with Scripted(401, echo) as server:
        client = Alertmanager(server.url, bearer_token=KEY, headers={"X-Proxy-Auth": PROXY_SECRET})
        silence_id, warning = silence_host(client, "gpu-node-01", 600, "run-1")
    assert silence_id is None and warning is not None
    assert KEY not in warning and PROXY_SECRET not in warning
    assert "answered 401 (bad token Bearer ********, proxy said ********)" in warning
    assert server.headers[0]["Authorization"] == f"Bearer {KEY}" and server.headers[0]["X-Proxy-Auth"] == PROXY_SECRET


def test_an_answer_that_never_comes_is_a_warning_within_the_timeout() -> None:
    with Scripted(200, b'{"silenceID": "late"}', delay=4) as server:
        started = time.monotonic()
        silence_id, warning = silence_host(Alertmanager(server.url, timeout=1), "gpu-node-01", 600, "run-1")
        took = time.monotonic() - started
    assert silence_id is None and warning is not None and "could not be reached" in warning, warning
    assert took < 3.5


@pytest.mark.parametrize("url", ["", "alertmanager:9093", "file:///etc/passwd", "http://"])
def test_a_url_that_is_not_one_is_refused(url: str) -> None:
    with pytest.raises(AlertmanagerError, match="is not an http:// or https:// URL"):
        Alertmanager(url)


# -- how long the silence lasts ------------------------------------------------------------------


def start(total: float, **phases: float) -> dict[str, t.Any]:
    return {"outcome": "pass", "total": total, "phases": phases}


GOOD = [
    start(600, starting=60, loading_weights=300, allocating_kv_cache=30, capturing_cuda_graphs=150, warming_up=60),
    start(640, starting=60, loading_weights=340, allocating_kv_cache=30, capturing_cuda_graphs=150, warming_up=60),
    start(620, starting=60, loading_weights=320, allocating_kv_cache=30, capturing_cuda_graphs=150, warming_up=60),
]


def test_the_silence_lasts_the_expected_start_with_its_margin() -> None:
    duration = silence_duration(GOOD, budget=3600, before_start=120)
    # the longest good start (640 s) exceeds the medians' sum (620 s): 1.5 x 640, after 2 min of drain and stop
    assert duration.seconds == 120 + 960
    assert duration.source == "history"
    assert duration.detail == "2m00s before the start, then 1.5x the expected start of 10m40s (3 good starts)"


def test_the_silence_is_bounded_by_the_budget_and_a_minimum() -> None:
    cut = silence_duration(GOOD, budget=700)
    assert (cut.seconds, cut.detail) == (700, "1.5x the expected start of 10m40s (3 good starts), cut to the budget of 11m40s")
    quick = [start(20, starting=2, loading_weights=8, allocating_kv_cache=1, capturing_cuda_graphs=6, warming_up=3)]
    raised = silence_duration(quick, budget=3600)
    assert (raised.seconds, raised.detail) == (300, "1.5x the expected start of 20s (1 good start), raised to 5m00s")


def test_without_a_good_start_the_silence_lasts_the_budget() -> None:
    duration = silence_duration([], budget=2700, before_start=30)
    assert (duration.seconds, duration.source) == (2730, "budget")
    assert duration.detail == "30s before the start, then the start's budget of 45m00s (no good start to learn from)"


def test_the_comment_names_the_run_and_why_it_lasts() -> None:
    comment = silence_comment("run-42", "gpu-node-01", silence_duration([], budget=600))
    assert comment == (
        "Planned restart of gpu-node-01 by inferops.runbooks, run run-42: expired when the host serves again; "
        "lasts the start's budget of 10m00s (no good start to learn from)"
    )
