"""A stand-in journalctl over a JSON file of records (one invocation's), for the tests of the reading
with --grep: journalctl's export format (binary fields with their length), --cursor, --after-cursor,
--lines (the last ones, or with --reverse the ones before the cursor), --reverse, --output-fields
and --grep (a PCRE2 pattern, run here with Python's re: the collection's patterns mean the same in
both; an all-lower-case pattern, or --case-sensitive=false, matches without regard to case).

Usage: python fake_journalctl.py RECORDS.json [journalctl arguments...]
"""

from __future__ import annotations

import json
import re
import sys

HEADER = ("__CURSOR", "__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP", "_BOOT_ID")


def export(record: dict, fields: set[str] | None) -> bytes:
    out = b""
    for name in HEADER:
        out += f"{name}={record[name]}\n".encode()
    for name, value in record.items():
        if name in HEADER or (fields is not None and name not in fields):
            continue
        data = bytes(value) if isinstance(value, list) else str(value).encode("utf-8", "surrogateescape")
        if any(byte < 0x20 and byte != 0x09 for byte in data) or not _utf8(data):
            out += name.encode() + b"\n" + len(data).to_bytes(8, "little") + data + b"\n"
        else:
            out += name.encode() + b"=" + data + b"\n"
    return out + b"\n"


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def main(argv: list[str]) -> int:
    with open(argv[0]) as handle:
        records = json.load(handle)
    for index, record in enumerate(records):
        record.setdefault("__CURSOR", f"s=fake;i={index + 1:x}")
        record.setdefault("__REALTIME_TIMESTAMP", str(1_700_000_000_000_000 + index))
        record.setdefault("__MONOTONIC_TIMESTAMP", str(1_000_000 + index))
        record.setdefault("_BOOT_ID", "0" * 32)
    options = {}
    for arg in argv[1:]:
        if arg.startswith("--"):
            name, _sep, value = arg.partition("=")
            options[name] = value
    cursors = [record["__CURSOR"] for record in records]
    selected = list(range(len(records)))
    reverse = "--reverse" in options
    if "--cursor" in options or "--after-cursor" in options:
        cursor = options.get("--cursor") or options["--after-cursor"]
        if cursor not in cursors:
            sys.stderr.write("Failed to seek to cursor: Invalid argument\n")
            return 1
        at = cursors.index(cursor)
        if reverse:
            selected = list(range(at if "--after-cursor" in options else at + 1))[::-1]
        else:
            selected = list(range(at + 1 if "--after-cursor" in options else at, len(records)))
        if "--lines" in options:
            selected = selected[: int(options["--lines"])]
    elif "--lines" in options:
        selected = selected[-int(options["--lines"]) :]
        if reverse:
            selected = selected[::-1]
    elif reverse:
        selected = selected[::-1]
    if "--grep" in options:
        pattern = options["--grep"].replace("(*PRUNE)", "")  # a PCRE2 verb that changes no match
        flags = re.IGNORECASE if options.get("--case-sensitive") == "false" or pattern == pattern.lower() else 0
        regex = re.compile(pattern, flags)

        def matches(record: dict) -> bool:
            message = record.get("MESSAGE")
            if message is None:
                return False
            text = bytes(message).decode("utf-8", "surrogateescape") if isinstance(message, list) else str(message)
            return regex.search(text) is not None

        selected = [index for index in selected if matches(records[index])]
    fields = set(options["--output-fields"].split(",")) if "--output-fields" in options else None
    out = sys.stdout.buffer
    for index in selected:
        out.write(export(records[index], fields))
    out.flush()
    if "--grep" in options and not selected:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
