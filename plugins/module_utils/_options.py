# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options the collection's plugins share, declared once, and the checks of their values.

Standard library only, no Ansible imports. The argument specs here are used by the action plugin
(``wait_ready``), the modules (``service_probe``, ``journal_scan``) and the roles' preflight, so
one option has one type and one default everywhere; the doc fragments in
``plugins/doc_fragments/`` document the same options.
"""

from __future__ import annotations

import math
import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils._rules import PHASES

ENGINES = ("auto", "sglang", "vllm")
DEFAULT_ENGINE = "sglang"
DEFAULT_UNIT = "sglang.service"
DEFAULT_HEALTH_URL = "http://127.0.0.1:30000/health_generate"

Spec = t.Dict[str, t.Dict[str, t.Any]]

CLASSIFIER_OPTIONS: Spec = {
    "engine": {"type": "str", "default": DEFAULT_ENGINE, "choices": list(ENGINES)},
    "extra_rules": {"type": "list", "elements": "dict", "default": []},
    "disabled_rules": {"type": "list", "elements": "str", "default": []},
    "strict": {"type": "bool", "default": False},
}

HEALTH_OPTIONS: Spec = {
    "health_url": {"type": "str", "default": DEFAULT_HEALTH_URL},
    "health_timeout": {"type": "float", "default": 30},
    "validate_certs": {"type": "bool", "default": True},
}

UNIT_OPTIONS: Spec = {
    "unit": {"type": "str", "default": DEFAULT_UNIT},
}

# The wait's own options (wait_ready); its module documentation carries their descriptions.
WAIT_OPTIONS: Spec = {
    "budget": {"type": "float", "default": 3600},
    "stall_limit": {"type": "float", "default": 900},
    "stall_limits": {"type": "dict", "default": {}},
    "health_successes": {"type": "int", "default": 2},
    "soak": {"type": "float", "default": 10},
    "poll_interval": {"type": "float", "default": 5},
    "heartbeat": {"type": "float", "default": 30},
    "invocation_id": {"type": "str"},
    "previous_invocation_id": {"type": "str"},
    "connection_retries": {"type": "int", "default": 5},
    # a node of a multi-node deployment: its rank, the other nodes (host -> rank), and the
    # controller directory through which the nodes' waits see each other
    "deployment": {"type": "str"},
    "node_rank": {"type": "int", "default": 0},
    "peers": {"type": "dict", "default": {}},
    "channel": {"type": "str"},
}


def merged(*specs: Spec) -> Spec:
    """One argument spec of several, each option copied (AnsibleModule may change its spec)."""
    result: Spec = {}
    for spec in specs:
        for name, option in spec.items():
            result[name] = dict(option)
    return result


def wait_argument_spec() -> Spec:
    return merged(UNIT_OPTIONS, HEALTH_OPTIONS, CLASSIFIER_OPTIONS, WAIT_OPTIONS)


# -- value checks beyond types: each returns the problems found, as text naming the option ------

POSITIVE = ("budget", "poll_interval", "heartbeat", "health_timeout", "stall_limit")
NOT_NEGATIVE = ("soak",)
AT_LEAST_ONE = ("health_successes",)


def wait_option_problems(args: t.Mapping[str, t.Any]) -> list[str]:
    """What is wrong with the (type-checked) options of a wait; an empty list when nothing is."""
    problems = []
    for name in POSITIVE:
        if name in args and not _above(args[name], 0):
            problems.append(f"{name} must be a number of seconds > 0, got {args[name]!r}")
    for name in NOT_NEGATIVE:
        if name in args and not _at_least(args[name], 0):
            problems.append(f"{name} must be a number of seconds >= 0, got {args[name]!r}")
    for name in AT_LEAST_ONE:
        if name in args and not _at_least(args[name], 1):
            problems.append(f"{name} must be a whole number >= 1, got {args[name]!r}")
    problems.extend(stall_limit_problems(args.get("stall_limits")))
    problems.extend(deployment_problems(args))
    return problems


def deployment_problems(args: t.Mapping[str, t.Any]) -> list[str]:
    """A node of a deployment needs its deployment's name, a rank, peers with ranks, and a channel."""
    rank, peers = args.get("node_rank", 0), args.get("peers") or {}
    problems = []
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        problems.append(f"node_rank must be a whole number >= 0, got {rank!r}")
    if not isinstance(peers, t.Mapping):
        return [*problems, f"peers must be a mapping of host to node rank, got {type(peers).__name__} {peers!r}"]
    for host, peer_rank in peers.items():
        number = _number(peer_rank)
        if not _at_least(peer_rank, 0) or not math.isfinite(number) or number != int(number):
            problems.append(f"peers: the rank of {host} must be a whole number >= 0, got {peer_rank!r}")
    if peers and not args.get("deployment"):
        problems.append("peers are given but deployment is not: name the deployment the nodes belong to")
    if peers and not args.get("channel"):
        problems.append("peers are given but channel is not: the nodes' waits need a channel name, new for each restart, to see each other")
    if not peers and rank:
        problems.append(f"node_rank {rank} without peers: a node of rank >= 1 belongs to a deployment (give peers, deployment and channel)")
    return problems


def stall_limit_problems(limits: t.Any) -> list[str]:
    if limits is None:
        return []
    if not isinstance(limits, t.Mapping):
        return [f"stall_limits must be a mapping of phase to seconds, got {type(limits).__name__} {limits!r}"]
    problems = []
    for phase, limit in limits.items():
        if phase not in PHASES:
            problems.append(f"stall_limits: {phase!r} is not a phase (one of {', '.join(PHASES)})")
        elif not _above(limit, 0):
            problems.append(f"stall_limits: {phase} must be a number of seconds > 0, got {limit!r}")
    return problems


def _above(value: t.Any, floor: float) -> bool:
    number = _number(value)
    return not math.isnan(number) and number > floor


def _at_least(value: t.Any, floor: float) -> bool:
    number = _number(value)
    return not math.isnan(number) and number >= floor


def _number(value: t.Any) -> float:
    """The value as a number; NaN (which fails every comparison) when it is not one."""
    if isinstance(value, bool):
        return float("nan")
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")
