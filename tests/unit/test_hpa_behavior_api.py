"""``spec.behavior`` of autoscaling/v2 HorizontalPodAutoscalers in the API server: upstream's defaulting
(``SetDefaults_HorizontalPodAutoscalerBehavior``) and validation messages (``validateScalingRules``), and a
v1 object's behavior annotation read back defaulted in v2."""

from __future__ import annotations

from typing import Any

import orjson

from vplane.apiserver.kinds.autoscaling import BEHAVIOR_ANNOTATION, HPAConverter, HPAv2Strategy
from vplane.kube.errors import Cause

UP_DEFAULT = {
    "stabilizationWindowSeconds": 0,
    "selectPolicy": "Max",
    "policies": [
        {"type": "Pods", "value": 4, "periodSeconds": 15},
        {"type": "Percent", "value": 100, "periodSeconds": 15},
    ],
}
DOWN_DEFAULT = {"selectPolicy": "Max", "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}


def hpa(behavior: Any = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 5}
    if behavior is not None:
        spec["behavior"] = behavior
    return {"apiVersion": "autoscaling/v2", "metadata": {"name": "h"}, "spec": spec}


def texts(causes: list[Cause]) -> list[str]:
    return [f"{c.get('field')}: {c.get('message')}" for c in causes]


def defaulted(behavior: Any) -> Any:
    obj = hpa(behavior)
    HPAv2Strategy().default(obj)
    return obj["spec"].get("behavior")


def test_behavior_unset_stays_unset() -> None:
    assert defaulted(None) is None


def test_behavior_set_gets_every_unset_field() -> None:
    assert defaulted({}) == {"scaleUp": UP_DEFAULT, "scaleDown": DOWN_DEFAULT}
    # the scale-down window is left to the controller's --horizontal-pod-autoscaler-downscale-stabilization
    assert "stabilizationWindowSeconds" not in defaulted({"scaleUp": None})["scaleDown"]
    got = defaulted(
        {
            "scaleUp": {"selectPolicy": "Disabled", "policies": None},
            "scaleDown": {
                "stabilizationWindowSeconds": 60,
                "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
            },
        }
    )
    assert got["scaleUp"] == {**UP_DEFAULT, "selectPolicy": "Disabled"}
    assert got["scaleDown"] == {
        "stabilizationWindowSeconds": 60,
        "selectPolicy": "Max",
        "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
    }
    # an empty list is not unset: validation refuses it
    assert defaulted({"scaleDown": {"policies": []}})["scaleDown"]["policies"] == []
    # tolerance is kept (beta, on by default since 1.35), stored in its canonical spelling
    assert defaulted({"scaleDown": {"tolerance": "0.05"}})["scaleDown"]["tolerance"] == "50m"


def test_defaulted_behavior_is_valid() -> None:
    obj = hpa({})
    HPAv2Strategy().default(obj)
    assert HPAv2Strategy().validate(obj, None) == []


def test_validation_messages_in_upstreams_order() -> None:
    obj = hpa(
        {
            "scaleUp": {
                "stabilizationWindowSeconds": 3601,
                "selectPolicy": "Fastest",
                "policies": [
                    {"type": "Replicas", "value": 0, "periodSeconds": 0},
                    {"type": "Pods", "value": 1, "periodSeconds": 1801},
                ],
                "tolerance": "-1",
            },
            "scaleDown": {"stabilizationWindowSeconds": -1, "policies": []},
        }
    )
    HPAv2Strategy().default(obj)
    assert texts(HPAv2Strategy().validate(obj, None)) == [
        "spec.behavior.scaleUp.stabilizationWindowSeconds: Invalid value: 3601: must be less than or equal to 3600",
        'spec.behavior.scaleUp.selectPolicy: Unsupported value: "Fastest": supported values: "Disabled", "Max", "Min"',
        'spec.behavior.scaleUp.policies[0].type: Unsupported value: "Replicas": supported values: "Percent", "Pods"',
        "spec.behavior.scaleUp.policies[0].value: Invalid value: 0: must be greater than zero",
        "spec.behavior.scaleUp.policies[0].periodSeconds: Invalid value: 0: must be greater than zero",
        "spec.behavior.scaleUp.policies[1].periodSeconds: Invalid value: 1801: must be less than or equal to 1800",
        'spec.behavior.scaleUp.tolerance: Invalid value: "-1": must be greater than or equal to 0',
        "spec.behavior.scaleDown.stabilizationWindowSeconds: Invalid value: -1: must be greater than or equal to zero",
        "spec.behavior.scaleDown.policies: Required value: must specify at least one Policy",
    ]


def test_v1_behavior_annotation_reads_back_defaulted_in_v2() -> None:
    v1 = {
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": "h",
            "annotations": {
                BEHAVIOR_ANNOTATION: orjson.dumps({"scaleDown": {"selectPolicy": "Min"}}).decode()
            },
        },
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 5},
    }
    v2 = HPAConverter().to_storage(v1)
    assert v2["spec"]["behavior"] == {
        "scaleUp": UP_DEFAULT,
        "scaleDown": {**DOWN_DEFAULT, "selectPolicy": "Min"},
    }
