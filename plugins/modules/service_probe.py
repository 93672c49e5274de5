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
      - End O(watch) as soon as the server is known to be warming up or ready, to probe health at once.
      - Set to V(false) to watch the whole window (during a soak).
    type: bool
    default: true
  tail_lines:
    description:
      - Also return the text of the last this many journal lines read, as RV(journal.tail).
    type: int
    default: 0
  journal_grep:
    description:
      - Read the journal from O(cursor) (or the invocation's start) with C(journalctl --grep); journalctl
        itself leaves out the records that hold nothing the rules look for (no rule's word, no level word,
        no traceback header, no control or non-ASCII byte), and they are only counted. A record read that opens a
        traceback has the records after it read whole until the traceback ends. The report is the one a full
        read gives.
      - Where journalctl cannot search (built without PCRE2) or the search fails, the records are read
        the usual way (C(fallback) in RV(journal.reading) says why).
      - Only the first read of the call is concerned; what O(watch) follows is read whole.
    type: bool
    default: false
  journal_state:
    description:
      - Keep what was judged of the invocation's journal (the cursor and the classifier's state) in
        O(state_dir), and take it up at the next call for the same invocation without O(cursor), so that only
        the records after it are read (C(resumed_at) in RV(journal.reading)). Another invocation starts over;
        a state file that cannot be used is reported (a warning, and C(state_problem) in RV(journal.reading)) and ignored.
    type: bool
    default: false
  state_dir:
    description:
      - The host's state directory for O(journal_state) (C(<unit>.journal.json) in it).
    type: str
    default: /var/lib/inferops
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
      description:
        - The text of the last O(tail_lines) lines read (with O(journal_grep) or a state taken up, the last
          lines of the invocation up to RV(journal.cursor), read or only counted).
      type: list
      elements: str
      returned: when O(tail_lines) > 0
    reading:
      description:
        - How the journal was read. C(grep) (whether C(journalctl --grep) read it), C(records_read) (records
          journalctl handed over; the others of RV(journal.records) were counted only), C(fallback) (why the
          search was not used, or null), C(resumed_at) (the line number a kept state was taken up at, or null),
          C(state_problem) (why a kept state was ignored, or null), C(state_saved) (whether the state was kept).
      type: dict
      returned: always
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

from ansible_collections.inferops.runbooks.plugins.module_utils import _journal_state as journal_state  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import RuleError, Scanner, load_rules  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.module_utils._health import HealthURLError, probe  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.module_utils._options import CLASSIFIER_OPTIONS, HEALTH_OPTIONS, UNIT_OPTIONS, merged  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.module_utils._report import phase_index  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.module_utils._rules import PHASES  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.module_utils._run_record import STATE_DIR  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.module_utils._systemd import (  # noqa: E402
    GrepRead,
    GrepUnavailable,
    JournalFollower,
    JournalReader,
    SystemdError,
    identity,
    is_invocation_id,
    journal_command,
    message_text,
    unit_name,
    unit_state,
)

STEP = 0.25  # how often the unit's main process is looked at while the journal is quiet
UNIT_EVERY = 2.0  # systemctl show at least this often (at once when the main process is gone)
JOURNALD_LAG = 0.3  # a dying process's last lines reach the journal a moment after it exits
TRACEBACK_SETTLE = 0.8  # an open traceback is given this long to be written whole
FATAL_SETTLE = 0.3  # after a fatal line, the other ranks' copies follow within this
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
        tail_lines={"type": "int", "default": 0},
        journal_grep={"type": "bool", "default": False},
        journal_state={"type": "bool", "default": False},
        state_dir={"type": "str", "default": STATE_DIR},
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
        self.reading: dict[str, t.Any] = {"grep": False, "records_read": 0, "fallback": None, "resumed_at": None, "state_problem": None, "state_saved": False}

    def refresh(self, force: bool = False) -> None:
        pid = int(self.state.get("MainPID") or 0)
        gone = pid <= 0 or not os.path.exists(f"/proc/{pid}")
        if force or gone or time.monotonic() - self.state_at >= UNIT_EVERY:
            self.state = unit_state(self.unit, systemctl=self.systemctl)
            self.state_at = time.monotonic()

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
        watch.module.warn(problem)
        return None
    if saved is None or saved["invocation_id"] != invocation:
        return None
    try:
        times = {int(line): int(realtime) for line, realtime in dict(saved.get("fatal_times") or {}).items()}
        watch.scanner.restore(saved["scanner"])
    except (TypeError, ValueError) as exc:
        reading["state_problem"] = f"the journal state {path} is ignored ({exc}): the journal is read from the start"
        watch.module.warn(reading["state_problem"])
        return None
    watch.fatal_times = times
    reading["resumed_at"] = watch.scanner.line_number
    return str(saved["cursor"])


def follow(watch: Watch, follower: JournalFollower, params: dict[str, t.Any]) -> None:
    """Read the journal until something matters or the watch window ends; an open traceback and a
    fresh fatal line get a moment to be written whole."""
    scanner = watch.scanner
    deadline = time.monotonic() + params["watch"]
    known = phase_index(params["phase"])
    settle_until: float | None = None
    catch_up(watch, follower, params)
    while True:
        now = time.monotonic()
        wait = min(STEP, max(deadline - now, 0.0)) if settle_until is None else max(min(STEP, settle_until - now), 0.0)
        watch.feed(follower.poll(wait))
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
        if params["health_url"] and params["health_early"] and max(known, phase) >= phase_index("warming_up"):
            return
        if now >= deadline:
            return


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
    if params["watch"] < 0 or params["health_timeout"] <= 0:
        module.fail_json(msg="watch must be >= 0 and health_timeout > 0")
    journalctl = module.get_bin_path("journalctl", required=True)
    scanner = Scanner(rules, strict=params["strict"], line_offset=params["line_offset"], secrets=params["redact"])
    follower = None
    try:
        watch = Watch(module, unit, scanner, params["tail_lines"])
        invocation = params["invocation_id"] or watch.state.get("InvocationID") or None
        cursor = params["cursor"]
        path = journal_state.state_path(unit, params["state_dir"]) if params["journal_state"] else None
        if path and invocation and not cursor:
            cursor = resume(watch, path, unit, invocation)
        if invocation:
            with JournalFollower(unit, invocation, cursor, journalctl) as follower:
                follow(watch, follower, params)
        watched = round(time.monotonic() - started, 3)
        judged = scanner.state() if path else None
        report = scanner.finish()
        health = None
        if params["health_url"]:
            health = probe(params["health_url"], params["health_timeout"], params["validate_certs"])
            watch.refresh(force=True)
    except (SystemdError, HealthURLError) as exc:
        module.fail_json(msg=str(exc))

    if path and invocation and judged is not None and follower is not None and follower.cursor:
        times = dict(sorted(watch.fatal_times.items())[:MAX_FATAL_TIMES])
        try:
            journal_state.save(path, unit, invocation, follower.cursor, judged, {"fatal_times": times})
            watch.reading["state_saved"] = True
        except OSError as exc:
            module.warn(f"the journal state {path} could not be kept ({exc}): the next precheck reads the journal from the start")
    watch.stamp(report)
    report["reading"] = watch.reading
    report["cursor"] = follower.cursor if follower else params["cursor"]
    report["records"] = follower.count if follower else 0
    report["invocation_id"] = invocation
    report["last_realtime"] = follower.realtime if follower else None
    report["gap"] = follower.gap if follower else None
    if params["tail_lines"] > 0:
        report["tail"] = list(watch.tail)
    module.exit_json(changed=False, unit=watch.state, journal=report, health=health, watched=watched)


if __name__ == "__main__":
    main()
