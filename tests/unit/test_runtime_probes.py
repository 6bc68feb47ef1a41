"""Probe thresholds and the probe handlers' answers (on loopback sockets of the test's own)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from vplane.runtime.probes import ProbeTracker, probe_once


def test_initial_results_are_upstreams() -> None:
    assert ProbeTracker("Readiness").result is False
    assert ProbeTracker("Liveness").result is True
    assert ProbeTracker("Startup").result is False


def test_results_change_only_after_the_thresholds() -> None:
    tracker = ProbeTracker.from_spec("Liveness", {"successThreshold": 1, "failureThreshold": 3})
    assert [tracker.observe(False) for _ in range(3)] == [False, False, True]
    assert tracker.result is False
    readiness = ProbeTracker.from_spec("Readiness", {"successThreshold": 2, "failureThreshold": 1})
    assert [
        readiness.observe(True),
        readiness.observe(False),
        readiness.observe(True),
        readiness.observe(True),
    ] == [
        False,
        False,
        False,
        True,
    ]


async def _no_exec(command: Sequence[str], limit: float) -> tuple[int | None, str]:
    return (0, "") if command == ["true"] else (1, f"ran {' '.join(command)}")


async def test_exec_probes_report_the_output() -> None:
    assert await probe_once({"exec": {"command": ["true"]}}, {}, "127.0.0.1", _no_exec) == (True, "")
    assert await probe_once({"exec": {"command": ["false"]}}, {}, "127.0.0.1", _no_exec) == (
        False,
        "ran false",
    )


async def test_http_probes_by_status_code_and_named_port() -> None:
    codes = iter([200, 500])

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readuntil(b"\r\n\r\n")
        assert b"User-Agent: kube-probe/1.36" in request
        writer.write(f"HTTP/1.1 {next(codes)} X\r\nContent-Length: 0\r\n\r\n".encode())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    container = {"ports": [{"name": "http", "containerPort": port}]}
    try:
        probe = {"httpGet": {"path": "/healthz", "port": "http"}, "timeoutSeconds": 2}
        assert await probe_once(probe, container, "127.0.0.1", _no_exec) == (True, "")
        assert await probe_once(probe, container, "127.0.0.1", _no_exec) == (
            False,
            "HTTP probe failed with statuscode: 500",
        )
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await server.wait_closed()


async def test_connection_failures_read_as_go_dial_errors() -> None:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    ok, message = await probe_once({"tcpSocket": {"port": port}}, {}, "127.0.0.1", _no_exec)
    assert (ok, message) == (False, f"dial tcp 127.0.0.1:{port}: connect: connection refused")
    ok, message = await probe_once({"httpGet": {"path": "/", "port": port}}, {}, "127.0.0.1", _no_exec)
    assert (
        message == f'Get "http://127.0.0.1:{port}/": dial tcp 127.0.0.1:{port}: connect: connection refused'
    )
    ok, message = await probe_once({"grpc": {"port": port}}, {}, "127.0.0.1", _no_exec)
    assert (ok, message) == (False, "gRPC probes are not supported by the vplane node runtime")
