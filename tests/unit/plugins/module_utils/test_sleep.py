"""A sleeping vLLM (module_utils/_sleep, and the precheck's report of one): /is_sleeping read over real
HTTP from the simulator's sleep mode on loopback, the answer's forms, and the precheck's verdict and
reason for a server asleep (pass with reason sleeping, or fail with the option sleeping: fail)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils._load import http_fetch
from ansible_collections.inferops.runbooks.plugins.module_utils._sleep import parse_answer, read_sleep
from ansible_collections.inferops.runbooks.plugins.plugin_utils._precheck_phase import generates_wanted, sleep_wanted
from ansible_collections.inferops.runbooks.plugins.plugin_utils._sleeping import sleep_url
from tests.unit.harness.test_simulator import SimProcess, free_port
from tests.unit.plugins.module_utils.observations import CRASHED, UNIT, options, precheck_observed, precheck_report, probe_result

API_KEY = "sk-sleep-test"


@pytest.fixture
def vllm() -> Iterator[SimProcess]:
    sim = SimProcess(SIM_ENGINE="vllm", SIM_SLEEP_MODE="1", SIM_API_KEY=API_KEY, SIM_SPEED="0.03", SIM_WARMUP_SECONDS="0.3")
    try:
        assert sim.wait_status("/health", 200, timeout=30) == 200
        yield sim
    finally:
        sim.close()


def test_the_url_is_beside_the_health_url() -> None:
    assert sleep_url("http://127.0.0.1:8000/health", "vllm") == "http://127.0.0.1:8000/is_sleeping"
    assert sleep_url("https://[::1]:8443/health?x=1", "vllm") == "https://[::1]:8443/is_sleeping"
    assert sleep_url("http://127.0.0.1:30000/health", "sglang") is None  # no sleep mode: never asked


@pytest.mark.parametrize(
    ("status", "body", "sleeping"),
    [
        (200, b'{"is_sleeping": true}', True),
        (200, b'{"is_sleeping":false}', False),
        (200, b'{"is_sleeping": "yes"}', None),
        (200, b"<html>", None),
        (404, b'{"detail":"Not Found"}', None),
        (None, b"", None),
    ],
)
def test_the_answer_is_read_as_vllm_gives_it(status: int | None, body: bytes, sleeping: bool | None) -> None:
    assert parse_answer(status, body) is sleeping


def test_the_state_is_read_from_a_server_falling_asleep_and_waking(vllm: SimProcess) -> None:
    url, fetch = f"http://127.0.0.1:{vllm.port}/is_sleeping", http_fetch()
    assert read_sleep(url, API_KEY, fetch) == {"url": url, "sleeping": False, "status": 200, "error": None}
    assert vllm.request("POST", "/sleep") == (200, b"")
    assert read_sleep(url, API_KEY, fetch)["sleeping"] is True
    assert vllm.status("/health") == 200  # what a health check alone sees
    assert read_sleep(url, None, fetch)["sleeping"] is True  # vLLM asks the key for /v1 paths only
    assert "wake up the engine" not in vllm.text  # reading the state never wakes it
    assert vllm.request("POST", "/wake_up") == (200, b"")
    assert read_sleep(url, API_KEY, fetch)["sleeping"] is False


def test_a_server_without_sleep_mode_or_gone_is_not_known() -> None:
    plain = SimProcess(SIM_ENGINE="vllm", SIM_SPEED="0.03", SIM_WARMUP_SECONDS="0.3")
    try:
        assert plain.wait_status("/health", 200, timeout=30) == 200
        found = read_sleep(f"http://127.0.0.1:{plain.port}/is_sleeping", None, http_fetch())
        assert found["sleeping"] is None and found["status"] == 404 and "VLLM_SERVER_DEV_MODE" in found["error"]
    finally:
        plain.close()
    gone = read_sleep(f"http://127.0.0.1:{free_port()}/is_sleeping", None, http_fetch())
    assert gone["sleeping"] is None and gone["status"] is None and gone["error"]


ASLEEP = {"url": "http://127.0.0.1:8000/is_sleeping", "sleeping": True, "status": 200, "error": None}


def test_a_sleeping_server_passes_the_precheck_with_reason_sleeping() -> None:
    report = precheck_report(options=options(engine="vllm", smoke_test=True), sleep=ASLEEP)
    assert (report["verdict"], report["reason"]) == ("pass", "sleeping")
    assert report["msg"].startswith(f"{UNIT} is active (running) and asleep (vLLM sleep mode: {ASLEEP['url']} says is_sleeping true)")
    assert "no generation sent" in report["msg"] and report["sleep"]["sleeping"] is True


def test_a_pipeline_that_needs_the_server_awake_fails_it() -> None:
    report = precheck_report(options=options(engine="vllm", sleeping="fail"), sleep=ASLEEP)
    assert (report["verdict"], report["reason"]) == ("fail", "sleeping")


def test_a_sleeping_server_that_is_broken_fails_on_what_is_broken() -> None:
    report = precheck_report(options=options(engine="vllm"), sleep=ASLEEP, probe=probe_result(CRASHED))
    assert report["verdict"] == "fail" and report["reason"] == "fatal_log"


@pytest.mark.parametrize("sleep", [{}, {**ASLEEP, "sleeping": False}, {**ASLEEP, "sleeping": None, "status": 404}])
def test_a_server_awake_or_not_known_is_checked_as_before(sleep: dict[str, object]) -> None:
    report = precheck_report(options=options(engine="vllm"), sleep=sleep)
    assert (report["verdict"], report["reason"]) == ("pass", "ready")


def test_no_generation_is_sent_to_a_sleeping_server_and_the_state_is_read_for_vllm_only() -> None:
    awake = precheck_observed(options=options(engine="vllm", smoke_test=True))
    assert generates_wanted(awake, "smoke_test") and sleep_wanted(awake) == "http://127.0.0.1:30000/is_sleeping"
    assert not generates_wanted({**awake, "sleep": ASLEEP}, "smoke_test")
    assert not generates_wanted({**awake, "sleep": ASLEEP, "options": options(engine="vllm", canary=True)}, "canary")
    assert sleep_wanted(precheck_observed(options=options(engine="sglang"))) is None
