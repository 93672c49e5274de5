"""ansible-core versions side by side: one cached venv per supported minor version, and the runs
that prove each of them (the matrix is data: tests/ansible-core-versions.txt).

Each venv holds one ansible-core release plus the test tools pinned in requirements-dev.txt
(pytest, ansible-runner, jmespath, ...: all but the development tools), created with pip from the machine's configured index under
``$INFEROPS_VENV_CACHE`` (default ``/var/cache/inferops-venvs`` as root), in a directory named after
the release, the Python version and a hash of the pins: a changed pin makes a new venv, an
unchanged one is reused. Versions whose controller Python is not this machine's default (2.20
and 2.21 need 3.12) use the interpreter pyenv provides.

The test runs go side by side in lanes, each lane with its own test fleet on its own network (see
``fleet_nets``; fleet dirs ``$INFEROPS_FLEET_DIR-<minor>``): the oldest and the newest version each
run the unit tests and the integration suite in a lane of their own (each its share of them:
tests/harness/lanes.py); the third lane runs the unit tests and the short run of every other version (only the short run in the development venv:
`make unit` runs its unit tests), then the molecule scenarios (in the development venv, the only one
molecule accepts), then the tests against a real vLLM server on the newest version (its install,
cached, is made in the background while the lanes run: tests/harness/real_vllm.py). Output goes to ``.build/versions/<name>.log``, printed whole
when a run ends, with a summary at the end.

CLI (from the repository root, with the development venv's Python)::

    python -m tests.harness.versions setup              # create the missing venvs, in parallel
    python -m tests.harness.versions test [MINOR|molecule|real-vllm ...]   # the runs, side by side
    python -m tests.harness.versions bin newest         # the bin directory of a version's venv
    python -m tests.harness.versions python newest      # its controller Python (X.Y)
    python -m tests.harness.versions list               # the matrix, with the venvs' state
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from tests.harness.fleet import default_fleet_dir, file_lock
from tests.harness.lanes import CASE_SHARE, CLAIMS_ENV

REPO_ROOT = Path(__file__).resolve().parents[2]
MATRIX_FILE = REPO_ROOT / "tests" / "ansible-core-versions.txt"
REQUIREMENTS_FILE = REPO_ROOT / "requirements-dev.txt"
DEV_VENV = REPO_ROOT / ".venv"
LOG_DIR = REPO_ROOT / ".build" / "versions"
# the test tools each version's venv gets, at the versions requirements-dev.txt pins
# what each version's venv gets besides its ansible-core: every pin of requirements-dev.txt but the
# development tools, which need (and would pull in) a newer ansible-core than the oldest versions
DEV_ONLY = frozenset({"ansible-core", "ansible-lint", "molecule", "ruff", "mypy", "antsibull-changelog"})
RUNS = ("dev", "oldest", "newest", "short")
# what each kind of run executes (pytest arguments, from the repository root)
PYTEST_TARGETS = {
    "oldest": ("tests/unit", "tests/integration"),
    "newest": ("tests/unit", "tests/integration"),
    "short": ("tests/unit", "tests/integration/test_ansible_versions.py"),
    # `make unit` runs the unit tests in the development venv
    "dev": ("tests/integration/test_ansible_versions.py",),
}
SHORT_RUN_HOSTS = "1"
COMPLETE_STAMP = ".inferops-complete"
STALE_AFTER_DAYS = 30
PROGRESS_EVERY = 60.0
MOLECULE = "molecule"
REAL_VLLM = "real-vllm"
REAL_VLLM_TESTS = "tests/integration/test_real_vllm.py"


class VersionsError(RuntimeError):
    """The matrix, a pin or an interpreter is not what the runs need (the message says which)."""


@dataclasses.dataclass(frozen=True)
class CoreVersion:
    """One line of the matrix: an ansible-core release, its controller Python, what runs there."""

    release: str
    python: str
    runs: str

    @property
    def minor(self) -> str:
        return ".".join(self.release.split(".")[:2])

    @property
    def label(self) -> str:
        return f"ansible-core {self.release} ({self.runs}, Python {self.python})"


def parse_matrix(text: str, source: str = str(MATRIX_FILE)) -> list[CoreVersion]:
    """The matrix lines (``release python runs``); a bad line is an error naming the file and line."""
    versions: list[CoreVersion] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        where = f"{source}:{number}"
        if len(fields) != 3:
            raise VersionsError(f"{where}: expected 'release python runs', got {raw.strip()!r}")
        release, python, runs = fields
        if not re.fullmatch(r"2\.\d+\.\d+", release):
            raise VersionsError(f"{where}: {release!r} is not an ansible-core release like 2.16.19")
        if not re.fullmatch(r"3\.\d+", python):
            raise VersionsError(f"{where}: {python!r} is not a Python version like 3.12")
        if runs not in RUNS:
            raise VersionsError(f"{where}: runs must be one of {', '.join(RUNS)}, not {runs!r}")
        versions.append(CoreVersion(release, python, runs))
    for kind in ("dev", "oldest", "newest"):
        if sum(v.runs == kind for v in versions) != 1:
            raise VersionsError(f"{source}: exactly one line must say {kind!r}")
    minors = [v.minor for v in versions]
    if len(set(minors)) != len(minors):
        raise VersionsError(f"{source}: one line per minor version, got {' '.join(minors)}")
    return versions


def load_matrix(path: Path = MATRIX_FILE) -> list[CoreVersion]:
    return parse_matrix(path.read_text(encoding="utf-8"), str(path))


def pick(versions: Sequence[CoreVersion], name: str) -> CoreVersion:
    """A version by minor (2.20), release (2.20.10) or role (oldest, newest, dev)."""
    for version in versions:
        if name in (version.minor, version.release, version.runs):
            return version
    raise VersionsError(f"no version {name!r} in {MATRIX_FILE.name} (have {', '.join(v.minor for v in versions)})")


def support_pins(requirements: str) -> list[str]:
    """The ``name==version`` lines of requirements-dev.txt that every version's venv gets: the test
    tools (pytest, ansible-runner, jmespath, ...), not the development tools (``DEV_ONLY``)."""
    pins = []
    for raw in requirements.splitlines():
        name, sep, version = raw.split("#", 1)[0].strip().partition("==")
        if sep and name.strip().lower() not in DEV_ONLY:
            pins.append(f"{name.strip()}=={version.strip()}")
    if not any(pin.lower().startswith("pytest==") for pin in pins):
        raise VersionsError(f"{REQUIREMENTS_FILE.name} pins no pytest (needed by every version's venv)")
    return pins


def pinned(requirements: str, names: Sequence[str]) -> list[str]:
    """The ``name==version`` lines of requirements-dev.txt for ``names``, in that order."""
    pins = {}
    for raw in requirements.splitlines():
        line = raw.split("#", 1)[0].strip()
        name, sep, version = line.partition("==")
        if sep:
            pins[name.strip().lower()] = f"{name.strip()}=={version.strip()}"
    missing = [name for name in names if name.lower() not in pins]
    if missing:
        raise VersionsError(f"{REQUIREMENTS_FILE.name} pins no {', '.join(missing)} (needed by every version's venv)")
    return [pins[name.lower()] for name in names]


# ---- interpreters and venvs ---------------------------------------------------------------------


def python_version(executable: Path | str) -> str | None:
    """The X.Y.Z version of an interpreter, or None if it does not run (a pyenv shim of a version
    that is not selected does not)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        probe = subprocess.run(
            [str(executable), "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"], capture_output=True, text=True, timeout=30, check=False
        )
        if probe.returncode == 0 and re.fullmatch(r"\d+\.\d+\.\d+", probe.stdout.strip()):
            return probe.stdout.strip()
    return None


def interpreter_candidates(minor: str) -> Iterator[Path]:
    """Where a Python X.Y may be: an explicit override, pyenv's versions, then PATH."""
    override = os.environ.get(f"INFEROPS_PYTHON_{minor.replace('.', '_')}")
    if override:
        yield Path(override)
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    installed = sorted(pyenv_root.glob(f"versions/{minor}.*/bin/python{minor}"), key=lambda p: [int(x) for x in re.findall(r"\d+", p.parts[-3])])
    yield from reversed(installed)
    for directory in ("/usr/local/bin", "/usr/bin"):
        yield Path(directory) / f"python{minor}"
    found = shutil.which(f"python{minor}")
    if found:
        yield Path(found)


def find_python(minor: str) -> tuple[Path, str]:
    """An interpreter of Python ``minor`` that runs, and its full version."""
    tried = []
    for candidate in interpreter_candidates(minor):
        tried.append(str(candidate))
        version = python_version(candidate) if candidate.exists() else None
        if version and version.rsplit(".", 1)[0] == minor:
            return candidate, version
    raise VersionsError(
        f"no Python {minor} found (tried {', '.join(tried) or 'nothing'}); install it (pyenv install {minor}) "
        f"or point INFEROPS_PYTHON_{minor.replace('.', '_')} at one"
    )


def default_cache_dir() -> Path:
    if os.environ.get("INFEROPS_VENV_CACHE"):
        return Path(os.environ["INFEROPS_VENV_CACHE"])
    return Path("/var/cache/inferops-venvs") if os.geteuid() == 0 else Path.home() / ".cache" / "inferops-venvs"


@dataclasses.dataclass(frozen=True)
class VersionVenv:
    """Where one version's venv lives and what goes into it."""

    version: CoreVersion
    path: Path
    interpreter: Path
    packages: tuple[str, ...]

    @property
    def bin(self) -> Path:
        return self.path / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    def ready(self) -> bool:
        return (self.path / COMPLETE_STAMP).is_file()


def plan_venv(version: CoreVersion, support: Sequence[str], cache_dir: Path) -> VersionVenv:
    """The venv of a version: the development .venv for ``dev``, a cached one for the others."""
    if version.runs == "dev":
        return VersionVenv(version, DEV_VENV, DEV_VENV / "bin" / "python", ())
    interpreter, full = find_python(version.python)
    packages = (f"ansible-core=={version.release}", *support)
    key = hashlib.sha256("\n".join((full, *packages)).encode()).hexdigest()[:10]
    return VersionVenv(version, cache_dir / f"ansible-core-{version.release}-py{full}-{key}", interpreter, packages)


def build_venv(venv: VersionVenv, log: Path | None = None) -> None:
    """Create the venv unless a complete one is there; concurrent builders wait for each other."""
    if venv.version.runs == "dev" or venv.ready():
        return
    with file_lock(venv.path.with_name(venv.path.name + ".lock")):
        if venv.ready():
            return
        started = time.monotonic()
        shutil.rmtree(venv.path, ignore_errors=True)
        steps = [
            [str(venv.interpreter), "-m", "venv", str(venv.path)],
            [str(venv.python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *venv.packages],
        ]
        for step in steps:
            proc = subprocess.run(step, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                shutil.rmtree(venv.path, ignore_errors=True)
                raise VersionsError(f"{venv.version.label}: {shlex.join(step)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
        (venv.path / COMPLETE_STAMP).write_text("\n".join(venv.packages) + "\n")
        say(f"{venv.version.label}: venv {venv.path} created in {time.monotonic() - started:.0f} s")


def offline_pip_bootstrap(venv: VersionVenv) -> None:
    """ansible-test downloads a pip bootstrap script named after the pip version it pins; scripts/setup.sh
    writes an offline stand-in for the development version's pip, and the same stand-in serves any
    version: copy it under the name this venv's ansible-test asks for."""
    source = venv.path.glob("lib/python*/site-packages/ansible_test/_internal/python_requirements.py")
    pins = [re.search(r"pip='([\d.]+)'", path.read_text(encoding="utf-8")) for path in source]
    cache = Path.home() / ".ansible" / "test" / "cache"
    stand_ins = sorted(cache.glob("get_pip_*.py"))
    for match in pins:
        wanted = cache / f"get_pip_{match.group(1).replace('.', '_')}.py" if match else None
        if wanted and not wanted.exists() and stand_ins:
            shutil.copyfile(stand_ins[0], wanted)


def prune_stale(cache_dir: Path, keep: Sequence[Path], days: int = STALE_AFTER_DAYS) -> None:
    """Remove venvs of older pins nobody used for ``days`` days (their stamp is touched on use)."""
    cutoff = time.time() - days * 86400
    for path in cache_dir.glob("ansible-core-*"):
        stamp = path / COMPLETE_STAMP
        if path in keep or not path.is_dir() or (stamp.is_file() and stamp.stat().st_mtime > cutoff):
            continue
        with file_lock(path.with_name(path.name + ".lock")):
            shutil.rmtree(path, ignore_errors=True)


def prepare(names: Sequence[str] = ()) -> list[VersionVenv]:
    """Plan and build (in parallel) the venvs of the named versions, or of all of them."""
    versions = load_matrix()
    chosen = [pick(versions, name) for name in names] if names else versions
    support = support_pins(REQUIREMENTS_FILE.read_text(encoding="utf-8"))
    cache_dir = default_cache_dir()
    cache_dir.mkdir(parents=True, exist_ok=True)
    venvs = [plan_venv(version, support, cache_dir) for version in chosen]
    missing = [venv for venv in venvs if venv.version.runs != "dev" and not venv.ready()]
    if missing:
        say(f"creating {len(missing)} ansible-core venv(s) in {cache_dir}: {' '.join(v.version.release for v in missing)}")
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(missing)) as pool:
            for future in [pool.submit(build_venv, venv) for venv in missing]:
                future.result()
    for venv in venvs:
        if venv.version.runs != "dev":
            os.utime(venv.path / COMPLETE_STAMP)
        if venv.version.runs == "newest":
            offline_pip_bootstrap(venv)
    if not names:
        prune_stale(cache_dir, [venv.path for venv in venvs])
    return venvs


# ---- the test runs ------------------------------------------------------------------------------


def fleet_nets(count: int, env: Mapping[str, str] | None = None) -> list[str]:
    """One network per side-by-side fleet: ``$INFEROPS_VERSION_NETS`` (space or comma separated),
    else consecutive ones from ``$INFEROPS_FLEET_NET`` (default 10.213: 10.213, 10.214, ...)."""
    env = os.environ if env is None else env
    listed = env.get("INFEROPS_VERSION_NETS", "").replace(",", " ").split()
    if listed:
        if len(listed) < count:
            raise VersionsError(f"INFEROPS_VERSION_NETS names {len(listed)} network(s), {count} runs go side by side")
        return listed[:count]
    first = env.get("INFEROPS_FLEET_NET", "10.213")
    match = re.fullmatch(r"(\d+)\.(\d+)", first)
    if not match or int(match.group(2)) + count - 1 > 255:
        raise VersionsError(f"INFEROPS_FLEET_NET={first!r}: expected two octets like 10.213 with room for {count} networks after it")
    return [f"{match.group(1)}.{int(match.group(2)) + i}" for i in range(count)]


@dataclasses.dataclass
class Run:
    """One test run: a process in one version's venv, on the fleet of its lane."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    returncode: int | None = None
    started: float = 0.0
    elapsed: float = 0.0
    # what the run needs first, prepared while the lanes before it run (the real vLLM's install)
    needs: concurrent.futures.Future[object] | None = None
    # takes its share of the integration tests at run time, from a directory the runs side by side share
    shares_tests: bool = False


def run_env(bin_dir: Path, fleet_dir: str, net: str, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "PYTHONHOME")}
    env.update({"PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", "INFEROPS_FLEET_DIR": fleet_dir, "INFEROPS_FLEET_NET": net, **extra})
    return env


def version_run(venv: VersionVenv, net: str, fleet_base: Path) -> Run:
    """The unit tests plus the integration suite (oldest, newest: each its share, tests/harness/lanes.py) or the short run (the others)."""
    version = venv.version
    extra = {"INFEROPS_ANSIBLE_CORE": version.release, "INFEROPS_LANE": version.runs, "PYTHONDONTWRITEBYTECODE": "1", "INFEROPS_REAL_VLLM": "0"}
    if version.runs in ("short", "dev"):
        extra["INFEROPS_FLEET_HOSTS"] = SHORT_RUN_HOSTS
    if version.runs == "short":
        # facts not injected as variables, as ansible-core 2.22 will have it: the phases read no fact by name
        extra["ANSIBLE_INJECT_FACT_VARS"] = "False"
    argv = [str(venv.python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=30", *PYTEST_TARGETS[version.runs]]
    env = run_env(venv.bin, f"{fleet_base}-{version.minor}", net, **extra)
    return Run(version.label, argv, env, LOG_DIR / f"{version.minor}.log", shares_tests=version.runs in CASE_SHARE)


def molecule_run(dev: CoreVersion, net: str, fleet_base: Path) -> Run:
    """Every molecule scenario (extensions/molecule), in the development venv: molecule and
    ansible-lint refuse ansible-core 2.17 and older. The scenarios append -molecule to the fleet dir."""
    argv = [str(DEV_VENV / "bin" / "molecule"), "test", "--all"]
    env = run_env(DEV_VENV / "bin", str(fleet_base), net, ANSIBLE_NOCOLOR="1", NO_COLOR="1", PY_COLORS="0")
    return Run(f"molecule scenarios (ansible-core {dev.release}, {dev.runs})", argv, env, LOG_DIR / "molecule.log")


def real_vllm_run(venv: VersionVenv, net: str, fleet_base: Path) -> Run:
    """The tests against a real vLLM server (tests/integration/test_real_vllm.py), once, on the newest
    ansible-core, on a fleet of one host that sees the cached vLLM install (tests/harness/real_vllm.py)."""
    extra = {"INFEROPS_ANSIBLE_CORE": venv.version.release, "PYTHONDONTWRITEBYTECODE": "1", "INFEROPS_REAL_VLLM": "1", "INFEROPS_FLEET_HOSTS": "1"}
    argv = [str(venv.python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=30", REAL_VLLM_TESTS]
    env = run_env(venv.bin, f"{fleet_base}-{REAL_VLLM}", net, **extra)
    return Run(f"real vLLM server (ansible-core {venv.version.release}, {venv.version.runs})", argv, env, LOG_DIR / f"{REAL_VLLM}.log")


def plan_lanes(
    venvs: Sequence[VersionVenv], dev: CoreVersion | None, fleet_base: Path, env: Mapping[str, str] | None = None, real_vllm: VersionVenv | None = None
) -> list[list[Run]]:
    """Side by side: one lane for each whole-suite version (oldest, newest), one lane for the short
    runs (the development venv's too) followed by the molecule scenarios, then the real vLLM's tests
    (few real cold starts, on the CPU: last in the shortest lane, when the other lanes leave the
    machine's cores to it). Runs in one lane go one after the other on one network."""
    whole = [venv for venv in venvs if venv.version.runs in ("oldest", "newest")]
    short = [venv for venv in venvs if venv.version.runs in ("short", "dev")]
    count = len(whole) + (1 if short or dev or real_vllm else 0)
    nets = fleet_nets(count, env)
    lanes = [[version_run(venv, net, fleet_base)] for venv, net in zip(whole, nets)]
    if short or dev or real_vllm:
        last = [version_run(venv, nets[-1], fleet_base) for venv in short]
        if dev:
            last.append(molecule_run(dev, nets[-1], fleet_base))
        if real_vllm:
            last.append(real_vllm_run(real_vllm, nets[-1], fleet_base))
        lanes.append(last)
    return lanes


def prepare_real_vllm() -> object:
    """The real vLLM's install and tiny models, and the test hosts' rootfs with what it needs (both
    cached): started in the background when the lanes start, so that the run finds them ready."""
    from tests.harness.fleet import PACKAGES, RootfsCache
    from tests.harness.real_vllm import RealVllm

    real = RealVllm.plan().ensure()
    RootfsCache(packages=(*PACKAGES, *real.host_packages)).ensure()
    return real


def execute(lanes: Sequence[Sequence[Run]]) -> int:
    """Run the lanes side by side; print each log whole as its run ends and a summary at the end;
    0 if every run passed."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    runs = [run for lane in lanes for run in lane]
    # one directory per execution: a unit test of this runner, run by a lane, must not touch the lanes'
    claims = tempfile.mkdtemp(prefix="claims-", dir=LOG_DIR) if any(run.shares_tests for run in runs) else None
    for run in runs:
        if run.shares_tests and claims:
            run.env[CLAIMS_ENV] = claims
    started: list[tuple[Run, subprocess.Popen[bytes]]] = []
    done = threading.Event()
    stopping = threading.Event()  # the runner was interrupted: no run starts any more
    printing = threading.Lock()

    def one(run: Run) -> None:
        run.started = time.monotonic()
        with run.log.open("w", encoding="utf-8") as out:
            out.write(f"$ {shlex.join(run.argv)}\n")
            out.flush()
            try:
                prepared(run)
            except Exception as exc:  # the run fails, with the reason in its log
                out.write(f"could not prepare the run: {exc}\n")
                run.returncode = 1
            else:
                with printing:  # stop_runs sees every run started before the interrupt, and none starts after it
                    # a process group of its own: an interrupted runner stops it, with all it started (stop_runs)
                    proc = None
                    if not stopping.is_set():
                        proc = subprocess.Popen(
                            run.argv, cwd=REPO_ROOT, env=run.env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                        )
                        started.append((run, proc))
                if proc is None:
                    out.write("not started: the runner was interrupted\n")
                    run.returncode = 1
                else:
                    proc.wait()
                    run.returncode = proc.returncode
        run.elapsed = time.monotonic() - run.started
        with printing:
            print(f"\n==== {run.name}: {'passed' if run.returncode == 0 else 'FAILED'} in {minutes(run.elapsed)} ====", flush=True)
            print(run.log.read_text(encoding="utf-8", errors="replace"), flush=True)

    def prepared(run: Run) -> None:
        """What the run needs (the real vLLM's install), waited for until it is there or the runner stops."""
        while run.needs is not None and not stopping.is_set():
            with contextlib.suppress(concurrent.futures.TimeoutError):
                run.needs.result(timeout=1)
                return
        if stopping.is_set():
            raise RuntimeError("the runner was interrupted")

    def lane(runs_in_lane: Sequence[Run]) -> None:
        for run in runs_in_lane:
            if stopping.is_set():
                return
            one(run)

    def progress() -> None:
        while not done.wait(PROGRESS_EVERY):
            running = [f"{r.name} ({minutes(time.monotonic() - r.started)})" for r in runs if r.returncode is None and r.started]
            with printing:
                say(f"still running: {'; '.join(running)}")

    for number, runs_in_lane in enumerate(lanes, start=1):
        say(f"lane {number} (network {runs_in_lane[0].env['INFEROPS_FLEET_NET']}): " + ", then ".join(r.name for r in runs_in_lane))
    watcher = threading.Thread(target=progress, daemon=True)
    watcher.start()
    previous = {signum: signal.signal(signum, _interrupted) for signum in (signal.SIGTERM, signal.SIGHUP)}
    # not a with block: leaving one waits for every lane to end, and the lanes would go on with their next runs
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=len(lanes))
    try:
        for future in [pool.submit(lane, runs_in_lane) for runs_in_lane in lanes]:
            future.result()
    except BaseException:
        with printing:
            stopping.set()
        stop_runs(started)
        raise
    finally:
        pool.shutdown(wait=True)
        done.set()
        if claims:
            shutil.rmtree(claims, ignore_errors=True)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    print("\n==== side by side ====")
    for run in runs:
        outcome = "passed" if run.returncode == 0 else f"FAILED (exit {run.returncode}, log {run.log})"
        print(f"{run.name}: {outcome} in {minutes(run.elapsed)}")
    return 0 if all(run.returncode == 0 for run in runs) else 1


def _interrupted(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def stop_runs(started: Sequence[tuple[Run, subprocess.Popen[bytes]]], grace: float = 30) -> None:
    """The runner was interrupted (Ctrl-C, SIGTERM, SIGHUP): stop every run still going, with what
    it started (an interrupt first, so that its fixtures tear its fleet down), kill what is left after
    ``grace`` seconds, then tear down each run's fleet, so that no host is left running."""
    running = [(run, proc) for run, proc in started if proc.poll() is None]
    for _run, proc in running:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
    deadline = time.monotonic() + grace
    for _run, proc in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for run, _proc in running:
        fleet_dir = run.env["INFEROPS_FLEET_DIR"]
        for directory in (fleet_dir, fleet_dir + "-molecule"):
            if os.path.isdir(directory):
                env = {**run.env, "INFEROPS_FLEET_DIR": directory}
                subprocess.run([sys.executable, "-m", "tests.harness.fleet", "down"], cwd=REPO_ROOT, env=env, check=False, stdin=subprocess.DEVNULL)


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def say(text: str) -> None:
    print(f"[versions {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# ---- CLI ----------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.harness.versions", description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("setup", help="create the missing venvs").add_argument("versions", nargs="*", help="minor versions (default: all)")
    sub.add_parser("test", help="run each version's tests side by side").add_argument(
        "versions", nargs="*", help=f"minor versions and/or {MOLECULE!r}, {REAL_VLLM!r} (default: every version, molecule and the real vLLM)"
    )
    sub.add_parser("bin", help="print the bin directory of a version's venv").add_argument("version", help="minor, release, oldest, newest or dev")
    sub.add_parser("python", help="print the controller Python (X.Y) of a version").add_argument("version", help="minor, release, oldest, newest or dev")
    sub.add_parser("list", help="show the matrix and the venvs")
    args = parser.parse_args(argv)
    try:
        return dispatch(args)
    except VersionsError as err:
        print(f"versions: {err}", file=sys.stderr)
        return 2


def dispatch(args: argparse.Namespace) -> int:
    if args.cmd == "setup":
        prepare(args.versions)
    elif args.cmd == "bin":
        venv = prepare([args.version])[0]
        print(venv.bin)
    elif args.cmd == "python":
        print(pick(load_matrix(), args.version).python)
    elif args.cmd == "list":
        support = support_pins(REQUIREMENTS_FILE.read_text(encoding="utf-8"))
        for version in load_matrix():
            venv = plan_venv(version, support, default_cache_dir())
            state = "ready" if version.runs == "dev" or venv.ready() else "missing"
            print(f"{version.release}\t{version.python}\t{version.runs}\t{state}\t{venv.path}")
    elif args.cmd == "test":
        matrix = load_matrix()
        names = args.versions or [v.minor for v in matrix] + [MOLECULE, REAL_VLLM]
        minors = [name for name in names if name not in (MOLECULE, REAL_VLLM)]
        venvs = prepare(minors) if minors else []
        dev = pick(matrix, "dev") if MOLECULE in names else None
        real_vllm = prepare(["newest"])[0] if REAL_VLLM in names else None
        lanes = plan_lanes(venvs, dev, default_fleet_dir(), real_vllm=real_vllm)
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as background:
            for run in (run for lane in lanes for run in lane if run.log.stem == REAL_VLLM):
                run.needs = background.submit(prepare_real_vllm)
            return execute(lanes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
