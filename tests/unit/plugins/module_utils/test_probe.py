"""The look that service_probe makes, as a plain process (module_utils/_probe.py): defaults,
answers as the wait names them, and health paced within the look."""

from __future__ import annotations

import io
import json
import typing as t

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils import _probe


def test_options_missing_from_a_plain_call_take_the_modules_defaults() -> None:
    params = _probe.with_defaults({"unit": "vllm.service", "watch": 12.5})
    assert params["unit"] == "vllm.service" and params["watch"] == 12.5
    assert params["phase"] == "starting" and params["health_every"] == 0 and params["engine"] == "sglang"
    assert set(params) == set(_probe.argument_spec())


ANSWERS = [({"status": 200, "up": True}, "200"), ({"status": None, "up": True}, "up"), ({"status": None, "up": False}, "down")]


@pytest.mark.parametrize(("answer", "key"), ANSWERS)
def test_answers_are_named_as_the_wait_names_them(answer: dict[str, t.Any], key: str) -> None:
    assert _probe.health_key(answer) == key


def pacer(monkeypatch: pytest.MonkeyPatch, answers: list[int | None], **params: t.Any) -> _probe.HealthPacer:
    values = {"health_url": "http://127.0.0.1:30000/health", "health_timeout": 5.0, "validate_certs": True, "health_every": 1.0}
    values.update({"health_needed": 2, "health_early": True, "health_known": None, **params})
    queue = list(answers)

    def fake(url: str, timeout: float, validate_certs: bool) -> dict[str, t.Any]:
        status = queue.pop(0)
        return {"url": url, "up": status is not None, "status": status, "error": None if status else "connection refused", "seconds": 0.0}

    monkeypatch.setattr(_probe, "probe", fake)
    return _probe.HealthPacer(values)


def test_health_is_paced_only_once_the_port_is_open(monkeypatch: pytest.MonkeyPatch) -> None:
    closed = pacer(monkeypatch, [], health_known="down")
    assert not closed.active(_probe.phase_index("loading_weights"))
    assert closed.active(_probe.phase_index("warming_up"))
    assert pacer(monkeypatch, [], health_known="503").active(_probe.phase_index("loading_weights"))


def test_the_look_ends_at_a_different_answer_or_the_successes_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    paced = pacer(monkeypatch, [503, 503, 200, 200], health_known="503")
    assert [paced.take() for _answer in range(4)] == [False, False, True, True]
    assert [answer["status"] for answer in paced.history] == [503, 503, 200, 200]


def test_in_the_soak_only_a_different_answer_ends_the_look(monkeypatch: pytest.MonkeyPatch) -> None:
    paced = pacer(monkeypatch, [200, 200, 200, 503], health_known="200", health_early=False)
    assert [paced.take() for _answer in range(4)] == [False, False, False, True]


def test_a_plain_call_answers_json_and_a_refusal_as_failed(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({"unit": "sglang.service", "invocation_id": "not-an-id"})))
    _probe.cli()
    answer = json.loads(capsys.readouterr().out)
    assert answer["failed"] is True and "32 hexadecimal digits" in answer["msg"] and answer["python"]
