"""SGLang's HTTP routes, read from each wheel's entrypoints: which of the routes the collection and
its simulator use exist, with which methods, which generate a token, which say they are deprecated;
the ready line and the log record format. Written to tests/unit/data/engine_source/sglang-routes.json."""

from __future__ import annotations

import ast
import json
import re
import typing as t
import zipfile

from scripts.engine_source.data import DATA, version_key
from scripts.engine_source.extract import LEVELS, format_string, log_format_of

ROUTES = (
    "/health",
    "/health_generate",
    "/get_load",
    "/v1/loads",
    "/get_server_info",
    "/server_info",
    "/get_model_info",
    "/model_info",
    "/v1/models",
    "/generate",
    "/v1/completions",
    "/v1/chat/completions",
    "/metrics",
)
# the main HTTP server (sglang/srt/server.py before 0.4.1) and the routers it includes
ROUTE_FILES = re.compile(r"^sglang/srt/(?:server|entrypoints/http_server|entrypoints/v1_loads)\.py$")
DECORATORS = {"get": ["GET"], "post": ["POST"], "put": ["PUT"], "delete": ["DELETE"]}
# the environment switch that, set to false, makes /health answer without generating, and its default
HEALTH_SWITCH = "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"
READY_WORDS = "ready to roll"
PATH = DATA / "sglang-routes.json"
METRICS_MOUNT = re.compile(r"""Mount\(\s*["']/metrics["']""")
_seen: dict[str, dict[str, t.Any]] = {}


def _route_of(decorator: ast.expr) -> tuple[str, list[str]] | None:
    if not (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute) and decorator.args):
        return None
    path = decorator.args[0]
    if not (isinstance(path, ast.Constant) and isinstance(path.value, str)):
        return None
    method = decorator.func.attr
    if method in DECORATORS:
        return path.value, DECORATORS[method]
    if method == "api_route":
        for keyword in decorator.keywords:
            if keyword.arg == "methods" and isinstance(keyword.value, (ast.List, ast.Tuple)):
                return path.value, sorted(str(item.value) for item in keyword.value.elts if isinstance(item, ast.Constant))
        return path.value, ["GET"]
    return None


def _handler_facts(function: ast.AST, path: str) -> dict[str, t.Any]:
    """Whether the handler generates (sends a request to the schedulers), unless the health switch says no."""
    source = ast.unparse(function)
    generates = "generate_request" in source or ("health_generate" in source and path != "/health_generate" and "await health_generate" in source)
    deprecated = False
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in LEVELS and node.args:
            message = format_string(node.args[0]) or ""
            deprecated = deprecated or "deprecated" in message.lower()
    facts: dict[str, t.Any] = {"deprecated": deprecated}
    if path.startswith("/health"):
        facts["generates"] = bool(generates)
    if path == "/health" and HEALTH_SWITCH in source:
        facts["generation_switch"] = HEALTH_SWITCH
    return facts


def routes_of_wheel(wheel_path: str) -> dict[str, t.Any]:
    routes: dict[str, dict[str, t.Any]] = {}
    ready_line = None
    switch_default = None
    with zipfile.ZipFile(wheel_path) as wheel:
        for name in sorted(wheel.namelist()):
            if name == "sglang/srt/environ.py" or (name.endswith("/environ.py") and name.startswith("sglang/srt/")):
                found = re.search(HEALTH_SWITCH + r"\s*=\s*EnvBool\((True|False)\)", wheel.read(name).decode("utf-8", "replace"))
                switch_default = found.group(1) == "True" if found else switch_default
            if name.startswith("sglang/srt/") and name.endswith(".py") and "/metrics" not in routes:
                mounted = METRICS_MOUNT.search(wheel.read(name).decode("utf-8", "replace"))
                if mounted:
                    # prometheus' app, mounted by add_prometheus_middleware with --enable-metrics
                    routes["/metrics"] = {"methods": ["GET"], "handler": "add_prometheus_middleware", "file": name, "deprecated": False}
            if not ROUTE_FILES.match(name):
                continue
            tree = ast.parse(wheel.read(name).decode("utf-8", "replace"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "info" and node.args:
                    message = format_string(node.args[0]) or ""
                    if READY_WORDS in message and ready_line is None:
                        ready_line = message
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for decorator in node.decorator_list:
                    route = _route_of(decorator)
                    if route is None or route[0] not in ROUTES or route[0] in routes:
                        continue
                    routes[route[0]] = {"methods": route[1], "handler": node.name, "file": name, **_handler_facts(node, route[0])}
    health = routes.get("/health")
    if health is not None and "generation_switch" in health:
        # the switch's default decides what /health does out of the box
        health["generates"] = bool(switch_default) if switch_default is not None else health["generates"]
        health["generation_switch_default"] = switch_default
    log_format, date_format = log_format_of(wheel_path, "sglang")
    return {"routes": routes, "ready_line": ready_line, "log_format": log_format, "date_format": date_format}


def record_version(version: str, wheel_path: str) -> None:
    _seen[version] = routes_of_wheel(wheel_path)


def write() -> str:
    known = json.loads(PATH.read_text(encoding="utf-8")) if PATH.exists() else {}
    known.update(_seen)
    ordered = {version: known[version] for version in sorted(known, key=version_key)}
    PATH.parent.mkdir(parents=True, exist_ok=True)
    PATH.write_text(json.dumps(ordered, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return str(PATH)


def load() -> dict[str, t.Any]:
    return t.cast("dict[str, t.Any]", json.loads(PATH.read_text(encoding="utf-8")))
