"""What the roles observe, as fixtures for the report tests: journal evidence from real logs of the
corpus classified by the real classifier, wrapped the way wait_ready and service_probe return it."""

from __future__ import annotations

import copy
import functools
from typing import Any

from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import classify, load_rules
from ansible_collections.inferops.runbooks.plugins.plugin_utils._runbook_report import runbook_report
from tests.unit.conftest import corpus_logs

HOST = "gpu-node-01"
UNIT = "sglang.service"
HEALTH_URL = "http://127.0.0.1:30000/health_generate"
SMOKE_URL = "http://127.0.0.1:30000/v1/completions"
BEFORE_ID = "b5871ab499424ab8a48417ad5fa31aca"
AFTER_ID = "a2c5d06342d1487fb9ab9885ca002311"
STARTED = 1_800_000_000.0
NOW = STARTED + 42.5
STALE = {"id": "local-old-notice", "class": "allowlisted", "reason": "r", "reference": "", "expires": "2020-01-01", "source": "extra rules #1"}


@functools.lru_cache(maxsize=None)
def _journal(log_name: str, until_ready: bool) -> dict[str, Any]:
    body = next(log for log in corpus_logs() if log.name == log_name).body
    report = classify(body, rules=load_rules("sglang"))
    if until_ready and report["ready_line"] is not None:
        report = classify("\n".join(body.splitlines()[: report["ready_line"] - 1]), rules=load_rules("sglang"))
    return report


def journal(log_name: str, until_ready: bool = False) -> dict[str, Any]:
    """The classifier's report of a corpus log (a fresh copy); with ``until_ready``, of its lines
    before the first one the classifier takes for the ready marker (a start still warming up)."""
    return copy.deepcopy(_journal(log_name, until_ready))


CRASHED = "sglang-nccl-02.log"
READY = "sglang-ready-01.log"


def options(**overrides: Any) -> dict[str, Any]:
    base = {
        "unit": UNIT,
        "engine": "sglang",
        "health_url": HEALTH_URL,
        "strict": False,
        "budget": 3600,
        "smoke_test": False,
        "smoke_url": SMOKE_URL,
        "report_dir": "",
    }
    return {**base, **overrides}


def unit_state(active: str = "active", sub: str = "running", load: str = "loaded", invocation: str = AFTER_ID, result: str = "success") -> dict[str, Any]:
    return {
        "Id": UNIT,
        "LoadState": load,
        "ActiveState": active,
        "SubState": sub,
        "MainPID": 4242,
        "NRestarts": 0,
        "InvocationID": invocation,
        "Result": result,
    }


def wait_result(
    log_name: str = READY, verdict: str = "pass", reason: str = "ready", msg: str = "sglang.service is ready after 8s", **extra: Any
) -> dict[str, Any]:
    report = journal(log_name)
    result = {
        "changed": False,
        "verdict": verdict,
        "reason": reason,
        "msg": msg,
        "elapsed": 8.2,
        "timeline": [{"phase": "loading_weights", "started": 0.0, "duration": 1.3}, {"phase": "ready", "started": 1.3, "duration": 6.9}],
        "phase": report["phase"],
        "progress": report["progress"],
        "fatal": report["fatal"],
        "allowlisted": report["allowlisted"],
        "unrecognized": report["unrecognized"],
        "counts": report["counts"],
        "stale_rules": [STALE],
        "lines": report["lines"],
        "health": {
            "status": 200 if verdict == "pass" else None,
            "up": verdict == "pass",
            "error": None if verdict == "pass" else "connection refused",
            "successes": 2 if verdict == "pass" else 0,
            "history": [],
        },
        "invocation_id": AFTER_ID,
        "restarts": 0,
        "unit": unit_state(),
        "probes": 12,
    }
    if verdict == "fail":
        result.update(failed=True, last_lines=["line one", "line two"], detected=3.1)
    return {**result, **extra}


def restart_observed(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "host": HOST,
        "unit": UNIT,
        "options": options(),
        "before": unit_state(invocation=BEFORE_ID),
        "wait": wait_result(),
        "smoke": {"changed": False, "skipped": True},
        "failure": None,
        "check_mode": False,
        "started_at": STARTED,
    }
    return {**base, **overrides}


def probe_result(log_name: str = READY, status: int | None = 200, error: str | None = None, until_ready: bool = False, **unit: Any) -> dict[str, Any]:
    report = journal(log_name, until_ready)
    report["tail"] = ["last line"]
    return {
        "unit": unit_state(**unit),
        "journal": report,
        "health": {"url": HEALTH_URL, "up": status is not None, "status": status, "error": error, "seconds": 0.01},
    }


def precheck_observed(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "host": HOST,
        "unit": UNIT,
        "options": options(),
        "state": unit_state(),
        "probe": probe_result(),
        "failure": None,
        "check_mode": False,
        "started_at": STARTED,
    }
    return {**base, **overrides}


def failed_step(stage: str, msg: str, **result: Any) -> dict[str, Any]:
    """A failure as the roles' rescues keep it."""
    return {"stage": stage, "step": f"{stage.capitalize()} | a step", "result": {"failed": True, "msg": msg, **result}}


def restart_report(**overrides: Any) -> dict[str, Any]:
    """The restart's report of restart_observed(**overrides), at NOW."""
    return runbook_report(restart_observed(**overrides), "sglang_restart", now=NOW)


def precheck_report(**overrides: Any) -> dict[str, Any]:
    """The precheck's report of precheck_observed(**overrides), at NOW."""
    return runbook_report(precheck_observed(**overrides), "sglang_precheck", now=NOW)
