"""The host side of the phases' reads and writes (module_utils/_hostcall/): as the plain process a
phase runs (a call's ``cli``, a real Python process with the options on stdin), and the controller's
check of their arguments against the modules' own specs (plugin_utils/_phase.py checked_params)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils import _hostcall
from ansible_collections.inferops.runbooks.plugins.plugin_utils._hostcode import HOST_CALLS
from ansible_collections.inferops.runbooks.plugins.plugin_utils._phase import checked_params

COLLECTIONS = Path(_hostcall.__file__).parents[6]


def call(name: str, request: dict[str, Any]) -> dict[str, Any]:
    code = f"from ansible_collections.inferops.runbooks.plugins.module_utils._hostcall.{name} import cli; cli()"
    done = subprocess.run(
        [sys.executable, "-c", code], input=json.dumps(request), capture_output=True, text=True, env={"PYTHONPATH": str(COLLECTIONS)}, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def record_params(state_dir: Path, **changes: Any) -> dict[str, Any]:
    params, _hidden = checked_params(HOST_CALLS["run_record"], {"unit": "sglang.service", "state_dir": str(state_dir), **changes}) or ({}, set())
    return params


def test_a_plain_run_record_call_writes_reads_and_keeps_check_mode(tmp_path: Path) -> None:
    path = tmp_path / "sglang.service.json"
    dry = call("run_record", {"params": record_params(tmp_path, step="drain", run_id="r1"), "check_mode": True})
    assert dry["changed"] is True and dry["record"]["step"] == "drain" and not path.exists()
    wrote = call("run_record", {"params": record_params(tmp_path, step="drain", run_id="r1"), "check_mode": False})
    assert wrote["changed"] is True and wrote["path"] == str(path) and json.loads(path.read_text())["step"] == "drain"
    read = call("run_record", {"params": record_params(tmp_path), "check_mode": False})
    assert read["changed"] is False and read["record"]["run_id"] == "r1" and read["problem"] is None


def test_a_failed_call_says_why_with_what_else_it_knows(tmp_path: Path) -> None:
    call("run_record", {"params": record_params(tmp_path, step="wait", run_id="r1"), "check_mode": False})
    refused = call("run_record", {"params": record_params(tmp_path, step="drain", run_id="r2", unit="../x"), "check_mode": False})
    assert refused["failed"] is True and refused["msg"]


def test_a_missing_program_is_a_call_failure_not_a_traceback() -> None:
    with pytest.raises(_hostcall.CallFailed, match="no-such-program"):
        _hostcall.PlainHost(False).bin_path("no-such-program")


def test_arguments_are_checked_against_the_modules_spec_on_the_controller() -> None:
    load = checked_params(HOST_CALLS["server_load"], {"url": "http://127.0.0.1:30000/v1/loads", "api_key": "sk-1", "timeout": "30"})
    assert load is not None
    params, hidden = load
    assert params["timeout"] == 30.0 and params["interval"] == 5 and params["unknown_load"] == "wait" and hidden == {"sk-1"}
    # wrong: the module runs instead, and says what is wrong
    assert checked_params(HOST_CALLS["server_load"], {"url": "http://x", "unknown_load": "maybe"}) is None
    assert checked_params(HOST_CALLS["run_record"], {"unit": "u", "step": "drain"}) is None  # step needs run_id
    # a path only the host can expand is left to the module
    assert checked_params(HOST_CALLS["run_record"], {"unit": "u", "state_dir": "~/state"}) is None
    assert checked_params(HOST_CALLS["run_record"], {"unit": "u", "files": ["/etc/a", "$HOME/b"]}) is None


def test_every_call_is_known_to_the_phases_and_every_module_shell_uses_its_calls_spec() -> None:
    package = Path(_hostcall.__file__).parent
    assert sorted(HOST_CALLS) == sorted(path.stem for path in package.glob("*.py") if path.name != "__init__.py")
    for name in HOST_CALLS:
        text = (package.parents[1] / "modules" / f"{name}.py").read_text()
        assert f"module_utils._hostcall.{name} import CALL " in text and "argument_spec=CALL.spec" in text and "run_module(module, CALL)" in text, name
