"""The rollout filters as thin shells: what they pass to plugin_utils/_rollout.py (whose decisions
tests/unit/plugins/plugin_utils/test_rollout.py covers) and the error each gives for bad input."""

from __future__ import annotations

from typing import Any

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.runbooks.plugins.filter.rollout import FilterModule, rollout_change, rollout_decide, rollout_reconcile
from ansible_collections.inferops.runbooks.plugins.plugin_utils import _rollout
from tests.unit.plugins.plugin_utils.test_rollout import DROPIN, NEW, OLD, host, killed_at, sha, unit

pytestmark = pytest.mark.ansible  # exercises ansible-core's filter errors: runs on every version (tests/harness/lanes.py)


def read(record: dict[str, Any] | None, host_files: dict[str, Any]) -> dict[str, Any]:
    """inferops.runbooks.run_record's result, as the role registers it."""
    return {"record": record, "problem": None, "host_files": host_files}


def test_reconcile_hashes_the_requested_content_and_gives_the_core_decision() -> None:
    record = killed_at("wait")
    plan = rollout_reconcile(read(record, host(NEW)), unit(invocation="inv-new"), [{"path": DROPIN, "content": NEW}])
    assert plan == _rollout.reconcile(record, None, host(NEW), unit(invocation="inv-new"), [{"path": DROPIN, "new_sha256": sha(NEW)}])
    assert plan["repairs"], plan


def test_decide_and_change_are_the_core_functions() -> None:
    observed = {"check_mode": False, "change_pending": True, "new_start_failed": False}
    assert rollout_decide(observed) == _rollout.decide(observed)
    files = [{"path": DROPIN, "kind": "drop-in", "existed": True}]
    host_files = host(OLD)
    assert rollout_change(files, read(None, host_files), {"unproven": []}) == _rollout.change_entries(files, host_files, [])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: rollout_reconcile("text", {}), "rollout_reconcile: input must be the result of inferops.runbooks.run_record, got str"),
        (lambda: rollout_reconcile(read(None, {}), None), "rollout_reconcile: unit must be the unit's state (inferops.runbooks.unit_info), got NoneType"),
        (lambda: rollout_reconcile(read(None, {}), {}, [{"path": DROPIN}]), "requested must be a list of files, each with a path and a content"),
        (lambda: rollout_decide(["drain"]), "rollout_decide: input must be a mapping of what the run observed, got list"),
        (lambda: rollout_change({"path": DROPIN}, {}, {}), "rollout_change: input must be the list of changed files, each with a path"),
    ],
)
def test_bad_input_is_refused_with_what_and_where(call: Any, message: str) -> None:
    with pytest.raises(AnsibleFilterError) as caught:
        call()
    assert message in str(caught.value)


def test_the_filters_are_registered_under_their_names() -> None:
    assert set(FilterModule().filters()) == {"rollout_reconcile", "rollout_decide", "rollout_change"}
