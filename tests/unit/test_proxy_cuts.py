"""Answers the proxy has begun relaying when something ends them: the request cap firing mid-body cuts the
connection (a 503 written then would land inside the first answer's body, and the caller would wait on),
and a watch whose caller goes ends at once instead of at the target's next event. The proxy is served as
the API server serves it (a GuardedServer connection) to a raw loopback client; the target is a fake one
that sends part of an answer and then nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from test_proxy_internal_fetch import make
from test_proxy_upstream import FakeTarget

from vplane.kube.proxyconfig import ProxyTarget
from vplane.proxy.peers import Host
from vplane.support import httpserver

TARGET = ProxyTarget("example.com", "v1", "target", "default", "all", ("myresources",))
PEER = Host(peer_id="n-t0", name="target-0", key="n-t0|1|127.0.0.1:1")
LIST = "/apis/example.com/v1/namespaces/ns/myresources"


class Served:
    def __init__(self, target: FakeTarget, cap: float) -> None:
        self.proxy, self.metrics = make(target, 3.0, cap=cap, proxied=TARGET)
        self.proxy.publish([PEER])
        self.port = 0

    async def start(self) -> web.ServerRunner:
        limits = httpserver.ConnectionLimits(header_timeout=5, body_grace=5, body_min_rate=0, send_timeout=0)
        runner = web.ServerRunner(httpserver.GuardedServer(self.proxy.handle, limits=limits))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return runner

    def lines(self, name: str) -> list[str]:
        return [line for line in self.metrics.render().decode().splitlines() if line.startswith(name + "{")]


@pytest.fixture
async def served(request: pytest.FixtureRequest) -> AsyncIterator[Served]:
    target, cap = request.param
    served = Served(target, cap)
    runner = await served.start()
    yield served
    await runner.cleanup()


HALF = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 200000\r\n\r\n" + b" " * 100_000
"""A LIST answer whose first half arrived, the rest never does."""


@pytest.mark.parametrize("served", [(FakeTarget(HALF), 0.5)], indirect=True)
async def test_the_cap_firing_mid_answer_cuts_the_connection(served: Served) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(f"GET {LIST} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    received = b""
    async with asyncio.timeout(5):  # before the fix: still open, waiting, with a 503 inside the body
        while chunk := await reader.read(65536):
            received += chunk
    writer.close()
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK") and b"content-length: 200000" in head.lower()
    assert len(body) < 200_000 and b"HTTP/1.1" not in body  # cut short, no second answer
    assert served.lines("vcluster_proxy_request_total") == [
        'vcluster_proxy_request_total{code="200",group_version="example.com/v1",reason="deadline",'
        'target="default/target",verb="list"} 1.0'
    ]
    assert served.lines("vcluster_proxy_request_terminations_total") == [
        'vcluster_proxy_request_terminations_total{reason="deadline",target="default/target"} 1.0'
    ]


WATCH = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
"""A watch that has started and has no event to send yet."""


@pytest.mark.parametrize("served", [(FakeTarget(WATCH), 60.0)], indirect=True)
async def test_a_watch_ends_when_its_caller_goes(served: Served) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(f"GET {LIST}?watch=true HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 OK")
    gauge = 'vcluster_proxy_active_watches{target="default/target"}'
    assert served.lines("vcluster_proxy_active_watches") == [gauge + " 1.0"]
    writer.close()
    for _ in range(250):  # 5 s; before the fix: open until the target's next event
        if served.lines("vcluster_proxy_active_watches") == [gauge + " 0.0"]:
            break
        await asyncio.sleep(0.02)
    assert served.lines("vcluster_proxy_active_watches") == [gauge + " 0.0"]
