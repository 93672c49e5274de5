"""The journal line a recorded logger call prints, the way its engine's version formats it.

Shared by the tool (which runs the classifier on every line) and the unit tests (which build lines
from the recorded calls in tests/unit/data/engine_source/, offline).
"""

from __future__ import annotations

import datetime
import re
import typing as t

PLACEHOLDER = "\x00"
# what a %-conversion or an f-string value is filled with: plausible, and holding no word a rule looks for
_VALUES = {
    "s": "value",
    "r": "'value'",
    "a": "'value'",
    "d": "2",
    "i": "2",
    "u": "2",
    "f": "1.5",
    "F": "1.5",
    "e": "1.5e+00",
    "g": "1.5",
    "x": "1f",
    "X": "1F",
    "o": "7",
    "c": "c",
}
_CONVERSION = re.compile(r"%(?:\(([^)]*)\))?[-+ #0]*(?:\*|\d+)?(?:\.(?:\*|\d+))?([diouxXeEfFgGcrsa%])")
WHEN = datetime.datetime(2026, 12, 2, 5, 10, 11)
PID = 1234
VLLM_PROCESS = "EngineCore_DP0"
# the formats used when a wheel's own could not be read (vLLM before 0.10, SGLang's configure_logger)
VLLM_FORMAT = "%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s"
VLLM_DATE_FORMAT = "%m-%d %H:%M:%S"
SGLANG_FORMAT = "[%(asctime)s{prefix}] %(message)s"
SGLANG_DATE_FORMAT = "%Y-%m-%d %H:%M:%S"


def message_of(fmt: str) -> str:
    """The message of a format string with its conversions and f-string values filled in (first line:
    the journal shows the rest as lines of their own)."""
    filled = _CONVERSION.sub(lambda match: "%" if match.group(2) == "%" else _VALUES[match.group(2)], fmt)
    return filled.replace(PLACEHOLDER, "value").split("\n", 1)[0]


def _record(log_format: str, fields: t.Mapping[str, t.Any]) -> str:
    return re.sub(r"%\((\w+)\)[-\d.]*[sd]", lambda match: str(fields.get(match.group(1), match.group(0))), log_format)


def vllm_lines(file: str, line: int, level: str, fmt: str, log_format: str = VLLM_FORMAT, date_format: str = VLLM_DATE_FORMAT) -> list[str]:
    """The line as this vLLM version prints it, with and without a process prefix."""
    basename = file.rsplit("/", 1)[-1]
    fields = {
        "levelname": level,
        "asctime": WHEN.strftime(date_format),
        "filename": basename,
        "fileinfo": basename,
        "lineno": line,
        "message": message_of(fmt),
        "vllm_process_name": VLLM_PROCESS,
        "process": PID,
    }
    printed = _record(log_format, fields)
    process_prefix = f"({VLLM_PROCESS} pid={PID}) "
    other = printed[len(process_prefix) :] if printed.startswith(process_prefix) else process_prefix + printed
    return [printed, other]


def sglang_lines(fmt: str, log_format: str = SGLANG_FORMAT, date_format: str = SGLANG_DATE_FORMAT) -> list[str]:
    """The line as this SGLang version prints it: from a scheduler (TP0) and from the HTTP server (no rank)."""
    fields = {"asctime": WHEN.strftime(date_format), "message": message_of(fmt)}
    return [_record(log_format.replace("{prefix}", prefix), fields) for prefix in (" TP0", "")]


def lines_of(engine: str, file: str, line: int, level: str, fmt: str, log_format: str | None = None, date_format: str | None = None) -> list[str]:
    if engine == "sglang":
        return sglang_lines(fmt, log_format or SGLANG_FORMAT, date_format or SGLANG_DATE_FORMAT)
    return vllm_lines(file, line, level, fmt, log_format or VLLM_FORMAT, date_format or VLLM_DATE_FORMAT)
