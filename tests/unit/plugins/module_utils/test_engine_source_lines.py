"""The rule packs against the lines the engines' own source logs, in every version read.

The calls were read from the published wheels by ``scripts/engine_source`` (README.md, "For
maintainers") and recorded in tests/unit/data/engine_source/; the lines are built from the recorded
format strings the way each version prints them (vLLM: with and without the process prefix), offline.
For each family a rule covers: its lines in every version whose source logs it, next to a line of
the same file that must stay fatal.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import classify, classify_line, load_rules
from ansible_collections.inferops.runbooks.plugins.module_utils._rule_packs import SGLANG, VLLM
from scripts.engine_source import data, table
from scripts.engine_source.lines import lines_of
from tests.unit.conftest import corpus_logs

REPO = Path(__file__).resolve().parents[4]


class Family(NamedTuple):
    rule: str
    event_class: str
    engine: str
    formats: tuple[str, ...]  # the recorded format strings of the calls whose lines the rule judges
    fatal: str  # a line of one of their files that must stay fatal
    fatal_file: str


# the recorded format strings hold \x00 where an f-string value goes (scripts/engine_source/lines.py)
V = "\x00"
ENGINE_DEAD = "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause."
FAMILIES = [
    Family(
        "vllm-fa-version-fallback",
        "allowlisted",
        "vllm",
        ("Cannot use FA version %d is not supported due to %s",),
        # the same file (0.32.0) on ROCm without the flash-attn package: raised when attention runs
        "ImportError: ROCm platform requires upstream flash-attn to be installed. Please install flash-attn first.",
        "fa_utils.py",
    ),
    Family(
        "vllm-request-model-not-found",
        "request_error",
        "vllm",
        ("Error with model %s",),
        # the chat server when the engine core died while serving the request (raise self.engine_client.dead_error)
        f"(APIServer pid=1234) ERROR 12-02 05:10:11 [serving_chat.py:1278] Error with model {ENGINE_DEAD}",
        "serving_chat.py",
    ),
    Family(
        "vllm-request-preprocessing-error",
        "request_error",
        "vllm",
        ("Error in preprocessing prompt inputs", "Error preparing request components", "Error building prompts"),
        ENGINE_DEAD,
        "serving_chat.py",
    ),
    Family(
        "vllm-request-stream-error",
        "request_error",
        "vllm",
        (
            "Error in chat completion stream generator.",
            "Error in completion stream generator.",
            "Error in %s stream generator.",
            "Background request failed for %s",
        ),
        ENGINE_DEAD,
        "serving_chat.py",
    ),
    Family(
        "vllm-request-parser-error",
        "request_error",
        "vllm",
        ("Error in tool parser creation.", "Error in reasoning parser creation.", "Error in parser creation.", "Error trying to handle streaming tool call."),
        # the parser cannot be made for this tokenizer (raised at its creation, not for one output)
        "RuntimeError: Llama3JsonToolParser could not locate the bot token '<|python_tag|>' in the tokenizer.",
        "llama_tool_parser.py",
    ),
    Family(
        "vllm-request-api-error",
        "request_error",
        "vllm",
        ("Error in create_messages: %s", "HTTPException caught. Request id: %s", "RequestValidationError caught. Request id: %s"),
        # the same handlers' engine error: the engine failed, not the request
        "(APIServer pid=1234) ERROR 12-02 05:10:11 [server_utils.py:346] Engine Exception caught. Request id: chatcmpl-1",
        "server_utils.py",
    ),
    Family(
        "sglang-request-error",
        "request_error",
        "sglang",
        (
            f"[http_server] Error: {V}",
            f"Error in request: {V}",
            f"Reasoning parsing error: {V}",
            "Error during tokenization",
            "Error in preprocessing prompt inputs",
        ),
        # http_server.py's warmup request failing at start: logger.error, then kill_process_tree
        "[2026-12-02 05:10:11] Initialization failed. warmup error: AssertionError",
        "http_server.py",
    ),
]


@pytest.fixture(scope="module")
def recorded_data() -> dict[str, dict[str, Any]]:
    return {engine: data.load(engine) for engine in ("vllm", "sglang")}


@pytest.fixture(scope="module")
def rules() -> dict[str, Any]:
    return {engine: load_rules(engine) for engine in ("vllm", "sglang")}


def recorded(engine_data: dict[str, Any], formats: tuple[str, ...]) -> list[tuple[str, dict[str, Any]]]:
    """(version, call) for every version whose source logs one of ``formats``."""
    return [(version, call) for call in engine_data["calls"] if call["format"] in formats for version in call["lines"]]


@pytest.mark.parametrize("family", FAMILIES, ids=[family.rule for family in FAMILIES])
def test_a_family_is_judged_by_its_rule_in_every_version_that_logs_it(family: Family, recorded_data: dict[str, Any], rules: dict[str, Any]) -> None:
    engine_data = recorded_data[family.engine]
    found = recorded(engine_data, family.formats)
    assert {call["format"] for _version, call in found} == set(family.formats), "a format string of the family is not in the recorded source"
    settings = engine_data["versions"]
    for version, call in found:
        number = call["lines"][version]
        for line in lines_of(
            family.engine, call["file"], number, call["level"], call["format"], settings[version]["log_format"], settings[version]["date_format"]
        ):
            got = classify_line(line, rules=rules[family.engine])
            assert (got["class"], got["rule"]) == (family.event_class, family.rule), (version, line, got)
    # a line of one of the family's files that must stay fatal
    assert family.fatal_file in {call["file"].rsplit("/", 1)[-1] for _version, call in found}
    assert classify_line(family.fatal, rules=rules[family.engine])["class"] == "fatal", family.fatal


@pytest.mark.parametrize("family", FAMILIES, ids=[family.rule for family in FAMILIES])
def test_a_rule_names_a_file_and_the_versions_its_lines_were_seen_in(family: Family, recorded_data: dict[str, Any]) -> None:
    found = recorded(recorded_data[family.engine], family.formats)
    pack = VLLM if family.engine == "vllm" else SGLANG
    reference = next(rule["reference"] for rule in pack if rule["id"] == family.rule)
    versions = sorted({version for version, _call in found}, key=data.version_key)
    first, last = (re.sub(r"\.post\d+$", "", version) for version in (versions[0], versions[-1]))
    assert re.search(rf"{re.escape(first)}(?:\.\d+)? to {re.escape(last)}\b", reference), (first, last, reference)
    assert any(call["file"].rsplit("/", 1)[-1] in reference for _version, call in found), reference


# whole logs: the held-out families as a user meets them, in a start that served
# the FA fallback line as vLLM 0.11 printed it on an older GPU (the line the rule was written for)
FA_FALLBACK = (
    "ERROR 06-10 07:31:02 [fa_utils.py:57] Cannot use FA version 2 is not supported due to FA2 is only supported on devices with compute capability >= 8"
)


def corpus_log(name: str) -> str:
    return next(log for log in corpus_logs() if log.name == name).body


def test_a_real_start_that_answered_a_wrong_model_name_passes_and_counts_it() -> None:
    """The journal of a real vLLM 0.32.0 (the test fleet) that a client asked for a model it does not serve."""
    report = classify(corpus_log("vllm-cpu-request-error-01.log"), engine="vllm")
    assert report["verdict"] == "pass", report["reason"]
    assert [(event["rule"], event["count"]) for event in report["request_error"]] == [("vllm-request-model-not-found", 1)]
    assert "The model `no-such-model` does not exist" in report["request_error"][0]["message"]
    assert report["fatal"] == [] and report["counts"]["request_error"] == 1


def test_a_start_that_fell_back_from_flash_attention_passes() -> None:
    lines = corpus_log("vllm-ready-01.log").splitlines()
    report = classify("\n".join([*lines[:3], FA_FALLBACK, *lines[3:]]) + "\n", engine="vllm")
    assert report["verdict"] == "pass", report["reason"]
    assert "vllm-fa-version-fallback" in {event["rule"] for event in report["allowlisted"]}


def test_a_traceback_logged_by_a_request_level_line_is_the_request_s_unless_the_engine_died() -> None:
    """vLLM's logger.exception prints the traceback with the line's own prefix on every line."""
    prefix = "(APIServer pid=94) ERROR 12-03 12:37:26 [serving.py:290] "
    lines = corpus_log("vllm-cpu-request-error-01.log").splitlines()
    traceback = [
        "Error in preprocessing prompt inputs",
        "Traceback (most recent call last):",
        '  File "/opt/vllm/lib/python3.11/site-packages/vllm/entrypoints/openai/chat_completion/serving.py", line 280, in create_chat_completion',
        "    conversation, engine_prompts = await self._preprocess_chat(",
        "ValueError: This model's maximum context length is 2048 tokens. However, you requested 4096 tokens in the messages.",
    ]
    one_request = classify("\n".join([*lines, *(prefix + line for line in traceback)]) + "\n", engine="vllm")
    assert one_request["verdict"] == "pass" and one_request["fatal"] == [], one_request["reason"]
    assert {event["rule"] for event in one_request["request_error"]} == {"vllm-request-model-not-found", "vllm-request-preprocessing-error"}
    traceback[-1] = "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause."
    engine_died = classify("\n".join([*lines, *(prefix + line for line in traceback)]) + "\n", engine="vllm")
    assert [event["rule"] for event in engine_died["fatal"]] == ["vllm-engine-dead"], engine_died["fatal"]


def test_the_docs_table_is_what_the_tool_makes_of_the_recorded_calls() -> None:
    """docs/engine-source.md is generated (python -m scripts.engine_source table): a rule change that
    changes how a recorded line is judged changes the table, and the table is made again."""
    assert (REPO / "docs" / "engine-source.md").read_text(encoding="utf-8") == table.render()
