"""The simulator behind the real SGLang Model Gateway (smg, tests/harness/gateway.py), both on 127.0.0.1:
the gateway registers it only after its own checks (health, then the model and server info it reads),
then routes SGLang's and the OpenAI routes to it; for the vLLM flavour too, and with the server's
API key passed along with the registration."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness.gateway import Gateway
from tests.unit.harness.conftest import StartSim
from tests.unit.harness.test_simulator import READY, SimProcess

API_KEY = "sk-simulator-behind-gateway"
MODEL = "/models/DeepSeek-R1"
ACCESS = re.compile(r'"(GET|POST) (\S+) HTTP/1\.1" (\d{3})')
# what the gateway asks an SGLang server before it lists it (seen in the simulator's access lines)
SGLANG_DISCOVERY = {"/health", "/v1/models", "/server_info", "/model_info"}
VLLM_DISCOVERY = {"/health", "/v1/models", "/version"}


@pytest.fixture
def gateway() -> Iterator[Gateway]:
    with Gateway() as started:
        yield started


def served(start_sim: StartSim, **env: str) -> SimProcess:
    sim = start_sim(SIM_TP="1", **env)
    sim.wait_for(READY if env.get("SIM_ENGINE") != "vllm" else "Application startup complete.", 30)
    return sim


def post(gateway: Gateway, path: str, payload: dict[str, Any]) -> tuple[int, Any, str]:
    """(status, JSON body, the worker the gateway routed to) of a request sent through the gateway."""
    request = urllib.request.Request(gateway.url + path, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=30) as answer:
            return int(answer.status), json.loads(answer.read()), str(answer.headers.get("x-smg-routed-worker-id"))
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read().decode(errors="replace"), ""


def asked(sim: SimProcess) -> dict[str, set[int]]:
    """The paths the simulator was asked after its start, with the statuses it answered."""
    seen: dict[str, set[int]] = {}
    for method, target, status in ACCESS.findall(sim.text.split(READY, 1)[-1]):
        seen.setdefault(f"{method} {target.split('?', 1)[0]}", set()).add(int(status))
    return seen


def asked_at_last(sim: SimProcess, wanted: set[str], timeout: float = 5) -> dict[str, set[int]]:
    """``asked``, once every request of ``wanted`` is in the simulator's output (a request's line reaches
    the test through the simulator's output, which can be a moment after the client read the answer), or
    after ``timeout``."""
    deadline = time.monotonic() + timeout
    seen = asked(sim)
    while not wanted <= set(seen) and time.monotonic() < deadline:
        time.sleep(0.05)
        seen = asked(sim)
    return seen


def register(gateway: Gateway, sim: SimProcess, **spec: str) -> str:
    """The simulator's worker added to the gateway (with ``spec``), once the gateway lists it."""
    url = f"http://127.0.0.1:{sim.port}"
    status, body = gateway.call("POST", "/workers", {"url": url, **spec})
    assert status == 202, body
    deadline = time.monotonic() + 30
    while url not in gateway.registered():
        assert time.monotonic() < deadline, f"the gateway did not list {url}:\n{gateway.output()[-3000:]}"
        time.sleep(0.2)
    return url


def test_the_gateway_lists_an_sglang_server_after_its_checks_and_routes_every_route_to_it(gateway: Gateway, start_sim: StartSim) -> None:
    sim = served(start_sim)
    url = register(gateway, sim)

    (listed,) = gateway.workers()
    assert (listed["url"], listed["model_id"], listed["runtime_type"], listed["status"]) == (url, MODEL, "sglang", "ready")
    answered = asked(sim)
    assert {f"GET {path}" for path in SGLANG_DISCOVERY} <= set(answered), answered
    assert all(answered[f"GET {path}"] == {200} for path in SGLANG_DISCOVERY), answered

    status, body, routed = post(gateway, "/generate", {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 4}})
    assert (status, routed) == (200, url) and body["text"] and body["meta_info"]["completion_tokens"] == 4, body
    status, body, routed = post(gateway, "/v1/completions", {"model": MODEL, "prompt": "The capital of France is", "max_tokens": 4})
    assert (status, routed) == (200, url) and body["object"] == "text_completion" and body["choices"][0]["text"], body
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "The capital of France?"}], "max_tokens": 4}
    status, body, routed = post(gateway, "/v1/chat/completions", chat)
    assert (status, routed) == (200, url) and body["choices"][0]["message"]["content"], body
    routed_to_it = {"POST /generate", "POST /v1/completions", "POST /v1/chat/completions"}
    assert routed_to_it <= set(asked_at_last(sim, routed_to_it)), asked(sim)


def test_a_key_protected_server_is_listed_with_its_key_and_answers_through_the_gateway(gateway: Gateway, start_sim: StartSim) -> None:
    sim = served(start_sim, SIM_API_KEY=API_KEY)
    url = register(gateway, sim, api_key=API_KEY)
    assert gateway.registered() == [url]
    status, body, routed = post(gateway, "/v1/completions", {"model": MODEL, "prompt": "Hello", "max_tokens": 2})
    assert (status, routed) == (200, url), body


def test_the_gateway_lists_a_vllm_server_and_routes_the_openai_routes_to_it(gateway: Gateway, start_sim: StartSim) -> None:
    sim = served(start_sim, SIM_ENGINE="vllm")
    url = register(gateway, sim)
    (listed,) = gateway.workers()
    assert (listed["url"], listed["runtime_type"], listed["status"]) == (url, "vllm", "ready")
    answered = asked(sim)
    assert {f"GET {path}" for path in VLLM_DISCOVERY} <= set(answered), answered
    status, body, routed = post(gateway, "/v1/completions", {"model": MODEL, "prompt": "Hello", "max_tokens": 2})
    assert (status, routed) == (200, url) and body["choices"][0]["text"], body
