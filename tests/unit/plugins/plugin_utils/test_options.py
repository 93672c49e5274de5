"""The roles' variables, checked before anything is touched: check_role_values on the values users
give (survey text included) and on the mistakes that once restarted a server before failing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ansible_collections.inferops.runbooks.plugins.plugin_utils._deployment import DEPLOYMENT_VAR, RANK_VAR
from ansible_collections.inferops.runbooks.plugins.plugin_utils._options import (
    FLOORS,
    check_role_values,
    is_target_address,
    wait_option_problems,
)
from ansible_collections.inferops.runbooks.plugins.plugin_utils._role_options import COMMA_TEXT, ROLE_SPECS, YAML_TEXT

REPO = Path(__file__).resolve().parents[4]
TARGET = ["sim1", "10.221.1.2"]


def check(given: dict[str, Any], role: str = "sglang_restart") -> tuple[list[str], list[str], dict[str, Any]]:
    result = check_role_values(role, given, TARGET, yaml.safe_load)
    return result.problems, result.rule_problems, result.values


@pytest.mark.parametrize("role", sorted(ROLE_SPECS))
def test_defaults_pass_and_every_option_comes_back_converted(role: str) -> None:
    problems, rules, values = check({}, role)
    assert problems == [] and rules == []
    assert set(values) == set(ROLE_SPECS[role])


def test_survey_text_is_converted() -> None:
    survey = {
        "budget": "120",
        "soak": "2.5",
        "health_successes": "3",
        "strict": "true",
        "stop_first": "no",
        "stall_limits": "capturing_cuda_graphs: 90",
        "disabled_rules": "sglang-kernel-config-missing, common-deprecated-pynvml",
        "extra_rules": "- {id: local-moe, pattern: 'Using default MoE config', reason: tuned configs not shipped here}",
    }
    problems, rules, values = check(survey)
    assert problems == [] and rules == []
    assert values["budget"] == 120 and values["soak"] == 2.5 and values["health_successes"] == 3
    assert values["strict"] is True and values["stop_first"] is False
    assert values["stall_limits"] == {"capturing_cuda_graphs": 90}
    assert values["disabled_rules"] == ["sglang-kernel-config-missing", "common-deprecated-pynvml"]
    assert values["extra_rules"][0]["id"] == "local-moe"


# Each mistake that once restarted the server before failing: refused, naming the variable, the value
# and what is allowed.
REFUSED = [
    ({"health_url": "file:///etc/passwd"}, "sglang_restart_health_url must be an http:// or https:// URL with a host, got 'file:///etc/passwd'"),
    ({"health_url": "gopher://x"}, "sglang_restart_health_url must be an http:// or https:// URL with a host, got 'gopher://x'"),
    ({"budget": 0}, "sglang_restart_budget must be a number of seconds > 0, got 0"),
    ({"budget": -1}, "sglang_restart_budget must be a number of seconds > 0, got -1"),
    ({"health_successes": 0}, "sglang_restart_health_successes must be a whole number >= 1, got 0"),
    ({"soak": -5}, "sglang_restart_soak must be a number of seconds >= 0, got -5"),
    ({"stall_limit": 0}, "sglang_restart_stall_limit must be a number of seconds > 0, got 0"),
    ({"stall_limits": "capturing_cuda_graphs: [90"}, "sglang_restart_stall_limits is not valid YAML text ("),
    ({"stall_limits": {"compiling": 90}}, "sglang_restart_stall_limits: 'compiling' is not a phase (one of starting, loading_weights"),
    ({"stall_limits": {"warming_up": 0}}, "sglang_restart_stall_limits: warming_up must be a number of seconds > 0, got 0"),
    ({"unit": ""}, "sglang_restart_unit is empty: name the systemd unit of the server (sglang.service), got ''"),
    ({"unit": "../etc/passwd"}, "sglang_restart_unit is not a systemd unit name"),
    ({"unit": "a;reboot"}, "sglang_restart_unit is not a systemd unit name"),
    ({"disabled_rules": [1, None]}, "sglang_restart_disabled_rules must be a list of text items: item #1 is 1, item #2 is null"),
    ({"budget": "soon"}, "sglang_restart_budget must be a number, got 'soon'"),
    ({"strict": "maybe"}, "sglang_restart_strict must be true or false, got 'maybe'"),
    ({"engine": "tgi"}, "sglang_restart_engine must be one of auto, sglang, vllm, got 'tgi'"),
    ({"port": 70000}, "sglang_restart_port must be a TCP port (1-65535), got 70000"),
    ({"extra_rules": {"id": "x"}}, "sglang_restart_extra_rules must be a list, got a mapping"),
    ({"api_key": ["sk-secret-123"]}, "sglang_restart_api_key must be text (the value is not shown: it is secret)"),
    # a timeout of 0 or less once restarted the server and failed only then
    ({"health_timeout": 0}, "sglang_restart_health_timeout must be a number of seconds > 0, got 0"),
    ({"health_timeout": "-1.5"}, "sglang_restart_health_timeout must be a number of seconds > 0, got -1.5"),
    ({"release_timeout": 0}, "sglang_restart_release_timeout must be a whole number of seconds > 0, got 0"),
    ({"smoke_timeout": -5}, "sglang_restart_smoke_timeout must be a whole number of seconds > 0, got -5"),
    ({"router_timeout": "0"}, "sglang_restart_router_timeout must be a whole number of seconds > 0, got 0"),
    ({"drain_timeout": -30}, "sglang_restart_drain_timeout must be a whole number of seconds > 0, got -30"),
    ({"drain_timeout": "5m"}, "sglang_restart_drain_timeout must be a whole number, got '5m'"),
    ({"poll_interval": 0}, "sglang_restart_poll_interval must be a number of seconds > 0, got 0"),
    ({"heartbeat": -1}, "sglang_restart_heartbeat must be a number of seconds > 0, got -1"),
]


@pytest.mark.parametrize(("given", "message"), REFUSED, ids=[f"{next(iter(given))}={next(iter(given.values()))!r}" for given, _message in REFUSED])
def test_each_mistake_is_refused_with_a_message_naming_it(given: dict[str, Any], message: str) -> None:
    problems, _rules, _values = check(given)
    assert any(problem.startswith(message) for problem in problems), problems
    assert "sk-secret-123" not in " ".join(problems)


TIMEOUTS = [(role, name) for role, spec in sorted(ROLE_SPECS.items()) for name in spec if name.endswith("_timeout")]


@pytest.mark.parametrize(("role", "name"), TIMEOUTS, ids=[f"{role}_{name}" for role, name in TIMEOUTS])
@pytest.mark.parametrize("value", [0, -1, "0", " -30 "])
def test_no_timeout_of_a_role_may_be_zero_or_less(role: str, name: str, value: Any) -> None:
    """Each is refused with the others, naming the variable, the value and what is allowed; the
    least value above 0 that the type takes is accepted."""
    whole = ROLE_SPECS[role][name]["type"] == "int"
    problems, _rules, _values = check({name: value}, role)
    words = "a whole number of seconds" if whole else "a number of seconds"
    assert problems == [f"{role}_{name} must be {words} > 0, got {int(str(value).strip())}"]
    assert check({name: 1 if whole else 0.001}, role)[0] == []


# how meta/argument_specs.yml says a floor
FLOOR_WORDS = {(0, False): "more than 0", (0, True): "0 or more", (1, True): "at least 1"}


@pytest.mark.parametrize("role", sorted(ROLE_SPECS))
def test_every_number_of_a_role_has_a_floor_and_its_documentation_says_it(role: str) -> None:
    """No number option is left to fail after the restart: each has a floor in FLOORS (the port has
    its range), and its description in meta/argument_specs.yml states it."""
    documented = _argument_specs(role)
    for name, option in ROLE_SPECS[role].items():
        if option["type"] not in ("int", "float") or name == "port":
            continue
        assert name in FLOORS, f"{role}_{name} takes a number but has no floor in FLOORS"
        floor = FLOORS[name]
        description = documented[f"{role}_{name}"]["description"]
        text = " ".join(description) if isinstance(description, list) else description
        assert FLOOR_WORDS[(floor.lowest, floor.inclusive)] in text, f"{role}_{name}: {text}"


def test_every_problem_is_reported_at_once() -> None:
    problems, _rules, _values = check({"budget": 0, "soak": -1, "health_successes": 0, "unit": ""})
    assert len(problems) == 4


def test_rules_are_checked_and_named_by_their_variable() -> None:
    _problems, rules, _values = check({"disabled_rules": ["no-such-rule"]})
    assert rules and rules[0].startswith("sglang_restart_disabled_rules: disabled rule id(s) no-such-rule match no rule")
    bad = [{"id": "broken", "pattern": "a(", "reason": "x"}]
    _problems, rules, _values = check({"extra_rules": bad})
    assert rules[0].startswith("sglang_restart_extra_rules: rule 'broken' (extra rules #1): invalid regular expression 'a(': missing )")
    _problems, rules, _values = check({"extra_rules": "- {id: broken, pattern: 'a(', reason: x}"}, "sglang_precheck")
    assert rules[0].startswith("sglang_precheck_extra_rules: rule 'broken'")


def test_urls_must_point_at_the_target_unless_allowed() -> None:
    problems, _rules, _values = check({"health_url": "http://169.254.169.254/latest/meta-data/"})
    assert problems[0].startswith("sglang_restart_health_url must point at the target itself (a loopback address, or one of its own names: sim1, 10.221.1.2)")
    assert "Set sglang_restart_allow_remote_health: true" in problems[0]
    for url in (
        "http://127.0.0.1:30000/health",
        "http://localhost:30000/health",
        "http://[::1]:30000/health",
        "http://10.221.1.2:30000/health",
        "https://sim1/health",
    ):
        assert check({"health_url": url})[0] == [], url
    assert check({"health_url": "http://169.254.169.254/", "allow_remote_health": "true"})[0] == []

    remote_smoke = {"smoke_test": True, "smoke_url": "http://api.example.com/v1/completions"}
    problems, _rules, _values = check(remote_smoke)
    assert problems and "the API key would be sent to it" in problems[0] and "sglang_restart_allow_remote_smoke" in problems[0]
    assert check({**remote_smoke, "smoke_test": False})[0] == []
    assert check({**remote_smoke, "allow_remote_smoke": True})[0] == []


def test_is_target_address() -> None:
    assert is_target_address("127.0.0.53", [])
    assert is_target_address("LOCALHOST.", [])
    assert is_target_address("Gpu-Node-01", ["gpu-node-01"])
    assert not is_target_address("169.254.169.254", ["gpu-node-01", "192.0.2.11"])
    assert not is_target_address("", [])


def test_report_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    a_file = tmp_path / "reports"
    a_file.write_text("")
    problems, _rules, _values = check({"report_dir": str(a_file)}, "sglang_precheck")
    assert problems == [f"sglang_precheck_report_dir must be a directory on the controller, got {str(a_file)!r}, which is a file"]


def test_wait_option_problems_names_options_with_a_prefix() -> None:
    assert wait_option_problems({"budget": 0}) == ["budget must be a number of seconds > 0, got 0"]
    assert wait_option_problems({"budget": 0}, "x_") == ["x_budget must be a number of seconds > 0, got 0"]


def _argument_specs(role: str) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())
    return dict(spec["argument_specs"]["main"]["options"])


@pytest.mark.parametrize("role", sorted(ROLE_SPECS))
def test_the_role_documents_and_defaults_exactly_the_options_checked(role: str) -> None:
    """meta/argument_specs.yml (the documentation), defaults/main.yml and the checked spec agree:
    same variables, same types, same defaults. The deployment's host variables are documented too;
    check_options checks them with the deployment's topology, not as role variables."""
    documented = {name: option for name, option in _argument_specs(role).items() if name not in (DEPLOYMENT_VAR, RANK_VAR)}
    defaults = yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text())
    checked = {f"{role}_{name}": option for name, option in ROLE_SPECS[role].items()}
    assert set(documented) == set(checked) == set(defaults)
    for variable, option in checked.items():
        # options that may also come as text (AWX surveys) are documented as raw
        text_forms = variable.removeprefix(f"{role}_") in COMMA_TEXT + YAML_TEXT
        assert documented[variable]["type"] == ("raw" if text_forms else option["type"]), variable
        assert documented[variable].get("default") == option["default"] == defaults[variable], variable
        assert documented[variable].get("choices") == option.get("choices"), variable
        assert bool(documented[variable].get("no_log")) == bool(option.get("no_log")), variable


@pytest.mark.parametrize("role", ["sglang_restart", "sglang_precheck"])
def test_vllm_gates_generate_one_token_unless_told_not_to(role: str) -> None:
    """vLLM's /health answers 200 while the engine cannot generate: unset, the smoke test is on for
    engine vllm and off for the others; given, it is what was given. The same for the restart and
    the precheck."""
    assert check({"engine": "vllm"}, role)[2]["smoke_test"] is True
    assert check({"engine": "sglang"}, role)[2]["smoke_test"] is False
    assert check({"engine": "auto"}, role)[2]["smoke_test"] is False
    assert check({"engine": "vllm", "smoke_test": "false"}, role)[2]["smoke_test"] is False
    assert check({"engine": "sglang", "smoke_test": True}, role)[2]["smoke_test"] is True
    assert check({"engine": "vllm"}, role)[2]["smoke_model"] == ""


def test_the_precheck_checks_its_smoke_options_as_the_restart_does() -> None:
    remote = {"smoke_test": True, "smoke_url": "http://api.example.com/v1/completions"}
    problems = check(remote, "sglang_precheck")[0]
    assert problems and "the API key would be sent to it" in problems[0] and "sglang_precheck_allow_remote_smoke" in problems[0]
    assert check({**remote, "allow_remote_smoke": "yes"}, "sglang_precheck")[0] == []
    assert check({"smoke_timeout": 0}, "sglang_precheck")[0] == ["sglang_precheck_smoke_timeout must be a whole number of seconds > 0, got 0"]
    assert check({"smoke_test": "maybe"}, "sglang_precheck")[0] == ["sglang_precheck_smoke_test must be true or false, got 'maybe'"]


def test_the_canary_variables_are_checked_before_anything_is_touched() -> None:
    problems, _rules, values = check({})
    assert values["canary"] is False and values["canary_on_fail"] == "fail" and values["canary_thresholds"] == {}
    problems, _rules, values = check({"canary": "yes", "canary_thresholds": "{throughput: '-5%', ttft_p90: null}", "canary_requests": "8"})
    assert problems == [] and values["canary"] is True and values["canary_requests"] == 8
    assert values["canary_thresholds"] == {"throughput": "-5%", "ttft_p90": None}
    problems, _rules, _values = check(
        {
            "canary": True,
            "canary_concurrency": 0,
            "canary_on_fail": "ignore",
            "canary_thresholds": {"throughput": "<= 5%", "latency": 3},
            "health_url": "http://10.0.0.5:30000/health_generate",
            "allow_remote_health": True,
        }
    )
    assert "sglang_restart_canary_concurrency must be a whole number >= 1, got 0" in problems
    assert "sglang_restart_canary_on_fail must be one of fail, warn, got 'ignore'" in problems
    assert any(problem.startswith("sglang_restart_canary_thresholds: ") and "must be '>= N%'" in problem for problem in problems)
    assert any("sglang_restart_canary loads the server of sglang_restart_health_url, which must then be on loopback" in problem for problem in problems)


def test_the_request_error_limit_is_none_by_default_and_a_whole_number_of_0_or_more() -> None:
    problems, _rules, values = check({}, "sglang_precheck")
    assert problems == [] and values["request_error_limit"] is None
    assert check({"request_error_limit": "0"}, "sglang_precheck")[2]["request_error_limit"] == 0
    assert check({"request_error_limit": -1}, "sglang_precheck")[0] == ["sglang_precheck_request_error_limit must be a whole number >= 0, got -1"]
