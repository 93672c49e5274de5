"""The fleet never prunes a template a running container boots from, even without a lock on it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.harness.fleet import booted_templates


def test_a_running_nspawn_keeps_its_template(tmp_path: Path) -> None:
    template = tmp_path / "template-0123456789abcdef"
    # a process that looks like the fleet's nspawn in /proc/<pid>/cmdline
    argv = ["systemd-nspawn", "-c", "import time; time.sleep(60)", "--boot", f"--directory={template}"]
    process = subprocess.Popen(argv, executable=sys.executable)
    try:
        # until the child has exec'd, its cmdline is still this process's
        deadline = time.monotonic() + 10
        while template not in booted_templates() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert template in booted_templates()
    finally:
        process.kill()
        process.wait()
    assert template not in booted_templates()
