# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How many requests an inference server still runs, read on the managed host, and the drain's
wait until it runs none.

Standard library only, no Ansible imports. The HTTP client, the clock and the sleep are parameters,
so that the tests drive the wait with a server of their own and a clock of their own.

Each engine publishes its load at a few endpoints, tried in turn (its driver's ``load_sources``): SGLang's
``/v1/loads`` (its current one), ``/get_load`` (older servers; a deprecated shim of ``/v1/loads``
until its removal) and the keyless ``/metrics`` (with ``--enable-metrics``); vLLM's ``/metrics``.
SGLang started with ``--api-key`` guards every path but ``/health*`` and ``/metrics``: the guarded
endpoints are sent the key, and a 401 is what it is (not a load of zero), after which the next
endpoint is tried. A read that found no figure is never taken for zero: the wait goes on until its
timeout, unless the caller chose to proceed. A refused connection is an answer: nothing listens on
the port, so no request can run through it.
"""

from __future__ import annotations

import json
import math
import re
import socket
import time
import typing as t
import urllib.parse

from ansible_collections.inferops.runbooks.plugins.module_utils import _engines

READ_TIMEOUT = 10.0  # seconds one read of an endpoint may take
MAX_BODY = 4 * 1024 * 1024  # a /metrics page of a large server is a few hundred KiB
UNKNOWN_LOAD = ("wait", "proceed")  # what the wait does when no endpoint gives a figure
REFUSED = "connection refused"


class LoadError(ValueError):
    """The load cannot be asked for at all (a bad URL, an unknown engine or choice)."""


class Answer(t.NamedTuple):
    """What one HTTP GET got: the status (None without an answer), the body, and the trouble."""

    status: int | None
    body: bytes
    error: str | None


# (url, headers, timeout) -> Answer; never raises for network trouble
Fetch = t.Callable[[str, t.Mapping[str, str], float], Answer]


# -- what each engine's answers mean ----------------------------------------------------------------


def count_v1_loads(body: bytes) -> int | None:
    """SGLang's ``/v1/loads``: ``loads``, one entry per data-parallel rank with ``num_running_reqs`` and
    ``num_waiting_reqs``; servers of early 2026 also sent an ``aggregate`` with ``total_reqs``."""
    answer = _json(body)
    if not isinstance(answer, dict):
        return None
    aggregate = answer.get("aggregate")
    if isinstance(aggregate, dict) and _whole(aggregate.get("total_reqs")) is not None:
        return _whole(aggregate.get("total_reqs"))
    loads = answer.get("loads")
    if not isinstance(loads, list) or not loads:
        return None
    counts = [_sum_of(rank, ("num_running_reqs", "num_waiting_reqs")) if isinstance(rank, dict) else None for rank in loads]
    return None if None in counts else sum(t.cast("list[int]", counts))


def count_get_load(body: bytes) -> int | None:
    """SGLang's ``/get_load``: a list, one entry per data-parallel rank, running plus waiting in ``num_reqs``."""
    answer = _json(body)
    if not isinstance(answer, list) or not answer:
        return None
    counts = [_whole(rank.get("num_reqs")) if isinstance(rank, dict) else None for rank in answer]
    return None if None in counts else sum(t.cast("list[int]", counts))


def metric_counter(*gauges: str) -> t.Callable[[bytes], int | None]:
    """A reader of Prometheus text that sums the samples of these gauges (every label set); None when
    none of them is on the page (a server whose metrics are off, or not these)."""
    sample = re.compile(r"^(?:" + "|".join(re.escape(gauge) for gauge in gauges) + r")(?:\{[^}]*\})?[ \t]+(\S+)", re.MULTILINE)

    def count(body: bytes) -> int | None:
        values = [_number(value) for value in sample.findall(body.decode("utf-8", "replace"))]
        if not values or None in values:
            return None
        return int(sum(t.cast("list[float]", values)))

    return count


def count_any(body: bytes) -> int | None:
    """A load URL of the user's own path: whichever of the known shapes its answer has."""
    text = body.decode("utf-8", "replace")
    answer = _json(body)
    return running_requests(text if answer is None else answer)


def metrics_gauges() -> tuple[str, ...]:
    """The gauges of running and queued requests of every driver's /metrics (``load_sources``)."""
    return tuple(gauge for driver in _engines.DRIVERS.values() for source in driver.load_sources for gauge in source.gauges)


def running_requests(answer: t.Any) -> int | None:
    """Requests a server still runs or queues, from the answer of its load or metrics endpoint, as JSON
    or as the text of a /metrics page (the filter ``running_requests`` reads it so).

    Understands SGLang's ``/get_load`` (a list with ``num_reqs`` per data-parallel rank, running
    and waiting), ``/v1/loads`` (``num_running_reqs`` plus ``num_waiting_reqs`` of each rank; early 2026:
    ``aggregate.total_reqs``), vLLM's ``/load`` (``server_load``: the requests its API server is
    handling) and any engine's ``/metrics`` text (the gauges of its driver's load sources added up).
    None when the answer is none of these.
    """
    if isinstance(answer, (list, tuple)):
        counts = [_count(rank.get("num_reqs")) if isinstance(rank, t.Mapping) else None for rank in answer]
        return None if not counts or None in counts else sum(t.cast("list[int]", counts))
    if isinstance(answer, t.Mapping):
        aggregate = answer.get("aggregate")
        if isinstance(aggregate, t.Mapping):
            return _count(aggregate.get("total_reqs"))
        if "server_load" in answer:
            return _count(answer.get("server_load"))
        loads = answer.get("loads")
        if isinstance(loads, (list, tuple)):
            return running_requests([{"num_reqs": _rank_requests(rank)} for rank in loads if isinstance(rank, t.Mapping)])
        return None
    if isinstance(answer, str):
        return metric_counter(*metrics_gauges())(answer.encode("utf-8"))
    return None


def _rank_requests(rank: t.Mapping[str, t.Any]) -> int | None:
    """One rank of ``/v1/loads``: running plus waiting (current servers), or ``num_total_reqs``."""
    running, waiting = _count(rank.get("num_running_reqs")), _count(rank.get("num_waiting_reqs"))
    return running + waiting if running is not None and waiting is not None else _count(rank.get("num_total_reqs"))


def _count(value: t.Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        return None
    return int(value)


class LoadEndpoint(t.NamedTuple):
    """One place a server publishes its load: its path, whether the server guards it with its API
    key, and what its answer says (the requests running and waiting, None when it says nothing)."""

    path: str
    keyed: bool
    running: t.Callable[[bytes], int | None]


def endpoints(engine: str) -> tuple[LoadEndpoint, ...]:
    """Where an engine publishes its load (its driver's load sources), in the order they are tried;
    for ``auto`` every driver's, one endpoint per path (a /metrics page read for every engine's gauges)."""
    names = _engines.engine_names()
    if engine not in names:
        raise LoadError(f"no load endpoints are known for engine {engine!r} (one of {', '.join(names)})")
    sources: dict[str, _engines.LoadSource] = {}
    for driver in _engines.drivers_for(engine):
        for source in driver.load_sources:
            known = sources.get(source.path)
            sources[source.path] = source if known is None else known._replace(gauges=known.gauges + source.gauges)
    return tuple(LoadEndpoint(source.path, source.keyed, _reader(source)) for source in sources.values())


def _reader(source: _engines.LoadSource) -> t.Callable[[bytes], int | None]:
    if source.shape == "metrics":
        return metric_counter(*source.gauges)
    return ANSWER_READERS[source.shape]


# what each shape of a load answer (a driver's LoadSource.shape) says; ``metrics`` adds up its gauges
ANSWER_READERS: dict[str, t.Callable[[bytes], int | None]] = {"v1_loads": count_v1_loads, "get_load": count_get_load}


# -- one read ---------------------------------------------------------------------------------------


class Attempt(t.TypedDict):
    """One endpoint asked: its URL, the HTTP status (None without an answer), the figure it gave
    (None when it gave none) and what went wrong."""

    url: str
    status: int | None
    running: int | None
    error: str | None


class Reading(t.TypedDict):
    """One read of the load: the figure (None when no endpoint gave one), the URL that gave it, and
    every endpoint asked, in order. ``listening`` is false when the port refused the connection."""

    running: int | None
    url: str | None
    listening: bool
    attempts: list[Attempt]


def plan(load_url: str, engine: str) -> list[tuple[str, LoadEndpoint]]:
    """The URLs to ask, in order, with what each one's answer means: the engine's endpoints on the load
    URL's server, its own path first; a path the engine does not publish its load at is asked alone."""
    known = endpoints(engine)
    parts = urllib.parse.urlsplit(load_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LoadError(f"the load URL must be an http:// or https:// URL with a host, got {load_url!r}")
    base = f"{parts.scheme}://{parts.netloc}"
    own = [endpoint for endpoint in known if endpoint.path == parts.path.rstrip("/")]
    if not own:
        return [(load_url, LoadEndpoint(parts.path, True, count_any))]
    return [(base + endpoint.path, endpoint) for endpoint in own + [endpoint for endpoint in known if endpoint not in own]]


def read_load(
    targets: t.Sequence[tuple[str, LoadEndpoint]],
    api_key: str | None,
    fetch: Fetch,
    timeout: float = READ_TIMEOUT,
) -> Reading:
    """Ask the endpoints in turn until one gives a figure; the key goes only where the server guards."""
    attempts: list[Attempt] = []
    for url, endpoint in targets:
        headers = {"Accept": "application/json, text/plain", "User-Agent": "inferops.runbooks server_load"}
        if endpoint.keyed and api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        answer = fetch(url, headers, timeout)
        running = endpoint.running(answer.body) if answer.status == 200 else None
        error = answer.error or _status_problem(answer.status, running, endpoint.keyed, bool(api_key))
        attempts.append({"url": url, "status": answer.status, "running": running, "error": error})
        if running is not None:
            return {"running": running, "url": url, "listening": True, "attempts": attempts}
        if answer.error == REFUSED:
            return {"running": None, "url": None, "listening": False, "attempts": attempts}
    return {"running": None, "url": None, "listening": True, "attempts": attempts}


def _status_problem(status: int | None, running: int | None, keyed: bool, sent_key: bool) -> str | None:
    if status == 200:
        return None if running is not None else "the answer holds no figure of running requests"
    if status in (401, 403):
        return "the API key was refused" if sent_key else "the server wants its API key" if keyed else "refused without a key"
    return f"HTTP {status}"


# -- the wait ---------------------------------------------------------------------------------------


class DrainResult(t.TypedDict, total=False):
    """What the drain saw. ``running_at_start`` and ``running_at_stop`` are the first and the last
    figures (None when not known); ``known`` says whether the last read gave one; ``load_status`` is
    the status of the endpoint that gave it (else of the first endpoint asked); ``reads`` counts the
    reads; ``seen`` is the last read's every attempt; ``msg`` says it in one line."""

    load_url: str
    url: str | None
    load_status: int | None
    running_at_start: int | None
    running_at_stop: int | None
    known: bool
    listening: bool
    timed_out: bool
    unknown_load: str
    reads: int
    seconds: float
    seen: list[Attempt]
    node_rank: int
    msg: str


def wait_until_idle(
    load_url: str,
    engine: str,
    api_key: str | None,
    timeout: float,
    interval: float,
    fetch: Fetch,
    unknown_load: str = "wait",
    clock: t.Callable[[], float] = time.monotonic,
    sleep: t.Callable[[float], None] = time.sleep,
) -> DrainResult:
    """Read the load every ``interval`` seconds until the server runs and queues no request, nothing
    listens on its port, or ``timeout`` seconds passed; with ``unknown_load`` ``proceed``, also as soon
    as a read found no figure."""
    if unknown_load not in UNKNOWN_LOAD:
        raise LoadError(f"unknown_load must be one of {', '.join(UNKNOWN_LOAD)}, got {unknown_load!r}")
    if not timeout > 0 or not interval > 0:
        raise LoadError(f"the timeout and the interval must be numbers of seconds > 0, got {timeout!r} and {interval!r}")
    targets = plan(load_url, engine)
    started = clock()
    deadline = started + timeout
    reading = read_load(targets, api_key, fetch, _read_timeout(deadline, clock))
    first, reads = reading, 1
    while not _done(reading, unknown_load) and clock() < deadline:
        sleep(max(0.0, min(interval, deadline - clock())))
        targets = _answered_first(targets, reading["url"])
        reading = read_load(targets, api_key, fetch, _read_timeout(deadline, clock))
        reads += 1
    return _result(load_url, unknown_load, first, reading, reads, timed_out=not _done(reading, unknown_load), seconds=clock() - started)


def _answered_first(targets: list[tuple[str, LoadEndpoint]], answered: str | None) -> list[tuple[str, LoadEndpoint]]:
    """The endpoint that gave a figure is asked first from then on (an older server's 404 once is enough)."""
    return sorted(targets, key=lambda target: target[0] != answered) if answered else targets


def _done(reading: Reading, unknown_load: str) -> bool:
    return reading["running"] == 0 or not reading["listening"] or (reading["running"] is None and unknown_load == "proceed")


def _read_timeout(deadline: float, clock: t.Callable[[], float]) -> float:
    return max(1.0, min(READ_TIMEOUT, deadline - clock()))


def _result(load_url: str, unknown_load: str, first: Reading, last: Reading, reads: int, timed_out: bool, seconds: float) -> DrainResult:
    attempts = last["attempts"]
    answered = [attempt for attempt in attempts if attempt["url"] == last["url"]] or attempts[:1]
    result: DrainResult = {
        "load_url": load_url,
        "url": last["url"],
        "load_status": answered[0]["status"] if answered else None,
        "running_at_start": first["running"],
        "running_at_stop": last["running"],
        "known": last["running"] is not None,
        "listening": last["listening"],
        "timed_out": timed_out,
        "unknown_load": unknown_load,
        "reads": reads,
        "seconds": round(seconds, 1),
        "seen": attempts,
        "msg": "",
    }
    result["msg"] = describe(result)
    return result


def not_read_on_a_worker_node(load_url: str, node_rank: int) -> DrainResult:
    """The drain of a node of rank 1 or more of a multi-node server: the requests enter at node 0
    (the others serve only health), so there is nothing to read and nothing to wait for."""
    result: DrainResult = {
        "load_url": load_url,
        "url": None,
        "load_status": None,
        "running_at_start": None,
        "running_at_stop": None,
        "known": False,
        "listening": True,
        "timed_out": False,
        "unknown_load": "wait",
        "reads": 0,
        "seconds": 0.0,
        "seen": [],
        "node_rank": node_rank,
        "msg": "",
    }
    result["msg"] = describe(result)
    return result


def describe(drain: t.Mapping[str, t.Any]) -> str:
    """The drain in one line, as the report and the play's output say it."""
    if drain.get("node_rank"):
        return f"drain: node {drain['node_rank']} of a multi-node server: its requests enter at node 0, nothing to read here"
    seconds, at_start = drain.get("seconds"), drain.get("running_at_start")
    timed_out = " (drain timeout reached)" if drain.get("timed_out") else ""
    began = f"{at_start} request(s) running as it began, " if at_start is not None else ""
    if drain.get("running_at_stop") is not None:
        return f"drain: {began}{drain['running_at_stop']} request(s) running at the stop (read at {drain.get('url')}), after {seconds} s{timed_out}"
    if drain.get("listening") is False:
        return f"drain: nothing listens at {drain.get('load_url')} (connection refused): no request can run there, after {seconds} s"
    seen = "; ".join(f"{attempt.get('url')}: {attempt.get('error') or attempt.get('status')}" for attempt in drain.get("seen") or [])
    how = "waited until the drain timeout" if drain.get("timed_out") else "went on without it, as told (unknown load: proceed)"
    return f"drain: running requests not known ({seen or drain.get('load_url')}); {how}, after {seconds} s"


# -- HTTP -------------------------------------------------------------------------------------------


def http_fetch(validate_certs: bool = True) -> Fetch:
    """The fetch of the module: one GET with http.client, never through a proxy."""

    def fetch(url: str, headers: t.Mapping[str, str], timeout: float) -> Answer:
        import http.client

        parts = urllib.parse.urlsplit(url)
        try:
            port = parts.port
        except ValueError:
            return Answer(None, b"", f"bad port in {url!r}")
        connection: http.client.HTTPConnection
        if parts.scheme == "https":
            import ssl

            context = ssl.create_default_context()
            if not validate_certs:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            connection = http.client.HTTPSConnection(parts.hostname or "", port, timeout=timeout, context=context)
        else:
            connection = http.client.HTTPConnection(parts.hostname or "", port, timeout=timeout)
        try:
            connection.request("GET", (parts.path or "/") + (f"?{parts.query}" if parts.query else ""), headers=dict(headers))
            response = connection.getresponse()
            return Answer(response.status, response.read(MAX_BODY), None)
        except ConnectionRefusedError:
            return Answer(None, b"", REFUSED)
        except socket.timeout:
            return Answer(None, b"", f"no answer within {timeout:g} s")
        except (OSError, http.client.HTTPException) as exc:
            return Answer(None, b"", f"{type(exc).__name__}: {exc}")
        finally:
            connection.close()

    return fetch


# -- small helpers ----------------------------------------------------------------------------------


def _json(body: bytes) -> t.Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def _whole(value: t.Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != int(value):
        return None
    return int(value)


def _sum_of(rank: t.Mapping[str, t.Any], names: t.Sequence[str]) -> int | None:
    counts = [_whole(rank.get(name)) for name in names]
    return None if None in counts else sum(t.cast("list[int]", counts))


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None
