# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The smoke test of a phase: one token generated through the server's OpenAI-compatible
completions API, sent from the target itself (the server may listen on loopback only).

Private to the collection; may change at any time. Controller side.

A health endpoint that does not generate (vLLM's ``/health``) cannot prove that the server
generates; this can. A server that is ready, then dies on its first request logs why just after the
failed answer: the invocation's journal is read again, for a few seconds until a fatal line is
there, as the evidence. The answer and the journal read are kept in memory only: the request
carries the API key.
"""

from __future__ import annotations

import time
import typing as t
import urllib.parse

from ansible_collections.inferops.runbooks.plugins.module_utils import _engines
from ansible_collections.inferops.runbooks.plugins.module_utils._option_specs import DEFAULT_ENGINE
from ansible_collections.inferops.runbooks.plugins.plugin_utils._phase import Result, Steps
from ansible_collections.inferops.runbooks.plugins.plugin_utils._rollout import generated

PROMPT = "The capital of France is"
# the model named when the list of models cannot be read (the engine's driver's ``fallback_model``)
FALLBACK_MODEL = _engines.get(DEFAULT_ENGINE).fallback_model
JOURNAL_TRIES = 6
JOURNAL_DELAY = 1.0


def models_url(url: str) -> str:
    """``/v1/models`` on the smoke URL's server."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}/v1/models"


def _body(answer: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    body = answer.get("json")
    return body if isinstance(body, dict) else {}


def first_model(answer: t.Mapping[str, t.Any], engine: str = DEFAULT_ENGINE) -> str:
    """The first model ``/v1/models`` lists; the engine's fallback name when it lists none (the first
    driver's for ``auto``)."""
    data = _body(answer).get("data")
    data = data if isinstance(data, list) else []
    names = [entry["id"] for entry in data if isinstance(entry, dict) and isinstance(entry.get("id"), str)]
    return names[0] if names else _engines.drivers_for(engine)[0].fallback_model


def smoke_test(
    steps: Steps, url: str, model: str, headers: dict[str, str], timeout: int, scan: t.Mapping[str, t.Any], engine: str = DEFAULT_ENGINE
) -> tuple[Result, Result]:
    """(the answer, the journal read again after a failed one or {})."""
    request = {"method": "GET", "headers": headers, "timeout": timeout}
    if not model:
        listed = steps.module(
            "smoke",
            "Smoke test | Read the served model's name from /v1/models",
            "ansible.builtin.uri",
            {"url": models_url(url), **request},
            may_fail=True,
            always=True,
            secret=bool(headers),
        )
        model = first_model(listed, engine)
    body = {"model": model, "prompt": PROMPT, "max_tokens": 1, "temperature": 0}
    answer = steps.module(
        "smoke",
        "Smoke test | Generate one token through the completions API",
        "ansible.builtin.uri",
        {**request, "url": url, "method": "POST", "body_format": "json", "body": body, "status_code": [200]},
        may_fail=True,
        always=True,
        secret=bool(headers),
    )
    if generated(answer) or not scan:
        return answer, {}
    return answer, journal_after(steps, scan)


def journal_after(steps: Steps, scan: t.Mapping[str, t.Any]) -> Result:
    """The invocation's journal, read until a fatal line is there or the tries are spent."""
    journal: Result = {}
    for attempt in range(JOURNAL_TRIES):
        if attempt:
            time.sleep(JOURNAL_DELAY)
        journal = steps.module(
            "smoke",
            "Smoke test | Read the journal of this start again for why the request failed",
            "inferops.runbooks.journal_scan",
            {**scan, "tail_lines": 20},
            may_fail=True,
            always=True,
        )
        if journal.get("fatal"):
            break
    return journal
