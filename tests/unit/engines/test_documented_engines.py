"""The places that must write the engines out, held to the drivers (module_utils/_engines): the
documents' engine choices (Ansible's documentation is static YAML), the serving watch's engine table
(an event source runs outside the collection's imports) and the vLLM playbooks' defaults. A new
driver fails here until each of them lists it."""

from __future__ import annotations

import ast
import typing as t
from pathlib import Path

import pytest
import yaml

from ansible_collections.inferops.runbooks.plugins.module_utils import _engines
from ansible_collections.inferops.runbooks.plugins.plugin_utils._role_options import ROLE_SPECS
from tests.unit.eda.test_serving_watch import WATCH

REPO = Path(__file__).resolve().parents[3]
DOCUMENTED = [
    *sorted((REPO / "plugins" / "modules").glob("*.py")),
    *sorted((REPO / "plugins" / "doc_fragments").glob("*.py")),
    *sorted((REPO / "plugins" / "filter").glob("*.yml")),
    REPO / "specs" / "options.yml",
    *sorted(REPO.glob("roles/*/meta/argument_specs.yml")),
]


def documents(path: Path) -> list[t.Any]:
    """The YAML documents of a file: a plugin's DOCUMENTATION strings, or the file itself."""
    if path.suffix == ".yml":
        return [yaml.safe_load(path.read_text(encoding="utf-8"))]
    return [
        yaml.safe_load(node.value.value)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str) and _documentation(node)
    ]


def _documentation(node: ast.Assign) -> bool:
    return any(isinstance(target, ast.Name) and target.id == "DOCUMENTATION" for target in node.targets)


def engine_choices(document: t.Any) -> list[list[str]]:
    """Every ``choices`` of an option named ``engine`` (or a role's ``<role>_engine``), at any depth."""
    found: list[list[str]] = []
    if isinstance(document, dict):
        for name, value in document.items():
            if str(name).rsplit("_", maxsplit=1)[-1] == "engine" and isinstance(value, dict) and "choices" in value:
                found.append(list(value["choices"]))
            found += engine_choices(value)
    elif isinstance(document, list):
        for value in document:
            found += engine_choices(value)
    return found


def documented_choices() -> list[tuple[str, list[str]]]:
    return [(str(path.relative_to(REPO)), choices) for path in DOCUMENTED for document in documents(path) for choices in engine_choices(document)]


def test_the_documents_engine_choices_are_the_drivers_names() -> None:
    found = documented_choices()
    assert len({path for path, _choices in found}) >= 10, found  # the modules, fragment, filters, spec and roles
    assert [(path, choices) for path, choices in found if choices != list(_engines.engine_names())] == []


def test_the_argument_specs_take_their_choices_from_the_drivers() -> None:
    specs = [spec for role in ROLE_SPECS.values() for spec in engine_choices(role)]
    assert specs and all(choices == list(_engines.engine_names()) for choices in specs)


def test_the_serving_watch_engine_table_is_the_drivers() -> None:
    table = WATCH["ENGINES"]
    assert list(table) == list(_engines.DRIVERS)
    for name, driver in _engines.DRIVERS.items():
        engine = table[name]
        assert (engine.unit, (engine.running_metric, engine.tokens_metric)) == (driver.default_unit, driver.serving_gauges), name
        assert (engine.generate_path, engine.sleep_path) == (driver.watch_generate_path, driver.sleep_path), name


@pytest.mark.parametrize("playbook", ["restart_vllm.yml", "precheck_vllm.yml"])
def test_the_vllm_playbooks_defaults_are_the_drivers(playbook: str) -> None:
    driver = _engines.get("vllm")
    (play,) = yaml.safe_load((REPO / "playbooks" / playbook).read_text(encoding="utf-8"))
    role = "sglang_restart" if playbook.startswith("restart") else "sglang_precheck"
    variables = play["vars"]
    base = f"http://127.0.0.1:{driver.default_port}"
    expected = {
        f"{role}_unit": driver.default_unit,
        f"{role}_engine": driver.name,
        f"{role}_health_url": base + driver.health_path,
        f"{role}_smoke_url": base + driver.smoke_path,
        f"{role}_smoke_test": driver.smoke_by_default,
    }
    if role == "sglang_restart":
        expected.update({f"{role}_port": driver.default_port, f"{role}_load_url": base + driver.load_sources[0].path})
    assert {name: variables.get(name) for name in expected} == expected
