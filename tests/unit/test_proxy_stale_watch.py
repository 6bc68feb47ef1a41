"""The runner says when the cached peer list has gone stale, also when the subscription flapped first (came
back without a fresh list, then dropped again): the tolerance restarts at the second drop, and the log must
still come once it has passed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import structlog

from vplane.kube.proxyconfig import ProxyTarget
from vplane.proxy.peers import PeerSettings
from vplane.proxy.runner import PeerInfo, PeerSnapshot, ProxyRunner
from vplane.proxy.settings import ProxySettings

STALE = "peer watch subscription is down and no fresh netmap is available"
TARGET = ProxyTarget("example.com", "v1", "target", "default", "owned", resources=("myresources",))
PEER = PeerInfo(
    "n1", "target-0", {"vplane.io/tenant": "target", "vplane.io/project": "default"}, ("127.0.0.1:1",)
)


async def _dial(peer_id: str, factory: object) -> object:
    raise OSError("no dials in this test")


async def _namespace_exists(name: str) -> bool:
    return True


def fed_runner(snapshots: asyncio.Queue[PeerSnapshot], peers: PeerSettings) -> ProxyRunner:
    """A runner whose platform subscription delivers what the test puts in ``snapshots``."""

    async def feed() -> AsyncIterator[PeerSnapshot]:
        while True:
            yield await snapshots.get()

    return ProxyRunner(
        [TARGET],
        client_name="client",
        client_project="default",
        access_key=lambda: "key",
        dial=_dial,  # type: ignore[arg-type]
        feed=feed,
        namespace_exists=_namespace_exists,
        settings=ProxySettings(peers=peers),
    )


async def test_stale_is_logged_after_a_flapping_subscription() -> None:
    snapshots: asyncio.Queue[PeerSnapshot] = asyncio.Queue()
    runner = fed_runner(snapshots, PeerSettings(stale_after_seconds=0.3, startup_sync_seconds=5))
    with structlog.testing.capture_logs() as logs:
        await runner.start()
        try:
            await snapshots.put(PeerSnapshot(True, 1, (PEER,)))
            await asyncio.sleep(0.05)
            await snapshots.put(PeerSnapshot(False, 1, (PEER,)))  # the subscription drops
            await asyncio.sleep(0.15)
            await snapshots.put(PeerSnapshot(True, 1, (PEER,)))  # back, but no fresh list yet
            await asyncio.sleep(0.05)
            await snapshots.put(PeerSnapshot(False, 1, (PEER,)))  # and down again
            async with asyncio.timeout(5):
                while not [e for e in logs if STALE in e["event"]]:  # noqa: ASYNC110 - a log, no event
                    await asyncio.sleep(0.05)
        finally:
            await runner.stop()
    (line,) = [e for e in logs if STALE in e["event"]]
    assert line["log_level"] == "error" and line["lastNetmapAge"].endswith("s")
    assert runner.proxies[0].cache.stale()


async def test_a_live_subscription_before_its_first_list_is_no_list() -> None:
    """Registered with the platform but no netmap yet (seq 0): the cache has no list, rather than an empty
    one (which would read as synced and fail the start-up probe with ``no_peer``)."""
    snapshots: asyncio.Queue[PeerSnapshot] = asyncio.Queue()
    runner = fed_runner(snapshots, PeerSettings(startup_sync_seconds=5))
    proxy = runner.proxies[0]
    await runner.start()
    try:
        await snapshots.put(PeerSnapshot(True, 0, ()))
        await snapshots.put(PeerSnapshot(True, 1, (PEER,)))
        async with asyncio.timeout(5):
            await proxy.first_list.wait()
        assert proxy.cache.publications == 1  # the seq-0 snapshot was not taken for a list
        assert [h.name for h in proxy.cache.hosts()] == ["target-0"]
    finally:
        await runner.stop()
