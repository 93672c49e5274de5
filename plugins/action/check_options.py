# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of inferops.runbooks.check_options: a role's variables, checked before any change.

Reads the role's variables (``<role>_<option>``) as the role would see them, templated, for this
host and for the other hosts named in ``hosts`` (their inventory and extra variables, through
``hostvars``), and hands them to ``plugin_utils/_options.check_role_values``, which converts and
checks them all. Nothing runs on the managed hosts.
"""

from __future__ import annotations

import typing as t

import yaml
from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase

from ansible_collections.inferops.runbooks.plugins.plugin_utils._deployment import TopologyError, from_topology_text, topology_text
from ansible_collections.inferops.runbooks.plugins.plugin_utils._once import once, rule_problems_once
from ansible_collections.inferops.runbooks.plugins.plugin_utils._options import FLEET_OPTIONS, FLEET_PREFIX, check_fleet_values, check_role_values
from ansible_collections.inferops.runbooks.plugins.plugin_utils._plain import plain
from ansible_collections.inferops.runbooks.plugins.plugin_utils._role_options import ROLE_SPECS

ARGUMENT_SPEC: dict[str, t.Any] = {
    "role": {"type": "str", "required": True, "choices": sorted(ROLE_SPECS)},
    "hosts": {"type": "list", "elements": "str", "default": []},
}
# what the target is called in the inventory and in gathered facts (when there are any)
TARGET_NAME_VARS = ("inventory_hostname", "ansible_host")
TARGET_NAME_FACTS = ("fqdn", "hostname", "nodename")
TARGET_ADDRESS_FACTS = ("all_ipv4_addresses", "all_ipv6_addresses")

Lookup = t.Callable[[str], t.Any]


def parse_yaml(text: str) -> t.Any:
    """YAML text (an AWX survey textarea) to data; a short error naming the line and column."""
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ValueError(f"{exc.problem or exc.context or 'cannot be read'}{where}") from None
    except yaml.YAMLError as exc:
        raise ValueError(str(exc)) from None


def rules_checked(engine: str, extra_rules: t.Sequence[t.Any], disabled_rules: t.Sequence[str], prefix: str) -> list[str]:
    """The rules' problems, checked once per run for each distinct set of rules (hosts mostly share theirs)."""
    return [f"{prefix}{problem}" for problem in rule_problems_once(engine, extra_rules, disabled_rules)]


class ActionModule(ActionBase):
    """Checks every variable of a role and its rules on the controller; see the module docs."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def run(self, tmp: t.Any = None, task_vars: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
        task_vars = task_vars or {}
        result: dict[str, t.Any] = super().run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        role = args["role"]
        host = str(task_vars.get("inventory_hostname", "this host"))
        base_dir = str(task_vars.get("playbook_dir") or ".")
        problems, rule_lines, values = self._check(role, lambda name: self._templar.template(task_vars[name]), task_vars.__contains__, base_dir)
        others = [name for name in args["hosts"] if name != host]
        other_problems, other_rule_lines = self._check_others(role, others, task_vars, set(problems + rule_lines), base_dir)
        node, topology_problems = deployment_node(host, task_vars, str(getattr(self._task, "_uuid", "") or ""))
        problems += not_for_multi_node(role, node, values)
        if role == "sglang_restart":
            problems += fleet_problems(lambda name: self._templar.template(task_vars[name]), task_vars.__contains__)
        every = problems + other_problems + topology_problems + rule_lines + other_rule_lines
        if every:
            reason = "invalid_options" if problems or other_problems else "invalid_topology" if topology_problems else "invalid_rules"
            result.update(
                failed=True,
                reason=reason,
                problems=every,
                msg=f"Refusing to run {role} on {host}, nothing was touched: " + "; ".join(every),
            )
            return result
        public = {name: value for name, value in values.items() if not ROLE_SPECS[role][name].get("no_log")}
        result.update(changed=False, options=public, node=node, msg=f"{role}: every variable and rule checked ({1 + len(others)} host(s))")
        return result

    def _check(self, role: str, lookup: Lookup, has: t.Callable[[str], bool], base_dir: str) -> tuple[list[str], list[str], dict[str, t.Any]]:
        """(option problems, rule problems, converted values) of one host."""
        given: dict[str, t.Any] = {}
        problems: list[str] = []
        for name, option in ROLE_SPECS[role].items():
            variable = f"{role}_{name}"
            if not has(variable):
                continue
            try:
                given[name] = plain(lookup(variable))
            except AnsibleError as exc:
                shown = "" if option.get("no_log") else f": {exc.message}"
                problems.append(f"{variable} cannot be templated{shown}")
        check = check_role_values(role, given, self._target_names(lookup, has), parse_yaml, rules_checked, base_dir)
        return problems + check.problems, check.rule_problems, check.values

    def _check_others(self, role: str, hosts: list[str], task_vars: t.Mapping[str, t.Any], known: set[str], base_dir: str) -> tuple[list[str], list[str]]:
        """The other hosts' (option problems, rule problems) that this host does not share, each
        followed by the hosts it concerns."""
        hostvars = task_vars.get("hostvars") or {}
        options: dict[str, list[str]] = {}
        rule_lines: dict[str, list[str]] = {}
        for other in hosts:
            if other not in hostvars:
                options.setdefault(f"{other} is not in the inventory", [])
                continue
            variables = hostvars[other]
            problems, rule_found, _values = self._check(role, variables.__getitem__, variables.__contains__, base_dir)
            for found, into in ((problems, options), (rule_found, rule_lines)):
                for problem in found:
                    if problem not in known:
                        into.setdefault(problem, []).append(other)
        return _on_hosts(options), _on_hosts(rule_lines)

    def _target_names(self, lookup: Lookup, has: t.Callable[[str], bool]) -> list[str]:
        names = []
        for variable in TARGET_NAME_VARS:
            try:
                value = lookup(variable) if has(variable) else None
            except AnsibleError:
                continue
            if isinstance(value, str):
                names.append(str(value))
        try:
            facts = lookup("ansible_facts") if has("ansible_facts") else {}
        except AnsibleError:
            facts = {}
        if isinstance(facts, t.Mapping):
            names.extend(str(facts[key]) for key in TARGET_NAME_FACTS if isinstance(facts.get(key), str))
            for key in TARGET_ADDRESS_FACTS:
                addresses = facts.get(key)
                if isinstance(addresses, (list, tuple)):
                    names.extend(str(address) for address in addresses)
        return names


# what a multi-node deployment cannot do yet: its nodes would take a change, leave the router or run
# drain hooks one by one, without the gates that keep them together (docs/multinode.md); waiting
# for the running requests (load_url) is per node and stays
NOT_FOR_MULTI_NODE = ("dropin_content", "dropin_template", "env_content", "env_template", "router_url", "drain_hooks", "restore_hooks")


def not_for_multi_node(role: str, node: t.Mapping[str, t.Any], values: t.Mapping[str, t.Any]) -> list[str]:
    if role != "sglang_restart" or not node.get("multi_node"):
        return []
    given = [f"{role}_{name}" for name in NOT_FOR_MULTI_NODE if values.get(name)]
    if not given:
        return []
    return [
        f"{', '.join(given)} given for a node of the multi-node deployment {node.get('deployment')}: deploying a change, "
        "draining and rolling back are not supported for multi-node deployments yet (restart them without these)"
    ]


def fleet_problems(lookup: Lookup, has: t.Callable[[str], bool]) -> list[str]:
    """The rollout's options (sglang_batch_size, sglang_min_serving...) given to this play, checked with the role's."""
    given: dict[str, t.Any] = {}
    problems: list[str] = []
    for name in FLEET_OPTIONS:
        variable = f"{FLEET_PREFIX}{name}"
        if has(variable):
            try:
                given[name] = plain(lookup(variable))
            except AnsibleError as exc:
                problems.append(f"{variable} cannot be templated: {exc.message}")
    return problems + check_fleet_values(given).problems


def deployment_node(host: str, task_vars: t.Mapping[str, t.Any], task: str = "") -> tuple[dict[str, t.Any], list[str]]:
    """This host's place in its deployment (sglang_deployment, sglang_node_rank) among the hosts of
    its batch, and the problems of the batch's topology: a node of a multi-node deployment is refused
    with the rest, before anything is touched, when the deployment is wrong or split across batches.
    With ``task`` (the task's id), the batch's topology is read once for all its hosts (every host
    reading every host's variables cost the square of the batch)."""
    batch = [str(name) for name in task_vars.get("ansible_play_batch") or [host]]
    groups = task_vars.get("groups") or {}
    inventory = [str(name) for name in groups.get("all") or []]
    hostvars = task_vars.get("hostvars") or {}

    def read() -> list[str]:
        return topology_text(batch, hostvars, inventory)

    try:
        found = from_topology_text(once("topology", [task, batch, inventory], read) if task else read())
    except TopologyError as exc:
        return {}, [f"the deployments are wrong: {exc}"]
    for deployment in found:
        if any(node.host == host for node in deployment.nodes):
            return deployment.node_of(host), []
    return {"deployment": None, "multi_node": False, "rank": 0, "hosts": [host], "peers": {}}, []


def _on_hosts(problems: dict[str, list[str]]) -> list[str]:
    return [f"{problem} (on {', '.join(names)})" if names else problem for problem, names in problems.items()]
