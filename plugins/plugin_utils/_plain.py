# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side helper: values from Ansible as plain Python data.

Private to the collection; may change at any time. Ansible hands plugins its own container and
text types (lazy templated dicts and lists, tagged strings); the collection's core code and its
messages want plain ``dict``, ``list`` and ``str``.
"""

from __future__ import annotations

import typing as t


def plain(value: t.Any) -> t.Any:
    """The value with every mapping a dict, every list or tuple a list and every text a str."""
    if isinstance(value, str):
        return str(value)
    if isinstance(value, t.Mapping):
        return {plain(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value
