"""Typed kubectl commands send protobuf bodies (spec §0.1, §5, checklist M6): kubectl 1.32 and 1.36 both."""

from __future__ import annotations

import base64
import json
import os
import re
from typing import Any

import pytest

from harness import Kubectl

pytestmark = pytest.mark.integration

PROTOBUF = "Content-Type: application/vnd.kubernetes.protobuf"


@pytest.fixture(params=["kubectl132", "kubectl"], ids=["kubectl-1.32", "kubectl-1.36"])
def k(request: pytest.FixtureRequest) -> Kubectl:
    """Each test runs once with kubectl 1.32 and once with kubectl 1.36."""
    client: Kubectl = request.getfixturevalue(request.param)
    return client


def _uid() -> str:
    return os.urandom(3).hex()


def get_json(k: Kubectl, *args: str) -> Any:
    return json.loads(k.run("get", *args, "-o", "json").out)


def create_sent_protobuf(k: Kubectl, *args: str) -> str:
    """Run a `kubectl create …` at -v=8, check its POST carried a protobuf body, and return stdout."""
    result = k.run("create", *args, "-v=8")
    assert PROTOBUF in result.stderr, result.stderr[-3000:]
    return result.out


def test_create_configmap(k: Kubectl, namespace: str) -> None:
    """`kubectl create configmap x --from-literal=a=b` (protobuf) round-trips data and the field manager."""
    out = create_sent_protobuf(
        k, "configmap", "x", "-n", namespace, "--from-literal=a=b", "--from-literal=c=d"
    )
    assert out == "configmap/x created\n"
    obj = json.loads(k.run("get", "cm", "x", "-n", namespace, "-o", "json", "--show-managed-fields").out)
    assert obj["kind"] == "ConfigMap"
    assert obj["data"] == {"a": "b", "c": "d"}
    assert obj["metadata"]["name"] == "x"
    assert obj["metadata"]["namespace"] == namespace
    assert [e["manager"] for e in obj["metadata"]["managedFields"]] == ["kubectl-create"]


def test_create_secret_generic(k: Kubectl, namespace: str) -> None:
    """`kubectl create secret generic` (protobuf bytes map) stores base64 data and the type."""
    out = create_sent_protobuf(
        k,
        "secret",
        "generic",
        "s1",
        "-n",
        namespace,
        "--from-literal=user=admin",
        "--from-literal=pw=s3cr3t!",
    )
    assert out == "secret/s1 created\n"
    obj = get_json(k, "secret", "s1", "-n", namespace)
    assert obj["type"] == "Opaque"
    assert {key: base64.b64decode(v).decode() for key, v in obj["data"].items()} == {
        "user": "admin",
        "pw": "s3cr3t!",
    }
    tls = create_sent_protobuf(
        k, "secret", "generic", "s2", "-n", namespace, "--from-literal=a=b", "--type=example.com/custom"
    )
    assert tls == "secret/s2 created\n"
    assert get_json(k, "secret", "s2", "-n", namespace)["type"] == "example.com/custom"


def test_create_namespace(k: Kubectl) -> None:
    """`kubectl create ns` (protobuf) gives an Active namespace with the kubernetes finalizer and name label."""
    name = "pb-" + _uid()
    assert create_sent_protobuf(k, "namespace", name) == f"namespace/{name} created\n"
    obj = get_json(k, "namespace", name)
    assert obj["metadata"]["name"] == name
    assert obj["metadata"]["labels"] == {"kubernetes.io/metadata.name": name}
    assert obj["spec"] == {"finalizers": ["kubernetes"]}
    assert obj["status"] == {"phase": "Active"}
    k.run("delete", "namespace", name, "--wait=false")


def test_create_serviceaccount_and_token(k: Kubectl, namespace: str) -> None:
    """`kubectl create serviceaccount` and `create token` (TokenRequest); the token authenticates as the SA."""
    assert create_sent_protobuf(k, "serviceaccount", "sa1", "-n", namespace) == "serviceaccount/sa1 created\n"
    obj = get_json(k, "serviceaccount", "sa1", "-n", namespace)
    assert obj["kind"] == "ServiceAccount"
    assert obj["metadata"]["name"] == "sa1"
    assert obj["metadata"]["namespace"] == namespace

    token = k.run("create", "token", "sa1", "-n", namespace, "--duration=10m", "-v=8")
    assert PROTOBUF in token.stderr
    value = token.out.strip()
    assert value
    assert "\n" not in value
    whoami = k.run("--token", value, "auth", "whoami", "-o", "json")
    review = json.loads(whoami.out)
    assert review["kind"] == "SelfSubjectReview"
    user = review["status"]["userInfo"]
    assert user["username"] == f"system:serviceaccount:{namespace}:sa1"
    assert set(user["groups"]) >= {
        "system:serviceaccounts",
        f"system:serviceaccounts:{namespace}",
        "system:authenticated",
    }
    missing = k.fails("create", "token", "nope", "-n", namespace)
    assert missing.stderr == 'error: failed to create token: serviceaccounts "nope" not found\n'


def test_create_role_and_rolebinding(k: Kubectl, namespace: str) -> None:
    """`kubectl create role/rolebinding` (protobuf) round-trip rules, roleRef and subjects."""
    out = create_sent_protobuf(
        k, "role", "r1", "-n", namespace, "--verb=get,list", "--resource=configmaps,deployments.apps"
    )
    assert out == "role.rbac.authorization.k8s.io/r1 created\n"
    role = get_json(k, "role", "r1", "-n", namespace)
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]},
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list"]},
    ]

    out = create_sent_protobuf(
        k,
        "rolebinding",
        "rb1",
        "-n",
        namespace,
        "--role=r1",
        "--user=alice",
        "--group=devs",
        f"--serviceaccount={namespace}:sa1",
    )
    assert out == "rolebinding.rbac.authorization.k8s.io/rb1 created\n"
    binding = get_json(k, "rolebinding", "rb1", "-n", namespace)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r1"}
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"},
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "devs"},
        {"kind": "ServiceAccount", "name": "sa1", "namespace": namespace},
    ]
    assert k.run("auth", "can-i", "list", "configmaps", "-n", namespace, "--as=alice").out == "yes\n"
    denied = k.run("auth", "can-i", "delete", "configmaps", "-n", namespace, "--as=alice", check=False)
    assert (denied.code, denied.out) == (1, "no\n")


def test_create_clusterrole_and_clusterrolebinding(k: Kubectl) -> None:
    """`kubectl create clusterrole/clusterrolebinding` (protobuf) round-trip resourceNames and subjects."""
    role, binding = "pb-cr-" + _uid(), "pb-crb-" + _uid()
    out = create_sent_protobuf(
        k, "clusterrole", role, "--verb=get", "--resource=namespaces", "--resource-name=default"
    )
    assert out == f"clusterrole.rbac.authorization.k8s.io/{role} created\n"
    assert get_json(k, "clusterrole", role)["rules"] == [
        {"apiGroups": [""], "resourceNames": ["default"], "resources": ["namespaces"], "verbs": ["get"]}
    ]
    out = create_sent_protobuf(k, "clusterrolebinding", binding, f"--clusterrole={role}", "--group=devs")
    assert out == f"clusterrolebinding.rbac.authorization.k8s.io/{binding} created\n"
    obj = get_json(k, "clusterrolebinding", binding)
    assert "namespace" not in obj["metadata"]
    assert obj["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}
    assert obj["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "devs"}]
    k.run("delete", "clusterrolebinding", binding)
    k.run("delete", "clusterrole", role)


def test_create_deployment(k: Kubectl, namespace: str) -> None:
    """`kubectl create deployment` (protobuf) round-trips replicas, selector, template labels, image and port."""
    out = create_sent_protobuf(
        k, "deployment", "d1", "-n", namespace, "--image=nginx:1.27", "--replicas=2", "--port=80"
    )
    assert out == "deployment.apps/d1 created\n"
    obj = get_json(k, "deployment", "d1", "-n", namespace)
    assert obj["apiVersion"] == "apps/v1"
    assert obj["metadata"]["labels"] == {"app": "d1"}
    assert obj["metadata"]["generation"] == 1
    spec = obj["spec"]
    assert spec["replicas"] == 2
    assert spec["selector"] == {"matchLabels": {"app": "d1"}}
    assert spec["template"]["metadata"]["labels"] == {"app": "d1"}
    [container] = spec["template"]["spec"]["containers"]
    assert container["name"] == "nginx"
    assert container["image"] == "nginx:1.27"
    assert container["ports"] == [{"containerPort": 80, "protocol": "TCP"}]


def test_create_service_clusterip(k: Kubectl, namespace: str) -> None:
    """`kubectl create service clusterip` (protobuf) round-trips ports (int and int-or-string) and selector."""
    out = create_sent_protobuf(
        k, "service", "clusterip", "svc1", "-n", namespace, "--tcp=80:8080", "--tcp=443:https"
    )
    assert out == "service/svc1 created\n"
    obj = get_json(k, "service", "svc1", "-n", namespace)
    assert obj["spec"]["type"] == "ClusterIP"
    assert obj["spec"]["selector"] == {"app": "svc1"}
    assert obj["spec"]["ports"] == [
        {"name": "80-8080", "port": 80, "protocol": "TCP", "targetPort": 8080},
        {"name": "443-https", "port": 443, "protocol": "TCP", "targetPort": "https"},
    ]
    assert obj["metadata"]["labels"] == {"app": "svc1"}


def test_auth_can_i(k: Kubectl) -> None:
    """`kubectl auth can-i list pods` (SelfSubjectAccessReview in protobuf) prints `yes` for the admin."""
    result = k.run("auth", "can-i", "list", "pods", "-v=8")
    assert result.out == "yes\n"
    assert PROTOBUF in result.stderr
    assert k.run("auth", "can-i", "create", "deployments.apps", "-n", "default").out == "yes\n"
    assert k.run("auth", "can-i", "get", "/healthz").out == "yes\n"


def test_auth_can_i_denied(k: Kubectl, namespace: str) -> None:
    """`kubectl auth can-i --as=<nobody>` prints `no` and exits 1."""
    result = k.run("auth", "can-i", "list", "pods", "-n", namespace, "--as=nobody-" + _uid(), check=False)
    assert (result.code, result.out) == (1, "no\n")


def test_auth_can_i_list(k: Kubectl, namespace: str) -> None:
    """`kubectl auth can-i --list` (SelfSubjectRulesReview) prints the rules table; admin has `*.*`."""
    result = k.run("auth", "can-i", "--list", "-n", namespace)
    lines = result.out.splitlines()
    assert re.fullmatch(r"Resources\s+Non-Resource URLs\s+Resource Names\s+Verbs", lines[0])
    assert any(re.fullmatch(r"\*\.\*\s+\[\]\s+\[\]\s+\[\*\]", line) for line in lines), result.out

    k.run("create", "role", "r1", "-n", namespace, "--verb=get,list", "--resource=configmaps")
    user = "carol-" + _uid()
    k.run("create", "rolebinding", "rb1", "-n", namespace, "--role=r1", f"--user={user}")
    scoped = k.run("auth", "can-i", "--list", "-n", namespace, f"--as={user}").out
    assert re.search(r"^configmaps\s+\[\]\s+\[\]\s+\[get list\]$", scoped, re.M), scoped
    assert re.search(
        r"^selfsubjectaccessreviews\.authorization\.k8s\.io\s+\[\]\s+\[\]\s+\[create\]$", scoped, re.M
    )
    assert not re.search(r"^\*\.\*", scoped, re.M)


def test_auth_whoami(k: Kubectl) -> None:
    """`kubectl auth whoami` (SelfSubjectReview in protobuf) prints the admin user and its groups."""
    result = k.run("auth", "whoami", "-v=8")
    assert PROTOBUF in result.stderr
    lines = result.out.splitlines()
    assert re.fullmatch(r"ATTRIBUTE\s+VALUE", lines[0])
    assert any(re.fullmatch(r"Username\s+admin", line) for line in lines), result.out
    groups = next(line for line in lines if line.startswith("Groups"))
    assert "system:masters" in groups
    assert "system:authenticated" in groups


def test_whoami_impersonated(k: Kubectl) -> None:
    """`kubectl auth whoami --as=alice --as-group=devs` reports the impersonated user and groups."""
    review = json.loads(k.run("auth", "whoami", "--as=alice", "--as-group=devs", "-o", "json").out)
    assert review["status"]["userInfo"]["username"] == "alice"
    assert "devs" in review["status"]["userInfo"]["groups"]


def test_version_skew(k: Kubectl) -> None:
    """`kubectl version`: 1.36 matches the v1.36 server; 1.32 warns (upstream client behaviour)."""
    result = k.run("version")
    assert re.search(r"^Server Version: v1\.36\.\d+$", result.out, re.M), result.out
    client = re.search(r"^Client Version: v1\.(\d+)\.", result.out, re.M)
    assert client is not None
    if client[1] == "32":
        assert result.stderr.strip() == (
            "WARNING: version difference between client (1.32) and server (1.36) exceeds the supported "
            "minor version skew of +/-1"
        )
    else:
        assert result.stderr == ""
