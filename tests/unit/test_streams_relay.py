"""The pure parts of relaying connection upgrades (``vplane.support.httprelay``): response heads, request
heads that cannot be split, chunked bodies."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict

from vplane.support import httprelay


def test_a_101_head() -> None:
    raw = (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: abc=\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n"
    )
    head = httprelay.parse_response_head(raw)
    assert head.status == 101 and head.reason == "Switching Protocols"
    assert head.get("sec-websocket-protocol") == "v5.channel.k8s.io"
    assert head.raw == raw


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.1 101\r\n",
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 1x1 No\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n folded: x\r\n\r\n",
    ],
)
def test_malformed_heads(raw: bytes) -> None:
    with pytest.raises(ValueError):
        httprelay.parse_response_head(raw)


@given(st.binary(max_size=200))
def test_any_head_parses_or_is_refused(raw: bytes) -> None:
    try:
        head = httprelay.parse_response_head(raw + b"\r\n\r\n")
    except ValueError:
        return
    assert 0 <= head.status <= 999


def test_request_heads_cannot_be_split() -> None:
    head = httprelay.request_head(
        "GET", "/exec/a/b/c?command=ls", "127.0.0.1:10250", [("Upgrade", "websocket")]
    )
    assert head == (
        b"GET /exec/a/b/c?command=ls HTTP/1.1\r\nHost: 127.0.0.1:10250\r\nConnection: Upgrade\r\n"
        b"Upgrade: websocket\r\n\r\n"
    )
    for method, target, headers in (
        ("GET", "/x HTTP/1.1\r\nEvil: 1", []),
        ("GET", "/x", [("X-A", "1\r\nEvil: 2")]),
        ("GET", "/x", [("X-A: b", "1")]),
        ("GET", "/x", [("", "1")]),
        ("G ET", "/x", []),
    ):
        with pytest.raises(ValueError):
            httprelay.request_head(method, target, "h:1", headers)


def test_is_upgrade() -> None:
    assert httprelay.is_upgrade(CIMultiDict({"Connection": "keep-alive, Upgrade", "Upgrade": "websocket"}))
    assert not httprelay.is_upgrade(CIMultiDict({"Connection": "Upgrade"}))
    assert not httprelay.is_upgrade(CIMultiDict({"Upgrade": "websocket"}))


@given(st.lists(st.binary(min_size=1, max_size=40), max_size=8), st.data())
def test_chunked_bodies_decode_however_they_are_cut(chunks: list[bytes], data: st.DataObject) -> None:
    wire = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\nTrailer: x\r\n\r\n"
    cuts = sorted(data.draw(st.lists(st.integers(min_value=0, max_value=len(wire)), max_size=5)))
    decoder, body, start = httprelay.ChunkedDecoder(), b"", 0
    for cut in [*cuts, len(wire)]:
        body += decoder.feed(wire[start:cut])
        start = cut
    assert body == b"".join(chunks)
    assert decoder.done


@pytest.mark.parametrize("wire", [b"zz\r\n", b"3\r\nabcX\r\n", b"1" * 2000])
def test_malformed_chunked_bodies(wire: bytes) -> None:
    with pytest.raises(ValueError):
        httprelay.ChunkedDecoder().feed(wire)
