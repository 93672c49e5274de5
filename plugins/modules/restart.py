#!/usr/bin/python
# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: restart
short_description: The restart phase of a rollout - stop or restart the unit, follow its cold start, prove it generates
version_added: 0.3.0
description:
  - The restart phase of the role P(inferops.runbooks.sglang_restart#role) on one host, in one task. Its input is its
    arguments - the prepare phase's O(context) (the checked variables, the unit before the run, the run record's plan),
    the failure a rescue kept, and the other nodes' O(peers); use the role rather than this module.
  - Notes in the run record on the host the invocation before the stop (M(inferops.runbooks.run_record)); reads the
    host's start history (M(inferops.runbooks.start_history)) for the stall limits and good starts it teaches; stops
    the unit and waits for its old main process, the rest of its control group (what is left gets the unit's
    C(KillSignal), then SIGKILL - M(inferops.runbooks.unit_leftovers)), its GPUs (where C(nvidia-smi) is on the host,
    no compute process may hold them) and its port (with C(sglang_restart_stop_first), and always for the nodes of a
    deployment), then starts it, or restarts it in place. For vLLM it first reads whether the server sleeps
    (M(inferops.runbooks.server_sleep)) and says so; the new start is gated as usual.
  - Follows the new start until it is ready (M(inferops.runbooks.wait_ready), with its progress lines); generates one
    token through the completions API from the target (with C(sglang_restart_smoke_test), on node 0); adds the start
    to the start history; measures it against the host's baseline (M(inferops.runbooks.perf_canary), with
    C(sglang_restart_canary)); notes in the run record that the configuration passed.
  - The run record names each step before it is taken, so that a controller killed at any point leaves the next run
    what it needs to repair. A host whose configuration is already in place is verified in place with the same gates,
    and a start an earlier run began is waited on, not restarted.
  - The nodes of a multi-node deployment run it at the same time, in the same task, each in its own worker process, and
    go through its parts together through a directory on the controller - each node goes on only once every other node
    got through its preflight (the prepare phase), all stop before any starts, and all start before the waits. A node
    that fails tells the others at once; they stop there, reason C(peer_failed).
  - A change whose start failed, or whose canary failed against the host's baseline, is rolled back in the same phase
    - the previous files put back from C(<file>.previous) on the host (a change an earlier run wrote is put back from
    that run's backup), systemd reloaded, a unit that does not load refused; when the failed start had stopped the
    server, the previous configuration started and followed with the same gates, its start added to the start history
    with the previous configuration's fingerprint, and the run record ended at C(rolled_back) or C(rollback_failed).
  - After a step that failed before this phase (kept by the role as C(sglang_restart_failure)), nothing is stopped or
    started; a change already deployed is rolled back.
  - A step that fails is kept for the report (the key C(failure) of RV(seen)) instead of failing the task; the role puts
    the host back into rotation when it serves (M(inferops.runbooks.settle)), and fails the host after its report. A run
    record that cannot be settled after a rollback fails the task.
author:
  - inferops.runbooks contributors (@inferops)
attributes:
  action:
    support: full
    description: Runs on the controller and calls the collection's modules on the managed host.
  async:
    support: none
    description: The wait shows progress lines as it goes.
  check_mode:
    support: full
    description: Nothing is stopped or started in check mode; the role says what a real run would do.
  diff_mode:
    support: none
    description: Nothing to compare.
  platform:
    support: full
    platforms: posix
    description: A host with systemd and journald.
options:
  context:
    description: What the prepare phase (M(inferops.runbooks.prepare)) returned as RV(inferops.runbooks.prepare#module:context).
    type: dict
    required: true
  failure:
    description: A failed step that a rescue of the role kept (its run id, stage, step and result); one of another run is ignored.
    type: raw
  peers:
    description:
      - For each node of this host's deployment, what its prepare phase returned for the others
        (RV(inferops.runbooks.prepare#module:peer) - its run id, whether it got through its preflight).
    type: dict
    default: {}
notes:
  - It sets no facts. The role registers its result, and reads what it saw from RV(seen); the role's report is the
    interface to read.
seealso:
  - module: inferops.runbooks.wait_ready
  - module: inferops.runbooks.settle
  - module: inferops.runbooks.precheck
"""

EXAMPLES = r"""
# Inside the role inferops.runbooks.sglang_restart, after its variables were checked and the change deployed:
- name: Restart, follow the cold start, generate one token, measure it
  inferops.runbooks.restart:
    context: "{{ prepared.context }}"
    failure: "{{ kept_failure | default({}) }}"
    peers: "{{ {inventory_hostname: prepared.peer} }}"
  register: restarted
"""

RETURN = r"""
seen:
  description:
    - What the phase saw, each key present once its step ran - C(stopped), C(drain), C(record), C(start_history_before),
      C(wait), C(smoke), C(smoke_journal), C(start_history), C(perf_canary), C(outcome) (C(start_failed),
      C(new_start_failed), C(canary_failed), C(smoke_failed)), C(failure) (the failed step's stage, name and result),
      C(rollback) (what the rollback saw - C(files_restored), C(started_at), C(before), C(wait), C(canary), C(history),
      C(record), C(passed), C(failure)), C(rollout) (what the rollout observed, for its decisions after this phase).
  returned: success
  type: dict
  sample: {"stopped": true, "wait": {"verdict": "pass", "reason": "ready"}, "outcome": {"start_failed": false}}
steps:
  description: What each step did - its name, C(ok), C(failed) or C(skipped), and its seconds (shown with C(-v)).
  returned: always
  type: list
  elements: dict
  sample: [{"step": "Restart | Restart the unit in place", "outcome": "ok", "seconds": 0.62, "ended": 1796313384.2}]
lease_renewed_at:
  description:
    - When this run last renewed its lease on the host (this phase, or the wait's looks), in seconds since the epoch;
      M(inferops.runbooks.settle) does not renew it again within a few seconds of it. None when the run holds no lease.
  returned: success
  type: float
  sample: 1796313390.52
"""
