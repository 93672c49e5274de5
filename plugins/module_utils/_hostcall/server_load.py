# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A server's load, waited on until it runs no request (the drain before a stop).

Private to the collection; may change at any time. Host side: standard library only. The module
server_load is a shell over ``CALL``; a phase runs ``cli`` as a plain process (``_hostcall``).
"""

from __future__ import annotations

import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils import _engines, _load
from ansible_collections.inferops.runbooks.plugins.module_utils._hostcall import Call, CallFailed, Host, Params, Result, serve
from ansible_collections.inferops.runbooks.plugins.module_utils._option_specs import DEFAULT_ENGINE

SERVER_LOAD_SPEC: dict[str, t.Any] = {
    "url": {"type": "str", "required": True},
    "engine": {"type": "str", "default": DEFAULT_ENGINE, "choices": list(_engines.ENGINE_NAMES)},
    "api_key": {"type": "str", "no_log": True},
    "timeout": {"type": "float", "default": 300},
    "interval": {"type": "float", "default": 5},
    "unknown_load": {"type": "str", "default": "wait", "choices": list(_load.UNKNOWN_LOAD)},
    "node_rank": {"type": "int", "default": 0},
    "validate_certs": {"type": "bool", "default": True},
}


def server_load(params: Params, host: Host) -> Result:
    del host
    if params["node_rank"] >= 1:
        return {"changed": False, "drain": _load.not_read_on_a_worker_node(params["url"], params["node_rank"])}
    try:
        drain = _load.wait_until_idle(
            params["url"],
            params["engine"],
            params["api_key"] or None,
            params["timeout"],
            params["interval"],
            _load.http_fetch(params["validate_certs"]),
            params["unknown_load"],
        )
    except _load.LoadError as exc:
        raise CallFailed(f"server_load: {exc}") from None
    return {"changed": False, "drain": drain}


CALL = Call(SERVER_LOAD_SPEC, {}, server_load)


def cli() -> None:
    serve(CALL)
