#!/usr/bin/python
# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: service_probe
short_description: One look at an inference server's systemd unit, journal and health endpoint
version_added: 0.1.0
description:
  - Reads the unit's state with C(systemctl show), classifies the unit's journal records of one invocation
    that came after O(cursor), and probes the HTTP health endpoint from the managed host itself (so a server
    bound to 127.0.0.1 is reachable).
  - With O(watch), follows the journal (one C(journalctl --follow)) and keeps the unit's state current, and returns
    as soon as something that matters changes, so that one connection covers several seconds of a wait.
  - A Python traceback that is still being written is given a moment to be written whole, and a fatal line a moment
    for the other ranks' copies to follow, so that the report holds the whole evidence.
  - This is the building block of M(inferops.runbooks.wait_ready); it never changes anything.
author:
  - inferops.runbooks contributors (@inferops)
extends_documentation_fragment:
  - inferops.runbooks.unit
  - inferops.runbooks.classifier
  - inferops.runbooks.health
options:
  invocation_id:
    description:
      - The invocation (C(InvocationID), 32 hexadecimal digits) whose journal records to read.
      - Default is the unit's current invocation.
    type: str
  cursor:
    description:
      - Read only the journal records after this cursor (the RV(journal.cursor) of a previous call).
      - Without it, the invocation's records are read from its start.
    type: str
  line_offset:
    description:
      - The number of lines of the invocation read before O(cursor), so that line numbers in the
        report count from the invocation's start.
    type: int
    default: 0
  phase:
    description:
      - The start phase the caller already knows of (from earlier calls), so that only a later phase
        counts as a change that ends O(watch).
    type: str
    choices: [starting, loading_weights, allocating_kv_cache, capturing_cuda_graphs, warming_up, ready]
    default: starting
  watch:
    description:
      - Seconds to keep watching for a change before returning (a long poll). V(0) looks once.
      - The call returns early on a fatal line (once its traceback is whole), the ready marker, a later phase,
        or a change of the unit's C(ActiveState), C(SubState), C(MainPID), C(NRestarts) or C(InvocationID).
    type: float
    default: 0
  health_url:
    description:
      - The health endpoint to probe once, at the end of the call. Omit it to skip the probe.
      - A refused connection is reported as RV(health.up=false), not as a failure.
    type: str
  health_early:
    description:
      - End O(watch) as soon as the server is known to be warming up or ready, to probe health at once
        (with O(health_every), once health answered 200 O(health_needed) times in a row instead).
      - Set to V(false) to watch the whole window (during a soak).
    type: bool
    default: true
  health_every:
    description:
      - With O(health_url), also probe health every this many seconds while watching, once the server's port
        is open (O(health_known) is an answer, or the journal shows it warming up or ready); the call then
        returns as soon as an answer differs from the one before it (or from O(health_known)).
      - V(0) probes health once, at the end of the call.
    type: float
    default: 0
  health_needed:
    description:
      - With O(health_every) and O(health_early), end O(watch) once health answered 200 this many times in a row
        within the call. V(0) never ends it on successes.
    type: int
    default: 0
  health_known:
    description:
      - The health answer the caller saw last (its RV(health.status), V(up) for a connection without an answer,
        V(down) for none), so that only a different answer counts as a change that ends O(watch).
    type: str
  tail_lines:
    description:
      - Also return the text of the last this many journal lines read, as RV(journal.tail).
    type: int
    default: 0
notes:
  - The journal is read with field matches (C(_SYSTEMD_UNIT=), C(_SYSTEMD_INVOCATION_ID=)) and C(--cursor),
    never C(-u) with a cursor, which could skip an entry on systemd before its December 2023 fix.
  - The health probe never sends credentials (SGLang's and vLLM's health endpoints need none).
seealso:
  - module: inferops.runbooks.wait_ready
  - module: inferops.runbooks.journal_scan
"""

EXAMPLES = r"""
- name: Look once at the server, from the start of its current invocation
  inferops.runbooks.service_probe:
    unit: sglang.service
    engine: sglang
    health_url: http://127.0.0.1:30000/health_generate
  register: probe

- name: Watch for up to 5 s what came after the previous look
  inferops.runbooks.service_probe:
    unit: sglang.service
    invocation_id: "{{ probe.unit.InvocationID }}"
    cursor: "{{ probe.journal.cursor }}"
    line_offset: "{{ probe.journal.lines }}"
    phase: "{{ probe.journal.phase }}"
    watch: 5
    health_url: http://127.0.0.1:30000/health_generate
"""

RETURN = r"""
unit:
  description: The unit's state after the call, from C(systemctl show); numeric properties are integers.
  returned: always
  type: dict
  sample:
    Id: sglang.service
    LoadState: loaded
    ActiveState: active
    SubState: running
    MainPID: 4242
    NRestarts: 0
    InvocationID: 5c6f1b0d2a0e4f7b9a3c8e1d2f4a6b8c
    ExecMainStatus: 0
    ExecMainCode: 0
    Result: success
    ActiveEnterTimestampMonotonic: 123456789
journal:
  description:
    - The classifier's report of the records read (see M(inferops.runbooks.journal_scan) for its keys),
      plus where to continue.
    - Each fatal event also has C(first_realtime), the C(__REALTIME_TIMESTAMP) (microseconds since the epoch)
      of its first line's journal record, or null.
  returned: always
  type: dict
  contains:
    cursor:
      description: The cursor to pass as O(cursor) next time (the O(cursor) given when nothing new was read).
      type: str
      returned: always
    lines:
      description: The line number reached, counted from the invocation's start (O(line_offset) plus lines read).
      type: int
      returned: always
    records:
      description: The number of journal records read.
      type: int
      returned: always
    invocation_id:
      description: The invocation read.
      type: str
      returned: always
    gap:
      description:
        - Set when the journal no longer held the entry at O(cursor) (rotated or vacuumed away before the
          call), so that the entries that followed it may have been lost. Null otherwise.
      type: str
      returned: always
    last_realtime:
      description: The C(__REALTIME_TIMESTAMP) (microseconds since the epoch) of the last record read, or null.
      type: int
      returned: always
    tail:
      description: The text of the last O(tail_lines) lines read.
      type: list
      elements: str
      returned: when O(tail_lines) > 0
health:
  description: The health probe's outcome, or null without O(health_url).
  returned: always
  type: dict
  contains:
    url:
      description: The URL probed.
      type: str
    up:
      description: Whether the server accepted the connection.
      type: bool
    status:
      description: The HTTP status, or null without an answer.
      type: int
    error:
      description: What went wrong (C(connection refused), C(no answer within 30 s), ...), or null.
      type: str
    seconds:
      description: How long the probe took.
      type: float
  sample: {"url": "http://127.0.0.1:30000/health_generate", "up": false, "status": null, "error": "connection refused", "seconds": 0.001}
health_history:
  description:
    - Every health probe of the call, oldest first (the last one is RV(health)); empty without O(health_url).
  returned: always
  type: list
  elements: dict
watched:
  description: Seconds the call spent watching (without the health probe).
  returned: always
  type: float
"""

import os  # noqa: E402
import select  # noqa: E402
import time  # noqa: E402
import typing as t  # noqa: E402
from collections import deque  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import RuleError, Scanner, load_rules  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.module_utils._health import HealthURLError, probe  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.module_utils._options import CLASSIFIER_OPTIONS, HEALTH_OPTIONS, UNIT_OPTIONS, merged  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.module_utils._report import phase_index  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.module_utils._rules import PHASES  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.module_utils._systemd import (  # noqa: E402
    JournalFollower,
    SystemdError,
    identity,
    is_invocation_id,
    message_text,
    unit_name,
    unit_state,
)
from ansible_collections.inferops.runbooks.plugins.module_utils._types import HealthResult  # noqa: E402

STEP = 0.25  # how often the unit's main process is looked at while the journal is quiet, without a pidfd
UNIT_EVERY = 2.0  # systemctl show at least this often (at once when the main process is gone), without a pidfd
UNIT_EVERY_PIDFD = 5.0  # with a pidfd the main process's end wakes the watch: systemctl show is only a backstop
JOURNALD_LAG = 0.3  # a dying process's last lines reach the journal a moment after it exits
TRACEBACK_SETTLE = 0.8  # an open traceback is given this long to be written whole
FATAL_SETTLE = 0.3  # after a fatal line, the other ranks' copies follow within this
HEALTH_FRESH = 1.0  # an answer younger than this is the call's last one: no second probe at the end
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

    def __init__(self, module: AnsibleModule, unit: str, scanner: Scanner, tail_lines: int) -> None:
        self.module = module
        self.unit = unit
        self.scanner = scanner
        self.systemctl = module.get_bin_path("systemctl", required=True)
        self.first = self.state = unit_state(unit, systemctl=self.systemctl)
        self.state_at = time.monotonic()
        self.tail: deque[str] = deque(maxlen=max(tail_lines, 1))
        self.tail_lines = tail_lines
        self.fatal_times: dict[int, int] = {}
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
            self.state = unit_state(self.unit, systemctl=self.systemctl)
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
        self.successes = 0

    def active(self, phase: int) -> bool:
        """Pacing only once the port is open: an answer came before, or the server warms up."""
        port_open = self.known not in (None, "down") or bool(self.history and self.history[-1].get("up"))
        return self.every > 0 and (port_open or phase >= phase_index("warming_up"))

    def due_in(self, phase: int) -> float:
        if not self.active(phase):
            return float("inf")
        return 0.0 if self.at is None else max(self.at + self.every - time.monotonic(), 0.0)

    def take(self) -> bool:
        """One probe; whether it ends the watch (a different answer, or the successes needed)."""
        before = health_key(self.history[-1]) if self.history else self.known
        result = self.probe()
        self.successes = self.successes + 1 if result.get("status") == 200 else 0
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


def follow(watch: Watch, follower: JournalFollower, params: dict[str, t.Any], pacer: HealthPacer) -> None:
    """Read the journal until something matters or the watch window ends; an open traceback and a
    fresh fatal line get a moment to be written whole. Sleeps until the journal, the main process's
    end, the controller going away, the next health probe or the next look at the unit wakes it."""
    scanner = watch.scanner
    deadline = time.monotonic() + params["watch"]
    known = phase_index(params["phase"])
    settle_until: float | None = None
    watch.feed(follower.catch_up())
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
        if watch.changed:
            time.sleep(JOURNALD_LAG)
            watch.feed(follower.poll(0))
            return
        if scanner.open_traceback is not None:
            settle_until = settle_until or now + TRACEBACK_SETTLE
        elif scanner.counts.get("fatal", 0):
            settle_until = min(settle_until or now + FATAL_SETTLE, now + FATAL_SETTLE)
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


def ends_for_health(pacer: HealthPacer, params: dict[str, t.Any], phase: int) -> bool:
    """Without pacing, the watch ends once the server warms up (to probe at once); with it, at a
    health answer that matters."""
    if not params["health_url"]:
        return False
    if pacer.every <= 0:
        return bool(params["health_early"]) and phase >= phase_index("warming_up")
    return pacer.due_in(phase) <= 0 and pacer.take()


def main() -> None:
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    params = module.params
    started = time.monotonic()
    try:
        unit = unit_name(params["unit"])
        rules = load_rules(params["engine"], params["extra_rules"], params["disabled_rules"])
    except (RuleError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    if params["invocation_id"] and not is_invocation_id(params["invocation_id"]):
        module.fail_json(msg=f"invocation_id {params['invocation_id']!r} is not 32 hexadecimal digits")
    if params["watch"] < 0 or params["health_timeout"] <= 0 or params["health_every"] < 0 or params["health_needed"] < 0:
        module.fail_json(msg="watch, health_every and health_needed must be >= 0 and health_timeout > 0")
    journalctl = module.get_bin_path("journalctl", required=True)
    scanner = Scanner(rules, strict=params["strict"], line_offset=params["line_offset"], secrets=params["redact"])
    pacer = HealthPacer(params)
    follower = None
    try:
        watch = Watch(module, unit, scanner, params["tail_lines"])
        invocation = params["invocation_id"] or watch.state.get("InvocationID") or None
        if invocation:
            with JournalFollower(unit, invocation, params["cursor"], journalctl) as follower:
                follow(watch, follower, params, pacer)
        watched = round(time.monotonic() - started, 3)
        report = scanner.finish()
        health = pacer.last()
        if health is not None:
            watch.refresh(force=True)
    except (SystemdError, HealthURLError) as exc:
        module.fail_json(msg=str(exc))

    watch.close()
    watch.stamp(report)
    report["cursor"] = follower.cursor if follower else params["cursor"]
    report["records"] = follower.count if follower else 0
    report["invocation_id"] = invocation
    report["last_realtime"] = follower.realtime if follower else None
    report["gap"] = follower.gap if follower else None
    if params["tail_lines"] > 0:
        report["tail"] = list(watch.tail)
    module.exit_json(changed=False, unit=watch.state, journal=report, health=health, health_history=pacer.history, watched=watched)


if __name__ == "__main__":
    main()
