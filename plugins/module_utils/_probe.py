# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One look at an inference server's unit, journal and health endpoint: what service_probe does,
standard library only, so that the same code runs as the module and, for the long polls of a wait,
as a plain Python process on the managed host (``cli``: no AnsiballZ payload compiled on every
call; the files are written once per wait and Python keeps their bytecode).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import sys
import time
import typing as t
from collections import deque

from ansible_collections.inferops.runbooks.plugins.module_utils import _journal_state as journal_state
from ansible_collections.inferops.runbooks.plugins.module_utils import _lease
from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import RuleError, Scanner, load_rules
from ansible_collections.inferops.runbooks.plugins.module_utils._health import HealthURLError, probe
from ansible_collections.inferops.runbooks.plugins.module_utils._option_specs import CLASSIFIER_OPTIONS, HEALTH_OPTIONS, UNIT_OPTIONS, merged
from ansible_collections.inferops.runbooks.plugins.module_utils._report import phase_index
from ansible_collections.inferops.runbooks.plugins.module_utils._rules import PHASES
from ansible_collections.inferops.runbooks.plugins.module_utils._run_record import STATE_DIR
from ansible_collections.inferops.runbooks.plugins.module_utils._systemd import (
    GrepRead,
    GrepUnavailable,
    JournalFollower,
    JournalReader,
    Runner,
    SystemdError,
    identity,
    is_invocation_id,
    journal_command,
    message_text,
    run_command,
    unit_name,
    unit_state,
)
from ansible_collections.inferops.runbooks.plugins.module_utils._types import HealthResult

STEP = 0.25  # how often the unit's main process is looked at while the journal is quiet, without a pidfd
UNIT_EVERY = 2.0  # systemctl show at least this often (at once when the main process is gone), without a pidfd
UNIT_EVERY_PIDFD = 5.0  # with a pidfd the main process's end wakes the watch: systemctl show is only a backstop
JOURNALD_LAG = 0.3  # a dying process's last lines reach the journal a moment after it exits
TRACEBACK_SETTLE = 0.8  # an open traceback is given this long after its last line to be written whole
# ... and this long in all: on a loaded host journald can take seconds to read a dead process's last lines
TRACEBACK_SETTLE_MOST = 5.0
FATAL_SETTLE = 0.3  # after a fatal line, the other ranks' copies follow within this
HEALTH_FRESH = 1.0  # an answer younger than this is the call's last one: no second probe at the end
# while the server keeps giving the same answer short of 200 (warming up: 503, or no answer in time),
# the time between probes doubles with each, up to this; a different answer ends the look
HEALTH_SLOWEST = 5.0
MAX_FATAL_TIMES = 1000


def argument_spec() -> dict[str, t.Any]:
    spec = merged(UNIT_OPTIONS, HEALTH_OPTIONS, CLASSIFIER_OPTIONS)
    spec["health_url"] = {"type": "str"}
    spec.update(
        invocation_id={"type": "str"},
        cursor={"type": "str", "no_log": False},
        line_offset={"type": "int", "default": 0},
        phase={"type": "str", "default": "starting", "choices": list(PHASES)},
        watch={"type": "float", "default": 0},
        health_early={"type": "bool", "default": True},
        health_every={"type": "float", "default": 0},
        health_needed={"type": "int", "default": 0},
        health_known={"type": "str"},
        tail_lines={"type": "int", "default": 0},
        journal_grep={"type": "bool", "default": False},
        journal_state={"type": "bool", "default": False},
        state_dir={"type": "str", "default": STATE_DIR},
        # the rollout that holds the host's lease: each look renews its heartbeat (module_utils/_lease)
        lease_run_id={"type": "str"},
    )
    return spec


def controller_gone() -> bool:
    """Whether whoever started this module went away (Ctrl-C on the controller, a dropped connection):
    the pipe back to it is closed, or this process was orphaned."""
    if os.getppid() == 1:
        return True
    poller = select.poll()
    poller.register(1, select.POLLERR | select.POLLHUP)
    return bool(poller.poll(0))


def open_pidfd(pid: int) -> int | None:
    """A file descriptor that becomes readable when the process ends (Linux >= 5.3), or None."""
    opener = getattr(os, "pidfd_open", None)
    if pid <= 0 or opener is None:
        return None
    try:
        return int(opener(pid))
    except OSError:
        return None


class Watch:
    """One call's look at the unit: the journal followed, the unit's state kept current."""

    def __init__(self, systemctl: str, unit: str, scanner: Scanner, tail_lines: int, runner: Runner = run_command) -> None:
        self.unit = unit
        self.scanner = scanner
        self.systemctl = systemctl
        self.runner = runner
        self.first = self.state = unit_state(unit, self.runner, self.systemctl)
        self.state_at = time.monotonic()
        self.tail: deque[str] = deque(maxlen=max(tail_lines, 1))
        self.tail_lines = tail_lines
        self.fatal_times: dict[int, int] = {}
        self.reading: dict[str, t.Any] = {"grep": False, "records_read": 0, "fallback": None, "resumed_at": None, "state_problem": None, "state_saved": False}
        self.warnings: list[str] = []
        self.pidfd: int | None = None
        self.pidfd_of = 0
        self._track()

    def _track(self) -> None:
        """Keep a pidfd of the current main process, so that its end wakes the watch."""
        pid = int(self.state.get("MainPID") or 0)
        if pid == self.pidfd_of:
            return
        self.close()
        self.pidfd, self.pidfd_of = open_pidfd(pid), pid

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
        self.pidfd, self.pidfd_of = None, 0

    def gone(self) -> bool:
        pid = int(self.state.get("MainPID") or 0)
        if pid <= 0:
            return True
        if self.pidfd is not None:
            return bool(select.select([self.pidfd], [], [], 0)[0])
        return not os.path.exists(f"/proc/{pid}")

    def unit_every(self) -> float:
        return UNIT_EVERY_PIDFD if self.pidfd is not None else UNIT_EVERY

    def refresh(self, force: bool = False) -> None:
        if force or self.gone() or time.monotonic() - self.state_at >= self.unit_every():
            self.state = unit_state(self.unit, self.runner, self.systemctl)
            self.state_at = time.monotonic()
            self._track()

    def quiet_for(self) -> float:
        """How long the watch may sleep when nothing wakes it: until the next systemctl show, or a
        step without a pidfd of a live main process."""
        if self.pidfd is None or self.gone():
            return STEP
        return max(self.state_at + self.unit_every() - time.monotonic(), 0.0)

    def wakers(self) -> list[int]:
        """The pidfd of a main process still running (one that ended wakes nothing more)."""
        return [] if self.pidfd is None or self.gone() else [self.pidfd]

    def feed_one(self, record: dict[str, t.Any]) -> None:
        self.feed((record,))

    def feed(self, records: t.Iterable[dict[str, t.Any]]) -> None:
        scanner = self.scanner
        for record in records:
            fatal, opened = scanner.counts.get("fatal", 0), scanner.open_traceback
            scanner.feed_records((record,))
            if self.tail_lines > 0:
                self.tail.append(self.scanner.redact(message_text(record)))
            if (scanner.counts.get("fatal", 0) != fatal or scanner.open_traceback != opened) and len(self.fatal_times) < MAX_FATAL_TIMES:
                self.note_time(record)

    def note_time(self, record: dict[str, t.Any]) -> None:
        """The journal's time of a line that made or opened a fatal event (a traceback's first line
        is the event's line): across the nodes of a deployment, the earliest says where it began."""
        realtime = str(record.get("__REALTIME_TIMESTAMP") or "")
        if realtime.isdigit():
            number = self.scanner.open_traceback[0] if self.scanner.open_traceback else self.scanner.line_number
            self.fatal_times.setdefault(number, int(realtime))

    def stamp(self, report: dict[str, t.Any]) -> None:
        for event in report.get("fatal") or []:
            event["first_realtime"] = self.fatal_times.get(event.get("first_line"))

    @property
    def changed(self) -> bool:
        return identity(self.state) != identity(self.first)


def health_key(result: t.Mapping[str, t.Any]) -> str:
    """An answer as O(health_known) names it: the status, or up (connected, no answer) or down."""
    if result.get("status") is not None:
        return str(result["status"])
    return "up" if result.get("up") else "down"


class HealthPacer:
    """Health probed inside the watch at its own pace (O(health_every)), once the port is open: the
    watch ends at an answer that differs from the one before it, or at enough successes in a row."""

    def __init__(self, params: dict[str, t.Any]) -> None:
        self.url: str | None = params["health_url"]
        self.timeout: float = params["health_timeout"]
        self.validate_certs: bool = params["validate_certs"]
        self.every: float = params["health_every"] if self.url else 0.0
        self.needed: int = params["health_needed"] if params["health_early"] else 0
        self.known: str | None = params["health_known"]
        self.history: list[HealthResult] = []
        self.at: float | None = None  # when the last probe ended
        self.pace = self.every  # until the next probe
        self.successes = 0

    def active(self, phase: int) -> bool:
        """Pacing only once the port is open: an answer came before, or the server warms up."""
        port_open = self.known not in (None, "down") or bool(self.history and self.history[-1].get("up"))
        return self.every > 0 and (port_open or phase >= phase_index("warming_up"))

    def due_in(self, phase: int) -> float:
        if not self.active(phase):
            return float("inf")
        return 0.0 if self.at is None else max(self.at + self.pace - time.monotonic(), 0.0)

    def take(self) -> bool:
        """One probe; whether it ends the watch (a different answer, or the successes needed)."""
        before = health_key(self.history[-1]) if self.history else self.known
        result = self.probe()
        self.successes = self.successes + 1 if result.get("status") == 200 else 0
        same = health_key(result) == before and result.get("status") != 200
        self.pace = min(self.pace * 2, max(self.every, HEALTH_SLOWEST)) if same else self.every
        return health_key(result) != before or (self.needed > 0 and self.successes >= self.needed)

    def probe(self) -> HealthResult:
        result = probe(t.cast(str, self.url), self.timeout, self.validate_certs)
        self.history.append(result)
        self.at = time.monotonic()
        return result

    def last(self) -> HealthResult | None:
        """The answer that ends the call: a fresh one, or a probe now."""
        if not self.url:
            return None
        if self.at is None or time.monotonic() - self.at >= HEALTH_FRESH:
            return self.probe()
        return self.history[-1]


def catch_up(watch: Watch, follower: JournalFollower, params: dict[str, t.Any]) -> None:
    """What the journal holds now after the cursor: with journalctl --grep where it can search (the
    scanner as it was before when it cannot), else every record."""
    reading = watch.reading
    pattern = watch.scanner.rules.grep_pattern if params["journal_grep"] else None
    if params["journal_grep"] and pattern is None:
        reading["fallback"] = "a rule matches lines without any word journalctl could search for"
    if pattern is not None:
        before = watch.scanner.state()
        times, tail = dict(watch.fatal_times), list(watch.tail)
        grep = GrepRead(
            watch.scanner, watch.feed_one, follower.unit, follower.invocation_id, pattern, follower.start_cursor, watch.tail_lines, follower.journalctl
        )
        try:
            grep.read()
        except GrepUnavailable as exc:
            reading["fallback"] = str(exc)
            if before is not None:
                watch.scanner.restore(before)
            watch.fatal_times, watch.tail = times, deque(tail, maxlen=watch.tail.maxlen)
        else:
            reading.update(grep=True, records_read=grep.read_records)
            follower.cursor = grep.cursor
            follower.count += grep.count
            follower.realtime = grep.realtime or follower.realtime
            if watch.tail_lines > 0:
                watch.tail = deque((watch.scanner.redact(text) for text in grep.tail), maxlen=watch.tail.maxlen)
            return
    before_count = follower.count
    watch.feed(follower.catch_up())
    reading["records_read"] = follower.count - before_count
    if reading.get("resumed_at") is not None and watch.tail_lines > 0:
        lines = [watch.scanner.redact(text) for text in last_lines(follower, watch.tail_lines)]
        watch.tail = deque(lines or watch.tail, maxlen=watch.tail.maxlen)


def last_lines(follower: JournalFollower, count: int) -> list[str]:
    """The text of the last ``count`` records of the invocation up to the follower's cursor."""
    if not follower.cursor:
        return []
    argv = journal_command(follower.unit, follower.invocation_id, None, None, follower.journalctl)
    argv[1:1] = ["--reverse", "--cursor=" + follower.cursor, f"--lines={count}"]
    return [message_text(record) for record in reversed(list(JournalReader(argv, limit=count)))]


def resume(watch: Watch, path: str, unit: str, invocation: str) -> str | None:
    """Take up the state kept for this invocation; the cursor to read after, or None."""
    saved, problem = journal_state.load(path, unit)
    reading = watch.reading
    if problem is not None:
        reading["state_problem"] = problem
        watch.warnings.append(problem)
        return None
    if saved is None or saved["invocation_id"] != invocation:
        return None
    try:
        times = {int(line): int(realtime) for line, realtime in dict(saved.get("fatal_times") or {}).items()}
        watch.scanner.restore(saved["scanner"])
    except (TypeError, ValueError) as exc:
        reading["state_problem"] = f"the journal state {path} is ignored ({exc}): the journal is read from the start"
        watch.warnings.append(reading["state_problem"])
        return None
    watch.fatal_times = times
    reading["resumed_at"] = watch.scanner.line_number
    return str(saved["cursor"])


def keep(watch: Watch, path: str, unit: str, invocation: str, cursor: str, judged: dict[str, t.Any]) -> None:
    """Keep what was judged of the invocation for the next call (O(journal_state))."""
    times = dict(sorted(watch.fatal_times.items())[:MAX_FATAL_TIMES])
    try:
        journal_state.save(path, unit, invocation, cursor, judged, {"fatal_times": times})
        watch.reading["state_saved"] = True
    except OSError as exc:
        watch.warnings.append(f"the journal state {path} could not be kept ({exc}): the next precheck reads the journal from the start")


def follow(watch: Watch, follower: JournalFollower, params: dict[str, t.Any], pacer: HealthPacer) -> None:
    """Read the journal until something matters or the watch window ends; an open traceback and a
    fresh fatal line get a moment to be written whole. Sleeps until the journal, the main process's
    end, the controller going away, the next health probe or the next look at the unit wakes it."""
    scanner = watch.scanner
    deadline = time.monotonic() + params["watch"]
    known = phase_index(params["phase"])
    settle_until: float | None = None
    tracing: _TracebackSettle | None = None
    judged_by: float | None = None
    ended = False
    catch_up(watch, follower, params)
    while True:
        now = time.monotonic()
        phase = phase_index(scanner.phase) if scanner.phases else -1
        until = deadline if settle_until is None else settle_until
        wait = min(max(until - now, 0.0), watch.quiet_for(), pacer.due_in(max(known, phase)) if settle_until is None else float("inf"))
        watch.feed(follower.poll(wait, watch.wakers(), hangups=(1,)))
        watch.refresh()
        now = time.monotonic()
        if controller_gone():
            raise SystemExit(1)
        if watch.changed and not ended:
            ended = True
            time.sleep(JOURNALD_LAG)
            watch.feed(follower.poll(0))
        if scanner.counts.get("fatal", 0):
            # the start is lost: the other ranks' copies get a moment, what follows them (more
            # tracebacks, a server that goes on printing) is evidence the verdict does not wait for
            judged_by = judged_by or now + FATAL_SETTLE
            settle_until = judged_by
        elif scanner.open_traceback is None or (ended and scanner.traceback_reached_exception):
            tracing = None
            if ended:
                return
        else:
            # the rest of a traceback is on its way: wait while it grows (a dead process's lines all come)
            tracing = tracing or _TracebackSettle(now, written_ago(follower))
            settle_until = tracing.until(now, scanner.line_number, ended)
        if settle_until is not None:
            if now >= settle_until:
                return
            continue
        phase = phase_index(scanner.phase) if scanner.phases else -1
        if scanner.ready_line is not None or phase > known:
            return
        if ends_for_health(pacer, params, max(known, phase)):
            return
        if time.monotonic() >= deadline:
            return


def written_ago(follower: JournalFollower) -> float:
    """How long ago journald stored the last record read (0 when unknown): a traceback read again by a
    later look (its header was read before) was opened then, not when this look reached it."""
    realtime = getattr(follower, "realtime", None)
    return max(time.time() - realtime / 1e6, 0.0) if realtime else 0.0


class _TracebackSettle:
    """How long an open traceback is waited for: TRACEBACK_SETTLE after its last line; once its
    process is gone, up to TRACEBACK_SETTLE_MOST from when journald stored it for its exception line
    (all it wrote will come)."""

    def __init__(self, now: float, age: float = 0.0) -> None:
        self.opened = now - age
        self.grown = now
        self.lines = -1

    def until(self, now: float, lines: int, ended: bool) -> float:
        if lines != self.lines:
            self.lines, self.grown = lines, now
        most = self.opened + TRACEBACK_SETTLE_MOST
        return most if ended else min(self.grown + TRACEBACK_SETTLE, most)


def ends_for_health(pacer: HealthPacer, params: dict[str, t.Any], phase: int) -> bool:
    """Without pacing, the watch ends once the server warms up (to probe at once); with it, at a
    health answer that matters."""
    if not params["health_url"]:
        return False
    if pacer.every <= 0:
        return bool(params["health_early"]) and phase >= phase_index("warming_up")
    return pacer.due_in(phase) <= 0 and pacer.take()


class ProbeError(Exception):
    """The look cannot be made (bad arguments, systemctl or journalctl missing, a bad health URL)."""


BinPath = t.Callable[[str], t.Optional[str]]


SBIN = ("/sbin", "/usr/sbin", "/usr/local/sbin")


def find_bin(name: str) -> str | None:
    """An executable in PATH or the sbin directories (where AnsibleModule.get_bin_path looks too)."""
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", os.defpath), *SBIN]))


def look(params: dict[str, t.Any], bin_path: BinPath = find_bin, runner: Runner = run_command) -> dict[str, t.Any]:
    """One look (the module's options in ``params``, defaults filled in): its result, or ProbeError.
    ``runner`` runs systemctl (the module's run_command; a plain process's own, run_command)."""
    started = time.monotonic()
    try:
        unit = unit_name(params["unit"])
        rules = load_rules(params["engine"], params["extra_rules"], params["disabled_rules"])
    except (RuleError, ValueError) as exc:
        raise ProbeError(str(exc)) from None
    if params["invocation_id"] and not is_invocation_id(params["invocation_id"]):
        raise ProbeError(f"invocation_id {params['invocation_id']!r} is not 32 hexadecimal digits")
    if params["watch"] < 0 or params["health_timeout"] <= 0 or params["health_every"] < 0 or params["health_needed"] < 0:
        raise ProbeError("watch, health_every and health_needed must be >= 0 and health_timeout > 0")
    systemctl, journalctl = bin_path("systemctl"), bin_path("journalctl")
    if not systemctl or not journalctl:
        raise ProbeError(f'Failed to find required executable "{"systemctl" if not systemctl else "journalctl"}" in paths')
    scanner = Scanner(rules, strict=params["strict"], line_offset=params["line_offset"], secrets=params["redact"])
    pacer = HealthPacer(params)
    follower = None
    try:
        watch = Watch(systemctl, unit, scanner, params["tail_lines"], runner)
        try:
            invocation = params["invocation_id"] or watch.state.get("InvocationID") or None
            cursor = params["cursor"]
            path = journal_state.state_path(unit, params["state_dir"]) if params["journal_state"] else None
            if path and invocation and not cursor:
                cursor = resume(watch, path, unit, invocation)
            if invocation:
                with JournalFollower(unit, invocation, cursor, journalctl) as follower:
                    follow(watch, follower, params, pacer)
            watched = round(time.monotonic() - started, 3)
            judged = scanner.state() if path else None
            report = scanner.finish()
            health = pacer.last()
            if health is not None:
                watch.refresh(force=True)
        finally:
            watch.close()
    except (SystemdError, HealthURLError) as exc:
        raise ProbeError(str(exc)) from None
    if path and invocation and judged is not None and follower is not None and follower.cursor:
        keep(watch, path, unit, invocation, follower.cursor, judged)
    watch.stamp(report)
    report["reading"] = watch.reading
    report["cursor"] = follower.cursor if follower else params["cursor"]
    report["records"] = follower.count if follower else 0
    report["invocation_id"] = invocation
    report["last_realtime"] = follower.realtime if follower else None
    report["gap"] = follower.gap if follower else None
    if params["tail_lines"] > 0:
        report["tail"] = list(watch.tail)
    result = {"changed": False, "unit": watch.state, "journal": report, "health": health, "health_history": pacer.history, "watched": watched}
    if params["lease_run_id"]:
        result["lease"] = renew_lease(unit, params["state_dir"], params["lease_run_id"])
    if watch.warnings:
        result["warnings"] = watch.warnings
    return result


def renew_lease(unit: str, state_dir: str, run_id: str) -> dict[str, t.Any]:
    """The heartbeat of the run's lease renewed; whether the run still holds it, and who does."""
    try:
        renewed = _lease.renew(_lease.lease_path(unit, state_dir), run_id)
    except (_lease.LeaseError, OSError) as exc:
        return {"held": True, "problem": f"the lease could not be renewed: {exc}"}
    lease = renewed.get("lease")
    return {"held": renewed["held"], "holder": _lease.describe(lease, time.time()) if lease and not renewed["held"] else None}


def with_defaults(given: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The options of a look: the given ones, the defaults of the others (argument_spec)."""
    return {name: given[name] if given.get(name) is not None else option.get("default") for name, option in argument_spec().items()}


def cli() -> None:
    """A look as a plain process: the options as JSON on stdin, the result as JSON on stdout."""
    try:
        result = look(with_defaults(json.loads(sys.stdin.read() or "{}")))
    except ProbeError as exc:
        result = {"failed": True, "msg": str(exc)}
    result["python"] = sys.executable
    sys.stdout.write(json.dumps(result))
