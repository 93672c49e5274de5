# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The report of one run of a runbook role: what it saw, and its verdict with the reason.

Private to the collection; may change at any time. Standard library only, no Ansible imports.

A role gathers what it observed (the checked variables, the unit's state, the wait's or the probe's
result, a failed step with its stage and result) into one mapping and hands it to ``runbook_report``
(through the filter of the same name). The restart's verdict is the wait's (``wait_ready``), unless
a step before it failed, the run was a dry run, or the smoke test failed; the precheck's verdict is
decided here, by the first of its checks that fails. ``_render`` turns the report into text, JUnit
XML and ``set_stats`` data.
"""

from __future__ import annotations

import time
import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils import _history, _lease
from ansible_collections.inferops.runbooks.plugins.plugin_utils import _rollout

Report = t.Dict[str, t.Any]
Observed = t.Mapping[str, t.Any]

ROLES = ("sglang_restart", "sglang_precheck")

# the reason of a failed stage when its step gave none
STAGE_REASONS = {
    "validate": "invalid_options",
    "preflight": "preflight_failed",
    "restart": "restart_failed",
    "wait": "wait_error",
    "smoke": "smoke_failed",
    "canary": "canary_error",
    "render": "template_failed",
    "deploy": "deploy_failed",
    "verify": "unit_invalid",
    "drain": "drain_failed",
    "probe": "probe_failed",
    "lease": "lease_failed",
    "settle": "settle_failed",
    "deployment": "peer_failed",  # a node of a multi-node deployment stopped because a peer did not get through a step
}
VALIDATION_REASONS = ("invalid_options", "invalid_rules", "invalid_topology")
REFUSAL_VERBS = {"sglang_restart": ("restart", "stopped or started"), "sglang_precheck": ("check", "started or stopped")}
EXCERPT = 240


def runbook_report(observed: Observed, role: str, now: float | None = None) -> Report:
    """The report of one host's run of ``role`` (``sglang_restart`` or ``sglang_precheck``)."""
    if role == "sglang_restart":
        return restart_report(observed, now)
    if role == "sglang_precheck":
        return precheck_report(observed, now)
    raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")


# -- shared pieces --------------------------------------------------------------------------------


def _mapping(value: t.Any) -> dict[str, t.Any]:
    return dict(value) if isinstance(value, t.Mapping) else {}


def _text(value: t.Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _clock(observed: Observed, now: float | None) -> tuple[float, float]:
    """(when the run started, now), as seconds since the epoch."""
    now = time.time() if now is None else float(now)
    try:
        started = float(observed.get("started_at") or now)
    except (TypeError, ValueError):
        started = now
    return started, now


def _failure(observed: Observed) -> dict[str, t.Any] | None:
    """The failed step: ``{"stage", "step", "result"}`` as a rescue keeps it (``result`` is
    ``ansible_failed_result``), read into its stage, step, reason, message and problems."""
    failure = observed.get("failure")
    if not isinstance(failure, t.Mapping) or not failure:
        return None
    result = _mapping(failure.get("result"))
    stage = _text(failure.get("stage")) or None
    problems = result.get("problems")
    return {
        "stage": stage,
        "step": _text(failure.get("step")) or None,
        "reason": _text(result.get("reason")) or None,
        "msg": _text(result.get("msg")).strip() or f"the {stage or 'unknown'} step failed without a message",
        "problems": [str(problem) for problem in problems] if isinstance(problems, (list, tuple)) else [],
    }


def unit_refusal(role: str, unit: str, host: str, state: t.Mapping[str, t.Any]) -> tuple[str, str] | None:
    """(reason, message) when the unit is not loaded, so the role must not go on; None when it is."""
    load_state = _text(state.get("LoadState"))
    if load_state == "loaded":
        return None
    verb, untouched = REFUSAL_VERBS[role]
    what = "there is no such systemd unit" if load_state == "not-found" else "the unit is not loaded"
    msg = (
        f"Refusing to {verb} {unit} on {host}: {what} (LoadState={load_state or 'unknown'}). Nothing was {untouched}. "
        f"Set {role}_unit to the unit that runs the server (systemctl list-units 'sglang*')."
    )
    return ("unit_not_found" if load_state in ("not-found", "") else "unit_not_loaded"), msg


def _with_url(health: t.Any, url: str) -> dict[str, t.Any]:
    """The health result with the URL it was probed at (the wait's result does not carry it)."""
    result = _mapping(health)
    if result and not result.get("url"):
        result["url"] = url
    return result


def _named(role: str, observed: Observed, outcome: t.Mapping[str, str], failure: t.Mapping[str, t.Any] | None) -> Report:
    """What every report starts with: whose, about what, the verdict."""
    return {
        "role": role,
        "host": _text(observed.get("host")),
        "unit": _text(_setting(observed, "unit", "")),
        "engine": _text(_setting(observed, "engine", "")),
        "verdict": outcome["verdict"],
        "reason": outcome["reason"],
        "msg": outcome["msg"],
        "problems": failure["problems"] if failure else [],
        "check_mode": bool(observed.get("check_mode")),
        "strict": bool(_setting(observed, "strict", False)),
    }


def _evidence(journal: t.Mapping[str, t.Any], last_lines: t.Any, gaps: t.Any) -> Report:
    """The journal evidence: events per class, line counts, stale rules, the last lines read, and
    the gaps (entries rotated or vacuumed away before they were read)."""
    return {
        "journal_gaps": [str(gap) for gap in gaps or [] if gap],
        "counts": _mapping(journal.get("counts")),
        "fatal": list(journal.get("fatal") or []),
        "allowlisted": list(journal.get("allowlisted") or []),
        "unrecognized": list(journal.get("unrecognized") or []),
        "request_error": list(journal.get("request_error") or []),
        "request_errors": request_errors(journal),
        "survived": list(journal.get("survived") or []),
        "survived_lines": survived_lines(journal),
        "stale_rules": list(journal.get("stale_rules") or []),
        "last_lines": list(last_lines or []),
    }


def request_errors(journal: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The lines about one request each (a model name that does not exist, a bad parameter): how
    many over what was read, and the first; never a failure alone (see request_error_limit)."""
    events = [_mapping(event) for event in journal.get("request_error") or []]
    count = sum(int(event.get("count") or 0) for event in events)
    first = min(events, key=lambda event: event.get("first_line") or 0) if events else None
    return {"count": count, "first": _text(first.get("message"))[:EXCERPT] if first else None, "rule": first.get("rule") if first else None}


def survived_lines(journal: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The ERROR lines after which the engine's own code carried on (it fell back, retried, skipped one
    item): warnings, how many over what was read and the first with its source file; never a failure alone."""
    events = [_mapping(event) for event in journal.get("survived") or []]
    count = sum(int(event.get("count") or 0) for event in events)
    first = min(events, key=lambda event: event.get("first_line") or 0) if events else None
    if first is None:
        return {"count": 0, "kinds": 0, "first": None, "rule": None, "file": None}
    return {"count": count, "kinds": len(events), "first": _text(first.get("message"))[:EXCERPT], "rule": first.get("rule"), "file": first.get("file")}


def _request_errors_over_limit(observed: Observed, look: _Look, unit: str, host: str) -> tuple[str, str] | None:
    """With request_error_limit: more request errors in the current invocation than the user allows."""
    limit = _setting(observed, "request_error_limit", None)
    seen = request_errors(look.journal)
    if limit is None or seen["count"] <= int(limit):
        return None
    return "request_errors", f"The current invocation answered {seen['count']} request(s) with an error (request_error_limit {limit}), first: {seen['first']}"


def _setting(observed: Observed, name: str, default: t.Any) -> t.Any:
    """A checked option; when the check itself failed, the variable as given (for naming only)."""
    options = _mapping(observed.get("options"))
    if name in options:
        return options[name]
    given = observed.get(name)
    return given if isinstance(given, (str, bool, int, float)) else default


def _node(observed: Observed) -> dict[str, t.Any]:
    """The host's place in a multi-node deployment (check_options' ``node``): its name and rank;
    a single-node host has no deployment and rank 0."""
    node = _mapping(observed.get("node"))
    rank = node.get("rank")
    return {
        "deployment": _text(node.get("deployment")) or None,
        "node_rank": rank if isinstance(rank, int) and not isinstance(rank, bool) else 0,
    }


def _first_fatal(fatal: t.Any) -> dict[str, t.Any] | None:
    """The first fatal event with its journal time, to find across nodes where a failure began."""
    first = _mapping(fatal[0]) if isinstance(fatal, list) and fatal else {}
    if not first:
        return None
    return {
        "message": _text(first.get("message")),
        "rule": first.get("rule"),
        "ranks": list(first.get("ranks") or []),
        "line": first.get("first_line"),
        "timestamp": first.get("first_timestamp"),
        "realtime": first.get("first_realtime"),
    }


# -- sglang_restart -------------------------------------------------------------------------------


def restart_report(observed: Observed, now: float | None = None) -> Report:
    """The restart's report: the wait's evidence, and the verdict of the step that decided."""
    started, now = _clock(observed, now)
    wait = _mapping(observed.get("wait"))
    before = _mapping(observed.get("before"))
    failure = _failure(observed)
    smoke = _smoke(observed)
    canary = _canary(observed)
    # a start that was ready and failed its smoke test: this invocation's journal read again after the
    # request (plugin_utils/_smoke) holds the wait's lines and why the request failed
    journal = _after_smoke(observed, smoke) or wait
    deploy = _mapping(observed.get("deploy"))
    history = _wait_history(history_section(observed), wait)
    decided = _new_lines_outcome(observed, history, _canary_outcome(canary, _restart_outcome(observed, wait, before, failure, smoke, journal)))
    outcome = _deploy_outcome(deploy, failure, observed, decided)
    return {
        **_named("sglang_restart", observed, outcome, failure),
        "failed_stage": failure.get("stage") if failure else None,
        "failed_step": failure.get("step") if failure else None,
        "started_at": _iso(started),
        "total_elapsed": round(now - started, 1),
        "elapsed": wait.get("elapsed", 0),
        "previous_invocation_id": _text(before.get("InvocationID")),
        "invocation_id": _text(wait.get("invocation_id")),
        "restarts": wait.get("restarts", 0),
        **_node(observed),
        "first_fatal": wait.get("first_fatal") if journal is wait else _first_fatal(journal.get("fatal")),
        "ended_at": wait.get("ended_at"),
        "lines": wait.get("lines"),
        "phase": wait.get("phase"),
        "progress": wait.get("progress"),
        "timeline": list(wait.get("timeline") or []),
        "health": _with_url(wait.get("health"), _text(_setting(observed, "health_url", ""))),
        **_evidence(journal, journal.get("last_lines"), wait.get("journal_gaps")),
        "smoke_test": smoke,
        "canary": canary,
        "budget": _setting(observed, "budget", None),
        **_deploy_sections(deploy, observed),
        **_with_history(_evidence(journal, None, None), history),
        "history": history,
        # what the stop left in the unit's control group and on its GPUs (module_utils/_leftovers.py)
        "leftovers": _mapping(observed.get("leftovers")),
        # vLLM's sleep state before the stop (module_utils/_sleep.py, plugin_utils/_sleeping.py): a server asleep is restarted and gated as usual
        "sleep_before": _mapping(observed.get("sleep_before")),
    }


# -- deploying a change, rolling it back, draining traffic ----------------------------------------


def _deploy_outcome(deploy: t.Mapping[str, t.Any], failure: t.Any, observed: Observed, outcome: dict[str, str]) -> dict[str, str]:
    """The restart's outcome, seen through the deploy: a change already in place restarted nothing;
    a start that passed but whose host the router did not take back fails."""
    if not deploy or failure is not None or observed.get("check_mode"):
        return outcome
    # verified in place: skipped when there was nothing else to do, the verification's verdict when
    # this run repaired what an earlier one left (a host put back into rotation is not a skip)
    if deploy.get("restart_needed") is False and outcome["verdict"] != "fail" and not deploy.get("repairs"):
        return {
            "verdict": "skipped",
            "reason": "unchanged",
            "msg": "the new configuration is already in place and serves: nothing was restarted (sglang_restart_force_restart restarts anyway)",
        }
    error = _mapping(deploy.get("traffic")).get("error")
    if outcome["verdict"] == "pass" and error:
        return {"verdict": "fail", "reason": "restore_failed", "msg": f"the start passed, but the host was not put back into rotation: {error}"}
    return outcome


def _deploy_sections(deploy: t.Mapping[str, t.Any], observed: Observed) -> Report:
    """state, deploy, rollback and traffic: where the host stands and how it got there."""
    rollback = _mapping(deploy.get("rollback"))
    wait = _mapping(rollback.get("wait"))
    failure = _mapping(rollback.get("failure"))
    attempted = bool(rollback.get("attempted"))
    verdict = None if not attempted else "fail" if failure else _text(wait.get("verdict")) or ("fail" if rollback.get("restarted") else "pass")
    reason = None if not attempted else "rollback_failed" if failure and not wait else _text(wait.get("reason")) or "files_restored"
    return {
        "state": _text(deploy.get("state")) or None,
        "deploy": _mapping(deploy.get("deploy")),
        "rollback": {
            "enabled": bool(rollback.get("enabled", True)),
            "attempted": attempted,
            "files_restored": bool(rollback.get("files_restored")),
            "restarted": bool(rollback.get("restarted")),
            "verdict": verdict,
            "reason": reason,
            "msg": _text(failure.get("msg")) or _text(wait.get("msg")),
            "failed_step": _text(failure.get("step")) or None,
            "elapsed": wait.get("elapsed", 0),
            "invocation_id": _text(wait.get("invocation_id")),
            "phase": wait.get("phase"),
            "timeline": list(wait.get("timeline") or []),
            "health": _mapping(wait.get("health")),
            "fatal": list(wait.get("fatal") or []),
            "unrecognized": list(wait.get("unrecognized") or []),
            "last_lines": list(wait.get("last_lines") or []),
            # the rollback start's performance canary (reported, never a failure of the rollback)
            "canary": {key: _mapping(rollback.get("canary")).get(key) for key in ("verdict", "reason", "lines", "figures", "baseline_runs")},
            # the rollback start in the host's start history (a start of the previous configuration)
            "history": _rollback_history(rollback.get("history")),
        },
        "traffic": _traffic(deploy.get("traffic")),
        "repairs": [_text(repair) for repair in deploy.get("repairs") or []],
    }


def _rollback_history(value: t.Any) -> dict[str, t.Any] | None:
    """Whether the rollback start was recorded in the start history, on which configuration, and how it went."""
    result = _mapping(value)
    if not result or result.get("skipped"):
        return None
    if "config" not in result:
        return {"recorded": False, "problem": _text(result.get("msg")).strip() or "the start history could not be used"}
    return {
        "recorded": bool(result.get("added")),
        "config": result.get("config"),
        "problem": result.get("problem"),
        "start": _recorded_start(result.get("entry")),
        "slow": list(_mapping(result.get("summary")).get("slow") or []),
    }


def _traffic(value: t.Any) -> dict[str, t.Any]:
    """The traffic section with its figures as numbers and its flags as booleans, whichever
    ansible-core templated them (some versions hand set_fact's values over as text)."""
    traffic = _mapping(value)
    if not traffic:
        return {}
    drain = _mapping(traffic.get("drain"))
    if drain:
        drain.update(
            seconds=_number_or_none(drain.get("seconds")),
            load_status=_whole_or_none(drain.get("load_status")),
            running_at_stop=_whole_or_none(drain.get("running_at_stop")),
            timed_out=_flag(drain.get("timed_out")),
        )
        # what ran as the drain began (not recorded by the collection's earlier versions)
        if "running_at_start" in drain:
            drain["running_at_start"] = _whole_or_none(drain["running_at_start"])
    flags: dict[str, bool] = {name: _flag(traffic[name]) for name in ("removed", "restored") if name in traffic}
    return {**traffic, **flags, "drain": drain}


def _flag(value: t.Any) -> bool:
    return value.strip().lower() in ("true", "yes", "1") if isinstance(value, str) else bool(value)


def _number_or_none(value: t.Any) -> float | None:
    try:
        return None if value in (None, "", "None") else float(value)
    except (TypeError, ValueError):
        return None


def _whole_or_none(value: t.Any) -> int | None:
    number = _number_or_none(value)
    return None if number is None or number != int(number) else int(number)


def _smoke(observed: Observed) -> dict[str, t.Any]:
    result = _mapping(observed.get("smoke"))
    enabled = bool(_setting(observed, "smoke_test", False))
    url = _text(_setting(observed, "smoke_url", ""))
    if "status" not in result:
        return {"enabled": enabled, "url": url, "status": None, "passed": None, "text": None, "msg": None}
    choices = _mapping(result.get("json")).get("choices") or []
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], t.Mapping) else {}
    return {
        "enabled": enabled,
        "url": url,
        "status": result.get("status"),
        "passed": _rollout.generated(result),
        "text": first.get("text"),
        "msg": _text(result.get("msg")) or None,
    }


def _canary(observed: Observed) -> dict[str, t.Any]:
    """The performance canary's section: the perf_canary module's result (every sample in it), or
    why it could not run; ``verdict`` None when it did not run."""
    result = _mapping(observed.get("canary"))
    enabled = bool(_setting(observed, "canary", False))
    on_fail = _text(_setting(observed, "canary_on_fail", "fail")) or "fail"
    section: dict[str, t.Any] = {"enabled": enabled, "on_fail": on_fail, "verdict": None, "reason": None, "lines": []}
    if not enabled or not result or result.get("skipped"):
        return section
    canary = _mapping(result.get("canary"))
    if result.get("failed") or not canary:
        # could not run at all (no model listed, the store unwritable): reported, never a regression
        return {**section, "verdict": "inconclusive", "reason": f"the canary could not run: {_text(result.get('msg'))}", "error": _text(result.get("msg"))}
    keys = ("verdict", "reason", "lines", "metrics", "baseline", "baseline_runs", "becomes_baseline", "figures", "server", "samples", "model", "hardware")
    # and the server's decode lines in its journal during the load
    return {**section, **{key: canary.get(key) for key in (*keys, "journal")}, "store": result.get("store"), "problem": result.get("problem")}


def _canary_outcome(canary: t.Mapping[str, t.Any], outcome: dict[str, str]) -> dict[str, str]:
    """A start that passed, but whose canary failed against the baseline: ``performance_regression``
    (only a warning in the message with ``canary_on_fail: warn``)."""
    if outcome["verdict"] != "pass" or canary.get("verdict") != "fail":
        return outcome
    failing = [line for line in canary.get("lines") or [] if str(line).endswith("FAIL)")] or list(canary.get("lines") or [])
    figures = "; ".join(str(line) for line in failing)
    if canary.get("on_fail") == "warn":
        return {**outcome, "msg": f"{outcome['msg']} (warning: the performance canary failed: {figures})"}
    return {"verdict": "fail", "reason": "performance_regression", "msg": f"the start passed its gates, but is slower than the host's baseline: {figures}"}


def _smoke_failure(observed: Observed, smoke: t.Mapping[str, t.Any], journal: t.Mapping[str, t.Any] | None) -> str:
    """Why the smoke test failed: its answer, and the fatal line the journal got after the request."""
    answer = f"HTTP {smoke['status']}" if smoke["status"] not in (None, -1) else "no answer"
    detail = f" - {smoke['msg']}" if smoke["msg"] else ""
    # the exception that followed the request (a traceback's last line), else the first fatal line
    fatal = [_mapping(event) for event in (journal or {}).get("fatal") or []]
    first = next((event for event in fatal if event.get("traceback")), fatal[0] if fatal else {})
    unit = _text(_setting(observed, "unit", "the unit"))
    why = f"; then a fatal line in {unit}'s journal: {_text(first.get('message'))}" if first else ""
    return f"smoke test: {answer} from {smoke['url']}{detail}{why}"


def _after_smoke(observed: Observed, smoke: t.Mapping[str, t.Any]) -> dict[str, t.Any] | None:
    """The journal read again after a failed smoke test (plugin_utils/_smoke), when it was."""
    after = _mapping(observed.get("smoke_journal"))
    return after if smoke["passed"] is False and "fatal" in after else None


def _restart_outcome(
    observed: Observed,
    wait: dict[str, t.Any],
    before: dict[str, t.Any],
    failure: dict[str, t.Any] | None,
    smoke: dict[str, t.Any],
    journal: t.Mapping[str, t.Any] | None = None,
) -> dict[str, str]:
    if failure is not None:
        stage = _text(failure.get("stage"))
        refusal = (
            unit_refusal("sglang_restart", _text(_setting(observed, "unit", "")), _text(observed.get("host")), before)
            if stage == "preflight" and before
            else None
        )
        if refusal is not None and not failure["reason"]:
            return {"verdict": "fail", "reason": refusal[0], "msg": refusal[1]}
        return {"verdict": "fail", "reason": failure["reason"] or STAGE_REASONS.get(stage, "error"), "msg": failure["msg"]}
    if observed.get("check_mode"):
        return {"verdict": "skipped", "reason": "check_mode", "msg": "check mode: nothing was restarted"}
    if not wait.get("verdict"):
        return {"verdict": "fail", "reason": "wait_error", "msg": _text(wait.get("msg")).strip() or "the wait ended without a verdict"}
    # passed is None when the smoke test did not run: a node of rank >= 1 sends none (node 0 does)
    if wait["verdict"] == "pass" and smoke["enabled"] and smoke["passed"] is False:
        return {"verdict": "fail", "reason": "smoke_failed", "msg": _smoke_failure(observed, smoke, journal)}
    msg = _text(wait.get("msg")).strip() or "the wait gave no message"
    if wait["verdict"] == "pass":
        msg += survived_said(journal if journal is not None else wait)
    return {"verdict": _text(wait["verdict"]), "reason": _text(wait.get("reason")) or "unknown", "msg": msg}


# -- sglang_precheck ------------------------------------------------------------------------------


class _Look(t.NamedTuple):
    """What the precheck's one look saw."""

    unit: dict[str, t.Any]
    journal: dict[str, t.Any]
    health: dict[str, t.Any]


def precheck_report(observed: Observed, now: float | None = None) -> Report:
    """The precheck's report, with its verdict: the first check that fails, in a fixed order."""
    started, now = _clock(observed, now)
    failure = _failure(observed)
    look = _look(observed)
    reason, msg = precheck_verdict(observed, look, failure)
    smoke = _smoke(observed)
    # a server that was ready and failed the smoke test: the journal read again after the request
    # holds the look's lines and why the request failed
    after_smoke = _after_smoke(observed, smoke) if reason == "smoke_failed" else None
    journal = after_smoke or look.journal
    outcome = {"verdict": precheck_pass_or_fail(observed, reason), "reason": reason, "msg": msg}
    canary = _canary(observed)
    if reason == "ready" and canary.get("verdict") == "fail":
        # with canary_on_fail: warn (a failing one with fail is the check _canary_failed)
        outcome["msg"] = _canary_outcome(canary, {"verdict": "pass", "reason": reason, "msg": msg})["msg"]
    return {
        **_named("sglang_precheck", observed, outcome, failure),
        "checked_at": _iso(started),
        "elapsed": round(now - started, 1),
        "invocation_id": _text(look.unit.get("InvocationID")),
        "state": {
            "load_state": _text(look.unit.get("LoadState")),
            "active_state": _text(look.unit.get("ActiveState")),
            "sub_state": _text(look.unit.get("SubState")),
            "result": _text(look.unit.get("Result")),
            "main_pid": _int(look.unit.get("MainPID")),
            "n_restarts": _int(look.unit.get("NRestarts")),
        },
        "health": look.health,
        "phase": journal.get("phase"),
        "progress": journal.get("progress"),
        "ready": bool(journal.get("ready", False)),
        "ready_line": journal.get("ready_line"),
        "lines": journal.get("lines", 0),
        "journal_verdict": journal.get("verdict"),
        "journal_reason": journal.get("reason"),
        **_node(observed),
        "first_fatal": _first_fatal(journal.get("fatal")),
        "run_record": _run_record_section(observed),
        **_evidence(journal, journal.get("last_lines") if after_smoke else journal.get("tail"), [look.journal.get("gap")]),
        **_with_history(_evidence(journal, None, None), history_section(observed)),
        "history": history_section(observed),
        "smoke_test": smoke,
        "canary": canary,
        # vLLM's sleep state (GET /is_sleeping, module_utils/_sleep.py): sleeping true, false or null (not known)
        "sleep": _mapping(observed.get("sleep")),
    }


def sleeping(observed: Observed) -> bool:
    """The server said it sleeps (vLLM's sleep mode): awake-only checks (a generation, the canary) are not sent."""
    return _mapping(observed.get("sleep")).get("sleeping") is True


def precheck_pass_or_fail(observed: Observed, reason: str) -> str:
    """``pass`` for a server ready, and for one asleep (reason ``sleeping``) unless the option
    ``sleeping`` says ``fail`` (a pipeline that needs the server serving at once); ``fail`` otherwise."""
    if reason == "ready":
        return "pass"
    if reason == "sleeping":
        return "fail" if _setting(observed, "sleeping", "pass") == "fail" else "pass"
    return "fail"


def _run_record_section(observed: Observed) -> dict[str, t.Any]:
    """What the last rollout left on the host: its run, step and outcome; a record that could not be used, why."""
    read = _mapping(observed.get("record"))
    record = _mapping(read.get("record"))
    return {
        "run_id": record.get("run_id"),
        "step": record.get("step"),
        "outcome": record.get("outcome"),
        "left": _rollout.interrupted(record),
        "problem": read.get("problem"),
        "held_by": read.get("lease_holder"),
        "held_by_run": _mapping(read.get("lease")).get("run_id"),
    }


def _int(value: t.Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _look(observed: Observed) -> _Look:
    state = _mapping(observed.get("state"))
    probe = _mapping(observed.get("probe"))
    probed = isinstance(probe.get("unit"), t.Mapping)
    unit = _mapping(probe["unit"]) if probed else state
    journal = _mapping(probe.get("journal")) if probed else {}
    health = _mapping(probe.get("health")) if probed else {}
    return _Look(unit, journal, health)


def precheck_verdict(observed: Observed, look: _Look, failure: t.Mapping[str, t.Any] | None) -> tuple[str, str]:
    """(reason, message): ``ready`` when every check passed, else the first that failed."""
    unit = _text(_setting(observed, "unit", ""))
    host = _text(observed.get("host"))
    if failure is not None and failure["reason"] in VALIDATION_REASONS:
        return failure["reason"], failure["msg"]
    state = _mapping(observed.get("state"))
    if state:
        refusal = unit_refusal("sglang_precheck", unit, host, state)
        if refusal is not None:
            return "unit_not_found", refusal[1]
    if failure is not None:
        return failure["reason"] or "probe_failed", f"The look at {unit} failed: {failure['msg']}"
    for check in _PRECHECKS:
        found = check(observed, look, unit, host)
        if found is not None:
            return found
    ready_line = look.journal.get("ready_line") or "?"
    if sleeping(observed):
        return "sleeping", (
            f"{unit} is active (running) and asleep (vLLM sleep mode: {_text(_mapping(observed.get('sleep')).get('url'))} says is_sleeping true),"
            f" health answered 200, ready marker at journal line {ready_line}, nothing fatal logged; no generation sent (it would wake the"
            f" server and reload its weights){_request_errors_said(look.journal)}"
        )
    if _placeholder(observed) and look.health.get("headless"):
        return "ready", f"{unit} is active (running), its journal shows its engines ready, nothing fatal logged (a headless node: no HTTP, not probed)"
    if _placeholder(observed):
        return "ready", (
            f"{unit} is active (running), its journal shows its schedulers ready at line {ready_line}, nothing fatal logged (placeholder health not counted)"
        )
    generated = ", one token generated" if _smoke(observed)["passed"] else ""
    served = _request_errors_said(look.journal)
    return "ready", f"{unit} is active (running), health answered 200, ready marker at journal line {ready_line}, nothing fatal logged{generated}{served}"


def _request_errors_said(journal: t.Mapping[str, t.Any]) -> str:
    seen = request_errors(journal)
    said = f"; {seen['count']} request(s) answered with an error in this invocation (not a failure), first: {seen['first']}" if seen["count"] else ""
    return said + survived_said(journal)


def survived_said(journal: t.Mapping[str, t.Any]) -> str:
    """The survived lines as a message says them: a warning, never a failure."""
    seen = survived_lines(journal)
    if not seen["count"]:
        return ""
    return f"; warning: {seen['count']} ERROR line(s) the engine survived (not a failure), first: {seen['first']} ({seen['file']})"


def _placeholder(observed: Observed) -> bool:
    """A node of rank >= 1 of a multi-node server answers health from a placeholder (200 whatever
    happens): its answer is recorded, not counted; its readiness is its own journal's evidence."""
    return bool(_node(observed)["node_rank"] >= 1)


def _excerpt(event: t.Any) -> str:
    return _text(_mapping(event).get("message"))[:EXCERPT]


def _unit_problem(look: _Look, unit: str) -> str | None:
    """What is wrong with the unit's state, or None when it is active (running)."""
    active, sub, result = (_text(look.unit.get(key)) for key in ("ActiveState", "SubState", "Result"))
    if active == "active" and sub == "running":
        return None
    how = f", Result={result}" if result not in ("", "success") else ""
    return f"{unit} is {active or 'unknown'} ({sub or 'unknown'}), not active (running){how}"


def _health_problem(observed: Observed, look: _Look, host: str) -> str | None:
    """What is wrong with the health answer, or None when it counts as passed (200, or a
    placeholder's answer, which is not counted)."""
    status = look.health.get("status")
    if status == 200 or _placeholder(observed):
        return None
    url = _text(look.health.get("url")) or _text(_setting(observed, "health_url", ""))
    answer = f"answered HTTP {status}" if status is not None else f"did not answer: {_text(look.health.get('error')) or 'no probe'}"
    return f"{url} {answer} (probed from {host}), not 200"


def _health_seen(observed: Observed, look: _Look, host: str) -> str:
    """The health answer in a few words, whatever it was."""
    problem = _health_problem(observed, look, host)
    if problem is not None:
        return problem
    if _placeholder(observed):
        return "not probed (a headless node serves no HTTP)" if look.health.get("headless") else "answered by a placeholder (not counted)"
    return f"{_text(look.health.get('url')) or _text(_setting(observed, 'health_url', ''))} answered HTTP 200"


def _fatal_log(observed: Observed, look: _Look, unit: str, host: str) -> tuple[str, str] | None:
    """First, as the restart's wait decides: a fatal line names the cause, whatever the unit's
    state and the health answer (both said beside it, and kept in the report)."""
    fatal = look.journal.get("fatal") or []
    if not fatal:
        return None
    state = _unit_problem(look, unit) or f"{unit} is active (running)"
    return (
        "fatal_log",
        f"The current invocation logged {len(fatal)} fatal event(s); {state}; health: {_health_seen(observed, look, host)}; first: {_excerpt(fatal[0])}",
    )


def _unit_not_active(observed: Observed, look: _Look, unit: str, host: str) -> tuple[str, str] | None:
    problem = _unit_problem(look, unit)
    return None if problem is None else ("unit_not_active", problem)


def _health_failed(observed: Observed, look: _Look, unit: str, host: str) -> tuple[str, str] | None:
    problem = _health_problem(observed, look, host)
    return None if problem is None else ("health_failed", problem)


def _not_ready(observed: Observed, look: _Look, unit: str, host: str) -> tuple[str, str] | None:
    if look.journal.get("ready"):
        return None
    progress = look.journal.get("progress")
    bar_text = f", {progress.get('text')}" if isinstance(progress, t.Mapping) and progress.get("text") else ""
    return "not_ready", f"No ready marker in the journal of the current invocation (phase reached: {look.journal.get('phase') or 'none'}{bar_text})"


def _smoke_failed(observed: Observed, look: _Look, unit: str, host: str) -> tuple[str, str] | None:
    """The look passed, and the one-token generation sent after it (with the smoke test on) failed."""
    smoke = _smoke(observed)
    if not (smoke["enabled"] and smoke["passed"] is False):
        return None
    return "smoke_failed", _smoke_failure(observed, smoke, _after_smoke(observed, smoke))


def _canary_failed(observed: Observed, look: _Look, unit: str, host: str) -> tuple[str, str] | None:
    """With the precheck's canary on: the server in service is slower than the host's baseline
    (``performance_regression``), unless a failed canary only warns (canary_on_fail: warn)."""
    canary = _canary(observed)
    if canary.get("verdict") != "fail" or canary.get("on_fail") == "warn":
        return None
    failing = [str(line) for line in canary.get("lines") or [] if str(line).endswith("FAIL)")]
    return "performance_regression", f"{unit} is in service but slower than the host's baseline: {'; '.join(failing) or canary.get('reason')}"


def _unrecognized_strict(observed: Observed, look: _Look, unit: str, host: str) -> tuple[str, str] | None:
    unrecognized = look.journal.get("unrecognized") or []
    if not (_setting(observed, "strict", False) and unrecognized):
        return None
    return (
        "unrecognized_strict",
        f"Strict mode: the current invocation logged {len(unrecognized)} line family(ies) no rule knows, first: {_excerpt(unrecognized[0])}",
    )


def _rollout_in_progress(observed: Observed, look: _Look, unit: str, host: str) -> tuple[str, str] | None:
    """A rollout holds the host (its lease, module_utils/_lease): what the look saw is that rollout's
    work, and the host is not in service until it ends."""
    read = _mapping(observed.get("record"))
    holder = read.get("lease_holder")
    if not holder or read.get("lease_dead"):
        return None
    silent = (read.get("lease_age") or 0) > _lease.DEFAULT_STALE
    gone = " (silent for longer than a live run is: the next rollout takes the host over and repairs what it left)" if silent else ""
    return "rollout_in_progress", f"{host} {unit} is held by a rollout: {holder}{gone}"


def _interrupted_run(observed: Observed, look: _Look, unit: str, host: str) -> tuple[str, str] | None:
    """A rollout killed or cancelled on this host left it drained or on an unproven configuration
    (its run record on the host says so): the server may answer, but the host is not in service."""
    left = _rollout.interrupted(_mapping(observed.get("record")).get("record"))
    return None if left is None else ("interrupted_run", f"{host} is {left}")


def _new_lines(observed: Observed, look: _Look, unit: str, host: str) -> tuple[str, str] | None:
    """With fail_on_new: an unrecognized line group in none of this host's recent good starts."""
    history = history_section(observed)
    if not (_setting(observed, "fail_on_new", False) and history and history["new_unrecognized"]):
        return None
    return "new_lines", _new_lines_msg(unit, history)


_PRECHECKS: tuple[t.Callable[[Observed, _Look, str, str], tuple[str, str] | None], ...] = (
    _rollout_in_progress,
    _fatal_log,
    _unit_not_active,
    _health_failed,
    _not_ready,
    _smoke_failed,
    _canary_failed,
    _unrecognized_strict,
    _new_lines,
    _request_errors_over_limit,
    _interrupted_run,
)


# -- the start history (module start_history) -------------------------------------------------------


def history_section(observed: Observed) -> dict[str, t.Any] | None:
    """What the host's start history said about this start: the recorded start's slow phases and new
    line groups (``history``, after the verdict), the stall limits the wait used and where each came
    from (``history_before``, read before the wait); None when the history was off or never read."""
    after, before = _mapping(observed.get("history")), _mapping(observed.get("history_before"))
    if "config" not in after and "config" not in before:
        problem = _text(after.get("msg") or before.get("msg")).strip()
        return {"problem": f"the start history could not be used: {problem}"} if problem else None
    summary = _mapping(after.get("summary")) or _mapping(before.get("summary"))
    baseline = _mapping(summary.get("baseline"))
    return {
        "path": after.get("path") or before.get("path"),
        "problem": after.get("problem") or before.get("problem"),
        "config": after.get("config") or before.get("config"),
        "recorded": bool(after.get("added")),
        "starts": after.get("starts", before.get("starts", 0)),
        "good_starts": int(summary.get("good_starts") or 0),
        "low": baseline.get("low"),
        "high": baseline.get("high"),
        # each phase's usual (median) time in the good starts, for the rollout page
        "usual": _mapping(baseline.get("phases")),
        "slow": list(summary.get("slow") or []),
        "templates": _mapping(summary.get("templates")),
        "new_unrecognized": list(summary.get("new_unrecognized") or []),
        "stall_limits": _mapping(before.get("stall_limits")),
        # added for pipelines: the recorded start, how many of its line groups are new, how it compares
        # with the play's other hosts (set by fleet_section once their reports are in)
        "start": _recorded_start(after.get("entry")),
        "new_templates": sum(1 for seen in _mapping(summary.get("templates")).values() if _mapping(seen).get("status") == "new"),
        "fleet": None,
    }


def _recorded_start(entry: t.Any) -> dict[str, t.Any] | None:
    """The recorded start in a few figures: its outcome, its total time (first journal line to the ready
    marker) and each phase's duration."""
    entry = _mapping(entry)
    if not entry:
        return None
    return {"outcome": entry.get("outcome"), "total": entry.get("total"), "phases": _mapping(entry.get("phases")), "ended_in": entry.get("ended_in")}


def _wait_history(history: dict[str, t.Any] | None, wait: t.Mapping[str, t.Any]) -> dict[str, t.Any] | None:
    """The restart's history section with what the wait did with the history: the stall limit of the phase
    it ended in (``stall_limit``, with its source) and the ETA it gave (``eta``: its baseline, the ETA at each
    phase marker, and ``error``, how far the last one was from the ready marker, in seconds; positive is late)."""
    if not history or "good_starts" not in history:
        return history
    phase = _text(wait.get("phase"))
    limit = _mapping(_mapping(history.get("stall_limits")).get(phase))
    eta = _mapping(wait.get("eta")) or None
    if eta is not None:
        given = [_mapping(mark) for mark in eta.get("given") or []]
        ready = [step.get("started") for step in wait.get("timeline") or [] if isinstance(step, t.Mapping) and step.get("phase") == "ready"]
        ends = given[-1].get("ends_at") if given else None
        ready_at = ready[0] if ready and isinstance(ready[0], (int, float)) else None
        error = round(float(ready_at) - float(ends), 1) if ready_at is not None and isinstance(ends, (int, float)) else None
        eta = {**eta, "given": given, "ready_at": ready_at, "error": error}
    return {**history, "stall_limit": {"phase": phase, **limit} if limit else None, "eta": eta}


def fleet_section(report: t.Mapping[str, t.Any], reports: t.Iterable[t.Any], ratio: float = _history.DEFAULT_FLEET_RATIO) -> Report:
    """The report with ``history.fleet``: its host's recorded start against its peers' on the same
    configuration among ``reports`` (the play's reports so far, its own among them), from
    ``_history.fleet_compare``; unchanged when it has no history section or too few peers. Its own
    host's entry among ``reports`` is this report (an earlier one of the host, or none, is replaced)."""
    return with_fleet(report, fleet_starts(reports), ratio)


def with_fleet(report: t.Mapping[str, t.Any], starts: t.Mapping[str, t.Any], ratio: float = _history.DEFAULT_FLEET_RATIO) -> Report:
    """``fleet_section`` from the peers' starts as ``fleet_starts`` gives them (what a phase of each
    host hands on, instead of its whole report)."""
    history = report.get("history")
    if not isinstance(history, t.Mapping) or "good_starts" not in history:
        return dict(report)
    host = _text(report.get("host"))
    peers = {name: start for name, start in starts.items() if name != host and isinstance(start, t.Mapping)}
    found = _history.fleet_compare({**peers, **fleet_starts([report])}, ratio).get(host)
    return {**report, "history": {**history, "fleet": found}}


def fleet_starts(reports: t.Iterable[t.Any]) -> dict[str, dict[str, t.Any]]:
    """Each host's good start, recorded in its history in this run: ``{host: {"config", "total"}}`` from the
    reports of the hosts (a start that failed, or was not recorded in this run, says nothing about a usual time)."""
    starts: dict[str, dict[str, t.Any]] = {}
    for report in reports:
        history = _mapping(_mapping(report).get("history"))
        start = _mapping(history.get("start"))
        if history.get("recorded") and start.get("outcome") == "pass":
            starts[_text(report.get("host"))] = {"config": history.get("config"), "total": start.get("total")}
    return starts


def _with_history(evidence: Report, history: t.Mapping[str, t.Any] | None) -> Report:
    """The line groups, each with what the history says of its template (``seen in 9 of the last 9
    good starts``, new, only in failed starts); unrecognized groups that are new first."""
    templates = _mapping((history or {}).get("templates"))
    if not templates:
        return {}
    marked: Report = {}
    for event_class in ("fatal", "allowlisted", "unrecognized"):
        events = []
        for event in evidence.get(event_class) or []:
            seen = templates.get(_history.template(_text(_mapping(event).get("message"))))
            events.append({**event, "history": seen} if seen else dict(event))
        if event_class == "unrecognized":
            events.sort(key=lambda event: _mapping(event.get("history")).get("status") not in ("new", "failed_only"))
        marked[event_class] = events
    return marked


def _new_lines_msg(unit: str, history: t.Mapping[str, t.Any]) -> str:
    new = history["new_unrecognized"]
    return f"{unit} logged {len(new)} unrecognized line group(s) new since its last {history['good_starts']} good start(s) (fail_on_new), first: {new[0]}"


def _new_lines_outcome(observed: Observed, history: t.Mapping[str, t.Any] | None, outcome: dict[str, str]) -> dict[str, str]:
    """A start that passed fails with fail_on_new when it logged an unrecognized line group that is new."""
    if outcome.get("verdict") != "pass" or not (_setting(observed, "fail_on_new", False) and history and history.get("new_unrecognized")):
        return outcome
    return {"verdict": "fail", "reason": "new_lines", "msg": _new_lines_msg(_text(_setting(observed, "unit", "the unit")), history)}
