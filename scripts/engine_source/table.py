"""docs/engine-source.md: for every version read, how the collection's rule packs judge the lines its
logger calls print, and the lines the code survives that the classifier would still call fatal."""

from __future__ import annotations

import collections
import re
import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import classify_line, load_rules
from ansible_collections.inferops.runbooks.plugins.module_utils._survived import CORE_LOOP, VLLM_SURVIVED_BY_EVIDENCE
from scripts.engine_source import routes
from scripts.engine_source.data import load, version_key
from scripts.engine_source.lines import lines_of

# the worst class a call's lines get (a line printed with and without a process or rank prefix)
SEVERITY = ("fatal", "unrecognized", "survived", "request_error", "allowlisted", "progress", "ready", "info")
COLUMNS = ("fatal", "allowlisted", "request_error", "survived", "unrecognized", "other")
CORE_LOOP_REASON = (
    "the engine core's loop (its engine core, scheduler, output handler, executor or workers, or a watchdog of them) reports a failure of its own"
)
ENGINE_FAILURE_REASON = "it names the engine's failure (an engine error answered to the request): the engine failed, not the request"
EXCEPTION_REASON = "it reads as a Python exception line (`Error: ...`): no rule can tell it from the last line of a traceback"
# a family no rule turns into a warning without a reason: the table says so, and the unit tests fail on it
NO_EVIDENCE = "no evidence: judged fatal though the code survives it"
ENGINE_FAILURE = re.compile(r"EngineDead|EngineCore|engine (?:is )?dead|Background loop|Engine Exception", re.IGNORECASE)


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
                reason, in_core = left_fatal_reason(engine_of(data), call, data)
                counter["survived, fatal, core" if in_core else "survived, fatal, evidence" if reason != NO_EVIDENCE else "survived, fatal, none"] += 1
            if call["outcome"] == "request" and event_class != "request_error":
                counter["request, not request_error"] += 1
    header = (
        "| version | logger calls | message families | fatal | allowlisted | request-level | survived | unrecognized | other | not literal"
        " | code: raises/exits | code: answers a request | survived, judged fatal: in the core loop | elsewhere, with evidence"
        " | elsewhere, without |"
    )
    rows = [header, "| --- " * 15 + "|"]
    for version in sorted(counts, key=version_key):
        count = counts[version]
        rows.append(
            f"| {version} | {data['versions'][version]['calls']} | {count['calls']} | {count['fatal']} | {count['allowlisted']}"
            f" | {count['request_error']} | {count['survived']} | {count['unrecognized']} "
            f"| {count['other']} | {count['not literal']} | {count['outcome fatal']} | {count['outcome request']}"
            f" | {count['survived, fatal, core']} | {count['survived, fatal, evidence']} | {count['survived, fatal, none']} |"
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


def engine_of(data: t.Mapping[str, t.Any]) -> str:
    return str(data["engine"])


def left_fatal_reason(engine: str, call: t.Mapping[str, t.Any], data: t.Mapping[str, t.Any]) -> tuple[str, bool]:
    """Why a line the code survives (or answers one request with) is judged fatal, and whether it is the
    engine core's loop's: the evidence, or NO_EVIDENCE. SGLang's lines do not name their file: the same
    line raised after in any file is the same line."""
    if call["file"].startswith(CORE_LOOP[engine]):
        return CORE_LOOP_REASON, True
    fmt = call["format"] or ""
    if ENGINE_FAILURE.search(fmt):
        return ENGINE_FAILURE_REASON, False
    if EXCEPTION_LIKE.match(fmt):
        return EXCEPTION_REASON, False
    raised = [
        version
        for other in data["calls"]
        if other["outcome"] == "fatal"
        and other["format"] == fmt
        and (engine == "sglang" or other["file"].rsplit("/", 1)[-1] == call["file"].rsplit("/", 1)[-1])
        for version in other["lines"]
    ]
    if raised:
        return f"the same line is followed by a raise in {span(raised, list(data['versions']))} (the code no longer survives it)", False
    return NO_EVIDENCE, False


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
        if not fatal_in and not any(event_class in ("allowlisted", "request_error", "survived") for event_class in classes.values()):
            unrecognized += 1
        elif not fatal_in:
            rules = sorted({f"`{rule}`" if rule else event_class for event_class, rule, _lines in outcomes.values()})
            covered.append(f"| {where} | `{message}` | {call['outcome']} | {span(call['lines'], every)} | {', '.join(rules)} |")
        else:
            reason, _in_core = left_fatal_reason(engine_of(data), call, data)
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
    if engine == "vllm":
        out += [f"### {title}: lines the code survives that the source reading records otherwise, by evidence", ""]
        out += [EVIDENCE_INTRO, "", "| file | messages | versions | judged by |", "| --- | --- | --- | --- |"]
        for path, versions, messages in VLLM_SURVIVED_BY_EVIDENCE:
            shown = ", ".join(f"`{message.replace('|', chr(92) + '|')}`" for message in messages)
            out.append(f"| `{path}` | {shown} | {versions} | `{rule_of(engine, path)}` |")
        out.append("")
    out += [f"### {title}: lines the code survives that stay fatal, and why", ""]
    out += ["| file | message | code | versions judged fatal | reason |", "| --- | --- | --- | --- | --- |", *left, ""]
    return out


EVIDENCE_INTRO = (
    "The Hub lookups retry in a loop (`with_retry`: the line `... retrying 1 of 2`, then the next attempt; after the last one it"
    " raises), and every caller catches the raise and goes on without the Hub: a model given as a local path logs them and serves"
    " (a vLLM 0.16 start on ROCm did). The source reading follows the code past the loop to its last raise and records them as"
    " fatal; the rules make them warnings (`survived`), the family's own words and file."
)


def rule_of(engine: str, path: str) -> str:
    """The id of the survived rule of a file."""
    return next(str(rule.id) for rule in load_rules(engine).rules if rule.file == path and rule.rule_class == "survived")


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
**request-level** is about one request (counted, never a failure alone); **survived** is an ERROR line
after which the code carries on (a warning of its own, counted and shown with its source file, never
a failure alone); **unrecognized** is a warning no rule knows (reported, a failure only in strict
mode); **other** is information or progress; **not literal** is a call whose message is a variable
(not judged). A warning the code survives is unrecognized at worst: only the ERROR and CRITICAL lines
are listed below. A `logger.exception` line (**traceback**) is followed by a traceback, judged by its
exception line.

The policy: a line the code survives is never fatal alone. Fatal stays for the lines the code raises
or exits after, and for the engine core's loop (vLLM: `vllm/v1/engine/`, `vllm/v1/executor/`,
`vllm/v1/core/`, `vllm/v1/worker/` and their V0 forms; SGLang: its scheduler, tokenizer and
detokenizer managers and its watchdogs): **survived, judged fatal** counts the survived lines still
judged fatal, in the core loop, elsewhere with the evidence listed below (the line reads as an
exception line, names the engine's failure, or is followed by a raise in other versions), and
elsewhere without evidence (0 in every version: `tests/unit/plugins/module_utils/test_engine_source_lines.py`).
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
