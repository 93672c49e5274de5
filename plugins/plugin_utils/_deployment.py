# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Multi-node deployments: the topology read from the inventory, the rollout order, and the
deployment's verdict from its nodes' reports.

Private to the collection; may change at any time. Standard library only, no Ansible imports.

A deployment is one server spread over several hosts (SGLang's ``--nnodes``/``--node-rank``). In the
inventory its nodes carry ``sglang_deployment`` (the deployment's name) and ``sglang_node_rank``
(0 for the node that runs the HTTP API). A host without ``sglang_deployment`` is a deployment of one
node, named after the host: single-node inventories need nothing new.
"""

from __future__ import annotations

import dataclasses
import json
import re
import typing as t

from ansible_collections.inferops.runbooks.plugins.plugin_utils._fleet import batch_sizes
from ansible_collections.inferops.runbooks.plugins.plugin_utils._options import Step

DEPLOYMENT_VAR = "sglang_deployment"
RANK_VAR = "sglang_node_rank"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
PEER_REASONS = ("peer_failed",)  # a node that failed because another one did


class TopologyError(ValueError):
    """The inventory describes a deployment that cannot be restarted as one; the message names it."""


@dataclasses.dataclass(frozen=True)
class Node:
    host: str
    rank: int


@dataclasses.dataclass(frozen=True)
class Deployment:
    name: str
    nodes: tuple[Node, ...]
    multi_node: bool

    def as_dict(self) -> dict[str, t.Any]:
        return {
            "name": self.name,
            "multi_node": self.multi_node,
            "hosts": [node.host for node in self.nodes],
            "nodes": [{"host": node.host, "rank": node.rank} for node in self.nodes],
            "ranks": {node.host: node.rank for node in self.nodes},
        }

    def node_of(self, host: str) -> dict[str, t.Any]:
        """One host's place in the deployment: its rank and the other nodes (host -> rank)."""
        ranks = {node.host: node.rank for node in self.nodes}
        return {
            "deployment": self.name if self.multi_node else None,
            "multi_node": self.multi_node,
            "rank": ranks[host],
            "hosts": [node.host for node in self.nodes],
            "peers": {peer: rank for peer, rank in ranks.items() if peer != host},
        }


Vars = t.Mapping[str, t.Any]


def _rank(value: t.Any) -> int | None:
    """A node rank given as a number or as text (INI inventories and AWX surveys give text)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _membership(host: str, hostvars: t.Mapping[str, Vars], problems: list[str]) -> tuple[str | None, int | None]:
    values = hostvars.get(host) or {}
    name, raw_rank = values.get(DEPLOYMENT_VAR), values.get(RANK_VAR)
    if name in (None, ""):
        if raw_rank not in (None, "") and _rank(raw_rank) != 0:
            problems.append(f"{host} has {RANK_VAR}={raw_rank!r} but no {DEPLOYMENT_VAR}: name the deployment it is a node of")
        return None, None
    if not isinstance(name, str) or not NAME.match(name):
        problems.append(f"{host}: {DEPLOYMENT_VAR}={name!r} is not a deployment name (letters, digits, '.', '_', '-')")
        return None, None
    rank = _rank(raw_rank)
    if rank is None:
        shown = "is not set" if raw_rank in (None, "") else f"is {raw_rank!r}, not a whole number >= 0"
        problems.append(f"deployment {name}: {host}'s {RANK_VAR} {shown}")
    return name, rank


def topology(hosts: t.Sequence[str], hostvars: t.Mapping[str, Vars], inventory_hosts: t.Iterable[str] | None = None) -> list[Deployment]:
    """The deployments of ``hosts`` in the order of their first node in ``hosts``, each node list
    sorted by rank. Raises TopologyError naming every deployment that is wrong: two nodes with one
    rank, no rank 0, a gap in the ranks, or (with ``inventory_hosts``) a node left out of ``hosts``."""
    problems: list[str] = []
    members: dict[str, list[Node]] = {}
    order: list[tuple[str, bool]] = []
    for host in hosts:
        name, rank = _membership(host, hostvars, problems)
        if name is None:
            order.append((host, False))
            continue
        if name not in members:
            members[name] = []
            order.append((name, True))
        if rank is not None:
            members[name].append(Node(host, rank))
    selected = set(hosts)
    # a host left out of the run matters only as a node of a deployment of the run: with none (every
    # host its own server), nobody else's variables are read
    for host in (inventory_hosts or ()) if members else ():
        if host in selected:
            continue
        name, rank = _membership(host, hostvars, [])
        if name in members:
            problems.append(
                f"deployment {name}: {host} (node {rank}) is not in this run: every node of a deployment is restarted together "
                "(check --limit and the host pattern)"
            )
    singles = {name for name, multi in order if not multi}
    for name, nodes in members.items():
        problems.extend(_rank_problems(name, nodes))
        if name in singles:
            problems.append(f"deployment {name} has the name of a single-node host of this run: their reports would share a name")
    if problems:
        raise TopologyError("; ".join(problems))
    return [
        Deployment(name, tuple(sorted(members[name], key=lambda node: node.rank)), True) if multi else Deployment(name, (Node(name, 0),), False)
        for name, multi in order
    ]


def topology_text(hosts: t.Sequence[str], hostvars: t.Mapping[str, Vars], inventory_hosts: t.Iterable[str] | None = None) -> list[str]:
    """``topology`` as text that a file keeps: ``["refused", <problems>]``, or ``["deployments", <JSON>]``
    (``from_topology_text`` reads it back). Every host of a batch asks the same; one of them reads
    every host's variables, the others read what it found."""
    try:
        found = topology(hosts, hostvars, inventory_hosts)
    except TopologyError as exc:
        return ["refused", str(exc)]
    return ["deployments", json.dumps([[d.name, d.multi_node, [[n.host, n.rank] for n in d.nodes]] for d in found])]


def from_topology_text(text: t.Sequence[str]) -> list[Deployment]:
    """The deployments ``topology_text`` wrote; raises TopologyError with the problems it wrote."""
    if text[0] == "refused":
        raise TopologyError(text[1])
    return [Deployment(name, tuple(Node(host, rank) for host, rank in nodes), multi) for name, multi, nodes in json.loads(text[1])]


def _rank_problems(name: str, nodes: t.Sequence[Node]) -> list[str]:
    problems = []
    by_rank: dict[int, list[str]] = {}
    for node in nodes:
        by_rank.setdefault(node.rank, []).append(node.host)
    for rank, holders in sorted(by_rank.items()):
        if len(holders) > 1:
            problems.append(f"deployment {name}: {' and '.join(holders)} all have node rank {rank}")
    ranks = sorted(by_rank)
    if ranks and 0 not in by_rank:
        problems.append(f"deployment {name} has no node of rank 0, the node that runs the HTTP API (ranks: {', '.join(map(str, ranks))})")
    missing = [rank for rank in range(max(ranks, default=-1) + 1) if rank not in by_rank and rank != 0]
    if missing:
        problems.append(
            f"deployment {name}: node rank(s) {', '.join(map(str, missing))} missing (ranks: {', '.join(map(str, ranks))}; the ranks of N nodes are 0 to N-1)"
        )
    return problems


def rollout(deployments: t.Sequence[Deployment], batch_size: int | t.Sequence[Step], forks: int | None = None) -> dict[str, t.Any]:
    """The hosts in rollout order and the play's ``serial`` list: the first deployment alone (the
    canary), then batches of ``batch_size`` deployments (a number, or the steps of a ramp, see
    ``_fleet.batch_sizes``), each batch counted in hosts. With ``forks``, refuses a batch with more
    hosts than Ansible runs at once (its nodes' waits must run together)."""
    if isinstance(batch_size, int) and not isinstance(batch_size, bool) and batch_size >= 1:
        steps: t.Sequence[Step] = [Step(batch_size)]
    elif isinstance(batch_size, (list, tuple)) and batch_size and all(isinstance(step, Step) for step in batch_size):
        steps = batch_size
    else:
        raise TopologyError(f"the batch size must be a whole number of deployments >= 1, a percent or a ramp, got {batch_size!r}")
    batches, start = [], 0
    for size in batch_sizes(steps, len(deployments)):
        batches.append(list(deployments[start : start + size]))
        start += size
    serial = [sum(len(deployment.nodes) for deployment in batch) for batch in batches]
    if forks is not None:
        for batch, size in zip(batches, serial):
            if size > forks and any(deployment.multi_node for deployment in batch):
                names = ", ".join(deployment.name for deployment in batch)
                raise TopologyError(
                    f"deployment(s) {names}: {size} nodes are restarted and waited on together, but Ansible runs only {forks} hosts "
                    "at once: raise forks (ansible.cfg, -f) or lower the batch size"
                )
    return {
        "hosts": [node.host for deployment in deployments for node in deployment.nodes],
        "serial": serial or [1],
        "batches": [[deployment.name for deployment in batch] for batch in batches],
        "members": {deployment.name: [node.host for node in deployment.nodes] for deployment in deployments},
    }


# -- the verdict of a deployment from its nodes' reports ---------------------------------------------


def _fatal_time(report: t.Mapping[str, t.Any]) -> int | None:
    first = report.get("first_fatal") or {}
    realtime = first.get("realtime") if isinstance(first, t.Mapping) else None
    return int(realtime) if isinstance(realtime, (int, float)) and not isinstance(realtime, bool) else None


def _root_cause(nodes: t.Sequence[t.Mapping[str, t.Any]]) -> t.Mapping[str, t.Any] | None:
    """The node where the failure began: the earliest fatal line in journal time across the nodes;
    without one, the first node that failed on its own account (not because a peer did)."""
    timed = [node for node in nodes if _fatal_time(node) is not None]
    if timed:
        return min(timed, key=lambda node: t.cast(int, _fatal_time(node)))
    own = [node for node in nodes if node.get("verdict") == "fail" and node.get("reason") not in PEER_REASONS]
    if own:
        return min(own, key=lambda node: (float(node.get("ended_at") or float("inf")), int(node.get("node_rank") or 0)))
    failed = [node for node in nodes if node.get("verdict") == "fail"]
    return failed[0] if failed else None


def _progress_text(report: t.Mapping[str, t.Any]) -> str | None:
    """The progress bar's text when it is of the phase the node reached (``loading weights 50% (82/163 shards)``)."""
    progress = report.get("progress")
    if isinstance(progress, t.Mapping) and progress.get("phase") == report.get("phase"):
        return str(progress.get("text") or "") or None
    return None


def _node_summary(report: t.Mapping[str, t.Any], root: t.Mapping[str, t.Any] | None) -> dict[str, t.Any]:
    first = report.get("first_fatal")
    summary = {
        "host": report.get("host"),
        "rank": int(report.get("node_rank") or 0),
        "verdict": report.get("verdict"),
        "reason": report.get("reason"),
        "msg": report.get("msg"),
        "phase": report.get("phase"),
        "progress": _progress_text(report),
        "health": report.get("health") or {},
        "invocation_id": report.get("invocation_id"),
        "previous_invocation_id": report.get("previous_invocation_id"),
        "elapsed": report.get("elapsed"),
        "ended_at": report.get("ended_at"),
        "first_fatal": first,
        "fatal_events": len(report.get("fatal") or []),
        "root_cause": root is not None and report.get("host") == root.get("host"),
    }
    root_time, own_time = (_fatal_time(root) if root else None), _fatal_time(report)
    if root_time is not None and own_time is not None and not summary["root_cause"]:
        summary["after_root_cause"] = round((own_time - root_time) / 1e6, 3)
    return summary


def deployment_verdict(name: str, reports: t.Sequence[t.Mapping[str, t.Any]]) -> dict[str, t.Any]:
    """One verdict for a deployment from its nodes' reports (``sglang_restart_report`` or
    ``sglang_precheck_report`` of each node, with ``node_rank``): pass only when every node passed;
    a failure names the node where it began and its first fatal line, the other nodes alongside.

    The result is the deployment's report, which ``plugin_utils/_render`` renders as it renders a
    host's: the role, unit and engine of node 0 (the lowest rank there is), and every node's whole
    report (``node_reports``, by rank)."""
    if not reports:
        raise TopologyError(f"deployment {name}: no node reports to judge")
    nodes = sorted(reports, key=lambda report: int(report.get("node_rank") or 0))
    verdicts = {str(report.get("verdict")) for report in nodes}
    if verdicts == {"pass"}:
        verdict, reason = "pass", "ready"
    elif verdicts == {"skipped"}:
        verdict, reason = "skipped", str(nodes[0].get("reason") or "check_mode")
    else:
        verdict, reason = "fail", ""
    root = _root_cause(nodes) if verdict == "fail" else None
    summaries = [_node_summary(report, root) for report in nodes]
    first = nodes[0]
    result: dict[str, t.Any] = {
        "role": first.get("role"),
        "deployment": name,
        "unit": first.get("unit"),
        "engine": first.get("engine"),
        "verdict": verdict,
        "reason": reason,
        "nodes": summaries,
        "root_cause": None,
        "elapsed": max((float(report.get("elapsed") or 0) for report in nodes), default=0.0),
    }
    if root is not None:
        where = f"{root.get('host')} (node {int(root.get('node_rank') or 0)})"
        result["reason"] = str(root.get("reason") or "unknown")
        result["msg"] = f"{where}: {root.get('msg') or ''}"
        result["root_cause"] = {
            "host": root.get("host"),
            "rank": int(root.get("node_rank") or 0),
            "reason": root.get("reason"),
            "first_fatal": root.get("first_fatal"),
        }
    elif verdict == "pass":
        result["msg"] = f"all {len(nodes)} nodes passed; node 0 ({nodes[0].get('host')}): {nodes[0].get('msg') or ''}"
    else:
        result["msg"] = str(nodes[0].get("msg") or "")
    result["node_reports"] = [dict(report) for report in nodes]
    return result
