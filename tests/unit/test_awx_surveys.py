"""The AWX survey specs (awx/surveys/<playbook>.json, as the AWX API takes them) match the roles:
every question sets a variable of the role the playbook runs (meta/argument_specs.yml), with a
survey type that gives that option a value it accepts, and the default the template would have
without a survey (the playbook's play variable, else the role's default)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from ansible_collections.inferops.runbooks.plugins.plugin_utils._options import FLEET_OPTIONS, FLEET_PREFIX

REPO = Path(__file__).resolve().parents[2]
SURVEYS = sorted((REPO / "awx" / "surveys").glob("*.json"))
BOOLEAN_CHOICES = {"true", "false"}
# survey types that give a role option of each type a value it accepts (the roles cast text)
COMPATIBLE = {
    "str": {"text", "textarea", "multiplechoice"},
    "int": {"integer"},
    "float": {"float", "integer"},
    "bool": {"multiplechoice"},
    "raw": {"text", "textarea"},
    "list": {"text", "textarea", "multiselect"},
    "path": {"text"},
}
QUESTION_KEYS = {"question_name", "question_description", "required", "type", "variable", "default", "choices", "new_question"}


def role_play(playbook: Path, outer_vars: dict[str, Any] | None = None) -> dict[str, Any]:
    """The play of a playbook that runs the role, with the variables it runs with (those of an
    ``import_playbook`` around it included), following imports."""
    for play in yaml.safe_load(playbook.read_text()):
        variables = {**(outer_vars or {}), **(play.get("vars") or {})}
        if "ansible.builtin.import_playbook" in play:
            return role_play(playbook.parent / play["ansible.builtin.import_playbook"], variables)
        if played_role(play):
            return {**play, "vars": variables}
    raise AssertionError(f"{playbook.name}: no play runs a role")


def played_role(play: dict[str, Any]) -> str | None:
    """The role a play runs: listed in its roles, or imported by one of its tasks."""
    listed = [entry["role"] if isinstance(entry, dict) else entry for entry in play.get("roles") or []]
    imported = [task["ansible.builtin.import_role"]["name"] for task in play.get("tasks") or [] if "ansible.builtin.import_role" in task]
    found = listed + imported
    assert len(found) <= 1, f"the play {play.get('name')!r} runs more than one role: {found}"
    return str(found[0]) if found else None


def playbook_of(survey: Path) -> dict[str, Any]:
    return role_play(REPO / "playbooks" / f"{survey.stem}.yml")


def role_options(play: dict[str, Any]) -> dict[str, dict[str, Any]]:
    name = str(played_role(play)).rsplit(".", 1)[-1]
    specs = yaml.safe_load((REPO / "roles" / name / "meta" / "argument_specs.yml").read_text())
    return {**dict(specs["argument_specs"]["main"]["options"]), **rollout_options(name)}


def rollout_options(role: str) -> dict[str, dict[str, Any]]:
    """The rollout's play variables (sglang_batch_size, sglang_min_serving...) of the restart playbooks,
    declared once in plugin_utils/_options.py (FLEET_OPTIONS), as the survey's default writes them."""
    if role != "sglang_restart":
        return {}
    return {
        f"{FLEET_PREFIX}{name}": {**option, "default": str(option["default"]) if option["type"] == "raw" else option["default"]}
        for name, option in FLEET_OPTIONS.items()
    }


def choices(question: dict[str, Any]) -> list[str]:
    raw = question.get("choices") or ""
    return raw.split("\n") if isinstance(raw, str) else list(raw)


def as_survey_default(value: Any, kind: str) -> Any:
    """How the default of an option of this type is written in a survey."""
    if kind == "bool":
        return "true" if value else "false"
    if kind in ("raw", "list") and not value:
        return ""
    return value


def test_there_is_a_survey_for_every_playbook() -> None:
    assert {s.stem for s in SURVEYS} == {p.stem for p in (REPO / "playbooks").glob("*.yml")}


@pytest.mark.parametrize("survey", SURVEYS, ids=[s.stem for s in SURVEYS])
def test_every_question_sets_a_role_variable_with_a_compatible_type_and_default(survey: Path) -> None:
    spec = json.loads(survey.read_text())
    assert set(spec) == {"name", "description", "spec"}
    play = playbook_of(survey)
    options = role_options(play)
    play_vars = play.get("vars") or {}
    variables = [question["variable"] for question in spec["spec"]]
    assert len(variables) == len(set(variables)), f"{survey.name}: a variable asked twice"
    for question in spec["spec"]:
        where = f"{survey.name}: {question['variable']}"
        assert set(question) >= QUESTION_KEYS, f"{where}: missing {QUESTION_KEYS - set(question)}"
        option = options.get(question["variable"])
        assert option is not None, f"{where} is not an option of the role (meta/argument_specs.yml)"
        kind = option.get("type", "str")
        assert question["type"] in COMPATIBLE[kind], f"{where}: a {question['type']} question cannot set a {kind} option"
        assert not option.get("no_log"), f"{where}: a secret belongs in an AWX credential, not in a survey"
        expected = play_vars.get(question["variable"], option.get("default"))
        assert question["default"] == as_survey_default(expected, kind), f"{where}: default {question['default']!r}, the template's is {expected!r}"
        if kind == "bool":
            assert set(choices(question)) == BOOLEAN_CHOICES, f"{where}: a boolean is a choice of true or false"
        if question["type"] == "multiplechoice":
            assert question["default"] in choices(question), f"{where}: the default is not one of the choices"
        if question["type"] == "integer":
            assert question["min"] <= question["default"] <= question["max"], f"{where}: the default is out of min..max"
        if question["type"] in ("text", "textarea") and kind == "raw" and question["variable"] not in rollout_options("sglang_restart"):
            assert yaml.safe_load(question["default"] or "null") in (None, [], {}), f"{where}: a YAML text default that is not empty"
