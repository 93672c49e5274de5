# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The decisions of a rollout's ``prepare`` phase (``plugin_utils/_prepare_phase``, which
``plugins/action/prepare.py`` runs), from what it saw: which files the run asks for, which of them
differ from the host's, which backups to keep or remove, whether a change broke the unit, and what the
messages say. Pure functions; no I/O, no Jinja.

Private to the collection; may change at any time. Controller side.
"""

from __future__ import annotations

import copy
import re
import typing as t
import urllib.parse

from ansible_collections.inferops.runbooks.plugins.plugin_utils import _observed, _rollout

File = t.Mapping[str, t.Any]
Render = t.Callable[[str], str]

# what an earlier run of the role in the same play left, forgotten as this run starts: the decisions
# of this run (roll back, restore traffic, the gates of a deployment) rest on what this run did alone
RESET: dict[str, t.Any] = {
    "sglang_restart_stage": "validate",
    "sglang_restart_failure": None,
    "sglang_restart_before": {},
    "sglang_restart_deploy_files": [],
    "sglang_restart_deploy_applied": False,
    "sglang_restart_reached_preflight": False,
    "sglang_restart_router_worker": None,
    "sglang_restart_traffic_removed": False,
    "sglang_restart_drain_hooks_ran": False,
    "sglang_restart_traffic_failure": None,
    "sglang_restart_record": {},
    "sglang_restart_plan": {},
    "sglang_restart_reloaded": {},
    "sglang_restart_verify": {},
    # this run's hold on the host (plugin_utils/_host_lease): taken, renewed or taken over, and from whom
    "sglang_restart_lease": {},
}
RUN_ID_TIME = "%Y%m%dT%H%M%SZ"
DROPIN_MODE, ENV_MODE = "0644", "0640"
ENV_KIND = "environment file"
NO_CHANGE = "Change: none requested (sglang_restart_dropin_content or _template, sglang_restart_env_content or _template)."


def run_facts(started_at: float, run_id: str) -> dict[str, t.Any]:
    """The facts a run starts from: its start time, its id and nothing of an earlier run."""
    return {**copy.deepcopy(RESET), "sglang_restart_started_at": started_at, "sglang_restart_run_id": run_id}


def run_id(utc_time: str, draw: int) -> str:
    """This run in the run record on the host: the UTC start time and a random number."""
    return f"{utc_time}-{draw}"


def template_path(path: str, playbook_dir: str) -> str:
    """A template named relative to the playbook's directory, or absolute."""
    return path if path.startswith("/") else f"{playbook_dir}/{path}"


def dropin_dir(unit: t.Mapping[str, t.Any], unit_name: str) -> str:
    """The unit's drop-in directory, named after its Id (a unit named by an alias has one Id)."""
    return f"/etc/systemd/system/{unit.get('Id') or unit_name}.d"


def requested_files(options: t.Mapping[str, t.Any], unit: t.Mapping[str, t.Any], render: Render, playbook_dir: str) -> list[dict[str, t.Any]]:
    """The files the run asks for, each with its content rendered (text given, or a template through
    ``render``): a drop-in, an environment file, both or none."""
    files: list[dict[str, t.Any]] = []
    if options.get("dropin_content") or options.get("dropin_template"):
        content = options.get("dropin_content") or render(template_path(str(options["dropin_template"]), playbook_dir))
        path = f"{dropin_dir(unit, str(options.get('unit') or ''))}/{options['dropin_name']}"
        files.append({"kind": "drop-in", "path": path, "mode": DROPIN_MODE, "content": content})
    if options.get("env_content") or options.get("env_template"):
        content = options.get("env_content") or render(template_path(str(options["env_template"]), playbook_dir))
        files.append({"kind": ENV_KIND, "path": options["env_file"], "mode": ENV_MODE, "content": content})
    return files


def unproven_files(plan: t.Mapping[str, t.Any]) -> dict[str, bool]:
    """The files an earlier run wrote and never proved, by path: whether each existed before it."""
    return {entry["path"]: bool(entry.get("existed")) for entry in plan.get("unproven") or []}


def compare(files: t.Sequence[File], current: t.Mapping[str, str | None], unproven: t.Mapping[str, bool]) -> list[dict[str, t.Any]]:
    """Each file with what the host holds (``current``: its content, None when absent). A file an
    earlier run wrote and never proved counts as changed: its start is still to pass, and its backup
    (``<file>.previous``) is that run's, which is kept."""
    compared = []
    for entry in files:
        path, now = entry["path"], current.get(entry["path"])
        pending = path in unproven
        compared.append(
            {
                **entry,
                "existed": unproven[path] if pending else now is not None,
                "backed_up": pending,
                "previous": now,
                "changed": pending or now is None or now != entry["content"],
            }
        )
    return compared


def changed(files: t.Sequence[File]) -> list[dict[str, t.Any]]:
    """The files that differ from the host's (or an earlier run never proved)."""
    return [dict(entry) for entry in files if entry.get("changed")]


def drain_wanted(options: t.Mapping[str, t.Any], plan: t.Mapping[str, t.Any]) -> bool:
    """The host is taken out of rotation before its stop: it has a router, or drain hooks."""
    return bool(router_url(options, plan)) or len(options.get("drain_hooks") or []) > 0


def backups_to_keep(files: t.Sequence[File]) -> list[dict[str, t.Any]]:
    """The changed files whose previous content is kept as ``<file>.previous``."""
    return [dict(entry) for entry in changed(files) if entry.get("existed") and not entry.get("backed_up")]


def stale_backups(files: t.Sequence[File]) -> list[dict[str, t.Any]]:
    """The changed files that did not exist: a ``<file>.previous`` left beside them is stale."""
    return [dict(entry) for entry in changed(files) if not entry.get("existed") and not entry.get("backed_up")]


def write_mode(entry: t.Mapping[str, t.Any]) -> str | None:
    """A file that exists keeps its mode (an environment file may be 0600); a new one gets the default."""
    return None if entry.get("existed") else str(entry["mode"])


def diff_shown(entry: t.Mapping[str, t.Any]) -> bool:
    """--diff shows a drop-in, never an environment file: it may hold secrets."""
    return entry.get("kind") != ENV_KIND


def parent(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


def takeover(plan: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """A host an earlier run left out of rotation is this run's to put back once it serves a
    configuration that passed."""
    if not plan.get("out_of_rotation"):
        return {}
    return {
        "sglang_restart_traffic_removed": len(plan.get("router_url") or "") > 0,
        "sglang_restart_router_worker": plan.get("worker"),
        "sglang_restart_drain_hooks_ran": plan.get("hooks_ran"),
    }


def repairs_message(plan: t.Mapping[str, t.Any]) -> list[str]:
    """What an earlier run left and what this run repairs; nothing when it left nothing."""
    if not plan.get("pending") and plan.get("problem") is None:
        return []
    return ([plan["problem"]] if plan.get("problem") else []) + list(plan.get("repairs") or [])


def restore_split(restore_files: t.Sequence[t.Mapping[str, t.Any]]) -> tuple[list[str], list[str], list[str]]:
    """A rollback cut short: (files whose backup is not the recorded one, files to put back from
    their backup, files to remove because they did not exist)."""
    foreign = [entry["path"] for entry in restore_files if not entry.get("backup_intact")]
    back = [entry["path"] for entry in restore_files if entry.get("existed")]
    remove = [entry["path"] for entry in restore_files if not entry.get("existed")]
    return foreign, back, remove


def foreign_backup_message(unit: str, foreign: t.Sequence[str]) -> str:
    return f"The run record of {unit} names a rollback cut short, but the backup of {', '.join(foreign)} is not the one it recorded: nothing was put back."


def not_loaded_message(unit: str, host: str, load_state: t.Any) -> str:
    return f"{unit} on {host} is not loaded (LoadState={load_state}): nothing was stopped or started."


def unit_broken(shown_lines: t.Sequence[str], verify_rc: int | None) -> bool:
    """The change broke the unit: systemd did not load it, or systemd-analyze verify refused it."""
    return "LoadState=loaded" not in shown_lines or (verify_rc or 0) != 0


def verify_lines(shown_lines: t.Sequence[str], verify_errors: t.Sequence[str]) -> list[str]:
    """What systemd said of the unit: the properties with a value, then systemd-analyze's errors."""
    return [line for line in shown_lines if re.search("=.", line)] + list(verify_errors)


def broken_message(unit: str, host: str, lines: t.Sequence[str]) -> str:
    return f"The new configuration breaks {unit} on {host}; nothing was stopped: {'; '.join(lines)}"


def restart_needed(options: t.Mapping[str, t.Any], before: t.Mapping[str, t.Any], files: t.Sequence[File], plan: t.Mapping[str, t.Any]) -> bool:
    """Whether a real run would restart the unit: ``_rollout.decide`` in check mode on the observation
    the restart phase starts from (``_observed.rollout_before_restart``), from what this phase read."""
    facts = {
        "sglang_restart_checked": {"options": dict(options)},
        "sglang_restart_plan": dict(plan),
        "sglang_restart_deploy_files": [dict(entry) for entry in files],
        "sglang_restart_before": {"unit": dict(before)},
    }
    return bool(_rollout.decide(_observed.rollout_before_restart(facts, True))["restart_needed"])


class Scene(t.NamedTuple):
    """What the check-mode message speaks of."""

    host: str
    options: t.Mapping[str, t.Any]
    before: t.Mapping[str, t.Any]
    files: t.Sequence[File]
    plan: t.Mapping[str, t.Any]
    multi_node: bool
    worker_url: str


def router_url(options: t.Mapping[str, t.Any], plan: t.Mapping[str, t.Any]) -> str:
    """The router this run manages: its own, or the one an earlier run took the host out of."""
    return str(options.get("router_url") or plan.get("router_url") or "").rstrip("/")


def check_mode_message(scene: Scene) -> list[str]:
    """What a real run would do, said in check mode (nothing was touched)."""
    opts, before = scene.options, scene.before
    needed = restart_needed(opts, before, scene.files, scene.plan)
    lines = [
        f"CHECK MODE: {opts['unit']} on {scene.host} was not touched.",
        f"Now: {before.get('ActiveState')} ({before.get('SubState')}), main PID {before.get('MainPID')}, "
        f"invocation {before.get('InvocationID') or 'none'}, {before.get('NRestarts')} automatic restarts.",
        _change_line(scene.files),
    ]
    if not needed:
        return [*lines, "A real run would not restart it: the new configuration is already in place (sglang_restart_force_restart restarts anyway)."]
    return [*lines, _before_stop_line(scene), _restart_line(scene), _wait_line(opts)]


def _change_line(files: t.Sequence[File]) -> str:
    if not files:
        return NO_CHANGE
    said = [f"{entry['kind']} {entry['path']} {'would be written (--diff shows how)' if entry.get('changed') else 'already in place'}" for entry in files]
    return f"Change: {'; '.join(said)}."


def _before_stop_line(scene: Scene) -> str:
    opts, router = scene.options, router_url(scene.options, scene.plan)
    hooks = opts.get("drain_hooks") or []
    text = f"take {scene.worker_url} out of the router {router} (and put it back after the pass)" if router else "no router"
    if hooks:
        text += f", run {len(hooks)} drain hook(s)"
    if opts.get("load_url"):
        text += f", wait up to {opts['drain_timeout']} s until {opts['load_url']} shows no running request"
    rollback = " A failed start would be rolled back to the previous configuration." if changed(scene.files) and opts.get("rollback") else ""
    return f"Before the stop: {text}.{rollback}"


def _restart_line(scene: Scene) -> str:
    opts = scene.options
    if opts.get("stop_first") or scene.multi_node:
        port_host = urllib.parse.urlsplit(str(opts["health_url"])).hostname
        return (
            f"A real run would stop it, wait up to {opts['release_timeout']} s for main PID {scene.before.get('MainPID')} "
            f"to exit and for {port_host}:{opts['port']} to be released, then start it."
        )
    return "A real run would restart it (systemctl restart)."


def _wait_line(opts: t.Mapping[str, t.Any]) -> str:
    smoke = f", then generate one token through {opts['smoke_url']}" if opts.get("smoke_test") else ""
    return (
        f"Then wait up to {opts['budget']} s (stall limit {opts['stall_limit']} s) for a new invocation that passes "
        f"{opts['health_url']} {opts['health_successes']} times, stays healthy for {opts['soak']} s and logs nothing "
        f"but allowlisted noise{smoke}."
    )
