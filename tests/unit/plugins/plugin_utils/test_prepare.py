"""The prepare phase's decisions (plugin_utils/_prepare), on every path."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.plugin_utils import _prepare as prepare
from ansible_collections.inferops.runbooks.plugins.plugin_utils import _rollout
from ansible_collections.inferops.runbooks.plugins.plugin_utils._prepare_phase import slurp_missing, slurped, without_invocation

UNIT = "sglang.service"
DROPIN = f"/etc/systemd/system/{UNIT}.d/deploy.conf"
ENV_FILE = "/etc/sglang/sglang.env"
ACTIVE = {"Id": UNIT, "LoadState": "loaded", "ActiveState": "active", "SubState": "running", "MainPID": 4242, "InvocationID": "abc", "NRestarts": 0}
OPTIONS: dict[str, Any] = {
    "unit": UNIT,
    "dropin_name": "deploy.conf",
    "dropin_content": "",
    "dropin_template": "",
    "env_file": ENV_FILE,
    "env_content": "",
    "env_template": "",
    "force_restart": False,
    "rollback": True,
    "router_url": "",
    "worker_url": "",
    "drain_hooks": [],
    "load_url": "",
    "drain_timeout": 300,
    "stop_first": True,
    "release_timeout": 120,
    "health_url": "http://127.0.0.1:30000/health_generate",
    "port": 30000,
    "budget": 1800,
    "stall_limit": 600,
    "health_successes": 3,
    "soak": 10,
    "smoke_test": True,
    "smoke_url": "http://127.0.0.1:30000/v1/completions",
}


def options(**changes: Any) -> dict[str, Any]:
    return {**OPTIONS, **changes}


def not_rendered(path: str) -> str:
    raise AssertionError(f"{path} rendered, but text was given")


def rendered(path: str) -> str:
    return f"rendered {path}\n"


def dropin(content: str = "[Service]\nEnvironment=A=1\n") -> dict[str, Any]:
    return {"kind": "drop-in", "path": DROPIN, "mode": "0644", "content": content}


def env_file(content: str = "TOKEN=x\n") -> dict[str, Any]:
    return {"kind": "environment file", "path": ENV_FILE, "mode": "0640", "content": content}


def test_a_run_starts_from_its_own_facts_and_nothing_of_an_earlier_run() -> None:
    facts = prepare.run_facts(1700000000.5, "20231114T221320Z-42")
    assert facts["sglang_restart_started_at"] == 1700000000.5 and facts["sglang_restart_run_id"] == "20231114T221320Z-42"
    assert facts["sglang_restart_failure"] is None and facts["sglang_restart_deploy_applied"] is False
    assert facts["sglang_restart_stage"] == "validate" and facts["sglang_restart_router_worker"] is None
    assert facts["sglang_restart_deploy_files"] == [] and facts["sglang_restart_verify"] == {}
    # nothing is shared between two runs' facts
    facts["sglang_restart_plan"]["pending"] = True
    assert prepare.run_facts(0.0, "x")["sglang_restart_plan"] == {}


def test_the_run_id_is_the_utc_time_and_a_draw() -> None:
    assert prepare.run_id("20260101T120000Z", 4242) == "20260101T120000Z-4242"


@pytest.mark.parametrize(("path", "expected"), [("templates/x.j2", "/play/templates/x.j2"), ("/abs/x.j2", "/abs/x.j2")])
def test_a_template_is_relative_to_the_playbook(path: str, expected: str) -> None:
    assert prepare.template_path(path, "/play") == expected


def test_the_drop_in_directory_is_named_after_the_units_id_or_its_name() -> None:
    assert prepare.dropin_dir({"Id": "sglang@0.service"}, "alias.service") == "/etc/systemd/system/sglang@0.service.d"
    assert prepare.dropin_dir({}, UNIT) == f"/etc/systemd/system/{UNIT}.d"


def test_no_change_requested_renders_nothing() -> None:
    assert prepare.requested_files(options(), ACTIVE, not_rendered, "/play") == []


def test_text_is_taken_as_given_and_a_template_is_rendered() -> None:
    files = prepare.requested_files(options(dropin_content="[Service]\n", env_template="env.j2"), ACTIVE, rendered, "/play")
    assert files == [
        {"kind": "drop-in", "path": DROPIN, "mode": "0644", "content": "[Service]\n"},
        {"kind": "environment file", "path": ENV_FILE, "mode": "0640", "content": "rendered /play/env.j2\n"},
    ]
    files = prepare.requested_files(options(dropin_template="/t/d.j2", env_content="A=1\n"), ACTIVE, rendered, "/play")
    assert [entry["content"] for entry in files] == ["rendered /t/d.j2\n", "A=1\n"]


def test_a_file_the_host_lacks_or_holds_otherwise_is_changed() -> None:
    files = [dropin(), env_file()]
    compared = prepare.compare(files, {DROPIN: "[Service]\nEnvironment=A=0\n", ENV_FILE: None}, {})
    assert [(entry["existed"], entry["backed_up"], entry["changed"]) for entry in compared] == [(True, False, True), (False, False, True)]
    assert compared[0]["previous"] == "[Service]\nEnvironment=A=0\n" and compared[1]["previous"] is None
    assert prepare.changed(compared) == compared


def test_a_file_already_in_place_is_unchanged() -> None:
    compared = prepare.compare([dropin()], {DROPIN: dropin()["content"]}, {})
    assert compared[0]["changed"] is False and compared[0]["existed"] is True
    assert prepare.changed(compared) == [] and prepare.backups_to_keep(compared) == [] and prepare.stale_backups(compared) == []


@pytest.mark.parametrize("existed", [True, False])
def test_a_file_an_earlier_run_never_proved_counts_as_changed_and_keeps_that_runs_backup(existed: bool) -> None:
    plan = {"unproven": [{"path": DROPIN, "existed": existed}]}
    compared = prepare.compare([dropin()], {DROPIN: dropin()["content"]}, prepare.unproven_files(plan))
    assert (compared[0]["changed"], compared[0]["backed_up"], compared[0]["existed"]) == (True, True, existed)
    # its backup is that run's: neither written again nor removed
    assert prepare.backups_to_keep(compared) == [] and prepare.stale_backups(compared) == []


def test_a_changed_file_that_existed_is_backed_up_and_a_new_one_loses_a_stale_backup() -> None:
    compared = prepare.compare([dropin(), env_file()], {DROPIN: "old\n", ENV_FILE: None}, {})
    assert [entry["path"] for entry in prepare.backups_to_keep(compared)] == [DROPIN]
    assert [entry["path"] for entry in prepare.stale_backups(compared)] == [ENV_FILE]


def test_a_file_that_exists_keeps_its_mode_and_only_a_drop_in_shows_its_diff() -> None:
    assert prepare.write_mode({"existed": True, "mode": "0640"}) is None
    assert prepare.write_mode({"existed": False, "mode": "0640"}) == "0640"
    assert prepare.diff_shown(dropin()) is True and prepare.diff_shown(env_file()) is False
    assert prepare.parent(DROPIN) == f"/etc/systemd/system/{UNIT}.d" and prepare.parent("x") == ""


def test_a_host_left_out_of_rotation_is_taken_over() -> None:
    assert prepare.takeover({"out_of_rotation": False, "router_url": "http://r"}) == {}
    plan = {"out_of_rotation": True, "router_url": "http://r:30000", "worker": {"url": "http://w"}, "hooks_ran": True}
    assert prepare.takeover(plan) == {
        "sglang_restart_traffic_removed": True,
        "sglang_restart_router_worker": {"url": "http://w"},
        "sglang_restart_drain_hooks_ran": True,
    }
    # out of rotation by hooks alone: no router to put it back into
    assert prepare.takeover({**plan, "router_url": "", "worker": {}})["sglang_restart_traffic_removed"] is False


def test_what_an_earlier_run_left_is_said_only_when_it_left_something() -> None:
    assert prepare.repairs_message({"pending": False, "problem": None, "repairs": []}) == []
    assert prepare.repairs_message({"pending": True, "problem": None, "repairs": ["out of rotation"]}) == ["out of rotation"]
    assert prepare.repairs_message({"pending": False, "problem": "corrupt record", "repairs": []}) == ["corrupt record"]
    assert prepare.repairs_message({"pending": True, "problem": "newer", "repairs": ["a", "b"]}) == ["newer", "a", "b"]
    # a problem that is an empty text is said as nothing, but its repairs are
    assert prepare.repairs_message({"pending": True, "problem": "", "repairs": ["a"]}) == ["a"]


def test_a_rollback_cut_short_is_split_into_files_to_put_back_and_to_remove() -> None:
    files = [
        {"path": "/a", "existed": True, "backup_intact": True},
        {"path": "/b", "existed": False, "backup_intact": True},
        {"path": "/c", "existed": True, "backup_intact": False},
    ]
    assert prepare.restore_split(files) == (["/c"], ["/a", "/c"], ["/b"])
    assert prepare.restore_split([]) == ([], [], [])
    assert "backup of /c, /d is not the one it recorded: nothing was put back" in prepare.foreign_backup_message(UNIT, ["/c", "/d"])


def test_a_unit_that_is_not_loaded_is_refused_with_its_load_state() -> None:
    assert prepare.not_loaded_message(UNIT, "gpu0", "not-found") == f"{UNIT} on gpu0 is not loaded (LoadState=not-found): nothing was stopped or started."


@pytest.mark.parametrize(
    ("shown", "rc", "broken"),
    [
        (["LoadState=loaded", "LoadError="], None, False),
        (["LoadState=loaded", "LoadError="], 0, False),
        (["LoadState=loaded", "LoadError="], 1, True),
        (["LoadState=bad-setting", "LoadError=org.freedesktop.systemd1.BadUnitSetting"], None, True),
        ([], None, True),
    ],
)
def test_a_change_breaks_the_unit_when_systemd_does_not_load_it_or_verify_refuses_it(shown: list[str], rc: int | None, broken: bool) -> None:
    assert prepare.unit_broken(shown, rc) is broken


def test_what_systemd_said_names_the_properties_with_a_value_and_verify_errors() -> None:
    lines = prepare.verify_lines(["LoadState=bad-setting", "LoadError=", "LoadError=x=y"], ["deploy.conf:2: more than one ExecStart= setting"])
    assert lines == ["LoadState=bad-setting", "LoadError=x=y", "deploy.conf:2: more than one ExecStart= setting"]
    assert prepare.broken_message(UNIT, "gpu0", lines[:1]) == f"The new configuration breaks {UNIT} on gpu0; nothing was stopped: LoadState=bad-setting"


def scene(**changes: Any) -> prepare.Scene:
    base: dict[str, Any] = {
        "host": "gpu0",
        "options": options(),
        "before": ACTIVE,
        "files": [],
        "plan": {},
        "multi_node": False,
        "worker_url": "http://gpu0:30000",
    }
    return prepare.Scene(**{**base, **changes})


def test_check_mode_says_a_plain_restart_with_its_stop_and_wait() -> None:
    lines = prepare.check_mode_message(scene())
    assert lines == [
        f"CHECK MODE: {UNIT} on gpu0 was not touched.",
        "Now: active (running), main PID 4242, invocation abc, 0 automatic restarts.",
        prepare.NO_CHANGE,
        "Before the stop: no router.",
        "A real run would stop it, wait up to 120 s for main PID 4242 to exit and for 127.0.0.1:30000 to be released, then start it.",
        "Then wait up to 1800 s (stall limit 600 s) for a new invocation that passes http://127.0.0.1:30000/health_generate 3 times, "
        "stays healthy for 10 s and logs nothing but allowlisted noise, then generate one token through http://127.0.0.1:30000/v1/completions.",
    ]


def test_check_mode_says_the_change_the_drain_and_the_rollback() -> None:
    files = prepare.compare([dropin(), env_file()], {DROPIN: "old\n", ENV_FILE: env_file()["content"]}, {})
    opts = options(
        router_url="http://router:30000/", drain_hooks=["a.yml", "b.yml"], load_url="http://127.0.0.1:30000/metrics", stop_first=False, smoke_test=False
    )
    lines = prepare.check_mode_message(scene(options=opts, files=files, before={**ACTIVE, "InvocationID": ""}))
    assert lines[1].endswith("invocation none, 0 automatic restarts.")
    assert lines[2] == f"Change: drop-in {DROPIN} would be written (--diff shows how); environment file {ENV_FILE} already in place."
    assert lines[3] == (
        "Before the stop: take http://gpu0:30000 out of the router http://router:30000 (and put it back after the pass), run 2 drain hook(s), "
        "wait up to 300 s until http://127.0.0.1:30000/metrics shows no running request. A failed start would be rolled back to the previous configuration."
    )
    assert lines[4] == "A real run would restart it (systemctl restart)."
    assert lines[5].endswith("logs nothing but allowlisted noise.")


def test_check_mode_names_the_router_an_earlier_run_left_and_stops_a_deployments_nodes_first() -> None:
    lines = prepare.check_mode_message(scene(plan={"router_url": "http://old-router"}, multi_node=True, options=options(stop_first=False, rollback=False)))
    assert lines[3] == "Before the stop: take http://gpu0:30000 out of the router http://old-router (and put it back after the pass)."
    assert lines[4].startswith("A real run would stop it")


def test_check_mode_says_a_change_in_place_restarts_nothing_unless_forced() -> None:
    files = prepare.compare([dropin()], {DROPIN: dropin()["content"]}, {})
    lines = prepare.check_mode_message(scene(files=files))
    assert lines[2] == f"Change: drop-in {DROPIN} already in place."
    assert lines[3:] == ["A real run would not restart it: the new configuration is already in place (sglang_restart_force_restart restarts anyway)."]
    assert len(prepare.check_mode_message(scene(files=files, options=options(force_restart=True)))) == 6
    # in place, but nothing runs it: started
    assert len(prepare.check_mode_message(scene(files=files, before={**ACTIVE, "ActiveState": "failed"}))) == 6
    # an earlier run's rollback cut short: its files are put back and the unit restarted
    assert len(prepare.check_mode_message(scene(files=files, plan={"restore_files": [{"path": DROPIN}]}))) == 6


def test_the_check_mode_restart_decision_is_the_rollouts() -> None:
    files = prepare.compare([dropin()], {DROPIN: dropin()["content"]}, {})
    observed = {"check_mode": True, "change_requested": True, "change_pending": False, "unit_active": True}
    assert prepare.restart_needed(options(), ACTIVE, files, {}) is _rollout.decide(observed)["restart_needed"] is False


def test_what_slurp_read_is_the_files_text_or_none_when_the_file_is_missing() -> None:
    assert slurped({"content": base64.b64encode("A=é\n".encode()).decode(), "encoding": "base64"}) == "A=é\n"
    assert slurped({"failed": True, "msg": "file not found: /x"}) is None
    assert slurp_missing({"failed": True, "msg": "file not found: /x"}) is True
    assert slurp_missing({"failed": True, "msg": "Permission denied"}) is False
    assert slurp_missing({"content": ""}) is False


def test_a_result_is_kept_without_the_arguments_it_was_called_with() -> None:
    assert without_invocation({"unit": {"Id": UNIT}, "invocation": {"module_args": {"unit": UNIT}}, "changed": False}) == {
        "unit": {"Id": UNIT},
        "changed": False,
    }


def test_the_host_leaves_the_rotation_when_it_has_a_router_or_drain_hooks() -> None:
    assert not prepare.drain_wanted({"router_url": "", "drain_hooks": []}, {})
    assert prepare.drain_wanted({"router_url": "http://127.0.0.1:30080/", "drain_hooks": []}, {})
    assert prepare.drain_wanted({"router_url": "", "drain_hooks": ["hooks/lb-out.yml"]}, {})
    # the router an earlier run took the host out of, when this run names none
    assert prepare.drain_wanted({"router_url": ""}, {"router_url": "http://127.0.0.1:30080"})
    assert prepare.router_url({"router_url": "http://127.0.0.1:30080//"}, {}) == "http://127.0.0.1:30080"
