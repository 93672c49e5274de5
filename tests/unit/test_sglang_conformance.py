"""The simulator and the collection's SGLang defaults, held to SGLang's own source.

tests/unit/data/engine_source/sglang-routes.json is what ``scripts/engine_source`` read from SGLang's
wheels (README.md, "For maintainers"): per version, the routes of its HTTP server (methods, whether
/health generates a token, which routes say they are deprecated), its ready line and its log format.
The simulator (tests/harness/simulator/sglang_sim.py) must answer as the current release does, and
the roles' defaults must name routes that release serves.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from ansible_collections.inferops.runbooks.plugins.module_utils import _option_specs
from scripts.engine_source import routes
from scripts.engine_source.data import version_key
from scripts.engine_source.lines import sglang_lines
from tests.harness.simulator import sglang_sim

REPO = Path(__file__).resolve().parents[2]
TABLE = routes.load()
CURRENT = max(TABLE, key=version_key)


class Sim:
    """A simulator built, not run (nothing is bound or started), and its stdout."""

    def __init__(self) -> None:
        self.output = io.BytesIO()
        self.server = sglang_sim.SglangSimulator(sglang_sim.Config(), sglang_sim.Console(self.output))
        self.app = self.server.app
        # its routes answer as once the server is up
        self.server.state.healthy.set()

    def get(self, path: str) -> tuple[int, str]:
        """The status of a GET of ``path``, and the lines the simulator printed meanwhile."""
        start = len(self.output.getvalue())
        status = self.app.respond(sglang_sim.Request("GET", path, {}, b"")).status
        return status, self.output.getvalue()[start:].decode("utf-8")


@pytest.fixture
def simulator() -> Sim:
    return Sim()


def test_the_simulator_serves_every_route_of_the_current_release_with_its_method(simulator: Sim) -> None:
    served = simulator.app.routes
    for path, route in TABLE[CURRENT]["routes"].items():
        assert path in served, f"SGLang {CURRENT} serves {path}, the simulator does not"
        assert served[path][0] in route["methods"], (path, served[path][0], route["methods"])


def test_every_route_the_simulator_serves_is_served_by_a_release(simulator: Sim) -> None:
    known = {path for version in TABLE.values() for path in version["routes"]}
    served = set(simulator.app.routes) & set(routes.ROUTES)
    assert served <= known, served - known


@pytest.mark.parametrize("path", ["/health", "/health_generate"])
def test_health_generates_as_in_the_current_release(path: str, simulator: Sim) -> None:
    """A generating health route runs a batch (the simulator prints its prefill line), the other does not."""
    status, printed = simulator.get(path)
    assert status == 200
    assert ("Prefill batch" in printed) == TABLE[CURRENT]["routes"][path]["generates"], (path, printed)


def test_deprecated_routes_are_deprecated_in_the_simulator_too() -> None:
    source = (REPO / "tests/harness/simulator/sglang_sim.py").read_text(encoding="utf-8")
    marked = set(re.findall(r'self\.deprecated\([^,]+, "([^"]+)"', source))
    deprecated = {path for path, route in TABLE[CURRENT]["routes"].items() if route["deprecated"]}
    assert marked == deprecated


def test_the_ready_line_and_the_log_prefix_are_the_current_release_s() -> None:
    release = TABLE[CURRENT]
    assert release["ready_line"] == sglang_sim.READY_LINE
    scheduler, server = sglang_lines("message", release["log_format"], release["date_format"])
    stamp = sglang_sim.sglang_stamp()
    # the simulator's lines, as SglangSimulator writes them (rank lines, main lines)
    assert re.sub(r"^\[[^\]]+ TP0\]", "", scheduler) == re.sub(r"^\[[^\]]+ TP0\]", "", f"[{stamp} TP0] message")
    assert re.fullmatch(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP0\] message", scheduler) and re.fullmatch(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] message", server)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", stamp)


def _role_default(role: str, name: str) -> str:
    defaults = yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text(encoding="utf-8"))
    return str(defaults[f"{role}_{name}"])


@pytest.mark.parametrize(("role", "name"), [("sglang_restart", "health_url"), ("sglang_precheck", "health_url")])
def test_the_default_health_url_generates_in_the_current_release(role: str, name: str) -> None:
    path = urlsplit(_role_default(role, name)).path
    assert path == urlsplit(_option_specs.DEFAULT_HEALTH_URL).path
    assert TABLE[CURRENT]["routes"][path]["generates"], path


@pytest.mark.parametrize(("role", "name"), [("sglang_restart", "smoke_url"), ("sglang_precheck", "smoke_url")])
def test_the_default_smoke_url_is_served(role: str, name: str) -> None:
    path = urlsplit(_role_default(role, name)).path
    assert "POST" in TABLE[CURRENT]["routes"][path]["methods"]


def test_the_readme_says_which_releases_the_default_load_url_fits() -> None:
    path = urlsplit(_role_default("sglang_restart", "load_url")).path
    serving = sorted((version for version, release in TABLE.items() if path in release["routes"]), key=version_key)
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    said = f"`{path}` (the default `sglang_restart_load_url`) is served by the SGLang releases read from {serving[0]} to {serving[-1]}"
    assert said in readme, said
