"""serving_watch: an Event-Driven Ansible event source that tells when an inference server stops serving.

It watches SGLang and vLLM servers over HTTP from the rulebook's host and puts an event on the queue
only when a server is truly not serving:

* ``generation_failed``: a one-token generation failed or timed out, ``failures`` times in a row
  (``/health`` alone proves nothing: a vLLM whose EngineCore died, vLLM #39863, and an SGLang whose
  scheduler died, SGLang #6624, both answer it with 200);
* ``tokens_stalled``: ``/metrics`` counts requests running while the generated-token counter stands
  still for ``stall_for`` seconds (a wedged scheduler holds its requests);
* ``port_gone``: the port refused connections for ``start_grace`` seconds (a host that does not answer
  at all times out its generation: ``generation_failed``);
* ``never_ready``: the server answered its generation with 503 (not ready) for ``start_grace`` seconds.

A cold start refuses connections and then answers 503 for minutes (an hour for large models): that is
not a failure, so the last two wait ``start_grace``, which must exceed the longest cold start. A
server whose ``/metrics`` shows tokens being generated since the last look serves: it gets no
generation that round. Otherwise it gets one one-token generation, so a server costs at most one short
generation per ``interval``, and one ``/metrics`` read (two when the generation failed: the second one
is the evidence of what the server runs then).

A vLLM server in sleep mode (``--enable-sleep-mode``, ``POST /sleep`` or the idle auto-sleep) answers
``/health`` 200 and pays a wake-up for its first generation: its sleep state (``GET /is_sleeping``, the
API key sent) is read first, and a sleeping server gets no generation and is never reported as not
serving (the watch logs that it sleeps). A server without the route (404: no ``VLLM_SERVER_DEV_MODE``)
is not asked again.

A server whose restart is under way raises no event: after an event for a host, its server is left
alone for ``quiet_period`` seconds (the rulebook's restart runs meanwhile); and with ``lease_command``,
the host's lease (``/var/lib/inferops/<unit>.lease``, which every rollout of the collection holds while
it works on the host) is read before an event is raised: a host held by a live rollout, whoever started
it, raises none (the log names the run that holds it). The lease cannot be read over HTTP: the command
reads it on the host (``ssh``, as the rulebook's playbooks reach the hosts).

Each event names the host (``meta.hosts``, so a ``run_playbook`` action is limited to it), the
condition and its evidence: the answers, the counters and for how long, under the key ``inferops``;
it is also logged (``serving_watch: not serving: {...}``), so that the rulebook's log keeps the events
that a rule's throttle kept from its action.

The file is self-contained (Python standard library and asyncio): ansible-rulebook loads it with
runpy, outside of Ansible's plugin loader.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

DOCUMENTATION = r"""
---
short_description: Tell when an LLM inference server (SGLang, vLLM) stops serving.
description:
  - Probes each server with one short generation per interval (none when /metrics shows tokens being
    generated), reads /metrics, and emits an event when a generation fails or times out, when requests
    run while the generated-token counter stands still, or when the port is gone.
  - Never probes a server for O(quiet_period) seconds after an event for it.
  - Reads a vLLM server's sleep state (GET /is_sleeping, vLLM's sleep mode) first - a sleeping server gets
    no generation and raises no event; a server without the route (404) is not asked again.
options:
  servers:
    description:
      - The servers, each a mapping with C(host) (the inventory name the event names), C(url) (the
        server's base URL as the rulebook's host reaches it, http://address:port) and optionally
        C(engine), C(api_key) and C(model) (vLLM's served model name; asked from /v1/models if unset).
    type: list
    elements: dict
    required: true
  engine:
    description: The engine of the servers that do not name theirs.
    type: str
    choices: [sglang, vllm]
    default: sglang
  api_key:
    description: The API key (C(--api-key)) of the servers that do not have their own; sent with the generation only.
    type: str
    default: ""
  interval:
    description: Seconds between two looks at one server.
    type: float
    default: 30
  generation_timeout:
    description: Seconds a one-token generation may take before it counts as failed.
    type: float
    default: 30
  request_timeout:
    description: Seconds a /metrics or /v1/models read may take.
    type: float
    default: 5
  failures:
    description: Failed generations in a row that make a C(generation_failed) event.
    type: int
    default: 2
  stall_for:
    description: Seconds requests may run while the generated-token counter stands still.
    type: float
    default: 120
  start_grace:
    description: Seconds a server may refuse connections or answer 503 (a cold start) before it is not serving.
    type: float
    default: 900
  quiet_period:
    description: Seconds a server is left alone after an event for it (its restart runs meanwhile).
    type: float
    default: 1800
  prompt:
    description: The prompt of the one-token generation.
    type: str
    default: Hello
  lease_command:
    description:
      - The command, run on the rulebook's host, that prints a server's lease (the JSON file
        C(/var/lib/inferops/<unit>.lease) on the server's host), as a list of words; C({host}), C({address}) (the
        URL's host) and C({unit}) are replaced in each. For example
        C([ssh, -o, BatchMode=yes, "root@{address}", cat, "/var/lib/inferops/{unit}.lease"]).
      - Before an event is raised, the lease is read; a host held by a rollout whose heartbeat is fresher than
        O(lease_stale) raises no event. Without it (the default), or when the command fails, events are raised as
        if no lease were held (the log says why).
    type: list
    elements: str
    default: []
  lease_stale:
    description: Seconds since a lease's last heartbeat after which its rollout counts as dead (its lease no longer holds events back).
    type: float
    default: 600
"""

EXAMPLES = r"""
- name: Restart an inference server that stopped serving
  hosts: all
  sources:
    - inferops.runbooks.serving_watch:
        servers:
          - {host: gpu-node-1, url: "http://10.0.0.11:30000"}
          - {host: gpu-node-2, url: "http://10.0.0.12:8000", engine: vllm}
        api_key: "{{ sglang_api_key }}"
        interval: 30
"""


@dataclass(frozen=True)
class Engine:
    """What the watch needs of an engine: its unit (a server that names none), its metrics (requests
    running, generated tokens), the path it generates one token through and, with a sleep mode, the path
    that says whether it sleeps."""

    unit: str
    running_metric: str
    tokens_metric: str
    generate_path: str
    sleep_path: str | None = None


# The engines' drivers in the collection (plugins/module_utils/_engines/) say the same: an event source is
# run by file path, outside the collection's imports, so the table is written here and a unit test
# (tests/unit/engines/test_documented_engines.py) holds it to the drivers.
ENGINES: dict[str, Engine] = {
    "sglang": Engine("sglang.service", "sglang:num_running_reqs", "sglang:generation_tokens_total", "/generate"),
    "vllm": Engine("vllm.service", "vllm:num_requests_running", "vllm:generation_tokens_total", "/v1/completions", "/is_sleeping"),
}
# the one-token generation through the engine's own path (SGLang's /generate: no model name needed)
NATIVE_GENERATE_PATH = "/generate"
# option: (kind, default, smallest allowed value)
NUMBER_OPTIONS: dict[str, tuple[type, float, float]] = {
    "interval": (float, 30.0, 0.1),
    "generation_timeout": (float, 30.0, 0.1),
    "request_timeout": (float, 5.0, 0.1),
    "failures": (int, 2, 1),
    "stall_for": (float, 120.0, 0.0),
    "start_grace": (float, 900.0, 0.0),
    "quiet_period": (float, 1800.0, 0.0),
    "lease_stale": (float, 600.0, 0.0),
}
TEXT_OPTIONS = {"engine": "sglang", "api_key": "", "prompt": "Hello"}
SERVER_KEYS = ("host", "url", "engine", "api_key", "model", "unit")
NAME = "serving_watch"
LOGGER = logging.getLogger(NAME)
SAMPLE_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+(?P<value>\S+)")


class OptionError(ValueError):
    """An option of the event source has a value it cannot use."""


# --------------------------------------------------------------------------------------------------
# Options


@dataclass(frozen=True)
class Server:
    host: str
    url: str
    engine: str
    api_key: str = ""
    model: str = ""
    unit: str = ""


@dataclass(frozen=True)
class Options:
    servers: tuple[Server, ...]
    interval: float = 30.0
    generation_timeout: float = 30.0
    request_timeout: float = 5.0
    failures: int = 2
    stall_for: float = 120.0
    start_grace: float = 900.0
    quiet_period: float = 1800.0
    prompt: str = "Hello"
    lease_command: tuple[str, ...] = ()
    lease_stale: float = 600.0


def _fail(name: str, value: object, allowed: str) -> OptionError:
    return OptionError(f"{NAME}: option {name}={value!r} is not allowed: {allowed}")


def _number(args: Mapping[str, Any], name: str) -> float:
    kind, default, minimum = NUMBER_OPTIONS[name]
    value = args.get(name, default)
    allowed = f"a {'whole number' if kind is int else 'number of seconds'} >= {minimum:g}"
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise _fail(name, value, allowed)
    try:
        number = kind(value)
    except ValueError:
        raise _fail(name, value, allowed) from None
    if number < minimum or (kind is int and isinstance(value, float) and value != number):
        raise _fail(name, value, allowed)
    return float(number)


def _text(args: Mapping[str, Any], name: str, where: str = "") -> str:
    value = args.get(name, TEXT_OPTIONS.get(name, ""))
    if not isinstance(value, str):
        raise _fail(f"{where}{name}", value, "a string")
    return value


def _url(value: object, where: str) -> str:
    allowed = "the server's base URL, http(s)://address:port (no path)"
    if not isinstance(value, str):
        raise _fail(f"{where}url", value, allowed)
    parsed = urllib.parse.urlsplit(value)
    try:
        port_ok = parsed.port is None or parsed.port > 0
    except ValueError:
        port_ok = False
    if parsed.scheme not in ("http", "https") or not parsed.hostname or parsed.path not in ("", "/") or parsed.query or not port_ok:
        raise _fail(f"{where}url", value, allowed)
    return value.rstrip("/")


def _server(entry: object, index: int, engine: str, api_key: str) -> Server:
    where = f"servers[{index}]."
    if not isinstance(entry, Mapping):
        raise _fail(f"servers[{index}]", entry, "a mapping with host and url (engine, api_key, model optional)")
    unknown = sorted(set(entry) - set(SERVER_KEYS))
    if unknown:
        raise _fail(f"{where}{unknown[0]}", entry[unknown[0]], f"a server knows only {', '.join(SERVER_KEYS)}")
    host = entry.get("host")
    if not isinstance(host, str) or not host.strip() or "," in host:
        raise _fail(f"{where}host", host, "the server's inventory host name (one name)")
    server_engine = _text({"engine": engine, **entry}, "engine", where)
    if server_engine not in ENGINES:
        raise _fail(f"{where}engine", server_engine, f"one of {', '.join(ENGINES)}")
    return Server(
        host=host.strip(),
        url=_url(entry.get("url"), where),
        engine=server_engine,
        api_key=_text({"api_key": api_key, **entry}, "api_key", where),
        model=_text(entry, "model", where),
        unit=_text({"unit": ENGINES[server_engine].unit, **entry}, "unit", where),
    )


def check_options(args: Mapping[str, Any]) -> Options:
    """The options, checked; raises OptionError naming the option, its value and what is allowed."""
    known = {"servers", "lease_command", *NUMBER_OPTIONS, *TEXT_OPTIONS}
    unknown = sorted(key for key in args if key not in known and not key.startswith("eda_"))
    if unknown:
        raise _fail(unknown[0], args[unknown[0]], f"the options are {', '.join(sorted(known))}")
    engine = _text(args, "engine")
    if engine not in ENGINES:
        raise _fail("engine", engine, f"one of {', '.join(ENGINES)}")
    entries = args.get("servers")
    if not isinstance(entries, list) or not entries:
        raise _fail("servers", entries, "a non-empty list of servers, each {host: NAME, url: http://address:port}")
    servers = tuple(_server(entry, n, engine, _text(args, "api_key")) for n, entry in enumerate(entries))
    hosts = [server.host for server in servers]
    twice = sorted({host for host in hosts if hosts.count(host) > 1})
    if twice:
        raise _fail("servers", twice[0], "each host once")
    number = {name: _number(args, name) for name in NUMBER_OPTIONS}
    return Options(
        servers=servers,
        interval=number["interval"],
        generation_timeout=number["generation_timeout"],
        request_timeout=number["request_timeout"],
        failures=int(number["failures"]),
        stall_for=number["stall_for"],
        start_grace=number["start_grace"],
        quiet_period=number["quiet_period"],
        prompt=_text(args, "prompt"),
        lease_command=_lease_command(args.get("lease_command", [])),
        lease_stale=number["lease_stale"],
    )


def _lease_command(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(word, str) for word in value):
        raise _fail("lease_command", value, "a list of words, the command that prints a host's lease ({host}, {address}, {unit} replaced)")
    return tuple(value)


# --------------------------------------------------------------------------------------------------
# What one look at a server saw


@dataclass(frozen=True)
class Answer:
    """One HTTP exchange: the status (None: no answer), the body, the error, how long it took."""

    status: int | None
    body: str = ""
    error: str = ""
    seconds: float = 0.0
    refused: bool = False  # the connection was refused (or reset): the port is gone

    @property
    def ok(self) -> bool:
        return self.status == 200

    def describe(self) -> str:
        if self.status is None:
            return f"{self.error} after {self.seconds:.1f} s"
        return f"HTTP {self.status} after {self.seconds:.1f} s" + (f": {self.body[:200]}" if self.body and not self.ok else "")


@dataclass(frozen=True)
class Counters:
    running: float
    tokens: float


def parse_metrics(text: str, engine: str) -> Counters | None:
    """The engine's running requests and generated tokens in Prometheus text (summed over label sets)."""
    running_name, tokens_name = ENGINES[engine].running_metric, ENGINES[engine].tokens_metric
    sums: dict[str, float] = {}
    found: set[str] = set()
    for line in text.splitlines():
        match = SAMPLE_LINE.match(line)
        if match is None or match["name"] not in (running_name, tokens_name):
            continue
        try:
            value = float(match["value"])
        except ValueError:
            continue
        sums[match["name"]] = sums.get(match["name"], 0.0) + value
        found.add(match["name"])
    if found != {running_name, tokens_name}:
        return None
    return Counters(running=sums[running_name], tokens=sums[tokens_name])


@dataclass(frozen=True)
class Look:
    """One look at a server: its /metrics answer, and the generation when one was sent."""

    at: float
    metrics: Answer
    counters: Counters | None
    generation: Answer | None = None
    # the server said it sleeps (vLLM's /is_sleeping): nothing else was asked
    sleeping: bool = False


# --------------------------------------------------------------------------------------------------
# The decision: from the looks at one server, whether it stopped serving


@dataclass
class ServerState:
    """What the watch remembers of one server between looks."""

    tokens: float | None = None
    tokens_moved_at: float | None = None
    stalled_since: float | None = None
    failed: list[str] = field(default_factory=list)
    gone_since: float | None = None
    unready_since: float | None = None
    quiet_until: float = float("-inf")


def tokens_moved(state: ServerState, counters: Counters | None) -> bool:
    """Whether the generated-token counter moved since the last look."""
    return counters is not None and state.tokens is not None and counters.tokens != state.tokens


def needs_generation(state: ServerState, look: Look) -> bool:
    """A server that answered /metrics and generated since the last look serves: no probe then."""
    return not look.metrics.refused and not tokens_moved(state, look.counters)


def assess(state: ServerState, look: Look, options: Options, server: Server) -> dict[str, Any] | None:
    """Update the state with one look; the event when the server is not serving, else None."""
    now = look.at
    if look.sleeping:
        # asleep on purpose: serving when woken, so nothing it did before counts against it
        state.failed.clear()
        state.gone_since = state.unready_since = state.stalled_since = None
        return None
    counters = look.counters
    if look.metrics.refused and (look.generation is None or look.generation.refused):
        state.gone_since = state.gone_since if state.gone_since is not None else now
        state.unready_since = None
        if now - state.gone_since >= options.start_grace:
            return event(server, "port_gone", f"the port refused connections for {now - state.gone_since:.0f} s", look, state)
        return None
    state.gone_since = None
    stalled = _track_tokens(state, counters, now)
    generation = look.generation
    if generation is None or generation.ok:
        state.failed.clear()
        state.unready_since = None
    elif generation.status == 503:
        state.unready_since = state.unready_since if state.unready_since is not None else now
        if now - state.unready_since >= options.start_grace:
            return event(server, "never_ready", f"generation answered 503 (not ready) for {now - state.unready_since:.0f} s", look, state)
    else:
        state.unready_since = None
        state.failed.append(generation.describe())
        if len(state.failed) >= options.failures:
            what = "timed out" if generation.status is None else "failed"
            times = f", {len(state.failed)} times in a row" if len(state.failed) > 1 else ""
            return event(server, "generation_failed", f"a one-token generation {what}{times}", look, state)
    if counters is not None and stalled is not None and stalled >= options.stall_for:
        summary = f"{counters.running:g} requests running and no token generated for {stalled:.0f} s"
        return event(server, "tokens_stalled", summary, look, state)
    return None


def _track_tokens(state: ServerState, counters: Counters | None, now: float) -> float | None:
    """Seconds the token counter stood still with requests running (None: not stalled)."""
    if counters is None:
        state.stalled_since = None
        return None
    if tokens_moved(state, counters) or state.tokens is None:
        state.tokens_moved_at = now
    state.tokens = counters.tokens
    if counters.running <= 0 or state.tokens_moved_at == now:
        state.stalled_since = None if counters.running <= 0 else now
        return None
    state.stalled_since = state.stalled_since if state.stalled_since is not None else now
    return now - state.stalled_since


def event(server: Server, condition: str, summary: str, look: Look, state: ServerState) -> dict[str, Any]:
    """The event of a server that stopped serving: host, condition, evidence."""
    evidence: dict[str, Any] = {"metrics": look.metrics.describe()}
    if look.counters is not None:
        evidence["requests_running"] = look.counters.running
        evidence["generation_tokens_total"] = look.counters.tokens
        if state.tokens_moved_at is not None:
            evidence["seconds_since_a_token"] = round(look.at - state.tokens_moved_at, 1)
    if look.generation is not None:
        evidence["generation"] = look.generation.describe()
    if state.failed:
        evidence["failed_generations"] = list(state.failed)
    return {
        "inferops": {
            "source": NAME,
            "host": server.host,
            "url": server.url,
            "engine": server.engine,
            "condition": condition,
            "summary": f"{server.host} ({server.engine}, {server.url}) is not serving: {summary}",
            "evidence": evidence,
            "observed_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds"),
        },
        "meta": {"hosts": server.host},
    }


# --------------------------------------------------------------------------------------------------
# HTTP (in threads: urllib blocks)


def http_call(url: str, timeout: float, payload: Mapping[str, Any] | None = None, api_key: str = "") -> Answer:
    headers = {"Content-Type": "application/json"} if payload is not None else {}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, headers=headers, method="GET" if payload is None else "POST")
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return Answer(response.status, response.read(1 << 20).decode("utf-8", "replace"), seconds=time.monotonic() - started)
    except urllib.error.HTTPError as error:
        return Answer(error.code, error.read(4096).decode("utf-8", "replace"), seconds=time.monotonic() - started)
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        seconds = time.monotonic() - started
        if isinstance(reason, TimeoutError) or "timed out" in str(reason):
            return Answer(None, error=f"no answer within {timeout:g} s", seconds=seconds)
        return Answer(None, error=f"{type(reason).__name__}: {reason}", seconds=seconds, refused=True)


def is_sleeping(body: str) -> bool:
    """vLLM's /is_sleeping answer, ``{"is_sleeping": true}``; anything else is awake."""
    try:
        found = json.loads(body)
    except ValueError:
        return False
    return isinstance(found, dict) and found.get("is_sleeping") is True


def generation_request(server: Server, model: str, prompt: str) -> tuple[str, dict[str, Any]]:
    """(path, body) of a one-token generation on the server's engine."""
    path = ENGINES[server.engine].generate_path
    if path == NATIVE_GENERATE_PATH:
        return path, {"text": prompt, "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
    return path, {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0}


class Queue(Protocol):
    async def put(self, item: Any) -> None: ...


class Watch:
    """The looks at one server, every interval, and the events they lead to."""

    def __init__(self, server: Server, options: Options, pool: ThreadPoolExecutor) -> None:
        self.server = server
        self.options = options
        self.pool = pool
        self.state = ServerState()
        self.model = server.model
        # whether the server has a sleep mode (vLLM's /is_sleeping): asked (None), yes, or no (404: not again)
        self.sleep_path = ENGINES[server.engine].sleep_path
        self.sleep_route: bool | None = None if self.sleep_path else False
        self.asleep = False

    async def call(self, path: str, timeout: float, payload: Mapping[str, Any] | None = None, api_key: str = "") -> Answer:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, http_call, self.server.url + path, timeout, payload, api_key)

    async def sleeping(self) -> Answer | None:
        """vLLM's sleep state: the /is_sleeping answer when the server sleeps, else None."""
        if self.sleep_route is False:
            return None
        answer = await self.call(str(self.sleep_path), self.options.request_timeout, api_key=self.server.api_key)
        if answer.status == 404:
            self.sleep_route = False
            return None
        self.sleep_route = self.sleep_route or answer.ok
        asleep = answer.ok and is_sleeping(answer.body)
        if asleep != self.asleep:
            LOGGER.info("%s: %s %s", NAME, self.server.host, "sleeps (vLLM sleep mode): no generation while it sleeps" if asleep else "is awake")
            self.asleep = asleep
        return answer if asleep else None

    async def look(self) -> Look:
        asleep = await self.sleeping()
        if asleep is not None:
            return Look(at=time.monotonic(), metrics=asleep, counters=None, sleeping=True)
        metrics = await self.call("/metrics", self.options.request_timeout)
        counters = parse_metrics(metrics.body, self.server.engine) if metrics.ok else None
        look = Look(at=time.monotonic(), metrics=metrics, counters=counters)
        if not needs_generation(self.state, look):
            return look
        generation = await self.generate()
        if not generation.ok and not generation.refused and generation.status != 503:
            # the evidence: what the server counts once the generation failed (a held one runs still)
            metrics = await self.call("/metrics", self.options.request_timeout)
            counters = parse_metrics(metrics.body, self.server.engine) if metrics.ok else counters
        return Look(at=time.monotonic(), metrics=metrics, counters=counters, generation=generation)

    async def generate(self) -> Answer:
        if ENGINES[self.server.engine].generate_path != NATIVE_GENERATE_PATH and not self.model:
            models = await self.call("/v1/models", self.options.request_timeout, api_key=self.server.api_key)
            if not models.ok:
                return models
            self.model = served_model(models.body)
        path, body = generation_request(self.server, self.model, self.options.prompt)
        return await self.call(path, self.options.generation_timeout, body, self.server.api_key)

    async def held_by_a_rollout(self) -> bool:
        """A rollout holds the host (its lease, read with lease_command): what looked like not serving is its work."""
        if not self.options.lease_command:
            return False
        loop = asyncio.get_running_loop()
        argv = lease_argv(self.options.lease_command, self.server)
        lease, problem = await loop.run_in_executor(self.pool, read_lease, argv, self.options.request_timeout)
        if problem:
            LOGGER.warning("%s: %s: %s; the event is raised", NAME, self.server.host, problem)
        holder = live_holder(lease, time.time(), self.options.lease_stale)
        if holder:
            LOGGER.warning("%s: %s is held by a rollout (%s): no event", NAME, self.server.host, holder)
        return holder is not None

    async def run(self, queue: Queue, first_delay: float) -> None:
        await asyncio.sleep(first_delay)
        while True:
            started = time.monotonic()
            if started >= self.state.quiet_until:
                found = assess(self.state, await self.look(), self.options, self.server)
                if found is not None and await self.held_by_a_rollout():
                    found, self.state = None, ServerState()
                if found is not None:
                    # in the rulebook's log too: a rule's throttle keeps an event from its action, not from the record
                    LOGGER.warning("%s: not serving: %s", NAME, json.dumps(found["inferops"], sort_keys=True))
                    await queue.put(found)
                    self.state = ServerState(quiet_until=time.monotonic() + self.options.quiet_period)
            await asyncio.sleep(max(0.0, self.options.interval - (time.monotonic() - started)))


def lease_argv(command: tuple[str, ...], server: Server) -> list[str]:
    address = urllib.parse.urlsplit(server.url).hostname or ""
    return [word.replace("{host}", server.host).replace("{address}", address).replace("{unit}", server.unit) for word in command]


def read_lease(argv: list[str], timeout: float) -> tuple[dict[str, Any] | None, str]:
    """The lease the command printed (None when the host has none), or None and why it could not be read."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"the lease command failed: {exc}"
    if done.returncode != 0:
        # no lease file: the host is held by nobody (cat and ssh say so on stderr)
        said = done.stderr.strip()
        return None, "" if "No such file" in said else f"the lease command exited with {done.returncode}: {said[-200:]}"
    try:
        lease = json.loads(done.stdout)
    except ValueError:
        return None, "the lease command printed no lease"
    return (lease, "") if isinstance(lease, dict) else (None, "the lease command printed no lease")


def live_holder(lease: Mapping[str, Any] | None, now: float, stale_after: float) -> str | None:
    """The run that holds the host, when its heartbeat is fresh; None otherwise."""
    if not lease or not isinstance(lease.get("heartbeat_at"), (int, float)):
        return None
    if now - float(lease["heartbeat_at"]) > stale_after:
        return None
    return f"run {lease.get('run_id')} from {lease.get('user') or 'someone'}@{lease.get('controller') or 'an unknown controller'}"


def served_model(body: str) -> str:
    """The first model id of a /v1/models answer ("" when there is none)."""
    try:
        data = json.loads(body).get("data") or []
        return str(data[0]["id"])
    except (ValueError, AttributeError, LookupError, TypeError):
        return ""


async def main(queue: Queue, args: dict[str, Any]) -> None:
    """Watch every server until cancelled; looks at the servers are spread over the interval."""
    options = check_options(args)
    count = len(options.servers)
    with ThreadPoolExecutor(max_workers=min(64, count), thread_name_prefix=NAME) as pool:
        watches = [Watch(server, options, pool) for server in options.servers]
        await asyncio.gather(*(watch.run(queue, n * options.interval / count) for n, watch in enumerate(watches)))


if __name__ == "__main__":
    import sys

    class PrintQueue:
        async def put(self, item: Any) -> None:
            print(json.dumps(item), flush=True)

    asyncio.run(main(PrintQueue(), json.loads(sys.argv[1])))
