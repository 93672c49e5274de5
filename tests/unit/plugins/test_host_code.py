"""Host code apart from controller code: what reaches a managed host (the modules' payloads, the
bundles a phase or a wait copies there, plugin_utils/_hostcode.py) is standard-library Python of
module_utils, never controller code, and module_utils holds nothing that only the controller uses.

The imports are read here from syntax trees, independently of the bundle's own reader (which reads
the import statements' text, to stay cheap), and every import counts wherever it is in the code, as
ansible-core's payload builder counts it."""

from __future__ import annotations

import ast
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ansible_collections.inferops.runbooks.plugins.plugin_utils import _hostcode
from ansible_collections.inferops.runbooks.plugins.plugin_utils._phase import checked_params

PACKAGE = "ansible_collections.inferops.runbooks.plugins.module_utils"
PLUGINS = Path(_hostcode.__file__).resolve().parents[1]
MODULE_UTILS = PLUGINS / "module_utils"
MODULES = sorted((PLUGINS / "modules").glob("*.py"))
ENTRIES = {"probe": _hostcode.PROBE_ENTRIES, "calls": _hostcode.CALL_ENTRIES}


def import_statements(source: str, name: str = "", is_package: bool = False) -> list[tuple[str, list[str]]]:
    """Each import of ``source`` (module ``name`` of module_utils), anywhere in its code: the module
    it imports from in absolute dotted form, and the names it takes (none for ``import <module>``)."""
    package = PACKAGE + (f".{name}" if name else "")
    if not is_package:
        package = package.rpartition(".")[0] if name else package
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            found.append((".".join([*base, node.module or ""]).strip("."), [alias.name for alias in node.names]))
    return found


def imports_of(source: str, name: str = "", is_package: bool = False) -> set[str]:
    """Every module that ``source`` may import: each statement's module, and each name it takes as a
    possible submodule."""
    return {found for module, names in import_statements(source, name, is_package) for found in (module, *(f"{module}.{taken}" for taken in names))}


def source_of(name: str, root: Path = MODULE_UTILS) -> Path | None:
    base = root.joinpath(*name.split("."))
    return next((path for path in (base.with_suffix(".py"), base / "__init__.py") if path.is_file()), None)


def module_utils_imported(source: str, name: str = "", is_package: bool = False, root: Path = MODULE_UTILS) -> set[str]:
    """The module_utils modules (names under module_utils) that ``source`` imports, with their packages."""
    names = {module[len(PACKAGE) + 1 :] for module in imports_of(source, name, is_package) if module.startswith(PACKAGE + ".")}
    with_packages = {".".join(parts[:depth]) for parts in (found.split(".") for found in names) for depth in range(1, len(parts) + 1)}
    return {found for found in with_packages if source_of(found, root)}


def closure(roots: set[str], root: Path = MODULE_UTILS) -> set[str]:
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = source_of(name, root)
        assert path is not None, f"{name} is imported but is not in module_utils"
        todo.extend(module_utils_imported(path.read_text(), name, path.name == "__init__.py", root))
    return seen


def host_code_problems(source: str, where: str, name: str = "", is_package: bool = False) -> list[str]:
    """Why ``source`` may not run on a managed host: an import of Ansible, of the collection's
    controller code, or of anything outside the standard library."""
    problems = []
    for module in sorted(module for module, _names in import_statements(source, name, is_package)):
        top = module.split(".")[0]
        if module.startswith("ansible_collections.") and not (module == PACKAGE or module.startswith(PACKAGE + ".")):
            problems.append(f"{where} imports controller code: {module}")
        elif top == "ansible":
            problems.append(f"{where} imports Ansible: {module}")
        elif top not in sys.stdlib_module_names and top not in ("__future__", "ansible_collections"):
            problems.append(f"{where} imports {module}, which is not in the standard library")
    return problems


def bundle_problems(bundle: bytes) -> list[str]:
    """The host-code problems of every Python file a bundle holds."""
    problems = []
    with zipfile.ZipFile(io.BytesIO(bundle)) as files:
        for path in files.namelist():
            inside = path.removeprefix(_hostcode.BUNDLE_PACKAGE + "/")
            is_package = inside.endswith("__init__.py")
            name = inside.removesuffix("/__init__.py").removesuffix(".py").replace("/", ".") if inside != path else ""
            problems += host_code_problems(files.read(path).decode(), path, name, is_package)
    return problems


def module_roots() -> dict[str, set[str]]:
    """Each module's own module_utils imports."""
    return {path.stem: module_utils_imported(path.read_text()) for path in MODULES}


@pytest.mark.parametrize("kind", sorted(ENTRIES))
def test_a_bundle_holds_host_code_only_and_what_its_entry_points_import(kind: str) -> None:
    bundle = _hostcode.code_bundle(ENTRIES[kind])
    assert bundle_problems(bundle) == []
    with zipfile.ZipFile(io.BytesIO(bundle)) as files:
        held = {path.removeprefix(_hostcode.BUNDLE_PACKAGE + "/") for path in files.namelist() if path.startswith(_hostcode.BUNDLE_PACKAGE + "/")}
    expected = {str(source_of(name).relative_to(MODULE_UTILS)) for name in closure(set(ENTRIES[kind]))}  # type: ignore[union-attr]
    # the package markers above module_utils, and module_utils' own, are empty files
    assert held - {"__init__.py"} == expected


def test_the_bundles_reader_finds_what_the_syntax_tree_holds_for_every_module() -> None:
    files = (str(path.relative_to(MODULE_UTILS).with_suffix("")) for path in MODULE_UTILS.rglob("*.py"))
    for name in sorted(file.replace("/", ".").removesuffix(".__init__") for file in files):
        path = source_of(name)
        assert path is not None
        assert _hostcode.imported_names(name) == module_utils_imported(path.read_text(), name, path.name == "__init__.py"), name


@pytest.mark.parametrize("module", [path.stem for path in MODULES])
def test_a_modules_payload_holds_host_code_only(module: str) -> None:
    path = PLUGINS / "modules" / f"{module}.py"
    own = [problem for problem in host_code_problems(path.read_text(), path.name) if "imports Ansible: ansible.module_utils." not in problem]
    assert own == [], "a module may import ansible.module_utils and the collection's module_utils only"
    for name in sorted(closure(module_utils_imported(path.read_text()))):
        found = source_of(name)
        assert found is not None
        assert host_code_problems(found.read_text(), str(found.relative_to(PLUGINS)), name, found.name == "__init__.py") == []


def test_module_utils_holds_no_code_that_only_the_controller_uses() -> None:
    """Every file of module_utils is imported by a module or by a bundle's entry point, directly or
    not; a file that only the controller imports belongs in plugin_utils."""
    roots = set().union(*module_roots().values(), *ENTRIES.values())
    reached = {str(source_of(name).relative_to(MODULE_UTILS)) for name in closure(roots)}  # type: ignore[union-attr]
    present = {str(path.relative_to(MODULE_UTILS)) for path in MODULE_UTILS.rglob("*.py")}
    assert present - reached == set()


def test_run_record_carries_the_run_record_alone() -> None:
    """The smallest call's payload: its shell, the calls' common part, the run record's code and the lease's (read beside it)."""
    roots = module_roots()["run_record"]
    assert closure(roots) == {"_hostcall", "_hostcall.run_record", "_run_record", "_lease"}


# -- the checks fail on what they are meant to catch --------------------------------------------


@pytest.mark.parametrize(
    ("line", "caught"),
    [
        ("from ansible_collections.inferops.runbooks.plugins.plugin_utils import _render", "controller code"),
        ("from ansible_collections.inferops.runbooks.plugins.plugin_utils._render import summary_lines", "controller code"),
        ("from ansible.module_utils.basic import AnsibleModule", "Ansible"),
        ("import ansible.errors", "Ansible"),
        ("import yaml", "not in the standard library"),
        ("from ..plugin_utils import _render", "controller code"),
    ],
)
def test_code_that_would_not_run_on_a_host_is_caught(line: str, caught: str) -> None:
    source = f"import json\n\n\ndef later():\n    {line}\n"
    problems = host_code_problems(source, "_bad.py", "_bad")
    assert len(problems) == 1 and caught in problems[0], problems
    assert host_code_problems("import json\nfrom ansible_collections.inferops.runbooks.plugins.module_utils import _lines\n", "_good.py", "_good") == []


def test_a_bundle_that_would_carry_controller_code_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module_utils module that imports plugin_utils, reached from an entry point, fails the bundle's check."""
    copy = tmp_path / "module_utils"
    shutil.copytree(MODULE_UTILS, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "_bad.py").write_text("from ansible_collections.inferops.runbooks.plugins.plugin_utils._rollout import decide\n")
    probe = copy / "_probe.py"
    probe.write_text(probe.read_text() + "\n\ndef _later() -> None:\n    from ansible_collections.inferops.runbooks.plugins.module_utils import _bad  # noqa\n")
    monkeypatch.setattr(_hostcode, "MODULE_UTILS", str(copy))
    bundle = _hostcode.code_bundle.__wrapped__(_hostcode.PROBE_ENTRIES)
    assert bundle_problems(bundle) == [
        f"{_hostcode.BUNDLE_PACKAGE}/_bad.py imports controller code: ansible_collections.inferops.runbooks.plugins.plugin_utils._rollout",
    ]
    # and a file that no module and no entry point imports is controller code in module_utils
    roots = set().union(*module_roots().values(), *ENTRIES.values())
    assert "_bad" not in closure(roots)


def test_a_bundle_is_built_once_per_run_and_read_by_every_phase_after(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[tuple[str, ...]] = []

    def build(entries: tuple[str, ...], compiled: bool = False) -> bytes:
        built.append(entries)
        return b"zip of " + ",".join(entries).encode()

    monkeypatch.setattr(_hostcode, "code_bundle", build)
    # each phase runs in a fresh fork: the first builds the bundle, the others read it from the run's directory
    assert _hostcode.run_bundle(("_probe",), str(tmp_path)) == b"zip of _probe"
    assert _hostcode.run_bundle(("_probe",), str(tmp_path)) == b"zip of _probe"
    assert _hostcode.run_bundle(("_hostcall.unit_info",), str(tmp_path)) == b"zip of _hostcall.unit_info"
    assert built == [("_probe",), ("_hostcall.unit_info",)]
    # a directory that cannot be written only costs building it again
    assert _hostcode.run_bundle(("_probe",), str(tmp_path / "missing")) == b"zip of _probe"
    assert len(built) == 3


def test_a_carried_call_runs_from_its_stdin_alone_and_leaves_nothing(tmp_path: Path) -> None:
    # a phase's call as the host runs it: python -c BOOT_CARRIED <entry>, the code and the options on
    # stdin; a Python started without the controller's paths, with its temporary directory here
    workdir = tmp_path / "tmp"
    workdir.mkdir()
    given = {"unit": "sglang.service", "action": "acquire", "run_id": "r1", "holder": {"user": "ci"}, "stale_after": 600, "state_dir": str(tmp_path)}
    checked = checked_params(_hostcode.HOST_CALLS["run_lease"], given)
    assert checked is not None
    options = {"params": checked[0], "check_mode": False}
    stdin = _hostcode.carried_bundle(("_hostcall.run_lease",)) + "\n" + json.dumps(options)
    env = {"PATH": os.environ.get("PATH", ""), "TMPDIR": str(workdir)}
    ran = subprocess.run(
        [sys.executable, "-I", "-c", _hostcode.BOOT_CARRIED, "_hostcall.run_lease"], input=stdin, capture_output=True, text=True, env=env, check=False
    )
    assert json.loads(ran.stdout)["outcome"] == "taken", ran.stderr
    assert list(workdir.iterdir()) == []
    # run from the bytecode compiled on the controller (this Python's version): nothing compiled on the host
    refuse_compiling = (
        "import builtins, sys\nreal = builtins.compile\n"
        "builtins.compile = lambda *a, **k: sys.exit('compiled ' + str(a[1])) if a[2:3] == ('exec',) else real(*a, **k)\n"
    )
    ran = subprocess.run(
        [sys.executable, "-I", "-c", refuse_compiling + _hostcode.BOOT_CARRIED, "_hostcall.run_lease"],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert ran.returncode == 0 and json.loads(ran.stdout)["outcome"] == "renewed", ran.stderr
