"""A third engine, written in this test alone: its driver (its rule pack, its log prefix, its load
gauges, its defaults) registered for the test, then the classifier, the wait's decisions and the drain's
load reading run on it as on SGLang and vLLM. Nothing outside the driver names it."""

from __future__ import annotations

import re
import typing as t
from collections.abc import Iterator

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils import _engines, _lines, _load
from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import Scanner, classify, classify_line, load_rules
from ansible_collections.inferops.runbooks.plugins.module_utils._types import ProbeResult
from ansible_collections.inferops.runbooks.plugins.plugin_utils._wait import worker_roles
from tests.unit.plugins.plugin_utils.test_wait import Clock, drive, health, new_wait, unit

NAME = "tinyllm"
RULE_PACK: list[dict[str, t.Any]] = [
    {"id": "tinyllm-out-of-blocks", "class": "fatal", "pattern": r"ran out of KV blocks", "reason": "tinyllm cannot hold its cache."},
    {"id": "tinyllm-loading", "class": "progress", "pattern": r"^loading weights", "reason": "Weights load.", "phase": "loading_weights"},
    {"id": "tinyllm-ready", "class": "ready", "pattern": r"^serving on port \d+", "reason": "tinyllm serves.", "phase": "ready"},
]
# ``tinyllm| E 12:00:03 w0 | message``: a level initial, a clock and a worker
PREFIX = _engines.LinePrefix(re.compile(r"^tinyllm\| (?P<level>[DIWEF]) (?P<timestamp>\d\d:\d\d:\d\d) (?P<logger>w\d+) \| "), "t")
DRIVER = _engines.EngineDriver(
    name=NAME,
    rule_pack=RULE_PACK,
    rule_changes={},
    smoke_by_default=True,
    histograms={},
    decode_log=_engines.DecodeLog(source="tinyllm_stats", line_word="stats line", note="", parse=lambda message: None),
    version_words=("tinyllm",),
    version_patterns=(re.compile(r"tinyllm (\d+\.\d+\.\d+)"),),
    timings_pattern=None,
    load_sources=(_engines.LoadSource("/stats", keyed=False, shape="metrics", gauges=("tinyllm_active", "tinyllm_pending")),),
    line_prefixes=(PREFIX,),
    default_port=7000,
    health_path="/ping",
    smoke_path="/v1/completions",
    default_unit="tinyllm.service",
    fallback_model="tiny",
    serving_gauges=("tinyllm_active", "tinyllm_generated_total"),
    watch_generate_path="/v1/completions",
    worker_http="none",
    worker_ready_phase="loading_weights",
)

START = [
    "tinyllm| I 12:00:00 w0 | tinyllm 0.1.0 starting",
    "tinyllm| I 12:00:01 w0 | loading weights from /models/tiny",
    "tinyllm| I 12:00:04 w0 | serving on port 7000",
]
CRASH = [*START[:2], "tinyllm| E 12:00:03 w1 | ran out of KV blocks (wanted 512, have 128)"]
STATS = b"""# TYPE tinyllm_active gauge
tinyllm_active{worker="0"} 2
tinyllm_active{worker="1"} 1
tinyllm_pending 4
tinyllm_generated_total 99
"""


@pytest.fixture(autouse=True)
def third_engine() -> Iterator[_engines.EngineDriver]:
    _engines.register(DRIVER)
    yield DRIVER
    _engines.unregister(NAME)


def test_the_engine_is_known_while_registered() -> None:
    assert NAME in _engines.engine_names() and _engines.drivers_for(NAME) == (DRIVER,)
    assert DRIVER in _engines.drivers_for("auto")


def test_its_prefix_is_taken_apart() -> None:
    line = _lines.parse("tinyllm| E 12:00:03 w1 | ran out of KV blocks", 1)
    assert (line.level, line.timestamp, line.logger, line.message, line.tagged) == ("ERROR", "12:00:03", "w1", "ran out of KV blocks", True)
    assert line.stream == "E w1"


def test_the_classifier_finds_its_fatal_and_ready_lines() -> None:
    fatal = classify_line(CRASH[-1], engine=NAME)
    assert (fatal["class"], fatal["rule"], fatal["level"]) == ("fatal", "tinyllm-out-of-blocks", "ERROR"), fatal
    assert classify_line(START[-1], engine=NAME)["class"] == "ready"
    assert {rule["id"] for rule in RULE_PACK} <= {rule.id for rule in load_rules(NAME).rules}
    crashed, started = classify("\n".join(CRASH), engine=NAME), classify("\n".join(START), engine="auto")
    assert (crashed["verdict"], started["verdict"], started["ready"]) == ("fail", "pass", True), (crashed, started)


class Journal:
    """The host's journal as the wait's probe sees it, classified slice by slice with the engine's rules."""

    def __init__(self, lines: t.Sequence[str]) -> None:
        self.lines, self.read = list(lines), 0

    def probe(self, upto: int, answer: t.Any = None) -> ProbeResult:
        scanner = Scanner(load_rules(NAME), line_offset=self.read)
        for line in self.lines[self.read : upto]:
            scanner.feed_line(line)
        report = scanner.finish()
        report.update(cursor=f"c{scanner.line_number}", records=upto - self.read, invocation_id=unit()["InvocationID"], tail=self.lines[:upto], gap=None)
        self.read = upto
        return t.cast(ProbeResult, {"unit": unit(), "journal": report, "health": answer})


def test_the_wait_passes_its_start_and_fails_its_crash() -> None:
    clock, journal = Clock(), Journal(START)
    steps = [(0.1, journal.probe(1)), (5, journal.probe(3, health(200))), (1, journal.probe(3, health(200))), (11, journal.probe(3, health(200)))]
    outcome = drive(new_wait(clock, unit=DRIVER.default_unit), clock, steps)
    assert (outcome.verdict, outcome.reason) == ("pass", "ready"), outcome.msg
    clock, journal = Clock(), Journal(CRASH)
    outcome = drive(new_wait(clock, unit=DRIVER.default_unit), clock, [(0.1, journal.probe(1)), (5, journal.probe(3))])
    assert (outcome.verdict, outcome.reason) == ("fail", "fatal_log") and "ran out of KV blocks" in outcome.msg, outcome.msg


def test_the_wait_knows_what_its_worker_nodes_serve() -> None:
    assert worker_roles(NAME) == {"worker_http": "none", "worker_ready_phase": "loading_weights"}


def test_its_load_is_read_through_the_one_load_reader() -> None:
    (endpoint,) = _load.endpoints(NAME)
    assert (endpoint.path, endpoint.keyed, endpoint.running(STATS)) == ("/stats", False, 7)
    assert _load.running_requests(STATS.decode()) == 7
    assert [url for url, _endpoint in _load.plan("http://127.0.0.1:7000/stats", NAME)] == ["http://127.0.0.1:7000/stats"]


def test_unregistered_it_is_gone() -> None:
    _engines.unregister(NAME)
    try:
        assert NAME not in _engines.engine_names()
        assert _lines.parse("tinyllm| E 12:00:03 w1 | ran out of KV blocks", 1).level == "none"
    finally:
        _engines.register(DRIVER)
