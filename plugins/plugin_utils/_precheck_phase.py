# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The body of the precheck phase of the role sglang_precheck (``plugins/action/precheck.py``, which runs
it): the variables checked, one look at the unit, its journal and health, one token, the canary, the
start history, the report; and the small functions that say whether a step runs, each asked of what was seen.

Private to the collection; may change at any time. Controller side.
"""

from __future__ import annotations

import time
import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils._report import phase_index
from ansible_collections.inferops.runbooks.plugins.plugin_utils._host_lease import dead_here
from ansible_collections.inferops.runbooks.plugins.plugin_utils._phase import PhaseBody, Result, StepFailed, Steps, bearer, secrets
from ansible_collections.inferops.runbooks.plugins.plugin_utils._runbook_report import runbook_report, sleeping
from ansible_collections.inferops.runbooks.plugins.plugin_utils._sleeping import sleep_url
from ansible_collections.inferops.runbooks.plugins.plugin_utils._smoke import smoke_test
from ansible_collections.inferops.runbooks.plugins.plugin_utils._start import canary_args
from ansible_collections.inferops.runbooks.plugins.plugin_utils._wait import worker_roles

ROLE = "sglang_precheck"
SINGLE_NODE: dict[str, t.Any] = {"deployment": None, "multi_node": False, "rank": 0, "peers": {}}


def single_node(host: str) -> dict[str, t.Any]:
    return {**SINGLE_NODE, "hosts": [host]}


def generates_wanted(observed: t.Mapping[str, t.Any], option: str) -> bool:
    """One token, or the canary's load, is sent when the option is on, on node 0, to a server awake
    (a generation would wake a sleeping vLLM), and every check before it passed."""
    options = observed.get("options") or {}
    rank = int((observed.get("node") or {}).get("rank") or 0)
    return bool(options.get(option)) and rank == 0 and not sleeping(observed) and runbook_report(dict(observed), ROLE)["verdict"] == "pass"


def sleep_wanted(observed: t.Mapping[str, t.Any]) -> str | None:
    """Where the sleep state is read: for an engine with a sleep mode (vLLM) whose health answered 200
    (a vLLM asleep answers it); None when it is not read."""
    options, probe = observed.get("options") or {}, observed.get("probe") or {}
    if (probe.get("health") or {}).get("status") != 200:
        return None
    return sleep_url(str(options.get("health_url") or ""), str(options.get("engine") or ""))


def start_ended(probe: t.Mapping[str, t.Any]) -> bool:
    """The current invocation's start ended: it got ready, or the unit failed or stopped."""
    journal, unit = probe.get("journal") or {}, probe.get("unit") or {}
    return bool(journal.get("ready")) or unit.get("ActiveState") in ("failed", "inactive")


def start_passed(probe: t.Mapping[str, t.Any]) -> bool:
    """It got ready with nothing fatal in its journal (the health now is the precheck's business)."""
    journal = probe.get("journal") or {}
    return bool(journal.get("ready")) and not journal.get("fatal")


def history_wanted(observed: t.Mapping[str, t.Any]) -> bool:
    options, probe = observed.get("options") or {}, observed.get("probe") or {}
    invocation = (probe.get("journal") or {}).get("invocation_id")
    return bool(options) and bool(options.get("history")) and bool(invocation) and start_ended(probe)


def headless_ready_phase(options: t.Mapping[str, t.Any], node: t.Mapping[str, t.Any]) -> str | None:
    """The phase of its own journal that proves a headless node ready (a node of rank >= 1 of an
    engine whose workers serve no HTTP, vLLM's ``--headless``); None for any other node, whose
    health is probed."""
    if int(node.get("rank") or 0) < 1:
        return None
    roles = worker_roles(str(options.get("engine") or ""))
    if roles["worker_http"] != "none":
        return None
    return str(roles["worker_ready_phase"] or "ready")


def headless_look(probe: t.Mapping[str, t.Any], ready_phase: str) -> dict[str, t.Any]:
    """The look at a headless node as the report judges it: health not probed (nothing listens),
    ready once its journal reached ``ready_phase`` (its engines up and handshaking with node 0's)."""
    journal = dict(probe.get("journal") or {})
    journal["ready"] = bool(journal.get("ready")) or phase_index(journal.get("phase")) >= phase_index(ready_phase) >= 0
    return {**probe, "journal": journal, "health": {"headless": True, "probed": False}}


def look_summary(probe: Result) -> dict[str, t.Any]:
    """What ``-v`` shows of the look: the unit's state, how the journal was read, its verdict, the health."""
    journal, unit, health = probe.get("journal") or {}, probe.get("unit") or {}, probe.get("health") or {}
    return {
        "unit": {key: unit.get(key) for key in ("ActiveState", "SubState", "InvocationID")},
        "journal": {key: journal.get(key) for key in ("verdict", "reason", "phase", "lines", "ready_line", "reading")},
        "health": {key: health.get(key) for key in ("status", "ok", "error")},
    }


class PrecheckPhase(PhaseBody):
    """The precheck of one host: its steps taken through ``steps``, with the task's variables and check
    mode; ``run`` returns the task's result (the phase takes no arguments: it reads the role's variables)."""

    def run(self) -> Result:
        steps, task_vars = self.steps, self.task_vars
        host = str(task_vars.get("inventory_hostname", ""))
        api_key = steps.variable(f"{ROLE}_api_key", "")
        observed: dict[str, t.Any] = {
            "host": host,
            "unit": steps.variable(f"{ROLE}_unit", ""),
            "options": {},
            "node": {},
            "state": {},
            "probe": {},
            "record": {},
            "smoke": {},
            "smoke_journal": {},
            "failure": None,
            "check_mode": self.check_mode,
            "started_at": time.time(),
            "history": {},
            "canary": {},
            "sleep": {},
        }
        hidden = secrets(api_key, steps.variable(f"{ROLE}_redact", []))
        self._look(steps, observed, hidden)
        self._generate(steps, observed, api_key, hidden)
        report = runbook_report(observed, ROLE)
        node = observed["node"] or single_node(host)
        options = observed["options"]
        given_dir = steps.variable(f"{ROLE}_report_dir", "")
        report_dir = options.get("report_dir", "") if options else given_dir if isinstance(given_dir, str) else ""
        batch = [str(name) for name in task_vars.get("ansible_play_batch") or [host]]
        reporter = next((name for name in node.get("hosts") or [host] if name in batch), host) == host
        return {
            "changed": False,
            "report": report,
            "node": node,
            "report_dir": report_dir,
            "reporter": reporter,
            "ansible_facts": {"sglang_precheck_report": report, "sglang_precheck_started_at": observed["started_at"]},
        }

    def _look(self, steps: Steps, observed: dict[str, t.Any], hidden: list[str]) -> None:
        """The variables checked, the unit read, the run record read, one look taken; a failed step
        is kept for the report instead of failing the host before it."""
        try:
            checked = steps.run_action("inferops.runbooks.check_options", {"role": ROLE})
            if checked.get("failed"):
                raise StepFailed("probe", "Validate | Check every variable and every rule on the controller", checked)
            options = observed["options"] = checked["options"]
            observed["node"] = checked.get("node") or {}
            state = steps.module("probe", "Precheck | Read the state of the unit", "inferops.runbooks.unit_info", {"unit": options["unit"]}, always=True)
            observed["state"] = state.get("unit") or {}
            observed["record"] = steps.module(
                "probe", "Precheck | Read the run record the last rollout left", "inferops.runbooks.run_record", {"unit": options["unit"]}, always=True
            )
            # a lease whose ansible-playbook ran here and is gone holds nothing: its run was killed
            observed["record"]["lease_dead"] = dead_here(observed["record"].get("lease"))
            if observed["state"].get("LoadState") != "loaded":
                return
            ready_phase = headless_ready_phase(options, observed["node"])
            probe = steps.module(
                "probe",
                "Precheck | Probe the unit, classify the current invocation's journal, probe health",
                "inferops.runbooks.service_probe",
                {
                    **{name: options[name] for name in ("unit", "engine", "health_timeout", "extra_rules", "disabled_rules", "strict")},
                    # a headless node serves no HTTP: its unit and journal only
                    **({"health_url": options["health_url"]} if ready_phase is None else {}),
                    "redact": hidden,
                    "tail_lines": 20,
                    "journal_grep": options["journal_grep"],
                    "journal_state": bool(options["incremental"]) and not self.check_mode,
                },
                always=True,
                shown=look_summary,
            )
            observed["probe"] = probe if ready_phase is None else headless_look(probe, ready_phase)
            url = sleep_wanted(observed)
            if url is not None:
                api_key = steps.variable(f"{ROLE}_api_key", "")
                observed["sleep"] = (
                    steps.module(
                        "probe",
                        "Precheck | Read whether the server sleeps (vLLM's sleep mode)",
                        "inferops.runbooks.server_sleep",
                        {"url": url, **({"api_key": api_key} if api_key not in (None, "") else {})},
                        always=True,
                        may_fail=True,
                        secret=api_key not in (None, ""),
                    ).get("sleep")
                    or {}
                )
        except StepFailed as failed:
            observed["failure"] = failed.failure

    def _generate(self, steps: Steps, observed: dict[str, t.Any], api_key: t.Any, hidden: list[str]) -> None:
        """One token, the canary and the start history, each when what was seen before asks for it."""
        options = observed["options"]
        if generates_wanted(observed, "smoke_test"):
            invocation = (observed["probe"].get("unit") or {}).get("InvocationID") or "current"
            scan = {
                **{name: options[name] for name in ("unit", "engine", "extra_rules", "disabled_rules", "strict")},
                "invocation": invocation,
                "redact": hidden,
            }
            observed["smoke"], observed["smoke_journal"] = smoke_test(
                steps, options["smoke_url"], options["smoke_model"], bearer(api_key), options["smoke_timeout"], scan, options["engine"]
            )
        if generates_wanted(observed, "canary"):
            observed["canary"] = steps.module(
                "canary",
                "Precheck | Measure the server against the host's baseline",
                "inferops.runbooks.perf_canary",
                canary_args(options, api_key, observed["host"], seed_baseline=False),
                may_fail=True,
                secret=api_key not in (None, ""),
            )
        if history_wanted(observed):
            probe = observed["probe"]
            passed = start_passed(probe)
            observed["history"] = steps.module(
                "history",
                "Precheck | Add the current start to this host's start history once it ended",
                "inferops.runbooks.start_history",
                {
                    "unit": options["unit"],
                    "invocation_id": probe["journal"]["invocation_id"],
                    "outcome": "pass" if passed else "fail",
                    **({"reason": "ready"} if passed else {}),
                    **{name: options[name] for name in ("engine", "extra_rules", "disabled_rules", "fail_on_new")},
                    "redact": hidden,
                    "size": options["history_size"],
                    "min_good": options["history_min_good"],
                    "slow_ratio": options["history_slow_ratio"],
                },
                may_fail=True,
            )
