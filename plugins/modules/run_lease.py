#!/usr/bin/python
# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: run_lease
short_description: Take, renew, release or read the lease that says which rollout holds the managed host
version_added: 0.3.0
description:
  - A rollout (the P(inferops.runbooks.sglang_restart#role) role) takes the host's lease before it changes anything,
    renews its heartbeat while it works and releases it at its end, so that two rollouts started at the same time
    (a person, an AWX job template, a pipeline, a rulebook) never work on one host together.
  - The lease is C(<state_dir>/<unit>.lease), beside the run record, changed only under an exclusive C(flock) of
    C(<unit>.lease.lock). It holds the run's id, the controller's host name and process, the user, the AWX job id
    when there is one, when it was taken and its last heartbeat, in the host's clock.
  - A lease whose heartbeat is older than O(stale_after) belongs to a run that died; O(action=acquire) takes it
    over and returns it in RV(previous).
author:
  - inferops.runbooks contributors (@inferops)
options:
  unit:
    description: The systemd unit the lease is about.
    type: str
    required: true
  state_dir:
    description: The directory of the collection's state on the host.
    type: path
    default: /var/lib/inferops
  action:
    description:
      - V(read) returns the lease as it is; V(acquire) takes it for O(run_id) (or renews it when O(run_id) holds it
        already); V(renew) sets the heartbeat of O(run_id)'s lease; V(release) removes O(run_id)'s lease. Another
        run's lease is never changed, except a stale one taken over by V(acquire).
    type: str
    choices: [read, acquire, renew, release]
    default: read
  run_id:
    description: The run that takes, renews or releases the lease. Required unless O(action=read).
    type: str
  holder:
    description: Who takes the lease, kept in it for a second run's message - C(controller), C(pid), C(user), C(awx_job_id), C(playbook).
    type: dict
    default: {}
  stale_after:
    description: Seconds since its last heartbeat after which another run's lease is taken over by V(acquire).
    type: float
    default: 600
attributes:
  check_mode:
    support: full
    description: In check mode the lease is read, never written.
  diff_mode:
    support: none
    description: The lease is state, not configuration.
seealso:
  - module: inferops.runbooks.run_record
"""

EXAMPLES = r"""
- name: Take the host for this run, or learn who holds it
  inferops.runbooks.run_lease:
    unit: sglang.service
    action: acquire
    run_id: "{{ run_id }}"
    holder: {controller: "{{ lookup('pipe', 'hostname') }}", user: "{{ lookup('env', 'USER') }}"}
    stale_after: 600
  register: lease

- name: Stop here when another run holds the host
  ansible.builtin.fail:
    msg: "held by {{ lease.holder }}"
  when: lease.outcome == 'held'
"""

RETURN = r"""
path:
  description: Where the lease is.
  returned: always
  type: str
  sample: /var/lib/inferops/sglang.service.lease
lease:
  description: The lease after the call (the holder's when it is held by another run); null when there is none.
  returned: always
  type: dict
outcome:
  description: With O(action=acquire), V(taken), V(renewed), V(taken_over) (a stale lease) or V(held) (another run holds it).
  returned: when O(action=acquire)
  type: str
held:
  description: With O(action=renew), whether O(run_id) still holds the lease.
  returned: when O(action=renew)
  type: bool
released:
  description: With O(action=release), whether O(run_id)'s lease was removed.
  returned: when O(action=release)
  type: bool
age:
  description: Seconds since the last heartbeat of RV(lease); null without one.
  returned: always
  type: float
holder:
  description: RV(lease) in words - run, from where, since when, last heartbeat.
  returned: always
  type: str
  sample: run 20261204T181512-042 from ops@bastion (process 4242), since 2026-12-04 18:15:12 UTC, last heartbeat 12 s ago
previous:
  description: The stale lease that O(action=acquire) took over; null otherwise.
  returned: when O(action=acquire)
  type: dict
previous_holder:
  description: RV(previous) in words.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.inferops.runbooks.plugins.module_utils._hostcall import run_module  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.module_utils._hostcall.run_lease import CALL  # noqa: E402


def main() -> None:
    module = AnsibleModule(argument_spec=CALL.spec, required_by=CALL.required_by, supports_check_mode=True)
    run_module(module, CALL)


if __name__ == "__main__":
    main()
