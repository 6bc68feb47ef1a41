"""The fallback discovery document names resources as the target's live discovery did (the kind matters:
kubectl maps a manifest's kind through discovery)."""

from __future__ import annotations

import orjson

from vplane.kube.proxyconfig import ProxyTarget
from vplane.proxy import discovery

TARGET = ProxyTarget("example.com", "v1", "target", "default", "owned", resources=("myresources", "policies"))

LIVE = orjson.dumps(
    {
        "kind": "APIResourceList",
        "groupVersion": "example.com/v1",
        "resources": [
            {
                "name": "myresources",
                "singularName": "myresource",
                "kind": "MyResource",
                "verbs": ["get", "list"],
            },
            {"name": "myresources/status", "singularName": "", "kind": "MyResource", "verbs": ["get"]},
            {"name": "policies", "singularName": "", "kind": "NetworkPolicyThing", "verbs": ["get"]},
            {"name": 3},
            "junk",
        ],
    }
)


def test_names_come_from_live_discovery() -> None:
    names = discovery.names_of(LIVE)
    assert names == {
        "myresources": ("myresource", "MyResource"),
        "policies": ("policy", "NetworkPolicyThing"),
    }
    doc = discovery.fallback_document(TARGET, names)
    assert [(r["name"], r["singularName"], r["kind"], r["verbs"]) for r in doc["resources"]] == [
        ("myresources", "myresource", "MyResource", ["get"]),
        ("policies", "policy", "NetworkPolicyThing", ["get"]),
    ]


def test_unseen_resources_and_bad_documents_fall_back_to_derived_names() -> None:
    assert discovery.names_of(b"not json") == {}
    assert discovery.names_of(b"[1, 2]") == {}
    doc = discovery.fallback_document(TARGET, {"policies": ("policy", "Policy")})
    assert [r["kind"] for r in doc["resources"]] == ["Myresource", "Policy"]
