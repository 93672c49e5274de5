#!/usr/bin/python
# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: rollback
short_description: The rollback phase of a rollout - put the previous configuration back and prove it serves
version_added: 0.3.0
description:
  - The rollback of a failed change by the role P(inferops.runbooks.sglang_restart#role) on one host, in one task. Its
    input is the role's checked variables and what the role's earlier steps left (the files the change wrote, whether
    the unit was stopped); use the role rather than this module.
  - Notes the rollback in the run record (M(inferops.runbooks.run_record)); stops the unit of the failed start; puts
    the previous files back from C(<file>.previous) on the host (a change an earlier run wrote is put back from that
    run's backup) and removes the files that did not exist; reloads systemd and refuses a unit that does not load.
  - When the failed start had stopped the server, starts it on the previous configuration and follows that start
    with the same gates (M(inferops.runbooks.wait_ready)), one token through the completions API, and the canary
    beside the failed start's (it never fails the rollback).
  - Adds the rollback's start to the host's start history with the previous configuration's fingerprint, and ends
    the run record at C(rolled_back) or C(rollback_failed).
  - A step that fails is kept for the report (the key C(failure) of RV(seen)) instead of failing the task. It sets no facts - the
    role registers its result.
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
    description: Skipped in check mode.
  diff_mode:
    support: none
    description: The files are put back from their backups on the host.
  platform:
    support: full
    platforms: posix
    description: A host with systemd and journald.
options: {}
seealso:
  - module: inferops.runbooks.restart
  - module: inferops.runbooks.run_record
"""

EXAMPLES = r"""
# Inside the role inferops.runbooks.sglang_restart, when its decision says so:
- name: Roll back a failed change
  inferops.runbooks.rollback:
  when: sglang_restart__rollback_wanted
"""

RETURN = r"""
seen:
  description:
    - What the rollback saw - C(files_restored), C(started_at) (null when the unit was not started again),
      C(before) (the unit after the files were put back), C(wait), C(canary), C(history), C(record), C(passed),
      C(failure) (the failed step's name and message, or null).
  returned: success
  type: dict
  sample: {"files_restored": true, "started_at": 1796313384.2, "wait": {"verdict": "pass"}, "passed": true, "failure": null}
steps:
  description: What each step did - its name, C(ok), C(failed) or C(skipped), and its seconds (shown with C(-v)).
  returned: always
  type: list
  elements: dict
  sample: [{"step": "Rollback | Reload systemd", "outcome": "ok", "seconds": 0.35}]
"""
