"""Shared helpers for the unit tests of the classifier core."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

CORPUS = Path(__file__).parent / "data" / "corpus"
LOG_MARKER = "# ---- verbatim log below ----\n"


def corpus_lines() -> list[dict[str, Any]]:
    with (CORPUS / "dev.jsonl").open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


class CorpusLog:
    """A whole real log: its header facts and the verbatim text."""

    def __init__(self, path: Path) -> None:
        text = path.read_text(encoding="utf-8", errors="replace")
        head, self.body = text.split(LOG_MARKER)
        self.name = path.name
        self.header_lines = head.count("\n") + 1
        facts = dict(line[2:].split(": ", 1) for line in head.splitlines() if ": " in line)
        self.outcome = facts["outcome"]
        failure = facts["first failure line"]
        self.failure_line = int(failure.split()[1].rstrip(":")) if failure.startswith("line ") else None

    def file_line(self, body_line: int) -> int:
        """Line number in the file of a line number in the body."""
        return body_line + self.header_lines


def corpus_logs() -> list[CorpusLog]:
    return [CorpusLog(path) for path in sorted((CORPUS / "logs").glob("*.log"))]


@pytest.fixture(scope="session")
def rules() -> Any:
    from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import load_rules

    return load_rules("auto")
