# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a run of the role sglang_restart observed, gathered once, in Python, from what its phases
returned: the rollout's observation (``_rollout.decide``'s input) and the report's input
(``_runbook_report.runbook_report``'s).

The phases take the prepare phase's context and the restart phase's result as their arguments (never
a role variable by name), plus the failures the role's rescues kept.

Private to the collection; may change at any time. Controller side.
"""

from __future__ import annotations

import re
import typing as t

from ansible_collections.inferops.runbooks.plugins.plugin_utils import _rollout

Facts = t.Mapping[str, t.Any]
# the keys of the router's listing kept to add a worker back as it was (never a key)
REGISTRATION_KEYS = ("priority", "cost", "worker_type", "bootstrap_port")


def flag(value: t.Any) -> bool:
    """A flag as a role variable may hold it (ansible-core before 2.19 hands a templated boolean over as text)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return bool(value)


def mapping(value: t.Any) -> dict[str, t.Any]:
    return dict(value) if isinstance(value, t.Mapping) else {}


def phase_facts(context: t.Any, kept_failure: t.Any, kept_traffic_failure: t.Any) -> dict[str, t.Any]:
    """The prepare phase's context (what it returned for the phases after it), with what the role's
    rescues kept for this run: a failed step (drain hooks, a failed task), a failed restore hook. What a
    rescue of an earlier run of the role in the same play kept carries that run's id, and is left out."""
    facts = mapping(context)
    run_id = facts.get("sglang_restart_run_id")
    failure = facts.get("sglang_restart_failure")
    facts["sglang_restart_failure"] = dict(failure) if isinstance(failure, t.Mapping) else this_run(kept_failure, run_id)
    facts["sglang_restart_traffic_failure"] = this_run(kept_traffic_failure, run_id)
    return facts


def this_run(kept: t.Any, run_id: t.Any) -> dict[str, t.Any] | None:
    return dict(kept) if isinstance(kept, t.Mapping) and run_id and kept.get("run_id") == run_id else None


def failure_of(facts: Facts, seen: Facts) -> dict[str, t.Any] | None:
    """The failed step: kept before or around the restart phase (a rescue), or the phase's own."""
    for found in (facts.get("sglang_restart_failure"), seen.get("failure")):
        if isinstance(found, t.Mapping):
            return dict(found)
    return None


def options_of(facts: Facts) -> dict[str, t.Any]:
    return mapping(mapping(facts.get("sglang_restart_checked")).get("options"))


def router_of(facts: Facts) -> str:
    """The router the host is taken out of: this run's, or the one an earlier run took it out of."""
    options, plan = options_of(facts), mapping(facts.get("sglang_restart_plan"))
    return str(options.get("router_url") or plan.get("router_url") or "").rstrip("/")


def worker_url_of(facts: Facts, address: str) -> str:
    return worker_url(options_of(facts), address)


def worker_url(options: t.Mapping[str, t.Any], address: str) -> str:
    """The server as the router knows it: the one given, or the host's address with the server's port."""
    return str(options.get("worker_url") or f"http://{address}:{options.get('port')}")


def registration_of(facts: Facts, address: str) -> dict[str, t.Any]:
    """The worker as the router knew it, to add it back (the run record keeps it without a key)."""
    known = mapping(facts.get("sglang_restart_router_worker"))
    return {"url": worker_url_of(facts, address), **{key: known[key] for key in REGISTRATION_KEYS if key in known}}


def changed_files(facts: Facts) -> list[dict[str, t.Any]]:
    return [dict(entry) for entry in facts.get("sglang_restart_deploy_files") or [] if isinstance(entry, t.Mapping) and entry.get("changed")]


def rollout_before_restart(facts: Facts, check_mode: bool) -> dict[str, t.Any]:
    """The rollout's observation before the restart phase adds what it saw (``_rollout.after_restart``)."""
    options, plan = options_of(facts), mapping(facts.get("sglang_restart_plan"))
    files = [entry for entry in facts.get("sglang_restart_deploy_files") or [] if isinstance(entry, t.Mapping)]
    failure = failure_of(facts, {})
    failed = failure is not None
    return {
        "check_mode": check_mode,
        "held_elsewhere": _rollout.held_elsewhere(failure),
        "failed": failed,
        "new_start_failed": failed,
        "change_requested": len(files) > 0,
        "change_pending": len(changed_files(facts)) > 0,
        "force_restart": flag(options.get("force_restart")),
        "rollback_unfinished": len(plan.get("restore_files") or []) > 0,
        "inflight": flag(plan.get("inflight")),
        "unit_active": mapping(mapping(facts.get("sglang_restart_before")).get("unit")).get("ActiveState") == "active",
        "deploy_applied": flag(facts.get("sglang_restart_deploy_applied")),
        "rollback_enabled": flag(options.get("rollback", True)),
        "out_of_rotation": flag(facts.get("sglang_restart_traffic_removed")) or flag(facts.get("sglang_restart_drain_hooks_ran")),
        "unproven_in_place": len(plan.get("unproven") or []) > 0,
        "traffic_managed": bool(router_of(facts)) or len(options.get("drain_hooks") or []) > 0,
        "repairs_pending": flag(plan.get("pending")),
        "restore_failed": isinstance(facts.get("sglang_restart_traffic_failure"), t.Mapping),
    }


def rollout_after(facts: Facts, seen: Facts, check_mode: bool) -> dict[str, t.Any]:
    """The whole observation once the restart phase ran: its own (``seen["rollout"]``), or, when it
    did not finish (check mode, a failed task), the one before it with what it saw."""
    found = seen.get("rollout")
    if isinstance(found, t.Mapping):
        return {**found, "restore_failed": isinstance(facts.get("sglang_restart_traffic_failure"), t.Mapping)}
    return _rollout.after_restart(rollout_before_restart(facts, check_mode), seen)


def report_input(facts: Facts, seen: Facts, decision: Facts, traffic: Facts, run: Facts) -> dict[str, t.Any]:
    """What ``_runbook_report.runbook_report`` decides the verdict and the reason from.

    ``facts``: the prepare phase's facts with the rescues' failures; ``seen``: what the restart phase
    saw; ``decision``: ``_rollout.decide``'s; ``traffic``: how the host went back into rotation
    (``restored``, ``restore_hooks``, ``error``); ``run``: host, unit, address, check_mode."""
    checked = mapping(facts.get("sglang_restart_checked"))
    options = mapping(checked.get("options"))
    return {
        "host": run["host"],
        "unit": run["unit"],
        "options": options,
        "node": mapping(checked.get("node")),
        "before": mapping(mapping(facts.get("sglang_restart_before")).get("unit")),
        "wait": mapping(seen.get("wait")),
        "smoke": mapping(seen.get("smoke")),
        "smoke_journal": mapping(seen.get("smoke_journal")),
        "canary": mapping(seen.get("perf_canary")),
        "failure": failure_of(facts, seen),
        "check_mode": bool(run["check_mode"]),
        "started_at": facts.get("sglang_restart_started_at"),
        "deploy": deploy_section(facts, seen, decision, traffic, str(run["address"])) if options else {},
        "history": mapping(seen.get("start_history")),
        "history_before": mapping(seen.get("start_history_before")),
        "leftovers": mapping(seen.get("leftovers")),
        "sleep_before": mapping(seen.get("sleep_before")),
    }


def deploy_section(facts: Facts, seen: Facts, decision: Facts, traffic: Facts, address: str) -> dict[str, t.Any]:
    """What the deploy, the rollback and the traffic steps observed (never a file's content: an
    environment file may hold secrets)."""
    options, plan = options_of(facts), mapping(facts.get("sglang_restart_plan"))
    files = [dict(entry) for entry in facts.get("sglang_restart_deploy_files") or [] if isinstance(entry, t.Mapping)]
    rolled = mapping(seen.get("rollback"))
    reloaded = [str(line) for line in mapping(facts.get("sglang_restart_reloaded")).get("stdout_lines") or [] if re.search("=.", str(line))]
    verify_errors = [str(line) for line in mapping(facts.get("sglang_restart_verify")).get("stderr_lines") or []]
    router = router_of(facts)
    worker = facts.get("sglang_restart_router_worker")
    drain_hooks_ran = flag(facts.get("sglang_restart_drain_hooks_ran"))
    restored = traffic.get("restored")
    return {
        "state": decision.get("state"),
        "restart_needed": decision.get("restart_needed"),
        "deploy": {
            "requested": len(files) > 0,
            "changed": len(changed_files(facts)) > 0,
            "applied": flag(facts.get("sglang_restart_deploy_applied")),
            "force_restart": flag(options.get("force_restart")),
            "files": [{key: value for key, value in entry.items() if key not in ("content", "previous")} for entry in files],
            "verify": reloaded + verify_errors,
        },
        "rollback": {
            "enabled": flag(options.get("rollback", True)),
            "attempted": bool(decision.get("rollback_wanted")),
            "files_restored": flag(rolled.get("files_restored")),
            "restarted": rolled.get("started_at") is not None if rolled else False,
            "failure": rolled.get("failure"),
            "wait": mapping(rolled.get("wait")) if mapping(rolled.get("wait")).get("verdict") is not None else {},
            "canary": mapping(mapping(rolled.get("canary")).get("canary")),
            "history": mapping(rolled.get("history")),
        },
        "traffic": {
            "router_url": router,
            "worker_url": worker_url_of(facts, address) if router else "",
            "registered": mapping(worker).get("registered") if isinstance(worker, t.Mapping) else None,
            "removed": flag(facts.get("sglang_restart_traffic_removed")),
            "drain": mapping(seen.get("drain")),
            "drain_hooks": list(options.get("drain_hooks") or []) if drain_hooks_ran else [],
            "restored": bool(restored),
            "restore_hooks": list(options.get("restore_hooks") or []) if restored is not None else [],
            "error": traffic.get("error"),
        },
        "repairs": ([plan["problem"]] if plan.get("problem") else []) + list(plan.get("repairs") or []),
    }
