"""The report step both roles share (inferops.runbooks.publish_report) with a multi-node deployment's report,
through a real ansible-playbook run on the controller: one node shows, publishes and writes the
deployment's report, as the Python core renders it; every node fails with it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.action.publish_report import node_reports as reports_of_nodes
from ansible_collections.inferops.runbooks.plugins.action.publish_report import reporter
from ansible_collections.inferops.runbooks.plugins.plugin_utils._deployment import deployment_verdict
from ansible_collections.inferops.runbooks.plugins.plugin_utils._render import junit_xml, stats, summary_lines
from tests.unit.plugins.module_utils.observations import CRASHED, restart_report, wait_result

pytestmark = pytest.mark.ansible  # exercises ansible-core: runs on every version (tests/harness/lanes.py)

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "tests" / "unit" / "playbooks" / "deployment_report.yml"
HOSTS = ("node1", "node2")


def node_reports() -> dict[str, dict[str, Any]]:
    """node2 (rank 1) crashed; node1 (rank 0) failed because it did."""
    node = {"deployment": "dsr1", "multi_node": True, "hosts": list(HOSTS), "peers": {}}
    crashed = wait_result(CRASHED, "fail", "fatal_log", "fatal line in sglang.service's journal: NCCL error")
    peer = wait_result(CRASHED, "fail", "peer_failed", "node2 (node 1 of dsr1) failed (fatal_log)")
    return {
        "node1": restart_report(host="node1", node={**node, "rank": 0}, wait=peer),
        "node2": restart_report(host="node2", node={**node, "rank": 1}, wait=crashed),
    }


def test_one_node_publishes_the_deployments_report_and_every_node_fails_with_it(tmp_path: Path) -> None:
    reports = node_reports()
    (tmp_path / "reports.json").write_text(json.dumps(reports))
    inventory = {"all": {"hosts": {host: {} for host in HOSTS}, "vars": {"ansible_python_interpreter": sys.executable}}}
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_SHOW_CUSTOM_STATS="1", ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    extra = {"plugins_out": str(tmp_path), "plugins_reports_path": str(tmp_path / "reports.json")}
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "inventory.json"), str(PLAYBOOK), "-e", json.dumps(extra)]
    process = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    out = process.stdout + process.stderr
    assert process.returncode == 0, out

    expected = deployment_verdict("dsr1", list(reports.values()))
    written = tmp_path / "reports"
    # no file per node: the deployment's, its page, and the run's page
    names = sorted(path.name for path in written.iterdir())
    assert names[:3] == ["dsr1.html", "dsr1.json", "dsr1.junit.xml"] and re.fullmatch(r"restart-\d{8}T\d{6}Z\.html", names[3]) and len(names) == 4, names
    assert json.loads((written / "dsr1.json").read_text()) == expected
    assert (written / "dsr1.junit.xml").read_text() == junit_xml(expected, str(written))
    summary = summary_lines(expected, str(written))
    assert out.count("\n".join(summary)) == 1, out  # the summary, shown in one piece by node1 only
    for host in HOSTS:
        failed = json.loads((tmp_path / f"{host}.failed.json").read_text())
        assert failed == {"msg": f"{summary[0]} - {expected['msg']}", "task": "Report | Fail the host when the verdict is fail"}
    # the artifacts: once, under the deployment's name
    custom = json.loads(out.split("RUN:", 1)[1].split("\n\n", 1)[0])
    assert custom == {"sglang_restart": {"dsr1": json.loads(json.dumps(stats(expected)))}}


def test_node_0_reports_for_its_deployment_unless_it_is_not_in_the_batch() -> None:
    node = {"multi_node": True, "deployment": "dsr1", "hosts": ["node1", "node2"]}
    assert reporter(node, "node1", ["node1", "node2"]) and not reporter(node, "node2", ["node1", "node2"])
    assert reporter(node, "node2", ["node2"])  # node1 left the run (--limit)
    assert reporter({"multi_node": False}, "gpu0", []) and reporter({}, "gpu0", ["gpu0"])
    hostvars = {"node1": {"sglang_restart_report": {"verdict": "pass"}}, "node2": {"sglang_restart_report": ""}}
    assert reports_of_nodes(node, hostvars, "sglang_restart_report") == [{"verdict": "pass"}]
