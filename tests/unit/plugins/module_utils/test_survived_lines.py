"""A line the engine survives is never fatal alone (module_utils/_survived, class ``survived``).

The families are the engines' own logger calls, read from every release's source and recorded in
tests/unit/data/engine_source/ (scripts/engine_source); the lines are built from the recorded format
strings the way each version prints them (vLLM: with and without the process prefix), offline. A
survived line is a warning with its source file; the lines the code raises or exits after, and the
engine core's loop, stay fatal; a real crash after a survived line still fails.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import classify, classify_line, load_rules
from ansible_collections.inferops.runbooks.plugins.module_utils._survived import CORE_LOOP, VLLM_SURVIVED, VLLM_SURVIVED_BY_EVIDENCE
from ansible_collections.inferops.runbooks.plugins.plugin_utils._render import stats, summary_lines
from scripts.engine_source import data, table
from scripts.engine_source.lines import lines_of
from tests.unit.conftest import corpus_logs
from tests.unit.plugins.module_utils.observations import precheck_report, probe_result, restart_report, wait_result

# the issue's line: vLLM 0.16 on ROCm, a local model path handed to a Hub lookup, then the start served
HUB_RETRY = (
    "ERROR 03-02 10:11:12 [repo_utils.py:47] Error retrieving safetensors: Repo id must be in the form 'repo_name' or"
    " 'namespace/repo_name': '/data0/huggingface/MiniMax-M2.5'. Use `repo_type` argument if needed., retrying 1 of 2"
)
ENGINE_DEAD = "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause."
SURVIVED_FILES = {path for path, _versions, _messages in VLLM_SURVIVED + VLLM_SURVIVED_BY_EVIDENCE}
EVIDENCE_FILES = {path for path, _versions, _messages in VLLM_SURVIVED_BY_EVIDENCE}


@pytest.fixture(scope="module")
def recorded() -> dict[str, dict[str, Any]]:
    return {engine: data.load(engine) for engine in ("vllm", "sglang")}


@pytest.fixture(scope="module")
def rules() -> dict[str, Any]:
    return {engine: load_rules(engine) for engine in ("vllm", "sglang")}


def built(engine: str, engine_data: dict[str, Any], call: dict[str, Any], version: str) -> list[str]:
    settings = engine_data["versions"][version]
    return lines_of(engine, call["file"], call["lines"][version], call["level"], call["format"], settings["log_format"], settings["date_format"])


def survived_calls(engine_data: dict[str, Any]) -> list[dict[str, Any]]:
    """The recorded calls of the survived rules' files that the code survives (or answers one request with)."""
    return [call for call in engine_data["calls"] if call["file"] in SURVIVED_FILES and call["format"] is not None and call["outcome"] != "fatal"]


def rule_id(path: str) -> str:
    return "vllm-survived-" + re.sub(r"[^a-z0-9]+", "-", path[len("vllm/") : -len(".py")].lower()).strip("-")


SAME_NAME: dict[str, set[str]] = {}
for _path in SURVIVED_FILES:
    SAME_NAME.setdefault(_path.rsplit("/", 1)[-1], set()).add(rule_id(_path))


def test_every_family_of_a_survived_file_is_a_warning_of_its_file_in_every_version_that_logs_it(recorded: dict[str, Any], rules: dict[str, Any]) -> None:
    calls = survived_calls(recorded["vllm"])
    assert {call["file"] for call in calls} >= SURVIVED_FILES - EVIDENCE_FILES
    judged = 0
    for call in calls:
        for version in call["lines"]:
            for line in built("vllm", recorded["vllm"], call, version):
                got = classify_line(line, rules=rules["vllm"])
                # a family another rule already judged harmless or request-level keeps that rule (tried first);
                # a warning no rule knows stays unrecognized
                accepted = ("survived", "allowlisted", "request_error", *(("unrecognized",) if call["level"] == "WARNING" else ()))
                assert got["class"] in accepted, (version, line, got)
                if got["class"] == "survived":
                    # a file moved keeps its name: the rule of either path, as the line names only the name
                    assert got["rule"] in SAME_NAME[call["file"].rsplit("/", 1)[-1]], (line, got)
                judged += 1
    assert judged > 2000


def test_no_line_the_code_raises_or_exits_after_is_a_warning(recorded: dict[str, Any], rules: dict[str, Any]) -> None:
    """Fatal stays for the lines a raise, sys.exit or os._exit follows (but the Hub lookups' retries, by evidence)."""
    for engine in ("vllm", "sglang"):
        for call in recorded[engine]["calls"]:
            if call["format"] is None or call["outcome"] != "fatal" or call["file"] in EVIDENCE_FILES:
                continue
            for version in call["lines"]:
                for line in built(engine, recorded[engine], call, version):
                    assert classify_line(line, rules=rules[engine])["class"] != "survived", (engine, version, call["file"], line)


def test_the_engine_core_s_loop_is_never_a_warning(recorded: dict[str, Any], rules: dict[str, Any]) -> None:
    for engine in ("vllm", "sglang"):
        for call in recorded[engine]["calls"]:
            if call["format"] is None or not call["file"].startswith(CORE_LOOP[engine]) or call["level"] == "WARNING":
                continue
            for version in call["lines"]:
                for line in built(engine, recorded[engine], call, version):
                    assert classify_line(line, rules=rules[engine])["class"] != "survived", (engine, version, line)


def test_every_survived_line_still_judged_fatal_is_the_core_loop_s_or_has_its_evidence(recorded: dict[str, Any]) -> None:
    """What docs/engine-source.md's last column counts: 0 in every version."""
    for engine in ("vllm", "sglang"):
        engine_data = recorded[engine]
        judged = table.judge(engine, engine_data)
        without = [
            (version, call["file"], call["format"])
            for index, call in enumerate(engine_data["calls"])
            if call["format"] is not None and call["outcome"] != "fatal"
            for version in call["lines"]
            if judged[(version, index)][0] == "fatal" and table.left_fatal_reason(engine, call, engine_data)[0] == table.NO_EVIDENCE
        ]
        assert without == [], without


def test_the_docs_table_shows_no_survived_line_judged_fatal_without_evidence_in_any_version() -> None:
    rows = [line for line in table.render().splitlines() if re.match(r"\| \d+\.\d+", line) and line.count("|") == 16]
    assert len(rows) == 25 + 34
    assert all(row.rstrip(" |").rsplit("|", 1)[-1].strip() == "0" for row in rows), [row for row in rows if not row.endswith("| 0 |")]


def test_a_survived_rule_holds_only_for_its_own_file_where_the_line_names_it(rules: dict[str, Any]) -> None:
    vllm = rules["vllm"]
    assert classify_line("ERROR 12-02 05:10:11 [usage_lib.py:208] Failed to collect TPU information", rules=vllm)["class"] == "survived"
    assert classify_line("ERROR 12-02 05:10:11 [gc_utils.py:40] Failed to parse VLLM_GC_DEBUG(x)", rules=vllm)["class"] == "survived"
    # the same words from a file whose code does not survive them stay fatal
    assert classify_line("ERROR 12-02 05:10:11 [core.py:208] Failed to collect TPU information", rules=vllm)["class"] == "fatal"
    assert classify_line("ERROR 12-02 05:10:11 [other.py:47] Error retrieving safetensors: x, retrying 1 of 2", rules=vllm)["class"] == "fatal"


@pytest.mark.parametrize(
    "line",
    [
        f"(EngineCore_DP0 pid=1234) ERROR 12-02 05:10:11 [kv_events.py:310] Error in publisher thread: {ENGINE_DEAD}",
        "ERROR 12-02 05:10:11 [adapters.py:90] Failed to load head.pt: CUDA error: an illegal memory access was encountered",
    ],
)
def test_a_survived_family_that_names_the_engine_s_death_or_a_dead_device_stays_fatal(line: str, rules: dict[str, Any]) -> None:
    assert classify_line(line, rules=rules["vllm"])["class"] == "fatal"


def corpus_log(name: str) -> str:
    return next(log for log in corpus_logs() if log.name == name).body


def with_lines(name: str, after: int, added: list[str]) -> str:
    lines = corpus_log(name).splitlines()
    return "\n".join([*lines[:after], *added, *lines[after:]]) + "\n"


def test_the_issue_s_start_passes_with_the_hub_retries_as_warnings_with_their_file() -> None:
    report = classify(with_lines("vllm-cpu-ready-01.log", 20, [HUB_RETRY, HUB_RETRY.replace("safetensors", "file list")]), engine="vllm")
    assert report["verdict"] == "pass", report["reason"]
    assert report["fatal"] == [] and report["counts"]["survived"] == 2
    assert [(event["rule"], event["count"], event["file"]) for event in report["survived"]] == [
        ("vllm-survived-transformers-utils-repo-utils", 1, "vllm/transformers_utils/repo_utils.py")
    ] * 2
    assert "Error retrieving safetensors" in report["survived"][0]["message"]


def test_a_real_crash_after_a_survived_line_still_fails_on_its_own_line() -> None:
    """A crash that passes is worse than a false alarm: the survived line changes nothing about the death after it."""
    plain = classify(corpus_log("vllm-cpu-head-dim-16-01.log"), engine="vllm")
    warned = classify(with_lines("vllm-cpu-head-dim-16-01.log", 20, [HUB_RETRY]), engine="vllm")
    assert plain["verdict"] == warned["verdict"] == "fail"
    assert warned["reason"] == plain["reason"] and len(warned["fatal"]) == len(plain["fatal"])
    assert warned["survived"][0]["file"] == "vllm/transformers_utils/repo_utils.py"


def test_the_traceback_a_survived_line_logs_is_its_own_unless_the_engine_died() -> None:
    """logger.exception: vLLM prints the traceback with the line's prefix on every line."""
    prefix = "(APIServer pid=94) ERROR 12-03 12:37:26 [registry.py:560] "
    traceback = [
        "Error in loading model architecture 'FooForCausalLM'",
        "Traceback (most recent call last):",
        '  File "/opt/vllm/lib/python3.11/site-packages/vllm/model_executor/models/registry.py", line 555, in _try_load_model_cls',
        "    return model.load_model_cls()",
        "ModuleNotFoundError: No module named 'foo_kernels'",
    ]
    report = classify(with_lines("vllm-cpu-ready-01.log", 20, [prefix + line for line in traceback]), engine="vllm")
    assert report["verdict"] == "pass" and report["fatal"] == [], report["reason"]
    # the line, and its traceback judged by the line's rule
    assert {event["rule"] for event in report["survived"]} == {"vllm-survived-model-executor-models-registry"}
    assert report["survived"][-1]["traceback"][-1].endswith("No module named 'foo_kernels'")
    assert report["counts"]["survived"] == len(traceback)
    traceback[-1] = ENGINE_DEAD
    died = classify(with_lines("vllm-cpu-ready-01.log", 20, [prefix + line for line in traceback]), engine="vllm")
    assert [event["rule"] for event in died["fatal"]] == ["vllm-engine-dead"], died["fatal"]


def test_the_restart_and_the_precheck_say_the_survived_lines_as_warnings() -> None:
    journal = classify(with_lines("vllm-cpu-ready-01.log", 20, [HUB_RETRY]), engine="vllm")
    wait = {**wait_result(), "survived": journal["survived"]}
    restarted = restart_report(wait=wait)
    assert restarted["verdict"] == "pass"
    assert restarted["survived_lines"]["count"] == 1 and restarted["survived_lines"]["file"] == "vllm/transformers_utils/repo_utils.py"
    assert "warning: 1 ERROR line(s) the engine survived (not a failure)" in restarted["msg"]
    text = "\n".join(summary_lines(restarted))
    assert "WARNING: lines the engine survived" in text and "(vllm/transformers_utils/repo_utils.py)" in text and "retrying 1 of 2" in text
    assert stats(restarted)["survived_lines"] == 1
    probe = probe_result()
    probe["journal"] = {**probe["journal"], "survived": journal["survived"]}
    checked = precheck_report(probe=probe)
    assert checked["reason"] == "ready", checked["msg"]
    assert "warning: 1 ERROR line(s) the engine survived" in checked["msg"] and stats(checked)["survived_lines"] == 1


def test_a_start_without_survived_lines_says_nothing_of_them() -> None:
    report = restart_report()
    assert report["survived_lines"]["count"] == 0 and "survived" not in report["msg"]
    assert "lines the engine survived" not in "\n".join(summary_lines(report))
