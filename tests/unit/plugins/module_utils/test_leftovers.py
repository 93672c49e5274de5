"""What a stopped unit leaves (module_utils/_leftovers): nvidia-smi's CSV output as its documentation and
its users show it, the unit's GPUs from CUDA_VISIBLE_DEVICES, the control group read from cgroupfs files,
the wait and the signals in order, and the decision whether the next start may begin. The real
systemd side (a unit with KillMode=process whose engine process outlives the stop) is
tests/integration/test_leftovers.py; there is no GPU here, so nvidia-smi is a script printing its formats."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils._leftovers import (
    Release,
    cgroup_pids,
    control_group,
    environment_value,
    gpu_holders,
    parse_compute_apps,
    parse_gpus,
    signal_name,
    unit_gpus,
)
from ansible_collections.inferops.runbooks.plugins.module_utils._systemd import run_command
from ansible_collections.inferops.runbooks.plugins.plugin_utils._release import release_outcome

UUIDS = ("GPU-5e3b2f9c-8d1e-4c1a-9f0b-2a7d6c4e1b3a", "GPU-a1b2c3d4-0e1f-4a2b-8c3d-4e5f6a7b8c9d", "GPU-0f9e8d7c-6b5a-4c3d-9e2f-1a0b9c8d7e6f")
# nvidia-smi --query-gpu=index,uuid --format=csv,noheader
GPUS_CSV = "".join(f"{index}, {uuid}\n" for index, uuid in enumerate(UUIDS))
# nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_uuid --format=csv,noheader: an orphaned engine
# process on GPU 1, another user's job on GPU 2 (name with a comma), one whose memory the driver does not show
APPS_CSV = (
    f"41122, VLLM::EngineCore, 71234 MiB, {UUIDS[1]}\n"
    f"51515, python train.py --lr=1e-4,--warmup, 2048 MiB, {UUIDS[2]}\n"
    f"61616, /usr/bin/python3, [N/A], {UUIDS[1]}\n"
)


def test_the_gpus_and_their_compute_processes_are_read_from_nvidia_smis_csv() -> None:
    assert parse_gpus(GPUS_CSV) == [{"index": i, "uuid": u} for i, u in enumerate(UUIDS)]
    apps = parse_compute_apps(APPS_CSV)
    assert [app["pid"] for app in apps] == [41122, 51515, 61616]
    assert apps[0] == {"pid": 41122, "name": "VLLM::EngineCore", "used_memory": "71234 MiB", "gpu_uuid": UUIDS[1]}
    assert apps[1]["name"] == "python train.py --lr=1e-4,--warmup" and apps[1]["gpu_uuid"] == UUIDS[2]
    assert apps[2]["used_memory"] == "[N/A]"
    # no process: nothing printed (older drivers print a sentence, which is no process either)
    assert parse_compute_apps("") == [] and parse_compute_apps("No running processes found\n") == []


@pytest.mark.parametrize(
    ("visible", "indices"),
    [
        (None, [0, 1, 2]),
        ("", []),
        ("1", [1]),
        ("2,0", [2, 0]),
        (UUIDS[2], [2]),
        ("GPU-a1b2c3d4", [1]),  # a UUID prefix, as CUDA takes it
        ("0,-1,2", [0]),  # CUDA stops at an invalid index
        ("MIG-4f1c0d2e-aaaa-bbbb-cccc-0123456789ab", [0, 1, 2]),  # not read here: every GPU is checked
        ("7", [0, 1, 2]),
    ],
)
def test_the_units_gpus_come_from_cuda_visible_devices(visible: str | None, indices: list[int]) -> None:
    assert [gpu["index"] for gpu in unit_gpus(parse_gpus(GPUS_CSV), visible)] == indices


def test_a_holder_is_a_compute_process_on_one_of_the_units_gpus() -> None:
    gpus = unit_gpus(parse_gpus(GPUS_CSV), "0,1")
    holders = gpu_holders(parse_compute_apps(APPS_CSV), gpus)
    assert [(entry["pid"], entry["gpu_index"]) for entry in holders] == [(41122, 1), (61616, 1)]
    assert gpu_holders(parse_compute_apps(APPS_CSV), unit_gpus(parse_gpus(GPUS_CSV), "0")) == []


def test_cuda_visible_devices_is_read_from_the_units_environment_and_its_files(tmp_path: Path) -> None:
    assert environment_value('A=1 "CUDA_VISIBLE_DEVICES=0,1" B=x', [], "CUDA_VISIBLE_DEVICES") == "0,1"
    assert environment_value("A=1", [], "CUDA_VISIBLE_DEVICES") is None
    env = tmp_path / "vllm.env"
    env.write_text('# the server\nexport CUDA_VISIBLE_DEVICES="2,3"\nVLLM_SERVER_DEV_MODE=1\n')
    # the file comes after Environment=, as systemd applies it
    assert environment_value("CUDA_VISIBLE_DEVICES=0", [str(env), str(tmp_path / "missing.env")], "CUDA_VISIBLE_DEVICES") == "2,3"


def test_the_kill_signal_is_named_as_systemctl_kill_takes_it() -> None:
    assert signal_name("15") == "SIGTERM" and signal_name("2") == "SIGINT" and signal_name("SIGQUIT") == "SIGQUIT"
    assert signal_name("") == "SIGTERM" and signal_name("bogus") == "SIGTERM"


def fake_cgroup(root: Path, group: str, pids: dict[str, list[int]]) -> Path:
    """A cgroupfs tree as the kernel shows it: cgroup.procs in the unit's group and in its subgroups."""
    top = root / group.lstrip("/")
    for sub, found in pids.items():
        directory = top / sub
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "cgroup.procs").write_text("".join(f"{pid}\n" for pid in found))
    return top


def test_the_control_group_is_read_with_its_subgroups(tmp_path: Path) -> None:
    group = control_group({"Id": "vllm.service", "ControlGroup": "", "Slice": "system.slice"})
    assert group == "/system.slice/vllm.service"
    assert control_group({"ControlGroup": "/system.slice/x.service"}) == "/system.slice/x.service"
    fake_cgroup(tmp_path / "unified", group, {"": [12], "engine": [40, 12]})
    assert cgroup_pids(group, (str(tmp_path / "v2"), str(tmp_path / "unified"))) == [12, 40]
    assert cgroup_pids(group, (str(tmp_path / "v2"),)) == []


class Systemctl:
    """systemctl kill as the unit's processes answer it: each signal in ``stops`` empties the group."""

    def __init__(self, top: Path, stops: set[str]) -> None:
        self.top, self.stops, self.sent = top, stops, []  # type: list[str]

    def __call__(self, argv: list[str]) -> tuple[int, str, str]:
        assert argv[:2] == ["systemctl", "kill"] and argv[-2:] == ["--", "vllm.service"], argv
        signal = argv[2].removeprefix("--signal=")
        self.sent.append(signal)
        if signal in self.stops:
            (self.top / "cgroup.procs").write_text("")
        return 0, "", ""


VALUES = {"Id": "vllm.service", "ControlGroup": "/system.slice/vllm.service", "KillSignal": "2"}


@pytest.mark.parametrize(
    ("stops", "sent", "remaining"), [({"SIGINT"}, ["SIGINT"], 0), ({"SIGKILL"}, ["SIGINT", "SIGKILL"], 0), (set(), ["SIGINT", "SIGKILL"], 1)]
)
def test_what_outlives_the_stop_gets_the_units_kill_signal_then_sigkill(tmp_path: Path, stops: set[str], sent: list[str], remaining: int) -> None:
    top = fake_cgroup(tmp_path, VALUES["ControlGroup"], {"": [os.getpid()]})
    systemctl = Systemctl(top, stops)
    release = Release("vllm.service", VALUES, systemctl, "systemctl", roots=(str(tmp_path),))
    release.graces = (0.3, 0.3)
    found = release.processes(0.3)
    assert systemctl.sent == sent and found["signals"] == sent
    assert found["left"] == [{"pid": os.getpid(), "name": Path("/proc/self/comm").read_text().strip()}]
    assert len(found["remaining"]) == remaining and 0.3 <= found["waited"] < 5


def test_an_empty_group_is_not_signalled(tmp_path: Path) -> None:
    fake_cgroup(tmp_path, VALUES["ControlGroup"], {"": []})
    systemctl = Systemctl(tmp_path, set())
    found = Release("vllm.service", VALUES, systemctl, "systemctl", roots=(str(tmp_path),)).processes(30)
    assert found["left"] == [] and found["signals"] == [] and systemctl.sent == [] and found["waited"] < 1


def nvidia_smi(tmp_path: Path, apps: str) -> str:
    """An executable that prints nvidia-smi's documented output for the two queries."""
    script = tmp_path / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f'case "$1" in --query-gpu=index,uuid) printf %s "{GPUS_CSV}";;'
        f' --query-compute-apps=pid,process_name,used_memory,gpu_uuid) printf %s "{apps}";; *) exit 6;; esac\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_the_gpus_are_read_through_nvidia_smi(tmp_path: Path) -> None:
    release = Release("vllm.service", {**VALUES, "Environment": "CUDA_VISIBLE_DEVICES=1"}, run_command, "systemctl", roots=(str(tmp_path),))
    held = release.gpus(nvidia_smi(tmp_path, APPS_CSV), 0)
    assert held["checked"] and held["visible_devices"] == "1" and [entry["pid"] for entry in held["holders"]] == [41122, 61616]
    free = Release("vllm.service", {**VALUES, "Environment": "CUDA_VISIBLE_DEVICES=0"}, run_command, "systemctl").gpus(nvidia_smi(tmp_path, APPS_CSV), 0)
    assert free["checked"] and free["holders"] == [] and [gpu["index"] for gpu in free["gpus"]] == [0]
    assert Release("vllm.service", VALUES, run_command, "systemctl").gpus(None, 0) == {"checked": False, "why_not": "nvidia-smi is not on the host"}
    failing = tmp_path / "broken"
    failing.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'; exit 9\n")
    failing.chmod(0o755)
    broken = Release("vllm.service", VALUES, run_command, "systemctl").gpus(str(failing), 0)
    assert not broken["checked"] and "rc=9" in broken["why_not"] and "could not communicate" in broken["why_not"]


LEFT = [{"pid": 4242, "name": "VLLM::EngineCor"}]


def test_the_start_begins_when_the_stop_left_nothing() -> None:
    assert release_outcome({"left": [], "signals": [], "remaining": [], "gpus": {"checked": False}}, "vllm.service") == {"ok": True, "msg": "", "line": None}


def test_an_orphan_killed_is_said_and_the_start_begins() -> None:
    found = {"control_group": "/system.slice/vllm.service", "left": LEFT, "signals": ["SIGTERM", "SIGKILL"], "remaining": []}
    found["gpus"] = {"checked": True, "holders": []}
    outcome = release_outcome(found, "vllm.service")
    assert outcome["ok"] and outcome["msg"] == ""
    assert outcome["line"] == (
        "vllm.service: 1 process(es) outlived the stop in /system.slice/vllm.service: 4242 (VLLM::EngineCor);"
        " sent SIGTERM then SIGKILL (systemctl kill), none left"
    )


def test_a_process_that_survives_sigkill_stops_the_run_before_the_start() -> None:
    found = {"control_group": "/system.slice/vllm.service", "left": LEFT, "signals": ["SIGTERM", "SIGKILL"], "remaining": LEFT}
    outcome = release_outcome(found, "vllm.service")
    assert not outcome["ok"] and "4242 (VLLM::EngineCor)" in outcome["msg"] and "still run after its stop" in outcome["msg"]
    assert outcome["line"] is not None and outcome["line"].endswith("1 still running")


def test_a_gpu_still_held_stops_the_run_naming_the_process_and_its_memory() -> None:
    holders = gpu_holders(parse_compute_apps(APPS_CSV), unit_gpus(parse_gpus(GPUS_CSV), None))
    outcome = release_outcome({"left": [], "signals": [], "remaining": [], "gpus": {"checked": True, "holders": holders}}, "vllm.service")
    assert not outcome["ok"] and outcome["line"] is None
    assert f"41122 (VLLM::EngineCore) holds 71234 MiB on GPU 1 ({UUIDS[1]})" in outcome["msg"]
    assert "51515 (python train.py --lr=1e-4,--warmup) holds 2048 MiB on GPU 2" in outcome["msg"]
    assert "would run out of GPU memory" in outcome["msg"]
