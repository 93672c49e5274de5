#!/usr/bin/python
# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: fleet_gate
short_description: The fleet's gates of a rolling restart - the rollout's options, the serving floor, the bake, the tolerance
version_added: 0.3.0
description:
  - The steps of C(playbooks/restart_sglang.yml) that look after the fleet rather than one host, each one O(phase).
  - V(plan) checks the rollout's play variables C(sglang_batch_size), C(sglang_min_serving), C(sglang_capacity_timeout),
    C(sglang_max_fail_percentage) and C(sglang_batch_pause) before anything is touched (a bad value is refused with its
    name, its value and what is allowed), and returns them, converted, as RV(fleet) (the playbook keeps them as C(sglang_fleet)
    with a C(set_fact), a variable whether or not facts are injected). Run it once (C(run_once)).
  - V(floor), once per batch (C(run_once)) before the batch's hosts are taken out of anything - the serving floor. Every
    other deployment of the play is looked at from the controller - with a router (C(sglang_restart_router_url) of its
    node 0), its worker must be listed by the router and not unhealthy, and answer one generation sent to the worker's
    address; without one, one generation sent to the smoke URL's route (C(sglang_restart_smoke_url), its loopback host
    replaced by the host's address), with C(sglang_restart_api_key) as the role sends it (never shown). The batch's own
    deployments count as not serving. While fewer than C(min_serving) serve, it waits (a line each look naming who does
    not serve), at most C(capacity_timeout) seconds; then it fails, naming the floor, who serves and who does not, and
    nothing of the batch is touched. A floor that cannot be met with the batch out fails at once.
  - V(bake), on each host of the batch after its restart passed - for C(batch_pause) seconds, the collection's probe
    (M(inferops.runbooks.service_probe)) watches the invocation the start was judged on, a look every 10 seconds, each
    followed by one generation sent from the controller as the V(floor) sends it (a wedged scheduler answers its health
    check); the unit started again or no longer active, a fatal line more than the start had, a health check that does
    not answer 200, or no token within 10 seconds ends the bake as failed (RV(verdict) V(fail), RV(reason)
    V(bake_failed); the playbook registers the result as C(sglang_fleet_bake)). It does not fail the host; the V(after)
    phase counts it. The change is not rolled back after a failed bake (the host's report says so).
  - V(after), once per batch (C(run_once)) - with a serving floor, the fleet gate - the batch's deployments that passed must
    serve (listed by their router, one generation) within C(capacity_timeout) seconds, or count as failed. Then the
    tolerance - the play's failed deployments (their report, their bake, the fleet gate) against
    C(max_fail_percentage) percent of the play's deployments; a failed canary, or more failures than that, fails the
    task, which ends the run.
author:
  - inferops.runbooks contributors (@inferops)
extends_documentation_fragment:
  - inferops.runbooks.controller
attributes:
  check_mode:
    support: partial
    description: V(plan) checks as always; V(floor) looks once and never waits or fails; V(bake) and the fleet gate are skipped.
options:
  phase:
    description: Which gate.
    type: str
    required: true
    choices: [plan, floor, bake, after]
  fleet:
    description: The rollout's options as V(plan) set them (C(hostvars['localhost'].sglang_fleet)).
    type: dict
    default: {}
  rollout:
    description: The plan of P(inferops.runbooks.deployment_rollout#filter) (C(hostvars['localhost'].sglang_rollout)).
    type: dict
    default: {}
notes:
  - V(bake) runs M(inferops.runbooks.service_probe) on the host; the other phases contact only the router and the servers,
    from the controller, which must reach them as the router does.
seealso:
  - module: inferops.runbooks.check_options
  - module: inferops.runbooks.service_probe
"""

EXAMPLES = r"""
- name: Fleet | The serving floor before the batch leaves
  inferops.runbooks.fleet_gate:
    phase: floor
    fleet: "{{ hostvars['localhost'].sglang_fleet }}"
    rollout: "{{ hostvars['localhost'].sglang_rollout }}"
  run_once: true
"""

RETURN = r"""
floor:
  description: V(floor) - how many must serve, who serves, who does not and why, and the batch's deployments.
  returned: with a serving floor
  type: dict
  sample: {"needed": 2, "serving": ["sim3"], "not_serving": {"sim2": "no generation from http://10.0.0.2:30000/v1/completions"}, "leaving": ["sim1"]}
bake:
  description: V(bake) - the verdict, the reason (V(baked) or V(bake_failed)) and what was seen.
  returned: when a bake ran
  type: dict
failed_deployments:
  description: V(after) - the play's failed deployments and why.
  returned: V(after)
  type: dict
fleet:
  description: V(plan) - the rollout's options, checked and converted.
  returned: V(plan)
  type: dict
  sample: {"batch_size": [1, 2, "25%"], "min_serving": "75%", "capacity_timeout": 600, "max_fail_percentage": 10, "batch_pause": 300}
verdict:
  description: V(bake) - V(pass), V(fail), or V(skipped) when no bake ran.
  returned: V(bake)
  type: str
reason:
  description: V(bake) - V(baked) or V(bake_failed).
  returned: when a bake ran
  type: str
msg:
  description: What was decided.
  returned: always
  type: str
"""
