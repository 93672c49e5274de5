"""The router's worker API from the controller (plugin_utils/_router.py), over real HTTP on 127.0.0.1.

Against the real SGLang Model Gateway (``smg``, tests/harness/gateway.py; the whole round trip against
its older release ``sglang-router`` 0.3.2 too), with simulated SGLang servers
(tests/harness/simulator/sglang_sim.py) on 127.0.0.1 as its workers: the gateway lists a worker only
once it answered its health check and model discovery, drains a removed one for about 5 s before it
drops it, and answers 409 to the addition of a worker it lists already. What the gateway never answers
(a 500, a refused removal of a listed worker, an error that repeats the key it was sent, a listing
without a list or an entry without an id, an answer that never comes) comes from a small router on
127.0.0.1 that answers as told.
"""

from __future__ import annotations

import json
import re
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
from tests.harness.gateway import SGLANG_ROUTER, SMG, Gateway
from tests.unit.harness.test_simulator import SimProcess

HOST = "gpu-a"
ADMIN_KEY = "sk-router-admin-3f9c"
API_KEY = "sk-server-71ab"
# what the gateway lists of a worker registered with its URL alone
LISTED_ENTRY = {"priority": 50, "cost": 1.0, "worker_type": "regular"}
NOT_STOPPED = f"{HOST} was not taken out of rotation and nothing was stopped."
NO_TRAFFIC = "the server runs, but the router does not send it traffic."
# enough looks for the gateway's drain of a removed worker (about 5 s)
THROUGH_THE_DRAIN = 12
WRONG_KEY = "sk-router-admin-wrong"
# documentation-only addresses: compared, never called
GONE = "http://192.0.2.13:30000"
WORKER_DOC = "http://192.0.2.11:30000"

Reply = tuple[int, t.Any]
Answering = t.Callable[[dict[str, str], t.Any], Reply]


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every call goes straight to 127.0.0.1, whatever proxy the environment names."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


def serving(**env: str) -> SimProcess:
    sim = SimProcess(None, SIM_TP="1", **env)
    sim.wait_for("The server is fired up and ready to roll!", 30)
    return sim


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    """Three simulated servers on 127.0.0.1, ready: ``worker`` and ``other``, and ``keyed`` whose
    API needs API_KEY; their URLs."""
    sims: dict[str, SimProcess] = {}
    try:
        for name, env in (("worker", {}), ("other", {}), ("keyed", {"SIM_API_KEY": API_KEY})):
            sims[name] = serving(**env)
        yield {name: f"http://127.0.0.1:{sim.port}" for name, sim in sims.items()}
    finally:
        for sim in sims.values():
            sim.close()


@pytest.fixture
def worker(servers: dict[str, str]) -> str:
    return servers["worker"]


@pytest.fixture
def other(servers: dict[str, str]) -> str:
    return servers["other"]


@pytest.fixture
def gateway(servers: dict[str, str]) -> Iterator[Gateway]:
    """The gateway with its admin key, listing ``worker`` and ``other``; what registered them forgotten."""
    with Gateway(admin_key=ADMIN_KEY) as started:
        started.add_workers([servers["worker"], servers["other"]])
        yield started


@pytest.fixture(params=[SMG, SGLANG_ROUTER])
def either_gateway(request: pytest.FixtureRequest, servers: dict[str, str]) -> Iterator[Gateway]:
    """smg, then sglang-router 0.3.2 (the same worker API; no drain, 202 to a second addition), each
    with its admin key, listing ``worker`` and ``other``."""
    with Gateway(admin_key=ADMIN_KEY, package=request.param) as started:
        started.add_workers([servers["worker"], servers["other"]])
        yield started


@pytest.fixture
def empty_gateway() -> Iterator[Gateway]:
    with Gateway(admin_key=ADMIN_KEY) as started:
        yield started


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


WAITED = re.compile(r" after (\d+) s \(")


def assert_waited_and_said(error: Exception, expected: str) -> None:
    """The error says what is expected, and that it waited at least the seconds expected: on a loaded
    machine the looks a second apart take longer, and the message says how long they really took."""
    said = str(error)
    waited, wanted = WAITED.search(said), WAITED.search(expected)
    assert waited is not None and wanted is not None, said
    assert int(waited[1]) >= int(wanted[1]), said
    assert said.replace(waited[0], wanted[0], 1) == expected


def test_registration_keeps_the_url_and_the_four_keys_of_the_listing() -> None:
    listed = {"id": "5d1c", "url": "http://other", "model_id": "m", "priority": 9, "cost": 0.5, "worker_type": "decode", "bootstrap_port": None, "load": 3}
    assert registration(WORKER_DOC, listed) == {"url": WORKER_DOC, "priority": 9, "cost": 0.5, "worker_type": "decode", "bootstrap_port": None}
    assert registration(WORKER_DOC, None) == {"url": WORKER_DOC}


def test_the_spec_adds_the_api_key_only_when_the_server_has_one() -> None:
    kept = {"url": WORKER_DOC, "priority": 9}
    assert worker_spec(kept, API_KEY) == {"url": WORKER_DOC, "priority": 9, "api_key": API_KEY}
    assert worker_spec(kept, None) == kept == worker_spec(kept, "")
    assert "api_key" not in kept


# -- taking a worker out ------------------------------------------------------------------------


def test_a_listed_worker_is_kept_then_removed_and_no_longer_listed(gateway: Gateway, worker: str, other: str) -> None:
    kept_before_removal: list[tuple[dict[str, t.Any], list[tuple[str, str]]]] = []
    router = Router(gateway.url, ADMIN_KEY, timeout=5)

    taken = router.take_out(worker, None, HOST, retries=THROUGH_THE_DRAIN, keep=lambda kept: kept_before_removal.append((kept, gateway.changes())))

    assert taken == {"registration": {"url": worker, **LISTED_ENTRY}, "removed": True}
    assert kept_before_removal == [({"url": worker, **LISTED_ENTRY}, [])]
    assert gateway.registered() == [other]
    assert gateway.changes() == [("remove", worker)]
    calls = gateway.calls
    removal = next(call for call in calls if call.method == "DELETE")
    assert removal.status == 202 and all(call.authorized for call in calls)
    # it looked until the gateway dropped the worker after its drain: more than once after the removal
    assert [call.verb for call in calls][:2] == ["list", "remove"] and calls[-1].verb == "list"
    assert len(calls) > 3


def test_a_worker_an_earlier_run_took_out_comes_from_the_record_and_nothing_is_removed(gateway: Gateway) -> None:
    known = {"url": GONE, "priority": 7, "cost": 2.0, "worker_type": "prefill", "bootstrap_port": 8998}
    kept: list[dict[str, t.Any]] = []

    taken = Router(gateway.url, ADMIN_KEY).take_out(GONE, known, HOST, retries=5, keep=kept.append)

    assert taken == {"registration": known, "removed": False}
    assert gateway.changes() == [] and kept == []
    assert [call.method for call in gateway.calls] == ["GET"]


def test_a_worker_neither_listed_nor_recorded_is_its_url(gateway: Gateway) -> None:
    taken = Router(gateway.url, ADMIN_KEY).take_out(GONE, None, HOST, retries=5)
    assert taken == {"registration": {"url": GONE}, "removed": False}


def test_a_worker_the_gateway_is_draining_is_removed_again_and_waited_for(gateway: Gateway, worker: str, other: str) -> None:
    """An earlier run's removal still in the gateway's drain: the worker is listed (draining), so it
    is removed again (the gateway accepts it) and waited for until it is gone."""
    router = Router(gateway.url, ADMIN_KEY)
    listed = router.find(worker)
    assert listed is not None
    router.remove(str(listed["id"]), worker)
    draining = router.find(worker)
    assert draining is not None and draining["status"] == "draining"

    taken = router.take_out(worker, None, HOST, retries=THROUGH_THE_DRAIN)

    assert taken["removed"] and gateway.registered() == [other]
    assert gateway.changes() == [("remove", worker), ("remove", worker)]


def test_trailing_slashes_of_the_router_url_are_left_out(gateway: Gateway, worker: str, other: str) -> None:
    router = Router(gateway.url + "///", ADMIN_KEY)
    assert router.url == gateway.url
    listed = router.find(worker)
    assert listed is not None and listed["url"] == worker
    assert [(call.path, call.status) for call in gateway.calls] == [("/workers", 200)]
    with pytest.raises(RouterError) as caught:
        Router(gateway.url + "/", WRONG_KEY).take_out(other, None, HOST, retries=5)
    assert str(caught.value).startswith(f"The router {gateway.url}/workers answered 401")


def test_a_router_that_does_not_know_the_admin_key_answers_401(gateway: Gateway, worker: str, other: str) -> None:
    with pytest.raises(RouterError) as caught:
        Router(gateway.url, WRONG_KEY).take_out(worker, None, HOST, retries=5)
    assert str(caught.value) == f"The router {gateway.url}/workers answered 401 (Invalid authentication token): {NOT_STOPPED}"
    assert caught.value.status == 401 and not caught.value.removed
    assert gateway.registered() == sorted([worker, other])
    with pytest.raises(RouterError) as caught:
        Router(gateway.url).take_out(worker, None, HOST, retries=5)
    assert str(caught.value) == f"The router {gateway.url}/workers answered 401 (Missing or invalid Authorization header): {NOT_STOPPED}"


def test_a_router_that_fails_answers_its_status() -> None:
    # the gateway never fails this way on purpose: a scripted router does
    with Scripted({("GET", "/workers"): (500, "boom")}) as router, pytest.raises(RouterError) as caught:
        Router(router.url, ADMIN_KEY).take_out(WORKER_DOC, None, HOST, retries=5)
    assert str(caught.value) == f"The router {router.url}/workers answered 500 (boom): {NOT_STOPPED}"
    with Scripted({("GET", "/workers"): (502, {"detail": ""})}) as router, pytest.raises(RouterError) as caught:
        Router(router.url, ADMIN_KEY).take_out(WORKER_DOC, None, HOST, retries=5)
    assert str(caught.value) == f"The router {router.url}/workers answered 502 (Bad Gateway): {NOT_STOPPED}"


def test_the_routers_own_words_are_shown_without_the_key() -> None:
    # a router (or a proxy before it) that repeats the credentials it was sent: the gateway does not
    def repeat_the_header(headers: dict[str, str], body: t.Any) -> Reply:
        return 403, {"error": f"token {headers.get('Authorization')} is not allowed here"}

    with Scripted({("GET", "/workers"): repeat_the_header}) as router, pytest.raises(RouterError) as caught:
        Router(router.url, ADMIN_KEY).take_out(WORKER_DOC, None, HOST, retries=5)
    assert str(caught.value) == f"The router {router.url}/workers answered 403 (token Bearer ******** is not allowed here): {NOT_STOPPED}"
    assert keys_absent(str(caught.value))


def test_a_router_that_does_not_listen_answers_nothing() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(RouterError) as caught:
        Router(url, ADMIN_KEY, timeout=5).take_out(WORKER_DOC, None, HOST, retries=5)
    assert str(caught.value) == f"The router {url}/workers answered nothing (no answer: [Errno 111] Connection refused): {NOT_STOPPED}"
    assert caught.value.status is None and keys_absent(str(caught.value))


def test_a_router_that_never_answers_times_out() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(RouterError) as caught:
            Router(url, ADMIN_KEY, timeout=0.5).take_out(WORKER_DOC, None, HOST, retries=5)
    assert str(caught.value) == f"The router {url}/workers answered nothing (no answer: timed out): {NOT_STOPPED}"


def test_a_listing_without_workers_is_not_read_as_an_empty_router() -> None:
    # not the gateway's listing (it always has its list): a router of another kind at that URL
    with Scripted({("GET", "/workers"): (200, {"total": 0})}) as router, pytest.raises(RouterError) as caught:
        Router(router.url).take_out(WORKER_DOC, None, HOST, retries=5)
    assert str(caught.value) == f"The router {router.url}/workers answered 200 (its answer has no list of workers): {NOT_STOPPED}"


def test_a_listed_worker_without_an_id_cannot_be_removed() -> None:
    # the gateway gives every worker an id; a router of another kind may not
    with Scripted({("GET", "/workers"): (200, {"workers": [{"url": WORKER_DOC}]})}) as router, pytest.raises(RouterError) as caught:
        Router(router.url).take_out(WORKER_DOC, None, HOST, retries=5)
    assert str(caught.value) == f"The router {router.url}/workers answered 200 (it lists {WORKER_DOC} without an id): {NOT_STOPPED}"
    assert [received[0] for received in router.received] == ["GET"]


def test_a_refused_removal_stops_before_anything_is_stopped() -> None:
    # the gateway accepts the removal of every worker it lists: a refusal is scripted
    listing = (200, {"workers": [{"id": "7e0e4b1a-8f5d-4b8e-9d51-3c1f0f1a2b3c", "url": WORKER_DOC, "priority": 50}]})
    refusal = (409, {"error": "worker has running requests", "code": "CONFLICT"})
    answers = {("GET", "/workers"): listing, ("DELETE", "/workers/7e0e4b1a-8f5d-4b8e-9d51-3c1f0f1a2b3c"): refusal}
    kept: list[dict[str, t.Any]] = []
    with Scripted(answers) as router, pytest.raises(RouterError) as caught:
        Router(router.url, ADMIN_KEY).take_out(WORKER_DOC, None, HOST, retries=5, keep=kept.append)
    assert str(caught.value) == f"The router {router.url} answered 409 (worker has running requests) to the removal of {WORKER_DOC}: nothing was stopped."
    assert caught.value.status == 409 and not caught.value.removed
    assert kept == [{"url": WORKER_DOC, "priority": 50}]


def test_the_gateway_refuses_the_removal_of_an_unknown_or_malformed_id(gateway: Gateway, worker: str) -> None:
    router = Router(gateway.url, ADMIN_KEY)
    unknown = "0b6f3a1e-2c4d-4e5f-8a9b-0c1d2e3f4a5b"
    with pytest.raises(RouterError) as caught:
        router.remove(unknown, worker)
    assert str(caught.value) == f"The router {gateway.url} answered 404 (Worker {unknown} not found) to the removal of {worker}"
    with pytest.raises(RouterError) as caught:
        router.remove("not-a-uuid")
    assert str(caught.value).startswith(f"The router {gateway.url} answered 400 (Invalid worker_id 'not-a-uuid' (expected UUID).")
    assert str(caught.value).endswith(") to the removal of worker not-a-uuid")


def test_a_removal_the_router_does_not_apply_in_time_says_so(gateway: Gateway, worker: str) -> None:
    # the gateway drains the worker for about 5 s before it drops it; the wait looks twice, a second apart
    with pytest.raises(RouterError) as caught:
        Router(gateway.url, ADMIN_KEY).take_out(worker, None, HOST, retries=1)
    assert_waited_and_said(
        caught.value,
        f"The router {gateway.url} still listed {worker} after 1 s (2 looks a second apart; last answer: 200 (OK)): "
        "its removal was accepted, and nothing was stopped.",
    )
    assert caught.value.removed
    assert gateway.changes() == [("remove", worker)]


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


def test_the_wait_looks_once_a_second_retries_times_more(gateway: Gateway) -> None:
    clock = Clock()
    router = Router(gateway.url, ADMIN_KEY, clock=clock, sleep=clock.sleep)
    with pytest.raises(RouterError) as caught:
        router.wait_listed(GONE, listed=True, retries=3)
    assert_waited_and_said(caught.value, f"The router {gateway.url} did not list {GONE} after 3 s (4 looks a second apart; last answer: 200 (OK))")
    assert clock.slept == [1.0, 1.0, 1.0]
    assert [call.verb for call in gateway.calls] == ["list"] * 4


def test_the_wait_ends_as_soon_as_the_state_is_reached(gateway: Gateway, worker: str) -> None:
    clock = Clock()
    assert Router(gateway.url, ADMIN_KEY, clock=clock, sleep=clock.sleep).wait_listed(worker, listed=True, retries=3) == 0
    assert clock.slept == [] and len(gateway.calls) == 1


def test_a_draining_worker_is_neither_back_nor_gone(gateway: Gateway, worker: str) -> None:
    clock = Clock()
    router = Router(gateway.url, ADMIN_KEY, clock=clock, sleep=clock.sleep)
    listed = router.find(worker)
    assert listed is not None
    router.remove(str(listed["id"]), worker)
    for in_rotation, state in ((True, "did not list"), (False, "still listed")):
        with pytest.raises(RouterError, match=f"^The router {gateway.url} {state} {worker} after 0 s"):
            router.wait_listed(worker, listed=in_rotation, retries=0)


def test_a_listing_without_a_status_lists_the_worker_in_rotation() -> None:
    # sglang-router 0.3.2 lists a worker without a status (and drops a removed one at once)
    entry = {"id": "0f65b922-c915-4a14-9a2a-801b9b97e11d", "url": WORKER_DOC, "priority": 50, "is_healthy": True}
    with Scripted({("GET", "/workers"): (200, {"workers": [entry], "total": 1})}) as router:
        assert Router(router.url).wait_listed(WORKER_DOC, listed=True, retries=0) >= 0
        with pytest.raises(RouterError, match="still listed"):
            Router(router.url).wait_listed(WORKER_DOC, listed=False, retries=0)


def test_a_wait_on_a_router_that_is_gone_says_what_it_last_heard() -> None:
    clock = Clock()
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(RouterError) as caught:
        Router(url, ADMIN_KEY, clock=clock, sleep=clock.sleep).wait_listed(WORKER_DOC, listed=False, retries=1)
    refused = "nothing (no answer: [Errno 111] Connection refused)"
    assert_waited_and_said(caught.value, f"The router {url} still listed {WORKER_DOC} after 1 s (2 looks a second apart; last answer: {refused})")


# -- putting a worker back ----------------------------------------------------------------------


def test_put_back_sends_the_registration_and_the_api_key_and_waits_until_listed(empty_gateway: Gateway, servers: dict[str, str]) -> None:
    """The server's API is keyed: the gateway lists it only once it read its model with the key that
    came with the registration."""
    keyed = servers["keyed"]
    kept = {"url": keyed, "priority": 7, "cost": 2.0, "worker_type": "regular"}
    Router(empty_gateway.url + "/", ADMIN_KEY).put_back(kept, API_KEY, retries=10)
    assert empty_gateway.registered() == [keyed]
    listing = Router(empty_gateway.url, ADMIN_KEY).find(keyed)
    assert listing is not None and listing["priority"] == 7 and listing["cost"] == 2.0 and listing["status"] == "ready"
    assert empty_gateway.changes() == [("add", keyed)]
    addition = next(call for call in empty_gateway.calls if call.method == "POST")
    assert addition.status == 202 and addition.authorized and addition.path == "/workers"


def test_put_back_without_the_api_key_of_a_keyed_server_is_never_listed(empty_gateway: Gateway, servers: dict[str, str]) -> None:
    keyed = servers["keyed"]
    with pytest.raises(RouterError) as caught:
        Router(empty_gateway.url, ADMIN_KEY).put_back({"url": keyed}, None, retries=2)
    assert_waited_and_said(
        caught.value, f"The router {empty_gateway.url} did not list {keyed} after 2 s (3 looks a second apart; last answer: 200 (OK)): {NO_TRAFFIC}"
    )


def test_put_back_without_an_api_key_sends_the_registration_alone(servers: dict[str, str]) -> None:
    with Gateway() as gateway:
        Router(gateway.url).put_back({"url": servers["worker"]}, None, retries=10)
        assert gateway.registered() == [servers["worker"]]
        assert gateway.changes() == [("add", servers["worker"])]


def test_put_back_of_a_worker_the_gateway_lists_already_is_no_error(gateway: Gateway, worker: str, other: str) -> None:
    """An earlier run added the worker back and died before it noted so: the gateway answers 409
    (it lists it), and the worker is where it should be."""
    Router(gateway.url, ADMIN_KEY).put_back({"url": worker}, API_KEY, retries=5)
    assert gateway.registered() == sorted([worker, other])
    assert [(call.method, call.status) for call in gateway.calls][:2] == [("POST", 409), ("GET", 200)]


def test_a_refused_addition_says_the_server_gets_no_traffic(empty_gateway: Gateway, worker: str) -> None:
    with pytest.raises(RouterError) as caught:
        Router(empty_gateway.url, WRONG_KEY).put_back({"url": worker}, API_KEY, retries=5)
    assert str(caught.value) == f"The router {empty_gateway.url} answered 401 (Invalid authentication token) when {worker} was added back: {NO_TRAFFIC}"
    assert caught.value.status == 401 and empty_gateway.registered() == []


def test_a_refusal_that_repeats_the_spec_does_not_show_the_api_key() -> None:
    # the gateway does not repeat the body it was sent: a scripted router does
    def repeat_the_body(headers: dict[str, str], body: t.Any) -> Reply:
        return 422, {"error": f"cannot reach the worker with {json.dumps(body)}"}

    with Scripted({("POST", "/workers"): repeat_the_body}) as router, pytest.raises(RouterError) as caught:
        Router(router.url, ADMIN_KEY).put_back({"url": WORKER_DOC}, API_KEY, retries=5)
    assert str(caught.value) == (
        f'The router {router.url} answered 422 (cannot reach the worker with {{"url": "{WORKER_DOC}", "api_key": "********"}}) '
        f"when {WORKER_DOC} was added back: {NO_TRAFFIC}"
    )
    assert router.received[0][2] == {"url": WORKER_DOC, "api_key": API_KEY}


def test_an_addition_the_router_does_not_apply_in_time_says_so(worker: str) -> None:
    # the gateway first looks at a new worker 3 s after it was asked to add it
    with Gateway(admin_key=ADMIN_KEY, startup_delay=3) as gateway, pytest.raises(RouterError) as caught:
        Router(gateway.url, ADMIN_KEY).put_back({"url": worker}, API_KEY, retries=1)
    assert_waited_and_said(
        caught.value, f"The router {gateway.url} did not list {worker} after 1 s (2 looks a second apart; last answer: 200 (OK)): {NO_TRAFFIC}"
    )
    assert keys_absent(str(caught.value))


def test_a_worker_that_does_not_serve_is_never_listed(empty_gateway: Gateway) -> None:
    down = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(RouterError) as caught:
        Router(empty_gateway.url, ADMIN_KEY).put_back({"url": down}, None, retries=2)
    said = str(caught.value)
    waited = WAITED.search(said)
    assert said.startswith(f"The router {empty_gateway.url} did not list {down} after ") and waited and int(waited[1]) >= 2, said
    assert empty_gateway.registered() == []


# -- both gateways -------------------------------------------------------------------------------


def test_a_round_trip_through_either_gateway(either_gateway: Gateway, worker: str, other: str) -> None:
    """Out (waited for until the gateway dropped it), back (until it lists it again), back once more
    (an earlier run's addition: smg answers 409, sglang-router 202), and a wrong admin key refused."""
    router = Router(either_gateway.url, ADMIN_KEY)
    taken = router.take_out(worker, None, HOST, retries=THROUGH_THE_DRAIN)
    assert taken == {"registration": {"url": worker, **LISTED_ENTRY}, "removed": True}
    assert either_gateway.registered() == [other]
    router.put_back(taken["registration"], None, retries=10)
    assert either_gateway.registered() == sorted([worker, other])
    router.put_back(taken["registration"], None, retries=10)
    assert either_gateway.registered() == sorted([worker, other])
    with pytest.raises(RouterError, match=f"^The router {either_gateway.url}/workers answered 401 "):
        Router(either_gateway.url, WRONG_KEY).take_out(worker, None, HOST, retries=5)


# -- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["", "10.0.0.5:30080", "ftp://router", "http://"])
def test_a_router_url_that_is_not_http_is_refused(url: str) -> None:
    with pytest.raises(RouterError, match="is not an http:// or https:// URL"):
        Router(url)


def test_a_registration_without_url_is_refused() -> None:
    with pytest.raises(RouterError) as caught:
        Router("http://127.0.0.1:9").put_back({"priority": 5}, API_KEY, retries=1)
    assert str(caught.value) == f"The worker's registration {{'priority': 5}} has no URL: {NO_TRAFFIC}"
