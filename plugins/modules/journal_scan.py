#!/usr/bin/python
# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: journal_scan
short_description: Classify a systemd unit's journal for an inference server's start
version_added: 0.1.0
description:
  - Reads a unit's journal records with C(journalctl -o export) and classifies every line with the collection's
    rules into fatal errors, allowlisted noise, unrecognised warnings, start phases, progress bars and the ready marker.
  - Reads the unit's current invocation by default (C(_SYSTEMD_INVOCATION_ID) from C(systemctl show -p InvocationID)),
    or another invocation, or every invocation; optionally only the records after a cursor or since a time.
  - Streams the records through the classifier; the journal is never held in memory.
  - Reports, never fails on what it reads; check RV(verdict) (or use M(inferops.runbooks.wait_ready)).
author:
  - inferops.runbooks contributors (@inferops)
extends_documentation_fragment:
  - inferops.runbooks.unit
  - inferops.runbooks.classifier
options:
  invocation:
    description:
      - V(current) reads the unit's current invocation, V(all) every invocation the journal holds,
        and an invocation id (32 hexadecimal digits) that invocation.
    type: str
    default: current
  cursor:
    description:
      - Read only the records after this journal cursor (the RV(cursor) of a previous run).
    type: str
  since:
    description:
      - Read only the records since this time, in C(journalctl --since) syntax (V(-10min), V(2025-03-08 12:00:00)).
    type: str
  line_offset:
    description:
      - Number the lines from this offset (the RV(lines) of a previous run that read up to O(cursor)).
    type: int
    default: 0
  tail_lines:
    description:
      - Also return the text of the last this many lines read, as RV(last_lines).
    type: int
    default: 0
  journal_grep:
    description:
      - Read with C(journalctl --grep); journalctl itself leaves out the records that hold nothing the rules
        look for, which are only counted, and a record that opens a traceback has the records after it read
        whole. The report is the one a full read gives (RV(reading) says how it was read).
      - Where journalctl cannot search (built without PCRE2), or for O(invocation=all) or O(since), the
        records are read the usual way.
    type: bool
    default: false
seealso:
  - module: inferops.runbooks.service_probe
  - module: inferops.runbooks.wait_ready
"""

EXAMPLES = r"""
- name: Classify the current start of the SGLang server
  inferops.runbooks.journal_scan:
    unit: sglang.service
    engine: sglang
    extra_rules:
      - id: local-frobnicator-state
        pattern: Frobnicator returned error state \d+, continuing
        reason: Our frobnicator reports a recoverable state at start; vendor ticket 1234.
        expires: "2026-12-31"
  register: scan

- name: Show what was found
  ansible.builtin.debug:
    msg: "{{ scan.verdict }}: {{ scan.reason }} ({{ scan.allowlisted | length }} allowlisted line families)"

- name: Only what came since the last scan
  inferops.runbooks.journal_scan:
    unit: sglang.service
    invocation: "{{ scan.invocation_id }}"
    cursor: "{{ scan.cursor }}"
    line_offset: "{{ scan.lines }}"
"""

RETURN = r"""
verdict:
  description: V(fail) on a fatal event (or an unrecognised one with O(strict)), V(pass) when the ready marker
    was seen and nothing fatal, V(pending) otherwise.
  returned: always
  type: str
  sample: pass
reason:
  description: Why, in one line.
  returned: always
  type: str
  sample: ready marker seen and nothing fatal
ready:
  description: Whether the ready marker was seen.
  returned: always
  type: bool
ready_line:
  description: The line number of the ready marker, or null.
  returned: always
  type: int
phase:
  description: The last start phase reached.
  returned: always
  type: str
  sample: warming_up
phases:
  description: Each phase reached, with the line and the engine's timestamp where it began.
  returned: always
  type: list
  elements: dict
progress:
  description: The latest progress bar state (phase, description, percent, done, total, text, line), or null.
  returned: always
  type: dict
fatal:
  description:
    - Fatal events, one per message family, deduplicated across ranks and repeats, with C(message), C(count), C(ranks),
      C(rule), C(reason), C(level), C(first_line), C(last_line), C(first_timestamp), C(last_timestamp), C(key)
      and, for a traceback, C(context) and C(traceback) (its lines).
  returned: always
  type: list
  elements: dict
allowlisted:
  description: Lines that look alarming but a rule says are harmless, as events like RV(fatal).
  returned: always
  type: list
  elements: dict
  sample:
    - message: "CUTE_DSL - WARNING - [handle_import_error] - Unexpected error during package walk: cutlass.cute.experimental"
      count: 8
      rule: sglang-cute-dsl-package-walk
request_error:
  description:
    - Lines about one request each (a model name that does not exist, a bad parameter, a tool-call parser failing
      on one output), with the traceback logged right after such a line, as events like RV(fatal); never a failure alone.
  returned: always
  type: list
  elements: dict
survived:
  description:
    - ERROR lines after which the engine's own code carries on (it falls back, retries, skips one item or answers
      one request with an error; read from the engine's source), as events like RV(fatal) with C(file), the engine's
      source file that logs the line - warnings, never a failure alone.
  returned: always
  type: list
  elements: dict
unrecognized:
  description: Warnings and errors no rule knows, as events like RV(fatal), each with a C(suggested_rule) to allowlist it.
  returned: always
  type: list
  elements: dict
counts:
  description: Lines per class (fatal, allowlisted, request_error, survived, unrecognized, ready, progress, info).
  returned: always
  type: dict
lines:
  description: The number of the last line read (O(line_offset) plus the lines read).
  returned: always
  type: int
blob_lines:
  description: Lines journalctl would show as C([blob data]).
  returned: always
  type: int
dropped_events:
  description: Events not kept because a class already held the maximum number.
  returned: always
  type: int
stale_rules:
  description: Rules past their C(expires) date.
  returned: always
  type: list
  elements: dict
strict:
  description: Whether O(strict) was on.
  returned: always
  type: bool
cursor:
  description: The cursor of the last record read (O(cursor) when nothing new was read), to continue from.
  returned: always
  type: str
invocation_id:
  description: The invocation read (null for O(invocation=all), or when the unit never ran).
  returned: always
  type: str
unit:
  description: The unit read.
  returned: always
  type: str
records:
  description: The number of journal records read.
  returned: always
  type: int
reading:
  description:
    - How the journal was read, as in M(inferops.runbooks.service_probe)'s C(journal.reading) (C(grep),
      C(records_read), C(fallback)).
  returned: always
  type: dict
last_lines:
  description: The text of the last O(tail_lines) lines read (with O(journal_grep), of the lines read or counted).
  returned: when O(tail_lines) > 0
  type: list
  elements: str
"""

import typing as t  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import RuleError, Scanner, check_rules  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.module_utils._option_specs import CLASSIFIER_OPTIONS, UNIT_OPTIONS, merged  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.module_utils._systemd import (  # noqa: E402
    GrepRead,
    GrepUnavailable,
    JournalSlice,
    SystemdError,
    is_invocation_id,
    unit_name,
    unit_state,
)


def argument_spec() -> dict[str, t.Any]:
    spec = merged(UNIT_OPTIONS, CLASSIFIER_OPTIONS)
    spec.update(
        invocation={"type": "str", "default": "current"},
        cursor={"type": "str", "no_log": False},
        since={"type": "str"},
        line_offset={"type": "int", "default": 0},
        tail_lines={"type": "int", "default": 0},
        journal_grep={"type": "bool", "default": False},
    )
    return spec


def main() -> None:
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    params = module.params
    try:
        unit = unit_name(params["unit"])
        # the user's rules tried on adversarial lines first: one that backtracks without bound fails the task, named
        rules = check_rules(params["engine"], params["extra_rules"], params["disabled_rules"], shipped=False)
    except (RuleError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    invocation = params["invocation"].strip()
    if invocation not in ("current", "all") and not is_invocation_id(invocation):
        module.fail_json(msg=f"invocation must be current, all or an invocation id (32 hexadecimal digits), got {invocation!r}")
    journalctl = module.get_bin_path("journalctl", required=True)

    scanner = Scanner(rules, strict=params["strict"], line_offset=params["line_offset"], secrets=params["redact"])
    invocation_id: str | None = None
    try:
        if invocation == "current":
            systemctl = module.get_bin_path("systemctl", required=True)
            invocation_id = unit_state(unit, lambda argv: module.run_command(list(argv)), systemctl).get("InvocationID") or None
            if invocation_id is None:
                module.warn(f"{unit} has no current invocation (it never ran): nothing to read")
        elif invocation != "all":
            invocation_id = invocation
        reading: dict[str, t.Any] = {"grep": False, "records_read": 0, "fallback": None}
        grep = None
        pattern = rules.grep_pattern if params["journal_grep"] and invocation_id is not None and not params["since"] else None
        if params["journal_grep"] and pattern is None:
            reading["fallback"] = "no invocation to search, a time to start from, or a rule without a word to search for"
        if pattern is not None and invocation_id is not None:
            feed = scanner.feed_records
            grep = GrepRead(scanner, lambda record: feed((record,)), unit, invocation_id, pattern, params["cursor"], params["tail_lines"], journalctl)
            try:
                grep.read()
                reading.update(grep=True, records_read=grep.read_records, counted_by=grep.counted_by)
            except GrepUnavailable as exc:
                reading["fallback"], grep = str(exc), None
                scanner = Scanner(rules, strict=params["strict"], line_offset=params["line_offset"], secrets=params["redact"])
        slice_ = JournalSlice(scanner, unit, invocation_id, params["cursor"], params["since"], params["tail_lines"], journalctl)
        if grep is None and (invocation_id is not None or invocation == "all"):
            reading["records_read"] = slice_.read()
        report = scanner.finish()
        cursor, records = (grep.cursor, grep.count) if grep is not None else (slice_.cursor, slice_.records)
    except SystemdError as exc:
        module.fail_json(msg=str(exc))

    result: dict[str, t.Any] = dict(report)
    result.update(cursor=cursor, invocation_id=invocation_id, unit=unit, records=records, reading=reading)
    if params["tail_lines"] > 0:
        # the slice's tail is redacted as it is read; the grep read's is the journal's text
        tail = [scanner.redact(text) for text in grep.tail] if grep is not None else list(slice_.tail)
        result["last_lines"] = tail[-params["tail_lines"] :]
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
