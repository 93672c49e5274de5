#!/usr/bin/python
# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: perf_canary
short_description: Measure an inference server with a short streaming load and judge it against the host's baseline
version_added: 0.2.0
description:
  - Sends O(requests) streaming C(/v1/completions) requests, O(concurrency) at a time, from the managed host to the
    server on loopback (the URL must name 127.0.0.0/8, C(::1) or C(localhost)); each has a prompt of about
    O(prompt_tokens) tokens and generates O(max_tokens) tokens (C(ignore_eos)). Nothing to install on the host - the
    standard library is enough.
  - Measures from the stream itself the output tokens per second of the whole load (all output tokens over its wall
    time), the time to the first token (TTFT) and the gaps between tokens (ITL), median and p90; and, when the server
    exports them in C(/metrics), its own TTFT and ITL histograms over the load (deltas of C(_sum), C(_count) and the
    buckets; vLLM's C(vllm:time_to_first_token_seconds) and C(vllm:inter_token_latency_seconds) or
    C(vllm:time_per_output_token_seconds), SGLang's C(sglang:time_to_first_token_seconds) and
    C(sglang:inter_token_latency_seconds)).
  - Judges the figures against the baseline, the median of the last O(baseline_count) passing canaries of the same
    host, hardware and model (whatever the configuration), with relative thresholds in the style of Keptn's quality
    gates (O(thresholds)). RV(canary.verdict) is V(pass), V(fail) or V(inconclusive) - no baseline yet, too few
    samples, or errors in the load. An inconclusive first canary without errors becomes the baseline.
  - The canaries are kept in C(<state_dir>/<unit>.canary.json) (the newest 50, replaced whole and durably). A store
    that is corrupt or not this collection's is reported in RV(problem), ignored, and kept aside as
    C(<file>.unusable) when the new one is written.
  - The module never fails because of a verdict - the caller decides what a V(fail) does. It fails when the canary
    cannot run at all (a URL off loopback, no model to name, a bad threshold).
author:
  - inferops.runbooks contributors (@inferops)
options:
  unit:
    description: The systemd unit of the server; names the store.
    type: str
    required: true
  url:
    description: Base URL of the server's OpenAI-compatible API, on loopback.
    type: str
    default: http://127.0.0.1:30000
  api_key:
    description: "Sent as C(Authorization: Bearer <key>) to C(/v1/*) when set. Never logged."
    type: str
  model:
    description: The model to name in the requests; the first one C(/v1/models) lists when omitted.
    type: str
  engine:
    description: Whose C(/metrics) names to read; every engine's are looked for with V(auto) or when omitted.
    type: str
    choices: [auto, sglang, vllm]
  requests:
    description: Requests in the load.
    type: int
    default: 16
  concurrency:
    description: Requests in flight at once.
    type: int
    default: 4
  prompt_tokens:
    description: About how many tokens each prompt has.
    type: int
    default: 512
  max_tokens:
    description: Tokens each request generates (C(ignore_eos), so exactly these unless the server stops it).
    type: int
    default: 128
  timeout:
    description: Seconds one request may take, whole.
    type: float
    default: 120.0
  warmup:
    description:
      - Requests sent first, at the same concurrency, generating at most 16 tokens each, and not measured - the first
        requests after a start pay one-time costs (kernels chosen for the batch's shapes, memory pools grown) that
        would be judged as the server's speed. One round (O(concurrency) requests) when omitted; C(0) sends none.
    type: int
  server_metrics:
    description: Read the server's own TTFT and ITL from C(/metrics) before and after the load.
    type: bool
    default: true
  thresholds:
    description:
      - Relative limits in percent against the baseline, per metric - C(throughput) (higher is better, default
        C(-10), that is C(>= -10%)), C(ttft_p90) and C(itl_p90) (lower is better, default C(+25), that is C(<= +25%)),
        C(ttft_median) and C(itl_median) (not judged by default). A number or a string such as C(-10%) or
        C(<= +25%); null leaves the metric unjudged.
    type: dict
    default: {}
  floors:
    description:
      - The noise floor of each metric - a change smaller than this is never a failure, however large it is
        relative to the baseline (on a shared machine a TTFT of 50 ms moves by more than 25 % between two runs).
        Milliseconds for C(ttft_p90), C(ttft_median) (default C(30)), C(itl_p90), C(itl_median) (default C(3)) -
        a number, or a string such as C(50ms) or C(0.05s); tokens per second for C(throughput) (default C(0)).
        0 or null switches a floor off.
    type: dict
    default: {}
  seed_baseline:
    description:
      - A canary without a baseline (the first of the host and model) becomes the baseline. Set to C(false) for a
        canary of a server in service (the precheck's), whose figures share the server with its traffic - it is kept,
        and counts as a baseline only when it passed against one.
    type: bool
    default: true
  journal:
    description:
      - Read the server's own decode figures logged in the unit's journal during the load - SGLang's C(Decode batch)
        lines (their gen throughput in tokens per second, C(#running-req), C(#queue-req)), vLLM's C(Avg generation throughput)
        lines (every 10 s, so a short load may see none) - and report them beside the stream's figures
        (RV(canary.journal)). Reported, not judged.
    type: bool
    default: true
  baseline_count:
    description: How many of the last passing canaries make the baseline (the median of each figure).
    type: int
    default: 5
  min_requests:
    description: Completed requests below which the canary is inconclusive.
    type: int
    default: 4
  hardware:
    description:
      - What the baseline is kept per besides the host and the model, such as C(8x NVIDIA H200). When omitted, the
        GPU names C(nvidia-smi) lists, or else the CPU model and count from C(/proc/cpuinfo).
    type: str
  host:
    description: The host's name in the store (the inventory name is a good one); the host's node name when omitted.
    type: str
  record:
    description: Keep this canary in the store (a pass, or a first inconclusive one, becomes part of the baseline).
    type: bool
    default: true
  run_id:
    description: The run this canary belongs to, kept with it.
    type: str
  state_dir:
    description: The directory of the collection's state on the host.
    type: path
    default: /var/lib/inferops
attributes:
  check_mode:
    support: full
    description: In check mode no load is sent and nothing is written; RV(canary.verdict) is V(skipped).
  diff_mode:
    support: none
    description: The store is state, not configuration.
seealso:
  - module: inferops.runbooks.wait_ready
"""

EXAMPLES = r"""
- name: Measure the new start against the host's baseline
  inferops.runbooks.perf_canary:
    unit: sglang.service
    url: http://127.0.0.1:30000
    api_key: "{{ sglang_api_key | default(omit) }}"
    engine: sglang
    requests: 16
    concurrency: 4
    thresholds: {throughput: "-10%", ttft_p90: "+25%"}
    host: "{{ inventory_hostname }}"
  register: canary

- name: Stop when the server got slower
  ansible.builtin.fail:
    msg: "{{ canary.canary.lines | join('; ') }}"
  when: canary.canary.verdict == 'fail'
"""

RETURN = r"""
canary:
  description: The canary, judged.
  returned: always
  type: dict
  contains:
    verdict:
      description: V(pass), V(fail), V(inconclusive), or V(skipped) in check mode.
      type: str
      sample: fail
    reason:
      description: Why, in words.
      type: str
      sample: "slower than the baseline: decode"
    lines:
      description: One line per figure, beside its baseline.
      type: list
      elements: str
      sample: ["decode 812 tok/s (baseline 1,604, -49%: FAIL)", "TTFT p90 412 ms (baseline 380 ms, +8%: ok)"]
    metrics:
      description: Per metric its C(value), C(baseline), C(change_pct), C(threshold_pct) and C(ok) (null when not judged).
      type: list
      elements: dict
    baseline:
      description: The baseline figure of each metric (the median of the baseline canaries).
      type: dict
    baseline_runs:
      description: How many canaries the baseline was taken from.
      type: int
    figures:
      description: The load's figures (C(output_tokens_per_s), C(ttft_median_s), C(ttft_p90_s), C(itl_median_s), C(itl_p90_s), C(errors), ...).
      type: dict
    server:
      description: The server's own TTFT and ITL over the load from C(/metrics) (C(metric), C(count), C(mean_s), C(p90_s)); null without.
      type: dict
    journal:
      description:
        - The server's decode lines in its journal during the load - C(lines), C(gen_throughput_median),
          C(gen_throughput_min), C(gen_throughput_max) (tokens/s), C(running_median), C(queue_max); null when it logged
          none, or O(journal) is off. Also the last line of RV(canary.lines), which begins with C(server log).
      type: dict
    samples:
      description: Every request, with its TTFT and token gaps.
      type: list
      elements: dict
    warmup:
      description: The unmeasured requests sent before the load (O(warmup)) - C(requests), C(ok_requests), C(max_tokens), C(seconds).
      type: dict
    started_at:
      description: When the measured load began (seconds since the epoch); the journal is read from there.
      type: float
    model:
      description: The model the load named.
      type: str
    hardware:
      description: The hardware the baseline is kept per.
      type: str
    host:
      description: The host's name in the store.
      type: str
store:
  description: Where the canaries are kept.
  returned: always
  type: str
  sample: /var/lib/inferops/sglang.service.canary.json
problem:
  description: Why the store on the host was ignored (corrupt, another unit's, not this collection's); null when it was not.
  returned: always
  type: str
set_aside:
  description: Where an unusable store was moved before the new one was written; null when none was.
  returned: always
  type: str
"""

import platform  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.inferops.runbooks.plugins.module_utils import _canary, _engines, _run_record  # noqa: E402


def detect_hardware(module: AnsibleModule) -> str:
    gpus: list[str] = []
    smi = module.get_bin_path("nvidia-smi")
    if smi:
        rc, out, _err = module.run_command([smi, "--query-gpu=name", "--format=csv,noheader"])
        if rc == 0:
            gpus = out.splitlines()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            cpuinfo = handle.read()
    except OSError:
        cpuinfo = ""
    return _canary.hardware_string(cpuinfo, gpus)


def read_journal(module: AnsibleModule, unit: str, since: float) -> dict[str, object] | None:
    """The server's decode figures logged in the unit's journal since ``since`` (seconds since the
    epoch); None when journalctl is missing, fails or the server logged none."""
    journalctl = module.get_bin_path("journalctl")
    if not journalctl:
        return None
    argv = [journalctl, "--unit", unit, "--since", f"@{int(since)}", "--output", "json", "--no-pager", "--quiet"]
    rc, out, _err = module.run_command(argv)
    if rc != 0:
        return None
    return _canary.journal_figures(_canary.journal_messages(out, since))


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "required": True},
            "url": {"type": "str", "default": "http://127.0.0.1:30000"},
            "api_key": {"type": "str", "no_log": True},
            "model": {"type": "str"},
            "engine": {"type": "str", "choices": list(_engines.ENGINE_NAMES)},
            "requests": {"type": "int", "default": 16},
            "concurrency": {"type": "int", "default": 4},
            "prompt_tokens": {"type": "int", "default": 512, "no_log": False},
            "max_tokens": {"type": "int", "default": 128, "no_log": False},
            "timeout": {"type": "float", "default": 120.0},
            "warmup": {"type": "int"},
            "server_metrics": {"type": "bool", "default": True},
            "thresholds": {"type": "dict", "default": {}},
            "floors": {"type": "dict", "default": {}},
            "seed_baseline": {"type": "bool", "default": True},
            "journal": {"type": "bool", "default": True},
            "baseline_count": {"type": "int", "default": 5},
            "min_requests": {"type": "int", "default": 4},
            "hardware": {"type": "str"},
            "host": {"type": "str"},
            "record": {"type": "bool", "default": True},
            "run_id": {"type": "str"},
            "state_dir": {"type": "path", "default": _run_record.STATE_DIR},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        store = _canary.store_path(params["unit"], params["state_dir"])
        thresholds = _canary.parse_thresholds(params["thresholds"])
        floors = _canary.parse_floors(params["floors"])
        spec = _canary.LoadSpec(params["requests"], params["concurrency"], params["prompt_tokens"], params["max_tokens"], params["timeout"], params["warmup"])
        _canary.check_spec(spec)
        _canary.loopback_target(params["url"])
    except (_canary.CanaryError, _run_record.RecordError) as exc:
        module.fail_json(msg=f"perf_canary: {exc}")
    if params["baseline_count"] < 1 or params["min_requests"] < 1:
        module.fail_json(msg="perf_canary: baseline_count and min_requests must be integers >= 1")
    host = params["host"] or platform.node()
    hardware = params["hardware"] or detect_hardware(module)
    history, problem = _canary.read_store(store, params["unit"])
    if module.check_mode:
        skipped: dict[str, object] = {"verdict": "skipped", "reason": "check mode: no load sent", "lines": [], "host": host, "hardware": hardware}
        module.exit_json(changed=False, canary=skipped, store=store, problem=problem, set_aside=None)
    try:
        run = _canary.run_load(params["url"], spec, params["api_key"], params["model"], params["engine"], params["server_metrics"])
    except _canary.CanaryError as exc:
        module.fail_json(msg=f"perf_canary: the canary cannot run: {exc}", store=store, problem=problem)
    run["journal"] = read_journal(module, params["unit"], run["started_at"]) if params["journal"] else None
    verdict = _canary.judge(
        run["figures"],
        history,
        host,
        hardware,
        run["model"],
        thresholds,
        params["baseline_count"],
        params["min_requests"],
        floors=floors,
        seed_baseline=params["seed_baseline"],
    )
    logged = _canary.journal_line(run["journal"])
    if logged:
        verdict["lines"].append(logged)
    canary: dict[str, object] = {**verdict, **run, "host": host, "hardware": hardware}
    set_aside = None
    if params["record"]:
        entries = [*history, _canary.entry_for(run, verdict, host, hardware, params["run_id"])]
        try:
            set_aside = _canary.write_store(store, params["unit"], entries, problem)
        except OSError as exc:
            module.fail_json(msg=f"perf_canary: cannot write the canary store {store}: {exc}", canary=canary, store=store)
    module.exit_json(changed=bool(params["record"]), canary=canary, store=store, problem=problem, set_aside=set_aside)


if __name__ == "__main__":
    main()
