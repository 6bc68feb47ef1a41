"""The API server's request series: upstream's names, labels, verbs and buckets."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from vplane.apiserver.requestmetrics import RequestMetrics, reported_verb
from vplane.kube import requestinfo


def _info(method: str, path: str, watch: bool = False) -> requestinfo.RequestInfo:
    return requestinfo.parse(method, path, watch)


def test_verbs_are_reported_as_upstream_does() -> None:
    one = "/api/v1/namespaces/ns/pods/p"
    assert reported_verb("GET", _info("GET", one), "") == "GET"
    assert reported_verb("GET", _info("GET", "/api/v1/pods"), "") == "LIST"
    assert reported_verb("GET", _info("GET", "/api/v1/pods", True), "") == "WATCH"
    assert reported_verb("PATCH", _info("PATCH", one), "application/apply-patch+yaml") == "APPLY"
    assert reported_verb("PATCH", _info("PATCH", one), "application/merge-patch+json") == "PATCH"
    assert reported_verb("DELETE", _info("DELETE", "/api/v1/namespaces/ns/pods"), "") == "DELETECOLLECTION"
    assert reported_verb("POST", _info("POST", one + "/exec"), "") == "CONNECT"
    assert reported_verb("GET", _info("GET", one + "/proxy/x"), "") == "CONNECT"
    assert reported_verb("HEAD", _info("HEAD", "/healthz"), "") == "GET"


def _samples(metrics: RequestMetrics) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def test_requests_are_counted_by_code_and_timed_unless_long_running() -> None:
    m = RequestMetrics()
    get = _info("GET", "/api/v1/namespaces/ns/configmaps/c")
    for code, seconds in ((200, 0.003), (200, 0.3), (404, 0.001)):
        m.end(m.begin("GET", get), code, seconds)
    watch = _info("GET", "/api/v1/configmaps", True)
    open_watch = m.begin("GET", watch)
    post = _info("POST", "/api/v1/namespaces/ns/configmaps")
    m.end(m.begin("POST", post), 201, 0.01, dry_run=True, info=post)
    s = _samples(m)
    totals = {(x["verb"], x["code"], x["scope"], x["dry_run"]): v for x, v in s["apiserver_request_total"]}
    assert totals == {
        ("GET", "200", "resource", ""): 2,
        ("GET", "404", "resource", ""): 1,
        ("POST", "201", "namespace", "All"): 1,
    }
    labels = next(x for x, _ in s["apiserver_request_total"] if x["verb"] == "GET")
    assert labels == {
        "code": "200",
        "component": "apiserver",
        "dry_run": "",
        "group": "",
        "resource": "configmaps",
        "scope": "resource",
        "subresource": "",
        "verb": "GET",
        "version": "v1",
    }
    buckets = {x["le"]: v for x, v in s["apiserver_request_duration_seconds_bucket"] if x["verb"] == "GET"}
    assert (buckets["0.005"], buckets["0.2"], buckets["0.4"], buckets["+Inf"]) == (2, 2, 3, 3)
    assert not any(x["verb"] == "WATCH" for x, _ in s["apiserver_request_duration_seconds_count"])
    assert s["apiserver_longrunning_requests"] == [({}, 1.0)]
    assert dict((x["request_kind"], v) for x, v in s["apiserver_current_inflight_requests"]) == {
        "mutating": 0.0,
        "readOnly": 0.0,
    }
    m.end(open_watch, 200, 30.0)
    s = _samples(m)
    assert s["apiserver_longrunning_requests"] == [({}, 0.0)]
    assert any(x["verb"] == "WATCH" and v == 1 for x, v in s["apiserver_request_total"])
    assert "process_resident_memory_bytes" in s


def test_the_remembered_request_shapes_are_bounded_and_counting_survives_their_eviction() -> None:
    m = RequestMetrics()
    m.CACHE_LIMIT = 3
    for i in range(10):  # ten object names: ten request shapes, one label set
        m.end(m.begin("GET", _info("GET", f"/api/v1/namespaces/ns/configmaps/c{i}")), 200, 0.001)
    assert len(m._by_request) <= 3
    (series,) = m.series.values()
    assert series.codes == {200: 10} and series.counts[-1] == 10
