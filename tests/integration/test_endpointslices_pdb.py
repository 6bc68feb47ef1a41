"""EndpointSlices and PodDisruptionBudgets against ``vplane apiserver`` with its controller manager, driven by
kubectl and the ``kubernetes`` Python client: slices following pod readiness (labels, owner, conditions,
packing at a shrunk ``max_endpoints_per_slice``), budget status from the disruption controller, and
evictions that the API server grants or refuses by that status."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as kclient
from kubernetes import config as kconfig
from kubernetes.client.rest import ApiException

from controllerkit import api, condition, events_for, items, set_pod_status, wait_for
from harness import APIServerProcess, Kubectl, with_controllers

pytestmark = pytest.mark.integration

MAX_PER_SLICE = 3


@pytest.fixture(scope="module")
def shared_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[APIServerProcess]:
    yield from with_controllers(
        tmp_path_factory.mktemp("slices") / "apiserver", {"max_endpoints_per_slice": MAX_PER_SLICE}
    )


@pytest.fixture
def kubectl(shared_apiserver: APIServerProcess, kubectl_path: str, tmp_path: Path) -> Kubectl:
    return Kubectl(kubectl_path, shared_apiserver.kubeconfig, tmp_path / "kubecache")


@pytest.fixture
def policy(shared_apiserver: APIServerProcess) -> kclient.PolicyV1Api:
    return kclient.PolicyV1Api(kconfig.new_client_from_config(str(shared_apiserver.kubeconfig)))


@pytest.fixture
def core(shared_apiserver: APIServerProcess) -> kclient.CoreV1Api:
    return kclient.CoreV1Api(kconfig.new_client_from_config(str(shared_apiserver.kubeconfig)))


def pods_of(server: APIServerProcess, namespace: str) -> list[dict[str, Any]]:
    return items(server, f"/api/v1/namespaces/{namespace}/pods")


def slices_of(server: APIServerProcess, namespace: str, service: str) -> list[dict[str, Any]]:
    return items(
        server,
        f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices?labelSelector="
        f"kubernetes.io/service-name%3D{service}",
    )


def addresses(slices: list[dict[str, Any]], *, ready: bool | None = None) -> list[str]:
    return sorted(
        a
        for s in slices
        for e in s.get("endpoints") or []
        if ready is None or e["conditions"]["ready"] == ready
        for a in e["addresses"]
    )


def start_pods(
    server: APIServerProcess, k: Kubectl, namespace: str, replicas: int, ready: int
) -> list[dict[str, Any]]:
    k.run(
        "create",
        "deployment",
        "web",
        "--image=nginx",
        f"--replicas={replicas}",
        "--port=8080",
        "-n",
        namespace,
    )
    pods = wait_for(lambda: len(p := pods_of(server, namespace)) == replicas and p, f"{replicas} pods")
    for i, pod in enumerate(sorted(pods, key=lambda p: p["metadata"]["name"])):
        set_pod_status(server, namespace, pod, ready=i < ready, ip=f"10.77.{len(namespace) % 200}.{i + 1}")
    return sorted(pods_of(server, namespace), key=lambda p: p["metadata"]["name"])


def test_slices_follow_pods_and_readiness(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    pods = start_pods(shared_apiserver, kubectl, namespace, 3, ready=2)
    kubectl.run("expose", "deployment", "web", "--port=80", "--target-port=8080", "-n", namespace)
    service = api(shared_apiserver, "GET", f"/api/v1/namespaces/{namespace}/services/web")
    (slice_,) = wait_for(
        lambda: (s := slices_of(shared_apiserver, namespace, "web")) and len(addresses(s)) == 3 and s,
        "a slice with three endpoints",
    )
    assert slice_["addressType"] == "IPv4"
    assert slice_["metadata"]["name"].startswith("web-")
    assert (
        slice_["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"]
        == "endpointslice-controller.k8s.io"
    )
    assert slice_["metadata"]["labels"]["kubernetes.io/service-name"] == "web"
    assert slice_["metadata"]["labels"]["app"] == "web"
    (owner,) = slice_["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "Service",
        "web",
        service["metadata"]["uid"],
        True,
    )
    assert slice_["ports"] == [{"name": "", "port": 8080, "protocol": "TCP"}]
    assert "endpoints.kubernetes.io/last-change-trigger-time" in slice_["metadata"]["annotations"]
    by_name = {e["targetRef"]["name"]: e for e in slice_["endpoints"]}
    assert by_name[pods[0]["metadata"]["name"]]["conditions"] == {
        "ready": True,
        "serving": True,
        "terminating": False,
    }
    assert by_name[pods[2]["metadata"]["name"]]["conditions"] == {
        "ready": False,
        "serving": False,
        "terminating": False,
    }
    assert by_name[pods[0]["metadata"]["name"]]["targetRef"] == {
        "kind": "Pod",
        "namespace": namespace,
        "name": pods[0]["metadata"]["name"],
        "uid": pods[0]["metadata"]["uid"],
    }
    table = kubectl.run("get", "endpointslices", "-n", namespace).out.splitlines()
    assert table[1].split()[1:3] == ["IPv4", "8080"]
    # readiness changes are written in place
    set_pod_status(shared_apiserver, namespace, pods[2], ready=True)
    wait_for(
        lambda: len(addresses(slices_of(shared_apiserver, namespace, "web"), ready=True)) == 3, "three ready"
    )
    assert [s["metadata"]["name"] for s in slices_of(shared_apiserver, namespace, "web")] == [
        slice_["metadata"]["name"]
    ]


def test_slices_are_packed_and_go_with_the_service(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    start_pods(shared_apiserver, kubectl, namespace, 7, ready=7)
    kubectl.run("expose", "deployment", "web", "--port=80", "--target-port=8080", "-n", namespace)
    slices = wait_for(
        lambda: len(addresses(s := slices_of(shared_apiserver, namespace, "web"))) == 7 and s,
        "seven endpoints",
    )
    assert sorted(len(s["endpoints"]) for s in slices) == [1, 3, 3]
    kubectl.run("delete", "service", "web", "-n", namespace)
    wait_for(lambda: not slices_of(shared_apiserver, namespace, "web"), "slices garbage collected")


def test_service_without_pods_has_a_placeholder(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    kubectl.run("create", "service", "clusterip", "lonely", "--tcp=80", "-n", namespace)
    (placeholder,) = wait_for(lambda: slices_of(shared_apiserver, namespace, "lonely"), "a placeholder")
    assert placeholder["endpoints"] == [] and placeholder["ports"] == []
    kubectl.run("create", "service", "externalname", "ext", "--external-name=example.com", "-n", namespace)
    kubectl.run("create", "service", "clusterip", "other", "--tcp=80", "-n", namespace)
    wait_for(lambda: slices_of(shared_apiserver, namespace, "other"), "the next service's slice")
    assert slices_of(shared_apiserver, namespace, "ext") == []


# -- PodDisruptionBudgets ------------------------------------------------------------------------------------


def budget(server: APIServerProcess, namespace: str, name: str = "budget") -> dict[str, Any]:
    result: dict[str, Any] = api(
        server, "GET", f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/{name}"
    )
    return result


def test_budget_status_and_evictions(
    shared_apiserver: APIServerProcess,
    kubectl: Kubectl,
    policy: kclient.PolicyV1Api,
    core: kclient.CoreV1Api,
    namespace: str,
) -> None:
    pods = start_pods(shared_apiserver, kubectl, namespace, 3, ready=3)
    kubectl.run("create", "pdb", "budget", "--selector=app=web", "--min-available=2", "-n", namespace)
    pdb = wait_for(
        lambda: (b := budget(shared_apiserver, namespace)).get("status", {}).get("observedGeneration") and b,
        "the budget's status",
    )
    status = pdb["status"]
    assert (
        status["currentHealthy"],
        status["desiredHealthy"],
        status["expectedPods"],
        status["disruptionsAllowed"],
    ) == (
        3,
        2,
        3,
        1,
    )
    allowed = condition(pdb, "DisruptionAllowed")
    assert allowed is not None and (allowed["status"], allowed["reason"]) == ("True", "SufficientPods")
    table = kubectl.run("get", "pdb", "budget", "-n", namespace).out.splitlines()
    assert table[1].split()[:4] == ["budget", "2", "N/A", "1"]

    first, second = pods[0]["metadata"]["name"], pods[1]["metadata"]["name"]
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": first, "namespace": namespace},
    }
    core.create_namespaced_pod_eviction(first, namespace, eviction)
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod_eviction(
            second, namespace, {**eviction, "metadata": {"name": second, "namespace": namespace}}
        )
    assert refused.value.status == 429
    body = json.loads(refused.value.body)
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"
    # the replacement pod is not ready yet: the controller keeps disruptions at zero
    after = wait_for(
        lambda: (
            (b := budget(shared_apiserver, namespace))["status"].get("currentHealthy") == 2
            and not b["status"].get("disruptedPods")
            and b
        ),
        "the eviction confirmed",
    )
    assert after["status"]["disruptionsAllowed"] == 0
    assert condition(after, "DisruptionAllowed")["reason"] == "InsufficientPods"  # type: ignore[index]
    fresh = [p for p in pods_of(shared_apiserver, namespace) if p["metadata"]["name"] not in (first, second)]
    for pod in fresh:
        set_pod_status(shared_apiserver, namespace, pod, ready=True)
    wait_for(
        lambda: budget(shared_apiserver, namespace)["status"]["disruptionsAllowed"] == 1, "allowed again"
    )
    assert policy.read_namespaced_pod_disruption_budget_status("budget", namespace).status.expected_pods == 3


def test_percentages_count_the_controllers_replicas(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    start_pods(shared_apiserver, kubectl, namespace, 4, ready=4)
    kubectl.run("create", "pdb", "budget", "--selector=app=web", "--max-unavailable=25%", "-n", namespace)
    status = wait_for(
        lambda: (s := budget(shared_apiserver, namespace).get("status") or {}).get("expectedPods") == 4 and s,
        "the budget's status",
    )
    assert (status["desiredHealthy"], status["disruptionsAllowed"]) == (3, 1)
    kubectl.run("scale", "deployment", "web", "--replicas=8", "-n", namespace)
    status = wait_for(
        lambda: (s := budget(shared_apiserver, namespace)["status"]).get("expectedPods") == 8 and s, "scaled"
    )
    assert (status["desiredHealthy"], status["currentHealthy"], status["disruptionsAllowed"]) == (6, 4, 0)


def test_budget_events(shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str) -> None:
    kubectl.run("create", "pdb", "empty", "--selector=app=none", "--min-available=1", "-n", namespace)
    (event,) = wait_for(lambda: events_for(shared_apiserver, namespace, "empty"), "NoPods")
    assert (event["type"], event["reason"], event["message"]) == (
        "Normal",
        "NoPods",
        "No matching pods found",
    )
    api(
        shared_apiserver,
        "POST",
        f"/api/v1/namespaces/{namespace}/pods",
        {
            "metadata": {"name": "loose", "labels": {"app": "loose"}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]},
        },
    )
    kubectl.run("create", "pdb", "loose", "--selector=app=loose", "--min-available=50%", "-n", namespace)
    warned = wait_for(
        lambda: [
            e for e in events_for(shared_apiserver, namespace, "loose") if e["reason"] == "UnmanagedPods"
        ],
        "UnmanagedPods",
    )
    assert warned[0]["message"].startswith("Pods selected by this PodDisruptionBudget (selector: ")
