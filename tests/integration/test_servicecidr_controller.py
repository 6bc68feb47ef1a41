"""The ServiceCIDR controller in a real ``vplane apiserver`` with its controller manager, driven over HTTP
and with kubectl: the finalizer on every ServiceCIDR, Ready, a deletion held while an allocated address
only that range covers remains, and let go once it is gone (the grace period shrunk)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controllerkit import api, call, condition, wait_for
from harness import APIServerProcess, Kubectl, with_controllers

FINALIZER = "networking.k8s.io/service-cidr-finalizer"
BASE = "/apis/networking.k8s.io/v1"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[APIServerProcess]:
    yield from with_controllers(
        tmp_path_factory.mktemp("servicecidrs") / "apiserver",
        {"service_cidr_deletion_grace_period_seconds": 0.2},
    )


@pytest.fixture
def kubectl(server: APIServerProcess, kubectl_path: str, tmp_path: Path) -> Kubectl:
    return Kubectl(kubectl_path, server.kubeconfig, tmp_path / "kubecache")


def get_cidr(server: APIServerProcess, name: str) -> dict[str, Any] | None:
    code, body = call(server, "GET", f"{BASE}/servicecidrs/{name}")
    if code == 404:
        return None
    assert code == 200, body
    found: dict[str, Any] = body
    return found


def settled(server: APIServerProcess, name: str) -> dict[str, Any] | None:
    found = get_cidr(server, name)
    if found is None or FINALIZER not in (found["metadata"].get("finalizers") or []):
        return None
    ready = condition(found, "Ready")
    return found if ready is not None and ready["status"] == "True" else None


def test_default_servicecidr_is_protected_and_ready(server: APIServerProcess, kubectl: Kubectl) -> None:
    """The API server marks its default ServiceCIDR ready where nothing else has ("Kubernetes default
    Service CIDR is ready"); the ServiceCIDR controller then writes its own condition (it adds the finalizer
    first, so both can be seen for a moment), and that one stands."""

    def controllers_condition() -> dict[str, Any] | None:
        found = settled(server, "kubernetes")
        ready = condition(found, "Ready") if found is not None else None
        return found if ready is not None and ready["message"] == "Kubernetes Service CIDR is ready" else None

    wait_for(controllers_condition, "the kubernetes ServiceCIDR protected, with the controller's condition")
    out = kubectl.run("get", "servicecidr", "kubernetes", "-o", "jsonpath={.metadata.finalizers}")
    assert out.code == 0, out.stderr
    assert FINALIZER in out.stdout


def test_deletion_waits_for_orphaned_addresses(server: APIServerProcess, kubectl: Kubectl) -> None:
    api(
        server,
        "POST",
        f"{BASE}/servicecidrs",
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "ServiceCIDR",
            "metadata": {"name": "extra"},
            "spec": {"cidrs": ["10.199.0.0/24"]},
        },
    )
    wait_for(lambda: settled(server, "extra"), "the new ServiceCIDR protected and Ready")
    api(
        server,
        "POST",
        f"{BASE}/ipaddresses",
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "IPAddress",
            "metadata": {
                "name": "10.199.0.7",
                "labels": {
                    "ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io",
                    "ipaddress.kubernetes.io/ip-family": "IPv4",
                },
            },
            "spec": {"parentRef": {"group": "", "resource": "services", "namespace": "default", "name": "x"}},
        },
    )
    deleted = kubectl.run("delete", "servicecidr", "extra", "--wait=false")
    assert deleted.code == 0, deleted.stderr

    def terminating() -> dict[str, Any] | None:
        found = get_cidr(server, "extra")
        ready = condition(found, "Ready") if found is not None else None
        return ready if ready is not None and ready.get("reason") == "Terminating" else None

    ready = wait_for(terminating, "the deletion held by the address")
    assert ready["status"] == "False"
    assert ready["message"] == (
        "There are still IPAddresses referencing the ServiceCIDR, please remove them or create a new ServiceCIDR"
    )
    held = get_cidr(server, "extra")
    assert held is not None and held["metadata"].get("deletionTimestamp")

    api(server, "DELETE", f"{BASE}/ipaddresses/10.199.0.7")
    wait_for(lambda: get_cidr(server, "extra") is None, "the ServiceCIDR gone once the address is")


def test_a_covering_servicecidr_lets_deletion_through(server: APIServerProcess) -> None:
    for name, rng in (("wide", "10.198.0.0/16"), ("narrow", "10.198.3.0/24")):
        api(
            server,
            "POST",
            f"{BASE}/servicecidrs",
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "ServiceCIDR",
                "metadata": {"name": name},
                "spec": {"cidrs": [rng]},
            },
        )
        wait_for(lambda n=name: settled(server, n), f"{name} protected")
    api(
        server,
        "POST",
        f"{BASE}/ipaddresses",
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "IPAddress",
            "metadata": {
                "name": "10.198.3.9",
                "labels": {"ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io"},
            },
            "spec": {"parentRef": {"group": "", "resource": "services", "namespace": "default", "name": "y"}},
        },
    )
    api(server, "DELETE", f"{BASE}/servicecidrs/narrow")
    wait_for(lambda: get_cidr(server, "narrow") is None, "the contained ServiceCIDR gone")
    assert get_cidr(server, "wide") is not None
