"""ansible-core 2.22 deprecates an action's ``skipped=True`` result and ``remove_values``: no action
plugin of the collection uses either (read from their source, as ansible-test reads it)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PLUGINS = Path(__file__).resolve().parents[4] / "plugins"
CONTROLLER_CODE = sorted([*(PLUGINS / "action").glob("*.py"), *(PLUGINS / "plugin_utils").glob("*.py")])


def skipped_results(tree: ast.AST) -> list[int]:
    """Lines of dict literals or dict() calls that set ``skipped`` to True."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            pairs = zip(node.keys, node.values)
            lines += [node.lineno for key, value in pairs if isinstance(key, ast.Constant) and key.value == "skipped" and is_true(value)]
        elif isinstance(node, ast.Call):
            lines += [node.lineno for keyword in node.keywords if keyword.arg == "skipped" and is_true(keyword.value)]
    return lines


def is_true(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def imported_names(tree: ast.AST) -> set[str]:
    return {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}


@pytest.mark.parametrize("path", CONTROLLER_CODE, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_no_skipped_result_and_no_remove_values(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    assert skipped_results(tree) == [], f"{path.name} returns skipped=True (deprecated in ansible-core 2.22)"
    assert "remove_values" not in imported_names(tree), f"{path.name} imports remove_values (deprecated in ansible-core 2.22)"


def test_the_check_finds_what_it_looks_for() -> None:
    tree = ast.parse('r = {"changed": False, "skipped": True}\ns = dict(skipped=True)\nfrom x import remove_values\n')
    assert skipped_results(tree) == [1, 2]
    assert "remove_values" in imported_names(tree)
