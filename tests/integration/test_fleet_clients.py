"""What a client sees during a fleet rollout, measured: 4 hosts behind the real SGLang Model Gateway
(tests/harness/gateway.py), a deploy rolled out canary then ramp by playbooks/restart_sglang.yml,
while a bounded client loop on this machine (tests/harness/clients.py) sends generations through the
gateway the whole time and samples the workers it lists healthy.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.clients import ClientLoop, lowest_serving, out_around, out_spans, routed_within
from tests.harness.fleet import Fleet
from tests.harness.gateway import Gateway, behind_gateway
from tests.integration.conftest import RunPlaybook, flat
from tests.integration.test_deploy_playbook import ADMIN_KEY, DROPIN, OLD_MODEL, invocation, read_file, report, start_with
from tests.integration.test_fleet_rollout import PLAYBOOK, QUICK

FLOOR = 2
RAMP = [1, 1, 2]  # the canary alone, then one, then the last two together
# the deploy keeps the model (a client asking for a model no longer served fails whatever the
# drain): a new setting everywhere, and a scenario on one host
DEPLOYED = f"Environment=SIM_MODEL={OLD_MODEL} INFEROPS_DEPLOY=2"


def deploy_on(host: str, scenario: str) -> str:
    return "[Service]\n" + DEPLOYED + "{% if inventory_hostname == '" + host + "' %} " + scenario + "{% endif %}\n"


@pytest.fixture
def four(fleet: Fleet, hosts: list[str]) -> Iterator[list[str]]:
    if len(hosts) < 4:
        pytest.skip("needs 4 test hosts")
    yield hosts[:4]


def unix_time(fleet: Fleet, host: str, prop: str) -> float:
    """A systemd timestamp of the server's unit as a time.time() (the hosts share this machine's clock)."""
    return int(fleet.unit_property(host, f"{prop} --timestamp=unix").lstrip("@")) * 1.0


def passed_at(directory: Path, host: str) -> float:
    """When the host's restart passed (its report's end), as a time.time()."""
    return float(json.loads((directory / f"{host}.json").read_text())["ended_at"])


Rollout = tuple[ClientLoop, dict[str, str], str, int]


def roll_out(fleet: Fleet, four: list[str], run_playbook: RunPlaybook, tmp_path: Path, scenario: str = "") -> Rollout:
    """The deploy rolled out while the clients send, with ``scenario`` on the second host (the
    second batch); (the loop, worker URLs, output, return code)."""
    template = tmp_path / "deploy.conf.j2"
    template.write_text(deploy_on(four[1], scenario))
    # in turn, so every worker has requests routed to it when it is drained (the default policy sends
    # the clients' one prompt wherever it was cached, and may leave a worker without any)
    with Gateway(admin_key=ADMIN_KEY, policy="round_robin") as gateway:
        urls = behind_gateway(gateway, fleet, four)
        extra = {
            **QUICK,
            "sglang_restart_dropin_template": str(template),
            "sglang_restart_router_url": gateway.url,
            "sglang_restart_router_api_key": ADMIN_KEY,
            "sglang_restart_report_dir": str(tmp_path / "reports"),
            "sglang_batch_size": RAMP,
            "sglang_min_serving": FLOOR,
            "sglang_capacity_timeout": 60,
        }
        with ClientLoop(gateway.url, gateway.workers, model=OLD_MODEL) as clients:
            run = run_playbook(PLAYBOOK, extra_vars=extra, limit=",".join(four))
    return clients, urls, flat(run.output), run.returncode


def test_clients_see_no_failed_request_through_a_ramp_with_a_deploy(fleet: Fleet, four: list[str], run_playbook: RunPlaybook, tmp_path: Path) -> None:
    start_with(fleet, four)
    clients, urls, out, returncode = roll_out(fleet, four, run_playbook, tmp_path)
    assert returncode == 0, out[-3000:]
    assert clients.tally.sent > 0 and clients.tally.failed == 0, (clients.summary(), clients.tally.errors)
    assert lowest_serving(clients.samples) >= FLOOR, clients.samples
    for host in four:
        assert DEPLOYED in (read_file(fleet, host, DROPIN) or "")
        stopped, passed = unix_time(fleet, host, "ExecMainStartTimestamp"), passed_at(tmp_path / "reports", host)
        # out of the gateway before its stop (the new start follows it) until after its start passed
        assert out_around(clients.samples, urls[host], stopped - 0.5, passed), (host, stopped, passed, out_spans(clients.samples, urls[host]))
        assert len(out_spans(clients.samples, urls[host])) == 1, (host, out_spans(clients.samples, urls[host]))
        # and no client request the gateway routed to it was in flight from its stop until its start passed
        assert not routed_within(clients.routes, urls[host], stopped, passed), host
    assert {route.worker_url for route in clients.routes} == set(urls.values()), "each worker served clients"


def test_a_crashing_start_is_rolled_back_and_clients_still_see_no_failure(fleet: Fleet, four: list[str], run_playbook: RunPlaybook, tmp_path: Path) -> None:
    """The second host's new start crashes: rolled back, the run stops at its tolerance (0%) before
    the last batch, and no client request failed."""
    before = start_with(fleet, four)
    clients, _urls, out, returncode = roll_out(fleet, four, run_playbook, tmp_path, scenario="SIM_SCENARIO=crash SIM_PHASE=loading_weights")
    crashing = four[1]
    assert returncode != 0, out[-3000:]
    assert report(tmp_path / "reports", crashing)["state"] == "rolled_back"
    assert DEPLOYED not in (read_file(fleet, crashing, DROPIN) or "")
    # at the default tolerance (0%) the failed host ends the run: the last batch never begins
    recap = out[out.rindex("PLAY RECAP") :]
    assert f"{crashing} : ok=" in recap and "failed=1" in recap and four[2] not in recap and four[3] not in recap, recap
    assert all(invocation(fleet, host) == before[host] for host in four[2:]), "the last batch untouched"
    assert clients.tally.sent > 0 and clients.tally.failed == 0, (clients.summary(), clients.tally.errors)
    assert lowest_serving(clients.samples) >= FLOOR, clients.samples
