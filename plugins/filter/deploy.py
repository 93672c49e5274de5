# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filter for deploying a change with a restart: a thin shell around the load reader of plugins/module_utils/_load.py."""

from __future__ import annotations

import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils._load import running_requests


def load_running_requests(answer: t.Any) -> int | None:
    """Requests a server runs or queues, read from a /get_load, /v1/loads or /metrics answer."""
    return running_requests(answer)


class FilterModule:
    """inferops.runbooks deploy filters."""

    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {"running_requests": load_running_requests}
