# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""When each host finished each task, for the benchmark (bench/side_by_side.py).

Appends JSON lines to the file named by ``$INFEROPS_BENCH_TIMELINE``: ``{"task_start", "time"}``
when a task starts, ``{"host", "task", "status", "time", "rc"}`` for each task result (with
``steps``, the steps a phase of the collection ran, each with its ``seconds`` and the epoch it
``ended``), with ``time`` in epoch seconds (the clock the test hosts' journals share), and one
``{"stats": {host: {"failures", "unreachable", ...}}, "custom": <set_stats data>}`` line at the
end of the run.
"""

from __future__ import annotations

import json
import os
import time
import typing as t

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: bench_timeline
type: aggregate
short_description: Record when each host finished each task (benchmark only)
description:
  - Appends task results with their time to the JSON lines file named by E(INFEROPS_BENCH_TIMELINE).
requirements:
  - enable it with ANSIBLE_CALLBACKS_ENABLED=bench_timeline
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "bench_timeline"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._path = os.environ.get("INFEROPS_BENCH_TIMELINE", "")

    def _write(self, record: dict[str, t.Any]) -> None:
        if not self._path:
            return
        with open(self._path, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")

    def _result(self, result: t.Any, status: str) -> None:
        record = {
            "host": result._host.get_name(),
            "task": result._task.get_name(),
            "status": status,
            "time": time.time(),
            "rc": result._result.get("rc"),
        }
        if isinstance(result._result.get("steps"), list):
            record["steps"] = result._result["steps"]
        self._write(record)

    def v2_playbook_on_task_start(self, task: t.Any, is_conditional: bool) -> None:
        self._write({"task_start": task.get_name(), "time": time.time()})

    def v2_runner_on_ok(self, result: t.Any) -> None:
        self._result(result, "ok")

    def v2_runner_on_failed(self, result: t.Any, ignore_errors: bool = False) -> None:
        self._result(result, "ignored" if ignore_errors else "failed")

    def v2_runner_on_skipped(self, result: t.Any) -> None:
        self._result(result, "skipped")

    def v2_runner_on_unreachable(self, result: t.Any) -> None:
        self._result(result, "unreachable")

    def v2_playbook_on_stats(self, stats: t.Any) -> None:
        hosts = sorted(stats.processed)
        self._write({"stats": {host: stats.summarize(host) for host in hosts}, "custom": stats.custom})
