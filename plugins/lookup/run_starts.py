# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
name: run_starts
author: inferops.runbooks contributors (@inferops)
version_added: 0.3.0
short_description: The good starts the hosts of this run reported so far, to compare a host's start with
description:
  - Reads, on the controller, the good start that M(inferops.runbooks.settle) kept for each of the given hosts in this
    run of C(ansible-playbook) (the configuration and the seconds it took, as the settle phase returns them in
    C(fleet_start)), for P(inferops.runbooks.report_fleet#filter).
  - A host with no good start in this run (it failed, it was not restarted, its settle phase has not run yet) is left
    out. What an earlier play of the same run kept for a host counts until the host settles again; an earlier run of
    C(ansible-playbook) is never read.
  - Costs a small file per host, where reading each host's registered result through C(hostvars) composes every
    variable of that host.
options:
  _terms:
    description: The hosts whose starts are read (for example C(ansible_play_hosts_all)); lists are flattened.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Compare this host's start with the starts of the play's other hosts
  ansible.builtin.set_fact:
    sglang_restart_report: >-
      {{ sglang_restart_report | inferops.runbooks.report_fleet(lookup('inferops.runbooks.run_starts', ansible_play_hosts_all)) }}
"""

RETURN = r"""
_raw:
  description: One mapping of host to its good start (C(config), C(total) in seconds).
  type: list
  elements: dict
"""

import typing as t  # noqa: E402

from ansible.plugins.lookup import LookupBase  # noqa: E402

from ansible_collections.inferops.runbooks.plugins.plugin_utils import _run_results  # noqa: E402


def _hosts(terms: t.Iterable[t.Any]) -> list[str]:
    hosts: list[str] = []
    for term in terms:
        if isinstance(term, (list, tuple)):
            hosts.extend(_hosts(term))
        else:
            hosts.append(str(term))
    return hosts


class LookupModule(LookupBase):
    def run(self, terms: list[t.Any], variables: dict[str, t.Any] | None = None, **kwargs: t.Any) -> list[dict[str, t.Any]]:
        self.set_options(var_options=variables, direct=kwargs)
        return [_run_results.starts(_hosts(terms))]
