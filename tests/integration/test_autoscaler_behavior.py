"""``spec.behavior`` of a HorizontalPodAutoscaler against ``vplane apiserver`` with the controller manager:
a scale-up held to its Pods policy (``ScalingLimited``/``ScaleUpLimit`` with upstream's text), the
behavior the API server defaulted as ``kubectl describe hpa`` prints it, and the validation messages
kubectl shows. Resource metrics come from a CustomResourceDefinition serving ``pods.metrics.k8s.io``
(what a metrics server answers, without one), and pods are made Ready the way a kubelet reports it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from controllerkit import api, condition, events_for, items, now, set_pod_status, wait_for
from harness import APIServerProcess, Kubectl, with_controllers

pytestmark = pytest.mark.integration

POD_METRICS_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "pods.metrics.k8s.io"},
    "spec": {
        "group": "metrics.k8s.io",
        "names": {
            "kind": "PodMetrics",
            "plural": "pods",
            "singular": "podmetrics",
            "listKind": "PodMetricsList",
        },
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1beta1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            }
        ],
    },
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[APIServerProcess]:
    yield from with_controllers(
        tmp_path_factory.mktemp("hpabehavior") / "apiserver",
        {"horizontal_pod_autoscaler_sync_period_seconds": 1},
    )


@pytest.fixture
def kubectl(server: APIServerProcess, kubectl_path: str, tmp_path: Path) -> Kubectl:
    return Kubectl(kubectl_path, server.kubeconfig, tmp_path / "kubecache")


def hpa_manifest(namespace: str, behavior: dict[str, Any]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": namespace},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "minReplicas": 1,
                "maxReplicas": 10,
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {
                            "name": "cpu",
                            "target": {"type": "AverageValue", "averageValue": "100m"},
                        },
                    }
                ],
                "behavior": behavior,
            },
        }
    )


def replicas(server: APIServerProcess, namespace: str) -> int:
    return int(
        api(server, "GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/web")["spec"]["replicas"]
    )


def get_hpa(server: APIServerProcess, namespace: str) -> dict[str, Any]:
    found: dict[str, Any] = api(
        server, "GET", f"/apis/autoscaling/v2/namespaces/{namespace}/horizontalpodautoscalers/web"
    )
    return found


def report_usage(server: APIServerProcess, namespace: str, pods: list[dict[str, Any]], cpu: str) -> None:
    """What a kubelet and a metrics server would say: each pod Ready (started and Ready past the CPU
    initialization period, so its sample counts) and using ``cpu``."""
    for pod in pods:
        set_pod_status(server, namespace, pod, ready=True, age=600)
        api(
            server,
            "POST",
            f"/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods",
            {
                "apiVersion": "metrics.k8s.io/v1beta1",
                "kind": "PodMetrics",
                "metadata": {"name": pod["metadata"]["name"], "labels": pod["metadata"]["labels"]},
                "timestamp": now(),
                "window": "15s",
                "containers": [{"name": "nginx", "usage": {"cpu": cpu, "memory": "10Mi"}}],
            },
        )


def test_scale_up_held_to_its_policy_and_described(
    server: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    kubectl.apply(yaml.safe_dump(POD_METRICS_CRD))
    kubectl.run("wait", "--for=condition=Established", "crd/pods.metrics.k8s.io", "--timeout=30s")
    kubectl.run("create", "deployment", "web", "--image=nginx", "--replicas=2", "-n", namespace)
    pods = wait_for(
        lambda: len(found := items(server, f"/api/v1/namespaces/{namespace}/pods")) == 2 and found, "two pods"
    )
    report_usage(server, namespace, pods, "500m")  # 1 CPU in all: 10 pods' worth at 100m each
    # one pod more per ten minutes, and never down
    behavior = {
        "scaleUp": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 600}]},
        "scaleDown": {"selectPolicy": "Disabled"},
    }
    kubectl.apply(hpa_manifest(namespace, behavior))
    wait_for(lambda: replicas(server, namespace) == 3, "scaled by one pod")
    hpa = wait_for(
        lambda: (
            (h := get_hpa(server, namespace)).get("status", {}).get("currentReplicas") == 3
            and (c := condition(h, "ScalingLimited"))
            and c["status"] == "True"
            and h
        ),
        "the next sync held at 3",
    )
    limited, able = condition(hpa, "ScalingLimited"), condition(hpa, "AbleToScale")
    assert limited is not None and (limited["reason"], limited["message"]) == (
        "ScaleUpLimit",
        "the desired replica count is increasing faster than the maximum scale rate",
    )
    assert able is not None and (able["status"], able["reason"]) == ("True", "ReadyForNewScale")
    assert replicas(server, namespace) == 3  # the period's one pod is spent
    (rescale,) = [e for e in events_for(server, namespace, "web") if e["reason"] == "SuccessfulRescale"]
    assert rescale["message"] == "New size: 3; reason: cpu resource above target"
    # the API server filled in what the manifest left out, as upstream's defaulting does
    assert hpa["spec"]["behavior"] == {
        "scaleUp": {
            "stabilizationWindowSeconds": 0,
            "selectPolicy": "Max",
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 600}],
        },
        "scaleDown": {
            "selectPolicy": "Disabled",
            "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
        },
    }
    described = kubectl.run("describe", "hpa", "web", "-n", namespace).out
    assert (
        "Behavior:\n"
        "  Scale Up:\n"
        "    Stabilization Window: 0 seconds\n"
        "    Select Policy: Max\n"
        "    Policies:\n"
        "      - Type: Pods  Value: 1  Period: 600 seconds\n"
        "  Scale Down:\n"
        "    Select Policy: Disabled\n"
        "    Policies:\n"
        "      - Type: Percent  Value: 100  Period: 15 seconds\n"
    ) in described
    assert (
        "  ScalingLimited  True    ScaleUpLimit      "
        "the desired replica count is increasing faster than the maximum scale rate\n"
    ) in described


def test_invalid_behavior_is_refused_with_upstreams_messages(kubectl: Kubectl, namespace: str) -> None:
    behavior = {
        "scaleUp": {"stabilizationWindowSeconds": 4000, "policies": []},
        "scaleDown": {
            "selectPolicy": "Fastest",
            "policies": [{"type": "Pods", "value": 0, "periodSeconds": 1801}],
        },
    }
    result = kubectl.run("create", "-f", "-", input=hpa_manifest(namespace, behavior), check=False)
    assert result.code != 0
    assert result.stderr == (
        'The HorizontalPodAutoscaler "web" is invalid: \n'
        "* spec.behavior.scaleUp.stabilizationWindowSeconds: Invalid value: 4000: must be less than or equal to 3600\n"
        "* spec.behavior.scaleUp.policies: Required value: must specify at least one Policy\n"
        '* spec.behavior.scaleDown.selectPolicy: Unsupported value: "Fastest": supported values: "Disabled", "Max", '
        '"Min"\n'
        "* spec.behavior.scaleDown.policies[0].value: Invalid value: 0: must be greater than zero\n"
        "* spec.behavior.scaleDown.policies[0].periodSeconds: Invalid value: 1801: must be less than or equal to 1800\n"
    )
