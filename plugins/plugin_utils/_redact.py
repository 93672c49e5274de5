# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Secrets taken out of what a host call returned, before the controller keeps or shows it: every
occurrence of a secret in a text (a key, a value or a list item, at any depth) becomes ``********``,
as Ansible hides a ``no_log`` value in a module's output.

Private to the collection; may change at any time. Controller side. (ansible-core's own
``remove_values`` is deprecated from 2.22.)
"""

from __future__ import annotations

import typing as t

MASK = "********"


def hidden(value: t.Any, secrets: t.Iterable[t.Any]) -> t.Any:
    """``value`` with every occurrence of each non-empty secret masked; the longest first, so that a
    secret that contains another is masked whole."""
    found = sorted({str(secret) for secret in secrets if secret not in (None, "")}, key=len, reverse=True)
    return _hide(value, found) if found else value


def _hide(value: t.Any, secrets: list[str]) -> t.Any:
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, MASK)
        return value
    if isinstance(value, t.Mapping):
        return {_hide(key, secrets): _hide(item, secrets) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_hide(item, secrets) for item in value]
    return value
