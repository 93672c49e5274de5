# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rollout's decisions as filters: thin shells around plugins/plugin_utils/_rollout.py."""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.runbooks.plugins.plugin_utils import _rollout
from ansible_collections.inferops.runbooks.plugins.plugin_utils._plain import plain


def rollout_reconcile(read: t.Any, unit: t.Any, requested: t.Any = None) -> dict[str, t.Any]:
    """What an earlier, interrupted run left to repair, from inferops.runbooks.run_record's result."""
    if not isinstance(read, t.Mapping) or "record" not in read:
        raise AnsibleFilterError(f"rollout_reconcile: input must be the result of inferops.runbooks.run_record, got {type(read).__name__}")
    if not isinstance(unit, t.Mapping):
        raise AnsibleFilterError(f"rollout_reconcile: unit must be the unit's state (inferops.runbooks.unit_info), got {type(unit).__name__}")
    files = []
    for entry in plain(requested) or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str) or not isinstance(entry.get("content"), str):
            raise AnsibleFilterError("rollout_reconcile: requested must be a list of files, each with a path and a content")
        files.append({"path": entry["path"], "new_sha256": _rollout.content_sha256(entry["content"])})
    data = plain(read)
    return _rollout.reconcile(data.get("record"), data.get("problem"), data.get("host_files") or {}, plain(unit), files)


def rollout_decide(observed: t.Any) -> dict[str, t.Any]:
    """What the rollout does next and where the host ends, from what the run observed."""
    if not isinstance(observed, t.Mapping):
        raise AnsibleFilterError(f"rollout_decide: input must be a mapping of what the run observed, got {type(observed).__name__}")
    return _rollout.decide(plain(observed))


def rollout_change(files: t.Any, read: t.Any, plan: t.Any) -> list[dict[str, t.Any]]:
    """The changed files as the run record keeps them (paths and hashes, never content)."""
    if not isinstance(files, list) or not all(isinstance(f, t.Mapping) and isinstance(f.get("path"), str) for f in files):
        raise AnsibleFilterError("rollout_change: input must be the list of changed files, each with a path")
    host_files = plain(read).get("host_files") or {} if isinstance(read, t.Mapping) else {}
    unproven = plain(plan).get("unproven") or [] if isinstance(plan, t.Mapping) else []
    return _rollout.change_entries(plain(files), host_files, unproven)


class FilterModule:
    """inferops.runbooks rollout filters."""

    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {"rollout_reconcile": rollout_reconcile, "rollout_decide": rollout_decide, "rollout_change": rollout_change}
