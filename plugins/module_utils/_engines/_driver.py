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
    # a unit's command line (ExecStart) that runs the engine's server
    command_pattern: t.Optional[re.Pattern[str]] = None
    # how the engine drains its running requests on SIGTERM: ``flag`` for as long as a flag of its command
    # line says (none: not at all), ``unbounded`` until they are done (systemd's TimeoutStopSec is the limit)
    stop_drain: str = "flag"
    # the path that says whether the server sleeps (vLLM's sleep mode, GET /is_sleeping), None when it has none
    sleep_path: t.Optional[str] = None
    # what a node of rank 1 or more of a deployment serves over HTTP: ``placeholder`` (a health endpoint that
    # answers 200 whatever the engine does, SGLang's) or ``none`` (vLLM's ``--headless`` data parallel nodes)
    worker_http: str = "placeholder"
    # for ``none``: the phase of a worker node's own journal that proves it ready (None: its ready lines)
    worker_ready_phase: t.Optional[str] = None
