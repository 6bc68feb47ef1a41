"""``/metrics``: the API server's own request series, as kube-apiserver names them, for Prometheus and
``kubectl get --raw /metrics``.

- ``apiserver_request_total`` (counter; ``code``, ``component``, ``dry_run``, ``group``, ``resource``,
  ``scope``, ``subresource``, ``verb``, ``version``) for every request that reached the handlers, and
  ``apiserver_request_duration_seconds`` (histogram, upstream's buckets; the same labels without
  ``code``) for those that are not long-running (watches and connections such as exec and proxy are counted,
  not timed, as upstream does);
- ``apiserver_current_inflight_requests{request_kind="readOnly"|"mutating"}`` and
  ``apiserver_longrunning_requests`` (the watches and connections open now);
- the process's own series (``process_cpu_seconds_total``, ``process_resident_memory_bytes``, ...).

The verb is upstream's reported verb: ``GET``, ``LIST``, ``WATCH``, ``POST``, ``PUT``, ``PATCH``, ``APPLY``
(a server-side apply patch), ``DELETE``, ``DELETECOLLECTION``, ``CONNECT`` (subresources that proxy or
stream); the scope ``resource`` (a named object), ``namespace``, ``cluster`` or empty (not a resource).

Every request pays for this, so the counts are plain integers kept per label set (no locks: one event loop)
and turned into metric families only when scraped; a request costs a tuple and two dict updates.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from vplane.kube.requestinfo import RequestInfo

BUCKETS = (
    0.005,
    0.025,
    0.05,
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1.0,
    1.25,
    1.5,
    2,
    3,
    4,
    5,
    6,
    8,
    10,
    15,
    20,
    30,
    45,
    60,
)
"""kube-apiserver's buckets for ``apiserver_request_duration_seconds``."""
CONTENT_TYPE = CONTENT_TYPE_LATEST
LABELS = ("component", "dry_run", "group", "resource", "scope", "subresource", "verb", "version")
CONNECT_SUBRESOURCES = frozenset({"exec", "attach", "portforward", "proxy"})
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
LONG_RUNNING = frozenset({"WATCH", "CONNECT"})
APPLY_TYPE = "application/apply-patch"

Key = tuple[str, str, str, str, str, str, str, str]


def reported_verb(method: str, info: RequestInfo, content_type: str) -> str:
    """Upstream's ``cleanVerb``: the verb a request is counted under."""
    if info.is_resource and info.subresource in CONNECT_SUBRESOURCES:
        return "CONNECT"
    if info.is_resource and info.verb in ("list", "watch", "deletecollection"):
        return info.verb.upper()
    if method == "PATCH" and content_type.startswith(APPLY_TYPE):
        return "APPLY"
    return method.upper() if method != "HEAD" else "GET"


def scope(info: RequestInfo) -> str:
    if not info.is_resource:
        return ""
    if info.name:
        return "resource"
    return "namespace" if info.namespace else "cluster"


class Series:
    """One label set's numbers: responses by code, and (unless long-running) the duration buckets."""

    __slots__ = ("codes", "counts", "key", "kind")

    def __init__(self, key: Key, kind: str) -> None:
        self.key = key
        self.kind = kind
        """``readOnly`` or ``mutating``; empty for a long-running request (counted, not timed)."""
        self.codes: dict[int, int] = {}
        self.counts = [0.0] * (len(BUCKETS) + 3)
        """One count per bucket (not cumulative, +Inf last), then the sum and the count."""


class RequestMetrics:
    """The counts behind ``/metrics``: :meth:`begin` when a request starts, :meth:`end` when it is answered.
    The label set of a request is worked out once per method and path shape and remembered (bounded)."""

    CACHE_LIMIT = 4096

    def __init__(self, component: str = "apiserver") -> None:
        self.component = component
        self.series: dict[Key, Series] = {}
        self._by_request: dict[tuple[str, str, str, bool], Series] = {}
        self.inflight = {"readOnly": 0, "mutating": 0}
        self.longrunning = 0
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(ProcessCollector(registry=None))
        self.registry.register(self)

    def begin(self, method: str, info: RequestInfo, content_type: str = "") -> Series:
        """A request starts: counted in flight. ``content_type`` matters for PATCH only (apply)."""
        apply = method == "PATCH" and content_type.startswith(APPLY_TYPE)
        cached = (method, info.path, info.verb, apply)
        series = self._by_request.get(cached)
        if series is None:
            series = self._series(reported_verb(method, info, content_type), method, info, "")
            if len(self._by_request) >= self.CACHE_LIMIT:
                self._by_request.clear()
            self._by_request[cached] = series
        if series.kind:
            self.inflight[series.kind] += 1
        else:
            self.longrunning += 1
        return series

    def _series(self, verb: str, method: str, info: RequestInfo, dry_run: str) -> Series:
        key: Key = (
            self.component,
            dry_run,
            info.group,
            info.resource,
            scope(info),
            info.subresource,
            verb,
            info.version,
        )
        series = self.series.get(key)
        if series is None:
            kind = "" if verb in LONG_RUNNING else "mutating" if method in MUTATING else "readOnly"
            series = self.series[key] = Series(key, kind)
        return series

    def end(
        self,
        series: Series,
        code: int,
        seconds: float,
        dry_run: bool = False,
        info: RequestInfo | None = None,
    ) -> None:
        if series.kind:
            self.inflight[series.kind] -= 1
        else:
            self.longrunning -= 1
        if dry_run and info is not None:  # rare: its own label set
            key = series.key
            series = self._series(key[6], "POST" if series.kind == "mutating" else "GET", info, "All")
        series.codes[code] = series.codes.get(code, 0) + 1
        if series.kind:
            counts = series.counts
            counts[bisect.bisect_left(BUCKETS, seconds)] += 1
            counts[-2] += seconds
            counts[-1] += 1

    def collect(self) -> Iterator[Any]:
        total = CounterMetricFamily(
            "apiserver_request",
            "Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, "
            "scope, component, and HTTP response code.",
            labels=("code", *LABELS),
        )
        for key, series in sorted(self.series.items()):
            for code, value in sorted(series.codes.items()):
                total.add_metric((str(code), *key), value)
        yield total
        duration = HistogramMetricFamily(
            "apiserver_request_duration_seconds",
            "Response latency distribution in seconds for each verb, dry run value, group, version, resource, "
            "subresource, scope and component.",
            labels=LABELS,
        )
        for key, series in sorted(self.series.items()):
            counts = series.counts
            if not series.kind or not counts[-1]:
                continue
            cumulative, running = [], 0.0
            for bound, count in zip((*BUCKETS, float("inf")), counts, strict=False):
                running += count
                cumulative.append((floatToGoString(bound), running))  # type: ignore[no-untyped-call]
            duration.add_metric(list(key), cumulative, sum_value=counts[-2])
        yield duration
        inflight = GaugeMetricFamily(
            "apiserver_current_inflight_requests",
            "Maximal number of currently used inflight request limit of this apiserver per request kind in last "
            "second.",
            labels=("request_kind",),
        )
        for kind, value in sorted(self.inflight.items()):
            inflight.add_metric((kind,), value)
        yield inflight
        longrunning = GaugeMetricFamily(
            "apiserver_longrunning_requests",
            "Gauge of all active long-running apiserver requests (watches and connections).",
        )
        longrunning.add_metric((), self.longrunning)
        yield longrunning

    def render(self) -> bytes:
        return generate_latest(self.registry)
