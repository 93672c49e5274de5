"""The client loop's pure parts (tests/harness/clients.py): the tally, the samples of the gateway's
workers, the spans a worker was out, and what counts as a whole answer."""

from __future__ import annotations

import pytest

from tests.harness.clients import (
    Routed,
    Sample,
    Span,
    Tally,
    answered,
    healthy_models,
    healthy_urls,
    lowest_serving,
    model_for,
    out_around,
    out_spans,
    routed_within,
)

A, B = "http://10.232.4.2:30000", "http://10.232.4.3:30000"


def samples(*listed: set[str]) -> list[Sample]:
    """One sample a second from t=0, each with the workers listed."""
    return [Sample(float(at), frozenset(urls)) for at, urls in enumerate(listed)]


def test_the_tally_counts_failures_and_keeps_the_longest_wait() -> None:
    tally = Tally()
    tally.record(0.2)
    tally.record(1.5, "HTTP 503")
    tally.record(0.4)
    assert (tally.sent, tally.failed, tally.longest_wait, tally.errors) == (3, 1, 1.5, ["HTTP 503"])


def test_only_the_workers_not_marked_unhealthy_are_serving() -> None:
    workers = [{"url": A, "model_id": "m1", "is_healthy": True}, {"url": B, "model_id": "m2", "is_healthy": False}]
    assert healthy_urls(workers) == {A}
    assert healthy_models(workers) == {"m1"}


def test_a_client_asks_in_turn_for_the_models_last_seen_served() -> None:
    seen = [Sample(0.0, frozenset({A, B}), frozenset({"old", "new"}))]
    assert [model_for(seen, turn, "default") for turn in range(3)] == ["new", "old", "new"]
    assert model_for([], 0, "default") == "default"


def test_the_lowest_serving_count_is_the_fewest_listed_at_any_sample() -> None:
    assert lowest_serving(samples({A, B}, {B}, {A, B})) == 1
    with pytest.raises(ValueError, match="no sample"):
        lowest_serving([])


def test_a_worker_out_and_back_is_one_span_from_its_first_absence_to_its_return() -> None:
    spans = out_spans(samples({A, B}, {B}, {B}, {A, B}, {A}), A)
    assert spans == [Span(last_in=0.0, out=1.0, back=3.0)]
    assert out_spans(samples({A, B}, {A, B}, {A}), B) == [Span(last_in=1.0, out=2.0, back=None)]
    assert out_spans(samples({B}, {A, B}), A) == [], "never listed before: not a span out"


def test_out_around_needs_one_span_over_the_stop_and_the_pass() -> None:
    seen = samples({A, B}, {B}, {B}, {A, B}, {B}, {A, B})
    assert out_around(seen, A, stopped=1.5, passed=2.5)
    assert not out_around(seen, A, stopped=1.5, passed=3.5), "back before its start passed"
    assert not out_around(seen, A, stopped=0.5, passed=2.5), "still listed at its stop"
    assert not out_around(seen, A, stopped=1.5, passed=4.5), "two spans, listed in between"


def test_a_request_in_flight_within_the_window_is_found() -> None:
    routes = [Routed(0.0, 0.9, A), Routed(1.0, 2.1, A), Routed(1.5, 1.6, B), Routed(3.0, 3.1, A)]
    assert routed_within(routes, A, begin=2.0, end=3.0) == [Routed(1.0, 2.1, A)]
    assert routed_within(routes, A, begin=2.2, end=2.9) == []


def test_a_whole_answer_is_a_body_with_choices_or_a_stream_that_ends_done() -> None:
    assert answered(b'{"choices": [{"text": "Paris"}]}', stream=False) is None
    assert "no choices" in str(answered(b'{"error": "overloaded"}', stream=False))
    assert "not JSON" in str(answered(b"<html>", stream=False))
    assert answered(b'data: {"choices": []}\n\ndata: [DONE]\n\n', stream=True) is None
    assert "did not end well" in str(answered(b'data: {"choices": []}\n\n', stream=True))
