# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a vLLM server sleeps: ``GET /is_sleeping``.

vLLM's sleep mode (``--enable-sleep-mode``; ``POST /sleep?level=1|2``, ``POST /wake_up``) offloads or
drops the weights and the KV cache and keeps the process and its port: ``/health`` answers 200, and a
generation waits for (or, since the idle auto-sleep, triggers) a wake-up that reloads the weights. The
routes are registered only with ``VLLM_SERVER_DEV_MODE=1`` (vllm/entrypoints/openai/api_server.py,
then vllm/entrypoints/serve/sleep/api_router.py); ``/is_sleeping`` answers ``{"is_sleeping": true}``
or ``false``. vLLM asks the API key for ``/v1`` paths only, so the key is sent where one is set and
costs nothing where it is not needed. Without dev mode the path answers 404: the state is not known,
and the server is taken as awake (the collection's checks go on as before).
Standard library only, no Ansible imports.
"""

from __future__ import annotations

import json
import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils._load import Fetch

TIMEOUT = 5.0


def parse_answer(status: int | None, body: bytes) -> bool | None:
    """True or False from a 200 with ``{"is_sleeping": bool}``; None for any other answer."""
    if status != 200:
        return None
    try:
        found = json.loads(body.decode("utf-8", "replace"))
    except ValueError:
        return None
    value = found.get("is_sleeping") if isinstance(found, dict) else None
    return value if isinstance(value, bool) else None


def read_sleep(url: str, api_key: str | None, fetch: Fetch, timeout: float = TIMEOUT) -> dict[str, t.Any]:
    """``{"url", "sleeping" (True, False or None: not known), "status", "error"}`` from one GET."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    answer = fetch(url, headers, timeout)
    sleeping = parse_answer(answer.status, answer.body)
    error = answer.error
    if sleeping is None and error is None:
        error = "no sleep mode (VLLM_SERVER_DEV_MODE unset, or not vLLM)" if answer.status == 404 else f"HTTP {answer.status}, not a sleep state"
    return {"url": url, "sleeping": sleeping, "status": answer.status, "error": error}
