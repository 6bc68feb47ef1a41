"""ValidatingAdmissionPolicy through kubectl (checklist S11) and the resource proxy's APIService protection.

Policies apply to the whole server, so this module runs its own API server and removes what each test
creates; names and namespaces are the test's own.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from harness import APIServerProcess, Kubectl

pytestmark = pytest.mark.integration

PROTECTION_MESSAGE = "deletion of vCluster-protected resources is denied; remove the corresponding entry from your vCluster configuration"


@pytest.fixture(scope="module")
def vap_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[APIServerProcess]:
    server = APIServerProcess(tmp_path_factory.mktemp("vap") / "apiserver")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def k(vap_server: APIServerProcess, kubectl_path: str, tmp_path: Path) -> Iterator[Kubectl]:
    kubectl = Kubectl(kubectl_path, vap_server.kubeconfig, tmp_path / "kubecache")
    yield kubectl
    # Policies are cluster-wide: never leave one behind for the next test.
    for kind in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
        kubectl.run("delete", kind, "--all", "--wait=false", check=False)


@pytest.fixture
def ns(k: Kubectl, request: pytest.FixtureRequest) -> str:
    name = "vap-" + request.node.name.lower().replace("_", "-")[5:30].strip("-") + "-" + os.urandom(2).hex()
    k.run("create", "namespace", name)
    return name


def manifest(*docs: dict[str, object]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)


def policy(name: str, *, validations: list[dict[str, object]], **spec: object) -> dict[str, object]:
    body: dict[str, object] = {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["configmaps"],
                }
            ]
        },
        "validations": validations,
    }
    body.update(spec)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": body,
    }


def binding(name: str, policy_name: str, actions: list[str], **spec: object) -> dict[str, object]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": policy_name, "validationActions": actions, **spec},
    }


def configmap(name: str, namespace: str, keys: int) -> str:
    data = {f"k{i}": str(i) for i in range(keys)}
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": data,
        }
    )


def in_namespace(namespace: str) -> dict[str, object]:
    """Binding matchResources that keep a test's policy to its own namespace."""
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}


def test_deny_shows_the_upstream_message(k: Kubectl, ns: str, vap_server: APIServerProcess) -> None:
    k.apply(
        manifest(
            policy(
                "demo",
                validations=[
                    {
                        "expression": "!has(object.data) || size(object.data) <= 2",
                        "messageExpression": "'too many keys: ' + string(size(object.data))",
                    }
                ],
            ),
            binding("demo-binding", "demo", ["Deny"]),
        )
    )
    k.run("create", "-f", "-", input=configmap("few", ns, 2))
    result = k.fails("create", "-f", "-", input=configmap("too-many", ns, 3))
    assert result.stderr.strip() == (
        'The configmaps "too-many" is invalid: : '
        "ValidatingAdmissionPolicy 'demo' with binding 'demo-binding' denied request: too many keys: 3"
    )
    # updates are checked too; the raw Status is upstream's
    body = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "few"},
            "data": {"a": "1", "b": "2", "c": "3"},
        }
    )
    status, _headers, raw = vap_server.request(
        "PUT", f"/api/v1/namespaces/{ns}/configmaps/few", body.encode(), {"Content-Type": "application/json"}
    )
    message = "ValidatingAdmissionPolicy 'demo' with binding 'demo-binding' denied request: too many keys: 3"
    assert status == 422
    assert json.loads(raw) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'configmaps "few" is forbidden: {message}',
        "reason": "Invalid",
        "details": {"name": "few", "kind": "configmaps", "causes": [{"message": message}]},
        "code": 422,
    }


def test_reason_sets_status_code_and_dry_run_is_checked(
    k: Kubectl, ns: str, vap_server: APIServerProcess
) -> None:
    k.apply(
        manifest(
            policy(
                "no-secrets-in-cm",
                validations=[
                    {
                        "expression": "!has(object.data) || !('password' in object.data)",
                        "message": "no passwords",
                        "reason": "Forbidden",
                    }
                ],
            ),
            binding("no-secrets-in-cm", "no-secrets-in-cm", ["Deny"], matchResources=in_namespace(ns)),
        )
    )
    result = k.fails(
        "create", "configmap", "creds", "-n", ns, "--from-literal=password=x", "--dry-run=server"
    )
    denial = (
        'configmaps "creds" is forbidden: ValidatingAdmissionPolicy '
        "'no-secrets-in-cm' with binding 'no-secrets-in-cm' denied request: no passwords"
    )
    assert result.stderr.strip() == f"error: failed to create configmap: {denial}"
    body = json.dumps(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "creds"}, "data": {"password": "x"}}
    )
    status, _headers, raw = vap_server.request(
        "POST",
        f"/api/v1/namespaces/{ns}/configmaps?dryRun=All",
        body.encode(),
        {"Content-Type": "application/json"},
    )
    assert (status, json.loads(raw)["reason"], json.loads(raw)["message"]) == (403, "Forbidden", denial)
    # other namespaces are outside the binding
    k.run("create", "configmap", "creds", "-n", "default", "--from-literal=password=x", "--dry-run=server")


def test_warn_prints_a_warning_and_allows(k: Kubectl, ns: str) -> None:
    k.apply(
        manifest(
            policy(
                "demo-warn",
                validations=[{"expression": "size(object.data) <= 1", "message": "more than one key"}],
            ),
            binding("demo-warn-binding", "demo-warn", ["Warn", "Audit"], matchResources=in_namespace(ns)),
        )
    )
    result = k.run("create", "-f", "-", input=configmap("warned", ns, 2))
    assert "configmap/warned created" in result.stdout
    assert (
        "Warning: Validation failed for ValidatingAdmissionPolicy 'demo-warn' with binding 'demo-warn-binding': "
        "more than one key"
    ) in result.stderr.splitlines()


def test_params_from_a_configmap(k: Kubectl, ns: str) -> None:
    k.run("create", "configmap", "limits", "-n", ns, "--from-literal=maxKeys=1")
    k.apply(
        manifest(
            policy(
                "max-keys",
                paramKind={"apiVersion": "v1", "kind": "ConfigMap"},
                matchConditions=[
                    {"name": "not-the-params", "expression": "object.metadata.name != 'limits'"}
                ],
                validations=[
                    {
                        "expression": "size(object.data) <= int(params.data.maxKeys)",
                        "messageExpression": "'at most ' + params.data.maxKeys + ' keys'",
                    }
                ],
            ),
            binding(
                "max-keys",
                "max-keys",
                ["Deny"],
                paramRef={"name": "limits", "parameterNotFoundAction": "Deny"},
                matchResources=in_namespace(ns),
            ),
        )
    )
    result = k.fails("create", "-f", "-", input=configmap("two", ns, 2))
    assert result.stderr.strip().endswith(
        "ValidatingAdmissionPolicy 'max-keys' with binding 'max-keys' denied request: at most 1 keys"
    )
    k.run("patch", "configmap", "limits", "-n", ns, "--type=merge", "-p", '{"data":{"maxKeys":"2"}}')
    k.run("create", "-f", "-", input=configmap("two", ns, 2))
    k.run("delete", "configmap", "limits", "-n", ns)
    result = k.fails("create", "-f", "-", input=configmap("three", ns, 1))
    assert result.stderr.strip().endswith(
        "denied request: failed to configure binding: no params found for policy binding with `Deny` "
        "parameterNotFoundAction"
    )


def test_namespace_selector(k: Kubectl, ns: str) -> None:
    other = ns + "-dev"
    k.run("create", "namespace", other)
    k.run("label", "namespace", ns, "env=prod")
    k.apply(
        manifest(
            policy(
                "prod-needs-owner",
                matchConstraints={
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["configmaps"],
                        }
                    ],
                    "namespaceSelector": {"matchLabels": {"env": "prod"}},
                },
                validations=[
                    {
                        "expression": "has(object.metadata.labels) && 'owner' in object.metadata.labels",
                        "messageExpression": "'configmaps in ' + namespaceObject.metadata.name + ' need an owner label'",
                    }
                ],
            ),
            binding("prod-needs-owner", "prod-needs-owner", ["Deny"]),
        )
    )
    result = k.fails("create", "configmap", "x", "-n", ns)
    assert result.stderr.strip().endswith(f"denied request: configmaps in {ns} need an owner label")
    k.run("create", "configmap", "x", "-n", other)


def test_protection_policy_guards_apiservice_and_service(k: Kubectl) -> None:
    """platform-behaviour.md 2.1: the resource proxy's policy, applied as the proxy does."""
    suffix = os.urandom(2).hex()
    group = f"p{suffix}.example.com"
    service = f"proxy-p{suffix}-example-com-v1"
    apiservice = f"v1.{group}"
    labels = {"vcluster.loft.sh/protected": "resource-proxy"}
    docs = manifest(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "vcluster-protected-apiservices"},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "objectSelector": {
                        "matchExpressions": [{"key": "vcluster.loft.sh/protected", "operator": "Exists"}]
                    },
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["DELETE"],
                            "resources": ["services"],
                        },
                        {
                            "apiGroups": ["apiregistration.k8s.io"],
                            "apiVersions": ["v1"],
                            "operations": ["DELETE"],
                            "resources": ["apiservices"],
                        },
                    ],
                },
                "validations": [{"expression": "false", "message": PROTECTION_MESSAGE}],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": "vcluster-protected-resource-proxy"},
            "spec": {
                "policyName": "vcluster-protected-apiservices",
                "validationActions": ["Deny"],
                "matchResources": {"objectSelector": {"matchLabels": labels}},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": service, "namespace": "kube-system", "labels": labels},
            "spec": {"type": "ExternalName", "externalName": "localhost", "ports": [{"port": 9100}]},
        },
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": apiservice, "labels": labels},
            "spec": {
                "group": group,
                "version": "v1",
                "service": {"name": service, "namespace": "kube-system", "port": 9100},
                "insecureSkipTLSVerify": True,
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
            },
        },
    )
    k.run(
        "apply",
        "--server-side",
        "--field-manager=vcluster-apiservice-protection",
        "--force-conflicts",
        "-f",
        "-",
        input=docs,
    )
    denial = (
        "ValidatingAdmissionPolicy 'vcluster-protected-apiservices' with binding "
        f"'vcluster-protected-resource-proxy' denied request: {PROTECTION_MESSAGE}"
    )
    result = k.fails("delete", "apiservice", apiservice)
    assert result.stderr.strip() == f'The apiservices "{apiservice}" is invalid: : {denial}'
    result = k.fails("delete", "-n", "kube-system", "service", service)
    assert result.stderr.strip() == f'The services "{service}" is invalid: : {denial}'
    # updates are allowed, including removing the label; then deletes go through
    k.run("label", "apiservice", apiservice, "vcluster.loft.sh/protected-")
    k.run("label", "-n", "kube-system", "service", service, "vcluster.loft.sh/protected-")
    k.run("delete", "apiservice", apiservice)
    k.run("delete", "-n", "kube-system", "service", service)
    assert k.run("get", "apiservice", apiservice, check=False).code != 0
