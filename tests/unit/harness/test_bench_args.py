"""make bench's side-by-side run (bench/side_by_side.py): which tools a run measures, and where a
--cost-only run writes its table (its own section, beside the full run's)."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def side_by_side() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("side_by_side", REPO / "bench" / "side_by_side.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def test_tools_names_the_measured_tools_in_the_tables_order(side_by_side: types.ModuleType) -> None:
    assert side_by_side.parse_args([])[1].tools == ("ours", "usual", "probe")
    assert side_by_side.parse_args(["--tools", "probe, ours"])[1].tools == ("ours", "probe")


@pytest.mark.parametrize("given", ["oure", ",", "ours,before2"])
def test_a_tool_no_run_knows_is_refused_by_name(side_by_side: types.ModuleType, given: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        side_by_side.parse_args(["--tools", given])
    assert "--tools:" in capsys.readouterr().err


def test_a_cost_only_table_goes_to_its_own_section_and_the_full_runs_stays(side_by_side: types.ModuleType, tmp_path: Path) -> None:
    output = tmp_path / "benchmarks.md"
    output.write_text(f"# Benchmarks\n\n{side_by_side.MARK_BEGIN}\nfull run\n{side_by_side.MARK_END}\n\nProse.\n")
    side_by_side.write_results(output, "waiting, first", side_by_side.COST_MARKS)
    side_by_side.write_results(output, "waiting, second", side_by_side.COST_MARKS)
    text = output.read_text()
    assert "full run" in text and "waiting, second" in text and "waiting, first" not in text
    assert text.index("Prose.") < text.index(side_by_side.COST_MARKS[0])
