"""The kubelet's pod proxy gives up a dial that hangs (a pod's listen queue full) after its connect timeout,
with upstream's 503, and refuses a pod it does not run."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from vplane.runtime import podproxy


class OnePod:
    def __init__(self, address: str) -> None:
        self.address = address

    def pod_ip(self, namespace: str, name: str) -> str | None:
        return self.address if (namespace, name) == ("ns", "web") else None


async def _client(runtime: Any) -> TestClient[web.Request, web.Application]:
    app = web.Application()

    async def handler(request: web.Request) -> web.StreamResponse:
        return await podproxy.pod_proxy_handler(request, runtime)

    app.router.add_route("GET", podproxy.ROUTE, handler)
    client = TestClient(TestServer(app))
    await client.start_server()
    return client


async def test_a_dial_that_hangs_ends_at_the_connect_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(podproxy, "CONNECT_TIMEOUT_SECONDS", 0.5)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(4):  # fill the listen queue: further handshakes are dropped and the dial hangs
        filler = socket.socket()
        filler.setblocking(False)
        try:
            filler.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fillers.append(filler)
    client = await _client(OnePod("127.0.0.1"))
    try:
        answer = await client.get(f"/vplane/podProxy/http/ns/web/{port}/")
        status = json.loads(await answer.text())
        assert answer.status == 503
        assert status["message"] == f"error trying to reach service: dial tcp 127.0.0.1:{port}: i/o timeout"
        missing = await client.get(f"/vplane/podProxy/http/ns/other/{port}/")
        assert missing.status == 404 and await missing.text() == 'pod "other" does not exist on this node'
    finally:
        await client.close()
        for s in [*fillers, listener]:
            s.close()
