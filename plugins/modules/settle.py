#!/usr/bin/python
# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: settle
short_description: The last phase of a rollout - back into the router, the run record settled, the report assembled
version_added: 0.3.0
description:
  - The end of a rollout by the role P(inferops.runbooks.sglang_restart#role) on one host, in one task. Its input is
    its arguments - the prepare phase's O(context), what the restart phase returned (O(restarted)), the failures the
    role's rescues kept; use the role rather than this module.
  - Once a configuration that passed serves (the new one, the previous one after a rollback, or the one that was
    never stopped) and the host was taken out of the router, notes the step in the run record
    (M(inferops.runbooks.run_record)), adds the worker back to the router with the registration the run record kept
    (and the server's API key), and waits until the router lists it. The router is called from the controller. A
    restore hook that failed leaves the worker out of the router.
  - Settles the run record where the host ends - C(done) when nothing is left to undo, otherwise the step for the
    precheck to report and the next run to repair.
  - Assembles the host's report and its verdict from what the run observed, with the outcome of putting the host
    back.
  - A router that refuses the worker is reported (the key C(failure) of RV(traffic)) and fails the host through its
    report; a run record that cannot be written fails the task. It sets no facts - the role registers its result.
author:
  - inferops.runbooks contributors (@inferops)
attributes:
  action:
    support: full
    description: Runs on the controller; calls the router from the controller and the run record's module on the managed host.
  async:
    support: none
    description: The phase runs within its task.
  check_mode:
    support: full
    description: In check mode nothing is put back or written; the report is assembled.
  diff_mode:
    support: none
    description: Nothing it does is a file's change.
  platform:
    support: full
    platforms: posix
    description: A host with systemd.
options:
  context:
    description: What the prepare phase (M(inferops.runbooks.prepare)) returned as RV(inferops.runbooks.prepare#module:context).
    type: dict
    required: true
  restarted:
    description: What the restart phase (M(inferops.runbooks.restart)) returned.
    type: dict
    default: {}
  failure:
    description: A failed step that a rescue of the role kept (its run id, stage, step and result); one of another run is ignored.
    type: raw
  traffic_failure:
    description: A restore hook that failed, as a rescue of the role kept it (its run id, step and message).
    type: raw
  unit:
    description: The unit as given (C(sglang_restart_unit)), named in the report of a run whose variables were refused.
    type: raw
  report_dir:
    description: The report directory as given (C(sglang_restart_report_dir)), for the report of a run whose variables were refused.
    type: raw
seealso:
  - module: inferops.runbooks.restart
  - module: inferops.runbooks.run_record
  - module: inferops.runbooks.publish_report
"""

EXAMPLES = r"""
# Inside the role inferops.runbooks.sglang_restart, after the restore hooks:
- name: Settle | Put the host back into the router, note where it ends, assemble its report
  inferops.runbooks.settle:
    context: "{{ prepared.context }}"
    restarted: "{{ restarted }}"
  register: settled
"""

RETURN = r"""
decision:
  description:
    - The rollout's decisions with the outcome of putting the host back - C(state), C(serving), C(restore_wanted),
      C(record_wanted), C(settled_step) and the others of the restart's decision.
  returned: always
  type: dict
  sample: {"state": "new_configuration", "serving": true, "restore_wanted": true, "settled_step": "done"}
traffic:
  description:
    - C(restored) - true when the worker is back in the router, false when putting it back was wanted and did not
      happen, null when it was not wanted; C(failure) - the failed step and its message (a restore hook's or the
      router's), or null.
  returned: always
  type: dict
  sample: {"restored": true, "failure": null}
report:
  description: The host's report, with its verdict and reason (the same keys as the report files).
  returned: always
  type: dict
  sample: {"verdict": "pass", "reason": "ready", "state": "new_configuration"}
fleet_start:
  description:
    - The host's start as its peers' reports compare with it, by host, with its C(config) and C(total) - empty when
      the start failed or was not added to the start history in this run.
  returned: always
  type: dict
  sample: {"gpu-node-01": {"config": "68a28f1d0d19fb9c", "total": 412.3}}
report_dir:
  description: Where the report files go - the checked C(sglang_restart_report_dir), or as given when the variables were refused.
  returned: always
  type: str
  sample: /var/log/inferops
steps:
  description: What each step did - its name, C(ok), C(failed) or C(skipped), and its seconds (shown with C(-v)).
  returned: always
  type: list
  elements: dict
  sample: [{"step": "Settle | Add this worker to the router again", "outcome": "ok", "seconds": 1.02}]
"""
