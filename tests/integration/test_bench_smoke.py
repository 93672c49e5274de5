"""A quick run of the side-by-side benchmark (make bench) so that it cannot rot: one scenario (ok),
one host of the session's fleet, a 3 s cold start, 2,000 journal entries, 500 log lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.figures import record
from tests.harness.fleet import Fleet
from tests.integration.conftest import REPO


def test_quick_side_by_side_run_prints_and_writes_the_table(fleet: Fleet, tmp_path: Path) -> None:
    output = tmp_path / "benchmarks.md"
    output.write_text("# Benchmarks\n\nProse that stays.\n\n<!-- side_by_side:begin -->\nold results\n<!-- side_by_side:end -->\n\nMore prose.\n")
    # run as from a shell, also under make test (under make, the table names `make bench` as its command)
    env = {name: value for name, value in fleet.ansible_env().items() if name not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    proc = subprocess.run(
        [sys.executable, "bench/side_by_side.py", "--quick", "--reuse-fleet", "--output", str(output)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:5]] for line in proc.stdout.splitlines() if line.startswith("| ")}

    # the one scenario is a good start: ours and the probe pass it, grep -i error fails it on the
    # harmless CUTE_DSL warning
    assert rows["Right verdicts (of 1 scenarios)"] == ["1", "0", "1"], rows
    assert rows["Wrong verdicts (scenario: times)"][1] == "ok (error in journal): 1"
    ready = rows["Health 200 -> wait passed (s)"]
    assert ready[0].endswith("+ 2 soak") and all(cell[0].isdigit() for cell in ready), ready
    for row in ("Controller CPU, whole run, 1 host(s) (s)", "Wall time, whole run, 1 host(s) (s)", "Controller memory, 1 concurrent waits: peak PSS (MiB)"):
        assert all(float(cell.split()[0]) > 0 for cell in rows[row]), (row, rows[row])
    journal = rows["Journal of 2,000 entries: entries per second"]
    assert float(journal[0]) > 0 and float(journal[1]) > 0 and journal[2] == "reads no journal", journal
    assert all(float(cell) > 0 for cell in rows["Journal of 2,000 entries: peak memory on the target (MiB)"][:2])
    assert "$ python bench/classify_bench.py" in proc.stdout

    written = output.read_text()
    assert written.startswith("# Benchmarks\n\nProse that stays.") and written.endswith("More prose.\n")
    assert "old results" not in written
    assert "Command: `python bench/side_by_side.py --quick --reuse-fleet --output " in written
    assert "Measured " in written and " CPU (" in written
    assert "| Right verdicts (of 1 scenarios) | 1 | 0 | 1 |" in written
    record("\nbench smoke (make bench --quick):\n" + "\n".join(line for line in proc.stdout.splitlines() if line.startswith("| ")))
