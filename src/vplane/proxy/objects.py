"""The objects a client tenant cluster holds for its proxied group/versions (spec §2.1), as upstream's
registration helper writes them, and the deletion protection that guards them.

Both the APIService and its ExternalName Service read exactly as upstream's (``externalName: localhost``,
port ``9100 + n``). On one machine several tenants and replicas cannot all listen on ``localhost:9100``,
so the tenant's aggregator maps that address to its own replica's proxy (docs/resource-proxy.md).
"""

from __future__ import annotations

import hashlib
from typing import Any

from vplane.kube.proxyconfig import ProxyTarget

PROTECTED_LABEL = "vcluster.loft.sh/protected"
PROTECTED_VALUE = "resource-proxy"
POLICY_NAME = "vcluster-protected-apiservices"
BINDING_NAME = "vcluster-protected-resource-proxy"
FIELD_MANAGER = "vcluster-apiservice-protection"
SERVICE_NAMESPACE = "kube-system"
DENIAL_MESSAGE = (
    "deletion of vCluster-protected resources is denied; remove the corresponding entry from your "
    "vCluster configuration"
)


def safe_concat_name(*parts: str) -> str:
    """Names over 63 characters keep their first 52 and get a hash suffix (vcluster's SafeConcatName)."""
    full = "-".join(parts)
    if len(full) <= 63:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:10]
    return (full[:52] + "-" + digest).replace(".-", "-")


def service_name(target: ProxyTarget) -> str:
    return safe_concat_name("proxy", target.group.replace(".", "-"), target.version)


def apiservice_name(target: ProxyTarget) -> str:
    return f"{target.version}.{target.group}"


def _labels() -> dict[str, str]:
    return {PROTECTED_LABEL: PROTECTED_VALUE}


def service(target: ProxyTarget) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service_name(target), "namespace": SERVICE_NAMESPACE, "labels": _labels()},
        "spec": {
            "type": "ExternalName",
            "externalName": "localhost",
            "ports": [{"port": target.port}],
        },
    }


def apiservice(target: ProxyTarget) -> dict[str, Any]:
    return {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": apiservice_name(target), "labels": _labels()},
        "spec": {
            "service": {"name": service_name(target), "namespace": SERVICE_NAMESPACE, "port": target.port},
            "group": target.group,
            "version": target.version,
            "insecureSkipTLSVerify": True,
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
        },
    }


def protection_policy() -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "objectSelector": {"matchExpressions": [{"key": PROTECTED_LABEL, "operator": "Exists"}]},
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
            "validations": [{"expression": "false", "message": DENIAL_MESSAGE}],
        },
    }


def protection_binding() -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": BINDING_NAME},
        "spec": {
            "policyName": POLICY_NAME,
            "validationActions": ["Deny"],
            "matchResources": {"objectSelector": {"matchLabels": {PROTECTED_LABEL: PROTECTED_VALUE}}},
        },
    }
