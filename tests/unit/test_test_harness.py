"""The test harness's own fixes to the standard library (see ``tests/conftest.py``)."""

from __future__ import annotations

import gc
import select
import socket
import ssl
import struct
import warnings


def test_a_tls_socket_reset_before_its_handshake_is_closed_not_leaked() -> None:
    """The peer resets the connection before the client starts TLS: wrapping fails, and the socket the
    standard library made for it is closed, so no ResourceWarning reaches a later test."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        raw = socket.create_connection(listener.getsockname())
        accepted, _ = listener.accept()
        accepted.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        accepted.close()  # an RST, as a server over its connection limit may answer
        assert select.select([raw], [], [], 10)[0], "the reset did not arrive"
        with warnings.catch_warnings():
            warnings.simplefilter("error", ResourceWarning)
            try:
                ssl.create_default_context().wrap_socket(raw, server_hostname="localhost")
            except ConnectionResetError:
                pass  # the error is dropped here, and with it the standard library's half-made socket
            else:
                raise AssertionError("wrapping a reset connection succeeded")
            gc.collect()
        raw.close()
