"""The wait_ready options of a node of a multi-node deployment, and where its channel lives."""

from __future__ import annotations

import os
import typing as t

import pytest

from ansible_collections.inferops.runbooks.plugins.action.wait_ready import ARGUMENT_SPEC
from ansible_collections.inferops.runbooks.plugins.plugin_utils._channel import ChannelError, channel_directory
from ansible_collections.inferops.runbooks.plugins.plugin_utils._options import wait_option_problems

pytestmark = pytest.mark.ansible  # exercises ansible-core: runs on every version (tests/harness/lanes.py)

ARGS = {name: option.get("default") for name, option in ARGUMENT_SPEC.items()}
NODE = {"deployment": "dsr1", "node_rank": 1, "peers": {"gpu-a0": 0}, "channel": "20261130T120000-42-dsr1"}


def test_a_node_of_a_deployment_with_every_option_is_fine() -> None:
    assert wait_option_problems({**ARGS, **NODE}) == []


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"deployment": None}, "peers are given but deployment is not"),
        ({"channel": None}, "peers are given but channel is not"),
        ({"peers": {}}, "node_rank 1 without peers"),
        ({"node_rank": -1}, "node_rank must be a whole number >= 0, got -1"),
        ({"peers": {"gpu-a0": "zero"}}, "peers: the rank of gpu-a0 must be a whole number >= 0, got 'zero'"),
        ({"peers": {"gpu-a0": 0.5}}, "peers: the rank of gpu-a0 must be a whole number >= 0"),
        ({"peers": ["gpu-a0"]}, "peers must be a mapping of host to node rank"),
    ],
)
def test_a_node_missing_what_it_needs_is_refused_before_anything_is_probed(changes: dict[str, t.Any], words: str) -> None:
    problems = wait_option_problems({**ARGS, **NODE, **changes})
    assert any(words in problem for problem in problems), problems


def test_the_channel_is_a_directory_of_the_runs_temporary_directory(tmp_path: t.Any) -> None:
    directory = channel_directory(str(tmp_path), "20261130T120000-42-dsr1")
    assert directory == os.path.join(str(tmp_path), "inferops-deployments", "20261130T120000-42-dsr1") and os.path.isdir(directory)
    for bad in ("../up", "", ".hidden", "a/b"):
        with pytest.raises(ChannelError, match="must be a name of letters"):
            channel_directory(str(tmp_path), bad)
