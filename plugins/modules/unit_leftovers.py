#!/usr/bin/python
# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: unit_leftovers
short_description: After a unit's stop, wait for and kill what it left, and read who holds its GPUs
version_added: 0.1.0
description:
  - Run after C(systemctl stop) of an inference server's unit, before its next start. systemd's stop waits for the
    main process only; with C(KillMode=process) (or a child that escaped the kill) an engine process can outlive it
    and keep its GPU memory, and the next start dies of OOM.
  - Waits up to O(timeout) seconds until the unit's control group holds no process; then sends what is left the
    unit's C(KillSignal) (C(systemctl kill --signal=...)), waits 10 s, then C(SIGKILL) and 5 s more.
    In RV(leftovers), C(left) names what outlived the stop, C(signals) what was sent, C(remaining) what
    still runs.
  - Where C(nvidia-smi) is on the host, reads the compute processes of the unit's GPUs (the GPUs named by
    C(CUDA_VISIBLE_DEVICES) in the unit's C(Environment=) or environment files, by index or UUID; every GPU when it is
    unset) with C(nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_uuid --format=csv,noheader) and
    C(--query-gpu=index,uuid), again every second for up to O(gpu_wait) seconds until none is left.
  - Never fails for what it finds; the restart phase of M(inferops.runbooks.restart) decides (the start is not begun
    while a process of the unit runs or holds its GPUs). In check mode it reads and signals nothing.
author:
  - inferops.runbooks contributors (@inferops)
options:
  unit:
    description: The systemd unit, stopped before this runs.
    type: str
    required: true
  timeout:
    description: Seconds to wait for the unit's control group to empty before signalling what is left.
    type: float
    default: 120
  gpu_wait:
    description: Seconds to read the GPUs' compute processes again until none holds the unit's GPUs.
    type: float
    default: 10
  check_gpus:
    description: Read the GPUs with C(nvidia-smi) where it is on the host.
    type: bool
    default: true
seealso:
  - module: inferops.runbooks.unit_info
"""

EXAMPLES = r"""
- name: Stop the server
  ansible.builtin.systemd_service:
    name: vllm.service
    state: stopped

- name: Wait for and kill what the stop left, read the GPUs
  inferops.runbooks.unit_leftovers:
    unit: vllm.service
    timeout: 30
  register: leftovers

- name: Refuse to start while a process holds the GPUs
  ansible.builtin.assert:
    that: leftovers.leftovers.gpus.holders | default([]) | length == 0
"""

RETURN = r"""
leftovers:
  description:
    - C(control_group), C(left) (the processes in it after the wait, each C(pid) and C(name)), C(signals) (sent, in
      order), C(remaining) (still running after them), C(waited) (seconds).
    - C(gpus) - C(checked) (false with C(why_not) when C(nvidia-smi) is absent or failed), C(visible_devices) (the
      unit's C(CUDA_VISIBLE_DEVICES), null when unset), C(gpus) (the unit's, C(index) and C(uuid)) and C(holders) (each
      C(pid), C(name), C(used_memory) as nvidia-smi prints it, C(gpu_uuid), C(gpu_index)).
  returned: always
  type: dict
  sample:
    control_group: /system.slice/vllm.service
    left: [{pid: 4242, name: "VLLM::EngineCor"}]
    signals: [SIGTERM, SIGKILL]
    remaining: []
    waited: 45.3
    gpus:
      checked: true
      visible_devices: "0,1"
      gpus: [{index: 0, uuid: GPU-5e3b2f9c-8d1e-4c1a-9f0b-2a7d6c4e1b3a}]
      holders: []
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.inferops.runbooks.plugins.module_utils._hostcall import run_module  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.module_utils._hostcall.unit_leftovers import CALL  # noqa: E402


def main() -> None:
    module = AnsibleModule(argument_spec=CALL.spec, supports_check_mode=True)
    run_module(module, CALL)


if __name__ == "__main__":
    main()
