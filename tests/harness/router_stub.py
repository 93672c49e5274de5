"""A stand-in for the SGLang Model Gateway (formerly sgl-router): its worker-management API, with
every call recorded in order.

It answers the worker routes of the gateway's current HTTP API, the way the gateway does:

* ``GET /workers``: ``{"workers": [{"id", "url", "model_id", ...}], "total": N, "stats": {...}}``
* ``POST /workers`` with ``{"url": ..., ...}``: 202 Accepted, ``{"status": "accepted", "worker_id", "url",
  "location"}``; like the gateway's job queue, the worker shows up in the list a moment later
* ``DELETE /workers/{worker_id}`` (a UUID): 202 Accepted; gone from the list a moment later;
  400 for an id that is not a UUID, 404 for an unknown one
* with an admin key, every worker route needs ``Authorization: Bearer <key>`` (401 otherwise)

It listens on 127.0.0.1 only (the role calls the router from the controller) and runs in a thread
of the test process. The key is never recorded, only whether a call carried the right one.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self, cast

LISTEN = "127.0.0.1"


@dataclass(frozen=True)
class Call:
    """One request the router received."""

    at: float  # time.time() when it arrived
    method: str
    path: str
    body: dict[str, Any]
    status: int
    authorized: bool
    worker_url: str | None  # the worker the call is about, when it is about one

    @property
    def verb(self) -> str:
        """``list``, ``add`` or ``remove``."""
        return {"GET": "list", "POST": "add", "DELETE": "remove"}.get(self.method, self.method)


@dataclass
class Worker:
    id: str
    url: str
    model_id: str = "default"
    priority: int = 50
    cost: float = 1.0
    worker_type: str = "regular"

    def info(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "url": self.url,
            "model_id": self.model_id,
            "priority": self.priority,
            "cost": self.cost,
            "worker_type": self.worker_type,
            "is_healthy": True,
            "load": 0,
            "connection_mode": "http",
        }


@dataclass
class RouterState:
    admin_key: str | None
    apply_after: float
    workers: dict[str, Worker] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class RouterStub:
    """The gateway's worker API on 127.0.0.1:<port>; ``with RouterStub(workers=[...]) as router``."""

    def __init__(self, workers: list[str] = (), admin_key: str | None = None, apply_after: float = 0.3) -> None:  # type: ignore[assignment]
        self.state = RouterState(admin_key=admin_key, apply_after=apply_after)
        for url in workers:
            worker = Worker(str(uuid.uuid4()), url)
            self.state.workers[worker.id] = worker
        self._server = _Server((LISTEN, 0), self.state)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="router-stub", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def calls(self) -> list[Call]:
        with self.state.lock:
            return list(self.state.calls)

    def changes(self) -> list[tuple[str, str | None]]:
        """The add and remove calls in order, as (verb, worker URL); listing is left out."""
        return [(call.verb, call.worker_url) for call in self.calls if call.method in ("POST", "DELETE")]

    def registered(self) -> list[str]:
        with self.state.lock:
            return sorted(worker.url for worker in self.state.workers.values())


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], state: RouterState) -> None:
        super().__init__(address, _Handler)
        self.state = state


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the calls are recorded instead."""

    def _handle(self, method: str) -> None:
        state = cast(_Server, self.server).state
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = None
        path = self.path.split("?", 1)[0]
        authorized = state.admin_key is None or self.headers.get("Authorization") == f"Bearer {state.admin_key}"
        status, payload, worker_url = self._answer(state, method, path, body, authorized)
        with state.lock:
            state.calls.append(Call(time.time(), method, path, body if isinstance(body, dict) else {}, status, authorized, worker_url))
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _answer(self, state: RouterState, method: str, path: str, body: Any, authorized: bool) -> tuple[int, dict[str, Any], str | None]:
        if path != "/workers" and not path.startswith("/workers/"):
            return 404, {"error": "not found"}, None
        if not authorized:
            return 401, {"error": "Unauthorized"}, None
        if method == "GET" and path == "/workers":
            with state.lock:
                infos = [worker.info() for worker in state.workers.values()]
            stats = {"prefill_count": 0, "decode_count": 0, "regular_count": len(infos)}
            return 200, {"workers": infos, "total": len(infos), "stats": stats}, None
        if method == "POST" and path == "/workers":
            return self._add(state, body)
        if method == "DELETE" and path.startswith("/workers/"):
            return self._remove(state, path.removeprefix("/workers/"))
        return 405, {"error": "Method Not Allowed"}, None

    def _add(self, state: RouterState, body: Any) -> tuple[int, dict[str, Any], str | None]:
        if not isinstance(body, dict) or not isinstance(body.get("url"), str):
            return 422, {"error": "url is required", "code": "BAD_REQUEST"}, None
        url = body["url"]
        with state.lock:
            existing = [worker.id for worker in state.workers.values() if worker.url == url]
        worker = Worker(existing[0] if existing else str(uuid.uuid4()), url)
        for name in ("model_id", "priority", "cost", "worker_type"):
            if name in body:
                setattr(worker, name, body[name])
        _later(state, lambda: state.workers.__setitem__(worker.id, worker))
        payload = {"status": "accepted", "worker_id": worker.id, "url": url, "location": f"/workers/{worker.id}", "message": "Worker addition queued"}
        return 202, payload, url

    def _remove(self, state: RouterState, worker_id: str) -> tuple[int, dict[str, Any], str | None]:
        try:
            uuid.UUID(worker_id)
        except ValueError:
            return 400, {"error": f"Invalid worker_id '{worker_id}' (expected UUID)", "code": "BAD_REQUEST"}, None
        with state.lock:
            worker = state.workers.get(worker_id)
        if worker is None:
            return 404, {"error": f"Worker {worker_id} not found", "code": "WORKER_NOT_FOUND"}, None
        _later(state, lambda: state.workers.pop(worker_id, None))
        return 202, {"status": "accepted", "worker_id": worker_id, "message": "Worker removal queued for background processing"}, worker.url


def _later(state: RouterState, change: Any) -> None:
    """Apply a change after the router's delay, as its background job queue does."""

    def apply() -> None:
        time.sleep(state.apply_after)
        with state.lock:
            change()

    threading.Thread(target=apply, daemon=True).start()
