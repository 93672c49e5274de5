"""The test fleet is real: systemd hosts over SSH that Ansible drives, running the SGLang simulator."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.harness.fleet import SIM_UNIT, Fleet, pid_is_nspawn

UNIT = "sglang"
PORT = 30000
# the simulator's 20 s cold start shortened to ~3 s; warm-up (port open, health 503) kept at 1 s
FAST = {"SIM_SPEED": "0.15", "SIM_WARMUP_SECONDS": "1", "SIM_TP": "4", "SIM_PORT": str(PORT)}

# runs inside a host: start the unit, then record every change of /health_generate's answer
HEALTH_PROBE = """
import subprocess, sys, time, urllib.error, urllib.request
def probe(url):
    try:
        return str(urllib.request.urlopen(url, timeout=2).status)
    except urllib.error.HTTPError as err:
        return str(err.code)
    except urllib.error.URLError as err:
        return "refused" if isinstance(err.reason, ConnectionRefusedError) else "error:%s" % err.reason
    except OSError as err:
        return "error:%s" % err
url, unit, limit = sys.argv[1], sys.argv[2], float(sys.argv[3])
seen = [probe(url)]
subprocess.run(["systemctl", "start", "--no-block", unit], check=True)
deadline = time.monotonic() + limit
while seen[-1] != "200" and time.monotonic() < deadline:
    time.sleep(0.05)
    state = probe(url)
    if state != seen[-1]:
        seen.append(state)
print(" ".join(seen))
"""


# runs inside a host: connect to another host's port 5999 (retrying while it starts listening)
CONNECT = """
import socket, time
for _ in range(50):
    try:
        conn = socket.create_connection(("ADDRESS", 5999), 1)
        break
    except OSError:
        time.sleep(0.1)
print(conn.recv(64).decode())
"""


def run_ansible(fleet: Fleet, ansible_bin: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    cmd = [str(ansible_bin / "ansible"), "-i", str(fleet.inventory), *args]
    return subprocess.run(cmd, env=fleet.ansible_env(), capture_output=True, text=True, timeout=timeout, check=False)


def wait_for(what: str, check: Callable[[], bool], timeout: float = 30, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def journal(fleet: Fleet, host: str, invocation: str) -> list[dict[str, object]]:
    out = fleet.ssh(host, f"journalctl -o json --no-pager _SYSTEMD_INVOCATION_ID={invocation}").stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_hosts_are_separate_systemd_machines(fleet: Fleet) -> None:
    machine_ids = set()
    for host in fleet.hosts:
        out = fleet.ssh(host, "systemctl is-system-running; hostname; cat /etc/machine-id; ps -p 1 -o comm=; hostname -I").stdout.split()
        assert out[0] in ("running", "degraded"), out
        assert out[1:2] == [host]
        assert out[3] == "systemd"
        assert fleet.address(host) in out[4:]
        machine_ids.add(out[2])
        assert fleet.ssh(host, f"systemctl cat {UNIT}.service").stdout.startswith("# /etc/systemd/system/sglang.service")
        assert fleet.ssh(host, f"systemctl is-enabled {UNIT}", check=False).stdout.strip() == "disabled"
    assert len(machine_ids) == len(fleet.hosts)


def test_hosts_reach_each_other_over_the_fleet_network_and_nothing_else(fleet: Fleet) -> None:
    """A TCP connection from one host to another's fleet address (the rendezvous of a multi-node
    server); the hosts have a route to the fleet's own addresses only."""
    first, second = fleet.hosts[:2]
    server = "import socket; s = socket.create_server(('0.0.0.0', 5999)); s.settimeout(20); c, a = s.accept(); c.sendall(a[0].encode())"
    listener = subprocess.Popen(fleet.ssh_command(second, f"python3 -c {shlex.quote(server)}"), stdout=subprocess.PIPE, text=True)
    try:
        client = CONNECT.replace("ADDRESS", fleet.address(second))
        seen = fleet.ssh(first, f"python3 -c {shlex.quote(client)}").stdout.strip()
        assert listener.wait(20) == 0
    finally:
        if listener.poll() is None:
            listener.kill()
        listener.communicate()
    assert seen == fleet.address(first)  # the peer saw the first host's own address: routed, not masqueraded
    routes = fleet.ssh(first, "ip -4 route show").stdout
    assert "default" not in routes and f"{fleet.net}.0.0/16 via {fleet.host(first).gateway}" in routes


def test_inventory_and_ansible_ping(fleet: Fleet, ansible_bin: Path) -> None:
    text = fleet.inventory.read_text()
    assert text.startswith("[sglang]\n")
    proc = run_ansible(fleet, ansible_bin, "sglang", "-m", "ansible.builtin.ping", "-o")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for host in fleet.hosts:
        assert f"{host} | SUCCESS" in proc.stdout and '"pong"' in proc.stdout


def test_ansible_restart_and_journal_of_the_invocation(fleet: Fleet, host: str, ansible_bin: Path) -> None:
    fleet.set_scenario(host, **FAST)
    proc = run_ansible(fleet, ansible_bin, host, "-m", "ansible.builtin.systemd_service", "-a", f"name={UNIT} state=restarted")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{host} | CHANGED" in proc.stdout
    invocation = fleet.unit_property(host, "InvocationID")
    assert len(invocation) == 32
    wait_for("the server to be ready", lambda: fleet.health(host, timeout=2) == "200")
    entries = journal(fleet, host, invocation)
    assert entries and all(e["_SYSTEMD_INVOCATION_ID"] == invocation for e in entries)
    texts = [e["MESSAGE"] for e in entries if isinstance(e["MESSAGE"], str)]
    assert any("TP3]" in m for m in texts), texts[:20]
    binary = [bytes(e["MESSAGE"]) for e in entries if isinstance(e["MESSAGE"], list)]  # type: ignore[arg-type]
    assert any(b"\r" in m for m in binary), "no carriage-return (tqdm) line stored as a byte array"
    # a second restart is a new invocation with lines of its own
    fleet.ssh(host, f"systemctl restart {UNIT}")
    second = fleet.unit_property(host, "InvocationID")
    assert second != invocation
    wait_for("lines of the new invocation", lambda: bool(journal(fleet, host, second)))


def test_health_generate_refused_then_503_then_200(fleet: Fleet, host: str) -> None:
    fleet.set_scenario(host, **FAST)
    url = f"http://127.0.0.1:{PORT}/health_generate"
    cmd = f"python3 -c {shlex.quote(HEALTH_PROBE)} {url} {UNIT} 60"
    states = fleet.ssh(host, cmd, timeout=90).stdout.split()
    assert states[0] == "refused" and "503" in states and states[-1] == "200", states
    assert states.index("refused") < states.index("503") < states.index("200"), states


def test_crash_loop_makes_nrestarts_grow(fleet: Fleet, host: str) -> None:
    fleet.set_scenario(host, SIM_SCENARIO="crash_loop", **FAST)
    fleet.ssh(host, f"systemctl start --no-block {UNIT}")
    wait_for("NRestarts >= 2", lambda: int(fleet.unit_property(host, "NRestarts") or 0) >= 2, timeout=60)
    kept = f"/var/lib/inferops/{SIM_UNIT}.json /var/lib/inferops/{SIM_UNIT}.canary.json"
    fleet.ssh(host, f"mkdir -p /var/lib/inferops && touch {kept}")
    fleet.reset(host)
    assert fleet.ssh(host, f"ls /var/lib/inferops/{SIM_UNIT}.*", check=False).returncode != 0
    assert fleet.unit_property(host, "NRestarts") == "0"
    assert fleet.ssh(host, f"systemctl is-active {UNIT}", check=False).stdout.strip() == "inactive"
    assert fleet.ssh(host, "test -e /etc/sglang-sim/scenario.env", check=False).returncode == 1


def test_hang_stays_active_but_never_healthy(fleet: Fleet, host: str) -> None:
    fleet.set_scenario(host, SIM_SCENARIO="hang", **FAST)
    fleet.ssh(host, f"systemctl start {UNIT}")
    started = fleet.unit_property(host, "InvocationID")
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        assert fleet.ssh(host, f"systemctl is-active {UNIT}", check=False).stdout.strip() == "active"
        assert fleet.health(host, timeout=2) != "200"
        time.sleep(0.5)
    assert fleet.unit_property(host, "InvocationID") == started
    assert fleet.unit_property(host, "NRestarts") == "0"


def unused_net(own: str) -> str:
    """A network for a second fleet that no fleet on this machine routes: fleets of other test lanes
    run side by side, so it is derived from this fleet's own network, then the next free one."""
    routes = subprocess.run(["ip", "-o", "route"], capture_output=True, text=True, check=True).stdout
    start = int(own.split(".")[1])
    for step in range(40, 96):
        net = f"10.{(start - 200 + step) % 56 + 200}"
        if not any(line.startswith(f"{net}.") for line in routes.splitlines()):
            return net
    raise AssertionError("no free 10.200-10.255 network for a second fleet")


def test_second_fleet_cleans_stale_run_and_leaves_nothing(fleet: Fleet, tmp_path: Path) -> None:
    """A fleet left running by a finished process is cleaned when the next one starts; down() leaves nothing."""
    other_dir = tmp_path / "fleet2"
    other_net = unused_net(fleet.net)
    env = {"INFEROPS_FLEET_DIR": str(other_dir), "INFEROPS_FLEET_NET": other_net}
    cli = subprocess.run(
        [sys.executable, "-m", "tests.harness.fleet", "up", "1"],
        env={**fleet.ansible_env(), **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert cli.returncode == 0, cli.stderr
    stale = Fleet(fleet_dir=other_dir, net=other_net)
    assert stale.hosts == ["sim1"] and stale.leftovers()
    stale_pid = int((other_dir / "run" / "sim1.pid").read_text())
    with Fleet(fleet_dir=other_dir, net=other_net).up(1) as second:
        assert not pid_is_nspawn(stale_pid, f"ifo{second.tag}-sim1")
        assert second.ssh("sim1", "hostname").stdout.strip() == "sim1"
    assert not second.leftovers()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    assert f"ifo{second.tag}" not in links
    assert str(other_dir) not in Path("/proc/self/mounts").read_text()
