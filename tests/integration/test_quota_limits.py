"""ResourceQuota and LimitRange against ``vplane apiserver`` with its controller manager, driven by kubectl
and the ``kubernetes`` Python client: the controller's ``status.hard``/``status.used``, refusals with
upstream's ``exceeded quota`` text (403), a ReplicaSet's ``FailedCreate`` event carrying it, usage given
back when pods and other objects go, concurrent creates that cannot overrun a quota, dry runs that are
not charged, and LimitRange defaults, annotation and refusals."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as kclient
from kubernetes import config as kconfig
from kubernetes.client.rest import ApiException

from controllerkit import api, call, events_for, items, wait_for
from harness import APIServerProcess, Kubectl, with_controllers

pytestmark = pytest.mark.integration

SYNC_PERIOD = 2


@pytest.fixture(scope="module")
def shared_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[APIServerProcess]:
    """The controller manager on, the quota resync shrunk so the full recount is reached within a test."""
    yield from with_controllers(
        tmp_path_factory.mktemp("quota") / "apiserver", {"resource_quota_sync_period_seconds": SYNC_PERIOD}
    )


@pytest.fixture
def kubectl(shared_apiserver: APIServerProcess, kubectl_path: str, tmp_path: Path) -> Kubectl:
    return Kubectl(kubectl_path, shared_apiserver.kubeconfig, tmp_path / "kubecache")


@pytest.fixture
def core(shared_apiserver: APIServerProcess) -> kclient.CoreV1Api:
    return kclient.CoreV1Api(kconfig.new_client_from_config(str(shared_apiserver.kubeconfig)))


def quota_status(server: APIServerProcess, namespace: str, name: str) -> dict[str, Any]:
    status: dict[str, Any] = (
        api(server, "GET", f"/api/v1/namespaces/{namespace}/resourcequotas/{name}").get("status") or {}
    )
    return status


def used(server: APIServerProcess, namespace: str, name: str) -> dict[str, str]:
    return quota_status(server, namespace, name).get("used") or {}


def make_quota(k: Kubectl, namespace: str, name: str, hard: str) -> None:
    k.run("create", "quota", name, "-n", namespace, f"--hard={hard}")


def pod_manifest(name: str, cpu: str = "200m", memory: str = "64Mi") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {"name": "app", "image": "nginx", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
            ]
        },
    }


def test_controller_fills_hard_and_used(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    kubectl.run("create", "configmap", "c1", "-n", namespace)
    kubectl.run("create", "service", "clusterip", "s1", "--tcp=80", "-n", namespace)
    make_quota(
        kubectl, namespace, "q", "pods=4,requests.cpu=1500m,requests.memory=1Gi,count/configmaps=5,services=2"
    )
    status = wait_for(
        lambda: (s := quota_status(shared_apiserver, namespace, "q")).get("used") and s, "usage"
    )
    assert status["hard"] == {
        "count/configmaps": "5",
        "pods": "4",
        "requests.cpu": "1500m",
        "requests.memory": "1Gi",
        "services": "2",
    }
    # kube-root-ca.crt is the namespace's other ConfigMap
    assert status["used"] == {
        "count/configmaps": "2",
        "pods": "0",
        "requests.cpu": "0",
        "requests.memory": "0",
        "services": "1",
    }
    described = kubectl.run("describe", "quota", "q", "-n", namespace).out
    assert "requests.cpu      0     1500m" in described


def test_exceeded_quota_is_403_with_upstreams_text(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, core: kclient.CoreV1Api, namespace: str
) -> None:
    make_quota(kubectl, namespace, "compute", "pods=2,requests.cpu=500m")
    wait_for(lambda: used(shared_apiserver, namespace, "compute"), "usage")
    core.create_namespaced_pod(namespace, pod_manifest("a", cpu="300m"))
    assert used(shared_apiserver, namespace, "compute") == {"pods": "1", "requests.cpu": "300m"}
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(namespace, pod_manifest("b", cpu="300m"))
    assert refused.value.status == 403
    body = json.loads(refused.value.body)
    assert body["reason"] == "Forbidden"
    assert body["message"] == (
        'pods "b" is forbidden: exceeded quota: compute, requested: requests.cpu=300m, '
        "used: requests.cpu=300m, limited: requests.cpu=500m"
    )
    out = kubectl.fails("run", "c", "--image=nginx", "-n", namespace).stderr
    assert 'pods "c" is forbidden: failed quota: compute: must specify requests.cpu for: c' in out
    # a dry run is checked but not charged
    code, _ = call(
        shared_apiserver,
        "POST",
        f"/api/v1/namespaces/{namespace}/pods?dryRun=All",
        pod_manifest("d", cpu="100m"),
    )
    assert code == 201
    assert used(shared_apiserver, namespace, "compute") == {"pods": "1", "requests.cpu": "300m"}


def test_replicaset_records_failed_create_and_usage_comes_back(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    make_quota(kubectl, namespace, "pods", "pods=2")
    wait_for(lambda: used(shared_apiserver, namespace, "pods"), "usage")
    kubectl.run("create", "deployment", "web", "--image=nginx", "--replicas=3", "-n", namespace)
    wait_for(lambda: len(items(shared_apiserver, f"/api/v1/namespaces/{namespace}/pods")) == 2, "two pods")
    (rs,) = items(shared_apiserver, f"/apis/apps/v1/namespaces/{namespace}/replicasets")
    rs_name = rs["metadata"]["name"]
    failed = wait_for(
        lambda: [
            e for e in events_for(shared_apiserver, namespace, rs_name) if e["reason"] == "FailedCreate"
        ],
        "FailedCreate",
    )
    message = failed[0]["message"]
    assert message.startswith(f'Error creating: pods "{rs_name}-')
    assert message.endswith(
        '" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=2, limited: pods=2'
    )
    assert failed[0]["type"] == "Warning" and failed[0]["source"] == {"component": "replicaset-controller"}
    # The controller writes the condition after the event (its status update ends the sync).
    conditions = wait_for(
        lambda: (
            api(shared_apiserver, "GET", f"/apis/apps/v1/namespaces/{namespace}/replicasets/{rs_name}").get(
                "status"
            )
            or {}
        ).get("conditions"),
        "the ReplicaFailure condition",
    )
    (cond,) = conditions
    assert (cond["type"], cond["reason"]) == ("ReplicaFailure", "FailedCreate")
    # scaling down frees the quota (the controller sees the deletion); the third pod then fits
    kubectl.run("scale", "deployment", "web", "--replicas=1", "-n", namespace)
    wait_for(lambda: used(shared_apiserver, namespace, "pods") == {"pods": "1"}, "one pod charged")
    kubectl.run("scale", "deployment", "web", "--replicas=2", "-n", namespace)
    wait_for(lambda: used(shared_apiserver, namespace, "pods") == {"pods": "2"}, "two pods charged")


def test_finished_pods_free_compute_quota(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    make_quota(kubectl, namespace, "q", "pods=1,count/pods=5")
    wait_for(lambda: used(shared_apiserver, namespace, "q"), "usage")
    api(shared_apiserver, "POST", f"/api/v1/namespaces/{namespace}/pods", pod_manifest("once"))
    api(
        shared_apiserver,
        "PATCH",
        f"/api/v1/namespaces/{namespace}/pods/once/status",
        {"status": {"phase": "Succeeded"}},
        {"Content-Type": "application/merge-patch+json"},
    )
    wait_for(lambda: used(shared_apiserver, namespace, "q") == {"count/pods": "1", "pods": "0"}, "given back")


def test_concurrent_creates_cannot_overrun(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    make_quota(kubectl, namespace, "q", "count/configmaps=6")
    # kube-root-ca.crt is charged before the race starts: a usage computed before the publisher wrote it read
    # 0, and the race then took its slot (six creates passed and the publisher's create was refused).
    wait_for(lambda: used(shared_apiserver, namespace, "q") == {"count/configmaps": "1"}, "usage")
    codes: list[int] = []

    def create(i: int) -> None:
        code, _ = call(
            shared_apiserver,
            "POST",
            f"/api/v1/namespaces/{namespace}/configmaps",
            {"metadata": {"name": f"c{i}"}},
        )
        codes.append(code)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [201] * 5 + [403] * 7
    assert used(shared_apiserver, namespace, "q") == {"count/configmaps": "6"}


def test_kinds_counted_by_listing_are_recounted_on_resync(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    make_quota(kubectl, namespace, "q", "count/deployments.apps=1,count/jobs.batch=3")
    wait_for(lambda: used(shared_apiserver, namespace, "q"), "usage")
    kubectl.run("create", "deployment", "d1", "--image=nginx", "--replicas=0", "-n", namespace)
    assert used(shared_apiserver, namespace, "q") == {"count/deployments.apps": "1", "count/jobs.batch": "0"}
    err = kubectl.fails("create", "deployment", "d2", "--image=nginx", "-n", namespace).stderr
    assert (
        'deployments.apps "d2" is forbidden: exceeded quota: q, requested: count/deployments.apps=1, '
        "used: count/deployments.apps=1, limited: count/deployments.apps=1"
    ) in err
    kubectl.run("delete", "deployment", "d1", "-n", namespace)
    # nothing watches Deployments for the quota: the periodic recount gives the slot back
    wait_for(lambda: used(shared_apiserver, namespace, "q").get("count/deployments.apps") == "0", "recount")
    kubectl.run("create", "deployment", "d2", "--image=nginx", "--replicas=0", "-n", namespace)


def test_service_type_changes_are_charged(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    make_quota(kubectl, namespace, "q", "services.nodeports=1,services.loadbalancers=0")
    wait_for(lambda: used(shared_apiserver, namespace, "q"), "usage")
    kubectl.run("create", "service", "clusterip", "s", "--tcp=80", "--tcp=81", "-n", namespace)
    err = kubectl.fails("patch", "service", "s", "-n", namespace, "-p", '{"spec":{"type":"NodePort"}}').stderr
    assert (
        'services "s" is forbidden: exceeded quota: q, requested: services.nodeports=2, '
        "used: services.nodeports=0, limited: services.nodeports=1"
    ) in err


# -- LimitRange ----------------------------------------------------------------------------------------------

LIMITS = """
apiVersion: v1
kind: LimitRange
metadata: {name: limits}
spec:
  limits:
  - type: Container
    max: {cpu: "1", memory: 1Gi}
    min: {cpu: 50m}
    default: {cpu: 500m}
    defaultRequest: {memory: 128Mi}
    maxLimitRequestRatio: {cpu: "4"}
  - type: Pod
    max: {memory: 1536Mi}
  - type: PersistentVolumeClaim
    max: {storage: 2Gi}
"""


def test_limit_range_defaults_and_annotation(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    kubectl.apply(LIMITS, "-n", namespace)
    stored = json.loads(kubectl.run("get", "limitrange", "limits", "-n", namespace, "-o", "json").out)
    container_item = stored["spec"]["limits"][0]
    assert container_item["default"] == {"cpu": "500m", "memory": "1Gi"}  # max fills the default
    assert container_item["defaultRequest"] == {"cpu": "500m", "memory": "128Mi"}  # default fills the request
    kubectl.run("run", "p1", "--image=nginx", "-n", namespace)
    pod = api(shared_apiserver, "GET", f"/api/v1/namespaces/{namespace}/pods/p1")
    assert pod["spec"]["containers"][0]["resources"] == {
        "limits": {"cpu": "500m", "memory": "1Gi"},
        "requests": {"cpu": "500m", "memory": "128Mi"},
    }
    assert pod["metadata"]["annotations"]["kubernetes.io/limit-ranger"] == (
        "LimitRanger plugin set: cpu, memory request for container p1; cpu, memory limit for container p1"
    )


def test_limit_range_refusals(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, core: kclient.CoreV1Api, namespace: str
) -> None:
    kubectl.apply(LIMITS, "-n", namespace)
    over = '{"spec":{"containers":[{"name":"p2","image":"nginx","resources":{"limits":{"cpu":"2"}}}]}}'
    err = kubectl.fails("run", "p2", "--image=nginx", "-n", namespace, f"--overrides={over}").stderr
    assert 'pods "p2" is forbidden: maximum cpu usage per Container is 1, but limit is 2' in err
    ratio = {"requests": {"cpu": "100m"}, "limits": {"cpu": "800m"}}
    body = {
        "metadata": {"name": "p3"},
        "spec": {"containers": [{"name": "c", "image": "nginx", "resources": ratio}]},
    }
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(namespace, body)
    assert refused.value.status == 403
    assert json.loads(refused.value.body)["message"] == (
        'pods "p3" is forbidden: cpu max limit to request ratio per Container is 4, but provided ratio is 8.000000'
    )
    two = [
        {"name": n, "image": "nginx", "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}}}
        for n in ("a", "b")
    ]
    code, answer = call(
        shared_apiserver,
        "POST",
        f"/api/v1/namespaces/{namespace}/pods",
        {"metadata": {"name": "p4"}, "spec": {"containers": two}},
    )
    assert (code, answer["message"]) == (
        403,
        'pods "p4" is forbidden: maximum memory usage per Pod is 1536Mi, but limit is 2Gi',
    )
    claim = {
        "metadata": {"name": "big"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Gi"}}},
    }
    code, answer = call(
        shared_apiserver, "POST", f"/api/v1/namespaces/{namespace}/persistentvolumeclaims", claim
    )
    assert (code, answer["message"]) == (
        403,
        'persistentvolumeclaims "big" is forbidden: maximum storage usage per PersistentVolumeClaim is 2Gi, '
        "but request is 5Gi",
    )
    # a default that breaks the pod's own rule is the pod validation's 422, as upstream
    big_request = (
        '{"spec":{"containers":[{"name":"p5","image":"nginx","resources":{"requests":{"cpu":"800m"}}}]}}'
    )
    err = kubectl.fails("run", "p5", "--image=nginx", "-n", namespace, f"--overrides={big_request}").stderr
    assert 'Invalid value: "800m": must be less than or equal to cpu limit of 500m' in err
