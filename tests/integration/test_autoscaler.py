"""The HorizontalPodAutoscaler controller against ``vplane apiserver`` (no metrics server), driven by kubectl
and the ``kubernetes`` Python client: scaling into ``minReplicas``..``maxReplicas``, metrics absent as a
condition and events with upstream's text, a target that does not exist, and a target at zero."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as kclient
from kubernetes import config as kconfig

from controllerkit import api, condition, events_for, wait_for
from harness import APIServerProcess, Kubectl, with_controllers

pytestmark = pytest.mark.integration

NO_METRICS = (
    "failed to get cpu utilization: unable to get metrics for resource cpu: unable to fetch metrics from "
    "resource metrics API: the server could not find the requested resource (get pods.metrics.k8s.io)"
)


@pytest.fixture(scope="module")
def shared_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[APIServerProcess]:
    yield from with_controllers(
        tmp_path_factory.mktemp("hpa") / "apiserver", {"horizontal_pod_autoscaler_sync_period_seconds": 1}
    )


@pytest.fixture
def kubectl(shared_apiserver: APIServerProcess, kubectl_path: str, tmp_path: Path) -> Kubectl:
    return Kubectl(kubectl_path, shared_apiserver.kubeconfig, tmp_path / "kubecache")


def get_hpa(server: APIServerProcess, namespace: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = api(
        server, "GET", f"/apis/autoscaling/v2/namespaces/{namespace}/horizontalpodautoscalers/{name}"
    )
    return result


def replicas(server: APIServerProcess, namespace: str, name: str) -> int:
    return int(
        api(server, "GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}")["spec"]["replicas"]
    )


def test_scales_up_to_min_and_reports_missing_metrics(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    kubectl.run("create", "deployment", "web", "--image=nginx", "--replicas=1", "-n", namespace)
    kubectl.run("autoscale", "deployment", "web", "--min=3", "--max=5", "--cpu=50%", "-n", namespace)
    wait_for(lambda: replicas(shared_apiserver, namespace, "web") == 3, "scaled to minReplicas")
    hpa = wait_for(
        lambda: (
            (h := get_hpa(shared_apiserver, namespace, "web"))
            and (c := condition(h, "ScalingActive"))
            and c["status"] == "False"
            and h
        ),
        "ScalingActive False",
    )
    able, active = condition(hpa, "AbleToScale"), condition(hpa, "ScalingActive")
    assert able is not None and (able["status"], able["reason"]) == ("True", "SucceededGetScale")
    assert able["message"] == "the HPA controller was able to get the target's current scale"
    assert active is not None and active["reason"] == "FailedGetResourceMetric"
    assert active["message"] == f"the HPA was unable to compute the replica count: {NO_METRICS}"
    assert hpa["status"]["currentReplicas"] == 3 and "lastScaleTime" in hpa["status"]

    def hpa_events() -> dict[str, Any]:
        return {
            e["reason"]: e
            for e in events_for(shared_apiserver, namespace, "web")
            if e["involvedObject"]["kind"] == "HorizontalPodAutoscaler"
        }

    events = wait_for(
        lambda: (
            (found := hpa_events()).keys()
            >= {"SuccessfulRescale", "FailedGetResourceMetric", "FailedComputeMetricsReplicas"}
            and found
        ),
        "the autoscaler's events",
    )
    assert (
        events["SuccessfulRescale"]["message"]
        == "New size: 3; reason: Current number of replicas below Spec.MinReplicas"
    )
    assert events["FailedGetResourceMetric"]["message"] == NO_METRICS
    assert events["FailedGetResourceMetric"]["source"] == {"component": "horizontal-pod-autoscaler"}
    assert events["FailedComputeMetricsReplicas"]["message"] == (
        f"invalid metrics (1 invalid out of 1), first error is: failed to get cpu resource metric value: {NO_METRICS}"
    )
    table = kubectl.run("get", "hpa", "web", "-n", namespace).out.splitlines()
    assert table[1].split()[1:7] == ["Deployment/web", "cpu:", "<unknown>/50%", "3", "5", "3"]
    # above maxReplicas: scaled down to it
    kubectl.run("scale", "deployment", "web", "--replicas=9", "-n", namespace)
    wait_for(lambda: replicas(shared_apiserver, namespace, "web") == 5, "scaled to maxReplicas")


def test_missing_target_and_target_at_zero(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    autoscaling = kclient.AutoscalingV2Api(kconfig.new_client_from_config(str(shared_apiserver.kubeconfig)))
    body = {
        "metadata": {"name": "ghost"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "ghost"},
            "maxReplicas": 3,
        },
    }
    autoscaling.create_namespaced_horizontal_pod_autoscaler(namespace, body)
    cond = wait_for(
        lambda: condition(get_hpa(shared_apiserver, namespace, "ghost"), "AbleToScale"), "AbleToScale"
    )
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "False",
        "FailedGetScale",
        'the HPA controller was unable to get the target\'s current scale: deployments.apps "ghost" not found',
    )
    (event,) = wait_for(
        lambda: [
            e for e in events_for(shared_apiserver, namespace, "ghost") if e["reason"] == "FailedGetScale"
        ],
        "FailedGetScale",
    )
    assert event["message"] == 'deployments.apps "ghost" not found'
    kubectl.run("create", "deployment", "idle", "--image=nginx", "--replicas=0", "-n", namespace)
    kubectl.run("autoscale", "deployment", "idle", "--min=1", "--max=3", "--cpu=50%", "-n", namespace)
    cond = wait_for(
        lambda: condition(get_hpa(shared_apiserver, namespace, "idle"), "ScalingActive"), "ScalingActive"
    )
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "False",
        "ScalingDisabled",
        "scaling is disabled since the replica count of the target is zero",
    )
    assert replicas(shared_apiserver, namespace, "idle") == 0
