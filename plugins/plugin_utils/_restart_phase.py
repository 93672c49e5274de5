# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The body of the restart phase of the role sglang_restart (``plugins/action/restart.py``, which runs it):
stop or restart the unit, follow the new start, generate one token, the start history, the canary, the
run record; the rollback of a change whose start failed; and the small decisions each step asks.

Private to the collection; may change at any time. Controller side.
"""

from __future__ import annotations

import time
import typing as t

from ansible import constants as C
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.utils.display import Display

from ansible_collections.inferops.runbooks.plugins.plugin_utils import _observed, _rollout, _silences
from ansible_collections.inferops.runbooks.plugins.plugin_utils._channel import ChannelError, Rendezvous, channel_directory
from ansible_collections.inferops.runbooks.plugins.plugin_utils._host_lease import RENEW, HostLease
from ansible_collections.inferops.runbooks.plugins.plugin_utils._host_lease import STAGE as LEASE_STAGE
from ansible_collections.inferops.runbooks.plugins.plugin_utils._phase import PhaseBody, Result, StepFailed, Steps, secrets
from ansible_collections.inferops.runbooks.plugins.plugin_utils._release import release_leftovers
from ansible_collections.inferops.runbooks.plugins.plugin_utils._rollback import RecordFailed, Rollback, rollback_args
from ansible_collections.inferops.runbooks.plugins.plugin_utils._runtime import advance_record, optional_mapping
from ansible_collections.inferops.runbooks.plugins.plugin_utils._sleeping import sleep_before_stop
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
    wait_gone,
    wait_port_free,
)

display = Display()

# the parts of the phase: the nodes of a deployment go through each together (Rendezvous)
PARTS = ("stop", "start", "verify")
EXPIRE_SILENCE = "Restart | Expire the host's silence in Alertmanager (the new start failed)"
# what the progress line says before the rollback's own start (plugin_utils/_rollout.py: rollback_reason)
ROLLBACK_CAUSES = {
    "start_failed": "the new configuration failed",
    "performance_regression": "the new configuration is slower than the baseline (performance canary)",
    "before_the_stop": "a step failed before the stop",
}


OUTSIDE_THE_ROLE = "inferops.runbooks.restart runs inside the role inferops.runbooks.sglang_restart, once its variables were checked"


def role_state(args: t.Mapping[str, t.Any], check_mode: bool) -> dict[str, t.Any]:
    """What the role's earlier steps left, from this phase's arguments: the prepare phase's context with
    the failure a rescue kept, the checked options, this host's place in its deployment, the unit before
    the run, the run's id, and the rollout's observation and decisions so far (plugin_utils/_rollout.py)."""
    facts = _observed.phase_facts(optional_mapping(args["context"]), args["failure"], None)
    observed = _observed.rollout_before_restart(facts, check_mode)
    decision = _rollout.decide(observed)
    plan = _observed.mapping(facts.get("sglang_restart_plan"))
    checked = _observed.mapping(facts.get("sglang_restart_checked"))
    return {
        "facts": facts,
        "observed": observed,
        "options": _observed.options_of(facts),
        "node": _observed.mapping(checked.get("node")),
        "peers": optional_mapping(args["peers"]),
        "before": _observed.mapping(_observed.mapping(facts.get("sglang_restart_before")).get("unit")),
        "run_id": str(facts.get("sglang_restart_run_id") or ""),
        "restart": bool(decision.get("restart_needed")),
        "verify_in_place": bool(decision.get("verify_in_place")),
        "inflight_invocation": str(plan.get("before_invocation") or "") if plan.get("inflight") else "",
        "record": bool(decision.get("record_wanted")),
        # this run holds the host's lease (the prepare phase took it): renewed between the steps
        "holds_lease": bool(_observed.mapping(facts.get("sglang_restart_lease")).get("holds")),
        "lease_renewed_at": _observed.mapping(facts.get("sglang_restart_lease")).get("renewed_at"),
    }


def hidden_texts(steps: Steps) -> list[str]:
    """Taken out of every event, evidence and journal line on the target, before a result leaves it:
    the server's API key, the router's admin key and the user's secrets."""
    router_key = steps.variable("sglang_restart_router_api_key", "")
    return secrets(steps.variable("sglang_restart_api_key", ""), steps.variable("sglang_restart_redact", [])) + (
        [str(router_key)] if router_key not in (None, "") else []
    )


# the drain reads the load in slices this long, each followed by a progress line
DRAIN_SLICE = 20.0
# beyond the drain and the release of the port: the stop itself, and the start of systemd's unit
RENDEZVOUS_MARGIN = 300.0


def drain_interval(options: t.Mapping[str, t.Any]) -> float:
    """Seconds between two load reads: the poll interval, within 1 to 5 s."""
    return min(max(float(options["poll_interval"]), 1.0), 5.0)


def drain_goes_on(drain: t.Mapping[str, t.Any], remaining: float) -> bool:
    """Another slice is read when this one ran out of time before the server ran no request, and the
    drain timeout has time left beyond it."""
    return bool(drain.get("timed_out")) and remaining > DRAIN_SLICE


def drain_seen(slices: list[dict[str, t.Any]], seconds: float) -> dict[str, t.Any]:
    """The drain as one wait: the last slice's reading, the first one's load, every read, the whole time."""
    first, last = slices[0], slices[-1]
    return {
        **last,
        "running_at_start": first.get("running_at_start"),
        "reads": sum(int(piece.get("reads") or 0) for piece in slices),
        "seconds": round(seconds, 1),
    }


def stops_first(options: t.Mapping[str, t.Any], node: t.Mapping[str, t.Any]) -> bool:
    """The unit is stopped, then started (not restarted in place): on request, and always for the
    nodes of a deployment (each waits at the rendezvous for the others)."""
    return bool(options.get("stop_first")) or bool(node.get("multi_node"))


def previous_invocation(args: t.Mapping[str, t.Any]) -> str | None:
    """The invocation the wait tells the new start from: the one before an earlier run's stop (its
    start is waited on), none for a host verified in place (it is watched in the invocation it runs),
    else the one before this run's stop."""
    if args["inflight_invocation"]:
        return str(args["inflight_invocation"])
    if args["verify_in_place"]:
        return None
    return str((args["before"] or {}).get("InvocationID") or "") or None


def lagging(node: t.Mapping[str, t.Any], peers: t.Mapping[str, t.Any]) -> list[str]:
    """The other nodes of the deployment that did not get through their preflight (``peers``: what each
    node's prepare phase returned for the others, its ``peer``)."""
    # (ansible-core before 2.19 may hand a templated boolean over as its text)
    return [peer for peer in node.get("peers") or {} if not boolean(optional_mapping(peers.get(peer)).get("reached_preflight"), strict=False)]


def channel_name(node: t.Mapping[str, t.Any], peers: t.Mapping[str, t.Any]) -> str | None:
    """The channel through which the waits of one restart of a deployment see each other: named by its
    node 0's run, the same for every node."""
    if not node.get("multi_node"):
        return None
    first = (node.get("hosts") or [""])[0]
    return f"{optional_mapping(peers.get(first)).get('run_id') or 'run'}-{node.get('deployment')}"


def rendezvous_timeout(options: t.Mapping[str, t.Any]) -> float:
    """How long a node waits for the others to get through a part: their drain, their stop and the
    release of their port take at most this long (a node that fails says so at once)."""
    return float(options["drain_timeout"]) + float(options["release_timeout"]) + RENDEZVOUS_MARGIN


def behind_peers(node: t.Mapping[str, t.Any], task_vars: t.Mapping[str, t.Any], behind: list[str], gate: str) -> None:
    """Nothing more is done on this node when a peer did not get through the step ``gate``."""
    if behind:
        msg = (
            f"Deployment {node.get('deployment')}: {', '.join(behind)} did not get through the {gate} step, so nothing more is done on"
            f" {task_vars.get('inventory_hostname')} (node {node.get('rank')}): the nodes of a deployment are restarted together or not at all."
        )
        raise StepFailed("deployment", "Deployment | Stop here, a peer did not get through the step", {"failed": True, "msg": msg})


class RestartPhase(PhaseBody):
    """The restart phase of one host: its steps taken through ``steps``, with the task's variables and
    check mode; ``run`` takes the phase's checked arguments and returns the task's result."""

    def __init__(self, steps: Steps, task_vars: dict[str, t.Any], check_mode: bool) -> None:
        super().__init__(steps, task_vars, check_mode)
        # this run's hold on the host, once the run holds it: renewed between the parts and in the drain
        self.lease: HostLease | None = None

    def run(self, args: dict[str, t.Any]) -> Result:
        steps, task_vars = self.steps, self.task_vars
        state = role_state(args, self.check_mode)
        earlier_failure = _observed.failure_of(state["facts"], {})
        if self.check_mode or (earlier_failure is not None and not state["options"]):
            said = "check mode: nothing stopped or started" if self.check_mode else "nothing to restart or roll back"
            return {"changed": False, "msg": said, "seen": {"rollout": state["observed"]}, "decision": _rollout.decide(state["observed"])}
        if not state["options"]:
            return {"failed": True, "msg": OUTSIDE_THE_ROLE}
        facts: dict[str, t.Any] = {"stopped": state["restart"] and earlier_failure is None}
        options = state["options"]
        lease = self.lease = HostLease(steps, options["unit"], state["run_id"], float(options["lock_stale"])) if state["holds_lease"] else None
        if lease is not None:
            lease.renewed_before(state["lease_renewed_at"])
        try:
            together = self._rendezvous(state["node"], state["peers"], task_vars)
        except ChannelError as exc:
            return {"failed": True, "msg": str(exc)}
        result: Result = {}
        try:
            try:
                for part in PARTS if earlier_failure is None else ():
                    if lease is not None:
                        lease.renew_when_due()
                    getattr(self, f"_{part}")(steps, state, facts, task_vars, together)
                    if together is not None:
                        together.mark(part)
            except StepFailed as failed:
                facts["failure"] = failed.failure
            finally:
                if together is not None and len(together.reached) < len(PARTS):
                    # the other nodes stop waiting for this one
                    together.fail(str((facts.get("failure") or earlier_failure or {}).get("step") or "the restart phase broke down"))
            self._roll_back_when_failed(steps, state, facts, task_vars, lease)
        except RecordFailed as failed:
            # the run record cannot be settled after the rollback: the host fails here, as a failed task would
            result.update(failed=True, msg=str(failed))
        result.update(
            changed=bool(facts["stopped"] or facts.get("rollback")),
            decision=_rollout.decide(facts.get("rollout") or state["observed"]),
            seen=facts,
            # when this run last renewed the host's lease (the settle phase does not renew it again at once)
            lease_renewed_at=lease.renewed_wall_clock() if lease is not None else None,
        )
        return result

    def _roll_back_when_failed(
        self, steps: Steps, args: t.Mapping[str, t.Any], facts: dict[str, t.Any], task_vars: dict[str, t.Any], lease: HostLease | None
    ) -> None:
        """A change whose start failed (or whose canary failed) is rolled back here, in the same phase:
        its previous files back, and the previous configuration started and followed with the same gates.
        ``facts["rollout"]`` is the rollout's observation after the restart (and the rollback)."""
        observed = _rollout.after_restart(args["observed"], facts)
        facts["rollout"] = observed
        decision = _rollout.decide(observed)
        if decision["rollback_wanted"] and lease is not None:
            try:
                lease.renew()
            except StepFailed as lost:
                # another run holds the host now: its own run decides what becomes of the change
                facts["failure"] = lost.failure
                facts["rollout"] = observed = _rollout.after_restart(args["observed"], facts)
                decision = _rollout.decide(observed)
        host = str(task_vars.get("inventory_hostname", ""))
        if _silences.expire_at_once(observed) and not decision["state"].endswith("_elsewhere"):
            self._expire_silence(steps, args, facts, host)
        if not decision["rollback_wanted"]:
            return
        cause = ROLLBACK_CAUSES[decision["rollback_reason"] if facts["stopped"] else "before_the_stop"]
        display.display(f"{host}: {args['options']['unit']} rolling back: {cause}, the previous configuration goes back")
        api_key = steps.variable("sglang_restart_api_key", "")
        hidden = hidden_texts(steps)
        rollback = rollback_args(args["options"], _observed.changed_files(args["facts"]), bool(facts["stopped"]), args["run_id"])
        facts["rollback"] = Rollback().run(steps, rollback, api_key, hidden, host)
        facts["rollout"] = _rollout.after_rollback(observed, facts["rollback"])

    def _expire_silence(self, steps: Steps, args: t.Mapping[str, t.Any], facts: dict[str, t.Any], host: str) -> None:
        """The new start failed: the run's silence expired now, so that the host's alerts fire through the
        rollback's cold start; the settle phase notes it in the run record."""
        silence = args["facts"].get("sglang_restart_silence")
        if not (silence and silence.get("id")):
            return
        problem = _silences.expire(steps, args["options"], silence, host, EXPIRE_SILENCE)
        if problem:
            facts["silence_warnings"] = [problem]
        else:
            facts["silence"] = {"id": silence["id"], "expired": True}
            display.display(f"{host}: the new start failed: its silence {silence['id']} in Alertmanager expired, its alerts fire")

    # -- the parts ---------------------------------------------------------------------------

    def _stop(self, steps: Steps, args: t.Mapping[str, t.Any], facts: dict[str, t.Any], task_vars: dict[str, t.Any], together: Rendezvous | None) -> None:
        """Once every node of a deployment got through its preflight: the run record notes the invocation
        before the stop; the start history is read; the unit is stopped and its old process and port
        released (a restart in place does all that in one)."""
        options, node = args["options"], args["node"]
        self._preflight(args, task_vars)
        if not args["restart"] or args["inflight_invocation"]:
            return
        facts["sleep_before"] = sleep_before_stop(steps, options, steps.variable("sglang_restart_api_key", ""), str(task_vars.get("inventory_hostname", "")))
        if options["load_url"]:
            facts["drain"] = self._drain(steps, args, str(task_vars.get("inventory_hostname", "")))
        self._record(
            steps,
            args,
            facts,
            "restart",
            "Restart | Note in the run record the invocation before the stop",
            before_invocation=str(args["before"].get("InvocationID") or ""),
        )
        self._read_history(steps, args, facts, task_vars)
        if stops_first(options, node):
            facts["leftovers"] = self._stop_and_release(steps, args, str(task_vars.get("inventory_hostname", "")))

    def _start(self, steps: Steps, args: t.Mapping[str, t.Any], facts: dict[str, t.Any], task_vars: dict[str, t.Any], together: Rendezvous | None) -> None:
        options, node = args["options"], args["node"]
        if not args["restart"] or args["inflight_invocation"]:
            return
        self._together(args, task_vars, together, "stop", "stopped")
        verb = "start" if stops_first(options, node) else "restart"
        step = "Restart | Start the unit" if verb == "start" else "Restart | Restart the unit in place"
        systemctl(steps, "restart", step, verb, options["unit"])

    def _verify(self, steps: Steps, args: t.Mapping[str, t.Any], facts: dict[str, t.Any], task_vars: dict[str, t.Any], together: Rendezvous | None) -> None:
        """The wait, one token, the start history, the canary, the record that the configuration passed."""
        options, node, host = args["options"], args["node"], str(task_vars.get("inventory_hostname", ""))
        restart = bool(args["restart"])
        if not (restart or args["verify_in_place"]):
            return
        if restart and not args["inflight_invocation"]:
            self._together(args, task_vars, together, "start", "started")
        api_key = steps.variable("sglang_restart_api_key", "")
        hidden = hidden_texts(steps)
        start = Start(steps, options, api_key, hidden, host, "")
        seen = Seen()
        rank = int(node.get("rank") or 0)
        failure: t.Any = None
        try:
            if restart:
                self._record(steps, args, facts, "wait", "Wait | Note in the run record that the start is waited on")
            read = self._read_history(steps, args, facts, task_vars)
            wait = wait_args(options, hidden, read, previous_invocation(args))
            if args["holds_lease"]:
                wait["lease_run_id"] = args["run_id"]
            channel = channel_name(node, args["peers"])
            if channel:
                wait.update(deployment=node["deployment"], channel=channel)
            start.wait(seen, {**wait, "node_rank": rank, "peers": node.get("peers") or {}})
            facts["wait"] = seen.wait
            if self.lease is not None:
                self.lease.renewed_before(seen.wait.get("lease_renewed_at"))
            if seen.wait.get("reason") == "lease_lost":
                raise StepFailed(LEASE_STAGE, RENEW, {"failed": True, "changed": False, "reason": "lease_lost", "msg": str(seen.wait.get("msg") or "")})
            if restart and generates_wanted(options, seen, rank):
                self._record(steps, args, facts, "smoke", "Smoke test | Note in the run record that the start is smoke-tested")
                start.smoke(seen)
        except StepFailed as failed:
            failure = failed.failure
            raise
        finally:
            facts.update({"smoke": seen.smoke, "smoke_journal": seen.smoke_journal})
            self._add_history(steps, options, seen, failure or facts.get("failure"), hidden, facts)
        if restart and canary_wanted(options, seen, rank):
            start.canary(seen, args["run_id"])
            facts["perf_canary"] = seen.canary
            show_canary(host, seen.canary)
        outcome = _rollout.start_outcome(options, None, seen.wait, seen.smoke, facts.get("start_history") or {}, seen.canary)
        facts["outcome"] = outcome
        if not outcome["new_start_failed"] and not outcome["canary_failed"]:
            self._record(steps, args, facts, "passed", "Note in the run record that the configuration passed", change_flags={"proven": True})

    # -- the steps ---------------------------------------------------------------------------

    def _record(self, steps: Steps, args: t.Mapping[str, t.Any], facts: dict[str, t.Any], step: str, name: str, **updates: t.Any) -> None:
        """The run record names the step before it is taken (only when the run keeps one)."""
        if not args["record"]:
            return
        stage = "restart" if step == "restart" else "wait" if step in ("wait", "passed") else step
        facts["record"] = advance_record(steps, stage, name, args["options"]["unit"], args["run_id"], step, updates)

    def _read_history(self, steps: Steps, args: t.Mapping[str, t.Any], facts: dict[str, t.Any], task_vars: dict[str, t.Any]) -> Result:
        """What this host's earlier starts on the configuration in place teach (stall limits, good
        starts), read once per run: before the stop when the role restarts the unit, so that the wait
        follows the start from its first lines. A history that cannot be read is reported and ignored."""
        key = "start_history_before"
        known = facts.get(key)
        if known or not args["options"]["history"]:
            return dict(known or {})
        read = kept(
            steps.module(
                "history",
                "History | Read this host's start history of the unit",
                "inferops.runbooks.start_history",
                history_args(args["options"]),
                may_fail=True,
            )
        )
        facts[key] = read
        return read

    def _drain(self, steps: Steps, args: t.Mapping[str, t.Any], host: str) -> dict[str, t.Any]:
        """Until the server runs and queues no request, or the drain timeout (inferops.runbooks.server_load:
        SGLang's /v1/loads, /get_load, then the keyless /metrics; vLLM's /metrics; the API key where the
        server guards). Read in slices, each followed by a progress line, so that a long drain never looks
        idle. It never fails: the stop goes ahead (SGLang drains on SIGTERM too)."""
        options, node = args["options"], args["node"]
        api_key = steps.variable("sglang_restart_api_key", "")
        timeout = float(options["drain_timeout"])
        started = time.monotonic()
        slices: list[dict[str, t.Any]] = []
        while True:
            if self.lease is not None:
                self.lease.renew_when_due()
            remaining = max(timeout - (time.monotonic() - started), 0.0)
            read = steps.module(
                "drain",
                "Drain | Wait until the server runs no more requests",
                "inferops.runbooks.server_load",
                {
                    "url": options["load_url"],
                    "engine": options["engine"],
                    **({"api_key": api_key} if api_key not in (None, "") else {}),
                    "timeout": min(remaining, DRAIN_SLICE),
                    "interval": drain_interval(options),
                    "unknown_load": options["drain_unknown_load"],
                    "node_rank": int(node.get("rank") or 0),
                },
                may_fail=True,
                secret=api_key not in (None, ""),
            )
            slices.append(dict(read.get("drain") or {"msg": str(read.get("msg") or "the load could not be read")}))
            if not drain_goes_on(slices[-1], remaining):
                return drain_seen(slices, time.monotonic() - started)
            display.display(f"{host}: {options['unit']} draining: {slices[-1].get('msg', '')}, {time.monotonic() - started:.0f}s of {timeout:.0f}s")

    def _stop_and_release(self, steps: Steps, args: t.Mapping[str, t.Any], host: str) -> dict[str, t.Any]:
        options, before = args["options"], args["before"]
        unit, timeout = options["unit"], options["release_timeout"]
        systemctl(steps, "restart", "Restart | Stop the unit", "stop", unit)
        pid = int(before.get("MainPID") or 0)
        if pid > 0:
            gone = f"The old main process {pid} of {unit} is still running {timeout} s after the stop."
            wait_gone(steps, "restart", "Restart | Wait until the old main process has exited", pid, timeout, gone)
        leftovers = release_leftovers(steps, "restart", "Restart", options, host)
        address = f"{port_host(options)}:{options['port']}"
        held = (
            f"{address} still accepts connections {timeout} s after {unit} stopped: a leftover process holds the port,"
            ' and a new start would fail with "Address already in use".'
        )
        wait_port_free(steps, "restart", "Restart | Wait until the port is released", options["port"], timeout, held)
        return leftovers

    def _preflight(self, args: t.Mapping[str, t.Any], task_vars: dict[str, t.Any]) -> None:
        """A node of a deployment goes on only when every other node got through its preflight (the
        prepare phase, a task before this one)."""
        node = args["node"]
        if node.get("multi_node"):
            behind_peers(node, task_vars, lagging(node, args["peers"]), "preflight")

    def _together(self, args: t.Mapping[str, t.Any], task_vars: dict[str, t.Any], together: Rendezvous | None, part: str, gate: str) -> None:
        """A node of a deployment goes on only when every other node got through ``part`` of this phase,
        which they run at the same time, each in its own worker process."""
        if together is not None:
            behind_peers(args["node"], task_vars, together.lagging(part, rendezvous_timeout(args["options"])), gate)

    def _rendezvous(self, node: t.Mapping[str, t.Any], peers: t.Mapping[str, t.Any], task_vars: dict[str, t.Any]) -> Rendezvous | None:
        name = channel_name(node, peers)
        if name is None:
            return None
        return Rendezvous(channel_directory(C.DEFAULT_LOCAL_TMP, name), str(task_vars.get("inventory_hostname", "")), node.get("peers") or {})

    def _add_history(self, steps: Steps, options: t.Mapping[str, t.Any], seen: Seen, failure: t.Any, hidden: list[str], facts: dict[str, t.Any]) -> None:
        """The start just waited on goes into the host's start history, with the configuration in place
        now (before any rollback puts the previous one back). Never fails the run: the report says why."""
        invocation = seen.wait.get("invocation_id")
        if not options["history"] or not invocation:
            return
        outcome = _rollout.start_outcome(options, failure, seen.wait, seen.smoke, {}, {})
        added = steps.module(
            "history",
            "History | Add the start to this host's start history",
            "inferops.runbooks.start_history",
            history_args(
                options,
                invocation_id=invocation,
                outcome="fail" if outcome["start_failed"] else "pass",
                reason=seen.wait.get("reason"),
                waited=seen.wait.get("elapsed"),
                redact=hidden,
                fail_on_new=options["fail_on_new"],
            ),
            may_fail=True,
        )
        facts["start_history"] = kept(added)


def show_canary(host: str, result: t.Mapping[str, t.Any]) -> None:
    """The canary's figures beside the baseline, one line in the play's output."""
    found = result.get("canary")
    canary: dict[str, t.Any] = found if isinstance(found, dict) else {}
    verdict = str(canary.get("verdict") or "inconclusive").upper()
    lines = canary.get("lines") or [result.get("msg") or ""]
    display.display(f"{host}: performance canary {verdict}: {'; '.join(str(line) for line in lines)}")
