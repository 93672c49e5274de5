"""A check done once per run (plugin_utils/_once.py): the hosts' forks share its outcome through the
run's local temporary directory, with real processes forked at the same moment as Ansible's workers."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest
from ansible import constants as C

from ansible_collections.inferops.runbooks.plugins.plugin_utils import _once
from ansible_collections.inferops.runbooks.plugins.plugin_utils._options import rule_problems

BAD_RULE = [{"id": "mine", "pattern": "broken(", "class": "fatal", "reason": "a test rule"}]


@pytest.fixture(autouse=True)
def run_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(C, "DEFAULT_LOCAL_TMP", str(tmp_path), raising=False)
    return tmp_path


def counted_check(ledger: Path, problems: list[str]) -> list[str]:
    with ledger.open("a") as out:
        out.write(f"{os.getpid()}\n")
    return problems


def ask(ledger: Path, answers: Path) -> None:
    found = _once.once("test", {"rules": [1, 2]}, lambda: counted_check(ledger, ["a problem"]))
    with answers.open("a") as out:
        out.write(f"{found}\n")


def test_forks_asking_at_once_share_one_check(run_tmp: Path) -> None:
    ledger, answers = run_tmp / "ledger", run_tmp / "answers"
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=ask, args=(ledger, answers)) for _number in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    assert [worker.exitcode for worker in workers] == [0] * 6
    assert len(ledger.read_text().splitlines()) == 1
    assert answers.read_text().splitlines() == ["['a problem']"] * 6


def test_a_different_input_is_checked_again(run_tmp: Path) -> None:
    ledger = run_tmp / "ledger"
    assert _once.once("test", [1], lambda: counted_check(ledger, [])) == []
    assert _once.once("test", [1], lambda: counted_check(ledger, ["never"])) == []
    assert _once.once("test", [2], lambda: counted_check(ledger, ["second"])) == ["second"]
    assert len(ledger.read_text().splitlines()) == 2


def test_without_a_usable_directory_every_call_checks(run_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = run_tmp / "file"
    blocked.write_text("not a directory")
    monkeypatch.setattr(C, "DEFAULT_LOCAL_TMP", str(blocked))
    ledger = run_tmp / "ledger"
    for _attempt in range(2):
        assert _once.once("test", [1], lambda: counted_check(ledger, ["p"])) == ["p"]
    assert len(ledger.read_text().splitlines()) == 2


def test_rules_are_judged_as_rule_problems_judges_them() -> None:
    assert _once.rule_problems_once("sglang", [], []) == []
    bad = _once.rule_problems_once("sglang", BAD_RULE, [])
    assert bad == rule_problems("sglang", BAD_RULE, []) and bad[0].startswith("extra_rules: ") and "broken(" in bad[0]
    assert _once.rule_problems_once("sglang", [], ["no-such-rule"])[0].startswith("disabled_rules: ")
