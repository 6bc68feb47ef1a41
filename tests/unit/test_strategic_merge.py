"""Strategic merge patch driven by OpenAPI v3 schema extensions, and the schema lookups behind it."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vplane.kube.errors import StatusError
from vplane.kube.patch import apply_strategic_merge_patch
from vplane.kube.schema_meta import SchemaNode, find_kind_schema


def ref(name: str) -> dict[str, Any]:
    """A property referring to a component the way upstream's v3 documents do."""
    return {"allOf": [{"$ref": f"#/components/schemas/{name}"}], "default": {}}


STRING = {"type": "string"}
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string", "default": ""}}

COMPONENTS: dict[str, Any] = {
    "Pod": {
        "type": "object",
        "x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": "Pod"}],
        "properties": {
            "apiVersion": STRING,
            "kind": STRING,
            "metadata": ref("ObjectMeta"),
            "spec": ref("PodSpec"),
        },
    },
    "ObjectMeta": {
        "type": "object",
        "properties": {
            "name": STRING,
            "labels": STRING_MAP,
            "annotations": STRING_MAP,
            "finalizers": {
                "type": "array",
                "items": {"type": "string", "default": ""},
                "x-kubernetes-list-type": "set",
                "x-kubernetes-patch-strategy": "merge",
            },
        },
    },
    "PodSpec": {
        "type": "object",
        "properties": {
            "containers": {
                "type": "array",
                "items": ref("Container"),
                "x-kubernetes-list-map-keys": ["name"],
                "x-kubernetes-list-type": "map",
                "x-kubernetes-patch-merge-key": "name",
                "x-kubernetes-patch-strategy": "merge",
            },
            "volumes": {
                "type": "array",
                "items": ref("Volume"),
                "x-kubernetes-patch-merge-key": "name",
                "x-kubernetes-patch-strategy": "merge,retainKeys",
            },
            "nodeSelector": {**STRING_MAP, "x-kubernetes-map-type": "atomic"},
            "tolerations": {"type": "array", "items": {"type": "object"}, "x-kubernetes-list-type": "atomic"},
            "affinity": {**ref("Affinity"), "x-kubernetes-patch-strategy": "replace"},
        },
    },
    "Container": {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": STRING,
            "image": STRING,
            "args": {"type": "array", "items": STRING, "x-kubernetes-list-type": "atomic"},
            "ports": {
                "type": "array",
                "items": ref("ContainerPort"),
                "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
                "x-kubernetes-list-type": "map",
                "x-kubernetes-patch-merge-key": "containerPort",
                "x-kubernetes-patch-strategy": "merge",
            },
            "env": {
                "type": "array",
                "items": ref("EnvVar"),
                "x-kubernetes-list-map-keys": ["name"],
                "x-kubernetes-list-type": "map",
                "x-kubernetes-patch-merge-key": "name",
                "x-kubernetes-patch-strategy": "merge",
            },
        },
    },
    "ContainerPort": {
        "type": "object",
        "properties": {
            "containerPort": {"type": "integer"},
            "protocol": {"type": "string", "default": "TCP"},
            "name": STRING,
        },
    },
    "EnvVar": {"type": "object", "properties": {"name": STRING, "value": STRING}},
    "Volume": {
        "type": "object",
        "properties": {
            "name": STRING,
            "emptyDir": {"type": "object", "properties": {"medium": STRING}},
            "hostPath": {"type": "object", "properties": {"path": STRING}},
        },
    },
    "Affinity": {"type": "object", "properties": {"nodeAffinity": {"type": "object"}}},
}

POD = SchemaNode.from_component("Pod", COMPONENTS)


def smp(original: dict[str, Any], patch: Any, schema: SchemaNode | None = POD) -> dict[str, Any]:
    before = copy.deepcopy((original, patch))
    result = apply_strategic_merge_patch(original, patch, schema)
    assert (original, patch) == before, "inputs must not be modified"
    return result


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": list(containers), **spec},
    }


def names(result: dict[str, Any]) -> list[str]:
    return [c["name"] for c in result["spec"]["containers"]]


# -- schema lookups ---------------------------------------------------------------------------------------------


def test_schema_resolves_refs_and_keeps_property_extensions() -> None:
    assert POD is not None
    spec = POD.child("spec")
    assert spec is not None and spec.has_field("containers")
    containers = spec.child("containers")
    assert containers is not None
    assert containers.patch_strategies == ("merge",)
    assert containers.patch_merge_key == "name"
    assert containers.list_relationship() == ("map", ("name",))
    container = containers.items()
    assert container is not None and container.has_field("image")
    ports = container.child("ports")
    assert ports is not None and ports.list_relationship() == ("map", ("containerPort", "protocol"))
    port = ports.items()
    assert port is not None
    protocol = port.child("protocol")
    assert protocol is not None and protocol.has_default and protocol.default == "TCP"
    # the extension written next to the reference wins over the referenced schema's
    affinity = spec.child("affinity")
    assert affinity is not None and affinity.patch_strategies == ("replace",)
    assert affinity.has_field("nodeAffinity")


def test_schema_list_and_map_types() -> None:
    assert POD is not None
    meta = POD.child("metadata")
    assert meta is not None
    labels = meta.child("labels")
    assert labels is not None and not labels.map_atomic
    assert labels.member("anything") is labels.additional()
    assert meta.member("nope") is None
    finalizers = meta.child("finalizers")
    assert finalizers is not None and finalizers.list_relationship() == ("set", ())
    spec = POD.child("spec")
    assert spec is not None
    node_selector = spec.child("nodeSelector")
    assert node_selector is not None and node_selector.map_atomic
    tolerations = spec.child("tolerations")
    assert tolerations is not None and tolerations.list_relationship() == ("atomic", ())
    volumes = spec.child("volumes")
    # no list-type: a merge strategy with a key is a keyed list, as kube-openapi's schemaconv decides
    assert volumes is not None and volumes.list_relationship() == ("map", ("name",))
    assert volumes.patch_strategies == ("merge", "retainKeys")


def test_schema_unresolvable_and_cyclic_refs_are_unknown_structure() -> None:
    node = SchemaNode({"$ref": "#/components/schemas/Missing", "x-kubernetes-map-type": "atomic"}, {})
    assert node.properties == {} and node.map_atomic
    loop = SchemaNode({"$ref": "#/components/schemas/A"}, {"A": {"$ref": "#/components/schemas/A"}})
    assert loop.properties == {}
    # a CRD-style schema using allOf only for validation keeps its own properties
    crd = SchemaNode({"type": "object", "properties": {"a": STRING}, "allOf": [{"required": ["a"]}]})
    assert crd.has_field("a")


def test_find_kind_schema() -> None:
    found = find_kind_schema(COMPONENTS, "", "v1", "Pod")
    assert found is not None and found.has_field("spec")
    assert find_kind_schema(COMPONENTS, "apps", "v1", "Pod") is None


# -- merging lists by key ---------------------------------------------------------------------------------------


def test_containers_merge_by_name_keeping_live_order_and_appending_new() -> None:
    original = pod({"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"})
    result = smp(
        original, {"spec": {"containers": [{"name": "b", "image": "b:2"}, {"name": "c", "image": "c:1"}]}}
    )
    assert result["spec"]["containers"] == [
        {"name": "a", "image": "a:1"},
        {"name": "b", "image": "b:2"},
        {"name": "c", "image": "c:1"},
    ]


def test_new_items_not_in_the_live_order_go_first_as_upstream() -> None:
    # mergeSortedSlice puts a patch item the live list has never seen before the live-only items
    original = pod({"name": "a"}, {"name": "b"})
    assert names(smp(original, {"spec": {"containers": [{"name": "c"}, {"name": "b", "image": "x"}]}})) == [
        "c",
        "a",
        "b",
    ]


def test_ports_merge_by_container_port() -> None:
    original = pod({"name": "a", "ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 443}]})
    patch = {
        "spec": {
            "containers": [
                {"name": "a", "ports": [{"containerPort": 80, "name": "web"}, {"containerPort": 8080}]}
            ]
        }
    }
    result = smp(original, patch)
    # 8080 is unknown to the live order, so it lands right after its patch neighbour 80
    assert result["spec"]["containers"][0]["ports"] == [
        {"containerPort": 80, "name": "web"},
        {"containerPort": 8080},
        {"containerPort": 443},
    ]


def test_env_merges_by_name_inside_a_container() -> None:
    original = pod({"name": "a", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]})
    patch = {
        "spec": {
            "containers": [{"name": "a", "env": [{"name": "Y", "value": None}, {"name": "Z", "value": "3"}]}]
        }
    }
    env = smp(original, patch)["spec"]["containers"][0]["env"]
    assert env == [{"name": "X", "value": "1"}, {"name": "Y"}, {"name": "Z", "value": "3"}]


def test_delete_directive_in_a_keyed_list() -> None:
    original = pod({"name": "a"}, {"name": "b"}, {"name": "a"})
    assert names(smp(original, {"spec": {"containers": [{"name": "a", "$patch": "delete"}]}})) == ["b"]


def test_replace_directive_in_a_keyed_list() -> None:
    original = pod({"name": "a", "image": "x"}, {"name": "b"})
    patch = {"spec": {"containers": [{"name": "c", "image": "y"}, {"$patch": "replace"}]}}
    assert smp(original, patch)["spec"]["containers"] == [{"name": "c", "image": "y"}]


def test_merge_directive_is_an_explicit_merge() -> None:
    original = pod({"name": "a", "image": "x"})
    patch = {
        "metadata": {"$patch": "merge", "labels": {"l": "1"}},
        "spec": {"containers": [{"name": "a", "$patch": "merge", "args": ["1"]}]},
    }
    result = smp(original, patch)
    assert result["metadata"] == {"name": "p", "labels": {"l": "1"}}
    assert result["spec"]["containers"] == [{"name": "a", "image": "x", "args": ["1"]}]


def test_set_element_order_for_keyed_lists() -> None:
    original = pod({"name": "a", "image": "x"}, {"name": "b"}, {"name": "c"})
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "b"}],
            "containers": [{"name": "a", "image": "y"}],
        }
    }
    result = smp(original, patch)
    assert names(result) == ["c", "a", "b"]
    assert result["spec"]["containers"][1] == {"name": "a", "image": "y"}
    assert "$setElementOrder/containers" not in result["spec"]


def test_set_element_order_keeps_server_only_items_before_their_live_successors() -> None:
    # kubectl's three-way patch: the live object has an injected sidecar the user never applied; it
    # stays ahead of "b", which followed it in the live list
    original = pod({"name": "a"}, {"name": "sidecar"}, {"name": "b"})
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "b"}, {"name": "a"}],
            "containers": [{"name": "b", "image": "z"}],
        }
    }
    assert names(smp(original, patch)) == ["sidecar", "b", "a"]


def test_set_element_order_with_delete_and_add_follows_upstream_aliasing() -> None:
    # upstream test "add map and delete map from merging list": the expected order depends on Go slice
    # aliasing between the deletion and the live order
    original = {
        "spec": {"containers": [{"name": "1"}, {"name": "2", "image": "b"}, {"name": "4", "image": "c"}]}
    }
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "2"}, {"name": "3"}],
            "containers": [{"name": "3"}, {"name": "1", "$patch": "delete"}],
        }
    }
    assert smp(original, patch)["spec"]["containers"] == [
        {"name": "2", "image": "b"},
        {"name": "4", "image": "c"},
        {"name": "3"},
    ]


def test_set_element_order_must_match_the_patch_list() -> None:
    original = pod({"name": "a"}, {"name": "b"})
    patch = {
        "spec": {"$setElementOrder/containers": [{"name": "a"}], "containers": [{"name": "b", "image": "x"}]}
    }
    with pytest.raises(StatusError) as err:
        smp(original, patch)
    assert err.value.code == 400
    assert err.value.message.startswith("The order in patch list:")


# -- primitive lists ----------------------------------------------------------------------------------------------


def test_primitive_merge_list_is_a_union() -> None:
    original = {"metadata": {"finalizers": ["a", "b"]}}
    assert smp(original, {"metadata": {"finalizers": ["b", "c", "c"]}})["metadata"]["finalizers"] == [
        "a",
        "b",
        "c",
    ]


def test_primitive_union_orders_like_upstream() -> None:
    # upstream "merge lists of scalars" and "add an item in a list of primitives and preserve order"
    patch = {"metadata": {"$setElementOrder/finalizers": ["1", "2", "3"], "finalizers": ["3"]}}
    assert smp({"metadata": {"finalizers": ["1", "2", "4"]}}, patch)["metadata"]["finalizers"] == [
        "1",
        "2",
        "3",
        "4",
    ]
    patch = {"metadata": {"$setElementOrder/finalizers": ["3", "1", "2"], "finalizers": ["3"]}}
    assert smp({"metadata": {"finalizers": ["1", "4", "2"]}}, patch)["metadata"]["finalizers"] == [
        "3",
        "1",
        "4",
        "2",
    ]


def test_delete_from_primitive_list() -> None:
    original = {"metadata": {"finalizers": ["a", "b", "a", "c"]}}
    result = smp(original, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a", "zzz"]}})
    assert result == {"metadata": {"finalizers": ["b", "c"]}}


def test_delete_from_a_missing_primitive_list_adds_nothing() -> None:
    assert smp({"metadata": {}}, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}) == {
        "metadata": {}
    }


def test_bad_delete_from_primitive_list_key_is_400() -> None:
    with pytest.raises(StatusError) as err:
        smp({"metadata": {"finalizers": ["a"]}}, {"metadata": {"$deleteFromPrimitiveList": ["a"]}})
    assert (err.value.code, err.value.message) == (400, "invalid patch format of primitive list")


# -- maps and other strategies ----------------------------------------------------------------------------------


def test_maps_merge_and_null_deletes() -> None:
    original = {"metadata": {"labels": {"a": "1", "b": "2"}, "annotations": {"x": "y"}}}
    patch = {"metadata": {"labels": {"a": None, "c": "3"}, "annotations": None}}
    assert smp(original, patch) == {"metadata": {"labels": {"b": "2", "c": "3"}}}


def test_replace_directive_on_a_map() -> None:
    original = {"metadata": {"labels": {"a": "1", "b": "2"}}}
    assert smp(original, {"metadata": {"labels": {"$patch": "replace", "c": "3"}}}) == {
        "metadata": {"labels": {"c": "3"}}
    }


def test_delete_directive_on_a_map() -> None:
    original = {"metadata": {"name": "p", "labels": {"a": "1"}}}
    assert smp(original, {"metadata": {"labels": {"$patch": "delete"}}}) == {
        "metadata": {"name": "p", "labels": {}}
    }


def test_replace_strategy_from_the_schema() -> None:
    original = pod(affinity={"nodeAffinity": {"a": 1}, "other": 1})
    result = smp(original, {"spec": {"affinity": {"nodeAffinity": {"b": 2}}}})
    assert result["spec"]["affinity"] == {"nodeAffinity": {"b": 2}}


def test_lists_without_merge_strategy_are_replaced() -> None:
    original = pod({"name": "a", "args": ["1", "2"]}, tolerations=[{"key": "a"}])
    patch = {"spec": {"tolerations": [{"key": "b"}], "containers": [{"name": "a", "args": ["3"]}]}}
    result = smp(original, patch)
    assert result["spec"]["tolerations"] == [{"key": "b"}]
    assert result["spec"]["containers"][0]["args"] == ["3"]


def test_retain_keys_clears_unlisted_fields() -> None:
    original = pod(volumes=[{"name": "v", "hostPath": {"path": "/x"}}])
    patch = {"spec": {"volumes": [{"name": "v", "$retainKeys": ["name", "emptyDir"], "emptyDir": {}}]}}
    assert smp(original, patch)["spec"]["volumes"] == [{"name": "v", "emptyDir": {}}]


@pytest.mark.parametrize(
    "patch",
    [
        {"spec": {"$retainKeys": "containers"}},
        {"spec": {"$retainKeys": ["containers"], "volumes": []}},
    ],
)
def test_bad_retain_keys_is_400(patch: dict[str, Any]) -> None:
    with pytest.raises(StatusError) as err:
        smp(pod({"name": "a"}), patch)
    assert (err.value.code, err.value.message) == (400, "invalid patch format of retainKeys")


def test_configmap_without_schema_is_a_merge_patch() -> None:
    original = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c"},
        "data": {"a": "1", "b": "2"},
    }
    patch = {"data": {"a": None, "c": "3"}, "metadata": {"annotations": {"x": "y"}}}
    assert smp(original, patch, None) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "annotations": {"x": "y"}},
        "data": {"b": "2", "c": "3"},
    }


def test_null_patch_is_a_no_op() -> None:
    assert smp({"a": 1}, None) == {"a": 1}


# -- errors -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"spec": {"$patch": "bogus"}}, "unknown patch type: bogus in map: map[$patch:bogus]"),
        (
            {"spec": {"containers": [{"name": "a", "$patch": "bogus"}]}},
            "unknown patch type: bogus in map: map[$patch:bogus name:a]",
        ),
        (
            {"spec": {"containers": [{"image": "x"}]}},
            "map: map[image:x] does not contain declared merge key: name",
        ),
        (
            {"spec": {"containers": [{"$patch": "delete"}]}},
            "map: map[$patch:delete] does not contain declared merge key: name",
        ),
        (
            {"spec": {"containers": [{"name": "b"}, "x"]}},
            "list element types are not identical: [[map[name:a]] [map[name:b] x]]",
        ),
        ([1], "json: cannot unmarshal array into Go value of type map[string]interface {}"),
        ({"spec": {"$setElementOrder/containers": "x"}}, "expected a []interface {}, but received a string"),
    ],
)
def test_malformed_patches_are_400(patch: Any, message: str) -> None:
    with pytest.raises(StatusError) as err:
        smp(pod({"name": "a"}), patch)
    assert (err.value.code, err.value.reason, err.value.message) == (400, "BadRequest", message)


def test_lists_of_lists_are_422() -> None:
    with pytest.raises(StatusError) as err:
        smp({"metadata": {"finalizers": [["a"]]}}, {"metadata": {"finalizers": [["b"]]}})
    assert (err.value.code, err.value.reason) == (422, "Invalid")


def test_keyed_list_without_merge_key_in_schema_is_400() -> None:
    schema = SchemaNode(
        {"type": "object", "properties": {"l": {"type": "array", "x-kubernetes-patch-strategy": "merge"}}}
    )
    with pytest.raises(StatusError) as err:
        smp({"l": [{"a": 1}]}, {"l": [{"a": 2}]}, schema)
    assert err.value.message.startswith("cannot merge lists without merge key")


# -- no directive survives ------------------------------------------------------------------------------------------


def test_directives_never_reach_the_result() -> None:
    original = pod({"name": "a"})
    patch = {
        "metadata": {"labels": {"$patch": "replace", "x": {"$retainKeys": ["q"], "q": 1}}},
        "spec": {
            "containers": [
                {
                    "name": "b",
                    "env": [{"name": "E", "$patch": "delete"}],
                    "$setElementOrder/env": [{"name": "E"}],
                }
            ],
            "volumes": [{"name": "v", "$retainKeys": ["name"], "$deleteFromPrimitiveList/x": ["1"]}],
            "tolerations": [{"$patch": "delete"}, {"key": "k", "$retainKeys": []}],
        },
    }
    result = smp(original, patch)
    assert "$" not in repr(result)


DIRECTIVE_KEYS = st.sampled_from(
    ["$patch", "$retainKeys", "$setElementOrder/containers", "$deleteFromPrimitiveList/finalizers"]
)
FIELD_KEYS = st.sampled_from(["name", "image", "containers", "finalizers", "labels", "a"])
VALUES = st.recursive(
    st.none()
    | st.text(alphabet="ab", max_size=2)
    | st.sampled_from(["delete", "replace", "merge", "a", "b"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(FIELD_KEYS | DIRECTIVE_KEYS, inner, max_size=4)
    ),
    max_leaves=15,
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    original=st.fixed_dictionaries({"metadata": VALUES, "spec": VALUES}),
    patch=st.dictionaries(st.sampled_from(["metadata", "spec"]) | DIRECTIVE_KEYS, VALUES, max_size=3),
)
def test_random_patches_fail_only_with_status_errors_and_leave_no_directives(
    original: dict[str, Any], patch: dict[str, Any]
) -> None:
    try:
        result = smp(original, patch)
    except StatusError:
        return
    assert isinstance(result, dict)
    if "$" not in repr(original):
        assert "'$" not in repr(result)
