# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of inferops.runbooks.wait_ready: one wait loop over service_probe.

The loop runs on a monotonic clock. Each turn is one service_probe call that long-polls on the
managed host for up to ``poll_interval`` seconds, so a change (a fatal line, a new phase, the unit
restarting) is seen within about a second, and each turn costs one connection round trip.
"""

from __future__ import annotations

import time
import typing as t

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.inferops.runbooks.plugins.module_utils._report import empty_report, merge_reports, phase_index
from ansible_collections.inferops.runbooks.plugins.module_utils._rules import PHASES

display = Display()

PROBE_MODULE = "inferops.runbooks.service_probe"

HEALTH_INTERVAL = 1.0
FATAL_SETTLE = 1.0
FAILURE_SETTLE = 0.5
SWITCH_LIMIT = 30.0
TAIL_LINES = 20
HISTORY_MAX = 50
EVIDENCE_KEYS = ("fatal", "allowlisted", "unrecognized", "counts", "phase", "progress", "stale_rules", "lines", "blob_lines", "dropped_events")

ARGUMENT_SPEC: dict[str, t.Any] = {
    "unit": {"type": "str", "default": "sglang.service"},
    "health_url": {"type": "str", "default": "http://127.0.0.1:30000/health_generate"},
    "health_timeout": {"type": "float", "default": 30},
    "api_key": {"type": "str", "no_log": True},
    "validate_certs": {"type": "bool", "default": True},
    "engine": {"type": "str", "default": "sglang", "choices": ["auto", "sglang", "vllm"]},
    "extra_rules": {"type": "list", "elements": "dict", "default": []},
    "disabled_rules": {"type": "list", "elements": "str", "default": []},
    "strict": {"type": "bool", "default": False},
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
}


class WaitFailed(Exception):
    """The start is lost (or the wait gave up): reason and message."""

    def __init__(self, reason: str, msg: str, settle: float = 0.0, final_read: bool = True) -> None:
        super().__init__(msg)
        self.reason = reason
        self.msg = msg
        self.settle = settle
        self.final_read = final_read


def human(seconds: float) -> str:
    """``2m10s``, ``45s``, ``1h02m``."""
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def health_text(health: t.Mapping[str, t.Any] | None) -> str:
    if not health:
        return "health not probed"
    if health.get("status") is not None:
        return f"health {health['status']}"
    return f"health: {health.get('error') or 'no answer'}"


class Waiter:
    """One host's wait: state carried between probes, and the decisions made on each one."""

    def __init__(self, action: ActionModule, args: dict[str, t.Any], task_vars: dict[str, t.Any]) -> None:
        self.action = action
        self.args = args
        self.task_vars = task_vars
        self.host = str(task_vars.get("inventory_hostname", "host"))
        self.unit = args["unit"]
        self.started = time.monotonic()
        self.total: dict[str, t.Any] = empty_report(args["strict"])
        self.cursor: str | None = None
        self.invocation_id: str | None = args["invocation_id"]
        self.baseline: dict[str, t.Any] | None = None
        self.state: dict[str, t.Any] = {}
        self.health: dict[str, t.Any] | None = None
        self.history: list[dict[str, t.Any]] = []
        self.ever_up = False
        self.streak = 0
        self.timeline: list[dict[str, t.Any]] = []
        self.progress_mark: tuple[t.Any, ...] | None = None
        self.progress_at = self.started
        self.soak_started: float | None = None
        self.soak_identity: tuple[t.Any, ...] | None = None
        self.pending_since: float | None = None
        self.pending_header: str | None = None
        self.last_status: str | None = None
        self.last_display = float("-inf")
        self.probes = 0
        self.last_lines: list[str] = []
        self.detected: float | None = None

    # -- time ----------------------------------------------------------------------------------

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def remaining(self) -> float:
        return self.args["budget"] - self.elapsed()

    # -- probing -------------------------------------------------------------------------------

    def probe_args(self, watch: float, **overrides: t.Any) -> dict[str, t.Any]:
        args = self.args
        module_args: dict[str, t.Any] = {
            "unit": self.unit,
            "engine": args["engine"],
            "extra_rules": args["extra_rules"],
            "disabled_rules": args["disabled_rules"],
            "strict": args["strict"],
            "phase": self.total["phase"],
            "watch": round(max(watch, 0.0), 2),
            "health_url": args["health_url"],
            "health_timeout": max(1.0, min(args["health_timeout"], self.remaining() + 1.0)),
            "health_early": self.soak_started is None,
            "validate_certs": args["validate_certs"],
            "line_offset": int(self.total["lines"]),
        }
        if args["api_key"]:
            module_args["api_key"] = args["api_key"]
        if self.invocation_id:
            module_args["invocation_id"] = self.invocation_id
        if self.cursor:
            module_args["cursor"] = self.cursor
        module_args.update(overrides)
        return {key: value for key, value in module_args.items() if value is not None}

    def call(self, module_args: dict[str, t.Any]) -> dict[str, t.Any]:
        """One service_probe run; connection trouble is retried with a reset connection."""
        failures = 0
        while True:
            try:
                result = self.action._execute_module(module_name=PROBE_MODULE, module_args=module_args, task_vars=self.task_vars)
                if not result.get("unreachable"):
                    break
                problem = str(result.get("msg") or "host unreachable")
            except AnsibleConnectionFailure as exc:
                problem = str(exc)
            failures += 1
            if failures > self.args["connection_retries"]:
                raise WaitFailed("unreachable", f"lost the connection to {self.host} {failures} times in a row: {problem}", final_read=False)
            delay = min(2.0 * failures, 10.0)
            self.show(f"connection lost ({problem.strip()[:120]}), retry {failures}/{self.args['connection_retries']} in {delay:g}s", force=True)
            self.reset_connection()
            time.sleep(delay)
        self.probes += 1
        if result.get("failed"):
            raise WaitFailed("probe_failed", f"{PROBE_MODULE} failed on {self.host}: {result.get('msg')}", final_read=False)
        return result

    def reset_connection(self) -> None:
        connection = self.action._connection
        try:
            connection.reset()
        except Exception as exc:  # a reset that fails is retried with the next call anyway
            display.vvv(f"wait_ready: connection reset failed: {exc}", host=self.host)

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> dict[str, t.Any]:
        try:
            self.pin_invocation()
            while True:
                self.turn()
                if self.passed():
                    return self.result("pass", "ready", self.pass_message())
        except WaitFailed as failure:
            return self.fail(failure)

    def pin_invocation(self) -> None:
        """Choose the invocation to watch: the given one, or the unit's current one (a new one if
        ``previous_invocation_id`` names the one before a restart)."""
        previous = self.args["previous_invocation_id"]
        while True:
            result = self.call(self.probe_args(0, health_url=None, invocation_id=self.invocation_id, cursor=None, line_offset=0))
            state = result["unit"]
            current = state.get("InvocationID") or ""
            self.state = state
            if self.invocation_id is None and previous and current == previous:
                if self.elapsed() > min(SWITCH_LIMIT, self.args["budget"]):
                    raise WaitFailed(
                        "unit_inactive" if state.get("ActiveState") != "active" else "restarted",
                        f"{self.unit} still runs invocation {previous} after {human(self.elapsed())}: the restart did not happen",
                        final_read=False,
                    )
                time.sleep(0.5)
                continue
            if not current and self.invocation_id is None:
                raise WaitFailed("unit_inactive", f"{self.unit} has never run (no InvocationID; ActiveState={state.get('ActiveState')})", final_read=False)
            if self.invocation_id is None:
                self.invocation_id = current
            self.baseline = state if current == self.invocation_id else None
            self.absorb(result)
            self.check(result)
            return

    def turn(self) -> None:
        if self.remaining() <= 0:
            self.out_of_budget()
        if self.pending_header and self.pending_since is not None and time.monotonic() - self.pending_since >= FATAL_SETTLE:
            # the traceback stayed open: read it as it is
            result = self.call(self.probe_args(0, hold_traceback=False, health_url=None))
        else:
            result = self.call(self.probe_args(self.window()))
        self.absorb(result)
        self.check(result)
        self.maybe_rest()

    def window(self) -> float:
        """How long the next probe may watch."""
        window = min(self.args["poll_interval"], self.remaining())
        if self.pending_header:
            window = min(window, FATAL_SETTLE)
        limit = self.stall_limit()
        if limit is not None and self.soak_started is None:
            window = min(window, max(limit - (time.monotonic() - self.progress_at), 0.0) + 0.2)
        if self.soak_started is not None:
            window = min(window, max(self.args["soak"] - (time.monotonic() - self.soak_started), 0.0))
        return max(window, 0.0)

    def maybe_rest(self) -> None:
        """Between health probes, pause a little: a probe that returns at once would hammer the server."""
        if self.soak_started is None and phase_index(self.total["phase"]) >= phase_index("warming_up") and not self.total["fatal"]:
            time.sleep(min(HEALTH_INTERVAL, max(self.remaining(), 0.0)))

    # -- what a probe says -------------------------------------------------------------------

    def absorb(self, result: t.Mapping[str, t.Any]) -> None:
        """Fold a probe's journal slice, unit state and health into the wait's state."""
        now = time.monotonic()
        self.state = result["unit"]
        delta = result["journal"]
        if delta.get("invocation_id") == self.invocation_id:
            self.total = merge_reports(self.total, delta)
            self.cursor = delta.get("cursor") or self.cursor
        self.pending_header = delta.get("pending_traceback")
        if self.pending_header is None:
            self.pending_since = None
        elif self.pending_since is None:
            self.pending_since = now
        self.note_phase(now)
        self.note_progress(now)
        health = result.get("health")
        if health is not None:
            self.note_health(health, now)
        self.show(self.status())

    def note_phase(self, now: float) -> None:
        phase = self.total["phase"]
        if self.timeline and self.timeline[-1]["phase"] == phase:
            return
        if self.timeline:
            self.timeline[-1]["duration"] = round(now - self.started - self.timeline[-1]["started"], 1)
        self.timeline.append({"phase": phase, "started": round(now - self.started, 1), "duration": None})

    def note_progress(self, now: float) -> None:
        counts = self.total.get("counts") or {}
        progress = self.total.get("progress") or {}
        mark = (self.total["phase"], counts.get("progress", 0), counts.get("ready", 0), progress.get("done"), progress.get("percent"))
        if mark != self.progress_mark:
            self.progress_mark = mark
            self.progress_at = now

    def note_health(self, health: t.Mapping[str, t.Any], now: float) -> None:
        self.health = dict(health)
        self.ever_up = self.ever_up or bool(health.get("up"))
        status = health.get("status")
        self.streak = self.streak + 1 if status == 200 else 0
        label = status if status is not None else (health.get("error") or "no answer")
        if not self.history or self.history[-1]["status"] != label:
            self.history.append({"status": label, "at": round(now - self.started, 1)})
            del self.history[:-HISTORY_MAX]

    def check(self, result: t.Mapping[str, t.Any]) -> None:
        """Fail fast on what the probe showed."""
        state = self.state
        base = self.baseline
        restarts = int(state.get("NRestarts") or 0) - int(base.get("NRestarts") or 0) if base else 0
        if state.get("InvocationID") != self.invocation_id or restarts > 0:
            raise WaitFailed(
                "restarted",
                f"{self.unit} was restarted during the start (InvocationID {self.invocation_id} -> {state.get('InvocationID') or 'none'}, "
                f"NRestarts {str(base.get('NRestarts')) + ' -> ' if base else 'now '}{state.get('NRestarts')}): the start is lost",
                settle=FAILURE_SETTLE,
            )
        if base and base.get("MainPID") and state.get("MainPID") and state["MainPID"] != base["MainPID"]:
            changed = f"{base['MainPID']} -> {state['MainPID']}"
            raise WaitFailed("restarted", f"{self.unit}'s main process changed ({changed}) during the start", settle=FAILURE_SETTLE)
        if self.total["fatal"]:
            first = self.total["fatal"][0]
            reason = "soak_failed" if self.soak_started is not None else "fatal_log"
            raise WaitFailed(reason, f"fatal line in {self.unit}'s journal: {first.get('message', '')[:300]}", settle=FATAL_SETTLE)
        if self.args["strict"] and self.total["unrecognized"]:
            first = self.total["unrecognized"][0]
            raise WaitFailed("fatal_log", f"strict mode: unrecognized line in {self.unit}'s journal: {first.get('message', '')[:300]}")
        active, sub = state.get("ActiveState"), state.get("SubState")
        how = f"Result={state.get('Result')}, ExecMainCode={state.get('ExecMainCode')}, ExecMainStatus={state.get('ExecMainStatus')}"
        if active == "failed":
            raise WaitFailed("unit_failed", f"{self.unit} failed ({how})", settle=FAILURE_SETTLE)
        if sub == "auto-restart":
            raise WaitFailed("unit_failed", f"{self.unit}'s main process exited ({how}); systemd is about to restart it", settle=FAILURE_SETTLE)
        if active in ("inactive", "deactivating"):
            raise WaitFailed("unit_inactive", f"{self.unit} is {active} ({sub}; {how}): it was stopped or exited", settle=FAILURE_SETTLE)
        if self.soak_started is not None:
            self.check_soak()
            return
        limit = self.stall_limit()
        quiet = time.monotonic() - self.progress_at
        if limit is not None and quiet > limit:
            phase = self.total["phase"].replace("_", " ")
            raise WaitFailed("stalled", f"no progress in phase {phase} for {human(quiet)} (stall limit {human(limit)})", final_read=True)
        if self.gate_open():
            self.soak_started = time.monotonic()
            self.soak_identity = self.identity()
            self.show(self.status(), force=True)

    def check_soak(self) -> None:
        health = self.health or {}
        if self.identity() != self.soak_identity:
            was = self.soak_identity
            raise WaitFailed("soak_failed", f"{self.unit} changed during the post-ready soak: {self.identity()} (was {was})", settle=FAILURE_SETTLE)
        if health.get("status") != 200:
            raise WaitFailed("soak_failed", f"{health_text(health)} during the post-ready soak (after {human(time.monotonic() - (self.soak_started or 0))})")

    def identity(self) -> tuple[t.Any, ...]:
        return tuple(self.state.get(name) for name in ("ActiveState", "MainPID", "InvocationID", "NRestarts"))

    def gate_open(self) -> bool:
        return self.state.get("ActiveState") == "active" and self.total["ready"] and self.streak >= self.args["health_successes"] and not self.total["fatal"]

    def passed(self) -> bool:
        if self.soak_started is None:
            return False
        return time.monotonic() - self.soak_started >= self.args["soak"] and (self.health or {}).get("status") == 200

    def stall_limit(self) -> float | None:
        phase = self.total["phase"]
        limits = self.args["stall_limits"] or {}
        if phase in limits:
            return float(limits[phase])
        if phase == "ready":
            return None  # the marker is in: waiting for health is the budget's business
        return float(self.args["stall_limit"])

    def out_of_budget(self) -> t.NoReturn:
        spent = human(self.elapsed())
        if self.total["ready"] or self.ever_up:
            raise WaitFailed(
                "health_never_passed",
                f"budget of {human(self.args['budget'])} spent ({spent}): the server answered HTTP but health never passed "
                f"({self.streak}/{self.args['health_successes']} successes; last {health_text(self.health)})",
            )
        raise WaitFailed("budget_exhausted", f"budget of {human(self.args['budget'])} spent ({spent}) in phase {self.total['phase'].replace('_', ' ')}")

    # -- display -------------------------------------------------------------------------------

    def status(self) -> str:
        total = self.total
        phase = total["phase"]
        progress = total.get("progress")
        if self.soak_started is not None:
            text = f"ready, soaking {human(self.args['soak'])} ({health_text(self.health)})"
        elif phase == "ready":
            text = f"ready marker seen, {health_text(self.health)} ({self.streak}/{self.args['health_successes']} successes)"
        elif phase == "warming_up":
            text = f"warming up, {health_text(self.health)}"
        elif progress and progress.get("phase") == phase:
            text = str(progress.get("text") or phase.replace("_", " "))
        else:
            text = phase.replace("_", " ")
        if self.pending_header:
            text += ", a traceback is being written"
        return text

    def show(self, text: str, force: bool = False) -> None:
        now = time.monotonic()
        if not force and text == self.last_status and now - self.last_display < self.args["heartbeat"]:
            return
        self.last_status = text
        self.last_display = now
        allowlisted = (self.total.get("counts") or {}).get("allowlisted", 0)
        extra = f", {allowlisted} lines allowlisted" if allowlisted else ""
        display.display(f"{self.host}: {self.unit} {text}, {human(self.elapsed())} elapsed{extra}")

    # -- the end -------------------------------------------------------------------------------

    def pass_message(self) -> str:
        return (
            f"{self.unit} is ready after {human(self.elapsed())}: active, health passed {self.streak} times, ready marker seen, "
            f"nothing fatal, stayed healthy through a {human(self.args['soak'])} soak"
        )

    def fail(self, failure: WaitFailed) -> dict[str, t.Any]:
        self.detected = round(self.elapsed(), 1)
        self.show(f"failing ({failure.reason}): {failure.msg[:200]}", force=True)
        if failure.final_read and self.invocation_id:
            time.sleep(failure.settle)
            try:
                final = self.call(self.probe_args(0, health_url=None, cursor=None, line_offset=0, hold_traceback=False, tail_lines=TAIL_LINES))
            except WaitFailed as exc:
                display.warning(f"{self.host}: the last read of the journal failed: {exc.msg}")
            else:
                journal = final["journal"]
                if journal.get("invocation_id") == self.invocation_id:
                    evidence = merge_reports(None, journal)
                    for key in EVIDENCE_KEYS:
                        self.total[key] = evidence[key]
                    self.total["ready"] = evidence["ready"]
                    self.last_lines = list(journal.get("tail") or [])
                self.state = final["unit"]
        reason, msg = failure.reason, failure.msg
        if reason in ("unit_failed", "unit_inactive") and self.total["fatal"]:
            # the fatal line was written before the process died; journald stored it a moment later
            reason = "soak_failed" if self.soak_started is not None else "fatal_log"
            msg = f"fatal line in {self.unit}'s journal: {str(self.total['fatal'][0].get('message', ''))[:300]} ({msg})"
        return self.result("fail", reason, msg)

    def result(self, verdict: str, reason: str, msg: str) -> dict[str, t.Any]:
        now = time.monotonic()
        if self.timeline and self.timeline[-1]["duration"] is None:
            self.timeline[-1]["duration"] = round(now - self.started - self.timeline[-1]["started"], 1)
        base = self.baseline or {}
        total = self.total
        result: dict[str, t.Any] = {
            "changed": False,
            "verdict": verdict,
            "reason": reason,
            "msg": msg,
            "elapsed": round(now - self.started, 1),
            "timeline": self.timeline,
            "phase": total["phase"],
            "progress": total.get("progress"),
            "fatal": total["fatal"],
            "allowlisted": total["allowlisted"],
            "unrecognized": total["unrecognized"],
            "counts": total.get("counts") or {},
            "stale_rules": total.get("stale_rules") or [],
            "lines": total.get("lines", 0),
            "health": {
                "status": (self.health or {}).get("status"),
                "up": (self.health or {}).get("up", False),
                "error": (self.health or {}).get("error"),
                "successes": self.streak,
                "history": self.history,
            },
            "invocation_id": self.invocation_id,
            "restarts": max(int(self.state.get("NRestarts") or 0) - int(base.get("NRestarts") or 0), 0),
            "unit": self.state,
            "probes": self.probes,
        }
        if verdict == "fail":
            result["failed"] = True
            result["last_lines"] = self.last_lines
            result["detected"] = self.detected
        return result


class ActionModule(ActionBase):
    """Waits for an inference server's unit to become ready, with progress and fail-fast; see the module docs."""

    TRANSFERS_FILES = False
    _requires_connection = True
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def run(self, tmp: t.Any = None, task_vars: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        problems = []
        for name in ("budget", "poll_interval", "heartbeat"):
            if args[name] <= 0:
                problems.append(f"{name} must be > 0")
        for name in ("soak", "stall_limit", "health_timeout"):
            if args[name] < 0:
                problems.append(f"{name} must be >= 0")
        if args["health_successes"] < 1:
            problems.append("health_successes must be >= 1")
        for phase, limit in (args["stall_limits"] or {}).items():
            if phase not in PHASES:
                problems.append(f"stall_limits: {phase!r} is not a phase ({', '.join(PHASES)})")
            else:
                try:
                    float(limit)
                except (TypeError, ValueError):
                    problems.append(f"stall_limits: {phase} must be a number of seconds, got {limit!r}")
        if problems:
            result.update(failed=True, msg="; ".join(problems))
            return result
        if self._task.check_mode:
            result.update(changed=False, skipped=True, msg="check mode: not waiting")
            return result
        result.update(Waiter(self, args, task_vars).run())
        return result
