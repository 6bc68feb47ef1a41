"""The committed built-in OpenAPI schemas: shape kubectl relies on, closed references, strategic-merge facts."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from vplane.kube.openapi import (
    GVK_EXTENSION,
    OBJECT_META,
    REF_PREFIX,
    crd_definition_name,
    load_builtin,
    refs_in,
    schema_closure,
)

CORE = "io.k8s.api.core.v1"
APPS = "io.k8s.api.apps.v1"
META = "io.k8s.apimachinery.pkg.apis.meta.v1"
RBAC = "io.k8s.api.rbac.v1"

SERVED_KINDS = [
    ("", "v1", "Namespace"),
    ("", "v1", "ConfigMap"),
    ("", "v1", "Secret"),
    ("", "v1", "ServiceAccount"),
    ("", "v1", "Service"),
    ("", "v1", "Endpoints"),
    ("", "v1", "Pod"),
    ("", "v1", "Event"),
    ("", "v1", "Node"),
    ("apps", "v1", "Deployment"),
    ("apps", "v1", "ReplicaSet"),
    ("batch", "v1", "Job"),
    ("coordination.k8s.io", "v1", "Lease"),
    ("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
    ("apiregistration.k8s.io", "v1", "APIService"),
    ("rbac.authorization.k8s.io", "v1", "Role"),
    ("rbac.authorization.k8s.io", "v1", "ClusterRole"),
    ("rbac.authorization.k8s.io", "v1", "RoleBinding"),
    ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
    ("authorization.k8s.io", "v1", "SelfSubjectAccessReview"),
    ("authorization.k8s.io", "v1", "SubjectAccessReview"),
    ("authorization.k8s.io", "v1", "SelfSubjectRulesReview"),
    ("authorization.k8s.io", "v1", "LocalSubjectAccessReview"),
    ("authentication.k8s.io", "v1", "SelfSubjectReview"),
    ("authentication.k8s.io", "v1", "TokenReview"),
    ("authentication.k8s.io", "v1", "TokenRequest"),
    ("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicyBinding"),
    ("events.k8s.io", "v1", "Event"),
]

LISTABLE = {
    "Namespace",
    "ConfigMap",
    "Secret",
    "ServiceAccount",
    "Service",
    "Endpoints",
    "Pod",
    "Event",
    "Node",
    "Deployment",
    "ReplicaSet",
    "Job",
    "Lease",
    "CustomResourceDefinition",
    "APIService",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}


def prop(definition: str, name: str) -> dict[str, Any]:
    schema = load_builtin().schemas[definition]
    value: dict[str, Any] = schema["properties"][name]
    return value


def target(schema: dict[str, Any]) -> str:
    """The definition a property points at through its allOf wrapper."""
    (ref,) = schema["allOf"]
    name: str = ref["$ref"].removeprefix(REF_PREFIX)
    return name


def test_file_loads_once_and_is_indexed() -> None:
    builtin = load_builtin()
    assert builtin is load_builtin()
    assert len(builtin.schemas) > 100
    assert builtin.definition_for("", "v1", "ConfigMap") == f"{CORE}.ConfigMap"
    assert builtin.definition_for("events.k8s.io", "v1", "Event") == "io.k8s.api.events.v1.Event"
    assert builtin.definition_for("example.com", "v1", "Widget") is None


@pytest.mark.parametrize(("group", "version", "kind"), SERVED_KINDS)
def test_served_kind_has_gvk_and_object_meta(group: str, version: str, kind: str) -> None:
    builtin = load_builtin()
    definition = builtin.definition_for(group, version, kind)
    assert definition is not None
    schema = builtin.schemas[definition]
    assert schema["type"] == "object"
    assert {"group": group, "version": version, "kind": kind} in schema[GVK_EXTENSION]
    assert schema["description"]
    assert {"apiVersion", "kind", "metadata"} <= set(schema["properties"])
    metadata = schema["properties"]["metadata"]
    assert target(metadata) == OBJECT_META
    assert metadata["default"] == {}
    if kind in LISTABLE:
        list_definition = builtin.definition_for(group, version, kind + "List")
        assert list_definition == definition + "List"
        items = builtin.schemas[list_definition]["properties"]["items"]
        assert items["type"] == "array"
        assert target(items["items"]) == definition
        assert target(builtin.schemas[list_definition]["properties"]["metadata"]) == f"{META}.ListMeta"


def test_every_ref_resolves() -> None:
    schemas = load_builtin().schemas
    dangling = {
        (name, ref) for name, schema in schemas.items() for ref in refs_in(schema) if ref not in schemas
    }
    assert not dangling


def test_closure_is_self_contained_and_sorted() -> None:
    builtin = load_builtin()
    closure = builtin.closure([f"{CORE}.Pod"])
    assert list(closure) == sorted(closure)
    for needed in (
        f"{CORE}.PodSpec",
        f"{CORE}.Container",
        OBJECT_META,
        f"{META}.Time",
        f"{META}.ManagedFieldsEntry",
        "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
        "io.k8s.apimachinery.pkg.api.resource.Quantity",
    ):
        assert needed in closure
    assert f"{APPS}.Deployment" not in closure
    for schema in closure.values():
        assert all(ref in closure for ref in refs_in(schema))


def test_closure_of_unknown_definition_fails_loudly() -> None:
    with pytest.raises(KeyError):
        schema_closure(load_builtin().schemas, ["com.example.v1.Widget"])


def test_kinds_in_group_version() -> None:
    kinds = {k["kind"] for k in load_builtin().kinds_in("apps", "v1")}
    assert {
        "Deployment",
        "DeploymentList",
        "ReplicaSet",
        "ReplicaSetList",
        "DeleteOptions",
        "WatchEvent",
    } <= kinds
    assert "Pod" not in kinds


def test_special_types() -> None:
    schemas = load_builtin().schemas
    intstr = schemas["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]
    assert intstr["x-kubernetes-int-or-string"] is True
    assert intstr["format"] == "int-or-string"
    assert schemas[f"{META}.Time"] == {"type": "string", "format": "date-time"}
    assert schemas[f"{META}.MicroTime"] == {"type": "string", "format": "date-time"}
    assert {"type": "number"} in schemas["io.k8s.apimachinery.pkg.api.resource.Quantity"]["oneOf"]
    assert (
        target(prop(f"{CORE}.ServicePort", "targetPort")) == "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
    )
    assert target(prop(f"{META}.ObjectMeta", "creationTimestamp")) == f"{META}.Time"
    assert target(prop("io.k8s.api.coordination.v1.LeaseSpec", "renewTime")) == f"{META}.MicroTime"
    limits = prop(f"{CORE}.ResourceRequirements", "limits")
    assert target(limits["additionalProperties"]) == "io.k8s.apimachinery.pkg.api.resource.Quantity"
    assert prop(f"{CORE}.Secret", "data")["additionalProperties"] == {"type": "string", "format": "byte"}


def test_required_fields_come_from_the_client_models() -> None:
    schemas = load_builtin().schemas
    assert schemas[f"{CORE}.PodSpec"]["required"] == ["containers"]
    assert schemas[f"{CORE}.Container"]["required"] == ["name"]
    assert schemas[f"{CORE}.ConfigMapList"]["required"] == ["items"]
    assert "required" not in schemas[f"{CORE}.ConfigMap"]


# (definition, property, patch strategy, merge key, list type, list map keys), checked against upstream tags.
MERGE_FACTS = [
    (f"{CORE}.PodSpec", "containers", "merge", "name", "map", ["name"]),
    (f"{CORE}.PodSpec", "initContainers", "merge", "name", "map", ["name"]),
    (f"{CORE}.PodSpec", "ephemeralContainers", "merge", "name", "map", ["name"]),
    (f"{CORE}.PodSpec", "volumes", "merge,retainKeys", "name", "map", ["name"]),
    (f"{CORE}.PodSpec", "imagePullSecrets", "merge", "name", "map", ["name"]),
    (f"{CORE}.PodSpec", "hostAliases", "merge", "ip", "map", ["ip"]),
    (
        f"{CORE}.PodSpec",
        "topologySpreadConstraints",
        "merge",
        "topologyKey",
        "map",
        ["topologyKey", "whenUnsatisfiable"],
    ),
    (f"{CORE}.PodSpec", "tolerations", None, None, "atomic", None),
    (f"{CORE}.Container", "ports", "merge", "containerPort", "map", ["containerPort", "protocol"]),
    (f"{CORE}.Container", "env", "merge", "name", "map", ["name"]),
    (f"{CORE}.Container", "volumeMounts", "merge", "mountPath", "map", ["mountPath"]),
    (f"{CORE}.Container", "volumeDevices", "merge", "devicePath", "map", ["devicePath"]),
    (f"{CORE}.Container", "command", None, None, "atomic", None),
    (f"{CORE}.PodStatus", "conditions", "merge", "type", "map", ["type"]),
    (f"{CORE}.PodStatus", "podIPs", "merge", "ip", "map", ["ip"]),
    (f"{CORE}.ServiceSpec", "ports", "merge", "port", "map", ["port", "protocol"]),
    (f"{CORE}.ServiceAccount", "secrets", "merge", "name", "map", ["name"]),
    (f"{CORE}.ServiceAccount", "imagePullSecrets", None, None, "atomic", None),
    (f"{CORE}.NodeStatus", "addresses", "merge", "type", "map", ["type"]),
    (f"{CORE}.Endpoints", "subsets", None, None, "atomic", None),
    (f"{META}.ObjectMeta", "finalizers", "merge", None, "set", None),
    (f"{META}.ObjectMeta", "ownerReferences", "merge", "uid", "map", ["uid"]),
    (f"{META}.ObjectMeta", "managedFields", None, None, "atomic", None),
    (f"{APPS}.DeploymentSpec", "strategy", "retainKeys", None, None, None),
    (f"{APPS}.DeploymentStatus", "conditions", "merge", "type", "map", ["type"]),
    ("io.k8s.api.batch.v1.JobStatus", "conditions", "merge", "type", "atomic", None),
    (f"{RBAC}.Role", "rules", None, None, "atomic", None),
    (f"{RBAC}.RoleBinding", "subjects", None, None, "atomic", None),
    (
        "io.k8s.kube-aggregator.pkg.apis.apiregistration.v1.APIServiceStatus",
        "conditions",
        "merge",
        "type",
        "map",
        ["type"],
    ),
    (
        "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicySpec",
        "variables",
        "merge",
        "name",
        "map",
        ["name"],
    ),
    (
        "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicyStatus",
        "conditions",
        None,
        None,
        "map",
        ["type"],
    ),
]


@pytest.mark.parametrize(("definition", "name", "strategy", "key", "list_type", "map_keys"), MERGE_FACTS)
def test_patch_and_list_extensions(
    definition: str,
    name: str,
    strategy: str | None,
    key: str | None,
    list_type: str | None,
    map_keys: list[str] | None,
) -> None:
    schema = prop(definition, name)
    assert schema.get("x-kubernetes-patch-strategy") == strategy
    assert schema.get("x-kubernetes-patch-merge-key") == key
    assert schema.get("x-kubernetes-list-type") == list_type
    assert schema.get("x-kubernetes-list-map-keys") == map_keys
    if map_keys:
        item = load_builtin().schemas[target(schema["items"])]
        assert set(map_keys) <= set(item["properties"])


def test_atomic_maps_and_structs() -> None:
    schemas = load_builtin().schemas
    for definition in (
        f"{META}.LabelSelector",
        f"{META}.OwnerReference",
        f"{CORE}.ObjectReference",
        f"{RBAC}.RoleRef",
    ):
        assert schemas[definition]["x-kubernetes-map-type"] == "atomic"
    assert prop(f"{CORE}.PodSpec", "nodeSelector")["x-kubernetes-map-type"] == "atomic"
    assert prop(f"{CORE}.ServiceSpec", "selector")["x-kubernetes-map-type"] == "atomic"
    assert target(prop(f"{APPS}.DeploymentSpec", "selector")) == f"{META}.LabelSelector"
    assert "x-kubernetes-map-type" not in schemas[OBJECT_META]


def test_delete_options_serve_every_group_version() -> None:
    builtin = load_builtin()
    for group, version, _ in SERVED_KINDS:
        assert builtin.definition_for(group, version, "DeleteOptions") == f"{META}.DeleteOptions"
    assert builtin.definition_for("", "v1", "Status") == f"{META}.Status"


def test_crd_definition_name_reverses_the_group() -> None:
    assert crd_definition_name("example.com", "v1", "Widget") == "com.example.v1.Widget"
    assert (
        crd_definition_name("stable.example.co.uk", "v2beta1", "Thing")
        == "uk.co.example.stable.v2beta1.Thing"
    )


def test_committed_file_matches_the_generator() -> None:
    path = Path(__file__).resolve().parents[2] / "tools" / "gen_openapi.py"
    spec = importlib.util.spec_from_file_location("gen_openapi", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.render(module.generate()) == module.OUT.read_text()
