# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Adding up classifier reports of consecutive journal slices into one report.

A wait reads one invocation's journal in slices (one per probe); each slice is classified by a
fresh Scanner started at the slice's line offset. ``merge_reports`` folds a slice's report into
the running total, as if one Scanner had read it all: events of the same rule and message key are
one event (counts added, ranks united, first and last lines kept), phases only move forward.
Standard library only, no Ansible imports: the controller and the tests share it.
"""

from __future__ import annotations

import copy
import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils._rules import PHASES

EVENT_CLASSES = ("fatal", "allowlisted", "request_error", "survived", "unrecognized")
MAX_EVENTS_PER_CLASS = 200


def empty_report(strict: bool = False) -> dict[str, t.Any]:
    """A report of nothing read yet."""
    return {
        "verdict": "pending",
        "reason": "nothing read yet",
        "ready": False,
        "ready_line": None,
        "phase": "starting",
        "phases": [],
        "progress": None,
        "fatal": [],
        "allowlisted": [],
        "request_error": [],
        "survived": [],
        "unrecognized": [],
        "counts": {},
        "lines": 0,
        "blob_lines": 0,
        "dropped_events": 0,
        "stale_rules": [],
        "strict": strict,
    }


def merge_reports(total: t.Mapping[str, t.Any] | None, delta: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The report of ``total``'s lines followed by ``delta``'s; neither argument is changed."""
    base = copy.deepcopy(dict(total)) if total else empty_report(bool(delta.get("strict")))
    merged = base
    merged["dropped_events"] = int(base.get("dropped_events") or 0) + int(delta.get("dropped_events") or 0)
    for name in EVENT_CLASSES:
        merged[name] = _merge_events(base.get(name) or [], delta.get(name) or [], merged)
    counts = dict(base.get("counts") or {})
    for key, value in (delta.get("counts") or {}).items():
        counts[key] = counts.get(key, 0) + int(value or 0)
    merged["counts"] = counts
    phases = list(base.get("phases") or [])
    current = phase_index(phases[-1]["phase"]) if phases else -1
    for entry in delta.get("phases") or []:
        if phase_index(entry.get("phase")) > current:
            phases.append(dict(entry))
            current = phase_index(entry.get("phase"))
    merged["phases"] = phases
    merged["phase"] = phases[-1]["phase"] if phases else "starting"
    if delta.get("progress"):
        merged["progress"] = dict(delta["progress"])
    if merged.get("ready_line") is None and delta.get("ready_line") is not None:
        merged["ready_line"] = delta["ready_line"]
    merged["ready"] = merged.get("ready_line") is not None or bool(base.get("ready")) or bool(delta.get("ready"))
    merged["lines"] = max(int(base.get("lines") or 0), int(delta.get("lines") or 0))
    merged["blob_lines"] = int(base.get("blob_lines") or 0) + int(delta.get("blob_lines") or 0)
    merged["stale_rules"] = list(delta.get("stale_rules") or base.get("stale_rules") or [])
    merged["strict"] = bool(delta.get("strict", base.get("strict", False)))
    merged["verdict"], merged["reason"] = verdict_of(merged)
    return merged


def phase_index(phase: t.Any) -> int:
    return PHASES.index(phase) if phase in PHASES else -1


def verdict_of(report: t.Mapping[str, t.Any]) -> tuple[str, str]:
    """The verdict the classifier gives a report: fatal first, then strict mode, then the ready marker."""
    if report.get("fatal"):
        return "fail", f"fatal: {str(report['fatal'][0].get('message', ''))[:200]}"
    if report.get("strict") and report.get("unrecognized"):
        return "fail", f"strict mode: unrecognized line: {str(report['unrecognized'][0].get('message', ''))[:200]}"
    if report.get("ready_line") is not None or report.get("ready"):
        return "pass", "ready marker seen and nothing fatal"
    return "pending", f"no ready marker yet (phase {report.get('phase', 'starting')})"


def _merge_events(old: t.Sequence[t.Mapping[str, t.Any]], new: t.Sequence[t.Mapping[str, t.Any]], merged: dict[str, t.Any]) -> list[dict[str, t.Any]]:
    events = [dict(event) for event in old]
    index = {(event.get("rule"), event.get("key")): event for event in events}
    for incoming in new:
        key = (incoming.get("rule"), incoming.get("key"))
        event = index.get(key)
        if event is None:
            if len(events) >= MAX_EVENTS_PER_CLASS:
                merged["dropped_events"] = int(merged.get("dropped_events") or 0) + 1
                continue
            event = dict(incoming)
            event["ranks"] = list(incoming.get("ranks") or [])
            events.append(event)
            index[key] = event
            continue
        event["count"] = int(event.get("count") or 0) + int(incoming.get("count") or 0)
        event["ranks"] = sorted(set(event.get("ranks") or []) | set(incoming.get("ranks") or []), key=rank_order)
        if incoming.get("last_line") is not None and (event.get("last_line") is None or incoming["last_line"] >= event["last_line"]):
            event["last_line"] = incoming["last_line"]
            event["last_timestamp"] = incoming.get("last_timestamp") or event.get("last_timestamp")
        for optional in ("context", "traceback", "suggested_rule"):
            if event.get(optional) is None and incoming.get(optional) is not None:
                event[optional] = incoming[optional]
    events.sort(key=lambda event: event.get("first_line") or 0)
    return events


def rank_order(rank: str) -> tuple[str, int]:
    """TP2 before TP10: the prefix, then the number."""
    digits = "".join(ch for ch in rank if ch.isdigit())
    return (rank.rstrip("0123456789"), int(digits) if digits else -1)
