# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side helper: what each host's phases found in this run of ``ansible-playbook``, kept where
every later task of every host reads it at the cost of a small file each.

Private to the collection; may change at any time. Each host keeps its own result of a kind (``START``:
the good start its settle phase returns as ``fleet_start``, ``{host: {"config", "total"}}`` or nothing;
``VERDICT``: its report's verdict and reason; ``BAKE``: its bake's; ``report_kind``: its report, for the
run's page) in the run's local temporary
directory, which every fork shares and Ansible removes when the run ends; a later run starts empty, and
a host that keeps a kind again replaces what an earlier play of the run kept. Reading another host's
registered result or fact instead (``hostvars[host]``) composes every variable of that host: a task that
every host runs over every host (the compare of the starts), or one that runs after every batch over
the whole play (the fleet gate's count of failures), cost the square of the play.
"""

from __future__ import annotations

import json
import os
import typing as t
import urllib.parse

from ansible import constants as C

from ansible_collections.inferops.runbooks.plugins.plugin_utils._channel import write_whole
from ansible_collections.inferops.runbooks.plugins.plugin_utils._run_dir import exclusive

START = "start"
VERDICT = "verdict"
BAKE = "bake"


def report_kind(role: str) -> str:
    """The kind a host's report of ``role`` is kept under (what the run's page shows)."""
    return f"{role}_report"


def page_kind(role: str) -> str:
    """The kind the name of the run's page of ``role`` is kept under (one name through the run)."""
    return f"{role}_page"


def _directory(kind: str, base: str | None) -> str:
    return os.path.join(base if base is not None else str(C.DEFAULT_LOCAL_TMP), "inferops-results", kind)


def _path(directory: str, host: str) -> str:
    return os.path.join(directory, urllib.parse.quote(host, safe="") + ".json")


def keep(host: str, kind: str, value: t.Mapping[str, t.Any], base: str | None = None) -> None:
    """``host``'s result of ``kind`` in this run, replacing what an earlier play of the run kept."""
    directory = _directory(kind, base)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    write_whole(_path(directory, host), {"value": dict(value)})


def read(hosts: t.Iterable[str], kind: str, base: str | None = None) -> dict[str, dict[str, t.Any]]:
    """The results of ``kind`` that ``hosts`` kept so far in this run, by host; a host with none is left out."""
    directory = _directory(kind, base)
    found: dict[str, dict[str, t.Any]] = {}
    for host in hosts:
        try:
            with open(_path(directory, str(host)), encoding="utf-8") as kept:
                value = json.load(kept).get("value")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(value, dict):
            found[str(host)] = value
    return found


def starts(hosts: t.Iterable[str], base: str | None = None) -> dict[str, dict[str, t.Any]]:
    """The good starts ``hosts`` kept so far (``{host: {"config", "total"}}``), for the compare of the starts."""
    merged: dict[str, dict[str, t.Any]] = {}
    for kept in read(hosts, START, base).values():
        merged.update({str(name): start for name, start in kept.items() if isinstance(start, dict)})
    return merged


def locked(kind: str, base: str | None = None) -> t.ContextManager[None]:
    """An exclusive lock of ``kind`` for this run, held by one fork at a time: what a fork reads under
    it, and writes before it lets go, no other fork writes in between."""
    return exclusive(os.path.join(_directory(kind, base), ".lock"))
