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
      - While the answer stays the same and is not 200 (a server warming up answers 503, or not in time), the
        time between probes doubles with each, up to 5 seconds (or O(health_every) when longer).
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
  lease_run_id:
    description:
      - The rollout that holds the host's lease (C(<unit>.lease) in O(state_dir), see M(inferops.runbooks.run_lease)).
        The look renews its heartbeat and returns RV(lease).
    type: str
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
lease:
  description:
    - With O(lease_run_id), C(held) (whether that run still holds the host's lease, its heartbeat renewed) and
      C(holder) (who holds it instead, in words).
  returned: when O(lease_run_id) is given
  type: dict
python:
  description: The Python interpreter that ran the call on the managed host (M(inferops.runbooks.wait_ready) runs its later looks with it).
  returned: always
  type: str
"""

import sys  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.inferops.runbooks.plugins.module_utils._probe import ProbeError, argument_spec, look  # noqa: E402


def main() -> None:
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    try:
        result = look(module.params, lambda name: module.get_bin_path(name, required=True), lambda argv: module.run_command(list(argv)))
    except ProbeError as exc:
        module.fail_json(msg=str(exc))
    for warning in result.pop("warnings", []):
        module.warn(warning)
    module.exit_json(python=sys.executable, **result)


if __name__ == "__main__":
    main()
