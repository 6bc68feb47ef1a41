"""The resource proxy end to end: a client tenant cluster serves `myresources.example.com/v1`, stored in a
target tenant cluster, with real platform and tenant processes and kubectl, as the runbook's operator sees
it (status codes, messages, `vcluster_proxy_*` series, log lines)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import Kubectl, PlatformProcess
from platformkit import FAST, Platform, eventually, stop_platform, vci_manifest, wait_ready

pytestmark = pytest.mark.integration

GV = "example.com/v1"
CRD = """apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: myresources.example.com}
spec:
  group: example.com
  names: {kind: MyResource, plural: myresources, singular: myresource, listKind: MyResourceList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
              color: {type: string}
"""
CLIENT_ID = "loft:vcluster:p-default:{name}"
TARGET_RBAC = """apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: proxy-{name}}}
rules:
- apiGroups: [example.com]
  resources: [myresources, myresources/status]
  verbs: ["*"]
- apiGroups: [""]
  resources: [namespaces]
  verbs: [get, list, watch, create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: proxy-{name}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: proxy-{name}}}
subjects:
- {{apiGroup: rbac.authorization.k8s.io, kind: User, name: "loft:vcluster:p-default:{name}"}}
"""
PLATFORM_RBAC = """apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: vcluster-proxy-target-access, namespace: p-default}}
rules:
- apiGroups: [management.loft.sh]
  resources: [virtualclusterinstances]
  resourceNames: [target]
  verbs: [use]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: proxy-target-{name}, namespace: p-default}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: vcluster-proxy-target-access}}
subjects:
- {{apiGroup: rbac.authorization.k8s.io, kind: User, name: "loft:vcluster:p-default:{name}"}}
"""
PROXY = {
    "peers": json.dumps({"dial_timeout_seconds": 2, "quarantine_seconds": 3, "stale_after_seconds": 5}),
    "request_timeout_seconds": 10,
}


def proxy_values(access: str = "", resources: str = "myresources", replicas: int = 1) -> str:
    access_line = f"\n        accessResources: {access}" if access else ""
    ha = (
        f"controlPlane:\n  statefulSet:\n    highAvailability:\n      replicas: {replicas}\n"
        if replicas > 1
        else ""
    )
    return (
        f"{ha}experimental:\n  proxy:\n    customResources:\n      {resources}.{GV}:\n        enabled: true\n"
        f"        targetVirtualCluster:\n          name: target{access_line}\n"
    )


class Env:
    def __init__(self, platform: Platform, tmp: Path) -> None:
        self.p = platform
        self.tmp = tmp
        self.target = platform.tenant_kubectl("target", None, tmp)

    def client(self, name: str = "client") -> Kubectl:
        return self.p.tenant_kubectl(name, None, self.tmp)

    def add_client(self, name: str, values: str) -> Kubectl:
        self.target.apply(TARGET_RBAC.format(name=name))
        self.p.k.apply(PLATFORM_RBAC.format(name=name))
        self.p.k.apply(vci_manifest(name, values))
        wait_ready(self.p.k, name)
        k = self.client(name)
        eventually(lambda: _available(k), timeout=60)
        return k

    def metrics(self, k: Kubectl) -> str:
        return k.run("get", "--raw", "/metrics/syncer").stdout

    def log(self, name: str, replica: int = 0) -> str:
        path = self.p.proc.tenant_dir("default", name) / f"replica-{replica}.log"
        return path.read_text(errors="replace") if path.exists() else ""


def _available(k: Kubectl) -> bool:
    result = k.run(
        "get", "apiservice", "v1.example.com", "-o", "jsonpath={.status.conditions[0].status}", check=False
    )
    return result.stdout == "True"


def start(tmp: Path, kubectl_path: str, **settings: object) -> Platform:
    proc = PlatformProcess(tmp / "platform", {**FAST, "tenant_proxy": json.dumps(PROXY), **settings})
    proc.start()
    k = Kubectl(kubectl_path, proc.kubeconfig, tmp / "platform-cache")
    k.apply("apiVersion: management.loft.sh/v1\nkind: Project\nmetadata: {name: default}\n")
    eventually(lambda: k.run("get", "namespace", "p-default", check=False).code == 0)
    return Platform(proc, k, tmp / "home")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, kubectl_path: str) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("proxy")
    platform = start(tmp, kubectl_path)
    try:
        platform.k.apply(vci_manifest("target"))
        wait_ready(platform.k, "target")
        e = Env(platform, tmp)
        e.target.apply(CRD)
        e.target.run("wait", "--for=condition=Established", "crd/myresources.example.com")
        e.add_client("client", proxy_values())
        yield e
    finally:
        stop_platform(platform)


def widget(name: str, namespace: str = "default", size: int = 1) -> str:
    return (
        f"apiVersion: {GV}\nkind: MyResource\nmetadata: {{name: {name}, namespace: {namespace}}}\n"
        f"spec: {{size: {size}}}\n"
    )


def test_create_through_the_client_lands_on_the_target_with_ownership_labels(env: Env) -> None:
    client = env.client()
    client.apply(widget("w1"))
    got = json.loads(env.target.run("get", "myresources", "w1", "-n", "default", "-o", "json").stdout)
    assert got["metadata"]["labels"] == {
        "vcluster.com/owner-vcluster": "client",
        "vcluster.com/owner-project": "default",
    }
    assert got["spec"] == {"size": 1}
    listed = client.run("get", "myresources", "-n", "default", "-o", "name").stdout.split()
    assert "myresource.example.com/w1" in listed


def test_objects_and_rbac_read_as_upstream(env: Env) -> None:
    client = env.client()
    api = json.loads(client.run("get", "apiservice", "v1.example.com", "-o", "json").stdout)
    assert api["metadata"]["labels"] == {"vcluster.loft.sh/protected": "resource-proxy"}
    assert api["spec"]["service"] == {
        "name": "proxy-example-com-v1",
        "namespace": "kube-system",
        "port": 9100,
    }
    svc = json.loads(
        client.run("get", "service", "-n", "kube-system", "proxy-example-com-v1", "-o", "json").stdout
    )
    assert svc["spec"]["type"] == "ExternalName" and svc["spec"]["externalName"] == "localhost"
    denied = client.fails("delete", "apiservice", "v1.example.com")
    assert (
        "deletion of vCluster-protected resources is denied; remove the corresponding entry from your "
        "vCluster configuration" in denied.stderr
    )
    client.run("label", "apiservice", "v1.example.com", "extra=1")  # updates pass


def test_metrics_and_startup_logs(env: Env) -> None:
    client = env.client()
    client.run("get", "myresources", "-A")
    text = env.metrics(client)
    assert (
        'vcluster_proxy_peers{group_version="example.com/v1",state="healthy",target="default/target"} 1.0'
        in text
    )
    assert (
        'vcluster_proxy_peer_cache_synced{group_version="example.com/v1",target="default/target"} 1.0' in text
    )
    assert "vcluster_proxy_request_total{" in text
    log = env.log("client")
    assert "Starting proxy server" in log and "Starting target transport" in log


def test_unowned_objects_are_hidden(env: Env) -> None:
    env.target.apply(widget("foreign"))
    client = env.client()
    result = client.fails("get", "myresources", "foreign", "-n", "default")
    assert "resource not found" in result.stderr
    assert "foreign" not in client.run("get", "myresources", "-n", "default", "-o", "name").stdout
