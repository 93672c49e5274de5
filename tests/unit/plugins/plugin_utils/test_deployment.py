"""Multi-node deployments (plugin_utils/_deployment.py): the topology from host variables, the
rollout batches, and one verdict per deployment from its nodes' reports."""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.inferops.runbooks.plugins.plugin_utils._deployment import TopologyError, deployment_verdict, rollout, topology


def node(deployment: str, rank: t.Any) -> dict[str, t.Any]:
    return {"sglang_deployment": deployment, "sglang_node_rank": rank}


HOSTVARS: dict[str, dict[str, t.Any]] = {
    "a0": node("dsr1", 0),
    "a1": node("dsr1", "1"),  # INI inventories and surveys give text
    "solo": {},
    "b1": node("qwen", 1),
    "b0": node("qwen", 0),
}


def test_nodes_are_grouped_by_deployment_and_single_hosts_stay_single() -> None:
    found = topology(["a0", "a1", "solo", "b1", "b0"], HOSTVARS, HOSTVARS)
    assert [(d.name, d.multi_node, [(n.host, n.rank) for n in d.nodes]) for d in found] == [
        ("dsr1", True, [("a0", 0), ("a1", 1)]),
        ("solo", False, [("solo", 0)]),
        ("qwen", True, [("b0", 0), ("b1", 1)]),
    ]
    assert found[0].as_dict()["hosts"] == ["a0", "a1"]


@pytest.mark.parametrize(
    ("hostvars", "words"),
    [
        ({"x": node("dsr1", 0), "y": node("dsr1", 0)}, "deployment dsr1: x and y all have node rank 0"),
        ({"x": node("dsr1", 1), "y": node("dsr1", 2)}, "deployment dsr1 has no node of rank 0"),
        ({"x": node("dsr1", 0), "y": node("dsr1", 2)}, "deployment dsr1: node rank(s) 1 missing (ranks: 0, 2"),
        ({"x": node("dsr1", 0), "y": node("dsr1", "one")}, "deployment dsr1: y's sglang_node_rank is 'one', not a whole number >= 0"),
        ({"x": node("dsr1", 0), "y": {"sglang_node_rank": 1}}, "y has sglang_node_rank=1 but no sglang_deployment"),
        ({"x": node("dsr/1", 0)}, "x: sglang_deployment='dsr/1' is not a deployment name"),
        ({"x": node("y", 0), "y": {}}, "deployment y has the name of a single-node host"),
    ],
)
def test_bad_topologies_are_refused_naming_the_deployment(hostvars: dict[str, dict[str, t.Any]], words: str) -> None:
    with pytest.raises(TopologyError) as refused:
        topology(list(hostvars), hostvars, hostvars)
    assert words in str(refused.value)


def test_a_node_left_out_of_the_run_is_refused() -> None:
    with pytest.raises(TopologyError, match=r"deployment dsr1: a1 \(node 1\) is not in this run"):
        topology(["a0", "solo"], HOSTVARS, HOSTVARS)
    # a deployment entirely outside the run is not this run's business
    assert [d.name for d in topology(["solo"], HOSTVARS, HOSTVARS)] == ["solo"]


def test_every_problem_is_named_at_once() -> None:
    hostvars = {"x": node("one", 1), "y": node("two", 0), "z": node("two", 0)}
    with pytest.raises(TopologyError) as refused:
        topology(list(hostvars), hostvars)
    assert "deployment one has no node of rank 0" in str(refused.value) and "deployment two: y and z" in str(refused.value)


def test_the_rollout_restarts_the_canary_deployment_alone_then_batches_of_whole_deployments() -> None:
    found = topology(["a0", "a1", "solo", "b1", "b0"], HOSTVARS)
    plan = rollout(found, 2)
    assert plan["hosts"] == ["a0", "a1", "solo", "b0", "b1"]
    assert plan["serial"] == [2, 3] and plan["batches"] == [["dsr1"], ["solo", "qwen"]]
    assert rollout(found, 1)["serial"] == [2, 1, 2]
    # single-node hosts keep their old rollout: one canary host, then batches of hosts
    singles = topology(["h1", "h2", "h3", "h4"], {})
    assert rollout(singles, 2)["serial"] == [1, 2, 1]


def test_a_batch_larger_than_the_forks_is_refused() -> None:
    hostvars = {**HOSTVARS, "c0": node("c", 0), "c1": node("c", 1)}
    found = topology(["a0", "a1", "b1", "b0", "c0", "c1"], hostvars)
    with pytest.raises(TopologyError, match=r"qwen, c: 4 nodes are restarted and waited on together, but Ansible runs only 3 hosts at once"):
        rollout(found, 2, forks=3)
    assert rollout(found, 1, forks=2)["serial"] == [2, 2, 2]
    with pytest.raises(TopologyError, match="batch size"):
        rollout(found, 0)


def report(host: str, rank: int, verdict: str, reason: str, realtime: int | None = None, ended_at: float = 0.0, msg: str = "") -> dict[str, t.Any]:
    first = {"message": f"fatal on {host}", "rule": "x", "ranks": [], "line": 10, "timestamp": None, "realtime": realtime} if realtime else None
    return {
        "host": host,
        "node_rank": rank,
        "verdict": verdict,
        "reason": reason,
        "msg": msg or f"{host}: {reason}",
        "first_fatal": first,
        "ended_at": ended_at,
    }


def test_the_root_cause_is_the_earliest_fatal_line_in_journal_time() -> None:
    """Node 0's wait may end first with its own line (a rendezvous timeout), yet the line that came
    first in journal time, on node 1, is the root cause; node 0's line is listed as a consequence."""
    reports = [
        report("a0", 0, "fail", "fatal_log", realtime=1_700_000_003_200_000, ended_at=100.0, msg="fatal line: Connection closed by peer"),
        report("a1", 1, "fail", "fatal_log", realtime=1_700_000_000_100_000, ended_at=101.0, msg="fatal line: KeyError"),
    ]
    verdict = deployment_verdict("dsr1", reports)
    assert (verdict["verdict"], verdict["reason"]) == ("fail", "fatal_log")
    assert verdict["root_cause"]["host"] == "a1" and verdict["msg"].startswith("a1 (node 1): fatal line: KeyError")
    zero, one = verdict["nodes"]
    assert one["root_cause"] and not zero["root_cause"]
    assert zero["after_root_cause"] == pytest.approx(3.1)


def test_without_a_fatal_line_the_first_node_failing_on_its_own_account_is_the_root_cause() -> None:
    reports = [report("a0", 0, "fail", "peer_failed", ended_at=50.0), report("a1", 1, "fail", "stalled", ended_at=52.0, msg="no progress")]
    verdict = deployment_verdict("dsr1", reports)
    assert verdict["root_cause"]["host"] == "a1" and verdict["reason"] == "stalled"


def test_a_deployment_passes_only_when_every_node_passed() -> None:
    assert deployment_verdict("dsr1", [report("a0", 0, "pass", "ready"), report("a1", 1, "pass", "ready")])["verdict"] == "pass"
    mixed = deployment_verdict("dsr1", [report("a1", 1, "pass", "ready"), report("a0", 0, "fail", "health_never_passed")])
    assert mixed["verdict"] == "fail" and mixed["root_cause"]["host"] == "a0"
    assert [n["host"] for n in mixed["nodes"]] == ["a0", "a1"]
    assert deployment_verdict("dsr1", [report("a0", 0, "skipped", "check_mode")])["verdict"] == "skipped"


class _Counting(dict):  # type: ignore[type-arg]
    """hostvars that count whose variables were read."""

    def __init__(self, *args: t.Any) -> None:
        super().__init__(*args)
        self.read: list[str] = []

    def get(self, key: t.Any, default: t.Any = None) -> t.Any:
        self.read.append(key)
        return super().get(key, default)


def test_with_no_deployment_in_the_run_the_hosts_left_out_are_not_read() -> None:
    # every host its own server: a rolling batch reads its own hosts, not the whole inventory's
    hostvars = _Counting({f"h{i}": {} for i in range(50)})
    found = topology(["h1"], hostvars, list(hostvars))
    assert [d.name for d in found] == ["h1"]
    assert hostvars.read == ["h1"]
    # a deployment in the run: the others are read, and a node left out of the run refused
    hostvars = _Counting({**{f"h{i}": {} for i in range(3)}, "a0": node("dsr1", 0), "a1": node("dsr1", 1)})
    with pytest.raises(TopologyError, match=r"a1 \(node 1\) is not in this run"):
        topology(["a0"], hostvars, list(hostvars))
    assert sorted(hostvars.read) == ["a0", "a1", "h0", "h1", "h2"]


def test_the_topology_written_as_text_reads_back_the_same() -> None:
    from ansible_collections.inferops.runbooks.plugins.plugin_utils._deployment import from_topology_text, topology_text

    hosts = ["a0", "a1", "solo", "b1", "b0"]
    assert from_topology_text(topology_text(hosts, HOSTVARS, HOSTVARS)) == topology(hosts, HOSTVARS, HOSTVARS)
    refused = topology_text(["a0", "solo"], HOSTVARS, HOSTVARS)
    with pytest.raises(TopologyError, match=r"a1 \(node 1\) is not in this run"):
        from_topology_text(refused)


def test_the_hosts_of_a_batch_read_its_topology_once(tmp_path: t.Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from ansible import constants as C

    from ansible_collections.inferops.runbooks.plugins.action.check_options import deployment_node

    monkeypatch.setattr(C, "DEFAULT_LOCAL_TMP", str(tmp_path), raising=False)
    hostvars = _Counting(HOSTVARS)
    task_vars = {"ansible_play_batch": ["a0", "a1", "solo"], "groups": {"all": list(HOSTVARS)}, "hostvars": hostvars}
    first = [deployment_node(host, task_vars, "task-1") for host in ("a0", "a1", "solo")]
    assert [node["hosts"] for node, _problems in first] == [["a0", "a1"], ["a0", "a1"], ["solo"]]
    assert sorted(hostvars.read) == ["a0", "a1", "b0", "b1", "solo"]  # once, by the first host
    # without the task's id (or for another task) the hosts' variables are read again, with the same answer
    assert [deployment_node(host, task_vars) for host in ("a0", "a1", "solo")] == first
    assert deployment_node("a0", task_vars, "task-2") == first[0]
    assert len(hostvars.read) == 5 * 5
    # a refused topology refuses every host of the batch, the same way
    task_vars["ansible_play_batch"] = ["a0", "solo"]
    assert (
        deployment_node("solo", task_vars, "task-3")
        == deployment_node("solo", task_vars)
        == (
            {},
            [
                "the deployments are wrong: deployment dsr1: a1 (node 1) is not in this run: every node of a deployment is restarted together "
                "(check --limit and the host pattern)"
            ],
        )
    )
