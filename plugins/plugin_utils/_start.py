# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A start of the unit, as the restart and rollback phases follow it: what the wait, the smoke test,
the start history and the canary are asked, from the role's checked options, and the sequence that
follows one start (wait, one token, the canary), each step when what was seen before asks for it.

Private to the collection; may change at any time. Controller side.
"""

from __future__ import annotations

import dataclasses
import typing as t
import urllib.parse

from ansible_collections.inferops.runbooks.plugins.plugin_utils._phase import Result, Steps, bearer
from ansible_collections.inferops.runbooks.plugins.plugin_utils._rollout import generated
from ansible_collections.inferops.runbooks.plugins.plugin_utils._smoke import smoke_test

Options = t.Mapping[str, t.Any]

RULE_OPTIONS = ("engine", "extra_rules", "disabled_rules")
WAIT_OPTIONS = ("health_url", "health_timeout", "strict", "budget", "stall_limit", "health_successes", "soak", "poll_interval", "heartbeat")
HISTORY_OPTIONS = {
    "size": "history_size",
    "min_good": "history_min_good",
    "stall_factor": "history_stall_factor",
    "stall_floor": "history_stall_floor",
    "slow_ratio": "history_slow_ratio",
    "stall_limit": "stall_limit",
    "stall_limits": "stall_limits",
}
CANARY_OPTIONS = ("requests", "concurrency", "prompt_tokens", "max_tokens", "thresholds", "floors")


def server_url(url: str) -> str:
    """The server of a URL: its scheme and network location."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


# at least the seconds of the 2nd argument (and less than one more) until process 1st argument has
# exited; POSIX sh, as on every host
_WAIT_GONE = 'end=$(( $(date +%s) + $2 + 1 )); while [ -e "/proc/$1" ]; do [ "$(date +%s)" -lt "$end" ] || exit 1; sleep 0.2; done'
# the same until no socket listens on port 1st argument (state 0A in the kernel's IPv4 and IPv6 tables)
_WAIT_PORT_FREE = (
    'port=$(printf %04X "$1"); end=$(( $(date +%s) + $2 + 1 ));'
    ' while grep -qi ":$port [0-9a-f]*:[0-9a-f]* 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null;'
    ' do [ "$(date +%s)" -lt "$end" ] || exit 1; sleep 0.2; done'
)


def systemctl(steps: Steps, stage: str, step: str, verb: str, unit: str) -> None:
    """``systemctl start``, ``stop`` or ``restart`` of the unit (blocking until systemd's job ends)."""
    steps.command(stage, step, ["systemctl", verb, "--", unit], f"systemctl {verb} {unit} failed.")


def wait_gone(steps: Steps, stage: str, step: str, pid: int, timeout: int, msg: str) -> None:
    steps.command(stage, step, ["sh", "-c", _WAIT_GONE, "sh", str(int(pid)), str(int(timeout))], msg)


def wait_port_free(steps: Steps, stage: str, step: str, port: int, timeout: int, msg: str) -> None:
    steps.command(stage, step, ["sh", "-c", _WAIT_PORT_FREE, "sh", str(int(port)), str(int(timeout))], msg)


def port_host(options: Options) -> str:
    """Where the port is checked after a stop: the host of the health URL (on the target)."""
    return urllib.parse.urlsplit(str(options["health_url"])).hostname or "127.0.0.1"


def history_args(options: Options, **given: t.Any) -> dict[str, t.Any]:
    """The start_history module's arguments: the unit, its rules, the history's settings, and ``given``
    (an invocation to add, its outcome)."""
    return {
        "unit": options["unit"],
        **{name: options[name] for name in RULE_OPTIONS},
        **{name: options[option] for name, option in HISTORY_OPTIONS.items()},
        **{name: value for name, value in given.items() if value not in (None, "")},
    }


def history_read_ok(read: t.Mapping[str, t.Any]) -> bool:
    """The start history was read (not failed, not skipped) and taught stall limits."""
    return bool(read) and not read.get("failed") and not read.get("skipped") and "learned_stall_limits" in read


def wait_args(options: Options, redact: list[str], read: t.Mapping[str, t.Any], previous_invocation: str | None) -> dict[str, t.Any]:
    """The wait_ready action's arguments: the checked options, the stall limits and good starts the
    start history taught (the configured limits when it was not read), the invocation before the start."""
    learned = history_read_ok(read)
    return {
        "unit": options["unit"],
        **{name: options[name] for name in (*RULE_OPTIONS, *WAIT_OPTIONS)},
        "redact": redact,
        "stall_limits": read["learned_stall_limits"] if learned else options["stall_limits"],
        "history_starts": read.get("good_starts") or [] if learned else [],
        **({"previous_invocation_id": previous_invocation} if previous_invocation else {}),
    }


def canary_args(options: Options, api_key: t.Any, host: str, **given: t.Any) -> dict[str, t.Any]:
    """The perf_canary module's arguments: a short load on the server of the health URL, sent from the
    host, judged against its baseline."""
    return {
        "unit": options["unit"],
        "url": server_url(options["health_url"]),
        **({"api_key": api_key} if api_key not in (None, "") else {}),
        **({"model": options["smoke_model"]} if options["smoke_model"] else {}),
        "engine": options["engine"],
        **{name: options[f"canary_{name}"] for name in CANARY_OPTIONS},
        "host": host,
        **given,
    }


def scan_args(options: Options, invocation: str, redact: list[str]) -> dict[str, t.Any]:
    """The journal_scan read of one invocation after a failed smoke test."""
    return {"unit": options["unit"], **{name: options[name] for name in (*RULE_OPTIONS, "strict")}, "invocation": invocation or "current", "redact": redact}


def kept(result: t.Mapping[str, t.Any]) -> Result:
    """A module's result as a phase keeps it in a fact: without the invocation (its arguments may name
    secrets)."""
    return {key: value for key, value in result.items() if key != "invocation"}


def kept_answer(answer: t.Mapping[str, t.Any]) -> Result:
    """A smoke test's answer as a fact keeps it: the status, the body and the message; never the
    request (it carries the API key)."""
    return {key: answer[key] for key in ("status", "msg", "json", "url") if key in answer}


@dataclasses.dataclass
class Seen:
    """What one start's wait, smoke test and canary saw; {} for a step that did not run."""

    wait: Result = dataclasses.field(default_factory=dict)
    smoke: Result = dataclasses.field(default_factory=dict)
    smoke_journal: Result = dataclasses.field(default_factory=dict)
    canary: Result = dataclasses.field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return self.wait.get("verdict") == "pass"


def generates_wanted(options: Options, seen: Seen, rank: int) -> bool:
    """One token is sent when the smoke test is on, on node 0, once the wait passed."""
    return bool(options["smoke_test"]) and rank == 0 and seen.ready


def canary_wanted(options: Options, seen: Seen, rank: int) -> bool:
    """The canary's load is sent when it is on, on node 0, once the wait passed and one token came."""
    return bool(options["canary"]) and rank == 0 and seen.ready and (not seen.smoke or generated(seen.smoke))


class Start:
    """Follows one start through the steps of a phase: the wait, one token, the canary."""

    def __init__(self, steps: Steps, options: Options, api_key: t.Any, redact: list[str], host: str, prefix: str) -> None:
        self.steps, self.options, self.api_key, self.redact, self.host = steps, options, api_key, redact, host
        # the steps' names: "Wait", "Smoke test"..., or "Rollback" for the rollback's start
        self.prefix = prefix

    def name(self, usual: str, step: str) -> str:
        return f"{self.prefix or usual} | {step}"

    def wait(self, seen: Seen, args: t.Mapping[str, t.Any]) -> None:
        result = self.steps.run_action("inferops.runbooks.wait_ready", args)
        seen.wait = kept(result)

    def smoke(self, seen: Seen) -> None:
        options = self.options
        scan = scan_args(options, str(seen.wait.get("invocation_id") or ""), self.redact) if not self.prefix else {}
        answer, journal = smoke_test(
            self.steps, options["smoke_url"], options["smoke_model"], bearer(self.api_key), options["smoke_timeout"], scan, options["engine"]
        )
        seen.smoke, seen.smoke_journal = kept_answer(answer), (kept(journal) if not generated(answer) else {})

    def canary(self, seen: Seen, run_id: str) -> None:
        seen.canary = self.steps.module(
            "canary",
            self.name("Canary", "Measure the start against the host's baseline"),
            "inferops.runbooks.perf_canary",
            canary_args(self.options, self.api_key, self.host, run_id=run_id),
            may_fail=True,
            secret=self.api_key not in (None, ""),
        )
        seen.canary = kept(seen.canary)
