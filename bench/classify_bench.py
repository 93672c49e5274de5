"""Benchmark: the classifier against an operator's triage shell pipeline, on real and generated logs.

Three logs of the same number of lines (1,000,000 by default), each timed in this one run against the
pipeline an operator ran by hand while a restart looked broken:

- real content: the whole real logs of the test corpus (tests/unit/data/corpus/logs) cycled, so that
  line shapes repeat as they do in a real journal;
- the same real lines made unique: a word appended to each, so that no two lines share a shape and
  the shape cache cannot help;
- the generated SGLang-style log (bench/generate_log.py: 8 ranks, ~30% tqdm lines, benign warnings).

Then ``journal_scan``'s reading path (journalctl's output through the reader into the classifier)
over as many journal entries made of the real content, a third of them binary messages, once as
``journalctl -o json --all`` prints them and once as ``-o export`` does (the format the reader asks for).

Prints one row per log (pipeline seconds, classifier seconds, ratio, target) and exits non-zero when
a ratio misses its target.

    python bench/classify_bench.py [--lines N] [--repeat R] [--corpus DIR ...] [--no-journal]
"""

from __future__ import annotations

import argparse
import json
import random
import string
import subprocess
import sys
import tempfile
import time
import typing as t
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "collections"))
sys.path.insert(0, str(HERE))

from generate_log import generate  # noqa: E402

from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import Scanner, classify, load_rules  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.module_utils._systemd import JOURNAL_FORMAT, JournalSlice, read_records  # noqa: E402

TRIAGE_PIPELINE = (
    'sed "s/[[:cntrl:]]//g" {log} | grep -ivE "blob data" '
    '| grep -iE "error|except|traceback|pack|warn|capture|ready|started|running|engine" | cut -c1-160 | tail -15'
)
CORPUS_LOGS = REPO / "tests" / "unit" / "data" / "corpus" / "logs"
LOG_MARKER = "# ---- verbatim log below ----\n"
JOURNAL_OUTPUTS = ("json", "export")
SEQNUM_ID = "3f0a5c1e2b7d4e6f8a9b0c1d2e3f4a5b"
# name, what, target ratio classifier/pipeline
ROWS = (
    ("real", "real logs, cycled", 2.0),
    ("unique", "real lines, each unique", 4.0),
    ("generated", "generated SGLang log", 2.0),
)


def best_of(repeat: int, run: t.Callable[[], object]) -> float:
    times = []
    for _attempt in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


# -- the logs ------------------------------------------------------------------------------------


def corpus_bodies(folders: t.Sequence[Path]) -> list[list[str]]:
    """The verbatim log of every corpus file (the part below its header), one list of lines each."""
    bodies: dict[str, list[str]] = {}
    for folder in folders:
        for path in sorted(folder.glob("*.log")):
            text = path.read_text(encoding="utf-8", errors="replace")
            body = text.split(LOG_MARKER, 1)[-1]
            bodies.setdefault(path.name, body.splitlines())
    if not bodies:
        raise SystemExit(f"no corpus logs (*.log) in {', '.join(map(str, folders))}")
    return list(bodies.values())


def cycled_lines(bodies: list[list[str]], lines: int) -> t.Iterator[str]:
    """Whole logs one after another, again and again, up to ``lines`` lines."""
    written = 0
    while True:
        for body in bodies:
            for line in body:
                if written == lines:
                    return
                yield line
                written += 1


def unique_word(index: int) -> str:
    """A different word of letters for every index (digits would be masked away by the shape cache)."""
    letters = []
    index = index * 7_919 + 12_345
    for _position in range(7):
        index, rest = divmod(index, 26)
        letters.append(string.ascii_lowercase[rest])
    return "".join(letters)


def write_real(path: Path, bodies: list[list[str]], lines: int, unique: bool) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as out:
        for index, line in enumerate(cycled_lines(bodies, lines)):
            out.write(f"{line} {unique_word(index)}\n" if unique else line + "\n")


def journal_records(bodies: list[list[str]], lines: int) -> t.Iterator[dict[str, t.Any]]:
    """The cycled real content as journal records, fields as journalctl orders them, every third
    message as bytes with a carriage return (a tqdm update: journald keeps such a message binary)."""
    rng = random.Random(5)
    boot = "".join(rng.choice("0123456789abcdef") for _digit in range(32))
    for index, line in enumerate(cycled_lines(bodies, lines)):
        yield {
            "__CURSOR": f"s={SEQNUM_ID};i={index + 1:x};b={boot};m={index * 1000:x};t={1_700_000_000_000_000 + index:x};x={index * 31:016x}",
            "__REALTIME_TIMESTAMP": str(1_700_000_000_000_000 + index),
            "__MONOTONIC_TIMESTAMP": str(index * 1000),
            "_BOOT_ID": boot,
            "MESSAGE": f"\r{line}".encode() if index % 3 == 0 else line,
            "_PID": str(1000 + index % 8),
        }


def write_journal(path: Path, output: str, records: t.Iterable[dict[str, t.Any]]) -> None:
    """The records as ``journalctl -o json --all`` or ``-o export`` prints them."""
    with path.open("wb") as out:
        for record in records:
            if output == "json":
                fields = {name: list(value) if isinstance(value, bytes) else value for name, value in record.items()}
                out.write(json.dumps(fields, separators=(",", ":")).encode() + b"\n")
                continue
            for name, value in record.items():
                if isinstance(value, bytes):
                    out.write(name.encode() + b"\n" + len(value).to_bytes(8, "little") + value + b"\n")
                else:
                    out.write(f"{name}={value}\n".encode())
            out.write(b"\n")


# -- the runs ------------------------------------------------------------------------------------


def run_pipeline(log: Path) -> None:
    subprocess.run(["bash", "-c", TRIAGE_PIPELINE.format(log=log)], check=True, stdout=subprocess.DEVNULL)


def run_classifier(log: Path) -> dict[str, t.Any]:
    with log.open("rb") as handle:
        return classify(handle, rules=load_rules("sglang"))


def run_journal_scan(records: Path) -> tuple[dict[str, t.Any], int]:
    """journal_scan's path: journalctl's output read by JournalSlice into a Scanner (here
    journalctl is ``cat`` of the records, so what is timed is our side of the pipe)."""
    rules = load_rules("sglang")

    def popen(argv: list[str], **kwargs: t.Any) -> t.Any:
        return subprocess.Popen(["cat", str(records)], **kwargs)

    journal = JournalSlice(Scanner(rules), "sglang.service", None, popen=popen)
    journal.read()
    return journal.scanner.finish(), journal.records


def run_decoder(records: Path) -> int:
    """The parsing alone: journalctl's output to records, nothing classified."""
    with records.open("rb") as stream:
        return sum(1 for _record in read_records(stream))


def print_row(what: str, pipeline: float, classifier: float, lines: int, target: float) -> bool:
    ratio = classifier / pipeline
    print(f"{what:<26} {pipeline:8.2f} s {classifier:9.2f} s {lines / classifier / 1e6:7.2f} {ratio:7.2f}x {target:6.2f}x")
    return ratio <= target


def time_logs(logs: dict[str, Path], lines: int, repeat: int) -> bool:
    """One row per log; True when every ratio is within its target."""
    within = True
    print(f"{'log':<26} {'pipeline':>10} {'classifier':>11} {'M l/s':>7} {'ratio':>8} {'target':>7}")
    for name, what, target in ROWS:
        log = logs[name]
        pipeline = best_of(repeat, lambda log=log: run_pipeline(log))  # type: ignore[misc]
        reports: list[dict[str, t.Any]] = []
        classifier = best_of(repeat, lambda log=log, reports=reports: reports.append(run_classifier(log)))  # type: ignore[misc]
        within = print_row(what, pipeline, classifier, lines, target) and within
        print(f"{'':<26} verdict {reports[-1]['verdict']}, counts {reports[-1]['counts']}")
    return within


def time_journal(scratch: Path, bodies: list[list[str]], lines: int, repeat: int) -> None:
    """journal_scan's reading path over the same entries in each journalctl output format."""
    print(f"journal_scan over {lines:,} journal entries (a third binary), journalctl output read by JournalSlice:")
    for output in JOURNAL_OUTPUTS:
        records = scratch / f"journal.{output}"
        write_journal(records, output, journal_records(bodies, lines))
        results: list[tuple[dict[str, t.Any], int]] = []
        seconds = best_of(repeat, lambda records=records, results=results: results.append(run_journal_scan(records)))  # type: ignore[misc]
        report, count = results[-1]
        parsing = best_of(repeat, lambda records=records: run_decoder(records))  # type: ignore[misc]
        used = " (used)" if output == JOURNAL_FORMAT else ""
        print(
            f"  -o {output:<7}{used:<8} {records.stat().st_size / 1e6:6.0f} MB {seconds:8.2f} s {count / seconds / 1e6:7.2f} M entries/s"
            f" (parsing alone {parsing:.2f} s, {count / parsing / 1e6:.2f} M entries/s)"
        )
        print(f"{'':<26} verdict {report['verdict']}, counts {report['counts']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=1_000_000, help="lines in each log (and journal entries)")
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs for each side")
    parser.add_argument("--corpus", type=Path, action="append", help=f"a folder of corpus logs (default {CORPUS_LOGS.relative_to(REPO)})")
    parser.add_argument("--no-journal", action="store_true", help="skip the journal_scan timing")
    args = parser.parse_args()
    bodies = corpus_bodies(args.corpus or [CORPUS_LOGS])

    with tempfile.TemporaryDirectory() as scratch:
        logs = {name: Path(scratch) / f"{name}.log" for name, _what, _target in ROWS}
        write_real(logs["real"], bodies, args.lines, unique=False)
        write_real(logs["unique"], bodies, args.lines, unique=True)
        generate(str(logs["generated"]), args.lines)
        print(f"{args.lines:,} lines per log, {sum(map(len, bodies))} real lines from {len(bodies)} logs, best of {args.repeat}")
        within = time_logs(logs, args.lines, args.repeat)
        if not args.no_journal:
            time_journal(Path(scratch), bodies, args.lines, args.repeat)
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
