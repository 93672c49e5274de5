# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The SGLang driver.

Private to the collection; may change at any time. Standard library only, no Ansible imports.

SGLang prints no level name (``[2025-03-08 12:29:21 TP0] message``): severity comes from its rule
pack. Its ``/health_generate`` generates one token, so no smoke test is needed by default.
"""

from __future__ import annotations

import re
import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils._engines._driver import DecodeLog, EngineDriver, LinePrefix, LoadSource
from ansible_collections.inferops.runbooks.plugins.module_utils._rule_packs import SGLANG

# every 40 decode steps by default: ``Decode batch. #running-req: 16, #token: 17992, token usage:
# 0.04, gen throughput (token/s): 91.81, #queue-req: 0``
_DECODE = re.compile(r"Decode batch[.,]\s*(?P<fields>.*)")
_DECODE_FIELD = re.compile(r"(?P<key>#running-req|#queue-req|#token|token usage|gen throughput \(token/s\))\s*:\s*(?P<value>[0-9.]+)")
_DECODE_NAMES = {
    "gen throughput (token/s)": "gen_throughput",
    "#running-req": "running",
    "#queue-req": "queue",
    "#token": "tokens",
    "token usage": "token_usage",
}


def decode_figures(message: str) -> t.Optional[t.Dict[str, float]]:
    """The figures of one decode batch line; None when ``message`` is none or has no throughput."""
    match = _DECODE.search(message)
    if not match:
        return None
    fields = {found["key"]: found["value"] for found in _DECODE_FIELD.finditer(match["fields"])}
    if "gen throughput (token/s)" not in fields:
        return None
    try:
        return {_DECODE_NAMES[key]: float(value) for key, value in fields.items()}
    except ValueError:
        return None


DRIVER = EngineDriver(
    name="sglang",
    rule_pack=SGLANG,
    # SGLang's uvicorn is up before the warmup request has run: only "The server is fired up and
    # ready to roll" is ready
    rule_changes={
        "common-uvicorn-startup-complete": {
            "class": "progress",
            "reason": "SGLang's HTTP server is up; it still runs its warmup request, and only then is it ready.",
        },
    },
    smoke_by_default=False,
    histograms={"ttft": ("sglang:time_to_first_token_seconds",), "itl": ("sglang:inter_token_latency_seconds",)},
    decode_log=DecodeLog(source="sglang_decode_batch", line_word="decode line", note="", parse=decode_figures),
    version_words=("sglang",),
    version_patterns=(re.compile(r"\bsglang(?:\s+version)?\s*[=:]?\s*v?(\d+\.\d+\.\d+[\w.+\-]*)", re.IGNORECASE),),
    timings_pattern=re.compile(r"Engine startup timings \(s\):\s*(.*)", re.IGNORECASE),
    # /v1/loads since 0.5.8, /get_load until 0.5.20 (a shim of /v1/loads at the end), the keyless
    # /metrics with --enable-metrics; --api-key guards every path but /health* and /metrics
    load_sources=(
        LoadSource("/v1/loads", keyed=True, shape="v1_loads"),
        LoadSource("/get_load", keyed=True, shape="get_load"),
        LoadSource("/metrics", keyed=False, shape="metrics", gauges=("sglang:num_running_reqs", "sglang:num_queue_reqs")),
    ),
    # ``[2025-03-08 12:29:21 TP0] `` (the day left out by older servers), with the ranks of the process
    line_prefixes=(LinePrefix(re.compile(r"^\[(?P<timestamp>(?:\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d)(?P<rank>(?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*)\] "), "["),),
    default_port=30000,
    health_path="/health_generate",
    smoke_path="/v1/completions",
    default_unit="sglang.service",
    # SGLang serves its one model under any name
    fallback_model="default",
    serving_gauges=("sglang:num_running_reqs", "sglang:generation_tokens_total"),
    watch_generate_path="/generate",
    command_pattern=re.compile(r"(?:^|[\s/=])(?:sglang(?:\.launch_server|\.srt\.|\s+serve\b)|-m\s+sglang\b)"),
    # sigterm_watchdog: health answers 503 and the server waits until its running requests are done, with no
    # bound of its own (no flag sets one; SGL_FORCE_SHUTDOWN or an unhealthy server exits at once)
    stop_drain="unbounded",
    drain_words="SGLang drains its running requests on SIGTERM with no bound of its own (sigterm_watchdog)",
)
