"""Field ownership: FieldsV1 encoding, Update tracking and server-side apply."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vplane.kube.errors import StatusError
from vplane.kube.managedfields import (
    LAST_APPLIED_ANNOTATION,
    MAX_UPDATE_MANAGERS,
    field_path,
    fields_from_v1,
    fields_of,
    fields_to_v1,
    manager_from_user_agent,
    manager_or_user_agent,
    path_string,
    record_update,
    server_side_apply,
)
from vplane.kube.schema_meta import SchemaNode

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:00:01Z"
T2 = "2026-01-01T00:00:02Z"


def ref(name: str) -> dict[str, Any]:
    return {"allOf": [{"$ref": f"#/components/schemas/{name}"}], "default": {}}


STRING = {"type": "string"}
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string", "default": ""}}

COMPONENTS: dict[str, Any] = {
    "ConfigMap": {
        "type": "object",
        "properties": {
            "apiVersion": STRING,
            "kind": STRING,
            "metadata": ref("ObjectMeta"),
            "data": STRING_MAP,
        },
    },
    "ObjectMeta": {
        "type": "object",
        "properties": {
            "name": STRING,
            "namespace": STRING,
            "uid": STRING,
            "resourceVersion": STRING,
            "labels": STRING_MAP,
            "annotations": STRING_MAP,
            "finalizers": {
                "type": "array",
                "items": {"type": "string", "default": ""},
                "x-kubernetes-list-type": "set",
                "x-kubernetes-patch-strategy": "merge",
            },
            "managedFields": {"type": "array", "items": {"type": "object"}},
        },
    },
    "Deployment": {
        "type": "object",
        "properties": {
            "apiVersion": STRING,
            "kind": STRING,
            "metadata": ref("ObjectMeta"),
            "spec": ref("DeploymentSpec"),
            "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
        },
    },
    "DeploymentSpec": {
        "type": "object",
        "properties": {
            "replicas": {"type": "integer"},
            "selector": {"type": "object", "properties": {"matchLabels": STRING_MAP}},
            "template": ref("PodTemplateSpec"),
        },
    },
    "PodTemplateSpec": {
        "type": "object",
        "properties": {"metadata": ref("ObjectMeta"), "spec": ref("PodSpec")},
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
            "nodeSelector": {**STRING_MAP, "x-kubernetes-map-type": "atomic"},
        },
    },
    "Container": {
        "type": "object",
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
                # no list-type: the patch strategy alone makes it keyed, as for built-in types
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
        },
    },
    "EnvVar": {"type": "object", "properties": {"name": STRING, "value": STRING}},
}

CONFIGMAP = SchemaNode.from_component("ConfigMap", COMPONENTS)
DEPLOYMENT = SchemaNode.from_component("Deployment", COMPONENTS)


def configmap(**data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "default"},
        "data": data,
    }


def deployment(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "default"},
        "spec": {**spec, "template": {"spec": {"containers": list(containers)}}},
    }


def entries(obj: dict[str, Any]) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = obj.get("metadata", {}).get("managedFields", [])
    return result


def owned(obj: dict[str, Any], manager: str) -> dict[str, Any]:
    found = [e for e in entries(obj) if e.get("manager") == manager]
    assert len(found) == 1, entries(obj)
    fields: dict[str, Any] = found[0]["fieldsV1"]
    return fields


def apply_cm(
    live: dict[str, Any] | None, manager: str, *, force: bool = False, now: str = T1, **data: str
) -> dict[str, Any]:
    applied = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data}
    return server_side_apply(
        live, applied, manager=manager, force=force, schema=CONFIGMAP, api_version="v1", now=now
    )


def update_cm(old: dict[str, Any] | None, new: dict[str, Any], manager: str, now: str = T0) -> dict[str, Any]:
    return record_update(old, new, manager=manager, schema=CONFIGMAP, api_version="v1", now=now, builtin=True)


# -- FieldsV1 --------------------------------------------------------------------------------------------------


def test_fields_v1_shape_for_a_deployment() -> None:
    obj = deployment(
        {
            "name": "c",
            "image": "i",
            "args": ["a"],
            "ports": [{"containerPort": 80}],
            "env": [{"name": "E", "value": "1"}],
        },
        replicas=2,
        selector={"matchLabels": {"app": "x"}},
    )
    obj["metadata"]["labels"] = {"app": "x"}
    obj["metadata"]["uid"] = "u"
    obj["status"] = {"replicas": 1}
    fields = fields_to_v1(fields_of(obj, DEPLOYMENT, ignored=[field_path("status")]))
    container = {
        ".": {},
        "f:args": {},
        "f:env": {'k:{"name":"E"}': {".": {}, "f:name": {}, "f:value": {}}},
        "f:image": {},
        "f:name": {},
        "f:ports": {'k:{"containerPort":80,"protocol":"TCP"}': {".": {}, "f:containerPort": {}}},
    }
    assert fields == {
        "f:metadata": {"f:labels": {"f:app": {}}},
        "f:spec": {
            "f:replicas": {},
            "f:selector": {"f:matchLabels": {"f:app": {}}},
            "f:template": {"f:spec": {"f:containers": {'k:{"name":"c"}': container}}},
        },
    }
    # and in structured-merge-diff's key order: "." first, then path elements sorted
    text = json.dumps(fields)
    assert text.index('"f:metadata"') < text.index('"f:spec"')
    assert list(fields["f:spec"]["f:template"]["f:spec"]["f:containers"]['k:{"name":"c"}']) == list(container)


def test_fields_v1_sets_atomics_and_unknown_schemas() -> None:
    obj = {
        "metadata": {"finalizers": ["b", "a"]},
        "spec": {"template": {"spec": {"nodeSelector": {"k": "v"}}}},
    }
    assert fields_to_v1(fields_of(obj, DEPLOYMENT)) == {
        "f:metadata": {"f:finalizers": {'v:"a"': {}, 'v:"b"': {}}},
        "f:spec": {"f:template": {"f:spec": {"f:nodeSelector": {}}}},
    }
    # without a schema every map key is owned itself (upstream's deduced type) and lists are atomic
    custom = {"apiVersion": "example.com/v1", "kind": "Widget", "spec": {"a": {"b": 1}, "l": [1, 2]}}
    assert fields_to_v1(fields_of(custom, None)) == {
        "f:spec": {".": {}, "f:a": {".": {}, "f:b": {}}, "f:l": {}}
    }


def test_fields_v1_escapes_like_go_and_orders_values() -> None:
    obj = {"metadata": {"finalizers": ["b<&>", "a", "x/y"]}}
    fields = fields_to_v1(fields_of(obj, DEPLOYMENT))
    assert list(fields["f:metadata"]["f:finalizers"]) == ['v:"a"', 'v:"b\\u003c\\u0026\\u003e"', 'v:"x/y"']


def test_fields_v1_round_trip_and_normalisation() -> None:
    obj = deployment({"name": "c", "ports": [{"containerPort": 80, "protocol": "UDP"}]})
    fields = fields_of(obj, DEPLOYMENT)
    assert fields_from_v1(fields_to_v1(fields)) == fields
    # key fields in any order, float spelling of ints: the same element
    spelled = {"f:a": {'k:{"protocol":"UDP","containerPort":80.0}': {}}}
    assert fields_to_v1(fields_from_v1(spelled)) == {"f:a": {'k:{"containerPort":80,"protocol":"UDP"}': {}}}


@pytest.mark.parametrize("bad", [{"x:a": {}}, {"f:a": 1}, {"k:{": {}}, {"k:[1]": {}}, {"i:x": {}}, {"f": {}}])
def test_fields_from_v1_rejects_malformed_input(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        fields_from_v1(bad)


def test_path_strings_match_upstream() -> None:
    obj = deployment({"name": "c", "image": "i", "ports": [{"containerPort": 80}]})
    texts = sorted(path_string(p) for p in fields_of(obj, DEPLOYMENT))
    assert '.spec.template.spec.containers[name="c"].image' in texts
    assert '.spec.template.spec.containers[name="c"].ports[containerPort=80,protocol="TCP"]' in texts
    fin = fields_of({"metadata": {"finalizers": ["a"]}}, DEPLOYMENT)
    assert [path_string(p) for p in fin] == ['.metadata.finalizers[="a"]']


def test_system_metadata_is_never_owned() -> None:
    obj = configmap(a="1")
    obj["metadata"].update(uid="u", resourceVersion="5", managedFields=[{"manager": "x"}])
    assert fields_to_v1(fields_of(obj, CONFIGMAP)) == {"f:data": {"f:a": {}}}


# -- Update operations -----------------------------------------------------------------------------------------


def test_create_records_an_update_entry() -> None:
    new = configmap(a="1")
    new["metadata"]["labels"] = {"app": "x"}
    created = update_cm(None, new, "kubectl-create")
    assert entries(created) == [
        {
            "manager": "kubectl-create",
            "operation": "Update",
            "apiVersion": "v1",
            "time": T0,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {".": {}, "f:a": {}}, "f:metadata": {"f:labels": {".": {}, "f:app": {}}}},
        }
    ]
    assert "managedFields" not in new["metadata"], "the input must not be modified"


def test_create_of_a_builtin_kind_does_not_own_struct_fields_themselves() -> None:
    new = deployment({"name": "c", "image": "i"}, replicas=1)
    builtin = record_update(
        None, new, manager="m", schema=DEPLOYMENT, api_version="apps/v1", now=T0, builtin=True
    )
    assert "." not in owned(builtin, "m")["f:spec"]
    custom = record_update(None, new, manager="m", schema=DEPLOYMENT, api_version="apps/v1", now=T0)
    assert "." in owned(custom, "m")["f:spec"]


def test_update_moves_changed_fields_and_drops_removed_ones() -> None:
    created = update_cm(None, configmap(a="1", b="2"), "creator")
    changed = copy.deepcopy(created)
    changed["data"] = {"a": "9", "c": "3"}
    updated = update_cm(created, changed, "editor", now=T1)
    assert owned(updated, "creator") == {"f:data": {}}  # the map itself, created by "creator"
    assert owned(updated, "editor") == {"f:data": {"f:a": {}, "f:c": {}}}
    assert [e["time"] for e in entries(updated)] == [T0, T1]


def test_update_without_changes_leaves_managed_fields_alone() -> None:
    created = update_cm(None, configmap(a="1"), "creator")
    again = update_cm(created, copy.deepcopy(created), "someone-else", now=T2)
    assert entries(again) == entries(created)


def test_same_manager_accumulates_and_is_retimed() -> None:
    created = update_cm(None, configmap(a="1"), "m")
    changed = copy.deepcopy(created)
    changed["data"]["b"] = "2"
    updated = update_cm(created, changed, "m", now=T2)
    assert entries(updated)[0]["time"] == T2
    assert owned(updated, "m") == {"f:data": {".": {}, "f:a": {}, "f:b": {}}}


def test_entries_whose_fields_all_went_are_dropped() -> None:
    created = update_cm(None, configmap(a="1"), "creator")
    changed = copy.deepcopy(created)
    del changed["data"]
    updated = update_cm(created, changed, "remover", now=T1)
    assert "managedFields" not in updated["metadata"]


def test_each_api_version_and_subresource_gets_its_own_entry() -> None:
    created = update_cm(None, configmap(a="1"), "m")
    changed = copy.deepcopy(created)
    changed["data"]["b"] = "2"
    other = record_update(created, changed, manager="m", schema=CONFIGMAP, api_version="v2", now=T1)
    assert [(e["apiVersion"], e.get("subresource")) for e in entries(other)] == [("v1", None), ("v2", None)]
    changed = copy.deepcopy(created)
    changed["data"]["b"] = "2"
    status = record_update(
        created, changed, manager="m", schema=CONFIGMAP, api_version="v1", now=T1, subresource="status"
    )
    assert [e.get("subresource") for e in entries(status)] == [None, "status"]


def test_client_can_reset_or_replace_managed_fields_on_the_main_resource() -> None:
    created = update_cm(None, configmap(a="1"), "m")
    reset = copy.deepcopy(created)
    reset["metadata"]["managedFields"] = []
    assert "managedFields" not in update_cm(created, reset, "other")["metadata"]
    replaced = copy.deepcopy(created)
    replaced["metadata"]["managedFields"][0]["manager"] = "renamed"
    assert [e["manager"] for e in entries(update_cm(created, replaced, "other"))] == ["renamed"]
    # a subresource write cannot touch them
    status = record_update(
        created, reset, manager="m", schema=CONFIGMAP, api_version="v1", now=T1, subresource="status"
    )
    assert entries(status) == entries(created)


def test_unaddressable_content_keeps_previous_managed_fields() -> None:
    live = record_update(
        None, deployment({"name": "c"}), manager="m", schema=DEPLOYMENT, api_version="apps/v1", now=T0
    )
    broken = copy.deepcopy(live)
    broken["spec"]["template"]["spec"]["containers"].append({"image": "no-name"})
    after = record_update(live, broken, manager="x", schema=DEPLOYMENT, api_version="apps/v1", now=T1)
    assert entries(after) == entries(live)


def test_update_managers_are_capped() -> None:
    obj = update_cm(None, configmap(), "m0")
    for i in range(MAX_UPDATE_MANAGERS + 3):
        changed = copy.deepcopy(obj)
        changed["data"][f"k{i}"] = "v"
        obj = update_cm(obj, changed, f"m{i}", now=f"2026-01-01T00:00:{i:02d}Z")
    managers = [e["manager"] for e in entries(obj)]
    assert len(managers) == MAX_UPDATE_MANAGERS
    assert "ancient-changes" in managers
    ancient = owned(obj, "ancient-changes")["f:data"]
    assert set(ancient) >= {"f:k0", "f:k1", "f:k2", "f:k3"}


# -- server-side apply -----------------------------------------------------------------------------------------


def test_apply_creates_with_an_apply_entry() -> None:
    created = apply_cm(None, "kubectl", a="1")
    assert created["data"] == {"a": "1"}
    assert entries(created) == [
        {
            "manager": "kubectl",
            "operation": "Apply",
            "apiVersion": "v1",
            "time": T1,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {"f:a": {}}},
        }
    ]


def test_conflict_with_an_updater() -> None:
    live = update_cm(None, configmap(a="1"), "kubectl-client-side-apply")
    with pytest.raises(StatusError) as err:
        apply_cm(live, "kubectl", a="2")
    assert err.value.to_status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using v1: .data.a',
        "reason": "Conflict",
        "details": {
            "causes": [
                {
                    "reason": "FieldManagerConflict",
                    "message": 'conflict with "kubectl-client-side-apply" using v1',
                    "field": ".data.a",
                }
            ]
        },
        "code": 409,
    }


def test_conflicts_are_grouped_by_sorted_manager() -> None:
    live = update_cm(None, configmap(a="1", b="1"), "zeta")
    live = apply_cm(live, "alpha", force=True, c="1")
    with pytest.raises(StatusError) as err:
        apply_cm(live, "me", a="2", b="2", c="2")
    assert err.value.message == (
        "Apply failed with 3 conflicts: "
        'conflicts with "alpha":\n- .data.c\n'
        'conflicts with "zeta" using v1:\n- .data.a\n- .data.b'
    )
    assert err.value.details is not None
    assert [(c["message"], c["field"]) for c in err.value.details["causes"]] == [
        ('conflict with "alpha"', ".data.c"),
        ('conflict with "zeta" using v1', ".data.a"),
        ('conflict with "zeta" using v1', ".data.b"),
    ]


def test_conflict_with_a_subresource_manager() -> None:
    live = record_update(
        None,
        configmap(a="1"),
        manager="ctl",
        schema=CONFIGMAP,
        api_version="v1",
        now=T0,
        subresource="status",
    )
    with pytest.raises(StatusError) as err:
        apply_cm(live, "me", a="2")
    assert err.value.message == (
        'Apply failed with 1 conflict: conflict with "ctl" with subresource "status" using v1: .data.a'
    )


def test_force_takes_ownership() -> None:
    live = update_cm(None, configmap(a="1", b="1"), "creator")
    forced = apply_cm(live, "me", force=True, a="2")
    assert forced["data"] == {"a": "2", "b": "1"}
    assert owned(forced, "me") == {"f:data": {"f:a": {}}}
    assert owned(forced, "creator") == {"f:data": {".": {}, "f:b": {}}}


def test_same_value_is_shared_ownership() -> None:
    live = update_cm(None, configmap(a="1"), "creator")
    shared = apply_cm(live, "me", a="1")
    assert owned(shared, "me") == {"f:data": {"f:a": {}}}
    assert owned(shared, "creator") == {"f:data": {".": {}, "f:a": {}}}
    # nothing changed, so upstream records no time for the new applier
    assert "time" not in [e for e in entries(shared) if e["manager"] == "me"][0]


def test_fields_no_longer_applied_are_removed_unless_owned_by_others() -> None:
    live = apply_cm(None, "me", a="1", b="1", c="1")
    live = apply_cm(live, "other", b="1")  # shares b
    after = apply_cm(live, "me", now=T2, a="1")
    assert after["data"] == {"a": "1", "b": "1"}
    assert owned(after, "me") == {"f:data": {"f:a": {}}}
    assert owned(after, "other") == {"f:data": {"f:b": {}}}


def test_fields_set_by_updaters_survive_an_applier_dropping_them() -> None:
    live = apply_cm(None, "me", a="1")
    edited = copy.deepcopy(live)
    edited["data"]["a"] = "2"
    live = update_cm(live, edited, "kubectl-edit", now=T1)
    after = apply_cm(live, "me", now=T2, b="1")
    assert after["data"] == {"a": "2", "b": "1"}


def test_dropping_everything_removes_the_struct_field() -> None:
    live = apply_cm(None, "me", a="1")
    after = server_side_apply(
        live,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}},
        manager="me",
        force=False,
        schema=CONFIGMAP,
        api_version="v1",
        now=T2,
    )
    assert after == {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}


def test_applying_an_empty_map_keeps_ownership_of_the_map() -> None:
    live = apply_cm(None, "me", a="1")
    after = apply_cm(live, "me", now=T2)  # data: {}
    assert after["data"] == {}
    assert owned(after, "me") == {"f:data": {}}


def test_noop_apply_keeps_the_object_and_the_timestamp() -> None:
    live = apply_cm(None, "me", a="1")
    again = apply_cm(live, "me", now=T2, a="1")
    assert again == live


def test_keyed_lists_merge_between_appliers() -> None:
    def apply(
        live: dict[str, Any] | None, manager: str, *containers: dict[str, Any], force: bool = False
    ) -> dict[str, Any]:
        return server_side_apply(
            live,
            deployment(*containers),
            manager=manager,
            force=force,
            schema=DEPLOYMENT,
            api_version="apps/v1",
            now=T1,
        )

    live = apply(None, "one", {"name": "a", "image": "a:1"})
    live = apply(live, "two", {"name": "b", "image": "b:1", "ports": [{"containerPort": 80}]})
    containers = live["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["a", "b"]
    assert owned(live, "two")["f:spec"]["f:template"]["f:spec"]["f:containers"] == {
        'k:{"name":"b"}': {
            ".": {},
            "f:image": {},
            "f:name": {},
            "f:ports": {'k:{"containerPort":80,"protocol":"TCP"}': {".": {}, "f:containerPort": {}}},
        }
    }
    with pytest.raises(StatusError) as err:
        apply(live, "one", {"name": "a", "image": "a:1"}, {"name": "b", "image": "b:2"})
    assert err.value.message.endswith('.spec.template.spec.containers[name="b"].image')
    live = apply(live, "one")  # "one" gives up container a
    assert [c["name"] for c in live["spec"]["template"]["spec"]["containers"]] == ["b"]


def test_atomic_lists_and_maps_are_owned_whole() -> None:
    def apply(
        live: dict[str, Any] | None, manager: str, force: bool = False, **container: Any
    ) -> dict[str, Any]:
        return server_side_apply(
            live,
            deployment({"name": "a", **container}),
            manager=manager,
            force=force,
            schema=DEPLOYMENT,
            api_version="apps/v1",
            now=T1,
        )

    live = apply(None, "one", args=["x", "y"])
    with pytest.raises(StatusError) as err:
        apply(live, "two", args=["z"])
    assert err.value.message.endswith('.spec.template.spec.containers[name="a"].args')
    forced = apply(live, "two", force=True, args=["z"])
    assert forced["spec"]["template"]["spec"]["containers"] == [{"name": "a", "args": ["z"]}]


def test_set_lists_are_unions() -> None:
    def apply(live: dict[str, Any] | None, manager: str, *finalizers: str) -> dict[str, Any]:
        applied = configmap()
        applied["metadata"]["finalizers"] = list(finalizers)
        return server_side_apply(
            live, applied, manager=manager, force=False, schema=CONFIGMAP, api_version="v1", now=T1
        )

    live = apply(None, "one", "a", "b")
    live = apply(live, "two", "b", "c")
    assert live["metadata"]["finalizers"] == ["a", "b", "c"]
    live = apply(live, "one", "a")
    assert live["metadata"]["finalizers"] == ["a", "b", "c"]  # b is still "two"'s
    live = apply(live, "two")
    assert live["metadata"]["finalizers"] == ["a"]


def test_ignored_subtrees_are_not_owned_and_do_not_conflict() -> None:
    status = [field_path("status")]
    applied = deployment({"name": "a"})
    applied["status"] = {"replicas": 3}
    live = server_side_apply(
        None,
        applied,
        manager="me",
        force=False,
        schema=DEPLOYMENT,
        api_version="apps/v1",
        now=T1,
        ignored=status,
    )
    assert "f:status" not in owned(live, "me")
    changed = copy.deepcopy(live)
    changed["status"] = {"replicas": 4}
    after = record_update(
        live, changed, manager="ctl", schema=DEPLOYMENT, api_version="apps/v1", now=T2, ignored=status
    )
    assert [e["manager"] for e in entries(after)] == ["me"]


@pytest.mark.parametrize(
    ("applied", "message"),
    [
        (
            {"apiVersion": "v2", "kind": "ConfigMap", "metadata": {"name": "c"}},
            "invalid object type: /v2, Kind=ConfigMap",
        ),
        (
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c"}},
            "invalid object type: /v1, Kind=Secret",
        ),
        (
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "managedFields": []}},
            "metadata.managedFields must be nil",
        ),
    ],
)
def test_bad_apply_requests_are_400(applied: dict[str, Any], message: str) -> None:
    live = update_cm(None, configmap(a="1"), "m")
    with pytest.raises(StatusError) as err:
        server_side_apply(
            live, applied, manager="me", force=False, schema=CONFIGMAP, api_version="v1", now=T1
        )
    assert (err.value.code, err.value.message) == (400, message)


def test_duplicate_keys_in_an_applied_list_are_400() -> None:
    applied = deployment({"name": "a"}, {"name": "a"})
    with pytest.raises(StatusError) as err:
        server_side_apply(
            None, applied, manager="me", force=False, schema=DEPLOYMENT, api_version="apps/v1", now=T1
        )
    assert err.value.code == 400
    assert 'duplicate entries for key [name="a"]' in err.value.message


def client_side_applied(**data: str) -> dict[str, Any]:
    """A ConfigMap as ``kubectl apply`` (client-side) creates it: annotation plus an Update entry."""
    obj = configmap(**data)
    last = {
        "apiVersion": "v1",
        "data": data,
        "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "default"},
    }
    obj["metadata"]["annotations"] = {LAST_APPLIED_ANNOTATION: json.dumps(last) + "\n"}
    return update_cm(None, obj, "kubectl-client-side-apply")


def test_kubectl_moves_from_client_side_apply_without_conflicts() -> None:
    live = client_side_applied(a="1", b="1")
    applied = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "default"},
        "data": {"a": "2", "b": "1"},
    }
    after = server_side_apply(
        live, applied, manager="kubectl", force=False, schema=CONFIGMAP, api_version="v1", now=T1
    )
    assert after["data"] == {"a": "2", "b": "1"}
    assert owned(after, "kubectl") == {"f:data": {"f:a": {}, "f:b": {}}}
    assert "f:a" not in owned(after, "kubectl-client-side-apply")["f:data"]
    # the annotation follows, so a later client-side apply computes the right patch
    assert json.loads(after["metadata"]["annotations"][LAST_APPLIED_ANNOTATION]) == applied
    # any other manager still conflicts, and so does kubectl once the live value left the annotation
    with pytest.raises(StatusError):
        server_side_apply(
            live, applied, manager="other", force=False, schema=CONFIGMAP, api_version="v1", now=T1
        )
    edited = copy.deepcopy(live)
    edited["data"]["a"] = "9"
    edited = update_cm(live, edited, "kubectl-client-side-apply", now=T1)
    with pytest.raises(StatusError) as err:
        server_side_apply(
            edited, applied, manager="kubectl", force=False, schema=CONFIGMAP, api_version="v1", now=T2
        )
    assert err.value.message == (
        'Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using v1: .data.a'
    )


def test_apply_entries_sort_before_update_entries() -> None:
    live = update_cm(None, configmap(a="1"), "aaa")
    live = apply_cm(live, "zzz", b="1")
    assert [(e["operation"], e["manager"]) for e in entries(live)] == [("Apply", "zzz"), ("Update", "aaa")]


# -- managers -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("agent", "manager"),
    [
        ("kubectl/v1.35.2 (linux/amd64) kubernetes/fdc9d74", "kubectl"),
        ("OpenAPI-Generator/33.1.0/python", "OpenAPI-Generator"),
        ("kr8s", "kr8s"),
        ("a\x00b\x7fc/1", "abc"),
        ("", ""),
        ("é" * 100, "é" * 64),
    ],
)
def test_manager_from_user_agent(agent: str, manager: str) -> None:
    assert manager_from_user_agent(agent) == manager


def test_manager_or_user_agent() -> None:
    assert manager_or_user_agent("kubectl-patch", "kubectl/v1.35.2") == "kubectl-patch"
    assert manager_or_user_agent("", "kubectl/v1.35.2") == "kubectl"


def lookup(obj: Any, path: tuple[tuple[str, str], ...]) -> tuple[bool, Any]:
    """Resolve ``path`` in ``obj`` (test schemas only default ``protocol``)."""
    node = obj
    for kind, text in path:
        if kind == "f":
            if not isinstance(node, dict) or text not in node:
                return False, None
            node = node[text]
        elif kind == "k":
            key = json.loads(text)
            found = [
                item
                for item in (node if isinstance(node, list) else [])
                if all(item.get(k, "TCP" if k == "protocol" else None) == v for k, v in key.items())
            ]
            if not found:
                return False, None
            node = found[0]
        elif kind == "v":
            value = json.loads(text)
            if not isinstance(node, list) or value not in node:
                return False, None
            node = value
        else:
            return False, None
    return True, node


NAMES = st.sampled_from(["a", "b", "c"])
CONTAINERS = st.lists(
    st.fixed_dictionaries(
        {"name": NAMES},
        optional={
            "image": st.sampled_from(["x", "y"]),
            "args": st.lists(NAMES, max_size=2),
            "ports": st.lists(
                st.fixed_dictionaries(
                    {"containerPort": st.sampled_from([80, 443])},
                    optional={"protocol": st.sampled_from(["TCP", "UDP"])},
                ),
                max_size=2,
                unique_by=lambda p: (p["containerPort"], p.get("protocol", "TCP")),
            ),
        },
    ),
    max_size=3,
    unique_by=lambda c: c["name"],
)
CONFIGS = st.builds(
    lambda containers, labels, replicas: {
        **deployment(*containers, **({"replicas": replicas} if replicas is not None else {})),
        "metadata": {"name": "d", "labels": labels},
    },
    CONTAINERS,
    st.dictionaries(NAMES, NAMES, max_size=2),
    st.none() | st.integers(0, 3),
)
PROPERTY_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY_SETTINGS
@given(first=CONFIGS, second=CONFIGS, third=CONFIGS, force=st.booleans())
def test_apply_sequences_are_consistent(
    first: dict[str, Any], second: dict[str, Any], third: dict[str, Any], force: bool
) -> None:
    def apply(live: dict[str, Any] | None, config: dict[str, Any], manager: str) -> dict[str, Any]:
        return server_side_apply(
            live, config, manager=manager, force=force, schema=DEPLOYMENT, api_version="apps/v1", now=T1
        )

    live = apply(None, first, "one")
    for config, manager in ((second, "two"), (third, "one")):
        try:
            live = apply(live, config, manager)
        except StatusError as err:
            assert err.code == 409 and not force
            continue
        # whatever anybody owns is in the object
        for entry in entries(live):
            assert all(lookup(live, p)[0] for p in fields_from_v1(entry["fieldsV1"]))
        # applying the same configuration again changes nothing
        assert apply(live, config, manager) == live
        # the encoding round-trips
        for entry in entries(live):
            assert fields_to_v1(fields_from_v1(entry["fieldsV1"])) == entry["fieldsV1"]


@PROPERTY_SETTINGS
@given(old=CONFIGS, new=CONFIGS)
def test_updates_own_only_what_exists(old: dict[str, Any], new: dict[str, Any]) -> None:
    created = record_update(None, old, manager="a", schema=DEPLOYMENT, api_version="apps/v1", now=T0)
    updated = record_update(created, new, manager="b", schema=DEPLOYMENT, api_version="apps/v1", now=T1)
    for entry in entries(updated):
        assert all(lookup(updated, p)[0] for p in fields_from_v1(entry["fieldsV1"]))
    # every scalar "new" sets that "old" did not have is "b"'s
    changed = fields_of(new, DEPLOYMENT) - fields_of(old, DEPLOYMENT)
    scalars = {p for p in changed if not isinstance(lookup(new, p)[1], dict | list)}
    if scalars:
        assert scalars <= fields_from_v1(owned(updated, "b"))


# -- the create memo -------------------------------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from vplane.kube import managedfields as _mf  # noqa: E402
from vplane.kube import openapi as _openapi  # noqa: E402
from vplane.kube.schema_meta import SchemaNode as _Node  # noqa: E402

_POD = _Node.from_component("io.k8s.api.core.v1.Pod", _openapi.load_builtin().schemas)
_scalars = st.one_of(st.text(max_size=4), st.integers(-3, 3), st.booleans(), st.none())
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["a", "b", "name", "containerPort", "port"]), inner, max_size=3),
    ),
    max_leaves=8,
)
_pods = st.fixed_dictionaries(
    {
        "apiVersion": st.just("v1"),
        "kind": st.just("Pod"),
        "metadata": st.fixed_dictionaries(
            {"name": st.text(min_size=1, max_size=5)},
            optional={
                "labels": st.dictionaries(st.sampled_from(["app", "tier"]), st.text(max_size=3), max_size=2)
            },
        ),
        "spec": st.fixed_dictionaries(
            {
                "containers": st.lists(
                    st.fixed_dictionaries(
                        {"name": st.sampled_from(["a", "b", "c"])},
                        optional={
                            "image": st.text(max_size=3),
                            "ports": st.lists(
                                st.fixed_dictionaries({"containerPort": st.integers(1, 3)}), max_size=2
                            ),
                            "env": st.lists(
                                st.fixed_dictionaries(
                                    {"name": st.sampled_from(["X", "Y"]), "value": st.text(max_size=2)}
                                ),
                                max_size=2,
                            ),
                        },
                    ),
                    max_size=3,
                )
            },
            optional={"extra": _values},
        ),
    }
)


@settings(max_examples=300, deadline=None)
@given(_pods, st.sampled_from([True, False]))
def test_create_memo_gives_the_general_answer(pod: dict[str, object], builtin: bool) -> None:
    """A create answered from the memo equals the general algorithm's answer, on a hit and on a miss."""
    kwargs = {
        "manager": "m",
        "schema": _POD,
        "api_version": "v1",
        "builtin": builtin,
        "ignored": (_mf.field_path("status"),),
    }
    _mf._CREATE_MEMO.clear()
    general = _mf._record_update(None, pod, now="2026-01-01T00:00:00Z", **kwargs)  # type: ignore[arg-type]
    first = _mf.record_update(None, pod, now="2026-01-01T00:00:00Z", **kwargs)  # type: ignore[arg-type]
    again = _mf.record_update(None, pod, now="2026-01-01T00:00:00Z", **kwargs)  # type: ignore[arg-type]
    assert first == general
    assert again == general


def test_create_memo_ignores_scalar_values_and_updates_the_time() -> None:
    """Two objects that differ only in scalar values share the memo; the time is the new write's."""
    kwargs = {"manager": "m", "schema": _POD, "api_version": "v1", "builtin": True}
    _mf._CREATE_MEMO.clear()
    a = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "a"},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }
    b = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "b"},
        "spec": {"containers": [{"name": "c", "image": "y"}]},
    }
    _mf.record_update(None, a, now="2026-01-01T00:00:00Z", **kwargs)  # type: ignore[arg-type]
    assert len(_mf._CREATE_MEMO) == 1
    hit = _mf.record_update(None, b, now="2026-01-01T00:00:09Z", **kwargs)  # type: ignore[arg-type]
    assert len(_mf._CREATE_MEMO) == 1
    assert hit == _mf._record_update(None, b, now="2026-01-01T00:00:09Z", **kwargs)  # type: ignore[arg-type]
    assert hit["metadata"]["managedFields"][0]["time"] == "2026-01-01T00:00:09Z"
