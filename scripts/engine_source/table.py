"""docs/engine-source.md: for every version read, how the collection's rule packs judge the lines its
logger calls print, and the lines the code survives that the classifier would still call fatal."""

from __future__ import annotations

import collections
import re
import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import classify_line, load_rules
from scripts.engine_source import routes
from scripts.engine_source.data import load, version_key
from scripts.engine_source.lines import lines_of

# the worst class a call's lines get (a line printed with and without a process or rank prefix)
SEVERITY = ("fatal", "unrecognized", "request_error", "allowlisted", "progress", "ready", "info")
COLUMNS = ("fatal", "allowlisted", "request_error", "unrecognized", "other")
# why a line the code survives is left fatal: the first pattern found in the file, level or message
LEFT_FATAL_REASONS = (
    ("CRITICAL", "logged at CRITICAL: the engine says itself that it is in a bad state, even if the call returns"),
    (
        "/distributed/",
        "a collective, a peer or a KV transfer failed: the call returns, but the server now serves with a lost peer or a request lost",
    ),
    ("/engine/", "the engine's own loop reports a failure; what follows is the engine's error handling, not a fallback"),
    ("/v1/", "the engine's own loop reports a failure; what follows is the engine's error handling, not a fallback"),
    ("/managers/", "the scheduler or tokenizer manager reports a failure of its own; what follows is its error handling"),
    ("/entrypoints/", "the server reports a failure of its own (not of one request); it keeps its port open, degraded"),
    ("", "an ERROR line: the code goes on, but the line reports a failure, not a fallback; left fatal until a start shows it harmless"),
)


def worst(classes: t.Iterable[str]) -> str:
    return min(classes, key=lambda name: SEVERITY.index(name) if name in SEVERITY else len(SEVERITY))


def judge(engine: str, data: t.Mapping[str, t.Any]) -> dict[tuple[str, int], tuple[str, str | None, list[str]]]:
    """For every call and version: the worst class its lines get, the deciding rule, the lines."""
    rules = load_rules(engine)
    versions = data["versions"]
    judged = {}
    for index, call in enumerate(data["calls"]):
        if call["format"] is None:
            continue
        for version, number in call["lines"].items():
            settings = versions[version]
            lines = lines_of(engine, call["file"], number, call["level"], call["format"], settings["log_format"], settings["date_format"])
            results = [classify_line(line, rules=rules) for line in lines]
            chosen = min(results, key=lambda result: SEVERITY.index(result["class"]) if result["class"] in SEVERITY else len(SEVERITY))
            judged[(version, index)] = (chosen["class"], chosen["rule"], lines)
    return judged


def version_rows(data: t.Mapping[str, t.Any], judged: t.Mapping[tuple[str, int], tuple[str, str | None, list[str]]]) -> list[str]:
    counts: dict[str, collections.Counter[str]] = {version: collections.Counter() for version in data["versions"]}
    for index, call in enumerate(data["calls"]):
        for version in call["lines"]:
            counter = counts[version]
            counter["calls"] += 1
            if call["format"] is None:
                counter["not literal"] += 1
                continue
            event_class = judged[(version, index)][0]
            counter[event_class if event_class in COLUMNS else "other"] += 1
            counter[f"outcome {call['outcome']}"] += 1
            if call["outcome"] == "survived" and event_class == "fatal":
                counter["survived, fatal"] += 1
            if call["outcome"] == "request" and event_class != "request_error":
                counter["request, not request_error"] += 1
    header = (
        "| version | logger calls | message families | fatal | allowlisted | request-level | unrecognized | other | not literal"
        " | code: raises/exits | code: answers a request | survived lines judged fatal |"
    )
    rows = [header, "| --- " * 12 + "|"]
    for version in sorted(counts, key=version_key):
        count = counts[version]
        rows.append(
            f"| {version} | {data['versions'][version]['calls']} | {count['calls']} | {count['fatal']} | {count['allowlisted']}"
            f" | {count['request_error']} | {count['unrecognized']} "
            f"| {count['other']} | {count['not literal']} | {count['outcome fatal']} | {count['outcome request']} | {count['survived, fatal']} |"
        )
    return rows


def span(versions: t.Iterable[str], every: t.Sequence[str]) -> str:
    """'0.8.5.post2 to 0.11.2.post2 (4 of 25)'."""
    seen = sorted(versions, key=version_key)
    if len(seen) == 1:
        return f"{seen[0]} (1 of {len(every)})"
    return f"{seen[0]} to {seen[-1]} ({len(seen)} of {len(every)})"


# the message reads as a Python exception line: a rule could not tell it from a traceback's last line
EXCEPTION_LIKE = re.compile(r"^(?:[A-Z]\w*(?:Error|Exception)|Error|Exception): ")


def left_fatal_reason(call: t.Mapping[str, t.Any]) -> str:
    if EXCEPTION_LIKE.match(call["format"] or ""):
        return "it reads as a Python exception line (`Error: ...`): no rule can tell it from the last line of a traceback"
    if call["outcome"] == "request":
        return "it answers one request with an error, but its words name no request (too general for a rule), or it is a control route's"
    for needle, reason in LEFT_FATAL_REASONS:
        if needle in (call["level"], "") or needle in "/" + call["file"]:
            return reason
    return LEFT_FATAL_REASONS[-1][1]


def survivor_rows(data: t.Mapping[str, t.Any], judged: t.Mapping[tuple[str, int], tuple[str, str | None, list[str]]]) -> tuple[list[str], list[str], int]:
    """The ERROR and CRITICAL calls the code survives (or that answer one request): those a rule covers
    (allowlisted, request-level), those left fatal with the reason, and how many are merely unrecognized."""
    covered, left = [], []
    unrecognized = 0
    every = list(data["versions"])
    for index, call in enumerate(data["calls"]):
        if call["format"] is None or call["outcome"] == "fatal" or call["level"] == "WARNING":
            continue
        outcomes = {version: judged[(version, index)] for version in call["lines"]}
        classes = {version: judged_as[0] for version, judged_as in outcomes.items()}
        fatal_in = [version for version, event_class in classes.items() if event_class == "fatal"]
        message = call["format"].replace("\x00", "{}").replace("|", "\\|").replace("\n", " ")[:140]
        where = f"`{call['file']}` ({call['level']}{', traceback' if call['exc_info'] else ''})"
        if not fatal_in and not any(event_class in ("allowlisted", "request_error") for event_class in classes.values()):
            unrecognized += 1
        elif not fatal_in:
            rules = sorted({f"`{rule}`" if rule else event_class for event_class, rule, _lines in outcomes.values()})
            covered.append(f"| {where} | `{message}` | {call['outcome']} | {span(call['lines'], every)} | {', '.join(rules)} |")
        else:
            reason = left_fatal_reason(call)
            left.append(f"| {where} | `{message}` | {call['outcome']} | {span(fatal_in, every)} | {reason} |")
    return covered, left, unrecognized


def engine_section(engine: str) -> list[str]:
    data = load(engine)
    judged = judge(engine, data)
    covered, left, unrecognized = survivor_rows(data, judged)
    title = "SGLang" if engine == "sglang" else "vLLM"
    out = [f"## {title} ({data['package']} wheels)", "", *version_rows(data, judged), ""]
    out += [f"### {title}: ERROR lines the code survives or answers one request with, covered by a rule", ""]
    out += ["| file | message | code | versions | judged by |", "| --- | --- | --- | --- | --- |", *covered, ""]
    out += [
        f"{unrecognized} more such message families are unrecognized in every version (reported, never a failure alone)"
        + (": SGLang prints no level, so its ERROR lines are judged by their words." if engine == "sglang" else "."),
        "",
    ]
    out += [f"### {title}: lines the code survives that stay fatal, and why", ""]
    out += ["| file | message | code | versions judged fatal | reason |", "| --- | --- | --- | --- | --- |", *left, ""]
    return out


INTRO = """# The engines' own source, judged by the rule packs

Generated by `scripts/engine_source` (README.md, "For maintainers") from the logger calls recorded in
`tests/unit/data/engine_source/`: every `logger.critical/error/exception/warning` (and `warning_once`)
call of the server code of each version read, with what the code does right after it (**code**: it
raises or exits, *fatal*; it answers one request with an error, *request*; it carries on, *survived*).
Each call's line is built the way that version prints it (vLLM: its `vllm/logger.py` format, with and
without the `(EngineCore_DP0 pid=N)` process prefix; SGLang: its `configure_logger` format, from a
scheduler `TP0` and from the HTTP server) with its `%s` and f-string values filled in, and the
collection's classifier judges it; a call counts under the worst class of its lines.

**logger calls** counts the calls of the version; the other columns count their message families
(a call per file, level, message and outcome). Columns: **fatal** fails a restart or a precheck; **allowlisted** is harmless by a rule;
**request-level** is about one request (counted, never a failure alone); **unrecognized** is a
warning no rule knows (reported, a failure only in strict mode); **other** is information or
progress; **not literal** is a call whose message is a variable (not judged). A warning the code
survives is unrecognized at worst: only the ERROR and CRITICAL lines are listed below.
A `logger.exception` line (**traceback**) is followed by a traceback, judged by its exception line.
"""


ROUTES_INTRO = """## SGLang's HTTP routes (the simulator's and the defaults' reference)

Read from each wheel's HTTP server (`sglang/srt/entrypoints/http_server.py`, `sglang/srt/server.py`
before 0.4.1, and the routers it includes): **G** served and generates a token (for `/health`, with
`SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION` at its default), **D** served and logs that it is deprecated,
**+** served, **-** not served. `tests/unit/test_sglang_conformance.py` holds the simulator
(`tests/harness/simulator/sglang_sim.py`) and the roles' defaults to the newest release's row.
"""


def _route_cell(route: t.Mapping[str, t.Any] | None) -> str:
    if route is None:
        return "-"
    if route.get("generates"):
        return "G"
    return "D" if route.get("deprecated") else "+"


def routes_section() -> list[str]:
    table = routes.load()
    header = "| version | " + " | ".join(f"`{path}`" for path in routes.ROUTES) + " | ready line | log record |"
    rows = [ROUTES_INTRO, header, "| --- " * (len(routes.ROUTES) + 3) + "|"]
    for version in sorted(table, key=version_key):
        release = table[version]
        cells = " | ".join(_route_cell(release["routes"].get(path)) for path in routes.ROUTES)
        rows.append(f"| {version} | {cells} | {release['ready_line'] or '-'} | `{release['log_format'] or '-'}` |")
    return rows


def render() -> str:
    sections = [INTRO]
    for engine in ("vllm", "sglang"):
        sections.append("\n".join(engine_section(engine)))
    sections.append("\n".join(routes_section()))
    return "\n".join(sections).rstrip() + "\n"
