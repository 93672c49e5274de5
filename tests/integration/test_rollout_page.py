"""The rollout page of a real run, as a person sees it in a real browser (headless Chromium).

One rolling restart of the test fleet with playbooks/restart_sglang.yml deploys a new drop-in: the
canary sim1 passes; on sim2 the new configuration crashes while loading weights (a fast failure),
is rolled back and serves again; the hosts after it are not reached. The new drop-in also logs a
hostile line (``<script>`` in a journal line, from ExecStartPre, in the unit's invocation like any
server line). The page written beside the JSON reports is loaded in Chromium, which measures what
is drawn: each host's bar, its segments in order with widths proportional to their seconds (one
scale for the whole page), the fatal marker inside the phase the crash came in, the verdicts; and
the hostile line shows as text, never runs.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import browser
from tests.harness.fleet import Fleet
from tests.harness.gateway import SERVED_TO_CONTROLLER, Gateway, behind_gateway
from tests.integration.conftest import QUICK as ROLE_QUICK
from tests.integration.conftest import RunPlaybook

PLAYBOOK = "playbooks/restart_sglang.yml"
UNIT = "sglang.service"
DROPIN_DIR = f"/etc/systemd/system/{UNIT}.d"
DROPIN = f"{DROPIN_DIR}/50-inferops-deploy.conf"
# a cold start of about 8 s in five phases, on 8 ranks, weights loading for 3 s of them
SCENARIO = {"SIM_SPEED": "0.3", "SIM_LOAD_SECONDS": "3", "SIM_WARMUP_SECONDS": "1", "SIM_TP": "8", **SERVED_TO_CONTROLLER}
# the router's wait outlasts the gateway's drain of a removed worker (about 5 s)
QUICK = {**ROLE_QUICK, "sglang_restart_soak": 1, "sglang_restart_router_timeout": 15, "sglang_restart_drain_timeout": 30}
OLD_DROPIN = "[Service]\nEnvironment=SIM_MODEL=/models/DeepSeek-R1\n"
HOSTILE = "Warning: <script>document.title='pwned'</script> <b>not bold</b> from a journal line"
NEW_DROPIN = (
    "[Service]\n"
    f'ExecStartPre=/bin/echo "{HOSTILE}"\n'
    "Environment=SIM_MODEL=/models/DeepSeek-R1-0528{% if inventory_hostname == 'sim2' %} SIM_SCENARIO=crash SIM_PHASE=loading_weights{% endif %}\n"
)
PHASE_ORDER = ("before", "starting", "loading_weights", "allocating_kv_cache", "capturing_cuda_graphs", "warming_up", "ready", "after")


@pytest.fixture
def router() -> Iterator[Gateway]:
    """The real gateway on 127.0.0.1 of the controller, without an admin key."""
    with Gateway() as gateway:
        yield gateway


def start_previous(fleet: Fleet, hosts: list[str], router: Gateway) -> None:
    for host in hosts:
        fleet.set_scenario(host, **SCENARIO)
        fleet.ssh(host, f"mkdir -p {DROPIN_DIR} && printf %s {shlex.quote(OLD_DROPIN)} > {DROPIN} && systemctl daemon-reload && systemctl start {UNIT}")
    behind_gateway(router, fleet, hosts)


def proportional(segments: list[dict[str, Any]], px_per_second: float) -> list[str]:
    """The segments whose drawn width is not their seconds at the page's scale (within a pixel and 2%)."""
    return [
        f"{segment['kind']}: {segment['width']:.1f} px for {segment['seconds']} s (expected {segment['seconds'] * px_per_second:.1f})"
        for segment in segments
        if abs(segment["width"] - segment["seconds"] * px_per_second) > 1 + 0.02 * segment["width"]
    ]


def test_the_page_of_a_real_run_shows_each_host_to_scale_and_the_hostile_line_as_text(
    fleet: Fleet, hosts: list[str], router: Gateway, run_playbook: RunPlaybook, tmp_path: Path
) -> None:
    if browser.chromium() is None:
        pytest.fail("no Chromium: scripts/setup.sh installs Debian's chromium")
    start_previous(fleet, hosts, router)
    template = tmp_path / "deploy.conf.j2"
    template.write_text(NEW_DROPIN)
    reports = tmp_path / "reports"
    extra = {**QUICK, "sglang_restart_router_url": router.url, "sglang_restart_report_dir": str(reports), "sglang_restart_dropin_template": str(template)}
    run = run_playbook(PLAYBOOK, extra_vars=extra)
    assert run.returncode != 0, run
    pages = sorted(reports.glob("restart-*.html"))
    assert len(pages) == 1, (sorted(path.name for path in reports.iterdir()), run)
    page = pages[0]
    text = page.read_text()
    assert "<script" not in text and "src=" not in text and "href=" not in text and "url(" not in text and "@import" not in text

    seen = browser.measure(page, tmp_path)
    first, second, *untouched = hosts
    assert seen["title"] == page.stem and seen["scripts"] == 0, seen["title"]
    assert list(seen["hosts"]) == hosts, seen["hosts"].keys()
    canary, failed = seen["hosts"][first], seen["hosts"][second]
    assert (canary["verdict"], failed["verdict"]) == ("pass", "fail")
    assert all(seen["hosts"][host]["verdict"] is None and "not reached" in seen["hosts"][host]["text"] for host in untouched)
    assert "PASS" in canary["text"] and "FAIL" in failed["text"] and "fatal_log" in failed["text"] and "rolled back" in failed["text"]

    # the canary's phases in order, each drawn where the one before it ended
    kinds = [segment["kind"] for segment in canary["segments"]]
    assert [kind for kind in PHASE_ORDER if kind in kinds] == kinds, kinds
    assert {"before", "loading_weights", "ready", "after"} <= set(kinds), kinds
    for before, after in zip(canary["segments"], canary["segments"][1:]):
        assert abs(before["x"] + before["width"] - after["x"]) < 1.5, (before, after)
    # one scale for the page: pixels per second the same on every bar
    scale = canary["bar_width"] / float(text.split("class='muted scale' data-seconds='")[1].split("'")[0])
    assert not proportional(canary["segments"] + failed["segments"], scale)

    # sim2: the first fatal line marked at its time: after the host left the router (the old server was
    # still serving), no later than the end of the failed start's wait (a crash this fast can come
    # before the wait's first look: the unit was started just before it); then the rollback's own start
    marker, out = failed["marker"], failed["out_of_router"]
    assert marker is not None and out is not None, failed
    assert abs(marker["x"] - marker["seconds"] * scale) < 1.5, (marker, scale)
    waited = [segment for segment in failed["segments"] if segment["kind"] in PHASE_ORDER[1:-1]]
    assert waited and out["x"] - 1 <= marker["x"] <= waited[-1]["x"] + waited[-1]["width"] + 2, (marker, out, waited)
    assert "first fatal line at " in failed["text"] and " rank(s): TP" in failed["text"] and "CUDA out of memory" in failed["text"]
    assert any(segment["kind"] == "rollback ready" for segment in failed["segments"]), failed["segments"]
    assert "rollback: PASS" in failed["text"]

    # the journal's hostile line shows as the text it is, on the canary (unrecognized, not failing)
    assert HOSTILE in canary["text"]

    png = browser.screenshot(page, tmp_path / "page.png")
    assert png.stat().st_size > 10_000
