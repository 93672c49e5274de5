"""``make demo``: the restart playbook against one real systemd host running the SGLang simulator.

1. Boots one systemd-nspawn host (``Fleet().up(1)``) with the simulator as ``sglang.service``, with a
   drop-in that sets the simulated decode speed (200 tokens/s per request, 0.2 s to the first token).
2. A good restart: a cold start of ~20 s on 8 tensor-parallel ranks, with the benign CUTE_DSL
   warning printed once per rank. The playbook shows progress lines through the start, allowlists
   the warning and passes. The start goes into the host's start history.
3. Learning from past starts: the same configuration restarted again, with a warning no good start
   printed (``Frobnicator returned error state 7``, injected through the simulator's fault file, so
   that the unit's configuration and its baseline stay the same). Its progress lines carry an ETA
   from the good start (``about 18s left (last 1 good start: 20s)``: one good start is enough for
   an ETA, ``sglang_restart_history_min_good`` is left at 3), and the warning is reported as new
   since the last good start. With ``sglang_restart_canary: true`` it also measures the host's
   first performance canary, inconclusive: the baseline of act 5.
4. A bad restart: the same server runs out of GPU memory while capturing CUDA graphs. The playbook
   fails fast, with the traceback (deduplicated across ranks) as evidence.
5. A failed deploy: a new configuration (a systemd drop-in with a bigger model) is applied as part
   of the restart, with the host taken out of a router (the real SGLang Model Gateway, smg, run on
   this machine: tests/harness/gateway.py) first. The new start runs out of GPU memory while loading weights; the playbook puts the previous
   configuration back, starts it again, waits for it with the same gates and puts the host back
   into the router only after that start passed.
6. A deploy rolled back for being slow: a drop-in that makes the server decode ten times slower
   (``SIM_TOKENS_PER_SECOND=20``) passes every health gate, fails its performance canary against
   the baseline of act 2 (thresholds widened for a busy machine: throughput -40%, TTFT p90 +100%,
   ITL p90 +200%), and is rolled back with reason ``performance_regression``; the figures are shown
   beside the baseline, and the rollback start's canary passes.
7. Tears the host down, always (also on Ctrl-C).

Exit code 0 only when the good restart passed, the second one passed with an ETA in its progress
lines and the new warning reported as new (its canary the baseline), the bad restart failed with
reason ``fatal_log``, the failed deploy was rolled back to a passing start, and the slow deploy was
rolled back with reason ``performance_regression``; the demo says so for each.
Run as root from the repository root: ``python -m tests.harness.demo`` (what ``make demo`` does).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from tests.harness.fleet import REPO_ROOT, Fleet, missing_prerequisites
from tests.harness.gateway import SERVED_TO_CONTROLLER, Gateway, behind_gateway

PLAYBOOK = "playbooks/restart_sglang.yml"
# demo speed: the simulator's full 20 s cold start, 8 ranks
GOOD = {"SIM_SCENARIO": "ok", "SIM_SPEED": "1", "SIM_TP": "8"}
BAD = {**GOOD, "SIM_SCENARIO": "crash", "SIM_PHASE": "capturing_cuda_graphs", "SIM_FAILURE": "cuda_oom"}
# the previous configuration of the third act: the scenario file no longer forces a scenario, so the
# drop-in decides; the new one loads a bigger model that does not fit in GPU memory
PREVIOUS = {"SIM_SPEED": "1", "SIM_TP": "8"}
NEW_DROPIN = "[Service]\nEnvironment=SIM_MODEL=/models/DeepSeek-R1-0528-bf16 SIM_SCENARIO=crash SIM_PHASE=loading_weights SIM_FAILURE=cuda_oom\n"
# the previous configuration's drop-in (from the third act on): the decode speed and time to first token
# of a healthy server; the slow deploy of the fifth act makes it ten times slower
DROPIN_DIR = "/etc/systemd/system/sglang.service.d"
DROPIN = f"{DROPIN_DIR}/50-inferops-deploy.conf"
PREVIOUS_DROPIN = "[Service]\nEnvironment=SIM_TOKENS_PER_SECOND=200 SIM_TTFT_SECONDS=0.2\n"
SLOW_DROPIN = "[Service]\nEnvironment=SIM_TOKENS_PER_SECOND=20 SIM_TTFT_SECONDS=0.2\n"
# the fourth act's new warning: through the simulator's fault file, read by the simulator and not by
# systemd, so that the unit's configuration (and the baseline of its starts) stays the same
NEW_WARNING = {"SIM_SCENARIO": "unknown_error"}
# a short canary (8 requests of 32 tokens, 4 at a time), with thresholds wide enough for a busy machine
CANARY = {
    "sglang_restart_canary": True,
    "sglang_restart_canary_requests": 8,
    "sglang_restart_canary_concurrency": 4,
    "sglang_restart_canary_prompt_tokens": 16,
    "sglang_restart_canary_max_tokens": 32,
    "sglang_restart_canary_thresholds": {"throughput": "-40%", "ttft_p90": "+100%", "itl_p90": "+200%"},
}
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# the role's timings for a cold start of tens of seconds (defaults are sized for an hour)
ROLE_VARS = {
    "sglang_restart_budget": 300,
    "sglang_restart_stall_limit": 120,
    "sglang_restart_poll_interval": 2,
    "sglang_restart_heartbeat": 4,
    "sglang_restart_soak": 5,
    "sglang_restart_smoke_test": True,
}


def banner(title: str, text: str = "") -> None:
    width = 78
    print("\n" + "=" * width, flush=True)
    print(f"  {title}", flush=True)
    for line in textwrap.wrap(textwrap.dedent(text).strip(), width - 4) if text else ():
        print(f"  {line}", flush=True)
    print("=" * width + "\n", flush=True)


def run_playbook(fleet: Fleet, report_dir: Path, **more: object) -> int:
    """ansible-playbook with its output streaming straight to this terminal."""
    return run_playbook_output(fleet, report_dir, **more)[0]


def run_playbook_output(fleet: Fleet, report_dir: Path, **more: object) -> tuple[int, str]:
    """ansible-playbook with its output streaming to this terminal, and kept (without colours, folded
    lines joined) for the checks."""
    env = fleet.ansible_env()
    env["ANSIBLE_CONFIG"] = str(REPO_ROOT / "ansible.cfg")
    if sys.stdout.isatty():
        env.pop("ANSIBLE_NOCOLOR", None)
        env["ANSIBLE_FORCE_COLOR"] = "1"
    extra = {**ROLE_VARS, "sglang_restart_report_dir": str(report_dir), **more}
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), PLAYBOOK, "-i", str(fleet.inventory), "-e", json.dumps(extra)]
    print(f"$ ansible-playbook {PLAYBOOK} -i {fleet.inventory} -e '{json.dumps(extra)}'\n", flush=True)
    kept: list[str] = []
    with subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace") as proc:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                kept.append(line)
        except BaseException:
            proc.kill()
            raise
    return proc.returncode, " ".join(ANSI.sub("", "".join(kept)).split()).replace("''", "'")


def read_report(report_dir: Path, host: str) -> dict[str, Any]:
    try:
        data = json.loads((report_dir / f"{host}.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def demo(fleet: Fleet, workdir: Path) -> bool:
    banner(
        "inferops.runbooks demo: restart an SGLang server and prove it came back",
        """
        Booting one real systemd host (a systemd-nspawn container reached over SSH) that runs a
        simulated SGLang server as sglang.service: same log lines, same cold-start phases, same
        HTTP endpoints as the real server, no GPU needed.
        """,
    )
    fleet.up(1)
    host = fleet.hosts[0]
    # the configuration in place from the start: a drop-in with the decode speed of a healthy server
    fleet.ssh(host, f"mkdir -p {DROPIN_DIR} && printf %s {shlex.quote(PREVIOUS_DROPIN)} > {DROPIN} && systemctl daemon-reload")
    print(f"{host}: {DROPIN} sets the simulated decode speed (200 tokens/s per request) and time to first token (0.2 s)", flush=True)

    banner(
        "1/5  A good restart",
        """
        The server loads a large model on 8 GPUs: weights, KV cache, CUDA graph capture, warm-up,
        about 20 seconds here (10-60 minutes in real life). The port stays closed until the end,
        which is normal. Every rank prints "Unexpected error during package walk" (a harmless
        CUTE_DSL warning): watch it being allowlisted, not failing the run. The playbook passes only
        when the unit is active, /health_generate answers, and a one-token generation works.
        """,
    )
    fleet.set_scenario(host, **GOOD)
    good_dir = workdir / "good"
    good_rc = run_playbook(fleet, good_dir)
    good = read_report(good_dir, host)
    passed = good_rc == 0 and good.get("verdict") == "pass"
    print(f"\n>>> first run: exit code {good_rc}, verdict {good.get('verdict')} ({good.get('reason')})", flush=True)

    learned = learning(fleet, host, workdir / "history")

    banner(
        "3/5  A bad restart",
        """
        Same server, but this time a rank runs out of GPU memory while capturing CUDA graphs: the
        scheduler prints a traceback, the main process gets SIGQUIT and is killed, and systemd
        restarts it. The playbook stops waiting at the first fatal line, shows the evidence
        (deduplicated across ranks) and fails, instead of sitting out an hour-long budget.
        """,
    )
    fleet.set_scenario(host, **BAD)
    bad_dir = workdir / "bad"
    started = time.monotonic()
    bad_rc = run_playbook(fleet, bad_dir)
    bad = read_report(bad_dir, host)
    failed_fast = bad_rc != 0 and bad.get("verdict") == "fail" and bad.get("reason") == "fatal_log"
    print(
        f"\n>>> third run: exit code {bad_rc}, verdict {bad.get('verdict')} ({bad.get('reason')}) after {time.monotonic() - started:.0f} s",
        flush=True,
    )

    rolled_back = failed_deploy(fleet, host, workdir / "deploy")
    slow_rolled_back = slow_deploy(fleet, host, workdir / "slow")

    ok = passed and failed_fast and rolled_back and learned and slow_rolled_back
    bad_outcome = "failed fast with reason fatal_log" if failed_fast else "did NOT fail as expected"
    deploy_outcome = "rolled back to a passing start" if rolled_back else "was NOT rolled back as expected"
    learned_outcome = "showed an ETA and the new warning" if learned else "did NOT show an ETA and the new warning as expected"
    slow_outcome = "rolled back for performance_regression" if slow_rolled_back else "was NOT rolled back as expected"
    banner(
        "Demo " + ("succeeded" if ok else "FAILED"),
        f"""
        Good restart: {"passed" if passed else "did NOT pass"}. Learning from past starts: {learned_outcome}. Bad restart: {bad_outcome}.
        Failed deploy: {deploy_outcome}. Slow deploy: {slow_outcome}.
        JSON and JUnit XML reports were written to {workdir}/good, history, bad, deploy and slow (a temporary directory, removed now).
        """,
    )
    return ok


def failed_deploy(fleet: Fleet, host: str, report_dir: Path) -> bool:
    """Act 4: a new configuration whose start fails, rolled back; the router sees the host go and come back."""
    banner(
        "4/5  A failed deploy, rolled back",
        """
        The server runs again on its previous configuration (a drop-in that sets its decode speed).
        Now a new one is deployed with the restart: a systemd drop-in that loads a bigger model. Before the stop the host is taken out
        of the router (the SGLang Model Gateway, smg, running on this machine) and the playbook
        waits until the server runs no more requests. The new start runs out of GPU memory while
        loading weights: the playbook puts the previous drop-in back, starts the server again, waits
        for that start with the same gates, and only then puts the host back into the router.
        """,
    )
    fleet.set_scenario(host, **PREVIOUS, **SERVED_TO_CONTROLLER)
    fleet.ssh(host, "systemctl reset-failed sglang.service; systemctl restart sglang.service")
    with Gateway() as router:
        worker = behind_gateway(router, fleet, [host])[host]
        started = time.monotonic()
        rc = run_playbook(fleet, report_dir, sglang_restart_dropin_content=NEW_DROPIN, sglang_restart_router_url=router.url)
        changes = router.changes()
    report = read_report(report_dir, host)
    rollback = report.get("rollback") or {}
    outcome = f"verdict {report.get('verdict')} ({report.get('reason')}), now {report.get('state')}"
    print(f"\n>>> fourth run: exit code {rc}, {outcome}, after {time.monotonic() - started:.0f} s", flush=True)
    print(f">>> rollback start: {rollback.get('verdict')} ({rollback.get('reason')}) after {rollback.get('elapsed')} s", flush=True)
    print(f">>> the router saw: {', '.join(f'{verb} {url}' for verb, url in changes) or 'nothing'}", flush=True)
    return rc != 0 and report.get("state") == "rolled_back" and changes == [("remove", worker), ("add", worker)]


def learning(fleet: Fleet, host: str, report_dir: Path) -> bool:
    """Act 2: a restart of the configuration the good restart of act 1 passed on: an ETA in its progress
    lines, and a warning no good start printed reported as new; its canary becomes the baseline."""
    banner(
        "2/5  Learning from past starts",
        """
        The good restart added its start to the host's start history
        (/var/lib/inferops/sglang.service.history.json): each phase timed by the journal, the line
        groups it printed, a fingerprint of the unit's configuration. This restart of the same
        configuration knows how long a start takes: watch "about Ns left (last 1 good start: ...)"
        in its progress lines (one good start is enough for an ETA; the stall limits of each phase
        are learned from sglang_restart_history_min_good good starts, 3, not lowered here). This
        start also prints a warning no good start printed ("Frobnicator returned error state 7",
        injected through the simulator's fault file, not the unit's configuration): it is reported
        as new since the last good start. The restart also measures the host's first performance
        canary: no baseline yet, so it becomes the baseline of act 5.
        """,
    )
    fleet.set_fault(host, **NEW_WARNING)
    try:
        started = time.monotonic()
        rc, output = run_playbook_output(fleet, report_dir, **CANARY)
    finally:
        fleet.set_fault(host)
    report = read_report(report_dir, host)
    etas = re.findall(r"about \S+ left \(last \d+ good starts?: [^)]*\)", output)
    new = [event for event in report.get("unrecognized") or [] if (event.get("history") or {}).get("status") == "new"]
    canary = report.get("canary") or {}
    print(f"\n>>> second run: exit code {rc}, verdict {report.get('verdict')} ({report.get('reason')}) after {time.monotonic() - started:.0f} s", flush=True)
    print(f">>> ETA in {len(etas)} progress lines, first: {etas[0] if etas else 'none'}", flush=True)
    for event in new:
        print(f">>> new since the last good starts: {event.get('message')} ({event['history'].get('text')})", flush=True)
    print(f">>> performance canary: {canary.get('verdict')}, becomes the baseline: {canary.get('becomes_baseline')}", flush=True)
    return rc == 0 and report.get("verdict") == "pass" and bool(etas) and bool(new) and bool(canary.get("becomes_baseline"))


def slow_deploy(fleet: Fleet, host: str, report_dir: Path) -> bool:
    """Act 5: a deploy that passes every health gate but decodes ten times slower, rolled back."""
    banner(
        "5/5  A deploy rolled back for being slow",
        """
        A new drop-in makes the server decode ten times slower (in real life: a smaller
        --cuda-graph-max-bs, a lost --enable-torch-compile). It starts, answers /health_generate and
        generates a token: every health gate passes. Then the performance canary loads it from the
        host itself (8 streaming requests, 4 at a time) and compares it with the baseline of act 2:
        it fails, and the deploy is rolled back like a failed start, reason performance_regression.
        The rollback start is measured again, as fast as before. Thresholds here are wide
        (throughput -40%, TTFT p90 +100%, ITL p90 +200%) for a busy machine; the defaults are -10%,
        +25%, +25%.
        """,
    )
    started = time.monotonic()
    rc, _output = run_playbook_output(fleet, report_dir, **CANARY, sglang_restart_dropin_content=SLOW_DROPIN)
    report = read_report(report_dir, host)
    canary = report.get("canary") or {}
    rollback = report.get("rollback") or {}
    rollback_canary = rollback.get("canary") or {}
    outcome = f"verdict {report.get('verdict')} ({report.get('reason')}), now {report.get('state')}"
    print(f"\n>>> fifth run: exit code {rc}, {outcome}, after {time.monotonic() - started:.0f} s", flush=True)
    print(f">>> canary of the new drop-in: {canary.get('verdict')}, against {canary.get('baseline_runs')} baseline canary(ies)", flush=True)
    for line in canary.get("lines") or []:
        print(f">>>   {line}", flush=True)
    print(f">>> rollback start: {rollback.get('verdict')} ({rollback.get('reason')}), its canary: {rollback_canary.get('verdict')}", flush=True)
    return (
        rc != 0
        and (report.get("reason"), report.get("state")) == ("performance_regression", "rolled_back")
        and canary.get("verdict") == "fail"
        and rollback.get("verdict") == "pass"
    )


def main() -> int:
    if problems := missing_prerequisites():
        print("cannot run the demo: " + "; ".join(problems), file=sys.stderr)
        return 2
    os.chdir(REPO_ROOT)
    # Ctrl-C must reach us as KeyboardInterrupt (and tear the host down), even when started with
    # SIGINT ignored (from a non-interactive shell's background job, for example)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    fleet = Fleet()
    try:
        with tempfile.TemporaryDirectory(prefix="inferops-demo.") as tmp:
            return 0 if demo(fleet, Path(tmp)) else 1
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    finally:
        banner("Tearing the demo host down")
        fleet.down()


if __name__ == "__main__":
    sys.exit(main())
