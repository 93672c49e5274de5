"""What the side-by-side benchmark measures with, outside Ansible: CPU from cgroups, memory from
/proc, and when things happened from the test hosts' journals.

* CPU: every cgroup2 directory has ``cpu.stat`` (``usage_usec``) whether or not the cpu controller
  is enabled, so a run's controller processes are started in a cgroup of their own (ssh
  ControlPersist masters, which daemonize, stay in it), and a test host's CPU is read from its
  container's cgroup on this machine (the containers get no controllers delegated, but their
  systemd keeps a cgroup per unit and per ssh session that this machine can read).
* Memory: a sampler thread reads ``VmHWM`` (the process image's peak resident set), ``VmRSS`` and
  ``Pss`` of every process in a set of cgroups a few times a second and keeps the largest sums over
  the processes alive at one moment (RSS sums count pages shared after fork once per process; Pss
  shares them out).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import json
import os
import shlex
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from tests.harness.fleet import Fleet, cgroup_dirs, rmdir_tree

FATAL_MARK = "Scheduler hit an exception"
READY_MARK = "The server is fired up and ready to roll!"
ACCESS_MARKS = ('"GET ', '"POST ')
T = TypeVar("T")


# ---- figures -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spread:
    """Median of several samples, with their min and max."""

    median: float
    low: float
    high: float
    count: int

    @classmethod
    def of(cls, samples: Iterable[float | None]) -> Spread | None:
        values = sorted(v for v in samples if v is not None)
        if not values:
            return None
        return cls(statistics.median(values), values[0], values[-1], len(values))

    def text(self, digits: int = 1) -> str:
        main = f"{self.median:.{digits}f}"
        if self.count == 1 or f"{self.low:.{digits}f}" == f"{self.high:.{digits}f}":
            return main
        return f"{main} ({self.low:.{digits}f}-{self.high:.{digits}f})"


# ---- cgroups -------------------------------------------------------------------------------------


def v2_dir(candidates: Sequence[Path]) -> Path:
    """The cgroup2 directory among a hybrid or unified layout's candidates (the one with cpu.stat)."""
    for path in candidates:
        if (path / "cpu.stat").is_file():
            return path
    raise RuntimeError(f"no cgroup2 cpu.stat in {', '.join(str(p) for p in candidates)}")


def cpu_seconds(cgroup: Path) -> float:
    """CPU time (user + system) spent so far by every process that ever ran in a cgroup subtree."""
    for line in (cgroup / "cpu.stat").read_text().splitlines():
        key, _sep, value = line.partition(" ")
        if key == "usage_usec":
            return int(value) / 1e6
    raise RuntimeError(f"{cgroup}/cpu.stat has no usage_usec")


def host_cgroup(fleet: Fleet, host: str) -> Path:
    """The cgroup2 directory of what runs inside a test host's container (its systemd's units and
    sessions below it; systemd-nspawn itself is in the sibling ``supervisor``)."""
    return v2_dir([path / "payload" for path in cgroup_dirs(fleet.cgroup_tree, fleet.host(host).machine)])


def cgroup2_root() -> Path:
    root = Path("/sys/fs/cgroup")
    return root / "unified" if (root / "unified" / "cgroup.procs").exists() else root


class RunCgroup:
    """A cgroup for one measured controller run: everything started in it, daemons included."""

    def __init__(self, name: str) -> None:
        self.path = cgroup2_root() / f"inferops-bench-{os.getpid()}" / name
        self.path.mkdir(parents=True, exist_ok=True)

    def pids(self) -> list[int]:
        return pids_under(self.path)

    def wait_empty(self, timeout: float = 15) -> None:
        """Wait for the last process to leave (ssh masters exit a moment after they are told to), then kill the rest."""
        deadline = time.monotonic() + timeout
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.kill()

    def kill(self) -> None:
        if not self.pids():
            return
        with contextlib.suppress(OSError):
            (self.path / "cgroup.kill").write_text("1")
        deadline = time.monotonic() + 5
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.05)

    def cpu(self) -> float:
        return cpu_seconds(self.path)

    def remove(self) -> None:
        """Kill whatever still runs in the cgroup (after an error or Ctrl-C), then remove it."""
        self.kill()
        rmdir_tree(self.path)
        with contextlib.suppress(OSError):
            self.path.parent.rmdir()


def pids_under(cgroup: Path) -> list[int]:
    """Every process in a cgroup and its descendants (a walk over directories only: fast enough to
    run many times a second)."""
    pids: list[int] = []
    for directory, _subdirs, _files in os.walk(cgroup):
        with contextlib.suppress(OSError, ValueError), open(os.path.join(directory, "cgroup.procs"), encoding="ascii") as procs:
            pids += [int(p) for p in procs.read().split()]
    return pids


# ---- memory --------------------------------------------------------------------------------------


def _status_kib(pid: int, *keys: str) -> dict[str, int]:
    found: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _sep, value = line.partition(":")
            if key in keys:
                found[key] = int(value.split()[0])
    return found


def _pss_kib(pid: int) -> int:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


def _command(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    return ""


@dataclass
class MemorySampler:
    """Samples the processes of some cgroups until stopped; ``classify`` names each process's group
    (None: not counted; "*" is every counted process). Per group it keeps the largest sums over the processes alive at one moment:
    of their peaks (VmHWM), of their resident sets (VmRSS) and, every few samples, of their Pss."""

    cgroups: Sequence[Path]
    classify: Callable[[str], str | None]
    interval: float = 0.2
    pss_every: int = 5
    hwm_sum_kib: dict[str, int] = field(default_factory=dict)
    rss_sum_kib: dict[str, int] = field(default_factory=dict)
    pss_sum_kib: dict[str, int] = field(default_factory=dict)
    processes: dict[str, int] = field(default_factory=dict)
    largest_kib: dict[str, int] = field(default_factory=dict)
    _groups: dict[int, str | None] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> MemorySampler:
        self._thread = threading.Thread(target=self._loop, name="memory-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        turn = 0
        while not self._stop.is_set():
            self.sample(with_pss=turn % self.pss_every == 0)
            turn += 1
            self._stop.wait(self.interval)

    def sample(self, with_pss: bool) -> None:
        sums: dict[str, list[int]] = {}
        for cgroup in self.cgroups:
            for pid in pids_under(cgroup):
                if pid not in self._groups:
                    self._groups[pid] = self.classify(_command(pid))
                group = self._groups[pid]
                if group is None:
                    continue
                status = _status_kib(pid, "VmHWM", "VmRSS")
                if not status:
                    continue  # gone, or a kernel thread
                total = sums.setdefault(group, [0, 0, 0, 0])
                total[0] += status.get("VmHWM", 0)
                total[1] += status.get("VmRSS", 0)
                total[2] += _pss_kib(pid) if with_pss else 0
                total[3] += 1
                self.largest_kib[group] = max(self.largest_kib.get(group, 0), status.get("VmHWM", 0))
        if sums:
            sums["*"] = [sum(column) for column in zip(*sums.values())]
        for group, (hwm, rss, pss, count) in sums.items():
            self.hwm_sum_kib[group] = max(self.hwm_sum_kib.get(group, 0), hwm)
            self.rss_sum_kib[group] = max(self.rss_sum_kib.get(group, 0), rss)
            self.pss_sum_kib[group] = max(self.pss_sum_kib.get(group, 0), pss)
            self.processes[group] = max(self.processes.get(group, 0), count)


# ---- journals ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    time: float
    invocation: str
    message: str


def journal_records(fleet: Fleet, host: str, since: float, unit: str = "sglang.service") -> list[Record]:
    """The unit's journal records since an epoch time, oldest first."""
    cmd = f"journalctl -u {shlex.quote(unit)} -o json --no-pager --since=@{since:.6f} --output-fields=MESSAGE,_SYSTEMD_INVOCATION_ID"
    out = fleet.ssh(host, cmd, timeout=120).stdout
    records = []
    for line in out.splitlines():
        entry = json.loads(line)
        message = entry.get("MESSAGE")
        text = bytes(message).decode("utf-8", "replace") if isinstance(message, list) else str(message or "")
        records.append(Record(int(entry["__REALTIME_TIMESTAMP"]) / 1e6, str(entry.get("_SYSTEMD_INVOCATION_ID", "")), text))
    return records


def first_time(records: Iterable[Record], needle: str) -> float | None:
    return next((r.time for r in records if needle in r.message), None)


def hang_time(records: Sequence[Record]) -> float | None:
    """When a hung start wrote its last record: the last record of the last invocation (a hung
    start is never restarted) that is not an HTTP access line (probes add those while it hangs)."""
    invocations = [r.invocation for r in records if r.invocation]
    if not invocations:
        return None
    started = [r for r in records if r.invocation == invocations[-1] and not any(m in r.message for m in ACCESS_MARKS)]
    return started[-1].time if started else None


def parallel(func: Callable[[str], T], hosts: Sequence[str]) -> list[T]:
    """func(host) for every host in threads; the first error is raised after all finished."""
    if not hosts:
        return []
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(hosts)) as pool:
        futures = [pool.submit(func, h) for h in hosts]
    return [f.result() for f in futures]


class CpuSeries:
    """CPU seconds of named cgroups sampled a few times a second while in use; read at any time."""

    def __init__(self, cgroups: Mapping[str, Path], interval: float = 0.25) -> None:
        self.cgroups = dict(cgroups)
        self.interval = interval
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cpu-series", daemon=True)

    def __enter__(self) -> CpuSeries:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        values = {}
        for name, path in self.cgroups.items():
            with contextlib.suppress(OSError, RuntimeError):
                values[name] = cpu_seconds(path)
        self.samples.append((time.time(), values))

    def at(self, name: str, when: float) -> float:
        """CPU seconds of one cgroup at an epoch time, interpolated between samples (clamped at the ends)."""
        points = [(t, v[name]) for t, v in self.samples if name in v]
        if not points:
            raise RuntimeError(f"no CPU samples of {name}")
        if when <= points[0][0]:
            return points[0][1]
        for (t0, v0), (t1, v1) in itertools.pairwise(points):
            if t0 <= when <= t1:
                return v0 if t1 == t0 else v0 + (v1 - v0) * (when - t0) / (t1 - t0)
        return points[-1][1]

    def between(self, name: str, start: float, end: float) -> float:
        return self.at(name, end) - self.at(name, start)


class LoadWatch:
    """The machine's 1-minute load average, read every few seconds while in use: how busy the
    (shared) machine was while the figures were taken."""

    def __init__(self, interval: float = 15) -> None:
        self.interval = interval
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="load-watch", daemon=True)

    def __enter__(self) -> LoadWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while True:
            with contextlib.suppress(OSError, ValueError):
                self.samples.append(float(Path("/proc/loadavg").read_text().split()[0]))
            if self._stop.wait(self.interval):
                return

    def text(self) -> str:
        spread = Spread.of(self.samples)
        return "unknown" if spread is None else f"{spread.median:.1f} (median; {spread.low:.1f}-{spread.high:.1f})"
