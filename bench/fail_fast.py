"""Benchmark: how soon a lost start fails its host, on real crash logs played as a unit's output.

Each crashed log of tests/unit/data/corpus/logs (real starts from public issues and from the real vLLM
on this machine) is printed by the simulator as its own output (SIM_SCENARIO=replay), one line every
20 ms, on a test host of its own, in three ways:

* cut:    up to 30 lines after its first failure line, then the process hangs (alive, silent);
* whole:  the whole log, then the process exits 1;
* chatty: the whole log, then its failing traceback again from seven more ranks and 1,000 request log
          lines (about 25 s of printing), then it hangs: a server that goes on talking after it died.

The collection's restart (bench/ours_restart.yml) runs on every host at once; the rows are the seconds
from the first failure line reaching the journal to the host's failed task, and to the end of the
playbook (median, min-max), and from the line that completes the fatal evidence (the first line after
which the classifier, fed the played lines one by one, counts a fatal event: for a traceback, the line
that closes it; a server prints a traceback in one burst, the replay one line every 20 ms) to the host's
failed task. With --before DIR, the same logs through another checkout of the
collection, in the same run. The table goes into docs/benchmarks.md between its markers.

    python bench/fail_fast.py [--repeats 3] [--before DIR] [--reuse-fleet] [--output docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(REPO), str(HERE), str(REPO / "collections")]

from measure import LoadWatch, Spread, journal_records  # noqa: E402
from side_by_side import TITLES, Bench, Settings, fleet_for, machine, progress, write_results  # noqa: E402

from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import Scanner  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.module_utils._rules import load_rules  # noqa: E402

LOGS = REPO / "tests" / "unit" / "data" / "corpus" / "logs"
LOG_MARKER = "# ---- verbatim log below ----\n"
REPLAY_FILE = "/etc/sglang-sim/replay.log"
INTERVAL = 0.02
CUT_AFTER = 30
RANKS = 8
REQUEST_LINES = 1000
# journalctl -o short-precise: "Dec 01 21:25:15.397178 sim1 python[955]: message"
JOURNAL_PREFIX = re.compile(r"^\w{3} \d\d \d\d:\d\d:\d\d\.\d+ \S+ (?P<source>[^:\s]+): ")
WAYS = ("cut", "whole", "chatty")
ROW_FAILED = "{way}: fatal line -> host failed (s)"
ROW_ENDED = "{way}: fatal line -> playbook ended (s)"
ROW_DECISIVE = "{way}: fatal evidence complete -> host failed (s)"
MARKS = ("<!-- fail_fast:begin -->", "<!-- fail_fast:end -->")


@dataclass(frozen=True)
class CrashLog:
    name: str
    engine: str
    lines: tuple[str, ...]  # what the server printed, journald's own prefix removed
    fatal: int  # index of the first failure line in lines

    def played(self, way: str) -> list[str]:
        if way == "cut":
            return list(self.lines[: self.fatal + 1 + CUT_AFTER])
        if way == "whole":
            return list(self.lines)
        return [*self.lines, *self.other_ranks(), *self.requests()]

    def other_ranks(self) -> list[str]:
        """The failing traceback (the first failure line to the next blank or the end) again per rank."""
        block = list(self.lines[self.fatal : self.fatal + 60])
        return [re.sub(r"\bTP\d+\b", f"TP{rank}", line) for rank in range(1, RANKS) for line in block]

    def requests(self) -> list[str]:
        return [f'INFO:     10.0.0.{n % 250}:5{n % 1000:03d} - "POST /generate HTTP/1.1" 200 OK' for n in range(REQUEST_LINES)]

    def decisive(self, way: str) -> int | None:
        """The index of the played line after which the classifier counts a fatal event; None when it
        counts one only once the server is gone or quiet (a traceback cut short before its exception line)."""
        scanner = Scanner(load_rules(self.engine))
        for index, line in enumerate(self.played(way)):
            scanner.feed_line(line)
            if scanner.counts.get("fatal"):
                return index
        return None

    @property
    def scenario(self) -> dict[str, str]:
        return {"SIM_SCENARIO": "replay", "SIM_REPLAY_FILE": REPLAY_FILE, "SIM_REPLAY_INTERVAL": f"{INTERVAL:g}"}


def read_log(path: Path) -> CrashLog | None:
    """A crashed corpus log as its server printed it; None for a log of a start that worked."""
    head, body = path.read_text(encoding="utf-8", errors="replace").split(LOG_MARKER)
    facts = dict(line[2:].split(": ", 1) for line in head.splitlines() if ": " in line)
    if facts["outcome"] != "crashed":
        return None
    fatal_in_file = int(facts["first failure line"].split()[1].rstrip(":"))
    raw = body.splitlines()
    fatal_text = raw[fatal_in_file - (head.count("\n") + 1) - 1]
    lines: list[str] = []
    fatal = -1
    for number, text in enumerate(raw):
        match = JOURNAL_PREFIX.match(text)
        if match and match["source"].startswith("systemd"):
            continue  # systemd's own lines about the unit, not the server's
        if number == fatal_in_file - (head.count("\n") + 1) - 1:
            fatal = len(lines)
        lines.append(text[match.end() :] if match else text)
    if fatal < 0:
        raise SystemExit(f"{path.name}: the first failure line {fatal_text!r} is not a line of the server")
    return CrashLog(path.name, facts["engine"], tuple(lines), fatal)


def crash_logs() -> list[CrashLog]:
    return [log for log in (read_log(path) for path in sorted(LOGS.glob("*.log"))) if log is not None]


def place(bench: Bench, host: str, lines: Sequence[str]) -> None:
    command = bench.fleet.ssh_command(host, f"mkdir -p {shlex.quote(os.path.dirname(REPLAY_FILE))} && cat > {REPLAY_FILE}")
    subprocess.run(command, input="\n".join(lines) + "\n", text=True, check=True, capture_output=True, timeout=60)


def timeline(bench: Bench, tool: str, hosts: Sequence[str]) -> list[dict[str, object]]:
    path = bench.workdir / f"{bench.count:03d}-{tool}-{len(hosts)}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def failed_at(events: Sequence[Mapping[str, object]], host: str) -> float | None:
    return next((float(str(e["time"])) for e in events if e.get("host") == host and e.get("status") == "failed"), None)


@dataclass
class Figures:
    samples: dict[str, dict[str, list[float]]] = dataclasses.field(default_factory=dict)
    missed: list[str] = dataclasses.field(default_factory=list)
    # the log of each row's and tool's slowest sample
    slowest: dict[tuple[str, str], tuple[float, str]] = dataclasses.field(default_factory=dict)

    def add(self, row: str, tool: str, value: float, log: str) -> None:
        self.samples.setdefault(row, {}).setdefault(tool, []).append(value)
        if value > self.slowest.get((row, tool), (float("-inf"), ""))[0]:
            self.slowest[row, tool] = (value, log)

    def slowest_text(self, tool: str) -> str:
        return "; ".join(f"{row.split(' (s)')[0]} {value:.1f} s ({log})" for (row, each), (value, log) in self.slowest.items() if each == tool)


def measure(bench: Bench, logs: Sequence[CrashLog], hosts: Sequence[str], way: str, tool: str, figures: Figures) -> None:
    """One run of a tool: every log on its own host, played one way, all at once."""
    by_host = dict(zip(hosts, logs))
    for host, log in by_host.items():
        place(bench, host, log.played(way))
    bench.prepare({host: log.scenario for host, log in by_host.items()})
    for engine in sorted({log.engine for log in logs}):
        chosen = [host for host, log in by_host.items() if log.engine == engine]
        extra = {"sglang_restart_engine": engine}
        settings = bench.settings
        bench.settings = dataclasses.replace(settings, extra_vars=extra)
        try:
            run = bench.run(tool, chosen, strategy="free")
        finally:
            bench.settings = settings
        events = timeline(bench, tool, chosen)
        for host in chosen:
            log = by_host[host]
            records = [r for r in journal_records(bench.fleet, host, run.started) if r.invocation]
            fatal_text = log.lines[log.fatal]
            moment = next((r.time for r in records if r.message == fatal_text), None)
            failed = failed_at(events, host)
            if moment is None or failed is None or run.results[host].verdict != "fail":
                figures.missed.append(f"{tool} {way} {log.name}: verdict {run.results[host].verdict} ({run.results[host].reason})")
                continue
            figures.add(ROW_FAILED.format(way=way), tool, failed - moment, log.name)
            figures.add(ROW_ENDED.format(way=way), tool, run.ended - moment, log.name)
            decisive = log.decisive(way)
            complete = None if decisive is None else next((r.time for r in records if r.message == log.played(way)[decisive]), None)
            if complete is not None:
                figures.add(ROW_DECISIVE.format(way=way), tool, failed - complete, log.name)
            evidence = (
                "its fatal evidence complete only once the server was gone or quiet"
                if complete is None
                else f"{failed - complete:.1f} s after its fatal evidence was complete"
            )
            progress(
                f"{tool} {way} {log.name}: host failed {failed - moment:.1f} s after the fatal line ({evidence}), playbook ended {run.ended - moment:.1f} s"
            )
        progress(f"{tool} {way} {engine}: {len(chosen)} log(s) in {run.wall:.0f} s")


def table(figures: Figures, tools: Sequence[str]) -> str:
    rows = [row.format(way=way) for way in WAYS for row in (ROW_FAILED, ROW_ENDED, ROW_DECISIVE)]
    lines = ["| Figure | " + " | ".join(TITLES[tool] for tool in tools) + " |", "|---|" + "---|" * len(tools)]
    for row in rows:
        spreads = [Spread.of(figures.samples.get(row, {}).get(tool, [])) for tool in tools]
        cells = [spread.text() if spread else "-" for spread in spreads]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each way (default 3)")
    parser.add_argument("--before", type=Path, help="another checkout of this collection (an older commit) measured beside this one")
    parser.add_argument("--ways", default=",".join(WAYS), help=f"comma-separated ways to play the logs (default {','.join(WAYS)})")
    parser.add_argument("--reuse-fleet", action="store_true", help="use the fleet already up in $INFEROPS_FLEET_DIR instead of booting one")
    parser.add_argument("--keep-logs", action="store_true", help="keep each run's output and timeline (their directory is printed)")
    parser.add_argument("--output", type=Path, default=REPO / "docs" / "benchmarks.md", help="where the table goes (default docs/benchmarks.md)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    args.ways = [way.strip() for way in args.ways.split(",") if way.strip()]
    if unknown := [way for way in args.ways if way not in WAYS]:
        parser.error(f"--ways: unknown {', '.join(unknown)}; known: {', '.join(WAYS)}")
    if args.before is not None and not (args.before / "bench" / "ours_restart.yml").is_file():
        parser.error(f"--before: {args.before} is not a checkout of this collection (no bench/ours_restart.yml)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if os.geteuid() != 0:
        raise SystemExit("fail_fast.py needs root: it boots systemd-nspawn test hosts (make bench)")
    logs = crash_logs()
    before = args.before.resolve() if args.before else None
    settings = Settings(repeats=args.repeats, budget=180, stall_limit=90, soak=2, before=before, only=("ours", "before"))
    tools = settings.tools
    figures = Figures()
    workdir = Path(tempfile.mkdtemp(prefix="inferops-fail-fast-"))
    started = time.monotonic()
    load = LoadWatch()
    with load, fleet_for(len(logs), args.reuse_fleet) as fleet:
        bench = Bench(fleet, settings, workdir)
        try:
            for repeat in range(args.repeats):
                for way in args.ways:
                    for tool in tools[repeat % len(tools) :] + tools[: repeat % len(tools)]:
                        measure(bench, logs, fleet.hosts[: len(logs)], way, tool, figures)
        finally:
            for host in fleet.hosts:
                fleet.reset(host)
    if args.keep_logs:
        print(f"each run's output and timeline: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    command = "python bench/fail_fast.py" + "".join(f" {shlex.quote(a)}" for a in (sys.argv[1:] if argv is None else argv))
    section = "\n".join(
        [
            f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {machine()}; load average during the run {load.text()}.",
            f"Command: `{command}` ({(time.monotonic() - started) / 60:.0f} min). Logs: {', '.join(log.name for log in logs)}; "
            f"a line every {INTERVAL * 1000:.0f} ms; {args.repeats} repeat(s).",
            "",
            table(figures, tools),
            "",
            *[f"Slowest, {TITLES[tool]}: {figures.slowest_text(tool)}." for tool in tools if figures.slowest_text(tool)],
            *([""] + [f"Not judged failed: {text}" for text in figures.missed] if figures.missed else []),
        ]
    )
    print(section)
    write_results(args.output, section, MARKS)
    progress(f"results written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
