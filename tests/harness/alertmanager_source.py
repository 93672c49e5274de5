"""A stand-in for the event source ``ansible.eda.alertmanager``, for the alert path's test.

The rulebook ``restart_on_alert.yml`` listens with ``ansible.eda.alertmanager``, from the collection
``ansible.eda``, which is published on Ansible Galaxy only: the tests, which install from PyPI and
Debian, cannot install it. The test puts this file in a collection ``ansible.eda`` of its own (in a
temporary directory) so that the shipped rulebook runs unchanged; it takes the same options (``host``,
``port``, ``data_alerts_path``, ``data_host_path``, ``data_path_separator``, ``skip_original_data``) and
puts the same events on the queue: for each alert of a webhook delivery ``{"alert": <alert>, "meta":
{"endpoint": ..., "headers": {...}, "hosts": [<the alert's host>]}}``, after the whole delivery as
``{"payload": ..., "meta": ...}`` unless ``skip_original_data``. ``GET /`` answers ``up``.

Standard library only (asyncio streams): ansible-rulebook loads it with runpy.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

MAX_BODY = 16 * 1024 * 1024


def lookup(data: Any, path: str, separator: str) -> Any:
    """The value at ``path`` (keys joined by ``separator``); KeyError when it is not there."""
    for key in path.split(separator):
        if not isinstance(data, dict) or key not in data:
            raise KeyError(path)
        data = data[key]
    return data


def events_of(payload: Any, endpoint: str, headers: dict[str, str], args: dict[str, Any]) -> list[dict[str, Any]]:
    separator = str(args.get("data_path_separator", "."))
    alerts_path = str(args.get("data_alerts_path", "alerts"))
    host_path = str(args.get("data_host_path", "labels.instance"))
    meta = {"endpoint": endpoint, "headers": headers}
    events: list[dict[str, Any]] = [] if args.get("skip_original_data", False) else [{"payload": payload, "meta": meta}]
    try:
        alerts = lookup(payload, alerts_path, separator) if alerts_path else payload
    except KeyError:
        alerts = []
    for alert in alerts if isinstance(alerts, list) else [alerts]:
        hosts = []
        if host_path:
            with contextlib.suppress(KeyError):
                hosts.append(str(lookup(alert, host_path, separator)).split(":", maxsplit=1)[0])
        events.append({"alert": alert, "meta": {**meta, "hosts": hosts}})
    return events


async def answer(writer: asyncio.StreamWriter, status: str, text: str) -> None:
    body = text.encode()
    writer.write(f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    await writer.drain()
    writer.close()


async def serve(queue: asyncio.Queue[Any], args: dict[str, Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        method, target, _version = (await reader.readline()).decode("latin-1").split(" ", 2)
        headers: dict[str, str] = {}
        while (line := (await reader.readline()).decode("latin-1").rstrip("\r\n")) != "":
            name, _colon, value = line.partition(":")
            headers[name.strip()] = value.strip()
        length = int(headers.get("Content-Length", "0"))
        body = await reader.readexactly(length) if 0 < length <= MAX_BODY else b""
    except (ValueError, asyncio.IncompleteReadError, ConnectionError):
        writer.close()
        return
    if method == "GET" and target == "/":
        await answer(writer, "200 OK", "up")
        return
    endpoint = target.lstrip("/").split("?")[0]
    if method != "POST" or not endpoint or "/" in endpoint:
        await answer(writer, "404 Not Found", "not found")
        return
    try:
        payload = json.loads(body)
    except ValueError:
        await answer(writer, "400 Bad Request", "not JSON")
        return
    for event in events_of(payload, endpoint, headers, args):
        await queue.put(event)
    await answer(writer, "202 Accepted", "Received")


async def main(queue: asyncio.Queue[Any], args: dict[str, Any]) -> None:
    server = await asyncio.start_server(lambda r, w: serve(queue, args, r, w), str(args.get("host", "localhost")), int(args.get("port", 5000)))
    try:
        async with server:
            await server.serve_forever()
    except asyncio.CancelledError:
        logging.getLogger().info("Plugin Task Cancelled")
