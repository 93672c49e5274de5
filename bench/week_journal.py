"""A week of a busy SGLang server's journal, as the lines it prints (stdout of a generator run on the
test host, so 5,000,000 lines need no copy over SSH).

The lines come from the corpus logs (tests/unit/data/corpus, the same files as /work/shared/corpus):
the start of ``sglang-ready-01.log`` at the top (server_args, weight loading, CUDA graphs, ready), then
the serving lines those logs and the labelled corpus lines (``dev.jsonl``) hold, cycled with their
numbers varied: decode-batch and prefill-batch lines of every rank, HTTP access lines, vLLM-style
engine-stats lines, and now and then a benign warning (the CUTE_DSL package walk, a deprecation).

``python bench/week_journal.py --lines N --emit`` prints the journal; without ``--emit`` it prints
the self-contained generator script (the templates inlined) for ``python3 - --lines N`` on the host.
Deterministic.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "unit" / "data" / "corpus"
START_LOG = "sglang-ready-01.log"
LOG_MARKER = "# ---- verbatim log below ----\n"
SERVING = re.compile(r"Decode batch|Prefill batch|HTTP/1\.1\" 200|Avg prompt throughput")
BENIGN_EVERY = 50_000

GENERATOR = r"""
import random, re, sys
START, SERVING, BENIGN = {start!r}, {serving!r}, {benign!r}
lines = int(sys.argv[sys.argv.index("--lines") + 1])
every = {every}
number = re.compile(r"\d+")
rng = random.Random(7)
out = sys.stdout
write = out.write
for line in START[: lines - 1]:
    write(line + "\n")
left = lines - min(len(START), lines - 1) - 1
batch = []
for index in range(left):
    if index % every == every - 1:
        text = BENIGN[(index // every) % len(BENIGN)]
    else:
        text = SERVING[index % len(SERVING)]
        if index % 7 == 0:
            head, sep, tail = text.partition("] ")
            text = head + sep + number.sub(lambda m: str(rng.randint(0, 99999)), tail, count=2)
    batch.append(text)
    if len(batch) >= 4096:
        write("\n".join(batch) + "\n")
        batch = []
if batch:
    write("\n".join(batch) + "\n")
write("[2025-03-15 12:29:33] INFO:     127.0.0.1:49540 - \"GET /health_generate HTTP/1.1\" 200 OK\n")
out.flush()
"""


def templates() -> tuple[list[str], list[str], list[str]]:
    start = (CORPUS / "logs" / START_LOG).read_text(encoding="utf-8").split(LOG_MARKER)[1].splitlines()
    serving: list[str] = []
    for path in sorted((CORPUS / "logs").glob("*.log")):
        body = path.read_text(encoding="utf-8", errors="replace").split(LOG_MARKER)[1]
        serving += [line for line in body.splitlines() if SERVING.search(line)]
    rows = [json.loads(line) for line in (CORPUS / "dev.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    serving += [row["line"] for row in rows if row["label"] == "info" and SERVING.search(row["line"])]
    benign = [row["line"] for row in rows if row["label"] == "benign" and row["engine"] == "sglang"][:6]
    # every rank's copy of the per-batch lines, as a tensor-parallel server of 8 prints them
    ranked = [re.sub(r" TP0\]", f" TP{rank}]", line) for line in serving for rank in range(8)] if serving else []
    return start, sorted(set(ranked), key=ranked.index), benign


def generator_script() -> str:
    start, serving, benign = templates()
    return GENERATOR.format(start=start, serving=serving, benign=benign, every=BENIGN_EVERY)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--lines", type=int, default=5_000_000)
    parser.add_argument("--emit", action="store_true", help="print the journal's lines, not the generator script")
    args = parser.parse_args()
    if args.emit:
        namespace: dict[str, object] = {}
        import sys

        sys.argv = ["week", "--lines", str(args.lines)]
        exec(generator_script(), namespace)
    else:
        print(generator_script())


if __name__ == "__main__":
    main()
