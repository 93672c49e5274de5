# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One HTTP health probe of an inference server, run on the managed host.

Standard library only, no Ansible imports. The probe runs where the server runs, so a server bound
to 127.0.0.1 is reachable; no proxy is ever used. A refused connection is an answer ("not up yet":
SGLang keeps its port closed through the cold start), not an error of the probe; a timeout after
the connection was accepted means the server is up but did not answer in time.

Result: ``{"url", "up", "status", "error", "seconds"}`` where ``up`` is true once a TCP connection
was accepted, ``status`` the HTTP status (None without an answer), ``error`` a short text or None.
"""

from __future__ import annotations

import socket
import time
import typing as t
import urllib.parse

from ansible_collections.inferops.runbooks.plugins.module_utils._types import HealthResult

if t.TYPE_CHECKING:
    import http.client

DEFAULT_TIMEOUT = 30.0
MAX_BODY = 4096


class HealthURLError(ValueError):
    """The health URL cannot be probed (bad scheme, no host)."""


def split_url(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path with query) of an http(s) URL; raises HealthURLError."""
    parsed = urllib.parse.urlsplit(url)
    scheme = parsed.scheme.lower()
    if scheme not in ("http", "https"):
        raise HealthURLError(f"health URL {url!r} must start with http:// or https://")
    if not parsed.hostname:
        raise HealthURLError(f"health URL {url!r} names no host")
    try:
        port = parsed.port or (443 if scheme == "https" else 80)
    except ValueError as exc:
        raise HealthURLError(f"health URL {url!r}: {exc}") from None
    path = parsed.path or "/"
    if parsed.query:
        path += "?" + parsed.query
    return scheme, parsed.hostname, port, path


def probe(
    url: str,
    timeout: float = DEFAULT_TIMEOUT,
    validate_certs: bool = True,
    clock: t.Callable[[], float] = time.monotonic,
) -> HealthResult:
    """GET the URL once and say what happened; never raises for network trouble."""
    # imported here: a look at a server whose port is still closed (most looks of a cold start)
    # never probes, and http.client with ssl is a third of the look's start-up on the target
    import http.client
    import ssl

    scheme, host, port, path = split_url(url)
    started = clock()
    result: HealthResult = {"url": url, "up": False, "status": None, "error": None, "seconds": 0.0}
    connection: http.client.HTTPConnection
    if scheme == "https":
        context = ssl.create_default_context()
        if not validate_certs:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        connection = http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
    else:
        connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        try:
            connection.connect()
        except ConnectionRefusedError:
            result["error"] = "connection refused"
            return result
        except socket.timeout:
            result["error"] = f"connect timed out after {timeout:g} s"
            return result
        except OSError as exc:
            result["error"] = _os_error_text(exc)
            return result
        result["up"] = True
        # no credentials: health endpoints need none, and a key must never go where the URL points
        headers = {"Accept": "*/*", "User-Agent": "inferops.runbooks service_probe"}
        try:
            connection.request("GET", path, headers=headers)
            response = connection.getresponse()
            response.read(MAX_BODY)
            result["status"] = response.status
        except socket.timeout:
            result["error"] = f"no answer within {timeout:g} s"
        except (OSError, http.client.HTTPException) as exc:
            result["error"] = _os_error_text(exc) if isinstance(exc, OSError) else f"bad HTTP answer: {type(exc).__name__}: {exc}"
        return result
    finally:
        connection.close()
        result["seconds"] = round(clock() - started, 3)


def _os_error_text(exc: BaseException) -> str:
    if isinstance(exc, ConnectionResetError):
        return "connection reset"
    if isinstance(exc, socket.gaierror):
        return f"name resolution failed: {exc.strerror or exc}"
    strerror = getattr(exc, "strerror", None)
    return str(strerror or exc or type(exc).__name__).lower()
