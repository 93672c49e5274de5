# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A runbook report (``_runbook_report``) as people and tools read it, in one place for every role.

Private to the collection; may change at any time. Standard library only, no Ansible imports.

``summary_lines``: one screen, the verdict first, then the evidence. ``junit_xml``: one test suite
with one test case per host, for CI. ``report_json``: the whole report. ``stats``: the data
``set_stats`` publishes (AWX artifacts, ansible-runner's ``artifact_data``). ``report_files``:
where the JSON and JUnit files go. What
differs between the roles is data, in ``FORMS``; every section is shared.

The report of a multi-node deployment (``plugin_utils/_deployment.deployment_verdict``: its verdict,
a summary per node and every node's whole report) goes through the same functions: one screen for
the deployment, one test case, its own ``set_stats`` figures, files named after the deployment.
"""

from __future__ import annotations

import json
import re
import time
import typing as t
import xml.etree.ElementTree as ET

from ansible_collections.inferops.runbooks.plugins.module_utils import _history, _load
from ansible_collections.inferops.runbooks.plugins.plugin_utils._release import release_outcome

Report = t.Mapping[str, t.Any]

MSG_LIMIT = 400
LINE_LIMIT = 200
SHORT_LIMIT = 100
FATAL_SHOWN = 5
ALLOWLISTED_SHOWN = 8
UNRECOGNIZED_SHOWN = 5
LAST_LINES_SHOWN = 10
TRACEBACK_HEAD, TRACEBACK_TAIL = 2, 4
JUNIT_MESSAGE_LIMIT = 500
DEPLOYMENT_MSG_LIMIT = 300
NODE_MSG_LIMIT = 240
# XML 1.0 has no place for these (tqdm's carriage returns are allowed, ANSI escapes are not)
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class Form(t.NamedTuple):
    """How one role's report is named and what it publishes, for a host and for a deployment."""

    test_name: str
    headline: t.Callable[[Report], str]
    time_key: str
    timestamp_key: str
    file_suffix: str
    properties: tuple[tuple[str, str], ...]
    stats: tuple[tuple[str, str], ...]
    deployment_headline: t.Callable[[Report], str]
    # what a node's line says when it reached no phase
    no_phase: str
    deployment_stats: tuple[tuple[str, str], ...]
    # each node's set_stats figures: the names of its fields, or one name for that field's value alone
    node_stats: t.Union[str, tuple[str, ...]]


def _unit_named(report: Report) -> str:
    return str(report.get("unit") or "(no unit)")


def _duration(seconds: t.Any) -> str:
    try:
        whole = int(float(seconds))
    except (TypeError, ValueError):
        whole = 0
    return f"{whole // 60}m{whole % 60:02d}s"


def _restart_headline(report: Report) -> str:
    head = f"{report.get('host')} {_unit_named(report)}: {str(report.get('verdict')).upper()} ({report.get('reason')})"
    rollback = report.get("rollback") or {}
    state = report.get("state")
    if state == "rolled_back":
        return f"{head}: rolled back, serving the previous configuration again (rollback start passed in {_duration(rollback.get('elapsed'))})"
    if state == "rollback_failed":
        after = f" after {_duration(rollback.get('elapsed'))}" if rollback.get("restarted") else ""
        return f"{head}: rolled back, but the rollback start FAILED too ({rollback.get('reason')}{after}): the host serves nothing and stays out of rotation"
    if state == "not_restarted" and rollback.get("files_restored"):
        return f"{head}: the previous configuration was put back, nothing was restarted"
    return (
        f"{report.get('host')} {_unit_named(report)}: {str(report.get('verdict')).upper()} ({report.get('reason')}) "
        f"after {report.get('elapsed')} s waiting, {report.get('total_elapsed')} s in all"
    )


def _precheck_headline(report: Report) -> str:
    dry = " [check mode]" if report.get("check_mode") else ""
    return (
        f"{report.get('host')} {_unit_named(report)}: precheck {str(report.get('verdict')).upper()} ({report.get('reason')}){dry} "
        "- read-only, nothing was restarted"
    )


def _deployment_named(report: Report) -> str:
    nodes = report.get("nodes") or []
    return f"deployment {report.get('deployment')} ({len(nodes)} nodes: {', '.join(str(node.get('host')) for node in nodes)})"


def _restart_deployment_headline(report: Report) -> str:
    return (
        f"{_deployment_named(report)} {_unit_named(report)}: {str(report.get('verdict')).upper()} ({report.get('reason')}) "
        f"after {report.get('elapsed')} s waiting"
    )


def _precheck_deployment_headline(report: Report) -> str:
    return (
        f"{_deployment_named(report)} {_unit_named(report)}: precheck {str(report.get('verdict')).upper()} ({report.get('reason')}) "
        "- read-only, nothing was restarted"
    )


# Values are paths into the report: "a.b" a nested key, "#a" the length of a list.
_NAMED = (("unit", "unit"), ("engine", "engine"), ("verdict", "verdict"), ("reason", "reason"), ("invocation_id", "invocation_id"))
_EVENTS = (("fatal_events", "#fatal"), ("allowlisted_events", "#allowlisted"), ("unrecognized_events", "#unrecognized"))
FORMS: dict[str, Form] = {
    "sglang_restart": Form(
        test_name="restart",
        headline=_restart_headline,
        time_key="total_elapsed",
        timestamp_key="started_at",
        file_suffix="",
        properties=(
            *_NAMED,
            ("previous_invocation_id", "previous_invocation_id"),
            ("wait_seconds", "elapsed"),
            *_EVENTS,
            ("state", "state"),
            ("config_changed", "deploy.applied"),
            ("rollback_verdict", "rollback.verdict"),
            ("rollback_reason", "rollback.reason"),
            ("rollback_invocation_id", "rollback.invocation_id"),
            ("canary_verdict", "canary.verdict"),
        ),
        stats=(
            ("verdict", "verdict"),
            ("reason", "reason"),
            ("elapsed", "elapsed"),
            ("total_elapsed", "total_elapsed"),
            ("invocation_id", "invocation_id"),
            ("previous_invocation_id", "previous_invocation_id"),
            ("unit", "unit"),
            ("fatal", "#fatal"),
            ("unrecognized", "#unrecognized"),
            ("survived_lines", "survived_lines.count"),
            ("state", "state"),
            ("config_changed", "deploy.applied"),
            ("rollback_verdict", "rollback.verdict"),
            ("rollback_reason", "rollback.reason"),
            ("rollback_elapsed", "rollback.elapsed"),
            ("rollback_invocation_id", "rollback.invocation_id"),
            ("traffic_removed", "traffic.removed"),
            ("traffic_restored", "traffic.restored"),
            ("repairs", "repairs"),
            ("canary_verdict", "canary.verdict"),
            ("canary_output_tokens_per_s", "canary.figures.output_tokens_per_s"),
            ("canary_baseline_output_tokens_per_s", "canary.baseline.throughput"),
        ),
        deployment_headline=_restart_deployment_headline,
        no_phase="not started",
        deployment_stats=(("verdict", "verdict"), ("reason", "reason"), ("root_cause", "root_cause.host"), ("elapsed", "elapsed"), ("unit", "unit")),
        node_stats=("rank", "verdict", "reason", "invocation_id"),
    ),
    "sglang_precheck": Form(
        test_name="precheck",
        headline=_precheck_headline,
        time_key="elapsed",
        timestamp_key="checked_at",
        file_suffix=".precheck",
        properties=(
            *_NAMED,
            ("active_state", "state.active_state"),
            ("sub_state", "state.sub_state"),
            ("health_status", "health.status"),
            *_EVENTS,
            ("check_mode", "check_mode"),
            ("canary_verdict", "canary.verdict"),
        ),
        stats=(
            ("verdict", "verdict"),
            ("reason", "reason"),
            ("unit", "unit"),
            ("invocation_id", "invocation_id"),
            ("active_state", "state.active_state"),
            ("health_status", "health.status"),
            ("fatal", "#fatal"),
            ("unrecognized", "#unrecognized"),
            ("allowlisted", "#allowlisted"),
            ("request_errors", "request_errors.count"),
            ("survived_lines", "survived_lines.count"),
            ("counts", "counts"),
            ("canary_verdict", "canary.verdict"),
            ("canary_output_tokens_per_s", "canary.figures.output_tokens_per_s"),
            ("canary_baseline_output_tokens_per_s", "canary.baseline.throughput"),
        ),
        deployment_headline=_precheck_deployment_headline,
        no_phase="no journal",
        deployment_stats=(("verdict", "verdict"), ("reason", "reason"), ("root_cause", "root_cause.host"), ("unit", "unit")),
        node_stats="verdict",
    ),
}


def form_of(report: Report) -> Form:
    role = report.get("role") if isinstance(report, t.Mapping) else None
    if role not in FORMS:
        raise ValueError(f"not a runbook report: its role must be one of {', '.join(FORMS)}, got {role!r}")
    return FORMS[str(role)]


def value_at(report: Report, path: str) -> t.Any:
    """The value a FORMS path names: ``state.active_state``, ``#fatal`` (a count)."""
    count = path.startswith("#")
    value: t.Any = report
    for key in path.lstrip("#").split("."):
        value = value.get(key) if isinstance(value, t.Mapping) else None
    if count:
        return len(value) if isinstance(value, (list, tuple)) else 0
    return value


def is_deployment(report: Report) -> bool:
    """True for the report of a multi-node deployment (``deployment_verdict``'s), with its nodes."""
    return isinstance(report, t.Mapping) and isinstance(report.get("nodes"), list)


def stats(report: Report) -> dict[str, t.Any]:
    """What ``set_stats`` publishes for the host, or for the deployment."""
    form = form_of(report)
    if not is_deployment(report):
        host = {name: value_at(report, path) for name, path in form.stats}
        if isinstance(report.get("history"), t.Mapping):
            host["history"] = history_figures(report)
        return host
    figures: dict[str, t.Any] = {"deployment": True, **{name: value_at(report, path) for name, path in form.deployment_stats}}
    nodes = [node for node in report["nodes"] if isinstance(node, t.Mapping)]
    if isinstance(form.node_stats, str):
        figures["nodes"] = {node.get("host"): node.get(form.node_stats) for node in nodes}
    else:
        figures["nodes"] = {node.get("host"): {name: node.get(name) for name in form.node_stats} for node in nodes}
    return figures


def report_files(report: Report, report_dir: str) -> dict[str, str]:
    """{"json": path, "junit": path} in ``report_dir``, named after the host or the deployment; {} when
    there is no directory."""
    if not report_dir:
        return {}
    name = report.get("deployment") if is_deployment(report) else report.get("host")
    stem = f"{report_dir.rstrip('/') or '/'}/{name}{form_of(report).file_suffix}"
    return {"json": f"{stem}.json", "junit": f"{stem}.junit.xml"}


def report_json(report: Report) -> str:
    """The whole report as JSON, keys sorted, for people and tools."""
    return json.dumps(report, indent=2, sort_keys=True, separators=(",", ": "), ensure_ascii=False, default=str) + "\n"


# -- the summary ----------------------------------------------------------------------------------


def cut(text: t.Any, limit: int) -> str:
    """At most about ``limit`` characters, cut at a word, with ``...``."""
    whole = "" if text is None else str(text)
    if len(whole) <= limit + 5:
        return whole
    head = whole[: limit - 3]
    if " " in head:
        head = head.rsplit(" ", 1)[0]
    return head + "..."


def _drain_line(drain: t.Mapping[str, t.Any]) -> str:
    if "seen" in drain or drain.get("node_rank"):
        return _load.describe(drain)  # what inferops.runbooks.server_load saw
    # a drain recorded by the collection's earlier versions (one load URL, its status)
    running, status = drain.get("running_at_stop"), drain.get("load_status")
    timed_out = " (drain timeout reached)" if drain.get("timed_out") else ""
    at_start = drain.get("running_at_start")
    began = f"{at_start} request(s) running as it began, " if at_start is not None else ""
    if running is not None:
        return f"drain: {began}{running} request(s) running at the stop, after {drain.get('seconds')} s{timed_out}"
    answer = "no answer" if status in (None, -1) else f"HTTP {status}"
    return f"drain: running requests not known at the stop ({drain.get('load_url')}: {answer}), after {drain.get('seconds')} s{timed_out}"


# where a host stands after a restart (its report's state), as the play's closing lines group them
FLEET_GROUPS = (
    ("new configuration", ("new_configuration",)),
    ("already on the new configuration (nothing restarted)", ("unchanged",)),
    ("restarted (no change)", ("restarted",)),
    ("ROLLED BACK (serving the previous configuration)", ("rolled_back",)),
    ("DOWN (rollback failed)", ("rollback_failed",)),
    ("DOWN (failed, not rolled back)", ("failed",)),
    ("not restarted (failed before the stop)", ("not_restarted",)),
    ("check mode (nothing done)", ("check_mode",)),
)


def fleet_lines(hosts: t.Sequence[str], reports: t.Sequence[Report], outliers: t.Sequence[t.Mapping[str, t.Any]]) -> list[str]:
    """Where the play's hosts stand: how many reached the role, each group of hosts by their state (in
    the play's order), the hosts not touched, and the starts much slower than their peers'."""
    states = {str(report.get("host")): report.get("state") for report in reports}
    ran = [host for host in hosts if host in states]
    untouched = [host for host in hosts if host not in states]
    lines = [f"fleet: {len(hosts)} host(s) in the play, {len(ran)} reached, {len(untouched)} not touched"]
    for title, wanted in FLEET_GROUPS:
        members = [host for host in ran if states[host] in wanted]
        if members:
            lines.append(f"  {title}: {' '.join(members)}")
    if untouched:
        lines.append(f"  not touched: {' '.join(untouched)}")
    lines += [f"  slower than its peers: {found.get('text')}" for found in outliers]
    return lines


def summary_lines(report: Report, report_dir: str = "") -> list[str]:
    """One screen per host (or per deployment): the verdict first, then the evidence."""
    if is_deployment(report):
        return deployment_summary_lines(report, report_dir)
    form = form_of(report)
    lines = [form.headline(report)]
    if report.get("state") in ("rolled_back", "rollback_failed"):
        lines.append(f"new configuration: FAIL ({report.get('reason')}) after {report.get('elapsed')} s waiting, {report.get('total_elapsed')} s in all")
    lines.append(cut(report.get("msg"), MSG_LIMIT))
    lines += _failed_step(report)
    lines += _left_by_a_rollout(report)
    lines += _problems(report)
    lines += _unit(report)
    lines += _phases(report)
    lines += history_lines(report)
    lines += _health(report)
    if _journal_was_read(report):
        lines += _journal(report)
        lines += evidence_lines(report)
        lines += _smoke(report)
        lines += _last_lines(report)
    lines += canary_lines(report)
    lines += deploy_lines(report)
    return lines + _reports_line(report, report_dir)


def _left_by_a_rollout(report: Report) -> list[str]:
    """A precheck failed for another reason still says what an interrupted rollout left on the host."""
    left = (report.get("run_record") or {}).get("left")
    if not left or report.get("reason") == "interrupted_run":
        return []
    return [f"also: {report.get('host')} is {cut(left, MSG_LIMIT)}"]


def _reports_line(report: Report, report_dir: str) -> list[str]:
    """Where the files went (none are written for a skipped run)."""
    files = report_files(report, report_dir)
    if not files or report.get("verdict") == "skipped":
        return []
    return [f"reports: {files['json']} and {form_of(report).file_suffix}.junit.xml"]


def deployment_summary_lines(report: Report, report_dir: str = "") -> list[str]:
    """One screen per multi-node deployment: the verdict, the node where a failure began with its
    first fatal line and traceback, then every node alongside."""
    form = form_of(report)
    lines = [form.deployment_headline(report), cut(report.get("msg"), DEPLOYMENT_MSG_LIMIT)]
    root = report.get("root_cause")
    if isinstance(root, t.Mapping) and root:
        lines.append(f"root cause: {root.get('host')} (node {root.get('rank')}), {root.get('reason')}")
        first = root.get("first_fatal")
        if isinstance(first, t.Mapping) and first:
            lines.append(f"  first fatal line {_fatal_line(first)}")
            lines += _traceback(_first_event(report, root.get("host")))
    lines.append("nodes:")
    for node in report.get("nodes") or []:
        lines += _node_lines(node, form)
    return lines + _reports_line(report, report_dir)


def _first_event(report: Report, host: t.Any) -> t.Mapping[str, t.Any]:
    """The first fatal event of a node, from its own report (the deployment's carries them all)."""
    for node_report in report.get("node_reports") or []:
        if isinstance(node_report, t.Mapping) and node_report.get("host") == host:
            fatal = node_report.get("fatal")
            first = fatal[0] if isinstance(fatal, list) and fatal else {}
            return first if isinstance(first, t.Mapping) else {}
    return {}


def _at(realtime: t.Any) -> str:
    """`` at 17:19:21.337 UTC`` for a journal time in microseconds since the epoch."""
    if isinstance(realtime, bool) or not isinstance(realtime, (int, float)) or not realtime:
        return ""
    return f" at {time.strftime('%H:%M:%S', time.gmtime(int(realtime / 1_000_000)))}.{int(realtime // 1000) % 1000:03d} UTC"


def _fatal_line(first: t.Mapping[str, t.Any]) -> str:
    """A node's first fatal line: its rule, ranks, journal time and line, and the message."""
    ranks = ",".join(str(rank) for rank in first.get("ranks") or [])
    return (
        f"[{first.get('rule') or 'no rule'}]{(' on ' + ranks) if ranks else ''}{_at(first.get('realtime'))}"
        f"{(', journal line ' + str(first['line'])) if first.get('line') else ''}: {cut(first.get('message'), LINE_LIMIT)}"
    )


def _node_lines(node: t.Mapping[str, t.Any], form: Form) -> list[str]:
    """One node of a deployment: verdict, phase, health (a placeholder's is not counted), invocation;
    then, unless it is the root cause (shown above), its first fatal line or why it failed."""
    health = node.get("health") or {}
    rank = node.get("rank") or 0
    where = node.get("progress") or str(node.get("phase") or form.no_phase).replace("_", " ")
    answer = health.get("status") or health.get("error") or "not probed"
    worker = (" (headless, no HTTP)" if health.get("headless") else " (placeholder, not counted)") if rank > 0 else ""
    lines = [
        f"  {node.get('host')} node {rank}{' (root cause)' if node.get('root_cause') else ''}: {str(node.get('verdict')).upper()} ({node.get('reason')}), "
        f"{where}, health {answer}{worker}, invocation {node.get('invocation_id') or 'none'}"
    ]
    if node.get("root_cause"):
        return lines
    first = node.get("first_fatal")
    if isinstance(first, t.Mapping) and first:
        after = f" {node['after_root_cause']} s after the root cause" if "after_root_cause" in node else ""
        lines.append(f"    first fatal line{after} {_fatal_line(first)}")
    elif node.get("verdict") == "fail":
        lines.append(f"    {cut(node.get('msg'), NODE_MSG_LIMIT)}")
    return lines


def deploy_lines(report: Report) -> list[str]:
    """The change, the traffic and the rollback start, when there were any."""
    lines: list[str] = [f"repaired: {cut(repair, MSG_LIMIT)}" for repair in report.get("repairs") or []]
    deploy = report.get("deploy") or {}
    if deploy.get("requested"):
        files = []
        for item in deploy.get("files") or []:
            done = (
                (f"written, previous kept as {item.get('path')}.previous" if item.get("existed") else "written, new file")
                if item.get("changed")
                else "already in place"
            )
            files.append(f"{item.get('kind')} {item.get('path')} {done}")
        lines.append("change: " + "; ".join(files))
    traffic = report.get("traffic") or {}
    if traffic.get("router_url"):
        router, worker = traffic["router_url"], traffic.get("worker_url")
        if traffic.get("removed"):
            lines.append(f"router: {worker} taken out of {router}" + (" and put back" if traffic.get("restored") else ", NOT put back"))
        elif traffic.get("registered") is False:
            lines.append(f"router: {worker} not registered with {router}, left alone")
    drain = traffic.get("drain") or {}
    if drain:
        lines.append(_drain_line(drain))
    if (report.get("sleep_before") or {}).get("sleeping") is True:
        lines.append("before the stop: the server was asleep (vLLM sleep mode); the new start was gated as usual")
    left = release_outcome(report.get("leftovers") or {}, str(report.get("unit") or "the unit"))["line"]
    if left:
        lines.append(f"after the stop: {cut(left, MSG_LIMIT)}")
    if traffic.get("error"):
        lines.append(f"traffic: {cut(traffic['error'], MSG_LIMIT)}")
    rollback = report.get("rollback") or {}
    if rollback.get("restarted"):
        verdict = f"{str(rollback.get('verdict') or 'fail').upper()} ({rollback.get('reason')})"
        lines.append(f"rollback start: {verdict} after {rollback.get('elapsed')} s, invocation {rollback.get('invocation_id') or 'none'}")
        if rollback.get("timeline"):
            lines.append(
                "  phases: "
                + " > ".join(f"{step.get('phase')} {step.get('duration') if step.get('duration') is not None else '...'} s" for step in rollback["timeline"])
            )
        canary = rollback.get("canary") or {}
        if canary.get("verdict"):
            lines.append(f"rollback canary: {str(canary['verdict']).upper()}")
            lines += [f"  {cut(line, LINE_LIMIT)}" for line in canary.get("lines") or [] if not str(line).startswith("inconclusive: ")]
        if rollback.get("verdict") != "pass":
            lines.append("  " + cut(rollback.get("msg"), MSG_LIMIT))
            lines += [
                f"  FATAL [{event.get('rule') or 'no rule'}] x{event.get('count')}{_ranks(event)}: {cut(event.get('message'), LINE_LIMIT)}"
                for event in rollback.get("fatal") or []
            ][:FATAL_SHOWN]
            if not rollback.get("fatal"):
                lines += [f"    | {cut(line, LINE_LIMIT)}" for line in (rollback.get("last_lines") or [])[-LAST_LINES_SHOWN:]]
    elif rollback.get("attempted") and rollback.get("verdict") == "fail":
        lines.append(f'rollback: FAILED at "{rollback.get("failed_step")}": {cut(rollback.get("msg"), MSG_LIMIT)}')
    return lines


def _journal_was_read(report: Report) -> bool:
    """False for a run that stopped before it read the journal: no evidence to show."""
    never_looked = "journal_verdict" in report and report["journal_verdict"] is None  # a precheck
    never_waited = "lines" in report and report["lines"] is None  # a restart
    return not (never_looked or never_waited)


def _failed_step(report: Report) -> list[str]:
    # a failed wait speaks for itself; other stages name the step that failed
    if report.get("failed_step") and report.get("failed_stage") != "wait":
        return [f"failed step: {report['failed_step']}"]
    return []


def _problems(report: Report) -> list[str]:
    problems = report.get("problems") or []
    return [f"refused: {problem}" for problem in problems] if len(problems) > 1 else []


def _unit(report: Report) -> list[str]:
    state = report.get("state")
    if isinstance(state, t.Mapping):
        if state.get("load_state") != "loaded":
            return []
        result = state.get("result")
        how = f", result {result}" if result and result != "success" else ""
        return [
            f"unit: {state.get('active_state')} ({state.get('sub_state')}){how}, main PID {state.get('main_pid')}, "
            f"invocation {report.get('invocation_id') or 'none'}, automatic restarts: {state.get('n_restarts')}"
        ]
    if report.get("previous_invocation_id") or report.get("invocation_id"):
        return [
            f"invocation {report.get('invocation_id') or 'none'} (before: {report.get('previous_invocation_id') or 'none'}), "
            f"automatic restarts: {report.get('restarts')}"
        ]
    return []


def _phases(report: Report) -> list[str]:
    timeline = report.get("timeline")
    if timeline:
        steps = [f"{step.get('phase')} {step['duration'] if step.get('duration') is not None else '...'} s" for step in timeline]
        return ["phases: " + " > ".join(steps)]
    if "timeline" in report and report.get("phase"):
        return [f"phase: {report['phase']}"]
    return []


def history_lines(report: Report) -> list[str]:
    """What the host's start history says: the baseline, slow phases, learned stall limits, new groups."""
    history = report.get("history")
    if not isinstance(history, t.Mapping):
        return []
    lines = []
    if history.get("problem"):
        lines.append(f"start history: {cut(history['problem'], LINE_LIMIT)}")
    if "good_starts" not in history:
        return lines
    good = int(history.get("good_starts") or 0)
    span = ""
    if history.get("low") is not None and history.get("high") is not None:
        low, high = _history.human(float(history["low"])), _history.human(float(history["high"]))
        span = f" ({low})" if low == high else f" ({low}-{high})"
    recorded = ", this start recorded" if history.get("recorded") else ""
    lines.append(f"start history: {good} good start(s) on this configuration{span} of {history.get('starts', 0)} kept{recorded}")
    lines += [f"  slow: {item.get('text')}" for item in history.get("slow") or [] if isinstance(item, t.Mapping)]
    limits = history.get("stall_limits") or {}
    learned = [
        f"{phase.replace('_', ' ')} {_history.human(float(limit.get('limit') or 0))} ({limit.get('detail')})"
        for phase, limit in limits.items()
        if isinstance(limit, t.Mapping) and limit.get("source") == "learned"
    ]
    if learned:
        lines.append("  stall limits learned: " + "; ".join(learned))
    new = history.get("new_unrecognized") or []
    if new:
        lines.append(f"  new since the last good starts: {len(new)} unrecognized line group(s), listed first below")
    eta = history.get("eta")
    if isinstance(eta, t.Mapping) and eta.get("error") is not None:
        error = float(eta["error"])
        how = "later" if error > 0 else "earlier"
        ready_at = _history.human(float(eta.get("ready_at") or 0))
        lines.append(f"  ETA: ready {ready_at} into the wait, {_history.human(abs(error))} {how} than the ETA at the last phase marker")
    fleet = history.get("fleet")
    if isinstance(fleet, t.Mapping) and fleet.get("slow"):
        lines.append(f"  slower than its peers: {fleet.get('text')}")
    return lines


def _part(section: t.Mapping[str, t.Any], key: str) -> t.Mapping[str, t.Any]:
    value = section.get(key)
    return value if isinstance(value, t.Mapping) else {}


def history_figures(report: Report) -> dict[str, t.Any]:
    """What the start history said about the start, as figures for pipelines (``set_stats``): the good
    starts it learned from, the stall limit of the phase the wait ended in and its source, the ETA's
    baseline and error, the slow phases, the new line groups, the start against the play's other hosts."""
    history = report.get("history")
    if not isinstance(history, t.Mapping):
        return {}
    limit, eta, fleet, start = (_part(history, key) for key in ("stall_limit", "eta", "fleet", "start"))
    return {
        "problem": history.get("problem"),
        "recorded": bool(history.get("recorded")),
        "good_starts": history.get("good_starts"),
        "start_seconds": start.get("total"),
        "stall_limit": limit.get("limit"),
        "stall_limit_phase": limit.get("phase"),
        "stall_limit_source": limit.get("source"),
        "eta_starts": eta.get("starts"),
        "eta_error": eta.get("error"),
        "slow_phases": {str(item.get("phase")): item.get("ratio") for item in history.get("slow") or [] if isinstance(item, t.Mapping)},
        "new_templates": history.get("new_templates"),
        "new_unrecognized": len(history.get("new_unrecognized") or []),
        "fleet_ratio": fleet.get("ratio"),
        "fleet_peers": len(fleet.get("peers") or []) if fleet else None,
        "fleet_slow": bool(fleet.get("slow")) if fleet else None,
    }


def _history_properties(report: Report) -> list[tuple[str, t.Any]]:
    """The JUnit properties of the start history (none without a history section)."""
    history = report.get("history")
    if not isinstance(history, t.Mapping) or "good_starts" not in history:
        return []
    figures = history_figures(report)
    limit, fleet = _part(history, "stall_limit"), _part(history, "fleet")
    return [
        ("history_good_starts", figures["good_starts"]),
        ("history_start_seconds", figures["start_seconds"]),
        ("history_stall_limit", f"{limit.get('phase')} {limit.get('limit')} s, {limit.get('source')}: {limit.get('detail')}" if limit else ""),
        ("history_eta_error", figures["eta_error"]),
        ("history_slow", "; ".join(str(item.get("text")) for item in history.get("slow") or [] if isinstance(item, t.Mapping))),
        ("history_new_templates", figures["new_templates"]),
        ("history_fleet", fleet.get("text") if fleet else ""),
        ("history_fleet_slow", figures["fleet_slow"]),
    ]


def _seen(event: t.Mapping[str, t.Any]) -> str:
    seen = event.get("history")
    return f" ({seen.get('text')})" if isinstance(seen, t.Mapping) and seen.get("text") else ""


def _health(report: Report) -> list[str]:
    health = report.get("health")
    if not health:
        return []
    status = health.get("status")
    answer = f"HTTP {status}" if status is not None else f"no answer ({health['error']})" if health.get("error") else "no answer"
    streak = f", {health['successes']} success(es) in a row" if health.get("successes") else ""
    return [f"health: {answer} from {health.get('url') or 'the health URL'}{streak}"]


def _journal(report: Report) -> list[str]:
    if "journal_verdict" not in report:
        return []
    marker = f", ready marker at line {report.get('ready_line')}" if report.get("ready") else ", no ready marker"
    progress = report.get("progress")
    bar_text = f", {progress.get('text')}" if isinstance(progress, t.Mapping) and progress.get("text") and not report.get("ready") else ""
    return [f"journal: {report.get('lines')} line(s), phase {report.get('phase') or 'none'}{marker}{bar_text}"]


def _ranks(event: t.Mapping[str, t.Any]) -> str:
    ranks = [str(rank) for rank in event.get("ranks") or []]
    if len(ranks) > 3:
        return f" on {len(ranks)} ranks ({ranks[0]}..{ranks[-1]})"
    return f" on {','.join(ranks)}" if ranks else ""


def _where(event: t.Mapping[str, t.Any]) -> str:
    first = event.get("first_line")
    if first is None:
        return ""
    last = event.get("last_line")
    return f", journal line {first}" + (f"-{last}" if last is not None and last != first else "")


def _traceback(event: t.Mapping[str, t.Any]) -> list[str]:
    lines = [str(line) for line in event.get("traceback") or []]
    if len(lines) > TRACEBACK_HEAD + TRACEBACK_TAIL + 1:
        lines = [*lines[:TRACEBACK_HEAD], "...", *lines[-TRACEBACK_TAIL:]]
    return [f"    | {cut(line, LINE_LIMIT)}" for line in lines]


def evidence_lines(report: Report) -> list[str]:
    """The fatal, allowlisted and unrecognized events, the gaps in the journal, the rules past their date."""
    lines: list[str] = []
    fatal = report.get("fatal") or []
    if fatal:
        lines.append(f"FATAL: {len(fatal)} event(s)")
        for event in fatal[:FATAL_SHOWN]:
            lines.append(f"  [{event.get('rule') or 'no rule'}] x{event.get('count')}{_ranks(event)}{_where(event)}: {cut(event.get('message'), LINE_LIMIT)}")
            lines += _traceback(event)
    else:
        lines.append("fatal: none")
    allowlisted = report.get("allowlisted") or []
    if allowlisted:
        total = sum(int(event.get("count") or 0) for event in allowlisted)
        lines.append(f"allowlisted: {len(allowlisted)} kind(s), {total} line(s)")
        for event in allowlisted[:ALLOWLISTED_SHOWN]:
            lines.append(f"  [{event.get('rule')}] x{event.get('count')}{_ranks(event)}: {cut(event.get('message'), SHORT_LIMIT)}{_seen(event)}")
    else:
        lines.append("allowlisted: none")
    lines += _request_error_lines(report)
    lines += _survived_lines(report)
    unrecognized = report.get("unrecognized") or []
    if unrecognized:
        how = "strict mode: failing" if report.get("strict") else "reported, not failing"
        lines.append(f"unrecognized ({how}): {len(unrecognized)}")
        for event in unrecognized[:UNRECOGNIZED_SHOWN]:
            lines.append(f"  x{event.get('count')}{_ranks(event)}{_where(event)}: {cut(event.get('message'), LINE_LIMIT)}{_seen(event)}")
            if event.get("suggested_rule") is not None:
                lines.append(f"    suggested rule for {report.get('role')}_extra_rules: {json.dumps(event['suggested_rule'])}")
    else:
        lines.append("unrecognized: none")
    gaps = report.get("journal_gaps") or []
    if gaps:
        lines.append(f"journal gaps (entries rotated or vacuumed away before they were read; their lines are not in the evidence): {len(gaps)}")
        lines += [f"  {cut(gap, LINE_LIMIT)}" for gap in gaps]
    stale = [str(rule.get("id")) for rule in report.get("stale_rules") or [] if isinstance(rule, t.Mapping)]
    if stale:
        lines.append(f"stale rules (past their expires date): {', '.join(stale)}")
    return lines


def _request_error_lines(report: Report) -> list[str]:
    """Lines about one request each: counted and the first named, never a failure alone."""
    events = report.get("request_error") or []
    if not events:
        return []
    total = sum(int(event.get("count") or 0) for event in events)
    first = min(events, key=lambda event: event.get("first_line") or 0)
    return [
        f"request errors (one request each, not failing): {total} line(s), {len(events)} kind(s)",
        f"  first: [{first.get('rule')}]{_where(first)}: {cut(first.get('message'), LINE_LIMIT)}",
    ]


def _survived_lines(report: Report) -> list[str]:
    """ERROR lines after which the engine's own code carried on: warnings, each with its source file."""
    events = report.get("survived") or []
    if not events:
        return []
    total = sum(int(event.get("count") or 0) for event in events)
    lines = [f"WARNING: lines the engine survived (its code carries on after them, not failing): {total} line(s), {len(events)} kind(s)"]
    for event in events[:UNRECOGNIZED_SHOWN]:
        where = f" ({event.get('file')})" if event.get("file") else ""
        lines.append(f"  [{event.get('rule')}] x{event.get('count')}{_ranks(event)}{_where(event)}{where}: {cut(event.get('message'), LINE_LIMIT)}")
    return lines


def _smoke(report: Report) -> list[str]:
    smoke = report.get("smoke_test")
    if not isinstance(smoke, t.Mapping) or not smoke.get("enabled"):
        return []
    answer = "not run" if smoke.get("status") is None else f"HTTP {smoke['status']}"
    generated = f", generated {json.dumps(smoke['text'])}" if smoke.get("text") is not None else ""
    return [f"smoke test: {answer}{generated}"]


def canary_lines(report: Report) -> list[str]:
    """``performance canary: FAIL (...)`` and a line per figure beside its baseline."""
    canary = report.get("canary")
    if not isinstance(canary, t.Mapping) or not canary.get("enabled") or not canary.get("verdict"):
        return []
    verdict = str(canary["verdict"])
    runs = canary.get("baseline_runs")
    against = f", against the median of {runs} baseline canar{'y' if runs == 1 else 'ies'}" if runs else ""
    warn = f" (warning only: {report.get('role') or 'sglang_restart'}_canary_on_fail is warn)" if verdict == "fail" and canary.get("on_fail") == "warn" else ""
    head = f"performance canary: {verdict.upper()}{against}{warn}"
    if verdict != "pass" and canary.get("reason"):
        head += f" - {cut(canary['reason'], MSG_LIMIT)}"
    lines = [head, *(f"  {cut(line, LINE_LIMIT)}" for line in canary.get("lines") or [] if not str(line).startswith("inconclusive: "))]
    if canary.get("problem"):
        lines.append(f"  {cut(canary['problem'], MSG_LIMIT)}")
    return lines


def _last_lines(report: Report) -> list[str]:
    last = report.get("last_lines") or []
    if report.get("verdict") != "fail" or not last or report.get("fatal"):
        return []
    return ["last journal lines:", *(f"    | {cut(line, LINE_LIMIT)}" for line in last[-LAST_LINES_SHOWN:])]


# -- JUnit XML ------------------------------------------------------------------------------------


def _xml(value: t.Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return _NOT_XML.sub("", "" if value is None else str(value))


def junit_xml(report: Report, report_dir: str = "") -> str:
    """One test suite with one test case for the host (or the deployment); a ``<failure type="<reason>">``
    when it failed."""
    if is_deployment(report):
        return deployment_junit_xml(report, report_dir)
    form = form_of(report)
    host, verdict = _xml(report.get("host")), report.get("verdict")
    rollback = report.get("rollback") or {}
    rolled = bool(rollback.get("restarted"))
    failures = str((1 if verdict == "fail" else 0) + (1 if rolled and rollback.get("verdict") != "pass" else 0))
    cases = "2" if rolled else "1"
    seconds = _xml(report.get(form.time_key))
    role = str(report.get("role"))
    suites = ET.Element("testsuites", {"name": f"inferops.runbooks.{role}", "tests": cases, "failures": failures, "errors": "0", "time": seconds})
    suite = ET.SubElement(
        suites,
        "testsuite",
        {
            "name": f"{role}.{host}",
            "hostname": host,
            "tests": cases,
            "failures": failures,
            "errors": "0",
            "skipped": "1" if verdict == "skipped" else "0",
            "time": seconds,
            "timestamp": _xml(report.get(form.timestamp_key)).replace("Z", ""),
        },
    )
    properties = ET.SubElement(suite, "properties")
    for name, path in form.properties:
        ET.SubElement(properties, "property", {"name": name, "value": _xml(value_at(report, path))})
    for name, value in _history_properties(report):
        ET.SubElement(properties, "property", {"name": name, "value": _xml(value)})
    case = ET.SubElement(suite, "testcase", {"classname": f"{role}.{host}", "name": f"{form.test_name} {_xml(report.get('unit'))}", "time": seconds})
    if verdict == "fail":
        failure = ET.SubElement(case, "failure", {"type": _xml(report.get("reason")), "message": _xml(cut(report.get("msg"), JUNIT_MESSAGE_LIMIT))})
        failure.text = _xml("\n".join(_failure_text(report)))
    elif verdict == "skipped":
        ET.SubElement(case, "skipped", {"message": _xml(report.get("msg"))})
    ET.SubElement(case, "system-out").text = _xml("\n".join(summary_lines(report, report_dir)))
    if rolled:
        again = ET.SubElement(
            suite, "testcase", {"classname": f"{role}.{host}", "name": f"rollback {_xml(report.get('unit'))}", "time": _xml(rollback.get("elapsed"))}
        )
        if rollback.get("verdict") != "pass":
            failure = ET.SubElement(again, "failure", {"type": _xml(rollback.get("reason")), "message": _xml(cut(rollback.get("msg"), JUNIT_MESSAGE_LIMIT))})
            events = [f"[{event.get('rule') or 'no rule'}] x{event.get('count')}: {event.get('message')}" for event in rollback.get("fatal") or []]
            failure.text = _xml("\n".join([str(rollback.get("msg") or ""), *events, *rollback.get("last_lines", [])]))
    return _document(suites)


def _document(suites: ET.Element) -> str:
    if hasattr(ET, "indent"):
        ET.indent(suites, space="  ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


_DEPLOYMENT_PROPERTIES = (("deployment", "deployment"), ("unit", "unit"), ("verdict", "verdict"), ("reason", "reason"), ("root_cause", "root_cause.host"))


def deployment_junit_xml(report: Report, report_dir: str = "") -> str:
    """One test suite per multi-node deployment with one test case, the restart (or the precheck) of the
    deployment; the nodes are properties, and lines of the failure."""
    form = form_of(report)
    role, name, verdict = str(report.get("role")), _xml(report.get("deployment")), report.get("verdict")
    nodes = [node for node in report.get("nodes") or [] if isinstance(node, t.Mapping)]
    failures, seconds = ("1" if verdict == "fail" else "0"), _xml(report.get("elapsed"))
    suites = ET.Element("testsuites", {"name": f"inferops.runbooks.{role}", "tests": "1", "failures": failures, "errors": "0", "time": seconds})
    suite = ET.SubElement(
        suites,
        "testsuite",
        {"name": f"{role}.{name}", "tests": "1", "failures": failures, "errors": "0", "skipped": "1" if verdict == "skipped" else "0", "time": seconds},
    )
    properties = ET.SubElement(suite, "properties")
    for prop, path in _DEPLOYMENT_PROPERTIES:
        ET.SubElement(properties, "property", {"name": prop, "value": _xml(value_at(report, path))})
    for node in nodes:
        value = f"{node.get('host')} {node.get('verdict')} ({node.get('reason')}) invocation {node.get('invocation_id') or 'none'}"
        ET.SubElement(properties, "property", {"name": f"node{node.get('rank')}", "value": _xml(value)})
    test = f"{form.test_name} {_xml(report.get('unit'))} on {len(nodes)} nodes"
    case = ET.SubElement(suite, "testcase", {"classname": f"{role}.{name}", "name": test, "time": seconds})
    if verdict == "fail":
        failure = ET.SubElement(case, "failure", {"type": _xml(report.get("reason")), "message": _xml(cut(report.get("msg"), JUNIT_MESSAGE_LIMIT))})
        lines = [str(report.get("msg") or "")]
        for node in nodes:
            root = " (root cause)" if node.get("root_cause") else ""
            lines.append(f"{node.get('host')} node {node.get('rank')}{root}: {node.get('verdict')} ({node.get('reason')}) {node.get('msg')}")
            first = node.get("first_fatal")
            if isinstance(first, t.Mapping) and first:
                lines.append(f"  first fatal line: {first.get('message')}")
        failure.text = _xml("\n".join(lines))
    elif verdict == "skipped":
        ET.SubElement(case, "skipped", {"message": _xml(report.get("msg"))})
    ET.SubElement(case, "system-out").text = _xml("\n".join(deployment_summary_lines(report, report_dir)))
    return _document(suites)


def _failure_text(report: Report) -> list[str]:
    lines = [str(report.get("msg") or "")]
    lines += [f"refused: {problem}" for problem in report.get("problems") or []]
    for event in report.get("fatal") or []:
        ranks = ",".join(str(rank) for rank in event.get("ranks") or [])
        lines.append(f"[{event.get('rule') or 'no rule'}] x{event.get('count')} {ranks}: {event.get('message')}")
        lines += [f"  {line}" for line in event.get("traceback") or []]
    if report.get("last_lines"):
        lines.append("last journal lines:")
        lines += [f"  {line}" for line in report["last_lines"]]
    return lines
