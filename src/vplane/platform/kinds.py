"""The ``management.loft.sh/v1`` kinds the platform serves.

They are served like custom resources (structural schemas, merge and JSON patch, server-side apply,
OpenAPI for kubectl's validation) but registered directly, not as CRDs: upstream serves this group from
its own API server, and the ``accesskey`` subresources have no CRD equivalent. Schemas name the fields
the runbooks and controllers rely on and preserve the rest, so upstream-shaped manifests apply as is.
"""

from __future__ import annotations

from typing import Any

from vplane.apiserver.controllers import CustomResourceStrategy
from vplane.apiserver.registry import STATUS_VERBS, ResourceType, Subresource
from vplane.kube import errors
from vplane.kube.accesskeys import GROUP, VERSION
from vplane.kube.errors import Cause
from vplane.kube.objects import Obj


def _obj(properties: dict[str, Any] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    if properties:
        schema["properties"] = properties
    return schema


_STR = {"type": "string"}
_BOOL = {"type": "boolean"}
_INT = {"type": "integer"}
_CONDITIONS = {"type": "array", "items": _obj()}


def _schema(spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    props: dict[str, Any] = {"spec": _obj(spec)}
    if status is not None:
        props["status"] = _obj(status)
    return {"type": "object", "properties": props}


PROJECT_SCHEMA = _schema(
    {"displayName": _STR, "description": _STR, "owner": _obj()},
    {"namespace": _STR, "conditions": _CONDITIONS},
)
VCI_SCHEMA = _schema(
    {
        "displayName": _STR,
        "description": _STR,
        "owner": _obj(),
        "template": _obj({"helmRelease": _obj({"values": _STR, "chart": _obj()}), "objects": _STR}),
        "templateRef": _obj(),
        "clusterRef": _obj({"cluster": _STR, "namespace": _STR}),
        "parameters": _STR,
        "networkPeer": _BOOL,
        "external": _BOOL,
        "standalone": _BOOL,
    },
    {
        "phase": _STR,
        "reason": _STR,
        "message": _STR,
        "conditions": _CONDITIONS,
        "serviceUID": _STR,
        "kubernetesVersion": _STR,
        "deployHash": _STR,
        "virtualCluster": _obj(),
    },
)
CLUSTER_SCHEMA = _schema(
    {
        "displayName": _STR,
        "description": _STR,
        "owner": _obj(),
        "config": _obj({"secretName": _STR, "secretNamespace": _STR, "key": _STR}),
        "local": _BOOL,
        "networkPeer": _BOOL,
        "managementNamespace": _STR,
        "unusable": _BOOL,
        "access": {"type": "array", "items": _obj()},
    },
    {"phase": _STR, "reason": _STR, "message": _STR, "online": _BOOL, "conditions": _CONDITIONS},
)
NETWORK_PEER_SCHEMA = _schema(
    {
        "discoKey": _STR,
        "machineKey": _STR,
        "nodeKey": _STR,
        "addresses": {"type": "array", "items": _STR},
        "allowedIPs": {"type": "array", "items": _STR},
        "endpoints": {"type": "array", "items": _STR},
    },
    {"lastSeen": _STR, "homeDerpRegion": _INT, "online": _BOOL},
)
ACCESS_KEY_SCHEMA = _schema(
    {
        "displayName": _STR,
        "description": _STR,
        "user": _STR,
        "team": _STR,
        "subject": _STR,
        "groups": {"type": "array", "items": _STR},
        "key": _STR,
        "type": _STR,
        "disabled": _BOOL,
        "ttl": _INT,
        "scope": _obj(),
    },
    {"lastActivity": _STR},
)
USER_SCHEMA = _schema(
    {"username": _STR, "displayName": _STR, "email": _STR, "groups": {"type": "array", "items": _STR}}
)


class ClusterStrategy(CustomResourceStrategy):
    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = obj.get("spec") or {}
        if not (spec.get("config") or spec.get("local") or spec.get("networkPeer")):
            return [
                errors.field_required(
                    "spec",
                    "one of spec.config, spec.local or spec.networkPeer must be set to connect the cluster",
                )
            ]
        config = spec.get("config")
        old_spec = (old or {}).get("spec") or {}
        unchanged = old is not None and all(
            old_spec.get(k) == spec.get(k) for k in ("config", "local", "networkPeer")
        )
        if config and not spec.get("local") and not spec.get("networkPeer") and not unchanged:
            # (An update that leaves the connection alone passes: a Cluster admitted before this rule keeps
            # taking label and finalizer edits.)
            # Direct mode is the only way to connect it: without the Secret's name nothing would connect
            # and the Cluster would sit with no status at all.
            if not isinstance(config, dict) or not config.get("secretName"):
                return [
                    errors.field_required(
                        "spec.config.secretName", "the Secret holding the cluster's kubeconfig must be named"
                    )
                ]
        return []


class AccessKeyStrategy(CustomResourceStrategy):
    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = obj.get("spec") or {}
        causes: list[Cause] = []
        kinds = ["Agent", "Other", "User", "VirtualCluster"]
        if spec.get("type", "User") not in kinds:
            causes.append(errors.field_not_supported("spec.type", spec.get("type"), kinds))
        if not spec.get("key"):
            causes.append(errors.field_required("spec.key"))
        if spec.get("type", "User") == "User" and not spec.get("user"):
            causes.append(errors.field_required("spec.user", "user keys name their user"))
        if spec.get("type") in ("VirtualCluster", "Agent") and not spec.get("subject"):
            causes.append(errors.field_required("spec.subject"))
        return causes


def _rt(
    resource: str,
    kind: str,
    namespaced: bool,
    schema: dict[str, Any],
    *,
    status: bool = True,
    short: tuple[str, ...] = (),
    strategy: CustomResourceStrategy | None = None,
    extra_subresources: dict[str, Subresource] | None = None,
    columns: list[Obj] | None = None,
) -> ResourceType:
    subresources: dict[str, Subresource] = {}
    if status:
        subresources["status"] = Subresource("status", kind, STATUS_VERBS)
    subresources.update(extra_subresources or {})
    return ResourceType(
        GROUP,
        VERSION,
        resource,
        kind,
        namespaced,
        short_names=short,
        subresources=subresources,
        strategy=strategy or CustomResourceStrategy(),
        crd_schema=schema,
        printer_columns=columns if columns is not None else [],
        is_custom=True,
    )


def management_types() -> list[ResourceType]:
    accesskey = {"accesskey": Subresource("accesskey", "ClusterAccessKey", ("get",))}
    # vplane's own: what `vplane doctor cluster` reads through the platform (docs/connected-clusters.md).
    cluster_subresources = {
        **accesskey,
        "diagnostics": Subresource("diagnostics", "ClusterDiagnostics", ("get",)),
    }
    vci_accesskey = {"accesskey": Subresource("accesskey", "VirtualClusterAccessKey", ("get",))}
    return [
        _rt("projects", "Project", False, PROJECT_SCHEMA),
        _rt(
            "virtualclusterinstances",
            "VirtualClusterInstance",
            True,
            VCI_SCHEMA,
            short=("vci",),
            extra_subresources=vci_accesskey,
            columns=[
                {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            ],
        ),
        _rt(
            "clusters",
            "Cluster",
            False,
            CLUSTER_SCHEMA,
            strategy=ClusterStrategy(),
            extra_subresources=cluster_subresources,
            columns=[
                {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                {"name": "Reason", "type": "string", "jsonPath": ".status.reason"},
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            ],
        ),
        _rt(
            "networkpeers",
            "NetworkPeer",
            False,
            NETWORK_PEER_SCHEMA,
            columns=[
                {"name": "Online", "type": "boolean", "jsonPath": ".status.online"},
                {"name": "Last Seen", "type": "string", "jsonPath": ".status.lastSeen"},
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            ],
        ),
        _rt(
            "accesskeys",
            "AccessKey",
            False,
            ACCESS_KEY_SCHEMA,
            status=True,
            strategy=AccessKeyStrategy(),
            columns=[
                {"name": "Type", "type": "string", "jsonPath": ".spec.type"},
                {"name": "Subject", "type": "string", "jsonPath": ".spec.subject"},
                {"name": "User", "type": "string", "jsonPath": ".spec.user"},
                {"name": "Disabled", "type": "boolean", "jsonPath": ".spec.disabled"},
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            ],
        ),
        _rt("users", "User", False, USER_SCHEMA, status=False),
    ]
