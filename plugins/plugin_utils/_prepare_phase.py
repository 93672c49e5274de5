# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The body of a rollout's first phase, up to the drain hooks (``plugins/action/prepare.py``, which runs
it): the variables checked, the host's lease, the unit read, the change rendered, the run record an
earlier run left reconciled, the change deployed, the host's alerts silenced and the host taken out of
rotation; what to do is decided by ``plugin_utils/_prepare``.

Private to the collection; may change at any time. Controller side.
"""

from __future__ import annotations

import base64
import contextlib
import getpass
import random
import socket
import time
import typing as t

from ansible.errors import AnsibleError
from ansible.plugins.loader import lookup_loader
from ansible.utils.display import Display

from ansible_collections.inferops.runbooks.plugins.plugin_utils import _observed, _rollout, _silences
from ansible_collections.inferops.runbooks.plugins.plugin_utils import _prepare as decide
from ansible_collections.inferops.runbooks.plugins.plugin_utils._alertmanager import expire_silence, silence_host
from ansible_collections.inferops.runbooks.plugins.plugin_utils._host_lease import HostLease, holder
from ansible_collections.inferops.runbooks.plugins.plugin_utils._phase import PhaseBody, Result, StepFailed, Steps
from ansible_collections.inferops.runbooks.plugins.plugin_utils._plain import plain
from ansible_collections.inferops.runbooks.plugins.plugin_utils._router import Router, RouterError, registration
from ansible_collections.inferops.runbooks.plugins.plugin_utils._runtime import advance_record
from ansible_collections.inferops.runbooks.plugins.plugin_utils._start import history_args

ROLE = "sglang_restart"
CHECK_STEP = "Validate | Check every variable and every rule on the controller"
FACTS = ("sglang_restart_started_at", "sglang_restart_run_id")
display = Display()


class Refused(Exception):
    """check_options refused the variables: nothing on the host is touched."""


def without_invocation(result: t.Mapping[str, t.Any]) -> Result:
    """A module's result as a registered variable would keep it, less the arguments it was called with."""
    return {key: value for key, value in result.items() if key != "invocation"}


def slurped(result: t.Mapping[str, t.Any]) -> str | None:
    """The text slurp read, None when the file does not exist."""
    if "content" not in result:
        return None
    return base64.b64decode(str(result["content"])).decode("utf-8", errors="replace")


def slurp_missing(result: t.Mapping[str, t.Any]) -> bool:
    return bool(result.get("failed")) and "not found" in str(result.get("msg", "")).lower()


def template_renderer(loader: t.Any, templar: t.Any, task_vars: dict[str, t.Any]) -> decide.Render:
    """A template rendered with the role's variables, as ``lookup('template')`` renders it (with the
    action's loader and templar)."""

    def render(path: str) -> str:
        lookup = lookup_loader.get("ansible.builtin.template", loader=loader, templar=templar)
        if lookup is None:
            raise AnsibleError("the ansible.builtin.template lookup is not available")
        return str(lookup.run([path], variables=task_vars)[0])

    return render


@contextlib.contextmanager
def task_diff(task: t.Any, diff: bool | None) -> t.Iterator[None]:
    """The task's --diff, for a step that shows its diff (``diff`` True) or never does (False), as the
    task asks; None leaves it as it is."""
    saved = task.diff
    if diff is not None:
        task.diff = diff and bool(saved)
    try:
        yield
    finally:
        task.diff = saved


class PreparePhase(PhaseBody):
    """The prepare phase of one host: its steps taken through ``steps``, with the task's variables and
    check mode; ``run`` returns the task's result (the phase takes no arguments: it reads the role's
    variables through check_options)."""

    def __init__(
        self,
        steps: Steps,
        task_vars: dict[str, t.Any],
        check_mode: bool,
        render: decide.Render,
        diff: t.Callable[[bool | None], t.ContextManager[None]],
    ) -> None:
        super().__init__(steps, task_vars, check_mode)
        # the action's own: its loader and templar render the templates, its task's --diff is copy's
        self.render = render
        self.diff = diff
        self.host = str(task_vars.get("inventory_hostname", ""))

    def run(self) -> Result:
        started_at = time.time()
        self.facts: dict[str, t.Any] = decide.run_facts(
            started_at, decide.run_id(time.strftime(decide.RUN_ID_TIME, time.gmtime(started_at)), random.randrange(999999))
        )
        self.diffs: list[t.Any] = []
        self.changed = False
        refused = False
        self.drain_hooks_due = False
        self.earlier_record: dict[str, t.Any] | None = None
        self.facts["sglang_restart_silence"] = None
        self.facts["sglang_restart_silence_warnings"] = []
        try:
            self._validate()
            self._prepare()
        except Refused:
            refused = True
        except StepFailed as failed:
            self.facts["sglang_restart_failure"] = failed.failure
        failure = self.facts["sglang_restart_failure"]
        return {
            "changed": self.changed,
            "refused": refused,
            "failure": failure,
            # the user's drain hooks run after this phase (the role's next task)
            "drain_hooks_due": self.drain_hooks_due and not failure,
            # what the phases after this one take as their argument
            "context": dict(self.facts),
            # what the other nodes of a deployment need of this one (the role passes it to them)
            "peer": {"run_id": self.facts["sglang_restart_run_id"], "reached_preflight": bool(self.facts["sglang_restart_reached_preflight"])},
            # as facts, only what is read from the play's other hosts (when each began: the run's page) and
            # the run's id; the rest goes to the phases as their argument, and every fact set is copied
            # into each later task's variables
            "ansible_facts": {**self.steps.discovered, **{name: self.facts[name] for name in FACTS}},
            # a host that cannot be reached is out of the play, as it would be for any task
            **({"unreachable": True} if failure and failure["result"].get("unreachable") else {}),
            "msg": f"{failure['step']}: {failure['result'].get('msg', 'failed')}" if failure else "prepared",
            **({"warnings": list(self.facts["sglang_restart_silence_warnings"])} if self.facts["sglang_restart_silence_warnings"] else {}),
            **({"diff": self.diffs} if self.diffs else {}),
        }

    # -- the steps ---------------------------------------------------------------------------------

    def _validate(self) -> None:
        """Every variable and rule, of every host of the play on its first host; a refusal is kept
        for the report and touches nothing."""
        play_hosts = [str(name) for name in self.task_vars.get("ansible_play_hosts_all") or []]
        hosts = play_hosts if play_hosts and play_hosts[0] == self.host else []
        checked = without_invocation(self.steps.run_action("inferops.runbooks.check_options", {"role": ROLE, "hosts": hosts}))
        self.steps.done[-1]["step"] = CHECK_STEP
        self.facts["sglang_restart_checked"] = checked
        if checked.get("failed"):
            self.facts["sglang_restart_failure"] = StepFailed("validate", CHECK_STEP, checked).failure
            raise Refused()
        self.options: dict[str, t.Any] = checked["options"]
        self.node: dict[str, t.Any] = checked.get("node") or {}

    def _prepare(self) -> None:
        self._take_lease()
        before = self._preflight()
        files = self._render(before)
        plan = self._reconcile(before, files)
        compared = self._compare(files, plan)
        self.facts.update(decide.takeover(plan))
        if decide.changed(compared):
            self._deploy(compared, plan)
        restart = not plan.get("inflight") and decide.restart_needed(self.options, before, compared, plan)
        if not self.check_mode:
            self._silence(restart)
        if not self.check_mode and restart:
            self._take_out(plan)
        if self.check_mode:
            scene = decide.Scene(self.host, self.options, before, compared, plan, bool(self.node.get("multi_node")), self._worker_url())
            self._say(decide.check_mode_message(scene))

    def _take_lease(self) -> None:
        """The host held for this run before anything on it changes: a second run refuses (or waits,
        bounded by lock_wait) naming the holder; a dead run's lease is taken over. Check mode only reads it."""
        self._stage("lease")
        lease = HostLease(self.steps, self.options["unit"], self.facts["sglang_restart_run_id"])
        if self.check_mode:
            found = lease.read()
            if found.get("lease"):
                self._say([f"held by another run: {found.get('holder')}; a real run would be refused now (or wait, sglang_restart_lock_wait)"])
            self.facts["sglang_restart_lease"] = {"holds": False, "holder": found.get("holder")}
            return
        taken = lease.take(holder(self.task_vars), float(self.options["lock_stale"]), float(self.options["lock_wait"]), display.display, self.host)
        self.facts["sglang_restart_lease"] = {
            "holds": True,
            "outcome": taken.get("outcome"),
            "taken_over": taken.get("taken_over_from"),
            # the heartbeat is fresh: the restart phase does not renew it again at once
            "renewed_at": round(time.time(), 3),
        }

    def _preflight(self) -> dict[str, t.Any]:
        self._stage("preflight")
        # the engine's drain on the stop: SGLang's is bounded by TimeoutStopSec alone when no load URL drains before it
        asked = {"unit": self.options["unit"], "engine": self.options.get("engine") or "auto", "drain_before_stop": bool(self.options.get("load_url"))}
        read = self._module("Preflight | Read the state of the unit before the restart", "inferops.runbooks.unit_info", asked, always=True)
        self.facts["sglang_restart_before"] = without_invocation(read)
        before: dict[str, t.Any] = read.get("unit") or {}
        if before.get("LoadState") != "loaded":
            self._refuse("Preflight | Refuse a unit that is not loaded", decide.not_loaded_message(self.options["unit"], self.host, before.get("LoadState")))
        if self.node.get("multi_node"):
            self.facts["sglang_restart_reached_preflight"] = True
        return before

    def _render(self, before: t.Mapping[str, t.Any]) -> list[dict[str, t.Any]]:
        """The new files, rendered on the controller (a template relative to the playbook's directory)."""
        self._stage("render")
        step = "Preflight | Render the new configuration on the controller"
        playbook_dir = str(self.task_vars.get("playbook_dir") or ".")
        started = time.monotonic()
        try:
            files = decide.requested_files(self.options, before, self.render, playbook_dir)
        except AnsibleError as exc:
            self.steps.note(step, {"failed": True}, time.monotonic() - started)
            raise StepFailed("render", step, {"failed": True, "msg": str(exc)}) from None
        self.steps.note(step, {}, time.monotonic() - started)
        self.steps.done[-1]["saw"] = {"files": [{key: entry[key] for key in ("kind", "path")} for entry in files]}
        self.facts["sglang_restart_new_files"] = files
        self.facts["sglang_restart_deploy_files"] = []
        self._stage("preflight")
        return files

    def _reconcile(self, before: t.Mapping[str, t.Any], files: t.Sequence[t.Mapping[str, t.Any]]) -> dict[str, t.Any]:
        """The run record an earlier run left, reconciled with the host: what that run left to repair."""
        read = self._module(
            "Preflight | Read the run record an earlier run left, with the hashes of the files it names",
            "inferops.runbooks.run_record",
            {"unit": self.options["unit"], "files": [entry["path"] for entry in files]},
            always=True,
        )
        self.facts["sglang_restart_record"] = without_invocation(read)
        requested = [{"path": entry["path"], "new_sha256": _rollout.content_sha256(entry["content"])} for entry in files]
        record = plain(read)
        self.earlier_record = record.get("record") if isinstance(record.get("record"), dict) else None
        plan = _rollout.reconcile(record.get("record"), record.get("problem"), record.get("host_files") or {}, before, requested)
        taken_over = self.facts["sglang_restart_lease"].get("taken_over")
        if taken_over:
            plan["repairs"].insert(0, f"the host's lease was taken over from {taken_over}")
        self.facts["sglang_restart_plan"] = plan
        self._say(decide.repairs_message(plan))
        if plan["restore_files"] and not self.check_mode:
            self._complete_rollback(plan["restore_files"])
        return plan

    def _complete_rollback(self, restore_files: t.Sequence[t.Mapping[str, t.Any]]) -> None:
        """An earlier run was cut short while it rolled back: put the previous files back first."""
        foreign, back, remove = decide.restore_split(restore_files)
        if foreign:
            self._refuse(
                "Reconcile | Refuse to complete a rollback whose backup is not the one recorded", decide.foreign_backup_message(self.options["unit"], foreign)
            )
        for path in back:
            self._action(
                "Reconcile | Put the previous content back",
                "ansible.builtin.copy",
                {"src": f"{path}.previous", "dest": path, "remote_src": True, "mode": "preserve"},
            )
        for path in remove:
            self._module("Reconcile | Remove the files that did not exist before", "ansible.builtin.file", {"path": path, "state": "absent"})
        self._module("Reconcile | Reload systemd", "ansible.builtin.systemd_service", {"daemon_reload": True})
        self.facts["sglang_restart_record"] = self._record(
            "Reconcile | Note in the run record that the change was rolled back", "rolled_back", {"change_flags": {"settled": True}}
        )

    def _compare(self, files: t.Sequence[t.Mapping[str, t.Any]], plan: t.Mapping[str, t.Any]) -> list[dict[str, t.Any]]:
        current: dict[str, str | None] = {}
        for entry in files:
            read = self._module("Preflight | Read the files the change replaces", "ansible.builtin.slurp", {"src": entry["path"]}, always=True, may_fail=True)
            if read.get("failed") and not slurp_missing(read):
                raise StepFailed("preflight", "Preflight | Read the files the change replaces", read)
            current[entry["path"]] = slurped(read)
        compared = decide.compare(files, current, decide.unproven_files(plan))
        self.facts["sglang_restart_deploy_files"] = compared
        self.steps.note("Preflight | Compare the new configuration with the one in place", {}, 0.0)
        self.steps.done[-1]["saw"] = {"files": [{key: entry[key] for key in ("kind", "path", "existed", "changed")} for entry in compared]}
        return compared

    def _deploy(self, files: t.Sequence[dict[str, t.Any]], plan: t.Mapping[str, t.Any]) -> None:
        """Write the change (the previous content kept as <file>.previous), reload systemd and refuse a
        change that breaks the unit, all before anything is stopped. In check mode only the write runs,
        in check mode, for --diff to show what would change."""
        self._stage("deploy")
        writes = decide.changed(files)
        real = not self.check_mode
        if real:
            # written ahead: a run killed from here on leaves the files to check and the backups to restore from
            entries = _rollout.change_entries(writes, (self.facts["sglang_restart_record"] or {}).get("host_files") or {}, plan.get("unproven") or [])
            self.facts["sglang_restart_record"] = self._record(
                "Deploy | Note the change in the run record before writing it", "deploy", {"change": {"files": entries, "proven": False}}
            )
            for entry in decide.backups_to_keep(writes):
                self._action(
                    "Deploy | Keep the previous content as <file>.previous",
                    "ansible.builtin.copy",
                    {"content": entry["previous"], "dest": f"{entry['path']}.previous", "mode": entry["mode"]},
                    diff=False,
                )
            for entry in decide.stale_backups(writes):
                self._module(
                    "Deploy | Remove a stale previous copy of a file that did not exist",
                    "ansible.builtin.file",
                    {"path": f"{entry['path']}.previous", "state": "absent"},
                )
        for directory in dict.fromkeys(decide.parent(entry["path"]) for entry in writes):
            self._module("Deploy | Create the directory of each file", "ansible.builtin.file", {"path": directory, "state": "directory", "mode": "0755"})
        if real:
            self.facts["sglang_restart_deploy_applied"] = True
        for entry in writes:
            mode = decide.write_mode(entry)
            written = self._action(
                "Deploy | Write the new configuration",
                "ansible.builtin.copy",
                {"content": entry["content"], "dest": entry["path"], **({"mode": mode} if mode else {})},
                diff=decide.diff_shown(entry),
            )
            if decide.diff_shown(entry) and written.get("diff"):
                self.diffs.extend(written["diff"] if isinstance(written["diff"], list) else [written["diff"]])
        if real:
            self._verify_unit()

    def _verify_unit(self) -> None:
        unit = self.options["unit"]
        self._module("Deploy | Reload systemd", "ansible.builtin.systemd_service", {"daemon_reload": True})
        shown = self._module(
            "Deploy | Read how systemd loaded the unit",
            "ansible.builtin.command",
            {"argv": ["systemctl", "show", "--property=LoadState,LoadError", "--", unit]},
        )
        shown = {**shown, "changed": False}
        self.facts["sglang_restart_reloaded"] = without_invocation(shown)
        verify: dict[str, t.Any] = {}
        if self.options.get("verify_unit"):
            verify = self._module(
                "Deploy | Verify the unit (systemd-analyze verify)",
                "ansible.builtin.command",
                {"argv": ["systemd-analyze", "verify", "--", unit]},
                may_fail=True,
            )
            verify = {**without_invocation(verify), "changed": False, "failed": False}
            self.facts["sglang_restart_verify"] = verify
        shown_lines = [str(line) for line in shown.get("stdout_lines") or []]
        if decide.unit_broken(shown_lines, verify.get("rc")):
            self._stage("verify")
            lines = decide.verify_lines(shown_lines, [str(line) for line in verify.get("stderr_lines") or []])
            self._refuse("Deploy | Refuse the change", decide.broken_message(unit, self.host, lines))

    def _silence(self, restart: bool) -> None:
        """The silence an interrupted run left in the run record expired; then, before the host leaves the
        router and anything stops, its alerts silenced for the restart, and the silence noted in the run
        record (the next run finds it there). Alertmanager not answering is a warning, never a failure."""
        warnings = self.facts["sglang_restart_silence_warnings"]
        run_id = self.facts["sglang_restart_run_id"]
        earlier = _silences.left_by_earlier_run(self.earlier_record, run_id)
        wanted = _silences.wanted(self.options, self.check_mode, restart)
        if not earlier and not wanted:
            return
        self._stage("silence")
        api_key = str(self.steps.variable("sglang_restart_alertmanager_api_key", "") or "")
        headers = self.options.get("alertmanager_headers") or {}
        if earlier:
            url = str(earlier.get("url") or self.options.get("alertmanager_url") or "")
            alertmanager, problem = _silences.client(self.options, api_key, headers, url)
            if alertmanager is not None:
                problem = expire_silence(alertmanager, str(earlier["id"]), self.host)
            if problem:
                warnings.append(problem)
            else:
                self._say([f"expired the silence {earlier['id']} an earlier run ({(self.earlier_record or {}).get('run_id')}) left"])
        if not wanted:
            self.facts["sglang_restart_record"] = self._record("Silence | Note in the run record that no silence is left", "silence", {"silence": None})
            return
        seconds, why = _silences.seconds(self.options, self._good_starts())
        alertmanager, problem = _silences.client(self.options, api_key, headers)
        silence_id = None
        if alertmanager is not None:
            controller = str(self.task_vars.get("inferops_controller") or socket.gethostname())
            comment = _silences.comment(run_id, self.host, controller, getpass.getuser(), why)
            started = time.monotonic()
            silence_id, problem = silence_host(alertmanager, self.host, seconds, run_id, comment=comment)
            self.steps.note("Silence | Silence the host's alerts in Alertmanager for the restart", {}, time.monotonic() - started)
        if problem:
            warnings.append(problem)
        silence = _silences.noted(silence_id, alertmanager.url, self.host, time.time() + seconds) if silence_id and alertmanager else None
        self.facts["sglang_restart_silence"] = silence
        self.facts["sglang_restart_record"] = self._record("Silence | Note the silence in the run record", "silence", {"silence": silence})
        if silence:
            self._say([f"alerts silenced in Alertmanager (silence {silence_id}, {why})"])

    def _good_starts(self) -> list[dict[str, t.Any]]:
        """The host's good starts, for the silence's length (none when the history is off or unreadable)."""
        if not self.options.get("history"):
            return []
        read = self._module(
            "Silence | Read this host's start history of the unit", "inferops.runbooks.start_history", history_args(self.options), may_fail=True
        )
        return [dict(start) for start in read.get("good_starts") or [] if isinstance(start, t.Mapping)]

    def _take_out(self, plan: t.Mapping[str, t.Any]) -> None:
        """Before anything stops, the host leaves the rotation: noted in the run record first (a run
        killed from here on leaves the host possibly out of rotation, with what puts it back), then its
        worker taken out of the router (called from the controller); the user's drain hooks run next, in
        the role. A failure here stops nothing."""
        router = decide.router_url(self.options, plan)
        hooks = len(self.options.get("drain_hooks") or []) > 0
        if not decide.drain_wanted(self.options, plan):
            return
        self._stage("drain")
        worker_url = self._worker_url()
        known = self.facts.get("sglang_restart_router_worker") or None
        traffic = {"out": True, "router_url": router, "worker": registration(worker_url, known)}
        traffic["hooks"] = hooks or bool(self.facts.get("sglang_restart_drain_hooks_ran"))
        self.facts["sglang_restart_record"] = self._record("Drain | Note in the run record that the host leaves the rotation", "drain", {"traffic": traffic})
        if router:
            self._take_out_of_router(router, worker_url, known)
        if hooks:
            self.facts["sglang_restart_drain_hooks_ran"] = self.drain_hooks_due = True

    def _take_out_of_router(self, router: str, worker_url: str, known: t.Mapping[str, t.Any] | None) -> None:
        """The worker's registration kept in the run record, the worker removed, and waited for until
        the router no longer lists it. A worker an earlier run took out is not listed: its registration
        is the run record's."""
        step = "Drain | Take the worker out of the router"

        def keep(kept: t.Mapping[str, t.Any]) -> None:
            self.facts["sglang_restart_record"] = self._record(
                "Drain | Keep the worker's registration in the run record, to add it back as it was", "drain", {"traffic": {"worker": dict(kept)}}
            )

        admin_key = str(self.steps.variable("sglang_restart_router_api_key", "") or "") or None
        started = time.monotonic()
        try:
            taken = Router(router, admin_key).take_out(worker_url, known, self.host, int(self.options["router_timeout"]), keep)
        except RouterError as error:
            self.facts["sglang_restart_traffic_removed"] = error.removed or bool(self.facts.get("sglang_restart_traffic_removed"))
            self.steps.note(step, {"failed": True}, time.monotonic() - started)
            raise StepFailed("drain", step, {"failed": True, "msg": str(error)}) from None
        self.steps.note(step, {}, time.monotonic() - started)
        self.facts["sglang_restart_router_worker"] = {**taken["registration"], "registered": taken["removed"]}
        self.facts["sglang_restart_traffic_removed"] = taken["removed"] or bool(self.facts.get("sglang_restart_traffic_removed"))

    # -- how a step runs ---------------------------------------------------------------------------

    def _stage(self, stage: str) -> None:
        self.stage = self.facts["sglang_restart_stage"] = stage

    def _module(self, step: str, name: str, args: t.Mapping[str, t.Any], *, always: bool = False, may_fail: bool = False) -> Result:
        result = self.steps.module(self.stage, step, name, args, always=always, may_fail=may_fail)
        if result.get("changed") and not self.check_mode and name not in ("inferops.runbooks.run_record", "ansible.builtin.systemd_service"):
            self.changed = True
        return result

    def _record(self, step: str, record_step: str, updates: t.Mapping[str, t.Any]) -> Result:
        """Advance the run record on the host to ``record_step`` of this run."""
        return without_invocation(advance_record(self.steps, self.stage, step, self.options["unit"], self.facts["sglang_restart_run_id"], record_step, updates))

    def _action(self, step: str, name: str, args: t.Mapping[str, t.Any], *, diff: bool | None = None) -> Result:
        """Another action plugin (``copy`` with content: its transfer and its diff); StepFailed when it failed."""
        with self.diff(diff):
            result = self.steps.run_action(name, args)
        self.steps.done[-1]["step"] = step
        if result.get("failed") or result.get("unreachable"):
            raise StepFailed(self.stage, step, result)
        if result.get("changed"):
            self.changed = True
        return result

    def _refuse(self, step: str, msg: str) -> t.NoReturn:
        self.steps.note(step, {"failed": True}, 0.0)
        raise StepFailed(self.stage, step, {"failed": True, "changed": False, "msg": msg})

    def _say(self, lines: t.Sequence[str]) -> None:
        for line in lines:
            display.display(f"{self.host}: {line}")

    def _worker_url(self) -> str:
        return _observed.worker_url(self.options, str(self.task_vars.get("ansible_host") or self.host))
