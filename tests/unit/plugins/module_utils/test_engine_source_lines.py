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
from ansible_collections.inferops.runbooks.plugins.module_utils._rule_packs import VLLM
from scripts.engine_source import data, table
from scripts.engine_source.lines import lines_of

REPO = Path(__file__).resolve().parents[4]


class Family(NamedTuple):
    rule: str
    event_class: str
    format: str  # the recorded format string of the call
    fatal: str  # a line of the same file that must stay fatal
    fatal_file: str


FAMILIES = [
    Family(
        "vllm-fa-version-fallback",
        "allowlisted",
        "Cannot use FA version %d is not supported due to %s",
        # the same file (0.32.0) on ROCm without the flash-attn package: raised when attention runs
        "ImportError: ROCm platform requires upstream flash-attn to be installed. Please install flash-attn first.",
        "fa_utils.py",
    ),
    Family(
        "vllm-request-model-not-found",
        "request_error",
        "Error with model %s",
        # the chat server's stream generator when the engine core died while serving the request
        "(APIServer pid=1234) ERROR 12-02 05:10:11 [serving_chat.py:1278] Error with model vllm.v1.engine.exceptions.EngineDeadError: "
        "EngineCore encountered an issue. See stack trace (above) for the root cause.",
        "serving_chat.py",
    ),
]


@pytest.fixture(scope="module")
def vllm_data() -> dict[str, Any]:
    return data.load("vllm")


@pytest.fixture(scope="module")
def vllm_rules() -> Any:
    return load_rules("vllm")


def recorded(engine_data: dict[str, Any], fmt: str) -> list[tuple[str, dict[str, Any]]]:
    """(version, call) for every version whose source logs ``fmt``."""
    return [(version, call) for call in engine_data["calls"] if call["format"] == fmt for version in call["lines"]]


@pytest.mark.parametrize("family", FAMILIES, ids=[family.rule for family in FAMILIES])
def test_a_family_is_judged_by_its_rule_in_every_version_that_logs_it(family: Family, vllm_data: dict[str, Any], vllm_rules: Any) -> None:
    found = recorded(vllm_data, family.format)
    assert found, f"no version of the recorded source logs {family.format!r}"
    settings = vllm_data["versions"]
    for version, call in found:
        number = call["lines"][version]
        for line in lines_of("vllm", call["file"], number, call["level"], call["format"], settings[version]["log_format"], settings[version]["date_format"]):
            got = classify_line(line, rules=vllm_rules)
            assert (got["class"], got["rule"]) == (family.event_class, family.rule), (version, line, got)
    # the line of the same file that must stay fatal
    assert family.fatal_file in {call["file"].rsplit("/", 1)[-1] for _, call in found}
    assert classify_line(family.fatal, rules=vllm_rules)["class"] == "fatal", family.fatal


@pytest.mark.parametrize("family", FAMILIES, ids=[family.rule for family in FAMILIES])
def test_a_rule_names_the_file_and_the_versions_its_line_was_seen_in(family: Family, vllm_data: dict[str, Any]) -> None:
    found = recorded(vllm_data, family.format)
    reference = next(rule["reference"] for rule in VLLM if rule["id"] == family.rule)
    first, last = (min(found, key=lambda item: data.version_key(item[0]))[0], max(found, key=lambda item: data.version_key(item[0]))[0])
    assert re.sub(r"\.post\d+$", "", first) in reference and re.sub(r"\.post\d+$", "", last) in reference, (first, last, reference)
    assert any(call["file"].rsplit("/", 1)[-1] in reference for _, call in found), reference


# whole logs: the held-out families as a user meets them, in a start that served
MODEL_NOT_FOUND = (
    "ERROR 06-10 07:32:37 [serving_chat.py:136] Error with model object='error' message='The model `x` does not exist.' "
    "type='NotFoundError' param=None code=404"
)
FA_FALLBACK = (
    "ERROR 06-10 07:31:02 [fa_utils.py:57] Cannot use FA version 2 is not supported due to FA2 is only supported on devices with compute capability >= 8"
)


def test_a_start_that_served_a_wrong_model_name_passes_and_counts_it() -> None:
    log = (REPO / "tests/unit/data/corpus/logs/vllm-ready-01.log").read_text(encoding="utf-8").split("# ---- verbatim log below ----\n", 1)[1]
    lines = log.splitlines()
    served = "\n".join([*lines[:3], FA_FALLBACK, *lines[3:], MODEL_NOT_FOUND, MODEL_NOT_FOUND.replace("`x`", "`y`")]) + "\n"
    report = classify(served, engine="vllm")
    assert report["verdict"] == "pass", report["reason"]
    assert [event["rule"] for event in report["allowlisted"] if event["rule"] == "vllm-fa-version-fallback"] == ["vllm-fa-version-fallback"]
    assert {event["rule"] for event in report["request_error"]} == {"vllm-request-model-not-found"}
    assert sum(event["count"] for event in report["request_error"]) == 2
    assert report["counts"]["request_error"] == 2


def test_the_docs_table_is_what_the_tool_makes_of_the_recorded_calls() -> None:
    """docs/engine-source.md is generated (python -m scripts.engine_source table): a rule change that
    changes how a recorded line is judged changes the table, and the table is made again."""
    assert (REPO / "docs" / "engine-source.md").read_text(encoding="utf-8") == table.render()
