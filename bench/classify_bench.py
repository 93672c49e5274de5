"""Benchmark: the classifier against an operator's triage shell pipeline on a 1,000,000-line SGLang-style log.

Prints both times and their ratio (classifier / pipeline), measured in this one run. The pipeline
is what an operator ran by hand while a restart looked broken; the classifier does far more (every line classified,
tracebacks grouped, ranks deduplicated, phases and progress tracked), and must stay within 2x.

    python bench/classify_bench.py [--lines N] [--repeat R] [--naive]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "collections"))
sys.path.insert(0, str(HERE))

from generate_log import generate  # noqa: E402

from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import classify, load_rules  # noqa: E402

TRIAGE_PIPELINE = (
    'sed "s/[[:cntrl:]]//g" {log} | grep -ivE "blob data" '
    '| grep -iE "error|except|traceback|pack|warn|capture|ready|started|running|engine" | cut -c1-160 | tail -15'
)
NAIVE_PATTERN = re.compile(r"error|except|traceback|warn|fail|killed|sigquit|ready|capture|load weight", re.IGNORECASE)


def best_of(repeat: int, run: object) -> float:
    times = []
    for _attempt in range(repeat):
        started = time.perf_counter()
        run()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return min(times)


def run_pipeline(log: Path) -> None:
    subprocess.run(["bash", "-c", TRIAGE_PIPELINE.format(log=log)], check=True, stdout=subprocess.DEVNULL)


def run_classifier(log: Path) -> dict[str, object]:
    with log.open("rb") as handle:
        return classify(handle, rules=load_rules("sglang"))


def run_naive(log: Path) -> int:
    hits = 0
    with log.open(encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if NAIVE_PATTERN.search(line):
                hits += 1
    return hits


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs for each side")
    parser.add_argument("--naive", action="store_true", help="also time a per-line case-insensitive regex loop")
    parser.add_argument("--log", type=Path, help="reuse this generated log instead of a temporary one")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        log = args.log or Path(scratch) / "sglang-1m.log"
        if not log.exists():
            generate(str(log), args.lines)
        size_mb = log.stat().st_size / 1e6
        print(f"log: {args.lines:,} lines, {size_mb:.0f} MB (8 ranks, ~30% tqdm carriage-return lines, benign warnings)")
        pipeline = best_of(args.repeat, lambda: run_pipeline(log))
        print(f"triage shell pipeline: {pipeline:6.2f} s")
        report: dict[str, object] = {}
        classifier = best_of(args.repeat, lambda: report.update(run_classifier(log)))
        print(f"classifier:           {classifier:6.2f} s  ({args.lines / classifier / 1e6:.2f} M lines/s)")
        print(f"ratio classifier/pipeline: {classifier / pipeline:.2f}x (target: <= 2.00x)")
        if args.naive:
            naive = best_of(1, lambda: run_naive(log))
            print(f"naive per-line regex loop: {naive:6.2f} s, ratio to pipeline {naive / pipeline:.2f}x")
        print(f"verdict {report['verdict']}, counts {report['counts']}")
    return 0 if classifier / pipeline <= 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
