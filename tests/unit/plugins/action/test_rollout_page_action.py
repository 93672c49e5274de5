"""write_report's run page through a real ansible-playbook run (connection local): the reports come
from the play's hosts' facts in hostvars, batch by batch as the play's serial cuts them, and the page
keeps one name through the run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.ansible  # exercises ansible-core: runs on every version (tests/harness/lanes.py)

REPO = Path(__file__).resolve().parents[4]
PLAYBOOK = REPO / "tests" / "unit" / "playbooks" / "rollout_page.yml"
REPORTS = REPO / "tests" / "unit" / "data" / "reports"


def test_the_run_page_holds_every_host_reported_so_far_in_the_plays_batches(tmp_path: Path) -> None:
    hosts = {"node1": "rolled-back-sim1", "node2": "rolled-back-sim2", "node3": "rolled-back-sim1"}
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": {host: {} for host in hosts}, "vars": {"ansible_python_interpreter": sys.executable}}}))
    out = tmp_path / "reports"
    # node3 began first (its report says 12:00:34, as the others'): the page is named after it from the
    # first batch on, although node3 reports in the last
    extra = {
        "rollout_page_out": str(out),
        "rollout_page_reports": {host: str(REPORTS / f"{name}.json") for host, name in hosts.items()},
        "rollout_page_started": {"node3": 1796299080.25},
    }
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(PLAYBOOK), "-e", json.dumps(extra)]
    process = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert process.returncode == 0, process.stdout + process.stderr

    pages = sorted(out.glob("*.html"))
    assert [page.name for page in pages] == ["restart-20261203T115800Z.html"], pages
    written = {host: json.loads((tmp_path / f"written-{host}.json").read_text()) for host in hosts}
    assert all(result["pages"] == [str(pages[0])] for result in written.values()), written
    html = pages[0].read_text()
    sections = re.findall(r"<section class='batch' data-batch='(\d+)'><h2>([^<]*)</h2>", html)
    assert sections == [("0", "canary: node1"), ("1", "batch 1: node2, node3")]
    assert [re.search(f"data-host='{host}' data-verdict='([a-z]+)'", html).group(1) for host in hosts] == ["pass", "fail", "pass"]  # type: ignore[union-attr]
    assert "not reached: <b>0</b>" in html and "not-reached" not in html
