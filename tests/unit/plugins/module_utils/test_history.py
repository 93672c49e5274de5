"""The start history (plugins/module_utils/_history.py): the store, the entry of a start read from its
real journal lines (tests/unit/data/corpus), and the estimators (ETA, learned stall limits, slow phases,
what is new since the last good start)."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils import _history
from tests.unit.conftest import CorpusLog, corpus_lines, corpus_logs

UNIT = "sglang.service"


def log(name: str) -> CorpusLog:
    return next(found for found in corpus_logs() if found.name == name)


def start(name: str = "sglang-ready-01.log", **details: Any) -> dict[str, Any]:
    found = log(name)
    outcome = "pass" if found.outcome == "ready" else "fail"
    return _history.observe(found.body.splitlines(), outcome, **details)


def scaled(entry: dict[str, Any], factor: float, invocation: str, config: str = "cfg-a") -> dict[str, Any]:
    """A copy of a real start's entry with its phases stretched (the same server, a slower disk)."""
    copied = copy.deepcopy(entry)
    copied["phases"] = {phase: round(seconds * factor, 1) for phase, seconds in copied["phases"].items()}
    copied["total"] = round(sum(copied["phases"].values()), 1)
    copied.update(invocation_id=invocation, config=config)
    return copied


# -- templates --------------------------------------------------------------------------------


def test_templates_are_stable_across_ranks_timestamps_and_numbers() -> None:
    line = next(entry["line"] for entry in corpus_lines() if entry["line"].startswith("[2025-03-08 12:29:21 TP0] KV Cache is allocated"))
    message = line.split("] ", 1)[1]
    variants = [line, f"[2025-03-09 01:02:03 TP7] {message}", f"[2025-03-09 01:02:03 DP0 TP1] {message}", f"[03:04:05 TP12] {message.replace('46611', '9')}"]
    assert len({_history.template(variant) for variant in variants}) == 1
    assert _history.template(line) == "KV Cache is allocated. #tokens: <n>, K size: <n> GB, V size: <n> GB"


def test_templates_mask_ranks_in_the_message_paths_and_ids_and_redact_secrets() -> None:
    one = _history.template("[2025-03-08 12:29:12 TP0] rank TP3 waiting for DP0 TP1")
    assert one == _history.template("[2025-03-08 12:29:12 TP5] rank TP6 waiting for DP1 TP0")
    # the seed story's warning, once per rank: one template, its words kept
    cute = next(entry["line"] for entry in corpus_lines() if "package walk" in entry["line"])
    message = cute.split("] ", 1)[1]
    ranks = {_history.template(f"[2026-05-05 07:22:{28 + rank} TP{rank}] {message}") for rank in range(8)}
    assert ranks == {_history.template(cute)} == {"Unexpected error during package walk: cutlass.cute.experimental"}
    secret = "sk-live-4242abcd"
    assert secret not in _history.template(f"[2025-03-08 12:29:12 TP0] api_key={secret} rejected", secrets=[secret])
    assert "[redacted]" in _history.template(f"[2025-03-08 12:29:12 TP0] api_key={secret} rejected", secrets=[secret])
    assert _history.template("loaded /models/a/b/weights-00001.safetensors 0xdeadbeef") == "loaded <path> <id>"


# -- one start from its real journal ------------------------------------------------------------


def test_a_real_sglang_start_is_timed_per_phase() -> None:
    entry = start("sglang-ready-01.log", invocation_id="a" * 32, config="cfg-a")
    assert entry["outcome"] == "pass" and entry["ended_in"] == "ready"
    # the log's own timestamps: server_args 12:29:04, weights 12:29:13-12:29:21, graphs to 12:29:29
    assert entry["phases"]["loading_weights"] == 8.0
    assert entry["phases"]["capturing_cuda_graphs"] == 8.0
    assert entry["total"] == 25.0
    assert entry["model"] == "/home/model/Qwen/QwQ-32B"
    # the allowlisted warning printed by each of the 4 ranks is one template with its count
    allreduce = "Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs. " + (
        "To silence this warning, specify disable_custom_all_reduce=True explicitly."
    )
    assert entry["templates"][allreduce] == {"count": 4, "class": "allowlisted"}
    json.dumps(entry)  # plain data


def test_a_real_vllm_start_gives_its_engine_timings_model_and_version() -> None:
    entry = start("vllm-cpu-ready-01.log")
    assert entry["engine_version"] == "0.32.0"
    assert entry["model"].endswith("/tiny")
    assert entry["engine_timings"]["loading weights"] == 0.07
    assert entry["engine_timings"]["init engine (profile, create kv cache, warmup model)"] == 3.32
    assert entry["phases"]["loading_weights"] > 0
    assert start("vllm-ready-01.log")["engine_version"] == "0.6.5"


def test_sglang_engine_startup_timings_and_journal_record_times() -> None:
    lines = [
        ("[2025-11-02 10:00:00] server_args=ServerArgs(model_path='/models/DeepSeek-R1', tp_size=8)", 0),
        ("[2025-11-02 10:00:05 TP0] Load weight begin. avail mem=78.00 GB", 5),
        ("[2025-11-02 10:03:05 TP0] Load weight end. type=DeepseekV3ForCausalLM, avail mem=12.00 GB", 185),
        ("[2025-11-02 10:03:05 TP0] KV Cache is allocated. #tokens: 46611, K size: 1.42 GB, V size: 1.42 GB", 185),
        ("[2025-11-02 10:03:06 TP0] Engine startup timings (s): load_weight=180.02, init_memory_pool=1.50, capture_cuda_graph=40.5", 186),
        ("[2025-11-02 10:03:47] The server is fired up and ready to roll!", 227),
    ]
    observer = _history.StartObserver("sglang")
    for text, offset in lines:
        # journal records: their time is the journal's (microseconds), not the text's
        observer.feed({"MESSAGE": text, "__REALTIME_TIMESTAMP": str(1_700_000_000_000_000 + offset * 1_000_000 + 250_000), "_PID": "42"})
    entry = observer.entry("pass")
    assert entry["engine_timings"] == {"load_weight": 180.02, "init_memory_pool": 1.5, "capture_cuda_graph": 40.5}
    assert entry["phases"]["starting"] == 5.0 and entry["phases"]["loading_weights"] == 180.0
    assert entry["total"] == 227.0 and entry["model"] == "/models/DeepSeek-R1"


def test_a_failed_start_ends_in_its_phase() -> None:
    entry = start("sglang-nccl-02.log")
    assert entry["outcome"] == "fail" and entry["ended_in"] == "starting"
    assert any(value["class"] == "fatal" for value in entry["templates"].values())
    assert next(iter(entry["templates"].values()))["class"] == "fatal"


# -- the store ---------------------------------------------------------------------------------


def test_the_history_is_bounded_and_written_next_to_the_run_record(tmp_path: Path) -> None:
    path = _history.history_path(UNIT, str(tmp_path))
    assert path == str(tmp_path / "sglang.service.history.json")
    base = start(config="cfg-a")
    history: dict[str, Any] | None = None
    for number in range(25):
        history, added = _history.append(history, UNIT, scaled(base, 1.0, f"{number:032x}"), size=20)
        assert added
    assert history is not None
    _history.write(path, history)
    read, problem = _history.read(path, UNIT)
    assert problem is None and read is not None
    assert len(read["starts"]) == 20
    assert read["starts"][0]["invocation_id"] == f"{5:032x}" and read["starts"][-1]["invocation_id"] == f"{24:032x}"
    # the same start seen again (a precheck run twice) is not added twice
    again, added = _history.append(read, UNIT, scaled(base, 1.0, f"{24:032x}"), size=20)
    assert not added and len(again["starts"]) == 20
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".record-")]


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("{not json", "not JSON"),
        ("[]", "not a JSON object"),
        ('{"version": 99, "unit": "sglang.service", "starts": []}', "newer collection"),
        ('{"version": 1, "unit": "vllm.service", "starts": []}', "another unit"),
        ('{"version": 1, "unit": "sglang.service", "starts": [{"outcome": "maybe", "phases": {}}]}', "unknown outcome"),
        ('{"version": 1, "unit": "sglang.service", "starts": [{"outcome": "pass", "phases": {"starting": "x"}}]}', "no phase durations"),
    ],
)
def test_a_corrupt_foreign_or_newer_history_is_reported_and_ignored(tmp_path: Path, content: str, says: str) -> None:
    path = _history.history_path(UNIT, str(tmp_path))
    Path(path).write_text(content, encoding="utf-8")
    history, problem = _history.read(path, UNIT)
    assert history is None and problem is not None and says in problem and path in problem
    # appending starts a new one: never fatal
    fresh, added = _history.append(history, UNIT, start(), size=3)
    assert added and len(fresh["starts"]) == 1 and fresh["version"] == _history.VERSION


def test_no_history_is_no_problem(tmp_path: Path) -> None:
    assert _history.read(str(tmp_path / "none.json"), UNIT) == (None, None)
    assert _history.eta([], "loading_weights", 10) is None


def test_nothing_secret_is_stored() -> None:
    secret = "hf_SECRETtoken9"
    lines = [*log("sglang-ready-01.log").body.splitlines()]
    lines.insert(5, f"[2025-03-08 12:29:10 TP0] WARNING token {secret} looks expired, retrying")
    entry = _history.observe(lines, "pass", secrets=[secret])
    assert secret not in json.dumps(entry)


# -- the configuration fingerprint -------------------------------------------------------------


def test_the_fingerprint_ignores_runtime_fields_and_sees_every_file() -> None:
    shown = (
        "{ path=/opt/sglang/bin/python ; argv[]=/opt/sglang/bin/python -m sglang.launch_server --tp 8 ; ignore_errors=no ; "
        "start_time=[Mon 2025-11-03 10:00:00 UTC] ; stop_time=[n/a] ; pid=4242 ; code=(null) ; status=0/0 }"
    )
    later = shown.replace("pid=4242", "pid=5151").replace("10:00:00", "11:11:11")
    dropin = {"/etc/systemd/system/sglang.service.d/50-inferops-deploy.conf": "[Service]\nEnvironment=A=1\n"}
    one = _history.fingerprint(shown, dropin, {"/etc/default/sglang": "HF_TOKEN=x\n"})
    assert one == _history.fingerprint(later, dropin, {"/etc/default/sglang": "HF_TOKEN=x\n"})
    changed = {name: "[Service]\nEnvironment=A=2\n" for name in dropin}
    assert one != _history.fingerprint(later, changed, {"/etc/default/sglang": "HF_TOKEN=x\n"})
    assert one != _history.fingerprint(later, dropin, {"/etc/default/sglang": "HF_TOKEN=y\n"})
    assert one != _history.fingerprint(later.replace("--tp 8", "--tp 4"), dropin, {"/etc/default/sglang": "HF_TOKEN=x\n"})
    assert "HF_TOKEN" not in one and len(one) == 16


def test_a_configuration_change_starts_a_new_baseline() -> None:
    base = start()
    history: dict[str, Any] | None = None
    for number in range(4):
        history, _problem = _history.append(history, UNIT, scaled(base, 10.0, f"a{number:031x}", config="cfg-a"), size=20)
    history, _problem = _history.append(history, UNIT, scaled(base, 1.0, f"b{0:031x}", config="cfg-b"), size=20)
    assert len(_history.good_starts(history, "cfg-a")) == 4
    assert len(_history.good_starts(history, "cfg-b")) == 1
    assert _history.good_starts(history, "cfg-c") == []
    # on the new configuration one start is not enough to learn a limit from
    limits = _history.stall_limits(_history.good_starts(history, "cfg-b"), default=900.0)
    assert {limit["source"] for limit in limits.values()} == {"default"}
    assert _history.learned_limits(limits) == {}


# -- estimators --------------------------------------------------------------------------------


def baseline(factors: tuple[float, ...] = (10.0, 12.0, 11.0, 10.5, 11.5)) -> list[dict[str, Any]]:
    base = start()  # loading weights 8 s, graphs 8 s, total 25 s in the real log
    return [scaled(base, factor, f"{number:032x}") for number, factor in enumerate(factors)]


def test_eta_is_the_sum_of_medians_recalibrated_at_each_phase() -> None:
    starts = baseline()
    medians = _history.phase_medians(starts)
    assert medians["loading_weights"] == 88.0  # 8 s x median factor 11
    at_start = _history.eta(starts, "starting", 0)
    assert at_start is not None
    assert at_start["remaining"] == pytest.approx(sum(medians.values()), abs=0.2)
    # 30 s into weight loading: what loading usually has left, then every phase after it
    loading = _history.eta(starts, "loading_weights", 30)
    assert loading is not None
    after = sum(value for phase, value in medians.items() if phase not in ("starting", "loading_weights"))
    assert loading["remaining"] == pytest.approx(58.0 + after, abs=0.2)
    # longer than usual in a phase: that phase adds nothing, never a negative time
    late = _history.eta(starts, "loading_weights", 500)
    assert late is not None and late["remaining"] == pytest.approx(after, abs=0.2)
    assert _history.eta(starts, "ready", 0)["remaining"] == 0.0  # type: ignore[index]
    assert loading["text"].startswith("about 2m") and "(last 5 good starts: 4m10s-5m00s)" in loading["text"]


def test_stall_limits_are_learned_after_min_good_starts_and_explicit_ones_win() -> None:
    starts = baseline()
    limits = _history.stall_limits(starts, explicit={"capturing_cuda_graphs": 1800.0}, default=900.0, min_good=3, factor=1.5, floor=60.0)
    # longest weight loading of the 5: 8 s x 12 = 96 s; 1.5x = 144 s, far below the 900 s default
    assert limits["loading_weights"] == {"limit": 144.0, "source": "learned", "detail": "1.5x the longest of the last 5 good starts (1m36s)"}
    assert limits["capturing_cuda_graphs"]["source"] == "explicit" and limits["capturing_cuda_graphs"]["limit"] == 1800.0
    # a phase that always takes 0 s gets the floor
    assert limits["allocating_kv_cache"]["limit"] == 60.0 and "floor" in limits["allocating_kv_cache"]["detail"]
    assert _history.learned_limits(limits)["loading_weights"] == 144.0
    # fewer good starts than min_good: the default, saying why
    # a learned limit only tightens the configured one
    capped = _history.stall_limits(starts, default=100.0)["loading_weights"]
    assert capped["limit"] == 100.0 and capped["detail"].endswith("capped at the configured stall limit of 1m40s")
    few = _history.stall_limits(starts[:2], default=900.0, min_good=3)
    assert few["loading_weights"] == {"limit": 900.0, "source": "default", "detail": "2 good starts timed it, 3 needed to learn"}


def test_a_slow_phase_is_named_with_its_usual_time() -> None:
    starts = baseline((21.25, 21.25, 21.25))  # weight loading 8 s x 21.25 = 2m50s
    slow = _history.slow_phases({"loading_weights": 527.0, "capturing_cuda_graphs": 170.0}, starts)
    assert [item["text"] for item in slow] == ["loading weights took 3.1x its usual 2m50s"]
    assert _history.slow_phases({"loading_weights": 527.0}, starts, min_good=4) == []


def test_new_since_the_last_good_start() -> None:
    good = start(config="cfg-a")
    failed = start("sglang-triton-outofresources-01.log", config="cfg-a")
    history: dict[str, Any] | None = None
    for number in range(9):
        history, _problem = _history.append(history, UNIT, {**good, "invocation_id": f"g{number:031x}"}, size=20)
    history, _problem = _history.append(history, UNIT, {**failed, "invocation_id": "f" * 32}, size=20)
    known = "The following error message 'operation scheduled before its operands' can be ignored."
    only_failed = next(name for name, value in failed["templates"].items() if "OutOfResources" in name)
    never = _history.template("[2025-03-08 12:29:13 TP3] A warning nobody printed before: 17 retries")
    seen = _history.novelty([known, only_failed, never], history)
    assert seen[known] == {"status": "seen", "seen_in": 9, "of": 9, "text": "seen in 9 of the last 9 good starts"}
    assert seen[only_failed]["status"] == "failed_only"
    assert seen[never]["status"] == "new" and seen[never]["text"] == "new: in none of the last 9 good starts"
    assert _history.novelty([never], None)[never]["status"] == "unknown"
    report = _history.summary(history, "cfg-a", {**good, "templates": {never: {"count": 1, "class": "unrecognized"}}})
    assert report["good_starts"] == 9 and report["templates"][never]["status"] == "new"
    assert report["new_unrecognized"] == [never]


# -- in the roles' reports (plugin_utils/_runbook_report, _render) --------------------------------


def history_result(earlier: list[dict[str, Any]], this: dict[str, Any], config: str = "cfg-a") -> dict[str, Any]:
    """What start_history returns after recording ``this`` on a history of ``earlier`` starts."""
    history: dict[str, Any] | None = None
    for entry in earlier:
        history, _problem = _history.append(history, UNIT, entry)
    limits = _history.stall_limits(_history.good_starts(history, config), default=900.0)
    return {
        "path": "/var/lib/inferops/sglang.service.history.json",
        "problem": None,
        "config": config,
        "added": True,
        "starts": len((history or {}).get("starts") or []) + 1,
        "summary": _history.summary(history, config, this),
        "stall_limits": limits,
    }


def test_the_restart_report_says_what_is_new_and_fail_on_new_fails_on_it() -> None:
    from ansible_collections.inferops.runbooks.plugins.plugin_utils._render import summary_lines
    from tests.unit.plugins.module_utils.observations import options, restart_report, wait_result

    wait = wait_result("vllm-ready-01.log")
    this = start("vllm-ready-01.log", invocation_id="e" * 32, config="cfg-a")
    earlier = [scaled(start(config="cfg-a"), 1.0, f"{number:032x}") for number in range(3)]
    history = history_result(earlier, this)
    history_before = {**history, "summary": _history.summary(None, "cfg-a")}
    report = restart_report(wait=wait, history=history, history_before=history_before)
    assert (report["verdict"], report["reason"]) == ("pass", "ready")
    assert report["history"]["good_starts"] == 3 and len(report["history"]["new_unrecognized"]) == 2
    assert report["unrecognized"][0]["history"]["status"] == "new"
    text = "\n".join(summary_lines(report))
    assert "start history: 3 good start(s) on this configuration (25s) of 4 kept, this start recorded" in text
    assert "(new: in none of the last 3 good starts)" in text
    assert "new since the last good starts: 2 unrecognized line group(s)" in text

    strict_new = restart_report(wait=wait, history=history, options=options(fail_on_new=True))
    assert (strict_new["verdict"], strict_new["reason"]) == ("fail", "new_lines")
    assert "2 unrecognized line group(s) new since its last 3 good start(s)" in strict_new["msg"]

    # seen in every good start before: nothing new, fail_on_new passes
    seen = history_result([{**this, "invocation_id": f"{n:032x}"} for n in range(3)], this)
    passed = restart_report(wait=wait, history=seen, options=options(fail_on_new=True))
    assert passed["verdict"] == "pass"
    assert passed["unrecognized"][0]["history"]["text"] == "seen in 3 of the last 3 good starts"


def test_the_report_names_slow_phases_and_learned_limits() -> None:
    from ansible_collections.inferops.runbooks.plugins.plugin_utils._render import summary_lines
    from tests.unit.plugins.module_utils.observations import restart_report

    earlier = baseline((21.25, 21.25, 21.25))
    slow = scaled(start(), 21.25, "f" * 32)
    slow["phases"]["loading_weights"] = 527.0
    history = history_result(earlier, slow)
    report = restart_report(history=history, history_before=history)
    text = "\n".join(summary_lines(report))
    assert "  slow: loading weights took 3.1x its usual 2m50s" in text
    assert "stall limits learned: starting 4m47s (1.5x the longest of the last 3 good starts (3m11s))" in text


def test_the_precheck_fails_on_new_lines_only_when_asked() -> None:
    from tests.unit.plugins.module_utils.observations import options, precheck_report, probe_result

    this = start("vllm-ready-01.log", invocation_id="e" * 32, config="cfg-a")
    history = history_result([scaled(start(), 1.0, f"{n:032x}") for n in range(3)], this)
    probe = probe_result("vllm-ready-01.log")
    probe["journal"]["ready"] = True  # read with SGLang's rules here: vLLM's ready line is not theirs
    assert precheck_report(probe=probe, history=history)["verdict"] == "pass"
    failed = precheck_report(probe=probe, history=history, options=options(fail_on_new=True))
    assert (failed["verdict"], failed["reason"]) == ("fail", "new_lines")


def test_a_history_that_could_not_be_read_is_reported_never_fatal() -> None:
    from ansible_collections.inferops.runbooks.plugins.plugin_utils._render import summary_lines
    from tests.unit.plugins.module_utils.observations import restart_report

    report = restart_report(history={"failed": True, "msg": "systemctl show sglang.service failed (rc=1): boom"})
    assert report["verdict"] == "pass"
    assert "start history: the start history could not be used: systemctl show sglang.service failed (rc=1): boom" in summary_lines(report)
