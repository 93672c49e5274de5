# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Before a restart's stop: whether the vLLM server slept (its sleep mode), for the report and a
progress line. The restart goes on as usual: the new start is gated like any other, and comes up
awake (a new process does not inherit the sleep).

Private to the collection; may change at any time. Controller side.
"""

from __future__ import annotations

import typing as t
import urllib.parse

from ansible.utils.display import Display

from ansible_collections.inferops.runbooks.plugins.module_utils import _engines
from ansible_collections.inferops.runbooks.plugins.plugin_utils._phase import Steps

display = Display()


def sleep_url(health_url: str, engine: str) -> str | None:
    """Where the engine's server says whether it sleeps (vLLM's ``/is_sleeping``, the driver's
    ``sleep_path``), beside its health URL; None for an engine without a sleep mode."""
    path = _engines.get(engine).sleep_path if engine in _engines.DRIVERS else None
    if path is None:
        return None
    parts = urllib.parse.urlsplit(health_url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def sleep_before_stop(steps: Steps, options: t.Mapping[str, t.Any], api_key: t.Any, host: str) -> dict[str, t.Any]:
    """vLLM's sleep state before the stop (``{}`` for another engine); a progress line when it slept."""
    url = sleep_url(str(options["health_url"]), str(options.get("engine") or ""))
    if url is None:
        return {}
    keyed = api_key not in (None, "")
    read = steps.module(
        "restart",
        "Restart | Read whether the server sleeps (vLLM's sleep mode)",
        "inferops.runbooks.server_sleep",
        {"url": url, **({"api_key": api_key} if keyed else {})},
        may_fail=True,
        secret=keyed,
    )
    found = dict(read.get("sleep") or {})
    if found.get("sleeping") is True:
        display.display(f"{host}: {options['unit']} was asleep (vLLM sleep mode) before the restart; the new start is gated as usual")
    return found
