# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rollback of a failed change, as the restart phase (inferops.runbooks.restart) runs it.

Put the previous files back (from ``<file>.previous`` on the host, not from the controller's memory: a
change an earlier run wrote is put back from that run's backup), reload systemd, and when the failed
start had stopped the server, start it on the previous configuration and follow that start with the
same gates (it takes as long as any cold start, and can fail too). The rollback's start goes into the
host's start history with the previous configuration's fingerprint, and the run record ends at
rolled_back or rollback_failed.

Private to the collection; may change at any time. Controller side.
"""

from __future__ import annotations

import time
import typing as t

from ansible_collections.inferops.runbooks.plugins.plugin_utils import _rollout
from ansible_collections.inferops.runbooks.plugins.plugin_utils._phase import StepFailed, Steps
from ansible_collections.inferops.runbooks.plugins.plugin_utils._release import release_leftovers
from ansible_collections.inferops.runbooks.plugins.plugin_utils._runtime import advance_record
from ansible_collections.inferops.runbooks.plugins.plugin_utils._start import (
    Seen,
    Start,
    canary_wanted,
    generates_wanted,
    history_args,
    kept,
    port_host,
    systemctl,
    wait_args,
    wait_port_free,
)

STEP = "Rollback"


def rollback_args(options: t.Mapping[str, t.Any], changed_files: t.Any, stopped: bool, run_id: str) -> dict[str, t.Any]:
    """What the rollback needs: the checked options, the files this run's change wrote (path, kind,
    whether it existed before), whether the unit was stopped for the new start, the run's id."""
    return {
        "options": dict(options),
        "files": [{key: entry.get(key) for key in ("path", "kind", "existed")} for entry in changed_files or [] if isinstance(entry, dict)],
        "stopped": bool(stopped),
        "run_id": str(run_id),
    }


def unit_properties(stdout: str) -> dict[str, str]:
    """``systemctl show``'s ``Key=value`` lines as a dict."""
    return dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)


def smoke_failure(options: t.Mapping[str, t.Any], answer: t.Mapping[str, t.Any]) -> str:
    status = answer.get("status")
    said = f"HTTP {status}" if status not in (None, -1) else "no answer"
    detail = f" - {answer['msg']}" if answer.get("msg") else ""
    return f"smoke test: {said} from {options['smoke_url']}{detail}"


class RecordFailed(Exception):
    """The run record cannot be written after the rollback: the host fails, as a failed task would."""


class Rollback:
    """One host's rollback; ``run`` returns what it saw."""

    def run(self, steps: Steps, args: t.Mapping[str, t.Any], api_key: t.Any, hidden: list[str], host: str) -> dict[str, t.Any]:
        """What the rollback saw: files_restored, started_at, before, wait, canary, history, record,
        passed, failure (the failed step's name and message, or None). RecordFailed when the run record
        cannot be settled."""
        options = args["options"]
        start = Start(steps, options, api_key, hidden, host, STEP)
        seen = Seen()
        facts: dict[str, t.Any] = {"files_restored": False, "started_at": None, "failure": None}
        try:
            self.record(steps, args, facts, "rollback", "Note in the run record that the change is rolled back")
            self.put_back(steps, args, facts)
            if args["stopped"]:
                self.start(steps, args, facts, start, seen, hidden)
        except StepFailed as failed:
            facts["failure"] = {"step": failed.failure["step"], "msg": str(failed.failure["result"].get("msg") or "failed without a message")}
        facts.update(wait=seen.wait, canary=seen.canary, passed=_rollout.rollback_passed(facts["failure"], seen.wait))
        try:
            self.add_history(steps, options, seen, facts["passed"], hidden, facts)
            self.record(
                steps,
                args,
                facts,
                _rollout.rollback_settled_step(facts["passed"], args["stopped"]),
                "Note in the run record how the rollback ended",
                change_flags={"settled": True},
            )
        except StepFailed as failed:
            raise RecordFailed(str(failed)) from None
        return facts

    def record(self, steps: Steps, args: t.Mapping[str, t.Any], facts: dict[str, t.Any], step: str, name: str, **updates: t.Any) -> None:
        facts["record"] = advance_record(steps, "rollback", f"{STEP} | {name}", args["options"]["unit"], args["run_id"], step, updates)

    def put_back(self, steps: Steps, args: t.Mapping[str, t.Any], facts: dict[str, t.Any]) -> None:
        """The failed start stopped, the previous files back, systemd reloaded, the unit loading again."""
        unit = args["options"]["unit"]
        if args["stopped"]:
            systemctl(steps, "rollback", f"{STEP} | Stop the unit of the failed start", "stop", unit)
        for entry in args["files"]:
            if entry.get("existed"):
                steps.module(
                    "rollback",
                    f"{STEP} | Put the previous content back ({entry['path']})",
                    "ansible.builtin.copy",
                    {"src": f"{entry['path']}.previous", "dest": entry["path"], "remote_src": True},
                )
            else:
                steps.module(
                    "rollback",
                    f"{STEP} | Remove a file that did not exist before ({entry['path']})",
                    "ansible.builtin.file",
                    {"path": entry["path"], "state": "absent"},
                )
        steps.module("rollback", f"{STEP} | Reload systemd", "ansible.builtin.systemd_service", {"daemon_reload": True})
        shown = steps.module(
            "rollback",
            f"{STEP} | Read how systemd loaded the unit and its last invocation",
            "ansible.builtin.command",
            {"argv": ["systemctl", "show", "--property=LoadState,LoadError,InvocationID", "--", unit]},
        )
        facts["before"] = before = unit_properties(str(shown.get("stdout") or ""))
        facts["files_restored"] = True
        if before.get("LoadState") != "loaded":
            msg = f"After the previous files were put back, {unit} still does not load (LoadState={before.get('LoadState')} {before.get('LoadError', '')})."
            raise StepFailed("rollback", f"{STEP} | Stop when the previous configuration does not load either", {"failed": True, "msg": msg})

    def start(self, steps: Steps, args: t.Mapping[str, t.Any], facts: dict[str, t.Any], start: Start, seen: Seen, hidden: list[str]) -> None:
        """The previous configuration started and followed with the same gates; its canary is measured
        beside the failed start's (a host slow on both is slow for another reason) and never fails it."""
        options = args["options"]
        timeout = options["release_timeout"]
        facts["leftovers"] = release_leftovers(steps, "rollback", STEP, options, start.host)
        held = f"{port_host(options)}:{options['port']} still accepts connections {timeout} s after the failed start stopped."
        wait_port_free(steps, "rollback", f"{STEP} | Wait until the port is released", options["port"], timeout, held)
        facts["started_at"] = time.time()
        self.record(steps, args, facts, "rollback_wait", "Note in the run record that the previous configuration starts")
        systemctl(steps, "rollback", f"{STEP} | Start the unit", "start", options["unit"])
        previous = str(facts.get("before", {}).get("InvocationID") or "") or None
        # the rollback's start renews the host's lease like the new start's
        start.wait(seen, {**wait_args(options, hidden, {}, previous), "lease_run_id": args["run_id"]})
        if generates_wanted(options, seen, 0):
            start.smoke(seen)
            if not _rollout.generated(seen.smoke):
                raise StepFailed("rollback", f"{STEP} | The smoke test must generate", {"failed": True, "msg": smoke_failure(options, seen.smoke)})
        if canary_wanted(options, seen, 0):
            start.canary(seen, args["run_id"])

    def add_history(self, steps: Steps, options: t.Mapping[str, t.Any], seen: Seen, passed: bool, hidden: list[str], facts: dict[str, t.Any]) -> None:
        """The rollback's start is a start of the previous configuration (the files are back): it
        counts for that configuration's baseline. A history that cannot be written never fails the run."""
        invocation = seen.wait.get("invocation_id")
        if not options["history"] or not invocation:
            return
        added = steps.module(
            "history",
            f"{STEP} | Add the rollback start to this host's start history",
            "inferops.runbooks.start_history",
            history_args(
                options,
                invocation_id=invocation,
                outcome="pass" if passed else "fail",
                reason=seen.wait.get("reason"),
                waited=seen.wait.get("elapsed"),
                redact=hidden,
            ),
            may_fail=True,
        )
        facts["history"] = kept(added)
