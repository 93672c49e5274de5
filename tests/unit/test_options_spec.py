"""specs/options.yml writes every option once: the files scripts/options.py writes from it are current,
each option of a role is declared once, the roles share one group, the modules' shared declarations
agree with it, and a mistake in the spec is refused naming the option and the file."""

from __future__ import annotations

import importlib.util
import shutil
import sys
import typing as t
from pathlib import Path

import pytest
import yaml

from ansible_collections.inferops.runbooks.plugins.module_utils._option_specs import CLASSIFIER_OPTIONS, HEALTH_OPTIONS, UNIT_OPTIONS
from ansible_collections.inferops.runbooks.plugins.plugin_utils import _role_options
from ansible_collections.inferops.runbooks.plugins.plugin_utils._options import WAIT_OPTIONS
from ansible_collections.inferops.runbooks.plugins.plugin_utils._role_options import ROLE_SPECS

REPO = Path(__file__).resolve().parents[2]
ROLES = ("sglang_restart", "sglang_precheck")
DECLARATION_KEYS = ("type", "default", "choices", "no_log", "elements")


def _load_script() -> t.Any:
    spec = importlib.util.spec_from_file_location("options_script", REPO / "scripts" / "options.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["options_script"] = module
    spec.loader.exec_module(module)
    return module


options_script = _load_script()


@pytest.fixture(scope="module")
def spec() -> t.Any:
    return options_script.load_spec(REPO / options_script.SPEC)


def test_the_generated_files_are_current(spec: t.Any) -> None:
    files = options_script.rendered(spec)
    assert options_script.stale_files(REPO, files) == [], "run make options"
    assert options_script.main(["--check"]) == 0


def test_check_names_each_stale_file_and_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "specs").mkdir()
    shutil.copy(REPO / "specs" / "options.yml", tmp_path / "specs" / "options.yml")
    assert options_script.main(["--check"], root=tmp_path) == 1
    stale = capsys.readouterr().err
    for path in ("roles/sglang_restart/meta/argument_specs.yml", "roles/sglang_precheck/defaults/main.yml", "awx/surveys/restart_vllm.json"):
        assert f"{path} is stale" in stale
    assert options_script.main([], root=tmp_path) == 0
    assert options_script.main(["--check"], root=tmp_path) == 0


@pytest.mark.parametrize("role", ROLES)
def test_every_option_of_a_role_is_declared_once(spec: t.Any, role: str) -> None:
    declared = [name for group in spec.groups.values() if role in group["roles"] for name in group["options"]]
    assert len(declared) == len(set(declared))
    assert set(_role_options.ROLE_SPECS[role]) == set(spec.checked_options_of(role))


def test_the_options_both_roles_take_are_one_group(spec: t.Any) -> None:
    restart, precheck = (set(spec.checked_options_of(role)) for role in ROLES)
    shared = [group for group in spec.groups.values() if set(group["roles"]) == set(ROLES) and not group.get("unprefixed")]
    assert len(shared) == 1
    assert set(shared[0]["options"]) == restart & precheck
    assert len(restart & precheck) >= 29


def test_the_roles_check_the_declarations_of_the_spec(spec: t.Any) -> None:
    for role in ROLES:
        assert ROLE_SPECS[role] == options_script.declarations(spec, role)


@pytest.mark.parametrize("role", ROLES)
def test_the_modules_and_the_wait_declare_shared_options_as_the_spec(spec: t.Any, role: str) -> None:
    """module_utils/_option_specs (host side, no YAML there) and the wait's options declare what the roles
    also take with the same type, default, choices, no_log and elements."""
    checked = spec.checked_options_of(role)
    module_side = {**UNIT_OPTIONS, **HEALTH_OPTIONS, **CLASSIFIER_OPTIONS, **WAIT_OPTIONS}
    common = set(checked) & set(module_side)
    assert {"unit", "engine", "health_url", "extra_rules", "redact"} <= common
    for name in common:
        ours = {key: checked[name][key] for key in DECLARATION_KEYS if key in checked[name]}
        theirs = {key: module_side[name][key] for key in DECLARATION_KEYS if key in module_side[name]}
        assert ours == theirs, name


def _spec_with(tmp_path: Path, change: t.Callable[[dict[str, t.Any]], None]) -> Path:
    data = yaml.safe_load((REPO / "specs" / "options.yml").read_text())
    change(data)
    path = tmp_path / "options.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _refusal(path: Path) -> str:
    with pytest.raises(options_script.SpecError) as caught:
        options_script.load_spec(path)
    return str(caught.value)


def test_an_unknown_type_is_refused_naming_the_option_and_the_file(tmp_path: Path) -> None:
    path = _spec_with(tmp_path, lambda data: data["groups"]["shared"]["options"]["strict"].update(type="boolean"))
    message = _refusal(path)
    assert str(path) in message and "option strict" in message and "'boolean'" in message


def test_a_default_not_among_the_choices_is_refused(tmp_path: Path) -> None:
    path = _spec_with(tmp_path, lambda data: data["groups"]["shared"]["options"]["engine"].update(default="tgi"))
    message = _refusal(path)
    assert str(path) in message and "option engine" in message and "'tgi' is not among its choices" in message


def test_an_option_declared_in_two_groups_of_a_role_is_refused(tmp_path: Path) -> None:
    def duplicate(data: dict[str, t.Any]) -> None:
        data["groups"]["restart_only"]["options"]["strict"] = data["groups"]["shared"]["options"]["strict"]

    message = _refusal(_spec_with(tmp_path, duplicate))
    assert "option strict of role sglang_restart is written twice (groups shared and restart_only)" in message


def test_a_key_written_twice_is_refused_with_its_line(tmp_path: Path) -> None:
    text = (REPO / "specs" / "options.yml").read_text().replace("\n      unit:\n", "\n      unit:\n        type: str\n", 1)
    path = tmp_path / "options.yml"
    path.write_text(text)
    message = _refusal(path)
    assert str(path) in message and "'type' is written twice" in message


def test_an_option_left_out_of_the_defaults_is_refused(tmp_path: Path) -> None:
    path = _spec_with(tmp_path, lambda data: data["roles"]["sglang_precheck"]["defaults_sections"][0]["options"].remove("unit"))
    assert "defaults_sections of sglang_precheck: option unit is in no section" in _refusal(path)


def test_a_bad_spec_exits_with_a_message_not_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _spec_with(tmp_path, lambda data: data["groups"]["shared"]["options"]["strict"].update(type="boolean"))
    (tmp_path / "specs").mkdir()
    path.rename(tmp_path / "specs" / "options.yml")
    assert options_script.main(["--check"], root=tmp_path) == 2
    assert "option strict" in capsys.readouterr().err
