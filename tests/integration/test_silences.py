# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A planned restart's Alertmanager silence (``sglang_restart_alertmanager_url``), for real: Debian's
``prometheus-alertmanager`` on the controller's loopback (``tests/harness/alerting.py``) and real
``ansible-playbook`` runs of ``playbooks/restart_sglang.yml`` on the test fleet.

A restart that passes silences its host's alerts before it stops the server and expires the silence at
the end; a failed start's silence is expired the moment it failed, before its change is rolled back (its
alerts fire); an Alertmanager that does not answer
is a warning, the restart passes; a malformed URL is refused before anything on the host changes.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest

from tests.harness import alerting
from tests.harness.fleet import Fleet
from tests.integration.conftest import QUICK, RunPlaybook
from tests.integration.test_restart_playbook import FAST, PLAYBOOK, UNIT, invocation

pytestmark = pytest.mark.skipif(alerting.missing(alerting.ALERTMANAGER) is not None, reason="prometheus-alertmanager is not installed")


def started(fleet: Fleet, host: str, **scenario: str) -> str:
    fleet.set_scenario(host, **FAST)
    fleet.ssh(host, f"systemctl start {UNIT}")
    first = invocation(fleet, host)
    if scenario:
        fleet.set_scenario(host, **FAST, **scenario)
    return first


def silences_of(alertmanager: alerting.Alertmanager, host: str) -> list[dict[str, Any]]:
    return [s for s in alertmanager.silences() if {"name": "inventory_host", "value": host, "isRegex": False, "isEqual": True} in s["matchers"]]


def moment(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def unit_started_at(fleet: Fleet, host: str) -> datetime.datetime:
    # to the microsecond ("unix" gives whole seconds: a silence made 0.3 s before a start in the same
    # second would look made after it)
    shown = fleet.ssh(host, f"systemctl show -P ExecMainStartTimestamp --timestamp=us+utc {UNIT}").stdout.strip()
    return datetime.datetime.strptime(shown, "%a %Y-%m-%d %H:%M:%S.%f UTC").replace(tzinfo=datetime.timezone.utc)


def test_a_planned_restart_is_silenced_before_the_stop_and_the_silence_expired_after(
    fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path
) -> None:
    first = started(fleet, host)
    with alerting.Alertmanager({"route": {"receiver": "none"}, "receivers": [{"name": "none"}]}) as alertmanager:
        extra = {**QUICK, "sglang_restart_alertmanager_url": alertmanager.url, "sglang_restart_report_dir": str(tmp_path)}
        run = run_playbook(PLAYBOOK, limit=host, extra_vars=extra)
        assert run.returncode == 0, run
        [silence] = silences_of(alertmanager, host)
    assert invocation(fleet, host) != first
    report = json.loads((tmp_path / f"{host}.json").read_text())
    assert report["verdict"] == "pass"
    assert report["silence"] == {"id": silence["id"], "url": alertmanager.url, "expired": True}
    assert silence["status"]["state"] == "expired"
    assert silence["createdBy"] == "inferops.runbooks"
    assert silence["comment"].startswith(f"Planned restart of {host} by inferops.runbooks, run "), silence["comment"]
    # created before the server was stopped and started again, expired after the new start
    assert moment(silence["startsAt"]) < unit_started_at(fleet, host) < moment(silence["endsAt"])


def test_a_failed_start_expires_its_silence(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    started(fleet, host, SIM_SCENARIO="crash", SIM_PHASE="capturing_cuda_graphs", SIM_FAILURE="cuda_oom")
    with alerting.Alertmanager({"route": {"receiver": "none"}, "receivers": [{"name": "none"}]}) as alertmanager:
        extra = {**QUICK, "sglang_restart_alertmanager_url": alertmanager.url, "sglang_restart_report_dir": str(tmp_path)}
        run = run_playbook(PLAYBOOK, limit=host, extra_vars=extra)
        assert run.returncode != 0, run
        [silence] = silences_of(alertmanager, host)
    assert silence["status"]["state"] == "expired"
    report = json.loads((tmp_path / f"{host}.json").read_text())
    assert report["verdict"] == "fail" and report["silence"]["expired"] is True


def test_a_failed_change_expires_its_silence_before_its_rollback_starts(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    started(fleet, host)
    crash = "[Service]\nEnvironment=SIM_SCENARIO=crash SIM_PHASE=warming_up\n"
    with alerting.Alertmanager({"route": {"receiver": "none"}, "receivers": [{"name": "none"}]}) as alertmanager:
        extra = {
            **QUICK,
            "sglang_restart_alertmanager_url": alertmanager.url,
            "sglang_restart_report_dir": str(tmp_path),
            "sglang_restart_dropin_content": crash,
        }
        run = run_playbook(PLAYBOOK, limit=host, extra_vars=extra)
        assert run.returncode != 0, run
        [silence] = silences_of(alertmanager, host)
    report = json.loads((tmp_path / f"{host}.json").read_text())
    assert report["state"] == "rolled_back" and report["rollback"]["verdict"] == "pass", report
    assert silence["status"]["state"] == "expired" and report["silence"]["expired"] is True
    # the host's alerts fire from its failed start on: the rollback's start comes after the silence ended
    assert moment(silence["endsAt"]) < unit_started_at(fleet, host), (silence, report["rollback"])
    assert f"{host}: the new start failed: its silence {silence['id']} in Alertmanager expired" in run.output


def test_an_alertmanager_that_does_not_answer_is_a_warning_and_the_restart_passes(fleet: Fleet, host: str, run_playbook: RunPlaybook, tmp_path: Path) -> None:
    first = started(fleet, host)
    nowhere = f"http://127.0.0.1:{alerting.free_port()}"
    run = run_playbook(PLAYBOOK, limit=host, extra_vars={**QUICK, "sglang_restart_alertmanager_url": nowhere, "sglang_restart_report_dir": str(tmp_path)})
    assert run.returncode == 0, run
    assert invocation(fleet, host) != first
    assert "alerts are not silenced during its restart" in run.flat
    report = json.loads((tmp_path / f"{host}.json").read_text())
    assert report["verdict"] == "pass"
    assert any("not silenced" in warning for warning in report["silence_warnings"])


def test_a_malformed_alertmanager_url_is_refused_before_anything_changes(fleet: Fleet, host: str, run_playbook: RunPlaybook) -> None:
    first = started(fleet, host)
    run = run_playbook(PLAYBOOK, limit=host, extra_vars={**QUICK, "sglang_restart_alertmanager_url": "htp://127.0.0.1:9093"})
    assert run.returncode != 0, run
    assert "sglang_restart_alertmanager_url must be an http:// or https:// URL" in run.flat
    assert invocation(fleet, host) == first
