"""Measured figures that tests report (corpus accuracy, fail-fast delays, memory), shown at the end
of the pytest run by the terminal summary hook in tests/conftest.py."""

from __future__ import annotations

RECORDED: list[str] = []


def record(text: str) -> None:
    """Keep a figure for the end-of-run summary (and print it for ``-s`` runs)."""
    RECORDED.append(text.strip("\n"))
    print(text)
