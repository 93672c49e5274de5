# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rollout page: a run's reports (or a multi-node deployment's) as one self-contained HTML page.

Private to the collection; may change at any time. Standard library only, no Ansible imports.

One timeline per host, drawn to one scale for the whole page: the time before the start (checks, the
change, the drain, the stop), each phase of the cold start (timed by the journal when the start
history recorded the start, else as the wait saw it), what came after (smoke
test, start history, canary, back in the router) or the rollback's own start, phase by phase; the
first fatal line marked where it came; a band under the bar for the time out of the router. Under
each bar its verdict and reason, the phases with their usual durations from the host's start
history, the fatal lines with their tracebacks folded, the allowlisted and unrecognized lines by
rule, what is new since the last good start, the canary's figures against its baseline. The run's
hosts come batch by batch, canary first; the hosts much slower than their peers are named at the top.

Everything is drawn from the reports (``_runbook_report``'s, already redacted on the target): no new
measurement. Every text is escaped (a journal line is input from the server); nothing is loaded from
elsewhere: inline CSS and SVG, no script.

What the report does not time on its own is drawn as one piece and said so: the checks, the change,
the drain and the stop are one segment (the drain's own seconds in its label); the time out of the
router is drawn from the drain's start at the latest (before the start's first journal line and
the wait's first look). The journal's phase times are placed by one
point: a good start's end at the ready marker as the wait saw it (a poll late at most), a failed
start's at its first fatal line (its journal time).
"""

from __future__ import annotations

import calendar
import html
import time
import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils import _history
from ansible_collections.inferops.runbooks.plugins.plugin_utils import _render
from ansible_collections.inferops.runbooks.plugins.plugin_utils._runbook_report import fleet_starts

Report = t.Mapping[str, t.Any]

WIDTH = 1000  # the bars' drawing width (SVG user units); every bar of a page shares one scale
BAR_HEIGHT = 22
BAND_HEIGHT = 5
MESSAGE_LIMIT = 400
LINE_LIMIT = 300
EVENTS_SHOWN = 12
TRACEBACK_SHOWN = 40
PHASE_LABELS = {
    "starting": "starting",
    "loading_weights": "loading weights",
    "allocating_kv_cache": "KV cache",
    "capturing_cuda_graphs": "CUDA graphs",
    "warming_up": "warm-up",
    "ready": "ready, soak",
}
COLORS = {
    "before": "#b8c0cc",
    "starting": "#8fb3de",
    "loading_weights": "#4e79a7",
    "allocating_kv_cache": "#76b7b2",
    "capturing_cuda_graphs": "#59a14f",
    "warming_up": "#edc948",
    "ready": "#9c755f",
    "failed": "#e6a3a0",
    "after": "#d4a6c8",
    "rollback_prepare": "#e8b07a",
    "look": "#b8c0cc",
}
STYLE = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em;color:#1d2430;background:#fff}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em;border-bottom:1px solid #d8dde5}
.meta,.muted{color:#5b6677}.counts span{margin-right:1em}
.host{border:1px solid #d8dde5;border-radius:6px;padding:.6em .8em;margin:.6em 0}
.host.fail{border-left:6px solid #c0392b}.host.pass{border-left:6px solid #2e8b57}.host.skipped{border-left:6px solid #98a2b3}
.head{display:flex;flex-wrap:wrap;gap:.3em 1em;align-items:baseline}.name{font-weight:600;font-size:1.05em}
.verdict{font-weight:700;padding:0 .4em;border-radius:3px;color:#fff}.verdict.pass{background:#2e8b57}
.verdict.fail{background:#c0392b}.verdict.skipped{background:#98a2b3}.state{font-style:italic}
svg.bar{display:block;width:100%;height:34px;margin:.4em 0 .2em}svg.bar rect.segment{stroke:#fff;stroke-width:.5}
svg.bar line.fatal-marker{stroke:#c0392b;stroke-width:3}svg.bar rect.out{fill:#c0392b;opacity:.35}
ol.phases{list-style:none;padding:0;margin:.2em 0;display:flex;flex-wrap:wrap;gap:.2em 1.1em}
.swatch{display:inline-block;width:.8em;height:.8em;border-radius:2px;margin-right:.3em;vertical-align:-1px}
.fatal{color:#8e1b10}.fatal code{white-space:pre-wrap}
pre{white-space:pre-wrap;word-break:break-word;background:#f6f7f9;padding:.5em;margin:.2em 0;font-size:12px}
table{border-collapse:collapse;margin:.3em 0;font-size:13px}td,th{border-bottom:1px solid #eceff3;padding:.15em .5em;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}.new{color:#b35900;font-weight:600}
details{margin:.3em 0}summary{cursor:pointer;color:#34495e}.slow{color:#b35900}
"""


class Segment(t.NamedTuple):
    """One piece of a host's timeline: seconds from the host's start of the run."""

    kind: str
    label: str
    start: float
    seconds: float


class Timeline(t.NamedTuple):
    """A host's run drawn to scale: its segments, its end, where the first fatal line came, and
    when it was out of the router (start, end)."""

    segments: list[Segment]
    end: float
    fatal_at: float | None
    out_of_router: tuple[float, float] | None


# -- reading the reports --------------------------------------------------------------------------


def _number(value: t.Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            return float(value) if isinstance(value, str) and value.strip() else None
        except ValueError:
            return None
    return float(value)


def _epoch(iso: t.Any) -> float | None:
    try:
        return float(calendar.timegm(time.strptime(str(iso), "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def _mapping(value: t.Any) -> t.Mapping[str, t.Any]:
    return value if isinstance(value, t.Mapping) else {}


def _list(value: t.Any) -> list[t.Any]:
    return list(value) if isinstance(value, (list, tuple)) else []


def started(report: Report) -> float | None:
    """When the host's run began, in seconds since the epoch (the report's start, to the second)."""
    return _epoch(report.get(_render.form_of(report).timestamp_key))


def _clamp(value: float, low: float, high: float) -> float:
    return max(low, min(high, value))


def _phase_segments(timeline: t.Any, offset: float, limit: float, prefix: str = "") -> list[Segment]:
    """The wait's phases as it saw them (``{"phase", "started", "duration"}`` in seconds of the wait)."""
    segments = []
    for step in _list(timeline):
        step = _mapping(step)
        begin, seconds = _number(step.get("started")), _number(step.get("duration"))
        if begin is None or seconds is None or seconds < 0:
            continue
        phase = str(step.get("phase") or "")
        start = round(_clamp(offset + begin, 0, limit), 1)
        segments.append(Segment(phase, prefix + PHASE_LABELS.get(phase, phase.replace("_", " ")), start, round(_clamp(seconds, 0, limit - start), 1)))
    # before the wait saw its first phase the server was starting
    first = segments[0].start if segments else limit
    if first - offset >= 0.1:
        if segments and segments[0].kind == "starting":
            segments[0] = segments[0]._replace(start=round(offset, 1), seconds=round(segments[0].seconds + first - offset, 1))
        else:
            segments.insert(0, Segment("starting", prefix + PHASE_LABELS["starting"], round(offset, 1), round(first - offset, 1)))
    return segments


def _wait_span(report: Report, begun: float, end: float) -> tuple[float, float] | None:
    """(start, end) of the wait in seconds of the host's run; None when the run never waited."""
    ended, elapsed = _number(report.get("ended_at")), _number(report.get("elapsed"))
    if ended is None or elapsed is None:
        return None
    stop = _clamp(ended - begun, 0, end)
    return round(_clamp(stop - elapsed, 0, stop), 1), round(stop, 1)


def _before_label(report: Report) -> str:
    drain = _number(_mapping(_mapping(report.get("traffic")).get("drain")).get("seconds"))
    parts = ["checks", "change" if _mapping(report.get("deploy")).get("applied") else "", f"drain {drain:g} s" if drain is not None else "", "stop"]
    return "before the start (" + ", ".join(part for part in parts if part) + ")"


def _after_label(report: Report) -> str:
    parts = [
        "smoke test" if _mapping(report.get("smoke_test")).get("status") is not None else "",
        "start history" if _mapping(report.get("history")).get("recorded") else "",
        "canary" if _mapping(report.get("canary")).get("verdict") else "",
        "back in the router" if _mapping(report.get("traffic")).get("restored") else "",
    ]
    return "after the wait (" + (", ".join(part for part in parts if part) or "report") + ")"


def _fatal_at(report: Report, begun: float, end: float) -> float | None:
    realtime = _number(_mapping(report.get("first_fatal")).get("realtime"))
    if realtime is None:
        return None
    return round(_clamp(realtime / 1e6 - begun, 0, end), 1)


def _out_of_router(report: Report, start: float, end: float) -> tuple[float, float] | None:
    """From the drain's start at the latest: ``start`` is the earlier of the wait's first look and the
    start's first journal line (a start that crashes fast is over before the wait looks)."""
    traffic = _mapping(report.get("traffic"))
    if not traffic.get("removed"):
        return None
    drain = _number(_mapping(traffic.get("drain")).get("seconds")) or 0.0
    return round(_clamp(start - drain, 0, end), 1), end


def _journal_segments(start: t.Any, steps: t.Any, offset: float, limit: float, floor: float, anchor: float | None, prefix: str = "") -> list[Segment]:
    """The start's phases timed by the journal (the start history's record of this start: each phase
    from its first line to the next phase's), placed so that they end at ``anchor`` (the ready marker
    as the wait saw it, or the first fatal line), then the wait's ready and soak; [] without them."""
    start = _mapping(start)
    phases = [(phase, _number(_mapping(start.get("phases")).get(phase))) for phase in _history.TIMED_PHASES]
    timed = [(phase, seconds) for phase, seconds in phases if seconds is not None and seconds > 0]
    ready = next((_mapping(step) for step in _list(steps) if _mapping(step).get("phase") == "ready"), None)
    if start.get("outcome") == "pass" and ready is not None:
        anchor = offset + (_number(ready.get("started")) or 0.0)
    elif start.get("outcome") == "pass" or anchor is None:
        return []
    if not timed:
        return []
    segments, at = [], anchor - sum(seconds for _phase, seconds in timed)
    for phase, seconds in timed:
        begin, stop = _clamp(at, floor, limit), _clamp(at + seconds, floor, limit)
        segments.append(Segment(phase, prefix + PHASE_LABELS[phase], round(begin, 1), round(stop - begin, 1)))
        at += seconds
    if ready is not None and start.get("outcome") == "pass":
        stop = _clamp(offset + (_number(ready.get("started")) or 0.0) + (_number(ready.get("duration")) or 0.0), anchor, limit)
        segments.append(Segment("ready", prefix + PHASE_LABELS["ready"], round(anchor, 1), round(stop - anchor, 1)))
    return [segment for segment in segments if segment.seconds > 0]


def _start_segments(section: Report, offset: float, limit: float, floor: float, anchor: float | None, prefix: str = "") -> list[Segment]:
    """A start's phases: timed by the journal when the start history recorded it, else as the wait saw
    them (it names a phase when it reads its first line, and sees nothing of what came before its
    first look)."""
    start = _mapping(section.get("history")).get("start")
    found = _journal_segments(start, section.get("timeline"), offset, limit, floor, anchor, prefix)
    return found or _phase_segments(section.get("timeline"), offset, limit, prefix)


def timeline(report: Report) -> Timeline:
    """The host's run drawn to scale, from its report alone."""
    end = max(_number(report.get(_render.form_of(report).time_key)) or 0.0, 0.0)
    begun = started(report)
    if report.get("role") != "sglang_restart" or begun is None:
        return Timeline([Segment("look", "look at the server", 0.0, end)] if end else [], end, None, None)
    wait = _wait_span(report, begun, end)
    if wait is None:
        stage = report.get("failed_stage") or "before the start"
        return Timeline([Segment("before", f"{stage} (no wait)", 0.0, end)] if end else [], end, None, None)
    fatal_at = _fatal_at(report, begun, end)
    phases = _start_segments(report, wait[0], wait[1], 0.0, fatal_at)
    first = phases[0].start if phases else wait[0]
    last = phases[-1].start + phases[-1].seconds if phases else wait[0]
    # a failed start's journal ends at its fatal line; the wait ends when it has seen it (and the exit)
    failed = wait[1] - last >= 0.1 and not (phases and phases[-1].kind == "ready")
    seen = [Segment("failed", "until the wait ended on the failure", round(last, 1), round(wait[1] - last, 1))] if failed else []
    segments = [Segment("before", _before_label(report), 0.0, first), *phases, *seen, *_after_segments(report, wait[1], end)]
    return Timeline([segment for segment in segments if segment.seconds > 0], end, fatal_at, _out_of_router(report, min(first, wait[0]), end))


def _after_segments(report: Report, wait_end: float, end: float) -> list[Segment]:
    """After the wait: the checks after ready, or the rollback (files back, restart) and its own start."""
    rollback = _mapping(report.get("rollback"))
    rollback_elapsed = _number(rollback.get("elapsed")) or 0.0
    if not rollback.get("restarted") or rollback_elapsed <= 0:
        return [Segment("after", _after_label(report), wait_end, round(end - wait_end, 1))] if end > wait_end else []
    rollback_wait = round(_clamp(end - rollback_elapsed, wait_end, end), 1)
    phases = [segment._replace(kind=f"rollback {segment.kind}") for segment in _start_segments(rollback, rollback_wait, end, wait_end, None, "rollback ")]
    first = phases[0].start if phases else rollback_wait
    return [Segment("rollback_prepare", "rollback: previous files back, restart", wait_end, round(first - wait_end, 1)), *phases]


# -- the run --------------------------------------------------------------------------------------


def run_name(reports: t.Sequence[Report], starts: t.Iterable[float] = ()) -> str:
    """The run's page name: the role's test name and the earliest start among its hosts' reports (and
    ``starts``, the run's hosts' starts in seconds since the epoch, reported or not yet),
    ``restart-20261203T120034Z``."""
    if not reports:
        raise ValueError("a run page needs at least one report")
    form = _render.form_of(reports[0])
    starts = [*starts, *(value for value in (started(report) for report in reports) if value is not None)]
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(min(starts))) if starts else "undated"
    return f"{form.test_name}-{stamp}"


def batches_of(hosts: t.Sequence[str], serial: t.Sequence[int]) -> list[list[str]]:
    """The play's hosts cut into its batches, as Ansible cuts them (the last size repeats; 0 or
    nothing is one batch)."""
    remaining, cut, index = list(hosts), [], 0
    sizes = [int(size) for size in serial] or [0]
    while remaining:
        size = sizes[min(index, len(sizes) - 1)]
        if size <= 0:
            cut.append(remaining)
            break
        cut.append(remaining[:size])
        remaining = remaining[size:]
        index += 1
    return cut


def run_page(reports: t.Sequence[Report], batches: t.Sequence[t.Sequence[str]] = (), title: str = "") -> str:
    """The page of a run: its hosts' reports batch by batch (``batches``: the play's hosts in their
    batches, canary first; a host without a report is listed as not reached)."""
    by_host = {str(report.get("host")): report for report in reports}
    ordered = [list(batch) for batch in batches] or [list(by_host)]
    listed = {host for batch in ordered for host in batch}
    if any(host not in listed for host in by_host):
        ordered.append([host for host in by_host if host not in listed])
    scale = max([timeline(report).end for report in reports] + [1.0])
    name = title or run_name(reports)
    body = [_run_header(name, reports, ordered), _scale(scale), _fleet_section(reports)]
    for index, batch in enumerate(ordered):
        body.append(_batch(index, batch, by_host, scale))
    return _document(name, body)


def deployment_page(report: Report) -> str:
    """The page of a multi-node deployment: its verdict and root cause, then a timeline per node."""
    nodes = [node for node in _list(report.get("node_reports")) if isinstance(node, t.Mapping)]
    if not nodes:
        raise ValueError(f"deployment {report.get('deployment')}: the report has no node reports to draw")
    scale = max([timeline(node).end for node in nodes] + [1.0])
    name = f"deployment {report.get('deployment')}"
    root = _mapping(report.get("root_cause"))
    head = [
        f"<h1>{_e(name)} <span class='verdict {_e(report.get('verdict'))}'>{_e(str(report.get('verdict')).upper())}</span></h1>",
        f"<p>{_e(_render.cut(report.get('msg'), MESSAGE_LIMIT))}</p>",
    ]
    if root:
        head.append(f"<p class='fatal'>root cause: {_e(root.get('host'))} (node {_e(root.get('rank'))}), {_e(root.get('reason'))}</p>")
    hosts = [_host(node, scale, f"node {int(node.get('node_rank') or 0)}") for node in nodes]
    return _document(name, [*head, _scale(scale), "<section class='batch' data-batch='0'>", *hosts, "</section>"])


def _document(title: str, body: t.Sequence[str]) -> str:
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>{_e(title)}</title><style>{STYLE}</style></head>\n<body>\n" + "\n".join(part for part in body if part) + "\n</body></html>\n"
    )


def _e(value: t.Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _run_header(name: str, reports: t.Sequence[Report], batches: t.Sequence[t.Sequence[str]]) -> str:
    hosts = [host for batch in batches for host in batch]
    reported = {str(report.get("host")) for report in reports}
    verdicts = [str(report.get("verdict")) for report in reports]
    rolled_back = sum(1 for report in reports if report.get("state") == "rolled_back")
    counts = [
        ("passed", verdicts.count("pass")),
        ("failed", verdicts.count("fail")),
        ("rolled back", rolled_back),
        ("skipped", verdicts.count("skipped")),
        ("not reached", sum(1 for host in hosts if host not in reported)),
    ]
    units = sorted({str(report.get("unit")) for report in reports})
    return (
        f"<h1>{_e(name)}</h1><p class='meta'>{_e(', '.join(units))} on {len(hosts)} host(s) in {len(batches)} batch(es)</p>"
        "<p class='counts'>" + "".join(f"<span>{_e(label)}: <b>{count}</b></span>" for label, count in counts) + "</p>"
    )


def _scale(scale: float) -> str:
    width = _e(_seconds(scale))
    return f"<p class='muted scale' data-seconds='{scale:g}'>every bar on one scale: the full width is {width}; time runs from each host's own start</p>"


def _fleet_section(reports: t.Sequence[Report]) -> str:
    slow = _history.fleet_outliers(fleet_starts(reports), _history.DEFAULT_FLEET_RATIO)
    if not slow:
        return ""
    items = "".join(f"<li class='slow'>{_e(found.get('text'))}</li>" for found in slow)
    return f"<section class='fleet'><h2>Much slower than their peers</h2><ul>{items}</ul></section>"


def _batch(index: int, hosts: t.Sequence[str], by_host: t.Mapping[str, Report], scale: float) -> str:
    label = "canary" if index == 0 else f"batch {index}"
    parts = [f"<section class='batch' data-batch='{index}'><h2>{_e(label)}: {_e(', '.join(hosts))}</h2>"]
    for host in hosts:
        report = by_host.get(host)
        parts.append(
            _host(report, scale)
            if report is not None
            else f"<div class='host not-reached' data-host='{_e(host)}'><span class='name'>{_e(host)}</span> <span class='muted'>not reached</span></div>"
        )
    parts.append("</section>")
    return "".join(parts)


# -- one host -------------------------------------------------------------------------------------


def _host(report: Report, scale: float, rank: str = "") -> str:
    drawn = timeline(report)
    verdict = str(report.get("verdict"))
    return "".join(
        [
            f"<div class='host {_e(verdict)}' data-host='{_e(report.get('host'))}' data-verdict='{_e(verdict)}' data-end='{drawn.end:g}'>",
            _host_head(report, drawn, rank),
            _bar(drawn, scale),
            _legend(report, drawn),
            _failure(report, drawn),
            _rollback(report),
            _lines(report),
            _canary(report),
            "</div>",
        ]
    )


def _host_head(report: Report, drawn: Timeline, rank: str) -> str:
    state = report.get("state")
    parts = [
        f"<span class='name'>{_e(report.get('host'))}</span>",
        f"<span class='muted'>{_e(rank)}</span>" if rank else "",
        f"<span class='verdict {_e(report.get('verdict'))}'>{_e(str(report.get('verdict')).upper())}</span>",
        f"<span class='reason'>{_e(report.get('reason'))}</span>",
        f"<span class='state'>{_e(str(state).replace('_', ' '))}</span>" if state else "",
        f"<span class='muted'>{_e(_seconds(drawn.end))} in all</span>",
    ]
    return f"<div class='head'>{''.join(parts)}</div><div class='msg'>{_e(_render.cut(report.get('msg'), MESSAGE_LIMIT))}</div>"


def _seconds(value: float) -> str:
    return str(_history.human(value))


def _x(seconds: float, scale: float) -> float:
    return round(seconds / scale * WIDTH, 2)


def _color(kind: str) -> str:
    return COLORS.get(kind.replace("rollback ", ""), "#cccccc")


def _bar(drawn: Timeline, scale: float) -> str:
    shapes = []
    for segment in drawn.segments:
        shapes.append(
            f"<rect class='segment' data-kind='{_e(segment.kind)}' data-seconds='{segment.seconds:g}' x='{_x(segment.start, scale)}' y='0' "
            f"width='{_x(segment.seconds, scale)}' height='{BAR_HEIGHT}' fill='{_color(segment.kind)}'"
            f"{' fill-opacity=0.6' if segment.kind.startswith('rollback') else ''}>"
            f"<title>{_e(segment.label)}: {segment.seconds:g} s</title></rect>"
        )
    if drawn.out_of_router is not None:
        begin, end = drawn.out_of_router
        shapes.append(
            f"<rect class='out' x='{_x(begin, scale)}' y='{BAR_HEIGHT + 4}' width='{_x(end - begin, scale)}' height='{BAND_HEIGHT}'>"
            f"<title>out of the router: at least {end - begin:.1f} s</title></rect>"
        )
    if drawn.fatal_at is not None:
        x = _x(drawn.fatal_at, scale)
        shapes.append(
            f"<line class='fatal-marker' data-seconds='{drawn.fatal_at:g}' x1='{x}' x2='{x}' y1='0' y2='{BAR_HEIGHT + 10}'>"
            "<title>first fatal line</title></line>"
        )
    return f"<svg class='bar' viewBox='0 0 {WIDTH} {BAR_HEIGHT + 12}' preserveAspectRatio='none' role='img'>{''.join(shapes)}</svg>"


def _usual(report: Report, phase: str) -> str:
    history = _mapping(report.get("history"))
    usual = _number(_mapping(history.get("usual")).get(phase))
    slow = next((item for item in _list(history.get("slow")) if _mapping(item).get("phase") == phase), None)
    if slow is not None:
        return f" <span class='slow'>({_e(_mapping(slow).get('text'))})</span>"
    return f" <span class='muted'>(usual {usual:g} s)</span>" if usual is not None else ""


def _legend(report: Report, drawn: Timeline) -> str:
    items = []
    for segment in drawn.segments:
        phase = segment.kind if segment.kind in PHASE_LABELS else ""
        items.append(
            f"<li data-kind='{_e(segment.kind)}'><span class='swatch' style='background:{_color(segment.kind)}'></span>"
            f"{_e(segment.label)}: {segment.seconds:g} s{_usual(report, phase) if phase else ''}</li>"
        )
    if drawn.out_of_router is not None:
        begin, end = drawn.out_of_router
        items.append(f"<li><span class='swatch' style='background:#c0392b;opacity:.35'></span>out of the router: at least {end - begin:.1f} s</li>")
    return f"<ol class='phases'>{''.join(items)}</ol>"


def _ranks(event: t.Mapping[str, t.Any]) -> str:
    return ", ".join(str(rank) for rank in _list(event.get("ranks")))


def _failure(report: Report, drawn: Timeline) -> str:
    """The first fatal line with its ranks and time, the same line counted, its traceback folded under
    it; then the other fatal events."""
    fatal = [_mapping(event) for event in _list(report.get("fatal"))]
    first = _mapping(report.get("first_fatal"))
    if not fatal and not first:
        return _last_lines(report)
    if not first:
        return "".join(_fatal_event(event) for event in fatal[:EVENTS_SHOWN])
    event = next((event for event in fatal if event.get("first_line") == first.get("line")), {})
    when = f"{drawn.fatal_at:g} s into the run" if drawn.fatal_at is not None else "time not known"
    ranks = [str(rank) for rank in _list(first.get("ranks"))]
    count = int(_number(event.get("count")) or 1)
    same = f"the same line {count} time(s) on {len(ranks)} rank(s): {', '.join(ranks)}" if ranks else f"the same line {count} time(s)"
    head = (
        f"<div class='fatal first-fatal'>first fatal line at {_e(first.get('timestamp') or '')} ({_e(when)}), journal line {_e(first.get('line'))}, "
        f"rule {_e(first.get('rule') or 'none')}; {_e(same)}:<br><code>{_e(_render.cut(first.get('message'), LINE_LIMIT))}</code></div>"
    )
    others = [other for other in fatal if other is not event]
    return head + _traceback(event) + "".join(_fatal_event(other) for other in others[:EVENTS_SHOWN])


def _traceback(event: t.Mapping[str, t.Any]) -> str:
    lines = [str(line) for line in _list(event.get("traceback"))]
    if not lines:
        return ""
    shown = lines[:TRACEBACK_SHOWN] + ([f"... {len(lines) - TRACEBACK_SHOWN} more line(s)"] if len(lines) > TRACEBACK_SHOWN else [])
    return f"<details class='fatal traceback'><summary>traceback, {len(lines)} lines</summary><pre>{_e(chr(10).join(shown))}</pre></details>"


def _fatal_event(event: t.Mapping[str, t.Any]) -> str:
    rule, message = _e(event.get("rule") or "no rule"), _e(_render.cut(event.get("message"), LINE_LIMIT))
    return f"<div class='fatal'>fatal x{_e(event.get('count'))} on {_e(_ranks(event) or 'no rank')} [{rule}]: {message}</div>{_traceback(event)}"


def _last_lines(report: Report) -> str:
    last = [str(line) for line in _list(report.get("last_lines"))]
    if report.get("verdict") != "fail" or not last:
        return ""
    return f"<details><summary>last journal lines ({len(last)})</summary><pre>{_e(chr(10).join(last[-20:]))}</pre></details>"


def _rollback(report: Report) -> str:
    rollback = _mapping(report.get("rollback"))
    if not rollback.get("attempted"):
        return ""
    elapsed = _number(rollback.get("elapsed")) or 0.0
    started_again = f", its start {elapsed:g} s" if rollback.get("restarted") else ", nothing restarted"
    return (
        f"<div class='rollback'>rollback: <b>{_e(str(rollback.get('verdict')).upper())}</b> ({_e(rollback.get('reason'))}){_e(started_again)}: "
        f"{_e(_render.cut(rollback.get('msg'), MESSAGE_LIMIT))}</div>"
        + "".join(_fatal_event(_mapping(event)) for event in _list(rollback.get("fatal"))[:EVENTS_SHOWN])
    )


def _seen(event: t.Mapping[str, t.Any]) -> str:
    seen = _mapping(event.get("history"))
    if not seen:
        return ""
    css = "new" if seen.get("status") in ("new", "failed_only") else "muted"
    return f"<span class='{css}'>{_e(seen.get('text'))}</span>"


def _event_rows(events: t.Sequence[t.Any], with_rule: bool) -> str:
    rows = []
    for event in events[:EVENTS_SHOWN]:
        event = _mapping(event)
        rule = f"<td>{_e(event.get('rule'))}</td>" if with_rule else ""
        rows.append(
            f"<tr>{rule}<td class='n'>{_e(event.get('count'))}</td><td>{_e(_ranks(event))}</td>"
            f"<td>{_e(_render.cut(event.get('message'), LINE_LIMIT))}</td><td>{_seen(event)}</td></tr>"
        )
    more = f"<tr><td colspan='5' class='muted'>... {len(events) - EVENTS_SHOWN} more in the JSON report</td></tr>" if len(events) > EVENTS_SHOWN else ""
    return "".join(rows) + more


def _lines(report: Report) -> str:
    """Allowlisted lines by rule, unrecognized lines, and what is new since the last good start."""
    allowlisted, unrecognized = _list(report.get("allowlisted")), _list(report.get("unrecognized"))
    parts = []
    if unrecognized:
        how = "failing: strict mode" if report.get("strict") else "reported, not failing"
        parts.append(
            f"<details class='unrecognized' open><summary>unrecognized: {len(unrecognized)} kind(s), {_e(how)}</summary>"
            f"<table><tr><th>count</th><th>ranks</th><th>line</th><th>history</th></tr>{_event_rows(unrecognized, False)}</table></details>"
        )
    survived = _list(report.get("survived"))
    if survived:
        total = sum(int(_number(_mapping(event).get("count")) or 0) for event in survived)
        parts.append(
            f"<details class='unrecognized' open><summary>warnings: {len(survived)} kind(s), {total} ERROR line(s) the engine survived,"
            " not failing</summary>"
            f"<table><tr><th>rule</th><th>count</th><th>ranks</th><th>line</th><th>history</th></tr>{_event_rows(survived, True)}</table></details>"
        )
    if allowlisted:
        total = sum(int(_number(_mapping(event).get("count")) or 0) for event in allowlisted)
        parts.append(
            f"<details class='allowlisted'><summary>allowlisted: {len(allowlisted)} kind(s), {total} line(s)</summary>"
            f"<table><tr><th>rule</th><th>count</th><th>ranks</th><th>line</th><th>history</th></tr>{_event_rows(allowlisted, True)}</table></details>"
        )
    new = [str(line) for line in _list(_mapping(report.get("history")).get("new_unrecognized"))]
    if new:
        items = "".join(f"<li><code>{_e(_render.cut(line, LINE_LIMIT))}</code></li>" for line in new[:EVENTS_SHOWN])
        parts.append(f"<div class='new'>new since the last good start: {len(new)}<ul>{items}</ul></div>")
    fleet = _mapping(_mapping(report.get("history")).get("fleet"))
    if fleet.get("text"):
        parts.append(f"<div class='{'slow' if fleet.get('slow') else 'muted'}'>{_e(fleet.get('text'))}</div>")
    return "".join(parts)


def _canary(report: Report) -> str:
    canary = _mapping(report.get("canary"))
    if not canary.get("verdict"):
        return ""
    lines = [str(line) for line in _list(canary.get("lines"))]
    items = "".join(f"<li>{_e(_render.cut(line, LINE_LIMIT))}</li>" for line in lines)
    reason = f": {_e(_render.cut(canary.get('reason'), MESSAGE_LIMIT))}" if canary.get("reason") and canary.get("verdict") != "pass" else ""
    return f"<div class='canary'>performance canary: <b>{_e(str(canary.get('verdict')).upper())}</b>{reason}<ul>{items}</ul></div>"
