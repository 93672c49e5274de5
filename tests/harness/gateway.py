"""The real SGLang Model Gateway (``smg``) on this machine, for the tests of the router path.

The gateway is installed once per machine with pip, in a venv of its own
(``tests/requirements-gateway.txt``), beside the ansible-core venvs (``$INFEROPS_VENV_CACHE``, default
``/var/cache/inferops-venvs`` as root), in ``smg-py<version>-<key>``, where ``<key>`` hashes the
requirements file. Its last release under the older name, ``sglang-router`` 0.3.2
(``tests/requirements-gateway-sglang-router.txt``), gets a venv of its own the same way, for the
router client's tests against it: it speaks the same worker API, runs as ``smg launch`` too, and
logs in text only (``calls`` and ``changes`` read smg's log alone).

``Gateway`` runs ``smg launch`` as a process of the test, on a loopback address by default or on an
address of the test network (the fleet's hosts are reached from this machine, and the gateway checks
each worker's health and asks it for its model before it lists it). Its metrics listener is bound
to the same address, on a port of its own. With an admin key, the worker routes need it
(``--control-plane-api-keys``).

The test hosts' servers are registered with ``behind_gateway`` once they serve, their simulator
listening beyond its loopback (``SERVED_TO_CONTROLLER`` in their scenario).

What the gateway was asked is read from its own log (``--log-json``): each worker route's answer
(``finished processing request`` / ``request failed``, with method, path and status) and each
addition or removal it queued (``Job submitted: type=AddWorker|RemoveWorker, worker=<url>``). The log
stamps whole seconds, in UTC.

CLI (from the repository root)::

    python -m tests.harness.gateway setup     # create the venvs (cached)
    python -m tests.harness.gateway path      # where smg's smg is
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from tests.harness.fleet import Fleet, file_lock
from tests.harness.versions import default_cache_dir, python_version

REPO_ROOT = Path(__file__).resolve().parents[2]
SMG = "smg"
SGLANG_ROUTER = "sglang-router"
# each package's pins, one venv each
REQUIREMENTS = {
    SMG: REPO_ROOT / "tests" / "requirements-gateway.txt",
    SGLANG_ROUTER: REPO_ROOT / "tests" / "requirements-gateway-sglang-router.txt",
}
COMPLETE_STAMP = ".inferops-complete"
INTERPRETER = Path("/usr/bin/python3")
LOOPBACK = "127.0.0.1"
START_TIMEOUT = 30.0
SHUTDOWN_GRACE = 1
PR_SET_PDEATHSIG = 1
STOP_TIMEOUT = 20.0
WORKER_ROUTE = re.compile(r"^/workers(/[^/?]*)?$")
QUEUED = re.compile(r"^Job submitted: type=(AddWorker|RemoveWorker), worker=(\S+?),")
PROBE_ANSWERED = "finished probe request"
# the simulator listening on every address of its test host: the gateway on this machine reaches it
SERVED_TO_CONTROLLER = {"SIM_HOST": "0.0.0.0"}
SERVES = "python3 -c \"import urllib.request as u; u.urlopen('http://127.0.0.1:30000/health_generate', timeout=5)\""
ANSWERED = ("finished processing request", "request failed with client error", "request failed with server error")


class GatewayError(RuntimeError):
    """The gateway could not be installed or started (the message says why, with its output)."""


# -- the venv ---------------------------------------------------------------------------------------


def venv_path(package: str = SMG, cache_dir: Path | None = None, interpreter: Path = INTERPRETER) -> Path:
    version = python_version(interpreter) or "unknown"
    key = hashlib.sha256(version.encode() + REQUIREMENTS[package].read_bytes()).hexdigest()[:10]
    return (cache_dir or default_cache_dir()) / f"{package}-py{version}-{key}"


def ensure(package: str = SMG, cache_dir: Path | None = None) -> Path:
    """The ``smg`` executable of the package's venv; the venv is created first when missing (under a lock)."""
    requirements = REQUIREMENTS[package]
    path = venv_path(package, cache_dir)
    executable = path / "bin" / "smg"
    if (path / COMPLETE_STAMP).is_file():
        return executable
    path.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(path.with_name(path.name + ".lock")):
        if (path / COMPLETE_STAMP).is_file():
            return executable
        started = time.monotonic()
        shutil.rmtree(path, ignore_errors=True)
        steps = [
            [str(INTERPRETER), "-m", "venv", str(path)],
            [str(path / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r", str(requirements)],
        ]
        for step in steps:
            proc = subprocess.run(step, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                shutil.rmtree(path, ignore_errors=True)
                raise GatewayError(f"{' '.join(step)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
        (path / COMPLETE_STAMP).write_text(requirements.read_text(encoding="utf-8"), encoding="utf-8")
        print(f"gateway: venv {path} created in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return executable


# -- what the gateway was asked -------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One request to a worker route, as the gateway logged its answer."""

    at: float  # the second it was answered (the log's stamp)
    method: str
    path: str
    status: int

    @property
    def verb(self) -> str:
        """``list``, ``add`` or ``remove``."""
        return {"GET": "list", "POST": "add", "DELETE": "remove"}.get(self.method, self.method)

    @property
    def authorized(self) -> bool:
        return self.status != 401


@dataclass(frozen=True)
class Change:
    """An addition or a removal the gateway queued for a worker."""

    at: float
    verb: str  # add | remove
    worker_url: str


def _stamp(text: str) -> float:
    """The log's stamp (UTC, whole seconds, whatever the local time zone) as a time.time()."""
    return datetime.datetime.strptime(text, "%Y-%m-%d %H:%M:%S").replace(tzinfo=datetime.timezone.utc).timestamp()


def _records(lines: Iterable[str]) -> list[dict[str, Any]]:
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # the banner
        if isinstance(record, dict):
            records.append(record)
    return records


def calls_in(lines: Iterable[str]) -> list[Call]:
    """The worker routes' answers a JSON log holds, in order."""
    calls = []
    for record in _records(lines):
        span = record.get("span") or {}
        if record.get("message") in ANSWERED and WORKER_ROUTE.match(str(span.get("path", ""))) and "status_code" in span:
            calls.append(Call(_stamp(record["timestamp"]), str(span["method"]), str(span["path"]), int(span["status_code"])))
    return calls


def changes_in(lines: Iterable[str]) -> list[Change]:
    """The additions and removals a JSON log holds, in order: only those asked over HTTP (not the
    workers of the command line)."""
    changes = []
    for record in _records(lines):
        queued = QUEUED.match(str(record.get("message", "")))
        if queued and (record.get("span") or {}).get("path"):
            verb = "add" if queued.group(1) == "AddWorker" else "remove"
            changes.append(Change(_stamp(record["timestamp"]), verb, queued.group(2)))
    return changes


# -- the process ------------------------------------------------------------------------------------


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _die_with_parent() -> None:
    """In the child before it runs the gateway: killed when the test process that started it dies
    (a run killed mid-test leaves no gateway behind)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class Gateway:
    """``smg launch`` on ``host``:<a free port>; ``with Gateway(admin_key=...) as gateway``.

    ``startup_delay`` is the gateway's ``--worker-startup-delay``: an addition is listed that many
    seconds later (the gateway waits before its first look at the new worker); smg only, as ``calls``
    and ``changes``. ``policy`` is the gateway's ``--policy`` (its own default when None)."""

    def __init__(
        self,
        host: str = LOOPBACK,
        admin_key: str | None = None,
        startup_delay: float = 0,
        log_level: str = "debug",
        package: str = SMG,
        policy: str | None = None,
    ) -> None:
        if package not in REQUIREMENTS:
            raise GatewayError(f"unknown gateway package {package!r}: one of {', '.join(REQUIREMENTS)}")
        if package != SMG and startup_delay:
            raise GatewayError(f"startup_delay is smg's --worker-startup-delay: {package} has none")
        self.package = package
        self.host = host
        self.admin_key = admin_key
        self.startup_delay = startup_delay
        self.log_level = log_level
        self.policy = policy
        self.port = 0
        self._dir = Path(tempfile.mkdtemp(prefix="inferops-gateway-"))
        self.log_path = self._dir / "smg.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._since = 0  # log lines before this one are not the test's
        self._marks = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self, executable: Path, port: int, metrics_port: int) -> list[str]:
        argv = [str(executable), "launch", "--host", self.host, "--port", str(port)]
        argv += ["--prometheus-host", self.host, "--prometheus-port", str(metrics_port), "--log-level", self.log_level]
        if self.package == SMG:
            argv += ["--log-json", "--worker-startup-delay", f"{self.startup_delay:g}"]
        # no request of a test outlives it: the gateway need not wait for any when it stops
        argv += ["--shutdown-grace-period-secs", str(SHUTDOWN_GRACE)]
        if self.policy:
            argv += ["--policy", self.policy]
        if self.admin_key:
            argv += ["--control-plane-api-keys", f"inferops-tests:tests:admin:{self.admin_key}"]
        return argv

    def start(self) -> Self:
        executable = ensure(self.package)
        try:
            # a port taken between the look and the bind: the gateway exits at once, try another
            for _attempt in range(3):
                if self._launch(executable):
                    return self
            raise GatewayError(f"the gateway did not start on {self.host}: {self.output()[-3000:]}")
        except BaseException:
            self.stop()
            raise

    def _launch(self, executable: Path) -> bool:
        self.port = free_port(self.host)
        argv = self.command(executable, self.port, free_port(self.host))
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_parent
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return False
            if self._answers():
                return True
            time.sleep(0.1)
        raise GatewayError(f"the gateway did not answer at {self.url} within {START_TIMEOUT:.0f} s: {self.output()[-3000:]}")

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(self._request("GET", "/health"), timeout=2) as answer:
                return int(answer.status) == 200
        except (OSError, urllib.error.URLError):
            return False

    def stop(self) -> None:
        """SIGTERM, then SIGKILL to its process group when it does not exit in time; its log goes."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def output(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    # -- the worker API, as a test uses it -------------------------------------------------------

    def _request(self, method: str, path: str, body: object = None) -> urllib.request.Request:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method, headers={"Content-Type": "application/json"})
        if self.admin_key:
            request.add_header("Authorization", f"Bearer {self.admin_key}")
        return request

    def call(self, method: str, path: str, body: object = None) -> tuple[int, Any]:
        """One call to the gateway, with the admin key: (status, JSON body or text)."""
        no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with no_proxy.open(self._request(method, path, body), timeout=10) as answer:
                status, raw = int(answer.status), answer.read()
        except urllib.error.HTTPError as error:
            with error:
                status, raw = error.code, error.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def workers(self) -> list[dict[str, Any]]:
        status, body = self.call("GET", "/workers")
        if status != 200 or not isinstance(body, dict):
            raise GatewayError(f"GET /workers answered {status}: {body}")
        return list(body["workers"])

    def registered(self) -> list[str]:
        """The URLs of the workers the gateway lists, sorted."""
        return sorted(str(worker["url"]) for worker in self.workers())

    def add_workers(self, urls: Sequence[str], timeout: float = 60) -> None:
        """Registers the workers (each must serve) and waits until the gateway lists them all; the
        calls and changes seen so far are then forgotten: a test reads only its own."""
        for url in urls:
            status, body = self.call("POST", "/workers", {"url": url})
            if status != 202:
                raise GatewayError(f"POST /workers {url} answered {status}: {body}")
        deadline = time.monotonic() + timeout
        while not set(urls) <= set(self.registered()):
            if time.monotonic() > deadline:
                raise GatewayError(f"the gateway did not list {sorted(set(urls) - set(self.registered()))} within {timeout:.0f} s")
            time.sleep(0.2)
        self.forget()

    def forget(self) -> None:
        """What the gateway was asked until now is left out of ``calls`` and ``changes``."""
        self._since = len(self._log_lines()) if self.package == SMG else 0

    def _log_lines(self) -> list[str]:
        """The gateway's log up to now. It writes its log from a thread of its own, a moment after
        it answers: a marked request's answer written means that all before it are."""
        if self.package != SMG:
            raise GatewayError(f"{self.package} logs in text only: what it was asked is read from smg's log")
        self._marks += 1
        mark = f"inferops-mark-{os.getpid()}-{self._marks}"
        request = urllib.request.Request(self.url + "/health", headers={"x-request-id": mark})
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=10):
            pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            lines = self.output().splitlines()
            for index, line in enumerate(lines):
                if mark in line and PROBE_ANSWERED in line:
                    return lines[: index + 1]
            time.sleep(0.05)
        raise GatewayError(f"the gateway did not log the request {mark} within 10 s")

    @property
    def calls(self) -> list[Call]:
        """The worker routes' answers since the last ``forget``, in order."""
        return calls_in(self._log_lines()[self._since :])

    def changes(self) -> list[tuple[str, str]]:
        """The additions and removals since the last ``forget``, in order, as (verb, worker URL)."""
        return [(change.verb, change.worker_url) for change in self.timed_changes()]

    def timed_changes(self) -> list[Change]:
        return changes_in(self._log_lines()[self._since :])


def worker_urls(fleet: Fleet, hosts: Sequence[str]) -> dict[str, str]:
    """Each test host's server as the router knows it (the role's default worker URL)."""
    return {host: f"http://{fleet.address(host)}:30000" for host in hosts}


def behind_gateway(gateway: Gateway, fleet: Fleet, hosts: Sequence[str]) -> dict[str, str]:
    """Once each host's server generates, its worker registered with the gateway, which checks it and
    reads its model first (the server must listen beyond its loopback: SERVED_TO_CONTROLLER); the
    worker URLs by host. What the gateway was asked until then is forgotten: a test reads its own."""
    for host in hosts:
        fleet.wait_for(host, SERVES, timeout=120)
    urls = worker_urls(fleet, hosts)
    gateway.add_workers(list(urls.values()))
    return urls


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.harness.gateway", description=__doc__.split("\n", 1)[0])
    parser.add_argument("cmd", choices=("setup", "path"))
    args = parser.parse_args(argv)
    try:
        executables = [ensure(package) for package in REQUIREMENTS] if args.cmd == "setup" else [venv_path() / "bin" / "smg"]
    except GatewayError as error:
        print(f"gateway: {error}", file=sys.stderr)
        return 1
    print("\n".join(map(str, executables)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
