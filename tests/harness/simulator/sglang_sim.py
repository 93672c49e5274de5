"""A stand-in for an SGLang (or vLLM) inference server, seen from the outside.

The test fleet runs this file as the systemd unit ``sglang.service`` so the runbook can be exercised
without GPUs. It replays a realistic cold start on stdout (rank-prefixed lines, tqdm bars written with
carriage returns, benign warnings that look alarming), opens its HTTP port only when a real server
would, answers the health, model and generation endpoints the way SGLang does, and can be told to fail
the way real starts fail. Standard library only, Python 3.11, one file.

The SGLang Model Gateway (smg 1.13, the router the tests run on the controller) registers it as a
worker after what it asks of an SGLang server: ``/health`` (its check, repeated every minute),
``/v1/models``, ``/server_info`` and ``/model_info`` (the model and the labels it lists), then
``/v1/loads`` every 10 s (it asks ``/loads?model=`` first, which the simulator does not serve: 404,
and the gateway goes on to ``/v1/loads``); of a vLLM server, ``/health``, ``/v1/models`` and ``/version``. It then
routes ``/generate``, ``/v1/completions`` and ``/v1/chat/completions`` to it
(tests/unit/harness/test_simulator_gateway.py). The server must listen beyond its loopback
(``SIM_HOST=0.0.0.0``) for a gateway on another machine.

Environment (the unit reads ``/etc/sglang-sim/scenario.env``; the simulator itself then reads
``$SIM_FAULT_FILE``, default ``/etc/sglang-sim/fault.env``, whose KEY=VALUE lines override it: a fault
injected there is no change of the unit's configuration, as a real server's hang or slow disk is not):

``SIM_SCENARIO``           ok (default) | crash | hang | crash_loop | health_503 | slow_health |
                           unknown_error | ready_then_crash | wedged | engine_dead | replay
``SIM_REPLAY_FILE``        replay: a log file whose lines the process prints as its own, verbatim
``SIM_REPLAY_INTERVAL``    replay: seconds between two lines, default 0.02
``SIM_REPLAY_END``         replay: what the process does after the last line: exit (status 1, default)
                           | hang (until it is stopped)
``SIM_PHASE``              where crash / hang / crash_loop strike: starting | loading_weights |
                           allocating_kv_cache | capturing_cuda_graphs | warming_up
                           (default loading_weights; crash_loop: starting)
``SIM_FAILURE``            how crash / crash_loop / ready_then_crash fail: cuda_oom | nccl |
                           scheduler_exception | address_in_use | oom_killed
                           (default cuda_oom; crash_loop and ready_then_crash: scheduler_exception)
``SIM_ENGINE``             sglang (default) | vllm
``SIM_TP``                 tensor-parallel ranks, default 8
``SIM_HOST``, ``SIM_PORT`` listen address, default 127.0.0.1 and 30000
``SIM_API_KEY``            unset by default; when set, requests need ``Authorization: Bearer <key>``:
                           SGLang protects every path but /health* and /metrics, vLLM every /v1/* path
``SIM_LEAK_API_KEY``       1: the server prints its API key, in its arguments and in the last line of a
                           crash's traceback (as a server that echoes its configuration on failure)
``SIM_MODEL``              model path, default /models/DeepSeek-R1
``SIM_SPEED``              multiplier of the default timeline (20 s in all), default 1.0
``SIM_START_SECONDS``, ``SIM_LOAD_SECONDS``, ``SIM_KV_SECONDS``, ``SIM_CAPTURE_SECONDS``,
``SIM_WARMUP_SECONDS``     seconds of one phase, replacing its default times SIM_SPEED
                           (defaults 2, 8, 1, 6, 3)
``SIM_SHARDS``             checkpoint shards in the loading bar, default 163
``SIM_HEALTH_DELAY``       seconds the health endpoints wait before answering, default 0
                           (slow_health: 25)
``SIM_CRASH_AFTER_READY``  seconds between ready and the crash of ready_then_crash, default 3
``SIM_WEDGE_AFTER``        seconds between ready and the failure of wedged and engine_dead, default 0
``SIM_NNODES``             nodes of one multi-node server (SGLang's --nnodes; vLLM: the nodes of its data
                           parallel deployment), default 1
``SIM_NODE_RANK``          this node's rank (--node-rank; vLLM: 0 runs the API server, the others are
                           --headless), default 0
``SIM_DIST_INIT_ADDR``     HOST:PORT where node 0 listens for the others (--dist-init-addr; vLLM:
                           --data-parallel-address and --data-parallel-rpc-port); needed
                           with SIM_NNODES > 1
``SIM_DIST_TIMEOUT``       seconds the rendezvous may take before it fails, default 30
``SIM_PEER_TIMEOUT``       seconds between losing a peer and this node's distributed error, default
                           1.5 (it stands for NCCL's and gloo's timeouts of minutes)
``SIM_RAY``                1 (with SIM_ENGINE=vllm and SIM_NNODES > 1): vLLM over nodes with Ray: node 0 logs
                           the Ray head's start, then vllm serve's, whose placement group waits for every
                           worker node (a rendezvous timeout: ``Cannot provide a placement group ...``); a
                           node of rank >= 1 is a Ray worker (``ray start --address=... --block``): Ray's
                           lines only, no HTTP; crash: its raylet dies at SIM_PHASE's fault point
                           (``Some Ray subprocesses exited unexpectedly:``), as it does once the head is gone
``SIM_PEER_LOSS``          what a node does once it lost a peer: exit (default) | hang
``SIM_GENERATE_SECONDS``   seconds each generation request (/generate, /v1/completions,
                           /v1/chat/completions) takes, default 0: a request in flight is counted
                           as running by ``/get_load``, ``/v1/loads`` and ``/metrics``
``SIM_TTFT_SECONDS``       seconds before a generation's first token, default 0
``SIM_TOKENS_PER_SECOND``  decode speed of one request after its first token, default 0 (no delay);
                           with both, a request of N tokens takes TTFT + (N-1)/speed seconds, and
                           ``/v1/completions`` with ``"stream": true`` sends its tokens as they come
                           (server-sent events, one token an event, ``data: [DONE]`` last; the usage
                           last but one with ``stream_options.include_usage``); ``ignore_eos``
                           generates ``max_tokens`` tokens (else the canned answer ends first). ``/metrics`` carries
                           the TTFT and inter-token latency histograms of the engine
``SIM_MAX_RUNNING``        requests generated at once (SGLang's --max-running-requests, vLLM's
                           --max-num-seqs), default 0 (no limit): the others wait for a slot, and
                           their wait counts in their TTFT
``SIM_ORPHAN_SECONDS``     an engine process (named ``VLLM::EngineCor``, as vLLM's EngineCore shows in /proc)
                           started beside the main process, which ignores SIGTERM, SIGINT and SIGHUP and keeps
                           running this many seconds after the main process is gone, default 0 (no such
                           process). With the unit's ``KillMode=process`` systemd's stop leaves it running
                           (vllm #42017: an orphaned EngineCore keeps its GPU memory)
``SIM_SLEEP_MODE``         1: vLLM's sleep mode (--enable-sleep-mode with VLLM_SERVER_DEV_MODE=1): ``POST /sleep``
                           (200, the weights offloaded), ``POST /wake_up`` (200), ``GET /is_sleeping``
                           (``{"is_sleeping": true|false}``); asleep, /health answers 200 and a generation
                           first wakes the engine (SIM_WAKE_SECONDS, default 1, logged as vLLM logs it).
                           Unset: those paths answer 404, as without dev mode
``SIM_DECODE_LOG_INTERVAL`` decode tokens between two of SGLang's ``Decode batch. #running-req: N,
                           #token: N, token usage: X, gen throughput (token/s): X, #queue-req: N``
                           lines (its --decode-log-interval, counted here in tokens of all the
                           running requests), default 40; 0 logs none

Scenarios and how they end:

* ok: benign warnings on every rank, then ready; SIGTERM exits 0.
* crash (cuda_oom | nccl | scheduler_exception): in SIM_PHASE a rank prints ``Scheduler hit an
  exception: Traceback ...``, the main process ``Received sigquit from a child process ...`` and the
  process SIGKILLs itself (vLLM flavour: ``ERROR`` traceback lines, exit code 1).
  crash address_in_use: uvicorn cannot bind (``ERROR:    [Errno 98] ...``), exit code 1; a real
  port conflict ends the same way in every scenario. crash oom_killed: ``Killed``, then SIGKILL.
* hang: stops in SIM_PHASE, prints nothing more, keeps running (port closed unless the phase is
  warming_up, where HTTP is up and health answers 503).
* crash_loop: crash in SIM_PHASE (default starting) on every start; systemd restarts the unit.
* health_503: the whole start, ready marker included, but health answers 503 forever and generation
  fails with 503.
* slow_health: an ok start whose health endpoints take SIM_HEALTH_DELAY (default 25) seconds.
* unknown_error: an ok start with ``Frobnicator returned error state 7, continuing`` on TP0.
* ready_then_crash: ready, then after SIM_CRASH_AFTER_READY seconds a scheduler exception (CUDA
  illegal memory access), sigquit and SIGKILL.
* wedged: ready, then after SIM_WEDGE_AFTER seconds the scheduler stops without a word (SGLang #6624):
  the process runs, the port answers, /health and /health_generate answer 200, and every generation
  request is taken, counted as running and never answered; the generated-token counter stands still.
* engine_dead: ready, then after SIM_WEDGE_AFTER seconds the engine dies behind a live API server
  (vLLM #39863): its error in the journal, /health still 200, every generation answered 500 at once.

Multi-node mode (SIM_NNODES > 1): SIM_TP counts the ranks of all nodes (``--tp 16`` on
2 nodes: TP0-7 on node 0, TP8-15 on node 1). The nodes really rendezvous over the network: node 0
listens at the port of SIM_DIST_INIT_ADDR, the others connect to it (retrying, as torch's store
client does) and keep the connection; every phase after the first starts only when every node
finished the one before (a barrier over the connections), so node 0 does not finish its start until
all nodes joined and came along. A node that cannot rendezvous within SIM_DIST_TIMEOUT fails with
torch.distributed's timeout error. A node whose peer's connection drops (the peer died) logs, after
SIM_PEER_TIMEOUT, gloo's ``Connection closed by peer`` in a scheduler traceback and exits
(SIM_PEER_LOSS=exit), or NCCL's watchdog timeout on each rank and hangs (hang). Node 0 serves the
real API; the others, once their schedulers are ready, log ``Starting dummy health check server``
and serve a placeholder whose /health and /health_generate answer 200 unconditionally, as SGLang's
engine does. With SIM_ENGINE=vllm the nodes are a vLLM data parallel deployment over nodes:
node 0 (``vllm serve ... --data-parallel-address A --data-parallel-rpc-port P``) binds its API
port at once and listens only once every headless node's engines came along (the handshake); a
node of rank >= 1 (``--headless --data-parallel-start-rank R``) logs ``Launching N data parallel
engine(s) in headless mode, with head node address tcp://A:P.``, its engines' start up to ``init
engine (profile, create kv cache, warmup model) took X seconds``, and never binds or listens on
HTTP. A crash there logs ``EngineCore failed to start.``; a lost peer ``EngineCore encountered a
fatal error.`` with the distributed error, and the process exits 1.
"""

from __future__ import annotations

import contextlib
import datetime
import http
import json
import os
import random
import shlex
import signal
import socket
import socketserver
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import BinaryIO, NoReturn, cast

PHASES = ("starting", "loading_weights", "allocating_kv_cache", "capturing_cuda_graphs", "warming_up")
SERVING = "serving"
DEFAULT_PHASE_SECONDS = {"starting": 2.0, "loading_weights": 8.0, "allocating_kv_cache": 1.0, "capturing_cuda_graphs": 6.0, "warming_up": 3.0}
PHASE_SECONDS_VARS = {
    "starting": "SIM_START_SECONDS",
    "loading_weights": "SIM_LOAD_SECONDS",
    "allocating_kv_cache": "SIM_KV_SECONDS",
    "capturing_cuda_graphs": "SIM_CAPTURE_SECONDS",
    "warming_up": "SIM_WARMUP_SECONDS",
}
SCENARIOS = ("ok", "crash", "hang", "crash_loop", "health_503", "slow_health", "unknown_error", "ready_then_crash", "wedged", "engine_dead", "replay")
# the scenarios whose server stays up and stops serving after it was ready
STOPS_SERVING = ("wedged", "engine_dead")
FAILURES = ("cuda_oom", "nccl", "scheduler_exception", "address_in_use", "oom_killed")
ENGINES = ("sglang", "vllm")
DEFAULT_PHASE_BY_SCENARIO = {"crash_loop": "starting"}
DEFAULT_FAILURE_BY_SCENARIO = {"crash_loop": "scheduler_exception", "ready_then_crash": "scheduler_exception"}
SLOW_HEALTH_DEFAULT_DELAY = 25.0

SITE = "/usr/local/lib/python3.11/dist-packages"
SGL = f"{SITE}/sglang/srt"
VLLM = f"{SITE}/vllm"
TORCH = f"{SITE}/torch"

SGLANG_VERSION = "0.4.9.post2"
VLLM_VERSION = "0.9.1"
NCCL_VERSION = "2.21.5"
VLLM_NCCL_VERSION = "2.26.2"
CONTEXT_LEN = 163840
KV_TOKENS = 415290
CANNED_COMPLETION = "Paris is the capital and the most populous city of France."
BAR_BLOCKS = " \u258f\u258e\u258d\u258c\u258b\u258a\u2589\u2588"
CAPTURE_BATCH_SIZES = (128, 120, 112, 104, 96, 88, 80, 72, 64, 56, 48, 40, 32, 24, 16, 12, 8, 4, 2, 1)
MOE_CONFIG = "E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"
CUTE_DSL_WARNING = "CUTE_DSL - WARNING - [handle_import_error] - Unexpected error during package walk: cutlass.cute.experimental"
CUTE_DSL_PACKAGE_WALK = "Unexpected error during package walk: cutlass.cute.experimental"
CUSTOM_ALLREDUCE_PCIE = (
    "Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs. "
    "To silence this warning, specify disable_custom_all_reduce=True explicitly."
)
CUSTOM_ALLREDUCE_P2P = (
    "Custom allreduce is disabled because your platform lacks GPU P2P capability or P2P test failed. "
    "To silence this warning, specify disable_custom_all_reduce=True explicitly."
)
IGNORABLE_MLIR_ERROR = "The following error message 'operation scheduled before its operands' can be ignored."
TRANSFORMERS_CACHE_WARNING = (
    f"{SITE}/transformers/utils/hub.py:105: FutureWarning: Using `TRANSFORMERS_CACHE` is deprecated "
    "and will be removed in v5 of Transformers. Use `HF_HOME` instead."
)
UNKNOWN_ERROR_LINE = "Frobnicator returned error state 7, continuing"
SIGQUIT_LINE = "Received sigquit from a child process. It usually means the child failed."
READY_LINE = "The server is fired up and ready to roll!"
# since SGLang 0.5, /health generates one token as /health_generate does (SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION,
# on by default): docs/engine-source.md, tests/unit/test_sglang_conformance.py
GENERATING_HEALTH_PATHS = ("/health", "/health_generate")
CUDA_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.99 GiB. GPU {rank} has a total capacity of 139.81 GiB "
    "of which 1.37 GiB is free. Process {pid} has 138.43 GiB memory in use. Of the allocated memory 134.20 GiB is allocated "
    "by PyTorch, and 2.31 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
CUDA_ERROR_TRAILER = (
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
)


# the orphan: named as vLLM's engine process shows in /proc (its first 15 characters), deaf to the stop, running on
# for argv[1] seconds once its parent is gone
ORPHAN_CODE = (
    "import os, signal, sys, time\n"
    "for name in ('SIGTERM', 'SIGINT', 'SIGHUP'): signal.signal(getattr(signal, name), signal.SIG_IGN)\n"
    "open('/proc/self/comm', 'w').write('VLLM::EngineCore')\n"
    "parent = os.getppid()\n"
    "while os.getppid() == parent: time.sleep(0.1)\n"
    "time.sleep(float(sys.argv[1]))\n"
)


class ConfigError(ValueError):
    """A SIM_* variable has a value the simulator does not know."""


class ShutdownRequested(Exception):
    """SIGTERM or SIGINT arrived: drain and exit 0."""


class PeerLost(Exception):
    """Another node of a multi-node server went away, and the distributed timeout ran out."""

    def __init__(self, peer: str) -> None:
        super().__init__(peer)
        self.peer = peer


class RendezvousFailed(Exception):
    """The nodes did not all meet at the dist-init address within the distributed timeout."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


# --------------------------------------------------------------------------------------------------
# Configuration


def _env_choice(env: Mapping[str, str], name: str, default: str, choices: tuple[str, ...]) -> str:
    value = env.get(name, "").strip() or default
    if value not in choices:
        raise ConfigError(f"{name}={value!r} is not one of {', '.join(choices)}")
    return value


def _env_float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r} is not a number") from exc
    if value < 0:
        raise ConfigError(f"{name}={raw!r} must not be negative")
    return value


def _env_int(env: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < minimum:
        raise ConfigError(f"{name}={raw!r} must be an integer >= {minimum}")
    return int(raw)


@dataclass(frozen=True)
class Config:
    """Everything the SIM_* environment variables decide."""

    scenario: str = "ok"
    phase: str = "loading_weights"
    failure: str = "cuda_oom"
    engine: str = "sglang"
    tp: int = 8
    host: str = "127.0.0.1"
    port: int = 30000
    api_key: str | None = None
    model: str = "/models/DeepSeek-R1"
    phase_seconds: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_PHASE_SECONDS))
    shards: int = 163
    health_delay: float = 0.0
    crash_after_ready: float = 3.0
    wedge_after: float = 0.0
    nnodes: int = 1
    node_rank: int = 0
    dist_init_addr: tuple[str, int] | None = None
    dist_timeout: float = 30.0
    peer_timeout: float = 1.5
    peer_loss: str = "exit"
    generate_seconds: float = 0.0
    ttft_seconds: float = 0.0
    tokens_per_second: float = 0.0
    max_running: int = 0
    decode_log_interval: int = 40
    leak_api_key: bool = False
    orphan_seconds: float = 0.0
    sleep_mode: bool = False
    wake_seconds: float = 1.0
    ray: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Config:
        scenario = _env_choice(env, "SIM_SCENARIO", "ok", SCENARIOS)
        speed = _env_float(env, "SIM_SPEED", 1.0)
        port = _env_int(env, "SIM_PORT", 30000, 1)
        if port > 65535:
            raise ConfigError(f"SIM_PORT={port} is not a TCP port")
        nnodes, node_rank, tp = _env_int(env, "SIM_NNODES", 1, 1), _env_int(env, "SIM_NODE_RANK", 0, 0), _env_int(env, "SIM_TP", 8, 1)
        if node_rank >= nnodes:
            raise ConfigError(f"SIM_NODE_RANK={node_rank} must be below SIM_NNODES={nnodes}")
        if tp % nnodes:
            raise ConfigError(f"SIM_TP={tp} must be a multiple of SIM_NNODES={nnodes}")
        return cls(
            nnodes=nnodes,
            node_rank=node_rank,
            dist_init_addr=_dist_init_addr(env) if nnodes > 1 else None,
            dist_timeout=_env_float(env, "SIM_DIST_TIMEOUT", 30.0),
            peer_timeout=_env_float(env, "SIM_PEER_TIMEOUT", 1.5),
            peer_loss=_env_choice(env, "SIM_PEER_LOSS", "exit", ("exit", "hang")),
            scenario=scenario,
            phase=_env_choice(env, "SIM_PHASE", DEFAULT_PHASE_BY_SCENARIO.get(scenario, "loading_weights"), PHASES),
            failure=_env_choice(env, "SIM_FAILURE", DEFAULT_FAILURE_BY_SCENARIO.get(scenario, "cuda_oom"), FAILURES),
            engine=_env_choice(env, "SIM_ENGINE", "sglang", ENGINES),
            tp=tp,
            host=env.get("SIM_HOST", "").strip() or "127.0.0.1",
            port=port,
            api_key=env.get("SIM_API_KEY", "").strip() or None,
            model=env.get("SIM_MODEL", "").strip() or "/models/DeepSeek-R1",
            phase_seconds={p: _env_float(env, PHASE_SECONDS_VARS[p], DEFAULT_PHASE_SECONDS[p] * speed) for p in PHASES},
            shards=_env_int(env, "SIM_SHARDS", 163, 1),
            health_delay=_env_float(env, "SIM_HEALTH_DELAY", SLOW_HEALTH_DEFAULT_DELAY if scenario == "slow_health" else 0.0),
            crash_after_ready=_env_float(env, "SIM_CRASH_AFTER_READY", 3.0),
            wedge_after=_env_float(env, "SIM_WEDGE_AFTER", 0.0),
            generate_seconds=_env_float(env, "SIM_GENERATE_SECONDS", 0.0),
            ttft_seconds=_env_float(env, "SIM_TTFT_SECONDS", 0.0),
            tokens_per_second=_env_float(env, "SIM_TOKENS_PER_SECOND", 0.0),
            max_running=_env_int(env, "SIM_MAX_RUNNING", 0, 0),
            decode_log_interval=_env_int(env, "SIM_DECODE_LOG_INTERVAL", 40, 0),
            leak_api_key=env.get("SIM_LEAK_API_KEY", "").strip() == "1",
            orphan_seconds=_env_float(env, "SIM_ORPHAN_SECONDS", 0.0),
            sleep_mode=env.get("SIM_SLEEP_MODE", "").strip() == "1",
            wake_seconds=_env_float(env, "SIM_WAKE_SECONDS", 1.0),
            ray=env.get("SIM_RAY", "").strip() == "1",
        )

    @property
    def node_ranks(self) -> range:
        """The TP ranks this node runs."""
        per_node = self.tp // self.nnodes
        return range(per_node * self.node_rank, per_node * (self.node_rank + 1))

    @property
    def fails_to_start(self) -> bool:
        return self.scenario in ("crash", "crash_loop")

    @property
    def bind_must_fail(self) -> bool:
        return self.fails_to_start and self.failure == "address_in_use"

    def fault_in(self, phase: str) -> str | None:
        """The fault that strikes at the fault point of a cold-start phase, if any."""
        if phase != self.phase:
            return None
        if self.scenario == "hang":
            return "hang"
        if self.fails_to_start and self.failure != "address_in_use":
            return self.failure
        return None


def _dist_init_addr(env: Mapping[str, str]) -> tuple[str, int]:
    raw = env.get("SIM_DIST_INIT_ADDR", "").strip()
    host, _colon, port = raw.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"SIM_DIST_INIT_ADDR={raw!r} must be HOST:PORT (needed with SIM_NNODES > 1)")
    return host, int(port)


# --------------------------------------------------------------------------------------------------
# Output


def sglang_stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def vllm_stamp() -> str:
    return time.strftime("%m-%d %H:%M:%S")


def logging_stamp() -> str:
    """The timestamp of Python logging's default format: ``2026-05-30 19:15:26,720``."""
    now = time.time()
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f",{int(now % 1 * 1000):03d}"


class Console:
    """Unbuffered, thread-safe stdout that remembers whether a line was left open (a tqdm bar)."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self._mid_line = False

    def write(self, text: str) -> None:
        with self._lock:
            self._emit(text)

    def line(self, text: str) -> None:
        self.write(text + "\n")

    def end_partial_line(self) -> None:
        with self._lock:
            if self._mid_line:
                self._emit("\n")

    def _emit(self, text: str) -> None:
        if not text:
            return
        self._stream.write(text.encode("utf-8"))
        self._stream.flush()
        self._mid_line = not text.endswith("\n")


def format_interval(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def format_rate(done: int, elapsed: float) -> str:
    if done == 0 or elapsed <= 0:
        return "?it/s"
    rate = done / elapsed
    return f"{rate:5.2f}it/s" if rate >= 1 else f"{1 / rate:5.2f}s/it"


def tqdm_timing(done: int, total: int, elapsed: float) -> str:
    remaining = "?" if done == 0 or elapsed <= 0 else format_interval(elapsed * (total - done) / done)
    return f"[{format_interval(elapsed)}<{remaining}, {format_rate(done, elapsed)}]"


def tqdm_bar(done: int, total: int, width: int = 10) -> str:
    """tqdm's bar on a non-terminal: 10 cells of full blocks, one partial block, spaces."""
    eighths = int(done / total * width * 8)
    full, partial = divmod(eighths, 8)
    if full >= width:
        return BAR_BLOCKS[-1] * width
    return BAR_BLOCKS[-1] * full + BAR_BLOCKS[partial] + " " * (width - full - 1)


def shard_status(done: int, total: int, elapsed: float) -> str:
    """``Loading safetensors checkpoint shards:  42% Completed | 68/163 [00:12<00:17,  5.67it/s]``."""
    percent = 100 * done / total
    return f"Loading safetensors checkpoint shards: {percent:3.0f}% Completed | {done}/{total} {tqdm_timing(done, total, elapsed)}"


def bar_status(description: str, done: int, total: int, elapsed: float) -> str:
    """``Capturing batches (bs=1 avail_mem=14.43 GB): 100%|##########| 20/20 [00:13<00:00,  1.50it/s]``."""
    percent = 100 * done / total
    return f"{description}: {percent:3.0f}%|{tqdm_bar(done, total)}| {done}/{total} {tqdm_timing(done, total, elapsed)}"


class TqdmBar:
    """Writes a progress bar the way tqdm does: each refresh is ``\\r`` + status, one newline at close."""

    def __init__(self, console: Console, total: int, render: Callable[[int, int, float], str], min_interval: float = 0.1) -> None:
        self._console = console
        self._total = total
        self._render = render
        self._min_interval = min_interval
        self._started = time.monotonic()
        self._last_refresh = float("-inf")

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self._started

    def update(self, done: int) -> None:
        now = time.monotonic()
        if done in (0, self._total) or now - self._last_refresh >= self._min_interval:
            self._last_refresh = now
            self._console.write("\r" + self._render(done, self._total, self.elapsed))

    def close(self) -> None:
        self._console.write("\r" + self._render(self._total, self._total, self.elapsed) + "\n")


# --------------------------------------------------------------------------------------------------
# Tracebacks


@dataclass(frozen=True)
class Frame:
    path: str
    line: int
    function: str
    code: str = ""

    def render(self) -> list[str]:
        lines = [f'  File "{self.path}", line {self.line}, in {self.function}']
        if self.code:
            lines.append(f"    {self.code}")
        return lines


def render_frames(frames: tuple[Frame, ...]) -> list[str]:
    return [line for frame in frames for line in frame.render()]


def failure_tail(package: str, failure: str) -> tuple[Frame, ...]:
    """The innermost frames of a failure, under ``package`` (sglang/srt or vllm)."""
    if failure == "cuda_oom":
        return (Frame(f"{TORCH}/utils/_device.py", 104, "__torch_function__", "return func(*args, **kwargs)"),)
    if failure == "nccl":
        communicators = f"{package}/distributed/device_communicators"
        return (
            Frame(f"{communicators}/pynccl.py", 108, "__init__", "self.comm: ncclComm_t = self.nccl.ncclCommInitRank("),
            Frame(f"{communicators}/pynccl_wrapper.py", 350, "ncclCommInitRank", "self.NCCL_CHECK("),
            Frame(f"{communicators}/pynccl_wrapper.py", 329, "NCCL_CHECK", 'raise RuntimeError(f"NCCL error: {error_str}")'),
        )
    return ()


SCHEDULER_EXCEPTIONS = {
    "starting": "ValueError: not enough values to unpack (expected 2, got 1)",
    "loading_weights": "KeyError: 'model.layers.61.mlp.experts.255.down_proj.weight_scale_inv'",
    "allocating_kv_cache": "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    "capturing_cuda_graphs": "Exception: Capture cuda graph failed: TypeError: 'NoneType' object is not subscriptable",
    "warming_up": "TypeError: '>' not supported between instances of 'NoneType' and 'int'",
}


def exception_lines(phase: str, failure: str, rank: int, pid: int) -> list[str]:
    """The final line(s) of a traceback: the exception itself."""
    if failure == "cuda_oom":
        return [CUDA_OOM.format(rank=rank, pid=pid)]
    if failure == "nccl":
        return ["RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"]
    if phase == SERVING:
        return ["RuntimeError: CUDA error: an illegal memory access was encountered", *CUDA_ERROR_TRAILER]
    return [SCHEDULER_EXCEPTIONS[phase]]


_SCHED = f"{SGL}/managers/scheduler.py"
_RUNNER = f"{SGL}/model_executor/model_runner.py"
_SGLANG_INIT_HEAD = (
    Frame(_SCHED, 2960, "run_scheduler_process", "scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)"),
    Frame(_SCHED, 334, "__init__", "self.tp_worker = TpWorkerClass("),
    Frame(f"{SGL}/managers/tp_worker_overlap_thread.py", 67, "__init__", "self.worker = TpModelWorker("),
    Frame(f"{SGL}/managers/tp_worker.py", 84, "__init__", "self.model_runner = ModelRunner("),
)
_SGLANG_RUNTIME_HEAD = (
    Frame(_SCHED, 2975, "run_scheduler_process", "scheduler.event_loop_overlap()"),
    Frame(f"{TORCH}/utils/_contextlib.py", 116, "decorate_context", "return func(*args, **kwargs)"),
    Frame(_SCHED, 801, "event_loop_overlap", "result = self.run_batch(batch)"),
    Frame(_SCHED, 1761, "run_batch", ") = self.tp_worker.forward_batch_generation("),
    Frame(f"{SGL}/managers/tp_worker.py", 238, "forward_batch_generation", "logits_output, can_run_cuda_graph = self.model_runner.forward("),
    Frame(_RUNNER, 1790, "forward", "output = self._forward_raw("),
)
_SGLANG_INITIALIZE = Frame(_RUNNER, 287, "__init__", "self.initialize(min_per_gpu_memory)")
SGLANG_PHASE_FRAMES: dict[str, tuple[Frame, ...]] = {
    "starting": (
        Frame(_RUNNER, 242, "__init__", "min_per_gpu_memory = self.init_torch_distributed()"),
        Frame(_RUNNER, 601, "init_torch_distributed", "initialize_model_parallel("),
        Frame(f"{SGL}/distributed/parallel_state.py", 1291, "initialize_model_parallel", "_TP = init_model_parallel_group("),
        Frame(f"{SGL}/distributed/parallel_state.py", 1063, "init_model_parallel_group", "return GroupCoordinator("),
        Frame(f"{SGL}/distributed/parallel_state.py", 291, "__init__", "self.pynccl_comm = PyNcclCommunicator("),
    ),
    "loading_weights": (
        _SGLANG_INITIALIZE,
        Frame(_RUNNER, 327, "initialize", "self.load_model()"),
        Frame(_RUNNER, 703, "load_model", "self.model = get_model("),
        Frame(f"{SGL}/model_loader/__init__.py", 22, "get_model", "return loader.load_model("),
        Frame(f"{SGL}/model_loader/loader.py", 443, "load_model", "self.load_weights_and_postprocess("),
        Frame(f"{SGL}/model_loader/loader.py", 451, "load_weights_and_postprocess", "model.load_weights(weights)"),
        Frame(f"{SGL}/models/deepseek_v2.py", 2262, "load_weights", "weight_loader("),
    ),
    "allocating_kv_cache": (
        _SGLANG_INITIALIZE,
        Frame(_RUNNER, 381, "initialize", "self.init_memory_pool("),
        Frame(_RUNNER, 1321, "init_memory_pool", "self.token_to_kv_pool = MLATokenToKVPool("),
        Frame(f"{SGL}/mem_cache/memory_pool.py", 590, "__init__", "self._create_buffers()"),
        Frame(f"{SGL}/mem_cache/memory_pool.py", 612, "_create_buffers", "torch.zeros("),
    ),
    "capturing_cuda_graphs": (
        _SGLANG_INITIALIZE,
        Frame(_RUNNER, 404, "initialize", "self.init_cuda_graphs()"),
        Frame(_RUNNER, 1530, "init_cuda_graphs", "self.cuda_graph_runner = CudaGraphRunner(self)"),
        Frame(f"{SGL}/model_executor/cuda_graph_runner.py", 379, "__init__", "self.capture()"),
        Frame(f"{SGL}/model_executor/cuda_graph_runner.py", 498, "capture", ") = self.capture_one_batch_size(bs, forward)"),
        Frame(f"{SGL}/model_executor/cuda_graph_runner.py", 614, "capture_one_batch_size", "run_once()"),
    ),
    "warming_up": (
        Frame(_RUNNER, 1841, "_forward_raw", "ret = self.forward_extend("),
        Frame(f"{SGL}/models/deepseek_v2.py", 2187, "forward", "hidden_states = self.model(input_ids, positions, forward_batch, input_embeds)"),
    ),
    SERVING: (
        Frame(_RUNNER, 1836, "_forward_raw", "ret = self.forward_decode("),
        Frame(f"{SGL}/models/deepseek_v2.py", 2187, "forward", "hidden_states = self.model(input_ids, positions, forward_batch, input_embeds)"),
    ),
}


DIST_FRAMES = (
    Frame(f"{TORCH}/distributed/c10d_logger.py", 81, "wrapper", "return func(*args, **kwargs)"),
    Frame(f"{TORCH}/distributed/distributed_c10d.py", 2806, "all_reduce", "work = group.allreduce([tensor], opts)"),
)


def sglang_traceback(phase: str, failure: str, rank: int, pid: int) -> list[str]:
    """The lines after ``Scheduler hit an exception: Traceback (most recent call last):``."""
    head = _SGLANG_RUNTIME_HEAD if phase in ("warming_up", SERVING) else _SGLANG_INIT_HEAD
    frames = head + SGLANG_PHASE_FRAMES[phase] + failure_tail(SGL, failure)
    return render_frames(frames) + exception_lines(phase, failure, rank, pid)


_MPE = f"{VLLM}/v1/executor/multiproc_executor.py"
_GPU_WORKER = f"{VLLM}/v1/worker/gpu_worker.py"
_GPU_RUNNER = f"{VLLM}/v1/worker/gpu_model_runner.py"
_VLLM_BUSY_LOOP = Frame(_MPE, 541, "worker_busy_loop", "output = func(*args, **kwargs)")
_VLLM_SERVING_FRAMES = (
    _VLLM_BUSY_LOOP,
    Frame(_GPU_WORKER, 312, "execute_model", "output = self.model_runner.execute_model(scheduler_output,"),
    Frame(_GPU_RUNNER, 1339, "execute_model", "model_output = self.model("),
)
VLLM_PHASE_FRAMES: dict[str, tuple[Frame, ...]] = {
    "starting": (
        Frame(_MPE, 485, "worker_main", "worker = WorkerProc(*args, **kwargs)"),
        Frame(_MPE, 381, "__init__", "self.worker.init_device()"),
        Frame(_GPU_WORKER, 166, "init_device", "init_worker_distributed_environment(self.vllm_config, self.rank,"),
        Frame(f"{VLLM}/distributed/parallel_state.py", 1112, "initialize_model_parallel", "_TP = init_model_parallel_group(group_ranks,"),
        Frame(f"{VLLM}/distributed/parallel_state.py", 240, "__init__", "self.device_communicator = device_comm_cls("),
        Frame(f"{VLLM}/distributed/device_communicators/cuda_communicator.py", 39, "__init__", "self.pynccl_comm = PyNcclCommunicator("),
    ),
    "loading_weights": (
        Frame(_MPE, 485, "worker_main", "worker = WorkerProc(*args, **kwargs)"),
        Frame(_MPE, 382, "__init__", "self.worker.load_model()"),
        Frame(_GPU_WORKER, 185, "load_model", "self.model_runner.load_model()"),
        Frame(_GPU_RUNNER, 1775, "load_model", "self.model = model_loader.load_model("),
        Frame(f"{VLLM}/model_executor/model_loader/base_loader.py", 41, "load_model", "self.load_weights(model, model_config)"),
        Frame(f"{VLLM}/model_executor/model_loader/default_loader.py", 269, "load_weights", "loaded_weights = model.load_weights("),
        Frame(f"{VLLM}/model_executor/models/deepseek_v2.py", 874, "load_weights", "weight_loader(param, loaded_weight)"),
    ),
    "allocating_kv_cache": (
        _VLLM_BUSY_LOOP,
        Frame(_GPU_WORKER, 211, "determine_available_memory", "self.model_runner.profile_run()"),
        Frame(_GPU_RUNNER, 2215, "profile_run", "hidden_states = self._dummy_run(self.max_num_tokens)"),
    ),
    "capturing_cuda_graphs": (
        _VLLM_BUSY_LOOP,
        Frame(_GPU_WORKER, 264, "compile_or_warm_up_model", "self.model_runner.capture_model()"),
        Frame(_GPU_RUNNER, 2296, "capture_model", "self._dummy_run(num_tokens, capture_attn_cudagraph=full_cg)"),
    ),
    "warming_up": _VLLM_SERVING_FRAMES,
    SERVING: _VLLM_SERVING_FRAMES,
}
VLLM_ENGINE_CORE_FRAMES = (
    Frame(f"{VLLM}/v1/engine/core.py", 577, "run_engine_core", "engine_core = EngineCoreProc(*args, **kwargs)"),
    Frame(f"{VLLM}/v1/engine/core.py", 404, "__init__", "super().__init__(vllm_config, executor_class, log_stats,"),
    Frame(f"{VLLM}/v1/engine/core.py", 75, "__init__", "self.model_executor = executor_class(vllm_config)"),
    Frame(f"{VLLM}/executor/executor_base.py", 53, "__init__", "self._init_executor()"),
    Frame(_MPE, 93, "_init_executor", "self.workers = WorkerProc.wait_for_ready(unready_workers)"),
    Frame(_MPE, 422, "wait_for_ready", "raise e from None"),
)
VLLM_CLI_FRAMES = (
    Frame("/usr/local/bin/vllm", 8, "<module>", "sys.exit(main())"),
    Frame(f"{VLLM}/entrypoints/cli/main.py", 59, "main", "args.dispatch_function(args)"),
    Frame(f"{VLLM}/entrypoints/cli/serve.py", 58, "cmd", "uvloop.run(run_server(args))"),
    Frame(f"{SITE}/uvloop/__init__.py", 109, "run", "return __asyncio.run("),
    Frame("/usr/lib/python3.11/asyncio/runners.py", 190, "run", "return runner.run(main)"),
    Frame("/usr/lib/python3.11/asyncio/runners.py", 118, "run", "return self._loop.run_until_complete(task)"),
    Frame("uvloop/loop.pyx", 1518, "uvloop.loop.Loop.run_until_complete"),
    Frame(f"{SITE}/uvloop/__init__.py", 61, "wrapper", "return await main"),
)


# --------------------------------------------------------------------------------------------------
# Process control


class StopFlag:
    """Set by SIGTERM/SIGINT; sleeping through it raises ShutdownRequested.

    The signal handler only flips a boolean (no locks), and sleeps poll it every 50 ms.
    """

    def __init__(self) -> None:
        self.requested = False
        self.watch: Callable[[], None] | None = None  # called on every poll; may raise (a lost peer)

    def request(self, signum: int, frame: object) -> None:
        self.requested = True

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.requested:
            if self.watch is not None:
                self.watch()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            time.sleep(min(remaining, 0.05))
        raise ShutdownRequested()


# --------------------------------------------------------------------------------------------------
# Multi-node: the rendezvous and the connections between the nodes


class DistGroup:
    """The nodes of one multi-node server, connected over TCP the way torch.distributed connects them.

    Node 0 listens at the dist-init port; every other node connects (retrying until the distributed
    timeout) and says ``hello <rank>``; node 0 answers ``welcome`` once all have joined. A barrier is
    ``arrive <name>`` from every other node, then ``go <name>`` from node 0. A connection that ends
    is a lost peer (``lost``): the process behind it died.
    """

    def __init__(self, cfg: Config) -> None:
        assert cfg.dist_init_addr is not None
        self.cfg = cfg
        self.address = cfg.dist_init_addr
        self.peers: dict[int, socket.socket] = {}
        self.arrivals: dict[str, set[int]] = {}
        self.released: set[str] = set()
        self.welcomed = False
        self.lost: tuple[float, str] | None = None
        self.closing = False
        self._lock = threading.Lock()

    # ---- the rendezvous
    def rendezvous(self, stop: StopFlag) -> None:
        if self.cfg.node_rank == 0:
            self._accept_all(stop)
        else:
            self._join(stop)

    def _accept_all(self, stop: StopFlag) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("0.0.0.0", self.address[1]))
        listener.listen(16)
        listener.settimeout(0.05)
        deadline = time.monotonic() + self.cfg.dist_timeout
        try:
            while len(self.peers) < self.cfg.nnodes - 1:
                if time.monotonic() > deadline:
                    joined = len(self.peers) + 1
                    raise RendezvousFailed(
                        f"torch.distributed.DistStoreError: Timed out after {self.cfg.dist_timeout + 1:.0f} seconds waiting for clients. "
                        f"{joined}/{self.cfg.nnodes} clients joined."
                    )
                stop.sleep(0)
                try:
                    conn, _address = listener.accept()
                except TimeoutError:
                    continue
                self._greet(conn)
        finally:
            listener.close()
        for conn in self.peers.values():
            conn.sendall(b"welcome\n")

    def _greet(self, conn: socket.socket) -> None:
        conn.settimeout(2.0)
        reader = conn.makefile("rb")
        try:
            hello = reader.readline().decode(errors="replace").split()
        except OSError:
            conn.close()
            return
        conn.settimeout(None)
        if len(hello) != 2 or hello[0] != "hello" or not hello[1].isdigit() or not 0 < int(hello[1]) < self.cfg.nnodes:
            conn.close()
            return
        rank = int(hello[1])
        if rank in self.peers:
            self.peers[rank].close()
        self.peers[rank] = conn
        self._listen(conn, reader)

    def _join(self, stop: StopFlag) -> None:
        deadline = time.monotonic() + self.cfg.dist_timeout
        host, port = self.address
        while True:
            try:
                conn = socket.create_connection(self.address, timeout=1.0)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RendezvousFailed(
                        f"torch.distributed.DistNetworkError: The client socket has timed out after {self.cfg.dist_timeout * 1000:.0f}ms "
                        f"while trying to connect to ({host}, {port})."
                    ) from None
                stop.sleep(0.2)
        conn.settimeout(None)
        conn.sendall(f"hello {self.cfg.node_rank}\n".encode())
        self.peers[0] = conn
        self._listen(conn, conn.makefile("rb"))
        while not self.welcomed:
            if time.monotonic() > deadline:
                raise RendezvousFailed(f"torch.distributed.DistStoreError: Timed out after {self.cfg.dist_timeout:.0f} seconds waiting for the other nodes")
            stop.sleep(0.05)

    # ---- the connections
    def _listen(self, conn: socket.socket, reader: BinaryIO) -> None:
        address, port = conn.getpeername()[:2]
        threading.Thread(target=self._read, args=(reader, f"[{address}]:{port}"), name="dist", daemon=True).start()

    def _read(self, reader: BinaryIO, peer: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            for raw in reader:
                self._message(raw.decode(errors="replace").split())
        with self._lock:
            if not self.closing and self.lost is None:
                self.lost = (time.monotonic(), peer)

    def _message(self, words: list[str]) -> None:
        with self._lock:
            if words == ["welcome"]:
                self.welcomed = True
            elif len(words) == 3 and words[0] == "arrive" and words[2].isdigit():
                self.arrivals.setdefault(words[1], set()).add(int(words[2]))
            elif len(words) == 2 and words[0] == "go":
                self.released.add(words[1])

    def barrier(self, name: str, stop: StopFlag) -> None:
        """Wait until every node reached ``name`` (node 0 releases the others)."""
        if self.cfg.node_rank == 0:
            others = set(range(1, self.cfg.nnodes))
            while not others <= self.arrivals.get(name, set()):
                stop.sleep(0.05)
            for conn in self.peers.values():
                conn.sendall(f"go {name}\n".encode())
            return
        self.peers[0].sendall(f"arrive {name} {self.cfg.node_rank}\n".encode())
        while name not in self.released:
            stop.sleep(0.05)

    def check(self) -> None:
        """Raise PeerLost once a peer has been gone for the distributed timeout."""
        lost = self.lost
        if lost is not None and time.monotonic() - lost[0] >= self.cfg.peer_timeout:
            raise PeerLost(lost[1])

    def close(self) -> None:
        with self._lock:
            self.closing = True
        for conn in self.peers.values():
            with contextlib.suppress(OSError):
                conn.close()


def kill_self() -> NoReturn:
    """End the way SGLang's kill_process_tree ends a failed server: SIGKILL."""
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(5)
    raise SystemExit(137)


# --------------------------------------------------------------------------------------------------
# HTTP


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes
    # monotonic time the request reached the server: a generation's tokens are due from it
    received: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    # a streamed answer (server-sent events): sent chunk by chunk as the iterator yields
    chunks: Iterator[bytes] | None = None


def json_response(status: int, payload: object) -> Response:
    return Response(status, json.dumps(payload).encode("utf-8"))


def parse_json_object(body: bytes) -> dict[str, object] | None:
    try:
        payload = json.loads(body or b"{}")
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def _int_field(payload: Mapping[str, object], name: str, default: int) -> int:
    value = payload.get(name)
    return value if isinstance(value, int) and value > 0 else default


def sleep_until(due: float) -> None:
    """Sleep until the monotonic clock reads ``due`` (not at all when it is past)."""
    remaining = due - time.monotonic()
    if remaining > 0:
        time.sleep(remaining)


def complete(prompt: str, max_tokens: int, ignore_eos: bool = False) -> tuple[str, int, int]:
    """A tiny deterministic completion: (text, prompt tokens, completion tokens). Its end comes at the
    end of the canned answer, unless ``ignore_eos``: then ``max_tokens`` tokens, one word each."""
    canned = CANNED_COMPLETION.split()
    words = [canned[n % len(canned)] for n in range(max(1, max_tokens))] if ignore_eos else canned[: max(1, min(max_tokens, 16))]
    return " " + " ".join(words), max(1, len(prompt.split())), len(words)


# the buckets of the engines' latency histograms (seconds)
LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)


@dataclass
class Histogram:
    """A Prometheus histogram: cumulative bucket counts, sum and count."""

    counts: list[int] = field(default_factory=lambda: [0] * len(LATENCY_BUCKETS))
    total: float = 0.0
    count: int = 0

    def observe(self, value: float) -> None:
        self.total += value
        self.count += 1
        for n, bound in enumerate(LATENCY_BUCKETS):
            if value <= bound:
                self.counts[n] += 1

    def lines(self, name: str, label: str) -> list[str]:
        inner = label[1:-1]
        lines = [f"# HELP {name} Histogram of {name.split(':')[-1]}.", f"# TYPE {name} histogram"]
        lines += [f'{name}_bucket{{{inner},le="{bound}"}} {float(self.counts[n])}' for n, bound in enumerate(LATENCY_BUCKETS)]
        lines += [f'{name}_bucket{{{inner},le="+Inf"}} {float(self.count)}', f"{name}_sum{label} {self.total}", f"{name}_count{label} {float(self.count)}"]
        return lines


@dataclass
class ServeState:
    """What the HTTP side can see of the simulated server."""

    healthy: threading.Event = field(default_factory=threading.Event)
    generating: threading.Event = field(default_factory=threading.Event)
    wedged: threading.Event = field(default_factory=threading.Event)  # generation taken, never answered
    engine_dead: threading.Event = field(default_factory=threading.Event)  # generation answered 500
    sleeping: threading.Event = field(default_factory=threading.Event)  # sleep mode: weights offloaded
    lock: threading.Lock = field(default_factory=threading.Lock)
    in_flight: int = 0
    running_requests: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    ttft: Histogram = field(default_factory=Histogram)
    itl: Histogram = field(default_factory=Histogram)
    slots: threading.BoundedSemaphore | None = None
    decode_tokens: int = 0  # since the last decode batch line
    decode_since: float = 0.0  # monotonic time of the last decode batch line (or of the batch's start)

    def observe(self, ttft: float | None = None, itl: float | None = None) -> None:
        with self.lock:
            if ttft is not None:
                self.ttft.observe(ttft)
            if itl is not None:
                self.itl.observe(itl)

    def count_generation(self, prompt_tokens: int, generation_tokens: int) -> None:
        with self.lock:
            self.prompt_tokens += prompt_tokens
            self.generation_tokens += generation_tokens

    def track(self, delta: int) -> None:
        with self.lock:
            self.in_flight += delta

    def track_running(self, delta: int) -> None:
        with self.lock:
            self.running_requests += delta


class SimApp:
    """The routes of the server, independent of the HTTP plumbing."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.cfg = sim.cfg
        self.state = sim.state
        self.created = int(time.time())
        self.routes: dict[str, tuple[str, Callable[[Request], Response]]] = {
            "/health": ("GET", self.health),
            "/health_generate": ("GET", self.health),
            "/v1/models": ("GET", self.models),
            "/model_info": ("GET", self.model_info),
            "/server_info": ("GET", self.server_info),
            "/get_model_info": ("GET", self.deprecated(self.model_info, "/get_model_info", "/model_info")),
            "/get_server_info": ("GET", self.deprecated(self.server_info, "/get_server_info", "/server_info")),
            "/version": ("GET", self.version),
            "/metrics": ("GET", self.metrics),
            "/get_load": ("GET", self.get_load),
            "/v1/loads": ("GET", self.loads),
            "/generate": ("POST", self.generate),
            "/v1/completions": ("POST", self.completions),
            "/v1/chat/completions": ("POST", self.chat_completions),
        }
        if self.cfg.sleep_mode:
            self.routes.update({"/sleep": ("POST", self.sleep), "/wake_up": ("POST", self.wake_up), "/is_sleeping": ("GET", self.is_sleeping)})

    def respond(self, request: Request) -> Response:
        if self.cfg.node_rank >= 1:
            # SGLang's launch_dummy_health_check_server: 200 on the health paths, whatever the schedulers do
            found = request.method == "GET" and request.path in ("/health", "/health_generate")
            return Response(200, b"", "text/plain") if found else json_response(404, {"detail": "Not Found"})
        if not self._authorized(request):
            return json_response(401, {"error": "Unauthorized"})
        route = self.routes.get(request.path)
        if route is None:
            return json_response(404, {"detail": "Not Found"})
        method, handler = route
        if request.method != method:
            return json_response(405, {"detail": "Method Not Allowed"})
        return handler(request)

    def _authorized(self, request: Request) -> bool:
        if not self.cfg.api_key or not self.sim.needs_api_key(request.path):
            return True
        return request.headers.get("authorization") == f"Bearer {self.cfg.api_key}"

    def deprecated(self, handler: Callable[[Request], Response], old: str, new: str) -> Callable[[Request], Response]:
        def warn_then_answer(request: Request) -> Response:
            self.sim.main_line(f"Endpoint '{old}' is deprecated and will be removed in a future version. Please use '{new}' instead.")
            return handler(request)

        return warn_then_answer

    def health(self, request: Request) -> Response:
        if self.cfg.health_delay:
            time.sleep(self.cfg.health_delay)
        if not self.state.healthy.is_set():
            return Response(503, b"", "text/plain")
        if self.state.sleeping.is_set():
            return Response(200, b"", "text/plain")  # vLLM's /health while asleep: the process is up
        if request.path in GENERATING_HEALTH_PATHS:
            self.sim.log_batch(prompt_tokens=1)
        return Response(200, b"", "text/plain")

    def sleep(self, request: Request) -> Response:
        self.sim.main_line("Sleep mode freed 71.23 GiB memory, 2.05 GiB memory is still in use.")
        self.state.sleeping.set()
        return Response(200, b"", "text/plain")

    def wake_up(self, request: Request) -> Response:
        self.wake()
        return Response(200, b"", "text/plain")

    def wake(self) -> None:
        """The weights back, as vLLM's wake_up does (it takes a while)."""
        if self.state.sleeping.is_set():
            self.sim.main_line("wake up the engine with tags: None")
            time.sleep(self.cfg.wake_seconds)
            self.state.sleeping.clear()

    def is_sleeping(self, request: Request) -> Response:
        self.sim.main_line("check whether the engine is sleeping")
        return json_response(200, {"is_sleeping": self.state.sleeping.is_set()})

    def models(self, request: Request) -> Response:
        card = {
            "id": self.cfg.model,
            "object": "model",
            "created": self.created,
            "owned_by": self.cfg.engine,
            "root": self.cfg.model,
            "max_model_len": CONTEXT_LEN,
        }
        return json_response(200, {"object": "list", "data": [card]})

    def model_info(self, request: Request) -> Response:
        return json_response(
            200,
            {
                "model_path": self.cfg.model,
                "tokenizer_path": self.cfg.model,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
            },
        )

    def server_info(self, request: Request) -> Response:
        info: dict[str, object] = dict(self.sim.server_args())
        info["api_key"] = None
        info["version"] = SGLANG_VERSION
        return json_response(200, info)

    def version(self, request: Request) -> Response:
        return json_response(200, {"version": VLLM_VERSION if self.cfg.engine == "vllm" else SGLANG_VERSION})

    def metrics(self, request: Request) -> Response:
        return Response(200, self.sim.metrics_text().encode("utf-8"), "text/plain; version=0.0.4; charset=utf-8")

    def get_load(self, request: Request) -> Response:
        """SGLang's ``/get_load``: one entry per data-parallel rank, running plus waiting in ``num_reqs``."""
        running = self.state.running_requests
        load = {"dp_rank": 0, "num_reqs": running, "num_waiting_reqs": 0, "num_tokens": 0, "num_pending_tokens": 0, "ts_tic": time.perf_counter()}
        return json_response(200, [load])

    def loads(self, request: Request) -> Response:
        """SGLang's ``/v1/loads`` (its current load endpoint, entrypoints/v1_loads.py): one entry per
        data-parallel rank with its core figures (running and waiting requests, tokens)."""
        running = self.state.running_requests
        load = {
            "timestamp": time.time(),
            "dp_rank": 0,
            "num_running_reqs": running,
            "num_waiting_reqs": 0,
            "num_used_tokens": 0,
            "num_total_tokens": KV_TOKENS,
            "max_running_requests": self.cfg.max_running or 2048,
            "token_usage": 0.0,
            "gen_throughput": 0.0,
            "utilization": 0.0,
        }
        stamp = datetime.datetime.now(datetime.timezone.utc).isoformat()
        return json_response(200, {"timestamp": stamp, "version": SGLANG_VERSION, "accelerator": None, "num_accelerators": 1, "loads": [load]})

    def _prepare(
        self, request: Request, prompt_field: str, max_tokens: Callable[[Mapping[str, object]], int]
    ) -> tuple[dict[str, object], str, int, int] | Response:
        """(payload, text, prompt tokens, completion tokens) of a generation request, or its error."""
        if not self.state.generating.is_set():
            return json_response(503, {"object": "error", "message": "The server is not ready to generate.", "code": 503})
        if self.state.engine_dead.is_set():
            message = "EngineCore encountered an issue. See stack trace (above) for the root cause."
            return json_response(500, {"object": "error", "message": message, "type": "EngineDeadError", "code": 500})
        payload = parse_json_object(request.body)
        if payload is None:
            return json_response(400, {"object": "error", "message": "Invalid JSON body", "code": 400})
        self.wake()
        prompt = payload.get(prompt_field, "")
        prompt_text = prompt if isinstance(prompt, str) else json.dumps(prompt)
        return (payload, *complete(prompt_text, max_tokens(payload), ignore_eos=payload.get("ignore_eos") is True))

    def _generation(self, request: Request, prompt_field: str, max_tokens: Callable[[Mapping[str, object]], int]) -> tuple[str, int, int] | Response:
        prepared = self._prepare(request, prompt_field, max_tokens)
        if isinstance(prepared, Response):
            return prepared
        _payload, text, prompt_tokens, generation_tokens = prepared
        for _token in self._decode(prompt_tokens, generation_tokens, request.received):
            pass
        return text, prompt_tokens, generation_tokens

    def _decode(self, prompt_tokens: int, generation_tokens: int, arrived: float) -> Iterator[int]:
        """Yields the index of each token when it is generated: after a free slot (SIM_MAX_RUNNING),
        SIM_GENERATE_SECONDS and SIM_TTFT_SECONDS the first, then one every 1/SIM_TOKENS_PER_SECOND s.
        Counts the request as running meanwhile, and its TTFT and gaps in the histograms.

        Paced by the clock, so that a simulator given less CPU (a busy machine) still serves at the speed
        it was told: the first token is due at a time fixed when the request got its slot (its arrival as
        the kernel saw it, without SIM_MAX_RUNNING), whatever ran late before it; token n at the first
        one's time + n / SIM_TOKENS_PER_SECOND, not after the work done for the tokens before it (a token
        due while the process did not run is sent as soon as it runs, and the next is on time). A first
        token that came late moves the others with it: the gaps of a stream never shrink below the speed."""
        cfg = self.cfg
        slots = self.state.slots
        if slots is not None:
            slots.acquire()
        self.state.track_running(+1)
        try:
            # a request that waited for a slot starts when it got one (its wait counts in its TTFT)
            started = arrived if slots is None else max(arrived, time.monotonic())
            first_due = started + cfg.generate_seconds + cfg.ttft_seconds
            self.sim.log_batch(prompt_tokens)
            self._hold_while_wedged()
            sleep_until(first_due)
            first = last = time.monotonic()
            self.state.observe(ttft=first - arrived)
            yield 0
            for n in range(1, generation_tokens):
                self._hold_while_wedged()
                if cfg.tokens_per_second > 0:
                    sleep_until(first + n / cfg.tokens_per_second)
                now = time.monotonic()
                self.state.observe(itl=now - last)
                self.sim.count_decode_token()
                last = now
                yield n
        finally:
            self.state.track_running(-1)
            if slots is not None:
                slots.release()
        self.state.count_generation(prompt_tokens, generation_tokens)

    def _hold_while_wedged(self) -> None:
        """A wedged scheduler holds its requests until the server is stopped."""
        while self.state.wedged.is_set() and not self.sim.stop.requested:
            time.sleep(0.05)

    def _stream(self, payload: Mapping[str, object], text: str, prompt_tokens: int, generation_tokens: int, arrived: float) -> Iterator[bytes]:
        """A streamed completion as the OpenAI-compatible servers send it: one event per token."""
        ident, created, words = f"cmpl-{uuid.uuid4().hex}", int(time.time()), text.split()
        options = payload.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True

        def event(data: Mapping[str, object]) -> bytes:
            return b"data: " + json.dumps(data).encode("utf-8") + b"\n\n"

        for n in self._decode(prompt_tokens, generation_tokens, arrived):
            choice = {"index": 0, "text": " " + words[n], "logprobs": None, "finish_reason": "length" if n == generation_tokens - 1 else None}
            yield event({"id": ident, "object": "text_completion", "created": created, "model": self.cfg.model, "choices": [choice]})
        if include_usage:
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": generation_tokens, "total_tokens": prompt_tokens + generation_tokens}
            yield event({"id": ident, "object": "text_completion", "created": created, "model": self.cfg.model, "choices": [], "usage": usage})
        yield b"data: [DONE]\n\n"

    def generate(self, request: Request) -> Response:
        def max_new_tokens(payload: Mapping[str, object]) -> int:
            sampling = payload.get("sampling_params")
            return _int_field(sampling, "max_new_tokens", 16) if isinstance(sampling, dict) else 16

        result = self._generation(request, "text", max_new_tokens)
        if isinstance(result, Response):
            return result
        text, prompt_tokens, generation_tokens = result
        meta = {
            "id": uuid.uuid4().hex,
            "finish_reason": {"type": "length", "length": generation_tokens},
            "prompt_tokens": prompt_tokens,
            "completion_tokens": generation_tokens,
            "cached_tokens": 0,
            "e2e_latency": 0.012,
        }
        return json_response(200, {"text": text, "meta_info": meta})

    def completions(self, request: Request) -> Response:
        prepared = self._prepare(request, "prompt", lambda payload: _int_field(payload, "max_tokens", 16))
        if isinstance(prepared, Response):
            return prepared
        payload, text, prompt_tokens, generation_tokens = prepared
        if payload.get("stream") is True:
            chunks = self._stream(payload, text, prompt_tokens, generation_tokens, request.received)
            return Response(200, content_type="text/event-stream; charset=utf-8", chunks=chunks)
        for _token in self._decode(prompt_tokens, generation_tokens, request.received):
            pass
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length", "matched_stop": None}
        return json_response(200, self._openai_envelope("cmpl", "text_completion", choice, prompt_tokens, generation_tokens))

    def chat_completions(self, request: Request) -> Response:
        result = self._generation(request, "messages", lambda payload: _int_field(payload, "max_tokens", 16))
        if isinstance(result, Response):
            return result
        text, prompt_tokens, generation_tokens = result
        choice = {"index": 0, "message": {"role": "assistant", "content": text.strip()}, "logprobs": None, "finish_reason": "length"}
        return json_response(200, self._openai_envelope("chatcmpl", "chat.completion", choice, prompt_tokens, generation_tokens))

    def _openai_envelope(self, prefix: str, kind: str, choice: dict[str, object], prompt_tokens: int, generation_tokens: int) -> dict[str, object]:
        return {
            "id": f"{prefix}-{uuid.uuid4().hex}",
            "object": kind,
            "created": int(time.time()),
            "model": self.cfg.model,
            "choices": [choice],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": generation_tokens, "total_tokens": prompt_tokens + generation_tokens},
        }


# struct tcp_info (linux/tcp.h): tcpi_last_data_recv, milliseconds since the connection last received data,
# counted in the kernel's ticks (a tick is at most 10 ms): one tick less, a request is never taken for older
TCP_INFO_LAST_DATA_RECV = 52
KERNEL_TICK_MS = 10


def arrival(connection: socket.socket) -> float:
    """When the request reached this host, on the monotonic clock: by the kernel's count of the time since
    the connection last received data (TCP_INFO), so that a simulator that ran late (its process not
    scheduled on a busy machine, before or after accepting the connection) still knows; now when unknown."""
    now = time.monotonic()
    try:
        info = connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
        (since_ms,) = struct.unpack_from("I", info, TCP_INFO_LAST_DATA_RECV)
    except (OSError, AttributeError, struct.error):
        return now
    return now - max(0, since_ms - KERNEL_TICK_MS) / 1000 if since_ms < 60_000 else now


class SimHandler(BaseHTTPRequestHandler):
    """Plumbing between http.server and SimApp; writes uvicorn-like access lines."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def log_message(self, format: str, *args: object) -> None:
        """Silence http.server's own stderr log: access lines are written by _handle."""

    def _handle(self, method: str) -> None:
        received = arrival(cast(socket.socket, self.connection))
        app = cast(SimHttpServer, self.server).app
        app.state.track(+1)
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length > 0 else b""
            headers = {key.lower(): value for key, value in self.headers.items()}
            response = app.respond(Request(method, self.path.split("?", 1)[0], headers, body, received))
            self.send_response(response.status)
            self.send_header("content-type", response.content_type)
            if response.chunks is not None:
                self._send_chunked(response.chunks)
            else:
                self.send_header("content-length", str(len(response.body)))
                self.end_headers()
                self.wfile.write(response.body)
            if app.cfg.node_rank >= 1:
                return  # the placeholder's uvicorn logs at level warning: no access lines
            client_host, client_port = self.client_address[:2]
            app.sim.access_line(
                f'{client_host}:{client_port} - "{method} {self.path} {self.request_version}" {response.status} {http.HTTPStatus(response.status).phrase}'
            )
        finally:
            app.state.track(-1)

    def _send_chunked(self, chunks: Iterator[bytes]) -> None:
        """A streamed body in HTTP/1.1 chunked transfer coding, each chunk flushed as it comes."""
        self.send_header("transfer-encoding", "chunked")
        self.send_header("cache-control", "no-cache")
        self.end_headers()
        try:
            for chunk in chunks:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()


class SimHttpServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that never resolves names and never prints tracebacks into the journal."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], app: SimApp) -> None:
        super().__init__(address, SimHandler, bind_and_activate=False)
        self.app = app

    def server_bind(self) -> None:
        # HTTPServer.server_bind would call socket.getfqdn(), a DNS lookup: bind like a plain TCP server.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = (str(self.server_address[0]), int(self.server_address[1]))

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hung up mid-answer (a probe that timed out) is not worth a traceback."""


class HttpFrontend:
    """The listening socket: bound and listening only when the simulated server would be."""

    def __init__(self, app: SimApp, host: str, port: int) -> None:
        self._app = app
        self._address = (host, port)
        self._server: SimHttpServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def serving(self) -> bool:
        return self._thread is not None

    def bind(self) -> SimHttpServer:
        """Bind without listening (connections are still refused); raises OSError."""
        if self._server is None:
            server = SimHttpServer(self._address, self._app)
            try:
                server.server_bind()
            except OSError:
                server.server_close()
                raise
            self._server = server
        return self._server

    def listen(self) -> None:
        server = self.bind()
        server.server_activate()
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="http", daemon=True)
        self._thread.start()

    def stop(self, state: ServeState, drain_seconds: float = 1.0) -> None:
        """Stop accepting, give in-flight requests a moment to finish, close the socket."""
        if self._server is None:
            return
        if self._thread is not None:
            self._server.shutdown()
            deadline = time.monotonic() + drain_seconds
            while state.in_flight and time.monotonic() < deadline:
                time.sleep(0.02)
        self._server.server_close()
        self._server = None


# --------------------------------------------------------------------------------------------------
# The simulated server


class Simulator:
    """Drives a cold start through PHASES, then serves; engine flavours supply the lines."""

    def __init__(self, cfg: Config, console: Console) -> None:
        self.cfg = cfg
        self.console = console
        self.stop = StopFlag()
        self.state = ServeState(slots=threading.BoundedSemaphore(cfg.max_running) if cfg.max_running else None)
        self.app = SimApp(self)
        self.http = HttpFrontend(self.app, cfg.host, cfg.port)
        self.rng = random.Random()
        self.pid = os.getpid()
        self.node_ranks = list(cfg.node_ranks)
        self.lead_rank = self.node_ranks[0]
        self.failing_rank = self.node_ranks[1] if len(self.node_ranks) > 1 else self.lead_rank
        self.dist = DistGroup(cfg) if cfg.nnodes > 1 else None
        self.serving = False
        self._phase = PHASES[0]

    # ---- the run
    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.stop.request)
        signal.signal(signal.SIGINT, self.stop.request)
        if self.cfg.orphan_seconds:
            self.spawn_orphan()
        try:
            if self.dist is not None:
                self.stop.watch = self.dist.check
            for phase in PHASES:
                if self.dist is not None and phase != PHASES[0]:
                    self.dist.barrier(phase, self.stop)  # every node finished the phase before
                self._run_phase(phase)
            self._serve()
        except ShutdownRequested:
            self.console.end_partial_line()
            if self.http.serving:
                self.shutdown_lines()
            self.http.stop(self.state)
        except RendezvousFailed as failed:
            self.rendezvous_failed(failed.error)
        except PeerLost as lost:
            self.stop.watch = None
            return self.peer_lost(lost.peer)
        finally:
            if self.dist is not None:
                self.dist.close()
        return 0

    def spawn_orphan(self) -> None:
        """An engine process that ignores the stop and runs on for SIM_ORPHAN_SECONDS after this one is gone."""
        process = subprocess.Popen(
            [sys.executable, "-c", ORPHAN_CODE, str(self.cfg.orphan_seconds)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.main_line(f"Started engine process with PID {process.pid}")

    def peer_lost(self, peer: str) -> int:
        """A peer died: fail as the engine does, with an error (exit) or a watchdog timeout (hang)."""
        self.console.end_partial_line()
        if self.cfg.peer_loss == "exit":
            self.dist_failed(f"RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer {peer}")
        timeout_ms = int(self.cfg.peer_timeout * 1000)
        for rank in self.ranks():
            self.console.line(
                f"[rank{rank}]:[E ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, "
                f"OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)={timeout_ms}) ran for {timeout_ms + 18} milliseconds before timing out."
            )
        try:
            while True:
                self.stop.sleep(3600)
        except ShutdownRequested:
            return 0

    def dist_failed(self, error: str) -> NoReturn:
        raise NotImplementedError

    def rendezvous_failed(self, error: str) -> NoReturn:
        """The nodes did not all come together within the distributed timeout."""
        self.dist_failed(error)

    def before_rendezvous(self) -> None:
        """What the engine logs before it waits for the other nodes (nothing by default)."""

    def _run_phase(self, phase: str) -> None:
        self._phase = phase
        steps = {
            "starting": self.starting,
            "loading_weights": self.loading_weights,
            "allocating_kv_cache": self.allocating_kv_cache,
            "capturing_cuda_graphs": self.capturing_cuda_graphs,
            "warming_up": self.warming_up,
        }[phase]
        for _fault_point in steps():
            fault = self.cfg.fault_in(phase)
            if fault:
                self._strike(phase, fault)

    def _strike(self, phase: str, fault: str) -> NoReturn:
        if fault == "hang":
            while True:
                self.stop.sleep(3600)
        self.console.end_partial_line()
        if fault == "oom_killed":
            self.console.line("Killed")
            kill_self()
        self.crash(phase, fault)

    def _serve(self) -> None:
        self.serving = True
        if self.cfg.scenario == "ready_then_crash":
            self.stop.sleep(self.cfg.crash_after_ready)
            failure = self.cfg.failure
            self._strike(SERVING, "scheduler_exception" if failure == "address_in_use" else failure)
        if self.cfg.scenario in STOPS_SERVING:
            self.stop.sleep(self.cfg.wedge_after)
            if self.cfg.scenario == "wedged":
                self.state.wedged.set()
            else:
                self.engine_died()
                self.state.engine_dead.set()
        while True:
            self.stop.sleep(3600)

    def pause(self, fraction: float) -> None:
        """Sleep a fraction of the current phase's duration (interrupted by SIGTERM)."""
        self.stop.sleep(self.cfg.phase_seconds[self._phase] * fraction)

    def bind_port(self) -> None:
        """Bind the HTTP port or fail the start the way the engine does when it cannot."""
        if self.cfg.bind_must_fail:
            self.bind_failed(98, "Address already in use")
        try:
            self.http.bind()
        except OSError as exc:
            self.bind_failed(exc.errno or 98, exc.strerror or "Address already in use")

    def become_ready(self) -> None:
        """Called when the start is complete: health turns 200 unless the scenario says otherwise."""
        if self.cfg.scenario != "health_503":
            self.state.healthy.set()

    def open_http(self) -> None:
        self.http.listen()
        if self.cfg.scenario != "health_503":
            self.state.generating.set()

    def ranks(self) -> list[int]:
        """This node's TP ranks, in the shuffled order in which real ranks race to the log."""
        order = list(self.node_ranks)
        self.rng.shuffle(order)
        return order

    def progress_bar(self, total: int, render: Callable[[int, int, float], str], share: float) -> Iterator[None]:
        """Run a tqdm bar over ``share`` of the phase; yields once, half-way: the phase's fault point."""
        progress = TqdmBar(self.console, total, render)
        for done in range(total + 1):
            progress.update(done)
            if done == total // 2:
                yield
            if done < total:
                self.pause(share / total)
        progress.close()

    # ---- what flavours provide
    def starting(self) -> Iterator[None]:
        raise NotImplementedError

    def loading_weights(self) -> Iterator[None]:
        raise NotImplementedError

    def allocating_kv_cache(self) -> Iterator[None]:
        raise NotImplementedError

    def capturing_cuda_graphs(self) -> Iterator[None]:
        raise NotImplementedError

    def warming_up(self) -> Iterator[None]:
        raise NotImplementedError

    def crash(self, phase: str, failure: str) -> NoReturn:
        raise NotImplementedError

    def bind_failed(self, errno: int, strerror: str) -> NoReturn:
        raise NotImplementedError

    def engine_died(self) -> None:
        """The lines of an engine that died behind its API server (which goes on answering)."""
        raise NotImplementedError

    def shutdown_lines(self) -> None:
        raise NotImplementedError

    def main_line(self, message: str) -> None:
        raise NotImplementedError

    def access_line(self, message: str) -> None:
        raise NotImplementedError

    def log_batch(self, prompt_tokens: int) -> None:
        """A line the engine prints when it runs a generation batch (none by default)."""

    def count_decode_token(self) -> None:
        """One more decode token generated (SGLang logs a decode batch line every so many)."""

    def needs_api_key(self, path: str) -> bool:
        raise NotImplementedError

    def server_args(self) -> list[tuple[str, object]]:
        return [("model_path", self.cfg.model), ("host", self.cfg.host), ("port", self.cfg.port), ("tp_size", self.cfg.tp)]

    def metrics_text(self) -> str:
        raise NotImplementedError

    def _metrics(self, prefix: str, names: Mapping[str, str]) -> str:
        label = f'{{model_name="{self.cfg.model}"}}'
        values = {
            "prompt_tokens": ("counter", "Number of prefill tokens processed.", self.state.prompt_tokens),
            "generation_tokens": ("counter", "Number of generation tokens processed.", self.state.generation_tokens),
            "running": ("gauge", "The number of running requests.", self.state.running_requests),
            "waiting": ("gauge", "The number of waiting requests.", 0),
            "cache_usage": ("gauge", "The token usage of the KV cache.", 0.0),
        }
        lines = []
        for key, (kind, help_text, value) in values.items():
            name = f"{prefix}:{names[key]}"
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name}{label} {float(value)}"]
        with self.state.lock:
            lines += self.state.ttft.lines(f"{prefix}:time_to_first_token_seconds", label)
            lines += self.state.itl.lines(f"{prefix}:inter_token_latency_seconds", label)
        return "\n".join(lines) + "\n"


class SglangSimulator(Simulator):
    """SGLang's wording: ``[YYYY-MM-DD HH:MM:SS TPn] message``, no level name."""

    def rank_line(self, rank: int, message: str) -> None:
        self.console.line(f"[{sglang_stamp()} TP{rank}] {message}")

    def main_line(self, message: str) -> None:
        self.console.line(f"[{sglang_stamp()}] {message}")

    def all_ranks(self, message: str) -> None:
        for rank in self.ranks():
            self.rank_line(rank, message)

    def access_line(self, message: str) -> None:
        self.main_line(f"INFO:     {message}")

    def count_decode_token(self) -> None:
        """Every SIM_DECODE_LOG_INTERVAL decode tokens, SGLang's decode batch line: the requests
        running and waiting, and the tokens generated per second since the last line."""
        interval = self.cfg.decode_log_interval
        if interval <= 0:
            return
        with self.state.lock:
            now = time.monotonic()
            self.state.decode_tokens += 1
            if self.state.decode_tokens < interval:
                return
            since = self.state.decode_since or now
            rate = self.state.decode_tokens / (now - since) if now > since else 0.0
            self.state.decode_tokens, self.state.decode_since = 0, now
            running, queued = self.state.running_requests, max(0, self.state.in_flight - self.state.running_requests)
        self.rank_line(
            0, f"Decode batch. #running-req: {running}, #token: {running * 64}, token usage: 0.00, gen throughput (token/s): {rate:.2f}, #queue-req: {queued}"
        )

    def log_batch(self, prompt_tokens: int) -> None:
        with self.state.lock:
            if self.state.running_requests <= 1:  # the first request after an idle time: a new batch
                self.state.decode_tokens, self.state.decode_since = 0, time.monotonic()
        self.rank_line(0, f"Prefill batch. #new-seq: 1, #new-token: {prompt_tokens}, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0")

    def needs_api_key(self, path: str) -> bool:
        return not path.startswith(("/health", "/metrics"))

    def server_args(self) -> list[tuple[str, object]]:
        cfg = self.cfg
        return [
            ("model_path", cfg.model),
            ("tokenizer_path", cfg.model),
            ("tokenizer_mode", "auto"),
            ("skip_tokenizer_init", False),
            ("load_format", "auto"),
            ("trust_remote_code", True),
            ("dtype", "auto"),
            ("kv_cache_dtype", "auto"),
            ("quantization", None),
            ("context_length", None),
            ("device", "cuda"),
            ("served_model_name", cfg.model),
            ("chat_template", None),
            ("is_embedding", False),
            ("revision", None),
            ("host", cfg.host),
            ("port", cfg.port),
            ("mem_fraction_static", 0.88),
            ("max_running_requests", None),
            ("max_total_tokens", None),
            ("chunked_prefill_size", 8192),
            ("max_prefill_tokens", 16384),
            ("schedule_policy", "fcfs"),
            ("schedule_conservativeness", 1.0),
            ("cpu_offload_gb", 0),
            ("tp_size", cfg.tp),
            ("stream_interval", 1),
            ("stream_output", False),
            ("random_seed", 393109793),
            ("watchdog_timeout", 300),
            ("dist_timeout", None),
            ("download_dir", None),
            ("base_gpu_id", 0),
            ("gpu_id_step", 1),
            ("log_level", "info"),
            ("log_level_http", None),
            ("log_requests", False),
            ("show_time_cost", False),
            ("enable_metrics", True),
            ("decode_log_interval", 40),
            ("api_key", (cfg.api_key if cfg.leak_api_key else "<redacted>") if cfg.api_key else None),
            ("file_storage_path", "sglang_storage"),
            ("enable_cache_report", False),
            ("reasoning_parser", None),
            ("dp_size", 1),
            ("load_balance_method", "round_robin"),
            ("ep_size", 1),
            ("dist_init_addr", f"{cfg.dist_init_addr[0]}:{cfg.dist_init_addr[1]}" if cfg.dist_init_addr else None),
            ("nnodes", cfg.nnodes),
            ("node_rank", cfg.node_rank),
            ("json_model_override_args", "{}"),
            ("attention_backend", "flashinfer"),
            ("sampling_backend", "flashinfer"),
            ("grammar_backend", "xgrammar"),
            ("speculative_algorithm", None),
            ("disable_radix_cache", False),
            ("disable_cuda_graph", False),
            ("disable_cuda_graph_padding", False),
            ("enable_nccl_nvls", False),
            ("disable_custom_all_reduce", False),
            ("enable_dp_attention", False),
            ("enable_ep_moe", False),
            ("enable_torch_compile", False),
            ("cuda_graph_max_bs", CAPTURE_BATCH_SIZES[0]),
            ("cuda_graph_bs", None),
        ]

    def metrics_text(self) -> str:
        names = {
            "prompt_tokens": "prompt_tokens_total",
            "generation_tokens": "generation_tokens_total",
            "running": "num_running_reqs",
            "waiting": "num_queue_reqs",
            "cache_usage": "token_usage",
        }
        return self._metrics("sglang", names)

    # ---- phases
    def starting(self) -> Iterator[None]:
        self.console.line(f"INFO {vllm_stamp()} __init__.py:190] Automatically detected platform cuda.")
        args = ", ".join(f"{key}={value!r}" for key, value in self.server_args())
        self.main_line(f"server_args=ServerArgs({args})")
        self.console.line(TRANSFORMERS_CACHE_WARNING)
        self.console.line("  warnings.warn(")
        self.pause(0.25)
        for _rank in range(self.cfg.tp):
            self.console.line(f"INFO {vllm_stamp()} __init__.py:190] Automatically detected platform cuda.")
        self.pause(0.25)
        self.all_ranks("Init torch distributed begin.")
        self.pause(0.2)
        self.all_ranks(f"sglang is using nccl=={NCCL_VERSION}")
        yield
        if self.dist is not None:
            self.dist.rendezvous(self.stop)
        if self.cfg.tp > 2:
            self.all_ranks(CUSTOM_ALLREDUCE_PCIE)
        self.pause(0.3)
        self.all_ranks("Init torch distributed ends. mem usage=1.37 GB")

    def loading_weights(self) -> Iterator[None]:
        self.all_ranks("Load weight begin. avail mem=137.84 GB")
        # each TP scheduler process imports CUTE_DSL and logs its handled import error through SGLang's logger
        self.all_ranks(CUTE_DSL_PACKAGE_WALK)
        self.all_ranks(IGNORABLE_MLIR_ERROR)
        if self.cfg.scenario == "unknown_error":
            self.rank_line(self.lead_rank, UNKNOWN_ERROR_LINE)
        self.rank_line(self.lead_rank, "Using model weights format ['*.safetensors']")
        self.pause(0.05)
        yield from self.progress_bar(self.cfg.shards, shard_status, share=0.9)
        self.pause(0.05)
        self.all_ranks("Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=54.11 GB, mem usage=83.73 GB.")

    def allocating_kv_cache(self) -> Iterator[None]:
        self.pause(0.6)
        yield
        self.all_ranks(f"KV Cache is allocated. #tokens: {KV_TOKENS}, K size: 13.52 GB, V size: 13.52 GB")
        self.pause(0.4)
        self.all_ranks("Memory pool end. avail mem=26.32 GB")

    def capturing_cuda_graphs(self) -> Iterator[None]:
        begin = "Capture cuda graph begin. This can take up to several minutes. avail mem=25.71 GB"
        started = time.monotonic()
        self.rank_line(self.lead_rank, begin)
        total = len(CAPTURE_BATCH_SIZES)
        # tqdm's first refresh leaves the line open: the next rank's line lands right after it.
        self.console.write("\r" + bar_status(self._capture_description(0), 0, total, 0.0))
        for rank in self.ranks():
            if rank != self.lead_rank:
                self.rank_line(rank, begin)
        self.all_ranks(
            f"Using default MoE config. Performance might be sub-optimal! Config file not found at {SGL}/layers/moe/fused_moe_triton/configs/{MOE_CONFIG}"
        )
        yield from self.progress_bar(total, lambda done, count, elapsed: bar_status(self._capture_description(done), done, count, elapsed), share=0.9)
        elapsed = time.monotonic() - started
        for rank in self.ranks():
            self.rank_line(rank, f"Capture cuda graph end. Time elapsed: {elapsed + rank * 0.01:.2f} s. avail mem=24.93 GB. mem usage=0.78 GB.")
        self.pause(0.1)
        self.all_ranks(
            f"max_total_num_tokens={KV_TOKENS}, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=2048, context_len={CONTEXT_LEN}"
        )

    @staticmethod
    def _capture_description(done: int) -> str:
        index = min(done, len(CAPTURE_BATCH_SIZES) - 1)
        return f"Capturing batches (bs={CAPTURE_BATCH_SIZES[index]} avail_mem={25.70 - 0.04 * done:.2f} GB)"

    def warming_up(self) -> Iterator[None]:
        if self.cfg.node_rank >= 1:
            yield from self.placeholder_health_server()
            return
        self.main_line(f"INFO:     Started server process [{self.pid}]")
        self.main_line("INFO:     Waiting for application startup.")
        self.main_line("INFO:     Application startup complete.")
        self.bind_port()
        self.open_http()
        self.main_line(f"INFO:     Uvicorn running on http://{self.cfg.host}:{self.cfg.port} (Press CTRL+C to quit)")
        self.pause(0.2)
        self.access_line(f'127.0.0.1:{self.rng.randint(40000, 60000)} - "GET /model_info HTTP/1.1" 200 OK')
        yield
        self.pause(0.6)
        self.log_batch(prompt_tokens=6)
        self.pause(0.2)
        self.access_line(f'127.0.0.1:{self.rng.randint(40000, 60000)} - "POST /generate HTTP/1.1" 200 OK')
        self.main_line(READY_LINE)
        self.become_ready()

    def placeholder_health_server(self) -> Iterator[None]:
        """A node of rank >= 1: its schedulers are ready; it serves only a health placeholder."""
        self.pause(0.3)
        yield
        self.bind_port()
        self.main_line(f"Starting dummy health check server at {self.cfg.host}:{self.cfg.port}")
        self.http.listen()
        self.state.healthy.set()

    # ---- endings
    def dist_failed(self, error: str) -> NoReturn:
        """A distributed error in a scheduler (a peer gone, a rendezvous that timed out): traceback, sigquit, SIGKILL."""
        self.console.end_partial_line()
        phase = SERVING if self.serving else self._phase
        head = _SGLANG_RUNTIME_HEAD if phase in ("warming_up", SERVING) else _SGLANG_INIT_HEAD
        frames = (*head, *SGLANG_PHASE_FRAMES[phase], *DIST_FRAMES)
        self.rank_line(self.lead_rank, "Scheduler hit an exception: Traceback (most recent call last):")
        for line in [*render_frames(frames), error]:
            self.console.line(line)
        self.console.line("")
        self.main_line(SIGQUIT_LINE)
        kill_self()

    def crash(self, phase: str, failure: str) -> NoReturn:
        rank = self.failing_rank
        self.rank_line(rank, "Scheduler hit an exception: Traceback (most recent call last):")
        lines = sglang_traceback(phase, failure, rank, self.pid)
        if self.cfg.leak_api_key and self.cfg.api_key:
            lines[-1] += f" (server_args.api_key={self.cfg.api_key!r})"
        for line in lines:
            self.console.line(line)
        self.console.line("")
        self.main_line(SIGQUIT_LINE)
        kill_self()

    def engine_died(self) -> None:
        self.console.end_partial_line()
        self.rank_line(self.lead_rank, "Scheduler hit an exception: Traceback (most recent call last):")
        for line in sglang_traceback(SERVING, "scheduler_exception", self.lead_rank, self.pid):
            self.console.line(line)
        self.console.line("")

    def bind_failed(self, errno: int, strerror: str) -> NoReturn:
        address = (self.cfg.host, self.cfg.port)
        self.main_line(f"ERROR:    [Errno {errno}] error while attempting to bind on address {address!r}: {strerror.lower()}")
        self.main_line("INFO:     Waiting for application shutdown.")
        self.main_line("INFO:     Application shutdown complete.")
        raise SystemExit(1)

    def shutdown_lines(self) -> None:
        self.main_line("INFO:     Shutting down")
        self.main_line("INFO:     Waiting for application shutdown.")
        self.main_line("INFO:     Application shutdown complete.")
        self.main_line(f"INFO:     Finished server process [{self.pid}]")


class VllmSimulator(Simulator):
    """vLLM's wording: ``LEVEL MM-DD HH:MM:SS [file.py:N] message``, workers prefixed with their rank."""

    def log(self, level: str, source: str, message: str, rank: int | None = None) -> None:
        prefix = "" if rank is None else f"(VllmWorker rank={rank} pid={self.pid + 1 + rank}) "
        self.console.line(f"{prefix}{level} {vllm_stamp()} [{source}] {message}")

    def each_worker(self, level: str, source: str, message: Callable[[int], str]) -> None:
        for rank in self.ranks():
            self.log(level, source, message(rank), rank)

    def main_line(self, message: str) -> None:
        self.log("INFO", "api_server.py:1351", message)

    def access_line(self, message: str) -> None:
        self.console.line(f"INFO:     {message}")

    def needs_api_key(self, path: str) -> bool:
        return path.startswith("/v1")

    def metrics_text(self) -> str:
        names = {
            "prompt_tokens": "prompt_tokens_total",
            "generation_tokens": "generation_tokens_total",
            "running": "num_requests_running",
            "waiting": "num_requests_waiting",
            "cache_usage": "gpu_cache_usage_perc",
        }
        return self._metrics("vllm", names)

    @property
    def headless(self) -> bool:
        """A node of rank >= 1 of a data parallel deployment (``--headless``): engines only, no HTTP."""
        return self.cfg.node_rank >= 1

    def _headless_launch(self) -> None:
        host, port = self.cfg.dist_init_addr or ("127.0.0.1", 0)
        local = len(self.node_ranks)
        self.log("INFO", "serve.py:212", f"Launching {local} data parallel engine(s) in headless mode, with head node address tcp://{host}:{port}.")

    # ---- phases
    def starting(self) -> Iterator[None]:
        cfg = self.cfg
        self.log("INFO", "__init__.py:244", "Automatically detected platform cuda.")
        if self.headless:
            self._headless_launch()
        else:
            self.log("INFO", "api_server.py:1395", f"vLLM API server version {VLLM_VERSION}")
        args = {"model": cfg.model, "host": cfg.host, "port": cfg.port, "trust_remote_code": True, "tensor_parallel_size": cfg.tp}
        self.log("INFO", "cli_args.py:325", f"non-default args: {args!r}")
        if not self.headless:
            self.bind_port()
        self.pause(0.2)
        self.log("INFO", "config.py:841", "This model supports multiple tasks: {'generate', 'reward', 'classify', 'embed'}. Defaulting to 'generate'.")
        self.log("INFO", "config.py:2285", "Chunked prefill is enabled with max_num_batched_tokens=8192.")
        self.log(
            "WARNING",
            "multiproc_worker_utils.py:307",
            "Reducing Torch parallelism from 48 threads to 1 to avoid unnecessary CPU contention. "
            "Set OMP_NUM_THREADS in the external environment to tune this value as needed.",
        )
        self.log("INFO", "core.py:69", f"Initializing a V1 LLM engine (v{VLLM_VERSION}) with config: model={cfg.model!r}, tensor_parallel_size={cfg.tp}")
        self.pause(0.3)
        self.each_worker("INFO", "pynccl.py:70", lambda rank: f"vLLM is using nccl=={VLLM_NCCL_VERSION}")
        yield
        if self.dist is not None:
            self.before_rendezvous()
            self.dist.rendezvous(self.stop)  # the data parallel handshake with node 0's front end
        self.pause(0.2)
        self.each_worker(
            "INFO",
            "parallel_state.py:1076",
            lambda rank: f"rank {rank} in world size {cfg.tp} is assigned as DP rank 0, PP rank 0, TP rank {rank}, EP rank {rank}",
        )
        if cfg.tp > 1:
            self.each_worker("WARNING", "custom_all_reduce.py:147", lambda rank: CUSTOM_ALLREDUCE_P2P)
        self.pause(0.3)

    def loading_weights(self) -> Iterator[None]:
        self.each_worker("INFO", "gpu_model_runner.py:1770", lambda rank: f"Starting to load model {self.cfg.model}...")
        for _rank in range(self.cfg.tp):
            self.console.line(f"{logging_stamp()} - {CUTE_DSL_WARNING}")
        if self.cfg.scenario == "unknown_error":
            self.log("INFO", "frobnicator.py:7", UNKNOWN_ERROR_LINE, 0)
        self.log("INFO", "weight_utils.py:292", "Using model weights format ['*.safetensors']", 0)
        self.pause(0.1)
        started = time.monotonic()
        yield from self.progress_bar(self.cfg.shards, shard_status, share=0.9)
        took = time.monotonic() - started
        self.each_worker("INFO", "default_loader.py:272", lambda rank: f"Loading weights took {took:.2f} seconds")
        self.each_worker("INFO", "gpu_model_runner.py:1801", lambda rank: f"Model loading took 83.74 GiB and {took + 0.4:.2f} seconds")

    def allocating_kv_cache(self) -> Iterator[None]:
        self.pause(0.6)
        yield
        self.each_worker("INFO", "gpu_worker.py:232", lambda rank: "Available KV cache memory: 27.03 GiB")
        self.log("INFO", "kv_cache_utils.py:716", f"GPU KV cache size: {KV_TOKENS:,} tokens")
        self.log("INFO", "kv_cache_utils.py:720", f"Maximum concurrency for {CONTEXT_LEN:,} tokens per request: {KV_TOKENS / CONTEXT_LEN:.2f}x")
        self.pause(0.4)

    def capturing_cuda_graphs(self) -> Iterator[None]:
        started = time.monotonic()
        shapes = 67
        yield from self.progress_bar(shapes, lambda done, total, elapsed: bar_status("Capturing CUDA graph shapes", done, total, elapsed), share=0.9)
        took = time.monotonic() - started
        self.each_worker("INFO", "gpu_model_runner.py:2326", lambda rank: f"Graph capturing finished in {max(1, round(took))} secs, took 0.71 GiB")
        self.pause(0.1)
        self.log("INFO", "core.py:172", f"init engine (profile, create kv cache, warmup model) took {took + 4.2:.2f} seconds")

    def warming_up(self) -> Iterator[None]:
        self.pause(0.3)
        yield
        if self.headless:
            return  # its engines run and serve node 0's API server; it listens on nothing
        self.pause(0.7)
        self.log("INFO", "api_server.py:1457", f"Starting vLLM API server on http://{self.cfg.host}:{self.cfg.port}")
        self.log("INFO", "launcher.py:29", "Available routes are:")
        for route, methods in (("/health", "GET"), ("/v1/models", "GET"), ("/v1/completions", "POST"), ("/v1/chat/completions", "POST")):
            self.log("INFO", "launcher.py:37", f"Route: {route}, Methods: {methods}")
        self.console.line(f"INFO:     Started server process [{self.pid}]")
        self.console.line("INFO:     Waiting for application startup.")
        self.console.line("INFO:     Application startup complete.")
        self.open_http()
        self.become_ready()
        self.console.line(f"INFO:     Uvicorn running on http://{self.cfg.host}:{self.cfg.port} (Press CTRL+C to quit)")

    # ---- endings
    def crash(self, phase: str, failure: str) -> NoReturn:
        rank = self.failing_rank
        worker_source = "multiproc_executor.py:527"
        self.log("ERROR", worker_source, "WorkerProc hit an exception." if phase == SERVING else "WorkerProc failed to start.", rank)
        worker_lines = render_frames(VLLM_PHASE_FRAMES[phase] + failure_tail(VLLM, failure)) + exception_lines(phase, failure, rank, self.pid)
        for line in ["Traceback (most recent call last):", *worker_lines]:
            self.log("ERROR", worker_source, line, rank)
        if phase == SERVING:
            self._engine_dead()
        else:
            self._engine_failed_to_start()
        raise SystemExit(1)

    def _engine_failed_to_start(self) -> None:
        self.log("ERROR", "core.py:586", "EngineCore failed to start.")
        engine_lines = [
            *render_frames(VLLM_ENGINE_CORE_FRAMES),
            "Exception: WorkerProc initialization failed due to an exception in a background process. See stack trace for root cause.",
        ]
        for line in ["Traceback (most recent call last):", *engine_lines]:
            self.log("ERROR", "core.py:586", line)
        self.console.line("Traceback (most recent call last):")
        for line in render_frames(VLLM_CLI_FRAMES):
            self.console.line(line)
        self.console.line("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}")

    def engine_died(self) -> None:
        self.log("ERROR", "core.py:517", "EngineCore encountered a fatal error.")
        self.log("ERROR", "async_llm.py:420", "AsyncLLM output_handler failed.")
        self.log(
            "ERROR",
            "async_llm.py:420",
            "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.",
        )

    def _engine_dead(self) -> None:
        self.engine_died()
        self.shutdown_lines()

    def dist_failed(self, error: str) -> NoReturn:
        """A distributed error in the engine core (a peer gone, a handshake that timed out): its traceback, exit 1."""
        self.console.end_partial_line()
        self.log("ERROR", "core.py:517", "EngineCore encountered a fatal error.")
        for line in ["Traceback (most recent call last):", *render_frames(VLLM_ENGINE_CORE_FRAMES), error]:
            self.log("ERROR", "core.py:517", line)
        raise SystemExit(1)

    def bind_failed(self, errno: int, strerror: str) -> NoReturn:
        self.console.line("Traceback (most recent call last):")
        frames = (
            *VLLM_CLI_FRAMES,
            Frame(f"{VLLM}/entrypoints/openai/api_server.py", 1348, "run_server", "sock = create_server_socket(sock_addr)"),
            Frame(f"{VLLM}/entrypoints/openai/api_server.py", 1322, "create_server_socket", "sock.bind(addr)"),
        )
        for line in render_frames(frames):
            self.console.line(line)
        self.console.line(f"OSError: [Errno {errno}] {strerror}")
        raise SystemExit(1)

    def shutdown_lines(self) -> None:
        self.log("INFO", "launcher.py:80", "Shutting down FastAPI HTTP server.")
        self.console.line("INFO:     Shutting down")
        self.console.line("INFO:     Waiting for application shutdown.")
        self.console.line("INFO:     Application shutdown complete.")


class RaySimulator(VllmSimulator):
    """vLLM over nodes with Ray (SIM_RAY=1, SIM_ENGINE=vllm): node 0 starts the Ray head (``ray start
    --head``, without --block, as its unit's ExecStartPre does), then ``vllm serve ...
    --distributed-executor-backend ray``, whose placement group waits until every worker node joined;
    a node of rank >= 1 is a Ray worker (``ray start --address=HEAD:6379 --block``): Ray's lines only,
    no HTTP. The lines are Ray's (python/ray/scripts/scripts.py) and vLLM's (vllm/v1/executor/ray_utils.py)."""

    def run(self) -> int:
        if self.cfg.node_rank == 0:
            self.ray_started(head=True)
            return super().run()
        return self.worker_run()

    def ray_started(self, head: bool) -> None:
        host, port = self.cfg.dist_init_addr or ("127.0.0.1", 6379)
        self.console.line(f"Local node IP: {host if head else self.cfg.host}")
        self.console.line("")
        self.console.line("--------------------")
        self.console.line("Ray runtime started.")
        self.console.line("--------------------")
        self.console.line("")
        if head:
            for line in ("Next steps", "  To add another node to this Ray cluster, run", f"    ray start --address='{host}:{port}'", ""):
                self.console.line(line)
        self.console.line("To terminate the Ray runtime, run")
        self.console.line("  ray stop")

    def blocks(self) -> None:
        self.console.line("")
        self.console.line("--block")
        self.console.line("  This command will now block forever until terminated by a signal.")
        self.console.line(
            "  Running subprocesses are monitored and a message will be printed if any of them terminate unexpectedly. "
            "Subprocesses exit with SIGTERM will be treated as graceful, thus NOT reported."
        )

    def raylet_died(self) -> int:
        """ray start --block once one of its processes died: it kills the rest and exits 1."""
        self.console.line("")
        self.console.line("Some Ray subprocesses exited unexpectedly:")
        self.console.line("  raylet [exit code=1]")
        self.console.line("")
        self.console.line("Remaining processes will be killed.")
        return 1

    def worker_run(self) -> int:
        """A Ray worker node: joins the head (retrying), blocks, follows node 0 through its start; its
        raylet dies at the fault point of SIM_PHASE (crash) or once the head is gone."""
        assert self.dist is not None
        signal.signal(signal.SIGTERM, self.stop.request)
        signal.signal(signal.SIGINT, self.stop.request)
        try:
            self.dist.rendezvous(self.stop)
            self.ray_started(head=False)
            self.blocks()
            self.stop.watch = self.dist.check
            for phase in PHASES:
                if phase != PHASES[0]:
                    self.dist.barrier(phase, self.stop)
                self._phase = phase
                if self.cfg.fault_in(phase):
                    self.pause(0.5)
                    return self.raylet_died()
            while True:
                self.stop.sleep(3600)
        except ShutdownRequested:
            return 0
        except (RendezvousFailed, PeerLost):
            self.stop.watch = None
            return self.raylet_died()
        finally:
            self.dist.close()

    def before_rendezvous(self) -> None:
        self.log("INFO", "ray_utils.py:607", "No current placement group found. Creating a new placement group.")

    def rendezvous_failed(self, error: str) -> NoReturn:
        """The placement group was never ready: a worker node did not join (vLLM gives up after 1800 s)."""
        self.console.end_partial_line()
        specs = [{"CPU": 1.0} for _rank in range(self.cfg.tp)]
        self.log("ERROR", "core.py:586", "EngineCore failed to start.")
        self.log("ERROR", "core.py:586", "Traceback (most recent call last):")
        self.log(
            "ERROR",
            "core.py:586",
            f"ValueError: Cannot provide a placement group of placement_group_specs={specs!r} within 1800 seconds. "
            "See `ray status` and `ray list nodes` to make sure the cluster has enough resources.",
        )
        raise SystemExit(1)


def build_simulator(cfg: Config, console: Console) -> Simulator:
    if cfg.engine == "vllm" and cfg.ray:
        return RaySimulator(cfg, console)
    flavour = VllmSimulator if cfg.engine == "vllm" else SglangSimulator
    return flavour(cfg, console)


FAULT_FILE = "/etc/sglang-sim/fault.env"


def with_fault(env: Mapping[str, str]) -> dict[str, str]:
    """The environment with the fault file's KEY=VALUE lines over it (quotes as the fleet writes them)."""
    merged = dict(env)
    try:
        with open(env.get("SIM_FAULT_FILE", FAULT_FILE), encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return merged
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key.strip() and not key.lstrip().startswith("#"):
            merged[key.strip()] = shlex.split(value)[0] if value.strip() else ""
    return merged


def replay(env: Mapping[str, str], console: Console) -> int:
    """Print a real log's lines as this process's own output (SIM_SCENARIO=replay), then exit or hang."""
    path = env.get("SIM_REPLAY_FILE", "").strip()
    interval = _env_float(env, "SIM_REPLAY_INTERVAL", 0.02)
    end = _env_choice(env, "SIM_REPLAY_END", "exit", ("exit", "hang"))
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError as exc:
        raise ConfigError(f"SIM_REPLAY_FILE={path!r} cannot be read: {exc}") from None
    stop = StopFlag()
    signal.signal(signal.SIGTERM, stop.request)
    try:
        for text in lines:
            console.line(text)
            stop.sleep(interval)
        while end == "hang":
            stop.sleep(3600)
    except ShutdownRequested:
        return 0
    return 1


def main(env: Mapping[str, str] | None = None) -> int:
    environment = with_fault(os.environ) if env is None else env
    try:
        if environment.get("SIM_SCENARIO", "").strip() == "replay":
            return replay(environment, Console(sys.stdout.buffer))
        cfg = Config.from_env(environment)
    except ConfigError as exc:
        sys.stderr.write(f"sglang_sim: {exc}\n")
        return 2
    return build_simulator(cfg, Console(sys.stdout.buffer)).run()


if __name__ == "__main__":
    sys.exit(main())
