"""What a client sees during a rolling restart, measured: 4 test hosts behind the real SGLang Model
Gateway, a deploy-free restart of the fleet while a client loop on this machine
(tests/harness/clients.py) sends generations through the gateway the whole time; the usual playbook
(bench/peers/usual_restart.yml: restart, poll health, no drain, the router left alone) beside
playbooks/restart_sglang.yml (canary then a ramp, the floor, each host out of the gateway before its
stop). Prints requests sent, failed and the longest a client waited, with ratios against the usual
playbook, and writes the table into docs/benchmarks.md between its markers.

    python bench/clients.py [--output docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(REPO), str(HERE)]

from side_by_side import fleet_for, machine, progress, write_results  # noqa: E402

from tests.harness.clients import ClientLoop, Tally, lowest_serving  # noqa: E402
from tests.harness.fleet import Fleet  # noqa: E402
from tests.harness.gateway import Gateway, behind_gateway  # noqa: E402
from tests.integration.test_deploy_playbook import ADMIN_KEY, OLD_MODEL, start_with  # noqa: E402
from tests.integration.test_fleet_rollout import QUICK  # noqa: E402

HOSTS = 4
FLOOR = 2
MARKS = ("<!-- clients:begin -->", "<!-- clients:end -->")
TOOLS = ("usual", "ours")
PLAYBOOKS = {"usual": REPO / "bench" / "peers" / "usual_restart.yml", "ours": REPO / "playbooks" / "restart_sglang.yml"}


def tool_vars(tool: str, gateway: Gateway) -> dict[str, object]:
    if tool == "usual":
        return {"health_retries": 120, "health_delay": 1}
    return {
        **QUICK,
        "sglang_restart_router_url": gateway.url,
        "sglang_restart_router_api_key": ADMIN_KEY,
        "sglang_batch_size": [1, 1, 2],
        "sglang_min_serving": FLOOR,
        "sglang_capacity_timeout": 60,
    }


def restart(fleet: Fleet, tool: str, gateway: Gateway) -> int:
    command = [
        str(Path(sys.executable).parent / "ansible-playbook"),
        "-i",
        str(fleet.inventory),
        str(PLAYBOOKS[tool]),
        "-e",
        json.dumps(tool_vars(tool, gateway)),
    ]
    env = {**fleet.ansible_env(), "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False).returncode


def measure(fleet: Fleet, tool: str) -> tuple[Tally, int, float, int]:
    """(what the clients saw, the fewest workers listed, the run's seconds, its return code)."""
    hosts = fleet.hosts[:HOSTS]
    for host in hosts:
        fleet.reset(host)
    start_with(fleet, hosts)
    # in turn: every worker has requests routed to it when it is restarted (the clients send one prompt)
    with Gateway(admin_key=ADMIN_KEY, policy="round_robin") as gateway:
        behind_gateway(gateway, fleet, hosts)
        progress(f"{tool}: restarting {len(hosts)} hosts while the clients send")
        started = time.monotonic()
        with ClientLoop(gateway.url, gateway.workers, model=OLD_MODEL) as clients:
            returncode = restart(fleet, tool, gateway)
        elapsed = time.monotonic() - started
    progress(f"{tool}: {clients.summary()}, the playbook returned {returncode}")
    return clients.tally, lowest_serving(clients.samples), elapsed, returncode


def ratio(value: float, baseline: float) -> str:
    return f"{value / baseline:.2f}x" if baseline else ("-" if value == 0 else "inf")


def table(results: dict[str, tuple[Tally, int, float, int]]) -> str:
    usual = results["usual"][0]
    lines = ["| | usual playbook (no drain) | restart_sglang.yml (floor 2, ramp [1, 1, 2]) | ratio |", "|---|---:|---:|---:|"]
    ours = results["ours"][0]
    lines.append(f"| requests sent | {usual.sent} | {ours.sent} | {ratio(ours.sent, usual.sent)} |")
    lines.append(f"| requests failed | {usual.failed} | {ours.failed} | {ratio(ours.failed, usual.failed)} |")
    lines.append(f"| longest client wait (s) | {usual.longest_wait:.2f} | {ours.longest_wait:.2f} | {ratio(ours.longest_wait, usual.longest_wait)} |")
    lines.append(f"| fewest workers listed healthy | {results['usual'][1]} | {results['ours'][1]} | |")
    lines.append(f"| rollout time (s) | {results['usual'][2]:.0f} | {results['ours'][2]:.0f} | {ratio(results['ours'][2], results['usual'][2])} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/clients.py", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--output", type=Path, default=REPO / "docs" / "benchmarks.md")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if os.geteuid() != 0:
        raise SystemExit("clients.py needs root: it boots systemd-nspawn test hosts (make bench)")
    started = time.monotonic()
    with fleet_for(HOSTS, reuse=False) as fleet:
        try:
            results = {tool: measure(fleet, tool) for tool in TOOLS}
        finally:
            for host in fleet.hosts:
                fleet.reset(host)
    command = "python bench/clients.py" + "".join(f" {shlex.quote(a)}" for a in (sys.argv[1:] if argv is None else argv))
    section = "\n".join(
        [
            f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {machine()}: {HOSTS} hosts behind the real gateway (smg), "
            "routing in turn (round_robin), two clients sending completions (plain and streamed in turn) the whole time; the same restart of every host.",
            f"Command: `{command}` ({(time.monotonic() - started) / 60:.0f} min).",
            "",
            table(results),
        ]
    )
    print(section)
    write_results(args.output, section, MARKS)
    progress(f"results written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
