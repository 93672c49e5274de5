"""Container and launcher output is judged by what follows it, not by the word ERROR in a banner.

A server under systemd often runs as ``docker run`` or ``podman run``: the image's entrypoint prints
its banner before the server starts. NGC images (and the CUDA base images vLLM's and SGLang's images
build on) check the driver, the CPU and /dev/shm in /opt/nvidia/entrypoint.d and print what they found
(the lines below are those scripts' echo lines, filled in as the issue's host printed them); ROCm
images print libdrm's and rocm-smi's notes. The start is then judged by the server's own lines.
"""

from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import classify, classify_line, load_rules
from tests.unit.conftest import corpus_logs

# nvidia_entrypoint.sh on a host whose driver (580) is older than the image's (595), compatibility mode unavailable
NGC_DRIVER_TOO_OLD = [
    "",
    "=============",
    "== PyTorch ==",
    "=============",
    "",
    "NVIDIA Release 26.03 (build 254221466)",
    "PyTorch Version 2.11.0a0+a5436ab",
    "Container image Copyright (c) 2026, NVIDIA CORPORATION & AFFILIATES. All rights reserved.",
    "",
    "This container image and its contents are governed by the NVIDIA Deep Learning Container License.",
    "By pulling and using the container, you accept the terms and conditions of this license:",
    "https://developer.nvidia.com/ngc/nvidia-deep-learning-container-license",
    "",
    "ERROR: This container was built for NVIDIA Driver Release 595.58 or later, but",
    "       version 580.159.03 was detected and compatibility mode is UNAVAILABLE.",
    "",
    "       [[System has unsupported display driver / cuda driver combination (CUDA_ERROR_SYSTEM_DRIVER_MISMATCH) cuda error (803)]]",
    "",
    "NOTE: The SHMEM allocation limit is set to the default of 64MB.  This may be",
    "   insufficient for PyTorch.  NVIDIA recommends the use of the following flags:",
    "   docker run --gpus all --ipc=host --ulimit memlock=-1 --ulimit stack=67108864 ...",
    "",
]
# the same check as the issue quotes it, on one line
ISSUE_LINE = (
    "ERROR: This container was built for NVIDIA Driver Release 595.58 or later, but version 580.159.03 was detected and compatibility mode is UNAVAILABLE."
)
# the CUDA base image (nvidia/cuda) without the container toolkit's GPU hook
CUDA_NO_DRIVER = [
    "==========",
    "== CUDA ==",
    "==========",
    "",
    "CUDA Version 12.9.1",
    "",
    "WARNING: The NVIDIA Driver was not detected.  GPU functionality will not be available.",
    "   Use the NVIDIA Container Toolkit to start this container with GPU support; see",
    "   https://docs.nvidia.com/datacenter/cloud-native/ .",
    "",
    "*************************",
    "** DEPRECATION NOTICE! **",
    "*************************",
    "THIS IMAGE IS DEPRECATED and is scheduled for DELETION.",
]
ROCM_NOTES = [
    "/opt/amdgpu/share/libdrm/amdgpu.ids: No such file or directory",
    "WARNING: AMD GPU device(s) is/are in a low-power state. Check power control/runtime_status",
]
UNDER_DOCKER = "Mar 02 10:11:{second:02d} gpu7 docker[4312]: {line}"


def corpus_log(name: str) -> str:
    return next(log for log in corpus_logs() if log.name == name).body


def after_banner(banner: list[str], name: str, journal: bool = False) -> str:
    """The banner, then the log of a real start (as journalctl shows a docker run unit's lines, with ``journal``)."""
    lines = [UNDER_DOCKER.format(second=index % 60, line=line) for index, line in enumerate(banner)] if journal else banner
    return "\n".join([*lines, corpus_log(name).rstrip("\n")]) + "\n"


@pytest.fixture(scope="module")
def rules() -> dict[str, Any]:
    return {engine: load_rules(engine) for engine in ("sglang", "vllm", "auto")}


@pytest.mark.parametrize("line", [ISSUE_LINE, *(line for line in NGC_DRIVER_TOO_OLD if "ERROR" in line or "[[" in line or "UNAVAILABLE" in line)])
@pytest.mark.parametrize("engine", ["sglang", "vllm", "auto"])
def test_the_ngc_driver_check_is_a_warning_never_fatal(line: str, engine: str, rules: dict[str, Any]) -> None:
    got = classify_line(line, rules=rules[engine])
    assert (got["class"], got["rule"]) == ("survived", "common-ngc-banner-driver-check"), got


@pytest.mark.parametrize(
    ("line", "event_class"),
    [
        ("WARNING: The NVIDIA Driver was not detected.  GPU functionality will not be available.", "survived"),
        ("ERROR: The NVIDIA Driver is present, but CUDA failed to initialize.  GPU functionality will not be available.", "survived"),
        ("ERROR: No supported GPU(s) detected to run this container", "survived"),
        ("ERROR: This container was built for CPUs supporting at least the AVX instruction set, but", "survived"),
        ("WARNING: CUDA Forward Compatibility mode ENABLED.", "allowlisted"),
        ("NOTE: MOFED driver for multi-node communication was not detected.", "allowlisted"),
        ("THIS IMAGE IS DEPRECATED and is scheduled for DELETION.", "allowlisted"),
        (ROCM_NOTES[0], "allowlisted"),
        (ROCM_NOTES[1], "allowlisted"),
        ("Unable to find image 'lmsysorg/sglang:v0.5.11-cu129' locally", "allowlisted"),
    ],
)
def test_the_images_banner_lines_are_warnings_or_notes(line: str, event_class: str, rules: dict[str, Any]) -> None:
    assert classify_line(line, rules=rules["auto"])["class"] == event_class


@pytest.mark.parametrize(
    "line",
    [
        # the server's own lines after the banner: what decides
        "RuntimeError: CUDA error: system has unsupported display driver / cuda driver combination",
        "torch.cuda.DeferredCudaError: CUDA call failed lazily at initialization with error: Found no NVIDIA driver on your system.",
        "[2026-03-02 10:16:03 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "ERROR 03-02 10:16:03 [core.py:708] EngineCore failed to start.",
        # words of the banner in another shape stay what they were
        "ERROR: This container crashed: CUDA error: an illegal memory access was encountered",
    ],
)
def test_what_follows_a_banner_keeps_its_class(line: str, rules: dict[str, Any]) -> None:
    assert classify_line(line, rules=rules["auto"])["class"] == "fatal", line


@pytest.mark.parametrize("journal", [False, True], ids=["raw", "journal"])
@pytest.mark.parametrize("banner", [NGC_DRIVER_TOO_OLD, [ISSUE_LINE], CUDA_NO_DRIVER + ROCM_NOTES], ids=["ngc", "issue-line", "cuda-rocm"])
def test_a_start_after_a_banner_passes_and_shows_the_banner_as_a_warning(banner: list[str], journal: bool) -> None:
    report = classify(after_banner(banner, "sglang-ready-01.log", journal), engine="sglang")
    assert report["verdict"] == "pass", report["reason"]
    assert report["fatal"] == []
    if any("ERROR" in line or "not detected" in line for line in banner):
        assert {event["rule"] for event in report["survived"]} == {"common-ngc-banner-driver-check"}
        assert report["survived"][0]["file"] == "/opt/nvidia/nvidia_entrypoint.sh"


@pytest.mark.parametrize("journal", [False, True], ids=["raw", "journal"])
@pytest.mark.parametrize(("log", "engine"), [("sglang-nccl-02.log", "sglang"), ("vllm-cpu-head-dim-16-01.log", "vllm")])
def test_a_start_that_dies_after_a_banner_fails_on_its_own_first_fatal_line(log: str, engine: str, journal: bool) -> None:
    """The issue's start: the banner was taken for its first fatal line five minutes before the real failure."""
    plain = classify(corpus_log(log), engine=engine)
    bannered = classify(after_banner(NGC_DRIVER_TOO_OLD, log, journal), engine=engine)
    assert plain["verdict"] == bannered["verdict"] == "fail"
    assert bannered["reason"] == plain["reason"]
    assert [event["message"] for event in bannered["fatal"]] == [event["message"] for event in plain["fatal"]]
    assert bannered["survived"] and bannered["survived"][0]["rule"] == "common-ngc-banner-driver-check"
