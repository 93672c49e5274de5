"""wait_ready's looks: the probe's code brought by the first plain look and unpacked on the host once
per wait, the looks run as a plain Python process, the module when that cannot be done
(plugins/action/wait_ready.py FastTransport)."""

from __future__ import annotations

import base64
import io
import json
import re
import shlex
import subprocess
import sys
import typing as t
import zipfile
from pathlib import Path

import pytest

from ansible_collections.inferops.runbooks.plugins.action.wait_ready import ARGUMENT_SPEC, FastTransport
from ansible_collections.inferops.runbooks.plugins.plugin_utils._hostcode import BOOT, BUNDLE_PACKAGE, CALL_ENTRIES, PROBE_ENTRIES, code_bundle
from ansible_collections.inferops.runbooks.plugins.plugin_utils._wait import ConnectionLost, Probe, ProbeFailed, Settings, Wait

pytestmark = pytest.mark.ansible

ARGS = {name: option.get("default") for name, option in ARGUMENT_SPEC.items()}
LOOK = {"unit": {}, "journal": {}, "health": None, "python": "/usr/bin/python3"}


class PlayContext:
    become = False


class ActionStandIn:
    """Module runs and plain commands, answered from lists."""

    has_pipelining = True

    def __init__(self, commands: list[t.Any]) -> None:
        self.modules: list[dict[str, t.Any]] = []
        self.commands: list[tuple[str, str | None]] = []
        self.answers = commands
        self._connection = self
        self._play_context = PlayContext()

    def reset(self) -> None:
        pass

    def get_shell_option(self, option: str, default: str | None = None) -> str | None:
        return default

    def _execute_module(self, module_name: str, module_args: dict[str, t.Any], task_vars: dict[str, t.Any]) -> dict[str, t.Any]:
        self.modules.append(module_args)
        return dict(LOOK)

    def _low_level_execute_command(self, cmd: str, sudoable: bool = True, in_data: str | None = None) -> dict[str, t.Any]:
        self.commands.append((cmd, in_data))
        if cmd.startswith("rm -rf"):
            return {"rc": 0, "stdout": "", "stderr": ""}
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    @property
    def delivered(self) -> list[str]:
        """The plain looks that brought the code (``deliver``) on their first line of stdin."""
        return [cmd for cmd, _stdin in self.commands if cmd.endswith(" deliver")]


def fast(answers: list[t.Any], **args: t.Any) -> tuple[FastTransport, ActionStandIn]:
    action = ActionStandIn(answers)
    wait = Wait(Settings(), 0.0)
    wait.invocation_id = "a" * 32
    return FastTransport(t.cast(t.Any, action), wait, {**ARGS, **args}, {}), action


def ran(result: dict[str, t.Any]) -> dict[str, t.Any]:
    return {"rc": 0, "stdout": json.dumps(result), "stderr": ""}


def test_the_first_look_is_the_module_and_later_ones_a_plain_process_with_the_options_on_stdin() -> None:
    send, action = fast([ran({"unit": {"ActiveState": "active"}, "journal": {}, "health": None}), ran(LOOK)], redact=["sk-secret"])
    send(Probe(watch=0.0, health=False, pinning=True))
    assert len(action.modules) == 1 and not action.commands, "nothing is made on the host before the first plain look"
    result = send(Probe(watch=25.0, health=True, health_every=1.0, health_needed=2))
    assert result["unit"] == {"ActiveState": "active"} and len(action.modules) == 1
    command, stdin = action.commands[-1]
    python, _c, _boot, entry, directory, deliver = shlex.split(command)
    assert (python, entry, deliver) == ("/usr/bin/python3", "_probe", "deliver") and re.fullmatch(r"~/\.ansible/tmp/inferops-probe-[0-9a-f]{12}", directory)
    code, options_text = (stdin or "").split("\n", 1)
    assert zipfile.ZipFile(io.BytesIO(base64.b64decode(code))).namelist() == zipfile.ZipFile(io.BytesIO(code_bundle(PROBE_ENTRIES))).namelist()
    options = json.loads(options_text)
    assert options["watch"] == 25.0 and options["health_every"] == 1.0 and options["health_needed"] == 2 and options["redact"] == ["sk-secret"]
    assert "sk-secret" not in command, "secrets go on stdin, never on a command line"
    send(Probe(watch=5.0))
    command, stdin = action.commands[-1]
    assert shlex.split(command)[3:] == ["_probe", directory] and json.loads(stdin or "")["watch"] == 5.0, "the looks after the first run the code it left"
    send.cleanup()
    assert action.commands[-1][0] == f"rm -rf -- ~/{directory[2:]}"


def test_the_first_look_unpacks_the_code_into_a_private_directory_and_the_next_ones_run_from_it(tmp_path: Path) -> None:
    """BOOT itself, run by a real Python: the code of the first look's stdin unpacked (private to the
    user), the probe's cli answering, and a second look served from what the first left."""
    directory = tmp_path / "tmp" / "inferops-probe-0123456789ab"
    code = base64.b64encode(code_bundle(PROBE_ENTRIES)).decode()
    bad_options = json.dumps({"unit": "x.service", "bogus": 1})
    first = subprocess.run(
        [sys.executable, "-c", BOOT, "_probe", str(directory), "deliver"], input=f"{code}\n{bad_options}", capture_output=True, text=True, check=False
    )
    assert json.loads(first.stdout)["failed"] is True, first.stderr
    assert (directory / BUNDLE_PACKAGE / "_probe.py").is_file() and not (tmp_path / "tmp" / "inferops-probe-0123456789ab.part").exists()
    assert oct((tmp_path / "tmp").stat().st_mode & 0o777) == oct(0o700) and oct(directory.stat().st_mode & 0o777) == oct(0o700)
    second = subprocess.run([sys.executable, "-c", BOOT, "_probe", str(directory)], input=bad_options, capture_output=True, text=True, check=False)
    assert json.loads(second.stdout) == json.loads(first.stdout)


def test_a_secret_in_a_plain_look_is_masked_as_the_module_would() -> None:
    send, _action = fast([ran({"unit": {}, "journal": {"tail": ["key sk-secret leaked"]}, "health": None})], redact=["sk-secret"])
    send(Probe(watch=0.0, health=False, pinning=True))
    result = send(Probe(watch=5.0))
    assert "sk-secret" not in json.dumps(result)


def test_a_plain_look_that_does_not_run_falls_back_to_the_module_for_good() -> None:
    send, action = fast([{"rc": 127, "stdout": "", "stderr": "python3: not found"}])
    send(Probe(watch=0.0, health=False, pinning=True))
    send(Probe(watch=5.0))
    send(Probe(watch=5.0))
    assert len(action.modules) == 3 and not action.answers


def test_a_refused_plain_look_fails_the_probe_and_a_lost_connection_is_retried() -> None:
    from ansible.errors import AnsibleConnectionFailure

    send, _action = fast([ran({"failed": True, "msg": "bad url"}), AnsibleConnectionFailure("reset")])
    send(Probe(watch=0.0, health=False, pinning=True))
    with pytest.raises(ProbeFailed, match="bad url"):
        send(Probe(watch=5.0))
    with pytest.raises(ConnectionLost):
        send(Probe(watch=5.0))


def test_with_become_every_look_is_the_module() -> None:
    send, action = fast([])
    action._play_context.become = True
    send = FastTransport(t.cast(t.Any, action), send.wait, ARGS, {})
    send(Probe(watch=0.0, health=False, pinning=True))
    send(Probe(watch=5.0))
    assert len(action.modules) == 2 and not action.commands


def test_a_node_of_a_deployment_keeps_the_modules_looks() -> None:
    action = ActionStandIn([])
    wait = Wait(Settings(deployment="dsr1", node_rank=1, peers={"sim1": 0}), 0.0)
    wait.invocation_id = "a" * 32
    send = FastTransport(t.cast(t.Any, action), wait, ARGS, {})
    send(Probe(watch=0.0, health=False, pinning=True))
    send(Probe(watch=2.0))
    assert len(action.modules) == 2 and not action.commands


def test_the_bundle_is_the_probes_standard_library_code_in_its_package() -> None:
    with zipfile.ZipFile(io.BytesIO(code_bundle(PROBE_ENTRIES))) as bundle:
        names = bundle.namelist()
        assert f"{BUNDLE_PACKAGE}/_probe.py" in names and "ansible_collections/__init__.py" in names
        for name in names:
            text = bundle.read(name).decode()
            assert "from ansible." not in text and "import ansible." not in text, name


class Templar:
    def template(self, value: t.Any) -> t.Any:
        return value


@pytest.mark.parametrize(
    "task_vars",
    [{"ansible_python_interpreter": "/usr/bin/python3"}, {"ansible_facts": {"discovered_interpreter_python": "/usr/bin/python3"}}],
    ids=["inventory", "discovered"],
)
def test_with_the_hosts_python_known_the_first_look_is_already_a_plain_process(task_vars: dict[str, t.Any]) -> None:
    action = ActionStandIn([ran(LOOK), ran(LOOK), ran(LOOK)])
    action._templar = Templar()  # type: ignore[attr-defined]
    wait = Wait(Settings(), 0.0)
    send = FastTransport(t.cast(t.Any, action), wait, ARGS, task_vars)
    send(Probe(watch=0.0, health=False, pinning=True))
    send(Probe(watch=5.0))
    assert not action.modules and len(action.delivered) == 1
    # after a lost connection the host may have rebooted: its first look is the module's
    send(Probe(watch=0.0, health=False, pinning=True, reset_connection=True))
    send(Probe(watch=5.0))
    assert len(action.modules) == 1 and not action.answers[1:]


def test_discovery_left_to_ansible_is_no_known_python() -> None:
    action = ActionStandIn([])
    action._templar = Templar()  # type: ignore[attr-defined]
    send = FastTransport(t.cast(t.Any, action), Wait(Settings(), 0.0), ARGS, {"ansible_python_interpreter": "auto_silent"})
    send(Probe(watch=0.0, health=False, pinning=True))
    assert len(action.modules) == 1


@pytest.mark.parametrize("entries", [PROBE_ENTRIES, CALL_ENTRIES], ids=["probe", "calls"])
def test_the_bundle_imports_its_entry_points_with_nothing_but_itself(tmp_path: Path, entries: tuple[str, ...]) -> None:
    """Every module an entry point imports is in its bundle (a subpackage left out once sent every look
    back to the module): the bundle unpacked and imported by an isolated Python, which sees no site-packages."""
    with zipfile.ZipFile(io.BytesIO(code_bundle(entries))) as bundle:
        bundle.extractall(tmp_path)
    package = BUNDLE_PACKAGE.replace("/", ".")
    for entry in entries:
        code = f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import {package}.{entry} as entry; print(entry.cli.__module__, entry.__file__)"
        done = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == [f"{package}.{entry}", str(tmp_path / BUNDLE_PACKAGE / (entry.replace(".", "/") + ".py"))]
