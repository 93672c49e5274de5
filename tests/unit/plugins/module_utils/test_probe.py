"""The look that service_probe makes, as a plain process (module_utils/_probe.py): defaults,
answers as the wait names them, health paced within the look, and the precheck's reading (journalctl
--grep, the kept state taken up) through the same look."""

from __future__ import annotations

import functools
import io
import json
import sys
import time
import typing as t
from pathlib import Path

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils import _probe, _systemd
from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import Scanner, load_rules
from tests.unit.conftest import corpus_logs

FAKE = Path(__file__).with_name("fake_journalctl.py")
INVOCATION = "0123456789abcdef0123456789abcdef"


def test_options_missing_from_a_plain_call_take_the_modules_defaults() -> None:
    params = _probe.with_defaults({"unit": "vllm.service", "watch": 12.5})
    assert params["unit"] == "vllm.service" and params["watch"] == 12.5
    assert params["phase"] == "starting" and params["health_every"] == 0 and params["engine"] == "sglang"
    assert set(params) == set(_probe.argument_spec())


ANSWERS = [({"status": 200, "up": True}, "200"), ({"status": None, "up": True}, "up"), ({"status": None, "up": False}, "down")]


@pytest.mark.parametrize(("answer", "key"), ANSWERS)
def test_answers_are_named_as_the_wait_names_them(answer: dict[str, t.Any], key: str) -> None:
    assert _probe.health_key(answer) == key


def pacer(monkeypatch: pytest.MonkeyPatch, answers: list[int | None], **params: t.Any) -> _probe.HealthPacer:
    values = {"health_url": "http://127.0.0.1:30000/health", "health_timeout": 5.0, "validate_certs": True, "health_every": 1.0}
    values.update({"health_needed": 2, "health_early": True, "health_known": None, **params})
    queue = list(answers)

    def fake(url: str, timeout: float, validate_certs: bool) -> dict[str, t.Any]:
        status = queue.pop(0)
        return {"url": url, "up": status is not None, "status": status, "error": None if status else "connection refused", "seconds": 0.0}

    monkeypatch.setattr(_probe, "probe", fake)
    return _probe.HealthPacer(values)


def test_health_is_paced_only_once_the_port_is_open(monkeypatch: pytest.MonkeyPatch) -> None:
    closed = pacer(monkeypatch, [], health_known="down")
    assert not closed.active(_probe.phase_index("loading_weights"))
    assert closed.active(_probe.phase_index("warming_up"))
    assert pacer(monkeypatch, [], health_known="503").active(_probe.phase_index("loading_weights"))


def test_the_look_ends_at_a_different_answer_or_the_successes_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    paced = pacer(monkeypatch, [503, 503, 200, 200], health_known="503")
    assert [paced.take() for _answer in range(4)] == [False, False, True, True]
    assert [answer["status"] for answer in paced.history] == [503, 503, 200, 200]


def test_the_same_answer_short_of_200_slows_the_pace_and_any_other_answer_restores_it(monkeypatch: pytest.MonkeyPatch) -> None:
    paced = pacer(monkeypatch, [503, 503, 503, 503, 503, None, 200, 200], health_known="503")
    paces = []
    for _answer in range(8):
        paced.take()
        paces.append(paced.pace)
    assert paces == [2.0, 4.0, _probe.HEALTH_SLOWEST, _probe.HEALTH_SLOWEST, _probe.HEALTH_SLOWEST, 1.0, 1.0, 1.0]


def test_in_the_soak_only_a_different_answer_ends_the_look(monkeypatch: pytest.MonkeyPatch) -> None:
    paced = pacer(monkeypatch, [200, 200, 200, 503], health_known="200", health_early=False)
    assert [paced.take() for _answer in range(4)] == [False, False, False, True]


def test_a_plain_call_answers_json_and_a_refusal_as_failed(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({"unit": "sglang.service", "invocation_id": "not-an-id"})))
    _probe.cli()
    answer = json.loads(capsys.readouterr().out)
    assert answer["failed"] is True and "32 hexadecimal digits" in answer["msg"] and answer["python"]


def stand_ins(tmp_path: Path, lines: list[str]) -> tuple[Path, Path]:
    """A systemctl that shows a running unit of one invocation, and a journalctl over its records."""
    records = tmp_path / "journal.json"
    records.write_text(json.dumps([{"MESSAGE": text, "_PID": "4242"} for text in lines]))
    systemctl = tmp_path / "systemctl"
    show = f"ActiveState=active\nSubState=running\nMainPID=0\nNRestarts=0\nInvocationID={INVOCATION}\nResult=success\n"
    systemctl.write_text(f"#!/bin/sh\nprintf '%s' '{show}'\n")
    journalctl = tmp_path / "journalctl"
    journalctl.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} {records} "$@"\n')
    for path in (systemctl, journalctl):
        path.chmod(0o755)
    return systemctl, journalctl


def test_the_precheck_look_reads_with_grep_and_takes_up_its_kept_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the records journalctl leaves out are counted from its stream (libsystemd would read this machine's journal)
    monkeypatch.setattr(_probe, "GrepRead", functools.partial(_probe.GrepRead, libsystemd=False))
    lines = [
        "[2025-03-08 12:29:04] Load weight begin. avail mem=78.50 GB",
        "[2025-03-08 12:29:12 TP0] Decode batch. #running-req: 1, #token: 12, token usage: 0.00, gen throughput (token/s): 4.1, #queue-req: 0",
        "[2025-03-08 12:29:33] The server is fired up and ready to roll!",
    ]
    systemctl, journalctl = stand_ins(tmp_path, lines)
    tools = {"systemctl": str(systemctl), "journalctl": str(journalctl)}
    params = _probe.with_defaults({"unit": "sglang.service", "journal_grep": True, "journal_state": True, "state_dir": str(tmp_path)})
    first = _probe.look(params, tools.get)
    reading = first["journal"]["reading"]
    assert reading["grep"] and reading["state_saved"] and reading["resumed_at"] is None and "warnings" not in first
    assert first["journal"]["records"] == 3 and reading["records_read"] < 3 and first["journal"]["ready_line"] == 3
    second = _probe.look(params, tools.get)
    assert second["journal"]["reading"]["resumed_at"] == 3 and second["journal"]["ready_line"] == 3
    Path(tmp_path / "sglang.service.journal.json").write_text("{not json")
    third = _probe.look(params, tools.get)
    assert third["journal"]["reading"]["state_problem"] and third["warnings"] == [third["journal"]["reading"]["state_problem"]]
    assert third["journal"]["ready_line"] == 3 and third["journal"]["reading"]["resumed_at"] is None


def test_the_look_runs_systemctl_through_the_runner_it_is_given(tmp_path: Path) -> None:
    """service_probe hands the look its AnsibleModule.run_command: every systemctl show goes through
    it, and a failure it reports fails the look with systemctl's own words."""
    systemctl, journalctl = stand_ins(tmp_path, ["[2025-03-08 12:29:33] The server is fired up and ready to roll!"])
    tools = {"systemctl": str(systemctl), "journalctl": str(journalctl)}
    ran: list[list[str]] = []

    def runner(argv: t.Sequence[str]) -> tuple[int, str, str]:
        ran.append(list(argv))
        return _systemd.run_command(argv)

    looked = _probe.look(_probe.with_defaults({"unit": "sglang.service"}), tools.get, runner)
    assert looked["unit"]["InvocationID"] == INVOCATION and looked["journal"]["ready_line"] == 1
    assert ran and all(argv[:2] == [str(systemctl), "show"] and argv[-1] == "sglang.service" for argv in ran)

    def refused(argv: t.Sequence[str]) -> tuple[int, str, str]:
        return 1, "", "Access denied"

    with pytest.raises(_probe.ProbeError, match=r"systemctl show sglang.service failed \(rc=1\): Access denied"):
        _probe.look(_probe.with_defaults({"unit": "sglang.service"}), tools.get, refused)


class DyingServer:
    """The look's journal and unit while a server dies in a traceback on a loaded host: its end is
    seen with only the traceback's first line in the journal; journald hands over the rest ``lag``
    seconds later. Stands in for the Watch (unit state) and the JournalFollower the look reads."""

    def __init__(self, lines: list[str], lag: float) -> None:
        self.scanner = Scanner(load_rules("sglang"))
        self.reading: dict[str, t.Any] = {}
        self.tail_lines, self.count, self.changed = 0, 0, False
        self.header, self.rest = [{"MESSAGE": lines[0]}], [{"MESSAGE": line} for line in lines[1:]]
        self.rest_at = 0.0
        self.lag = lag

    # the watch
    def feed(self, records: t.Iterable[dict[str, t.Any]]) -> None:
        self.scanner.feed_records(records)

    def refresh(self) -> None:
        pass

    def quiet_for(self) -> float:
        return _probe.STEP

    def wakers(self) -> list[int]:
        return []

    # the follower
    def catch_up(self) -> list[dict[str, t.Any]]:
        return []

    def poll(self, wait: float, wakers: t.Sequence[int] = (), hangups: t.Sequence[int] = ()) -> list[dict[str, t.Any]]:
        if self.header:
            self.changed, self.rest_at = True, time.monotonic() + self.lag
            taken, self.header = self.header, []
            return taken
        if self.rest and time.monotonic() >= self.rest_at:
            taken, self.rest = self.rest, []
            return taken
        time.sleep(min(wait, 0.05))
        return []


def dying_lines() -> list[str]:
    """The traceback a scheduler died in, from a real log: its first line to its exception line."""
    log = next(log for log in corpus_logs() if log.name == "sglang-nccl-02.log")
    assert log.failure_line is not None
    body = log.body.splitlines()
    start = log.failure_line - log.header_lines - 1
    end = next(number for number in range(start, len(body)) if body[number].startswith("RuntimeError: NCCL error"))
    return body[start : end + 1]


@pytest.mark.parametrize("lag", [0.0, 1.5])
def test_a_traceback_whose_process_is_gone_is_read_whole_even_when_journald_is_slow_to_hand_it_over(lag: float, monkeypatch: pytest.MonkeyPatch) -> None:
    # a longest wait far beyond any load's delay: a look that waited it out instead of ending at the
    # exception line is told apart without a tight clock
    monkeypatch.setattr(_probe, "TRACEBACK_SETTLE_MOST", 60.0)
    lines = dying_lines()
    assert "Scheduler hit an exception: Traceback" in lines[0]
    server = DyingServer(lines, lag)
    params = _probe.with_defaults({"unit": "sglang.service", "watch": 120.0})
    started = time.monotonic()
    _probe.follow(server, server, params, _probe.HealthPacer(params))  # type: ignore[arg-type]
    took = time.monotonic() - started
    (event,) = server.scanner.finish()["fatal"]
    assert event["message"].startswith("RuntimeError: NCCL error: unhandled system error"), event["message"]
    assert len(event["traceback"]) == len(lines)
    assert lag <= took < 60.0, took


class ReadAgain(DyingServer):
    """A later look at a process that died long ago in a traceback cut short before its exception
    line (killed while printing): journald stored its records ``age`` seconds ago."""

    def __init__(self, lines: list[str], age: float) -> None:
        super().__init__(lines, 0.0)
        self.realtime = int((time.time() - age) * 1e6)


def test_a_traceback_cut_short_long_ago_is_not_waited_for_again_by_a_later_look() -> None:
    lines = dying_lines()[:-1]  # everything but its exception line
    server = ReadAgain(lines, age=_probe.TRACEBACK_SETTLE_MOST * 4)
    params = _probe.with_defaults({"unit": "sglang.service", "watch": 120.0})
    started = time.monotonic()
    _probe.follow(server, server, params, _probe.HealthPacer(params))  # type: ignore[arg-type]
    took = time.monotonic() - started
    (event,) = server.scanner.finish()["fatal"]
    assert "traceback cut short" in event["message"], event["message"]
    # the first look already waited for its exception line: this one judges at once
    assert took < _probe.TRACEBACK_SETTLE_MOST, took


class ChattyServer(DyingServer):
    """A server that goes on printing after its fatal traceback: ``lines`` come one every ``interval``
    seconds (the other ranks' tracebacks, request logs), its process alive throughout."""

    def __init__(self, lines: list[str], interval: float) -> None:
        super().__init__(lines, 0.0)
        self.pending = [{"MESSAGE": line} for line in lines]
        self.interval = interval
        self.next_at = time.monotonic()

    def poll(self, wait: float, wakers: t.Sequence[int] = (), hangups: t.Sequence[int] = ()) -> list[dict[str, t.Any]]:
        time.sleep(max(min(self.next_at - time.monotonic(), wait), 0.0))
        if not self.pending or time.monotonic() < self.next_at:
            return []
        self.next_at += self.interval
        return [self.pending.pop(0)]


def test_the_verdict_does_not_wait_for_what_a_dying_server_goes_on_printing() -> None:
    """The real traceback of rank 7, then the same traceback from seven more ranks and a long tail, a
    line every 20 ms (about 10 s in all): the look ends a moment after the first exception line, with
    that line as the fatal event, not when the other ranks' tracebacks or the printing end."""
    first = dying_lines()
    others = [line.replace("TP7", f"TP{rank}") for rank in range(7) for line in first]
    tail = [f"[2025-03-11 15:02:54 TP0] Decode batch. #running-req: {n}" for n in range(500 - len(first) - len(others))]
    server = ChattyServer(first + others + tail, interval=0.02)
    params = _probe.with_defaults({"unit": "sglang.service", "watch": 120.0})
    _probe.follow(server, server, params, _probe.HealthPacer(params))  # type: ignore[arg-type]
    events = server.scanner.finish()["fatal"]
    assert events[0]["message"].startswith("RuntimeError: NCCL error: unhandled system error"), events[0]["message"]
    read = len(first) + len(others) + len(tail) - len(server.pending)
    # FATAL_SETTLE (0.3 s) is 15 lines at this pace; a look that waited on the other ranks' tracebacks read them all
    assert read < len(first) + len(others) / 2, f"the look read {read} lines: {len(first)} of the first traceback, then {read - len(first)}"
