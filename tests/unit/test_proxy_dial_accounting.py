"""Which failed dials count towards a peer's quarantine: the peer's own (``error``, ``timeout``), not
those of this replica's own platform connection (``ts_server_unavailable``: no peer was contacted)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_proxy_internal_fetch import PEER, make
from test_proxy_upstream import FakeTarget

from vplane.proxy.metrics import ProxyMetrics
from vplane.proxy.peers import HostState
from vplane.proxy.upstream import ProtocolFactory, TransportUnavailable


class FailingDials(FakeTarget):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    async def dial(self, peer_id: str, factory: ProtocolFactory) -> tuple[asyncio.BaseTransport, Any]:
        self.dials += 1
        raise self.error


def dial_failures(metrics: ProxyMetrics) -> list[str]:
    return [
        line
        for line in metrics.render().decode().splitlines()
        if line.startswith("vcluster_proxy_peer_dial_failures_total{")
    ]


@pytest.mark.parametrize(
    ("error", "reason", "quarantined"),
    [
        (TransportUnavailable("the mesh session to the coordinator is down"), "ts_server_unavailable", 0),
        (ConnectionRefusedError("connection refused"), "error", 1),
    ],
)
async def test_only_the_peers_own_failures_quarantine_it(
    error: Exception, reason: str, quarantined: int
) -> None:
    target = FailingDials(error)
    proxy, metrics = make(target, budget=5.0)
    proxy.publish([PEER])
    for _ in range(3):
        assert await proxy.probe() is False
    assert target.dials == 3
    assert proxy.cache.counts()[HostState.QUARANTINED] == quarantined
    assert any(f'reason="{reason}"' in line and line.endswith(" 3.0") for line in dial_failures(metrics))
