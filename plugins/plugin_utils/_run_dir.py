# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side helper: what the forks of this run of ``ansible-playbook`` build once and share (the
rules' check, the code sent to the hosts), kept as a file of the run's local temporary directory.

Private to the collection; may change at any time. Standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import typing as t

T = t.TypeVar("T")


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


def built_once(path: str, read: t.Callable[[str], T | None], build: t.Callable[[], T], write: t.Callable[[str, T], None]) -> T:
    """What ``read`` finds at ``path``; otherwise ``build()``, written there for the later forks. The
    first fork that asks builds it, those asking at the same moment wait for it; a file that cannot be
    written only costs building it again (``write`` raises OSError)."""
    found = read(path)
    if found is not None:
        return found
    with exclusive(f"{path}.lock"):
        found = read(path)
        if found is not None:
            return found
        made = build()
        with contextlib.suppress(OSError):
            write(path, made)
    return made
