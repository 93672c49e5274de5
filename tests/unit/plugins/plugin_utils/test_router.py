"""The router's worker API from the controller (plugin_utils/_router.py), over real HTTP on 127.0.0.1.

Against the stand-in of the SGLang Model Gateway (tests/harness/router_stub.py: 202, then the change a
moment later; UUID ids; the admin key), and, for what that stand-in never answers (a 500, a refused
removal of a listed worker, an error that repeats the key it was sent, an answer that never comes), a
small router on 127.0.0.1 that answers as told.
"""

from __future__ import annotations

import json
import socket
import threading
import typing as t
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.inferops.runbooks.plugins.plugin_utils._router import (
    Router,
    RouterError,
    registration,
    worker_spec,
)
from tests.harness.router_stub import RouterStub

WORKER = "http://10.0.0.11:30000"
OTHER = "http://10.0.0.12:30000"
HOST = "gpu-a"
ADMIN_KEY = "sk-router-admin-3f9c"
API_KEY = "sk-server-71ab"
LISTED_ENTRY = {"priority": 50, "cost": 1.0, "worker_type": "regular"}
NOT_STOPPED = f"{HOST} was not taken out of rotation and nothing was stopped."
NO_TRAFFIC = "the server runs, but the router does not send it traffic."

Reply = tuple[int, t.Any]
Answering = t.Callable[[dict[str, str], t.Any], Reply]


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every call goes straight to 127.0.0.1, whatever proxy the environment names."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def stub() -> Iterator[RouterStub]:
    with RouterStub(workers=[WORKER, OTHER], admin_key=ADMIN_KEY) as router:
        yield router


class Scripted:
    """A router on 127.0.0.1 that answers each (method, path) as told (404 otherwise) and keeps
    what it was sent, as (method, path, body)."""

    def __init__(self, answers: t.Mapping[tuple[str, str], Reply | Answering]) -> None:
        self.answers = answers
        self.received: list[tuple[str, str, t.Any]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Scripted:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.answer()

            def do_POST(self) -> None:
                self.answer()

            def do_DELETE(self) -> None:
                self.answer()

            def log_message(self, format: str, *args: object) -> None:
                pass

            def answer(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw) if raw else None
                scripted.received.append((self.command, self.path, body))
                reply = scripted.answers.get((self.command, self.path), (404, {"error": "not found"}))
                status, payload = reply(dict(self.headers), body) if callable(reply) else reply
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "text/plain" if isinstance(payload, str) else "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def keys_absent(text: str) -> bool:
    return ADMIN_KEY not in text and API_KEY not in text


# -- the registration kept in the run record -----------------------------------------------------


def test_registration_keeps_the_url_and_the_four_keys_of_the_listing() -> None:
    listed = {"id": "5d1c", "url": "http://other", "model_id": "m", "priority": 9, "cost": 0.5, "worker_type": "decode", "bootstrap_port": None, "load": 3}
    assert registration(WORKER, listed) == {"url": WORKER, "priority": 9, "cost": 0.5, "worker_type": "decode", "bootstrap_port": None}
    assert registration(WORKER, None) == {"url": WORKER}


def test_the_spec_adds_the_api_key_only_when_the_server_has_one() -> None:
    kept = {"url": WORKER, "priority": 9}
    assert worker_spec(kept, API_KEY) == {"url": WORKER, "priority": 9, "api_key": API_KEY}
    assert worker_spec(kept, None) == kept == worker_spec(kept, "")
    assert "api_key" not in kept


# -- taking a worker out ------------------------------------------------------------------------


def test_a_listed_worker_is_kept_then_removed_and_no_longer_listed(stub: RouterStub) -> None:
    kept_before_removal: list[tuple[dict[str, t.Any], list[tuple[str, str | None]]]] = []
    router = Router(stub.url, ADMIN_KEY, timeout=5)

    taken = router.take_out(WORKER, None, HOST, retries=5, keep=lambda kept: kept_before_removal.append((kept, stub.changes())))

    assert taken == {"registration": {"url": WORKER, **LISTED_ENTRY}, "removed": True}
    assert kept_before_removal == [({"url": WORKER, **LISTED_ENTRY}, [])]
    assert stub.registered() == [OTHER]
    assert stub.changes() == [("remove", WORKER)]
    removal = next(call for call in stub.calls if call.method == "DELETE")
    assert removal.status == 202 and removal.authorized
    assert all(call.authorized for call in stub.calls)
    # it looked again after the router's delay: the last listing no longer has it
    assert [call.verb for call in stub.calls][:2] == ["list", "remove"] and stub.calls[-1].verb == "list"


def test_a_worker_an_earlier_run_took_out_comes_from_the_record_and_nothing_is_removed(stub: RouterStub) -> None:
    gone = "http://10.0.0.13:30000"
    known = {"url": gone, "priority": 7, "cost": 2.0, "worker_type": "prefill", "bootstrap_port": 8998}
    kept: list[dict[str, t.Any]] = []

    taken = Router(stub.url, ADMIN_KEY).take_out(gone, known, HOST, retries=5, keep=kept.append)

    assert taken == {"registration": known, "removed": False}
    assert stub.changes() == [] and kept == []
    assert [call.method for call in stub.calls] == ["GET"]


def test_a_worker_neither_listed_nor_recorded_is_its_url(stub: RouterStub) -> None:
    taken = Router(stub.url, ADMIN_KEY).take_out("http://10.0.0.13:30000", None, HOST, retries=5)
    assert taken == {"registration": {"url": "http://10.0.0.13:30000"}, "removed": False}


def test_trailing_slashes_of_the_router_url_are_left_out(stub: RouterStub) -> None:
    router = Router(stub.url + "///", ADMIN_KEY)
    assert router.url == stub.url
    assert router.take_out(WORKER, None, HOST, retries=5)["removed"]
    assert all(call.path == "/workers" or call.path.startswith("/workers/") for call in stub.calls)
    with pytest.raises(RouterError) as caught:
        Router(stub.url + "/", "sk-router-admin-wrong").take_out(OTHER, None, HOST, retries=5)
    assert str(caught.value).startswith(f"The router {stub.url}/workers answered 401")


def test_a_router_that_does_not_know_the_admin_key_answers_401(stub: RouterStub) -> None:
    wrong = "sk-router-admin-wrong"
    with pytest.raises(RouterError) as caught:
        Router(stub.url, wrong).take_out(WORKER, None, HOST, retries=5)
    assert str(caught.value) == f"The router {stub.url}/workers answered 401 (Unauthorized): {NOT_STOPPED}"
    assert caught.value.status == 401 and not caught.value.removed
    assert stub.registered() == sorted([WORKER, OTHER])


def test_a_router_that_fails_answers_its_status() -> None:
    with Scripted({("GET", "/workers"): (500, "boom")}) as router, pytest.raises(RouterError) as caught:
        Router(router.url, ADMIN_KEY).take_out(WORKER, None, HOST, retries=5)
    assert str(caught.value) == f"The router {router.url}/workers answered 500 (Internal Server Error): {NOT_STOPPED}"


def test_the_routers_own_words_are_shown_without_the_key() -> None:
    def repeat_the_header(headers: dict[str, str], body: t.Any) -> Reply:
        return 403, {"error": f"token {headers.get('Authorization')} is not allowed here"}

    with Scripted({("GET", "/workers"): repeat_the_header}) as router, pytest.raises(RouterError) as caught:
        Router(router.url, ADMIN_KEY).take_out(WORKER, None, HOST, retries=5)
    assert str(caught.value) == f"The router {router.url}/workers answered 403 (token Bearer ******** is not allowed here): {NOT_STOPPED}"
    assert keys_absent(str(caught.value))


def test_a_router_that_does_not_listen_answers_nothing() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(RouterError) as caught:
        Router(url, ADMIN_KEY, timeout=5).take_out(WORKER, None, HOST, retries=5)
    assert str(caught.value) == f"The router {url}/workers answered nothing (no answer: [Errno 111] Connection refused): {NOT_STOPPED}"
    assert caught.value.status is None and keys_absent(str(caught.value))


def test_a_router_that_never_answers_times_out() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(RouterError) as caught:
            Router(url, ADMIN_KEY, timeout=0.5).take_out(WORKER, None, HOST, retries=5)
    assert str(caught.value) == f"The router {url}/workers answered nothing (no answer: timed out): {NOT_STOPPED}"


def test_a_listing_without_workers_is_not_read_as_an_empty_router() -> None:
    with Scripted({("GET", "/workers"): (200, {"total": 0})}) as router, pytest.raises(RouterError) as caught:
        Router(router.url).take_out(WORKER, None, HOST, retries=5)
    assert str(caught.value) == f"The router {router.url}/workers answered 200 (its answer has no list of workers): {NOT_STOPPED}"


def test_a_listed_worker_without_an_id_cannot_be_removed() -> None:
    with Scripted({("GET", "/workers"): (200, {"workers": [{"url": WORKER}]})}) as router, pytest.raises(RouterError) as caught:
        Router(router.url).take_out(WORKER, None, HOST, retries=5)
    assert str(caught.value) == f"The router {router.url}/workers answered 200 (it lists {WORKER} without an id): {NOT_STOPPED}"
    assert [received[0] for received in router.received] == ["GET"]


def test_a_refused_removal_stops_before_anything_is_stopped() -> None:
    listing = (200, {"workers": [{"id": "7e0e4b1a-8f5d-4b8e-9d51-3c1f0f1a2b3c", "url": WORKER, "priority": 50}]})
    refusal = (409, {"error": "worker has running requests", "code": "CONFLICT"})
    answers = {("GET", "/workers"): listing, ("DELETE", "/workers/7e0e4b1a-8f5d-4b8e-9d51-3c1f0f1a2b3c"): refusal}
    kept: list[dict[str, t.Any]] = []
    with Scripted(answers) as router, pytest.raises(RouterError) as caught:
        Router(router.url, ADMIN_KEY).take_out(WORKER, None, HOST, retries=5, keep=kept.append)
    assert str(caught.value) == f"The router {router.url} answered 409 (worker has running requests) to the removal of {WORKER}: nothing was stopped."
    assert caught.value.status == 409 and not caught.value.removed
    assert kept == [{"url": WORKER, "priority": 50}]


def test_the_gateway_refuses_the_removal_of_an_unknown_or_malformed_id(stub: RouterStub) -> None:
    router = Router(stub.url, ADMIN_KEY)
    unknown = "0b6f3a1e-2c4d-4e5f-8a9b-0c1d2e3f4a5b"
    with pytest.raises(RouterError) as caught:
        router.remove(unknown, WORKER)
    assert str(caught.value) == f"The router {stub.url} answered 404 (Worker {unknown} not found) to the removal of {WORKER}"
    with pytest.raises(RouterError) as caught:
        router.remove("not-a-uuid")
    assert str(caught.value) == f"The router {stub.url} answered 400 (Invalid worker_id 'not-a-uuid' (expected UUID)) to the removal of worker not-a-uuid"


def test_a_removal_the_router_does_not_apply_in_time_says_so() -> None:
    # the gateway applies it after 3 s; the wait looks twice, a second apart
    with RouterStub(workers=[WORKER], admin_key=ADMIN_KEY, apply_after=3) as stub, pytest.raises(RouterError) as caught:
        Router(stub.url, ADMIN_KEY).take_out(WORKER, None, HOST, retries=1)
    assert str(caught.value) == (
        f"The router {stub.url} still listed {WORKER} after 1 s (2 looks a second apart; last answer: 200 (OK)): "
        "its removal was accepted, and nothing was stopped."
    )
    assert caught.value.removed


# -- waiting ------------------------------------------------------------------------------------


class Clock:
    """Time that passes only when the router waits."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_the_wait_looks_once_a_second_retries_times_more(stub: RouterStub) -> None:
    clock = Clock()
    router = Router(stub.url, ADMIN_KEY, clock=clock, sleep=clock.sleep)
    with pytest.raises(RouterError) as caught:
        router.wait_listed("http://10.0.0.13:30000", listed=True, retries=3)
    assert str(caught.value) == f"The router {stub.url} did not list http://10.0.0.13:30000 after 3 s (4 looks a second apart; last answer: 200 (OK))"
    assert clock.slept == [1.0, 1.0, 1.0]
    assert [call.verb for call in stub.calls] == ["list"] * 4


def test_the_wait_ends_as_soon_as_the_state_is_reached(stub: RouterStub) -> None:
    clock = Clock()
    assert Router(stub.url, ADMIN_KEY, clock=clock, sleep=clock.sleep).wait_listed(WORKER, listed=True, retries=3) == 0
    assert clock.slept == [] and len(stub.calls) == 1


def test_a_wait_on_a_router_that_is_gone_says_what_it_last_heard() -> None:
    clock = Clock()
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(RouterError) as caught:
        Router(url, ADMIN_KEY, clock=clock, sleep=clock.sleep).wait_listed(WORKER, listed=False, retries=1)
    refused = "nothing (no answer: [Errno 111] Connection refused)"
    assert str(caught.value) == f"The router {url} still listed {WORKER} after 1 s (2 looks a second apart; last answer: {refused})"


# -- putting a worker back ----------------------------------------------------------------------


def test_put_back_sends_the_spec_with_the_api_key_and_waits_until_listed() -> None:
    kept = {"url": WORKER, "priority": 7, "cost": 2.0, "worker_type": "regular"}
    with RouterStub(workers=[OTHER], admin_key=ADMIN_KEY) as stub:
        Router(stub.url + "/", ADMIN_KEY).put_back(kept, API_KEY, retries=5)
        assert stub.registered() == sorted([WORKER, OTHER])
        listing = Router(stub.url, ADMIN_KEY).find(WORKER)
        calls = stub.calls
    addition = next(call for call in calls if call.method == "POST")
    assert addition.body == {**kept, "api_key": API_KEY}
    assert addition.status == 202 and addition.authorized and addition.path == "/workers"
    assert listing is not None and listing["priority"] == 7 and listing["cost"] == 2.0
    assert calls[-2].verb == "list"  # the wait saw it listed before it ended


def test_put_back_without_an_api_key_sends_the_registration_alone() -> None:
    with RouterStub(admin_key=None) as stub:
        Router(stub.url).put_back({"url": WORKER}, None, retries=5)
        assert stub.registered() == [WORKER]
        assert next(call.body for call in stub.calls if call.method == "POST") == {"url": WORKER}


def test_a_refused_addition_says_the_server_gets_no_traffic(stub: RouterStub) -> None:
    with pytest.raises(RouterError) as caught:
        Router(stub.url, "sk-router-admin-wrong").put_back({"url": WORKER}, API_KEY, retries=5)
    assert str(caught.value) == f"The router {stub.url} answered 401 (Unauthorized) when {WORKER} was added back: {NO_TRAFFIC}"
    assert caught.value.status == 401


def test_a_refusal_that_repeats_the_spec_does_not_show_the_api_key() -> None:
    def repeat_the_body(headers: dict[str, str], body: t.Any) -> Reply:
        return 422, {"error": f"cannot reach the worker with {json.dumps(body)}"}

    with Scripted({("POST", "/workers"): repeat_the_body}) as router, pytest.raises(RouterError) as caught:
        Router(router.url, ADMIN_KEY).put_back({"url": WORKER}, API_KEY, retries=5)
    assert str(caught.value) == (
        f'The router {router.url} answered 422 (cannot reach the worker with {{"url": "{WORKER}", "api_key": "********"}}) '
        f"when {WORKER} was added back: {NO_TRAFFIC}"
    )
    assert router.received[0][2] == {"url": WORKER, "api_key": API_KEY}


def test_an_addition_the_router_does_not_apply_in_time_says_so() -> None:
    with RouterStub(admin_key=ADMIN_KEY, apply_after=3) as stub, pytest.raises(RouterError) as caught:
        Router(stub.url, ADMIN_KEY).put_back({"url": WORKER}, API_KEY, retries=1)
    assert str(caught.value) == f"The router {stub.url} did not list {WORKER} after 1 s (2 looks a second apart; last answer: 200 (OK)): {NO_TRAFFIC}"
    assert keys_absent(str(caught.value))


# -- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["", "10.0.0.5:30080", "ftp://router", "http://"])
def test_a_router_url_that_is_not_http_is_refused(url: str) -> None:
    with pytest.raises(RouterError, match="is not an http:// or https:// URL"):
        Router(url)


def test_a_registration_without_url_is_refused() -> None:
    with pytest.raises(RouterError) as caught:
        Router("http://127.0.0.1:9").put_back({"priority": 5}, API_KEY, retries=1)
    assert str(caught.value) == f"The worker's registration {{'priority': 5}} has no URL: {NO_TRAFFIC}"
