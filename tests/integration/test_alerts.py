"""The alert path for real: a real Prometheus (Debian's ``prometheus``, on 127.0.0.1 on this machine)
scrapes two simulator hosts with the collection's rule ``extensions/prometheus/inference_server.rules.yml``
and sends its alerts to a real Alertmanager (``prometheus-alertmanager``, on 127.0.0.1), which delivers
them to two webhooks: a receiver run by the test (what the alert carries, and when it came) and the
webhook of the real ``ansible-rulebook`` running the collection's rulebook ``restart_on_alert.yml``.

* ``wedged``: its scheduler wedges a few seconds after its first start (health 200, generation held,
  the generated-token counter still); the test's client keeps sending it requests, as users do. The alert
  fires with the labels the rulebook's conditions read, the rulebook restarts the host with
  ``restart_sglang`` and it serves again.
* ``healthy``: serves throughout under the same client: no alert. Then a planned restart with
  ``sglang_restart_alertmanager_url``: its target-down alert fires in Prometheus while the server is down,
  Alertmanager holds it under the restart's silence and notifies nobody, the rulebook restarts nothing,
  and the run expires its silence at the end. A host down under a silence is notified once the silence
  is expired (``expired_notifies``).

The rule runs as shipped but for its durations (minutes here would make a test of many minutes): a copy
of the rule file in the test's directory with each duration replaced (``DURATIONS``), every replacement
checked to have happened, so that a change of the rule's shape fails here rather than goes untested.

The rulebook's source: ``ansible.eda.alertmanager`` is in the collection ``ansible.eda``, published on
Ansible Galaxy only, which the tests cannot install (they install from PyPI and Debian). The test feeds
the rulebook the same deliveries through a source it provides: ``tests/harness/alertmanager_source.py``,
put in a collection ``ansible.eda`` of the test's own (a temporary directory first in the collections
path), with the same options and the same events; the rulebook file runs unchanged.

The figures: from the wedge to the notification, from the notification to the restarted server's ready line.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.plugin_utils._alertmanager import Alertmanager, expire_silence, silence_host
from tests.figures import record
from tests.harness import alerting, rulebook
from tests.harness.fleet import Fleet
from tests.integration.conftest import QUICK, REPO
from tests.integration.test_eda_rulebook import invocations_since, serves, stop, wait_until
from tests.integration.test_wait_ready import journal_time

UNIT = "sglang.service"
PORT = 30000
RULES = REPO / "extensions" / "prometheus" / "inference_server.rules.yml"
SOURCE = REPO / "tests" / "harness" / "alertmanager_source.py"
RULEBOOK = "inferops.runbooks.restart_on_alert"
READY = "The server is fired up and ready to roll!"
FAST = {"SIM_SPEED": "0.15", "SIM_WARMUP_SECONDS": "1", "SIM_TP": "2", "SIM_HOST": "0.0.0.0", "SIM_GENERATE_SECONDS": "1"}
WEDGE_AFTER = 40  # seconds after ready: Prometheus, Alertmanager and the rulebook are up, and a window passed, by then
WINDOW = 10  # seconds: the rule's window of the generated-token counter, in the test's copy
# the rule's durations, and what the test's copy has instead: (shipped, here, how many times)
DURATIONS = (("[2m]", f"[{WINDOW}s]", 2), ("for: 1m", "for: 2s", 2), ("for: 15m", "for: 15s", 1))
SCRAPE_INTERVAL = "1s"
CLIENT_EVERY = 2.0  # seconds between two requests of the test's client to one server
CLIENT_MAX_REQUESTS = 150  # per server: the client stops by itself


def patched_rules(directory: Path) -> Path:
    text = RULES.read_text(encoding="utf-8")
    for shipped, here, count in DURATIONS:
        assert text.count(shipped) == count, f"{RULES.name}: {shipped!r} {text.count(shipped)} times, the test expects {count}"
        text = text.replace(shipped, here)
    path = directory / RULES.name
    path.write_text(text, encoding="utf-8")
    check = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    return path


def prometheus_config(fleet: Fleet, hosts: list[str], rules: Path, alertmanager: alerting.Alertmanager) -> dict[str, Any]:
    """The scrape configuration docs/awx.md shows: one target per server, labels inventory_host and engine."""
    targets = [{"targets": [f"{fleet.address(host)}:{PORT}"], "labels": {"inventory_host": host, "engine": "sglang"}} for host in hosts]
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL},
        "rule_files": [str(rules)],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager.url.removeprefix("http://")]}]}]},
        "scrape_configs": [{"job_name": "inference", "static_configs": targets}],
    }


def alertmanager_config(*webhooks: str) -> dict[str, Any]:
    """The receiver docs/awx.md shows, with the test's quick grouping."""
    return {
        "route": {"receiver": "eda", "group_by": ["alertname", "inventory_host"], "group_wait": "1s", "group_interval": "1s", "repeat_interval": "1h"},
        "receivers": [{"name": "eda", "webhook_configs": [{"url": url, "send_resolved": True} for url in webhooks]}],
    }


class Client:
    """Users of the servers: one generation request every CLIENT_EVERY seconds to each, each in a thread of
    its own (a wedged server holds them until it is stopped); stops by itself after CLIENT_MAX_REQUESTS."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        for _round in range(CLIENT_MAX_REQUESTS):
            for url in self.urls:
                threading.Thread(target=self.one, args=(url,), daemon=True).start()
            if self.stopped.wait(CLIENT_EVERY):
                return

    @staticmethod
    def one(url: str) -> None:
        payload = {"text": "Hello", "sampling_params": {"max_new_tokens": 8}}
        request = urllib.request.Request(f"{url}/generate", data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"})
        with contextlib.suppress(OSError), urllib.request.urlopen(request, timeout=60) as answer:
            answer.read()

    def __enter__(self) -> Client:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(10)


def eda_collection(directory: Path) -> Path:
    """A collections directory holding ``ansible.eda`` with the stand-in source (see the module's doc)."""
    collection = directory / "ansible_collections" / "ansible" / "eda"
    sources = collection / "extensions" / "eda" / "plugins" / "event_source"
    sources.mkdir(parents=True)
    shutil.copy(SOURCE, sources / "alertmanager.py")
    galaxy = "namespace: ansible\nname: eda\nversion: 0.0.0\nreadme: README.md\nauthors: [inferops.runbooks tests]\n"
    (collection / "galaxy.yml").write_text(galaxy, encoding="utf-8")
    (collection / "README.md").write_text("A stand-in for ansible.eda.alertmanager (tests/harness/alertmanager_source.py).\n", encoding="utf-8")
    return directory


@contextlib.contextmanager
def running_rulebook(fleet: Fleet, tmp_path: Path, port: int) -> Iterator[Path]:
    """ansible-rulebook running ``restart_on_alert`` with its webhook on 127.0.0.1:``port``; yields its log."""
    problem = rulebook.java_missing()
    if problem:
        pytest.fail(problem)
    executable = rulebook.ensure()
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(fleet.inventory.read_text(encoding="utf-8") + "".join(f"{k}={v}\n" for k, v in QUICK.items()), encoding="utf-8")
    (tmp_path / "vars.json").write_text(json.dumps({"inferops_webhook_host": alerting.LOOPBACK, "inferops_webhook_port": port}), encoding="utf-8")
    work = tmp_path / "rulebook"
    work.mkdir()
    env = fleet.ansible_env()
    collections = eda_collection(tmp_path / "collections")
    env.update(
        {
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_COLLECTIONS_PATH": f"{collections}:{REPO / 'collections'}",
            "TMPDIR": str(work),
            "ANSIBLE_FORCE_COLOR": "0",
        }
    )
    log = tmp_path / "rulebook.log"
    cmd = [str(executable), "-r", RULEBOOK, "-i", str(inventory), "--vars", str(tmp_path / "vars.json"), "-v"]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until(
            "the rulebook's webhook answers",
            lambda: proc.poll() is None and alerting.urlopen_status(f"http://{alerting.LOOPBACK}:{port}/") == 200,
            90,
        )
        yield log
    except AssertionError as error:
        raise AssertionError(f"{error}\n{log.read_text(encoding='utf-8', errors='replace')[-4000:]}") from None
    finally:
        stop(proc, str(work))


def planned_restart(fleet: Fleet, host: str, alertmanager_url: str) -> concurrent.futures.Future[subprocess.CompletedProcess[str]]:
    """``restart_sglang`` of one host with the silence option, running in the background."""
    extra = {**QUICK, "sglang_restart_alertmanager_url": alertmanager_url}
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(fleet.inventory), "playbooks/restart_sglang.yml", "--limit", host]
    env = {**fleet.ansible_env(), "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    future = pool.submit(subprocess.run, [*cmd, "-e", json.dumps(extra)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    pool.shutdown(wait=False)
    return future


def firing(receiver: alerting.WebhookReceiver, host: str) -> list[dict[str, Any]]:
    return [alert for alert in receiver.alerts("firing") if alert["labels"].get("inventory_host") == host]


def test_a_wedged_host_is_alerted_and_restarted_and_a_silenced_stop_notifies_nobody(fleet: Fleet, hosts: list[str], tmp_path: Path) -> None:
    assert len(hosts) >= 2, f"the test needs 2 hosts (INFEROPS_FLEET_HOSTS), the fleet has {len(hosts)}"
    for binary in (alerting.PROMETHEUS, alerting.ALERTMANAGER, "promtool"):
        if shutil.which(binary) is None:
            pytest.fail(f"no {binary} on PATH (Debian's prometheus and prometheus-alertmanager; scripts/setup.sh installs them)")
    wedged, healthy = hosts[:2]
    started = time.time()
    for host in (wedged, healthy):
        fleet.set_scenario(host, **FAST)
    fleet.set_fault(wedged, SIM_SCENARIO="wedged", SIM_WEDGE_AFTER=WEDGE_AFTER)  # read at start: this start only
    for host in (wedged, healthy):
        fleet.ssh(host, f"systemctl start {UNIT}")
    wait_until("both servers serve", lambda: serves(fleet, wedged) and serves(fleet, healthy), 90)
    fleet.set_fault(wedged)
    first = {host: fleet.unit_property(host, "InvocationID") for host in (wedged, healthy)}
    wedged_at = journal_time(fleet, wedged, first[wedged], READY) + WEDGE_AFTER

    rules = patched_rules(tmp_path)
    webhook_port = alerting.free_port()
    urls = [f"http://{fleet.address(host)}:{PORT}" for host in (wedged, healthy)]
    with contextlib.ExitStack() as stack:
        stack.enter_context(Client(urls))
        receiver = stack.enter_context(alerting.WebhookReceiver())
        log = stack.enter_context(running_rulebook(fleet, tmp_path, webhook_port))
        alertmanager = stack.enter_context(alerting.Alertmanager(alertmanager_config(receiver.url, f"http://{alerting.LOOPBACK}:{webhook_port}/endpoint")))
        prometheus = stack.enter_context(alerting.Prometheus(prometheus_config(fleet, [wedged, healthy], rules, alertmanager)))
        # the wedge comes after Prometheus saw the wedged host's tokens counted for a whole window
        assert time.time() < wedged_at - WINDOW, "the alert path came up too late before the wedge: raise WEDGE_AFTER"
        time.sleep(max(0.0, wedged_at - 1.5 - time.time()))
        counted = prometheus.query(f'increase(sglang:generation_tokens_total{{inventory_host="{wedged}"}}[{WINDOW}s])')
        assert counted and float(counted[0]["value"][1]) > 0, f"no tokens counted before the wedge: {counted}"
        assert time.time() < wedged_at, "the check before the wedge came after it: raise WEDGE_AFTER"
        wait_until("the wedged host's alert delivered", lambda: firing(receiver, wedged), 90)
        notified_at = min(alert["received_at"] for alert in firing(receiver, wedged))

        def restarted_and_serving() -> bool:
            text = log.read_text(encoding="utf-8", errors="replace")
            return f"{wedged} {UNIT}: PASS (ready)" in text and serves(fleet, wedged)

        wait_until("the rulebook restarted the wedged host, and it serves", restarted_and_serving, 180, every=1)

        # the alert, as the rulebook's conditions read it
        alert = firing(receiver, wedged)[0]
        labels = alert["labels"]
        assert labels["alertname"] == "InferenceServerNotServing", alert
        assert labels["engine"] == "sglang" and labels["inventory_host"] == wedged, alert
        assert labels["condition"] == "tokens_stalled", alert
        assert firing(receiver, healthy) == [], receiver.alerts()

        # a planned restart of the healthy host with the silence option: its target-down alert fires while the
        # server is down, Alertmanager holds it under the restart's own silence, nobody is notified
        # a cold start (port closed) longer than the target-down rule's 15 s in the test's copy, for the alert to fire
        fleet.set_scenario(healthy, **{**FAST, "SIM_SPEED": "2"})
        restart = planned_restart(fleet, healthy, alertmanager.url)

        def silenced_in_alertmanager() -> bool:
            held = [a for a in alertmanager.get("/api/v2/alerts") if a["labels"].get("inventory_host") == healthy]
            ours = {s["id"] for s in alertmanager.silences() if s["comment"].startswith(f"Planned restart of {healthy} by inferops.runbooks")}
            return bool(held) and bool(ours) and all(set(a["status"]["silencedBy"]) & ours for a in held)

        try:
            wait_until("Alertmanager holding the restarted host's alert under the restart's silence", silenced_in_alertmanager, 60, every=0.5)
        finally:
            planned = restart.result(timeout=300)
        assert planned.returncode == 0, planned.stdout[-4000:] + planned.stderr[-2000:]
        assert f"{healthy} {UNIT}: PASS" in planned.stdout, planned.stdout[-4000:]
        [silence] = [s for s in alertmanager.silences() if s["comment"].startswith(f"Planned restart of {healthy} by inferops.runbooks")]
        assert silence["status"]["state"] == "expired", silence
        time.sleep(5)  # group_wait and group_interval are 1 s: a notification would have come by now
        assert firing(receiver, healthy) == [], receiver.alerts()
        rulebook_output = log.read_text(encoding="utf-8", errors="replace")
    assert len(invocations_since(fleet, healthy, started)) == 2, "the silenced host was started again after its planned restart"
    assert f"{healthy} {UNIT}:" not in rulebook_output, rulebook_output[-4000:]
    assert rulebook_output.count(f"{wedged} {UNIT}: PASS (ready)") == 1, rulebook_output[-6000:]
    restarted = invocations_since(fleet, wedged, started)
    assert len(restarted) == 2 and restarted[0] == first[wedged], restarted
    new_ready = journal_time(fleet, wedged, restarted[1], READY)

    # a silence is what holds a notification: a host down under one is notified once it is expired
    fleet.ssh(healthy, f"systemctl stop {UNIT}")
    expired_notifies(fleet, healthy, rules, tmp_path)

    to_notification = notified_at - wedged_at
    to_serving = new_ready - notified_at
    record(
        f"alert path (scrape and evaluation every {SCRAPE_INTERVAL}, the rule's window [{WINDOW}s] and for 2s in the test's copy): "
        f"wedge -> Alertmanager's notification {to_notification:.1f} s, notification -> the restarted server's ready line "
        f"{to_serving:.1f} s (ansible-rulebook's restart_sglang with the simulator's cold start of about 4 s)"
    )
    # the counter moved until the wedge: the rule cannot hold before most of its window passed
    assert to_notification > WINDOW - CLIENT_EVERY - 1, f"notified {to_notification:.1f} s after the wedge: before the window of {WINDOW} s"


def expired_notifies(fleet: Fleet, host: str, rules: Path, tmp_path: Path) -> None:
    """A host down under a silence, with Prometheus and Alertmanager of their own: no notification while
    silenced, the notification once the silence is expired (without a rulebook: nothing restarts it)."""
    with alerting.WebhookReceiver() as receiver, alerting.Alertmanager(alertmanager_config(receiver.url)) as alertmanager:
        client = Alertmanager(alertmanager.url)
        silence_id, warning = silence_host(client, host, 300, "test-run-2")
        assert warning is None and silence_id
        with alerting.Prometheus(prometheus_config(fleet, [host], rules, alertmanager)) as prometheus:
            wait_until("the target-down alert firing", lambda: any(a["state"] == "firing" for a in prometheus.alerts()), 60)
            time.sleep(3)
            assert receiver.alerts("firing") == [], receiver.alerts()
            assert expire_silence(client, silence_id, host) is None
            wait_until("the notification once the silence is expired", lambda: firing(receiver, host), 30)
    assert firing(receiver, host)[0]["labels"]["condition"] == "target_down"
