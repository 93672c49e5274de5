# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vLLM driver.

Private to the collection; may change at any time. Standard library only, no Ansible imports.

vLLM prints its level (``ERROR 07-09 00:57:28 [file.py:487] ...``). Its ``/health`` answers 200
while the engine cannot generate (a model its CPU attention does not support dies on the first
request), so its gates generate one token by default.
"""

from __future__ import annotations

import re
import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils._engines._driver import DecodeLog, EngineDriver, LinePrefix, LoadSource
from ansible_collections.inferops.runbooks.plugins.module_utils._rule_packs import VLLM

_LEVEL_WORDS = r"DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL"

# every 10 s while it serves: ``Avg prompt throughput: 0.0 tokens/s, Avg generation throughput:
# 812.3 tokens/s, Running: 4 reqs, Waiting: 0 reqs, ...``
_STATS = re.compile(
    r"Avg generation throughput:\s*(?P<gen>[0-9.]+)\s*tokens/s(?:,\s*Running:\s*(?P<running>\d+)\s*reqs)?(?:,\s*(?:Waiting|Pending):\s*(?P<queue>\d+)\s*reqs)?"
)


def stats_figures(message: str) -> t.Optional[t.Dict[str, float]]:
    """The figures of one periodic stats line; None when ``message`` is none."""
    match = _STATS.search(message)
    if not match:
        return None
    figures = {"gen_throughput": float(match["gen"])}
    if match["running"] is not None:
        figures["running"] = float(match["running"])
    if match["queue"] is not None:
        figures["queue"] = float(match["queue"])
    return figures


DRIVER = EngineDriver(
    name="vllm",
    rule_pack=VLLM,
    rule_changes={},
    smoke_by_default=True,
    # vLLM renamed its ITL histogram: the new name first
    histograms={
        "ttft": ("vllm:time_to_first_token_seconds",),
        "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    },
    decode_log=DecodeLog(
        source="vllm_stats",
        line_word="stats line",
        # vLLM's figures are averages over its logging interval, idle time included
        note="each an average over vLLM's 10 s logging interval",
        parse=stats_figures,
    ),
    version_words=("version", "(v"),
    version_patterns=(
        re.compile(r"\bvLLM API server version\s+v?(\d+\.\d+[\w.+\-]*)"),
        re.compile(r"\bLLM engine \(v(\d+\.\d+[\w.+\-]*)\)"),
    ),
    timings_pattern=None,
    load_sources=(LoadSource("/metrics", keyed=False, shape="metrics", gauges=("vllm:num_requests_running", "vllm:num_requests_waiting")),),
    # ``ERROR 07-09 00:57:28 [file.py:487] ``
    line_prefixes=(LinePrefix(re.compile(rf"^(?P<level>{_LEVEL_WORDS}) (?P<timestamp>\d\d-\d\d \d\d:\d\d:\d\d) \[?(?P<logger>[\w.\-]+:\d+)\] "), "DIWCEF"),),
    default_port=8000,
    # /health answers 200 while the engine cannot generate: the smoke test generates (smoke_by_default)
    health_path="/health",
    smoke_path="/v1/completions",
    default_unit="vllm.service",
    # vLLM answers 404 for a model it does not serve: the smoke test then fails, as it should
    fallback_model="default",
    serving_gauges=("vllm:num_requests_running", "vllm:generation_tokens_total"),
    watch_generate_path="/v1/completions",
    command_pattern=re.compile(r"(?:^|[\s/=])(?:vllm\s+serve\b|vllm\.entrypoints\.|-m\s+vllm\b)"),
    # --shutdown-timeout N (0.18 and later): the running requests drain for up to N s (default 0: aborted at once)
    stop_drain="flag",
    drain_words="vLLM drains running requests",
    drain_flag=re.compile(r"(?:^|\s)--shutdown[-_]timeout(?:=|\s+)(\d+)(?=\s|;|$)"),
    drain_flag_name="--shutdown-timeout",
    # the longest window its source gives its engine process to free its device after the drain
    # (vllm/v1/engine/utils.py, ROCM_ENGINE_PROCESS_SHUTDOWN_TIMEOUT_S, 0.32.0)
    teardown_seconds=15,
    # --enable-sleep-mode with VLLM_SERVER_DEV_MODE=1: {"is_sleeping": true|false} (module_utils/_sleep.py)
    sleep_path="/is_sleeping",
    # data parallelism over nodes: node 0 runs the API server (--data-parallel-address, --data-parallel-rpc-port),
    # the others ``--headless --data-parallel-start-rank R``, which serve no HTTP at all. A headless node logs
    # ``Launching N data parallel engine(s) in headless mode, with head node address ...`` and, per engine,
    # ``init engine (profile, create kv cache, warmup model) took X seconds`` (rule vllm-init-engine, phase
    # warming_up): its engines are up and handshaking with node 0's
    worker_http="none",
    worker_ready_phase="warming_up",
)
