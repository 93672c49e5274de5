"""No rule can stall the public entry points: a user's pattern that backtracks without bound is
refused, naming it, before any line is read, and quickly - by the filters (classify_journal,
journal_line_class), by the journal_scan module, and by the roles' validation, all through the
one check in module_utils/_rules (check_rules)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import typing as t
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from ansible_collections.inferops.runbooks.plugins.filter.journal import classify_journal, journal_line_class
from ansible_collections.inferops.runbooks.plugins.module_utils import _rules
from ansible_collections.inferops.runbooks.plugins.plugin_utils._options import rule_problems
from tests.figures import record
from tests.unit.conftest import CORPUS

pytestmark = pytest.mark.ansible  # exercises ansible-core: runs on every version (tests/harness/lanes.py)

REPO = Path(__file__).resolve().parents[3]
MODULE = REPO / "plugins" / "modules" / "journal_scan.py"
# the line of issue 22: 50 KB of 'a' ending in 'b', one line
ISSUE_LINE = "a" * 50_000 + "b"
ISSUE_RULE = {"id": "site-a-run", "pattern": "(a+)+$", "reason": "a run of a's is harmless"}
SLOWEST: dict[str, float] = {}
# hypothesis keeps caches in a folder of its own: a temporary one, removed after these tests
HYPOTHESIS_HOME = tempfile.mkdtemp(prefix="inferops-hypothesis-")
set_hypothesis_home_dir(HYPOTHESIS_HOME)


def _timed(entry_point: str, call: t.Callable[[], str]) -> str:
    started = time.monotonic()
    message = call()
    seconds = time.monotonic() - started
    # a figure, not an assertion: the refusal is bounded by the probe's CPU and wall-clock limits,
    # and a loaded machine only stretches the wall clock
    SLOWEST[entry_point] = max(SLOWEST.get(entry_point, 0.0), seconds)
    return message


def _filter_refusal(filter_function: t.Callable[..., t.Any], text: str, rules: list[dict[str, t.Any]]) -> str:
    with pytest.raises(AnsibleFilterError) as error:
        filter_function(text, extra_rules=rules, engine="sglang")
    return str(error.value)


def run_journal_scan(args: dict[str, t.Any], tmp: Path) -> dict[str, t.Any]:
    """The journal_scan module file run by itself, its arguments in a file (as one debugs a module),
    with the collection on the path: its JSON result. Never a traceback."""
    args_file = tmp / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=str(REPO / "collections"))
    done = subprocess.run([sys.executable, str(MODULE), str(args_file)], cwd=tmp, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    result: dict[str, t.Any] = json.loads(done.stdout)
    return result


def _module_refusal(rules: list[dict[str, t.Any]], tmp: Path) -> str:
    result = run_journal_scan({"unit": "sglang.service", "engine": "sglang", "extra_rules": rules}, tmp)
    assert result.get("failed") is True, result
    return str(result["msg"])


def _validation_refusal(rules: list[dict[str, t.Any]]) -> str:
    problems = rule_problems("sglang", rules, [], "sglang_precheck_")
    assert problems, "the roles' validation let the rule through"
    return "; ".join(problems)


@pytest.fixture(scope="module", autouse=True)
def _record_figures() -> t.Iterator[None]:
    yield
    shutil.rmtree(HYPOTHESIS_HOME, ignore_errors=True)
    if SLOWEST:
        record("\nrule refusals, slowest per entry point: " + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in sorted(SLOWEST.items())))


# -- the example of the issue ---------------------------------------------------------------------


def test_the_issue_example_is_refused_by_the_real_filters_naming_the_rule() -> None:
    """classify_journal with the rule (a+)+$ on one 50 KB line of a ending in b ran past 30 s; it
    is refused at once with a message naming the rule and its pattern."""
    for name, function in (("classify_journal", classify_journal), ("journal_line_class", journal_line_class)):
        message = _timed(name, lambda function=function: _filter_refusal(function, ISSUE_LINE, [ISSUE_RULE]))  # type: ignore[misc]
        # killed at 0.5 s of CPU, or at the 3 s wall-clock backstop when a loaded machine gives it less
        assert re.match(rf"{name}: rule 'site-a-run' \(extra rules #1\): pattern '\(a\+\)\+\$' did not finish within (0\.5 s of CPU|3 s) on ", message), message
        assert "backtracks without bound" in message and "rewrite it" in message


def test_the_issue_example_fails_journal_scan_through_ansible(tmp_path: Path) -> None:
    """The module run for real (ansible-playbook, AnsiballZ, on localhost): a failed task with the
    message, not a traceback; nothing is read from the journal."""
    out = tmp_path / "scan.json"
    play = [
        {
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": False,
            "tasks": [
                {"inferops.runbooks.journal_scan": {"unit": "sglang.service", "extra_rules": [ISSUE_RULE]}, "register": "scan", "ignore_errors": True},
                {"ansible.builtin.copy": {"content": "{{ scan | to_json }}", "dest": str(out), "mode": "0644"}},
            ],
        }
    ]
    playbook = tmp_path / "scan.yml"
    playbook.write_text(json.dumps(play))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    command = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-e", f"ansible_python_interpreter={sys.executable}", str(playbook)]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert result["failed"] is True and "module_stderr" not in result, result
    assert re.match(r"rule 'site-a-run' \(extra rules #1\): pattern '\(a\+\)\+\$' did not finish within (0\.5 s of CPU|3 s) on ", result["msg"]), result
    # ansible-core 2.19 notes "(traceback unavailable)" on any failure: there was none
    assert "Traceback" not in json.dumps(result) + done.stdout + done.stderr


def test_a_rule_that_passed_is_not_tried_again_and_no_rules_of_yours_start_no_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the check costs a filter: nothing without rules of your own (the shipped packs are
    tried by the tests), one probe process the first time a rule is seen in a process."""
    log = (CORPUS / "logs" / "sglang-ready-01.log").read_text()
    rule = {"id": "site-frob", "pattern": r"Frobnicator returned error state \d+, continuing", "reason": "ours"}
    first = classify_journal(log, extra_rules=[rule], engine="sglang")

    def no_process(*_args: t.Any, **_kwargs: t.Any) -> t.NoReturn:
        raise AssertionError("a probe process was started")

    monkeypatch.setattr("subprocess.Popen", no_process)
    assert classify_journal(log, extra_rules=[rule], engine="sglang") == first
    assert classify_journal(log, engine="sglang")["verdict"] == "pass"
    assert journal_line_class("[2025-03-08 12:29:13 TP0] Frobnicator returned error state 7, continuing", extra_rules=[rule])["rule"] == "site-frob"


def test_the_shipped_packs_and_a_linear_rule_pass_the_probes_made_from_their_repeats() -> None:
    """The probes made from a pattern's repeats refuse nothing that is linear: every shipped rule
    and the usual shapes of users' rules pass."""
    linear = [
        r"Frobnicator returned error state \d+, continuing",
        r"^v(\d+\.)+\d+$",
        r"NFS read took \d+ ms",
        r"(?:warn|error): (\w+ )*retrying",
        r"^(a{1,64}b)+c",
        r"(.+)+$",  # a line holds no newline: .+ takes it whole and $ matches at once
    ]
    _rules.check_rules("auto", [{"id": f"site-{number}", "pattern": pattern, "reason": "r"} for number, pattern in enumerate(linear)])


# -- every nested quantifier, every entry point ----------------------------------------------------

ATOMS = ["a", "x", "Q", "7", "-", r"\.", "=", "@", r"\w", r"\d", r"\s", r"\S", r"\W", "[a-z]", "[0-9a-f]", "[^,]", r"[^\s]", "[A-Z_]", "[xyz]", "."]
INNER = ["+", "*", "{1,}", "{2,}", "+?", "*?", "{1,64}"]
OUTER = ["+", "*", "{1,}", "{2,}", "+?", "*?", "{1,64}"]
PREFIXES = ["", "^", "worker: ", r"^\[TP\d\] ", "state=", "(?i)Frob "]
# what must follow the repeats: the end of the line, or a character the atom cannot match
SUFFIXES = ["$", r"\Z", "!", "#", "Z", "9", " ", ","]


@st.composite
def nested_quantifiers(draw: st.DrawFn) -> str:
    """A pattern with a repeat of a repeat of the same characters, then something that makes the
    match fail after the run: (a+)+$, ^\\[TP\\d\\] ((?:\\d*?)+)+9, state=([^,]{2,}\\S*)*, ..."""
    atom = draw(st.sampled_from(ATOMS))
    suffix = draw(st.sampled_from(SUFFIXES))
    if suffix in ("$", r"\Z"):
        assume(atom != ".")  # on a line, which has no newline, (.+)+$ matches at once
    else:
        assume(not re.fullmatch(atom, suffix, re.IGNORECASE))
    body = atom + draw(st.sampled_from(INNER))
    if draw(st.booleans()):
        body += atom + draw(st.sampled_from(INNER))
    for _level in range(draw(st.integers(1, 2))):
        body = draw(st.sampled_from(["(", "(?:"])) + body + ")" + draw(st.sampled_from(OUTER))
    return draw(st.sampled_from(PREFIXES)) + body + suffix


@settings(max_examples=8, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(nested_quantifiers(), st.sampled_from(["site-noise", "local-rank-spam", "x"]))
def test_every_entry_point_refuses_a_nested_quantifier_quickly_naming_it(tmp_path: Path, pattern: str, rule_id: str) -> None:
    rules = [{"id": rule_id, "pattern": pattern, "reason": "generated"}]
    named = f"rule '{rule_id}' (extra rules #1): pattern {pattern!r} "
    line = "[2025-03-08 12:29:13 TP0] " + "a" * 50_000 + "b"
    messages = {
        "classify_journal": _timed("classify_journal", lambda: _filter_refusal(classify_journal, line, rules)),
        "journal_line_class": _timed("journal_line_class", lambda: _filter_refusal(journal_line_class, line, rules)),
        "journal_scan": _timed("journal_scan", lambda: _module_refusal(rules, tmp_path)),
        "roles' validation": _timed("roles' validation", lambda: _validation_refusal(rules)),
    }
    for entry_point, message in messages.items():
        assert named in message, f"{entry_point}: {message}"
        assert "backtracks without bound" in message or "grows faster than the line" in message, f"{entry_point}: {message}"
