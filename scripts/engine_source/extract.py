"""Every warning and error logger call of a wheel's server code, read with ``ast``: file, line,
level, format string, and what the code does right after it.

Outcomes: ``fatal`` (a raise, sys.exit or os._exit follows), ``request`` (the code answers one
request with an error: create_error_response, ErrorResponse, HTTPException, an error JSONResponse),
``survived`` (the code carries on).
"""

from __future__ import annotations

import ast
import re
import typing as t
import zipfile

from scripts.engine_source.lines import PLACEHOLDER

LEVELS = {
    "critical": "CRITICAL",
    "fatal": "CRITICAL",
    "error": "ERROR",
    "error_once": "ERROR",
    "exception": "ERROR",
    "warning": "WARNING",
    "warning_once": "WARNING",
    "warn": "WARNING",
    "warn_once": "WARNING",
}
LOGGER_NAMES = re.compile(r"^_?(?:logger|log|LOGGER|_LOGGER)$")
FATAL, REQUEST, SURVIVED = "fatal", "request", "survived"
EXIT_CALLS = {("sys", "exit"), ("os", "_exit"), ("", "exit"), ("", "_exit"), ("os", "abort"), ("os", "kill"), ("", "kill_process_tree")}
# calls that end the server whatever they are called on: SGLang's subprocesses send SIGQUIT to the
# launcher (parent_process.send_signal), which then kills the whole tree
ENDING_METHODS = {"send_signal", "kill_process_tree"}
# an error answer to one request (vLLM's serving_*.py, SGLang's http_server.py and serving_*.py)
ERROR_RESPONSES = {
    "create_error_response",
    "create_streaming_error_response",
    "_create_error_response",
    "ErrorResponse",
    "HTTPException",
    "error_response",
    "create_error_response_from_exception",
}
STATUS_RESPONSES = {"JSONResponse", "ORJSONResponse", "Response", "PlainTextResponse", "StreamingResponse"}


class Call(t.NamedTuple):
    file: str
    line: int
    level: str
    format: str | None  # None: the message is not a literal (a variable, a call)
    outcome: str
    exc_info: bool  # logger.exception, or exc_info=True: a traceback follows the line


def server_files(names: t.Iterable[str], engine: str) -> list[str]:
    """The wheel's files that a running server imports: the package less tests, benchmarks, examples."""
    roots = ("sglang/srt/", "sglang/launch_server.py") if engine == "sglang" else ("vllm/",)
    skip = re.compile(r"/(?:tests?|benchmarks?|examples?)/|/test_[^/]*\.py$")
    return sorted(name for name in names if name.endswith(".py") and name.startswith(roots) and not skip.search(name))


def calls_of_wheel(path: str, engine: str) -> tuple[list[Call], list[str]]:
    """The logger calls of a wheel's server files, and the files that could not be parsed."""
    found: list[Call] = []
    unparsed: list[str] = []
    with zipfile.ZipFile(path) as wheel:
        for name in server_files(wheel.namelist(), engine):
            source = wheel.read(name).decode("utf-8", "replace")
            try:
                tree = ast.parse(source, filename=name)
            except SyntaxError:
                unparsed.append(name)
                continue
            found.extend(calls_of_module(tree, name))
    return found, unparsed


def calls_of_module(tree: ast.Module, name: str) -> list[Call]:
    found: list[Call] = []
    _walk_block(tree.body, [], name, found)
    return sorted(found, key=lambda call: call.line)


def _walk_block(body: list[ast.stmt], outer: list[list[ast.stmt]], name: str, found: list[Call]) -> None:
    """Visit the statements of a block; ``outer`` holds the statements that follow it, innermost first."""
    for index, statement in enumerate(body):
        rest = [body[index + 1 :], *outer]
        for call in _logger_calls(statement):
            found.append(_describe(call, rest, name))
        for child in _child_blocks(statement):
            # a function's body ends where the function returns: what follows its definition does not follow its lines
            _walk_block(child, [] if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else rest, name, found)


def _child_blocks(statement: ast.stmt) -> list[list[ast.stmt]]:
    blocks = []
    for field in ("body", "orelse", "finalbody"):
        value = getattr(statement, field, None)
        if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
            blocks.append(value)
    for handler in getattr(statement, "handlers", []) or []:
        blocks.append(handler.body)
    for case in getattr(statement, "cases", []) or []:
        blocks.append(case.body)
    return blocks


def _logger_calls(statement: ast.stmt) -> list[ast.Call]:
    """Logger calls made by the statement itself (not by the blocks nested in it)."""
    if _child_blocks(statement) and not isinstance(statement, (ast.Expr, ast.Assign, ast.Return)):
        targets: list[ast.AST] = [getattr(statement, "test", None) or getattr(statement, "iter", None) or ast.Pass()]
    else:
        targets = [statement]
    calls = []
    for target in targets:
        for node in ast.walk(target):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in LEVELS:
                owner = node.func.value
                owner_name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
                if LOGGER_NAMES.match(owner_name):
                    calls.append(node)
    return calls


def _describe(call: ast.Call, rest: list[list[ast.stmt]], name: str) -> Call:
    method = call.func.attr  # type: ignore[attr-defined]
    exc_info = method == "exception" or any(keyword.arg == "exc_info" and _truthy(keyword.value) for keyword in call.keywords)
    message = format_string(call.args[0]) if call.args else None
    return Call(name, call.lineno, LEVELS[method], message, outcome_after(rest), exc_info)


def _truthy(node: ast.expr) -> bool:
    return not (isinstance(node, ast.Constant) and not node.value)


def format_string(node: ast.expr) -> str | None:
    """The literal message: a string, an f-string (its values as PLACEHOLDER), a '...'.format(...),
    a concatenation of those."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                parts.append(value.value)
            else:
                parts.append(PLACEHOLDER)
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = format_string(node.left), format_string(node.right)
        if left is None and right is None:
            return None
        return (left if left is not None else PLACEHOLDER) + (right if right is not None else PLACEHOLDER)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return format_string(node.left)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        template = format_string(node.func.value)
        return None if template is None else re.sub(r"\{[^{}]*\}", PLACEHOLDER, template)
    return None


def outcome_after(rest: list[list[ast.stmt]]) -> str:
    """What the code does after the logger call: the first statement that ends the flow decides.
    Statements that follow in the same block, then in the blocks around it."""
    for block in rest:
        for statement in block:
            decided = _decides(statement)
            if decided is not None:
                return decided
            if isinstance(statement, (ast.Return, ast.Continue, ast.Break)):
                return SURVIVED
    return SURVIVED


def _decides(statement: ast.stmt) -> str | None:
    if isinstance(statement, ast.Raise):
        return REQUEST if statement.exc is not None and _is_error_response(statement.exc) else FATAL
    if isinstance(statement, ast.Return) and statement.value is not None and (_is_error_response(statement.value) or _names_an_error(statement.value)):
        return REQUEST
    if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None and _is_error_response(statement.value):
        return REQUEST
    if isinstance(statement, ast.Expr):
        value = statement.value
        if isinstance(value, (ast.Yield, ast.Await)) and value.value is not None and _is_error_response(value.value):
            return REQUEST
        if isinstance(value, ast.Call) and (_call_name(value) in EXIT_CALLS or _call_name(value)[1] in ENDING_METHODS):
            return FATAL
    return None


def _call_name(call: ast.Call) -> tuple[str, str]:
    func = call.func
    if isinstance(func, ast.Name):
        return ("", func.id)
    if isinstance(func, ast.Attribute):
        owner = func.value
        return (owner.id if isinstance(owner, ast.Name) else "", func.attr)
    return ("", "")


def _names_an_error(node: ast.expr) -> bool:
    """``return error_check_ret``: a variable that holds the error answer built before."""
    return isinstance(node, ast.Name) and "error" in node.id.lower()


def _is_error_response(node: ast.expr) -> bool:
    if isinstance(node, ast.Await):
        node = node.value
    if not isinstance(node, ast.Call):
        return False
    name = _call_name(node)[1]
    if name in ERROR_RESPONSES:
        return True
    if name in STATUS_RESPONSES:
        for keyword in node.keywords:
            if keyword.arg in ("status_code", "status"):
                status = keyword.value
                return not (isinstance(status, ast.Constant) and isinstance(status.value, int) and status.value < 400)
    return False


def log_format_of(path: str, engine: str) -> tuple[str | None, str | None]:
    """The record and date formats the wheel's server logs with (None where they could not be read):
    vLLM's vllm/logger.py _FORMAT and _DATE_FORMAT, SGLang's configure_logger."""
    with zipfile.ZipFile(path) as wheel:
        names = wheel.namelist()
        if engine == "vllm":
            return _vllm_format(wheel.read("vllm/logger.py").decode("utf-8", "replace")) if "vllm/logger.py" in names else (None, None)
        for name in server_files(names, engine):
            source = wheel.read(name).decode("utf-8", "replace")
            if "def configure_logger" in source:
                return _sglang_format(source)
    return None, None


def _constants(tree: ast.AST) -> dict[str, str]:
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = format_string(node.value)
            if value is not None:
                found.setdefault(node.targets[0].id, value)
    return found


def _vllm_format(source: str) -> tuple[str | None, str | None]:
    constants = _constants(ast.parse(source))
    record = constants.get("_FORMAT")
    # the f-string's value is VLLM_LOGGING_PREFIX, empty unless set
    return (record.replace(PLACEHOLDER, "") if record else None), constants.get("_DATE_FORMAT")


def _named_fields(node: ast.expr) -> str | None:
    """A format string whose f-string values keep their names: f"[%(asctime)s{prefix}]" -> "[%(asctime)s{prefix}]"."""
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue) and isinstance(value.value, ast.Name):
                parts.append("{" + value.value.id + "}")
            else:
                parts.append("{value}")
        return "".join(parts)
    return format_string(node)


def _sglang_format(source: str) -> tuple[str | None, str | None]:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == "configure_logger":
            record = date = None
            for inner in ast.walk(node):
                if isinstance(inner, ast.Assign) and isinstance(inner.targets[0], ast.Name) and inner.targets[0].id == "format" and record is None:
                    record = _named_fields(inner.value)
                if isinstance(inner, ast.keyword) and inner.arg == "datefmt" and date is None:
                    date = format_string(inner.value)
            # {prefix}: the rank prefix (" TP0") or nothing; milliseconds (SGLANG_LOG_MS) are off by default
            return (re.sub(r"\{(?!prefix\})[^{}]*\}", "", record) if record else None), date
    return None, None
