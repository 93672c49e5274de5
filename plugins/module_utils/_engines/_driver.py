# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What an engine driver provides: the interface every ``_engines/<name>.py`` fills in.

Private to the collection; may change at any time. Standard library only, no Ansible imports.
"""

from __future__ import annotations

import re
import typing as t

RulePack = t.List[t.Dict[str, t.Any]]


class DecodeLog(t.NamedTuple):
    """How an engine logs its own decoding figures while it serves."""

    # what the canary's report calls the figures' source, and how it counts the lines it read
    source: str
    line_word: str
    note: str
    # parses one message: the figures (``gen_throughput`` in tokens/s, ``running``, ``queue`` and
    # what else the line holds) or None when the message is not such a line
    parse: t.Callable[[str], t.Optional[t.Dict[str, float]]]


class LinePrefix(t.NamedTuple):
    """A prefix an engine's logger writes before its messages, matched where the journal's prefix ends.
    Its named groups say what it holds: ``timestamp``, ``rank`` (the ranks of the process that logged
    it), ``level`` and ``logger`` (the file and line that logged it; with ``level``, it names the
    stream a traceback's lines share). A prefix without ``level`` may follow another (a worker's
    ``(EngineCore pid=1)``, a torch rank) or be followed by one; a prefix with ``level`` is the last."""

    pattern: re.Pattern[str]
    # the characters the prefix can begin with: a line that begins with none of them is not tried
    openers: str


class LoadSource(t.NamedTuple):
    """One place an engine publishes how many requests it runs and queues: its path, whether the
    server guards it with its API key, the shape of its answer (``v1_loads``, ``get_load`` or
    ``metrics``) and, for ``metrics``, the gauges to add up."""

    path: str
    keyed: bool
    shape: str
    gauges: t.Tuple[str, ...] = ()


class EngineDriver(t.NamedTuple):
    """One inference engine, as the collection sees it."""

    name: str
    # the engine's rule pack (``_rule_packs``), under this pack name in rule sources
    rule_pack: RulePack
    # what the engine changes in the common rules it shares, by rule id
    rule_changes: t.Mapping[str, t.Mapping[str, t.Any]]
    # whether the start's gates generate a token by default: an engine whose health endpoint
    # answers 200 while it cannot generate needs it
    smoke_by_default: bool
    # the server's latency histograms in /metrics, by figure, in the order they are looked for
    histograms: t.Mapping[str, t.Tuple[str, ...]]
    # the engine's decode figures in its journal
    decode_log: DecodeLog
    # lines that name the engine's version (group 1 is the version), looked for only in lines that
    # hold one of the words (lower case)
    version_words: t.Tuple[str, ...]
    version_patterns: t.Tuple[re.Pattern[str], ...]
    # a line of the engine's own start timings (group 1 holds ``name=seconds`` pairs), if it logs one
    timings_pattern: t.Optional[re.Pattern[str]]
    # where the drain reads the load, in the order the places are tried
    load_sources: t.Tuple[LoadSource, ...]
    # the prefixes the engine's own logger writes, tried before the common ones (``_lines``)
    line_prefixes: t.Tuple[LinePrefix, ...]
    # where the server listens unless told otherwise, and its paths: the health endpoint the start's
    # gates probe, the OpenAI completions a smoke test generates through (the load is read at the
    # first of ``load_sources``)
    default_port: int
    health_path: str
    smoke_path: str
    # the systemd unit of a server that does not name its own
    default_unit: str
    # the model a smoke test names when the server's /v1/models cannot be read
    fallback_model: str
    # the serving watch's figures in /metrics: the gauge of running requests, the counter of generated tokens
    serving_gauges: t.Tuple[str, str]
    # the path the serving watch generates one token through: the engine's own, which needs no model
    # name, or the OpenAI completions (the model read from /v1/models)
    watch_generate_path: str
    # a unit's command line (ExecStart) that runs the engine's server
    command_pattern: t.Optional[re.Pattern[str]] = None
    # how the engine drains its running requests on SIGTERM: ``flag`` for as long as a flag of its command
    # line says (none: not at all), ``unbounded`` until they are done (systemd's TimeoutStopSec is the limit)
    stop_drain: str = "flag"
    # how the stop's warnings say the engine drains (``vLLM drains running requests``)
    drain_words: str = ""
    # for ``flag``: the flag in the command line (group 1: its seconds) and its name, and the seconds the
    # engine takes to stop once the drain is over
    drain_flag: t.Optional[re.Pattern[str]] = None
    drain_flag_name: str = ""
    teardown_seconds: int = 0
    # the path that says whether the server sleeps (vLLM's sleep mode, GET /is_sleeping), None when it has none
    sleep_path: t.Optional[str] = None
    # what a node of rank 1 or more of a deployment serves over HTTP: ``placeholder`` (a health endpoint that
    # answers 200 whatever the engine does, SGLang's) or ``none`` (vLLM's ``--headless`` data parallel nodes)
    worker_http: str = "placeholder"
    # for ``none``: the phase of a worker node's own journal that proves it ready (None: its ready lines)
    worker_ready_phase: t.Optional[str] = None
