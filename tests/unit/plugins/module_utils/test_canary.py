"""The performance canary's core (module_utils/_canary.py): the judge, the store, the server's
figures from /metrics, and the load itself against the simulator over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils import _canary
from tests.unit.conftest import corpus_lines
from tests.unit.harness.test_simulator import SimProcess, free_port
from tests.unit.plugins.conftest import SIM_KEY

HOST, HARDWARE, MODEL = "gpu-a0", "8x NVIDIA H200", "/models/DeepSeek-R1"


def figures(tps: float = 1604.0, ttft_p90: float = 0.40, itl_p90: float = 0.020, **extra: Any) -> dict[str, Any]:
    base = {
        "requests": 16,
        "ok_requests": 16,
        "errors": 0,
        "error_examples": [],
        "output_tokens": 2048,
        "output_tokens_per_s": tps,
        "ttft_median_s": ttft_p90 * 0.8,
        "ttft_p90_s": ttft_p90,
        "itl_median_s": itl_p90 * 0.8,
        "itl_p90_s": itl_p90,
        "itl_samples": 2032,
    }
    return {**base, **extra}


def entry(verdict: str = "pass", host: str = HOST, hardware: str = HARDWARE, model: str = MODEL, baseline: bool | None = None, **figs: Any) -> dict[str, Any]:
    return {
        "host": host,
        "hardware": hardware,
        "model": model,
        "figures": figures(**figs),
        "verdict": verdict,
        "baseline": verdict == "pass" if baseline is None else baseline,
    }


def judge(run: dict[str, Any], history: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
    return _canary.judge(run, history, HOST, HARDWARE, MODEL, **kwargs)


# --------------------------------------------------------------------------------------------------
# The judge


def test_the_first_canary_is_inconclusive_and_becomes_the_baseline() -> None:
    verdict = judge(figures(), [])
    assert verdict["verdict"] == "inconclusive"
    assert verdict["becomes_baseline"] is True
    assert "no baseline yet" in verdict["reason"]
    assert "decode 1,604 tok/s" in verdict["lines"]
    stored = _canary.entry_for({"model": MODEL, "figures": figures()}, verdict, HOST, HARDWARE, now=1)
    assert stored["baseline"] is True and stored["verdict"] == "inconclusive"
    assert judge(figures(), [stored])["verdict"] == "pass"


def test_within_the_thresholds_passes() -> None:
    verdict = judge(figures(tps=1500, ttft_p90=0.48, itl_p90=0.024), [entry()])
    assert verdict["verdict"] == "pass", verdict
    assert verdict["baseline"]["throughput"] == 1604
    assert verdict["lines"][0] == "decode 1,500 tok/s (baseline 1,604, -6%: ok)"
    assert "TTFT p90 480 ms (baseline 400 ms, +20%: ok)" in verdict["lines"]
    assert "TTFT median 384 ms (baseline 320 ms, +20%: not judged)" in verdict["lines"]


def test_half_the_throughput_fails_with_the_figures_beside_the_baseline() -> None:
    verdict = judge(figures(tps=812), [entry()])
    assert verdict["verdict"] == "fail"
    assert verdict["lines"][0] == "decode 812 tok/s (baseline 1,604, -49%: FAIL)"
    assert verdict["reason"] == "slower than the baseline: decode"
    throughput = verdict["metrics"][0]
    assert (throughput["name"], throughput["change_pct"], throughput["threshold_pct"], throughput["ok"]) == ("throughput", -49.4, -10.0, False)


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        (figures(tps=1444), "pass"),  # -9.98 %
        (figures(tps=1443), "fail"),  # -10.04 %
        (figures(ttft_p90=0.50), "pass"),  # +25 % exactly
        (figures(ttft_p90=0.51), "fail"),
        (figures(itl_p90=0.026), "fail"),
        (figures(tps=3000, ttft_p90=0.1, itl_p90=0.001), "pass"),  # faster is never a regression
    ],
)
def test_default_thresholds_are_keptn_style_relative_limits(run: dict[str, Any], expected: str) -> None:
    assert judge(run, [entry()])["verdict"] == expected


def test_thresholds_are_overridable_and_can_be_switched_off() -> None:
    slow_ttft = figures(ttft_p90=0.6)
    assert judge(slow_ttft, [entry()])["verdict"] == "fail"
    assert judge(slow_ttft, [entry()], thresholds=_canary.parse_thresholds({"ttft_p90": "<= +60%"}))["verdict"] == "pass"
    assert judge(slow_ttft, [entry()], thresholds=_canary.parse_thresholds({"ttft_p90": None}))["verdict"] == "pass"
    strict = _canary.parse_thresholds({"throughput": ">= -2%", "itl_median": "+5%"})
    assert (strict["throughput"], strict["itl_median"], strict["ttft_p90"]) == (-2.0, 5.0, 25.0)
    assert judge(figures(tps=1550), [entry()], thresholds=strict)["verdict"] == "fail"


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"latency": 5}, "no canary metric 'latency'"),
        ({"throughput": "<= -10%"}, "must be '>= N%'"),
        ({"ttft_p90": "fast"}, "must be a percentage"),
        ({"ttft_p90": True}, "must be a percentage"),
        ({"itl_p90": float("nan")}, "finite"),
    ],
)
def test_bad_thresholds_are_refused(given: dict[str, Any], message: str) -> None:
    with pytest.raises(_canary.CanaryError, match=message):
        _canary.parse_thresholds(given)


def test_a_tiny_absolute_change_that_is_a_large_relative_one_passes_within_the_noise_floor() -> None:
    """A 50 ms TTFT that became 75 ms (+50 %) on a shared machine: noise, not a regression (default
    floor 30 ms); an ITL of 2 ms that became 4 ms (+100 %): within the default 3 ms."""
    fast = [entry(ttft_p90=0.050, itl_p90=0.002)]
    verdict = judge(figures(ttft_p90=0.075, itl_p90=0.004), fast)
    assert verdict["verdict"] == "pass", verdict["lines"]
    ttft = next(metric for metric in verdict["metrics"] if metric["name"] == "ttft_p90")
    assert (ttft["change_pct"], ttft["ok"], ttft["within_floor"], ttft["floor"]) == (50.0, True, True, 0.030)
    assert "TTFT p90 75 ms (baseline 50 ms, +50%: ok, within the 30 ms floor)" in verdict["lines"]
    assert "ITL p90 4.0 ms (baseline 2.0 ms, +100%: ok, within the 3.0 ms floor)" in verdict["lines"]


def test_a_large_absolute_change_still_fails_whatever_the_floor() -> None:
    fast = [entry(ttft_p90=0.050, itl_p90=0.002)]
    verdict = judge(figures(ttft_p90=0.500, itl_p90=0.004), fast)
    assert verdict["verdict"] == "fail"
    assert "TTFT p90 500 ms (baseline 50 ms, +900%: FAIL)" in verdict["lines"]
    # just over the floor fails; the floor switched off, the tiny change fails too
    assert judge(figures(ttft_p90=0.081), fast)["verdict"] == "fail"
    assert judge(figures(ttft_p90=0.075), fast, floors=_canary.parse_floors({"ttft_p90": 0}))["verdict"] == "fail"
    # a floor on the throughput, in tokens per second: 20 tok/s less of 100 is within a 25 tok/s floor
    slow = figures(tps=80.0)
    assert judge(slow, [entry(tps=100.0)])["verdict"] == "fail"
    assert judge(slow, [entry(tps=100.0)], floors=_canary.parse_floors({"throughput": "25 tok/s"}))["verdict"] == "pass"


def test_floors_are_milliseconds_for_latencies_and_tokens_per_second_for_throughput() -> None:
    floors = _canary.parse_floors({"ttft_p90": 100, "itl_p90": "5ms", "ttft_median": "0.2s", "itl_median": None, "throughput": 20})
    assert floors == {"ttft_p90": 0.1, "itl_p90": 0.005, "ttft_median": 0.2, "itl_median": 0.0, "throughput": 20.0}
    assert _canary.parse_floors(None) == _canary.DEFAULT_FLOORS


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"latency": 5}, "no canary metric 'latency'"),
        ({"ttft_p90": "-5ms"}, "floor of ttft_p90 must be a number of ms >= 0"),
        ({"ttft_p90": "20 tok/s"}, "floor of ttft_p90 must be a number of ms"),
        ({"throughput": "5ms"}, "floor of throughput must be a number of tok/s"),
        ({"itl_p90": True}, "floor of itl_p90 must be a number of ms"),
        ({"itl_p90": -1}, ">= 0"),
        ({"itl_p90": float("inf")}, "finite"),
    ],
)
def test_bad_floors_are_refused(given: dict[str, Any], message: str) -> None:
    with pytest.raises(_canary.CanaryError, match=message):
        _canary.parse_floors(given)


def test_a_canary_of_a_server_in_service_does_not_start_a_baseline() -> None:
    verdict = judge(figures(), [], seed_baseline=False)
    assert (verdict["verdict"], verdict["becomes_baseline"]) == ("inconclusive", False)
    assert "a canary of a server in service does not start one" in verdict["reason"]
    assert _canary.entry_for({"figures": figures()}, verdict, HOST, HARDWARE)["baseline"] is False


def test_errors_in_the_load_are_inconclusive_never_a_pass() -> None:
    verdict = judge(figures(errors=2, ok_requests=14, error_examples=["HTTP 503: busy"]), [entry()])
    assert verdict["verdict"] == "inconclusive"
    assert verdict["reason"].startswith("2 of 16 requests failed (HTTP 503: busy)")
    assert verdict["becomes_baseline"] is False
    # nor does a load with errors become the first baseline
    assert judge(figures(errors=1, ok_requests=15), [])["becomes_baseline"] is False


def test_too_few_samples_are_inconclusive() -> None:
    assert "3 completed requests, 4 needed" in judge(figures(ok_requests=3, requests=3), [entry()])["reason"]
    assert "5 token gaps, 10 needed" in judge(figures(itl_samples=5), [entry()])["reason"]
    assert judge(figures(ok_requests=3, requests=3), [entry()], min_requests=2)["verdict"] == "pass"


def test_an_unmeasured_judged_metric_is_inconclusive() -> None:
    verdict = judge(figures(ttft_p90_s=None), [entry()])
    assert verdict["verdict"] == "inconclusive" and "TTFT p90 not measured" in verdict["reason"]


def test_one_outlier_among_the_baselines_does_not_move_the_median() -> None:
    history = [entry(tps=1600), entry(tps=1610), entry(tps=400), entry(tps=1590), entry(tps=1605)]
    verdict = judge(figures(tps=1550), history)
    assert verdict["baseline"]["throughput"] == 1600
    assert verdict["verdict"] == "pass"
    assert verdict["baseline_runs"] == 5


def test_only_the_last_k_baselines_count() -> None:
    history = [entry(tps=3000)] * 3 + [entry(tps=1600)] * 3
    assert judge(figures(tps=1600), history, baseline_count=3)["baseline"]["throughput"] == 1600
    assert judge(figures(tps=1600), history, baseline_count=6)["verdict"] == "fail"  # median of 6: 2300


def test_a_baseline_of_another_model_hardware_or_host_is_ignored() -> None:
    others = [entry(model="/models/Llama-3-8B", tps=9000), entry(hardware="8x NVIDIA H100", tps=900), entry(host="gpu-b0", tps=100)]
    verdict = judge(figures(), others)
    assert verdict["verdict"] == "inconclusive" and verdict["becomes_baseline"] is True
    verdict = judge(figures(), [*others, entry(tps=1600)])
    assert (verdict["verdict"], verdict["baseline"]["throughput"], verdict["baseline_runs"]) == ("pass", 1600, 1)


def test_failed_and_inconclusive_canaries_are_not_baselines() -> None:
    history = [entry(tps=1600), entry(verdict="fail", tps=800), entry(verdict="inconclusive", tps=100)]
    assert judge(figures(tps=1600), history)["baseline"]["throughput"] == 1600


def test_hardware_string() -> None:
    cpuinfo = "processor\t: 0\nmodel name\t: AMD EPYC 7763 64-Core Processor\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7763 64-Core Processor\n"
    assert _canary.hardware_string(cpuinfo) == "2x AMD EPYC 7763 64-Core Processor"
    assert _canary.hardware_string(cpuinfo, ["NVIDIA H200", "NVIDIA H200 ", ""]) == "2x NVIDIA H200"
    assert _canary.hardware_string("processor : 0\n") == "1x unknown CPU"


# --------------------------------------------------------------------------------------------------
# The store


def test_the_store_round_trips_bounded_and_atomic(tmp_path: Path) -> None:
    path = _canary.store_path("sglang.service", str(tmp_path))
    assert path == str(tmp_path / "sglang.service.canary.json")
    assert _canary.read_store(path, "sglang.service") == ([], None)
    entries = [entry(tps=1000 + n) for n in range(_canary.STORE_LIMIT + 5)]
    assert _canary.write_store(path, "sglang.service", entries) is None
    kept, problem = _canary.read_store(path, "sglang.service")
    assert problem is None and len(kept) == _canary.STORE_LIMIT
    assert kept[-1]["figures"]["output_tokens_per_s"] == 1000 + _canary.STORE_LIMIT + 4
    assert os.listdir(tmp_path) == ["sglang.service.canary.json"]  # no staging file left


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "not JSON"),
        ('{"version": 1, "unit": "sglang.service", "step": "done"}', "not a canary store"),
        ('{"version": 1, "kind": "inferops.canary", "unit": "vllm.service", "entries": []}', "names another unit"),
        ('{"version": 9, "kind": "inferops.canary", "unit": "sglang.service", "entries": []}', "unknown version 9"),
        ('{"version": 1, "kind": "inferops.canary", "unit": "sglang.service", "entries": [1]}', "not a list of canaries"),
    ],
)
def test_a_corrupt_or_foreign_store_is_reported_ignored_and_kept_aside(tmp_path: Path, text: str, problem: str) -> None:
    path = _canary.store_path("sglang.service", str(tmp_path))
    Path(path).write_text(text)
    entries, found = _canary.read_store(path, "sglang.service")
    assert entries == [] and found is not None and problem in found
    aside = _canary.write_store(path, "sglang.service", [entry()], found)
    assert aside == path + ".unusable" and Path(aside).read_text() == text
    assert len(_canary.read_store(path, "sglang.service")[0]) == 1


def test_a_unit_that_cannot_name_a_store_is_refused(tmp_path: Path) -> None:
    with pytest.raises(_canary._run_record.RecordError):
        _canary.store_path("../etc/passwd", str(tmp_path))


# --------------------------------------------------------------------------------------------------
# The server's figures from its journal


def corpus_throughput_lines() -> dict[str, list[str]]:
    """The real decode and stats lines of the corpus, by engine."""
    found: dict[str, list[str]] = {}
    for item in corpus_lines():
        if "gen throughput" in item["line"] or "Avg generation throughput" in item["line"]:
            found.setdefault(item["engine"], []).append(item["line"])
    return found


def test_sglangs_decode_batch_lines_from_the_corpus_are_read() -> None:
    lines = corpus_throughput_lines()["sglang"]
    assert len(lines) >= 2
    parsed = [_canary.decode_line(line) for line in lines]
    assert {"gen_throughput": 91.81, "running": 16.0, "queue": 0.0, "tokens": 17992.0, "token_usage": 0.04} in parsed
    assert {"gen_throughput": 81.25, "running": 26.0, "queue": 17.0, "tokens": 53692.0, "token_usage": 0.96} in parsed
    # the newer wording, a comma after "Decode batch" and the CUDA graph flag between the figures
    newer = "[2025-06-01 10:00:00 TP0] Decode batch, #running-req: 4, #token: 900, token usage: 0.01, cuda graph: True, gen throughput (token/s): 812.30, "
    newer += "#queue-req: 0,"
    assert _canary.decode_line(newer) == {"running": 4.0, "tokens": 900.0, "token_usage": 0.01, "gen_throughput": 812.3, "queue": 0.0}


def test_vllms_stats_lines_from_the_corpus_are_read() -> None:
    lines = corpus_throughput_lines()["vllm"]
    assert lines and all(_canary.decode_line(line) == {"gen_throughput": 0.0, "running": 0.0, "queue": 0.0} for line in lines)
    busy = lines[0].replace("Avg generation throughput: 0.0 tokens/s, Running: 0 reqs", "Avg generation throughput: 32.6 tokens/s, Running: 4 reqs")
    figures = _canary.journal_figures([busy])
    assert figures is not None and figures["source"] == "vllm_stats"
    assert _canary.journal_line(figures) == (
        "server log: gen throughput 32.6 tok/s (1 stats line, each an average over vLLM's 10 s logging interval; running 4, queued 0 at most)"
    )


@pytest.mark.parametrize(
    "line",
    [
        "[2025-03-11 16:17:02 TP0] Prefill batch. #new-seq: 1, #new-token: 512, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0",
        "[2025-03-11 16:17:03 TP0] Decode batch. #running-req: 16, #token: 17992",  # no throughput: nothing to report
        'INFO:     127.0.0.1:39428 - "POST /v1/completions HTTP/1.1" 200 OK',
    ],
)
def test_other_lines_are_not_decode_figures(line: str) -> None:
    assert _canary.decode_line(line) is None


def test_the_journal_figures_of_a_canary_window() -> None:
    entries = [
        {
            "__REALTIME_TIMESTAMP": "1700000000000000",
            "MESSAGE": "[TP0] Decode batch. #running-req: 1, #token: 5, token usage: 0.00, gen throughput (token/s): 9.00, #queue-req: 0",
        },
        *(
            {
                "__REALTIME_TIMESTAMP": str(1700000010000000 + n),
                "MESSAGE": f"[TP0] Decode batch. #running-req: 4, #token: 64, token usage: 0.00, gen throughput (token/s): {rate}, #queue-req: {queue}",
            }
            for n, (rate, queue) in enumerate([(780.0, 0), (812.0, 2), (830.5, 1)])
        ),
        # journald keeps a message that is not UTF-8 as bytes
        {"__REALTIME_TIMESTAMP": "1700000011000000", "MESSAGE": list(b"\xff [TP0] Prefill batch. #new-seq: 1")},
    ]
    text = "\n".join(json.dumps(entry) for entry in entries) + "\nnot json\n"
    messages = _canary.journal_messages(text, since=1700000005.0)
    assert len(messages) == 4  # the line before the window left out
    figures = _canary.journal_figures(messages)
    assert figures == {
        "source": "sglang_decode_batch",
        "lines": 3,
        "gen_throughput_median": 812.0,
        "gen_throughput_min": 780.0,
        "gen_throughput_max": 830.5,
        "running_median": 4.0,
        "queue_max": 2.0,
    }
    assert _canary.journal_line(figures) == "server log: gen throughput 812 tok/s (median of 3 decode lines, 780-830; running 4, queued 2 at most)"
    assert _canary.journal_figures(["nothing here"]) is None and _canary.journal_line(None) is None


# --------------------------------------------------------------------------------------------------
# The server's figures


VLLM_BEFORE = """# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{le="0.5",model_name="m"} 4.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 4.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 0.6
vllm:time_to_first_token_seconds_count{model_name="m"} 4.0
vllm:time_per_output_token_seconds_sum{model_name="m"} 1.0
vllm:time_per_output_token_seconds_count{model_name="m"} 100.0
vllm:num_requests_running{model_name="m",note="a \\"quoted\\" label"} 0.0 1700000000000
"""
VLLM_AFTER = VLLM_BEFORE.replace('le="0.1",model_name="m"} 2.0', 'le="0.1",model_name="m"} 2.0').replace(
    'le="0.5",model_name="m"} 4.0', 'le="0.5",model_name="m"} 14.0'
)
VLLM_AFTER = (
    VLLM_AFTER.replace('le="+Inf",model_name="m"} 4.0', 'le="+Inf",model_name="m"} 14.0')
    .replace('_sum{model_name="m"} 0.6', '_sum{model_name="m"} 3.6')
    .replace('time_to_first_token_seconds_count{model_name="m"} 4.0', 'time_to_first_token_seconds_count{model_name="m"} 14.0')
    .replace('time_per_output_token_seconds_sum{model_name="m"} 1.0', 'time_per_output_token_seconds_sum{model_name="m"} 3.0')
    .replace('time_per_output_token_seconds_count{model_name="m"} 100.0', 'time_per_output_token_seconds_count{model_name="m"} 200.0')
)


def test_prometheus_text_is_parsed_with_labels_and_timestamps() -> None:
    samples = _canary.parse_prometheus(VLLM_BEFORE + "garbage line\nname_only\n")
    assert samples["vllm:num_requests_running"] == [({"model_name": "m", "note": 'a "quoted" label'}, 0.0)]
    assert samples["vllm:time_to_first_token_seconds_bucket"][2] == ({"le": "+Inf", "model_name": "m"}, 4.0)
    assert "name_only" not in samples


def test_server_figures_are_deltas_and_fall_back_to_vllms_older_itl_name() -> None:
    server = _canary.server_figures(_canary.parse_prometheus(VLLM_BEFORE), _canary.parse_prometheus(VLLM_AFTER), "vllm")
    assert server is not None
    assert server["ttft"] == {"metric": "vllm:time_to_first_token_seconds", "count": 10.0, "mean_s": 0.3, "p90_s": 0.46}
    assert server["itl"]["metric"] == "vllm:time_per_output_token_seconds"
    assert server["itl"]["mean_s"] == 0.02 and server["itl"]["p90_s"] is None
    assert _canary.server_figures({}, _canary.parse_prometheus("sglang:num_running_reqs 0\n")) is None


def test_histogram_quantile_interpolates_like_prometheus() -> None:
    assert _canary.histogram_quantile(0.5, {0.1: 5.0, 0.2: 10.0, float("inf"): 10.0}) == pytest.approx(0.1)
    assert _canary.histogram_quantile(0.9, {0.1: 0.0, 1.0: 10.0, float("inf"): 10.0}) == pytest.approx(0.91)
    assert _canary.histogram_quantile(0.9, {0.1: 0.0, float("inf"): 5.0}) == 0.1
    assert _canary.histogram_quantile(0.9, {}) is None


# --------------------------------------------------------------------------------------------------
# The load, against the simulator over real HTTP

SPEC = _canary.LoadSpec(requests=8, concurrency=4, prompt_tokens=32, max_tokens=24, timeout=20)


def test_the_load_measures_the_stream_and_the_servers_own_figures(fast_sim: SimProcess) -> None:
    run = _canary.run_load(f"http://127.0.0.1:{fast_sim.port}", SPEC, api_key=SIM_KEY)
    got = run["figures"]
    assert run["model"] == "/models/DeepSeek-R1"  # read from /v1/models
    assert (got["requests"], got["ok_requests"], got["errors"], got["output_tokens"]) == (8, 8, 0, 8 * 24)
    assert got["itl_samples"] == 8 * 23
    assert 0.05 <= got["ttft_median_s"] <= got["ttft_p90_s"]
    assert got["itl_median_s"] >= 0.002  # 400 tok/s: 2.5 ms a token (sleeps never end early)
    # 4 streams at once, each at most 400 tok/s
    assert got["output_tokens_per_s"] <= 4 * 400
    sample = run["samples"][0]
    assert sample["ok"] and sample["tokens"] == 24 and len(sample["itl_s"]) == 23
    server = run["server"]
    assert server["ttft"]["metric"] == "sglang:time_to_first_token_seconds" and server["ttft"]["count"] == 8
    assert server["itl"]["metric"] == "sglang:inter_token_latency_seconds" and server["itl"]["count"] == 8 * 23
    assert server["ttft"]["mean_s"] >= 0.05
    # the simulator logs SGLang's decode batch lines as the load runs (every 40 decode tokens)
    logged = _canary.journal_figures(fast_sim.text.splitlines())
    assert logged is not None and logged["lines"] >= (8 * 23) // 40 and logged["gen_throughput_median"] > 0, logged


def test_a_slower_server_is_measured_slower_and_judged_a_regression(fast_sim: SimProcess, slow_sim: SimProcess) -> None:
    fast = _canary.run_load(f"http://127.0.0.1:{fast_sim.port}", SPEC, api_key=SIM_KEY, engine="sglang")
    slow = _canary.run_load(f"http://localhost:{slow_sim.port}/", SPEC, api_key=SIM_KEY, engine="vllm", model="/models/DeepSeek-R1")
    assert slow["figures"]["errors"] == 0
    # 2 running at 50 tok/s at most: 100 tok/s, a tenth of the fast one's (4 at 400 tok/s, less the TTFT)
    assert slow["figures"]["output_tokens_per_s"] <= 100 < fast["figures"]["output_tokens_per_s"] / 2
    assert slow["figures"]["ttft_p90_s"] > 0.2  # the queue for the 2 slots counts in the TTFT
    assert slow["server"]["ttft"]["metric"] == "vllm:time_to_first_token_seconds"
    baseline = _canary.entry_for(fast, {"verdict": "inconclusive", "becomes_baseline": True}, HOST, HARDWARE)
    verdict = _canary.judge(slow["figures"], [baseline], HOST, HARDWARE, "/models/DeepSeek-R1")
    assert verdict["verdict"] == "fail"
    assert verdict["lines"][0].startswith("decode ") and verdict["lines"][0].endswith(": FAIL)")
    json.dumps(slow)  # the whole result goes into reports


def test_errors_are_counted_not_raised(fast_sim: SimProcess) -> None:
    run = _canary.run_load(f"http://127.0.0.1:{fast_sim.port}", SPEC, api_key="wrong", model="m", metrics=False)
    assert (run["figures"]["errors"], run["figures"]["ok_requests"], run["server"]) == (8, 0, None)
    assert run["figures"]["error_examples"][0].startswith("HTTP 401")
    assert _canary.judge(run["figures"], [], HOST, HARDWARE, "m")["verdict"] == "inconclusive"


def test_the_model_must_be_listed_and_the_key_right(fast_sim: SimProcess) -> None:
    with pytest.raises(_canary.CanaryError, match="/v1/models answered 401"):
        _canary.run_load(f"http://127.0.0.1:{fast_sim.port}", SPEC)


@pytest.mark.parametrize("url", ["http://10.0.0.5:30000", "http://example.com:30000", "ftp://127.0.0.1/", "http://:80"])
def test_the_load_goes_to_loopback_only(url: str) -> None:
    with pytest.raises(_canary.CanaryError):
        _canary.run_load(url, SPEC, model="m")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"concurrency": 0}, "concurrency must be an integer >= 1"),
        ({"warmup": -1}, "warmup must be an integer >= 0, got -1"),
        ({"warmup": True}, "warmup must be"),
    ],
)
def test_a_bad_load_spec_is_refused(change: dict[str, object], message: str) -> None:
    with pytest.raises(_canary.CanaryError, match=message):
        _canary.run_load("http://127.0.0.1:1", SPEC._replace(**change), model="m")


def test_a_refused_connection_is_an_error_of_each_request() -> None:
    run = _canary.run_load(f"http://127.0.0.1:{free_port()}", SPEC._replace(requests=2), model="m")
    assert run["figures"]["errors"] == 2 and "ConnectionRefusedError" in run["figures"]["error_examples"][0]
