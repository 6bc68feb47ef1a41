"""The built-in kinds' pure rules: validation messages, defaults, conversions, discovery documents against
the 1.36 reference, cron parsing, quantities, list encoding, and the printers of the new kinds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from vplane.apiserver import codec, discovery, kinds
from vplane.apiserver.kinds.apps import DaemonSetStrategy, DeploymentStrategy, StatefulSetStrategy
from vplane.apiserver.kinds.autoscaling import HPAConverter, HPAv2Strategy
from vplane.apiserver.kinds.batch import CONTROLLER_UID, CronJobStrategy, JobStrategy
from vplane.apiserver.kinds.certificates import CSRStrategy
from vplane.apiserver.kinds.core import (
    PersistentVolumeClaimStrategy,
    PersistentVolumeStrategy,
    PodStrategy,
    ReplicationControllerStrategy,
    qos_class,
)
from vplane.apiserver.kinds.events import EventConverter, EventsV1Strategy
from vplane.apiserver.kinds.networking import IngressStrategy, IPAddressStrategy, NetworkPolicyStrategy
from vplane.apiserver.kinds.policy import PodDisruptionBudgetStrategy
from vplane.apiserver.kinds.scheduling import PriorityClassStrategy
from vplane.apiserver.kinds.storage import StorageClassStrategy
from vplane.apiserver.registry import Registry
from vplane.kube import cron, quantity
from vplane.kube.errors import Cause
from vplane.kube.tables import build_table
from vplane.storage.interface import KeyValue

REFERENCE = Path(__file__).resolve().parent.parent / "data" / "kube-1.36-discovery"
"""What a real kube-apiserver 1.36 answers on its discovery endpoints (copied from shared/reference)."""
NOT_YET_SERVED: set[str] = set()
"""Reference kinds vplane does not serve (none)."""
NOW = 1_800_000_000.0


def texts(causes: list[Cause]) -> list[str]:
    return [f"{c.get('field')}: {c.get('message')}" for c in causes]


def template(labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "nginx"}], **spec}}


# -- discovery against the reference server ---------------------------------------------------------


def registry() -> Registry:
    reg = Registry()
    kinds.install(reg)
    return reg


def test_legacy_discovery_matches_reference() -> None:
    """Every /api/v1 and /apis/<g>/<v> document equals the real server's (webhooks aside: another change)."""
    docs = discovery.Discovery(registry())
    ref_files = sorted(REFERENCE.glob("discovery_api*_v*.json"))
    assert len(ref_files) > 10  # the committed reference (tests/data): a missing one must fail, not pass
    for ref_file in ref_files:
        reference = json.loads(ref_file.read_text())
        group, _, version = reference["groupVersion"].rpartition("/")
        body = docs.resource_list(group, version)
        assert body is not None, reference["groupVersion"]
        ours = orjson.loads(body)
        reference["resources"] = [
            r for r in reference["resources"] if r["name"].split("/")[0] not in NOT_YET_SERVED
        ]
        assert ours == reference


def test_aggregated_discovery_matches_reference() -> None:
    docs = discovery.Discovery(registry())
    for legacy, name in ((True, "discovery_aggregated_api.json"), (False, "discovery_aggregated_apis.json")):
        reference = json.loads((REFERENCE / name).read_text())
        for item in reference["items"]:
            for version in item["versions"]:
                version["resources"] = [
                    r for r in version["resources"] if r["resource"] not in NOT_YET_SERVED
                ]
        assert orjson.loads(docs.aggregated(legacy)) == reference


def test_group_list_matches_reference() -> None:
    reference = json.loads((REFERENCE / "discovery_apis.json").read_text())
    assert orjson.loads(discovery.Discovery(registry()).api_group_list()) == reference


# -- list encoding ----------------------------------------------------------------------------------


def test_stored_layout_and_untyped_list_items() -> None:
    obj = {
        "apiVersion": "v1",
        "data": {"a": "b"},
        "metadata": {"name": "x", "resourceVersion": "3"},
        "kind": "ConfigMap",
    }
    stored = codec.stored_bytes(obj)
    assert stored.startswith(b'{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"x"}')
    kv = KeyValue("/core/configmaps/ns/x", stored, 7, 7)
    assert orjson.loads(codec.wire_bytes(kv)) == {
        "kind": "ConfigMap",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "7", "name": "x"},
        "data": {"a": "b"},
    }
    legacy = KeyValue(
        "/core/configmaps/ns/y", b'{"metadata":{"name":"y"},"kind":"ConfigMap","apiVersion":"v1"}', 8, 8
    )
    prefix = codec.typed_prefix("ConfigMap", "v1")
    items = orjson.loads(b"[" + codec.join_wire([kv, legacy], untyped=prefix) + b"]")
    assert items == [
        {"metadata": {"resourceVersion": "7", "name": "x"}, "data": {"a": "b"}},
        {"metadata": {"resourceVersion": "8", "name": "y"}},
    ]
    typed = orjson.loads(b"[" + codec.join_wire([kv, legacy]) + b"]")
    assert [i["kind"] for i in typed] == ["ConfigMap", "ConfigMap"]
    assert typed[1]["metadata"]["resourceVersion"] == "8"


# -- apps -------------------------------------------------------------------------------------------


def test_workload_selector_must_match_template() -> None:
    dep = {
        "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"app": "a"}}, "template": template({"app": "b"})},
    }
    DeploymentStrategy().default(dep)
    assert texts(DeploymentStrategy().validate(dep, None)) == [
        'spec.template.metadata.labels: Invalid value: "dict": `selector` does not match template `labels`'
    ]
    dep["spec"]["template"] = template({"app": "a"})
    assert DeploymentStrategy().validate(dep, None) == []
    moved = json.loads(json.dumps(dep))
    moved["spec"]["selector"] = {"matchLabels": {"app": "a", "tier": "x"}}
    moved["spec"]["template"]["metadata"]["labels"]["tier"] = "x"
    assert "spec.selector: Invalid value" in texts(DeploymentStrategy().validate(moved, dep))[0]
    assert texts(DeploymentStrategy().validate(moved, dep))[0].endswith("field is immutable")


def test_statefulset_defaults_and_forbidden_updates() -> None:
    sts = {
        "metadata": {"name": "s"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": template({"a": "b"})},
    }
    strategy = StatefulSetStrategy()
    strategy.default(sts)
    spec = sts["spec"]
    assert spec["podManagementPolicy"] == "OrderedReady"
    assert spec["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    assert spec["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    assert strategy.validate(sts, None) == []
    changed = json.loads(json.dumps(sts))
    changed["spec"]["serviceName"] = "other"
    assert texts(strategy.validate(changed, sts)) == [
        "spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', "
        "'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"
    ]
    changed = json.loads(json.dumps(sts))
    changed["spec"]["replicas"] = 5
    assert strategy.validate(changed, sts) == []


def test_daemonset_restart_policy_and_rollout() -> None:
    ds = {
        "metadata": {"name": "d"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": template({"a": "b"}, restartPolicy="OnFailure"),
        },
    }
    DaemonSetStrategy().default(ds)
    assert ds["spec"]["updateStrategy"]["rollingUpdate"] == {"maxUnavailable": 1, "maxSurge": 0}
    assert texts(DaemonSetStrategy().validate(ds, None)) == [
        'spec.template.spec.restartPolicy: Unsupported value: "OnFailure": supported values: "Always"'
    ]
    ds["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] = 0
    assert texts(DaemonSetStrategy().validate(ds, None)) == [
        "spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: 0: may not be 0 when `maxSurge` is 0"
    ]


# -- core -------------------------------------------------------------------------------------------


def test_pod_spec_validation_messages() -> None:
    pod = {
        "metadata": {"name": "p"},
        "spec": {
            "restartPolicy": "Sometimes",
            "containers": [
                {"name": "Web", "image": "nginx", "ports": [{"containerPort": 70000, "protocol": "HTTP"}]},
                {"name": "side", "volumeMounts": [{"name": "missing", "mountPath": "/x"}]},
            ],
            "volumes": [{"name": "v"}],
        },
    }
    assert texts(PodStrategy().validate(pod, None)) == [
        "spec.volumes[0]: Required value: must specify a volume type",
        'spec.containers[0].name: Invalid value: "Web": a lowercase RFC 1123 label must consist of lower case '
        "alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  "
        "or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
        "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
        'spec.containers[0].ports[0].protocol: Unsupported value: "HTTP": supported values: "SCTP", "TCP", "UDP"',
        "spec.containers[1].image: Required value",
        'spec.containers[1].volumeMounts[0].name: Not found: "missing"',
        'spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"',
    ]


def test_pod_resources_and_qos() -> None:
    spec = {
        "containers": [
            {"name": "c", "image": "i", "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}
        ]
    }
    assert texts(PodStrategy().validate({"spec": spec}, None)) == [
        'spec.containers[0].resources.requests: Invalid value: "2": must be less than or equal to cpu limit of 1'
    ]
    assert qos_class({"containers": [{}]}) == "BestEffort"
    assert (
        qos_class({"containers": [{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}) == "Guaranteed"
    )
    assert qos_class({"containers": [{"resources": {"requests": {"cpu": "100m"}}}]}) == "Burstable"


def test_pod_ephemeral_containers_only_through_their_subresource() -> None:
    strategy = PodStrategy(lambda: NOW)
    old = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    new = json.loads(json.dumps(old))
    new["spec"]["ephemeralContainers"] = [{"name": "debug", "image": "busybox"}]
    main = json.loads(json.dumps(new))
    strategy.prepare_for_update(main, old)
    assert "ephemeralContainers" not in main["spec"]
    via = json.loads(json.dumps(new))
    strategy.prepare_for_subresource_update("ephemeralcontainers", via, old)
    assert via["spec"]["ephemeralContainers"] == [{"name": "debug", "image": "busybox"}]
    assert strategy.validate_update(via, old, "ephemeralcontainers") == []
    removed = json.loads(json.dumps(old))
    assert texts(strategy.validate_update(removed, via, "ephemeralcontainers")) == [
        'spec.ephemeralContainers: Forbidden: existing ephemeral containers "debug" may not be removed\n'
    ]


def test_persistent_volume_and_claim_messages() -> None:
    pv = {"metadata": {"name": "pv"}, "spec": {}}
    PersistentVolumeStrategy().default(pv)
    assert texts(PersistentVolumeStrategy().validate(pv, None)) == [
        "spec.accessModes: Required value",
        "spec.capacity: Required value",
        "spec: Required value: must specify a volume type",
    ]
    pvc = {
        "metadata": {"name": "c"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    assert PersistentVolumeClaimStrategy().validate(pvc, None) == []
    changed = json.loads(json.dumps(pvc))
    changed["spec"]["accessModes"] = ["ReadWriteMany"]
    assert texts(PersistentVolumeClaimStrategy().validate(changed, pvc)) == [
        "spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName "
        "for bound claims"
    ]
    pvc["spec"]["accessModes"] = []
    assert texts(PersistentVolumeClaimStrategy().validate(pvc, None)) == [
        "spec.accessModes: Required value: at least 1 access mode is required"
    ]


def test_replication_controller_defaults_selector_from_template() -> None:
    rc = {"metadata": {"name": "rc"}, "spec": {"template": template({"app": "x"})}}
    ReplicationControllerStrategy().default(rc)
    assert rc["spec"]["selector"] == {"app": "x"} and rc["metadata"]["labels"] == {"app": "x"}
    assert ReplicationControllerStrategy().validate(rc, None) == []


# -- batch ------------------------------------------------------------------------------------------


def test_job_generated_selector_and_restart_policy() -> None:
    job = {
        "metadata": {"name": "j", "uid": "u1"},
        "spec": {
            "template": {"spec": {"containers": [{"name": "c", "image": "i"}], "restartPolicy": "Always"}}
        },
    }
    strategy = JobStrategy()
    strategy.prepare_for_create(job)
    strategy.default(job)
    spec = job["spec"]
    assert spec["selector"] == {"matchLabels": {CONTROLLER_UID: "u1"}}
    assert spec["template"]["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "j"
    assert (spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (1, 1, 6)
    assert texts(strategy.validate(job, None)) == [
        'spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"'
    ]
    manual = {
        "metadata": {"name": "m", "uid": "u2"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": template({"a": "b"}, restartPolicy="Never"),
        },
    }
    strategy.prepare_for_create(manual)
    assert texts(strategy.validate(manual, None)) == [
        'spec.selector: Invalid value: "dict": `selector` not auto-generated'
    ]


@pytest.mark.parametrize(
    ("schedule", "error"),
    [
        ("*/5 * * * *", None),
        ("0 3 * * MON-FRI", None),
        ("@hourly", None),
        ("@every 1h30m", None),
        ("every minute", "expected exactly 5 fields, found 2: [every minute]"),
        ("60 * * * *", "end of range (60) above maximum (59): 60"),
        ("* * 0 * *", "beginning of range (0) below minimum (1): 0"),
        ("x * * * *", 'failed to parse int from x: strconv.Atoi: parsing "x": invalid syntax'),
        ("@often", "unrecognized descriptor: @often"),
    ],
)
def test_cron_parse(schedule: str, error: str | None) -> None:
    assert cron.parse_error(schedule) == error


def test_cronjob_name_length_and_time_zone() -> None:
    cj = {
        "metadata": {"name": "x" * 53},
        "spec": {
            "schedule": "* * * * *",
            "timeZone": "Mars/Olympus",
            "jobTemplate": {
                "spec": {
                    "template": {
                        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}
                    }
                }
            },
        },
    }
    CronJobStrategy().default(cj)
    assert texts(CronJobStrategy().validate(cj, None)) == [
        f'metadata.name: Invalid value: "{"x" * 53}": must be no more than 52 characters',
        'spec.timeZone: Invalid value: "Mars/Olympus": unknown time zone Mars/Olympus',
    ]


# -- autoscaling and events: conversions ------------------------------------------------------------


def test_hpa_v1_v2_round_trip() -> None:
    v2 = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "h"},
        "spec": {
            "scaleTargetRef": {"kind": "Deployment", "name": "web"},
            "minReplicas": 1,
            "maxReplicas": 4,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}},
                },
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": "qps"},
                        "target": {"type": "AverageValue", "averageValue": "10"},
                    },
                },
            ],
        },
        "status": {
            "currentReplicas": 2,
            "desiredReplicas": 2,
            "conditions": [{"type": "AbleToScale", "status": "True"}],
        },
    }
    converter = HPAConverter()
    v1 = converter.from_storage(v2)
    assert v1["spec"]["targetCPUUtilizationPercentage"] == 60
    assert "metrics" not in v1["spec"]
    assert "autoscaling.alpha.kubernetes.io/metrics" in v1["metadata"]["annotations"]
    assert converter.from_storage(v1) is v1  # already v1: idempotent
    back = converter.to_storage(v1)
    assert back["spec"] == v2["spec"]
    assert back["status"]["conditions"] == v2["status"]["conditions"]
    assert "annotations" not in back["metadata"]


def test_hpa_validation() -> None:
    hpa = {
        "metadata": {"name": "h"},
        "spec": {"scaleTargetRef": {"kind": "Deployment"}, "minReplicas": 3, "maxReplicas": 2},
    }
    HPAv2Strategy().default(hpa)
    assert hpa["spec"]["metrics"][0]["resource"]["target"] == {
        "type": "Utilization",
        "averageUtilization": 80,
    }
    assert texts(HPAv2Strategy().validate(hpa, None)) == [
        "spec.scaleTargetRef.name: Required value",
        "spec.maxReplicas: Invalid value: 2: must be greater than or equal to `minReplicas`",
    ]


def test_events_conversion_and_field_labels() -> None:
    new = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "e"},
        "regarding": {"kind": "Pod", "name": "p"},
        "note": "hi",
        "reportingController": "c",
        "deprecatedCount": 3,
    }
    core = EventConverter().to_storage(new)
    assert core["apiVersion"] == "v1"
    assert (core["involvedObject"], core["message"], core["reportingComponent"], core["count"]) == (
        {"kind": "Pod", "name": "p"},
        "hi",
        "c",
        3,
    )
    assert EventConverter().from_storage(core) == new
    labels = EventsV1Strategy().field_labels(core)
    assert labels["regarding.name"] == "p" and labels["reportingController"] == "c"


# -- policy, networking, storage, scheduling, certificates -----------------------------------------


def test_pdb_messages() -> None:
    pdb = {"metadata": {"name": "p"}, "spec": {"minAvailable": "120%", "maxUnavailable": 1}}
    assert texts(PodDisruptionBudgetStrategy().validate(pdb, None)) == [
        'spec: Invalid value: "dict": minAvailable and maxUnavailable cannot be both set',
        'spec.minAvailable: Invalid value: "120%": must not be greater than 100%',
    ]


def test_ingress_messages() -> None:
    ing = {
        "metadata": {"name": "i"},
        "spec": {
            "rules": [
                {
                    "host": "10.0.0.1",
                    "http": {
                        "paths": [
                            {
                                "path": "api",
                                "pathType": "Prefix",
                                "backend": {"service": {"name": "s", "port": {}}},
                            }
                        ]
                    },
                }
            ]
        },
    }
    assert texts(IngressStrategy().validate(ing, None)) == [
        'spec.rules[0].host: Invalid value: "10.0.0.1": must be a DNS name, not an IP address',
        'spec.rules[0].http.paths[0].path: Invalid value: "api": must be an absolute path',
        'spec.rules[0].http.paths[0].backend.service.port: Invalid value: "dict": port name or number is required',
    ]
    assert texts(IngressStrategy().validate({"spec": {}}, None)) == [
        'spec: Invalid value: "": either `defaultBackend` or `rules` must be specified'
    ]


def test_network_policy_defaults() -> None:
    netpol = {"spec": {"podSelector": {}, "egress": [{"ports": [{"port": 53}]}]}}
    NetworkPolicyStrategy().default(netpol)
    assert netpol["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert netpol["spec"]["egress"][0]["ports"][0]["protocol"] == "TCP"


def test_ip_address_names_are_canonical_ips() -> None:
    validator = IPAddressStrategy.name_validator
    assert validator("10.0.0.1") == []
    assert validator("2001:db8::1") == []
    assert validator("2001:0db8::1") == ['must be in canonical form ("2001:db8::1")']
    assert validator("web") == ["must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"]


def test_storage_class_immutable_fields() -> None:
    sc = {"metadata": {"name": "s"}, "provisioner": "example.com/disk"}
    StorageClassStrategy().default(sc)
    assert (sc["reclaimPolicy"], sc["volumeBindingMode"]) == ("Delete", "Immediate")
    changed = {**sc, "parameters": {"a": "b"}}
    assert texts(StorageClassStrategy().validate(changed, sc)) == [
        "parameters: Forbidden: updates to parameters are forbidden."
    ]


def test_priority_class_rules() -> None:
    strategy = PriorityClassStrategy()
    too_high = {"metadata": {"name": "mine"}, "value": 2_000_000_000}
    strategy.default(too_high)
    assert texts(strategy.validate(too_high, None)) == [
        "value: Forbidden: maximum allowed value of a user defined priority is 1000000000"
    ]
    changed = {**too_high, "value": 5}
    assert texts(strategy.validate(changed, {**too_high, "value": 4})) == [
        "Value: Forbidden: may not be changed in an update."
    ]


def test_csr_approval_keeps_spec_and_merges_conditions() -> None:
    strategy = CSRStrategy(lambda: NOW)
    old = {"metadata": {"name": "c"}, "spec": {"request": "x", "signerName": "a.b/c"}, "status": {}}
    new = json.loads(json.dumps(old))
    new["spec"]["signerName"] = "changed.example.com/x"
    new["status"] = {
        "conditions": [{"type": "Approved", "status": "True", "reason": "R"}],
        "certificate": "Zm9v",
    }
    strategy.prepare_for_subresource_update("approval", new, old)
    assert new["spec"] == old["spec"]
    assert "certificate" not in new["status"]
    condition = new["status"]["conditions"][0]
    assert condition["lastUpdateTime"] == condition["lastTransitionTime"] == "2027-01-15T08:00:00Z"
    both = {
        **new,
        "status": {
            "conditions": [{"type": "Approved", "status": "True"}, {"type": "Denied", "status": "True"}]
        },
    }
    assert (
        'status.conditions[1].type: Invalid value: "Denied": Approved and Denied conditions are mutually exclusive'
        in texts(strategy.validate(both, None))
    )


# -- quantities -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1Gi", 2**30),
        ("500m", 0.5),
        ("2", 2),
        ("1e3", 1000),
        ("1.5k", 1500),
        ("-1", -1),
        ("1Gb", None),
        ("", None),
    ],
)
def test_quantity_parse(text: str, value: float | None) -> None:
    parsed = quantity.parse(text)
    assert (None if parsed is None else float(parsed)) == value


# -- printers of the new kinds ----------------------------------------------------------------------


def cells(kind: str, group: str, obj: dict[str, Any]) -> list[Any]:
    obj.setdefault("metadata", {}).setdefault("name", "x")
    obj["metadata"].setdefault("creationTimestamp", "2027-01-15T07:55:00Z")
    row: list[Any] = build_table(kind, group, [obj], now=NOW)["rows"][0]["cells"]
    return row


def columns(kind: str, group: str) -> list[str]:
    return [c["name"] for c in build_table(kind, group, [], now=NOW)["columnDefinitions"]]


def test_printer_columns_and_cells() -> None:
    assert columns("PersistentVolume", "") == [
        "Name", "Capacity", "Access Modes", "Reclaim Policy", "Status", "Claim", "StorageClass",
        "VolumeAttributesClass", "Reason", "Age", "VolumeMode",
    ]  # fmt: skip
    pv = {"spec": {"capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteMany", "ReadWriteOnce"],
                   "persistentVolumeReclaimPolicy": "Retain", "claimRef": {"namespace": "ns", "name": "c"},
                   "storageClassName": "fast"}, "status": {"phase": "Bound"}}  # fmt: skip
    assert cells("PersistentVolume", "", pv) == [
        "x",
        "5Gi",
        "RWO,RWX",
        "Retain",
        "Bound",
        "ns/c",
        "fast",
        "<unset>",
        "",
        "5m",
        "<unset>",
    ]
    hpa = {"spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 5, "metrics": [
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}]},
        "status": {"currentReplicas": 2, "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 35}}}]}}  # fmt: skip
    assert cells("HorizontalPodAutoscaler", "autoscaling", hpa) == [
        "x",
        "Deployment/web",
        "cpu: 35%/70%",
        "<unset>",
        5,
        2,
        "5m",
    ]
    csr = {"spec": {"signerName": "s/x", "username": "alice", "expirationSeconds": 3600},
           "status": {"conditions": [{"type": "Approved"}], "certificate": "Zm9v"}}  # fmt: skip
    assert cells("CertificateSigningRequest", "certificates.k8s.io", csr) == [
        "x",
        "5m",
        "s/x",
        "alice",
        "60m",
        "Approved,Issued",
    ]
    sc = {
        "metadata": {"annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "p",
    }
    assert cells("StorageClass", "storage.k8s.io", sc) == [
        "x (default)",
        "p",
        "Delete",
        "Immediate",
        False,
        "5m",
    ]
    quota = {
        "status": {"hard": {"pods": "10", "limits.cpu": "2", "requests.cpu": "1"}, "used": {"pods": "3"}}
    }
    assert cells("ResourceQuota", "", quota) == [
        "x",
        "5m",
        "pods: 3/10, requests.cpu: 0/1",
        "limits.cpu: 0/2",
    ]
    sts = {
        "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "a", "image": "i"}]}}},
        "status": {"readyReplicas": 1},
    }
    assert cells("StatefulSet", "apps", sts) == ["x", "1/3", "5m", "a", "i"]
    cj = {
        "spec": {
            "schedule": "* * * * *",
            "suspend": False,
            "jobTemplate": {"spec": {"template": {"spec": {}}}},
        }
    }
    assert cells("CronJob", "batch", cj)[:7] == ["x", "* * * * *", "<none>", "False", 0, "<none>", "5m"]
    assert columns("LimitRange", "") == ["Name", "Created At"]


def test_column_descriptions_are_upstreams() -> None:
    table = build_table("Pod", "", [], now=NOW)
    name, ready = table["columnDefinitions"][:2]
    assert name["description"].startswith("Name must be unique within a namespace.")
    assert ready["description"] == "The aggregate readiness state of this pod for accepting traffic."
    age = build_table("ConfigMap", "", [], now=NOW)["columnDefinitions"][2]
    assert age["description"].startswith("CreationTimestamp is a timestamp representing the server time")
    selector = build_table("ReplicaSet", "apps", [], now=NOW)["columnDefinitions"][-1]
    assert selector["description"].startswith(
        "Selector is a label query over pods that should match the replica count."
    )


def test_flow_schemas_print_in_matching_order() -> None:
    items = [
        {"metadata": {"name": "b"}, "spec": {"matchingPrecedence": 10}},
        {"metadata": {"name": "a"}, "spec": {"matchingPrecedence": 900}},
        {"metadata": {"name": "c"}, "spec": {"matchingPrecedence": 10}},
    ]
    rows = build_table("FlowSchema", "flowcontrol.apiserver.k8s.io", items, now=NOW)["rows"]
    assert [r["cells"][0] for r in rows] == ["b", "c", "a"]
