"""check_options, write_report and the report filters through real ansible-playbook runs on the
controller: what Ansible hands the plugins (templated variables, hostvars of other hosts, survey
text) is what the Python core checks and renders."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.plugin_utils._render import junit_xml, stats, summary_lines
from ansible_collections.inferops.runbooks.plugins.plugin_utils._runbook_report import runbook_report
from tests.unit.plugins.module_utils.observations import CRASHED, restart_observed, wait_result

pytestmark = pytest.mark.ansible  # exercises ansible-core: runs on every version (tests/harness/lanes.py)

REPO = Path(__file__).resolve().parents[4]
PLAYBOOK = REPO / "tests" / "unit" / "playbooks" / "report_plugins.yml"
SECRET = "sk-inferops-unit-5d1e9a"
INVENTORY = {
    "all": {
        "hosts": {
            "node1": {"ansible_host": "192.0.2.11"},
            "node2": {"ansible_host": "192.0.2.12", "sglang_restart_budget": 0, "sglang_restart_health_url": "http://169.254.169.254/latest"},
            "node3": {"ansible_host": "192.0.2.13", "sglang_restart_budget": 0},
        },
        "vars": {"ansible_python_interpreter": sys.executable},
    }
}


def run(tmp_path: Path, *args: str, **variables: Any) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps(INVENTORY))
    observed = tmp_path / "observed.json"
    observed.write_text(json.dumps(variables.pop("observed", {})))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    extra = {"plugins_out": str(tmp_path), "plugins_observed_path": str(observed), **variables}
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(PLAYBOOK), "-e", json.dumps(extra), *args]
    process = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert process.returncode == 0, process.stdout + process.stderr
    return process, {path.stem: json.loads(path.read_text()) for path in tmp_path.glob("node*.json")}


def test_survey_text_is_checked_and_converted_and_the_report_rendered_as_the_core_renders_it(tmp_path: Path) -> None:
    survey = {
        "sglang_restart_budget": "120",
        "sglang_restart_strict": "true",
        "sglang_restart_stall_limits": "capturing_cuda_graphs: 90",
        "sglang_restart_disabled_rules": "sglang-kernel-config-missing",
        "sglang_restart_health_url": "http://192.0.2.11:30000/health_generate",  # the host's own address
        "sglang_restart_api_key": SECRET,
    }
    observed = restart_observed(wait=wait_result(CRASHED, "fail", "fatal_log", "fatal line in sglang.service's journal: NCCL error"))
    process, results = run(tmp_path, "--limit", "node1", "-vvv", observed=observed, plugins_render=True, **survey)
    result = results["node1"]
    checked = result["checked"]
    assert not checked.get("failed"), checked
    options = checked["options"]
    assert (options["budget"], options["strict"], options["stall_limits"]) == (120, True, {"capturing_cuda_graphs": 90})
    assert options["disabled_rules"] == ["sglang-kernel-config-missing"] and "api_key" not in options
    assert SECRET not in process.stdout + json.dumps(results)

    report = result["report"]
    expected = runbook_report(observed, "sglang_restart", now=0)
    assert {key: value for key, value in report.items() if key != "total_elapsed"} == {k: v for k, v in expected.items() if k != "total_elapsed"}
    reports = str(tmp_path / "reports")
    assert result["summary"] == summary_lines(report, reports)
    assert result["junit"] == junit_xml(report, reports)
    assert result["stats"] == stats(report)
    assert result["written"]["files"] == {"json": f"{reports}/gpu-node-01.json", "junit": f"{reports}/gpu-node-01.junit.xml"}
    assert json.loads((tmp_path / "reports" / "gpu-node-01.json").read_text()) == report
    assert (tmp_path / "reports" / "gpu-node-01.junit.xml").read_text() == junit_xml(report, reports)
    assert oct((tmp_path / "reports" / "gpu-node-01.json").stat().st_mode & 0o777) == "0o644"


def test_the_first_host_refuses_its_own_and_every_other_hosts_typos(tmp_path: Path) -> None:
    broken = {"sglang_restart_unit": "{{ no_such_variable }}", "sglang_restart_api_key": "{{ vault_missing_" + SECRET + " }}"}
    process, results = run(tmp_path, "--limit", "node1", plugins_check_hosts=["node1", "node2", "node3"], **broken)
    checked = results["node1"]["checked"]
    assert checked["failed"] and checked["reason"] == "invalid_options"
    problems = checked["problems"]
    assert checked["msg"].startswith("Refusing to run sglang_restart on node1, nothing was touched: ")
    # its own variables: named, and a secret's template is not shown
    assert problems[0].startswith("sglang_restart_unit cannot be templated: ") and "no_such_variable" in problems[0]
    assert "sglang_restart_api_key cannot be templated" in problems
    # the other hosts' (the -e values are theirs too, so their shared problems are said once)
    assert "sglang_restart_budget must be a number of seconds > 0, got 0 (on node2, node3)" in problems
    assert any(p.startswith("sglang_restart_health_url must point at the target itself") and p.endswith("(on node2)") for p in problems)
    assert "Traceback" not in process.stdout + process.stderr


def test_a_report_is_never_written_over_a_device_a_pipe_or_a_link(tmp_path: Path) -> None:
    """The rename of an atomic write replaces whatever is at the path: a report path that is a pipe,
    or a link (to /dev/null, say), is refused and left as it was; a regular file is replaced."""
    from ansible_collections.inferops.runbooks.plugins.action.write_report import write_atomically

    pipe = tmp_path / "sim1.json"
    os.mkfifo(pipe)
    target = tmp_path / "elsewhere.txt"
    target.write_text("kept\n")
    link = tmp_path / "sim1.junit.xml"
    link.symlink_to(target)
    for path in (pipe, link):
        try:
            write_atomically(str(path), "{}\n")
        except OSError as exc:
            assert "is not a regular file" in str(exc) and str(path) in str(exc)
        else:
            raise AssertionError(f"{path} was written over")
    assert pipe.is_fifo() and link.is_symlink() and target.read_text() == "kept\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".report-")]
    regular = tmp_path / "sim2.json"
    regular.write_text("old\n")
    assert write_atomically(str(regular), "new\n") and regular.read_text() == "new\n"
    assert not write_atomically(str(regular), "new\n")
