# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options of the wait and of the roles, and the checks of their values.

Private to the collection; may change at any time. Controller side (standard library only, no Ansible
imports). The options the modules share are declared in ``module_utils/_option_specs`` and used here
as they are, so one option has one type and one default everywhere; the doc fragments in
``plugins/doc_fragments/`` document the same options.

The roles take the same options as variables named ``<role>_<option>``; ``check_role_values``
converts and checks all of a role's variables (types, ranges, URLs, the unit name, the rules) in
one go on the controller, before anything on a host is touched.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os.path
import typing as t
import urllib.parse

from ansible_collections.inferops.runbooks.plugins.module_utils import _engines
from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import RuleError, load_rules
from ansible_collections.inferops.runbooks.plugins.module_utils._health import HealthURLError, split_url
from ansible_collections.inferops.runbooks.plugins.module_utils._option_specs import (
    CLASSIFIER_OPTIONS,
    HEALTH_OPTIONS,
    UNIT_OPTIONS,
    Spec,
    merged,
)
from ansible_collections.inferops.runbooks.plugins.module_utils._rules import PHASES, check_rules
from ansible_collections.inferops.runbooks.plugins.module_utils._systemd import unit_name_problem
from ansible_collections.inferops.runbooks.plugins.plugin_utils._deploy import deploy_option_problems, url_problem
from ansible_collections.inferops.runbooks.plugins.plugin_utils._role_options import COMMA_TEXT, ROLE_SPECS, YAML_TEXT

# The wait's own options (wait_ready); its module documentation carries their descriptions.
WAIT_OPTIONS: Spec = {
    "budget": {"type": "float", "default": 3600},
    "stall_limit": {"type": "float", "default": 900},
    "stall_limits": {"type": "dict", "default": {}},
    "health_successes": {"type": "int", "default": 2},
    "soak": {"type": "float", "default": 10},
    "poll_interval": {"type": "float", "default": 30},
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
    # the host's recent good starts (start_history's good_starts): phases and total of each, for an ETA
    "history_starts": {"type": "list", "elements": "dict", "default": []},
    # the rollout that holds the host's lease (module_utils/_lease): each look renews it, and the wait
    # ends (reason lease_lost) once another run holds it
    "lease_run_id": {"type": "str"},
}


def wait_argument_spec() -> Spec:
    return merged(UNIT_OPTIONS, HEALTH_OPTIONS, CLASSIFIER_OPTIONS, WAIT_OPTIONS)


# -- value checks beyond types: each returns the problems found, as text naming the option ------


class Floor(t.NamedTuple):
    """The least value a number option may take: ``lowest`` itself allowed or not, and what the
    number is, in the words of the refusal (``must be a number of seconds > 0, got 0``)."""

    lowest: int
    inclusive: bool
    what: str

    def holds(self, value: t.Any) -> bool:
        return (_at_least if self.inclusive else _above)(value, self.lowest)

    def refusal(self, name: str, value: t.Any) -> str:
        return f"{name} must be {self.what} {'>=' if self.inclusive else '>'} {self.lowest}, got {_shown(value)}"


SECONDS = Floor(0, False, "a number of seconds")
WHOLE_SECONDS = Floor(0, False, "a whole number of seconds")
# The floor of every number the wait or a role takes (a timeout of 0 or less would only fail once the
# server was restarted); the port has its range (PORTS). tests/unit holds every number option of the
# roles to an entry here, and its documentation (meta/argument_specs.yml) to saying it.
FLOORS: dict[str, Floor] = {
    "budget": SECONDS,
    "stall_limit": SECONDS,
    "poll_interval": SECONDS,
    "heartbeat": SECONDS,
    "health_timeout": SECONDS,
    "soak": Floor(0, True, "a number of seconds"),
    "health_successes": Floor(1, True, "a whole number"),
    "release_timeout": WHOLE_SECONDS,
    "smoke_timeout": WHOLE_SECONDS,
    "router_timeout": WHOLE_SECONDS,
    "drain_timeout": WHOLE_SECONDS,
    "lock_wait": Floor(0, True, "a whole number of seconds"),
    "lock_stale": WHOLE_SECONDS,
    "history_size": Floor(1, True, "a whole number"),
    "history_min_good": Floor(1, True, "a whole number"),
    "history_stall_factor": Floor(1, True, "a number"),
    "history_stall_floor": SECONDS,
    "history_slow_ratio": Floor(1, True, "a number"),
    "history_fleet_ratio": Floor(1, True, "a number"),
    "request_error_limit": Floor(0, True, "a whole number"),
    "canary_requests": Floor(1, True, "a whole number"),
    "canary_concurrency": Floor(1, True, "a whole number"),
    "canary_prompt_tokens": Floor(1, True, "a whole number"),
    "canary_max_tokens": Floor(1, True, "a whole number"),
    "alertmanager_margin": Floor(1, True, "a number"),
}


def floor_problems(args: t.Mapping[str, t.Any], prefix: str = "") -> list[str]:
    """The options of ``args`` below their floor (FLOORS), each named with ``prefix``."""
    return [floor.refusal(f"{prefix}{name}", args[name]) for name, floor in FLOORS.items() if args.get(name) is not None and not floor.holds(args[name])]


def wait_option_problems(args: t.Mapping[str, t.Any], prefix: str = "") -> list[str]:
    """What is wrong with the (type-checked) options of a wait; an empty list when nothing is.

    ``prefix`` goes before each option's name in the messages (a role's variables are
    ``<role>_<option>``).
    """
    problems = floor_problems(args, prefix)
    problems.extend(stall_limit_problems(args.get("stall_limits"), prefix))
    problems.extend(deployment_problems(args, prefix))
    return problems


def deployment_problems(args: t.Mapping[str, t.Any], prefix: str = "") -> list[str]:
    """A node of a deployment needs its deployment's name, a rank, peers with ranks, and a channel."""
    rank, peers = args.get("node_rank", 0), args.get("peers") or {}
    problems = []
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        problems.append(f"{prefix}node_rank must be a whole number >= 0, got {_shown(rank)}")
    if not isinstance(peers, t.Mapping):
        return [*problems, f"{prefix}peers must be a mapping of host to node rank, got {_got(peers)}"]
    for host, peer_rank in peers.items():
        number = _number(peer_rank)
        if not _at_least(peer_rank, 0) or not math.isfinite(number) or number != int(number):
            problems.append(f"{prefix}peers: the rank of {host} must be a whole number >= 0, got {_shown(peer_rank)}")
    if peers and not args.get("deployment"):
        problems.append(f"{prefix}peers are given but {prefix}deployment is not: name the deployment the nodes belong to")
    if peers and not args.get("channel"):
        problems.append(f"{prefix}peers are given but {prefix}channel is not: the nodes' waits need a channel name, new for each restart, to see each other")
    if not peers and rank:
        problems.append(f"{prefix}node_rank {_shown(rank)} without peers: a node of rank >= 1 belongs to a deployment (give peers, deployment and channel)")
    return problems


def stall_limit_problems(limits: t.Any, prefix: str = "") -> list[str]:
    name = f"{prefix}stall_limits"
    if limits is None:
        return []
    if not isinstance(limits, t.Mapping):
        return [f"{name} must be a mapping of phase to seconds, got {_got(limits)}"]
    problems = []
    for phase, limit in limits.items():
        if phase not in PHASES:
            problems.append(f"{name}: {_shown(phase)} is not a phase (one of {', '.join(PHASES)})")
        elif not _above(limit, 0):
            problems.append(f"{name}: {phase} must be a number of seconds > 0, got {_shown(limit)}")
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


# -- the roles' variables -------------------------------------------------------------------------
# A role's variable is <role>_<option>. The options are written once, in specs/options.yml;
# scripts/options.py (make options) writes from it the roles' meta/argument_specs.yml and
# defaults/main.yml, the AWX surveys, and _role_options (the declarations checked here). tests/unit
# holds the options the wait or the probe also take to their declaration in module_utils/_option_specs.

DEPLOY_OPTIONS = (
    *("dropin_name", "dropin_content", "dropin_template", "env_file", "env_content", "env_template"),
    *("force_restart", "verify_unit", "rollback"),
    *("router_url", "router_api_key", "worker_url", "router_timeout", "load_url", "drain_timeout", "drain_hooks", "restore_hooks"),
)
# AWX surveys send text: these options may also be given as YAML text, or as comma-separated text (YAML_TEXT, COMMA_TEXT).
PORTS = (1, 65535)
# URLs that must point at the target itself: (option, the option that allows another host, why not)
TARGET_URLS = (
    ("health_url", "allow_remote_health", "the health gate would judge another server than the one restarted"),
    ("smoke_url", "allow_remote_smoke", "the smoke test would test another server, and the API key would be sent to it"),
)


class RoleCheck(t.NamedTuple):
    """The outcome of checking a role's variables: the values, converted, and what is wrong."""

    values: dict[str, t.Any]
    problems: list[str]
    rule_problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems and not self.rule_problems


def check_role_values(
    role: str,
    given: t.Mapping[str, t.Any],
    target_names: t.Iterable[str] = (),
    parse_yaml: t.Callable[[str], t.Any] = json.loads,
    check_rules: t.Optional[t.Callable[[str, t.Sequence[t.Any], t.Sequence[str], str], list[str]]] = None,
    base_dir: str = ".",
) -> RoleCheck:
    """Convert and check every variable of a role; nothing is left unchecked for later.

    ``given`` maps option names (without the role prefix) to the values as the role sees them;
    missing ones take their defaults. ``target_names`` are the names and addresses of the host
    the role runs against, for the check that the URLs point at it. ``parse_yaml`` reads the
    options that may come as YAML text. ``check_rules`` replaces ``rule_problems`` (a caller that
    checks many hosts with the same rules compiles them once). Relative template and hook paths of
    a deploy are looked up under ``base_dir`` (the playbook's directory).
    """
    spec = ROLE_SPECS[role]
    prefix = f"{role}_"
    values: dict[str, t.Any] = {}
    problems: list[str] = []
    for name, option in spec.items():
        value, problem = convert(name, given.get(name, option.get("default")), option, parse_yaml)
        if problem is None:
            values[name] = value
        else:
            problems.append(f"{prefix}{name} {problem}")
    if "smoke_test" in values and values["smoke_test"] is None:
        values["smoke_test"] = values.get("engine") in _engines.DRIVERS and _engines.get(values["engine"]).smoke_by_default
    problems.extend(floor_problems(values, prefix))
    problems.extend(stall_limit_problems(values.get("stall_limits"), prefix))
    problems.extend(_role_only_problems(values, prefix, list(target_names)))
    problems.extend(canary_problems(values, prefix))
    problems.extend(alertmanager_problems(values, prefix))
    if role == "sglang_restart":
        problems.extend(deploy_option_problems({name: values[name] for name in DEPLOY_OPTIONS if name in values}, base_dir))
    rules = []
    if all(name in values for name in ("engine", "extra_rules", "disabled_rules")):
        rules = (check_rules or rule_problems)(values["engine"], values["extra_rules"], values["disabled_rules"], prefix)
    return RoleCheck(values, problems, rules)


def canary_problems(values: t.Mapping[str, t.Any], prefix: str = "") -> list[str]:
    """The canary's thresholds and floors (whether or not it is on), and, when it is on, a server it may load:
    the health URL's, on loopback (the canary never sends its load across the network)."""
    # imported here: the canary's HTTP client is no part of a wait's looks, which import these options
    from ansible_collections.inferops.runbooks.plugins.module_utils._canary import CanaryError, loopback_target, parse_floors, parse_thresholds

    problems = []
    if isinstance(values.get("canary_thresholds"), t.Mapping):
        try:
            parse_thresholds(values["canary_thresholds"])
        except CanaryError as exc:
            problems.append(f"{prefix}canary_thresholds: {exc}")
    if isinstance(values.get("canary_floors"), t.Mapping):
        try:
            parse_floors(values["canary_floors"])
        except CanaryError as exc:
            problems.append(f"{prefix}canary_floors: {exc}")
    if values.get("canary") and isinstance(values.get("health_url"), str):
        try:
            loopback_target(values["health_url"])
        except CanaryError:
            problems.append(
                f"{prefix}canary loads the server of {prefix}health_url, which must then be on loopback (127.0.0.1, ::1, localhost),"
                f" got {_shown(values['health_url'])}"
            )
    return problems


def alertmanager_problems(values: t.Mapping[str, t.Any], prefix: str = "") -> list[str]:
    """The Alertmanager a planned restart silences its host in: an http(s) URL with a host, headers that
    map names to text, and no key or headers without a URL. A header's value is never shown."""
    url = values.get("alertmanager_url") or ""
    headers = values.get("alertmanager_headers") or {}
    problems = []
    if isinstance(url, str) and url:
        problem = url_problem(url.strip())
        if problem:
            problems.append(f"{prefix}alertmanager_url {problem}")
    if isinstance(headers, t.Mapping):
        bad = [str(name) for name, value in headers.items() if not isinstance(name, str) or not name or not isinstance(value, str)]
        if bad:
            problems.append(f"{prefix}alertmanager_headers must map header names to text values (the value of {bad[0]!r} is not text)")
    for secret in ("alertmanager_api_key", "alertmanager_headers"):
        if values.get(secret) and not url:
            problems.append(f"{prefix}{secret} is set but {prefix}alertmanager_url is empty: no Alertmanager would be called")
    return problems


def rule_problems(engine: str, extra_rules: t.Sequence[t.Any], disabled_rules: t.Sequence[str], prefix: str = "") -> list[str]:
    """The user's rules compiled with the engine's packs, as the target will, and tried on adversarial
    lines (a pattern that backtracks without end is refused); what fails, named."""
    try:
        check_rules(engine, extra_rules, None)
    except RuleError as exc:
        return [f"{prefix}extra_rules: {exc}"]
    try:
        load_rules(engine, extra_rules, disabled_rules)
    except RuleError as exc:
        return [f"{prefix}disabled_rules: {exc}"]
    return []


# -- conversion of one value to its option's type ---------------------------------------------------

_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def convert(name: str, value: t.Any, option: t.Mapping[str, t.Any], parse_yaml: t.Callable[[str], t.Any] = json.loads) -> tuple[t.Any, str | None]:
    """(the value as its option's type, None) or (None, what is wrong, without the name)."""
    kind = option.get("type", "raw")
    if value is None:
        value = option.get("default")
    if value is None and "default" in option and option["default"] is None:
        return None, None  # unset, and its default is decided from other options (smoke_test)
    if isinstance(value, str) and kind in ("list", "dict"):
        if name in COMMA_TEXT:
            value = [item.strip() for item in value.split(",") if item.strip()]
        elif name in YAML_TEXT:
            value, problem = _from_yaml(value, parse_yaml, option)
            if problem is not None:
                return None, problem
    converter = _CONVERTERS.get(kind)
    converted, problem = converter(value, option) if converter else (value, None)
    if problem is None and "choices" in option and converted not in option["choices"]:
        return None, f"must be one of {', '.join(map(str, option['choices']))}, got {_shown(value)}"
    if problem is not None and option.get("no_log"):
        return None, f"must be {_TYPE_WORDS.get(kind, kind)} (the value is not shown: it is secret)"
    return converted, problem


def _from_yaml(text: str, parse_yaml: t.Callable[[str], t.Any], option: t.Mapping[str, t.Any]) -> tuple[t.Any, str | None]:
    if not text.strip():
        return option.get("default"), None
    try:
        parsed = parse_yaml(text)
    except Exception as exc:  # any parser's error: the text is not YAML
        reason = " ".join(str(exc).split())[:160]
        return None, f"is not valid YAML text ({reason}), got {_shown(text)}"
    return (option.get("default") if parsed is None else parsed), None


_TYPE_WORDS = {"str": "text", "int": "a whole number", "float": "a number", "bool": "true or false", "list": "a list", "dict": "a mapping"}


def _as_str(value: t.Any, option: t.Mapping[str, t.Any]) -> tuple[t.Any, str | None]:
    if isinstance(value, str):
        return str(value), None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value), None
    return None, f"must be text, got {_got(value)}"


def _as_int(value: t.Any, option: t.Mapping[str, t.Any]) -> tuple[t.Any, str | None]:
    number = _number(value.strip() if isinstance(value, str) else value)
    if math.isfinite(number) and number == int(number):
        return int(number), None
    return None, f"must be a whole number, got {_shown(value)}"


def _as_float(value: t.Any, option: t.Mapping[str, t.Any]) -> tuple[t.Any, str | None]:
    number = _number(value.strip() if isinstance(value, str) else value)
    if math.isfinite(number):
        return (int(number) if number == int(number) else number), None
    return None, f"must be a number, got {_shown(value)}"


def _as_bool(value: t.Any, option: t.Mapping[str, t.Any]) -> tuple[t.Any, str | None]:
    if isinstance(value, bool):
        return value, None
    text = str(value).strip().lower() if isinstance(value, (str, int)) else None
    if text in _TRUE:
        return True, None
    if text in _FALSE:
        return False, None
    return None, f"must be true or false, got {_shown(value)}"


def _as_list(value: t.Any, option: t.Mapping[str, t.Any]) -> tuple[t.Any, str | None]:
    if not isinstance(value, (list, tuple)):
        return None, f"must be a list, got {_got(value)}"
    items = list(value)
    elements = option.get("elements")
    wrong = [f"item #{index + 1} is {_shown(item)}" for index, item in enumerate(items) if not _is_element(item, elements)]
    if wrong:
        return None, f"must be a list of {_TYPE_WORDS.get(elements or '', 'items')} items: {', '.join(wrong)}"
    return [str(item) if elements == "str" else item for item in items], None


def _is_element(item: t.Any, elements: str | None) -> bool:
    if elements == "str":
        return isinstance(item, str) and bool(item.strip())
    if elements == "dict":
        return isinstance(item, t.Mapping)
    return True


def _as_dict(value: t.Any, option: t.Mapping[str, t.Any]) -> tuple[t.Any, str | None]:
    if isinstance(value, t.Mapping):
        return dict(value), None
    return None, f"must be a mapping, got {_got(value)}"


_CONVERTERS: dict[str, t.Callable[[t.Any, t.Mapping[str, t.Any]], tuple[t.Any, str | None]]] = {
    "str": _as_str,
    "int": _as_int,
    "float": _as_float,
    "bool": _as_bool,
    "list": _as_list,
    "dict": _as_dict,
}


# -- the roles' own checks ----------------------------------------------------------------------


def _role_only_problems(values: t.Mapping[str, t.Any], prefix: str, target_names: list[str]) -> list[str]:
    problems = []
    if "unit" in values:
        problem = unit_name_problem(values["unit"])
        if problem:
            problems.append(f"{prefix}unit {problem}, got {_shown(values['unit'])}")
    if "port" in values and not PORTS[0] <= values["port"] <= PORTS[1]:
        problems.append(f"{prefix}port must be a TCP port ({PORTS[0]}-{PORTS[1]}), got {values['port']!r}")
    for url, allow, why in TARGET_URLS:
        # the smoke URL is only used (and only gets the API key) with the smoke test on
        if url in values and (url != "smoke_url" or values.get("smoke_test")):
            problems.extend(_url_problems(values[url], prefix, url, target_names, values.get(allow, False), allow, why))
    problems.extend(_load_url_problems(values, prefix, target_names))
    report_dir = values.get("report_dir") or ""
    if report_dir and os.path.exists(report_dir) and not os.path.isdir(report_dir):
        problems.append(f"{prefix}report_dir must be a directory on the controller, got {_shown(report_dir)}, which is a file")
    return problems


def _load_url_problems(values: t.Mapping[str, t.Any], prefix: str, target_names: list[str]) -> list[str]:
    """The drain sends the API key to the load URL's guarded endpoints: with a key, it must be the target's."""
    load_url = values.get("load_url") or ""
    if not values.get("api_key") or not isinstance(load_url, str) or not load_url or url_problem(load_url):
        return []  # a malformed URL is refused with the deploy's checks
    if is_target_address(urllib.parse.urlsplit(load_url).hostname or "", target_names):
        return []
    own = ", ".join(dict.fromkeys(name for name in target_names if name)) or "none known"
    return [
        f"{prefix}load_url must point at the target itself (a loopback address, or one of its own names: {own}) when {prefix}api_key is set,"
        f" got {_shown(load_url)}: the drain sends the API key to it"
    ]


def _url_problems(url: str, prefix: str, option: str, target_names: list[str], allowed: bool, allow: str, why: str) -> list[str]:
    name, allow_name = f"{prefix}{option}", f"{prefix}{allow}"
    try:
        split_url(url)
    except HealthURLError:
        return [f"{name} must be an http:// or https:// URL with a host, got {_shown(url)}"]
    host = urllib.parse.urlsplit(url).hostname or ""
    if allowed or is_target_address(host, target_names):
        return []
    own = ", ".join(dict.fromkeys(name for name in target_names if name)) or "none known"
    return [
        f"{name} must point at the target itself (a loopback address, or one of its own names: {own}), got {_shown(url)}: "
        f"{why}. Set {allow_name}: true if that is intended"
    ]


def is_target_address(host: str, target_names: t.Iterable[str]) -> bool:
    """True for a loopback host, or one of the target's own names or addresses."""
    host = host.strip().lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        if ipaddress.ip_address(host).is_loopback:
            return True
    except ValueError:
        pass
    return host in {str(name).strip().lower().rstrip(".") for name in target_names if name}


def _kind(value: t.Any) -> str:
    """A word for a value's type that a YAML user knows (not a Python class name)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, t.Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return "a value"


def _got(value: t.Any) -> str:
    return "null" if value is None else f"{_kind(value)} {_shown(value)}"


def _shown(value: t.Any, limit: int = 120) -> str:
    """The value as the user wrote it, short: text quoted, null/true/false/lists as in YAML flow style."""
    if isinstance(value, str):
        text = repr(str(value))
    else:
        try:
            text = json.dumps(value, default=str, ensure_ascii=False)
        except (TypeError, ValueError):
            text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- the rollout's own options: play variables sglang_<option> of playbooks/restart_sglang.yml ----
# (not role variables: they shape the play's batches and gates, not one host's restart)

FLEET_PREFIX = "sglang_"
FLEET_OPTIONS: Spec = {
    # deployments per batch after the canary: a number, a percent of the play's deployments, or a ramp
    "batch_size": {"type": "raw", "default": 1},
    # how many of the play's deployments may fail (rolled back, or out of the router) before the run stops
    "max_fail_percentage": {"type": "float", "default": 0},
    # how many of the play's deployments must serve before a batch takes its hosts out: a count or a percent
    "min_serving": {"type": "raw", "default": 0},
    # how long a batch waits for the floor before the run stops
    "capacity_timeout": {"type": "int", "default": 600},
    # seconds the hosts of each batch are watched after the batch (the bake)
    "batch_pause": {"type": "int", "default": 0},
}
FLOORS.update(
    {
        "max_fail_percentage": Floor(0, True, "a percentage"),
        "capacity_timeout": WHOLE_SECONDS,
        "batch_pause": Floor(0, True, "a whole number of seconds"),
    }
)


class Step(t.NamedTuple):
    """One batch size: a count of deployments, or a percent of the play's deployments."""

    number: int
    percent: float | None = None

    def of(self, total: int) -> int:
        """Deployments in the batch among ``total`` (a percent rounds down, as Ansible's serial, but to 1 at least)."""
        if self.percent is None:
            return self.number
        return max(1, int(total * self.percent / 100))

    def shown(self) -> str:
        return str(self.number) if self.percent is None else f"{self.percent:g}%"


def _percent(text: str) -> float | None:
    number = _number(text[:-1].strip()) if text.endswith("%") else float("nan")
    return number if math.isfinite(number) else None


def parse_step(value: t.Any) -> Step | None:
    """A batch size item: a whole number >= 1, or a percent in (0, 100]; None when it is neither."""
    if isinstance(value, str) and not value.isascii():
        return None
    if isinstance(value, str) and value.strip().endswith("%"):
        percent = _percent(value.strip())
        return Step(0, percent) if percent is not None and 0 < percent <= 100 else None
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        return None
    converted, problem = _as_int(value, {})
    return Step(int(converted)) if problem is None and converted >= 1 else None


def ramp_items(value: t.Any) -> list[t.Any] | None:
    """The items of a batch size: one for a number or a percent, several for a ramp (a list, or AWX
    text: ``1, 5, 25%`` or ``[1, 5, "25%"]``); None when it is not one of these."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("[") and text.endswith("]"):
            text = text[1:-1]
        return [item.strip().strip("'\"") for item in text.split(",")] if text else []
    return [value]


BATCH_SIZE_WORDS = "a whole number >= 1, a percent of the play's deployments ('25%', above 0 and at most 100), or a ramp of them ([1, 5, '25%'])"
SHARE_WORDS = "a whole number >= 0 or a percent of the play's deployments ('75%', 0 to 100)"


def parse_batch_size(value: t.Any, name: str = f"{FLEET_PREFIX}batch_size") -> tuple[list[Step], str | None]:
    """(the ramp's steps, None) or ([], what is wrong, naming the option and the value)."""
    items = ramp_items(value)
    steps = [parse_step(item) for item in items or []]
    if not items or any(step is None for step in steps):
        wrong = [f"item #{index + 1} is {_shown(item)}" for index, item in enumerate(items or []) if parse_step(item) is None]
        detail = f" ({', '.join(wrong)})" if wrong and len(items or []) > 1 else ""
        return [], f"{name} must be {BATCH_SIZE_WORDS}, got {_shown(value)}{detail}"
    return [step for step in steps if step is not None], None


def parse_share(value: t.Any, name: str) -> tuple[Step | None, str | None]:
    """A count (>= 0) or a percent (0 to 100) of the play's deployments: (step, None) or (None, what is wrong)."""
    if isinstance(value, str) and value.strip().endswith("%"):
        percent = _percent(value.strip())
        if percent is not None and 0 <= percent <= 100:
            return Step(0, percent), None
    elif not isinstance(value, (bool, list, dict)) and value is not None:
        converted, problem = _as_int(value, {})
        if problem is None and converted >= 0:
            return Step(converted), None
    return None, f"{name} must be {SHARE_WORDS}, got {_shown(value)}"


def needed(share: Step, total: int) -> int:
    """How many of ``total`` deployments a floor asks for: a percent rounds up (as a PodDisruptionBudget's minAvailable)."""
    if share.percent is None:
        return share.number
    return math.ceil(total * share.percent / 100 - 1e-9)


def check_fleet_values(given: t.Mapping[str, t.Any]) -> RoleCheck:
    """Convert and check the rollout's options (FLEET_OPTIONS, named without their prefix); every problem at once."""
    values: dict[str, t.Any] = {}
    problems: list[str] = []
    for name, option in FLEET_OPTIONS.items():
        value, problem = convert(name, given.get(name, option.get("default")), option)
        if problem is None:
            values[name] = value
        else:
            problems.append(f"{FLEET_PREFIX}{name} {problem}")
    problems.extend(floor_problems({name: values[name] for name in values if name in FLOORS}, FLEET_PREFIX))
    if "max_fail_percentage" in values and _above(values["max_fail_percentage"], 100):
        problems.append(f"{FLEET_PREFIX}max_fail_percentage must be a percentage from 0 to 100, got {_shown(values['max_fail_percentage'])}")
    steps, problem = parse_batch_size(values.get("batch_size"))
    values["batch_size"] = [step.shown() for step in steps]
    if problem:
        problems.append(problem)
    share, problem = parse_share(values.get("min_serving"), f"{FLEET_PREFIX}min_serving")
    values["min_serving"] = share.shown() if share else None
    if problem:
        problems.append(problem)
    return RoleCheck(values, problems, [])
