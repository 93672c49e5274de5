# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nodes of a deployment go through the parts of its restart together (plugin_utils/_channel.Rendezvous):
with real processes sharing a directory, as Ansible's worker processes do, and with a clock for the timeout."""

from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path

from ansible_collections.inferops.runbooks.plugins.plugin_utils._channel import Rendezvous

HOSTS = ("gpu0", "gpu1", "gpu2")
PARTS = ("stop", "start", "verify")


def node(directory: str, host: str, delays: dict[str, float], fail_at: str | None, log: str) -> None:
    """One node in its own process: each part takes its delay, then the node waits for the others."""
    rendezvous = Rendezvous(directory, host, [peer for peer in HOSTS if peer != host])
    for before, part in zip((None, *PARTS), PARTS):
        if before is not None:
            behind = rendezvous.lagging(before, timeout=120)
            if behind:
                with open(log, "a", encoding="utf-8") as out:
                    out.write(json.dumps({"host": host, "stopped_before": part, "behind": behind, "at": time.time()}) + "\n")
                return
        if part == fail_at:
            rendezvous.fail(f"{host} failed in {part}")
            return
        time.sleep(delays.get(part, 0))
        with open(log, "a", encoding="utf-8") as out:
            out.write(json.dumps({"host": host, "done": part, "at": time.time()}) + "\n")
        rendezvous.mark(part)


def run_nodes(tmp_path: Path, delays: dict[str, dict[str, float]], fail: dict[str, str]) -> list[dict[str, object]]:
    log = tmp_path / "log.jsonl"
    processes = [multiprocessing.Process(target=node, args=(str(tmp_path), host, delays.get(host, {}), fail.get(host), str(log))) for host in HOSTS]
    for process in processes:
        process.start()
    for process in processes:
        process.join(150)
    assert all(process.exitcode == 0 for process in processes)
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_no_node_starts_before_every_node_stopped(tmp_path: Path) -> None:
    # gpu2 stops slowly: the others wait for it before their start
    events = run_nodes(tmp_path, {"gpu2": {"stop": 0.8}, "gpu0": {"start": 0.3}}, {})
    done = {(str(e["host"]), str(e["done"])): float(e["at"]) for e in events if "done" in e}  # type: ignore[arg-type]
    assert len(done) == len(HOSTS) * len(PARTS)
    last_stop = max(done[(host, "stop")] for host in HOSTS)
    first_start_end = min(done[(host, "start")] for host in HOSTS)
    assert first_start_end > last_stop
    assert min(done[(host, "verify")] for host in HOSTS) > max(done[(host, "start")] for host in HOSTS)


def test_a_node_that_fails_stops_the_others_at_once(tmp_path: Path) -> None:
    started = time.time()
    events = run_nodes(tmp_path, {}, {"gpu1": "start"})
    stopped = [e for e in events if "stopped_before" in e]
    # the other two gave up at their next meeting point, naming gpu1, long before the timeout: before the
    # verify, or before the start when gpu1 failed while they still waited for every node's stop
    assert sorted(str(e["host"]) for e in stopped) == ["gpu0", "gpu2"]
    assert all(e["stopped_before"] in ("start", "verify") and e["behind"] == ["gpu1"] for e in stopped), stopped
    assert max(float(e["at"]) for e in stopped) - started < 60  # type: ignore[arg-type]
    assert not [e for e in events if e.get("done") == "verify"]


def test_a_node_that_never_gets_through_is_named_once_the_timeout_passed(tmp_path: Path) -> None:
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    rendezvous = Rendezvous(str(tmp_path), "gpu0", ["gpu1", "gpu2"], clock=lambda: now[0], sleep=sleep)
    Rendezvous(str(tmp_path), "gpu1", ["gpu0", "gpu2"]).mark("stop")
    assert rendezvous.lagging("stop", timeout=5) == ["gpu2"]
    assert 5 <= now[0] < 5.5
    # a half-written or foreign file counts as nothing reached
    (tmp_path / "gpu2.parts.json").write_text("{not json")
    assert rendezvous.lagging("stop", timeout=0) == ["gpu2"]
    Rendezvous(str(tmp_path), "gpu2", ["gpu0", "gpu1"]).mark("stop")
    assert rendezvous.lagging("stop", timeout=0) == []
    assert rendezvous.lagging("start", timeout=0) == ["gpu1", "gpu2"]
