"""The fleet raises the machine's inotify instance limit before booting more hosts than it holds."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pytest

from tests.harness import fleet


@pytest.mark.parametrize(("limit", "in_use", "hosts", "expected"), [(128, 24, 16, 24 + 12 * 16), (128, 24, 3, 128), (1000, 500, 16, 1000)])
def test_inotify_limit_is_raised_only_when_too_low(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, limit: int, in_use: int, hosts: int, expected: int) -> None:
    setting = tmp_path / "max_user_instances"
    setting.write_text(f"{limit}\n")
    monkeypatch.setattr(fleet, "INOTIFY_LIMIT", setting)
    monkeypatch.setattr(fleet, "inotify_instances_in_use", lambda: in_use)
    fleet.ensure_inotify_instances(hosts)
    assert int(setting.read_text()) == expected


def test_inotify_instances_in_use_sees_an_open_one() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init()
    assert fd >= 0, ctypes.get_errno()
    try:
        assert fleet.inotify_instances_in_use() >= 1
    finally:
        os.close(fd)
