"""A fleet of real systemd hosts for integration tests: systemd-nspawn containers over SSH.

Each host is a Debian rootfs booted with ``systemd-nspawn --boot --volatile=overlay`` on top of a
shared read-only template, in its own network namespace, reachable from the controller on a veth
pair with a private /24 (``<net>.<idx>.2`` in the host, ``<net>.<idx>.1`` on the controller side).
It works without a host systemd (PID 1 here is not systemd), as root. The hosts reach each other
through the controller (routes to the fleet's own /16 only, forwarding on the fleet's veths only),
so that the nodes of a multi-node server can rendezvous; nothing else is routed.

Layout:

* cache (``$INFEROPS_FLEET_CACHE``, default ``/var/cache/inferops-fleet``): the debootstrapped rootfs
  as a tarball keyed on suite + package list (the only slow step, ~80-95 s), rebuilt when missing;
  and ``template-<tag>``, the rootfs the hosts boot from (the tarball plus the fleet's SSH key,
  identity cleanup and the simulator of the current checkout), rebuilt in seconds when any input
  changes. ``<tag>`` is a hash of the fleet dir, so fleets in different dirs do not collide.
* fleet dir (``$INFEROPS_FLEET_DIR``, default ``/run/inferops-fleet`` as root): the SSH key, a lock,
  network namespace files, nspawn logs, ``state.json``, ``inventory.ini`` and Ansible's
  home/ControlPath/temp dirs. A second fleet at the same time needs another dir and another
  ``$INFEROPS_FLEET_NET`` (default ``10.213``: host N is ``10.213.N.2``).

CLI (from the repository root)::

    python3 -m tests.harness.fleet up N | down | down-all | inventory | status
    python3 -m tests.harness.fleet exec HOST CMD... | scenario HOST KEY=VAL... | reset HOST

Library::

    with Fleet().up(3) as fleet:
        fleet.ssh("sim1", "systemctl is-active sglang", check=False)
"""

from __future__ import annotations

import argparse
import atexit
import concurrent.futures
import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Self

REPO_ROOT = Path(__file__).resolve().parents[2]
SIMULATOR_DIR = REPO_ROOT / "tests" / "harness" / "simulator"
SUITE = "bookworm"
VARIANT = "minbase"
PACKAGES = ("systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "iproute2", "procps", "libpam-systemd")
DEFAULT_NET = "10.213"
MAX_HOSTS = 64
CGROUP_HIERARCHIES = ("systemd", "unified")
NSPAWN_RUN = Path("/run/systemd/nspawn")
HEALTH_URL = "http://127.0.0.1:30000/health_generate"
SCENARIO_FILE = "/etc/sglang-sim/scenario.env"
# read by the simulator itself, not by systemd: a fault that is no change of the unit's configuration
FAULT_FILE = "/etc/sglang-sim/fault.env"
SIM_UNIT = "sglang.service"
# the simulator's units: SGLang's, and its vLLM mode (/etc/vllm-sim/scenario.env, port 8000)
SIM_UNITS = (SIM_UNIT, "vllm.service")
DEPLOY_DIR = "/etc/sglang"  # where tests deploy environment files
TEMPLATE_VERSION = "1"  # bump when the template customisation changes
READY_STATES = ("running", "degraded")
# inotify instances one booted host takes (its systemd, logind, dbus, a user manager per login),
# with room to spare; all containers count against the same root user's limit
INOTIFY_PER_HOST = 12
INOTIFY_LIMIT = Path("/proc/sys/fs/inotify/max_user_instances")


def log(msg: str) -> None:
    """Progress messages go to stderr (pytest -s shows them)."""
    print(f"[fleet {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(cmd: Sequence[str], check: bool = True, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run a command, capturing text output."""
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]


def default_cache_dir() -> Path:
    return Path(os.environ.get("INFEROPS_FLEET_CACHE", "/var/cache/inferops-fleet"))


def default_fleet_dir() -> Path:
    if "INFEROPS_FLEET_DIR" in os.environ:
        return Path(os.environ["INFEROPS_FLEET_DIR"])
    return Path("/run/inferops-fleet" if os.geteuid() == 0 else "/tmp/inferops-fleet")


def apt_mirror() -> str:
    """The Debian mirror this machine's apt already uses (never hard-coded in the repository)."""
    if os.environ.get("INFEROPS_FLEET_MIRROR"):
        return os.environ["INFEROPS_FLEET_MIRROR"]
    sources = [*sorted(Path("/etc/apt/sources.list.d").glob("*.sources")), Path("/etc/apt/sources.list")]
    for path in sources:
        with contextlib.suppress(OSError):
            for line in path.read_text().splitlines():
                words = line.split()
                if words[:1] == ["URIs:"] and len(words) > 1:
                    return words[1]
                if words[:1] == ["deb"]:
                    rest = [w for w in words[1:] if not w.startswith("[") and not w.endswith("]") and "=" not in w]
                    if rest:
                        return rest[0]
    raise RuntimeError("no Debian mirror found in /etc/apt/sources.list(.d); set INFEROPS_FLEET_MIRROR")


def missing_prerequisites() -> list[str]:
    """Why this machine cannot boot a fleet (empty list: it can)."""
    problems = []
    if os.geteuid() != 0:
        problems.append("must run as root (systemd-nspawn, network namespaces, cgroups)")
    for tool in ("systemd-nspawn", "debootstrap", "unshare", "nsenter", "ip", "ssh", "ssh-keygen", "zstd"):
        if shutil.which(tool) is None:
            problems.append(f"{tool} not found (run scripts/setup.sh)")
    # systemd-nspawn copies the controller's device nodes into every host ("/dev/null is not a char
    # or block device, cannot copy" otherwise): say so before booting anything
    for device in ("/dev/null", "/dev/zero", "/dev/urandom"):
        with contextlib.suppress(OSError):
            if not stat.S_ISCHR(os.lstat(device).st_mode):
                problems.append(f"{device} on this machine is not a character device any more: recreate it (mknod) before booting hosts")
    if not Path("/sys/fs/cgroup/unified").is_dir() and not Path("/sys/fs/cgroup/cgroup.controllers").exists():
        problems.append("no cgroup2 hierarchy at /sys/fs/cgroup/unified or /sys/fs/cgroup")
    return problems


def inotify_instances_in_use() -> int:
    """inotify instances open on this machine now (they are all root's: the hosts share the limit)."""
    count = 0
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        with contextlib.suppress(OSError):
            count += sum(1 for fd in list(fd_dir.iterdir()) if _link(fd) == "anon_inode:inotify")
    return count


def _link(path: Path) -> str:
    """Where a /proc fd points; empty when it was closed meanwhile (the listing's own fd is)."""
    try:
        return os.readlink(path)
    except OSError:
        return ""


def ensure_inotify_instances(hosts: int) -> None:
    """Raise fs.inotify.max_user_instances when it cannot hold ``hosts`` more systemd hosts: the
    default (128) stops at about a dozen, and a host over it boots without its watches and never
    becomes ready. Only ever raised, never lowered."""
    with contextlib.suppress(OSError, ValueError):
        limit = int(INOTIFY_LIMIT.read_text())
        needed = inotify_instances_in_use() + INOTIFY_PER_HOST * hosts
        if needed > limit:
            log(f"raising fs.inotify.max_user_instances from {limit} to {needed} for {hosts} hosts")
            INOTIFY_LIMIT.write_text(str(needed))


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Blocking exclusive flock, e.g. so that two runs do not build the same cache at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def try_lock(path: Path) -> IO[str]:
    """Non-blocking exclusive flock held as long as the returned file stays open."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = path.open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip()
        handle.close()
        raise RuntimeError(
            f"fleet dir {path.parent} is in use by process {holder or '?'}; set INFEROPS_FLEET_DIR and INFEROPS_FLEET_NET to run another fleet"
        ) from None
    handle.truncate(0)
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def shared_lock(path: Path) -> IO[str]:
    """Blocking shared flock held as long as the returned file stays open."""
    handle = path.open("a+")
    fcntl.flock(handle, fcntl.LOCK_SH)
    return handle


def unused(lock_path: Path) -> bool:
    """True if nobody holds a flock on lock_path (checked by taking and dropping an exclusive one)."""
    with lock_path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
    return True


def cgroup_root() -> Path:
    """Base of the cgroup hierarchies: hybrid layout (v1 + /unified) or pure cgroup2."""
    return Path("/sys/fs/cgroup")


def cgroup_dirs(tree: str, machine: str = "") -> list[Path]:
    root = cgroup_root()
    hybrid = (root / "unified").is_dir()
    dirs = [root / h / tree for h in CGROUP_HIERARCHIES if (root / h).is_dir()] if hybrid else [root / tree]
    return [d / machine if machine else d for d in dirs]


def rmdir_tree(path: Path) -> None:
    """Remove a cgroup directory tree bottom-up (cgroup dirs only accept rmdir)."""
    if not path.is_dir():
        return
    for sub in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            sub.rmdir()
    with contextlib.suppress(OSError):
        path.rmdir()


def cgroup_pids(path: Path) -> list[int]:
    pids: list[int] = []
    for procs in path.rglob("cgroup.procs") if path.is_dir() else ():
        with contextlib.suppress(OSError):
            pids += [int(p) for p in procs.read_text().split()]
    return pids


def kill_cgroup(tree: str, machine: str) -> None:
    """Kill every process of a container (SIGKILL of nspawn alone leaves its systemd running)."""
    for _attempt in range(50):
        pids = []
        for path in cgroup_dirs(tree, machine):
            with contextlib.suppress(OSError):
                (path / "cgroup.kill").write_text("1")
            pids += cgroup_pids(path)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def is_mounted(path: Path) -> bool:
    target = str(path)
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        return any(line.split()[1] == target for line in mounts)


def pid_is_nspawn(pid: int, machine: str) -> bool:
    """True if pid still is our nspawn for this machine (pid files can be stale, pids reused)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(a.endswith(b"systemd-nspawn") for a in argv[:1]) and f"--machine={machine}".encode() in argv


def booted_templates() -> set[Path]:
    """The root directories running systemd-nspawn processes boot from: a fleet booted by the CLI
    (``up``) holds no lock on its template once the command has returned, its containers do."""
    found = set()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            argv = cmdline.read_bytes().split(b"\0")
            if argv[0].endswith(b"systemd-nspawn"):
                found |= {Path(os.fsdecode(a.removeprefix(b"--directory="))) for a in argv if a.startswith(b"--directory=")}
    return found


def wait_pid_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
            return True
        time.sleep(0.05)
    return False


class RootfsCache:
    """The debootstrapped base rootfs as a tarball, keyed on suite, variant and packages."""

    def __init__(self, cache_dir: Path | None = None, packages: Sequence[str] = PACKAGES) -> None:
        self.dir = cache_dir or default_cache_dir()
        self.packages = tuple(sorted(packages))
        key = hashlib.sha256(f"{SUITE}|{VARIANT}|{','.join(self.packages)}".encode()).hexdigest()[:12]
        self.tarball = self.dir / f"debian-{SUITE}-{VARIANT}-{key}.tar.zst"

    def ensure(self) -> Path:
        with file_lock(self.dir / ".lock"):
            if not self.tarball.is_file():
                self._build()
        return self.tarball

    def _build(self) -> None:
        mirror = apt_mirror()
        log(f"debootstrap {SUITE} ({VARIANT}, {len(self.packages)} extra packages) from the machine's apt mirror; ~1-2 min, cached")
        started = time.monotonic()
        debs = self.dir / "debs"
        debs.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.dir, prefix="build.") as tmp:
            root = Path(tmp) / "rootfs"
            cmd = ["debootstrap", f"--variant={VARIANT}", f"--include={','.join(self.packages)}", f"--cache-dir={debs}", SUITE, str(root), mirror]
            proc = run(cmd, check=False)
            if proc.returncode != 0:
                raise RuntimeError(f"debootstrap failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
            for junk in (root / "var/cache/apt/archives").glob("*.deb"):
                junk.unlink()
            shutil.rmtree(root / "var/lib/apt/lists", ignore_errors=True)
            partial = self.tarball.with_suffix(".partial")
            run(["tar", "-C", str(root), "--numeric-owner", "--zstd", "-cf", str(partial), "."])
            partial.rename(self.tarball)
        log(f"rootfs cached as {self.tarball} in {time.monotonic() - started:.0f} s")


class Host:
    """One booted container: inventory name, machine name, network index."""

    def __init__(self, name: str, idx: int, fleet: Fleet) -> None:
        self.name = name
        self.idx = idx
        self.machine = f"ifo{fleet.tag}-{name}"
        self.veth = f"ifo{fleet.tag}h{idx}"
        self.address = f"{fleet.net}.{idx}.2"
        self.gateway = f"{fleet.net}.{idx}.1"
        self.netns = fleet.dir / "netns" / name
        self.pidfile = fleet.dir / "run" / f"{name}.pid"
        self.logfile = fleet.dir / "run" / f"{name}.log"

    def pid(self) -> int | None:
        with contextlib.suppress(OSError, ValueError):
            return int(self.pidfile.read_text())
        return None


class Fleet:
    """N systemd hosts booted with systemd-nspawn, reachable by SSH as root; see module doc."""

    def __init__(
        self,
        fleet_dir: Path | str | None = None,
        cache_dir: Path | str | None = None,
        net: str | None = None,
        simulator_dir: Path | str | None = None,
        binds: Sequence[Path | str] = (),
        extra_packages: Sequence[str] = (),
    ) -> None:
        self.dir = Path(fleet_dir) if fleet_dir else default_fleet_dir()
        # directories of the machine every host sees read-only at the same path (a real server's
        # venv and the interpreter it links to, its models: tests/harness/real_vllm.py), and the
        # Debian packages it needs in the hosts besides PACKAGES (a rootfs of their own, cached too)
        self.binds = tuple(Path(p) for p in binds)
        self.cache = RootfsCache(Path(cache_dir) if cache_dir else None, (*PACKAGES, *extra_packages))
        self.net = net or os.environ.get("INFEROPS_FLEET_NET", DEFAULT_NET)
        self.simulator_dir = Path(simulator_dir) if simulator_dir else SIMULATOR_DIR
        self.tag = hashlib.sha256(str(self.dir.resolve()).encode()).hexdigest()[:4]
        self.cgroup_tree = f"inferops-fleet-{self.tag}"
        # the template (~200 MB) is on disk in the cache dir, named after its content; /run is often a tmpfs
        self.template: Path | None = None
        self.key = self.cache.dir / "ssh" / "id_ed25519"
        self.inventory = self.dir / "inventory.ini"
        self.state_file = self.dir / "state.json"
        self._hosts: dict[str, Host] = {}
        self._lock: IO[str] | None = None
        self._template_lock: IO[str] | None = None
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._cleanup_registered = False
        self._down_lock = threading.Lock()
        self._load_state()

    # ---- public API -------------------------------------------------------------------------

    @property
    def hosts(self) -> list[str]:
        return sorted(self._hosts, key=lambda n: self._hosts[n].idx)

    def address(self, host: str) -> str:
        return self.host(host).address

    def host(self, name: str) -> Host:
        """Details of one host: address, nspawn machine name, veth, log file, pid."""
        try:
            return self._hosts[name]
        except KeyError:
            raise KeyError(f"no host {name!r} in the fleet at {self.dir} (hosts: {' '.join(self.hosts) or 'none'})") from None

    def up(self, n: int, cleanup_on_exit: bool = True) -> Self:
        """Boot hosts sim1..simN (after cleaning a stale fleet in this dir); returns self."""
        if not 1 <= n <= MAX_HOSTS:
            raise ValueError(f"host count must be 1..{MAX_HOSTS}")
        if problems := missing_prerequisites():
            raise RuntimeError("cannot boot a fleet: " + "; ".join(problems))
        self._acquire()
        self._collect_stale()
        self._teardown()
        if cleanup_on_exit:
            self._register_cleanup()
        try:
            self._boot(n)
        except BaseException:
            log("boot failed; tearing the fleet down")
            self.down()
            raise
        return self

    def _boot(self, n: int) -> None:
        started = time.monotonic()
        self._ensure_template()
        self._hosts = {f"sim{i}": Host(f"sim{i}", i, self) for i in range(1, n + 1)}
        self._save_state()
        self._write_inventory()
        ensure_inotify_instances(n)
        booted = time.monotonic()
        for host in self._hosts.values():
            self._start(host)
        self._parallel(self._wait_ready, self._hosts.values())
        log(f"{n} host(s) up in {time.monotonic() - booted:.1f} s (total {time.monotonic() - started:.1f} s): {' '.join(self.hosts)}")

    def down(self) -> None:
        """Stop every host of this fleet and remove everything it created (idempotent)."""
        self._acquire()
        try:
            self._teardown()
        finally:
            self._release()

    def down_all(self) -> None:
        """Like down(), but also for leftovers of an earlier killed run of this fleet dir."""
        self._acquire()
        try:
            self._collect_stale()
            self._teardown()
        finally:
            self._release()

    def _teardown(self) -> None:
        with self._down_lock:
            self._close_control_sockets()
            self._parallel(self._stop, list(self._hosts.values()))
            self._cleanup_globals()
            self._hosts = {}
            for path in (self.state_file, self.inventory):
                path.unlink(missing_ok=True)
            shutil.rmtree(self.dir / "netns", ignore_errors=True)
            shutil.rmtree(self.dir / "ansible", ignore_errors=True)
        if self._cleanup_registered:
            atexit.unregister(self.down)
            self._cleanup_registered = False

    def _collect_stale(self) -> None:
        """Add hosts of an earlier (killed) run found in state.json, netns/, run/ or our cgroup tree."""
        self._load_state()
        netns_dir = self.dir / "netns"
        names = {p.name for p in netns_dir.iterdir()} if netns_dir.is_dir() else set()
        names |= {p.stem for p in (self.dir / "run").glob("*.pid")}
        for name in names - set(self._hosts):
            if name.startswith("sim") and name[3:].isdigit():
                self._hosts[name] = Host(name, int(name[3:]), self)
        for cg in cgroup_dirs(self.cgroup_tree):
            for sub in cg.iterdir() if cg.is_dir() else ():
                prefix = f"ifo{self.tag}-"
                name = sub.name.removeprefix(prefix)
                if sub.is_dir() and sub.name.startswith(prefix) and name[3:].isdigit() and name not in self._hosts:
                    self._hosts[name] = Host(name, int(name[3:]), self)
        if self._hosts:
            log(f"cleaning up fleet in {self.dir}: {' '.join(self.hosts)}")

    def ssh_command(self, host: str, cmd: str, connect_timeout: int = 3) -> list[str]:
        return ["ssh", *self.ssh_options(connect_timeout), f"root@{self.address(host)}", cmd]

    def ssh_options(self, connect_timeout: int = 3) -> list[str]:
        opts = {
            "StrictHostKeyChecking": "no",
            "UserKnownHostsFile": "/dev/null",
            "BatchMode": "yes",
            "ConnectTimeout": str(connect_timeout),
            "LogLevel": "ERROR",
            "ControlMaster": "no",
            "ControlPath": "none",
        }
        return ["-i", str(self.key), "-F", "/dev/null", *[x for k, v in opts.items() for x in ("-o", f"{k}={v}")]]

    def ssh(self, host: str, cmd: str, check: bool = True, timeout: float | None = 60, connect_timeout: int = 3) -> subprocess.CompletedProcess[str]:
        """Run a shell command in a host as root; raises CalledProcessError if check and it fails."""
        proc = subprocess.run(
            self.ssh_command(host, cmd, connect_timeout), capture_output=True, text=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL
        )
        if check and proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode, proc.args, proc.stdout, f"[{host}] {cmd!r}: {proc.stderr}")
        return proc

    def set_scenario(self, host: str, **env: object) -> None:
        """Write the simulator's scenario file (KEY=VALUE lines) in a host; applies at next (re)start."""
        for key in env:
            if not key.isidentifier():
                raise ValueError(f"bad variable name {key!r}")
        body = "".join(f"{k}={shlex.quote(str(v))}\n" for k, v in env.items())
        cmd = f"mkdir -p {shlex.quote(os.path.dirname(SCENARIO_FILE))} && printf %s {shlex.quote(body)} > {SCENARIO_FILE}"
        self.ssh(host, cmd)

    def set_fault(self, host: str, **env: object) -> None:
        """Write the simulator's fault file (KEY=VALUE lines over the scenario's, read by the simulator, not
        by systemd: the unit's configuration stays the same); no variables: remove it."""
        if not env:
            self.ssh(host, f"rm -f {FAULT_FILE}")
            return
        for key in env:
            if not key.isidentifier():
                raise ValueError(f"bad variable name {key!r}")
        body = "".join(f"{k}={shlex.quote(str(v))}\n" for k, v in env.items())
        self.ssh(host, f"mkdir -p {shlex.quote(os.path.dirname(FAULT_FILE))} && printf %s {shlex.quote(body)} > {FAULT_FILE}")

    def unit_property(self, host: str, prop: str, unit: str = SIM_UNIT) -> str:
        """One ``systemctl show`` property of a unit in a host (InvocationID, MainPID, NRestarts, ...)."""
        return self.ssh(host, f"systemctl show -p {prop} --value {shlex.quote(unit)}").stdout.strip()

    def health(self, host: str, url: str = HEALTH_URL, timeout: float = 5) -> str:
        """What the server's health endpoint answers inside the host: the HTTP status, or ``down``."""
        code = f"import urllib.request as u\ntry: print(u.urlopen({url!r}, timeout={timeout}).status)\nexcept Exception as e: print(getattr(e, 'code', 'down'))"
        return self.ssh(host, f"python3 -c {shlex.quote(code)}").stdout.strip()

    def wait_for(self, host: str, cmd: str, timeout: float = 120, every: float = 0.25) -> str:
        """Run a shell command in a host until it succeeds (a state reached, not a time passed);
        its output. Raises AssertionError with the last output when ``timeout`` seconds pass first."""
        deadline = time.monotonic() + timeout
        while True:
            proc = self.ssh(host, cmd, check=False)
            if proc.returncode == 0:
                return proc.stdout
            if time.monotonic() > deadline:
                raise AssertionError(f"[{host}] {cmd!r} did not succeed within {timeout:.0f} s: rc {proc.returncode}, {proc.stdout[-500:]}{proc.stderr[-500:]}")
            time.sleep(every)

    def reset(self, host: str) -> None:
        """Stop the simulator, clear its failed state and restart counter, drop the scenario file,
        any deployed configuration (drop-ins of the unit, files under /etc/sglang) and what the
        collection keeps of the unit on the host: the run record, the start history, the canary's
        baseline and the precheck's journal state (each test starts from its own host, whatever ran
        on it before)."""
        deployed = f"/etc/systemd/system/{SIM_UNIT}.d {DEPLOY_DIR} /var/lib/inferops/{SIM_UNIT}.*"
        clear = f"rm -rf {SCENARIO_FILE} {FAULT_FILE} {deployed}; systemctl daemon-reload"
        # a process the stop left (KillMode=process, the simulator's orphan) goes with SIGKILL
        left = f"systemctl kill --signal=SIGKILL {SIM_UNIT} 2>/dev/null"
        self.ssh(host, f"systemctl stop {SIM_UNIT}; {left}; systemctl reset-failed {SIM_UNIT} 2>/dev/null; {clear}; true")

    def ansible_env(self) -> dict[str, str]:
        """Environment (a full copy of os.environ plus overrides) for ansible subprocesses."""
        env = dict(os.environ)
        ansible = self.dir / "ansible"
        env.update(
            {
                "ANSIBLE_HOME": str(ansible / "home"),
                "ANSIBLE_SSH_CONTROL_PATH_DIR": str(ansible / "cp"),
                "ANSIBLE_LOCAL_TEMP": str(ansible / "tmp"),
                "ANSIBLE_HOST_KEY_CHECKING": "False",
                "ANSIBLE_RETRY_FILES_ENABLED": "False",
                "ANSIBLE_NOCOLOR": "1",
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            }
        )
        if (REPO_ROOT / "ansible.cfg").is_file():
            env["ANSIBLE_CONFIG"] = str(REPO_ROOT / "ansible.cfg")
        return env

    def leftovers(self) -> list[str]:
        """What of this fleet still exists on the machine (empty after a clean down())."""
        found = [f"process {h.pid()}" for h in self._hosts.values() if self._nspawn_alive(h)]
        found += [f"cgroup {d}" for d in cgroup_dirs(self.cgroup_tree) if d.exists()]
        links = run(["ip", "-o", "link", "show"], check=False).stdout
        found += [f"link {w.rstrip(':').split('@')[0]}" for w in links.split() if w.startswith(f"ifo{self.tag}h")]
        with open("/proc/self/mounts", encoding="utf-8") as mounts:
            found += [f"mount {ln.split()[1]}" for ln in mounts if ln.split()[1].startswith(f"{self.dir}/")]
        propagate = NSPAWN_RUN / "propagate"
        found += [f"dir {p}" for p in propagate.glob(f"ifo{self.tag}-*")] if propagate.is_dir() else []
        cp_dir = self.dir / "ansible" / "cp"
        found += [f"socket {p}" for p in cp_dir.iterdir()] if cp_dir.is_dir() else []
        return found

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    # ---- template -----------------------------------------------------------------------------

    def _ensure_key(self) -> None:
        if not self.key.is_file():
            self.key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "inferops-fleet", "-f", str(self.key)])

    def _simulator_files(self) -> dict[str, Path]:
        files = {"opt/sglang-sim/sglang_sim.py": self.simulator_dir / "sglang_sim.py"}
        files |= {f"etc/systemd/system/{unit}": self.simulator_dir / unit for unit in SIM_UNITS}
        missing = [str(p) for p in files.values() if not p.is_file()]
        if missing:
            raise RuntimeError(f"simulator files missing: {', '.join(missing)}")
        return files

    def _template_stamp(self, tarball: Path) -> str:
        digest = hashlib.sha256(f"{TEMPLATE_VERSION}|{tarball.name}".encode())
        digest.update(self.key.with_suffix(".pub").read_bytes())
        for rel, src in sorted(self._simulator_files().items()):
            digest.update(rel.encode() + b"\0" + src.read_bytes())
        return digest.hexdigest()[:16]

    def _ensure_template(self) -> None:
        """Build (or reuse) the template for the current simulator files; hold a shared lock on it while up."""
        tarball = self.cache.ensure()
        with file_lock(self.cache.dir / ".lock"):
            self._ensure_key()
            self.template = self.cache.dir / f"template-{self._template_stamp(tarball)}"
            self._template_lock = shared_lock(self.template.with_name(self.template.name + ".lock"))
            if not self.template.is_dir():
                self._build_template(tarball, self.template)
            self._prune_templates()

    def _build_template(self, tarball: Path, template: Path) -> None:
        started = time.monotonic()
        staging = template.with_name(template.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        run(["tar", "-C", str(staging), "--numeric-owner", "--zstd", "-xf", str(tarball)])
        self._customise(staging)
        staging.rename(template)
        log(f"template {template.name} built in {time.monotonic() - started:.1f} s")

    def _prune_templates(self) -> None:
        """Remove templates of older simulator versions that no running fleet uses."""
        booted = booted_templates()
        for path in self.cache.dir.glob("template-*"):
            if path == self.template or not path.is_dir():
                continue
            lock = path.with_name(path.name + ".lock")
            if path.suffix == ".tmp" or (unused(lock) and path not in booted):
                shutil.rmtree(path, ignore_errors=True)
                lock.unlink(missing_ok=True)
                path.with_name(path.name + ".stamp").unlink(missing_ok=True)

    def _customise(self, root: Path) -> None:
        ssh_dir = root / "root/.ssh"
        ssh_dir.mkdir(mode=0o700, exist_ok=True)
        shutil.copyfile(self.key.with_suffix(".pub"), ssh_dir / "authorized_keys")
        (ssh_dir / "authorized_keys").chmod(0o600)
        journal = root / "var/log/journal"
        for entry in journal.iterdir() if journal.is_dir() else ():
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        # empty machine-id: systemd takes the one nspawn passes (--uuid), unique per boot
        (root / "etc/machine-id").write_text("")
        dbus_id = root / "var/lib/dbus/machine-id"
        dbus_id.unlink(missing_ok=True)
        dbus_id.parent.mkdir(parents=True, exist_ok=True)
        dbus_id.symlink_to("/etc/machine-id")
        # debootstrap copied this machine's hostname; it would override nspawn --hostname
        (root / "etc/hostname").unlink(missing_ok=True)
        units = root / "etc/systemd/system"
        (units / "console-getty.service").unlink(missing_ok=True)
        (units / "console-getty.service").symlink_to("/dev/null")
        for rel, src in self._simulator_files().items():
            dest = root / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)
            dest.chmod(0o644)
        (root / os.path.dirname(SCENARIO_FILE).lstrip("/")).mkdir(parents=True, exist_ok=True)

    # ---- boot / stop -------------------------------------------------------------------------------

    def _start(self, host: Host) -> None:
        (self.dir / "run").mkdir(parents=True, exist_ok=True)
        host.netns.parent.mkdir(parents=True, exist_ok=True)
        self._make_network(host)
        cgroups = cgroup_dirs(self.cgroup_tree, host.machine)
        for path in cgroups:
            path.mkdir(parents=True, exist_ok=True)
        nspawn = [
            "systemd-nspawn",
            "--boot",
            f"--directory={self.template}",
            "--volatile=overlay",
            f"--machine={host.machine}",
            f"--hostname={host.name}",
            f"--uuid={os.urandom(16).hex()}",
            "--register=no",
            "--keep-unit",
            "--link-journal=no",
            f"--network-namespace-path={host.netns}",
            "--console=read-only",
            *(f"--bind-ro={path}" for path in self.binds),
        ]
        # without a host systemd, --keep-unit makes nspawn use its own cgroup (supervisor/payload):
        # each nspawn must start in a cgroup of its own, so the launcher shell moves itself first
        mover = 'for f in "$@"; do [ "$f" = -- ] && break; echo $$ > "$f"; shift; done; shift; exec "$@"'
        argv = ["sh", "-c", mover, "sh", *[str(p / "cgroup.procs") for p in cgroups], "--", *nspawn]
        with host.logfile.open("wb") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self._procs[host.name] = proc
        host.pidfile.write_text(str(proc.pid))

    def _make_network(self, host: Host) -> None:
        if run(["ip", "route", "show", "to", f"{self.net}.{host.idx}.0/24"], check=False).stdout.strip():
            raise RuntimeError(f"{self.net}.{host.idx}.0/24 is already routed on this machine (another fleet?); set INFEROPS_FLEET_NET")
        host.netns.touch()
        run(["unshare", f"--net={host.netns}", "true"])
        run(["ip", "link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", str(host.netns)])
        run(["ip", "addr", "add", f"{host.gateway}/24", "dev", host.veth])
        run(["ip", "link", "set", host.veth, "up"])
        inside = ["nsenter", f"--net={host.netns}", "ip"]
        run([*inside, "link", "set", "lo", "up"])
        run([*inside, "addr", "add", f"{host.address}/24", "dev", "eth0"])
        run([*inside, "link", "set", "eth0", "up"])
        self._route_between_hosts(host, inside)

    def _route_between_hosts(self, host: Host, inside: list[str]) -> None:
        """Let the hosts reach each other (the nodes of a multi-node server rendezvous), and nothing
        else: each host routes only the fleet's own /16 to the controller side of its veth, and the
        controller forwards only what comes in on the fleet's veths (IPv4 forwarding is decided per
        incoming interface; the machine-wide ip_forward is left alone). Both go away with the veth
        and the network namespace at teardown."""
        run([*inside, "route", "add", f"{self.net}.0.0/16", "via", host.gateway])
        Path(f"/proc/sys/net/ipv4/conf/{host.veth}/forwarding").write_text("1\n")

    def _wait_ready(self, host: Host, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            if not self._nspawn_alive(host):
                raise RuntimeError(f"{host.name}: systemd-nspawn exited during boot:\n{host.logfile.read_text(errors='replace')[-3000:]}")
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc = self.ssh(host.name, "systemctl is-system-running --wait", check=False, timeout=30, connect_timeout=1)
                state = proc.stdout.strip()
                if state in READY_STATES:
                    if state == "degraded":
                        failed = self.ssh(host.name, "systemctl --failed --no-legend --plain", check=False).stdout
                        log(f"{host.name} is degraded; failed units: {failed.strip()}")
                    return
            time.sleep(0.2)
        raise TimeoutError(f"{host.name} ({host.address}) not ready after {timeout:.0f} s (last state {state!r})")

    def _nspawn_alive(self, host: Host) -> bool:
        proc = self._procs.get(host.name)
        if proc is not None:
            return proc.poll() is None
        pid = host.pid()
        return pid is not None and pid_is_nspawn(pid, host.machine)

    def _stop(self, host: Host) -> None:
        proc = self._procs.pop(host.name, None)
        pid = host.pid()
        if proc is not None and proc.poll() is None:
            proc.terminate()  # nspawn asks the container's systemd to halt cleanly (~1-2 s)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        elif pid is not None and pid_is_nspawn(pid, host.machine):
            os.kill(pid, signal.SIGTERM)
            if not wait_pid_gone(pid, 15):
                os.kill(pid, signal.SIGKILL)
                wait_pid_gone(pid, 5)
        kill_cgroup(self.cgroup_tree, host.machine)
        for path in cgroup_dirs(self.cgroup_tree, host.machine):
            rmdir_tree(path)
        with contextlib.suppress(OSError):
            (NSPAWN_RUN / "propagate" / host.machine).rmdir()
        if Path(f"/sys/class/net/{host.veth}").exists():
            run(["ip", "link", "del", host.veth], check=False)
        for _attempt in range(10):
            if not is_mounted(host.netns):
                break
            run(["umount", str(host.netns)], check=False)
        host.netns.unlink(missing_ok=True)
        host.pidfile.unlink(missing_ok=True)

    def _cleanup_globals(self) -> None:
        for path in cgroup_dirs(self.cgroup_tree):
            rmdir_tree(path)
        if self._template_lock is not None:
            self._template_lock.close()
            self._template_lock = None
        # nspawn's lock file for the template's inode (left behind when nspawn gets SIGKILLed),
        # unless another fleet still boots from the same template
        template = self.template
        if template is not None and template.is_dir() and unused(template.with_name(template.name + ".lock")):
            st = template.stat()
            (NSPAWN_RUN / "locks" / f"inode-{st.st_dev}:{st.st_ino}").unlink(missing_ok=True)
        for sub in ("locks", "propagate", ""):
            with contextlib.suppress(OSError):
                (NSPAWN_RUN / sub).rmdir()

    def _close_control_sockets(self) -> None:
        """Close ssh ControlPersist masters Ansible left (they would linger ~60 s)."""
        cp_dir = self.dir / "ansible" / "cp"
        for sock in cp_dir.iterdir() if cp_dir.is_dir() else ():
            if sock.is_socket():
                run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "fleet-host"], check=False, timeout=10)
            sock.unlink(missing_ok=True)

    # ---- state / helpers -------------------------------------------------------------------------

    @staticmethod
    def _parallel(func: Callable[[Host], None], hosts: Iterable[Host]) -> None:
        """Run func for every host in threads; re-raise the first error after all finished."""
        items = list(hosts)
        if not items:
            return
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(items)) as pool:
            futures = [pool.submit(func, h) for h in items]
        errors = [e for f in futures if (e := f.exception()) is not None]
        if errors:
            raise errors[0]

    def _save_state(self) -> None:
        state = {"net": self.net, "template": str(self.template or ""), "hosts": {h.name: h.idx for h in self._hosts.values()}}
        self.state_file.write_text(json.dumps(state, indent=1))

    def _load_state(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            state = json.loads(self.state_file.read_text())
            self.net = state.get("net", self.net)
            self.template = Path(state["template"]) if state.get("template") else self.template
            self._hosts = {name: Host(name, int(idx), self) for name, idx in state["hosts"].items()}

    def _write_inventory(self) -> None:
        ssh_args = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ConnectTimeout=5"
        lines = ["[sglang]"]
        lines += [f"{h.name} ansible_host={h.address}" for h in self._hosts.values()]
        lines += [
            "",
            "[sglang:vars]",
            "ansible_user=root",
            f"ansible_ssh_private_key_file={self.key}",
            "ansible_python_interpreter=/usr/bin/python3",
            f"ansible_ssh_common_args='{ssh_args}'",
            "ansible_ssh_pipelining=true",
            "",
        ]
        self.inventory.write_text("\n".join(lines))

    def _acquire(self) -> None:
        if self._lock is None:
            self._lock = try_lock(self.dir / "lock")

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def _register_cleanup(self) -> None:
        """Tear down at interpreter exit, also after Ctrl-C, SIGTERM or SIGHUP."""
        if self._cleanup_registered:
            return
        self._cleanup_registered = True
        atexit.register(self.down)
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) in (signal.SIG_DFL, None):
                signal.signal(signum, _exit_on_signal)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised as an interrupt: pytest stops the session on it and tears the fleet
    down (a SystemExit raised inside a test would only fail that test, and the session go on)."""


def _exit_on_signal(signum: int, _frame: types.FrameType | None) -> None:
    raise Terminated(f"signal {signum}")


# ---- CLI ----------------------------------------------------------------------------------------


def _parse_env(pairs: Sequence[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"expected KEY=VALUE, got {pair!r}")
        env[key] = value
    return env


def _status(fleet: Fleet) -> int:
    if not fleet.hosts:
        print(f"no fleet in {fleet.dir}")
        return 1
    for name in fleet.hosts:
        host = fleet.host(name)
        pid = host.pid()
        alive = pid is not None and pid_is_nspawn(pid, host.machine)
        state = fleet.ssh(name, "systemctl is-system-running", check=False, timeout=10).stdout.strip() if alive else "-"
        print(f"{name}\t{host.address}\tnspawn pid {pid if alive else '-'}\t{state}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tests.harness.fleet", description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("up", help="boot N hosts (leaves them running)").add_argument("n", type=int)
    sub.add_parser("down", help="stop the fleet")
    sub.add_parser("down-all", help="stop the fleet and any leftovers of killed runs")
    sub.add_parser("inventory", help="print the inventory path and contents")
    sub.add_parser("status", help="show the hosts")
    for name, extra, text in (("exec", "command", "run a shell command in HOST over ssh"), ("scenario", "env", "write KEY=VAL lines to the scenario file")):
        p = sub.add_parser(name, help=text)
        p.add_argument("host")
        p.add_argument(extra, nargs="+" if name == "scenario" else argparse.REMAINDER)
    sub.add_parser("reset", help="stop sglang, reset-failed, remove the scenario file").add_argument("host")
    args = parser.parse_args(argv)
    try:
        return _dispatch(args, Fleet())
    except (RuntimeError, TimeoutError, subprocess.CalledProcessError, KeyError) as err:
        print(f"fleet: {err}", file=sys.stderr)
        return 1


def _dispatch(args: argparse.Namespace, fleet: Fleet) -> int:
    if args.cmd == "up":
        fleet.up(args.n, cleanup_on_exit=False)
        print(fleet.inventory)
    elif args.cmd == "down":
        fleet.down()
    elif args.cmd == "down-all":
        fleet.down_all()
    elif args.cmd == "inventory":
        print(f"# {fleet.inventory}\n{fleet.inventory.read_text()}" if fleet.inventory.is_file() else f"no fleet in {fleet.dir}")
    elif args.cmd == "status":
        return _status(fleet)
    elif args.cmd == "exec":
        proc = subprocess.run(fleet.ssh_command(args.host, " ".join(args.command)), check=False)
        return proc.returncode
    elif args.cmd == "scenario":
        fleet.set_scenario(args.host, **_parse_env(args.env))
    elif args.cmd == "reset":
        fleet.reset(args.host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
