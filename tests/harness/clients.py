"""What a client sees during a rollout: a bounded loop on this machine that sends generations
through the real gateway (plain and streamed OpenAI completions, in turn) the whole time a rollout
runs, counting the requests sent, failed and the longest a client waited, while a sampler lists the
gateway's workers that it lists healthy, so that a test can check the serving count never fell
below the floor and when each host was out of the gateway.

The pure parts (``Tally``, ``Sample``, ``lowest_serving``, ``out_spans``, ``out_around``) are
unit-tested in tests/unit/harness/test_clients.py; ``ClientLoop`` runs against the real gateway in
tests/integration/test_fleet_clients.py and bench/clients.py.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

REQUEST_TIMEOUT = 60.0  # a request that waits longer counts as failed
SAMPLE_INTERVAL = 0.25
MAX_REQUESTS = 100_000  # the loop is bounded whatever the rollout takes
PROMPT = "The capital of France is"
ROUTED_HEADER = "x-smg-routed-worker-id"  # smg names the worker it routed a request to


# -- the pure parts ----------------------------------------------------------------------------------


@dataclass
class Tally:
    """The requests the clients sent, the ones that failed (and why), the longest wait."""

    sent: int = 0
    failed: int = 0
    longest_wait: float = 0.0
    errors: list[str] = field(default_factory=list)

    def record(self, waited: float, error: str | None = None) -> None:
        self.sent += 1
        self.longest_wait = max(self.longest_wait, waited)
        if error is not None:
            self.failed += 1
            if len(self.errors) < 20:
                self.errors.append(error)


@dataclass(frozen=True)
class Sample:
    """The workers the gateway listed healthy at one moment (time.time())."""

    at: float
    serving: frozenset[str]
    models: frozenset[str] = frozenset()


def healthy_urls(workers: Iterable[dict[str, Any]]) -> frozenset[str]:
    """The URLs of the workers a GET /workers body lists that are not marked unhealthy."""
    return frozenset(str(worker["url"]) for worker in workers if worker.get("is_healthy") is not False and worker.get("healthy") is not False)


def healthy_models(workers: Iterable[dict[str, Any]]) -> frozenset[str]:
    """The models the healthy workers serve (a client asks for one the gateway can route)."""
    healthy = healthy_urls(workers)
    models = (str(worker.get("model_id") or "") for worker in workers if str(worker["url"]) in healthy)
    return frozenset(model for model in models if model)


def model_for(samples: Sequence[Sample], turn: int, default: str) -> str:
    """The model a client asks for on its turn: one of those the last sample saw served, in turn
    (a deploy that changes the model has both served for a while), else the default."""
    models = sorted(samples[-1].models) if samples else []
    return models[turn % len(models)] if models else default


def lowest_serving(samples: Sequence[Sample]) -> int:
    """The fewest workers the gateway listed healthy at any sample."""
    if not samples:
        raise ValueError("no sample of the gateway's workers was taken")
    return min(len(sample.serving) for sample in samples)


@dataclass(frozen=True)
class Span:
    """A time a worker was not listed: from the first sample without it to the first with it again
    (``back`` None: still out at the last sample); ``last_in`` the last sample that listed it."""

    last_in: float
    out: float
    back: float | None

    def covers(self, moment: float) -> bool:
        return self.out <= moment and (self.back is None or moment < self.back)


def out_spans(samples: Sequence[Sample], url: str) -> list[Span]:
    """Every time the worker left the gateway's list and (maybe) came back, in order."""
    spans: list[Span] = []
    last_in: float | None = None
    out: float | None = None
    for sample in samples:
        listed = url in sample.serving
        if listed and out is not None and last_in is not None:
            spans.append(Span(last_in, out, sample.at))
            out = None
        if listed:
            last_in = sample.at
        elif out is None and last_in is not None:
            out = sample.at
    if out is not None and last_in is not None:
        spans.append(Span(last_in, out, None))
    return spans


@dataclass(frozen=True)
class Routed:
    """A request the gateway routed to a worker: when it was sent and answered (time.time())."""

    sent: float
    answered: float
    worker_url: str


def routed_within(routes: Iterable[Routed], url: str, begin: float, end: float) -> list[Routed]:
    """The requests routed to the worker that were in flight at some moment between begin and end."""
    return [route for route in routes if route.worker_url == url and route.sent < end and route.answered > begin]


def out_around(samples: Sequence[Sample], url: str, stopped: float, passed: float) -> bool:
    """Whether the worker was out of the gateway from before ``stopped`` until after ``passed``
    (one span covering both moments)."""
    return any(span.covers(stopped) and span.covers(passed) for span in out_spans(samples, url))


# -- the loop ----------------------------------------------------------------------------------------


def _no_proxy() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def completion(gateway_url: str, model: str, stream: bool) -> urllib.request.Request:
    body = {"model": model, "prompt": PROMPT, "max_tokens": 8, "stream": stream}
    return urllib.request.Request(gateway_url + "/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST")


def answered(raw: bytes, stream: bool) -> str | None:
    """None when the body is a whole answer; else what is wrong with it."""
    text = raw.decode(errors="replace")
    if stream:
        return None if "data: [DONE]" in text and '"error"' not in text else f"a stream that did not end well: {text[-200:]!r}"
    try:
        body = json.loads(text)
    except ValueError:
        return f"not JSON: {text[:200]!r}"
    return None if isinstance(body, dict) and body.get("choices") else f"no choices: {text[:200]!r}"


def send_one(gateway_url: str, model: str, stream: bool) -> tuple[str | None, str]:
    """One generation through the gateway: (None when answered whole, else the failure; the
    worker the gateway says it routed to, from its ROUTED_HEADER, or "")."""
    try:
        with _no_proxy().open(completion(gateway_url, model, stream), timeout=REQUEST_TIMEOUT) as answer:
            return answered(answer.read(), stream), str(answer.headers.get(ROUTED_HEADER) or "")
    except urllib.error.HTTPError as error:
        with error:
            return f"HTTP {error.code}: {error.read()[:200]!r}", ""
    except OSError as error:
        return f"{type(error).__name__}: {error}", ""


class ClientLoop:
    """``clients`` threads sending generations through the gateway and one sampling its workers,
    from ``start`` (or ``with``) until ``stop``; bounded by MAX_REQUESTS."""

    def __init__(self, gateway_url: str, list_workers: Callable[[], list[dict[str, Any]]], model: str = "default", clients: int = 2) -> None:
        self.gateway_url = gateway_url
        self.list_workers = list_workers
        self.model = model
        self.clients = clients
        self.tally = Tally()
        self.samples: list[Sample] = []
        self.routes: list[Routed] = []
        self.sample_errors: list[str] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._threads: list[threading.Thread] = []

    def _client(self, index: int) -> None:
        stream = index % 2 == 1
        turn = index
        while not self._done.is_set() and self.tally.sent < MAX_REQUESTS:
            model = model_for(self.samples, turn, self.model)
            began, sent = time.monotonic(), time.time()
            error, worker_url = send_one(self.gateway_url, model, stream)
            turn += 1
            with self._lock:
                self.tally.record(time.monotonic() - began, None if error is None else f"{model}: {error}")
                if worker_url:
                    self.routes.append(Routed(sent, time.time(), worker_url))
            stream = not stream

    def _sampler(self) -> None:
        while not self._done.is_set():
            try:
                workers = self.list_workers()
                self.samples.append(Sample(time.time(), healthy_urls(workers), healthy_models(workers)))
            except Exception as error:  # a failed listing is kept, not fatal to the loop
                self.sample_errors.append(f"{type(error).__name__}: {error}")
            self._done.wait(SAMPLE_INTERVAL)

    def start(self) -> Self:
        self._threads = [threading.Thread(target=self._sampler, daemon=True)]
        self._threads += [threading.Thread(target=self._client, args=(index,), daemon=True) for index in range(self.clients)]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._done.set()
        for thread in self._threads:
            thread.join(REQUEST_TIMEOUT + 5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def summary(self) -> str:
        tally = self.tally
        return f"{tally.sent} requests sent, {tally.failed} failed, longest wait {tally.longest_wait:.2f} s, {len(self.samples)} samples of the workers"
