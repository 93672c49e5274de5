# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""When a planned restart silences its host, for how long, what the run record keeps, and when the silence is expired."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils import _run_record
from ansible_collections.inferops.runbooks.plugins.plugin_utils import _silences

OPTIONS = {
    "alertmanager_url": "http://127.0.0.1:9093",
    "budget": 3600,
    "alertmanager_margin": 1.5,
    "drain_timeout": 300,
    "load_url": "",
    "release_timeout": 120,
}


@pytest.mark.parametrize(
    ("url", "check_mode", "restart", "expected"),
    [("http://am:9093", False, True, True), ("", False, True, False), ("http://am:9093", True, True, False), ("http://am:9093", False, False, False)],
)
def test_a_silence_only_for_a_real_restart_with_an_alertmanager(url: str, check_mode: bool, restart: bool, expected: bool) -> None:
    assert _silences.wanted({"alertmanager_url": url}, check_mode, restart) is expected


def test_the_silence_an_interrupted_run_left_is_found_in_the_record() -> None:
    record = {"run_id": "r1", "silence": {"id": "s1", "url": "http://am:9093"}}
    assert _silences.left_by_earlier_run(record, "r2") == {"id": "s1", "url": "http://am:9093"}
    assert _silences.left_by_earlier_run(record, "r1") is None  # this run's own
    assert _silences.left_by_earlier_run({"run_id": "r1", "silence": None}, "r2") is None
    assert _silences.left_by_earlier_run(None, "r2") is None


def test_without_good_starts_the_silence_lasts_the_release_and_the_budget() -> None:
    seconds, why = _silences.seconds(OPTIONS, [])
    assert seconds == 120 + 3600
    assert "budget" in why


def test_with_good_starts_the_silence_lasts_the_eta_times_the_margin_and_the_drain_counts_with_a_load_url() -> None:
    starts = [{"total": 400.0, "phases": {"starting": 400.0}}] * 3
    seconds, why = _silences.seconds({**OPTIONS, "load_url": "http://127.0.0.1:30000/v1/loads", "alertmanager_margin": 2}, starts)
    assert 300 + 120 < seconds <= 300 + 120 + 3600
    assert "2x the expected start" in why


def test_the_comment_names_the_run_the_controller_and_the_user() -> None:
    text = _silences.comment("20261205T140000-42", "sim1", "ctl", "ops", "the budget")
    assert all(word in text for word in ("20261205T140000-42", "sim1", "ctl", "ops"))


@pytest.mark.parametrize(
    ("silence", "outcome", "expected"),
    [({"id": "s"}, "passed", True), ({"id": "s"}, "failed", True), ({"id": "s"}, "failed_elsewhere", False), (None, "passed", False), ({}, "failed", False)],
)
def test_the_silence_is_expired_at_the_end_unless_another_run_took_the_host(silence: Any, outcome: str, expected: bool) -> None:
    assert _silences.expire_wanted(silence, outcome) is expected


def test_a_bad_url_gives_a_warning_and_no_client() -> None:
    client, problem = _silences.client(OPTIONS, "", {}, "ftp://am")
    assert client is None and problem and "not an http" in problem


def test_the_report_names_the_silence_and_the_warnings() -> None:
    assert _silences.report_section(None, []) == {}
    section = _silences.report_section({"id": "s1", "url": "u", "expired": True}, ["unreachable"])
    assert section == {"silence": {"id": "s1", "url": "u", "expired": True}, "silence_warnings": ["unreachable"]}


def test_the_run_record_keeps_the_silence_across_steps_until_a_run_clears_it() -> None:
    noted = _silences.noted("s1", "http://am:9093", "sim1", 100.0)
    record = _run_record.advance(None, "sglang.service", "r1", "silence", {"silence": noted}, now=1.0)
    record = _run_record.advance(record, "sglang.service", "r1", "drain", {"traffic": {"out": True}}, now=2.0)
    assert record["silence"] == noted
    # an interrupted run's record, read by the next run: the silence is still there to expire
    taken = _run_record.advance(record, "sglang.service", "r2", "silence", {}, now=3.0)
    assert taken["silence"] == noted
    cleared = _run_record.advance(taken, "sglang.service", "r2", "done", {"silence": None}, now=4.0)
    assert cleared["silence"] is None
    assert _run_record.parse(json.dumps(cleared), "sglang.service")["step"] == "done"
