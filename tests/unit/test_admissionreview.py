"""Admission webhooks: matching, the review, the answer, patches and messages (k8s.io/apiserver
plugin/webhook and util/webhook behaviour, v0.36)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from vplane.kube import admissionpolicy as ap
from vplane.kube import admissionreview as ar
from vplane.kube import cel, errors
from vplane.kube.objects import Obj

NS: Obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team", "labels": {"env": "prod"}}}


def configmap(name: str = "cm", **labels: str) -> Obj:
    meta: Obj = {"name": name, "namespace": "team"}
    if labels:
        meta["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"a": "1"}}


def request(**overrides: Any) -> ap.Request:
    fields: dict[str, Any] = {
        "operation": "CREATE",
        "group": "",
        "version": "v1",
        "resource": "configmaps",
        "kind": "ConfigMap",
        "name": "cm",
        "namespace": "team",
        "user": {"username": "alice", "groups": ["devs"]},
        "object": configmap(),
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        "uid": "req-uid",
    }
    fields.update(overrides)
    return ap.Request(**fields)


def hook(name: str = "check.example.com", *, mutating: bool = False, **fields: Any) -> ar.Webhook:
    body: Obj = {
        "name": name,
        "clientConfig": {"url": "https://hooks.example.com/check"},
        "rules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}
        ],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    }
    body.update(fields)
    [compiled] = ar.compile_configurations(
        [{"metadata": {"name": "cfg"}, "webhooks": [body]}], mutating=mutating
    )
    return compiled


# --- configurations -----------------------------------------------------------------------------------


def test_configurations_run_in_name_order_and_duplicate_names_get_distinct_uids() -> None:
    configs = [
        {"metadata": {"name": "b"}, "webhooks": [{"name": "x.example.com"}]},
        {"metadata": {"name": "a"}, "webhooks": [{"name": "y.example.com"}, {"name": "y.example.com"}]},
    ]
    hooks = ar.compile_configurations(configs, mutating=True)
    assert [h.uid for h in hooks] == ["a/y.example.com/0", "a/y.example.com/1", "b/x.example.com/0"]
    assert hooks[0].failure_policy == "Fail" and hooks[0].match_policy == "Equivalent"
    assert hooks[0].timeout_seconds == 10 and hooks[0].reinvocation_policy == "Never"


@pytest.mark.parametrize(
    ("client", "url"),
    [
        ({"url": "https://hooks.example.com/check"}, "https://hooks.example.com/check?timeout=10s"),
        ({"url": "https://hooks.example.com:8443"}, "https://hooks.example.com:8443/?timeout=10s"),
        ({"url": "https://hooks.example.com/a/"}, "https://hooks.example.com/a?timeout=10s"),
        ({"service": {"namespace": "ns", "name": "svc"}}, "https://svc.ns.svc:443/?timeout=10s"),
        (
            {"service": {"namespace": "ns", "name": "svc", "path": "/validate", "port": 8443}},
            "https://svc.ns.svc:8443/validate?timeout=10s",
        ),
    ],
)
def test_request_url_is_upstreams(client: Obj, url: str) -> None:
    assert hook(clientConfig=client).client.request_url(10) == url


def test_service_server_name() -> None:
    compiled = hook(
        clientConfig={"service": {"namespace": "ns", "name": "svc"}, "caBundle": "bm90IGEgY2VydA=="}
    )
    assert compiled.client.server_name == "svc.ns.svc"
    assert compiled.client.ca_bundle == b"not a cert"
    assert hook().client.server_name == "hooks.example.com"


# --- matching ------------------------------------------------------------------------------------------


def test_rules_match_operation_group_version_and_resource() -> None:
    assert ar.should_call(hook(), request(), NS) is not None
    assert ar.should_call(hook(), request(operation="UPDATE"), NS) is None
    assert ar.should_call(hook(), request(resource="secrets", kind="Secret"), NS) is None


@pytest.mark.parametrize(
    ("resources", "subresource", "expected"),
    [
        (["pods"], "", True),
        (["pods"], "status", False),
        (["pods/status"], "status", True),
        (["pods/*"], "status", True),
        (["pods/*"], "", True),  # upstream's matcher: "*" matches the empty subresource too
        (["*/status"], "status", True),
        (["*"], "status", False),
        (["*/*"], "status", True),
    ],
)
def test_subresource_rules(resources: list[str], subresource: str, expected: bool) -> None:
    compiled = hook(
        rules=[{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": resources}]
    )
    req = request(operation="UPDATE", resource="pods", kind="Pod", subresource=subresource)
    assert (ar.should_call(compiled, req, NS) is not None) is expected


def test_scope_and_namespaces_themselves() -> None:
    def rule(scope: str) -> list[Obj]:
        return [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["*"],
                "resources": ["*"],
                "scope": scope,
            }
        ]

    namespaced, cluster = hook(rules=rule("Namespaced")), hook(rules=rule("Cluster"))
    ns_create = request(resource="namespaces", kind="Namespace", name="new", namespace="", object=NS)
    assert ar.should_call(namespaced, request(), NS) is not None
    assert ar.should_call(cluster, request(), NS) is None
    assert ar.should_call(cluster, ns_create, None) is not None
    assert ar.should_call(namespaced, ns_create, None) is None


def test_equivalent_match_policy_sees_the_request_in_the_rule_version() -> None:
    rules = [
        {"apiGroups": ["apps"], "apiVersions": ["v1beta1"], "operations": ["*"], "resources": ["deployments"]}
    ]
    req = request(
        group="apps", resource="deployments", kind="Deployment", equivalents=(("v1beta1", "Deployment"),)
    )
    invocation = ar.should_call(hook(rules=rules), req, NS)
    assert invocation is not None and invocation.version == "v1beta1"
    assert ar.should_call(hook(rules=rules, matchPolicy="Exact"), req, NS) is None
    review = ar.build_review(invocation, req, "v1", "u")
    assert review["request"]["kind"]["version"] == "v1beta1"
    assert review["request"]["requestKind"]["version"] == "v1"


def test_namespace_selector_uses_the_namespace_labels() -> None:
    selective = hook(namespaceSelector={"matchLabels": {"env": "prod"}})
    assert ar.should_call(selective, request(), NS) is not None
    other = {**NS, "metadata": {"name": "team", "labels": {"env": "dev"}}}
    assert ar.should_call(selective, request(), other) is None
    # Cluster-scoped requests are never exempted by a namespace selector.
    assert (
        ar.should_call(
            hook(
                namespaceSelector={"matchLabels": {"env": "prod"}},
                rules=[{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}],
            ),
            request(
                resource="clusterroles", group="rbac.authorization.k8s.io", kind="ClusterRole", namespace=""
            ),
            None,
        )
        is not None
    )


def test_missing_namespace_is_404_only_for_webhooks_whose_rules_match() -> None:
    selective = hook(namespaceSelector={"matchLabels": {"env": "prod"}})
    with pytest.raises(errors.StatusError) as exc:
        ar.should_call(selective, request(), None)
    assert exc.value.code == 404 and exc.value.message == 'namespaces "team" not found'
    assert ar.should_call(selective, request(operation="DELETE"), None) is None


def test_namespace_create_matches_on_its_own_labels() -> None:
    selective = hook(
        namespaceSelector={"matchLabels": {"env": "prod"}},
        rules=[
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["namespaces"]}
        ],
    )
    req = request(resource="namespaces", kind="Namespace", name="team", namespace="", object=NS)
    assert ar.should_call(selective, req, None) is not None


def test_object_selector_checks_old_object_too() -> None:
    selective = hook(
        objectSelector={"matchLabels": {"tier": "web"}},
        rules=[{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["configmaps"]}],
    )
    assert ar.should_call(selective, request(), NS) is None
    assert ar.should_call(selective, request(object=configmap(tier="web")), NS) is not None
    deleting = request(operation="DELETE", object=None, old_object=configmap(tier="web"))
    assert ar.should_call(selective, deleting, NS) is not None


def test_match_conditions() -> None:
    conditions = [{"name": "not-kube-system", "expression": "request.namespace != 'kube-system'"}]
    assert ar.should_call(hook(matchConditions=conditions), request(), NS) is not None
    assert ar.should_call(hook(matchConditions=conditions), request(namespace="kube-system"), None) is None


def test_match_condition_errors_follow_the_failure_policy() -> None:
    conditions = [{"name": "broken", "expression": "object.nope == 'x'"}]
    with pytest.raises(errors.StatusError) as exc:
        ar.should_call(hook(matchConditions=conditions), request(), NS)
    assert exc.value.code == 403
    assert exc.value.message == (
        "configmaps \"cm\" is forbidden: expression 'object.nope == 'x'' resulted in error: no such key: nope"
    )
    assert ar.should_call(hook(matchConditions=conditions, failurePolicy="Ignore"), request(), NS) is None


def test_match_conditions_may_ask_the_authorizer() -> None:
    asked: list[cel.AuthzCheck] = []

    def authorize(check: cel.AuthzCheck) -> cel.AuthzDecision:
        asked.append(check)
        return cel.AuthzDecision(False, "")

    conditions = [
        {
            "name": "admins-skip",
            "expression": "!authorizer.group('').resource('secrets').check('get').allowed()",
        }
    ]
    assert ar.should_call(hook(matchConditions=conditions), request(), NS, authorize) is not None
    assert asked and asked[0].resource == "secrets"


def test_admission_configuration_is_exempt() -> None:
    req = request(
        group="admissionregistration.k8s.io",
        resource="validatingwebhookconfigurations",
        kind="ValidatingWebhookConfiguration",
    )
    assert ar.is_exempt(req)
    assert not ar.is_exempt(request())


# --- the review ----------------------------------------------------------------------------------------


def test_review_v1_shape() -> None:
    invocation = ar.should_call(hook(), request(), NS)
    assert invocation is not None
    review = ar.build_review(invocation, request(), "v1", "the-uid")
    assert review == {
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": "the-uid",
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "requestKind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "requestResource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "cm",
            "namespace": "team",
            "operation": "CREATE",
            "userInfo": {"username": "alice", "groups": ["devs"]},
            "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
            "object": configmap(),
            "oldObject": None,
        },
    }


def test_review_version_is_the_first_known_one() -> None:
    assert ar.review_version(hook(admissionReviewVersions=["v2", "v1beta1", "v1"])) == "v1beta1"
    assert ar.review_version(hook(admissionReviewVersions=["v2"])) is None


# --- the answer ----------------------------------------------------------------------------------------


def answer(response: Obj | None, **top: Any) -> Obj:
    doc: Obj = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", **top}
    if response is not None:
        doc["response"] = response
    return doc


def patch_field(ops: list[Obj]) -> str:
    return base64.b64encode(json.dumps(ops).encode()).decode()


def test_allowed_answer_with_warnings() -> None:
    got = ar.verify_response(
        hook(), "v1", "u", answer({"uid": "u", "allowed": True, "warnings": ["careful"]})
    )
    assert got.allowed and got.warnings == ("careful",) and got.patch is None


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        (answer(None), "received invalid webhook response: webhook response was absent"),
        (
            answer({"uid": "other", "allowed": True}),
            'received invalid webhook response: expected response.uid="u", got "other"',
        ),
        (
            answer({"uid": "u", "allowed": True}, apiVersion="admission.k8s.io/v1beta1"),
            "received invalid webhook response: expected webhook response of admission.k8s.io/v1, "
            "Kind=AdmissionReview, got admission.k8s.io/v1beta1, Kind=AdmissionReview",
        ),
        (
            {"response": {"uid": "u"}},
            'failed to call webhook: Object \'Kind\' is missing in \'{"response":{"uid":"u"}}\'',
        ),
        (
            answer({"uid": "u", "allowed": True, "patch": patch_field([])}),
            "received invalid webhook response: validating webhook may not return response.patch",
        ),
    ],
)
def test_invalid_answers(document: Obj, reason: str) -> None:
    with pytest.raises(ar.CallError) as exc:
        ar.verify_response(hook(), "v1", "u", document)
    assert exc.value.reason == reason
    assert exc.value.message == f'failed calling webhook "check.example.com": {reason}'


def test_mutating_answers_need_patch_and_patch_type_together() -> None:
    mutator = hook(mutating=True)
    ops = [{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]
    with pytest.raises(ar.CallError, match="webhook returned response.patch but not response.patchType"):
        ar.verify_response(
            mutator, "v1", "u", answer({"uid": "u", "allowed": True, "patch": patch_field(ops)})
        )
    with pytest.raises(ar.CallError, match="webhook returned response.patchType but not response.patch"):
        ar.verify_response(
            mutator, "v1", "u", answer({"uid": "u", "allowed": True, "patchType": "JSONPatch"})
        )
    with pytest.raises(ar.CallError, match='unsupported patch type "MergePatch"'):
        ar.verify_response(
            mutator,
            "v1",
            "u",
            answer({"uid": "u", "allowed": True, "patch": patch_field(ops), "patchType": "MergePatch"}),
        )
    got = ar.verify_response(
        mutator,
        "v1",
        "u",
        answer({"uid": "u", "allowed": True, "patch": patch_field(ops), "patchType": "JSONPatch"}),
    )
    assert got.patch == ops


def test_undecodable_patch() -> None:
    bad = base64.b64encode(b'{"op": "add"}').decode()
    with pytest.raises(ar.CallError) as exc:
        ar.verify_response(
            hook(mutating=True),
            "v1",
            "u",
            answer({"uid": "u", "allowed": True, "patch": bad, "patchType": "JSONPatch"}),
        )
    assert exc.value.reason == (
        "received undecodable patch in webhook response: json: cannot unmarshal object into Go value of type "
        "jsonpatch.Patch"
    )


def test_v1beta1_answers_are_not_checked_for_uid_and_patch_type() -> None:
    ops = [{"op": "add", "path": "/x", "value": 1}]
    doc = {
        "apiVersion": "admission.k8s.io/v1beta1",
        "kind": "AdmissionReview",
        "response": {"allowed": True, "patch": patch_field(ops)},
    }
    got = ar.verify_response(hook(mutating=True), "v1beta1", "u", doc)
    assert got.patch == ops


@pytest.mark.parametrize(
    ("status", "body", "content_type", "text"),
    [
        (
            500,
            b"boom\n",
            "text/plain; charset=utf-8",
            'an error on the server ("boom") has prevented the request from succeeding',
        ),
        (
            502,
            b"<html>",
            "text/html",
            'an error on the server ("unknown") has prevented the request from succeeding',
        ),
        (404, b"", "text/plain", "the server could not find the requested resource"),
        (403, b"go away", "text/plain", "go away"),
    ],
)
def test_http_errors_read_like_client_gos(status: int, body: bytes, content_type: str, text: str) -> None:
    with pytest.raises(ar.CallError) as exc:
        ar.decode_response_body(hook(), body, status, content_type)
    assert exc.value.reason == f"failed to call webhook: {text}"


# --- patches and denials ----------------------------------------------------------------------------------


def test_patch_application() -> None:
    ops = [{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]
    original = configmap()
    patched = ar.apply_patch(original, ops)
    assert patched["metadata"]["labels"] == {"a": "b"}
    assert "labels" not in original["metadata"]  # never in place
    with pytest.raises(ar.PatchError) as exc:
        ar.apply_patch(original, [{"op": "replace", "path": "/metadata/nope/x", "value": 1}])
    assert (
        str(exc.value)
        == 'replace operation does not apply: doc is missing path: "/metadata/nope/x": missing value'
    )
    with pytest.raises(ar.PatchTestFailed):
        ar.apply_patch(original, [{"op": "test", "path": "/data/a", "value": "2"}])


@pytest.mark.parametrize(
    ("status", "code", "reason", "message"),
    [
        (
            {"code": 403, "reason": "Forbidden", "message": "no"},
            403,
            "Forbidden",
            'admission webhook "check.example.com" denied the request: no',
        ),
        (
            {"reason": "NotAllowed"},
            400,
            "NotAllowed",
            'admission webhook "check.example.com" denied the request: NotAllowed',
        ),
        (None, 400, "", 'admission webhook "check.example.com" denied the request without explanation'),
        (
            {"code": 200, "message": "x"},
            400,
            "",
            'admission webhook "check.example.com" denied the request: x',
        ),
    ],
)
def test_denials(status: Obj | None, code: int, reason: str, message: str) -> None:
    err = ar.denial("check.example.com", status)
    assert (err.code, err.reason, err.message) == (code, reason, message)


def test_dry_run_needs_a_side_effect_free_webhook() -> None:
    assert ar.check_dry_run(hook(sideEffects="None")) is None
    assert ar.check_dry_run(hook(sideEffects="NoneOnDryRun")) is None
    with pytest.raises(errors.StatusError) as exc:
        ar.check_dry_run(hook(sideEffects="Some"))
    assert (exc.value.code, exc.value.message) == (
        400,
        'admission webhook "check.example.com" does not support dry run',
    )
    with pytest.raises(errors.StatusError):
        ar.check_dry_run(hook(sideEffects="Unknown"))
    missing = ar.check_dry_run(hook(sideEffects=None))
    assert missing is not None and missing.reason == "Webhook SideEffects is nil"


# --- Service references -------------------------------------------------------------------------------------


SERVICE: Obj = {"spec": {"ports": [{"name": "https", "port": 443, "targetPort": 9443}]}}
ENDPOINTS: Obj = {
    "subsets": [{"addresses": [{"ip": "10.0.0.7"}], "ports": [{"name": "https", "port": 9443}]}]
}


def test_services_resolve_through_endpoints_or_external_names() -> None:
    assert ar.resolve_service(SERVICE, ENDPOINTS, "ns", "svc", 443) == ("10.0.0.7", 9443)
    external = {"spec": {"type": "ExternalName", "externalName": "hooks.internal"}}
    assert ar.resolve_service(external, None, "ns", "svc", 8443) == ("hooks.internal", 8443)


@pytest.mark.parametrize(
    ("service", "endpoints", "port", "message"),
    [
        (None, None, 443, 'service "svc" not found'),
        (SERVICE, ENDPOINTS, 8443, 'no service port 8443 found for service "svc"'),
        (SERVICE, None, 443, 'no endpoints available for service "svc"'),
        (
            SERVICE,
            {
                "subsets": [
                    {"notReadyAddresses": [{"ip": "10.0.0.8"}], "ports": [{"name": "https", "port": 9443}]}
                ]
            },
            443,
            'no endpoints available for service "svc"',
        ),
        ({"spec": {"type": "Headless"}}, None, 443, 'unsupported service type "Headless"'),
    ],
)
def test_service_resolution_failures(
    service: Obj | None, endpoints: Obj | None, port: int, message: str
) -> None:
    with pytest.raises(ar.ResolveError) as exc:
        ar.resolve_service(service, endpoints, "ns", "svc", port)
    assert str(exc.value) == message
