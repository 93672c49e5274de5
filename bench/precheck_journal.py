"""The precheck's read of a week-long serving journal: target CPU and memory, first and second run,
with and without ``journalctl --grep`` (make bench; the table goes into docs/benchmarks.md).

A test host's journal gets ``--entries`` lines (default 5,000,000) from one unit's single invocation,
written by a generator run on the host itself (bench/week_journal.py: the corpus logs' start, then
their serving lines cycled). Then bench/precheck_journal.yml (service_probe as the precheck role calls
it) runs four times on it: with --grep, first run (no kept state) and second run (the state the first
kept), and the same without --grep. Target CPU is the host's ssh sessions' cgroup CPU over the run
(Ansible's module start included); memory the largest peak resident set (VmHWM, which counts the
journal files' mapped pages) of the module's Python process and of journalctl. The reports of the
four runs must agree (the second runs with the first's lines).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(REPO), str(HERE)]

from measure import MemorySampler, cpu_seconds, host_cgroup  # noqa: E402
from week_journal import generator_script  # noqa: E402

from tests.harness.fleet import Fleet  # noqa: E402

UNIT = "bench-week.service"
MARK_BEGIN = "<!-- precheck_journal:begin -->"
MARK_END = "<!-- precheck_journal:end -->"
SAME_KEYS = ("verdict", "reason", "ready", "ready_line", "phase", "phases", "counts", "lines", "fatal", "allowlisted", "unrecognized", "progress", "blob_lines")


def say(text: str) -> None:
    print(f"[precheck-bench {time.strftime('%H:%M:%S')}] {text}", flush=True)


def write_journal(fleet: Fleet, host: str, entries: int) -> None:
    """The unit's invocation with ``entries`` lines (journald without a rate limit, persistent)."""
    subprocess.run(fleet.ssh_command(host, "cat > /var/tmp/week.py"), input=generator_script().encode(), check=True, capture_output=True)
    fleet.ssh(
        host,
        "mkdir -p /etc/systemd/journald.conf.d /var/log/journal /run/systemd/system && "
        "printf '[Journal]\\nStorage=persistent\\nRateLimitBurst=0\\nSystemMaxUse=12G\\n' > /etc/systemd/journald.conf.d/zz-bench-week.conf && "
        "systemctl restart systemd-journald && "
        "printf '[Service]\\nType=oneshot\\nRemainAfterExit=yes\\n"
        f"ExecStart=/usr/bin/python3 /var/tmp/week.py --lines {entries}\\n' > /run/systemd/system/{UNIT} && "
        "systemctl daemon-reload",
    )
    started = time.time()
    fleet.ssh(host, f"systemctl restart {UNIT}", timeout=3600)
    # journald takes the last lines a moment after the writer exits: wait for the last one
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        last = fleet.ssh(host, f"journalctl -u {UNIT} -n 1 -o cat --no-pager", check=False).stdout
        if "GET /health_generate" in last:
            break
        time.sleep(1)
    else:
        raise TimeoutError("the journal did not get the last line")
    say(f"{entries:,} entries written in {time.time() - started:.0f} s")


def cleanup(fleet: Fleet, host: str) -> None:
    fleet.ssh(
        host,
        f"systemctl stop {UNIT}; rm -f /run/systemd/system/{UNIT} /var/tmp/week.py /etc/systemd/journald.conf.d/zz-bench-week.conf "
        f"/var/lib/inferops/{UNIT}.journal.json; systemctl daemon-reload; journalctl --rotate --vacuum-files=1 >/dev/null 2>&1; "
        "systemctl restart systemd-journald",
        check=False,
        timeout=300,
    )


def group(command: str) -> str | None:
    name = os.path.basename(command.split()[0]) if command.split() else ""
    if name.startswith("python"):
        return "module"
    if name == "journalctl":
        return "journalctl"
    return None


def run(fleet: Fleet, host: str, grep: bool, workdir: Path) -> dict[str, object]:
    result = workdir / f"probe-{'grep' if grep else 'full'}-{time.monotonic_ns()}.json"
    cmd = ["ansible-playbook", "-i", str(fleet.inventory), str(HERE / "precheck_journal.yml")]
    cmd += ["-e", json.dumps({"target": host, "unit": UNIT, "grep": grep, "incremental": True, "result_file": str(result)})]
    env = {**fleet.ansible_env(), "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    sessions = host_cgroup(fleet, host) / "user.slice"
    before = cpu_seconds(sessions)
    started = time.monotonic()
    with MemorySampler([sessions], group, interval=0.05) as memory:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=3600)
    seconds = time.monotonic() - started
    cpu = cpu_seconds(sessions) - before
    if proc.returncode != 0:
        raise RuntimeError(f"precheck_journal.yml failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    journal = json.loads(result.read_text())
    return {
        "cpu": cpu,
        "wall": seconds,
        "module_mib": memory.largest_kib.get("module", 0) / 1024,
        "journalctl_mib": memory.largest_kib.get("journalctl", 0) / 1024,
        "journal": journal,
    }


def table(rows: list[tuple[str, dict[str, object]]], entries: int, load: str) -> str:
    lines = [
        f"Precheck's read of one invocation's journal of {entries:,} entries (bench/precheck_journal.py; "
        "target CPU = the host's ssh sessions' cgroup, module start included; memory = the largest peak resident set):",
        "",
        "| run | target CPU s | wall s | module max RSS MiB | journalctl max RSS MiB | records handed over | lines | verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, row in rows:
        journal = row["journal"]
        assert isinstance(journal, dict)
        reading = journal.get("reading") or {}
        lines.append(
            f"| {name} | {row['cpu']:.2f} | {row['wall']:.1f} | {row['module_mib']:.0f} | {row['journalctl_mib']:.0f} | "
            f"{reading.get('records_read', '-'):,} | {journal.get('lines'):,} | {journal.get('verdict')} |"
        )
    lines += ["", f"Load average on the machine during the runs: {load}."]
    return "\n".join(lines)


def publish(text: str, output: Path) -> None:
    block = f"{MARK_BEGIN}\n{text}\n{MARK_END}"
    current = output.read_text() if output.exists() else ""
    if MARK_BEGIN in current and MARK_END in current:
        head, _sep, rest = current.partition(MARK_BEGIN)
        current = head + block + rest.partition(MARK_END)[2]
    else:
        current = current.rstrip() + "\n\n## The precheck's read of a week-long journal\n\n" + block + "\n"
    output.write_text(current)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--entries", type=int, default=5_000_000)
    parser.add_argument("--output", type=Path, default=REPO / "docs" / "benchmarks.md")
    parser.add_argument("--reuse-fleet", action="store_true", help="use host 1 of the fleet already up in $INFEROPS_FLEET_DIR")
    parser.add_argument("--keep-journal", action="store_true", help="leave the unit and its journal on the host")
    args = parser.parse_args(argv)
    fleet = Fleet()
    if not args.reuse_fleet:
        fleet.up(1)
    host = fleet.hosts[0]
    rows: list[tuple[str, dict[str, object]]] = []
    try:
        write_journal(fleet, host, args.entries)
        with tempfile.TemporaryDirectory() as scratch:
            workdir = Path(scratch)
            for grep in (True, False):
                fleet.ssh(host, f"rm -f /var/lib/inferops/{UNIT}.journal.json")
                for turn in ("first", "second"):
                    row = run(fleet, host, grep, workdir)
                    name = f"{turn} precheck, {'with' if grep else 'without'} --grep"
                    rows.append((name, row))
                    say(f"{name}: target CPU {row['cpu']:.2f} s, module max RSS {row['module_mib']:.0f} MiB, journalctl {row['journalctl_mib']:.0f} MiB")
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    finally:
        if not args.keep_journal:
            cleanup(fleet, host)
        if not args.reuse_fleet:
            fleet.down()
    reports = [{key: row["journal"].get(key) for key in SAME_KEYS} for _name, row in rows]  # type: ignore[union-attr]
    same = all(report == reports[0] for report in reports)
    text = table(rows, args.entries, load)
    text += "\n\n" + ("The four reports are the same." if same else "THE REPORTS DIFFER: " + json.dumps(reports)[:2000])
    print(text)
    publish(text, args.output)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
