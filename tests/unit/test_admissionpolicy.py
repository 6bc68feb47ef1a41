"""ValidatingAdmissionPolicy decisions (k8s.io/apiserver plugin/policy/validating and matching behaviour)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from vplane.kube import admissionpolicy as ap
from vplane.kube import cel, errors, labels
from vplane.kube.objects import Obj

NS: Obj = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {
        "name": "default",
        "uid": "ns-uid",
        "labels": {"env": "prod"},
        "managedFields": [{"manager": "x"}],
        "ownerReferences": [],
    },
    "spec": {"finalizers": ["kubernetes"]},
    "status": {"phase": "Active"},
}
ALL_CONFIGMAPS = [
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["configmaps"]}
]


def configmap(name: str = "cm", data: dict[str, str] | None = None, **meta: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", **meta},
        "data": data if data is not None else {"a": "1"},
    }


def policy(
    name: str = "demo",
    *,
    rules: list[Obj] | None = None,
    validations: list[Obj] | None = None,
    **spec: Any,
) -> Obj:
    constraints = spec.pop("matchConstraints", {"resourceRules": ALL_CONFIGMAPS if rules is None else rules})
    body: Obj = {"matchConstraints": constraints, **spec}
    if validations is not None:
        body["validations"] = validations
    elif "auditAnnotations" not in spec:
        body["validations"] = [{"expression": "false", "message": "denied"}]
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": body,
    }


def binding(
    name: str = "demo-binding", policy_name: str = "demo", actions: tuple[str, ...] = ("Deny",), **spec: Any
) -> Obj:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": policy_name, "validationActions": list(actions), **spec},
    }


def request(
    operation: str = "CREATE",
    *,
    obj: Obj | None = None,
    old: Obj | None = None,
    resource: str = "configmaps",
    kind: str = "ConfigMap",
    group: str = "",
    version: str = "v1",
    name: str = "cm",
    namespace: str = "default",
    **kw: Any,
) -> ap.Request:
    if obj is None and operation in ("CREATE", "UPDATE"):
        obj = configmap(name)
    if old is None and operation in ("UPDATE", "DELETE"):
        old = configmap(name)
    return ap.Request(
        operation=operation,
        group=group,
        version=version,
        resource=resource,
        kind=kind,
        name=name,
        namespace=namespace,
        object=obj,
        old_object=old,
        user=kw.pop("user", {"username": "alice", "groups": ["devs", "system:authenticated"]}),
        **kw,
    )


@dataclass
class Params:
    """An in-memory ParamSource."""

    scopes: dict[tuple[str, str], Literal["Namespaced", "Cluster"]] = field(
        default_factory=lambda: {("v1", "ConfigMap"): "Namespaced", ("example.com/v1", "Limit"): "Cluster"}
    )
    objects: list[Obj] = field(default_factory=list)

    def scope(self, api_version: str, kind: str) -> Literal["Namespaced", "Cluster"] | None:
        return self.scopes.get((api_version, kind))

    def _matching(self, api_version: str, kind: str, namespace: str) -> list[Obj]:
        return [
            o
            for o in self.objects
            if o.get("apiVersion", api_version) == api_version
            and o.get("kind", kind) == kind
            and o["metadata"].get("namespace", "") == namespace
        ]

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None:
        return next(
            (o for o in self._matching(api_version, kind, namespace) if o["metadata"]["name"] == name), None
        )

    def list(self, api_version: str, kind: str, namespace: str, selector: labels.Selector) -> list[Obj]:
        return [
            o
            for o in self._matching(api_version, kind, namespace)
            if selector.matches(o["metadata"].get("labels") or {})
        ]


def run(
    policies: list[Obj] | Obj,
    bindings: list[Obj] | Obj,
    req: ap.Request | None = None,
    *,
    namespace: Obj | None = NS,
    params: Params | None = None,
    authorizer: cel.AuthzCallback | None = None,
) -> ap.Result:
    policies = policies if isinstance(policies, list) else [policies]
    bindings = bindings if isinstance(bindings, list) else [bindings]
    return ap.evaluate(
        {p["metadata"]["name"]: p for p in policies},
        bindings,
        req or request(),
        namespace=namespace,
        params=params or Params(),
        authorizer=authorizer,
    )


def denied(result: ap.Result) -> str | None:
    d = result.denial
    return None if d is None else d.message


# --- the denial as clients see it --------------------------------------------------------------------


def test_denial_status_matches_upstream() -> None:
    req = request(obj=configmap("too-many", {"a": "1", "b": "2", "c": "3"}), name="too-many")
    p = policy(validations=[{"expression": "size(object.data) <= 2", "message": "too many keys"}])
    result = run(p, binding(), req)
    err = result.error(req)
    assert isinstance(err, errors.StatusError)
    message = "ValidatingAdmissionPolicy 'demo' with binding 'demo-binding' denied request: too many keys"
    assert err.message == f'configmaps "too-many" is forbidden: {message}'
    assert (err.code, err.reason) == (422, "Invalid")
    assert err.to_status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'configmaps "too-many" is forbidden: {message}',
        "reason": "Invalid",
        "details": {"name": "too-many", "kind": "configmaps", "causes": [{"message": message}]},
        "code": 422,
    }


def test_denial_names_the_group_and_falls_back_for_the_name() -> None:
    req = request(
        "DELETE",
        group="apiregistration.k8s.io",
        resource="apiservices",
        kind="APIService",
        name="v1.example.com",
        namespace="",
        old={"metadata": {"name": "v1.example.com"}},
    )
    p = policy(
        rules=[{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["DELETE"], "resources": ["*"]}]
    )
    err = run(p, binding(), req).error(req)
    assert err is not None
    assert err.message.startswith('apiservices.apiregistration.k8s.io "v1.example.com" is forbidden: ')
    assert err.details == {
        "name": "v1.example.com",
        "group": "apiregistration.k8s.io",
        "kind": "apiservices",
        "causes": [
            {"message": "ValidatingAdmissionPolicy 'demo' with binding 'demo-binding' denied request: denied"}
        ],
    }
    nameless = request(name="", obj={"metadata": {"generateName": "gen-"}})
    err = run(policy(), binding(), nameless).error(nameless)
    assert err is not None and err.message.startswith('configmaps "gen-" is forbidden: ')
    anonymous = request("DELETE", name="", obj=None, old=configmap())
    err = run(policy(), binding(), anonymous).error(anonymous)
    assert err is not None and err.message.startswith('configmaps "Unknown" is forbidden: ')


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        ("Invalid", 422),
        ("Forbidden", 403),
        ("Unauthorized", 401),
        ("RequestEntityTooLarge", 413),
        ("Other", 422),
    ],
)
def test_reason_sets_the_code(reason: str, code: int) -> None:
    p = policy(validations=[{"expression": "false", "reason": reason}])
    err = run(p, binding()).error(request())
    assert err is not None and (err.reason, err.code) == (reason, code)


def test_warn_and_audit_actions() -> None:
    p = policy(
        validations=[{"expression": "true"}, {"expression": "object.data.size() < 1", "message": "has data"}]
    )
    result = run(p, binding(actions=("Warn", "Audit")))
    assert result.denial is None
    assert result.warnings == [
        "Validation failed for ValidatingAdmissionPolicy 'demo' with binding 'demo-binding': has data"
    ]
    assert [d.action for d in result.decisions] == ["Warn", "Audit"]
    assert json.loads(result.audit_annotations[ap.VALIDATION_FAILURE_ANNOTATION]) == [
        {
            "message": "has data",
            "policy": "demo",
            "binding": "demo-binding",
            "expressionIndex": 1,
            "validationActions": ["Warn", "Audit"],
        }
    ]


def test_audit_annotation_json_escapes_like_go() -> None:
    p = policy(validations=[{"expression": "false", "message": "a <b> & c"}])
    value = run(p, binding(actions=("Audit",))).audit_annotations[ap.VALIDATION_FAILURE_ANNOTATION]
    assert value.startswith('[{"message":"a \\u003cb\\u003e \\u0026 c","policy":"demo"')


def test_first_denial_wins_in_name_order() -> None:
    policies = [policy("b-policy"), policy("a-policy")]
    bindings = [binding("z", "b-policy"), binding("y", "a-policy"), binding("x", "a-policy")]
    result = run(policies, bindings)
    assert [(d.policy, d.binding) for d in result.decisions] == [
        ("a-policy", "x"),
        ("a-policy", "y"),
        ("b-policy", "z"),
    ]


def test_bindings_without_policy_and_policies_without_binding_do_nothing() -> None:
    assert run(policy("lonely"), binding(policy_name="missing")).decisions == []


@pytest.mark.parametrize(
    ("group", "resource"),
    [
        ("admissionregistration.k8s.io", "validatingadmissionpolicies"),
        ("admissionregistration.k8s.io", "validatingadmissionpolicybindings"),
        ("authorization.k8s.io", "subjectaccessreviews"),
    ],
)
def test_exempt_resources(group: str, resource: str) -> None:
    p = policy(rules=[{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}])
    req = request(group=group, resource=resource, namespace="")
    assert run(p, binding(), req).decisions == []


# --- matching -----------------------------------------------------------------------------------------


def rule(**overrides: Any) -> Obj:
    base: Obj = {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": ["CREATE"],
        "resources": ["configmaps"],
    }
    base.update(overrides)
    return base


@pytest.mark.parametrize(
    ("the_rule", "req", "matched"),
    [
        (rule(), request(), True),
        (rule(operations=["UPDATE"]), request(), False),
        (rule(operations=["*"]), request("DELETE"), True),
        (rule(operations=["CREATE", "DELETE"]), request("DELETE"), True),
        (rule(apiGroups=["apps"]), request(), False),
        (rule(apiGroups=["*"]), request(), True),
        (rule(apiVersions=["v2"]), request(), False),
        (rule(apiVersions=["*"]), request(), True),
        (rule(resources=["secrets"]), request(), False),
        (rule(resources=["*"]), request(), True),
        (rule(resources=["configmaps"]), request(subresource="status"), False),
        (rule(resources=["configmaps/status"]), request(subresource="status"), True),
        (rule(resources=["configmaps/*"]), request(subresource="status"), True),
        (rule(resources=["configmaps/*"]), request(), True),  # "*" also matches no subresource
        (rule(resources=["*/status"]), request(subresource="status"), True),
        (rule(resources=["*/*"]), request(), True),
        (rule(scope="Namespaced"), request(), True),
        (rule(scope="Cluster"), request(), False),
        (rule(scope="Cluster"), request(namespace=""), True),
        (rule(scope="Namespaced"), request(namespace=""), False),
        (rule(scope="*"), request(namespace=""), True),
        (
            rule(resources=["namespaces"], scope="Cluster"),
            request(resource="namespaces", kind="Namespace", namespace="cm"),
            True,
        ),
        (
            rule(resources=["namespaces"], scope="Namespaced"),
            request(resource="namespaces", kind="Namespace", namespace="cm"),
            False,
        ),
        (rule(resourceNames=["cm"]), request(), True),
        (rule(resourceNames=["other"]), request(), False),
    ],
)
def test_resource_rules(the_rule: Obj, req: ap.Request, matched: bool) -> None:
    p = policy(rules=[the_rule])
    assert (
        run(p, binding(), req, namespace={**NS, "metadata": {"name": req.namespace}}).denial is not None
    ) is matched


def test_exclude_resource_rules() -> None:
    p = policy(
        matchConstraints={
            "resourceRules": [rule(resources=["*"])],
            "excludeResourceRules": [rule(resourceNames=["skip-me"])],
        }
    )
    assert run(p, binding(), request(name="skip-me")).denial is None
    assert run(p, binding(), request(name="other")).denial is not None


def test_no_resource_rules_match_everything() -> None:
    p = policy(matchConstraints={"objectSelector": {}})
    assert run(p, binding(), request("DELETE", resource="secrets", kind="Secret")).denial is not None


def test_missing_match_constraints_is_a_configuration_error() -> None:
    p = policy()
    del p["spec"]["matchConstraints"]
    assert (
        denied(run(p, binding()))
        == "failed to configure policy: policy contained no match constraints, a required field"
    )
    assert run(p, binding()).denial.text.startswith("ValidatingAdmissionPolicy 'demo' denied request: ")  # type: ignore[union-attr]


def test_match_policy_equivalent_uses_other_served_versions() -> None:
    rules = [
        {
            "apiGroups": ["example.com"],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["widgets"],
        }
    ]
    widget = {"apiVersion": "example.com/v2", "kind": "Widget", "metadata": {"name": "w"}}
    req = request(
        group="example.com",
        version="v2",
        resource="widgets",
        kind="Widget",
        name="w",
        obj=widget,
        equivalents=(("v1", "Widget"),),
    )
    seen = policy(
        matchConstraints={"resourceRules": rules},
        validations=[
            {
                "expression": "false",
                "messageExpression": "object.apiVersion + ' ' + request.kind.version + ' ' + request.requestKind.version",
            }
        ],
    )
    assert denied(run(seen, binding(), req)) == "example.com/v1 v1 v2"
    exact = policy(matchConstraints={"resourceRules": rules, "matchPolicy": "Exact"})
    assert run(exact, binding(), req).denial is None


def test_namespace_selector() -> None:
    p = policy(
        matchConstraints={
            "resourceRules": ALL_CONFIGMAPS,
            "namespaceSelector": {"matchLabels": {"env": "prod"}},
        }
    )
    assert run(p, binding()).denial is not None
    staging = {**NS, "metadata": {"name": "default", "labels": {"env": "staging"}}}
    assert run(p, binding(), namespace=staging).denial is None
    # cluster-scoped requests are not filtered by namespace selectors
    cluster = policy(
        matchConstraints={
            "resourceRules": [rule(apiGroups=["*"], resources=["*"])],
            "namespaceSelector": {"matchLabels": {"env": "prod"}},
        }
    )
    req = request(
        resource="clusterroles", kind="ClusterRole", group="rbac.authorization.k8s.io", namespace=""
    )
    assert run(cluster, binding(), req, namespace=None).denial is not None


def test_namespace_selector_on_namespaces_uses_their_own_labels() -> None:
    p = policy(
        matchConstraints={
            "resourceRules": [rule(resources=["namespaces"], operations=["*"])],
            "namespaceSelector": {"matchLabels": {"env": "prod"}},
        }
    )
    ns_obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "new", "labels": {"env": "prod"}}}
    create = request(resource="namespaces", kind="Namespace", name="new", namespace="new", obj=ns_obj)
    assert run(p, binding(), create, namespace=None).denial is not None
    stored = {**ns_obj, "metadata": {"name": "new", "labels": {"env": "dev"}}}
    delete = request(
        "DELETE", resource="namespaces", kind="Namespace", name="new", namespace="new", old=stored
    )
    assert run(p, binding(), delete, namespace=stored).denial is None


def test_namespace_selector_with_missing_namespace_is_a_configuration_error() -> None:
    p = policy(
        matchConstraints={
            "resourceRules": ALL_CONFIGMAPS,
            "namespaceSelector": {"matchLabels": {"env": "prod"}},
        }
    )
    assert (
        denied(run(p, binding(), namespace=None))
        == 'failed to configure policy: namespaces "default" not found'
    )
    ignored = policy(matchConstraints=p["spec"]["matchConstraints"], failurePolicy="Ignore")
    assert run(ignored, binding(), namespace=None).decisions == []


def test_object_selector_checks_object_and_old_object() -> None:
    p = policy(
        matchConstraints={
            "resourceRules": ALL_CONFIGMAPS,
            "objectSelector": {"matchExpressions": [{"key": "protected", "operator": "Exists"}]},
        }
    )
    labelled = configmap(labels={"protected": "yes"})
    assert run(p, binding(), request(obj=labelled)).denial is not None
    assert run(p, binding(), request(obj=configmap())).denial is None
    # DELETE has no object: the old object's labels decide
    assert run(p, binding(), request("DELETE", old=labelled)).denial is not None
    # removing the label is an UPDATE whose old object still matches
    assert run(p, binding(), request("UPDATE", obj=configmap(), old=labelled)).denial is not None


def test_bad_selector_is_an_internal_configuration_error() -> None:
    p = policy(
        matchConstraints={
            "resourceRules": ALL_CONFIGMAPS,
            "objectSelector": {"matchLabels": {"bad key!": "x"}},
        }
    )
    message = denied(run(p, binding()))
    assert message is not None and message.startswith("failed to configure policy: Internal error occurred: ")


def test_binding_match_resources_narrow_the_policy() -> None:
    p = policy()
    narrowed = binding(matchResources={"objectSelector": {"matchLabels": {"team": "a"}}})
    assert run(p, narrowed, request(obj=configmap(labels={"team": "a"}))).denial is not None
    assert run(p, narrowed, request(obj=configmap(labels={"team": "b"}))).denial is None
    by_rule = binding(matchResources={"resourceRules": [rule(operations=["UPDATE"])]})
    assert run(p, by_rule, request("CREATE")).denial is None
    assert run(p, by_rule, request("UPDATE")).denial is not None
    excluded = binding(matchResources={"excludeResourceRules": [rule()]})
    assert run(p, excluded).denial is None
    by_ns = binding(matchResources={"namespaceSelector": {"matchLabels": {"env": "dev"}}})
    assert run(p, by_ns).denial is None


# --- the vCluster protection policy (platform-behaviour.md 2.1) ---------------------------------------

PROTECTION_MESSAGE = "deletion of vCluster-protected resources is denied; remove the corresponding entry from your vCluster configuration"
PROTECTION_POLICY = policy(
    "vcluster-protected-apiservices",
    failurePolicy="Fail",
    matchConstraints={
        "objectSelector": {"matchExpressions": [{"key": "vcluster.loft.sh/protected", "operator": "Exists"}]},
        "resourceRules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"], "resources": ["services"]},
            {
                "apiGroups": ["apiregistration.k8s.io"],
                "apiVersions": ["v1"],
                "operations": ["DELETE"],
                "resources": ["apiservices"],
            },
        ],
    },
    validations=[{"expression": "false", "message": PROTECTION_MESSAGE}],
)
PROTECTION_BINDING = binding(
    "vcluster-protected-resource-proxy",
    "vcluster-protected-apiservices",
    matchResources={"objectSelector": {"matchLabels": {"vcluster.loft.sh/protected": "resource-proxy"}}},
)


def apiservice(labels: dict[str, str] | None = None) -> Obj:
    meta: Obj = {"name": "v1.example.com"}
    if labels is not None:
        meta["labels"] = labels
    return {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": meta,
        "spec": {"group": "example.com"},
    }


def apiservice_request(operation: str, obj: Obj | None, old: Obj | None) -> ap.Request:
    return request(
        operation,
        group="apiregistration.k8s.io",
        resource="apiservices",
        kind="APIService",
        name="v1.example.com",
        namespace="",
        obj=obj,
        old=old,
    )


def test_protection_policy_denies_deleting_labelled_apiservice() -> None:
    req = apiservice_request("DELETE", None, apiservice({"vcluster.loft.sh/protected": "resource-proxy"}))
    err = run(PROTECTION_POLICY, PROTECTION_BINDING, req, namespace=None).error(req)
    assert err is not None
    assert err.message == (
        'apiservices.apiregistration.k8s.io "v1.example.com" is forbidden: ValidatingAdmissionPolicy '
        "'vcluster-protected-apiservices' with binding 'vcluster-protected-resource-proxy' denied request: "
        + PROTECTION_MESSAGE
    )
    assert (err.code, err.reason) == (422, "Invalid")


def test_protection_policy_denies_deleting_labelled_service() -> None:
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "proxy",
            "namespace": "kube-system",
            "labels": {"vcluster.loft.sh/protected": "resource-proxy"},
        },
    }
    req = request(
        "DELETE",
        resource="services",
        kind="Service",
        name="proxy",
        namespace="kube-system",
        obj=None,
        old=svc,
    )
    ns = {"metadata": {"name": "kube-system"}}
    err = run(PROTECTION_POLICY, PROTECTION_BINDING, req, namespace=ns).error(req)
    assert err is not None and err.message.startswith(
        'services "proxy" is forbidden: ValidatingAdmissionPolicy '
    )


@pytest.mark.parametrize(
    ("operation", "obj", "old"),
    [
        ("UPDATE", apiservice({}), apiservice({"vcluster.loft.sh/protected": "resource-proxy"})),  # unlabel
        ("DELETE", None, apiservice()),  # after unlabelling
        (
            "DELETE",
            None,
            apiservice({"vcluster.loft.sh/protected": "other-feature"}),
        ),  # policy matches, binding not
        ("CREATE", apiservice({"vcluster.loft.sh/protected": "resource-proxy"}), None),
    ],
)
def test_protection_policy_allows(operation: str, obj: Obj | None, old: Obj | None) -> None:
    req = apiservice_request(operation, obj, old)
    assert run(PROTECTION_POLICY, PROTECTION_BINDING, req, namespace=None).decisions == []


# --- matchConditions ----------------------------------------------------------------------------------


def test_match_conditions_all_must_be_true() -> None:
    conditions = [
        {"name": "not-system", "expression": "!request.userInfo.username.startsWith('system:')"},
        {"name": "has-data", "expression": "has(object.data)"},
    ]
    p = policy(matchConditions=conditions)
    assert run(p, binding()).denial is not None
    system = request(user={"username": "system:admin"})
    assert run(p, binding(), system).decisions == []


def test_match_condition_errors_follow_failure_policy() -> None:
    conditions = [
        {"name": "a", "expression": "object.nope"},
        {"name": "b", "expression": "object.nope2 == 1"},
    ]
    p = policy(matchConditions=conditions)
    assert denied(run(p, binding())) == (
        "[expression 'object.nope' resulted in error: no such key: nope, "
        "expression 'object.nope2 == 1' resulted in error: no such key: nope2]"
    )
    assert run(policy(matchConditions=conditions, failurePolicy="Ignore"), binding()).decisions == []
    # a false condition wins over errors
    with_false = policy(matchConditions=[*conditions, {"name": "c", "expression": "false"}])
    assert run(with_false, binding()).decisions == []


def test_match_conditions_see_no_namespace_object() -> None:
    p = policy(
        matchConditions=[{"name": "ns", "expression": "namespaceObject == null"}],
        validations=[{"expression": "namespaceObject == null"}],
    )
    assert denied(run(p, binding())) == "failed expression: namespaceObject == null"


# --- validations and messages ---------------------------------------------------------------------


def test_message_fallbacks() -> None:
    p = policy(
        validations=[
            {
                "expression": "  object.data.size() < 1 ",
                "messageExpression": "'has ' + string(object.data.size()) + ' keys'",
            },
            {"expression": "false", "message": "  static  ", "messageExpression": "object.nope"},
            {"expression": "false", "messageExpression": "'multi\\nline'"},
            {"expression": "false", "messageExpression": "'   '"},
            {"expression": "false", "messageExpression": "1"},
            {"expression": " false "},
        ]
    )
    messages = [d.message for d in run(p, binding()).decisions]
    assert messages == [
        "has 1 keys",
        "static",
        "failed expression: false",
        "failed expression: false",
        "failed expression: false",
        "failed expression: false",
    ]


def test_message_expression_has_no_authorizer_and_sees_params() -> None:
    p = policy(
        paramKind={"apiVersion": "v1", "kind": "ConfigMap"},
        validations=[
            {"expression": "false", "messageExpression": "'limit ' + params.data.limit"},
            {
                "expression": "false",
                "message": "fallback",
                "messageExpression": "string(authorizer.path('/x').check('get').allowed())",
            },
        ],
    )
    params = Params(
        objects=[
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "cfg", "namespace": "default"},
                "data": {"limit": "2"},
            }
        ]
    )
    b = binding(paramRef={"name": "cfg", "parameterNotFoundAction": "Deny"})
    result = run(p, b, params=params, authorizer=lambda c: cel.AuthzDecision(True))
    assert [d.message for d in result.decisions] == ["limit 2", "fallback"]


def test_non_boolean_result_fails_the_validation() -> None:
    assert (
        denied(run(policy(validations=[{"expression": "object.data"}]), binding()))
        == "failed expression: object.data"
    )
    # an optional at run time is "not true" too (and a match condition that is not false matches)
    optional = policy(
        validations=[{"expression": "dyn(object.?data)"}],
        matchConditions=[{"name": "o", "expression": "dyn(object.?data)"}],
    )
    assert denied(run(optional, binding())) == "failed expression: dyn(object.?data)"
    typed = policy(validations=[{"expression": "object.?data"}])
    assert (
        denied(run(typed, binding())) == "compilation error: must evaluate to bool but got optional_type(dyn)"
    )


def test_evaluation_errors_follow_failure_policy() -> None:
    p = policy(validations=[{"expression": "object.spec.replicas > 1"}])
    result = run(p, binding())
    assert denied(result) == "expression 'object.spec.replicas > 1' resulted in error: no such key: spec"
    assert result.denial is not None and result.denial.reason == "Invalid"
    assert (
        run(policy(validations=p["spec"]["validations"], failurePolicy="Ignore"), binding()).decisions == []
    )
    weird = policy(validations=p["spec"]["validations"], failurePolicy="Sometimes")
    assert (
        denied(run(weird, binding()))
        == "expression 'object.spec.replicas > 1' resulted in error: no such key: spec"
    )


def test_eval_errors_go_through_validation_actions() -> None:
    p = policy(validations=[{"expression": "object.nope"}])
    result = run(p, binding(actions=("Warn",)))
    assert result.warnings == [
        "Validation failed for ValidatingAdmissionPolicy 'demo' with binding 'demo-binding': "
        "expression 'object.nope' resulted in error: no such key: nope"
    ]


def test_compile_errors() -> None:
    p = policy(
        validations=[
            {"expression": "object.data.size() >"},
            {"expression": "1 + 1"},
            {"expression": "params.x"},
        ]
    )
    messages = [d.message for d in run(p, binding()).decisions]
    assert messages[0].startswith("compilation error: compilation failed: ERROR: <input>:1:21: Syntax error:")
    assert messages[1] == "compilation error: must evaluate to bool but got int"
    assert messages[2].startswith(
        "compilation error: compilation failed: ERROR: <input>:1:7: undeclared reference to 'params.x'"
    )


def test_unrecognized_failure_policy_on_configuration_errors() -> None:
    p = policy(failurePolicy="Sometimes", paramKind={"apiVersion": "nope/v1", "kind": "Nope"})
    assert denied(run(p, binding())) == "unrecognized failure policy: 'Sometimes'"


# --- variables ---------------------------------------------------------------------------------------


def test_variables_in_order_and_chained() -> None:
    p = policy(
        variables=[
            {"name": "keys", "expression": "object.data.size()"},
            {"name": "double", "expression": "variables.keys * 2"},
        ],
        validations=[
            {
                "expression": "variables.double < 2",
                "messageExpression": "'double is ' + string(variables.double)",
            }
        ],
    )
    assert denied(run(p, binding())) == "double is 2"


def test_failing_variables_only_fail_expressions_that_read_them() -> None:
    p = policy(
        variables=[
            {"name": "replicas", "expression": "object.spec.replicas"},
            {"name": "uses", "expression": "variables.replicas + 1"},
        ],
        validations=[
            {"expression": "!has(object.spec) || variables.replicas < 5"},
            {"expression": "variables.replicas < 5"},
            {"expression": "variables.uses < 5"},
        ],
    )
    messages = [d.message for d in run(p, binding()).decisions]
    assert messages == [
        "expression 'variables.replicas < 5' resulted in error: composited variable \"replicas\" fails to evaluate: no such key: spec",
        "expression 'variables.uses < 5' resulted in error: composited variable \"uses\" fails to evaluate: "
        'composited variable "replicas" fails to evaluate: no such key: spec',
    ]


def test_variable_compile_errors_and_unknown_variables() -> None:
    p = policy(
        variables=[
            {"name": "bad", "expression": "object.data +"},
            {"name": "early", "expression": "variables.late"},
            {"name": "late", "expression": "1"},
        ],
        validations=[
            {"expression": "variables.bad == 1"},
            {"expression": "variables.early == 1"},
            {"expression": "variables.nope == 1"},
        ],
    )
    messages = [d.message for d in run(p, binding()).decisions]
    assert messages[0].startswith(
        "expression 'variables.bad == 1' resulted in error: composited variable \"bad\" fails to compile: compilation failed: ERROR: <input>:1:"
    )
    assert messages[1].startswith(
        "expression 'variables.early == 1' resulted in error: composited variable \"early\" fails to compile: "
        "compilation failed: ERROR: <input>:1:10: undefined field 'late'"
    )
    assert messages[2] == (
        "compilation error: compilation failed: ERROR: <input>:1:10: undefined field 'nope'\n | variables.nope == 1\n | .........^"
    )


def test_optional_variables_work_through_substitution() -> None:
    p = policy(
        variables=[
            {"name": "maybe", "expression": "object.?data.?a"},
            {"name": "missing", "expression": "object.?spec.?x"},
        ],
        validations=[
            {
                "expression": "variables.maybe.orValue('') != '1'",
                "messageExpression": "'a=' + variables.maybe.value()",
            },
            {"expression": "variables.missing.hasValue()", "message": "no x"},
        ],
    )
    assert [d.message for d in run(p, binding()).decisions] == ["a=1", "no x"]


def test_variables_in_match_conditions() -> None:
    p = policy(
        variables=[{"name": "isTeamA", "expression": "object.metadata.?labels.?team.orValue('') == 'a'"}],
        matchConditions=[{"name": "team-a", "expression": "variables.isTeamA"}],
    )
    assert run(p, binding(), request(obj=configmap(labels={"team": "a"}))).denial is not None
    assert run(p, binding()).denial is None


# --- audit annotations --------------------------------------------------------------------------------


def test_audit_annotations() -> None:
    p = policy(
        validations=[{"expression": "true"}],
        auditAnnotations=[
            {"key": "keys", "valueExpression": "'  ' + string(object.data.size()) + ' keys '"},
            {"key": "skipped-null", "valueExpression": "null"},
            {"key": "skipped-empty", "valueExpression": "' '"},
        ],
    )
    result = run(p, [binding("b1"), binding("b2")])
    assert result.decisions == []
    assert result.audit_annotations == {"demo/keys": "1 keys"}


def test_audit_annotations_from_several_params_are_joined() -> None:
    p = policy(
        paramKind={"apiVersion": "v1", "kind": "ConfigMap"},
        auditAnnotations=[{"key": "limit", "valueExpression": "params.data.limit"}],
    )
    params = Params(
        objects=[
            {
                "metadata": {"name": "one", "namespace": "default", "labels": {"use": "yes"}},
                "data": {"limit": "1"},
            },
            {
                "metadata": {"name": "two", "namespace": "default", "labels": {"use": "yes"}},
                "data": {"limit": "2"},
            },
        ]
    )
    b = binding(paramRef={"selector": {"matchLabels": {"use": "yes"}}, "parameterNotFoundAction": "Deny"})
    assert run(p, b, params=params).audit_annotations == {"demo/limit": "1, 2"}


def test_audit_annotation_errors_deny_under_fail() -> None:
    p = policy(
        auditAnnotations=[
            {"key": "k", "valueExpression": "object.nope"},
            {"key": "n", "valueExpression": "string(1) == '1' ? 1 : 2"},
        ]
    )
    messages = [d.message for d in run(p, binding(actions=("Audit",))).decisions]
    assert messages == [
        "expression 'object.nope' resulted in error: no such key: nope",
        "compilation error: must evaluate to one of [string null_type] but got int",
    ]
    dyn = policy(auditAnnotations=[{"key": "k", "valueExpression": "object.data"}])
    assert denied(run(dyn, binding())) == (
        "valueExpression 'object.data' resulted in unsupported return type: map. Return type must be either string or null."
    )
    opt = policy(auditAnnotations=[{"key": "k", "valueExpression": "dyn(object.?data)"}])
    assert denied(run(opt, binding())) == (
        "valueExpression 'dyn(object.?data)' resulted in unsupported return type: optional_type. "
        "Return type must be either string or null."
    )
    typed = policy(auditAnnotations=[{"key": "k", "valueExpression": "object.?data"}])
    assert denied(run(typed, binding())) == (
        "compilation error: must evaluate to one of [string null_type] but got optional_type(dyn)"
    )
    assert (
        run(
            policy(auditAnnotations=p["spec"]["auditAnnotations"], failurePolicy="Ignore"), binding()
        ).decisions
        == []
    )


# --- params ------------------------------------------------------------------------------------------


def cm_param(name: str, namespace: str = "default", **labels_: str) -> Obj:
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels_}, "data": {"max": "1"}}


PARAM_POLICY = policy(
    paramKind={"apiVersion": "v1", "kind": "ConfigMap"},
    validations=[
        {
            "expression": "object.data.size() <= int(params.data.max)",
            "messageExpression": "params.metadata.name + '/' + params.kind",
        }
    ],
)


def test_params_by_name_default_to_the_request_namespace() -> None:
    params = Params(objects=[cm_param("limits"), cm_param("limits", "other")])
    req = request(obj=configmap(data={"a": "1", "b": "2"}))
    b = binding(paramRef={"name": "limits", "parameterNotFoundAction": "Deny"})
    assert denied(run(PARAM_POLICY, b, req, params=params)) == "limits/ConfigMap"
    pinned = binding(paramRef={"name": "limits", "namespace": "other", "parameterNotFoundAction": "Deny"})
    assert run(PARAM_POLICY, pinned, req, params=params).denial is not None


def test_params_by_selector_evaluate_once_each() -> None:
    params = Params(objects=[cm_param("a", team="x"), cm_param("b", team="x"), cm_param("c", team="y")])
    req = request(obj=configmap(data={"a": "1", "b": "2"}))
    b = binding(paramRef={"selector": {"matchLabels": {"team": "x"}}, "parameterNotFoundAction": "Allow"})
    assert [d.message for d in run(PARAM_POLICY, b, req, params=params).decisions] == [
        "a/ConfigMap",
        "b/ConfigMap",
    ]


@pytest.mark.parametrize(
    ("param_ref", "expected"),
    [
        (
            {"name": "missing", "parameterNotFoundAction": "Deny"},
            "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction",
        ),
        ({"name": "missing", "parameterNotFoundAction": "Allow"}, None),
        (
            {"selector": {"matchLabels": {"none": "x"}}, "parameterNotFoundAction": "Deny"},
            "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction",
        ),
        (
            {"name": "a", "selector": {}},
            "failed to configure binding: paramRef.name and paramRef.selector are mutually exclusive",
        ),
        (
            {"parameterNotFoundAction": "Deny"},
            "failed to configure binding: one of name or selector must be provided",
        ),
    ],
)
def test_param_ref_errors(param_ref: Obj, expected: str | None) -> None:
    assert (
        denied(run(PARAM_POLICY, binding(paramRef=param_ref), params=Params(objects=[cm_param("a")])))
        == expected
    )


def test_param_kind_problems() -> None:
    unknown = policy(paramKind={"apiVersion": "example.com/v1", "kind": "Nope"})
    assert denied(run(unknown, binding(paramRef={"name": "x"}))) == (
        "failed to configure policy: failed to find resource referenced by paramKind: 'example.com/v1, Kind=Nope'"
    )
    cluster = policy(paramKind={"apiVersion": "example.com/v1", "kind": "Limit"})
    assert denied(run(cluster, binding(paramRef={"name": "x", "namespace": "default"}))) == (
        "failed to configure binding: paramRef.namespace must not be provided for a cluster-scoped `paramKind`"
    )
    cluster_req = request(
        namespace="", resource="clusterroles", kind="ClusterRole", group="rbac.authorization.k8s.io"
    )
    p = policy(
        paramKind={"apiVersion": "v1", "kind": "ConfigMap"}, rules=[rule(apiGroups=["*"], resources=["*"])]
    )
    assert denied(run(p, binding(paramRef={"name": "x"}), cluster_req, namespace=None)) == (
        "failed to configure binding: cannot use namespaced paramRef in policy binding that matches cluster-scoped resources"
    )


def test_param_kind_without_param_ref_gives_null_params() -> None:
    p = policy(
        paramKind={"apiVersion": "v1", "kind": "ConfigMap"}, validations=[{"expression": "params != null"}]
    )
    assert denied(run(p, binding())) == "failed expression: params != null"


def test_params_are_undeclared_without_param_kind() -> None:
    p = policy(validations=[{"expression": "params == null"}])
    message = denied(run(p, binding()))
    assert message is not None and "undeclared reference to 'params'" in message


def test_cluster_scoped_params() -> None:
    p = policy(
        paramKind={"apiVersion": "example.com/v1", "kind": "Limit"},
        validations=[{"expression": "params.spec.max > 5"}],
    )
    params = Params(
        objects=[
            {
                "apiVersion": "example.com/v1",
                "kind": "Limit",
                "metadata": {"name": "global"},
                "spec": {"max": 3},
            }
        ]
    )
    assert (
        denied(run(p, binding(paramRef={"name": "global", "parameterNotFoundAction": "Deny"}), params=params))
        == "failed expression: params.spec.max > 5"
    )


# --- the CEL inputs -----------------------------------------------------------------------------------


def test_request_variable_shape() -> None:
    req = request(
        "UPDATE",
        subresource="status",
        dry_run=True,
        options={"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"},
        uid="u-1",
        user={"username": "alice", "groups": ["devs"]},
    )
    assert ap.request_value(req, ap.Target("v1", "ConfigMap")) == {
        "uid": "u-1",
        "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"},
        "subResource": "status",
        "requestKind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "requestResource": {"group": "", "version": "v1", "resource": "configmaps"},
        "requestSubResource": "status",
        "name": "cm",
        "namespace": "default",
        "operation": "UPDATE",
        "userInfo": {"username": "alice", "groups": ["devs"]},
        "dryRun": True,
        "options": {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"},
    }
    checks = policy(
        rules=[rule(operations=["UPDATE"], resources=["configmaps/status"])],
        validations=[
            {
                "expression": "request.operation == 'UPDATE' && request.subResource == 'status' && request.dryRun"
            },
            {"expression": "request.userInfo.username != 'alice'"},
            {"expression": "oldObject.metadata.name != 'cm'"},
        ],
    )
    assert [d.message for d in run(checks, binding(), req).decisions] == [
        "failed expression: request.userInfo.username != 'alice'",
        "failed expression: oldObject.metadata.name != 'cm'",
    ]
    created = run(
        policy(validations=[{"expression": "oldObject == null && !has(request.subResource)"}]), binding()
    )
    assert created.decisions == []


def test_namespace_object_is_trimmed() -> None:
    value = ap.namespace_value(NS)
    assert value == {
        "metadata": {"name": "default", "uid": "ns-uid", "labels": {"env": "prod"}},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }
    p = policy(
        validations=[{"expression": "namespaceObject.metadata.labels.env != 'prod'", "message": "prod"}]
    )
    assert denied(run(p, binding())) == "prod"
    ns_policy = policy(
        rules=[rule(resources=["namespaces"])], validations=[{"expression": "namespaceObject == null"}]
    )
    ns_req = request(
        resource="namespaces",
        kind="Namespace",
        name="new",
        namespace="new",
        obj={"metadata": {"name": "new"}},
    )
    assert run(ns_policy, binding(), ns_req, namespace=None).decisions == []


def test_missing_namespace_for_namespaced_request_is_not_found() -> None:
    with pytest.raises(errors.StatusError) as info:
        run(policy(), binding(), namespace=None)
    assert (info.value.code, info.value.message) == (404, 'namespaces "default" not found')


def test_authorizer_variable_uses_the_callback() -> None:
    seen: list[cel.AuthzCheck] = []

    def check(c: cel.AuthzCheck) -> cel.AuthzDecision:
        seen.append(c)
        return cel.AuthzDecision(c.verb == "approve")

    p = policy(
        validations=[
            {
                "expression": "authorizer.group('example.com').resource('signers').name('x').check('approve').allowed()"
            },
            {
                "expression": "authorizer.requestResource.check('escalate').allowed()",
                "message": "cannot escalate",
            },
        ]
    )
    assert denied(run(p, binding(), authorizer=check)) == "cannot escalate"
    assert seen[1] == cel.AuthzCheck(
        verb="escalate", resource_request=True, resource="configmaps", namespace="default", name="cm"
    )
