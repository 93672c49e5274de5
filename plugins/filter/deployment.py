# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters over multi-node deployments: thin shells around plugins/plugin_utils/_deployment.py."""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.runbooks.plugins.plugin_utils._deployment import (
    Deployment,
    Node,
    TopologyError,
    deployment_verdict,
    rollout,
    topology,
)
from ansible_collections.inferops.runbooks.plugins.plugin_utils._options import Step, parse_batch_size
from ansible_collections.inferops.runbooks.plugins.plugin_utils._plain import plain


def _host_list(value: t.Any, what: str, filter_name: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, t.Iterable):
        raise AnsibleFilterError(f"{filter_name}: {what} must be a list of inventory host names, got {type(value).__name__}")
    return [str(host) for host in value]


def deployments(hosts: t.Any, hostvars: t.Any, inventory_hosts: t.Any = None) -> list[dict[str, t.Any]]:
    """The deployments of the hosts (sglang_deployment, sglang_node_rank), checked."""
    if not isinstance(hostvars, t.Mapping):
        raise AnsibleFilterError(f"deployments: hostvars must be the hostvars mapping, got {type(hostvars).__name__}")
    try:
        found = topology(_host_list(hosts, "the input", "deployments"), hostvars, _host_list(inventory_hosts, "inventory_hosts", "deployments"))
    except TopologyError as exc:
        raise AnsibleFilterError(f"Refusing the deployments before anything restarts: {exc}") from None
    return [deployment.as_dict() for deployment in found]


def _deployment(value: t.Any, caller: str) -> Deployment:
    wrong = f"{caller}: each input item must be a deployment from the deployments filter, got {value!r}"
    if not isinstance(value, t.Mapping) or not isinstance(value.get("nodes"), list):
        raise AnsibleFilterError(wrong)
    try:
        nodes = tuple(Node(str(node["host"]), int(node["rank"])) for node in value["nodes"])
    except (KeyError, TypeError, ValueError):
        raise AnsibleFilterError(wrong) from None
    return Deployment(str(value.get("name")), nodes, bool(value.get("multi_node")))


def batch_count(batch_size: t.Any) -> list[Step]:
    """The batch size as given (a number, a percent, a ramp, or their text from an AWX survey), checked before anything restarts."""
    steps, problem = parse_batch_size(batch_size)
    if problem:
        raise AnsibleFilterError(f"Refusing the rollout before anything restarts: {problem}")
    return steps


def deployment_rollout(deployments: t.Any, batch_size: t.Any = 1, forks: t.Any = None) -> dict[str, t.Any]:
    """Rollout order and serial batches (in hosts) for whole deployments, canary first."""
    if not isinstance(deployments, list):
        raise AnsibleFilterError(f"deployment_rollout: input must be the list the deployments filter returns, got {type(deployments).__name__}")
    size = batch_count(batch_size)
    try:
        return rollout([_deployment(item, "deployment_rollout") for item in deployments], size, None if forks in (None, "") else int(forks))
    except (TypeError, ValueError) as exc:
        if isinstance(exc, TopologyError):
            raise AnsibleFilterError(f"Refusing the rollout before anything restarts: {exc}") from None
        raise AnsibleFilterError(f"deployment_rollout: forks must be a whole number, got {forks!r}") from None


def deployment_node(deployments: t.Any, host: t.Any) -> dict[str, t.Any]:
    """One host's deployment, rank and peers."""
    if not isinstance(deployments, list):
        raise AnsibleFilterError(f"deployment_node: input must be the list the deployments filter returns, got {type(deployments).__name__}")
    for item in deployments:
        found = _deployment(item, "deployment_node")
        if any(node.host == host for node in found.nodes):
            return found.node_of(str(host))
    raise AnsibleFilterError(f"deployment_node: {host} is in none of the deployments ({', '.join(str(item.get('name')) for item in deployments)})")


def deployment_verdict_filter(reports: t.Any, name: t.Any) -> dict[str, t.Any]:
    """One verdict for a deployment from its nodes' reports: the deployment's report."""
    if not isinstance(reports, list) or not all(isinstance(report, t.Mapping) for report in reports):
        raise AnsibleFilterError("deployment_verdict: input must be a list of the nodes' reports (dicts)")
    try:
        return deployment_verdict(str(name), plain(reports))
    except TopologyError as exc:
        raise AnsibleFilterError(f"deployment_verdict: {exc}") from None


class FilterModule:
    """inferops.runbooks deployment filters."""

    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {
            "deployments": deployments,
            "deployment_node": deployment_node,
            "deployment_rollout": deployment_rollout,
            "deployment_verdict": deployment_verdict_filter,
        }
