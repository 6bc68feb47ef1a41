"""The 15 ``vcluster_proxy_*`` series (spec §7), on a registry of their own per replica.

Every series carries ``target="<project>/<name>"`` (the target's platform project name). Counters appear
after their first event; the peer gauges are computed at scrape time from the peer caches, so an expired
quarantine already reads as ``half_open`` and all three states are always present.

Decisions recorded (docs/resource-proxy.md): ``verb`` is the Kubernetes request verb (get, list, watch,
create, update, patch, delete, deletecollection); ``code`` is the numeric HTTP status as a string; the
histogram buckets end at the 60 s request cap and the 5 s dial timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from vplane.proxy.peers import HostState, PeerCache

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0)
DIAL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass(frozen=True)
class CacheView:
    target: str
    group_version: str
    cache: PeerCache


class _PeerCollector(Collector):
    def __init__(self, views: Callable[[], Iterable[CacheView]]) -> None:
        self._views = views

    def collect(self) -> Iterable[GaugeMetricFamily]:
        peers = GaugeMetricFamily(
            "vcluster_proxy_peers",
            "Target peer hosts per health state, computed at scrape time.",
            labels=["target", "group_version", "state"],
        )
        synced = GaugeMetricFamily(
            "vcluster_proxy_peer_cache_synced",
            "1 when a current, trusted peer snapshot exists (even an empty one), else 0.",
            labels=["target", "group_version"],
        )
        age = GaugeMetricFamily(
            "vcluster_proxy_peer_list_age_seconds",
            "Seconds since the platform last published the target's peer list.",
            labels=["target", "group_version"],
        )
        for view in self._views():
            counts = view.cache.counts()
            for state in HostState:
                peers.add_metric([view.target, view.group_version, state.value], counts[state])
            synced.add_metric([view.target, view.group_version], 1.0 if view.cache.synced() else 0.0)
            list_age = view.cache.list_age()
            if list_age is not None:
                age.add_metric([view.target, view.group_version], list_age)
        yield peers
        yield synced
        yield age


class ProxyMetrics:
    def __init__(self, views: Callable[[], Iterable[CacheView]]) -> None:
        # Process-wide in prometheus-client: the `_created` series are noise next to the runbook's 15.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self.requests = Counter(
            "vcluster_proxy_request",
            "Proxied requests by outcome.",
            ["target", "group_version", "verb", "code", "reason"],
            registry=r,
        )
        self.request_duration = Histogram(
            "vcluster_proxy_request_duration_seconds",
            "End-to-end duration of non-watch proxied requests.",
            ["target", "verb"],
            buckets=REQUEST_BUCKETS,
            registry=r,
        )
        self.terminations = Counter(
            "vcluster_proxy_request_terminations",
            "Requests the proxy ended itself.",
            ["target", "reason"],
            registry=r,
        )
        self.inflight = Gauge(
            "vcluster_proxy_inflight_requests", "Non-watch requests in flight.", ["target"], registry=r
        )
        self.discovery_fallbacks = Counter(
            "vcluster_proxy_discovery_fallbacks",
            "Discovery answered from the local fallback document.",
            ["target", "group_version", "reason"],
            registry=r,
        )
        self.quarantines = Counter(
            "vcluster_proxy_peer_quarantines", "Peer hosts taken out of rotation.", ["target"], registry=r
        )
        self.all_quarantined = Counter(
            "vcluster_proxy_target_all_peers_quarantined",
            "Quarantines that left no selectable peer host.",
            ["target"],
            registry=r,
        )
        self.recoveries = Counter(
            "vcluster_proxy_peer_recoveries",
            "Previously failing tracked peer hosts that dialled successfully.",
            ["target"],
            registry=r,
        )
        self.dial_failures = Counter(
            "vcluster_proxy_peer_dial_failures",
            "Failed dials, and requests rejected before any dial.",
            ["target", "reason"],
            registry=r,
        )
        self.dial_duration = Histogram(
            "vcluster_proxy_peer_dial_duration_seconds",
            "Duration of attempted peer dials.",
            ["target"],
            buckets=DIAL_BUCKETS,
            registry=r,
        )
        self.active_watches = Gauge(
            "vcluster_proxy_active_watches", "Open proxied watch streams.", ["target"], registry=r
        )
        self.watch_events = Counter(
            "vcluster_proxy_watch_events",
            "Events relayed in uncompressed JSON and CBOR-sequence watch streams.",
            ["target"],
            registry=r,
        )
        r.register(_PeerCollector(views))

    def add_target(self, target: str) -> None:
        """Gauges of a target exist from the start (zero), counters from their first event."""
        self.inflight.labels(target)
        self.active_watches.labels(target)

    def render(self) -> bytes:
        return generate_latest(self.registry)
