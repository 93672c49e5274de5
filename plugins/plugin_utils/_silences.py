# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""When a planned restart silences its host's alerts in Alertmanager, and when it expires the silence.

Private to the collection; may change at any time. Controller side. The prepare phase creates the
silence before the host leaves the router and notes it in the host's run record (the record is the
source of truth: a silence an interrupted run left there is expired by the next run); the restart phase
expires it the moment the new start failed (so that the host's alerts fire while its change is rolled
back), and the settle phase at the end of the run otherwise. Every call to Alertmanager is
``plugin_utils/_alertmanager``'s and ends in a warning, never a failure.
"""

from __future__ import annotations

import time
import typing as t

from ansible_collections.inferops.runbooks.plugins.plugin_utils._alertmanager import Alertmanager, AlertmanagerError, expire_silence, silence_duration

Options = t.Mapping[str, t.Any]


def wanted(options: Options, check_mode: bool, restart_needed: bool) -> bool:
    """A silence is created for a real run that restarts the unit, with an Alertmanager configured."""
    return bool(options.get("alertmanager_url")) and restart_needed and not check_mode


def left_by_earlier_run(record: t.Mapping[str, t.Any] | None, run_id: str) -> dict[str, t.Any] | None:
    """The silence another (interrupted) run noted in the host's run record and did not expire."""
    silence = (record or {}).get("silence")
    if not isinstance(silence, t.Mapping) or not silence.get("id") or (record or {}).get("run_id") == run_id:
        return None
    return dict(silence)


def seconds(options: Options, starts: t.Sequence[t.Mapping[str, t.Any]]) -> tuple[float, str]:
    """How long the silence lasts: the drain and the release of the port, then the start (its ETA from
    the good starts times the margin, bounded by the budget); with the reason, for its comment."""
    before = float(options.get("drain_timeout") or 0) * bool(options.get("load_url")) + float(options.get("release_timeout") or 0)
    duration = silence_duration(starts, float(options["budget"]), float(options.get("alertmanager_margin") or 1.5), before)
    return duration.seconds, duration.detail


def comment(run_id: str, host: str, controller: str, user: str, why: str) -> str:
    """The silence's comment: the run, the controller and user that started it, and why it lasts so long."""
    return f"Planned restart of {host} by inferops.runbooks, run {run_id} from {controller} by {user}: expired when the host serves again; lasts {why}"


def noted(silence_id: str, url: str, host: str, ends_at: float) -> dict[str, t.Any]:
    """What the run record keeps of a silence (no key or header: the record is on the managed host)."""
    return {"id": silence_id, "url": url, "host": host, "ends_at": round(ends_at, 3)}


def expire_wanted(silence: t.Mapping[str, t.Any] | None, outcome: str) -> bool:
    """The run's silence is expired at its end whatever the outcome, except when another run took the
    host over (its silence is that run's to expire)."""
    return bool(silence and silence.get("id")) and not outcome.endswith("_elsewhere")


def expire_at_once(observed: t.Mapping[str, t.Any]) -> bool:
    """The new start failed: the host serves nothing, and its alerts must fire now, not after the rollback's
    own cold start (which may take as long as the failed one)."""
    return bool(observed.get("new_start_failed"))


def expired_by_restart(seen: t.Mapping[str, t.Any]) -> bool:
    """The restart phase already expired the run's silence (its new start failed)."""
    return bool((seen.get("silence") or {}).get("expired"))


def expire(steps: t.Any, options: Options, silence: t.Mapping[str, t.Any], host: str, step_name: str) -> str | None:
    """Expires the run's silence (noted as the step ``step_name``): None, or the warning why it stays."""
    api_key = str(steps.variable("sglang_restart_alertmanager_api_key", "") or "")
    alertmanager, problem = client(options, api_key, options.get("alertmanager_headers") or {}, str(silence.get("url") or ""))
    started = time.monotonic()
    if alertmanager is not None:
        problem = expire_silence(alertmanager, str(silence["id"]), host)
    steps.note(step_name, {"failed": True} if problem else {}, time.monotonic() - started)
    return problem


def client(options: Options, api_key: str, headers: t.Mapping[str, t.Any], url: str | None = None) -> tuple[Alertmanager | None, str | None]:
    """The Alertmanager to call, or the warning why none can be."""
    try:
        return Alertmanager(str(url or options["alertmanager_url"]), api_key or None, {str(k): str(v) for k, v in dict(headers or {}).items()}), None
    except AlertmanagerError as error:
        return None, f"no silence: {error.message}"


def report_section(silence: t.Mapping[str, t.Any] | None, warnings: t.Sequence[str]) -> dict[str, t.Any]:
    """What the report says of the silence: its id and whether it was expired, and the warnings (none: nothing)."""
    section: dict[str, t.Any] = {}
    if silence and silence.get("id"):
        section["silence"] = {"id": silence["id"], "url": silence.get("url"), "expired": bool(silence.get("expired"))}
    if warnings:
        section["silence_warnings"] = list(warnings)
    return section
