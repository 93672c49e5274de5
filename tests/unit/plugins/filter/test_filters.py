"""The filters through a real ansible-playbook run on the controller."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.runbooks.plugins.filter.deployment import batch_count
from ansible_collections.inferops.runbooks.plugins.plugin_utils._options import Step
from tests.unit.conftest import CORPUS

pytestmark = pytest.mark.ansible  # exercises ansible-core: runs on every version (tests/harness/lanes.py)

REPO = Path(__file__).resolve().parents[4]
PLAYBOOK = REPO / "tests" / "unit" / "playbooks" / "filters.yml"


def run_filters(log: Path, out: Path, **extra: Any) -> subprocess.CompletedProcess[str]:
    # results as JSON: the YAML result format folds long messages differently across ansible-core versions
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    variables = {"filters_log_path": str(log), "filters_out": str(out), **extra}
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), str(PLAYBOOK), "-e", json.dumps(variables)]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)


def result_of(process: subprocess.CompletedProcess[str], out: Path) -> dict[str, Any]:
    assert process.returncode == 0, process.stdout + process.stderr
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def test_classify_journal_filter_on_a_crashed_log(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    result = result_of(run_filters(CORPUS / "logs" / "sglang-nccl-02.log", out), out)
    report = result["report"]
    assert report["verdict"] == "fail"
    assert any("NCCL error" in event["message"] for event in report["fatal"])
    assert result["line"]["class"] == "allowlisted"
    assert result["line"]["rule"] == "sglang-cute-dsl-package-walk"
    seed = result["seed"]
    assert seed["allowlisted"][0]["count"] == 2
    assert seed["allowlisted"][0]["ranks"] == ["pid165489", "pid165494"]


def test_classify_journal_filter_with_user_rule_on_a_ready_log(tmp_path: Path) -> None:
    rules = [{"id": "site-lora-notice", "pattern": "LoRA dynamic loading", "reason": "we enable it on purpose"}]
    out = tmp_path / "result.json"
    result = result_of(run_filters(CORPUS / "logs" / "vllm-ready-01.log", out, filters_engine="vllm", filters_rules=rules), out)
    assert result["report"]["verdict"] == "pass"


def test_bad_rule_fails_the_task_with_a_clear_message(tmp_path: Path) -> None:
    process = run_filters(CORPUS / "logs" / "vllm-ready-01.log", tmp_path / "unused.json", filters_rules=[{"id": "broken", "pattern": "a(", "reason": "x"}])
    assert process.returncode != 0
    assert "classify_journal: rule 'broken' (extra rules #1): invalid regular expression" in process.stdout
    assert "Traceback" not in process.stdout + process.stderr


@pytest.mark.parametrize("given", [1, 3, "2", " 4 "])
def test_the_batch_size_is_a_whole_number_given_as_a_number_or_its_digits(given: object) -> None:
    assert batch_count(given) == [Step(int(str(given)))]


@pytest.mark.parametrize(("given", "steps"), [("25%", [Step(0, 25.0)]), ([1, 2, "50%"], [Step(1), Step(2), Step(0, 50.0)]), ("1, 2", [Step(1), Step(2)])])
def test_the_batch_size_is_a_percent_or_a_ramp_as_serial_takes_them(given: object, steps: list[Step]) -> None:
    assert batch_count(given) == steps


@pytest.mark.parametrize("given", [0, "0", -1, "1.5", 2.5, True, "", None, "two", "٣", "150%", [0], [1, "abc"]])
def test_a_batch_size_that_is_not_a_whole_number_is_refused_before_anything_restarts(given: object) -> None:
    refused = r"^Refusing the rollout before anything restarts: sglang_batch_size must be a whole number >= 1, a percent"
    with pytest.raises(AnsibleFilterError, match=refused):
        batch_count(given)
