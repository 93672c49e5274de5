#!/usr/bin/python
# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: start_history
short_description: Record a start of an inference server in the host's start history, and learn from the earlier ones
version_added: 0.3.0
description:
  - Each host keeps the last O(size) starts of a unit in C(<state_dir>/<unit>.history.json), next to the run
    record (M(inferops.runbooks.run_record)); replaced whole and durably.
  - With O(invocation_id) and O(outcome), reads that invocation's journal and adds the start - outcome, total time,
    each phase's duration timed by the journal, the engine's own timings (SGLang's C(Engine startup timings),
    vLLM's C(... took N seconds)), model and engine version where the journal names them, a fingerprint of the
    unit's configuration (unit file, drop-ins, environment files, C(ExecStart), C(Environment); contents hashed,
    never stored), and the masked templates of the line groups with their counts (secrets in O(redact) taken out
    first). A start already in the history (the same invocation) is not added again.
  - Without O(invocation_id) it only reads.
  - Returns what the history teaches about the current configuration - each phase's stall limit and where it came
    from (the explicit O(stall_limits) first, then a limit learned from O(min_good) good starts or more, then
    O(stall_limit)), the good starts an ETA is computed from, and for the recorded start its slow phases and which
    of its templates are new since the last good starts.
  - A history that is corrupt, from a newer collection version or names another unit is reported in RV(problem)
    and otherwise ignored; recording then starts a new one.
author:
  - inferops.runbooks contributors (@inferops)
options:
  unit:
    description: The systemd unit; C(.service) is added to a name without a unit suffix.
    type: str
    default: sglang.service
  state_dir:
    description: The directory of the collection's state on the host.
    type: path
    default: /var/lib/inferops
  invocation_id:
    description: The invocation (32 hexadecimal digits) whose start to record. Omit to only read.
    type: str
  outcome:
    description: How the start ended (the wait's verdict). Required with O(invocation_id).
    type: str
    choices: [pass, fail]
  reason:
    description: Why it ended so (the wait's reason), kept with the start.
    type: str
  waited:
    description: Seconds the controller waited for the start, kept with it.
    type: float
  size:
    description: How many starts the history keeps (the oldest go first); at least 1.
    type: int
    default: 20
  min_good:
    description: Good starts on the same configuration needed before a phase's stall limit is learned; at least 1.
    type: int
    default: 3
  stall_factor:
    description: A learned stall limit is this many times the longest time of the phase in the recent good starts.
    type: float
    default: 1.5
  stall_floor:
    description: The least learned stall limit, in seconds.
    type: float
    default: 60
  slow_ratio:
    description: A phase of the recorded start that took this many times its usual (median) time or more is reported as slow.
    type: float
    default: 2
  fail_on_new:
    description:
      - The start is recorded as failed (reason C(new_lines)) when it passed but logged an unrecognized line group
        that none of the recent good starts logged (as the roles' C(fail_on_new) fails the run), so that the same
        line is not taken for a known one next time.
    type: bool
    default: false
  stall_limit:
    description: The stall limit of a phase that has neither an explicit nor a learned one.
    type: float
    default: 900
  stall_limits:
    description: Explicit stall limits per phase (phase name to seconds); they win over learned ones.
    type: dict
    default: {}
  engine:
    description: Which engine's rule pack reads the journal.
    type: str
    choices: [auto, sglang, vllm]
    default: sglang
  extra_rules:
    description: The user's rules, as the wait used them (which lines form groups, and of which class).
    type: list
    elements: dict
    default: []
  disabled_rules:
    description: Ids of shipped rules switched off.
    type: list
    elements: str
    default: []
  redact:
    description: Secrets taken out of every template, model name and message before anything is stored.
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
    description: In check mode the history is read and the start is built, never written.
  diff_mode:
    support: none
    description: The history is state, not configuration.
seealso:
  - module: inferops.runbooks.run_record
  - module: inferops.runbooks.wait_ready
"""

EXAMPLES = r"""
- name: What the earlier starts of this configuration teach (stall limits, the ETA's baseline)
  inferops.runbooks.start_history:
    unit: sglang.service
  register: history

- name: Record the start just waited on
  inferops.runbooks.start_history:
    unit: sglang.service
    invocation_id: "{{ wait.invocation_id }}"
    outcome: "{{ wait.verdict }}"
    reason: "{{ wait.reason }}"
    waited: "{{ wait.elapsed }}"
"""

RETURN = r"""
path:
  description: Where the history is.
  returned: always
  type: str
  sample: /var/lib/inferops/sglang.service.history.json
problem:
  description: Why a history on the host was ignored (corrupt, newer version, another unit); null when none was.
  returned: always
  type: str
config:
  description: The fingerprint of the unit's current configuration (16 hexadecimal digits).
  returned: always
  type: str
added:
  description: Whether the start was added (false when only read, in check mode, or when it was already in the history).
  returned: always
  type: bool
entry:
  description: The recorded start (null when only read).
  returned: always
  type: dict
starts:
  description: How many starts the history holds now.
  returned: always
  type: int
good_starts:
  description: The recent good starts on the current configuration, oldest first, as C(phases) and C(total) (what an ETA is computed from).
  returned: always
  type: list
  elements: dict
stall_limits:
  description: Each phase's stall limit, C(limit) in seconds, C(source) (C(explicit), C(learned) or C(default)) and C(detail).
  returned: always
  type: dict
  sample: {"loading_weights": {"limit": 255.0, "source": "learned", "detail": "1.5x the longest of the last 4 good starts (2m50s)"}}
learned_stall_limits:
  description: The explicit and learned limits as a phase-to-seconds mapping, for O(inferops.runbooks.wait_ready#module:stall_limits).
  returned: always
  type: dict
summary:
  description:
    - For the recorded start, compared with the history before it - C(slow) phases (C(text) as
      C(loading weights took 3.1x its usual 2m50s)), C(templates) (each with C(status) C(seen), C(new),
      C(failed_only) or C(unknown), and C(text) as C(seen in 9 of the last 9 good starts)), and the baseline.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.inferops.runbooks.plugins.module_utils._hostcall import run_module  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.module_utils._hostcall.start_history import CALL  # noqa: E402


def main() -> None:
    module = AnsibleModule(argument_spec=CALL.spec, required_by=CALL.required_by, supports_check_mode=True)
    run_module(module, CALL)


if __name__ == "__main__":
    main()
