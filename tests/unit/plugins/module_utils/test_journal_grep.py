"""The journal read with journalctl --grep gives the report of the full read, and an incremental read
(the classifier's state kept, then only what came after the cursor) gives it too."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils import _journal_state as journal_state
from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import Scanner, load_rules
from ansible_collections.inferops.runbooks.plugins.module_utils._systemd import GrepRead, GrepUnavailable, JournalSlice
from tests.unit.conftest import corpus_logs

FAKE = Path(__file__).with_name("fake_journalctl.py")
INVOCATION = "0123456789abcdef0123456789abcdef"
SHARED_LOGS = Path("/work/shared/corpus/logs")

TRICKY = [
    "[2025-03-08 12:29:04] server_args=ServerArgs(model_path='/models/demo', tp_size=8)",
    "\rLoading safetensors checkpoint shards:   0% Completed | 0/4 [00:00<?, ?it/s]"
    "\rLoading safetensors checkpoint shards: 100% Completed | 4/4 [00:03<00:00,  1.2it/s]",
    "[2025-03-08 12:29:12 TP0] Decode batch. #running-req: 1, #token: 12, token usage: 0.00, gen throughput (token/s): 4.1, #queue-req: 0",
    "[2025-03-08 12:29:13 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/x/scheduler.py", line 1, in run',
    "    run()",
    "",
    "ZeroDivisionError: division by zero",
    "[2025-03-08 12:29:14 TP0] Decode batch. #running-req: 1, #token: 13, token usage: 0.00, gen throughput (token/s): 4.2, #queue-req: 0",
    "Traceback (most recent call last):",
    '  File "/x/a.py", line 2, in f',
    "KeyboardInterrupt",
    "plain words only",
    None,
    "caf\u00e9 ready?",
    "[2025-03-08 12:29:33] The server is fired up and ready to roll!",
    '[2025-03-08 12:29:34] INFO:     127.0.0.1:49540 - "POST /generate HTTP/1.1" 200 OK',
    "[2025-03-08 12:29:35 TP3] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/x/scheduler.py", line 9, in run',
]


def logs() -> list[tuple[str, list[str | None]]]:
    found: list[tuple[str, list[str | None]]] = [(log.name, list(log.body.split("\n"))) for log in corpus_logs()]
    names = {name for name, _lines in found}
    if SHARED_LOGS.is_dir():
        for path in sorted(SHARED_LOGS.glob("*.log")):
            if path.name not in names:
                body = path.read_text(encoding="utf-8", errors="replace").split("# ---- verbatim log below ----\n")[-1]
                found.append((path.name, list(body.split("\n"))))
    return [*found, ("tricky", TRICKY)]


def write_journal(path: Path, lines: list[str | None]) -> None:
    records = [{"_PID": "4242"} if text is None else {"MESSAGE": text, "_PID": "4242"} for text in lines]
    path.write_text(json.dumps(records))


def popen_over(data: Path) -> Any:
    def popen(argv: list[str], **kwargs: Any) -> Any:
        return subprocess.Popen([sys.executable, str(FAKE), str(data), *argv[1:]], **kwargs)

    return popen


def full_report(data: Path, engine: str) -> dict[str, Any]:
    scanner = Scanner(load_rules(engine))
    JournalSlice(scanner, "sglang", INVOCATION, popen=popen_over(data)).read()
    return scanner.finish()


def grep_read(scanner: Scanner, data: Path, cursor: str | None = None, tail_lines: int = 0) -> GrepRead:
    pattern = scanner.rules.grep_pattern
    assert pattern is not None

    def feed(record: Any) -> Any:
        return scanner.feed_records((record,))

    grep = GrepRead(scanner, feed, "sglang", INVOCATION, pattern, cursor, tail_lines, popen=popen_over(data), libsystemd=False)
    grep.read()
    return grep


@pytest.mark.parametrize(("name", "lines"), logs(), ids=[name for name, _lines in logs()])
def test_the_grep_read_gives_the_full_reads_report(tmp_path: Path, name: str, lines: list[str | None]) -> None:
    data = tmp_path / "journal.json"
    write_journal(data, lines)
    engine = "vllm" if name.startswith("vllm") else "sglang"
    full = full_report(data, engine)
    scanner = Scanner(load_rules(engine))
    grep = grep_read(scanner, data, tail_lines=3)
    assert scanner.finish() == full
    assert grep.count == len(lines) and grep.cursor == f"s=fake;i={len(lines):x}"
    assert grep.read_records <= len(lines)
    assert grep.tail == [text.split("\r")[-1].rstrip() for text in [line or "" for line in lines][-3:]] or name != "tricky"


def test_the_grep_read_leaves_out_ordinary_serving_lines(tmp_path: Path) -> None:
    data = tmp_path / "journal.json"
    serving = [TRICKY[2], TRICKY[16]] * 500
    write_journal(data, [TRICKY[0], *serving, TRICKY[15]])
    scanner = Scanner(load_rules("sglang"))
    grep = grep_read(scanner, data)
    report = scanner.finish()
    assert grep.count == 1002 and grep.read_records == 2
    assert report == full_report(data, "sglang") and report["verdict"] == "pass" and report["ready_line"] == 1002


@pytest.mark.parametrize(("name", "lines"), [item for item in logs() if item[0] in ("tricky", "sglang-nccl-02.log", "vllm-ready-01.log")])
def test_incremental_reads_give_the_full_reads_report(tmp_path: Path, name: str, lines: list[str | None]) -> None:
    engine = "vllm" if name.startswith("vllm") else "sglang"
    whole = tmp_path / "whole.json"
    write_journal(whole, lines)
    full = full_report(whole, engine)
    for cut in sorted({1, 3, 5, 8, len(lines) // 2, len(lines) - 1}):
        part = tmp_path / "part.json"
        write_journal(part, lines[:cut])
        first = Scanner(load_rules(engine))
        grep = grep_read(first, part)
        saved = first.state()
        if saved is None:
            continue  # a traceback was open at the cut: the next read starts again from the last state kept
        path = journal_state.state_path("sglang.service", str(tmp_path))
        journal_state.save(path, "sglang.service", INVOCATION, str(grep.cursor), saved)
        kept, problem = journal_state.load(path, "sglang.service")
        assert problem is None and kept is not None
        second = Scanner(load_rules(engine))
        second.restore(kept["scanner"])
        grep_read(second, whole, kept["cursor"])
        assert second.finish() == full, f"cut at {cut}"


def test_a_corrupt_or_foreign_state_is_reported_and_not_taken_up(tmp_path: Path) -> None:
    path = journal_state.state_path("sglang.service", str(tmp_path))
    Path(path).write_text("{not json")
    state, problem = journal_state.load(path, "sglang.service")
    assert state is None and problem is not None and "ignored" in problem
    scanner = Scanner(load_rules("sglang"))
    scanner.feed_line("[2025-03-08 12:29:33] The server is fired up and ready to roll!")
    saved = scanner.state()
    assert saved is not None
    other = Scanner(load_rules("sglang"), strict=True)
    with pytest.raises(ValueError, match="other rules"):
        other.restore(saved)
    with pytest.raises(ValueError, match="cannot be taken up"):
        Scanner(load_rules("sglang")).restore({**saved, "counts": {}})
    assert journal_state.load(str(tmp_path / "none.json"), "sglang.service") == (None, None)


def test_a_journalctl_that_cannot_search_is_told_from_no_match(tmp_path: Path) -> None:
    script = tmp_path / "journalctl"
    refuse = "case \"$*\" in *--grep*) echo 'Compiled without pattern matching support' >&2; exit 1;; esac"
    script.write_text(f'#!/bin/sh\n{refuse}\nexec {sys.executable} {FAKE} {tmp_path / "j.json"} "$@"\n')
    script.chmod(0o755)
    write_journal(tmp_path / "j.json", TRICKY)
    scanner = Scanner(load_rules("sglang"))
    pattern = scanner.rules.grep_pattern
    assert pattern is not None
    with pytest.raises(GrepUnavailable, match="pattern matching"):
        GrepRead(scanner, lambda record: scanner.feed_records((record,)), "sglang", INVOCATION, pattern, journalctl=str(script), libsystemd=False).read()
    # no match at all (rc 1, nothing on stderr) is a read of only counted lines
    write_journal(tmp_path / "plain.json", ["plain", "words"])
    quiet = Scanner(load_rules("sglang"))
    grep = grep_read(quiet, tmp_path / "plain.json")
    assert grep.count == 2 and grep.read_records == 0 and quiet.finish()["counts"]["info"] == 2


@pytest.mark.skipif(shutil.which("journalctl") is None, reason="no journalctl here")
@pytest.mark.parametrize("engine", ["sglang", "vllm", "auto"])
def test_the_pattern_compiles_with_pcre2(tmp_path: Path, engine: str) -> None:
    pattern = load_rules(engine).grep_pattern
    assert pattern is not None and pattern.replace("(*PRUNE)", "") == pattern.replace("(*PRUNE)", "").lower()
    argv = ["journalctl", "--grep=" + pattern, "--case-sensitive=false", "--file", str(tmp_path / "none.journal")]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert "pattern" not in proc.stderr.lower(), proc.stderr
