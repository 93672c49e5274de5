# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a vLLM server sleeps (its sleep mode), read from the host with one GET of /is_sleeping.

Private to the collection; may change at any time. Host side: standard library only. The module
server_sleep is a shell over ``CALL``; a phase runs ``cli`` as a plain process (``_hostcall``).
"""

from __future__ import annotations

import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils import _load, _sleep
from ansible_collections.inferops.runbooks.plugins.module_utils._hostcall import Call, Host, Params, Result, serve

SERVER_SLEEP_SPEC: dict[str, t.Any] = {
    "url": {"type": "str", "required": True},
    "api_key": {"type": "str", "no_log": True},
    "timeout": {"type": "float", "default": _sleep.TIMEOUT},
    "validate_certs": {"type": "bool", "default": True},
}


def server_sleep(params: Params, host: Host) -> Result:
    del host
    fetch = _load.http_fetch(params["validate_certs"])
    return {"changed": False, "sleep": _sleep.read_sleep(params["url"], params["api_key"] or None, fetch, params["timeout"])}


CALL = Call(SERVER_SLEEP_SPEC, {}, server_sleep)


def cli() -> None:
    serve(CALL)
