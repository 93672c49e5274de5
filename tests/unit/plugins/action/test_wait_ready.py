"""The wait_ready action's transport: module arguments per probe, and Ansible's ways of failing
turned into the wait's (a lost connection is retried, a failed probe ends the wait).

The wait itself runs for real against systemd hosts in tests/integration/test_wait_ready.py.
"""

from __future__ import annotations

import typing as t

import pytest
from ansible.errors import AnsibleConnectionFailure

from ansible_collections.inferops.runbooks.plugins.action.wait_ready import ARGUMENT_SPEC, Transport
from ansible_collections.inferops.runbooks.plugins.plugin_utils._options import wait_option_problems
from ansible_collections.inferops.runbooks.plugins.plugin_utils._wait import ConnectionLost, Probe, ProbeFailed, Settings, Wait

pytestmark = pytest.mark.ansible  # exercises ansible-core: runs on every version (tests/harness/lanes.py)

ARGS = {name: option.get("default") for name, option in ARGUMENT_SPEC.items()}


class ActionStandIn:
    """Records module calls and answers them with what it was given (a result, or an exception)."""

    def __init__(self, answer: t.Any) -> None:
        self.answer = answer
        self.calls: list[dict[str, t.Any]] = []
        self.resets = 0
        self._connection = self

    def reset(self) -> None:
        self.resets += 1

    def _execute_module(self, module_name: str, module_args: dict[str, t.Any], task_vars: dict[str, t.Any]) -> dict[str, t.Any]:
        self.calls.append({"module": module_name, **module_args})
        if isinstance(self.answer, Exception):
            raise self.answer
        return dict(self.answer)


def transport(answer: t.Any) -> tuple[Transport, ActionStandIn, Wait]:
    action = ActionStandIn(answer)
    wait = Wait(Settings(), 0.0)
    return Transport(t.cast(t.Any, action), wait, ARGS, {}), action, wait


def test_the_first_probe_pins_the_invocation_without_health() -> None:
    send, action, _wait = transport({"unit": {}, "journal": {}, "health": None})
    send(Probe(watch=0.0, health=False, pinning=True))
    (call,) = action.calls
    assert call["module"] == "inferops.runbooks.service_probe" and call["watch"] == 0.0
    assert "health_url" not in call and "cursor" not in call and "invocation_id" not in call


def test_later_probes_continue_from_the_cursor_and_probe_health_without_a_key() -> None:
    send, action, wait = transport({"unit": {}, "journal": {}, "health": None})
    wait.invocation_id, wait.cursor = "a" * 32, "s=1;i=2"
    wait.total["lines"], wait.total["phase"] = 42, "loading_weights"
    send(Probe(watch=5.0, health=True, health_timeout=7.5))
    (call,) = action.calls
    assert (call["invocation_id"], call["cursor"], call["line_offset"], call["phase"]) == ("a" * 32, "s=1;i=2", 42, "loading_weights")
    assert call["health_url"] == ARGS["health_url"] and call["health_timeout"] == 7.5
    assert not any("key" in name for name in call)


@pytest.mark.parametrize(
    ("answer", "raised"),
    [
        (AnsibleConnectionFailure("Connection reset by peer"), ConnectionLost),
        ({"unreachable": True, "msg": "Failed to connect to the host via ssh"}, ConnectionLost),
        ({"failed": True, "msg": "rule 'x': invalid regular expression"}, ProbeFailed),
    ],
)
def test_ansible_failures_become_the_waits(answer: t.Any, raised: type[Exception]) -> None:
    send, _action, _wait = transport(answer)
    with pytest.raises(raised):
        send(Probe(watch=1.0))


def test_a_retry_resets_the_connection_first() -> None:
    send, action, _wait = transport({"unit": {}, "journal": {}, "health": None})
    send(Probe(watch=1.0, reset_connection=True))
    assert action.resets == 1 and len(action.calls) == 1


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("budget", 0, "budget must be a number of seconds > 0"),
        ("budget", -1, "budget must be"),
        ("health_successes", 0, "health_successes must be a whole number >= 1"),
        ("soak", -5, "soak must be a number of seconds >= 0"),
        ("stall_limit", 0, "stall_limit must be"),
        ("stall_limits", {"warmup": 10}, "'warmup' is not a phase"),
        ("stall_limits", {"loading_weights": "soon"}, "loading_weights must be a number of seconds > 0"),
        ("stall_limits", "loading_weights: [", "stall_limits must be a mapping"),
    ],
)
def test_option_values_are_checked_before_anything_is_probed(option: str, value: t.Any, words: str) -> None:
    problems = wait_option_problems({**ARGS, option: value})
    assert len(problems) == 1 and words in problems[0], problems
    assert wait_option_problems(ARGS) == []
