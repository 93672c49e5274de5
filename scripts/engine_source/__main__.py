"""python -m scripts.engine_source [extract|table] [--engine sglang|vllm] [--versions V ...]

routes: SGLang's HTTP routes, ready line and log format only (fast);
extract: download the wheels (cached in ~/.cache/inferops-engine-source, or INFEROPS_ENGINE_SOURCE_CACHE),
read their logger calls and write tests/unit/data/engine_source/<engine>.json;
table: judge the recorded lines with the collection's rule packs and write docs/engine-source.md and
docs/sglang-routes.md's data (offline). Without a command: both.
"""

from __future__ import annotations

import argparse
import sys
import typing as t
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "collections")]

from scripts.engine_source import data, extract, routes, table, wheels  # noqa: E402

ENGINES = ("vllm", "sglang")
DOC = REPO / "docs" / "engine-source.md"


def extract_engine(engine: str, versions: t.Sequence[str] | None) -> None:
    package = wheels.PACKAGES[engine]
    chosen = list(versions) if versions else wheels.releases_to_read(engine, wheels.published_versions(package))
    found = wheels.download_all(package, chosen)
    per_version: dict[str, dict[str, t.Any]] = {}
    for version, wheel in found.items():
        if isinstance(wheel, wheels.ToolError):
            print(f"{engine} {version}: left out: {wheel}", file=sys.stderr)
            continue
        calls, unparsed = extract.calls_of_wheel(str(wheel), engine)
        log_format, date_format = extract.log_format_of(str(wheel), engine)
        per_version[version] = {"calls": calls, "unparsed": unparsed, "log_format": log_format, "date_format": date_format}
        print(f"{engine} {version}: {len(calls)} calls, {len(unparsed)} files not parsed")
        if engine == "sglang":
            routes.record_version(version, str(wheel))
    if not per_version:
        raise wheels.ToolError(f"{engine}: no wheel could be read")
    print(f"wrote {data.write(engine, data.record(engine, package, per_version))}")
    if engine == "sglang":
        print(f"wrote {routes.write()}")


def read_routes(versions: t.Sequence[str] | None) -> None:
    """SGLang's routes only (the logger calls are left as recorded)."""
    package = wheels.PACKAGES["sglang"]
    chosen = list(versions) if versions else wheels.releases_to_read("sglang", wheels.published_versions(package))
    for version, wheel in wheels.download_all(package, chosen).items():
        if isinstance(wheel, wheels.ToolError):
            raise wheel
        routes.record_version(version, str(wheel))
    print(f"wrote {routes.write()}")


def main(argv: t.Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.engine_source", description=__doc__.split("\n\n")[1])
    parser.add_argument("command", nargs="?", choices=("extract", "routes", "table", "all"), default="all")
    parser.add_argument("--engine", choices=ENGINES, action="append", help="an engine to read (default: both)")
    parser.add_argument("--versions", nargs="+", help="read these versions only (default: every release the tool reads)")
    options = parser.parse_args(argv)
    try:
        if options.command in ("extract", "all"):
            for engine in options.engine or ENGINES:
                extract_engine(engine, options.versions)
        if options.command == "routes":
            read_routes(options.versions)
        if options.command in ("table", "all"):
            DOC.write_text(table.render(), encoding="utf-8")
            print(f"wrote {DOC}")
    except (wheels.ToolError, OSError, ValueError) as exc:
        print(f"engine_source: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
