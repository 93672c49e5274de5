"""The commands the restart phase runs over the connection to wait for the old process and the port
(plugins/plugin_utils/_start.py): run by a real sh against a real process and a real listening socket."""

from __future__ import annotations

import socket
import subprocess
import time

from ansible_collections.inferops.runbooks.plugins.plugin_utils import _start


def run(script: str, *argv: str) -> tuple[int, float]:
    started = time.monotonic()
    done = subprocess.run(["sh", "-c", script, "sh", *argv], capture_output=True, text=True, timeout=30, check=False)
    return done.returncode, time.monotonic() - started


def test_the_port_wait_ends_once_nothing_listens_and_times_out_while_something_does() -> None:
    for family, address in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        with socket.socket(family, socket.SOCK_STREAM) as held:
            held.bind((address, 0))
            held.listen()
            port = str(held.getsockname()[1])
            rc, seconds = run(_start._WAIT_PORT_FREE, port, "1")
            assert rc == 1 and seconds >= 1, (family, rc, seconds)
        rc, _seconds = run(_start._WAIT_PORT_FREE, port, "5")
        assert rc == 0, family


def test_a_connected_socket_on_another_port_is_not_taken_for_a_listener() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname()) as client:
            # the client's own port is held by an established connection, not a listener
            rc, _seconds = run(_start._WAIT_PORT_FREE, str(client.getsockname()[1]), "3")
            assert rc == 0


def test_the_process_wait_ends_when_the_process_exits_and_times_out_while_it_runs() -> None:
    with subprocess.Popen(["sleep", "30"]) as sleeper:
        rc, seconds = run(_start._WAIT_GONE, str(sleeper.pid), "1")
        assert rc == 1 and seconds >= 1
        sleeper.kill()
        sleeper.wait()
        rc, _seconds = run(_start._WAIT_GONE, str(sleeper.pid), "5")
        assert rc == 0
