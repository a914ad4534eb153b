"""The embedded server keeps its port across a restart: a port whose only sockets are the
last run's connections in TIME_WAIT is free to listen on (as Postgres binds it, with
SO_REUSEADDR); one a process listens on is not. Real sockets on loopback."""

from __future__ import annotations

import socket
import time

from lakewarden.db.embedded import _any_free_port, _port_free


def _listener(port: int) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen()
    return s


def _leave_time_wait_on(port: int) -> None:
    """A connection to `port` closed by its server side first: that side's socket (local
    port `port`) stays in TIME_WAIT after the listener is gone, as after a server's stop."""
    with _listener(port) as listener:
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        accepted.close()
        time.sleep(0.05)
        client.close()
    time.sleep(0.05)


def test_a_port_left_in_time_wait_is_free_for_the_next_server() -> None:
    port = _any_free_port()
    _leave_time_wait_on(port)
    assert _port_free(port)


def test_a_port_a_server_listens_on_is_not() -> None:
    port = _any_free_port()
    with _listener(port):
        assert not _port_free(port)
