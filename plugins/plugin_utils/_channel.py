# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The coordination channel of a multi-node deployment's waits: one directory on the controller.

Private to the collection; may change at any time. Standard library only, no Ansible imports.

Every node's wait runs in its own Ansible worker process, at the same time as the others. Each
writes its state (``NodeState``: waiting, ready, passed or failed, with its reason and its first
fatal line) to ``<directory>/<host>.json`` whenever it changes, and reads the other nodes' files
between probes. A file is replaced whole (written aside, then renamed), so a reader never sees
half of one. The directory is the batch's own (named by the role for each batch); the wait action
makes it in Ansible's temporary directory of the run, which Ansible removes when the run ends.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils._types import NodeState

SUFFIX = ".json"


class ChannelError(Exception):
    """The channel directory cannot be used (missing, not writable)."""


class FileChannel:
    """One node's end of the channel: publish this node's state, read the others'."""

    def __init__(self, directory: str, host: str, peers: t.Iterable[str], clock: t.Callable[[], float] = time.time) -> None:
        if not os.path.isdir(directory):
            raise ChannelError(f"the deployment's channel directory {directory} does not exist on the controller")
        self.directory = directory
        self.host = host
        self.peers = tuple(peers)
        self.clock = clock

    def path(self, host: str) -> str:
        if os.sep in host or host.startswith("."):
            raise ChannelError(f"host name {host!r} cannot name a channel file")
        return os.path.join(self.directory, host + SUFFIX)

    def publish(self, state: NodeState) -> None:
        record = dict(state, at=round(self.clock(), 3))
        handle, staging = tempfile.mkstemp(prefix=f".{self.host}.", dir=self.directory)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(record, out)
            os.replace(staging, self.path(self.host))
        except BaseException:
            if os.path.exists(staging):
                os.unlink(staging)
            raise

    def read(self) -> dict[str, NodeState]:
        """The peers' latest states; a peer that has written nothing yet is absent."""
        states: dict[str, NodeState] = {}
        for host in self.peers:
            try:
                with open(self.path(host), encoding="utf-8") as source:
                    record = json.load(source)
            except (OSError, ValueError):
                continue
            if isinstance(record, dict):
                states[host] = t.cast(NodeState, record)
        return states
