"""The proxy's HTTP/1.1 exchange with a target replica over the dial seam: keep-alive reuse, what closes a
connection, the one retry on a kept-alive connection the target closed, the per-host cap, the request
head. The target is a fake transport that answers each request with the next canned response."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from vplane.proxy.peers import Host, PeerCache, PeerSettings
from vplane.proxy.upstream import DialFailed, DialObserver, HostPool, ProtocolFactory

HOST = Host(peer_id="n-target-0", name="target-0", key="n-target-0|i1|127.0.0.1:1")
AUTHORITY = "kube.target.default.vcluster.invalid:443"


def ok(body: bytes = b"{}", *extra: str) -> bytes:
    head = "".join(f"{line}\r\n" for line in extra)
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{head}\r\n".encode() + body


CLOSE = b""
"""An answer that is the target closing the connection instead."""
HANG = b"-"
"""No answer: the request stays in flight."""


class FakeTransport(asyncio.Transport):
    def __init__(self, target: FakeTarget, protocol: Any) -> None:
        super().__init__()
        self.target = target
        self.protocol = protocol
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.target.requests.append(bytes(data))
        answer = self.target.answers.pop(0)
        loop = asyncio.get_running_loop()
        if answer == CLOSE:
            self.close()
        elif answer != HANG:
            loop.call_soon(self.protocol.data_received, answer)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            self.target.closed += 1
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    def abort(self) -> None:
        self.close()

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


class FakeTarget:
    def __init__(self, *answers: bytes) -> None:
        self.answers = list(answers)
        self.requests: list[bytes] = []
        self.dials = 0
        self.closed = 0

    async def dial(self, peer_id: str, factory: ProtocolFactory) -> tuple[asyncio.BaseTransport, Any]:
        self.dials += 1
        protocol = factory()
        transport = FakeTransport(self, protocol)
        protocol.connection_made(transport)
        return transport, protocol


def pool(target: FakeTarget, **kwargs: Any) -> HostPool:
    cache = PeerCache(PeerSettings())
    cache.publish([HOST])
    observer = DialObserver(lambda *_: None, lambda *_: None)
    return HostPool(cache, target.dial, observer, dial_timeout=lambda: 5.0, authority=AUTHORITY, **kwargs)


async def get(p: HostPool, path: str = "/apis/example.com/v1", method: str = "GET") -> tuple[int, bytes]:
    async with await p.request(HOST, method, path, [("Accept", "application/json")], None) as resp:
        return resp.status, await resp.read()


async def test_requests_reuse_a_kept_alive_connection() -> None:
    target = FakeTarget(ok(b'{"a":1}'), ok(b'{"b":2}'))
    p = pool(target)
    assert await get(p) == (200, b'{"a":1}')
    assert await get(p, "/apis/example.com/v1/x?watch=0") == (200, b'{"b":2}')
    assert target.dials == 1
    assert target.requests[0] == (
        b"GET /apis/example.com/v1 HTTP/1.1\r\nHost: " + AUTHORITY.encode() + b"\r\n"
        b"Accept: application/json\r\n\r\n"
    )
    assert target.requests[1].startswith(b"GET /apis/example.com/v1/x?watch=0 HTTP/1.1\r\n")
    await p.close()
    assert target.closed == 1


async def test_a_body_left_unread_closes_its_connection() -> None:
    target = FakeTarget(ok(b"x" * 100)[:-50], ok())  # half the body has arrived
    p = pool(target)
    resp = await p.request(HOST, "GET", "/a", [], None)
    resp.release()
    assert await get(p) == (200, b"{}")
    assert target.dials == 2


async def test_a_kept_alive_connection_the_target_closed_is_retried_once_for_idempotent_methods() -> None:
    target = FakeTarget(ok(), CLOSE, ok(b"again"))
    p = pool(target)
    await get(p)
    assert await get(p) == (200, b"again")
    assert target.dials == 2

    target = FakeTarget(ok(), CLOSE)
    p = pool(target)
    await get(p)
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await p.request(HOST, "POST", "/a", [], b"{}")
    assert target.dials == 1  # a create is not sent twice


async def test_a_request_cut_by_its_hosts_quarantine_is_not_retried_on_a_new_dial() -> None:
    """Quarantine closes the host's busy connections too: the request in flight on a kept-alive one fails
    instead of dialling the quarantined host beside its single half-open trial."""
    target = FakeTarget(ok(), HANG, ok(b"a dial that should not happen"))
    p = pool(target)
    await get(p)
    in_flight = asyncio.ensure_future(get(p))
    await asyncio.sleep(0.01)
    p.drop(HOST)  # what quarantining the host does
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await in_flight
    assert target.dials == 1
    await p.close()


async def test_a_fresh_connection_is_not_retried() -> None:
    target = FakeTarget(CLOSE, ok())
    p = pool(target)
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await get(p)
    assert target.dials == 1


async def test_drop_closes_the_hosts_connections() -> None:
    target = FakeTarget(ok(), ok())
    p = pool(target)
    await get(p)
    p.drop(HOST)
    await asyncio.sleep(0)
    assert target.closed == 1
    await get(p)
    assert target.dials == 2


async def test_idle_connections_expire_after_the_keepalive_time() -> None:
    target = FakeTarget(ok(), ok())
    p = pool(target, keepalive_timeout=0.01)
    await get(p)
    await asyncio.sleep(0.05)
    assert target.closed == 1  # swept, not only skipped
    await get(p)
    assert target.dials == 2


async def test_the_per_host_cap_queues_requests() -> None:
    target = FakeTarget(ok(b"1"), ok(b"2"))
    p = pool(target, connections_per_host=1)
    first = await p.request(HOST, "GET", "/a", [], None)
    second = asyncio.create_task(get(p))
    await asyncio.sleep(0.01)
    assert not second.done()
    assert await first.read() == b"1"
    assert await second == (200, b"2")
    assert target.dials == 1


async def test_bodies_carry_their_length() -> None:
    target = FakeTarget(ok(), ok(), ok())
    p = pool(target)
    async with await p.request(HOST, "POST", "/a", [("Content-Type", "application/json")], b'{"x":1}'):
        pass
    async with await p.request(HOST, "POST", "/a", [], None):
        pass
    async with await p.request(HOST, "DELETE", "/a", [], None):
        pass
    assert target.requests[0].endswith(
        b"Content-Type: application/json\r\nContent-Length: 7\r\n\r\n" + b'{"x":1}'
    )
    assert target.requests[1].endswith(b"Content-Length: 0\r\n\r\n")
    assert b"Content-Length" not in target.requests[2]


async def test_no_cookie_is_kept_between_requests() -> None:
    target = FakeTarget(ok(b"{}", "Set-Cookie: session=abc"), ok())
    p = pool(target)
    await get(p)
    await get(p)
    assert b"session" not in target.requests[1].lower()


async def test_head_answers_have_no_body() -> None:
    target = FakeTarget(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n", ok(b"next"))
    p = pool(target)
    assert await get(p, method="HEAD") == (200, b"")
    assert await get(p) == (200, b"next")
    assert target.dials == 1


async def test_header_injection_is_refused() -> None:
    p = pool(FakeTarget())
    with pytest.raises(ValueError, match="invalid header"):
        await p.request(HOST, "GET", "/a", [("X-A", "b\r\nX-Evil: 1")], None)


async def test_a_response_dropped_unreleased_gives_its_connection_back() -> None:
    target = FakeTarget(ok(b"1"), ok(b"2"))
    p = pool(target, connections_per_host=1)
    await p.request(HOST, "GET", "/a", [], None)  # never released: freed at once
    assert await asyncio.wait_for(get(p), 5) == (200, b"2")
    assert target.dials == 1


async def test_a_dial_timeout_says_so() -> None:
    """The caller's 503 carries the dial error's text (the runbook's "dial timeout"), not a bare class name."""

    async def hang(peer_id: str, factory: ProtocolFactory) -> tuple[asyncio.BaseTransport, Any]:
        await asyncio.sleep(10)
        raise AssertionError("not reached")

    cache = PeerCache(PeerSettings())
    cache.publish([HOST])
    observer = DialObserver(lambda *_: None, lambda *_: None)
    p = HostPool(cache, hang, observer, dial_timeout=lambda: 0.01, authority=AUTHORITY)
    with pytest.raises(DialFailed) as failed:
        await get(p)
    assert failed.value.reason == "timeout"
    assert str(failed.value.cause) == "dial target-0: i/o timeout after 0.01s"
    await p.close()
