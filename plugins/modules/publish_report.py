#!/usr/bin/python
# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: publish_report
short_description: Show, publish and write a runbook report
version_added: 0.3.0
description:
  - The end of every runbook role, in one step on the controller.
  - Shows the report's one-screen summary (P(inferops.runbooks.report_summary#filter)) as lines of the play's output,
    in one piece, so that the summaries of a batch's hosts never interleave (the result keeps them, shown with C(-v)).
  - Publishes the outcome as C(set_stats) data, aggregated over the run, under the role and the host (or the
    deployment) - what AWX and ansible-runner show as artifacts.
  - With O(report_dir), writes the report's JSON and JUnit XML files and the run's page there, as
    M(inferops.runbooks.write_report) does, in check mode too (the files are the controller's).
  - Does not fail the host on a failed verdict - Ansible publishes C(set_stats) data only from a task that did not
    fail; the roles fail the host in the task after this one.
  - For a node of a multi-node deployment (O(node)), judges the deployment from its nodes' reports (their
    C(<role>_report) facts, as P(inferops.runbooks.deployment_verdict#filter) does); one node shows, publishes and
    writes the deployment's report (node 0, unless it is not in the play's batch), and every node returns its verdict.
  - Keeps every host's report on the controller for the run's page that the hosts after it write.
  - A report whose verdict is V(skipped) (a check-mode run that refused nothing) is published, neither shown nor written.
author:
  - inferops.runbooks contributors (@inferops)
extends_documentation_fragment:
  - inferops.runbooks.controller
attributes:
  check_mode:
    support: full
    description: The same as a real run - the files are the controller's, not the managed host's.
options:
  report:
    description:
      - The report, from P(inferops.runbooks.runbook_report#filter), or a deployment's, from
        P(inferops.runbooks.deployment_verdict#filter).
    type: dict
    required: true
  report_dir:
    description: The directory on the controller for the report's files; none are written when empty.
    type: str
    default: ""
  publish:
    description: Show, publish and write the report; V(false) returns its verdict only.
    type: bool
    default: true
  node:
    description:
      - This host's place in its deployment, from M(inferops.runbooks.check_options) - C(multi_node), C(deployment),
        C(hosts). A single host's (or none) reports itself.
    type: dict
    default: {}
seealso:
  - module: inferops.runbooks.write_report
  - module: inferops.runbooks.fleet_report
"""

EXAMPLES = r"""
- name: Report
  inferops.runbooks.publish_report:
    report: "{{ sglang_restart_report }}"
    report_dir: /var/tmp/sglang-reports

  register: published

- name: Fail the host when the verdict is fail
  ansible.builtin.assert:
    that: published.verdict != 'fail'
    fail_msg: "{{ published.failure | default('') }}"
    quiet: true
"""

RETURN = r"""
verdict:
  description: The verdict of the report - the host's, or its deployment's.
  returned: always
  type: str
  sample: fail
failure:
  description: What the host fails with when the verdict is V(fail) - the summary's headline and the report's message.
  returned: when the verdict is V(fail)
  type: str
  sample: "gpu-node-01 sglang.service: FAIL (fatal_log) after 73.1 s - fatal line in sglang.service's journal: ..."
msg:
  description: The summary, a list of lines.
  returned: when the report is shown
  type: list
  elements: str
  sample: ["gpu-node-01 sglang.service: PASS (ready) in 412.3 s", "fatal: none"]
"""
