"""MutatingAdmissionPolicy decisions (k8s.io/apiserver plugin/policy/mutating behaviour, v0.36)."""

from __future__ import annotations

from typing import Any, Literal

import pytest

from vplane.kube import admissionpolicy as ap
from vplane.kube import labels
from vplane.kube import mutatingpolicy as mp
from vplane.kube.objects import Obj
from vplane.kube.openapi import load_builtin
from vplane.kube.schema_meta import SchemaNode

NS: Obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team", "labels": {"env": "prod"}}}
POD_SCHEMA = SchemaNode.from_component("io.k8s.api.core.v1.Pod", load_builtin().schemas)
CM_SCHEMA = SchemaNode.from_component("io.k8s.api.core.v1.ConfigMap", load_builtin().schemas)


class NoParams:
    def scope(self, api_version: str, kind: str) -> Literal["Namespaced", "Cluster"] | None:
        return "Namespaced"

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None:
        return None

    def list(self, api_version: str, kind: str, namespace: str, selector: labels.Selector) -> list[Obj]:
        return []


def configmap(**labels_: str) -> Obj:
    meta: Obj = {"name": "cm", "namespace": "team"}
    if labels_:
        meta["labels"] = dict(labels_)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"a": "1"}}


def pod() -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team"},
        "spec": {"containers": [{"name": "app", "image": "app:1"}, {"name": "side", "image": "side:1"}]},
    }


def request(obj: Obj, **overrides: Any) -> ap.Request:
    fields: dict[str, Any] = {
        "operation": "CREATE",
        "group": "",
        "version": "v1",
        "resource": obj["kind"].lower() + "s",
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "namespace": "team",
        "user": {"username": "alice"},
        "object": obj,
        "uid": "u",
    }
    fields.update(overrides)
    return ap.Request(**fields)


def policy(name: str, *mutations: Obj, **spec: Any) -> Obj:
    body: Obj = {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": ["configmaps", "pods"],
                }
            ]
        },
        "mutations": list(mutations),
    }
    body.update(spec)
    return {"metadata": {"name": name}, "spec": body}


def apply(expression: str) -> Obj:
    return {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": expression}}


def json_patch(expression: str) -> Obj:
    return {"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}


def binding(name: str, policy_name: str) -> Obj:
    return {"metadata": {"name": name}, "spec": {"policyName": policy_name}}


def run(
    policies: list[Obj], req: ap.Request, *, state: mp.ReinvocationState | None = None, reinvoke: bool = False
) -> mp.Outcome:
    schemas = {"ConfigMap": CM_SCHEMA, "Pod": POD_SCHEMA}
    return mp.evaluate(
        {p["metadata"]["name"]: p for p in policies},
        [binding(p["metadata"]["name"], p["metadata"]["name"]) for p in policies],
        req,
        namespace=NS,
        params=NoParams(),
        schema_for=lambda target: schemas.get(target.kind),
        state=state or mp.ReinvocationState(),
        reinvoke=reinvoke,
    )


# --- expression rewriting --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "rewritten"),
    [
        ("Object{}", '{"@type": "Object"}'),
        (
            "Object{metadata: Object.metadata{labels: {'a': 'b'}}}",
            '{"@type": "Object", "metadata": {"@type": "Object.metadata", "labels": {\'a\': \'b\'}}}',
        ),
        (
            "[JSONPatch{op: 'add', path: '/x', value: 1}]",
            '[{"@type": "JSONPatch", "op": \'add\', "path": \'/x\', "value": 1}]',
        ),
        (
            "'/metadata/labels/' + jsonpatch.escapeKey('a/b~c')",
            '\'/metadata/labels/\' + (\'a/b~c\').replace("~", "~0").replace("/", "~1")',
        ),
        ("'Object{a: 1}' + object.Object", "'Object{a: 1}' + object.Object"),
        ("{a: 1}", "{a: 1}"),
    ],
)
def test_rewrite(source: str, rewritten: str) -> None:
    assert mp.rewrite(source) == rewritten


# --- mutations -----------------------------------------------------------------------------------------


def test_apply_configuration_merges_labels_and_keyed_lists() -> None:
    labels_policy = policy("labels", apply('Object{metadata: Object.metadata{labels: {"team": "blue"}}}'))
    outcome = run([labels_policy], request(configmap(keep="yes")))
    assert outcome.error is None and outcome.dirty
    assert outcome.object is not None and outcome.object["metadata"]["labels"] == {
        "keep": "yes",
        "team": "blue",
    }

    image = policy(
        "image",
        apply(
            'Object{spec: Object.spec{containers: [Object.spec.containers{name: "side", image: "side:2"}]}}'
        ),
    )
    outcome = run([image], request(pod()))
    assert outcome.error is None and outcome.object is not None
    assert outcome.object["spec"]["containers"] == [
        {"name": "app", "image": "app:1"},
        {"name": "side", "image": "side:2"},
    ]


def test_apply_configuration_may_not_set_atomic_lists() -> None:
    command = policy(
        "command",
        apply(
            'Object{spec: Object.spec{containers: [Object.spec.containers{name: "app", command: ["sh"]}]}}'
        ),
    )
    outcome = run([command], request(pod()))
    assert outcome.error is not None
    assert outcome.error.message == (
        "policy 'command' with binding 'command' denied request: error applying patch: invalid ApplyConfiguration: "
        "may not mutate atomic arrays, maps or structs: .spec.containers[0].command"
    )
    assert outcome.error.code == 403 and outcome.error.reason == "Invalid"


def test_type_names_must_follow_the_field_path() -> None:
    wrong = policy("wrong", apply('Object{metadata: Object.spec{labels: {"a": "b"}}}'))
    outcome = run([wrong], request(configmap()))
    assert outcome.error is not None
    assert outcome.error.message.endswith(
        'type mismatch: unexpected type name "Object.spec", expected "Object.metadata", which matches field name '
        "path from root Object type"
    )


def test_json_patch_with_escaped_keys_and_failed_tests() -> None:
    add = policy(
        "add",
        json_patch(
            '[JSONPatch{op: "add", path: "/metadata/labels", value: {}},'
            ' JSONPatch{op: "add", path: "/metadata/labels/" + jsonpatch.escapeKey("example.com/owner"), value: object.metadata.name}]'
        ),
    )
    outcome = run([add], request(configmap()))
    assert outcome.error is None and outcome.object is not None
    assert outcome.object["metadata"]["labels"] == {"example.com/owner": "cm"}

    guarded = policy(
        "guarded",
        json_patch(
            '[JSONPatch{op: "test", path: "/data/a", value: "2"}, JSONPatch{op: "remove", path: "/data"}]'
        ),
    )
    outcome = run([guarded], request(configmap()))
    assert outcome.error is None and outcome.object == configmap()


def test_json_patch_errors_and_failure_policy() -> None:
    broken = policy("broken", json_patch('[JSONPatch{op: "replace", path: "/nope/x", value: 1}]'))
    outcome = run([broken], request(configmap()))
    assert outcome.error is not None
    assert outcome.error.message == (
        "policy 'broken' with binding 'broken' denied request: JSON Patch: replace operation does not apply: "
        'doc is missing path: "/nope/x": missing value'
    )
    ignored = policy(
        "broken", json_patch('[JSONPatch{op: "replace", path: "/nope/x", value: 1}]'), failurePolicy="Ignore"
    )
    assert run([ignored], request(configmap())).error is None


def test_match_conditions_and_variables() -> None:
    conditional = policy(
        "conditional",
        apply('Object{metadata: Object.metadata{labels: {"owner": variables.owner}}}'),
        variables=[{"name": "owner", "expression": "request.userInfo.username"}],
        matchConditions=[{"name": "only-cm", "expression": "object.metadata.name == 'cm'"}],
    )
    outcome = run([conditional], request(configmap()))
    assert outcome.object is not None and outcome.object["metadata"]["labels"] == {"owner": "alice"}
    other = configmap()
    other["metadata"]["name"] = "other"
    outcome = run([conditional], request(other))
    assert not outcome.dirty and outcome.object is other


def test_reinvocation_only_reruns_policies_that_opted_in() -> None:
    first = policy(
        "a-first",
        apply(
            'Object{metadata: Object.metadata{labels: {"a-saw-b": string(has(object.metadata.labels) && "b" in object.metadata.labels)}}}'
        ),
        reinvocationPolicy="IfNeeded",
    )
    second = policy("b-second", apply('Object{metadata: Object.metadata{labels: {"b": "yes"}}}'))
    state = mp.ReinvocationState()
    outcome = run([first, second], request(configmap()), state=state)
    assert outcome.object is not None and outcome.object["metadata"]["labels"] == {
        "a-saw-b": "false",
        "b": "yes",
    }
    again = run([first, second], request(outcome.object), state=state, reinvoke=True)
    assert again.object is not None and again.object["metadata"]["labels"] == {"a-saw-b": "true", "b": "yes"}


def test_missing_namespace_is_not_found() -> None:
    outcome = mp.evaluate(
        {"p": policy("p", apply("Object{}"))},
        [binding("p", "p")],
        request(configmap()),
        namespace=None,
        params=NoParams(),
        schema_for=lambda target: None,
        state=mp.ReinvocationState(),
    )
    assert outcome.error is not None and outcome.error.code == 404


def test_deletes_are_not_mutated() -> None:
    outcome = run(
        [policy("p", apply('Object{metadata: Object.metadata{labels: {"a": "b"}}}'))],
        request(configmap(), operation="DELETE"),
    )
    assert outcome.error is None and not outcome.dirty
