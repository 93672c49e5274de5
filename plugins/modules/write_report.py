#!/usr/bin/python
# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: write_report
short_description: Write a runbook report's JSON and JUnit XML files, and the run's page, on the controller
version_added: 0.1.0
description:
  - Writes the report of a runbook role (from P(inferops.runbooks.runbook_report#filter)) as two files in
    O(report_dir) on the controller - the whole report as JSON, and the JUnit XML of
    P(inferops.runbooks.report_junit#filter) - named C(<host>.json) and C(<host>.junit.xml) for
    P(inferops.runbooks.sglang_restart#role), C(<host>.precheck.json) and C(<host>.precheck.junit.xml) for
    P(inferops.runbooks.sglang_precheck#role).
  - The report of a multi-node deployment (from P(inferops.runbooks.deployment_verdict#filter)) is named after the
    deployment - C(<deployment>.json) and C(<deployment>.junit.xml) (C(.precheck) for the precheck).
  - Writes the run's page beside them, C(<run>.html) (C(restart-<start>.html) or C(precheck-<start>.html), named after
    the earliest start among the run's hosts) - one self-contained HTML page (inline CSS and SVG, no script, nothing
    loaded from elsewhere, every journal text escaped) with a timeline per host drawn to one scale (the time before
    the start, each phase of the cold start, what came after or the rollback's own start, the first fatal line marked,
    the time out of the router), the hosts batch by batch, canary first, each with its verdict and reason, its
    fatal lines and tracebacks, its allowlisted and unrecognized lines by rule, what is new since its last good
    start and its canary's figures, and the hosts much slower than their peers. The page holds every host of the
    play that has reported so far in this run (the reports this action and M(inferops.runbooks.publish_report) kept
    on the controller, not the hosts' variables) and is written again after each host's report, one host at a time;
    its name is chosen by the first report written in the run and kept.
  - A multi-node deployment's report also gets its own page, C(<deployment>.html), a timeline per node.
  - Creates O(report_dir) when it is missing; each file is replaced atomically, and left alone when it already holds
    the same report.
  - Runs on the controller in one step (no module is sent anywhere), so reporting a failed restart takes
    milliseconds, not seconds.
author:
  - inferops.runbooks contributors (@inferops)
extends_documentation_fragment:
  - inferops.runbooks.controller
attributes:
  check_mode:
    support: full
    description: Says which files it would write, and writes nothing.
options:
  report:
    description:
      - The report, from P(inferops.runbooks.runbook_report#filter), or a deployment's, from
        P(inferops.runbooks.deployment_verdict#filter).
    type: dict
    required: true
  report_dir:
    description: The directory on the controller.
    type: path
    required: true
seealso:
  - module: inferops.runbooks.check_options
"""

EXAMPLES = r"""
- name: Write the report files of the restart
  inferops.runbooks.write_report:
    report: "{{ sglang_restart_report }}"
    report_dir: /var/tmp/sglang-reports
"""

RETURN = r"""
files:
  description: The two files, C(json) and C(junit).
  returned: always
  type: dict
  sample: {"json": "/var/tmp/sglang-reports/gpu-node-01.json", "junit": "/var/tmp/sglang-reports/gpu-node-01.junit.xml"}
pages:
  description: The HTML pages written (or that would be in check mode), the run's and a deployment's.
  returned: always
  type: list
  elements: str
  sample: ["/var/tmp/sglang-reports/restart-20261203T120034Z.html"]
"""
