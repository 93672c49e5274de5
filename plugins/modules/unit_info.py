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
  - SGLang drains its running requests on SIGTERM with no bound of its own (its C(sigterm_watchdog); no flag bounds
    it), so C(TimeoutStopSec) is the only limit. When O(drain_before_stop=false) (no load URL - the stop itself is the
    drain, as in the rulebooks), it warns how long SGLang may drain before systemd kills it and its running requests
    with it (C(sglang_drain_limit) in RV(graceful_shutdown)).
author:
  - inferops.runbooks contributors (@inferops)
extends_documentation_fragment:
  - inferops.runbooks.unit
options:
  engine:
    description:
      - The engine the unit runs. V(auto) reads it from C(ExecStart) (a command line that runs C(sglang.launch_server),
        C(sglang serve), C(vllm serve) or C(vllm.entrypoints)).
    type: str
    default: auto
    choices: [auto, sglang, vllm]
  drain_before_stop:
    description:
      - Whether the rollout waits for the running requests to finish before it stops the unit (a load URL is set). With
        V(false) and SGLang, a warning says how long SGLang may drain on the stop before systemd kills it. Unset - not said.
    type: bool
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
    - What a stop does to the engine's drain - C(engine) (C(sglang), C(vllm), or null when ExecStart names neither),
      C(shutdown_timeout) (vLLM - the seconds of C(--shutdown-timeout) in C(ExecStart), null when not given), C(stop_timeout)
      (C(TimeoutStopSec) in seconds, null for none), C(cut_short) (systemd would kill the unit before vLLM's drain and the
      engine's teardown end) and C(warning) (what to set, also given as a warning).
    - For SGLang also C(sglang_drain_limit) (the seconds SGLang may drain on SIGTERM before systemd kills it, null - no
      limit) and C(drain_before_stop) (as given).
  returned: always
  type: dict
  sample:
    engine: vllm
    shutdown_timeout: 60
    stop_timeout: 20.0
    cut_short: true
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.inferops.runbooks.plugins.module_utils._hostcall import run_module  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.module_utils._hostcall.unit_info import CALL  # noqa: E402


def main() -> None:
    module = AnsibleModule(argument_spec=CALL.spec, supports_check_mode=True)
    run_module(module, CALL)


if __name__ == "__main__":
    main()
