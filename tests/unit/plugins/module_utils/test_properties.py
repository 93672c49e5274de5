"""Property-based tests (hypothesis) of the classifier, the journal readers and rule validation:
no input makes them raise, what a rule sees of a line is bounded, the report is well formed, and
the fast paths (the word search, the shape cache, bare traceback frames) give exactly the report
that reading every line from scratch gives."""

from __future__ import annotations

import collections
import io
import json
import re
import shutil
import tempfile
import typing as t
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from ansible_collections.inferops.runbooks.plugins.module_utils import _systemd
from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import Scanner, classify
from ansible_collections.inferops.runbooks.plugins.module_utils._lines import LINE_CUT_NOTE, MAX_LINE_CHARS, record_message
from ansible_collections.inferops.runbooks.plugins.module_utils._rules import RuleError, RuleSet, load_rules, required_literals
from tests.figures import record
from tests.unit.conftest import corpus_lines, corpus_logs

# hypothesis keeps caches in a folder of its own: a temporary one, removed after these tests
HYPOTHESIS_HOME = tempfile.mkdtemp(prefix="inferops-hypothesis-")
set_hypothesis_home_dir(HYPOTHESIS_HOME)
# no example database on disk (tests leave nothing behind), no per-example deadline on a shared machine
settings.register_profile("inferops", database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile("inferops")

CASES: collections.Counter[str] = collections.Counter()
RULES = {engine: load_rules(engine) for engine in ("auto", "sglang", "vllm")}
REAL_LINES = sorted({line for log in corpus_logs() for line in log.body.splitlines()} | {entry["line"] for entry in corpus_lines()})
VERDICTS = {"pass", "fail", "pending"}
MAX_SEEN = MAX_LINE_CHARS + len(LINE_CUT_NOTE.format(10**9))


@pytest.fixture(scope="module", autouse=True)
def _count_cases() -> t.Iterator[None]:
    yield
    shutil.rmtree(HYPOTHESIS_HOME, ignore_errors=True)
    details = ", ".join(f"{name} {count}" for name, count in sorted(CASES.items()))
    record(f"\nproperty-based tests: {sum(CASES.values())} generated cases ({details})")


class _Reference(Scanner):
    """Every line read from scratch: no word search, no shape cache, no cheap traceback frames."""

    def __init__(self, *args: t.Any, **kwargs: t.Any) -> None:
        super().__init__(*args, **kwargs)
        self._words = None

    def _learn(self, shape: bytes) -> bool:
        return False

    def _add_frame(self, line: bytes) -> bool:
        return False


def bounded(rules: RuleSet) -> tuple[RuleSet, list[int]]:
    """The rules, with the length of every message they are tried on kept (the work per line)."""
    seen: list[int] = []
    match = rules.match

    def counting(message: str, level: str, anchors: t.Any = None, location: t.Any = None) -> t.Any:
        seen.append(len(message))
        return match(message, level, anchors, location)

    rules.match = counting  # type: ignore[method-assign]
    return rules, seen


def assert_valid(report: dict[str, t.Any], lines: int) -> None:
    assert report["verdict"] in VERDICTS and isinstance(report["reason"], str)
    assert report["lines"] == lines
    assert all(count >= 0 for count in report["counts"].values())
    for event_class in ("fatal", "allowlisted", "unrecognized"):
        for event in report[event_class]:
            assert 1 <= event["first_line"] <= event["last_line"] <= lines
            assert event["count"] >= 1 and isinstance(event["message"], str)
    json.dumps(report)


# -- strategies ------------------------------------------------------------------------------------

noise = st.sampled_from(
    ["\r", "\x1b[31m", "\x00", "\t", "   ", "é", "\ufffd", "%|", "[blob data]", "ERROR: ", "WARNING ", "Traceback (most recent call last):"]
)
words = st.text(alphabet="abcdefxyz0123456789 :/._-", max_size=12)


@st.composite
def log_lines(draw: st.DrawFn) -> list[str]:
    """Lines like a journal's: real lines, with numbers changed, words added, noise, tracebacks."""
    lines: list[str] = []
    for _index in range(draw(st.integers(0, 25))):
        kind = draw(st.integers(0, 9))
        if kind <= 4:
            line = draw(st.sampled_from(REAL_LINES))
            if draw(st.booleans()):
                line = re.sub(r"\d", lambda _m: str(draw(st.integers(0, 9))), line)
            if draw(st.booleans()):
                line += " " + draw(words)
        elif kind == 5:
            line = draw(noise) + draw(st.sampled_from(REAL_LINES))
        elif kind == 6:
            rank = draw(st.integers(0, 600))
            line = f"[2025-03-08 12:29:13 TP{rank}] " + draw(st.sampled_from(REAL_LINES))
        elif kind == 7:
            lines.append(
                draw(
                    st.sampled_from(
                        ["Traceback (most recent call last):", "[2025-03-08 12:29:13 TP1] Scheduler hit an exception: Traceback (most recent call last):"]
                    )
                )
            )
            lines.extend(f'  File "/x/{draw(words)}.py", line {n}, in f' for n in range(draw(st.integers(0, 70))))
            line = draw(st.sampled_from(["RuntimeError: boom", "", "During handling of the above exception, another exception occurred:", "    x = 1"]))
        elif kind == 8:
            line = draw(st.text(max_size=60))
        else:
            line = ""
        lines.append(line.replace("\n", " "))
    return lines


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=30), lambda inner: st.lists(inner, max_size=6), max_leaves=20
)


# -- the classifier ----------------------------------------------------------------------------------


@settings(max_examples=120)
@given(st.binary(max_size=3000), st.sampled_from(sorted(RULES)))
def test_any_bytes_give_a_valid_report(data: bytes, engine: str) -> None:
    CASES["random bytes"] += 1
    report = classify(data, rules=RULES[engine])
    assert report["verdict"] in VERDICTS
    json.dumps(report)


@settings(max_examples=60)
@given(log_lines(), st.sampled_from(sorted(RULES)), st.integers(1, 5000), st.booleans())
def test_fast_paths_give_the_report_of_reading_every_line(lines: list[str], engine: str, chunk: int, strict: bool) -> None:
    CASES["logs vs every line read from scratch"] += 1
    text = ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape") if lines else b""
    fast = Scanner(RULES[engine], strict=strict)
    for start in range(0, len(text), chunk):
        fast.feed_text(text[start : start + chunk])
    reference = _Reference(RULES[engine], strict=strict)
    reference.feed_text(text)
    expected = reference.finish()
    assert fast.finish() == expected
    assert_valid(expected, len(lines))
    one_by_one = Scanner(RULES[engine], strict=strict)
    for line in lines:
        one_by_one.feed_line(line)
    assert one_by_one.finish() == expected


@settings(max_examples=40)
@given(st.lists(st.fixed_dictionaries({}, optional={"MESSAGE": json_values | st.binary(max_size=80), "_PID": json_values}), max_size=30))
def test_any_journal_records_give_a_valid_report(records: list[dict[str, t.Any]]) -> None:
    CASES["journal records"] += 1
    report = classify(records) if records else classify([])
    assert_valid(report, len(records))
    for item in records:
        assert isinstance(record_message(item), (str, bytes))


@settings(max_examples=8)
@given(
    st.sampled_from([1, 20_000, 100_000, 1_000_000, 4_000_000]),
    st.sampled_from(["x", "a:", " ", "1", "ab ", "/a"]),
    st.sampled_from(["", "ERROR: ", "[2025-03-08 12:29:13 TP0] "]),
)
def test_what_rules_see_of_a_line_is_bounded(size: int, unit: str, prefix: str) -> None:
    CASES["lines of up to 4 MB"] += 1
    rules, seen = bounded(load_rules("sglang"))
    report = classify((prefix + unit * (size // len(unit))).encode() + b"\n", rules=rules)
    assert_valid(report, 1)
    assert max(seen, default=0) <= MAX_SEEN


@settings(max_examples=10)
@given(st.integers(0, 6000), st.integers(1, 512))
def test_deep_tracebacks_on_many_ranks(depth: int, ranks: int) -> None:
    CASES["deep tracebacks, many ranks"] += 1
    lines = ["[2025-03-08 12:29:13 TP0] Scheduler hit an exception: Traceback (most recent call last):"]
    lines += [f'  File "/sgl/layer_{n}.py", line {n}, in forward' for n in range(depth)]
    lines += ["RecursionError: maximum recursion depth exceeded"]
    lines += [f"[2025-03-08 12:29:14 TP{rank}] Received sigquit from a child process." for rank in range(ranks)]
    report = classify("\n".join(lines))
    assert_valid(report, len(lines))
    assert report["fatal"][0]["message"] == "RecursionError: maximum recursion depth exceeded"
    assert len(report["fatal"][0]["traceback"]) <= 61
    assert len(report["fatal"][1]["ranks"]) == ranks


def test_empty_input() -> None:
    CASES["empty input"] += 1
    for empty in ("", b"", [], None, "\n"):
        assert classify(empty)["verdict"] == "pending"


# -- the journal readers --------------------------------------------------------------------------


@settings(max_examples=150)
@given(st.binary(max_size=2000), st.booleans())
def test_any_journalctl_output_is_read_without_error(data: bytes, as_json: bool) -> None:
    CASES["journalctl output bytes"] += 1
    raw = (b"{" + data) if as_json else data
    for item in _systemd.read_records(io.BufferedReader(io.BytesIO(raw))):  # type: ignore[arg-type]
        assert isinstance(item, dict)
        _systemd.message_text(item)


@settings(max_examples=60)
@given(st.lists(st.dictionaries(st.sampled_from(["MESSAGE", "_PID", "__CURSOR", "X"]), json_values, max_size=4), max_size=10))
def test_json_lines_of_any_values_are_read(records: list[dict[str, t.Any]]) -> None:
    CASES["journal JSON lines"] += 1
    text = b"\n".join(json.dumps(item).encode() for item in records) + b"\nnot json\n"
    read = list(_systemd.read_records(io.BufferedReader(io.BytesIO(text))))  # type: ignore[arg-type]
    assert read == [item for item in records if item] or read == records
    for item in read:
        _systemd.message_text(item)


# -- rule validation ------------------------------------------------------------------------------

regex_text = st.text(alphabet="ab:. ()|*+?[]^$\\dws{}1-", max_size=14)


@settings(max_examples=80)
@given(
    st.dictionaries(
        st.sampled_from(["id", "pattern", "reason", "class", "reference", "expires", "phase", "levels", "progress_bar", "colour"]),
        json_values | regex_text,
        max_size=9,
    )
)
def test_any_rule_is_accepted_or_refused_with_rule_error(spec: dict[str, t.Any]) -> None:
    CASES["rule specs"] += 1
    try:
        load_rules("sglang", [spec], disabled=[spec["id"]] if isinstance(spec.get("id"), str) and spec["id"].startswith("sglang-") else None)
    except RuleError as error:
        assert str(error)


@settings(max_examples=300)
@given(regex_text, st.text(alphabet="ab:. 1wd-xyz", max_size=30))
def test_a_line_a_pattern_matches_holds_one_of_its_words(pattern: str, text: str) -> None:
    CASES["patterns and lines"] += 1
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            regex = re.compile(pattern, re.IGNORECASE)
    except (re.error, OverflowError, RecursionError):
        return
    found = required_literals(regex)
    if found is not None and regex.search(text):
        assert any(word in text.lower() for word in found), (pattern, text, found)
