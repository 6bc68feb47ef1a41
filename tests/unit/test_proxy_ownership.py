"""Ownership labels on every write type, the merged selector, the fallback discovery document and names."""

from __future__ import annotations

import jsonpatch
import orjson
import pytest
import yaml

from vplane.kube.proxyconfig import ProxyTarget
from vplane.proxy import discovery, objects, ownership
from vplane.proxy.ownership import OWNER_PROJECT, OWNER_VCLUSTER, NotInjectable, Owner

OWNER = Owner("client", "default")
LABELS = {OWNER_VCLUSTER: "client", OWNER_PROJECT: "default"}


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "application/merge-patch+json", "application/strategic-merge-patch+json", None],
)
def test_json_bodies_get_both_labels_merged(content_type: str | None) -> None:
    body = orjson.dumps({"metadata": {"name": "x", "labels": {"app": "a"}}, "spec": {"n": 1}})
    out, kind = ownership.inject(body, content_type, OWNER)
    doc = orjson.loads(out)
    assert doc["metadata"]["labels"] == {"app": "a", **LABELS}
    assert doc["spec"] == {"n": 1}
    assert kind == (content_type or "application/json")


def test_missing_metadata_and_labels_are_created() -> None:
    out, _ = ownership.inject(b'{"spec": {}}', "application/merge-patch+json", OWNER)
    assert orjson.loads(out)["metadata"]["labels"] == LABELS


def test_labels_override_a_callers_attempt_to_claim_another_owner() -> None:
    body = orjson.dumps({"metadata": {"labels": {OWNER_VCLUSTER: "other"}}})
    out, _ = ownership.inject(body, "application/json", OWNER)
    assert orjson.loads(out)["metadata"]["labels"][OWNER_VCLUSTER] == "client"


def test_json_patch_gets_add_operations_that_apply() -> None:
    ops = [{"op": "replace", "path": "/spec/n", "value": 2}]
    out, kind = ownership.inject(orjson.dumps(ops), "application/json-patch+json", OWNER)
    assert kind == "application/json-patch+json"
    patched = jsonpatch.apply_patch({"metadata": {"labels": {}}, "spec": {"n": 1}}, orjson.loads(out))
    assert patched == {"metadata": {"labels": LABELS}, "spec": {"n": 2}}


@pytest.mark.parametrize("content_type", ["application/apply-patch+yaml", "application/yaml"])
def test_yaml_bodies_are_labelled_and_sent_as_json(content_type: str) -> None:
    body = b"apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\nspec:\n  n: 1\n"
    out, kind = ownership.inject(body, content_type, OWNER)
    doc = yaml.safe_load(out)  # JSON is YAML: an apply patch stays an apply patch
    assert doc["metadata"]["labels"] == LABELS
    assert kind == ("application/apply-patch+yaml" if "apply" in content_type else "application/json")


OWNED = {"metadata": {"name": "x", "labels": {"app": "a", **LABELS}}, "spec": {"n": 1}}


@pytest.mark.parametrize(
    ("ops", "labels"),
    [
        # The labels removed, or replaced by a map without the owner's: the owner's come back.
        ([{"op": "remove", "path": "/metadata/labels"}], LABELS),
        ([{"op": "replace", "path": "/metadata/labels", "value": {"b": "2"}}], {"b": "2", **LABELS}),
        ([{"op": "replace", "path": "/metadata", "value": {"name": "x"}}], LABELS),
        (
            [
                {"op": "remove", "path": "/metadata"},
                {"op": "add", "path": "/metadata", "value": {"name": "x"}},
            ],
            LABELS,
        ),
        (
            [{"op": "remove", "path": f"/metadata/labels/{OWNER_VCLUSTER.replace('/', '~1')}"}],
            {"app": "a", **LABELS},
        ),
    ],
)
def test_json_patches_that_rewrite_the_labels_keep_the_owners(
    ops: list[object], labels: dict[str, str]
) -> None:
    out, _ = ownership.inject(orjson.dumps(ops), "application/json-patch+json", OWNER)
    patched = jsonpatch.apply_patch(OWNED, orjson.loads(out))
    assert patched["metadata"]["labels"] == labels


@pytest.mark.parametrize(
    "content_type", ["application/merge-patch+json", "application/strategic-merge-patch+json"]
)
@pytest.mark.parametrize("patch", [{"metadata": {"labels": None}}, {"metadata": None}])
def test_a_merge_patch_that_clears_the_labels_keeps_only_the_owners(content_type: str, patch: object) -> None:
    out, _ = ownership.inject(orjson.dumps(patch), content_type, OWNER, current=OWNED["metadata"]["labels"])
    assert orjson.loads(out)["metadata"]["labels"] == {"app": None, **LABELS}


def test_apply_bodies_in_json_keep_their_numbers() -> None:
    """kubectl sends apply bodies as JSON, where Go writes 1e-07; YAML 1.1 would read that as a string."""
    body = b'{"metadata":{"name":"x"},"spec":{"a":1e-07,"b":1e+21}}'
    out, _ = ownership.inject(body, "application/apply-patch+yaml", OWNER)
    assert orjson.loads(out)["spec"] == {"a": 1e-07, "b": 1e21}


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"metadata: {name: x}\non: 1\n", "application/apply-patch+yaml"),  # YAML 1.1's on: is a bool key
        (b"metadata: {name: x}\nn: 123456789012345678901234567890\n", "application/yaml"),  # past 64 bits
        (b"{not json", "application/json"),
        (b"[1, 2]", "application/json"),
        (b'{"metadata": "x"}', "application/json"),
        (b'{"metadata": {"labels": []}}', "application/json"),
        (b"\x0a\x02k8s", "application/vnd.kubernetes.protobuf"),
        (b'{"op": "add"}', "application/json-patch+json"),
        (b"a: &x 1\nb: *x\n", "application/apply-patch+yaml"),
    ],
)
def test_unparsable_bodies_are_not_injectable(body: bytes, content_type: str) -> None:
    with pytest.raises(NotInjectable):
        ownership.inject(body, content_type, OWNER)


def test_owns_needs_both_labels_with_this_clients_values() -> None:
    assert OWNER.owns({"metadata": {"labels": LABELS}})
    assert not OWNER.owns({"metadata": {"labels": {OWNER_VCLUSTER: "client"}}})
    assert not OWNER.owns({"metadata": {"labels": {**LABELS, OWNER_PROJECT: "other"}}})
    assert not OWNER.owns({"metadata": {}})
    assert not OWNER.owns([])


def test_selector_is_anded_with_the_callers() -> None:
    assert ownership.merge_selector(None, OWNER) == f"{OWNER_VCLUSTER}=client,{OWNER_PROJECT}=default"
    assert (
        ownership.merge_selector("app=a", OWNER) == f"app=a,{OWNER_VCLUSTER}=client,{OWNER_PROJECT}=default"
    )


def target(**kw: object) -> ProxyTarget:
    base: dict[str, object] = {
        "group": "example.com",
        "version": "v1",
        "target_name": "target",
        "target_project": "default",
        "access": "owned",
    }
    return ProxyTarget(**{**base, **kw})  # type: ignore[arg-type]


def test_fallback_discovery_lists_explicit_resources_with_get_only() -> None:
    doc = discovery.fallback_document(target(resources=("myresources", "policies")))
    assert doc["groupVersion"] == "example.com/v1"
    assert doc["resources"] == [
        {
            "name": "myresources",
            "singularName": "myresource",
            "namespaced": True,
            "kind": "Myresource",
            "verbs": ["get"],
        },
        {
            "name": "policies",
            "singularName": "policy",
            "namespaced": True,
            "kind": "Policy",
            "verbs": ["get"],
        },
    ]
    assert discovery.fallback_document(target(wildcard=True))["resources"] == []


def test_objects_read_as_upstreams() -> None:
    t = target(index=2)
    svc = objects.service(t)
    assert svc["metadata"] == {
        "name": "proxy-example-com-v1",
        "namespace": "kube-system",
        "labels": {"vcluster.loft.sh/protected": "resource-proxy"},
    }
    assert svc["spec"] == {"type": "ExternalName", "externalName": "localhost", "ports": [{"port": 9102}]}
    api = objects.apiservice(t)
    assert api["metadata"]["name"] == "v1.example.com"
    assert api["spec"] == {
        "service": {"name": "proxy-example-com-v1", "namespace": "kube-system", "port": 9102},
        "group": "example.com",
        "version": "v1",
        "insecureSkipTLSVerify": True,
        "groupPriorityMinimum": 100,
        "versionPriority": 100,
    }


def test_long_service_names_are_shortened_with_a_hash() -> None:
    long_group = "a-very-long-group-name.with.many.subdomains.example.com"
    name = objects.service_name(target(group=long_group, version="v1alpha1"))
    assert len(name) == 63
    assert name.startswith("proxy-a-very-long-group-name-with-many-subdomains-ex-")
    assert name == "proxy-a-very-long-group-name-with-many-subdomains-ex-0534c1d917"  # every replica agrees
    assert name != objects.service_name(target(group=long_group, version="v1alpha2"))
