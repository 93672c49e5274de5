"""The pure parts of the target-side modules: systemctl show parsing, journalctl arguments and
streaming and following, report merging, and the health probe against a real HTTP server."""

from __future__ import annotations

import http.server
import json
import socket
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import Scanner, load_rules
from ansible_collections.inferops.runbooks.plugins.module_utils._health import HealthURLError, probe, split_url
from ansible_collections.inferops.runbooks.plugins.module_utils._report import merge_reports
from ansible_collections.inferops.runbooks.plugins.module_utils._systemd import (
    JournalFollower,
    JournalReader,
    JournalSlice,
    SystemdError,
    journal_command,
    message_text,
    parse_show,
    unit_name,
    unit_state,
)

INVOCATION = "5c6f1b0d2a0e4f7b9a3c8e1d2f4a6b8c"
OOM_LINE = "[2025-03-08 12:29:14 TP3] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.99 GiB"
SHOW = """Id=sglang.service
LoadState=loaded
ActiveState=activating
SubState=auto-restart
MainPID=0
NRestarts=3
InvocationID=5c6f1b0d2a0e4f7b9a3c8e1d2f4a6b8c
ExecMainStatus=9
ExecMainCode=2
Result=signal
ActiveEnterTimestampMonotonic=
Description=a=b=c
"""


def test_parse_show_types_and_odd_values() -> None:
    state = parse_show(SHOW)
    assert state["NRestarts"] == 3 and state["MainPID"] == 0 and state["ExecMainStatus"] == 9
    assert state["ActiveEnterTimestampMonotonic"] == 0
    assert state["SubState"] == "auto-restart" and state["InvocationID"] == INVOCATION
    assert state["Description"] == "a=b=c"


def test_unit_state_fills_missing_and_reports_errors() -> None:
    state = unit_state("sglang", runner=lambda argv: (0, "ActiveState=inactive\nInvocationID=\n", ""))
    assert state["ActiveState"] == "inactive" and state["InvocationID"] == "" and state["NRestarts"] == 0
    with pytest.raises(SystemdError, match="Access denied"):
        unit_state("sglang", runner=lambda argv: (1, "", "Access denied"))


def test_unit_name_and_journal_command() -> None:
    assert unit_name("sglang") == "sglang.service" and unit_name("x.socket") == "x.socket"
    argv = journal_command("sglang", INVOCATION, cursor="s=abc;i=1", since="-10min")
    assert argv[:5] == ["journalctl", "--no-pager", "--quiet", "-o", "export"]
    assert "--output-fields=MESSAGE,_PID,__CURSOR,__REALTIME_TIMESTAMP" in argv
    assert "--after-cursor=s=abc;i=1" in argv and "--since=-10min" in argv
    assert argv[-2:] == ["_SYSTEMD_UNIT=sglang.service", f"_SYSTEMD_INVOCATION_ID={INVOCATION}"]
    assert "-u" not in argv
    every = journal_command("sglang.service")
    assert every[-1] == "_SYSTEMD_UNIT=sglang.service" and not any(a.startswith("--after-cursor") for a in every)
    with pytest.raises(ValueError, match="32 hexadecimal"):
        journal_command("sglang", "not-an-id")


def test_message_text() -> None:
    assert message_text({"MESSAGE": list(b"Loading  10%\rLoading  20%\r")}) == "Loading  20%"
    assert message_text({"MESSAGE": "plain "}) == "plain" and message_text({"MESSAGE": None}) == "" and message_text({}) == ""


# -- a stand-in journalctl: records from a JSON file, honouring --after-cursor -------------------

FAKE_JOURNALCTL = textwrap.dedent(
    """
    import json, sys
    records = json.load(open(sys.argv[1]))
    after = [a.split("=", 1)[1] for a in sys.argv[2:] if a.startswith("--after-cursor=")]
    start = 0
    if after:
        start = [r["__CURSOR"] for r in records].index(after[0]) + 1
    for record in records[start:]:
        print(json.dumps(record))
    """
)


def records_of(lines: list[str]) -> list[dict[str, Any]]:
    return [{"MESSAGE": text, "_PID": "100", "__CURSOR": f"c{i}", "__REALTIME_TIMESTAMP": str(1_700_000_000_000_000 + i)} for i, text in enumerate(lines)]


@pytest.fixture
def fake_journal(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    script = tmp_path / "journalctl.py"
    script.write_text(FAKE_JOURNALCTL)
    data = tmp_path / "records.json"
    yield script, data


def popen_with(script: Path, data: Path) -> Any:
    import subprocess

    def popen(argv: list[str], **kwargs: Any) -> Any:
        return subprocess.Popen([sys.executable, str(script), str(data), *argv[1:]], **kwargs)

    return popen


def test_journal_reader_streams_and_keeps_the_cursor(fake_journal: tuple[Path, Path]) -> None:
    script, data = fake_journal
    data.write_text(json.dumps(records_of(["one", "two", "three"])))
    reader = JournalReader(["journalctl", "--after-cursor=c0"], tail_lines=1, popen=popen_with(script, data))
    assert [record["MESSAGE"] for record in reader] == ["two", "three"]
    assert reader.cursor == "c2" and reader.count == 2 and list(reader.tail) == ["three"]
    limited = JournalReader(["journalctl"], limit=1, popen=popen_with(script, data))
    assert len(list(limited)) == 1 and limited.cursor == "c0"


def test_journal_reader_raises_on_journalctl_error() -> None:
    reader = JournalReader([sys.executable, "-c", "import sys; sys.stderr.write('bad cursor'); sys.exit(1)"])
    with pytest.raises(SystemdError, match="bad cursor"):
        list(reader)


TRACEBACK_LINES = [
    "[2025-03-08 12:29:21 TP0] Load weight begin. avail mem=137.84 GB",
    "[2025-03-08 12:29:22 TP1] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/x/scheduler.py", line 1, in run',
    "    run()",
]


def test_slice_reads_into_one_scanner_and_keeps_the_tail(fake_journal: tuple[Path, Path]) -> None:
    script, data = fake_journal
    lines = [*TRACEBACK_LINES, "torch.OutOfMemoryError: CUDA out of memory.", "[2025-03-08 12:29:23] Received sigquit"]
    data.write_text(json.dumps(records_of(lines)))
    scanner = Scanner(load_rules("sglang"))
    slice_ = JournalSlice(scanner, "sglang", INVOCATION, "c0", tail_lines=2, popen=popen_with(script, data))
    assert slice_.read() == 5 and slice_.cursor == "c5" and slice_.records == 5
    assert list(slice_.tail) == lines[-2:]
    report = scanner.finish()
    oom = [event for event in report["fatal"] if "CUDA out of memory" in event["message"]]
    assert oom and oom[0]["traceback"][0].endswith("Traceback (most recent call last):") and oom[0]["first_line"] == 1


# A stand-in journalctl for the follower: records from the JSON-lines file in $FAKE_JOURNAL, honouring
# --cursor (start at), --after-cursor (start after) and --follow (then print what is appended).
FOLLOWING_JOURNALCTL = textwrap.dedent(
    """\
    #!{python}
    import json, os, sys, time
    def records():
        with open(os.environ["FAKE_JOURNAL"]) as handle:
            return [json.loads(line) for line in handle if line.strip()]
    args = sys.argv[1:]
    at = [a.split("=", 1)[1] for a in args if a.startswith("--cursor=")]
    after = [a.split("=", 1)[1] for a in args if a.startswith("--after-cursor=")]
    cursors = [r["__CURSOR"] for r in records()]
    start = 0
    if at:
        start = cursors.index(at[0]) if at[0] in cursors else len([c for c in cursors if c < at[0]])
    if after:
        start = cursors.index(after[0]) + 1
    printed = start
    while True:
        now = records()
        for record in now[printed:]:
            print(json.dumps(record), flush=True)
        printed = len(now)
        if "--follow" not in args:
            break
        time.sleep(0.02)
    """
)


@pytest.fixture
def following_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    script = tmp_path / "journalctl"
    script.write_text(FOLLOWING_JOURNALCTL.format(python=sys.executable))
    script.chmod(0o755)
    data = tmp_path / "journal.jsonl"
    monkeypatch.setenv("FAKE_JOURNAL", str(data))
    return script, data


def write_records(data: Path, records: list[dict[str, Any]]) -> None:
    data.write_text("".join(json.dumps(record) + "\n" for record in records))


def test_follower_catches_up_after_the_cursor_then_follows(following_journal: tuple[Path, Path]) -> None:
    script, data = following_journal
    records = records_of(["one", "two", "three", "four"])
    write_records(data, records[:3])
    with JournalFollower("sglang", INVOCATION, "c0", journalctl=str(script)) as follower:
        assert [record["MESSAGE"] for record in follower.catch_up()] == ["two", "three"]
        assert follower.gap is None and follower.cursor == "c2"
        assert follower.poll(0.05) == []
        write_records(data, records)
        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            seen = follower.poll(0.5)
        assert [record["MESSAGE"] for record in seen] == ["four"] and follower.cursor == "c3" and follower.count == 3


def test_follower_reports_a_gap_when_the_cursor_entry_is_gone(following_journal: tuple[Path, Path]) -> None:
    script, data = following_journal
    write_records(data, records_of(["one", "two", "three"])[2:])  # c0 and c1 were vacuumed away
    with JournalFollower("sglang", INVOCATION, "c1", journalctl=str(script)) as follower:
        assert [record["MESSAGE"] for record in follower.catch_up()] == ["three"]
        assert follower.gap and "vacuumed" in follower.gap


def test_merge_reports_adds_counts_and_unites_ranks() -> None:
    event = {"message": "m", "count": 2, "ranks": ["TP1", "TP0"], "rule": "r", "key": "k", "first_line": 3, "last_line": 4}
    first = {"allowlisted": [event], "counts": {"allowlisted": 2}, "phases": [{"phase": "loading_weights", "line": 1}], "lines": 4}
    later = {
        "allowlisted": [{**event, "count": 1, "ranks": ["TP10"], "first_line": 9, "last_line": 9}],
        "counts": {"allowlisted": 1, "ready": 1},
        "phases": [{"phase": "starting", "line": 5}, {"phase": "ready", "line": 10}],
        "ready_line": 10,
        "lines": 10,
    }
    total = merge_reports(merge_reports(None, first), later)
    merged = total["allowlisted"][0]
    assert merged["count"] == 3 and merged["ranks"] == ["TP0", "TP1", "TP10"]
    assert (merged["first_line"], merged["last_line"]) == (3, 9)
    assert [phase["phase"] for phase in total["phases"]] == ["loading_weights", "ready"]
    assert total["phase"] == "ready" and total["ready"] and total["verdict"] == "pass"
    assert total["counts"] == {"allowlisted": 3, "ready": 1} and total["lines"] == 10
    assert first["allowlisted"][0]["count"] == 2, "inputs are not changed"


# -- the health probe against a real HTTP server ---------------------------------------------


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/slow":
            time.sleep(2)
        status = {"/ok": 200, "/warming": 503, "/slow": 200}.get(self.path, 404)
        if self.path == "/auth":
            status = 200 if self.headers.get("Authorization") == "Bearer s3cret" else 401
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_health_refused_is_an_answer_not_an_error() -> None:
    result = probe(f"http://127.0.0.1:{free_port()}/health_generate", timeout=2)
    assert result["up"] is False and result["status"] is None and result["error"] == "connection refused"


def test_health_503_and_200(server: str) -> None:
    assert probe(server + "/warming", timeout=2)["status"] == 503
    ok = probe(server + "/ok", timeout=2)
    assert ok["up"] is True and ok["status"] == 200 and ok["error"] is None and ok["seconds"] < 2


def test_health_slow_answer_times_out_but_the_server_is_up(server: str) -> None:
    result = probe(server + "/slow", timeout=0.5)
    assert result["up"] is True and result["status"] is None and "no answer within 0.5 s" in result["error"]
    assert probe(server + "/slow", timeout=5)["status"] == 200


def test_health_never_sends_credentials(server: str) -> None:
    """The server behind /auth accepts the key: the probe must not offer one, whatever the URL."""
    assert probe(server + "/auth", timeout=2)["status"] == 401


def test_health_url_checks() -> None:
    assert split_url("http://127.0.0.1:30000/health?x=1") == ("http", "127.0.0.1", 30000, "/health?x=1")
    assert split_url("https://h")[2] == 443
    with pytest.raises(HealthURLError):
        split_url("ftp://h/x")


def export_bytes(records: list[dict[str, Any]]) -> bytes:
    """Records as journalctl -o export prints them: text fields as NAME=value, binary ones sized."""
    out = b""
    for record in records:
        for name, value in record.items():
            if isinstance(value, bytes):
                out += name.encode() + b"\n" + len(value).to_bytes(8, "little") + value + b"\n"
            else:
                out += f"{name}={value}\n".encode()
        out += b"\n"
    return out


@pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
def test_export_records_keep_binary_messages_and_pids(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from ansible_collections.inferops.runbooks.plugins.module_utils import _systemd

    monkeypatch.setattr(_systemd, "READ_CHUNK", chunk)
    burst = b"\rLoading  10%\rLoading  42%\n\n=\x00\xff"
    records = [
        {"__CURSOR": "s=a;i=1", "__REALTIME_TIMESTAMP": "1700000000000001", "MESSAGE": "plain = text", "_PID": "41"},
        {"__CURSOR": "s=a;i=2", "__REALTIME_TIMESTAMP": "1700000000000002", "MESSAGE": burst, "_PID": "42"},
        {"__CURSOR": "s=a;i=3", "_PID": "43"},
    ]
    read = list(_systemd.read_records(io.BufferedReader(io.BytesIO(export_bytes(records)))))  # type: ignore[arg-type]
    assert read == records
    assert isinstance(read[1]["MESSAGE"], bytes)
    as_json = b"\n".join(
        json.dumps({**record, "MESSAGE": list(record["MESSAGE"])} if isinstance(record.get("MESSAGE"), bytes) else record).encode() for record in records
    )
    assert [r.get("_PID") for r in _systemd.read_records(io.BufferedReader(io.BytesIO(as_json)))] == ["41", "42", "43"]  # type: ignore[arg-type]
    assert list(_systemd.read_records(io.BufferedReader(io.BytesIO(b"")))) == []  # type: ignore[arg-type]


def test_a_slice_read_as_export_classifies_like_text(tmp_path: Path) -> None:
    import subprocess

    lines = ["[2025-03-08 12:29:13 TP0] Load weight begin.", "\rLoading safetensors checkpoint shards:  42% Completed | 68/163 [00:05<00:07]", OOM_LINE]
    records = [{"__CURSOR": f"c{i}", "MESSAGE": line.encode() if "\r" in line else line, "_PID": "9"} for i, line in enumerate(lines)]
    data = tmp_path / "journal.export"
    data.write_bytes(export_bytes(records))

    def popen(argv: list[str], **kwargs: Any) -> Any:
        assert argv[argv.index("-o") + 1] == "export"
        return subprocess.Popen(["cat", str(data)], **kwargs)

    journal = JournalSlice(Scanner(load_rules("sglang")), "sglang", INVOCATION, popen=popen)
    journal.read()
    report = journal.scanner.finish()
    assert journal.cursor == "c2" and report["lines"] == 3
    assert report["progress"]["percent"] == 42 and report["fatal"][0]["ranks"] == ["TP3"]
