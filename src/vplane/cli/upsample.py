"""The resource proxy as ``vplane up`` shows it: tenant ``client`` serves ``widgets.demo.vplane.io/v1``,
stored in tenant ``target``.

What an operator would do by hand, in the runbook's order: the CustomResourceDefinition on the target,
target RBAC for the client's identity ``loft:vcluster:p-default:client``, ``use`` on the target
VirtualClusterInstance for that identity on the platform, and the client's vcluster.yaml entry.
"""

from __future__ import annotations

from typing import Any

from vplane.controllers.client import KubeClient, Resource
from vplane.kube import errors

GROUP = "demo.vplane.io"
VERSION = "v1"
PLURAL = "widgets"
KIND = "Widget"
RBAC = "rbac.authorization.k8s.io"

CRDS = Resource("apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", False)
CLUSTER_ROLES = Resource(f"{RBAC}/v1", "ClusterRole", "clusterroles", False)
CLUSTER_ROLE_BINDINGS = Resource(f"{RBAC}/v1", "ClusterRoleBinding", "clusterrolebindings", False)
ROLES = Resource(f"{RBAC}/v1", "Role", "roles", True)
ROLE_BINDINGS = Resource(f"{RBAC}/v1", "RoleBinding", "rolebindings", True)
APISERVICES = Resource("apiregistration.k8s.io/v1", "APIService", "apiservices", False)


def client_values(target: str) -> str:
    return (
        "experimental:\n  proxy:\n    customResources:\n"
        f"      {PLURAL}.{GROUP}/{VERSION}:\n        enabled: true\n"
        f"        targetVirtualCluster:\n          name: {target}\n"
    )


def crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {"kind": KIND, "plural": PLURAL, "singular": "widget", "listKind": f"{KIND}List"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {
                                        "size": {"type": "integer", "minimum": 0},
                                        "color": {"type": "string"},
                                    },
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


def _subject(identity: str) -> list[dict[str, str]]:
    return [{"apiGroup": RBAC, "kind": "User", "name": identity}]


async def prepare_target(target: KubeClient, client_identity: str) -> None:
    """The CRD and the client identity's rights on the target (the proxy mirrors namespaces too)."""
    manager = "vplane-up"
    await target.apply(CRDS, crd(), field_manager=manager, force=True)
    name = "vplane-up-proxy-client"
    await target.apply(
        CLUSTER_ROLES,
        {
            "metadata": {"name": name},
            "rules": [
                {"apiGroups": [GROUP], "resources": [PLURAL, f"{PLURAL}/status"], "verbs": ["*"]},
                {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch", "create"]},
            ],
        },
        field_manager=manager,
        force=True,
    )
    await target.apply(
        CLUSTER_ROLE_BINDINGS,
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": name},
            "subjects": _subject(client_identity),
        },
        field_manager=manager,
        force=True,
    )


async def established(target: KubeClient) -> bool:
    """Whether the target serves the sample CRD (its API server registers the kind before it says so)."""
    try:
        obj = await target.get(CRDS, f"{PLURAL}.{GROUP}")
    except errors.StatusError as exc:
        if exc.code == 404:
            return False
        raise
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


async def grant_use(platform: KubeClient, namespace: str, target: str, client_identity: str) -> None:
    """``use`` on the target VirtualClusterInstance for the client's identity (checked at registration)."""
    name = f"vcluster-proxy-target-access-{target}"
    for resource, obj in (
        (
            ROLES,
            {
                "metadata": {"name": name, "namespace": namespace},
                "rules": [
                    {
                        "apiGroups": ["management.loft.sh"],
                        "resources": ["virtualclusterinstances"],
                        "resourceNames": [target],
                        "verbs": ["use"],
                    }
                ],
            },
        ),
        (
            ROLE_BINDINGS,
            {
                "metadata": {"name": name, "namespace": namespace},
                "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": name},
                "subjects": _subject(client_identity),
            },
        ),
    ):
        try:
            await platform.apply(resource, obj, field_manager="vplane-up", force=True)
        except errors.StatusError as exc:
            if exc.code != 409:
                raise


def example(client_context: str, target_context: str) -> str:
    """One line that creates a widget through the client and reads it on the target."""
    body = f'{{"apiVersion":"{GROUP}/{VERSION}","kind":"{KIND}","metadata":{{"name":"w1","namespace":"default"}},"spec":{{"size":3}}}}'
    return (
        f"echo '{body}' | kubectl --context {client_context} apply -f - && "
        f"kubectl --context {target_context} get {PLURAL} -n default --show-labels"
    )
