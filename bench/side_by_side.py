"""Benchmark: this collection side by side with what people use today, on the same test hosts.

Three ways to restart a simulated SGLang server and decide whether the start worked, run one after
the other on the same systemd test hosts (tests/harness/fleet.py) in one run:

* ours:  the sglang_restart role on every host at once (bench/ours_restart.yml, no canary);
* usual: systemd_service restarted, uri until 200 every 10 s, journalctl | grep -i error
         (bench/peers/usual_restart.yml);
* probe: restart, then every 10 s fail if the unit is not active, pass on the first 200
         (bench/peers/probe_restart.yml).

It prints one table (median of --repeats runs, min-max beside it) and writes it, with the date, the
machine and the command, into docs/benchmarks.md (between the markers there). Needs root (it boots
the test fleet, or reuses one with --reuse-fleet). See docs/benchmarks.md for what each row means.

    python bench/side_by_side.py [--repeats 3] [--quick] [--output docs/benchmarks.md] [--reuse-fleet]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import typing as t
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(REPO), str(HERE)]

from generate_log import generate  # noqa: E402
from measure import (  # noqa: E402
    FATAL_MARK,
    READY_MARK,
    CpuSeries,
    LoadWatch,
    MemorySampler,
    Record,
    RunCgroup,
    Spread,
    first_time,
    hang_time,
    host_cgroup,
    journal_records,
    parallel,
)

from tests.harness.fleet import MAX_HOSTS, SCENARIO_FILE, SIM_UNIT, Fleet  # noqa: E402

TOOLS = ("ours", "usual", "probe")
# "before": this collection from another checkout (--before DIR), the same role run from there
TITLES = {"ours": "this collection", "usual": "usual playbook", "probe": "probe style", "before": "this collection, before"}
PLAYBOOKS = {"ours": HERE / "ours_restart.yml", "usual": HERE / "peers" / "usual_restart.yml", "probe": HERE / "peers" / "probe_restart.yml"}
# the peers' tasks, and this collection's steps: tasks of their own before the restart phase, steps
# inside it since (the phase's result lists its steps, with when each ended)
WAIT_TASKS = {
    "ours": "Wait | Follow the cold start",
    "usual": "Wait until the health endpoint answers 200",
    "probe": "Probe until the server is ready",
    "before": "Wait | Follow the cold start",
}
RESTART_TASKS = {"ours": "Restart | Start the unit", "usual": "Restart the server", "probe": "Restart the server", "before": "Restart | Start the unit"}
WAIT_STEP = "inferops.runbooks.wait_ready"
START_STEPS = ("Restart | Start the unit", "Restart | Restart the unit in place")
# the server's own moments that split a wait into phases: its port opens, then it says it is ready
PORT_MARK = "Application startup complete"
WAIT_PHASES = ("loading", "warming up", "soak")
PHASES = ("starting", "loading_weights", "allocating_kv_cache", "capturing_cuda_graphs", "warming_up")
# the server before each restart: a healthy one, started fast
WARM = {"SIM_SPEED": "0.05", "SIM_TP": "8"}
JOURNAL_UNIT = "bench-journal.service"
MARK_BEGIN = "<!-- side_by_side:begin -->"
MARK_END = "<!-- side_by_side:end -->"
# --cost-only writes its own section (the cost of waiting through a long start), beside the full run's
COST_MARKS = ("<!-- side_by_side_waiting:begin -->", "<!-- side_by_side_waiting:end -->")
MIB = 1024.0


@dataclass(frozen=True)
class Scenario:
    name: str
    env: Mapping[str, str]
    expected: str  # the right verdict: pass or fail


OK = Scenario("ok", {}, "pass")


def all_scenarios(health_delay: float) -> list[Scenario]:
    """The simulator's scenarios and their right verdicts (a slow but healthy start passes)."""
    found = [OK]
    found += [Scenario(f"crash {p}", {"SIM_SCENARIO": "crash", "SIM_PHASE": p}, "fail") for p in PHASES]
    found += [Scenario(f"hang {p}", {"SIM_SCENARIO": "hang", "SIM_PHASE": p}, "fail") for p in PHASES]
    found += [
        Scenario("crash_loop", {"SIM_SCENARIO": "crash_loop"}, "fail"),
        Scenario("health_503", {"SIM_SCENARIO": "health_503"}, "fail"),
        Scenario("slow_health", {"SIM_SCENARIO": "slow_health", "SIM_HEALTH_DELAY": f"{health_delay:g}"}, "pass"),
        Scenario("unknown_error", {"SIM_SCENARIO": "unknown_error"}, "pass"),
        Scenario("ready_then_crash", {"SIM_SCENARIO": "ready_then_crash"}, "fail"),
    ]
    return found


@dataclass(frozen=True)
class Settings:
    repeats: int = 3
    scenarios: tuple[str, ...] = ()  # empty: all
    sizes: tuple[int, ...] = (1, 8, 16)
    speed: float = 1.0  # SIM_SPEED of the scenario runs: a 20 s cold start
    cost_speed: float = 0.5  # SIM_SPEED of the cost runs: a 10 s cold start
    budget: int = 75  # ours' budget; the peers get budget / delay retries
    stall_limit: int = 20
    soak: int = 10
    delay: int = 10  # the peers' poll period
    health_delay: float = 6.0  # slow_health: seconds before health answers (more than the probe's 5 s timeout)
    journal_entries: int = 1_000_000
    classify_lines: int | None = None  # None: classify_bench.py's own default
    before: Path | None = None  # another checkout of this collection, measured beside this one
    only: tuple[str, ...] = ()  # the tools measured (empty: all)
    extra_vars: Mapping[str, object] = field(default_factory=dict)  # ours' and before's, beside the settings'

    @property
    def tools(self) -> tuple[str, ...]:
        tools = (*TOOLS, "before") if self.before else TOOLS
        return tuple(tool for tool in tools if tool in self.only) if self.only else tools

    def checkout(self, tool: str) -> Path:
        """Where a tool's playbook, ansible.cfg and collection come from."""
        return self.before if tool == "before" and self.before else REPO

    def playbook(self, tool: str) -> Path:
        return self.checkout(tool) / "bench" / "ours_restart.yml" if tool == "before" else PLAYBOOKS[tool]

    @property
    def retries(self) -> int:
        return max(self.budget // self.delay, 1)

    def tool_vars(self, tool: str) -> dict[str, object]:
        if tool in ("ours", "before"):
            return {"sglang_restart_budget": self.budget, "sglang_restart_stall_limit": self.stall_limit, "sglang_restart_soak": self.soak, **self.extra_vars}
        if tool == "usual":
            return {"health_retries": self.retries, "health_delay": self.delay}
        return {"probe_retries": self.retries, "probe_period": self.delay}

    def scenario_list(self) -> list[Scenario]:
        every = all_scenarios(self.health_delay)
        if not self.scenarios:
            return every
        known = {s.name: s for s in every}
        unknown = [name for name in self.scenarios if name not in known]
        if unknown:
            raise SystemExit(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(known)}")
        return [known[name] for name in self.scenarios]

    def describe(self) -> str:
        return (
            f"simulated cold start {20 * self.speed:g} s (8 ranks; cost runs {20 * self.cost_speed:g} s); budget {self.budget} s for all three "
            f"(peers: {self.retries} retries x {self.delay} s); ours: stall limit {self.stall_limit} s, soak {self.soak} s, other role "
            f"defaults; slow_health answers after {self.health_delay:g} s (probe timeout 5 s, uri 30 s, ours 30 s); "
            f"{self.repeats} repeat(s)" + (f"; 'before' is the same role from {self.before}" if self.before else "")
        )


QUICK = Settings(
    repeats=1,
    scenarios=("ok",),
    sizes=(1,),
    speed=0.15,
    cost_speed=0.15,
    budget=30,
    stall_limit=10,
    soak=2,
    delay=2,
    journal_entries=2000,
    classify_lines=500,
)


# ---- one ansible-playbook run ----------------------------------------------------------------------


@dataclass
class HostResult:
    verdict: str
    reason: str
    end: float  # when the host's last task ended (its failed task, when it failed)
    restarted: float | None  # when the restart task returned
    wait_start: float | None
    wait_end: float | None


@dataclass
class Run:
    tool: str
    hosts: list[str]
    started: float
    ended: float
    controller_cpu: float
    waiting_cpu_per_host_minute: float | None
    memory_mib: dict[str, float]
    results: dict[str, HostResult]
    series: CpuSeries

    @property
    def wall(self) -> float:
        return self.ended - self.started


class Bench:
    """Runs the three tools on the fleet's hosts and keeps what each run measured."""

    def __init__(self, fleet: Fleet, settings: Settings, workdir: Path) -> None:
        self.fleet = fleet
        self.settings = settings
        self.workdir = workdir
        self.count = 0

    # -- hosts ---------------------------------------------------------------------------------

    def prepare(self, scenarios: Mapping[str, Mapping[str, str]]) -> None:
        """Each host: a healthy server (started fast), then the scenario its next start will play."""

        def one(host: str) -> None:
            script = f"""
systemctl stop {SIM_UNIT}; systemctl reset-failed {SIM_UNIT} 2>/dev/null
printf %s {shlex.quote(env_file(WARM))} > {SCENARIO_FILE}
systemctl start {SIM_UNIT}
python3 - <<'EOF'
import time, urllib.request
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    try:
        if urllib.request.urlopen("http://127.0.0.1:30000/health_generate", timeout=5).status == 200:
            raise SystemExit(0)
    except OSError:
        time.sleep(0.2)
raise SystemExit("the simulator did not become healthy within 60 s")
EOF
printf %s {shlex.quote(env_file(scenarios[host]))} > {SCENARIO_FILE}
"""
            self.fleet.ssh(host, script, timeout=120)

        parallel(one, list(scenarios))

    # -- runs ----------------------------------------------------------------------------------

    def run(self, tool: str, hosts: Sequence[str], strategy: str = "linear") -> Run:
        self.count += 1
        name = f"{self.count:03d}-{tool}-{len(hosts)}"
        timeline = self.workdir / f"{name}.jsonl"
        extra = self.settings.tool_vars(tool)
        cmd = ["ansible-playbook", "-i", str(self.fleet.inventory), str(self.settings.playbook(tool)), "--limit", ",".join(hosts), "--forks", str(len(hosts))]
        cmd += ["-e", json.dumps(extra)]
        env = self.ansible_env(timeline, strategy, self.settings.checkout(tool))
        cgroup = RunCgroup(name)
        cgroups = {"controller": cgroup.path, **{h: host_cgroup(self.fleet, h) for h in hosts}}
        try:
            with CpuSeries(cgroups) as series, MemorySampler([cgroup.path], controller_group) as memory:
                started = time.time()
                proc = start_in(cgroup, cmd, env, self.workdir / f"{name}.log", self.settings.checkout(tool))
                try:
                    proc.wait(timeout=self.settings.budget + 300)
                except subprocess.TimeoutExpired:
                    raise RuntimeError(f"{tool} on {len(hosts)} host(s) did not finish within {self.settings.budget + 300} s") from None
                ended = time.time()
                self.close_connections()
                cgroup.wait_empty()
            controller_cpu = cgroup.cpu()
        finally:
            cgroup.remove()
        events = [json.loads(line) for line in timeline.read_text().splitlines()] if timeline.exists() else []
        results = host_results(tool, hosts, events)
        if missing := [h for h in hosts if h not in results]:
            log_text = (self.workdir / f"{name}.log").read_text(errors="replace")
            raise RuntimeError(f"{tool}: no outcome for {', '.join(missing)} (exit {proc.returncode}):\n{log_text[-4000:]}")
        waiting = waiting_rate(hosts, results, series)
        sums = {"hwm": memory.hwm_sum_kib, "rss": memory.rss_sum_kib, "pss": memory.pss_sum_kib}
        memory_mib = {f"{group}_{kind}": sums[kind].get(group, 0) / MIB for group in ("ansible", "ssh") for kind in sums}
        memory_mib |= {"ansible_processes": float(memory.processes.get("ansible", 0)), "ansible_largest": memory.largest_kib.get("ansible", 0) / MIB}
        return Run(tool, list(hosts), started, ended, controller_cpu, waiting, memory_mib, results, series)

    def ansible_env(self, timeline: Path, strategy: str, checkout: Path = REPO) -> dict[str, str]:
        env = self.fleet.ansible_env()
        env.update(
            {
                "ANSIBLE_CONFIG": str(checkout / "ansible.cfg"),
                "ANSIBLE_CALLBACK_PLUGINS": str(HERE / "callback_plugins"),
                "ANSIBLE_CALLBACKS_ENABLED": "bench_timeline",
                "ANSIBLE_STRATEGY": strategy,
                "INFEROPS_BENCH_TIMELINE": str(timeline),
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            }
        )
        return env

    def close_connections(self) -> None:
        """End Ansible's ssh ControlPersist masters: each run starts from cold, and their CPU is counted."""
        control_dir = Path(self.fleet.ansible_env()["ANSIBLE_SSH_CONTROL_PATH_DIR"])
        for sock in control_dir.iterdir() if control_dir.is_dir() else ():
            if sock.is_socket():
                subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "bench"], capture_output=True, check=False, timeout=10)

    # -- the target-side baseline ----------------------------------------------------------------

    def baseline(self, hosts: Sequence[str], seconds: float) -> Baseline:
        """The same cold start restarted by hand (one ssh each), hosts' CPU followed for ``seconds``."""
        with CpuSeries({h: host_cgroup(self.fleet, h) for h in hosts}) as series:
            started = time.time()
            restarted = parallel(lambda h: restart_by_hand(self.fleet, h), list(hosts))
            time.sleep(max(seconds - (time.time() - started), 0))
        return Baseline(series, dict(zip(hosts, restarted)), seconds)


def restart_by_hand(fleet: Fleet, host: str) -> float:
    fleet.ssh(host, f"systemctl restart {SIM_UNIT}")
    return time.time()


@dataclass(frozen=True)
class Baseline:
    """The test hosts' CPU through a cold start restarted by hand: what the server costs alone."""

    series: CpuSeries
    restarted: Mapping[str, float]
    seconds: float

    def server_alone(self, host: str, start: float, end: float) -> float:
        """CPU seconds the host spent from ``start`` to ``end`` seconds after the hand restart (the
        server is idle once ready: past the measured span, the last rate goes on)."""
        zero = self.restarted[host]
        span_end = min(end, self.seconds - 1)
        used = self.series.between(host, zero + start, zero + span_end) if span_end > start else 0.0
        if end > span_end:
            tail_rate = self.series.between(host, zero + span_end - 5, zero + span_end) / 5
            used += tail_rate * (end - max(start, span_end))
        return used


def env_file(env: Mapping[str, str]) -> str:
    return "".join(f"{key}={shlex.quote(value)}\n" for key, value in env.items())


def start_in(cgroup: RunCgroup, cmd: Sequence[str], env: Mapping[str, str], log_file: Path, cwd: Path = REPO) -> subprocess.Popen[bytes]:
    """Start cmd inside a cgroup (the shell moves itself there, then execs cmd)."""
    mover = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(cgroup.path / "cgroup.procs"), *cmd]
    with log_file.open("wb") as out:
        return subprocess.Popen(mover, cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)


def controller_group(command: str) -> str | None:
    words = command.split()
    if any(w.endswith("ansible-playbook") for w in words[:2]):
        return "ansible"
    if words[:1] and words[0].rstrip(":").endswith("ssh"):
        return "ssh"  # the clients, and the ControlPersist masters ("ssh: <path> [mux]")
    return "other" if words else None


def host_results(tool: str, hosts: Sequence[str], events: Sequence[Mapping[str, object]]) -> dict[str, HostResult]:
    end: Mapping[str, t.Any] = next((e for e in events if "stats" in e), {})
    stats: Mapping[str, Mapping[str, int]] = end.get("stats", {})
    # the role publishes each host's outcome with set_stats (the sglang_restart artifact)
    artifacts: Mapping[str, Mapping[str, str]] = (end.get("custom") or {}).get("_run", {}).get("sglang_restart", {})
    wait_start = next((float(e["time"]) for e in events if WAIT_TASKS[tool] in str(e.get("task_start", ""))), None)  # type: ignore[arg-type]
    results = {}
    for host in hosts:
        mine = [e for e in events if e.get("host") == host]
        if host not in stats or not mine:
            continue
        failed = stats[host].get("failures", 0) > 0 or stats[host].get("unreachable", 0) > 0
        last_failure = next((e for e in reversed(mine) if e["status"] in ("failed", "unreachable")), None)
        reason = "ready" if not failed else peer_reason(tool, last_failure)
        if host in artifacts:
            reason = artifacts[host]["reason"]
        restarted, started, ended = step_times(mine)
        results[host] = HostResult(
            verdict="fail" if failed else "pass",
            reason=reason,
            end=float(mine[-1]["time"]),  # type: ignore[arg-type]
            restarted=restarted if restarted is not None else task_end(mine, RESTART_TASKS[tool]),
            wait_start=started if started is not None else wait_start,
            wait_end=ended if ended is not None else task_end(mine, WAIT_TASKS[tool], status="ok"),
        )
    return results


def step_times(events: Sequence[Mapping[str, t.Any]]) -> tuple[float | None, float | None, float | None]:
    """When the unit was started, and when the wait began and passed, from the steps of this
    collection's restart phase (None each when no phase ran them)."""
    steps = [step for event in events for step in event.get("steps") or [] if isinstance(step, Mapping) and "ended" in step]
    restarted = next((float(s["ended"]) for s in steps if s["step"] in START_STEPS), None)
    wait = next((s for s in steps if s["step"] == WAIT_STEP), None)
    if wait is None:
        return restarted, None, None
    ended = float(wait["ended"])
    return restarted, ended - float(wait["seconds"]), ended if wait["outcome"] == "ok" else None


def task_end(events: Sequence[Mapping[str, object]], task: str, status: str | None = None) -> float | None:
    return next((float(e["time"]) for e in events if task in str(e["task"]) and status in (None, e["status"])), None)  # type: ignore[arg-type]


def peer_reason(tool: str, failure: Mapping[str, object] | None) -> str:
    if failure is None:
        return "failed"
    task = str(failure["task"])
    if "health endpoint" in task:
        return "health never 200"
    if "errors in the journal" in task:
        return "error in journal"
    if "Probe until" in task:
        return "unit not active" if failure.get("rc") == 2 else "never healthy"
    return f"failed: {task}"


def waiting_rate(hosts: Sequence[str], results: Mapping[str, HostResult], series: CpuSeries) -> float | None:
    """Controller CPU seconds per host-minute while every host was in its wait task (linear strategy:
    from the wait task's start to the first host's end of it)."""
    starts = [r.wait_start for r in results.values() if r.wait_start is not None]
    ends = [r.wait_end for r in results.values() if r.wait_end is not None]
    if not starts or not ends or min(ends) - min(starts) < 1:
        return None
    start, end = min(starts), min(ends)
    return series.between("controller", start, end) / (len(hosts) * (end - start) / 60)


# ---- the measurements ------------------------------------------------------------------------------


@dataclass
class Figures:
    """Samples per table row and tool; text rows aside."""

    samples: dict[str, dict[str, list[float | None]]] = field(default_factory=dict)
    notes: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    def add(self, row: str, tool: str, value: float | None) -> None:
        self.samples.setdefault(row, {}).setdefault(tool, []).append(value)

    def note(self, row: str, tool: str, text: str) -> None:
        self.notes.setdefault(row, {}).setdefault(tool, []).append(text)


ROW_RIGHT = "Right verdicts (of {n} scenarios)"
ROW_WRONG = "Wrong verdicts (scenario: times)"
ROW_CRASH = "Crash in {phase}: fatal line -> failed run (s)"
ROW_HANG = "Hang in {phase}: last line -> failed run (s)"
ROW_READY = "Health 200 -> wait passed (s)"
ROW_WAIT_CPU = "Controller CPU while waiting, {n} host(s) (s per host-minute)"
ROW_RUN_CPU = "Controller CPU, whole run, {n} host(s) (s)"
ROW_MARGINAL = "Controller CPU per host beyond the first, {a} to {b} hosts (s)"
ROW_WALL = "Wall time, whole run, {n} host(s) (s)"
ROW_TARGET = "Target CPU while waiting, beyond the server's own (s per minute)"
ROW_TARGET_PHASE = "Target CPU while waiting, beyond the server's own, {phase} (s per minute)"
ROW_MEM = "Controller memory, {n} concurrent waits: peak RSS summed over processes (MiB)"
ROW_PSS = "Controller memory, {n} concurrent waits: peak PSS (MiB)"
ROW_MEMORY_DETAIL = "Controller memory detail"
ROW_JOURNAL_DETAIL = "Journal memory detail"
ROW_RATE = "Journal of {n:,} entries: entries per second"
ROW_JMEM = "Journal of {n:,} entries: peak memory on the target (MiB)"
TIMED = {"crash loading_weights": ROW_CRASH, "crash capturing_cuda_graphs": ROW_CRASH, "hang loading_weights": ROW_HANG, "hang capturing_cuda_graphs": ROW_HANG}


def phase_words(scenario: str) -> str:
    return {"loading_weights": "weight loading", "capturing_cuda_graphs": "CUDA graph capture"}[scenario.split()[1]]


def measure_verdicts(bench: Bench, hosts: Sequence[str], figures: Figures) -> list[Run]:
    """Each repeat: each tool once over every scenario at the same time (one host each, strategy
    free so that a host's end does not wait for the slowest one)."""
    settings = bench.settings
    scenarios = settings.scenario_list()
    by_host = dict(zip(hosts, scenarios))
    runs = []
    for repeat in range(settings.repeats):
        for tool in rotate(settings.tools, repeat):
            bench.prepare({h: {**env_speed(settings.speed), **s.env} for h, s in by_host.items()})
            run = bench.run(tool, list(by_host), strategy="free" if len(by_host) > 1 else "linear")
            runs.append(run)
            right = 0
            for host, scenario in by_host.items():
                result = run.results[host]
                if result.verdict == scenario.expected:
                    right += 1
                else:
                    figures.note(ROW_WRONG, tool, f"{scenario.name} ({result.reason})")
            figures.add(ROW_RIGHT.format(n=len(scenarios)), tool, right)
            timed_delays(bench, run, by_host, figures)
            progress(f"repeat {repeat + 1}/{settings.repeats} {tool}: {right}/{len(scenarios)} right in {run.wall:.0f} s")
    return runs


def timed_delays(bench: Bench, run: Run, by_host: Mapping[str, Scenario], figures: Figures) -> None:
    """Seconds from the moment the journal shows (crash, hang, health 200) to the tool's decision."""
    wanted = {h: s for h, s in by_host.items() if s.name in TIMED or s.name == "ok"}
    records = dict(zip(wanted, parallel(lambda h: journal_records(bench.fleet, h, run.started), list(wanted))))
    for host, scenario in wanted.items():
        result, journal = run.results[host], records[host]
        if scenario.name == "ok":
            ready = first_time(journal, READY_MARK)
            value = result.wait_end - ready if ready is not None and result.wait_end is not None else None
            if value is not None and run.tool == "ours":
                value -= bench.settings.soak  # the soak is reported apart
            figures.add(ROW_READY, run.tool, value)
            continue
        moment = first_time(journal, FATAL_MARK) if scenario.name.startswith("crash") else hang_time(journal)
        row = TIMED[scenario.name].format(phase=phase_words(scenario.name))
        figures.add(row, run.tool, result.end - moment if moment is not None and result.verdict == "fail" else None)


def measure_cost(bench: Bench, hosts: Sequence[str], figures: Figures, reusable: Sequence[Run]) -> None:
    """Each size: every host restarted at once with the ok scenario, each tool (runs of the verdict
    measurement that were just that are reused); controller CPU and memory from the run's cgroup,
    target CPU from the containers minus the baseline."""
    settings = bench.settings
    speed = env_speed(settings.cost_speed)
    bench.prepare({h: speed for h in hosts})
    baseline = bench.baseline(hosts, 20 * settings.cost_speed + settings.soak + 5)
    reused_sizes = {len(run.hosts) for run in reusable}
    for run in reusable:
        record_cost(bench, run, baseline, figures)
    for repeat in range(settings.repeats):
        for size in (s for s in settings.sizes if s not in reused_sizes):
            for tool in rotate(settings.tools, repeat):
                chosen = list(hosts[:size])
                bench.prepare({h: speed for h in chosen})
                run = bench.run(tool, chosen)
                record_cost(bench, run, baseline, figures)
                progress(f"repeat {repeat + 1}/{settings.repeats} cost {tool} x{size}: {run.wall:.0f} s wall, {run.controller_cpu:.1f} s controller CPU")


def record_cost(bench: Bench, run: Run, baseline: Baseline, figures: Figures) -> None:
    settings = bench.settings
    size, tool = len(run.hosts), run.tool
    wrong = [h for h, r in run.results.items() if r.verdict != ("fail" if tool == "usual" else "pass")]
    if wrong:
        progress(f"warning: {tool} on {size} host(s): unexpected verdict on {', '.join(wrong)}")
    figures.add(ROW_WAIT_CPU.format(n=size), tool, run.waiting_cpu_per_host_minute)
    figures.add(ROW_RUN_CPU.format(n=size), tool, run.controller_cpu)
    figures.add(ROW_WALL.format(n=size), tool, run.wall)
    journals = dict(zip(run.results, parallel(lambda h: journal_records(bench.fleet, h, run.started), list(run.results))))
    for host, result in run.results.items():
        figures.add(ROW_TARGET, tool, target_cpu_per_minute(run.series, host, result, baseline))
        for phase, span in wait_phases(result, journals[host]).items():
            figures.add(ROW_TARGET_PHASE.format(phase=phase), tool, target_cpu_per_minute(run.series, host, result, baseline, span))
    if size == max(settings.sizes):
        memory = run.memory_mib
        figures.add(ROW_MEM.format(n=size), tool, memory["ansible_hwm"] + memory["ssh_hwm"])
        figures.add(ROW_PSS.format(n=size), tool, memory["ansible_pss"] + memory["ssh_pss"])
        figures.note(
            ROW_MEMORY_DETAIL,
            tool,
            f"{memory['ansible_processes']:.0f} ansible-playbook processes at once (the largest {memory['ansible_largest']:.0f} MiB), "
            f"RSS {memory['ansible_rss']:.0f} MiB, Pss {memory['ansible_pss']:.0f} MiB; ssh RSS {memory['ssh_rss']:.0f} MiB, Pss {memory['ssh_pss']:.0f} MiB",
        )


def target_cpu_per_minute(series: CpuSeries, host: str, result: HostResult, baseline: Baseline, span: tuple[float, float] | None = None) -> float | None:
    """The host's CPU while its wait ran (or a span of it), less what the server alone spent in the
    same span after its restart."""
    if result.restarted is None or result.wait_start is None or result.wait_end is None:
        return None
    start, end = span or (result.wait_start, result.wait_end)
    if end - start < 1:
        return None
    since_restart = (start - result.restarted, end - result.restarted)
    used = series.between(host, start, end)
    return (used - baseline.server_alone(host, *since_restart)) / ((end - start) / 60)


def wait_phases(result: HostResult, journal: Sequence[Record]) -> dict[str, tuple[float, float]]:
    """A wait split at the server's own moments, the same for every tool: loading until its port
    opened, warming up until it said it is ready, then the soak (the gates and the soak for ours;
    the peers stop soon after)."""
    if result.wait_start is None or result.wait_end is None or result.restarted is None:
        return {}
    started = [r for r in journal if r.time >= result.restarted]
    port, ready = first_time(started, PORT_MARK), first_time(started, READY_MARK)
    if port is None or ready is None:
        return {}
    start, end = result.wait_start, result.wait_end
    cuts = [start, min(max(port, start), end), min(max(ready, start), end), end]
    return {phase: (cuts[index], cuts[index + 1]) for index, phase in enumerate(WAIT_PHASES)}


def rotate(items: Sequence[str], shift: int) -> list[str]:
    """The tools in a different order each repeat, so that none always runs first (or last)."""
    shift %= len(items)
    return [*items[shift:], *items[:shift]]


def env_speed(speed: float) -> dict[str, str]:
    return {"SIM_SPEED": f"{speed:g}", "SIM_TP": "8"}


# ---- journal -----------------------------------------------------------------------------------------


@contextlib.contextmanager
def big_journal(bench: Bench, host: str, entries: int) -> Iterator[float]:
    """Fill a host's journal with ``entries`` SGLang-style lines from one unit (no rate limit); yields
    the time the writing began, and undoes everything after."""
    fleet = bench.fleet
    setup = f"""
mkdir -p /etc/systemd/journald.conf.d /run/systemd/system
printf '[Journal]\\nRateLimitBurst=0\\nSystemMaxUse=3G\\n' > /etc/systemd/journald.conf.d/zz-bench.conf
systemctl restart systemd-journald
printf '[Service]\\nType=oneshot\\nRemainAfterExit=yes\\nExecStart=/bin/cat /var/tmp/bench-journal.log\\n' > /run/systemd/system/{JOURNAL_UNIT}
systemctl daemon-reload
"""
    cleanup = f"""
systemctl stop {JOURNAL_UNIT}; rm -f /run/systemd/system/{JOURNAL_UNIT} /var/tmp/bench-journal.log /etc/systemd/journald.conf.d/zz-bench.conf
systemctl daemon-reload; journalctl --rotate --vacuum-files=1 >/dev/null 2>&1; systemctl restart systemd-journald
"""
    try:
        fleet.ssh(host, setup)
        with tempfile.TemporaryDirectory(dir=bench.workdir) as scratch:
            log = Path(scratch) / "sglang.log"
            generate(str(log), entries)
            with log.open("rb") as data:
                subprocess.run(fleet.ssh_command(host, "cat > /var/tmp/bench-journal.log"), stdin=data, check=True, capture_output=True)
        started = time.time()
        fleet.ssh(host, f"systemctl start {JOURNAL_UNIT}", timeout=600)
        wait_for_last_line(fleet, host)
        progress(f"journal: {entries:,} entries written in {time.time() - started:.0f} s")
        yield started
    finally:
        fleet.ssh(host, cleanup, check=False, timeout=120)


def wait_for_last_line(fleet: Fleet, host: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        last = fleet.ssh(host, f"journalctl -u {JOURNAL_UNIT} -n 1 -o cat --no-pager", check=False).stdout
        if READY_MARK in last:
            return
        time.sleep(1)
    raise TimeoutError(f"{host}: the journal did not get the last line within {timeout:.0f} s")


def measure_journal(bench: Bench, host: str, figures: Figures) -> None:
    """journal_scan (ours) and the usual playbook's journalctl | grep -i error over the same journal;
    entries per second of the task and the peak memory of the task's processes on the target."""
    settings = bench.settings
    entries = settings.journal_entries
    with big_journal(bench, host, entries) as written:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(written - 1))
        for repeat in range(settings.repeats):
            for tool, reader in rotate_pairs((("ours", "scan"), ("usual", "grep")), repeat):
                seconds, peaks, lines = read_journal(bench, host, reader, since)
                figures.add(ROW_RATE.format(n=entries), tool, entries / seconds)
                figures.add(ROW_JMEM.format(n=entries), tool, peaks.get("*", 0.0))
                detail = ", ".join(f"{group} {mib:.0f} MiB" for group, mib in sorted(peaks.items()) if group != "*")
                figures.note(ROW_JOURNAL_DETAIL, tool, detail)
                progress(f"repeat {repeat + 1}/{settings.repeats} journal {reader}: {seconds:.1f} s, {lines} lines, {detail}")
    figures.note(ROW_RATE.format(n=entries), "probe", "reads no journal")
    figures.note(ROW_JMEM.format(n=entries), "probe", "reads no journal")


def rotate_pairs(pairs: Sequence[tuple[str, str]], shift: int) -> list[tuple[str, str]]:
    shift %= len(pairs)
    return [*pairs[shift:], *pairs[:shift]]


def read_journal(bench: Bench, host: str, reader: str, since: str) -> tuple[float, dict[str, float], int]:
    """One run of bench/journal_read.yml: the task's seconds, its processes' peak memory (MiB; "*" is
    the sum over the task's processes alive at once, the others per kind of process), lines read."""
    bench.count += 1
    timeline = bench.workdir / f"{bench.count:03d}-journal-{reader}.jsonl"
    result_file = bench.workdir / f"{bench.count:03d}-journal-{reader}.json"
    cmd = ["ansible-playbook", "-i", str(bench.fleet.inventory), str(HERE / "journal_read.yml"), "--limit", host]
    cmd += ["-e", json.dumps({"reader": reader, "since": since, "unit": JOURNAL_UNIT, "result_file": str(result_file)})]
    sessions = host_cgroup(bench.fleet, host) / "user.slice"
    with MemorySampler([sessions], target_group, interval=0.05) as memory:
        proc = subprocess.run(cmd, cwd=REPO, env=bench.ansible_env(timeline, "linear"), capture_output=True, text=True, check=False, timeout=1800)
    bench.close_connections()
    if proc.returncode != 0:
        raise RuntimeError(f"journal_read.yml ({reader}) failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}")
    events = [json.loads(line) for line in timeline.read_text().splitlines()]
    task = "Classify the journal" if reader == "scan" else "Look for errors"
    begun = next(float(e["time"]) for e in events if task in str(e.get("task_start", "")))
    ended = next(float(e["time"]) for e in events if task in str(e.get("task", "")))
    peaks = {group: kib / MIB for group, kib in memory.hwm_sum_kib.items()}
    return ended - begun, peaks, int(json.loads(result_file.read_text())["lines"])


def target_group(command: str) -> str | None:
    words = command.split()
    if not words:
        return None
    name = os.path.basename(words[0])
    if name.startswith("python"):
        return "module"
    if name in ("journalctl", "grep"):
        return name
    if name in ("sh", "bash"):
        return "shell"
    return None


# ---- classifier vs triage pipeline -------------------------------------------------------------------------


def classify_bench(lines: int | None) -> str:
    """bench/classify_bench.py's own printed table (its quick option --lines N when it has one)."""
    script = HERE / "classify_bench.py"
    cmd = [sys.executable, str(script)]
    if lines is not None:
        usage = subprocess.run([*cmd, "--help"], capture_output=True, text=True, check=False).stdout
        if "--lines" in usage:
            cmd += ["--lines", str(lines)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False, timeout=1800)
    shown = " ".join(["python", str(script.relative_to(REPO)), *cmd[2:]])
    text = f"$ {shown}\n{proc.stdout.rstrip()}"
    if proc.returncode != 0:
        text += f"\n(exit code {proc.returncode}{': ' + proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ''})"
    return text


# ---- the table -------------------------------------------------------------------------------------


def row_order(settings: Settings) -> list[str]:
    n = len(settings.scenario_list())
    rows = [ROW_RIGHT.format(n=n), ROW_WRONG]
    rows += [ROW_CRASH.format(phase=p) for p in ("weight loading", "CUDA graph capture")]
    rows += [ROW_HANG.format(phase=p) for p in ("weight loading", "CUDA graph capture")]
    rows += [ROW_READY]
    for template in (ROW_WAIT_CPU, ROW_RUN_CPU, ROW_WALL):
        rows += [template.format(n=size) for size in settings.sizes]
        if template == ROW_RUN_CPU:
            rows += [ROW_MARGINAL.format(a=a, b=b) for a, b in size_steps(settings.sizes)]
    biggest = max(settings.sizes)
    rows += [ROW_TARGET, *(ROW_TARGET_PHASE.format(phase=phase) for phase in WAIT_PHASES), ROW_MEM.format(n=biggest), ROW_PSS.format(n=biggest)]
    rows += [ROW_RATE.format(n=settings.journal_entries), ROW_JMEM.format(n=settings.journal_entries)]
    return rows


def size_steps(sizes: Sequence[int]) -> list[tuple[int, int]]:
    """Each size with the next larger one."""
    ordered = sorted(set(sizes))
    return list(zip(ordered, ordered[1:]))


def add_marginal(figures: Figures, settings: Settings) -> None:
    """The controller CPU each host beyond the first costs between two sizes: the difference of the
    whole runs' medians over the difference of hosts (flat when the cost per host does not grow)."""
    for a, b in size_steps(settings.sizes):
        for tool in settings.tools:
            small = Spread.of(figures.samples.get(ROW_RUN_CPU.format(n=a), {}).get(tool, []))
            large = Spread.of(figures.samples.get(ROW_RUN_CPU.format(n=b), {}).get(tool, []))
            if small is not None and large is not None:
                figures.add(ROW_MARGINAL.format(a=a, b=b), tool, (large.median - small.median) / (b - a))


def cell(figures: Figures, row: str, tool: str, settings: Settings) -> str:
    notes = figures.notes.get(row, {}).get(tool, [])
    if row == ROW_WRONG:
        counts: dict[str, int] = {}
        for text in notes:
            counts[text] = counts.get(text, 0) + 1
        judged = figures.samples.get(ROW_RIGHT.format(n=len(settings.scenario_list())), {}).get(tool)
        return "; ".join(f"{text}: {count}" for text, count in sorted(counts.items())) or ("none" if judged else "-")
    samples = figures.samples.get(row, {}).get(tool, [])
    spread = Spread.of(samples)
    if spread is None:
        return notes[0] if notes else ("no decision" if samples else "-")
    per_host = "per host-minute" in row or "per minute" in row or "per host beyond" in row
    digits = 0 if row.startswith("Right") or "entries per second" in row or "MiB" in row else 2 if per_host else 1
    text = spread.text(digits)
    missing = sum(1 for s in samples if s is None)
    if missing:
        text += f" ({missing} of {len(samples)}: none)"
    if row == ROW_READY and tool == "ours":
        text += f" + {settings.soak} soak"
    return text


def table(figures: Figures, settings: Settings) -> str:
    tools = settings.tools
    lines = ["| Figure | " + " | ".join(TITLES[t] for t in tools) + " |", "|---|" + "---|" * len(tools)]
    for row in row_order(settings):
        cells = [cell(figures, row, t, settings) for t in tools]
        if any(text != "-" for text in cells):  # a row nothing measured (verdicts in a --cost-only run) is left out
            lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def machine() -> str:
    from ansible.release import __version__ as ansible_version

    cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace").splitlines()
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), platform.machine())
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    kib = int(next((line.split()[1] for line in meminfo if line.startswith("MemTotal:")), "0"))
    release = platform.freedesktop_os_release().get("PRETTY_NAME", platform.system())
    return (
        f"{os.cpu_count()} CPU ({model}), {kib / 1024 / 1024:.0f} GiB RAM, {release}, kernel {platform.release()}, "
        f"Python {platform.python_version()}, ansible-core {ansible_version}"
    )


def memory_detail(figures: Figures, settings: Settings) -> str:
    """The controller memory of the largest cost runs, per tool and run: what docs/scaling.md sizes from."""
    lines = [f"Controller memory with {max(settings.sizes)} host(s) at once (the first run of each; RSS counts pages shared after fork in every process):", ""]
    for tool in settings.tools:
        for text in figures.notes.get(ROW_MEMORY_DETAIL, {}).get(tool, [])[:1]:
            lines.append(f"- {TITLES[tool]}: {text}")
    lines += ["", "Peak memory on the target while reading the journal, by process (the first run; journalctl's includes the journal files it maps):", ""]
    for tool in settings.tools:
        for text in figures.notes.get(ROW_JOURNAL_DETAIL, {}).get(tool, [])[:1]:
            lines.append(f"- {TITLES[tool]}: {text}")
    return "\n".join(lines)


def results_section(figures: Figures, settings: Settings, command: str, classify_text: str | None, took: float, load: str) -> str:
    """The results as markdown (no markers); without ``classify_text`` (a --cost-only run), the cost rows alone."""
    lines = [
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {machine()}; load average during the run {load}.",
        f"Command: `{command}` ({took / 60:.0f} min).",
        f"Settings: {settings.describe()}.",
        "",
        table(figures, settings),
    ]
    if classify_text is not None:
        lines += [
            "",
            memory_detail(figures, settings),
            "",
            "The classifier against the triage shell pipeline (bench/classify_bench.py, its own output):",
            "",
            "```",
            classify_text,
            "```",
        ]
    return "\n".join(lines)


def write_results(path: Path, section: str, marks: tuple[str, str] = (MARK_BEGIN, MARK_END)) -> None:
    """Replace the results between the markers (the prose around them is kept), or add them at the end."""
    begin, end = marks
    section = f"{begin}\n{section}\n{end}"
    text = path.read_text() if path.is_file() else "# Benchmarks\n\n"
    if begin in text and end in text:
        head, _mark, rest = text.partition(begin)
        tail = rest.partition(end)[2]
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# ---- main ------------------------------------------------------------------------------------------


def progress(text: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, Settings]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--repeats", type=int, help="runs of each measurement (default 3; --quick: 1)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: one scenario (ok), one host, a 3 s start, 2,000 journal entries, 500 log lines")
    parser.add_argument("--scenarios", help="comma-separated scenario names (default: all sixteen)")
    parser.add_argument("--sizes", help="comma-separated host counts of the cost runs (default 1,8,16)")
    parser.add_argument("--journal-entries", type=int, help="entries written into the journal (default 1000000)")
    parser.add_argument("--output", type=Path, default=REPO / "docs" / "benchmarks.md", help="where the results go (default docs/benchmarks.md)")
    parser.add_argument("--reuse-fleet", action="store_true", help="use the fleet already up in $INFEROPS_FLEET_DIR instead of booting one")
    parser.add_argument("--start", type=float, help="seconds of every run's simulated cold start (default 20; cost runs 10)")
    parser.add_argument("--stall-limit", type=int, help="ours' stall limit in seconds (default 20: size it to the start)")
    parser.add_argument("--budget", type=int, help="the budget of all three in seconds (default 75)")
    parser.add_argument("--cost-start", type=float, help="seconds of the cost runs' simulated cold start (default 10)")
    parser.add_argument("--cost-only", action="store_true", help="the cost runs alone (no verdicts, journal, classifier): waiting through a long start")
    parser.add_argument("--before", type=Path, help="another checkout of this collection (an older commit) measured in a fourth column")
    parser.add_argument("--section", help="the marks in --output the results go between (default side_by_side; side_by_side_waiting with --cost-only)")
    parser.add_argument("--keep-logs", action="store_true", help="keep every run's output and timeline (their directory is printed)")
    parser.add_argument("--tools", help=f"comma-separated tools to measure (default all: {', '.join(TOOLS)}, and before with --before)")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else Settings()
    changes: dict[str, object] = {}
    if args.repeats is not None:
        if args.repeats < 1:
            parser.error("--repeats must be at least 1")
        changes["repeats"] = args.repeats
    if args.scenarios:
        changes["scenarios"] = tuple(s.strip() for s in args.scenarios.split(",") if s.strip())
    if args.sizes:
        try:
            changes["sizes"] = tuple(int(s) for s in args.sizes.split(","))
        except ValueError:
            parser.error(f"--sizes: expected numbers separated by commas, got {args.sizes!r}")
    if args.journal_entries is not None:
        changes["journal_entries"] = args.journal_entries
    if args.start is not None:
        if args.start <= 0:
            parser.error("--start must be more than 0 seconds")
        changes["speed"] = changes["cost_speed"] = args.start / 20
    for name in ("stall_limit", "budget"):
        if getattr(args, name) is not None:
            if getattr(args, name) <= 0:
                parser.error(f"--{name.replace('_', '-')} must be more than 0 seconds")
            changes[name] = getattr(args, name)
    if args.cost_start is not None:
        if args.cost_start <= 0:
            parser.error("--cost-start must be more than 0 seconds")
        changes["cost_speed"] = args.cost_start / 20
    if args.tools:
        changes["only"] = tuple(name.strip() for name in args.tools.split(",") if name.strip())
        unknown = sorted(set(changes["only"]) - {*TOOLS, "before"})  # type: ignore[call-overload]
        if unknown or not changes["only"]:
            parser.error(f"--tools: {', '.join(unknown) or 'none given'}; known: {', '.join(TOOLS)}, before")
    if args.before is not None:
        if not (args.before / "bench" / "ours_restart.yml").is_file():
            parser.error(f"--before: {args.before} is not a checkout of this collection (no bench/ours_restart.yml)")
        changes["before"] = args.before.resolve()
    settings = dataclasses.replace(settings, **changes)  # type: ignore[arg-type]
    settings.scenario_list()  # a typo stops here, before anything boots
    if not all(1 <= size <= MAX_HOSTS for size in settings.sizes):
        parser.error(f"--sizes: host counts must be 1..{MAX_HOSTS}")
    return args, settings


@contextlib.contextmanager
def fleet_for(hosts: int, reuse: bool) -> Iterator[Fleet]:
    fleet = Fleet()
    if reuse:
        if len(fleet.hosts) < hosts:
            raise SystemExit(f"--reuse-fleet: the fleet in {fleet.dir} has {len(fleet.hosts)} host(s), {hosts} needed")
        yield fleet
        return
    progress(f"booting {hosts} test host(s) in {fleet.dir}")
    with fleet.up(hosts):
        yield fleet


def main(argv: Sequence[str] | None = None) -> int:
    args, settings = parse_args(sys.argv[1:] if argv is None else argv)
    if os.geteuid() != 0:
        raise SystemExit("side_by_side.py needs root: it boots systemd-nspawn test hosts (make bench)")
    command = "python bench/side_by_side.py" + ("".join(f" {shlex.quote(a)}" for a in (sys.argv[1:] if argv is None else argv)))
    if os.environ.get("MAKELEVEL"):
        command = f"make bench ({command})"
    started = time.monotonic()
    scenarios = settings.scenario_list()
    figures = Figures()
    workdir = Path(tempfile.mkdtemp(prefix="inferops-bench-"))
    load = LoadWatch()
    try:
        with load, fleet_for(max(len(scenarios), *settings.sizes), args.reuse_fleet) as fleet:
            bench = Bench(fleet, settings, workdir)
            try:
                runs = [] if args.cost_only else measure_verdicts(bench, fleet.hosts[: len(scenarios)], figures)
                only_ok = settings.scenario_list() == [OK] and settings.speed == settings.cost_speed
                reusable = [run for run in runs if only_ok and len(run.hosts) in settings.sizes]
                measure_cost(bench, fleet.hosts[: max(settings.sizes)], figures, reusable)
                if not args.cost_only:
                    measure_journal(bench, fleet.hosts[0], figures)
            finally:
                for host in fleet.hosts:
                    fleet.reset(host)
        classify_text = None if args.cost_only else classify_bench(settings.classify_lines)
    except BaseException:
        progress(f"failed; the runs' logs are kept in {workdir}")
        raise
    if args.keep_logs:
        progress(f"the runs' logs are in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    add_marginal(figures, settings)
    section = results_section(figures, settings, command, classify_text, time.monotonic() - started, load.text())
    print(section)
    marks = (f"<!-- {args.section}:begin -->", f"<!-- {args.section}:end -->") if args.section else COST_MARKS if args.cost_only else (MARK_BEGIN, MARK_END)
    write_results(args.output, section, marks)
    progress(f"results written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
