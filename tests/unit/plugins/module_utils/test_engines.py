"""The engine drivers: one file per engine, and nothing else in the collection names an engine."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils import _canary, _engines, _history, _load
from ansible_collections.inferops.runbooks.plugins.module_utils._rule_packs import COMMON
from ansible_collections.inferops.runbooks.plugins.module_utils._rules import engine_packs, load_rules
from tests.unit.conftest import corpus_lines

PLUGINS = Path(__file__).resolve().parents[4] / "plugins"
# where an engine's name may be written: its driver, the rule packs' data, and the option defaults
ENGINE_HOMES = ("module_utils/_engines/", "module_utils/_rule_packs.py")


def test_every_engine_has_a_driver_and_auto_means_all() -> None:
    assert ("auto", *_engines.DRIVERS) == _engines.ENGINE_NAMES
    assert _engines.drivers_for("auto") == tuple(_engines.DRIVERS.values())
    assert _engines.drivers_for(None) == tuple(_engines.DRIVERS.values())
    for name, driver in _engines.DRIVERS.items():
        assert driver.name == name
        assert _engines.drivers_for(name) == (driver,)
        assert _engines.get(name) is driver
    with pytest.raises(KeyError, match=r"engine 'tgi' is not one of sglang, vllm"):
        _engines.get("tgi")


@pytest.mark.parametrize("name", list(_engines.DRIVERS))
def test_a_driver_owns_its_rule_pack_and_changes_only_common_rules_that_exist(name: str) -> None:
    driver = _engines.get(name)
    assert driver.rule_pack, "an engine without rules"
    assert all(spec["id"].startswith(f"{name}-") for spec in driver.rule_pack)
    common_ids = {spec["id"] for spec in COMMON}
    assert set(driver.rule_changes) <= common_ids
    packs = dict(engine_packs(name))
    assert list(packs) == [name, "common"]
    changed = {spec["id"]: spec for spec in packs["common"] if spec["id"] in driver.rule_changes}
    for rule_id, change in driver.rule_changes.items():
        assert {key: changed[rule_id][key] for key in change} == dict(change)
    sources = {rule.source.split(" #")[0] for rule in load_rules(name).rules}
    assert name in " ".join(sources)


def test_auto_takes_every_pack_with_the_common_rules_unchanged() -> None:
    packs = dict(engine_packs("auto"))
    assert list(packs) == [*_engines.DRIVERS, "common"]
    assert packs["common"] == COMMON


@pytest.mark.parametrize("name", list(_engines.DRIVERS))
def test_a_driver_reads_its_own_decode_lines_from_the_corpus_and_no_other_engines(name: str) -> None:
    driver = _engines.get(name)
    lines = [entry for entry in corpus_lines() if driver.decode_log.parse(entry["line"]) is not None]
    assert lines, f"no {name} decode line in the corpus"
    assert {entry["engine"] for entry in lines} == {name}
    figures = _canary.journal_figures(entry["line"] for entry in lines)
    assert figures is not None and figures["source"] == driver.decode_log.source
    assert driver.decode_log.line_word in (_canary.journal_line(figures) or "")


def test_versions_are_read_by_the_drivers_of_the_engine_asked_for() -> None:
    vllm_line = "INFO 01-09 06:23:59 api_server.py:651] vLLM API server version 0.6.5"
    sglang_line = "[2025-03-08 12:29:21] sglang version 0.4.3.post2"
    cases = (("vllm", vllm_line, "0.6.5"), ("auto", vllm_line, "0.6.5"), ("sglang", sglang_line, "0.4.3.post2"), ("sglang", vllm_line, None))
    for engine, line, expected in cases:
        observer = _history.StartObserver(engine)
        observer.feed(line)
        assert observer.engine_version == expected, (engine, line)


def _engine_name_comparisons(path: Path) -> list[str]:
    """Comparisons of a value with an engine's name (``x == "vllm"``, ``x in ("sglang",)``)."""
    names = set(_engines.DRIVERS)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Compare):
            continue
        for side in (node.left, *node.comparators):
            constants = [side] if isinstance(side, ast.Constant) else list(getattr(side, "elts", []))
            if any(isinstance(item, ast.Constant) and item.value in names for item in constants):
                found.append(f"{path.relative_to(PLUGINS)}:{node.lineno}")
    return found


def test_nothing_outside_the_drivers_branches_on_an_engine_name() -> None:
    sources = [path for path in PLUGINS.rglob("*.py") if not str(path.relative_to(PLUGINS)).startswith(ENGINE_HOMES)]
    assert len(sources) > 30
    assert [where for path in sources for where in _engine_name_comparisons(path)] == []


@pytest.mark.parametrize("name", list(_engines.DRIVERS))
def test_a_driver_names_where_its_load_is_read_in_shapes_the_drain_reads(name: str) -> None:
    sources = _engines.get(name).load_sources
    assert sources
    for source in sources:
        assert source.shape in (*_load.ANSWER_READERS, "metrics"), source
        assert bool(source.gauges) == (source.shape == "metrics"), source
    assert [endpoint.path for endpoint in _load.endpoints(name)] == [source.path for source in sources]


def test_auto_reads_each_load_path_once_with_every_engines_gauges() -> None:
    paths = [source.path for driver in _engines.DRIVERS.values() for source in driver.load_sources]
    endpoints = _load.endpoints("auto")
    assert [endpoint.path for endpoint in endpoints] == list(dict.fromkeys(paths))
    (metrics,) = [endpoint for endpoint in endpoints if endpoint.path == "/metrics"]
    page = b"sglang:num_running_reqs 2\nvllm:num_requests_running 1\nvllm:num_requests_waiting 4\n"
    assert metrics.running(page) == 7
