"""LimitRange, decided purely: item defaulting, container defaults and the annotation, and min, max and
ratio refusals in upstream's words."""

from __future__ import annotations

from typing import Any

from vplane.kube import limitrange


def lr(*items: dict) -> dict:
    return {"metadata": {"name": "lr"}, "spec": {"limits": list(items)}}


def container(name: str, requests: dict | None = None, limits: dict | None = None) -> dict:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {"name": name, "image": "nginx", "resources": resources}


def pod(*containers: dict, init: list[dict] | None = None) -> dict:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = init
    return {"metadata": {"name": "p"}, "spec": spec}


def test_container_items_default_from_max_and_min() -> None:
    obj = lr(
        {"type": "Container", "max": {"cpu": "1"}, "min": {"memory": "64Mi"}},
        {"type": "Pod", "max": {"cpu": "2"}},
    )
    limitrange.default_limit_range(obj)
    container_item, pod_item = obj["spec"]["limits"]
    assert container_item["default"] == {"cpu": "1"}
    assert container_item["defaultRequest"] == {"cpu": "1", "memory": "64Mi"}
    assert "default" not in pod_item


def test_defaults_fill_what_containers_leave_out_and_annotate() -> None:
    item = {
        "type": "Container",
        "default": {"cpu": "0.5", "memory": "256Mi"},
        "defaultRequest": {"cpu": "100m"},
    }
    original = pod(container("app", limits={"memory": "1Gi"}), init=[container("setup")])
    defaulted = limitrange.apply_defaults(original, [lr(item)])
    assert defaulted is not original and original["spec"]["containers"][0]["resources"] == {
        "limits": {"memory": "1Gi"}
    }
    app, setup = defaulted["spec"]["containers"][0], defaulted["spec"]["initContainers"][0]
    assert app["resources"] == {"limits": {"memory": "1Gi", "cpu": "500m"}, "requests": {"cpu": "100m"}}
    assert setup["resources"] == {"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "100m"}}
    assert defaulted["metadata"]["annotations"][limitrange.ANNOTATION] == (
        "LimitRanger plugin set: cpu request for container app; cpu limit for container app; "
        "cpu request for init container setup; cpu, memory limit for init container setup"
    )
    full = pod(container("app", {"cpu": "1"}, {"cpu": "1", "memory": "1Gi"}))
    assert limitrange.apply_defaults(full, [lr({"type": "Container", "default": {"cpu": "1"}})]) is full


def test_container_min_max_messages() -> None:
    item = lr({"type": "Container", "max": {"cpu": "1"}, "min": {"memory": "64Mi"}})
    over = pod(container("a", {"cpu": "500m", "memory": "128Mi"}, {"cpu": "2"}))
    assert limitrange.validate_pod(item, over) == ["maximum cpu usage per Container is 1, but limit is 2"]
    no_limit = pod(container("a", {"cpu": "500m", "memory": "128Mi"}))
    assert limitrange.validate_pod(item, no_limit) == [
        "maximum cpu usage per Container is 1.  No limit is specified"
    ]
    small = pod(container("a", {"memory": "32Mi"}, {"cpu": "1"}))
    assert limitrange.validate_pod(item, small) == [
        "minimum memory usage per Container is 64Mi, but request is 32Mi"
    ]
    both = pod(container("a", {}, {"cpu": "3"}))
    failures = limitrange.validate_pod(item, both)
    assert limitrange.aggregate(failures) == (
        "[minimum memory usage per Container is 64Mi.  No request is specified, "
        "maximum cpu usage per Container is 1, but limit is 3]"
    )


def test_ratio_message() -> None:
    item = lr({"type": "Container", "maxLimitRequestRatio": {"cpu": "4"}})
    assert limitrange.validate_pod(item, pod(container("a", {"cpu": "100m"}, {"cpu": "800m"}))) == [
        "cpu max limit to request ratio per Container is 4, but provided ratio is 8.000000"
    ]
    assert limitrange.validate_pod(item, pod(container("a", {"cpu": "100m"}, {"cpu": "400m"}))) == []
    assert limitrange.validate_pod(item, pod(container("a", {}, {"cpu": "400m"}))) == [
        "cpu max limit to request ratio per Container is 4, but no request is specified or request is 0"
    ]


def test_pod_items_hold_the_totals() -> None:
    item = lr({"type": "Pod", "max": {"memory": "1Gi"}})
    two = pod(
        container("a", {"memory": "600Mi"}, {"memory": "600Mi"}),
        container("b", {"memory": "600Mi"}, {"memory": "600Mi"}),
    )
    assert limitrange.validate_pod(item, two) == ["maximum memory usage per Pod is 1Gi, but limit is 1200Mi"]


def test_claims_are_held_to_their_storage_request() -> None:
    item = lr({"type": "PersistentVolumeClaim", "min": {"storage": "1Gi"}, "max": {"storage": "10Gi"}})
    claim = {"spec": {"resources": {"requests": {"storage": "20Gi"}}}}
    assert limitrange.validate_claim(item, claim) == [
        "maximum storage usage per PersistentVolumeClaim is 10Gi, but request is 20Gi"
    ]
    claim["spec"]["resources"]["requests"]["storage"] = "500Mi"
    assert limitrange.validate_claim(item, claim) == [
        "minimum storage usage per PersistentVolumeClaim is 1Gi, but request is 500Mi"
    ]


def test_aggregate_is_upstreams() -> None:
    assert limitrange.aggregate(["a"]) == "a"
    assert limitrange.aggregate(["a", "b", "a"]) == "[a, b]"
