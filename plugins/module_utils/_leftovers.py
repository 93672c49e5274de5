# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a stopped unit leaves behind, and whether its GPUs are free for the next start.

systemd's stop waits for the main process; with ``KillMode=process`` (or a child that escaped the
kill) other processes of the unit outlive it. An orphaned engine process (vLLM's ``EngineCore``,
a scheduler rank) keeps its GPU memory, and the next start dies of OOM (vllm #42017, #34643). So
after the stop: the unit's control group is waited on until it holds no process (bounded), what is
left gets the unit's ``KillSignal`` (``systemctl kill``), then SIGKILL; and where ``nvidia-smi`` is on
the host, no compute process may hold the unit's GPUs (``CUDA_VISIBLE_DEVICES`` of the unit's
environment, or all GPUs) before the start.

Formats read (nvidia-smi's documented CSV output, ``--format=csv,noheader``):
``--query-gpu=index,uuid``: ``0, GPU-5e3b2f9c-8d1e-4c1a-9f0b-2a7d6c4e1b3a``;
``--query-compute-apps=pid,process_name,used_memory,gpu_uuid``:
``41122, VLLM::EngineCore, 71234 MiB, GPU-5e3b2f9c-8d1e-4c1a-9f0b-2a7d6c4e1b3a`` (memory ``[N/A]`` where
the driver cannot tell, e.g. without the rights to see another container's processes).
Standard library only, no Ansible imports.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import time
import typing as t

# where the unit's control group is found: cgroup v2, then the hybrid and v1 layouts' systemd trees
CGROUP_ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd")
SHOW_PROPERTIES = ("Id", "ControlGroup", "Slice", "KillSignal", "Environment", "EnvironmentFiles")
SEARCHED = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
GPU_QUERY = ("--query-gpu=index,uuid", "--format=csv,noheader")
APPS_QUERY = ("--query-compute-apps=pid,process_name,used_memory,gpu_uuid", "--format=csv,noheader")
# the defaults of Release.graces
KILL_GRACE = 10.0
SIGKILL_GRACE = 5.0
POLL = 0.2

Runner = t.Callable[[t.Sequence[str]], tuple[int, str, str]]


# -- the unit's control group ---------------------------------------------------------------------


def control_group(values: t.Mapping[str, str]) -> str:
    """The unit's control group path (``/system.slice/sglang.service``): systemd's, or the one it
    would have in its slice."""
    found = values.get("ControlGroup", "").strip()
    if found:
        return found
    return f"/{values.get('Slice', '').strip() or 'system.slice'}/{values.get('Id', '').strip()}"


def cgroup_pids(group: str, roots: t.Sequence[str] = CGROUP_ROOTS) -> list[int]:
    """Every process in the control group and the groups below it (the first root that has it)."""
    for root in roots:
        top = root + group
        if not os.path.isfile(os.path.join(top, "cgroup.procs")):
            continue
        pids: list[int] = []
        for directory, _subdirectories, names in os.walk(top):
            if "cgroup.procs" in names:
                pids.extend(_read_pids(os.path.join(directory, "cgroup.procs")))
        return sorted(set(pids))
    return []


def _read_pids(path: str) -> list[int]:
    try:
        with open(path, encoding="ascii") as handle:
            return [int(line) for line in handle.read().split() if line.isdigit()]
    except OSError:
        return []


def process_name(pid: int) -> str:
    """The process's name (``/proc/PID/comm``), or ``?`` once it is gone."""
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as handle:
            return handle.read().strip() or "?"
    except OSError:
        return "?"


def processes(pids: t.Iterable[int]) -> list[dict[str, t.Any]]:
    return [{"pid": pid, "name": process_name(pid)} for pid in pids]


def signal_name(value: str) -> str:
    """systemctl show's KillSignal (a number, ``15``) as the name ``systemctl kill`` takes; SIGTERM when unreadable."""
    text = value.strip()
    try:
        return signal.Signals(int(text)).name if text.isdigit() else signal.Signals[text if text.startswith("SIG") else f"SIG{text}"].name
    except (KeyError, ValueError):
        return "SIGTERM"


# -- the unit's GPUs ------------------------------------------------------------------------------


def environment_value(environment: str, files: t.Sequence[str], name: str) -> str | None:
    """A variable of the unit's environment: its ``Environment=`` (systemctl show's quoted words),
    overridden by its environment files as systemd reads them (``KEY=VALUE`` lines); None when unset."""
    found: str | None = None
    for word in _words(environment):
        key, equals, value = word.partition("=")
        if equals and key == name:
            found = value
    for path in files:
        value_in_file = _file_value(path, name)
        if value_in_file is not None:
            found = value_in_file
    return found


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def environment_files(value: str) -> list[str]:
    """systemctl show's ``EnvironmentFiles=/etc/x.env (ignore_errors=yes)``: the paths."""
    return [word for word in value.split() if word.startswith("/")]


def _file_value(path: str, name: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    found = None
    for line in lines:
        key, equals, value = line.strip().removeprefix("export ").partition("=")
        if equals and key.strip() == name:
            words = _words(value)
            found = words[0] if len(words) == 1 else value.strip()
    return found


def parse_gpus(text: str) -> list[dict[str, t.Any]]:
    """``nvidia-smi --query-gpu=index,uuid --format=csv,noheader``: one ``{index, uuid}`` a GPU."""
    gpus = []
    for line in text.splitlines():
        index, comma, uuid = (part.strip() for part in line.partition(","))
        if comma and index.isdigit() and uuid:
            gpus.append({"index": int(index), "uuid": uuid})
    return gpus


def parse_compute_apps(text: str) -> list[dict[str, t.Any]]:
    """``nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_uuid --format=csv,noheader``:
    one ``{pid, name, used_memory, gpu_uuid}`` a process on a GPU (a name may hold commas: the pid is
    the first field, the memory and the GPU the last two)."""
    apps = []
    for line in text.splitlines():
        pid, comma, rest = line.partition(",")
        fields = [part.strip() for part in rest.rsplit(",", 2)]
        if not comma or not pid.strip().isdigit() or len(fields) != 3:
            continue
        name, memory, uuid = fields
        apps.append({"pid": int(pid), "name": name, "used_memory": memory, "gpu_uuid": uuid})
    return apps


def unit_gpus(gpus: t.Sequence[t.Mapping[str, t.Any]], visible: str | None) -> list[dict[str, t.Any]]:
    """The GPUs the unit's CUDA_VISIBLE_DEVICES lets it use: every GPU when unset or when a device is
    named in a way not read here (a MIG instance), none when empty; indices and UUIDs (or UUID
    prefixes, as CUDA takes them) otherwise."""
    if visible is None:
        return [dict(gpu) for gpu in gpus]
    chosen: list[dict[str, t.Any]] = []
    for token in (part.strip() for part in visible.split(",")):
        if not token:
            continue
        if token.lstrip("-").isdigit() and int(token) < 0:
            break  # CUDA ignores this device and every one after it
        match = [gpu for gpu in gpus if (token.isdigit() and gpu["index"] == int(token)) or (not token.isdigit() and str(gpu["uuid"]).startswith(token))]
        if not match:
            return [dict(gpu) for gpu in gpus]
        chosen.extend(dict(gpu) for gpu in match if gpu not in chosen)
    return chosen


def gpu_holders(apps: t.Sequence[t.Mapping[str, t.Any]], gpus: t.Sequence[t.Mapping[str, t.Any]]) -> list[dict[str, t.Any]]:
    """The compute processes on the given GPUs, each with its GPU's index."""
    index = {gpu["uuid"]: gpu["index"] for gpu in gpus}
    return [{**app, "gpu_index": index[app["gpu_uuid"]]} for app in apps if app["gpu_uuid"] in index]


def find_program(name: str) -> str | None:
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), *SEARCHED]))


# -- the release ----------------------------------------------------------------------------------


class Release:
    """One unit's release after its stop: its processes waited on and killed, its GPUs read."""

    # seconds what is left has to exit after the unit's kill signal, then after SIGKILL
    graces = (KILL_GRACE, SIGKILL_GRACE)

    def __init__(self, unit: str, values: t.Mapping[str, str], run: Runner, systemctl: str, roots: t.Sequence[str] = CGROUP_ROOTS) -> None:
        self.unit = unit
        self.values = values
        self.run = run
        self.systemctl = systemctl
        self.roots = roots
        self.clock = time.monotonic
        self.group = control_group(values)

    def wait_empty(self, seconds: float) -> list[int]:
        """The group's processes once it is empty or ``seconds`` passed."""
        deadline = self.clock() + max(seconds, 0.0)
        while True:
            pids = cgroup_pids(self.group, self.roots)
            if not pids or self.clock() >= deadline:
                return pids
            time.sleep(POLL)

    def processes(self, timeout: float) -> dict[str, t.Any]:
        """Wait up to ``timeout`` for the group to empty; then the unit's kill signal to what is left,
        then SIGKILL: ``left`` (after the wait), ``signals`` sent, ``remaining`` (after them), ``waited``."""
        started = self.clock()
        pids = self.wait_empty(timeout)
        found: dict[str, t.Any] = {"control_group": self.group, "left": processes(pids), "signals": [], "remaining": []}
        for name, grace in zip((signal_name(self.values.get("KillSignal", "")), "SIGKILL"), self.graces):
            if not pids:
                break
            found["signals"].append(name)
            self.run([self.systemctl, "kill", f"--signal={name}", "--", self.unit])
            pids = self.wait_empty(grace)
        found["remaining"] = processes(pids)
        found["waited"] = round(self.clock() - started, 1)
        return found

    def gpus(self, nvidia_smi: str | None, seconds: float) -> dict[str, t.Any]:
        """The compute processes that hold the unit's GPUs, read again until none or ``seconds`` passed."""
        if nvidia_smi is None:
            return {"checked": False, "why_not": "nvidia-smi is not on the host"}
        visible = environment_value(self.values.get("Environment", ""), environment_files(self.values.get("EnvironmentFiles", "")), "CUDA_VISIBLE_DEVICES")
        code, out, err = self.run([nvidia_smi, *GPU_QUERY])
        if code != 0:
            return {"checked": False, "why_not": f"nvidia-smi --query-gpu failed (rc={code}): {(err or out).strip()[:300]}"}
        chosen = unit_gpus(parse_gpus(out), visible)
        deadline = self.clock() + max(seconds, 0.0)
        while True:
            code, out, err = self.run([nvidia_smi, *APPS_QUERY])
            if code != 0:
                return {"checked": False, "why_not": f"nvidia-smi --query-compute-apps failed (rc={code}): {(err or out).strip()[:300]}"}
            holders = gpu_holders(parse_compute_apps(out), chosen)
            if not holders or self.clock() >= deadline:
                return {"checked": True, "visible_devices": visible, "gpus": chosen, "holders": holders}
            time.sleep(1.0)
