"""Endpoints from Services and pods, decided purely: eligibility, ready and not-ready addresses, named
target ports, repacking, truncation, the last-change trigger time."""

from __future__ import annotations

from vplane.controllers.kcm.endpoints import (
    TriggerTimeTracker,
    pod_endpoints_changed,
    repack,
    subsets_for,
    truncate,
)
from vplane.controllers.kcm.timefmt import format_time

T0 = 1_700_000_000.0


def service(ports: list[dict] | None = None, **spec: object) -> dict:
    return {
        "metadata": {"name": "web", "namespace": "ns", "creationTimestamp": format_time(T0)},
        "spec": {
            "selector": {"app": "web"},
            "ports": ports
            if ports is not None
            else [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
            **spec,
        },
    }


def pod(
    name: str,
    ip: str | None,
    *,
    ready: bool = True,
    phase: str = "Running",
    ready_at: float = T0,
    deleting: bool = False,
    port: int = 8080,
) -> dict:
    status: dict = {
        "phase": phase,
        "conditions": [
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "lastTransitionTime": format_time(ready_at),
            }
        ],
    }
    if ip:
        status["podIP"] = ip
        status["podIPs"] = [{"ip": ip}]
    meta: dict = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": {"app": "web"}}
    if deleting:
        meta["deletionTimestamp"] = format_time(T0)
    return {
        "metadata": meta,
        "spec": {
            "nodeName": "node-1",
            "containers": [
                {"name": "c", "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}]}
            ],
        },
        "status": status,
    }


def ips(addresses: list[dict] | None) -> list[str]:
    return [a["ip"] for a in addresses or []]


def test_ready_and_not_ready_addresses_with_a_named_port() -> None:
    pods = [pod("b", "10.0.0.2"), pod("a", "10.0.0.1"), pod("c", "10.0.0.3", ready=False)]
    subsets, ready, not_ready = subsets_for(service(), pods)
    assert (ready, not_ready) == (2, 1)
    (subset,) = subsets
    assert ips(subset["addresses"]) == ["10.0.0.1", "10.0.0.2"]
    assert ips(subset["notReadyAddresses"]) == ["10.0.0.3"]
    assert subset["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    assert subset["addresses"][0]["targetRef"] == {
        "kind": "Pod",
        "namespace": "ns",
        "name": "a",
        "uid": "uid-a",
    }
    assert subset["addresses"][0]["nodeName"] == "node-1"


def test_pods_without_ip_finished_or_deleting_are_left_out() -> None:
    pods = [
        pod("noip", None),
        pod("done", "10.0.0.5", phase="Succeeded"),
        pod("going", "10.0.0.6", deleting=True),
        pod("ok", "10.0.0.7"),
    ]
    subsets, _, _ = subsets_for(service(), pods)
    assert [ips(s.get("addresses")) for s in subsets] == [["10.0.0.7"]]


def test_publish_not_ready_addresses_makes_every_address_ready() -> None:
    pods = [pod("a", "10.0.0.1", ready=False), pod("going", "10.0.0.2", deleting=True)]
    subsets, ready, not_ready = subsets_for(service(publishNotReadyAddresses=True), pods)
    assert (ready, not_ready) == (2, 0)
    assert ips(subsets[0]["addresses"]) == ["10.0.0.1", "10.0.0.2"]


def test_pods_with_different_ports_go_to_different_subsets() -> None:
    pods = [pod("a", "10.0.0.1", port=8080), pod("b", "10.0.0.2", port=9090)]
    subsets, _, _ = subsets_for(service(), pods)
    assert [(ips(s["addresses"]), s["ports"][0]["port"]) for s in subsets] == [
        (["10.0.0.1"], 8080),
        (["10.0.0.2"], 9090),
    ]


def test_numeric_target_port_and_two_service_ports_share_a_subset() -> None:
    ports = [
        {"name": "a", "port": 80, "targetPort": 8080, "protocol": "TCP"},
        {"name": "b", "port": 443, "targetPort": 8443, "protocol": "TCP"},
    ]
    subsets, ready, _ = subsets_for(service(ports), [pod("a", "10.0.0.1"), pod("b", "10.0.0.2")])
    assert ready == 4
    (subset,) = subsets
    assert ips(subset["addresses"]) == ["10.0.0.1", "10.0.0.2"]
    assert [p["port"] for p in subset["ports"]] == [8080, 8443]


def test_headless_service_without_ports_lists_addresses() -> None:
    subsets, ready, _ = subsets_for(service([], clusterIP="None"), [pod("a", "10.0.0.1")])
    assert ready == 1
    assert subsets == [{"addresses": subsets[0]["addresses"]}]
    subsets, ready, _ = subsets_for(service([]), [pod("a", "10.0.0.1")])
    assert (subsets, ready) == ([], 0)


def test_hostname_is_set_for_the_subdomain_service() -> None:
    p = pod("a", "10.0.0.1")
    p["spec"].update(hostname="a-0", subdomain="web")
    subsets, _, _ = subsets_for(service(), [p])
    assert subsets[0]["addresses"][0]["hostname"] == "a-0"


def test_ready_wins_when_an_address_is_listed_both_ways() -> None:
    address = {"ip": "10.0.0.1", "targetRef": {"uid": "u"}}
    port = {"port": 80, "protocol": "TCP"}
    (subset,) = repack([(address, port, False), (address, port, True)])
    assert ips(subset["addresses"]) == ["10.0.0.1"] and "notReadyAddresses" not in subset


def test_truncation_keeps_ready_addresses_first() -> None:
    subsets = [
        {
            "addresses": [{"ip": f"10.0.0.{n}"} for n in range(6)],
            "notReadyAddresses": [{"ip": f"10.0.1.{n}"} for n in range(6)],
        }
    ]
    assert truncate(subsets, 8)
    assert len(subsets[0]["addresses"]) == 6
    assert len(subsets[0]["notReadyAddresses"]) == 2
    assert not truncate(subsets, 8)


def test_trigger_time_is_the_earliest_unreflected_change() -> None:
    tracker = TriggerTimeTracker()
    svc = service()
    first = [pod("a", "10.0.0.1", ready_at=T0 + 5)]
    assert tracker.compute("ns/web", svc, first) == T0  # a new Service: its creation
    assert tracker.compute("ns/web", svc, first) is None  # nothing changed since
    changed = [pod("a", "10.0.0.1", ready_at=T0 + 50), pod("b", "10.0.0.2", ready_at=T0 + 40)]
    assert tracker.compute("ns/web", svc, changed) == T0 + 40


def test_pod_changes_that_matter_to_endpoints() -> None:
    a = pod("a", "10.0.0.1")
    assert pod_endpoints_changed(a, pod("a", "10.0.0.1")) == (False, False)
    assert pod_endpoints_changed(a, pod("a", "10.0.0.1", ready=False)) == (True, False)
    assert pod_endpoints_changed(a, pod("a", "10.0.0.9")) == (True, False)
    relabelled = pod("a", "10.0.0.1")
    relabelled["metadata"]["labels"] = {"app": "other"}
    assert pod_endpoints_changed(a, relabelled) == (False, True)
