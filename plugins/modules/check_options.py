#!/usr/bin/python
# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: check_options
short_description: Check every variable of a runbook role, and its rules, before anything is changed
version_added: 0.1.0
description:
  - Reads the variables of O(role) (C(<role>_<option>), templated as the role sees them) and checks all of them on
    the controller - types, ranges, choices, the unit name, the URLs and the journal rules - so that a typo fails
    the run before any unit is stopped, drained or restarted.
  - Values may be given the way an AWX survey sends them - numbers and booleans as text, rule ids as
    comma-separated text, rules and stall limits as YAML text. The task returns every value converted, in RV(options).
  - A health URL must point at the target itself (a loopback address, or the host's C(inventory_hostname),
    C(ansible_host), or, when facts were gathered, one of its names and addresses) unless
    C(<role>_allow_remote_health) is true. With the smoke test on, the same holds for the smoke URL (it receives the
    API key) unless C(<role>_allow_remote_smoke) is true.
  - The rules are compiled with the engine's rule packs, as the target will compile them; a rule that cannot be used
    is named.
  - Fails with one message naming each variable that is wrong, its value (never the value of a secret) and what is
    allowed; RV(reason) is V(invalid_rules) when only the rules are wrong, V(invalid_topology) when only the
    deployments are, else V(invalid_options).
  - The multi-node deployments of the hosts of the batch (host variables C(sglang_deployment), C(sglang_node_rank))
    are checked in the same step - two nodes with one rank, no rank 0, a gap in the ranks, or a node left out of the
    batch is refused - and the host's place in its deployment is returned in RV(node).
  - The roles P(inferops.runbooks.sglang_restart#role) and P(inferops.runbooks.sglang_precheck#role) run it first.
author:
  - inferops.runbooks contributors (@inferops)
attributes:
  action:
    support: full
    description: Runs on the controller only; nothing is sent to the managed host.
  async:
    support: none
    description: Runs at once on the controller.
  check_mode:
    support: full
    description: Only reads variables.
  diff_mode:
    support: none
    description: Nothing to compare.
  platform:
    support: full
    platforms: all
    description: Any host; it is not contacted.
options:
  role:
    description:
      - Whose variables to check, by the role's name (the variables' prefix).
    type: str
    required: true
    choices: [sglang_precheck, sglang_restart]
notes:
  - The option set of each role is declared once, in C(plugins/plugin_utils/_options.py), from the same declarations
    the wait and the probe use; each role's C(meta/argument_specs.yml) documents it.
seealso:
  - module: inferops.runbooks.wait_ready
"""

EXAMPLES = r"""
- name: Check every variable of the restart before the first host is touched
  inferops.runbooks.check_options:
    role: sglang_restart
  register: checked

- name: Use the converted values
  ansible.builtin.debug:
    msg: "budget {{ checked.options.budget }} s, {{ checked.options.extra_rules | length }} rule(s) of your own"
"""

RETURN = r"""
options:
  description:
    - Every variable of the role, converted to its type (text from a survey becomes numbers, booleans, lists and
      mappings), keyed by the option name without the role prefix. Secrets (the API key) are left out.
  returned: success
  type: dict
  sample: {"unit": "sglang.service", "budget": 3600, "stall_limits": {"capturing_cuda_graphs": 1800}, "strict": false}
node:
  description:
    - This host's place in its deployment - C(deployment) (null for a single-node host), C(multi_node), C(rank),
      C(hosts) (the deployment's nodes by rank) and C(peers) (the other nodes, host to rank).
  returned: success
  type: dict
  sample: {"deployment": "dsr1", "multi_node": true, "rank": 1, "hosts": ["gpu0", "gpu1"], "peers": {"gpu0": 0}}
reason:
  description: V(invalid_options), V(invalid_topology) when only the deployments are wrong, or V(invalid_rules) when only the rules are.
  returned: failure
  type: str
  sample: invalid_options
problems:
  description: One text per problem, each naming the variable, its value and what is allowed.
  returned: failure
  type: list
  elements: str
  sample: ["sglang_restart_budget must be a number of seconds > 0, got 0"]
"""
