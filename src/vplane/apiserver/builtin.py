"""The built-in kinds and their per-kind rules.

Only what clients and our own controllers rely on is enforced here; everything else is stored as sent.
Defaults and validation messages follow upstream where a client could notice the difference.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from vplane.apiserver import admissionkinds
from vplane.apiserver.registry import (
    STATUS_VERBS,
    Registry,
    ResourceType,
    Strategy,
    Subresource,
)
from vplane.kube import errors, validation
from vplane.kube.errors import Cause
from vplane.kube.objects import Obj

CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
CONFIG_KEY_MESSAGE = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"


def _definition(group: str, version: str, kind: str) -> str:
    prefixes = {
        "": "io.k8s.api.core",
        "apps": "io.k8s.api.apps",
        "batch": "io.k8s.api.batch",
        "coordination.k8s.io": "io.k8s.api.coordination",
        "rbac.authorization.k8s.io": "io.k8s.api.rbac",
        "authorization.k8s.io": "io.k8s.api.authorization",
        "authentication.k8s.io": "io.k8s.api.authentication",
        "admissionregistration.k8s.io": "io.k8s.api.admissionregistration",
        "events.k8s.io": "io.k8s.api.events",
        "apiextensions.k8s.io": "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions",
        "apiregistration.k8s.io": "io.k8s.kube-aggregator.pkg.apis.apiregistration",
    }
    return f"{prefixes[group]}.{version}.{kind}"


def _config_keys(data: Any, field: str) -> list[Cause]:
    causes: list[Cause] = []
    if data is None:
        return causes
    if not isinstance(data, dict):
        return [errors.field_type_invalid(field, data, "must be an object")]
    for key in data:
        if len(key) > 253 or not CONFIG_KEY.match(key):
            causes.append(errors.field_invalid(f"{field}[{key}]", key, CONFIG_KEY_MESSAGE))
    return causes


class ConfigMapStrategy(Strategy):
    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        causes = _config_keys(obj.get("data"), "data") + _config_keys(obj.get("binaryData"), "binaryData")
        data, binary = obj.get("data") or {}, obj.get("binaryData") or {}
        if isinstance(data, dict):
            for key, value in data.items():
                if not isinstance(value, str):
                    causes.append(errors.field_type_invalid(f"data[{key}]", value, "must be a string"))
        if isinstance(data, dict) and isinstance(binary, dict):
            for key in set(data) & set(binary):
                causes.append(errors.field_duplicate(f"data[{key}]", key))
        if (
            old is not None
            and old.get("immutable")
            and (old.get("data") != obj.get("data") or old.get("binaryData") != obj.get("binaryData"))
        ):
            causes.append(errors.field_forbidden("data", "field is immutable when `immutable` is set"))
        return causes


class SecretStrategy(Strategy):
    supported_field_labels = frozenset({"type"})

    def default(self, obj: Obj) -> None:
        obj.setdefault("type", "Opaque")
        string_data = obj.pop("stringData", None)
        if isinstance(string_data, dict):
            data = obj.setdefault("data", {})
            if isinstance(data, dict):
                for key, value in string_data.items():
                    data[key] = base64.b64encode(str(value).encode()).decode()

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        causes = _config_keys(obj.get("data"), "data")
        for key, value in (obj.get("data") or {}).items():
            try:
                base64.b64decode(str(value), validate=True)
            except (binascii.Error, ValueError):
                causes.append(
                    errors.field_invalid(f"data[{key}]", "<secret contents redacted>", "illegal base64 data")
                )
        if old is not None and old.get("type") != obj.get("type"):
            causes.append(errors.field_invalid("type", obj.get("type"), "field is immutable"))
        return causes

    def field_labels(self, obj: Obj) -> dict[str, str]:
        return {"type": str(obj.get("type", ""))}


class NamespaceStrategy(Strategy):
    name_validator = staticmethod(validation.dns1123_label)
    supported_field_labels = frozenset({"status.phase"})

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {"phase": "Active"}
        spec = obj.setdefault("spec", {})
        if isinstance(spec, dict):
            spec["finalizers"] = ["kubernetes"]

    def prepare_for_update(self, obj: Obj, old: Obj) -> None:
        # spec.finalizers changes only through the finalize subresource; status only through status.
        obj["spec"] = old.get("spec", {})

    def default(self, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        if name:
            labels = meta.setdefault("labels", {})
            if isinstance(labels, dict):
                labels["kubernetes.io/metadata.name"] = name

    def field_labels(self, obj: Obj) -> dict[str, str]:
        return {"status.phase": str((obj.get("status") or {}).get("phase", ""))}


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
                causes.append(errors.field_invalid("roleRef", ref, "cannot change roleRef"))
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


class GenerationStrategy(Strategy):
    uses_generation = True


class DeploymentStrategy(GenerationStrategy):
    def default(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        if not isinstance(spec, dict):
            return
        spec.setdefault("replicas", 1)
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
        strategy = spec.setdefault("strategy", {"type": "RollingUpdate"})
        if isinstance(strategy, dict) and strategy.get("type", "RollingUpdate") == "RollingUpdate":
            strategy.setdefault("type", "RollingUpdate")
            rolling = strategy.setdefault("rollingUpdate", {})
            if isinstance(rolling, dict):
                rolling.setdefault("maxUnavailable", "25%")
                rolling.setdefault("maxSurge", "25%")
        _default_pod_template(spec.get("template"))

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        return _validate_workload(obj)


class ReplicaSetStrategy(GenerationStrategy):
    def default(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        if isinstance(spec, dict):
            spec.setdefault("replicas", 1)
            _default_pod_template(spec.get("template"))

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        return _validate_workload(obj)


def _validate_workload(obj: Obj) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [errors.field_required("spec")]
    causes: list[Cause] = []
    selector = spec.get("selector")
    if not isinstance(selector, dict) or not (
        selector.get("matchLabels") or selector.get("matchExpressions")
    ):
        causes.append(errors.field_required("spec.selector"))
        return causes
    template = spec.get("template") or {}
    labels = ((template.get("metadata") or {}).get("labels")) or {}
    from vplane.kube.labels import from_label_selector

    try:
        matches = from_label_selector(selector).matches(labels)
    except errors.StatusError as exc:
        return [errors.field_invalid("spec.selector", selector, exc.message)]
    if not matches:
        causes.append(
            errors.field_invalid(
                "spec.template.metadata.labels", labels, "`selector` does not match template `labels`"
            )
        )
    containers = ((template.get("spec") or {}).get("containers")) or []
    if not containers:
        causes.append(errors.field_required("spec.template.spec.containers"))
    return causes


def _default_pod_template(template: Any) -> None:
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        _default_pod_spec(template["spec"])


def _default_pod_spec(spec: Obj) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    for container in spec.get("containers") or []:
        if not isinstance(container, dict):
            continue
        image = str(container.get("image", ""))
        tagged = ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest")
        container.setdefault("imagePullPolicy", "IfNotPresent" if tagged or "@" in image else "Always")
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("resources", {})
        for port in container.get("ports") or []:
            if isinstance(port, dict):
                port.setdefault("protocol", "TCP")


class PodStrategy(Strategy):
    supported_field_labels = frozenset(
        {
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        }
    )

    def default(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if isinstance(spec, dict):
            _default_pod_spec(spec)

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        containers = (obj.get("spec") or {}).get("containers") or []
        causes: list[Cause] = []
        if not containers:
            causes.append(errors.field_required("spec.containers"))
        for i, c in enumerate(containers):
            if not isinstance(c, dict) or not c.get("name"):
                causes.append(errors.field_required(f"spec.containers[{i}].name"))
            elif not c.get("image"):
                causes.append(errors.field_required(f"spec.containers[{i}].image"))
        if (
            old is not None
            and (obj.get("spec") or {}).get("containers")
            and old.get("spec") != obj.get("spec")
        ):
            mutable = ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds")
            a = {k: v for k, v in (old.get("spec") or {}).items() if k not in mutable}
            b = {k: v for k, v in (obj.get("spec") or {}).items() if k not in mutable}
            for spec in (a, b):
                for c in spec.get("containers") or []:
                    c.pop("image", None)
            if a != b:
                causes.append(
                    errors.field_forbidden(
                        "spec",
                        "pod updates may not change fields other than `spec.containers[*].image`, `spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing tolerations) or `spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
                    )
                )
        return causes

    def field_labels(self, obj: Obj) -> dict[str, str]:
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        return {
            "spec.nodeName": str(spec.get("nodeName", "")),
            "spec.restartPolicy": str(spec.get("restartPolicy", "")),
            "spec.schedulerName": str(spec.get("schedulerName", "")),
            "spec.serviceAccountName": str(spec.get("serviceAccountName", "")),
            "status.phase": str(status.get("phase", "")),
            "status.podIP": str(status.get("podIP", "")),
            "status.nominatedNodeName": str(status.get("nominatedNodeName", "")),
        }


class ServiceStrategy(Strategy):
    name_validator = staticmethod(validation.dns1035_label)

    def default(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        if not isinstance(spec, dict):
            return
        spec.setdefault("type", "ClusterIP")
        if spec["type"] != "ExternalName":
            spec.setdefault("sessionAffinity", "None")
        for port in spec.get("ports") or []:
            if isinstance(port, dict):
                port.setdefault("protocol", "TCP")
                if spec["type"] != "ExternalName" and "port" in port:
                    port.setdefault("targetPort", port["port"])

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = obj.get("spec") or {}
        causes: list[Cause] = []
        kinds = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"]
        if spec.get("type") not in kinds:
            causes.append(errors.field_not_supported("spec.type", spec.get("type"), kinds))
        if spec.get("type") == "ExternalName" and not spec.get("externalName"):
            causes.append(errors.field_required("spec.externalName"))
        for i, port in enumerate(spec.get("ports") or []):
            value = port.get("port") if isinstance(port, dict) else None
            if not isinstance(value, int) or not 0 < value < 65536:
                causes.append(
                    errors.field_invalid(
                        f"spec.ports[{i}].port", value, "must be between 1 and 65535, inclusive"
                    )
                )
        return causes


class EventStrategy(Strategy):
    supported_field_labels = frozenset(
        {
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        }
    )

    def field_labels(self, obj: Obj) -> dict[str, str]:
        involved = obj.get("involvedObject") or {}
        out = {
            f"involvedObject.{k}": str(involved.get(k, ""))
            for k in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
        }
        out["reason"] = str(obj.get("reason", ""))
        out["reportingComponent"] = str(obj.get("reportingComponent", ""))
        out["source"] = str((obj.get("source") or {}).get("component", ""))
        out["type"] = str(obj.get("type", ""))
        return out

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        if not isinstance(obj.get("involvedObject"), dict):
            return [errors.field_required("involvedObject")]
        return []


class APIServiceStrategy(Strategy):
    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = obj.get("spec") or {}
        name = (obj.get("metadata") or {}).get("name", "")
        causes: list[Cause] = []
        group, version = spec.get("group", ""), spec.get("version", "")
        if not version:
            causes.append(errors.field_required("spec.version"))
        expected = f"{version}.{group}" if group else version
        if name != expected:
            causes.append(
                errors.field_invalid(
                    "metadata.name", name, f'must be `spec.version+"."+spec.group`: "{expected}"'
                )
            )
        if (
            spec.get("service") is not None
            and not spec.get("insecureSkipTLSVerify")
            and not spec.get("caBundle")
        ):
            pass  # upstream only requires one of them for non-local services; tolerate both missing
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


def _rt(group: str, version: str, resource: str, kind: str, namespaced: bool, **kw: Any) -> ResourceType:
    status = kw.pop("status", False)
    subresources: dict[str, Subresource] = kw.pop("subresources", {})
    if status:
        subresources = {"status": Subresource("status", kind, STATUS_VERBS), **subresources}
    return ResourceType(
        group,
        version,
        resource,
        kind,
        namespaced,
        subresources=subresources,
        schema_definition=_definition(group, version, kind),
        **kw,
    )


CREATE_ONLY = ("create",)


def builtin_types() -> list[ResourceType]:
    return [
        _rt(
            "",
            "v1",
            "namespaces",
            "Namespace",
            False,
            short_names=("ns",),
            strategy=NamespaceStrategy(),
            status=True,
            subresources={"finalize": Subresource("finalize", "Namespace", ("update",))},
            verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
        ),
        _rt("", "v1", "configmaps", "ConfigMap", True, short_names=("cm",), strategy=ConfigMapStrategy()),
        _rt("", "v1", "secrets", "Secret", True, strategy=SecretStrategy()),
        _rt(
            "",
            "v1",
            "serviceaccounts",
            "ServiceAccount",
            True,
            short_names=("sa",),
            subresources={
                "token": Subresource("token", "TokenRequest", ("create",), "authentication.k8s.io", "v1")
            },
        ),
        _rt(
            "",
            "v1",
            "services",
            "Service",
            True,
            short_names=("svc",),
            categories=("all",),
            strategy=ServiceStrategy(),
            status=True,
            verbs=("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"),
        ),
        _rt("", "v1", "endpoints", "Endpoints", True, short_names=("ep",)),
        _rt(
            "",
            "v1",
            "pods",
            "Pod",
            True,
            short_names=("po",),
            categories=("all",),
            strategy=PodStrategy(),
            status=True,
            subresources={
                "attach": Subresource("attach", "PodAttachOptions", ("create", "get")),
                "exec": Subresource("exec", "PodExecOptions", ("create", "get")),
                "log": Subresource("log", "Pod", ("get",)),
                "portforward": Subresource("portforward", "PodPortForwardOptions", ("create", "get")),
            },
        ),
        _rt("", "v1", "events", "Event", True, short_names=("ev",), strategy=EventStrategy()),
        _rt(
            "apps",
            "v1",
            "deployments",
            "Deployment",
            True,
            short_names=("deploy",),
            categories=("all",),
            strategy=DeploymentStrategy(),
            status=True,
        ),
        _rt(
            "apps",
            "v1",
            "replicasets",
            "ReplicaSet",
            True,
            short_names=("rs",),
            categories=("all",),
            strategy=ReplicaSetStrategy(),
            status=True,
        ),
        _rt("coordination.k8s.io", "v1", "leases", "Lease", True, strategy=LeaseStrategy()),
        _rt(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            False,
            short_names=("crd", "crds"),
            categories=("api-extensions",),
            strategy=GenerationStrategy(),
            status=True,
        ),
        _rt(
            "apiregistration.k8s.io",
            "v1",
            "apiservices",
            "APIService",
            False,
            categories=("api-extensions",),
            strategy=APIServiceStrategy(),
            status=True,
        ),
        _rt("rbac.authorization.k8s.io", "v1", "roles", "Role", True, strategy=RBACStrategy()),
        _rt("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False, strategy=RBACStrategy()),
        _rt("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True, strategy=RBACStrategy()),
        _rt(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterrolebindings",
            "ClusterRoleBinding",
            False,
            strategy=RBACStrategy(),
        ),
        _rt(
            "authorization.k8s.io",
            "v1",
            "selfsubjectaccessreviews",
            "SelfSubjectAccessReview",
            False,
            verbs=CREATE_ONLY,
            stored=False,
        ),
        _rt(
            "authorization.k8s.io",
            "v1",
            "selfsubjectrulesreviews",
            "SelfSubjectRulesReview",
            False,
            verbs=CREATE_ONLY,
            stored=False,
        ),
        _rt(
            "authorization.k8s.io",
            "v1",
            "subjectaccessreviews",
            "SubjectAccessReview",
            False,
            verbs=CREATE_ONLY,
            stored=False,
        ),
        _rt(
            "authorization.k8s.io",
            "v1",
            "localsubjectaccessreviews",
            "LocalSubjectAccessReview",
            True,
            verbs=CREATE_ONLY,
            stored=False,
        ),
        _rt(
            "authentication.k8s.io",
            "v1",
            "selfsubjectreviews",
            "SelfSubjectReview",
            False,
            verbs=CREATE_ONLY,
            stored=False,
        ),
        _rt(
            "authentication.k8s.io",
            "v1",
            "tokenreviews",
            "TokenReview",
            False,
            verbs=CREATE_ONLY,
            stored=False,
        ),
        _rt(
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicies",
            "ValidatingAdmissionPolicy",
            False,
            strategy=ValidatingAdmissionPolicyStrategy(),
            status=True,
            categories=("api-extensions",),
        ),
        _rt(
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicybindings",
            "ValidatingAdmissionPolicyBinding",
            False,
            strategy=ValidatingAdmissionPolicyBindingStrategy(),
            categories=("api-extensions",),
        ),
    ]


def install(registry: Registry) -> None:
    for rtype in builtin_types():
        registry.add(rtype)
    admissionkinds.install(registry)
