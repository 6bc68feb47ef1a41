"""Server-side Table rendering: upstream column names, cell semantics, durations, JSONPath, includeObject."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from vplane.kube.errors import StatusError
from vplane.kube.tables import (
    JsonPathError,
    age,
    build_table,
    compile_jsonpath,
    crd_cell,
    crd_columns,
    format_endpoints,
    format_label_selector,
    human_duration,
    pod_status_cells,
    printer_for,
)

NOW_DT = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
NOW = NOW_DT.timestamp()


def ago(**delta: float) -> str:
    return (NOW_DT - timedelta(**delta)).strftime("%Y-%m-%dT%H:%M:%SZ")


def meta(name: str, created: str | None = None, **extra: Any) -> dict[str, Any]:
    m: dict[str, Any] = {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": "7"}
    m["creationTimestamp"] = created or ago(minutes=5)
    m.update(extra)
    return m


def table(kind: str, group: str, *objects: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    return build_table(kind, group, list(objects), now=NOW, **kwargs)


def names(t: dict[str, Any]) -> list[str]:
    return [c["name"] for c in t["columnDefinitions"]]


def cells(t: dict[str, Any]) -> list[Any]:
    (row,) = t["rows"]
    result: list[Any] = row["cells"]
    return result


# ------------------------------------------------------------------ durations


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-3, "<invalid>"),
        (-2, "<invalid>"),
        (-1.5, "0s"),
        (-0.2, "0s"),
        (0, "0s"),
        (59, "59s"),
        (119.9, "119s"),
        (120, "2m"),
        (125, "2m5s"),
        (599, "9m59s"),
        (600, "10m"),
        (610, "10m"),
        (3 * 3600 - 1, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 60, "3h1m"),
        (8 * 3600 - 60, "7h59m"),
        (8 * 3600, "8h"),
        (47 * 3600 + 3599, "47h"),
        (48 * 3600, "2d"),
        (49 * 3600, "2d1h"),
        (8 * 86400, "8d"),
        (729 * 86400, "729d"),
        (730 * 86400, "2y"),
        (731 * 86400, "2y1d"),
        (8 * 365 * 86400, "8y"),
        (20 * 365 * 86400 + 5, "20y"),
    ],
)
def test_human_duration_thresholds(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text


def test_age() -> None:
    assert age(None, NOW) == "<unknown>"
    assert age("", NOW) == "<unknown>"
    assert age(ago(seconds=30), NOW) == "30s"
    assert age("2026-05-01T11:00:00.123456Z", NOW) == "59m"
    assert age("2026-05-01T13:00:00+02:00", NOW) == "60m"
    assert age("yesterday", NOW) == "<invalid>"


# ------------------------------------------------------------------ shape and includeObject


def test_configmap_table_shape_and_metadata_rows() -> None:
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta("c2", labels={"app": "x"}),
        "data": {"a": "1", "b": "2"},
        "binaryData": {"c": "AA=="},
    }
    t = table("ConfigMap", "", cm)
    assert t["kind"] == "Table" and t["apiVersion"] == "meta.k8s.io/v1"
    assert t["metadata"] == {"resourceVersion": "7"}
    assert names(t) == ["Name", "Data", "Age"]
    assert t["columnDefinitions"][0] == {
        "name": "Name",
        "type": "string",
        "format": "name",
        "description": t["columnDefinitions"][0]["description"],
        "priority": 0,
    }
    assert all(
        set(c) == {"name", "type", "format", "description", "priority"} for c in t["columnDefinitions"]
    )
    (row,) = t["rows"]
    assert row["cells"] == ["c2", 3, "5m"]
    assert row["object"] == {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": cm["metadata"],
    }
    assert "conditions" not in row


def test_include_object_variants() -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("c")}
    assert table("ConfigMap", "", cm, include_object="Object")["rows"][0]["object"] is cm
    assert table("ConfigMap", "", cm, include_object="None")["rows"][0]["object"] is None
    assert (
        table("ConfigMap", "", cm, include_object="")["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    )
    beta = table("ConfigMap", "", cm, api_version="meta.k8s.io/v1beta1")
    assert beta["apiVersion"] == beta["rows"][0]["object"]["apiVersion"] == "meta.k8s.io/v1beta1"
    with pytest.raises(StatusError) as err:
        table("ConfigMap", "", cm, include_object="Everything")
    assert err.value.code == 400
    assert err.value.message == 'unrecognized includeObject value: "Everything"'


def test_list_meta_and_watch_events_without_columns() -> None:
    items = [{"metadata": meta(f"c{i}")} for i in range(3)]
    t = table(
        "ConfigMap",
        "",
        *items,
        list_meta={"resourceVersion": "42", "continue": "abc", "remainingItemCount": 5},
    )
    assert t["metadata"] == {"resourceVersion": "42", "continue": "abc", "remainingItemCount": 5}
    assert [r["cells"][0] for r in t["rows"]] == ["c0", "c1", "c2"]
    assert table("ConfigMap", "", *items, list_meta={"resourceVersion": "42", "continue": ""})[
        "metadata"
    ] == {"resourceVersion": "42"}
    empty = build_table("ConfigMap", "", [], now=NOW, list_meta={"resourceVersion": "9"})
    assert empty["rows"] == [] and names(empty) == ["Name", "Data", "Age"]
    event = table("ConfigMap", "", items[0], with_columns=False)
    assert event["columnDefinitions"] is None
    assert set(event) == {"kind", "apiVersion", "metadata", "columnDefinitions", "rows"}


def test_list_kind_names_resolve_to_the_item_printer() -> None:
    assert printer_for("", "ConfigMapList") is printer_for("", "ConfigMap")


# ------------------------------------------------------------------ core kinds


def test_namespace() -> None:
    ns = {"metadata": meta("team-a", ago(days=3)), "status": {"phase": "Terminating"}}
    t = table("Namespace", "", ns)
    assert names(t) == ["Name", "Status", "Age"]
    assert cells(t) == ["team-a", "Terminating", "3d"]
    assert cells(table("Namespace", "", {"metadata": meta("fresh")})) == ["fresh", "Active", "5m"]


def test_secret_and_service_account() -> None:
    secret = {"metadata": meta("tls"), "type": "kubernetes.io/tls", "data": {"tls.crt": "", "tls.key": ""}}
    t = table("Secret", "", secret)
    assert names(t) == ["Name", "Type", "Data", "Age"]
    assert cells(t) == ["tls", "kubernetes.io/tls", 2, "5m"]
    assert cells(table("Secret", "", {"metadata": meta("s")}))[1:3] == ["Opaque", 0]
    sa = {"metadata": meta("default"), "secrets": [{"name": "tok"}]}
    t = table("ServiceAccount", "", sa)
    assert names(t) == ["Name", "Secrets", "Age"]
    assert cells(t) == ["default", 1, "5m"]


def test_service_cluster_ip() -> None:
    svc = {
        "metadata": meta("web"),
        "spec": {
            "type": "ClusterIP",
            "clusterIP": "10.0.0.10",
            "clusterIPs": ["10.0.0.10", "fd00::10"],
            "ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080}, {"port": 53, "protocol": "UDP"}],
            "selector": {"tier": "web", "app": "shop"},
        },
    }
    t = table("Service", "", svc)
    assert names(t) == ["Name", "Type", "Cluster-IP", "External-IP", "Port(s)", "Age", "Selector"]
    assert [c["priority"] for c in t["columnDefinitions"]] == [0, 0, 0, 0, 0, 0, 1]
    assert cells(t) == ["web", "ClusterIP", "10.0.0.10", "<none>", "80/TCP,53/UDP", "5m", "app=shop,tier=web"]


def test_service_load_balancer_node_port_and_external_name() -> None:
    lb = {
        "metadata": meta("lb"),
        "spec": {
            "type": "LoadBalancer",
            "clusterIPs": ["10.0.0.11"],
            "ports": [{"port": 443, "nodePort": 30443}],
        },
        "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}, {"hostname": "a.example.com"}]}},
    }
    assert cells(table("Service", "", lb))[1:5] == [
        "LoadBalancer",
        "10.0.0.11",
        "203.0.113.9,a.example.com",
        "443:30443/TCP",
    ]
    pending = {"metadata": meta("p"), "spec": {"type": "LoadBalancer", "clusterIPs": ["10.0.0.12"]}}
    assert cells(table("Service", "", pending))[3:5] == ["<pending>", "<none>"]
    ext = {"metadata": meta("e"), "spec": {"type": "ExternalName", "externalName": "db.example.com"}}
    assert cells(table("Service", "", ext))[1:4] == ["ExternalName", "<none>", "db.example.com"]
    np = {"metadata": meta("n"), "spec": {"type": "NodePort", "externalIPs": ["198.51.100.1"]}}
    assert cells(table("Service", "", np))[3] == "198.51.100.1"


def test_endpoints() -> None:
    eps = {
        "metadata": meta("web"),
        "subsets": [
            {
                "addresses": [{"ip": "10.1.0.1"}, {"ip": "10.1.0.2"}, {"ip": "fd00::3"}],
                "ports": [{"name": "http", "port": 8080}, {"name": "metrics", "port": 9090}],
            }
        ],
    }
    t = table("Endpoints", "", eps)
    assert names(t) == ["Name", "Endpoints", "Age"]
    assert cells(t) == ["web", "10.1.0.1:8080,10.1.0.2:8080,[fd00::3]:8080 + 3 more...", "5m"]
    assert format_endpoints({"subsets": []}) == "<none>"
    assert format_endpoints({"subsets": [{"addresses": [{"ip": "10.1.0.9"}]}]}) == "10.1.0.9"
    assert (
        format_endpoints({"subsets": [{"notReadyAddresses": [{"ip": "10.1.0.9"}], "ports": [{"port": 1}]}]})
        == ""
    )


def running_pod(**status_overrides: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": meta("web-0", ago(hours=5)),
        "spec": {
            "nodeName": "node-1",
            "containers": [{"name": "app", "image": "nginx"}, {"name": "side", "image": "envoy"}],
        },
        "status": {
            "phase": "Running",
            "podIP": "10.1.0.5",
            "podIPs": [{"ip": "10.1.0.5"}],
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}],
            "containerStatuses": [
                {
                    "name": "app",
                    "ready": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": ago(hours=2)}},
                },
                {
                    "name": "side",
                    "ready": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": ago(hours=2)}},
                },
            ],
        },
    }
    pod["status"].update(status_overrides)
    return pod


def test_pod_running() -> None:
    t = table("Pod", "", running_pod())
    assert names(t) == [
        "Name",
        "Ready",
        "Status",
        "Restarts",
        "Age",
        "IP",
        "Node",
        "Nominated Node",
        "Readiness Gates",
    ]
    assert [c["priority"] for c in t["columnDefinitions"]] == [0, 0, 0, 0, 0, 1, 1, 1, 1]
    assert cells(t) == ["web-0", "2/2", "Running", "0", "5h", "10.1.0.5", "node-1", "<none>", "<none>"]


def test_pod_crash_loop_with_restart_age() -> None:
    pod = running_pod()
    pod["status"]["containerStatuses"][0] = {
        "name": "app",
        "ready": False,
        "restartCount": 4,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(seconds=40)}},
    }
    assert pod_status_cells(pod, NOW) == ("1/2", "CrashLoopBackOff", "4 (40s ago)")


def test_pod_image_pull_back_off_and_exit_codes() -> None:
    pod = running_pod(phase="Pending")
    pod["status"]["containerStatuses"] = [
        {
            "name": "app",
            "ready": False,
            "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff"}},
        }
    ]
    assert pod_status_cells(pod, NOW)[1] == "ImagePullBackOff"
    pod["status"]["containerStatuses"] = [
        {
            "name": "app",
            "ready": False,
            "restartCount": 0,
            "state": {"terminated": {"exitCode": 137, "signal": 9}},
        }
    ]
    assert pod_status_cells(pod, NOW)[1] == "Signal:9"
    pod["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 2}}
    assert pod_status_cells(pod, NOW)[1] == "ExitCode:2"


def test_pod_completed_with_a_running_sidecar_reads_running() -> None:
    pod = running_pod()
    pod["status"]["containerStatuses"][1] = {
        "name": "side",
        "ready": False,
        "restartCount": 0,
        "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
    }
    # Containers are scanned last to first, so the running "app" keeps the pod Running.
    pod["status"]["containerStatuses"].reverse()
    assert pod_status_cells(pod, NOW)[1] == "Running"
    pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    assert pod_status_cells(pod, NOW)[1] == "NotReady"


def test_pod_init_containers() -> None:
    pod = running_pod(phase="Pending")
    pod["spec"]["initContainers"] = [{"name": "migrate", "image": "m"}, {"name": "wait", "image": "w"}]
    pod["status"]["conditions"] = []
    pod["status"]["containerStatuses"] = []
    pod["status"]["initContainerStatuses"] = [
        {"name": "migrate", "ready": False, "restartCount": 0, "state": {"terminated": {"exitCode": 0}}},
        {"name": "wait", "ready": False, "restartCount": 0, "state": {"running": {}}},
    ]
    assert pod_status_cells(pod, NOW)[:2] == ("0/2", "Init:1/2")
    pod["status"]["initContainerStatuses"][1]["state"] = {"waiting": {"reason": "ErrImagePull"}}
    assert pod_status_cells(pod, NOW)[1] == "Init:ErrImagePull"
    pod["status"]["initContainerStatuses"][1]["state"] = {"terminated": {"exitCode": 3}}
    assert pod_status_cells(pod, NOW)[1] == "Init:ExitCode:3"


def test_pod_restartable_init_container_counts_as_a_container() -> None:
    pod = running_pod()
    pod["spec"]["initContainers"] = [{"name": "proxy", "image": "p", "restartPolicy": "Always"}]
    pod["status"]["initContainerStatuses"] = [
        {"name": "proxy", "ready": True, "started": True, "restartCount": 1, "state": {"running": {}}}
    ]
    assert pod_status_cells(pod, NOW) == ("3/3", "Running", "1")


def test_pod_terminating_scheduling_gated_and_readiness_gates() -> None:
    pod = running_pod()
    pod["metadata"]["deletionTimestamp"] = ago(seconds=3)
    assert cells(table("Pod", "", pod))[2] == "Terminating"
    pod["status"]["reason"] = "NodeLost"
    assert cells(table("Pod", "", pod))[2] == "Unknown"

    gated = {
        "metadata": meta("g"),
        "spec": {"containers": [{"name": "a"}], "readinessGates": [{"conditionType": "example.com/ok"}]},
        "status": {
            "phase": "Pending",
            "nominatedNodeName": "node-2",
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"},
                {"type": "example.com/ok", "status": "True"},
            ],
        },
    }
    assert cells(table("Pod", "", gated))[1:] == [
        "0/1",
        "SchedulingGated",
        "0",
        "5m",
        "<none>",
        "<none>",
        "node-2",
        "1/1",
    ]


def test_finished_pods_carry_a_completed_row_condition() -> None:
    pod = running_pod(phase="Succeeded")
    pod["status"]["containerStatuses"] = [
        {
            "name": "app",
            "ready": False,
            "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
        }
    ]
    (row,) = table("Pod", "", pod)["rows"]
    assert row["cells"][2] == "Completed"
    assert row["conditions"][0]["type"] == "Completed" and row["conditions"][0]["reason"] == "Succeeded"


def test_core_event() -> None:
    event = {
        "metadata": meta("web-0.17a"),
        "involvedObject": {"kind": "Pod", "name": "web-0", "fieldPath": "spec.containers{app}"},
        "reason": "BackOff",
        "message": "Back-off restarting failed container\n",
        "type": "Warning",
        "source": {"component": "kubelet", "host": "node-1"},
        "firstTimestamp": ago(minutes=30),
        "lastTimestamp": ago(seconds=20),
        "count": 7,
    }
    t = table("Event", "", event)
    assert names(t) == [
        "Last Seen", "Type", "Reason", "Object", "Subobject", "Source", "Message", "First Seen", "Count", "Name",
    ]  # fmt: skip
    assert [c["priority"] for c in t["columnDefinitions"]] == [0, 0, 0, 0, 1, 1, 0, 1, 1, 1]
    assert cells(t) == [
        "20s",
        "Warning",
        "BackOff",
        "pod/web-0",
        "spec.containers{app}",
        "kubelet, node-1",
        "Back-off restarting failed container",
        "30m",
        7,
        "web-0.17a",
    ]


def test_new_style_events_in_both_groups() -> None:
    core = {
        "metadata": meta("e1"),
        "involvedObject": {"kind": "Node"},
        "eventTime": "2026-05-01T11:59:00.000000Z",
        "reportingComponent": "scheduler",
        "series": {"count": 3, "lastObservedTime": "2026-05-01T11:59:50.000000Z"},
    }
    assert cells(table("Event", "", core))[:9] == ["10s", "", "", "node", "", "scheduler", "", "60s", 3]
    events_v1 = {
        "metadata": meta("e2"),
        "regarding": {"kind": "Deployment", "name": "web"},
        "note": "Scaled up",
        "reason": "ScalingReplicaSet",
        "type": "Normal",
        "eventTime": "2026-05-01T11:58:00.000000Z",
        "reportingController": "deployment-controller",
        "reportingInstance": "cm-1",
    }
    assert cells(table("Event", "events.k8s.io", events_v1)) == [
        "2m",
        "Normal",
        "ScalingReplicaSet",
        "deployment/web",
        "",
        "deployment-controller, cm-1",
        "Scaled up",
        "2m",
        1,
        "e2",
    ]


def test_node() -> None:
    node = {
        "metadata": meta(
            "node-1",
            ago(days=10),
            labels={"node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "edge"},
        ),
        "spec": {"unschedulable": True},
        "status": {
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True"},
            ],
            "addresses": [
                {"type": "Hostname", "address": "n1"},
                {"type": "InternalIP", "address": "192.168.0.10"},
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.34.0",
                "osImage": "Debian",
                "kernelVersion": "6.1",
                "containerRuntimeVersion": "containerd://2.0",
            },
        },
    }
    t = table("Node", "", node)
    assert names(t)[:5] == ["Name", "Status", "Roles", "Age", "Version"]
    assert cells(t) == [
        "node-1",
        "Ready,SchedulingDisabled",
        "control-plane,edge",
        "10d",
        "v1.34.0",
        "192.168.0.10",
        "<none>",
        "Debian",
        "6.1",
        "containerd://2.0",
    ]
    assert cells(table("Node", "", {"metadata": meta("bare")}))[1:3] == ["Unknown", "<none>"]


# ------------------------------------------------------------------ other groups


def test_deployment() -> None:
    dep = {
        "metadata": meta("web", ago(hours=26)),
        "spec": {
            "replicas": 3,
            "selector": {
                "matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "dev"]}],
            },
            "template": {
                "spec": {
                    "containers": [{"name": "app", "image": "nginx:1"}, {"name": "log", "image": "fluent"}]
                }
            },
        },
        "status": {"replicas": 3, "readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2},
    }
    t = table("Deployment", "apps", dep)
    assert names(t) == ["Name", "Ready", "Up-to-date", "Available", "Age", "Containers", "Images", "Selector"]
    assert cells(t) == ["web", "2/3", 3, 2, "26h", "app,log", "nginx:1,fluent", "app=web,env in (dev,prod)"]
    # Upstream defaults replicas to 1; a fresh object has no status yet.
    assert cells(table("Deployment", "apps", {"metadata": meta("d"), "spec": {}}))[1:4] == ["0/1", 0, 0]


def test_replicaset() -> None:
    rs = {
        "metadata": meta("web-7d9f"),
        "spec": {
            "replicas": 2,
            "selector": {
                "matchExpressions": [
                    {"key": "canary", "operator": "DoesNotExist"},
                    {"key": "app", "operator": "Exists"},
                ]
            },
            "template": {"spec": {"containers": [{"name": "app", "image": "nginx"}]}},
        },
        "status": {"replicas": 2, "readyReplicas": 1},
    }
    t = table("ReplicaSet", "apps", rs)
    assert names(t) == ["Name", "Desired", "Current", "Ready", "Age", "Containers", "Images", "Selector"]
    assert [c["type"] for c in t["columnDefinitions"][1:4]] == ["integer"] * 3
    assert cells(t) == ["web-7d9f", 2, 2, 1, "5m", "app", "nginx", "app,!canary"]
    assert format_label_selector(None) == "<none>"
    assert format_label_selector({}) == "<none>"
    assert (
        format_label_selector({"matchExpressions": [{"key": "x", "operator": "NotIn", "values": ["b", "a"]}]})
        == "x notin (a,b)"
    )


def test_job() -> None:
    job = {
        "metadata": meta("backup"),
        "spec": {"completions": 3, "template": {"spec": {"containers": [{"name": "b", "image": "busybox"}]}}},
        "status": {
            "succeeded": 3,
            "startTime": ago(minutes=4),
            "completionTime": ago(minutes=2),
            "conditions": [{"type": "Complete", "status": "True"}],
        },
    }
    t = table("Job", "batch", job)
    assert names(t)[:5] == ["Name", "Status", "Completions", "Duration", "Age"]
    assert cells(t)[:5] == ["backup", "Complete", "3/3", "2m", "5m"]
    running = {"metadata": meta("r"), "spec": {"parallelism": 2}, "status": {"startTime": ago(seconds=30)}}
    assert cells(table("Job", "batch", running))[1:4] == ["Running", "0/1 of 2", "30s"]


def test_lease_and_default_convertor_kinds() -> None:
    lease = {"metadata": meta("kube-scheduler"), "spec": {"holderIdentity": "node-1_abc"}}
    t = table("Lease", "coordination.k8s.io", lease)
    assert names(t) == ["Name", "Holder", "Age"]
    assert cells(t) == ["kube-scheduler", "node-1_abc", "5m"]
    assert cells(table("Lease", "coordination.k8s.io", {"metadata": meta("free"), "spec": {}}))[1] == ""

    for kind, group in [
        ("Role", "rbac.authorization.k8s.io"),
        ("ClusterRole", "rbac.authorization.k8s.io"),
        ("CustomResourceDefinition", "apiextensions.k8s.io"),
        ("Unknown", "example.com"),
    ]:
        t = table(kind, group, {"metadata": meta("r", "2026-04-30T10:00:00.5+02:00")})
        assert names(t) == ["Name", "Created At"]
        assert t["columnDefinitions"][1]["type"] == "date"
        assert cells(t) == ["r", "2026-04-30T08:00:00Z"]
    no_time = build_table("Role", "rbac.authorization.k8s.io", [{"metadata": {"name": "x"}}], now=NOW)
    assert cells(no_time) == ["x", "0001-01-01T00:00:00Z"]


def test_role_bindings() -> None:
    binding = {
        "metadata": meta("admins"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
        "subjects": [
            {"kind": "User", "name": "alice"},
            {"kind": "Group", "name": "devs"},
            {"kind": "User", "name": "bob"},
            {"kind": "ServiceAccount", "name": "ci", "namespace": "tools"},
        ],
    }
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        t = table(kind, "rbac.authorization.k8s.io", binding)
        assert names(t) == ["Name", "Role", "Age", "Users", "Groups", "ServiceAccounts"]
        assert cells(t) == ["admins", "ClusterRole/admin", "5m", "alice, bob", "devs", "tools/ci"]


def test_apiservice() -> None:
    local = {
        "metadata": meta("v1.apps"),
        "spec": {"group": "apps", "version": "v1"},
        "status": {"conditions": [{"type": "Available", "status": "True", "reason": "Local"}]},
    }
    t = table("APIService", "apiregistration.k8s.io", local)
    assert names(t) == ["Name", "Service", "Available", "Age"]
    assert cells(t) == ["v1.apps", "Local", "True", "5m"]
    remote = {
        "metadata": meta("v1beta1.metrics.k8s.io"),
        "spec": {"service": {"namespace": "kube-system", "name": "metrics-server"}},
        "status": {"conditions": [{"type": "Available", "status": "False", "reason": "MissingEndpoints"}]},
    }
    assert cells(table("APIService", "apiregistration.k8s.io", remote))[1:3] == [
        "kube-system/metrics-server",
        "False (MissingEndpoints)",
    ]
    assert (
        cells(table("APIService", "apiregistration.k8s.io", {"metadata": meta("x"), "spec": {}}))[2]
        == "Unknown"
    )


def test_validating_admission_policies() -> None:
    group = "admissionregistration.k8s.io"
    policy = {
        "metadata": meta("replicas-limit"),
        "spec": {
            "paramKind": {"apiVersion": "rules.example.com/v1", "kind": "ReplicaLimit"},
            "validations": [{"expression": "true"}, {"expression": "1 < 2"}],
        },
    }
    t = table("ValidatingAdmissionPolicy", group, policy)
    assert names(t) == ["Name", "Validations", "ParamKind", "Age"]
    assert cells(t) == ["replicas-limit", 2, "rules.example.com/v1/ReplicaLimit", "5m"]
    assert cells(table("ValidatingAdmissionPolicy", group, {"metadata": meta("p"), "spec": {}}))[1:3] == [
        0,
        "<unset>",
    ]

    binding = {
        "metadata": meta("b"),
        "spec": {"policyName": "replicas-limit", "paramRef": {"name": "cfg", "namespace": "ns1"}},
    }
    t = table("ValidatingAdmissionPolicyBinding", group, binding)
    assert names(t) == ["Name", "PolicyName", "ParamRef", "Age"]
    assert cells(t) == ["b", "replicas-limit", "ns1/cfg", "5m"]
    binding["spec"]["paramRef"] = {"name": "cfg"}
    assert cells(table("ValidatingAdmissionPolicyBinding", group, binding))[2] == "*/cfg"
    binding["spec"]["paramRef"] = {"selector": {"matchLabels": {"tier": "a"}}}
    assert cells(table("ValidatingAdmissionPolicyBinding", group, binding))[2] == "tier=a"
    del binding["spec"]["paramRef"]
    assert cells(table("ValidatingAdmissionPolicyBinding", group, binding))[2] == "<unset>"


# ------------------------------------------------------------------ JSONPath and CRD columns

DOC: dict[str, Any] = {
    "metadata": {
        "name": "w1",
        "labels": {"app.kubernetes.io/name": "widget"},
        "creationTimestamp": "2026-05-01T11:00:00Z",
    },
    "spec": {"replicas": 3, "size": 1.5, "enabled": False, "hosts": ["a", "b"], "nested": {"k": [1, 2]}},
    "status": {
        "conditions": [
            {"type": "Synced", "status": "False", "reason": "Pending"},
            {"type": "Ready", "status": "True", "observedGeneration": 4},
        ],
        "nothing": None,
    },
}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (".spec.replicas", [3]),
        ("{.spec.replicas}", [3]),
        ("$.spec.replicas", [3]),
        (".spec.missing", []),
        (".spec.replicas.deeper", []),
        (".spec.hosts[0]", ["a"]),
        (".spec.hosts[-1]", ["b"]),
        (".spec.hosts[*]", ["a", "b"]),
        (".spec.hosts[0:1]", ["a"]),
        (".spec.nested.*", [[1, 2]]),
        (".spec['replicas']", [3]),
        (".metadata.labels.app\\.kubernetes\\.io/name", ["widget"]),
        (".metadata.labels['app.kubernetes.io/name']", ["widget"]),
        ('.status.conditions[?(@.type=="Ready")].status', ["True"]),
        (".status.conditions[?(@.type=='Synced')].reason", ["Pending"]),
        (".status.conditions[?(@.type!='Synced')].type", ["Ready"]),
        (".status.conditions[?(@.observedGeneration>=4)].type", ["Ready"]),
        (".status.conditions[?(@.reason)].type", ["Synced"]),
        (".status.conditions[*].type", ["Synced", "Ready"]),
        ("..observedGeneration", [4]),
        (".status.nothing", [None]),
        (".status.nothing.below", []),
    ],
)
def test_jsonpath_subset(path: str, expected: list[Any]) -> None:
    assert compile_jsonpath(path).find(DOC) == expected


@pytest.mark.parametrize(
    "path", [".spec[", ".spec[]", ".spec.hosts[a]", "spec", ".status.conditions[?(@.type=~x)]"]
)
def test_jsonpath_rejects_malformed_paths(path: str) -> None:
    with pytest.raises(JsonPathError):
        compile_jsonpath(path)


def test_jsonpath_errors_that_upstream_reports_at_evaluation() -> None:
    with pytest.raises(JsonPathError):
        compile_jsonpath(".spec.hosts[5]").find(DOC)
    with pytest.raises(JsonPathError):
        compile_jsonpath(".spec.replicas[0]").find(DOC)
    with pytest.raises(JsonPathError):  # int compared with string
        compile_jsonpath(".status.conditions[?(@.observedGeneration=='4')]").find(DOC)


PRINTER_COLUMNS = [
    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
    {"name": "Size", "type": "number", "jsonPath": ".spec.size"},
    {"name": "Enabled", "type": "boolean", "jsonPath": ".spec.enabled"},
    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
    {
        "name": "Hosts",
        "type": "string",
        "jsonPath": ".spec.hosts",
        "priority": 1,
        "description": "Served hosts",
    },
    {"name": "Generation", "type": "string", "jsonPath": ".status.conditions[1].observedGeneration"},
    {"name": "Missing", "type": "string", "jsonPath": ".status.missing"},
    {"name": "Out of range", "type": "string", "jsonPath": ".spec.hosts[9]"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def test_crd_printer_columns() -> None:
    t = build_table("Widget", "example.com", [DOC], now=NOW, printer_columns=PRINTER_COLUMNS)
    assert names(t) == ["Name", *(c["name"] for c in PRINTER_COLUMNS)]
    hosts = t["columnDefinitions"][5]
    assert hosts == {
        "name": "Hosts",
        "type": "string",
        "format": "",
        "description": "Served hosts",
        "priority": 1,
    }
    assert cells(t) == ["w1", 3, 1.5, False, "True", '["a","b"]', "4", None, None, "60m"]


def test_crd_without_printer_columns_shows_age() -> None:
    t = build_table("Widget", "example.com", [DOC], now=NOW, printer_columns=[])
    assert names(t) == ["Name", "Age"]
    assert t["columnDefinitions"][1]["type"] == "date"
    assert cells(t) == ["w1", "60m"]
    assert [c["name"] for c in crd_columns([])] == ["Name", "Age"]


@pytest.mark.parametrize(
    ("column_type", "value", "cell"),
    [
        ("integer", 3, 3),
        ("integer", 2.9, 2),
        ("integer", "3", None),
        ("integer", True, None),
        ("number", 2, 2.0),
        ("number", "x", None),
        ("boolean", True, True),
        ("boolean", "true", None),
        ("string", "x", "x"),
        ("string", 7, "7"),
        ("string", 1.5, "1.5"),
        ("string", 1234567.5, "1.2345675e+06"),
        ("string", True, "true"),
        ("string", {"b": 1, "a": "<x>"}, '{"a":"\\u003cx\\u003e","b":1}'),
        ("string", None, None),
        ("date", "2026-05-01T11:59:00Z", "60s"),
        ("date", "not a time", "<invalid>"),
        ("date", 5, None),
        ("object", {"a": 1}, None),
    ],
)
def test_crd_cell_typing(column_type: str, value: Any, cell: Any) -> None:
    assert crd_cell(column_type, value, NOW) == cell
