"""Deploying a change with playbooks/restart_sglang.yml, for real: a systemd drop-in (and an
environment file) written on systemd hosts running the simulator, the unit checked after
daemon-reload, a failed start rolled back, and the host drained from and put back into the real
SGLang Model Gateway (smg, on this machine: tests/harness/gateway.py), whose own log tells every call
it answered and every worker it added or removed.

The new configuration switches the simulator's model (SIM_MODEL, visible in /v1/models), so what
a host serves tells which configuration it runs. Cold starts are a few seconds (FAST).
"""

from __future__ import annotations

import json
import re
import shlex
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.fleet import SCENARIO_FILE, Fleet
from tests.harness.gateway import SERVED_TO_CONTROLLER, Gateway, behind_gateway, worker_urls
from tests.integration.conftest import QUICK as ROLE_QUICK
from tests.integration.conftest import RunPlaybook, RunRunner, flat

PLAYBOOK = "playbooks/restart_sglang.yml"
UNIT = "sglang.service"
DROPIN_DIR = f"/etc/systemd/system/{UNIT}.d"
DROPIN = f"{DROPIN_DIR}/50-inferops-deploy.conf"
ENV_FILE = "/etc/sglang/deploy.env"
FAST = {"SIM_SPEED": "0.15", "SIM_WARMUP_SECONDS": "1", "SIM_TP": "8", **SERVED_TO_CONTROLLER}
# the router's wait outlasts the gateway's drain of a removed worker (about 5 s)
QUICK = {**ROLE_QUICK, "sglang_restart_soak": 1, "sglang_restart_router_timeout": 15, "sglang_restart_drain_timeout": 60}
OLD_MODEL = "/models/DeepSeek-R1"
NEW_MODEL = "/models/DeepSeek-R1-0528"
OLD_DROPIN = f"[Service]\nEnvironment=SIM_MODEL={OLD_MODEL}\n"
NEW_DROPIN = f"[Service]\nEnvironmentFile={ENV_FILE}\n"
NEW_ENV = f"SIM_MODEL={NEW_MODEL}\n"
ADMIN_KEY = "router-admin-key-5c1e9a7d3f"
# the new configuration crashes while loading weights on sim2 only (a template, rendered per host)
CRASH_ON_SIM2 = (
    "[Service]\nEnvironment=SIM_MODEL=" + NEW_MODEL + "{% if inventory_hostname == 'sim2' %} SIM_SCENARIO=crash SIM_PHASE=loading_weights{% endif %}\n"
)


def invocation(fleet: Fleet, host: str) -> str:
    return fleet.unit_property(host, "InvocationID")


def read_file(fleet: Fleet, host: str, path: str) -> str | None:
    proc = fleet.ssh(host, f"cat {shlex.quote(path)}", check=False)
    return proc.stdout if proc.returncode == 0 else None


def served_model(fleet: Fleet, host: str) -> str:
    code = "import json,urllib.request as u;print(json.load(u.urlopen('http://127.0.0.1:30000/v1/models',timeout=5))['data'][0]['id'])"
    return fleet.ssh(host, f"python3 -c {shlex.quote(code)}").stdout.strip()


def start_with(fleet: Fleet, hosts: list[str], dropin: str | None = OLD_DROPIN, router: Gateway | None = None, **scenario: str) -> dict[str, str]:
    """Start the simulator everywhere on the 'previous' configuration, each host then registered with
    the router when there is one; return the InvocationIDs."""
    for host in hosts:
        fleet.set_scenario(host, **FAST, **scenario)
        if dropin is not None:
            fleet.ssh(host, f"mkdir -p {DROPIN_DIR} && printf %s {shlex.quote(dropin)} > {DROPIN} && systemctl daemon-reload")
        fleet.ssh(host, f"systemctl start {UNIT}")
    if router is not None:
        behind_gateway(router, fleet, hosts)
    return {host: invocation(fleet, host) for host in hosts}


workers = worker_urls


def report(directory: Path, host: str) -> dict[str, object]:
    data = json.loads((directory / f"{host}.json").read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture
def router() -> Iterator[Gateway]:
    """The gateway on 127.0.0.1 of the controller, with its admin key; start_with registers the hosts."""
    with Gateway(admin_key=ADMIN_KEY) as gateway:
        yield gateway


HOOK = """\
- name: Record the hook, its host and the outcome
  ansible.builtin.lineinfile:
    path: "{{ hook_log }}"
    line: "{{ sglang_restart_hook_stage }} {{ sglang_restart_hook_host }} {{ sglang_restart_hook_outcome }}"
    create: true
    mode: "0644"
  delegate_to: localhost
"""


def hooks(tmp_path: Path) -> tuple[dict[str, object], Path]:
    """Drain and restore hooks that write '<stage> <host> <outcome>' lines to a file on the controller."""
    hook = tmp_path / "hook.yml"
    hook.write_text(HOOK)
    log = tmp_path / "hooks.log"
    return {"sglang_restart_drain_hooks": [str(hook)], "sglang_restart_restore_hooks": str(hook), "hook_log": str(log)}, log


def deploy_vars(router: Gateway, tmp_path: Path, **extra: object) -> dict[str, object]:
    return {
        **QUICK,
        "sglang_restart_router_url": router.url,
        "sglang_restart_router_api_key": ADMIN_KEY,
        "sglang_restart_report_dir": str(tmp_path),
        **extra,
    }


def test_good_configuration_rolls_out_host_by_host(fleet: Fleet, hosts: list[str], router: Gateway, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """A drop-in and an environment file on 3 hosts: each host is taken out of the router, drained
    (a request in flight on sim1 is waited for), restarted on the new configuration and put back
    after its pass, one host after the other. Run again, nothing is restarted and the router is
    left alone. The admin key is never printed."""
    before = start_with(fleet, hosts, router=router, SIM_GENERATE_SECONDS="25")
    urls = workers(fleet, hosts)
    # a generation that runs for 25 s on sim1 (longer than the run takes to reach the drain): the drain waits for it
    request = "import urllib.request as u; u.urlopen(u.Request('http://127.0.0.1:30000/generate', data=b'{}'), timeout=30)"
    fleet.ssh(hosts[0], f"systemd-run --unit=inflight --collect python3 -c {shlex.quote(request)}")
    hook_vars, hook_log = hooks(tmp_path)
    new = {"sglang_restart_dropin_content": NEW_DROPIN, "sglang_restart_env_file": ENV_FILE, "sglang_restart_env_content": NEW_ENV}
    extra = deploy_vars(router, tmp_path, **new, **hook_vars)
    run = run_playbook(PLAYBOOK, "-v", extra_vars=extra)
    out = flat(run.output)
    assert run.returncode == 0, run
    assert ADMIN_KEY not in out
    # no templating in the deploy, drain or restore steps that a newer ansible-core deprecates
    assert "DEPRECATION WARNING" not in out, run

    for host in hosts:
        assert invocation(fleet, host) != before[host]
        assert read_file(fleet, host, DROPIN) == NEW_DROPIN
        assert read_file(fleet, host, f"{DROPIN}.previous") == OLD_DROPIN
        assert read_file(fleet, host, ENV_FILE) == NEW_ENV
        assert served_model(fleet, host) == NEW_MODEL
        assert f"{host} {UNIT}: PASS (ready)" in out
        data = report(tmp_path, host)
        assert data["state"] == "new_configuration"
        assert data["traffic"]["removed"] and data["traffic"]["restored"]  # type: ignore[index]
    # one host after the other: removed, then added back, before the next host is touched
    assert router.changes() == [(verb, urls[host]) for host in hosts for verb in ("remove", "add")]
    assert all(call.authorized for call in router.calls)
    hook_lines = [f"{stage} {host} {outcome}" for host in hosts for stage, outcome in (("drain", "draining"), ("restore", "new_configuration"))]
    assert hook_log.read_text().splitlines() == hook_lines
    assert sorted(urls.values()) == router.registered()
    # restarted in order (the monotonic clock is shared by the hosts)
    started = [int(fleet.unit_property(host, "ActiveEnterTimestampMonotonic")) for host in hosts]
    assert started == sorted(started)
    # the drain waited for the request in flight on sim1
    drain = report(tmp_path, hosts[0])["traffic"]["drain"]  # type: ignore[index]
    assert drain["running_at_stop"] == 0 and float(drain["seconds"]) >= 1, drain
    assert f"fleet: {len(hosts)} host(s) in the play, {len(hosts)} reached, 0 not touched" in out
    assert f"new configuration: {' '.join(hosts)}" in out

    # the same change again: already in place, nothing restarted, no router call, no hook
    now = invocation(fleet, hosts[0])
    calls = len(router.calls)
    again = run_playbook(PLAYBOOK, extra_vars=extra, limit=hosts[0])
    assert again.returncode == 0, again
    assert invocation(fleet, hosts[0]) == now
    assert len(router.calls) == calls
    assert len(hook_log.read_text().splitlines()) == 2 * len(hosts)
    assert f"already on the new configuration (nothing restarted): {hosts[0]}" in flat(again.output)


def test_a_start_that_fails_is_rolled_back_and_the_rollout_stops(
    fleet: Fleet, hosts: list[str], router: Gateway, run_playbook: RunPlaybook, tmp_path: Path
) -> None:
    """The new configuration crashes while loading weights on sim2: sim1 runs it, sim2 is rolled
    back to its previous drop-in and serves again, sim3 is untouched; the router saw sim2 removed
    and added back only after the rollback start passed; the run fails with both outcomes."""
    first, second, third = hosts[:3]
    before = start_with(fleet, hosts, router=router)
    urls = workers(fleet, hosts)
    template = tmp_path / "deploy.conf.j2"
    template.write_text(CRASH_ON_SIM2)
    hook_vars, hook_log = hooks(tmp_path)
    run = run_playbook(PLAYBOOK, extra_vars=deploy_vars(router, tmp_path / "reports", sglang_restart_dropin_template=str(template), **hook_vars))
    out = flat(run.output)
    assert run.returncode != 0, run

    # sim1: the new configuration
    assert invocation(fleet, first) != before[first]
    assert served_model(fleet, first) == NEW_MODEL
    # sim2: rolled back, serving the previous configuration from a third invocation
    assert read_file(fleet, second, DROPIN) == OLD_DROPIN
    assert fleet.health(second) == "200"
    assert served_model(fleet, second) == OLD_MODEL
    data = report(tmp_path / "reports", second)
    rollback = data["rollback"]
    assert isinstance(rollback, dict)
    # the crash ends in a fatal line, then systemd restarts the unit: the fatal line names it either way
    assert data["verdict"] == "fail" and data["reason"] == "fatal_log" and data["fatal"], data
    assert data["state"] == "rolled_back" and rollback["verdict"] == "pass"
    failed_invocation = data["invocation_id"]
    assert invocation(fleet, second) == rollback["invocation_id"]
    assert rollback["invocation_id"] not in (before[second], failed_invocation)
    assert f"{second} {UNIT}: FAIL ({data['reason']}): rolled back, serving the previous configuration again (rollback start passed in 0m" in out
    assert "CUDA out of memory" in out
    # sim3: never touched
    assert invocation(fleet, third) == before[third]
    assert read_file(fleet, third, DROPIN) == OLD_DROPIN
    assert not (tmp_path / "reports" / f"{third}.json").exists()

    # the router: sim1 out and back, sim2 out and back (after its rollback start passed), sim3 never
    assert router.changes() == [("remove", urls[first]), ("add", urls[first]), ("remove", urls[second]), ("add", urls[second])]
    expected_hooks = ["drain sim1 draining", "restore sim1 new_configuration", "drain sim2 draining", "restore sim2 rolled_back"]
    assert hook_log.read_text().splitlines() == expected_hooks
    # (the gateway's log stamps whole seconds, as the unit's start time is read here: within 2 s)
    added_back = next(change.at for change in reversed(router.timed_changes()) if change.verb == "add")
    rollback_started = int(fleet.ssh(second, f'date -d "$(systemctl show -p ActiveEnterTimestamp --value {UNIT})" +%s').stdout)
    assert added_back >= rollback_started + float(rollback["elapsed"]) - 2

    # both outcomes in the JUnit report, and the end of the play says where every host stands
    suites = ET.parse(tmp_path / "reports" / f"{second}.junit.xml").getroot()
    cases = {case.get("name"): case for case in suites.iter("testcase")}
    assert cases[f"restart {UNIT}"].find("failure") is not None and cases[f"rollback {UNIT}"].find("failure") is None
    assert f"fleet: {len(hosts)} host(s) in the play, 2 reached, {len(hosts) - 2} not touched" in out
    assert f"new configuration: {first}" in out
    assert f"ROLLED BACK (serving the previous configuration): {second}" in out
    assert f"not touched: {' '.join(hosts[2:])}" in out


def test_a_rollback_start_that_fails_too_is_reported_and_stays_out_of_rotation(
    fleet: Fleet, hosts: list[str], router: Gateway, tmp_path: Path, run_runner: RunRunner
) -> None:
    """Both the new configuration and the previous one fail to start (the host itself is broken):
    the report says so plainly, the host fails, and the router never gets it back. Run through
    ansible-runner, the way AWX and pipelines run it: the set_stats artifacts carry both outcomes."""
    host = hosts[0]
    start_with(fleet, [host], router=router)
    fleet.set_scenario(host, **FAST, SIM_SCENARIO="crash", SIM_PHASE="starting", SIM_FAILURE="nccl")  # applies at the next start
    optional_env = NEW_DROPIN.replace(ENV_FILE, "-" + ENV_FILE)
    extravars = deploy_vars(router, tmp_path / "reports", sglang_restart_dropin_content=optional_env)
    runner = run_runner(PLAYBOOK, tmp_path / "runner", limit=host, extravars=extravars)
    out = flat(runner.stdout.read())
    assert runner.rc != 0, out[-3000:]
    # the crash ends in a fatal line, then systemd restarts the unit: the fatal line names it either way
    assert re.search(rf"{host} {UNIT}: FAIL \(fatal_log\): rolled back, but the rollback start FAILED too \(fatal_log after 0m", out), out[-3000:]
    assert "the host serves nothing and stays out of rotation" in out
    assert ADMIN_KEY not in out
    data = report(tmp_path / "reports", host)
    assert data["state"] == "rollback_failed"
    assert data["rollback"]["verdict"] == "fail" and data["rollback"]["fatal"]  # type: ignore[index]
    assert data["fatal"], "the failed new start keeps its evidence"
    assert "NCCL error" in out
    assert read_file(fleet, host, DROPIN) == OLD_DROPIN
    assert router.changes() == [("remove", workers(fleet, [host])[host])]
    assert "DOWN (rollback failed): " + host in out
    stats = [e for e in runner.events if e.get("event") == "playbook_on_stats"]
    artifacts = stats[-1]["event_data"]["artifact_data"]["sglang_restart"][host]
    assert (artifacts["verdict"], artifacts["reason"], artifacts["state"]) == ("fail", data["reason"], "rollback_failed")
    assert artifacts["rollback_verdict"] == "fail" and artifacts["rollback_invocation_id"] == data["rollback"]["invocation_id"]  # type: ignore[index]
    assert artifacts["traffic_removed"] is True and artifacts["traffic_restored"] is False


def test_check_diff_shows_the_change_and_touches_nothing(fleet: Fleet, hosts: list[str], router: Gateway, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """--check --diff with a new drop-in: the diff of the drop-in is shown, the file is not written,
    nothing is restarted and the router is not called."""
    host = hosts[0]
    before = start_with(fleet, [host], router=router)
    run = run_playbook(PLAYBOOK, "--check", "--diff", extra_vars=deploy_vars(router, tmp_path, sglang_restart_dropin_content=NEW_DROPIN), limit=host)
    out = flat(run.output)
    assert run.returncode == 0, run
    assert f"-Environment=SIM_MODEL={OLD_MODEL}" in out and f"+EnvironmentFile={ENV_FILE}" in out
    assert f"Change: drop-in {DROPIN} would be written" in out
    assert "A real run would stop it" in out
    assert invocation(fleet, host) == before[host]
    assert read_file(fleet, host, DROPIN) == OLD_DROPIN
    assert router.calls == []


def test_an_environment_file_keeps_its_mode_and_its_secrets_stay_out_of_the_diff(
    fleet: Fleet, hosts: list[str], router: Gateway, run_playbook: RunPlaybook, tmp_path: Path
) -> None:
    """An environment file that exists with mode 0600 and holds a token: --check --diff shows the
    drop-in's change but not the environment file's content; the real run writes it and keeps 0600."""
    host = hosts[0]
    start_with(fleet, [host], router=router)
    fleet.ssh(host, f"mkdir -p /etc/sglang && printf 'HF_TOKEN=hf_old_Wq8z\\n' > {ENV_FILE} && chmod 0600 {ENV_FILE}")
    change = {"sglang_restart_dropin_content": NEW_DROPIN, "sglang_restart_env_file": ENV_FILE, "sglang_restart_env_content": "HF_TOKEN=hf_new_Xk3v\n"}
    run = run_playbook(PLAYBOOK, "--check", "--diff", extra_vars=deploy_vars(router, tmp_path, **change), limit=host)
    out = flat(run.output)
    assert run.returncode == 0, run
    assert f"+EnvironmentFile={ENV_FILE}" in out
    assert "hf_old_Wq8z" not in out and "hf_new_Xk3v" not in out
    run = run_playbook(PLAYBOOK, "--diff", extra_vars=deploy_vars(router, tmp_path, **change), limit=host)
    assert run.returncode == 0, run
    assert "hf_old_Wq8z" not in run.output and "hf_new_Xk3v" not in run.output
    assert fleet.ssh(host, f"stat -c %a {ENV_FILE}").stdout.strip() == "600"
    assert read_file(fleet, host, ENV_FILE) == "HF_TOKEN=hf_new_Xk3v\n"


def test_a_drop_in_that_breaks_the_unit_is_caught_before_the_stop(
    fleet: Fleet, hosts: list[str], router: Gateway, run_playbook: RunPlaybook, tmp_path: Path
) -> None:
    """A second ExecStart= without clearing the first: the unit no longer loads after daemon-reload.
    Caught before the stop, the previous drop-in is put back, nothing restarted, no router call.
    And a typo in a deploy variable is refused before anything is written."""
    host = hosts[0]
    before = start_with(fleet, [host], router=router)
    bad = "[Service]\nExecStart=/usr/bin/python3 -u /opt/sglang-sim/sglang_sim.py --mem-fraction-static 0.95\n"
    run = run_playbook(PLAYBOOK, extra_vars=deploy_vars(router, tmp_path, sglang_restart_dropin_content=bad), limit=host)
    out = flat(run.output)
    assert run.returncode != 0, run
    assert f"{host} {UNIT}: FAIL (unit_invalid): the previous configuration was put back, nothing was restarted" in out
    assert "LoadState=bad-setting" in out
    assert "more than one ExecStart= setting" in out
    assert invocation(fleet, host) == before[host]
    assert read_file(fleet, host, DROPIN) == OLD_DROPIN
    assert fleet.unit_property(host, "LoadState") == "loaded"
    assert router.calls == []

    mistakes = {"sglang_restart_dropin_name": "deploy.txt", "sglang_restart_router_url": "router:30000"}
    typo = deploy_vars(router, tmp_path, sglang_restart_dropin_content=NEW_DROPIN, **mistakes)
    run = run_playbook(PLAYBOOK, extra_vars=typo, limit=host)
    assert run.returncode != 0, run
    assert "sglang_restart_dropin_name must be a file name ending in .conf" in flat(run.output)
    assert "sglang_restart_router_url must be an http:// or https:// URL with a host, got 'router:30000'" in flat(run.output)
    assert "FAIL (invalid_options)" in flat(run.output)
    assert invocation(fleet, host) == before[host]
    assert read_file(fleet, host, DROPIN) == OLD_DROPIN
    assert router.calls == []


def test_a_second_run_of_the_role_in_the_play_decides_on_its_own_outcome(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """A deploy that passed, then the role again on the same host with nothing to deploy and a start
    that crashes: the second run fails as a plain failed restart; it does not roll back a change it
    never applied (the first run's facts are forgotten)."""
    start_with(fleet, [host])
    new_dropin = f"[Service]\nEnvironment=SIM_MODEL={NEW_MODEL}\n"
    crash = "".join(f"{key}={value}\n" for key, value in {**FAST, "SIM_SCENARIO": "crash", "SIM_PHASE": "loading_weights"}.items())
    run = run_playbook(
        Path(__file__).parent / "playbooks" / "restart_twice.yml",
        extra_vars={**QUICK, "report_dir": str(tmp_path), "new_dropin": new_dropin, "scenario_file": SCENARIO_FILE, "crash_scenario": crash},
        limit=host,
    )
    assert run.returncode != 0, run
    first, second = report(tmp_path / "first", host), report(tmp_path / "second", host)
    assert first["verdict"] == "pass" and first["state"] == "new_configuration", first
    assert second["verdict"] == "fail" and second["state"] == "failed", second
    rollback = second.get("rollback") or {}
    assert isinstance(rollback, dict) and not rollback.get("restarted"), rollback
    # the first run's configuration stays: the second run had nothing to put back
    assert read_file(fleet, host, DROPIN) == new_dropin


SERVER_KEY = "sk-sim-server-9d41c7"


def test_the_drain_reads_the_load_of_a_key_protected_server_and_waits_for_its_request(
    fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path
) -> None:
    """SGLang started with --api-key guards /v1/loads and /get_load (401 without the key): the drain
    sends the key, sees the generation in flight, waits for it before the stop, and the report's
    drain section says what it saw, endpoint and status; the key is never printed."""
    start_with(fleet, [host], SIM_API_KEY=SERVER_KEY, SIM_GENERATE_SECONDS="20")
    fleet.wait_for(host, "python3 -c 'import urllib.request as u; u.urlopen(\"http://127.0.0.1:30000/health\", timeout=5)'")
    # a generation that runs for 20 s, sent with the key; its client writes the status it got
    request = (
        "import urllib.request as u; r = u.Request('http://127.0.0.1:30000/generate', data=b'{}', "
        f"headers={{'Authorization': 'Bearer {SERVER_KEY}'}}); open('/tmp/inflight.status', 'w').write(str(u.urlopen(r, timeout=60).status))"
    )
    fleet.ssh(host, f"rm -f /tmp/inflight.status && systemd-run --unit=inflight-keyed --collect python3 -c {shlex.quote(request)}")
    # in flight once the keyless /metrics counts it
    running = (
        "import re, sys, urllib.request as u;"
        " sys.exit(not re.search(rb'num_running_reqs[{][^}]*[}] [1-9]', u.urlopen('http://127.0.0.1:30000/metrics').read()))"
    )
    fleet.wait_for(host, f"python3 -c {shlex.quote(running)}", timeout=10)
    unguarded = fleet.ssh(host, "python3 -c 'import urllib.request as u; u.urlopen(\"http://127.0.0.1:30000/v1/loads\")'", check=False)
    assert "HTTP Error 401" in unguarded.stderr, unguarded  # the load is guarded

    run = run_playbook(PLAYBOOK, limit=host, extra_vars={**QUICK, "sglang_restart_api_key": SERVER_KEY, "sglang_restart_report_dir": str(tmp_path)})
    assert run.returncode == 0, run
    assert SERVER_KEY not in run.output
    drain = report(tmp_path, host)["traffic"]["drain"]  # type: ignore[index]
    loads = "http://127.0.0.1:30000/v1/loads"
    assert (drain["running_at_start"], drain["running_at_stop"], drain["timed_out"], drain["known"]) == (1, 0, False, True), drain
    assert (drain["url"], drain["load_status"], drain["seen"]) == (loads, 200, [{"url": loads, "status": 200, "running": 0, "error": None}]), drain
    assert float(drain["seconds"]) >= 1 and drain["reads"] >= 2, drain
    assert f"drain: 1 request(s) running as it began, 0 request(s) running at the stop (read at {loads}), after " in flat(run.output)
    # the request ended with its answer before the stop
    assert fleet.ssh(host, "cat /tmp/inflight.status").stdout == "200"
