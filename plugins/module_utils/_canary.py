# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The performance canary: a short, fixed load through the server's OpenAI-compatible API, measured
from the stream, judged against the host's own last passing canaries.

Private to the collection; may change at any time. Standard library only, no Ansible imports (runs
on the managed host).

Three parts, each usable alone:

* the load (``run_load``): N streaming ``/v1/completions`` requests at concurrency C, on loopback
  only, each with a fixed prompt length and ``max_tokens`` with ``ignore_eos``; per request the time
  to the first token and the gaps between the tokens as they arrive; aggregated to output tokens per
  second (all output tokens over the wall time of the load), TTFT and ITL median and p90, errors. The
  server's own figures come from ``/metrics`` read before and after (``parse_prometheus``,
  ``server_figures``): the deltas of the ``_sum`` and ``_count`` of its TTFT and ITL histograms.
* the judge (``judge``): relative thresholds in the style of Keptn's quality gates against the
  median of the last K passing canaries of the same host, hardware and model; ``pass``, ``fail`` or
  ``inconclusive`` (no baseline, too few samples, errors in the load), with a line per metric.
* the store (``read_store``, ``record``, ``write_store``): the canaries of one unit, in JSON under the
  collection's state directory, bounded, written atomically (``_run_record.write``).
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import math
import os
import re
import statistics
import threading
import time
import typing as t
import urllib.parse

from ansible_collections.inferops.runbooks.plugins.module_utils import _engines, _run_record

STORE_VERSION = 1
STORE_KIND = "inferops.canary"
STORE_LIMIT = 50  # canaries kept per unit, newest last

# metric -> (figure in a run's figures, the better direction, default threshold in percent, label, unit)
METRICS: dict[str, tuple[str, str, float | None, str, str]] = {
    "throughput": ("output_tokens_per_s", "higher", -10.0, "decode", "tok/s"),
    "ttft_p90": ("ttft_p90_s", "lower", 25.0, "TTFT p90", "s"),
    "itl_p90": ("itl_p90_s", "lower", 25.0, "ITL p90", "s"),
    "ttft_median": ("ttft_median_s", "lower", None, "TTFT median", "s"),
    "itl_median": ("itl_median_s", "lower", None, "ITL median", "s"),
}
DEFAULT_THRESHOLDS: dict[str, float | None] = {name: spec[2] for name, spec in METRICS.items()}
# The noise floor of each metric, in its own unit (seconds, tokens per second): a change smaller than
# this is never a failure, however large it is relative to the baseline. On a shared machine a TTFT of
# 50 ms moves by more than 25 % from one run to the next; a relative threshold alone fails healthy
# servers. Given in milliseconds for the latencies (FLOOR_UNITS), as the role variables take them.
DEFAULT_FLOORS: dict[str, float] = {"throughput": 0.0, "ttft_p90": 0.030, "itl_p90": 0.003, "ttft_median": 0.030, "itl_median": 0.003}
FLOOR_UNITS = {"tok/s": ("tok/s", 1.0), "s": ("ms", 0.001)}

Figures = dict[str, t.Any]


class CanaryError(ValueError):
    """A canary that cannot be run as asked (a URL off loopback, a bad threshold)."""


# --------------------------------------------------------------------------------------------------
# Statistics


def percentile(values: t.Sequence[float], fraction: float) -> float | None:
    """The ``fraction`` quantile with linear interpolation between closest ranks; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _rounded(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


# --------------------------------------------------------------------------------------------------
# The load


class LoadSpec(t.NamedTuple):
    requests: int = 16
    concurrency: int = 4
    prompt_tokens: int = 512
    max_tokens: int = 128
    timeout: float = 120.0  # seconds one request may take, whole
    warmup: int | None = None  # unmeasured requests sent first; None: one round (concurrency)


# The first requests after a start pay one-time costs (kernels chosen and compiled for the batch's
# shapes, allocator pools grown): a canary measured from them judges the start, not the server.
WARMUP_MAX_TOKENS = 16


def warmup_requests(spec: LoadSpec) -> int:
    return min(spec.concurrency, spec.requests) if spec.warmup is None else spec.warmup


def check_spec(spec: LoadSpec) -> None:
    for name in ("requests", "concurrency", "prompt_tokens", "max_tokens"):
        value = getattr(spec, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise CanaryError(f"{name} must be an integer >= 1, got {value!r}")
    if spec.warmup is not None and (not isinstance(spec.warmup, int) or isinstance(spec.warmup, bool) or spec.warmup < 0):
        raise CanaryError(f"warmup must be an integer >= 0, got {spec.warmup!r}")
    if not spec.timeout > 0:
        raise CanaryError(f"timeout must be a number of seconds > 0, got {spec.timeout!r}")


def loopback_target(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a base URL, refused unless the host is loopback: the canary loads only
    the server it runs beside, never anything across the network."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CanaryError(f"the canary's URL must be an http:// or https:// URL with a host, got {url!r}")
    host = parts.hostname
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise CanaryError(f"the canary loads only a server on loopback (127.0.0.0/8, ::1, localhost), not {host!r}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise CanaryError(f"the canary's URL has a bad port: {url!r}") from exc
    return parts.scheme, host, port


def prompt_for(index: int, prompt_tokens: int) -> str:
    """A prompt of about ``prompt_tokens`` tokens (one common word is one token for the usual
    tokenizers), opened by the request's number so that no two requests share a cached prefix."""
    return f"{index} " + " ".join(["hello"] * max(0, prompt_tokens - 1))


class _Target:
    def __init__(self, url: str, api_key: str | None, timeout: float) -> None:
        self.scheme, self.host, self.port = loopback_target(url)
        self.base_path = urllib.parse.urlsplit(url).path.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    def connection(self) -> http.client.HTTPConnection:
        if self.scheme == "https":
            import ssl  # only https needs it

            # loopback: the certificate names the host's public name, not 127.0.0.1
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            return http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=context)
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def headers(self, json_body: bool = False) -> dict[str, str]:
        headers = {"Accept": "application/json" if not json_body else "text/event-stream"}
        if json_body:
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def get(self, path: str, auth: bool = True) -> tuple[int, bytes]:
        conn = self.connection()
        try:
            headers = self.headers() if auth else {}
            conn.request("GET", self.base_path + path, headers=headers)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()


def served_model(url: str, api_key: str | None = None, timeout: float = 30.0) -> str:
    """The first model ``/v1/models`` lists; raises CanaryError saying why there is none."""
    try:
        status, body = _Target(url, api_key, timeout).get("/v1/models")
    except (OSError, http.client.HTTPException) as exc:
        raise CanaryError(f"/v1/models could not be read: {exc}") from exc
    if status != 200:
        raise CanaryError(f"/v1/models answered {status}")
    try:
        data = json.loads(body)["data"]
        return str(data[0]["id"])
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise CanaryError(f"/v1/models lists no model ({exc!r})") from exc


def stream_one(target: _Target, model: str, index: int, spec: LoadSpec, clock: t.Callable[[], float] = time.monotonic) -> dict[str, t.Any]:
    """One streaming completion, timed: {ok, error, ttft_s, itl_s (gaps), tokens, chunks, seconds}."""
    payload = {
        "model": model,
        "prompt": prompt_for(index, spec.prompt_tokens),
        "max_tokens": spec.max_tokens,
        "min_tokens": spec.max_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    sample: dict[str, t.Any] = {"index": index, "ok": False, "error": None, "ttft_s": None, "itl_s": [], "tokens": 0, "chunks": 0}
    arrivals: list[float] = []
    usage_tokens: int | None = None
    started = clock()
    conn = target.connection()
    try:
        conn.request("POST", target.base_path + "/v1/completions", body=json.dumps(payload), headers=target.headers(json_body=True))
        response = conn.getresponse()
        if response.status != 200:
            sample["error"] = f"HTTP {response.status}: {response.read(300).decode('utf-8', 'replace').strip()}"
            return sample
        done = False
        while not done:
            raw = response.readline()
            if not raw:
                break
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            try:
                event = json.loads(data)
            except ValueError:
                sample["error"] = f"not an event: {data[:120]!r}"
                return sample
            if isinstance(event, dict) and event.get("error"):
                sample["error"] = f"error event: {str(event['error'])[:200]}"
                return sample
            choices = event.get("choices") if isinstance(event, dict) else None
            if isinstance(choices, list) and any(isinstance(c, dict) and c.get("text") for c in choices):
                arrivals.append(clock())
            usage = event.get("usage") if isinstance(event, dict) else None
            if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
                usage_tokens = usage["completion_tokens"]
        if not done:
            sample["error"] = "the stream ended without [DONE]"
            return sample
    except (OSError, http.client.HTTPException) as exc:
        sample["error"] = f"{type(exc).__name__}: {exc}"
        return sample
    finally:
        conn.close()
        sample["seconds"] = round(clock() - started, 4)
        sample["chunks"] = len(arrivals)
        sample["tokens"] = usage_tokens if usage_tokens is not None else len(arrivals)
    if not arrivals:
        sample["error"] = "no token in the stream"
        return sample
    sample["ttft_s"] = round(arrivals[0] - started, 5)
    sample["itl_s"] = [round(later - earlier, 5) for earlier, later in zip(arrivals, arrivals[1:])]
    sample["ok"] = True
    return sample


def run_load(
    url: str,
    spec: LoadSpec,
    api_key: str | None = None,
    model: str | None = None,
    engine: str | None = None,
    metrics: bool = True,
    clock: t.Callable[[], float] = time.monotonic,
) -> dict[str, t.Any]:
    """The canary's load against the server at ``url`` (loopback only): its figures, every sample,
    and the server's own figures (None when ``/metrics`` has none). Raises CanaryError when it cannot
    start (a URL off loopback, no model to name)."""
    check_spec(spec)
    target = _Target(url, api_key, spec.timeout)
    if not model:
        model = served_model(url, api_key, min(spec.timeout, 30.0))
    warmup = warmup_requests(spec)
    warmup_spec = spec._replace(max_tokens=min(spec.max_tokens, WARMUP_MAX_TOKENS))
    warmup_started = clock()
    warmed = _streams(target, model, range(spec.requests, spec.requests + warmup), warmup_spec, clock)
    warmup_seconds = clock() - warmup_started
    before = _scrape(target) if metrics else None
    started, started_at = clock(), time.time()
    done = _streams(target, model, range(spec.requests), spec, clock)
    wall = clock() - started
    after = _scrape(target) if metrics else None
    figures = aggregate(done, wall)
    server = server_figures(before, after, engine) if before is not None and after is not None else None
    return {
        "model": model,
        "url": url,
        "spec": spec._asdict(),
        "figures": figures,
        "server": server,
        "samples": done,
        "started_at": round(started_at, 3),
        "warmup": {
            "requests": warmup,
            "ok_requests": sum(1 for sample in warmed if sample.get("ok")),
            "max_tokens": warmup_spec.max_tokens,
            "seconds": round(warmup_seconds, 4),
        },
    }


def _streams(target: _Target, model: str, indices: t.Sequence[int], spec: LoadSpec, clock: t.Callable[[], float]) -> list[dict[str, t.Any]]:
    """One streaming request per index, ``spec.concurrency`` at once; the samples in index order."""
    samples: dict[int, dict[str, t.Any]] = {}
    pending = iter(indices)
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                index = next(pending, None)
            if index is None:
                return
            try:
                sample = stream_one(target, model, index, spec, clock)
            except Exception as exc:  # a bug must not hang the load: counted as an error
                sample = {"index": index, "ok": False, "error": f"{type(exc).__name__}: {exc}", "tokens": 0, "itl_s": []}
            with lock:
                samples[index] = sample

    threads = [threading.Thread(target=worker, name=f"canary-{n}", daemon=True) for n in range(min(spec.concurrency, len(indices)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [samples[index] for index in indices if index in samples]


def aggregate(samples: t.Sequence[t.Mapping[str, t.Any]], wall_seconds: float) -> Figures:
    """The load's figures from its samples and its wall time."""
    ok = [sample for sample in samples if sample.get("ok")]
    tokens = sum(int(sample.get("tokens") or 0) for sample in ok)
    ttfts = [float(sample["ttft_s"]) for sample in ok if sample.get("ttft_s") is not None]
    gaps = [float(gap) for sample in ok for gap in sample.get("itl_s") or []]
    errors = [str(sample.get("error")) for sample in samples if not sample.get("ok")]
    return {
        "requests": len(samples),
        "ok_requests": len(ok),
        "errors": len(errors),
        "error_examples": sorted(set(errors))[:3],
        "output_tokens": tokens,
        "wall_s": round(wall_seconds, 4),
        "output_tokens_per_s": round(tokens / wall_seconds, 2) if wall_seconds > 0 and tokens else None,
        "ttft_median_s": _rounded(percentile(ttfts, 0.5)),
        "ttft_p90_s": _rounded(percentile(ttfts, 0.9)),
        "itl_median_s": _rounded(percentile(gaps, 0.5), 5),
        "itl_p90_s": _rounded(percentile(gaps, 0.9), 5),
        "itl_samples": len(gaps),
    }


# --------------------------------------------------------------------------------------------------
# The server's own figures (/metrics, Prometheus text format)

_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Samples by metric name, each (labels, value); comments and lines that do not parse are skipped."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        try:
            value = float(match["value"])
        except ValueError:
            continue
        labels = {key: value.replace('\\"', '"').replace("\\\\", "\\") for key, value in _LABEL.findall(match["labels"] or "")}
        samples.setdefault(match["name"], []).append((labels, value))
    return samples


def _scrape(target: _Target) -> dict[str, list[tuple[dict[str, str], float]]] | None:
    try:
        status, body = target.get("/metrics", auth=False)
    except (OSError, http.client.HTTPException):
        return None
    return parse_prometheus(body.decode("utf-8", "replace")) if status == 200 else None


def _total(samples: t.Mapping[str, list[tuple[dict[str, str], float]]], name: str) -> float | None:
    values = samples.get(name)
    return None if values is None else sum(value for _labels, value in values)


def _buckets(samples: t.Mapping[str, list[tuple[dict[str, str], float]]], family: str) -> dict[float, float]:
    buckets: dict[float, float] = {}
    for labels, value in samples.get(family + "_bucket", []):
        try:
            bound = float(labels.get("le", ""))
        except ValueError:
            continue
        buckets[bound] = buckets.get(bound, 0.0) + value
    return buckets


def histogram_quantile(fraction: float, buckets: t.Mapping[float, float]) -> float | None:
    """Prometheus' ``histogram_quantile`` over cumulative bucket counts (upper bound -> count)."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = fraction * buckets[bounds[-1]]
    previous_bound, previous_count = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return previous_bound
            if count == previous_count:
                return bound
            return previous_bound + (bound - previous_bound) * (rank - previous_count) / (count - previous_count)
        previous_bound, previous_count = bound, count
    return bounds[-1]


def server_figures(
    before: t.Mapping[str, list[tuple[dict[str, str], float]]],
    after: t.Mapping[str, list[tuple[dict[str, str], float]]],
    engine: str | None = None,
) -> Figures | None:
    """The server's TTFT and ITL over the load: means from the deltas of ``_sum`` and ``_count`` and
    p90 from the deltas of the buckets; None when the server exports neither histogram."""
    drivers = _engines.drivers_for(engine)
    figures: Figures = {}
    for which in ("ttft", "itl"):
        for name in (family for driver in drivers for family in driver.histograms[which]):
            count_after, sum_after = _total(after, name + "_count"), _total(after, name + "_sum")
            if count_after is None or sum_after is None:
                continue
            count = count_after - (_total(before, name + "_count") or 0.0)
            total = sum_after - (_total(before, name + "_sum") or 0.0)
            earlier = _buckets(before, name)
            delta = {bound: value - earlier.get(bound, 0.0) for bound, value in _buckets(after, name).items()}
            figures[which] = {
                "metric": name,
                "count": round(count, 3),
                "mean_s": round(total / count, 5) if count > 0 else None,
                "p90_s": _rounded(histogram_quantile(0.9, delta), 5) if count > 0 else None,
            }
            break
    return figures or None


# --------------------------------------------------------------------------------------------------
# The server's own figures from its journal: each engine's decode figures (its driver's decode_log:
# SGLang's decode batch lines, vLLM's periodic stats lines).


def decode_line(message: str) -> dict[str, float] | None:
    """The figures of one line in which an engine logged its decoding: ``gen_throughput``
    (tokens/s), ``running`` and ``queue`` (requests), and what else the engine logs there; None
    when the line is no such line."""
    found = _decoded(message)
    return found[1] if found else None


def _decoded(message: str) -> tuple[_engines.EngineDriver, dict[str, float]] | None:
    for driver in _engines.DRIVERS.values():
        figures = driver.decode_log.parse(message)
        if figures is not None:
            return driver, figures
    return None


def journal_figures(messages: t.Iterable[str]) -> Figures | None:
    """What the server logged of its decoding over the canary: the median, lowest and highest gen
    throughput of its decode batch lines, the median of its running requests and the most queued;
    None when it logged none (vLLM logs its stats every 10 s: a short canary may see none)."""
    messages = list(messages)
    decoded = [found for found in map(_decoded, messages) if found is not None]
    if not decoded:
        return None
    found = [figures for _driver, figures in decoded]
    rates = [figures["gen_throughput"] for figures in found]
    running = [figures["running"] for figures in found if "running" in figures]
    queued = [figures["queue"] for figures in found if "queue" in figures]
    return {
        "source": decoded[0][0].decode_log.source,
        "lines": len(found),
        "gen_throughput_median": _rounded(percentile(rates, 0.5), 2),
        "gen_throughput_min": min(rates),
        "gen_throughput_max": max(rates),
        "running_median": _rounded(percentile(running, 0.5), 1),
        "queue_max": max(queued) if queued else None,
    }


def journal_messages(text: str, since: float | None = None) -> list[str]:
    """The messages of ``journalctl -o json`` output (one entry a line), those logged at or after
    ``since`` (seconds since the epoch) when given; a message journald kept as bytes is decoded."""
    messages = []
    for raw in text.splitlines():
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        if since is not None:
            try:
                if int(entry.get("__REALTIME_TIMESTAMP", 0)) < since * 1e6:
                    continue
            except (TypeError, ValueError):
                continue
        message = entry.get("MESSAGE")
        if isinstance(message, list):
            message = bytes(value for value in message if isinstance(value, int) and 0 <= value < 256).decode("utf-8", "replace")
        if isinstance(message, str):
            messages.append(message)
    return messages


def _decode_log(source: t.Any) -> _engines.DecodeLog:
    """The decode log a report's figures came from (SGLang's for reports from before it was named)."""
    logs = [driver.decode_log for driver in _engines.DRIVERS.values()]
    return next((log for log in logs if log.source == source), logs[0])


def journal_line(figures: t.Mapping[str, t.Any] | None) -> str | None:
    """``server log: gen throughput 812 tok/s (median of 6 decode lines, 790-830; running 4, queued 0 at most)``."""
    if not figures or figures.get("gen_throughput_median") is None:
        return None
    spread = f", {format_value(figures['gen_throughput_min'], 'tok/s')}-{format_value(figures['gen_throughput_max'], 'tok/s')}" if figures["lines"] > 1 else ""
    running = f"; running {figures['running_median']:g}" if figures.get("running_median") is not None else ""
    queued = f", queued {figures['queue_max']:g} at most" if figures.get("queue_max") is not None else ""
    log = _decode_log(figures.get("source"))
    count = f"median of {figures['lines']} {log.line_word}s" if figures["lines"] > 1 else f"1 {log.line_word}"
    count += f", {log.note}" if log.note else ""
    return f"server log: gen throughput {format_value(figures['gen_throughput_median'], 'tok/s')} tok/s ({count}{spread}{running}{queued})"


# --------------------------------------------------------------------------------------------------
# The judge


def parse_thresholds(given: t.Mapping[str, t.Any] | None) -> dict[str, float | None]:
    """The thresholds in percent, the defaults overridden by ``given``: a number or a Keptn-style
    string (``-10%``, ``+25%``, ``>= -10%``, ``<= +25%``) per metric, or None to leave it unjudged.
    A higher-is-better metric (throughput) fails below its threshold, the others above theirs."""
    thresholds = dict(DEFAULT_THRESHOLDS)
    for name, raw in (given or {}).items():
        if name not in METRICS:
            raise CanaryError(f"no canary metric {name!r} (one of {', '.join(METRICS)})")
        if raw is None or raw == "":
            thresholds[name] = None
            continue
        if isinstance(raw, bool):
            raise CanaryError(f"threshold of {name} must be a percentage, got {raw!r}")
        if isinstance(raw, (int, float)):
            value = float(raw)
        else:
            text = str(raw).strip()
            match = re.fullmatch(r"(?:(>=|<=)\s*)?([+-]?\d+(?:\.\d+)?)\s*%?", text)
            if not match:
                raise CanaryError(f"threshold of {name} must be a percentage such as '-10%' or '+25%', got {raw!r}")
            operator = match[1]
            expected = ">=" if METRICS[name][1] == "higher" else "<="
            if operator and operator != expected:
                raise CanaryError(f"threshold of {name} must be '{expected} N%' ({METRICS[name][3]} is better {METRICS[name][1]}), got {raw!r}")
            value = float(match[2])
        if not math.isfinite(value):
            raise CanaryError(f"threshold of {name} must be a finite percentage, got {raw!r}")
        thresholds[name] = value
    return thresholds


def parse_floors(given: t.Mapping[str, t.Any] | None) -> dict[str, float]:
    """The noise floors in the metric's unit (seconds for the latencies, tokens per second for the
    throughput), the defaults overridden by ``given``: per metric a number of milliseconds (``50``,
    ``"50ms"``, ``"0.05s"``) for TTFT and ITL, of tokens per second (``20``, ``"20 tok/s"``) for the
    throughput; 0 or null switches the floor off."""
    floors = dict(DEFAULT_FLOORS)
    for name, raw in (given or {}).items():
        if name not in METRICS:
            raise CanaryError(f"no canary metric {name!r} (one of {', '.join(METRICS)})")
        unit = METRICS[name][4]
        word, scale = FLOOR_UNITS[unit]
        if raw is None or raw == "":
            floors[name] = 0.0
            continue
        if isinstance(raw, bool):
            raise CanaryError(f"floor of {name} must be a number of {word}, got {raw!r}")
        if isinstance(raw, (int, float)):
            value = float(raw) * scale
        else:
            match = re.fullmatch(r"\+?(\d+(?:\.\d+)?)\s*(ms|s|tok/s)?", str(raw).strip())
            suffix = match[2] if match else None
            if not match or (unit == "s" and suffix == "tok/s") or (unit == "tok/s" and suffix in ("ms", "s")):
                raise CanaryError(f"floor of {name} must be a number of {word} >= 0 such as {'50 or 50ms' if unit == 's' else '20'}, got {raw!r}")
            value = float(match[1]) * (1.0 if suffix == "s" else scale)
        if not math.isfinite(value) or value < 0:
            raise CanaryError(f"floor of {name} must be a finite number of {word} >= 0, got {raw!r}")
        floors[name] = value
    return floors


def same_context(entry: t.Mapping[str, t.Any], host: str, hardware: str, model: str) -> bool:
    return entry.get("host") == host and entry.get("hardware") == hardware and entry.get("model") == model


def baselines(entries: t.Sequence[t.Mapping[str, t.Any]], host: str, hardware: str, model: str, count: int) -> list[t.Mapping[str, t.Any]]:
    """The last ``count`` canaries that count as a baseline (passed, or the first one, inconclusive
    for want of a baseline) on the same host, hardware and model, whatever the configuration."""
    kept = [entry for entry in entries if entry.get("baseline") and same_context(entry, host, hardware, model)]
    return kept[-count:] if count > 0 else []


def judge(
    figures: t.Mapping[str, t.Any],
    history: t.Sequence[t.Mapping[str, t.Any]],
    host: str,
    hardware: str,
    model: str,
    thresholds: t.Mapping[str, float | None] | None = None,
    baseline_count: int = 5,
    min_requests: int = 4,
    min_itl_samples: int = 10,
    floors: t.Mapping[str, float] | None = None,
    seed_baseline: bool = True,
) -> dict[str, t.Any]:
    """The verdict of a canary's figures against the history of the unit's canaries.

    ``{"verdict": pass|fail|inconclusive, "reason": str, "baseline": {metric: value}, "baseline_runs": n,
    "metrics": [{name, label, value, baseline, change_pct, threshold_pct, ok}], "lines": [str],
    "becomes_baseline": bool}``. A run with an error, or with fewer than ``min_requests`` completed
    requests or ``min_itl_samples`` token gaps, is inconclusive: its figures are not compared. A run
    without a baseline is inconclusive and becomes the baseline. Each baseline figure is the median
    of the last ``baseline_count`` baselines (one outlier among them does not move it). A change
    smaller than the metric's floor (``floors``, in the metric's unit; DEFAULT_FLOORS) is never a
    failure, however large relative to the baseline. Without ``seed_baseline`` (a canary of a server
    in service, the precheck's) a canary without a baseline does not become one.
    """
    limits = parse_thresholds(None) if thresholds is None else {**DEFAULT_THRESHOLDS, **thresholds}
    noise = {**DEFAULT_FLOORS, **(floors or {})}
    result: dict[str, t.Any] = {
        "verdict": "inconclusive",
        "reason": "",
        "baseline": {},
        "baseline_runs": 0,
        "metrics": [],
        "lines": [],
        "becomes_baseline": False,
    }
    problems = []
    if figures.get("errors"):
        problems.append(f"{figures['errors']} of {figures.get('requests')} requests failed ({'; '.join(figures.get('error_examples') or [])})")
    if int(figures.get("ok_requests") or 0) < min_requests:
        problems.append(f"too few samples: {figures.get('ok_requests') or 0} completed requests, {min_requests} needed")
    elif int(figures.get("itl_samples") or 0) < min_itl_samples:
        problems.append(f"too few samples: {figures.get('itl_samples') or 0} token gaps, {min_itl_samples} needed")
    if problems:
        result["reason"] = "; ".join(problems)
        result["lines"] = [f"inconclusive: {problem}" for problem in problems]
        return result
    chosen = baselines(history, host, hardware, model, baseline_count)
    result["baseline_runs"] = len(chosen)
    if not chosen:
        becomes = "this canary becomes the baseline" if seed_baseline else "a canary of a server in service does not start one"
        result.update(reason=f"no baseline yet for {model} on {host} ({hardware}): {becomes}", becomes_baseline=seed_baseline)
        result["lines"] = [f"inconclusive: {result['reason']}"] + [
            line for name in METRICS if (line := _figure_line(name, figures.get(METRICS[name][0]), None, None, None, None))
        ]
        return result
    failed = []
    for name, (key, better, _default, label, unit) in METRICS.items():
        value = figures.get(key)
        reference = statistics.median(v for e in chosen if isinstance(v := (e.get("figures") or {}).get(key), (int, float))) if _has(chosen, key) else None
        result["baseline"][name] = reference
        limit = limits.get(name)
        change = None if value is None or not reference else (float(value) - reference) / reference * 100.0
        ok: bool | None = None
        floor = float(noise.get(name) or 0.0)
        within_floor = False
        if limit is not None and change is not None:
            ok = change >= limit if better == "higher" else change <= limit
            if not ok and value is not None and reference is not None and abs(float(value) - reference) <= floor:
                ok = within_floor = True  # large relative to the baseline, but within the noise
            if not ok:
                failed.append(name)
        elif limit is not None and value is None:
            problems.append(f"{label} not measured")
        result["metrics"].append(
            {
                "name": name,
                "label": label,
                "unit": unit,
                "value": value,
                "baseline": reference,
                "change_pct": _rounded(change, 1),
                "threshold_pct": limit,
                "floor": floor,
                "within_floor": within_floor,
                "ok": ok,
            }
        )
        line = _figure_line(name, value, reference, change, limit, ok, floor if within_floor else None)
        if line:
            result["lines"].append(line)
    if failed:
        result["verdict"] = "fail"
        result["reason"] = "slower than the baseline: " + ", ".join(METRICS[name][3] for name in failed)
    elif problems:
        result["reason"] = "; ".join(problems)
    else:
        result["verdict"] = "pass"
        result["reason"] = f"within the thresholds of the median of {len(chosen)} baseline canar{'y' if len(chosen) == 1 else 'ies'}"
    return result


def _has(entries: t.Sequence[t.Mapping[str, t.Any]], key: str) -> bool:
    return any(isinstance((entry.get("figures") or {}).get(key), (int, float)) for entry in entries)


def format_value(value: float, unit: str) -> str:
    if unit == "tok/s":
        return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value * 1000:.0f} ms" if value >= 0.01 else f"{value * 1000:.1f} ms"


def _figure_line(
    name: str, value: t.Any, reference: float | None, change: float | None, limit: float | None, ok: bool | None, floor: float | None = None
) -> str | None:
    """``decode 812 tok/s (baseline 1,604, -49%: FAIL)``; ``TTFT p90 85 ms (baseline 80 ms, +6%: ok)``;
    ``TTFT p90 62 ms (baseline 41 ms, +51%: ok, within the 30 ms floor)``."""
    _key, _better, _default, label, unit = METRICS[name]
    if value is None:
        return None
    shown = format_value(float(value), unit)
    shown = f"{shown} {unit}" if unit == "tok/s" else (shown if shown.endswith("ms") else f"{shown} s")
    if reference is None:
        return f"{label} {shown}"
    base = format_value(reference, unit)
    base = base if unit == "tok/s" or base.endswith("ms") else f"{base} s"
    if change is None:
        return f"{label} {shown} (baseline {base})"
    judged = "not judged" if ok is None else ("ok" if ok else "FAIL")
    if floor is not None:
        shown_floor = format_value(floor, unit)
        judged += f", within the {shown_floor}{'' if unit != 's' or shown_floor.endswith('ms') else ' s'}{' tok/s' if unit == 'tok/s' else ''} floor"
    return f"{label} {shown} (baseline {base}, {change:+.0f}%: {judged})"


# --------------------------------------------------------------------------------------------------
# Hardware


def hardware_string(cpuinfo: str, gpu_names: t.Sequence[str] = ()) -> str:
    """What the baseline is kept per: the GPUs (``8x NVIDIA H200``) or, without any, the CPU model and
    its count of logical CPUs (``8x Intel(R) Xeon(R) ...``)."""
    gpus = [name.strip() for name in gpu_names if name.strip()]
    if gpus:
        counted: dict[str, int] = {}
        for name in gpus:
            counted[name] = counted.get(name, 0) + 1
        return ", ".join(f"{n}x {name}" for name, n in sorted(counted.items()))
    models = [line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.lower().startswith("model name") and ":" in line]
    if models:
        return f"{len(models)}x {models[0]}"
    processors = sum(1 for line in cpuinfo.splitlines() if line.startswith("processor"))
    return f"{processors}x unknown CPU" if processors else "unknown"


# --------------------------------------------------------------------------------------------------
# The store


def store_path(unit: str, state_dir: str = _run_record.STATE_DIR) -> str:
    """``<state dir>/<unit>.canary.json``, beside the unit's run record."""
    return _run_record.record_path(f"{unit}.canary", state_dir)


def parse_store(text: str, unit: str) -> list[dict[str, t.Any]]:
    """The entries of a store's text, checked; raises _run_record.RecordError saying what is wrong."""
    try:
        store = json.loads(text)
    except ValueError as exc:
        raise _run_record.RecordError(f"not JSON ({exc})") from None
    if not isinstance(store, dict) or store.get("kind") != STORE_KIND:
        raise _run_record.RecordError("not a canary store of this collection")
    version = store.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version > STORE_VERSION:
        raise _run_record.RecordError(f"of an unknown version {version!r} (this collection reads {STORE_VERSION})")
    if store.get("unit") != unit:
        raise _run_record.RecordError(f"names another unit ({store.get('unit')!r}, not {unit!r})")
    entries = store.get("entries")
    if not isinstance(entries, list) or not all(isinstance(entry, dict) and isinstance(entry.get("figures"), dict) for entry in entries):
        raise _run_record.RecordError("entries is not a list of canaries with figures")
    return entries


def read_store(path: str, unit: str) -> tuple[list[dict[str, t.Any]], str | None]:
    """(entries, None); ([], None) when there is no store; ([], problem) when it cannot be used."""
    entries, problem = _run_record.read_state(path, "the canary store", lambda text: parse_store(text, unit))
    return entries or [], problem


def entry_for(
    run: t.Mapping[str, t.Any], verdict: t.Mapping[str, t.Any], host: str, hardware: str, run_id: str | None = None, now: float | None = None
) -> dict[str, t.Any]:
    """What the store keeps of a canary: its context, figures, the server's figures and its verdict
    (not the samples: the report carries those)."""
    return {
        "at": round(time.time() if now is None else now, 3),
        "run_id": run_id,
        "host": host,
        "hardware": hardware,
        "model": run.get("model"),
        "spec": dict(run.get("spec") or {}),
        "figures": dict(run.get("figures") or {}),
        "server": run.get("server"),
        "journal": run.get("journal"),
        "verdict": verdict.get("verdict"),
        "baseline": verdict.get("verdict") == "pass" or bool(verdict.get("becomes_baseline")),
    }


def write_store(path: str, unit: str, entries: t.Sequence[t.Mapping[str, t.Any]], problem: str | None = None) -> str | None:
    """Write the newest ``STORE_LIMIT`` entries atomically. A store that could not be used is kept
    aside (``<path>.unusable``) before it is replaced; returns that path, or None."""
    aside = None
    if problem and os.path.exists(path):
        aside = path + ".unusable"
        os.replace(path, aside)
    _run_record.write(path, {"version": STORE_VERSION, "kind": STORE_KIND, "unit": unit, "entries": list(entries)[-STORE_LIMIT:]})
    return aside
