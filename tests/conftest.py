"""Session-wide pytest hooks: the measured figures go at the end of the run's output."""

from __future__ import annotations

from typing import Any

from tests.figures import RECORDED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if RECORDED:
        terminalreporter.section("measured figures")
        for text in RECORDED:
            terminalreporter.write_line(text)
