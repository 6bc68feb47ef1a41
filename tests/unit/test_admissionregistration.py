"""Defaults and validation of webhook configurations and mutating admission policies (upstream's
admissionregistration validation messages)."""

from __future__ import annotations

from typing import Any

import pytest

from vplane.kube import admissionregistration as reg
from vplane.kube import errors
from vplane.kube.objects import Obj


def config(**hook_fields: Any) -> Obj:
    hook: Obj = {
        "name": "check.example.com",
        "clientConfig": {"url": "https://hooks.example.com/check"},
        "rules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
        ],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    }
    hook.update(hook_fields)
    for key in [k for k, v in hook.items() if v is None]:
        del hook[key]
    return {"metadata": {"name": "cfg"}, "webhooks": [hook]}


def messages(obj: Obj, old: Obj | None = None, *, mutating: bool = True) -> list[str]:
    causes = reg.validate_webhook_configuration(obj, old, mutating=mutating)
    return [f"{c.get('field')}: {c.get('message')}" for c in causes]


def test_defaults() -> None:
    obj = config(clientConfig={"service": {"namespace": "ns", "name": "svc"}})
    reg.default_webhook_configuration(obj, mutating=True)
    [hook] = obj["webhooks"]
    assert hook["failurePolicy"] == "Fail"
    assert hook["matchPolicy"] == "Equivalent"
    assert hook["namespaceSelector"] == {} and hook["objectSelector"] == {}
    assert hook["timeoutSeconds"] == 10
    assert hook["reinvocationPolicy"] == "Never"
    assert hook["rules"][0]["scope"] == "*"
    assert hook["clientConfig"]["service"]["port"] == 443
    assert messages(obj) == []


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {"name": "check"},
            'webhooks[0].name: Invalid value: "check": should be a domain with at least three segments separated by dots',
        ),
        (
            {"sideEffects": None},
            "webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun",
        ),
        (
            {"sideEffects": "Some"},
            'webhooks[0].sideEffects: Unsupported value: "Some": supported values: "None", "NoneOnDryRun"',
        ),
        (
            {"timeoutSeconds": 31},
            "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds",
        ),
        (
            {"failurePolicy": "Maybe"},
            'webhooks[0].failurePolicy: Unsupported value: "Maybe": supported values: "Fail", "Ignore"',
        ),
        (
            {"clientConfig": {"url": "http://hooks.example.com"}},
            "webhooks[0].clientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme; desired format: https://host[/path]",
        ),
        (
            {"clientConfig": {}},
            "webhooks[0].clientConfig: Required value: exactly one of url or service is required",
        ),
        (
            {"clientConfig": {"service": {"namespace": "ns", "name": "svc", "path": "validate"}}},
            "webhooks[0].clientConfig.service.path: Invalid value: \"validate\": must start with a '/'",
        ),
        (
            {"admissionReviewVersions": None},
            "webhooks[0].admissionReviewVersions: Required value: must specify one of v1, v1beta1",
        ),
        (
            {"admissionReviewVersions": ["v2"]},
            'webhooks[0].admissionReviewVersions: Invalid value: []string{"v2"}: must include at least one of v1, v1beta1',
        ),
        (
            {
                "rules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["PATCH"], "resources": ["pods"]}
                ]
            },
            'webhooks[0].rules[0].operations[0]: Unsupported value: "PATCH": supported values: "*", "CONNECT", "CREATE", "DELETE", "UPDATE"',
        ),
        (
            {
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["*"],
                        "resources": ["*", "pods"],
                    }
                ]
            },
            'webhooks[0].rules[0].resources: Invalid value: []string{"*", "pods"}: if \'*\' is present, must not specify other resources without subresources',
        ),
        (
            {"matchConditions": [{"name": "bad", "expression": "object.x =="}]},
            None,
        ),
        (
            {"reinvocationPolicy": "Always"},
            'webhooks[0].reinvocationPolicy: Unsupported value: "Always": supported values: "IfNeeded", "Never"',
        ),
    ],
)
def test_webhook_validation(fields: dict[str, Any], expected: str | None) -> None:
    found = messages(config(**fields))
    if expected is None:
        assert len(found) == 1 and found[0].startswith(
            "webhooks[0].matchConditions[0].expression: Invalid value"
        )
        assert "compilation failed" in found[0]
    else:
        assert found == [expected]


def test_updates_keep_side_effects_stored_before() -> None:
    old = config(sideEffects="Unknown")
    assert messages(config(sideEffects="Unknown"), old) == []
    assert messages(config(sideEffects="Unknown"), config()) != []


def test_duplicate_webhook_names() -> None:
    obj = config()
    obj["webhooks"].append(dict(obj["webhooks"][0]))
    assert messages(obj) == ['webhooks[1].name: Duplicate value: "check.example.com"']


def test_invalid_configuration_reads_like_upstream() -> None:
    causes = reg.validate_webhook_configuration(config(timeoutSeconds=0), None, mutating=False)
    err = errors.invalid("ValidatingWebhookConfiguration", "cfg", causes, "admissionregistration.k8s.io")
    assert err.message == (
        'ValidatingWebhookConfiguration.admissionregistration.k8s.io "cfg" is invalid: '
        "webhooks[0].timeoutSeconds: Invalid value: 0: the timeout value must be between 1 and 30 seconds"
    )


def map_policy(**spec: Any) -> Obj:
    body: Obj = {
        "matchConstraints": {
            "resourceRules": [
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
            ]
        },
        "mutations": [
            {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": "Object{}"}},
        ],
    }
    body.update(spec)
    return {"metadata": {"name": "p"}, "spec": body}


def test_mutating_policy_defaults_and_validation() -> None:
    obj = map_policy()
    reg.default_mutating_policy(obj)
    assert obj["spec"]["failurePolicy"] == "Fail"
    assert obj["spec"]["matchConstraints"]["matchPolicy"] == "Equivalent"
    assert reg.validate_mutating_policy(obj) == []

    bad = map_policy(mutations=[{"patchType": "MergePatch"}], failurePolicy="Fail")
    assert [c["message"] for c in reg.validate_mutating_policy(bad)] == [
        'Unsupported value: "MergePatch": supported values: "ApplyConfiguration", "JSONPatch"'
    ]
    broken = map_policy(
        mutations=[{"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: }]"}}],
        failurePolicy="Fail",
    )
    [cause] = reg.validate_mutating_policy(broken)
    assert cause["field"] == "spec.mutations[0].jsonPatch.expression"
    assert "compilation failed" in cause["message"]


def test_mutating_policy_binding_validation() -> None:
    assert [c["field"] for c in reg.validate_mutating_policy_binding({"spec": {}})] == ["spec.policyName"]
    ref = {"policyName": "p", "paramRef": {"name": "x", "selector": {}, "parameterNotFoundAction": "Deny"}}
    assert [c["message"] for c in reg.validate_mutating_policy_binding({"spec": ref})] == [
        "Forbidden: name and selector are mutually exclusive"
    ]
