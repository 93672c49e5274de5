"""Secrets masked in what a host call returned (plugin_utils/_redact.py), in place of ansible-core's
remove_values, deprecated from 2.22."""

from __future__ import annotations

from ansible_collections.inferops.runbooks.plugins.plugin_utils._redact import MASK, hidden


def test_secrets_are_masked_at_any_depth_the_longest_first() -> None:
    result = {"msg": "key sk-abc123 refused", "lines": ["Bearer sk-abc123xyz", 3], "sk-abc123": {"nested": ("sk-abc123",)}}
    assert hidden(result, ["sk-abc123", "sk-abc123xyz", "", None]) == {
        "msg": f"key {MASK} refused",
        "lines": [f"Bearer {MASK}", 3],
        MASK: {"nested": [MASK]},
    }
    assert hidden(result, []) is result
