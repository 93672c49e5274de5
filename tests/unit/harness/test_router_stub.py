"""The router stand-in speaks the gateway's worker API over real HTTP on 127.0.0.1 and records calls."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

from tests.harness.router_stub import RouterStub

KEY = "admin-key"


def call(router: RouterStub, method: str, path: str, body: object = None, key: str | None = KEY) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(router.url + path, data=data, method=method, headers={"Content-Type": "application/json"})
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as err:
        return err.code, json.load(err)


def test_remove_and_add_a_worker_like_the_gateway() -> None:
    with RouterStub(workers=["http://10.0.0.1:30000", "http://10.0.0.2:30000"], admin_key=KEY, apply_after=0.05) as router:
        status, listing = call(router, "GET", "/workers")
        assert status == 200 and listing["total"] == 2
        worker = next(w for w in listing["workers"] if w["url"] == "http://10.0.0.2:30000")
        status, removed = call(router, "DELETE", f"/workers/{worker['id']}")
        assert status == 202 and removed["status"] == "accepted"
        time.sleep(0.2)
        assert router.registered() == ["http://10.0.0.1:30000"]
        status, added = call(router, "POST", "/workers", {"url": "http://10.0.0.2:30000", "priority": 60})
        assert status == 202 and added["location"] == f"/workers/{added['worker_id']}"
        time.sleep(0.2)
        assert router.registered() == ["http://10.0.0.1:30000", "http://10.0.0.2:30000"]
        assert router.changes() == [("remove", "http://10.0.0.2:30000"), ("add", "http://10.0.0.2:30000")]


def test_refusals_like_the_gateway() -> None:
    with RouterStub(admin_key=KEY) as router:
        assert call(router, "GET", "/workers", key=None)[0] == 401
        assert call(router, "GET", "/workers", key="wrong")[0] == 401
        assert call(router, "DELETE", "/workers/not-a-uuid")[0] == 400
        assert call(router, "DELETE", "/workers/6f1c2a9e-8f0e-4d6b-9a1a-0c8e2b7d5f31")[0] == 404
        assert call(router, "POST", "/workers", {"no": "url"})[0] == 422
        assert [c.authorized for c in router.calls] == [False, False, True, True, True]
        assert all(KEY not in json.dumps(c.body) for c in router.calls)
