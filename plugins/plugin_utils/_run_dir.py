# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side helper: a lock on a file of this run of ``ansible-playbook``, for what its forks
build once and share (the rules' check, the code copied to the hosts) in the run's local temporary
directory.

Private to the collection; may change at any time. Standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import typing as t


@contextlib.contextmanager
def exclusive(path: str) -> t.Iterator[None]:
    """Holds ``path`` (a lock file, made when missing) for this process alone; a lock that cannot be
    made holds nothing."""
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        lock = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    except OSError:
        yield
        return
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
    finally:
        os.close(lock)
