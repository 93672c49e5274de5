#!/usr/bin/python
# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: run_record
short_description: Read or advance the run record a rollout keeps on the managed host
version_added: 0.2.0
description:
  - A rollout (the P(inferops.runbooks.sglang_restart#role) role) writes a run record on the host before each
    step that changes something - which run, which step, the files it changes with the hashes of their previous
    and new content, the invocation before the stop, whether the host was taken out of rotation and how to put it
    back. A controller killed at any step leaves the record behind; the next run reads it and repairs.
  - The record is C(<state_dir>/<unit>.json), replaced whole and durably (written aside, synced, renamed). It never
    holds a file's content or a key.
  - A record that is corrupt, from a newer collection version or names another unit is reported in RV(problem)
    and otherwise ignored; advancing it then starts a new one.
  - With O(files), also returns the hash of each file and of its C(.previous) copy, so the controller can tell
    which of an earlier run's writes happened.
author:
  - inferops.runbooks contributors (@inferops)
options:
  unit:
    description: The systemd unit the record is about.
    type: str
    required: true
  state_dir:
    description: The directory of the collection's state on the host.
    type: path
    default: /var/lib/inferops
  step:
    description:
      - Advance the record to this step of run O(run_id) (written before the step is taken). Omit to only read.
      - The earlier record's pending undo work (a host out of rotation, a change never proven) is carried over
        unless O(updates) settles it.
    type: str
    choices: [silence, drain, deploy, restart, start, wait, smoke, passed, rollback, rollback_wait, rolled_back, rollback_failed, failed, restore, done]
  run_id:
    description: The run writing the record. Required with O(step).
    type: str
  updates:
    description:
      - Fields of the record this step sets - C(change) (C(files) with C(path), C(kind), C(existed),
        C(previous_sha256), C(new_sha256); C(proven), C(settled)), C(change_flags) (C(proven) and/or C(settled)
        set on the change the host's record already holds), C(traffic) (C(out), C(router_url), C(worker),
        C(hooks)), C(before_invocation), C(outcome), C(repairs), C(silence) (the run's Alertmanager silence -
        C(id), C(url), C(host), C(ends_at); null once expired).
    type: dict
    default: {}
  files:
    description:
      - Files whose content hash (and the hash of their C(.previous) copy) to return in RV(host_files), besides
        the files of the record's change, which are always hashed.
    type: list
    elements: path
    default: []
attributes:
  check_mode:
    support: full
    description: In check mode the record is read, never written.
  diff_mode:
    support: none
    description: The record is state, not configuration.
seealso:
  - module: inferops.runbooks.unit_info
"""

EXAMPLES = r"""
- name: Read what an earlier run left, with the hashes of the files it changed
  inferops.runbooks.run_record:
    unit: sglang.service
    files: [/etc/systemd/system/sglang.service.d/50-inferops-deploy.conf]
  register: record

- name: Note, before the router is called, that the host is about to leave the rotation
  inferops.runbooks.run_record:
    unit: sglang.service
    run_id: "{{ run_id }}"
    step: drain
    updates:
      traffic: {out: true, router_url: "http://router:30080", worker: {url: "http://10.0.0.5:30000"}}
"""

RETURN = r"""
path:
  description: Where the record is.
  returned: always
  type: str
  sample: /var/lib/inferops/sglang.service.json
record:
  description: The record after this call (the one read when O(step) is omitted); null when there is none.
  returned: always
  type: dict
problem:
  description: Why a record on the host was ignored (corrupt, newer version, another unit); null when none was.
  returned: always
  type: str
lease:
  description: The host's lease (M(inferops.runbooks.run_lease)) - the run that holds the host now; null when none does.
  returned: always
  type: dict
lease_holder:
  description: RV(lease) in words - run, from where, since when, last heartbeat.
  returned: always
  type: str
lease_age:
  description: Seconds since the last heartbeat of RV(lease); null without one.
  returned: always
  type: float
host_files:
  description: For each of O(files) and of the record's changed files, C(sha256) of the file and C(previous_sha256) of its C(.previous) copy (null when absent).
  returned: always
  type: dict
  sample: {"/etc/systemd/system/sglang.service.d/50-inferops-deploy.conf": {"sha256": "9f86d0...", "previous_sha256": null}}
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.inferops.runbooks.plugins.module_utils._hostcall import run_module  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.module_utils._hostcall.run_record import CALL  # noqa: E402


def main() -> None:
    module = AnsibleModule(argument_spec=CALL.spec, required_by=CALL.required_by, supports_check_mode=True)
    run_module(module, CALL)


if __name__ == "__main__":
    main()
