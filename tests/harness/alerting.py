"""A real Alertmanager and a real Prometheus (Debian's ``prometheus-alertmanager`` and ``prometheus``)
run by a test on loopback, each with a configuration and a storage directory of its own in a temporary
directory, and stopped (the process, then the directory) when the test leaves the ``with`` block.

Also a webhook receiver on loopback that keeps every delivery Alertmanager makes, with the time it came.

    with Alertmanager(config) as am:      # config: Alertmanager's YAML as a mapping
        am.url                            # http://127.0.0.1:<port>
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import types
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

import yaml

LOOPBACK = "127.0.0.1"
ALERTMANAGER = "prometheus-alertmanager"
PROMETHEUS = "prometheus"
READY_TIMEOUT = 30.0


class AlertingError(RuntimeError):
    """The server could not be started."""


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def missing(binary: str) -> str | None:
    """Why ``binary`` cannot run here, or None."""
    if shutil.which(binary) is None:
        return f"no {binary} on PATH (Debian's {'prometheus' if binary == PROMETHEUS else 'prometheus-alertmanager'}; scripts/setup.sh installs it)"
    return None


class _Server:
    """One server process with its temporary directory; started on enter, stopped on exit."""

    binary = ""
    config_name = ""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.port = free_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.dir = Path(tempfile.mkdtemp(prefix=f"inferops-{self.binary}-"))
        self.log_path = self.dir / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def args(self) -> list[str]:
        raise NotImplementedError

    def __enter__(self) -> Self:
        problem = missing(self.binary)
        if problem:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise AlertingError(problem)
        (self.dir / self.config_name).write_text(yaml.safe_dump(self.config, sort_keys=False), encoding="utf-8")
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen([self.binary, *self.args()], cwd=self.dir, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AlertingError(f"{self.binary} exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                if answer.status == 200:
                    return
            time.sleep(0.2)
        raise AlertingError(f"{self.binary} not ready within {READY_TIMEOUT:.0f} s:\n{self.log()[-3000:]}")

    def log(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        return ""

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s; the directory removed."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=10) as answer:
            return json.loads(answer.read())


class Alertmanager(_Server):
    """``prometheus-alertmanager`` on loopback, clustering off (it would listen on every address)."""

    binary = ALERTMANAGER
    config_name = "alertmanager.yml"

    def args(self) -> list[str]:
        return [
            f"--config.file={self.dir / self.config_name}",
            f"--storage.path={self.dir / 'data'}",
            f"--web.listen-address={LOOPBACK}:{self.port}",
            "--cluster.listen-address=",
            "--log.level=debug",
        ]

    def silences(self) -> list[dict[str, Any]]:
        return list(self.get("/api/v2/silences"))


class Prometheus(_Server):
    """``prometheus`` on loopback with the given configuration (rule files are paths in it)."""

    binary = PROMETHEUS
    config_name = "prometheus.yml"

    def args(self) -> list[str]:
        return [
            f"--config.file={self.dir / self.config_name}",
            f"--storage.tsdb.path={self.dir / 'data'}",
            f"--web.listen-address={LOOPBACK}:{self.port}",
            # a firing alert is sent again this often (1m by default): the test's alerts come quicker
            "--rules.alert.resend-delay=1s",
        ]

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.get("/api/v1/alerts")["data"]["alerts"])

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result (a vector: each element's ``metric`` and ``value``)."""
        return list(self.get(f"/api/v1/query?{urllib.parse.urlencode({'query': expr})}")["data"]["result"])


class Delivery(dict[str, Any]):
    """One webhook delivery: Alertmanager's payload, with ``received_at`` (epoch seconds) added."""


class WebhookReceiver:
    """An HTTP server on loopback that keeps each POST's JSON body (Alertmanager's webhook deliveries)."""

    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                delivery = Delivery(json.loads(body or b"{}"))
                delivery["received_at"] = time.time()
                with receiver._lock:
                    receiver.deliveries.append(delivery)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self.url = f"http://{LOOPBACK}:{self.server.server_address[1]}/alerts"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: types.TracebackType | None) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)

    def alerts(self, status: str | None = None) -> list[dict[str, Any]]:
        """Every alert of every delivery (with the delivery's ``received_at``), optionally of one status."""
        with self._lock:
            found = [{**alert, "received_at": d["received_at"]} for d in self.deliveries for alert in d.get("alerts", [])]
        return [alert for alert in found if status is None or alert.get("status") == status]


def urlopen_status(url: str, method: str = "GET") -> int:
    """The HTTP status of one request (for tests that check a server is gone: 0 when nothing answers)."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=3) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return 0
