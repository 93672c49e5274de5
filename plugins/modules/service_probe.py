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
  - With O(watch), keeps re-reading the journal and the unit's state about twice a second and returns as soon
    as something that matters changes, so that one connection covers several seconds of a wait.
  - This is the building block of M(inferops.runbooks.wait_ready); it never changes anything.
author:
  - inferops.runbooks contributors (@inferops)
extends_documentation_fragment:
  - inferops.runbooks.classifier
attributes:
  check_mode:
    support: full
    description: The module only reads.
  diff_mode:
    support: none
    description: Nothing to compare.
options:
  unit:
    description:
      - The systemd unit; C(.service) is added to a name without a unit suffix.
    type: str
    default: sglang.service
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
      - The call returns early on a fatal line or an opening traceback, the ready marker, a later phase,
        or a change of the unit's C(ActiveState), C(SubState), C(MainPID), C(NRestarts) or C(InvocationID).
    type: float
    default: 0
  health_url:
    description:
      - The health endpoint to probe once, at the end of the call. Omit it to skip the probe.
      - A refused connection is reported as RV(health.up=false), not as a failure.
    type: str
  health_timeout:
    description:
      - Seconds to wait for the health endpoint's answer; SGLang's can take up to 20 s.
    type: float
    default: 30
  health_early:
    description:
      - End O(watch) as soon as the server is known to be warming up or ready, to probe health at once.
      - Set to V(false) to watch the whole window (during a soak).
    type: bool
    default: true
  api_key:
    description:
      - Sent in an C(Authorization) header as a C(Bearer) token with the health probe. SGLang's health endpoints do not need it.
    type: str
  validate_certs:
    description:
      - Check the certificate of an C(https) health endpoint.
    type: bool
    default: true
  hold_traceback:
    description:
      - When the records read end inside a Python traceback that is still being written and the unit is
        active, stop the report and RV(journal.cursor) before the traceback's first line, so that the next
        call reads it whole; its first line is returned as RV(journal.pending_traceback).
    type: bool
    default: true
  tail_lines:
    description:
      - Also return the text of the last this many journal lines read, as RV(journal.tail).
    type: int
    default: 0
notes:
  - The journal is read with field matches (C(_SYSTEMD_UNIT=), C(_SYSTEMD_INVOCATION_ID=)) and C(--after-cursor),
    never C(-u) with a cursor, which could skip an entry on systemd before its December 2023 fix.
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
    pending_traceback:
      description: The first line of a traceback held back for the next call, or null.
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
watched:
  description: Seconds the call spent watching (without the health probe).
  returned: always
  type: float
"""

import time  # noqa: E402
import typing as t  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import RuleError, Scanner, load_rules  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.module_utils._health import HealthURLError, probe  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.module_utils._report import phase_index  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.module_utils._systemd import JournalSlice, SystemdError, identity, is_invocation_id, unit_name, unit_state  # noqa: E402

PHASE_CHOICES = ["starting", "loading_weights", "allocating_kv_cache", "capturing_cuda_graphs", "warming_up", "ready"]
STEP = 0.5
JOURNALD_LAG = 0.3
HEALTH_PHASES = ("warming_up", "ready")


def argument_spec() -> dict[str, t.Any]:
    return {
        "unit": {"type": "str", "default": "sglang.service"},
        "invocation_id": {"type": "str"},
        "cursor": {"type": "str", "no_log": False},
        "line_offset": {"type": "int", "default": 0},
        "phase": {"type": "str", "default": "starting", "choices": PHASE_CHOICES},
        "watch": {"type": "float", "default": 0},
        "health_url": {"type": "str"},
        "health_timeout": {"type": "float", "default": 30},
        "health_early": {"type": "bool", "default": True},
        "api_key": {"type": "str", "no_log": True},
        "validate_certs": {"type": "bool", "default": True},
        "hold_traceback": {"type": "bool", "default": True},
        "tail_lines": {"type": "int", "default": 0},
        "engine": {"type": "str", "default": "auto", "choices": ["auto", "sglang", "vllm"]},
        "extra_rules": {"type": "list", "elements": "dict", "default": []},
        "disabled_rules": {"type": "list", "elements": "str", "default": []},
        "strict": {"type": "bool", "default": False},
    }


def _matters(slice_: JournalSlice, known_phase: str, first: dict[str, t.Any], state: dict[str, t.Any]) -> bool:
    scanner = slice_.scanner
    if scanner.counts.get("fatal", 0) or slice_.traceback_open or scanner.ready_line is not None:
        return True
    if scanner.phases and phase_index(scanner.phase) > phase_index(known_phase):
        return True
    return identity(state) != identity(first)


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
    systemctl = module.get_bin_path("systemctl", required=True)
    journalctl = module.get_bin_path("journalctl", required=True)

    def make_scanner() -> Scanner:
        return Scanner(rules, strict=params["strict"], line_offset=params["line_offset"])

    try:
        first = state = unit_state(unit, systemctl=systemctl)
        invocation = params["invocation_id"] or state.get("InvocationID") or None
        slice_ = JournalSlice(make_scanner, unit, invocation, params["cursor"], tail_lines=params["tail_lines"], journalctl=journalctl)
        if invocation:
            slice_.read()
        deadline = started + params["watch"]
        while invocation and not _matters(slice_, params["phase"], first, state):
            known = max(phase_index(params["phase"]), phase_index(slice_.scanner.phase))
            if params["health_url"] and params["health_early"] and known >= phase_index("warming_up"):
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            time.sleep(min(STEP, remaining))
            slice_.read()
            state = unit_state(unit, systemctl=systemctl)
        if invocation and identity(state) != identity(first):
            # the process may have written its last lines just before it died: let journald store them
            time.sleep(JOURNALD_LAG)
            slice_.read()
        watched = round(time.monotonic() - started, 3)
        pending = slice_.pending_header
        hold = params["hold_traceback"] and state.get("ActiveState") == "active"
        report, cursor = slice_.finish(hold_traceback=hold)
        health = None
        if params["health_url"]:
            health = probe(params["health_url"], params["health_timeout"], params["api_key"], params["validate_certs"])
            state = unit_state(unit, systemctl=systemctl)
    except (SystemdError, HealthURLError) as exc:
        module.fail_json(msg=str(exc))

    report["cursor"] = cursor
    report["records"] = slice_.records
    report["invocation_id"] = invocation
    report["pending_traceback"] = pending if hold else None
    report["last_realtime"] = slice_.realtime
    if params["tail_lines"] > 0:
        report["tail"] = list(slice_.tail)[-params["tail_lines"] :]
    module.exit_json(changed=False, unit=state, journal=report, health=health, watched=watched)


if __name__ == "__main__":
    main()
