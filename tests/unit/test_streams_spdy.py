"""SPDY/3.1 framing (``vplane.kube.spdy``): round trips, streams cut anywhere, one compression context per
direction, and malformed input refused with SpdyError (never another exception)."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vplane.kube import spdy

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12)
values = st.lists(
    st.text(alphabet=st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), max_size=20),
    min_size=1,
    max_size=3,
)
headers = st.dictionaries(names, values, max_size=5)
stream_ids = st.integers(min_value=1, max_value=2**31 - 1)

frames = st.one_of(
    st.builds(spdy.DataFrame, stream_ids, st.binary(max_size=200), st.sampled_from([0, spdy.FLAG_FIN])),
    st.builds(
        spdy.SynStream,
        stream_ids,
        headers,
        st.sampled_from([0, spdy.FLAG_FIN, spdy.FLAG_UNIDIRECTIONAL]),
        st.integers(min_value=0, max_value=2**31 - 1),
        st.integers(min_value=0, max_value=7),
    ),
    st.builds(spdy.SynReply, stream_ids, headers, st.sampled_from([0, spdy.FLAG_FIN])),
    st.builds(spdy.HeadersFrame, stream_ids, headers),
    st.builds(spdy.RstStream, stream_ids, st.integers(min_value=1, max_value=11)),
    st.builds(spdy.Ping, st.integers(min_value=0, max_value=2**32 - 1)),
    st.builds(
        spdy.GoAway, st.integers(min_value=0, max_value=2**31 - 1), st.integers(min_value=0, max_value=2)
    ),
    st.builds(spdy.WindowUpdate, stream_ids, st.integers(min_value=1, max_value=2**31 - 1)),
    st.builds(
        spdy.Settings,
        st.lists(
            st.tuples(
                st.integers(min_value=0, max_value=255),
                st.integers(min_value=0, max_value=2**24 - 1),
                st.integers(min_value=0, max_value=2**32 - 1),
            ),
            max_size=4,
        ),
    ),
)


@given(st.lists(frames, max_size=12), st.data())
@settings(max_examples=200)
def test_frames_round_trip_however_the_bytes_are_cut(sent: list[spdy.Frame], data: st.DataObject) -> None:
    writer, reader = spdy.FrameWriter(), spdy.FrameReader()
    wire = b"".join(writer.encode(f) for f in sent)
    cuts = sorted(data.draw(st.lists(st.integers(min_value=0, max_value=len(wire)), max_size=6)))
    got: list[spdy.Frame] = []
    start = 0
    for cut in [*cuts, len(wire)]:
        got += reader.feed(wire[start:cut])
        start = cut
    normalised = [
        spdy.DataFrame(f.stream_id, f.data, f.flags) if isinstance(f, spdy.DataFrame) else f for f in sent
    ]
    assert got == normalised


def test_the_dictionary_is_the_protocols() -> None:
    """Draft 3's dictionary is 1423 bytes and starts with the length-prefixed "options"; a header block
    compressed by a zlib stream primed with it is what spdystream reads."""
    assert len(spdy.HEADER_DICTIONARY) == 1423
    assert spdy.HEADER_DICTIONARY.startswith(b"\x00\x00\x00\x07options\x00\x00\x00\x04head")
    assert spdy.HEADER_DICTIONARY.endswith(b"charset=iso-8859-1,utf-,*,enq=0.")
    assert zlib.adler32(spdy.HEADER_DICTIONARY) == 0xE3C6A7C2


def test_a_syn_stream_as_client_go_sends_it() -> None:
    """A port-forward error stream: lower-case names, one zlib context across frames."""
    writer, reader = spdy.FrameWriter(), spdy.FrameReader()
    first = spdy.SynStream(1, {"streamtype": ["error"], "port": ["80"], "requestid": ["0"]})
    second = spdy.SynStream(3, {"streamtype": ["data"], "port": ["80"], "requestid": ["0"]})
    wire = writer.encode(first) + writer.encode(second)
    assert wire[:4] == b"\x80\x03\x00\x01"  # control, version 3, SYN_STREAM
    assert reader.feed(wire) == [first, second]


def test_data_is_split_into_chunks_with_fin_on_the_last() -> None:
    wire = spdy.FrameWriter.data(5, b"x" * 70000, fin=True, chunk=32768)
    frames = spdy.FrameReader().feed(wire)
    assert [len(f.data) for f in frames if isinstance(f, spdy.DataFrame)] == [32768, 32768, 4464]
    assert [f.fin for f in frames if isinstance(f, spdy.DataFrame)] == [False, False, True]


def control(kind: int, payload: bytes, version: int = 3) -> bytes:
    return struct.pack(">II", 0x80000000 | (version << 16) | kind, len(payload)) + payload


@pytest.mark.parametrize(
    ("wire", "why"),
    [
        (control(spdy.PING, b"", version=2), "unsupported SPDY version 2"),
        (control(spdy.RST_STREAM, b"\x00\x00"), "too short"),
        (control(spdy.SYN_REPLY, b"\x00\x00\x00\x01garbage"), "does not decompress"),
        (control(spdy.SETTINGS, b"\x00\x00\x00\x02" + b"\x00" * 8), "does not match its count"),
    ],
)
def test_malformed_frames_are_refused(wire: bytes, why: str) -> None:
    with pytest.raises(spdy.SpdyError, match=why):
        spdy.FrameReader().feed(wire)


def test_a_frame_over_the_limit_is_refused_before_it_is_buffered() -> None:
    reader = spdy.FrameReader(max_frame=1024)
    with pytest.raises(spdy.SpdyError, match="over the limit"):
        reader.feed(struct.pack(">II", 1, 4096))


def test_a_header_block_that_inflates_too_far_is_refused() -> None:
    """A small compressed block that would inflate past MAX_HEADER_BLOCK (a zip bomb) is refused."""
    block = spdy.encode_header_block({"x": ["a" * (spdy.MAX_HEADER_BLOCK + 10)]})
    deflate = zlib.compressobj(9, zlib.DEFLATED, 15, 8, zlib.Z_DEFAULT_STRATEGY, spdy.HEADER_DICTIONARY)
    compressed = deflate.compress(block) + deflate.flush(zlib.Z_SYNC_FLUSH)
    assert len(compressed) < 10_000
    with pytest.raises(spdy.SpdyError, match="too large"):
        spdy.FrameReader().feed(control(spdy.SYN_REPLY, b"\x00\x00\x00\x01" + compressed))


@pytest.mark.parametrize(
    ("block", "why"),
    [
        (b"\x00\x00\x00\x01\x00\x00\x00\x01X\x00\x00\x00\x00", "not lower case"),
        (b"\x00\x00\x00\x02" + (b"\x00\x00\x00\x01a\x00\x00\x00\x00") * 2, "duplicate header"),
        (b"\x00\x00\x00\x01\x00\x00\x00\x00", "invalid header name length"),
        (b"\x00\x00\x00\x01\x00\x00\x00\x01a\x00\x00\x00\x09ab", "invalid header value length"),
        (b"\x00\x00\x00\x00extra", "trailing bytes"),
        (b"\x00\x00", "malformed header block"),
    ],
)
def test_malformed_header_blocks_are_refused(block: bytes, why: str) -> None:
    with pytest.raises(spdy.SpdyError, match=why):
        spdy.decode_header_block(block)


@given(st.binary(max_size=300))
@settings(max_examples=300)
def test_any_bytes_give_frames_or_spdy_error(junk: bytes) -> None:
    try:
        spdy.FrameReader().feed(junk)
    except spdy.SpdyError:
        pass


@given(headers)
def test_header_blocks_round_trip(h: dict[str, list[str]]) -> None:
    assert spdy.decode_header_block(spdy.encode_header_block(h)) == h
