"""The API machinery's own kinds: RBAC, admission policies, CustomResourceDefinitions, APIServices
(with the local ones a real server lists), Leases and the create-only review kinds."""

from __future__ import annotations

from vplane.apiserver.kinds.common import CREATE_ONLY, GenerationStrategy, rt
from vplane.apiserver.registry import ResourceType, Strategy
from vplane.kube import errors, validation
from vplane.kube.errors import Cause
from vplane.kube.objects import Obj

AUTOMANAGED = "kube-aggregator.kubernetes.io/automanaged"

API_SERVICE_PRIORITIES: dict[tuple[str, str], tuple[int, int]] = {
    ("", "v1"): (18000, 1),
    ("apiregistration.k8s.io", "v1"): (18000, 15),
    ("apps", "v1"): (17800, 15),
    ("events.k8s.io", "v1"): (17750, 15),
    ("authentication.k8s.io", "v1"): (17700, 15),
    ("authorization.k8s.io", "v1"): (17600, 15),
    ("autoscaling", "v2"): (17500, 30),
    ("autoscaling", "v1"): (17500, 15),
    ("batch", "v1"): (17400, 15),
    ("certificates.k8s.io", "v1"): (17300, 15),
    ("networking.k8s.io", "v1"): (17200, 15),
    ("policy", "v1"): (17100, 15),
    ("rbac.authorization.k8s.io", "v1"): (17000, 15),
    ("storage.k8s.io", "v1"): (16800, 15),
    ("admissionregistration.k8s.io", "v1"): (16700, 15),
    ("apiextensions.k8s.io", "v1"): (16700, 15),
    ("scheduling.k8s.io", "v1"): (16600, 15),
    ("coordination.k8s.io", "v1"): (16500, 15),
    ("node.k8s.io", "v1"): (16300, 15),
    ("discovery.k8s.io", "v1"): (16200, 15),
    ("resource.k8s.io", "v1"): (16150, 15),
    ("flowcontrol.apiserver.k8s.io", "v1"): (16100, 21),
}
"""Group and version priorities of the built-in group/versions (kube-apiserver's ``apiVersionPriorities``):
they order discovery and fill the local APIServices. resource.k8s.io's value is ours, placed where a 1.36
server lists the group (between discovery.k8s.io and flowcontrol)."""


def local_api_services(group_versions: list[tuple[str, str]]) -> list[Obj]:
    """The APIService objects kube-apiserver's autoregister controller keeps for its own group/versions."""
    out: list[Obj] = []
    for group, version in group_versions:
        group_priority, version_priority = API_SERVICE_PRIORITIES.get((group, version), (1000, 15))
        out.append(
            {
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": f"{version}.{group}", "labels": {AUTOMANAGED: "onstart"}},
                "spec": {
                    "group": group,
                    "version": version,
                    "groupPriorityMinimum": group_priority,
                    "versionPriority": version_priority,
                },
            }
        )
    return out


class RBACStrategy(Strategy):
    name_validator = staticmethod(validation.path_segment_name)

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        causes: list[Cause] = []
        kind = obj.get("kind", "")
        if kind.endswith("Binding"):
            ref = obj.get("roleRef")
            if not isinstance(ref, dict):
                return [errors.field_required("roleRef")]
            if ref.get("kind") not in ("Role", "ClusterRole"):
                causes.append(
                    errors.field_not_supported("roleRef.kind", ref.get("kind"), ["ClusterRole", "Role"])
                )
            if kind == "ClusterRoleBinding" and ref.get("kind") != "ClusterRole":
                causes.append(errors.field_not_supported("roleRef.kind", ref.get("kind"), ["ClusterRole"]))
            if not ref.get("name"):
                causes.append(errors.field_required("roleRef.name"))
            if old is not None and old.get("roleRef") != ref:
                # Go prints the new RoleRef struct (%#v), not a JSON value
                shown = (
                    f'rbac.RoleRef{{APIGroup:"{ref.get("apiGroup") or ""}", Kind:"{ref.get("kind") or ""}", '
                    f'Name:"{ref.get("name") or ""}"}}'
                )
                causes.append(errors.field_invalid_omitted("roleRef", "cannot change roleRef", shown))
            for i, subject in enumerate(obj.get("subjects") or []):
                if not isinstance(subject, dict) or not subject.get("name"):
                    causes.append(errors.field_required(f"subjects[{i}].name"))
                elif subject.get("kind") not in ("User", "Group", "ServiceAccount"):
                    causes.append(
                        errors.field_not_supported(
                            f"subjects[{i}].kind", subject.get("kind"), ["ServiceAccount", "User", "Group"]
                        )
                    )
        else:
            for i, rule in enumerate(obj.get("rules") or []):
                if not isinstance(rule, dict) or not rule.get("verbs"):
                    causes.append(
                        errors.field_required(f"rules[{i}].verbs", "verbs must contain at least one value")
                    )
        return causes


class APIServiceStrategy(Strategy):
    name_validator = staticmethod(validation.path_segment_name)

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = obj.get("spec") or {}
        name = (obj.get("metadata") or {}).get("name", "")
        causes: list[Cause] = []
        group, version = spec.get("group", ""), spec.get("version", "")
        if not version:
            causes.append(errors.field_required("spec.version"))
        if not group and version != "v1":
            causes.append(
                errors.field_invalid(
                    "spec.group", group, "only v1 may have an empty group and it better be legacy kube"
                )
            )
        expected = f"{version}.{group}"
        if name != expected:
            causes.append(
                errors.field_invalid(
                    "metadata.name", name, f'must be `spec.version+"."+spec.group`: "{expected}"'
                )
            )
        return causes


class LeaseStrategy(Strategy):
    pass


class ValidatingAdmissionPolicyStrategy(GenerationStrategy):
    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = obj.get("spec") or {}
        causes: list[Cause] = []
        validations = spec.get("validations") or []
        if not validations and not spec.get("auditAnnotations"):
            causes.append(
                errors.field_required(
                    "spec.validations", "validations or auditAnnotations must contain at least one item"
                )
            )
        for i, v in enumerate(validations):
            if not isinstance(v, dict) or not v.get("expression"):
                causes.append(errors.field_required(f"spec.validations[{i}].expression"))
        return causes


class ValidatingAdmissionPolicyBindingStrategy(GenerationStrategy):
    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = obj.get("spec") or {}
        causes: list[Cause] = []
        if not spec.get("policyName"):
            causes.append(errors.field_required("spec.policyName"))
        actions = spec.get("validationActions") or []
        if not actions:
            causes.append(errors.field_required("spec.validationActions"))
        for i, action in enumerate(actions):
            if action not in ("Deny", "Warn", "Audit"):
                causes.append(
                    errors.field_not_supported(
                        f"spec.validationActions[{i}]", action, ["Audit", "Deny", "Warn"]
                    )
                )
        if "Deny" in actions and "Warn" in actions:
            causes.append(
                errors.field_invalid(
                    "spec.validationActions",
                    actions,
                    "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
                )
            )
        return causes


def types() -> list[ResourceType]:
    rbac = "rbac.authorization.k8s.io"
    authz = "authorization.k8s.io"
    authn = "authentication.k8s.io"
    adm = "admissionregistration.k8s.io"
    return [
        rt("coordination.k8s.io", "v1", "leases", "Lease", True, strategy=LeaseStrategy()),
        rt(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            False,
            short_names=("crd", "crds"),
            categories=("api-extensions",),
            strategy=GenerationStrategy(),
            status=True,
            # Upstream still stores CRDs as v1beta1 (its storageVersionHash says so); objects here are v1.
            storage_version="v1beta1",
        ),
        rt(
            "apiregistration.k8s.io",
            "v1",
            "apiservices",
            "APIService",
            False,
            categories=("api-extensions",),
            strategy=APIServiceStrategy(),
            status=True,
        ),
        rt(rbac, "v1", "roles", "Role", True, strategy=RBACStrategy()),
        rt(rbac, "v1", "clusterroles", "ClusterRole", False, strategy=RBACStrategy()),
        rt(rbac, "v1", "rolebindings", "RoleBinding", True, strategy=RBACStrategy()),
        rt(rbac, "v1", "clusterrolebindings", "ClusterRoleBinding", False, strategy=RBACStrategy()),
        rt(
            authz,
            "v1",
            "selfsubjectaccessreviews",
            "SelfSubjectAccessReview",
            False,
            verbs=CREATE_ONLY,
            stored=False,
        ),
        rt(
            authz,
            "v1",
            "selfsubjectrulesreviews",
            "SelfSubjectRulesReview",
            False,
            verbs=CREATE_ONLY,
            stored=False,
        ),
        rt(
            authz, "v1", "subjectaccessreviews", "SubjectAccessReview", False, verbs=CREATE_ONLY, stored=False
        ),
        rt(
            authz,
            "v1",
            "localsubjectaccessreviews",
            "LocalSubjectAccessReview",
            True,
            verbs=CREATE_ONLY,
            stored=False,
        ),
        rt(authn, "v1", "selfsubjectreviews", "SelfSubjectReview", False, verbs=CREATE_ONLY, stored=False),
        rt(authn, "v1", "tokenreviews", "TokenReview", False, verbs=CREATE_ONLY, stored=False),
        rt(
            adm,
            "v1",
            "validatingadmissionpolicies",
            "ValidatingAdmissionPolicy",
            False,
            strategy=ValidatingAdmissionPolicyStrategy(),
            status=True,
            categories=("api-extensions",),
        ),
        rt(
            adm,
            "v1",
            "validatingadmissionpolicybindings",
            "ValidatingAdmissionPolicyBinding",
            False,
            strategy=ValidatingAdmissionPolicyBindingStrategy(),
            categories=("api-extensions",),
        ),
    ]
