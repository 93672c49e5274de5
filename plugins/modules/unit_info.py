#!/usr/bin/python
# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: unit_info
short_description: The state of a systemd unit, read with systemctl show
version_added: 0.1.0
description:
  - Reads a unit's state (load and active state, main PID, invocation, automatic restarts, result) with
    C(systemctl show), as the other modules of the collection read it, numeric properties as integers.
  - A unit that does not exist is not an error - RV(unit) says C(LoadState=not-found); the roles refuse it.
  - Never changes anything; it does not read the journal (M(inferops.runbooks.service_probe) does).
  - Also reads C(ExecStart) and C(TimeoutStopSec) - when the command line asks vLLM to drain its running requests
    on a stop (C(--shutdown-timeout N), vLLM 0.18 and later) and systemd would kill the unit before the drain (and
    15 s of engine teardown) is over, it warns and says which C(TimeoutStopSec) to set (RV(graceful_shutdown)).
author:
  - inferops.runbooks contributors (@inferops)
extends_documentation_fragment:
  - inferops.runbooks.unit
seealso:
  - module: inferops.runbooks.service_probe
  - module: ansible.builtin.systemd_service
"""

EXAMPLES = r"""
- name: Read the server's unit before a restart
  inferops.runbooks.unit_info:
    unit: sglang.service
  register: before

- name: Refuse a unit that is not loaded
  ansible.builtin.fail:
    msg: "sglang.service is {{ before.unit.LoadState }}"
  when: before.unit.LoadState != 'loaded'
"""

RETURN = r"""
unit:
  description: The unit's state from C(systemctl show); numeric properties are integers, C(InvocationID) is empty for a unit that never ran.
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
    Result: success
graceful_shutdown:
  description:
    - What a stop does to vLLM's drain - C(shutdown_timeout) (the seconds of C(--shutdown-timeout) in C(ExecStart), null when
      not given), C(stop_timeout) (C(TimeoutStopSec) in seconds, null for none), C(cut_short) (systemd would kill the unit
      before the drain and the engine's teardown end) and C(warning) (what to set, also given as a warning).
  returned: always
  type: dict
  sample:
    shutdown_timeout: 60
    stop_timeout: 20.0
    cut_short: true
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.inferops.runbooks.plugins.module_utils._hostcall import CALLS, run_module  # noqa: E402


def main() -> None:
    call = CALLS["unit_info"]
    module = AnsibleModule(argument_spec=call.spec, supports_check_mode=True)
    run_module(module, "unit_info")


if __name__ == "__main__":
    main()
