"""The kubelet's side of a container keeper's attach connection (``vplane.runtime.cri.AttachSession``):
the keeper closes right after its exit frame, and the frames before it must survive however that close
reaches the kubelet."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import struct
from collections.abc import Iterator

import pytest

from vplane.kube import remotecommand as rc
from vplane.runtime import streams
from vplane.runtime.cri import EXIT, STDOUT, AttachSession, RunningContainer

HEADER = struct.Struct(">BI")
FRAMES = HEADER.pack(STDOUT, 8) + b"got abc\n" + HEADER.pack(EXIT, 15) + b'{"exitCode": 4}'


@pytest.fixture
def address() -> Iterator[tuple[str, socket.socket]]:
    name = f"\0vplane-test-attach-{os.getpid()}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(name)
    listener.listen(1)
    with listener:
        yield name, listener


async def _until_closing(session: AttachSession) -> None:
    transport = session._writer.transport
    # the reader has seen the data and the connection's loss (the transport has no event for it)
    while not transport.is_closing():  # noqa: ASYNC110
        await asyncio.sleep(0.01)


async def test_a_reset_after_the_exit_frame_keeps_what_came_before_it(
    address: tuple[str, socket.socket],
) -> None:
    """The keeper closes without reading the end of input sent meanwhile: a reset."""
    name, listener = address
    session = await AttachSession.open(name)
    keeper, _ = listener.accept()
    with keeper:
        await session.close_stdin()  # never read by the keeper
        await asyncio.sleep(0)
        keeper.sendall(FRAMES)
    await _until_closing(session)
    assert await session.read() == (STDOUT, b"got abc\n")
    assert await session.read() == (EXIT, b'{"exitCode": 4}')
    assert await session.read() is None
    await session.close()


async def test_a_write_after_the_keeper_closed_keeps_what_came_before_it(
    address: tuple[str, socket.socket],
) -> None:
    """The client ends its input after the keeper closed: a broken pipe, with the exit frame unread."""
    name, listener = address
    session = await AttachSession.open(name)
    keeper, _ = listener.accept()
    with keeper:
        keeper.sendall(FRAMES)
    assert await session.read() == (STDOUT, b"got abc\n")  # (the exit frame came with it)
    with contextlib.suppress(ConnectionError):
        await session.close_stdin()
    await _until_closing(session)
    assert await session.read() == (EXIT, b'{"exitCode": 4}')
    assert await session.read() is None
    await session.close()


class _Client:
    """A remote-command client that ends its input once the container's output has reached the kubelet,
    and takes that output only after its next read: the end of its input is handled while the output is
    still being relayed."""

    protocol = rc.V5

    def __init__(self) -> None:
        self.sent: list[tuple[int, bytes]] = []
        self.reads = 0
        self.sending = asyncio.Event()
        self.release = asyncio.Event()

    async def send(self, channel: int, data: bytes) -> None:
        self.sending.set()
        await self.release.wait()
        self.sent.append((channel, data))

    async def receive(self) -> tuple[int, bytes | None] | None:
        self.reads += 1
        if self.reads == 1:
            await self.sending.wait()
            return rc.STDIN, None  # its end of input
        self.release.set()
        await asyncio.Event().wait()  # then nothing until it goes
        return None

    async def close(self) -> None:
        return None


class _Runtime:
    def __init__(self, address: tuple[str, socket.socket]) -> None:
        self.address = address

    async def attach(self, namespace: str, pod: str, container: str) -> AttachSession:
        """A keeper whose container has exited by the time the client's input ends."""
        name, listener = self.address
        session = await AttachSession.open(name)
        keeper, _ = listener.accept()
        with keeper:
            keeper.sendall(FRAMES)
        return session


async def test_input_for_a_keeper_that_went_does_not_cut_the_output(
    address: tuple[str, socket.socket],
) -> None:
    running = RunningContainer("ns", "asker", "asker", "id", 1, False, True, True, address[0], None)
    client = _Client()
    options = rc.StreamOptions(stdin=True, stdout=True, stderr=True, tty=False)
    await asyncio.wait_for(streams.serve_attach(client, _Runtime(address), running, options), 10)  # type: ignore[arg-type]
    assert client.sent == [
        (rc.STDOUT, b"got abc\n"),
        (rc.ERROR, json.dumps(rc.success_status()).encode()),
    ]
