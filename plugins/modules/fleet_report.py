#!/usr/bin/python
# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: fleet_report
short_description: Show where the play's hosts stand after a restart, and publish the starts slower than their peers'
version_added: 0.3.0
description:
  - The closing lines of a restart play, in one step on the controller - how many of the play's hosts reached the
    role, the hosts grouped by where they stand (their report's C(state) - new configuration, rolled back, down, not
    restarted...), the hosts not touched, and the hosts whose start was much slower than their peers' on the same
    configuration (P(inferops.runbooks.fleet_outliers#filter)).
  - Shown as lines of the play's output, in one piece (the result keeps them, shown with C(-v)); the slow starts are published as
    C(set_stats) data, C(sglang_restart_fleet.slow_starts), for AWX and ansible-runner.
  - Run it once for the play (C(run_once)).
author:
  - inferops.runbooks contributors (@inferops)
extends_documentation_fragment:
  - inferops.runbooks.controller
attributes:
  check_mode:
    support: full
    description: The same as a real run; it changes nothing.
options:
  hosts:
    description: The play's hosts, in the play's order (C(ansible_play_hosts_all)).
    type: list
    elements: str
    required: true
  reports:
    description: The reports of the hosts that ran the role so far (P(inferops.runbooks.runbook_report#filter)).
    type: list
    elements: raw
    required: true
  ratio:
    description: How many times its peers' median start a host's start must take to be named slower than its peers.
    type: float
    default: 2.0
seealso:
  - module: inferops.runbooks.publish_report
"""

EXAMPLES = r"""
- name: Fleet | Where every host of the play stands
  inferops.runbooks.fleet_report:
    hosts: "{{ ansible_play_hosts_all }}"
    reports: "{{ ansible_play_hosts_all | map('extract', hostvars) | map(attribute='sglang_restart_report', default={}) | select | list }}"
  run_once: true
"""

RETURN = r"""
msg:
  description: The lines shown.
  returned: always
  type: list
  elements: str
  sample: ["fleet: 3 host(s) in the play, 3 reached, 0 not touched", "  new configuration: gpu-node-01 gpu-node-02 gpu-node-03"]
"""
