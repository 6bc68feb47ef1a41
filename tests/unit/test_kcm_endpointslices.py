"""EndpointSlices planned purely: endpoints and their conditions, grouping by resolved ports, packing at the
per-slice maximum, rewriting in place, placeholders, labels, and the tracker that waits for the cache."""

from __future__ import annotations

from typing import Any

from vplane.controllers.kcm import endpointslices as es
from vplane.controllers.kcm.endpoints import HEADLESS


def service(**spec: Any) -> dict:
    body = {
        "selector": {"app": "web"},
        "clusterIP": "10.96.0.10",
        "ipFamilies": ["IPv4"],
        "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
        **spec,
    }
    return {
        "metadata": {"name": "web", "namespace": "ns", "uid": "svc-uid", "labels": {"tier": "front"}},
        "spec": body,
    }


def pod(
    name: str, ip: str | None, *, ready: bool = True, deleting: bool = False, port: int = 8080, **spec: Any
) -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": {"app": "web"}}
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    status: dict[str, Any] = {"phase": "Running", "conditions": [{"type": "Ready", "status": str(ready)}]}
    if ip:
        status["podIP"] = ip
        status["podIPs"] = [{"ip": ip}]
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "c", "ports": [{"name": "http", "containerPort": port}]}], **spec},
        "status": status,
    }


def with_names(slices: list[dict]) -> list[dict]:
    for i, s in enumerate(slices):
        s["metadata"]["name"] = f"web-{i}"
    return slices


def test_endpoint_fields_and_conditions() -> None:
    svc = service()
    ready = es.pod_to_endpoint(pod("a", "10.0.0.1", nodeName="n1"), svc, "IPv4", "zone-a")
    assert ready == {
        "addresses": ["10.0.0.1"],
        "conditions": {"ready": True, "serving": True, "terminating": False},
        "targetRef": {"kind": "Pod", "namespace": "ns", "name": "a", "uid": "uid-a"},
        "nodeName": "n1",
        "zone": "zone-a",
    }
    terminating = es.pod_to_endpoint(pod("b", "10.0.0.2", deleting=True), svc, "IPv4", None)
    assert terminating["conditions"] == {"ready": False, "serving": True, "terminating": True}
    published = es.pod_to_endpoint(
        pod("c", "10.0.0.3", ready=False), service(publishNotReadyAddresses=True), "IPv4", None
    )
    assert published["conditions"] == {"ready": True, "serving": False, "terminating": False}
    named = es.pod_to_endpoint(pod("d", "10.0.0.4", hostname="d", subdomain="web"), svc, "IPv4", None)
    assert named["hostname"] == "d"


def test_one_slice_with_labels_ports_and_owner() -> None:
    change = es.plan(
        service(), [pod("a", "10.0.0.1"), pod("b", "10.0.0.2", ready=False), pod("x", None)], [], 100
    )
    (created,) = change.create
    assert created["addressType"] == "IPv4"
    assert created["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    assert [e["addresses"] for e in created["endpoints"]] == [["10.0.0.1"], ["10.0.0.2"]]
    assert created["metadata"]["generateName"] == "web-"
    assert created["metadata"]["labels"] == {
        "tier": "front",
        "kubernetes.io/service-name": "web",
        "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
    }
    assert created["metadata"]["ownerReferences"][0] == {
        "apiVersion": "v1",
        "kind": "Service",
        "name": "web",
        "uid": "svc-uid",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    headless = es.plan(service(clusterIP="None"), [pod("a", "10.0.0.1")], [], 100).create[0]
    assert headless["metadata"]["labels"][HEADLESS] == ""


def test_no_pods_leaves_one_placeholder_and_keeps_it() -> None:
    change = es.plan(service(), [], [], 100)
    (placeholder,) = change.create
    assert placeholder["endpoints"] == [] and placeholder["ports"] == []
    existing = with_names([placeholder])
    assert es.plan(service(), [], existing, 100).empty


def test_packing_respects_the_maximum_and_fills_before_creating() -> None:
    pods = [pod(f"p{i:02d}", f"10.0.0.{i + 1}") for i in range(7)]
    first = es.plan(service(), pods, [], 3)
    assert [len(s["endpoints"]) for s in first.create] == [3, 3, 1]
    existing = with_names(first.create)
    assert es.plan(service(), pods, existing, 3).empty
    grown = es.plan(service(), [*pods, pod("p07", "10.0.0.8")], existing, 3)
    assert not grown.create and not grown.delete
    (filled,) = grown.update  # the new endpoint joins the slice with room, nothing else is rewritten
    assert filled["metadata"]["name"] == "web-2" and len(filled["endpoints"]) == 2


def test_changes_rewrite_the_slice_that_holds_the_endpoint() -> None:
    pods = [pod(f"p{i}", f"10.0.0.{i + 1}") for i in range(4)]
    existing = with_names(es.plan(service(), pods, [], 2).create)
    pods[3] = pod("p3", "10.0.0.4", ready=False)
    change = es.plan(service(), pods, existing, 2)
    (rewritten,) = change.update
    assert rewritten["metadata"]["name"] == "web-1"
    assert [e["conditions"]["ready"] for e in rewritten["endpoints"]] == [True, False]
    gone = es.plan(service(), pods[:2], existing, 2)
    assert [s["metadata"]["name"] for s in gone.delete] == ["web-1"] and not gone.update


def test_port_groups_and_address_type_changes() -> None:
    svc = service()
    pods = [pod("a", "10.0.0.1"), pod("b", "10.0.0.2", port=9090)]
    change = es.plan(svc, pods, [], 100)
    assert sorted(s["ports"][0]["port"] for s in change.create) == [8080, 9090]
    existing = with_names(change.create)
    v6 = es.plan(service(ipFamilies=["IPv6"], clusterIP="fd00::10"), [pod("a", "fd00::1")], existing, 100)
    assert len(v6.delete) == 2 and v6.create[0]["addressType"] == "IPv6"


def test_service_label_changes_rewrite_labels_only() -> None:
    existing = with_names(es.plan(service(), [pod("a", "10.0.0.1")], [], 100).create)
    relabelled = service()
    relabelled["metadata"]["labels"] = {"tier": "back", "kubernetes.io/service-name": "spoofed"}
    (updated,) = es.plan(relabelled, [pod("a", "10.0.0.1")], existing, 100).update
    assert updated["metadata"]["labels"]["tier"] == "back"
    assert updated["metadata"]["labels"]["kubernetes.io/service-name"] == "web"


def test_tracker_waits_for_the_cache_to_show_our_writes() -> None:
    tracker = es.SliceTracker()
    tracker.wrote("ns/web", {"metadata": {"name": "web-1", "generation": 2}})
    tracker.deleted("ns/web", "web-0")
    old = {
        "web-0": {"metadata": {"name": "web-0"}},
        "web-1": {"metadata": {"name": "web-1", "generation": 1}},
    }
    assert tracker.stale("ns/web", old)
    caught_up = {"web-1": {"metadata": {"name": "web-1", "generation": 2}}}
    assert not tracker.stale("ns/web", caught_up)
    assert not tracker.stale("ns/web", {})  # forgotten once seen
