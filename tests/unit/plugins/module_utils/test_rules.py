"""Rules: typed fields, the list form of a pattern, disabled ids, the probes that refuse slow
patterns, engine changes to common rules, and the words that let the classifier skip lines."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import classify, classify_line
from ansible_collections.inferops.runbooks.plugins.module_utils._rules import (
    ENGINES,
    PROBE_HANG_SECONDS,
    PROBE_KILL_CPU_SECONDS,
    PROBES,
    RuleError,
    check_rules,
    load_rules,
    pumped_probes,
    required_literals,
    word_search_source,
)

FIRED_UP = "[2025-03-08 12:29:33] The server is fired up and ready to roll!"
UVICORN_UP = "[2025-03-08 12:29:29] INFO:     Application startup complete."


def rule(**fields: Any) -> dict[str, Any]:
    return {"id": "site-rule", "pattern": "frobnicator", "reason": "a reason", **fields}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (rule(pattern=1), "'pattern' must be a string (a regular expression) or a list of them, got a number 1"),
        (rule(pattern={"a": 1}), "'pattern' must be a string"),
        (rule(pattern=["foo", 2]), "not so: #2 (a number 2)"),
        (rule(pattern=["foo", ""]), "not so: #2 (a string '')"),
        (rule(pattern=[]), "missing required field(s) pattern"),
        (rule(id=7), "extra rules rule #1: 'id' must be a string, got a number 7"),
        (rule(reason=["a"]), "'reason' must be a string, got a list"),
        (rule(reference=3), "'reference' must be a string"),
        (rule(progress_bar="yes"), "'progress_bar' must be true or false, got a string 'yes'"),
        (rule(levels="ERROR"), "'levels' must be a list of"),
        (rule(levels=["LOUD"]), "levels 'LOUD' is not one of"),
        (rule(phase=3), "'phase' must be a string, got a number 3"),
        (rule(phase="booting"), "phase 'booting' is not one of"),
        (rule(expires=20261231), "'expires' must be a date as YYYY-MM-DD, got a number 20261231"),
        (rule(**{"class": ["fatal"]}), "'class' must be a string"),
    ],
)
def test_every_field_is_type_checked_with_a_clear_message(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(RuleError) as error:
        load_rules("sglang", [spec])
    assert message in str(error.value)
    assert "_Ansible" not in str(error.value) and "NoneType" not in str(error.value)


def test_a_pattern_list_means_any_of_its_patterns_not_a_character_class() -> None:
    rules = load_rules("sglang", [rule(id="site-two", pattern=["foo bar", r"baz \d+"])])
    assert classify_line("[2025-03-08 12:29:13 TP0] a foo bar here", rules=rules)["rule"] == "site-two"
    assert classify_line("[2025-03-08 12:29:13 TP0] baz 42", rules=rules)["rule"] == "site-two"
    # as a character class, ['foo', 'bar'] would have allowlisted any line with an f, o, b, a or r
    scheduler = "[2025-03-08 12:29:13 TP0] Scheduler hit an exception: boom"
    assert classify_line(scheduler, rules=load_rules("sglang", [rule(pattern=["foo", "bar"])]))["class"] == "fatal"


def test_disabled_rules_must_be_ids() -> None:
    with pytest.raises(RuleError) as error:
        load_rules("sglang", disabled=[1, None, "sglang-fired-up"])
    assert str(error.value) == "disabled rules must be rule ids (non-empty strings); not so: #1 (a number 1), #2 (null None)"
    with pytest.raises(RuleError, match="must be a list of rule ids, got a string"):
        load_rules("sglang", disabled="sglang-fired-up")


def test_engine_must_be_known() -> None:
    with pytest.raises(RuleError, match=r"engine 'tgi' is not one of auto, sglang, vllm"):
        check_rules("tgi")
    assert set(ENGINES) == {"auto", "sglang", "vllm"}


@pytest.mark.parametrize("engine", ENGINES)
def test_shipped_rules_pass_the_probes(engine: str) -> None:
    assert check_rules(engine).rules


def test_a_catastrophic_pattern_is_refused_naming_rule_and_probe() -> None:
    started = time.monotonic()
    with pytest.raises(RuleError) as error:
        check_rules("sglang", [rule(id="site-hang", pattern=r"^(\w+\s?)+:")])
    text = str(error.value)
    assert "rule 'site-hang' (extra rules #1)" in text
    assert "a run of word characters" in text and "backtracks" in text
    # the probe process is killed when the probe hangs: the refusal does not wait for the pattern
    assert time.monotonic() - started < PROBE_HANG_SECONDS + 30


def test_a_quadratic_pattern_is_refused() -> None:
    with pytest.raises(RuleError) as error:
        check_rules("sglang", [rule(id="site-slow", pattern=r"\w*@")])
    # refused for its CPU time (or, on a machine too busy to answer in time, as hung)
    assert "rule 'site-slow'" in str(error.value)
    assert "grows faster than the line" in str(error.value) or "did not finish" in str(error.value)


@pytest.mark.parametrize(
    ("pattern", "probe"),
    [
        (r"(b+)+$", ("", "b")),
        (r"^\[worker\] (q*)*$", ("[worker] ", "q")),
        (r"state=([^,]+)+,", ("state=", "a")),
        (r"(?:x|xx)+y", ("", "xx")),  # the parser reads x|xx as x(?:|x); a sample takes the branch that is not empty
        (r"(?=(c+)+$)", ("", "c")),
        (r"id=\d{3}-(?:[a-f]+){2,}#", ("id=000-", "a")),
    ],
)
def test_probes_are_made_from_a_patterns_own_repeats(pattern: str, probe: tuple[str, str]) -> None:
    """The fixed probes are runs of a few characters; a nested repeat of other characters, or one
    behind a literal, is reached with a probe made from the pattern: what comes before the repeat,
    then what its body matches, over and over."""
    assert probe in pumped_probes(pattern)


def test_a_nested_repeat_the_fixed_probes_miss_is_refused_by_the_cpu_limit() -> None:
    """(b+)+$ backtracks without bound on a run of b's, which no fixed probe holds: refused on the
    probe made from it, the probe process ended by its CPU limit (not by the wall-clock timeout)."""
    assert not any(re.search(r"b{8}", text) for _name, text in PROBES)
    with pytest.raises(RuleError) as error:
        check_rules("sglang", [rule(id="site-bees", pattern=r"worker: (b+)+$")], shipped=False)
    assert str(error.value).startswith(
        f"rule 'site-bees' (extra rules #1): pattern 'worker: (b+)+$' did not finish within {PROBE_KILL_CPU_SECONDS:g} s of CPU on"
        " 'b' over and over after 'worker: ' (up to 16384 characters, made from the pattern's repeats): it backtracks without bound"
    )


def test_only_your_rules_are_tried_when_asked_and_a_rule_that_passed_is_not_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """shipped=False, as the filters and journal_scan ask: the shipped packs (tried above) cost
    nothing; a pattern that passed in this process is not tried again."""
    spec = rule(id="site-nfs", pattern=r"NFS read took \d+ ms on host-\d+")
    assert check_rules("sglang", [spec], shipped=False).rules[0].id == "site-nfs"

    def no_process(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("a probe process was started")

    monkeypatch.setattr("subprocess.Popen", no_process)
    assert len(check_rules("vllm", shipped=False).rules) == len(load_rules("vllm").rules)
    assert check_rules("sglang", [spec], shipped=False).rules[0].id == "site-nfs"


def test_check_rules_also_refuses_what_load_rules_refuses() -> None:
    with pytest.raises(RuleError, match="invalid regular expression"):
        check_rules("sglang", [rule(pattern="a(")])
    with pytest.raises(RuleError, match="not so: #1"):
        check_rules("sglang", disabled_rules=[None])


def test_probes_are_as_long_as_what_a_rule_sees() -> None:
    from ansible_collections.inferops.runbooks.plugins.module_utils._lines import MAX_LINE_CHARS

    assert all(len(text) >= MAX_LINE_CHARS - 2 for _name, text in PROBES)


def test_sglang_is_ready_on_its_marker_only_and_vllm_on_uvicorn() -> None:
    sglang = load_rules("sglang")
    uvicorn = classify_line(UVICORN_UP, rules=sglang)
    assert (uvicorn["class"], uvicorn["rule"], uvicorn["phase"]) == ("progress", "common-uvicorn-startup-complete", "warming_up")
    assert classify(UVICORN_UP + "\n", rules=sglang)["verdict"] == "pending"
    report = classify(f"{UVICORN_UP}\n{FIRED_UP}\n", rules=sglang)
    assert report["verdict"] == "pass" and report["ready_line"] == 2
    assert classify_line(UVICORN_UP, rules=load_rules("vllm"))["class"] == "ready"
    assert classify_line(UVICORN_UP, rules=load_rules("auto"))["class"] == "ready"


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        ("Load weight (?:begin|end)", ("load weight ",)),
        ("hit an exception|scheduler is dead", ("hit an exception", "scheduler is dead")),
        ("(?-i:Error)Foo", ("errorfoo",)),
        (r"\d+ items?", (" item",)),
        (".", None),
        (r"(\w+)\1", None),
        ("x?", None),
        ("caf\u00e9 au lait", (" au lait",)),
        ("\u212aelvin", ("kelvin",)),
    ],
)
def test_the_words_a_pattern_needs(pattern: str, words: tuple[str, ...] | None) -> None:
    assert required_literals(re.compile(pattern, re.IGNORECASE)) == words


def test_the_word_search_finds_every_word_wherever_it_is() -> None:
    words = ["exit", "error", "warn", "load weight ", "%|"]
    source, groups = word_search_source(words)
    search = re.compile(source)
    for word in words:
        for text in (word, f"a {word} b", f"{word}{word}", f"xx{word}"):
            anchors = search.findall(text)
            assert any(word in groups[anchor] for anchor in anchors), (word, text)
    assert search.findall("nothing to see here") == []


@pytest.mark.parametrize("pattern", [r"(x+)*$", r"(?:x+)*$", r"^\[worker\] (q*)*$"])
def test_a_nested_repeat_that_also_matches_nothing_at_the_end_is_refused(pattern: str) -> None:
    """(x+)*$ can match an empty text at the end of any line, so a search of the short probe succeeds
    whatever ends it; the long probe must still be tried (it takes 2^n steps on n x's and a stopper)."""
    with pytest.raises(RuleError, match="backtracks without bound"):
        check_rules("sglang", [rule(id="site-star", pattern=pattern)])
