# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side helper: each host's good start of this run of ``ansible-playbook``, kept where every
later task of every host reads it at the cost of a file each.

Private to the collection; may change at any time. The settle phase of each host keeps what it
returns as ``fleet_start`` (``{host: {"config", "total"}}``, or nothing for a start that failed or was
not recorded) in the run's local temporary directory, which every fork shares and Ansible removes when
the run ends; a later run starts empty. The report step of each host compares its start with the
others' (lookup ``inferops.runbooks.run_starts``): reading them from every host's variables instead
(``hostvars[host]`` composes all the variables of that host) cost every host a read of every host, the
square of the play.
"""

from __future__ import annotations

import json
import os
import typing as t
import urllib.parse

from ansible import constants as C

from ansible_collections.inferops.runbooks.plugins.plugin_utils._channel import write_whole

Starts = dict[str, dict[str, t.Any]]


def _directory(base: str | None) -> str:
    return os.path.join(base if base is not None else str(C.DEFAULT_LOCAL_TMP), "inferops-starts")


def _path(directory: str, host: str) -> str:
    return os.path.join(directory, urllib.parse.quote(host, safe="") + ".json")


def keep(host: str, starts: t.Mapping[str, t.Any], base: str | None = None) -> None:
    """``host``'s good start of this run (``{}``: none), replacing what an earlier play of the run kept."""
    directory = _directory(base)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    write_whole(_path(directory, host), {"starts": dict(starts)})


def read(hosts: t.Iterable[str], base: str | None = None) -> Starts:
    """The good starts ``hosts`` kept so far in this run, by host; a host with none kept is left out."""
    directory = _directory(base)
    found: Starts = {}
    for host in hosts:
        try:
            with open(_path(directory, str(host)), encoding="utf-8") as kept:
                starts = json.load(kept).get("starts")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(starts, dict):
            found.update({str(name): start for name, start in starts.items() if isinstance(start, dict)})
    return found
