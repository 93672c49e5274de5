"""The recorded calls: one JSON file per engine under tests/unit/data/engine_source/, a call per
message family (file, level, format string, outcome) with the line it is at in each version read."""

from __future__ import annotations

import json
import typing as t
from pathlib import Path

from scripts.engine_source.extract import Call

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "unit" / "data" / "engine_source"


def data_path(engine: str) -> Path:
    return DATA / f"{engine}.json"


def record(engine: str, package: str, per_version: t.Mapping[str, t.Mapping[str, t.Any]]) -> dict[str, t.Any]:
    """The engine's data: ``per_version`` maps a version to its calls, unparsed files and log formats."""
    families: dict[tuple[t.Any, ...], dict[str, t.Any]] = {}
    versions = {}
    for version, found in per_version.items():
        calls: list[Call] = found["calls"]
        versions[version] = {"calls": len(calls), "unparsed": found["unparsed"], "log_format": found["log_format"], "date_format": found["date_format"]}
        for call in calls:
            key = (call.file, call.level, call.format, call.outcome, call.exc_info)
            family = families.setdefault(
                key, {"file": call.file, "level": call.level, "format": call.format, "outcome": call.outcome, "exc_info": call.exc_info, "lines": {}}
            )
            family["lines"].setdefault(version, call.line)
    ordered = sorted(families.values(), key=lambda family: (family["file"], min(family["lines"].values()), family["format"] or ""))
    return {"engine": engine, "package": package, "versions": versions, "calls": ordered}


def write(engine: str, data: t.Mapping[str, t.Any]) -> Path:
    """One call a line: the file stays readable and its diffs small."""
    path = data_path(engine)
    path.parent.mkdir(parents=True, exist_ok=True)
    head = {key: value for key, value in data.items() if key != "calls"}
    lines = [json.dumps(call, sort_keys=True, ensure_ascii=False) for call in data["calls"]]
    text = json.dumps(head, indent=1, sort_keys=True, ensure_ascii=False)[:-2] + ',\n "calls": [\n' + ",\n".join(lines) + "\n ]\n}\n"
    path.write_text(text, encoding="utf-8")
    return path


def load(engine: str) -> dict[str, t.Any]:
    return t.cast("dict[str, t.Any]", json.loads(data_path(engine).read_text(encoding="utf-8")))


def version_key(text: str) -> tuple[int, ...]:
    """0.4.10 after 0.4.9; a post release after its release."""
    numbers = [int(part) for part in text.replace(".post", ".").split(".") if part.isdigit()]
    return (*numbers[:3], *([0] * (3 - len(numbers[:3]))), *(numbers[3:] or [0]))
