"""The classifier core: input forms, terminal noise, traceback grouping, rules, verdicts, scale."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import RuleError, Scanner, classify, classify_line, load_rules, suggest_rule
from tests.figures import record
from tests.unit.conftest import corpus_logs

REPO = Path(__file__).resolve().parents[4]
# the incident behind the project: a restart of a 548 GB model on 8 GPUs, journalctl -o short as the operator saw it
SEED_LINE = (
    "May 30 19:15:26 dflash-train python[{pid}]: 2026-05-30 19:15:26,720 - CUTE_DSL - WARNING - [handle_import_error] - "
    "Unexpected error during package walk: cutlass.cute.experimental"
)
SEED_PIDS = (165487, 165488, 165489, 165490, 165491, 165492, 165493, 165494)
READY = "[2025-03-08 12:29:33] The server is fired up and ready to roll!"
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.99 GiB. GPU 1 has a total capacity of 79.35 GiB"


def journal_record(message: str | bytes, pid: int = 4242) -> dict[str, Any]:
    value: Any = list(message) if isinstance(message, bytes) else message
    return {"MESSAGE": value, "_PID": str(pid), "__CURSOR": "s=abc;i=1"}


def test_seed_scenario_is_one_allowlisted_event_on_eight_ranks() -> None:
    journal = "\n".join(SEED_LINE.format(pid=pid) for pid in SEED_PIDS) + "\n" + "May 30 19:15:40 dflash-train python[165480]: " + READY + "\n"
    report = classify(journal, engine="sglang")
    assert report["verdict"] == "pass"
    assert len(report["allowlisted"]) == 1
    event = report["allowlisted"][0]
    assert event["rule"] == "sglang-cute-dsl-package-walk"
    assert event["count"] == 8
    assert len(event["ranks"]) == 8
    assert event["level"] == "WARNING"
    assert report["fatal"] == [] and report["unrecognized"] == []


def test_seed_scenario_with_rank_prefixes_names_the_ranks() -> None:
    lines = [f"[2026-05-30 19:15:26 TP{rank}] Unexpected error during package walk: cutlass.cute.experimental" for rank in range(8)]
    report = classify("\n".join(lines))
    assert report["allowlisted"][0]["ranks"] == [f"TP{rank}" for rank in range(8)]
    assert report["verdict"] == "pending"


def test_journal_json_text_with_byte_array_messages() -> None:
    progress_line = (
        b"\rLoading safetensors checkpoint shards:  10% Completed | 16/163 [00:01<00:09]"
        b"\rLoading safetensors checkpoint shards:  42% Completed | 68/163 [00:05<00:07]"
    )
    records = [
        journal_record("[2025-03-08 12:29:13 TP0] Load weight begin. avail mem=21.63 GB"),
        journal_record(progress_line),
        journal_record(READY),
    ]
    text = "\n".join(json.dumps(record) for record in records)
    report = classify(text)
    assert report["progress"]["percent"] == 42
    assert report["progress"]["text"] == "loading weights 42% (68/163 shards)"
    assert report["verdict"] == "pass"
    assert classify(records)["progress"] == report["progress"]


def test_journal_short_formats_are_stripped() -> None:
    lines = {
        "short": "May 30 19:15:26 host python[165489]: [2025-03-11 15:02:53 TP7] RuntimeError: NCCL error: unhandled system error",
        "short-iso": "2026-05-30T19:15:26+0000 host python[165489]: [2025-03-11 15:02:53 TP7] RuntimeError: NCCL error: unhandled system error",
        "short-precise": "May 30 19:15:26.123456 host python[165489]: [2025-03-11 15:02:53 TP7] RuntimeError: NCCL error: unhandled system error",
    }
    for form, line in lines.items():
        result = classify_line(line)
        assert result["class"] == "fatal", form
        assert result["rank"] == "TP7", form
        assert result["message"].startswith("RuntimeError: NCCL error"), form


def test_blob_data_placeholders_are_counted_not_failed() -> None:
    text = "May 30 19:15:26 host python[1]: [blob data]\n" * 3 + f"May 30 19:15:27 host python[1]: {READY}\n"
    report = classify(text)
    assert report["blob_lines"] == 3
    assert report["verdict"] == "pass"


def test_carriage_return_updates_keep_the_latest_state() -> None:
    progress_line = "".join(f"\rCapturing batches (bs=1 avail_mem=14.43 GB): {p:3d}%|##| {p // 5}/20 [00:01<00:00,  1.50it/s]" for p in range(0, 101, 5))
    report = classify("[2025-03-08 12:29:21 TP0] Capture cuda graph begin. This can take up to several minutes.\n" + progress_line + "\n")
    assert report["progress"]["percent"] == 100
    assert report["progress"]["done"] == 20
    assert report["phase"] == "capturing_cuda_graphs"
    assert report["counts"]["progress"] == 2


def test_bar_glued_to_the_next_record_is_split() -> None:
    line = "  0%|          | 0/23 [00:00<?, ?it/s][2025-02-09 20:33:23 TP0] Scheduler hit an exception: Traceback (most recent call last):"
    report = classify(line + "\nRuntimeError: CUDA error: an illegal memory access was encountered\n")
    assert report["fatal"][0]["message"].startswith("RuntimeError: CUDA error")
    assert report["fatal"][0]["ranks"] == ["TP0"]


def test_ansi_colours_and_control_characters_are_removed() -> None:
    result = classify_line("\x1b[31m[2025-03-08 12:29:13 TP3] \x1b[1mRuntimeError: CUDA error: unspecified launch failure\x1b[0m\x07")
    assert result["class"] == "fatal"
    assert result["message"] == "RuntimeError: CUDA error: unspecified launch failure"


def test_invalid_utf8_is_decoded_without_failing() -> None:
    raw = b"[2025-03-08 12:29:13 TP3] Load weight end. \xff\xfe type=\xc3\n" + READY.encode() + b"\n"
    report = classify(raw)
    assert report["verdict"] == "pass"
    assert classify([journal_record(b"\xffTraceback (most recent call last):\n")])["verdict"] == "fail"


@pytest.mark.parametrize("empty", ["", b"", [], None, "\n\n"])
def test_empty_input_is_pending(empty: Any) -> None:
    report = classify(empty)
    assert report["verdict"] == "pending"
    assert report["fatal"] == []


def test_chained_traceback_is_one_event() -> None:
    text = "\n".join(
        [
            "[2025-03-05 10:34:48] Initialization failed. warmup error: Traceback (most recent call last):",
            '  File "/sgl/python/sglang/srt/entrypoints/http_server.py", line 572, in _wait_and_warmup',
            "    assert res.status_code == 200, f'{res}'",
            "AssertionError: <Response [500]>",
            "",
            "During handling of the above exception, another exception occurred:",
            "",
            "Traceback (most recent call last):",
            '  File "/sgl/python/sglang/launch_server.py", line 14, in <module>',
            "    launch_server(server_args)",
            "RuntimeError: warmup failed",
            "[2025-03-05 10:34:49] Received sigquit from a child process. It usually means the child failed.",
        ]
    )
    report = classify(text)
    tracebacks = [event for event in report["fatal"] if "traceback" in event]
    assert len(tracebacks) == 1
    assert tracebacks[0]["message"] == "RuntimeError: warmup failed"
    assert tracebacks[0]["first_line"] == 1 and tracebacks[0]["last_line"] == 11
    assert any(event["rule"] == "sglang-scheduler-failure" and event["first_line"] == 12 for event in report["fatal"])


def test_vllm_traceback_with_prefixed_lines_is_one_event() -> None:
    prefix = "ERROR 04-10 08:57:05 [engine.py:158] "
    lines = [
        "Traceback (most recent call last):",
        '  File "/vllm/engine/llm_engine.py", line 9, in step',
        "    raise ValueError('x')",
        "ValueError: Attempted to assign 5 x 256",
    ]
    report = classify("\n".join(prefix + line for line in lines))
    assert len(report["fatal"]) == 1
    assert report["fatal"][0]["message"] == "ValueError: Attempted to assign 5 x 256"
    assert report["fatal"][0]["level"] == "ERROR"


def test_unrecognized_warning_gets_a_suggested_rule_and_strict_fails() -> None:
    line = "[2025-03-08 12:29:13 TP2] Frobnicator returned error state 7 for /opt/models/x/layer.12, continuing"
    report = classify(f"{line}\n{READY}\n")
    assert report["verdict"] == "pass"
    event = report["unrecognized"][0]
    rule = event["suggested_rule"]
    assert rule["class"] == "allowlisted" and rule["id"].startswith("local-")
    # the suggestion generalises: it matches the same line with other numbers and paths
    other = "[2025-03-09 01:00:00 TP5] Frobnicator returned error state 12 for /srv/m/y/layer.3, continuing"
    assert classify_line(other, rules=load_rules("auto", [rule]))["class"] == "allowlisted"
    assert classify(f"{line}\n{READY}\n", strict=True)["verdict"] == "fail"


def test_user_rules_come_first_and_shipped_rules_can_be_disabled() -> None:
    mine = [{"id": "site-oom-drill", "pattern": r"CUDA out of memory\. Tried to allocate 1\.99 GiB", "reason": "the weekly OOM drill"}]
    assert classify_line(OOM, rules=load_rules("sglang", mine))["class"] == "allowlisted"
    walk = "Unexpected error during package walk: cutlass"
    assert classify_line(walk, rules=load_rules("sglang"))["class"] == "allowlisted"
    assert classify_line(walk, rules=load_rules("sglang", disabled=["sglang-cute-dsl-package-walk"]))["class"] == "unrecognized"


def test_a_digit_sensitive_user_rule_is_honoured_line_by_line() -> None:
    mine = [{"id": "exit-three", "class": "fatal", "pattern": "worker exit status 3$", "reason": "status 3 means corrupt weights"}]
    lines = ["[2025-03-08 12:29:13 TP0] worker exit status 2", "[2025-03-08 12:29:14 TP0] worker exit status 3", READY]
    report = classify("\n".join(lines), extra_rules=mine)
    assert [event["first_line"] for event in report["fatal"]] == [2]


def test_stale_rules_are_reported() -> None:
    mine = [{"id": "old-workaround", "pattern": "frobnicate", "reason": "until the driver update", "expires": "2020-01-01"}]
    report = classify(READY, extra_rules=mine)
    assert [rule["id"] for rule in report["stale_rules"]] == ["old-workaround"]


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ([{"id": "x", "pattern": "a(", "reason": "r"}], "rule 'x' (extra rules #1): invalid regular expression"),
        ([{"id": "x", "pattern": "a", "reason": "r", "colour": "red"}], "rule 'x' (extra rules #1): unknown key(s) colour"),
        ([{"id": "x", "pattern": "a"}], "rule 'x' (extra rules #1): missing required field(s) reason"),
        ([{"pattern": "a", "reason": "r"}], "extra rules rule #1: missing required field(s) id"),
        ([{"id": "x", "pattern": "a", "reason": "r", "class": "maybe"}], "class 'maybe' is not one of"),
        ([{"id": "x", "pattern": "a", "reason": "r", "expires": "soon"}], "'expires' must be a date"),
        (["just a string"], "extra rules rule #1: a rule must be a mapping"),
        ({"id": "x"}, "extra rules must be a list"),
        ([{"id": "sglang-fired-up", "pattern": "a", "reason": "r"}], "duplicate id"),
    ],
)
def test_bad_rules_give_a_clear_error_naming_the_rule(rules: Any, message: str) -> None:
    with pytest.raises(RuleError, match=None) as error:
        load_rules("sglang", rules)
    assert message in str(error.value)


def test_unknown_disabled_id_and_engine_are_errors() -> None:
    with pytest.raises(RuleError, match="disabled rule id"):
        load_rules("sglang", disabled=["no-such-rule"])
    with pytest.raises(RuleError, match="engine 'tgi'"):
        load_rules("tgi")


def test_lines_spanning_chunks_and_line_offsets() -> None:
    scanner = Scanner(load_rules("sglang"), line_offset=100)
    text = ("[2025-03-08 12:29:13 TP0] Load weight begin.\n" + OOM + "\n").encode()
    for byte in range(0, len(text), 7):
        scanner.feed_text(text[byte : byte + 7])
    report = scanner.finish()
    assert report["lines"] == 102
    assert report["fatal"][0]["first_line"] == 102


def test_suggested_rule_masks_numbers_paths_and_ids() -> None:
    rule = suggest_rule("Slow shard read 1.25 s from /mnt/weights/model-00012-of-00163.safetensors (req 2b0fd107dfc44e9085a12be3eeb44ebe)")
    assert "1.25" not in rule["pattern"] and "/mnt" not in rule["pattern"] and "2b0fd107" not in rule["pattern"]
    assert classify_line("Slow shard read 9 s from /x/y/z.bin (req 0123456789abcdef0123)", rules=load_rules("auto", [rule]))["class"] == "allowlisted"


def test_a_100_mb_log_streams_in_bounded_memory(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    subprocess.run([sys.executable, str(REPO / "bench" / "generate_log.py"), str(log), "--lines", "470000"], check=True)
    assert log.stat().st_size > 100 * 1024 * 1024
    # VmHWM, the peak resident size of this process image (ru_maxrss would carry the parent's over the fork)
    probe = (
        "import json, re, sys\n"
        "from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import classify\n"
        "def peak(): return int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))\n"
        "before = peak()\n"
        "with open(sys.argv[1], 'rb') as handle:\n"
        "    report = classify(handle, engine='sglang')\n"
        "grown = peak() - before\n"
        "print(json.dumps({'grown_kb': grown, 'lines': report['lines'], 'verdict': report['verdict'], 'allowlisted': report['counts']['allowlisted']}))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe, str(log)], cwd=REPO / "collections", capture_output=True, text=True, check=True)
    figures = json.loads(result.stdout)
    record(f"\n100 MB log: {figures}")
    assert figures["lines"] == 470000
    assert figures["verdict"] == "pass"
    assert figures["allowlisted"] > 0
    # the file is over 100 MB; the scanner holds a few 4 MB chunks and bounded evidence
    assert figures["grown_kb"] < 64 * 1024


def test_a_very_long_traceback_keeps_its_head_and_tail() -> None:
    frames = [f'  File "/sgl/python/sglang/srt/layer_{n}.py", line {n}, in forward\n    return self.inner(x)' for n in range(300)]
    text = "\n".join(
        [
            "[2025-03-08 12:29:13 TP0] Scheduler hit an exception: Traceback (most recent call last):",
            *frames,
            "RecursionError: maximum recursion depth exceeded",
        ]
    )
    report = classify(text)
    event = report["fatal"][0]
    assert event["message"] == "RecursionError: maximum recursion depth exceeded"
    assert event["traceback"][0].endswith("Traceback (most recent call last):")
    assert event["traceback"][-1] == "RecursionError: maximum recursion depth exceeded"
    assert any("lines left out" in line for line in event["traceback"])
    assert len(event["traceback"]) <= 61
    assert report["counts"]["fatal"] == 602


def test_journal_json_whose_first_record_has_no_message_is_still_records() -> None:
    records = [{"__CURSOR": "s=a;i=1", "_PID": "7"}, journal_record(OOM, pid=7), journal_record(READY)]
    report = classify("\n".join(json.dumps(record) for record in records) + "\n")
    assert report["lines"] == 3
    assert report["fatal"][0]["message"] == OOM and report["fatal"][0]["first_line"] == 2
    assert report["fatal"][0]["ranks"] == ["pid7"]
    # an engine that logs JSON objects of its own is raw text, not journal records
    own = classify('{"level": "error", "msg": "CUDA out of memory"}\n')
    assert own["lines"] == 1 and "CUDA out of memory" in own["fatal"][0]["message"]


def test_byte_arrays_with_values_that_are_not_bytes_are_empty_lines() -> None:
    report = classify([{"MESSAGE": [300, -1, 65]}, {"MESSAGE": [72, "x"]}, {"MESSAGE": None}, {"MESSAGE": 12}, journal_record(READY)])
    assert report["lines"] == 5 and report["verdict"] == "pass"


def test_a_key_is_redacted_from_everything_the_report_holds() -> None:
    key = "sk-4f2a9917c0de4b5e8d7c31a6"  # digits in it: masked forms must not show its letters either
    lines = [
        f"[2025-03-08 12:29:13 TP0] Scheduler hit an exception: Traceback (most recent call last): key={key}",
        f'  File "/srv/app.py", line 9, in check {key}',
        f"RuntimeError: invalid api key {key} for /v1/chat (len {len(key)})",
        f"[2025-03-08 12:29:14 TP1] Frobnicator refused token {key}",
        f"[2025-03-08 12:29:15 TP1] Loading safetensors checkpoint shards:  42% Completed | 68/163 [{key}]",
        "[2025-03-08 12:29:16 TP1] ERROR: " + "y" * 20_000 + key,
        # cut after the first 10 characters of the key
        "[2025-03-08 12:29:16 TP1] ERROR: " + "z" * (16_384 - 33 - 10) + key,
    ]
    scanner = Scanner(load_rules("sglang"), secrets=[key, ""])
    scanner.feed_text("\n".join(lines) + "\n")
    held = scanner.open_traceback
    report = scanner.finish()
    text = json.dumps(report) + json.dumps(held)
    assert report["fatal"] and report["unrecognized"] and report["progress"]
    assert "[redacted]" in text
    for piece in (key, key[:10], key[-12:], "sk-<n>f<n>a", "c0de4b5e8d7c31a6"):
        assert piece not in text, piece
    assert scanner.redact(f"x {key} y") == "x [redacted] y"


def test_without_secrets_nothing_is_redacted() -> None:
    line = "[2025-03-08 12:29:14 TP1] Frobnicator refused token sk-12345678"
    assert classify(line)["unrecognized"][0]["message"] == "Frobnicator refused token sk-12345678"


@pytest.mark.parametrize("size", [100_000, 1_000_000])
def test_one_huge_line_costs_what_its_first_16_kb_cost(size: int) -> None:
    import time

    for body in ("x" * size, "1" * size, "a:" * (size // 2), " " * size):
        started = time.process_time()
        report = classify("ERROR: " + body + "\n" + READY + "\n")
        seconds = time.process_time() - started
        event = report["fatal"][0]
        assert event["message"].endswith(f"[... {size + 7 - 16_384} more characters not read]"), event["message"][-80:]
        assert len(event["message"]) < 16_500
        # was 18 s for 100 KB and more than 120 s for 1 MB; a generous bound, not a benchmark
        assert seconds < 5, (body[:4], seconds)


def test_an_http_access_line_between_a_tracebacks_lines_does_not_cut_it_short() -> None:
    """The HTTP server's thread logs its access lines while a scheduler prints its traceback (a crash
    in the warmup, while health is probed): the traceback is still one event, with its exception."""
    log = next(log for log in corpus_logs() if log.name == "sglang-nccl-02.log").body.splitlines()
    header = next(number for number, line in enumerate(log) if "Scheduler hit an exception" in line)
    health = '[2025-03-08 12:29:32] INFO:     10.0.2.141:37662 - "GET /health HTTP/1.1" 200 OK'
    interleaved = [*log[: header + 1], health, *log[header + 1 : header + 3], health, *log[header + 3 :]]
    plain = [event for event in classify("\n".join(log))["fatal"] if "traceback" in event]
    mixed = [event for event in classify("\n".join(interleaved))["fatal"] if "traceback" in event]
    assert mixed[0]["message"] == plain[0]["message"] == "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"
    assert mixed[0]["count"] == plain[0]["count"]


def test_the_indented_lines_after_an_exception_line_belong_to_its_traceback() -> None:
    """pydantic's ValidationError prints its details indented below the exception line (a real vLLM
    0.32.0 start with --max-model-len above the model's): they are the traceback's, not lines of
    their own, so the fatal event carries why."""
    text = """Traceback (most recent call last):
  File "/opt/vllm/lib/python3.11/site-packages/vllm/engine/arg_utils.py", line 1938, in from_cli_args
    engine_args = cls(
  File "/opt/vllm/lib/python3.11/site-packages/pydantic/_internal/_dataclasses.py", line 121, in __init__
    s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)
pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig
  Value error, User-specified max_model_len (8192) is greater than the derived max_model_len (max_position_embeddings=4096.0 or \
model_max_length=None in model's config.json). To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1
    For further information visit https://errors.pydantic.dev/2.14/v/value_error
INFO 12-01 21:36:00 [api_server.py:99] next line
"""
    report = classify(text, engine="vllm")
    assert report["unrecognized"] == []
    (event,) = report["fatal"]
    assert event["message"] == "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig"
    assert "User-specified max_model_len (8192) is greater than the derived max_model_len" in event["traceback"][-2]
    assert event["traceback"][-1].endswith("For further information visit https://errors.pydantic.dev/2.14/v/value_error")
