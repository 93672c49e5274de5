# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The coordination channel of a multi-node deployment's restart: one directory on the controller,
through which its nodes' waits see each other (``FileChannel``) and its nodes go through the parts of
the restart together (``Rendezvous``).

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
from ansible_collections.inferops.runbooks.plugins.plugin_utils._deployment import NAME

SUFFIX = ".json"


def write_whole(path: str, record: t.Mapping[str, t.Any]) -> None:
    """Replaces ``path`` with ``record`` as JSON, whole: written aside, then renamed."""
    handle, staging = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=os.path.dirname(path))
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(record, out)
        os.replace(staging, path)
    except BaseException:
        if os.path.exists(staging):
            os.unlink(staging)
        raise


class ChannelError(Exception):
    """The channel directory cannot be used (missing, not writable)."""


def channel_directory(base: str, name: str) -> str:
    """The directory of a deployment's channel, made when missing: under ``base``, Ansible's temporary
    directory of this run on the controller, which every worker process shares and Ansible removes
    when the run ends."""
    # a channel is named as a deployment is: it becomes a directory name
    if not NAME.match(name or ""):
        raise ChannelError(f"channel {name!r} must be a name of letters, digits, '.', '_' and '-'")
    directory = os.path.join(base, "inferops-deployments", name)
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise ChannelError(f"cannot make the channel directory {directory} on the controller: {exc}") from None
    return directory


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
        write_whole(self.path(self.host), dict(state, at=round(self.clock(), 3)))

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


class Rendezvous:
    """The parts of a deployment's restart that every node finishes before any goes on (all stopped
    before any starts, all started before the waits): each node marks each part it got through, or
    that it failed, in ``<directory>/<host>.parts.json``, and waits until every other node got through
    the same part. The nodes run the restart in the same task, each in its own worker process."""

    SUFFIX = ".parts.json"

    def __init__(
        self,
        directory: str,
        host: str,
        peers: t.Iterable[str],
        clock: t.Callable[[], float] = time.monotonic,
        sleep: t.Callable[[float], None] = time.sleep,
    ) -> None:
        self.channel = FileChannel(directory, host, peers)
        self.clock, self.sleep = clock, sleep
        self.reached: list[str] = []
        self.failure: str | None = None

    def path(self, host: str) -> str:
        return self.channel.path(host)[: -len(SUFFIX)] + self.SUFFIX

    def mark(self, part: str) -> None:
        """This node got through ``part``."""
        self.reached.append(part)
        self._write()

    def fail(self, msg: str) -> None:
        """This node failed: the others stop waiting for it."""
        self.failure = msg
        self._write()

    def lagging(self, part: str, timeout: float, interval: float = 0.2) -> list[str]:
        """Waits until every other node got through ``part``; the nodes that failed, or that had not got
        through it within ``timeout`` seconds ([] when every node did)."""
        deadline = self.clock() + timeout
        while True:
            states = {peer: self._read(peer) for peer in self.channel.peers}
            failed = [peer for peer, state in states.items() if state.get("failed")]
            behind = [peer for peer, state in states.items() if part not in (state.get("reached") or [])]
            if failed or not behind or self.clock() >= deadline:
                return failed or behind
            self.sleep(interval)

    def _write(self) -> None:
        write_whole(self.path(self.channel.host), {"reached": self.reached, "failed": self.failure})

    def _read(self, host: str) -> dict[str, t.Any]:
        try:
            with open(self.path(host), encoding="utf-8") as source:
                record = json.load(source)
        except (OSError, ValueError):
            return {}
        return record if isinstance(record, dict) else {}
