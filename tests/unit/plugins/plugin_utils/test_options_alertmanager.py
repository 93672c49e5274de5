# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Alertmanager options of the restart role, checked with every other option before anything changes."""

from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.inferops.runbooks.plugins.plugin_utils._options import check_role_values


def problems(**given: Any) -> list[str]:
    return check_role_values("sglang_restart", given, ["sim1"]).problems


def test_the_defaults_silence_nothing_and_pass() -> None:
    checked = check_role_values("sglang_restart", {}, ["sim1"])
    assert checked.ok
    assert {name: checked.values[name] for name in checked.values if name.startswith("alertmanager_")} == {
        "alertmanager_url": "",
        "alertmanager_api_key": "",
        "alertmanager_headers": {},
        "alertmanager_margin": 1.5,
    }


def test_a_url_with_a_key_headers_and_a_margin_passes_converted() -> None:
    checked = check_role_values(
        "sglang_restart",
        {"alertmanager_url": "http://127.0.0.1:9093", "alertmanager_api_key": "k", "alertmanager_headers": {"X-Org": "ops"}, "alertmanager_margin": "2"},
        ["sim1"],
    )
    assert checked.ok, checked.problems
    assert checked.values["alertmanager_margin"] == 2.0


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"alertmanager_url": "htp://am:9093"}, "sglang_restart_alertmanager_url must be an http:// or https:// URL with a host, got 'htp://am:9093'"),
        ({"alertmanager_url": "http://am:port"}, "sglang_restart_alertmanager_url has a port that is not a number: 'http://am:port'"),
        ({"alertmanager_url": "http://u:p@am:9093"}, "sglang_restart_alertmanager_url must not carry credentials in the URL (use the API key variable)"),
        ({"alertmanager_api_key": "k"}, "sglang_restart_alertmanager_api_key is set but sglang_restart_alertmanager_url is empty"),
        ({"alertmanager_headers": {"A": "b"}}, "sglang_restart_alertmanager_headers is set but sglang_restart_alertmanager_url is empty"),
        ({"alertmanager_url": "http://am:9093", "alertmanager_margin": 0.5}, "sglang_restart_alertmanager_margin must be a number >= 1, got 0.5"),
        ({"alertmanager_url": "http://am:9093", "alertmanager_headers": {"A": 1}}, "sglang_restart_alertmanager_headers must map header names to text"),
    ],
)
def test_a_bad_value_is_refused_naming_the_option(given: dict[str, Any], expected: str) -> None:
    found = problems(**given)
    assert len(found) == 1 and found[0].startswith(expected), found


def test_a_header_value_is_never_shown_in_a_refusal() -> None:
    found = problems(alertmanager_url="http://am:9093", alertmanager_headers={"Authorization": ["secret-value"]})
    assert found and all("secret-value" not in problem for problem in found)


def test_headers_may_come_as_survey_yaml_text() -> None:
    checked = check_role_values("sglang_restart", {"alertmanager_url": "http://am:9093", "alertmanager_headers": '{"X-Org": "ops"}'}, ["sim1"])
    assert checked.ok, checked.problems
    assert checked.values["alertmanager_headers"] == {"X-Org": "ops"}
