#!/usr/bin/python
# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: server_sleep
short_description: Whether a vLLM server sleeps (its sleep mode), read with GET /is_sleeping
version_added: 0.1.0
description:
  - vLLM's sleep mode (C(--enable-sleep-mode); C(POST /sleep), C(POST /wake_up)) offloads or drops the weights and the
    KV cache and keeps the process and its port - C(/health) answers 200, and the first generation pays a wake-up that
    reloads the weights. The routes exist only with C(VLLM_SERVER_DEV_MODE=1).
  - One C(GET) of O(url) from the host, with the API key when one is given (vLLM asks it for C(/v1) paths only, so it
    costs nothing where it is not needed). Never wakes the server, never fails - C(sleeping) of RV(sleep) is null when the
    state is not known (404 without dev mode, no answer) and C(error) says why.
  - The precheck (M(inferops.runbooks.precheck)) reads it for vLLM servers (C(sglang_precheck_engine=vllm)) and
    reports one asleep with reason C(sleeping), without a generation.
author:
  - inferops.runbooks contributors (@inferops)
options:
  url:
    description: The server's C(/is_sleeping), e.g. C(http://127.0.0.1:8000/is_sleeping).
    type: str
    required: true
  api_key:
    description: The server's API key (C(--api-key)), sent as C(Authorization Bearer).
    type: str
  timeout:
    description: Seconds the answer may take.
    type: float
    default: 5
  validate_certs:
    description: Check the server's certificate for an https URL.
    type: bool
    default: true
seealso:
  - module: inferops.runbooks.precheck
"""

EXAMPLES = r"""
- name: Read whether the vLLM server sleeps
  inferops.runbooks.server_sleep:
    url: http://127.0.0.1:8000/is_sleeping
  register: slept

- name: Say so
  ansible.builtin.debug:
    msg: "the server sleeps: {{ slept.sleep.sleeping }}"
"""

RETURN = r"""
sleep:
  description:
    - C(url), C(sleeping) (true, false, or null - not known), C(status) (the HTTP status, null without an answer) and
      C(error) (why the state is not known, null when it is).
  returned: always
  type: dict
  sample:
    url: http://127.0.0.1:8000/is_sleeping
    sleeping: true
    status: 200
    error: null
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.inferops.runbooks.plugins.module_utils._hostcall import run_module  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.module_utils._hostcall.server_sleep import CALL  # noqa: E402


def main() -> None:
    module = AnsibleModule(argument_spec=CALL.spec, supports_check_mode=True)
    run_module(module, CALL)


if __name__ == "__main__":
    main()
