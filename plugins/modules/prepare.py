#!/usr/bin/python
# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: prepare
short_description: The first phase of a rollout, up to the drain - check, read, reconcile, compare and deploy
version_added: 0.3.0
description:
  - The first phase of the role P(inferops.runbooks.sglang_restart#role) on one host, in one task, with the role's
    variables (C(sglang_restart_*)) as its input.
  - Notes the run's start time and id and forgets what an earlier run of the role in the same play left.
  - Checks every variable and rule on the controller (M(inferops.runbooks.check_options)); on the play's first host,
    those of every host of the play. A refusal touches nothing on the host; it returns RV(refused) for the role to
    report it and fail the host.
  - Reads the unit (M(inferops.runbooks.unit_info)) and refuses a unit that is not loaded.
  - Renders the change on the controller (a drop-in and/or an environment file, from text or a template relative to
    the playbook's directory, rendered with the role's variables as C(lookup('template')) renders it), reads the run
    record an earlier run left with the hashes of the files it names (M(inferops.runbooks.run_record)), reconciles it
    with the host (what that run left to repair is said, and a rollback it left cut short is completed first),
    reads the files the change replaces and compares them with the change.
  - Takes over a host an earlier run left out of rotation (put back once it serves a configuration that passed).
  - Deploys a change - notes it in the run record before writing it, keeps the previous content as
    C(<file>.previous), writes the files, reloads systemd and refuses a change that breaks the unit
    (C(systemctl show), and C(systemd-analyze verify) unless C(sglang_restart_verify_unit=false)), all before
    anything is stopped. C(--diff) shows a drop-in, never an environment file.
  - A step that fails is kept as the fact C(sglang_restart_failure) (its stage, its name and its result) for the
    rest of the role - rollback, restore, report - instead of failing the task.
  - Returns the facts the rest of the role reads (C(sglang_restart_*)), named and shaped as the role's tasks set them.
author:
  - inferops.runbooks contributors (@inferops)
attributes:
  action:
    support: full
    description: Runs on the controller and calls the collection's and ansible-core's modules on the managed host.
  async:
    support: none
    description: Each step takes seconds.
  check_mode:
    support: full
    description:
      - Every read runs in check mode as well; the change's write runs in check mode (with C(--diff), it shows what
        would change); nothing else is written. The phase then says what a real run would do.
  diff_mode:
    support: full
    description: Shows the change of a drop-in; never an environment file's, which may hold secrets.
  platform:
    support: full
    platforms: posix
    description: A host with systemd.
options: {}
notes:
  - The role P(inferops.runbooks.sglang_restart#role) runs it; use the role rather than this module.
seealso:
  - module: inferops.runbooks.check_options
  - module: inferops.runbooks.run_record
  - module: inferops.runbooks.unit_info
"""

EXAMPLES = r"""
- name: Check, read, reconcile and deploy the change (the role's variables are its input)
  inferops.runbooks.prepare:
  vars:
    sglang_restart_unit: sglang.service
    sglang_restart_dropin_content: |
      [Service]
      Environment=SGLANG_MEM_FRACTION=0.85
  register: prepared

- name: Say what failed
  ansible.builtin.debug:
    msg: "{{ prepared.failure.stage }}: {{ prepared.failure.result.msg }}"
  when: prepared.failure is not none
"""

RETURN = r"""
refused:
  description: Whether M(inferops.runbooks.check_options) refused the variables; nothing on the host was touched.
  returned: always
  type: bool
  sample: false
failure:
  description: The step that failed - its C(stage) (validate, preflight, render, deploy, verify), its C(step) and its C(result).
  returned: always
  type: dict
  sample: {"stage": "verify", "step": "Deploy | Refuse the change", "result": {"failed": true, "msg": "The new configuration breaks ..."}}
steps:
  description: What each step did - its name, C(ok), C(failed) or C(skipped), its seconds, and for some what it saw.
  returned: always
  type: list
  elements: dict
  sample: [{"step": "Preflight | Read the state of the unit before the restart", "outcome": "ok", "seconds": 0.38}]
context:
  description:
    - What the phases after this one take as their argument C(context) (M(inferops.runbooks.restart),
      M(inferops.runbooks.settle)) - C(sglang_restart_started_at), C(sglang_restart_run_id), C(sglang_restart_failure),
      C(sglang_restart_checked) (the checked variables and this host's node), C(sglang_restart_stage),
      C(sglang_restart_before), C(sglang_restart_record), C(sglang_restart_plan), C(sglang_restart_lease),
      C(sglang_restart_new_files), C(sglang_restart_deploy_files), C(sglang_restart_deploy_applied) and the others the
      run starts from.
  returned: always
  type: dict
  sample: {"sglang_restart_run_id": "20260101T120000Z-4242", "sglang_restart_deploy_applied": false}
peer:
  description:
    - What the other nodes of this host's deployment need of it (their restart phase's O(inferops.runbooks.restart#module:peers)) -
      C(run_id), C(reached_preflight).
  returned: always
  type: dict
  sample: {"run_id": "20260101T120000Z-4242", "reached_preflight": true}
ansible_facts:
  description:
    - C(sglang_restart_started_at) and C(sglang_restart_run_id) of RV(context), as facts of the host (and the host's
      Python when this phase discovered it); the rest of RV(context) is not set as facts.
  returned: always
  type: dict
"""
