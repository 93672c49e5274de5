#!/usr/bin/python
# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: precheck
short_description: The read-only check of a running inference server, as one step
version_added: 0.3.0
description:
  - The whole check of the role P(inferops.runbooks.sglang_precheck#role) on one host, in one task, with the role's
    variables (C(sglang_precheck_*)) as its input. Nothing is restarted or changed on the server.
  - Checks every variable and rule on the controller (M(inferops.runbooks.check_options)); reads the unit
    (M(inferops.runbooks.unit_info)) and the run record the last rollout left (M(inferops.runbooks.run_record)); takes
    one look at the unit, the current invocation's journal and the health endpoint (M(inferops.runbooks.service_probe));
    for a vLLM whose health answered 200, reads whether it sleeps (M(inferops.runbooks.server_sleep)); when every
    check passed so far and the server is awake, generates one token through the completions API from the target (with
    C(sglang_precheck_smoke_test), on node 0) and measures the server against the host's baseline
    (M(inferops.runbooks.perf_canary), with C(sglang_precheck_canary)); adds the current start to the host's start
    history once it ended (M(inferops.runbooks.start_history)).
  - A node of rank 1 or more of a vLLM deployment (a C(--headless) data parallel node, or a Ray worker) serves no
    HTTP, so its health is not probed, and it is ready once its own journal reached the worker's ready phase (its engines'
    C(init engine ... took), or the C(--block) line of Ray); its unit and its journal decide, as for every node.
  - A step that fails is kept for the report instead of failing the task; the report's verdict is the first check
    that failed. The task itself does not fail on a failed check - the role's report step does.
  - The files it writes on the host are the journal state the next precheck starts from (unless
    C(sglang_precheck_incremental) is false), the start history and the canary store; none in check mode.
author:
  - inferops.runbooks contributors (@inferops)
attributes:
  action:
    support: full
    description: Runs on the controller and calls the collection's modules on the managed host.
  async:
    support: none
    description: One look takes seconds.
  check_mode:
    support: full
    description: Every read runs in check mode as well; nothing is written and no canary load is sent.
  diff_mode:
    support: none
    description: Nothing to compare.
  platform:
    support: full
    platforms: posix
    description: A host with systemd and journald.
options: {}
notes:
  - The role P(inferops.runbooks.sglang_precheck#role) runs it and shows, publishes and writes its report; use the
    role rather than this module.
seealso:
  - module: inferops.runbooks.service_probe
  - module: inferops.runbooks.check_options
"""

EXAMPLES = r"""
- name: Check the server (the role's variables are its input)
  inferops.runbooks.precheck:
  vars:
    sglang_precheck_unit: sglang.service
  register: checked

- name: Say the verdict
  ansible.builtin.debug:
    msg: "{{ checked.report.verdict }}: {{ checked.report.msg }}"
"""

RETURN = r"""
report:
  description: The precheck's report (the same as the role writes as JSON), with its C(verdict), C(reason) and C(msg).
  returned: always
  type: dict
  sample: {"role": "sglang_precheck", "verdict": "pass", "reason": "ready", "unit": "sglang.service"}
node:
  description: This host's place in its deployment, as M(inferops.runbooks.check_options) returns it.
  returned: always
  type: dict
  sample: {"deployment": null, "multi_node": false, "rank": 0, "hosts": ["gpu0"], "peers": {}}
report_dir:
  description: The directory on the controller the report files go to; empty for none.
  returned: always
  type: str
  sample: /var/log/inferops
reporter:
  description: Whether this host shows, publishes and writes the report of its deployment (its first node in the batch).
  returned: always
  type: bool
  sample: true
steps:
  description: What each step did - its name, C(ok), C(failed) or C(skipped), and its seconds.
  returned: always
  type: list
  elements: dict
  sample: [{"step": "Precheck | Read the state of the unit", "outcome": "ok", "seconds": 0.41}]
"""
