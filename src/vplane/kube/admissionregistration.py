"""Defaults and validation of the admission configuration kinds this server calls or evaluates.

``MutatingWebhookConfiguration``, ``ValidatingWebhookConfiguration``, ``MutatingAdmissionPolicy`` and
``MutatingAdmissionPolicyBinding`` (admissionregistration.k8s.io/v1). Defaults are upstream's
``SetDefaults_*`` (admissionregistration/v1/defaults.go), so what a client reads back matches a real
server; validation covers the fields users set, with the messages of
k8s.io/kubernetes ``pkg/apis/admissionregistration/validation`` and k8s.io/apiserver
``pkg/util/webhook/validation.go``. CEL expressions are compiled to catch syntax errors; their types are
only checked as far as the engine knows them (every variable is ``dyn``).
"""

from __future__ import annotations

import base64
import binascii
import urllib.parse
from collections.abc import Mapping
from typing import Any

from vplane.kube import cel, errors, validation
from vplane.kube.admissionreview import MAX_TIMEOUT_SECONDS, REVIEW_VERSIONS
from vplane.kube.errors import Cause
from vplane.kube.mutatingpolicy import rewrite
from vplane.kube.objects import Obj

_FAILURE_POLICIES = ["Fail", "Ignore"]
_MATCH_POLICIES = ["Equivalent", "Exact"]
_SIDE_EFFECTS = ["None", "NoneOnDryRun", "Some", "Unknown"]
_NO_SIDE_EFFECTS = ["None", "NoneOnDryRun"]
_OPERATIONS = ["*", "CONNECT", "CREATE", "DELETE", "UPDATE"]
_SCOPES = ["*", "Cluster", "Namespaced"]
_REINVOCATION = ["IfNeeded", "Never"]
_PATCH_TYPES = ["ApplyConfiguration", "JSONPatch"]
MAX_MATCH_CONDITIONS = 64
_MATCH_VARIABLES = frozenset({"object", "oldObject", "request", "namespaceObject", "authorizer"})


# --- defaults -----------------------------------------------------------------------------------------


def default_webhook_configuration(obj: Obj, *, mutating: bool) -> None:
    for hook in obj.get("webhooks") or []:
        if not isinstance(hook, dict):
            continue
        hook.setdefault("failurePolicy", "Fail")
        hook.setdefault("matchPolicy", "Equivalent")
        hook.setdefault("namespaceSelector", {})
        hook.setdefault("objectSelector", {})
        hook.setdefault("timeoutSeconds", 10)
        if mutating:
            hook.setdefault("reinvocationPolicy", "Never")
        for rule in hook.get("rules") or []:
            if isinstance(rule, dict):
                rule.setdefault("scope", "*")
        service = (hook.get("clientConfig") or {}).get("service")
        if isinstance(service, dict):
            service.setdefault("port", 443)


def _default_match_resources(match: Any) -> None:
    if not isinstance(match, dict):
        return
    match.setdefault("namespaceSelector", {})
    match.setdefault("objectSelector", {})
    match.setdefault("matchPolicy", "Equivalent")
    for key in ("resourceRules", "excludeResourceRules"):
        for rule in match.get(key) or []:
            if isinstance(rule, dict):
                rule.setdefault("scope", "*")


def default_mutating_policy(obj: Obj) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("failurePolicy", "Fail")
    _default_match_resources(spec.get("matchConstraints"))


def default_mutating_policy_binding(obj: Obj) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        _default_match_resources(spec.get("matchResources"))


# --- webhook configurations ---------------------------------------------------------------------------------


def validate_webhook_configuration(obj: Obj, old: Obj | None, *, mutating: bool) -> list[Cause]:
    hooks = obj.get("webhooks") or []
    if not isinstance(hooks, list):
        return [errors.field_type_invalid("webhooks", hooks, "must be an array")]
    old_hooks = [h for h in (old or {}).get("webhooks") or [] if isinstance(h, Mapping)]
    # Updates keep accepting what older servers allowed for the webhooks already stored.
    require_no_side_effects = old is None or all(h.get("sideEffects") in _NO_SIDE_EFFECTS for h in old_hooks)
    causes: list[Cause] = []
    names: set[str] = set()
    for i, hook in enumerate(hooks):
        path = f"webhooks[{i}]"
        if not isinstance(hook, Mapping):
            causes.append(errors.field_type_invalid(path, hook, "must be an object"))
            continue
        causes.extend(_validate_webhook(hook, path, mutating, require_no_side_effects))
        causes.extend(
            _review_versions(hook.get("admissionReviewVersions"), f"{path}.admissionReviewVersions")
        )
        name = hook.get("name")
        if isinstance(name, str) and name:
            if name in names:
                causes.append(errors.field_duplicate(f"{path}.name", name))
            names.add(name)
    return causes


def _validate_webhook(
    hook: Mapping[str, Any], path: str, mutating: bool, no_side_effects: bool
) -> list[Cause]:
    causes = _fully_qualified(hook.get("name"), f"{path}.name")
    for j, rule in enumerate(hook.get("rules") or []):
        if isinstance(rule, Mapping):
            causes.extend(_rule_with_operations(rule, f"{path}.rules[{j}]", allow_subresources=True))
    causes.extend(_one_of(hook, "failurePolicy", _FAILURE_POLICIES, path))
    causes.extend(_one_of(hook, "matchPolicy", _MATCH_POLICIES, path))
    allowed = _NO_SIDE_EFFECTS if no_side_effects else _SIDE_EFFECTS
    side_effects = hook.get("sideEffects")
    if side_effects is None:
        causes.append(
            errors.field_required(f"{path}.sideEffects", f"must specify one of {', '.join(allowed)}")
        )
    elif side_effects not in allowed:
        causes.append(errors.field_not_supported(f"{path}.sideEffects", side_effects, allowed))
    timeout = hook.get("timeoutSeconds")
    if timeout is not None and (not isinstance(timeout, int) or not 1 <= timeout <= MAX_TIMEOUT_SECONDS):
        causes.append(
            errors.field_invalid(
                f"{path}.timeoutSeconds", timeout, "the timeout value must be between 1 and 30 seconds"
            )
        )
    for key in ("namespaceSelector", "objectSelector"):
        causes.extend(validation.validate_label_selector(hook.get(key), f"{path}.{key}"))
    if mutating:
        causes.extend(_one_of(hook, "reinvocationPolicy", _REINVOCATION, path))
    causes.extend(_client_config(hook.get("clientConfig"), f"{path}.clientConfig"))
    causes.extend(_match_conditions(hook.get("matchConditions"), f"{path}.matchConditions", params=False))
    return causes


def _fully_qualified(name: Any, path: str) -> list[Cause]:
    """``IsFullyQualifiedName``: a DNS subdomain with at least three segments."""
    if not isinstance(name, str) or not name:
        return [errors.field_required(path)]
    problems = validation.dns1123_subdomain(name)
    if problems:
        return [errors.field_invalid(path, name, ",".join(problems))]
    if len(name.split(".")) < 3:
        return [
            errors.field_invalid(
                path, name, "should be a domain with at least three segments separated by dots"
            )
        ]
    return []


def _one_of(obj: Mapping[str, Any], key: str, supported: list[str], path: str) -> list[Cause]:
    value = obj.get(key)
    if value is not None and value not in supported:
        return [errors.field_not_supported(f"{path}.{key}", value, supported)]
    return []


def _review_versions(versions: Any, path: str) -> list[Cause]:
    if not isinstance(versions, list) or not versions:
        return [errors.field_required(path, f"must specify one of {', '.join(REVIEW_VERSIONS)}")]
    causes: list[Cause] = []
    seen: set[str] = set()
    for i, version in enumerate(versions):
        version = str(version)
        if version in seen:
            causes.append(errors.field_invalid(f"{path}[{i}]", version, "duplicate version"))
            continue
        seen.add(version)
        causes.extend(
            errors.field_invalid(f"{path}[{i}]", version, m) for m in validation.dns1035_label(version)
        )
    if not seen & set(REVIEW_VERSIONS):
        causes.append(
            _invalid_list(path, versions, f"must include at least one of {', '.join(REVIEW_VERSIONS)}")
        )
    return causes


def _invalid_list(field: str, items: list[Any], detail: str, go_type: str = "string") -> Cause:
    """``field.Invalid`` of a Go slice, which upstream prints with ``%#v``."""
    shown = ", ".join(validation.go_quote(str(i)) for i in items)
    return {
        "reason": "FieldValueInvalid",
        "message": f"Invalid value: []{go_type}{{{shown}}}: {detail}",
        "field": field,
    }


def _wildcard_mixed(items: list[Any]) -> bool:
    return len(items) > 1 and "*" in items


def _rule_with_operations(rule: Mapping[str, Any], path: str, *, allow_subresources: bool) -> list[Cause]:
    causes: list[Cause] = []
    operations = rule.get("operations") or []
    if not operations:
        causes.append(errors.field_required(f"{path}.operations"))
    if _wildcard_mixed(operations):
        causes.append(
            _invalid_list(
                f"{path}.operations",
                operations,
                "if '*' is present, must not specify other operations",
                "admissionregistration.OperationType",
            )
        )
    for i, op in enumerate(operations):
        if op not in _OPERATIONS:
            causes.append(errors.field_not_supported(f"{path}.operations[{i}]", op, _OPERATIONS))
    groups = rule.get("apiGroups") or []
    if not groups:
        causes.append(errors.field_required(f"{path}.apiGroups"))
    if _wildcard_mixed(groups):
        causes.append(
            _invalid_list(f"{path}.apiGroups", groups, "if '*' is present, must not specify other API groups")
        )
    versions = rule.get("apiVersions") or []
    if not versions:
        causes.append(errors.field_required(f"{path}.apiVersions"))
    if _wildcard_mixed(versions):
        causes.append(
            _invalid_list(
                f"{path}.apiVersions", versions, "if '*' is present, must not specify other API versions"
            )
        )
    for i, version in enumerate(versions):
        if version == "":
            causes.append(errors.field_required(f"{path}.apiVersions[{i}]"))
    resources = rule.get("resources") or []
    if allow_subresources:
        causes.extend(_resources(resources, f"{path}.resources"))
    else:
        if not resources:
            causes.append(errors.field_required(f"{path}.resources"))
        for i, res in enumerate(resources):
            if res == "":
                causes.append(errors.field_required(f"{path}.resources[{i}]"))
            if "/" in str(res):
                causes.append(
                    errors.field_invalid(f"{path}.resources[{i}]", res, "must not specify subresources")
                )
        if _wildcard_mixed(resources):
            causes.append(
                _invalid_list(
                    f"{path}.resources", resources, "if '*' is present, must not specify other resources"
                )
            )
    causes.extend(_one_of(rule, "scope", _SCOPES, path))
    return causes


def _resources(resources: list[Any], path: str) -> list[Cause]:
    """``validateResources``: resource/subresource entries and their wildcard combinations."""
    causes: list[Cause] = []
    if not resources:
        causes.append(errors.field_required(path))
    with_wildcard_sub: set[str] = set()
    sub_with_wildcard_res: set[str] = set()
    double = single = plain = False
    for i, entry in enumerate(resources):
        entry = str(entry)
        if not entry:
            causes.append(errors.field_required(f"{path}[{i}]"))
            continue
        double = double or entry == "*/*"
        single = single or entry == "*"
        res, slash, sub = entry.partition("/")
        if not slash:
            plain = entry != "*"
            continue
        if res in with_wildcard_sub:
            causes.append(
                errors.field_invalid(
                    f"{path}[{i}]", entry, f"if '{res}/*' is present, must not specify {entry}"
                )
            )
        if sub in sub_with_wildcard_res:
            causes.append(
                errors.field_invalid(
                    f"{path}[{i}]", entry, f"if '*/{sub}' is present, must not specify {entry}"
                )
            )
        if sub == "*":
            with_wildcard_sub.add(res)
        if res == "*":
            sub_with_wildcard_res.add(sub)
    if len(resources) > 1 and double:
        causes.append(_invalid_list(path, resources, "if '*/*' is present, must not specify other resources"))
    if single and plain:
        causes.append(
            _invalid_list(
                path, resources, "if '*' is present, must not specify other resources without subresources"
            )
        )
    return causes


def _client_config(cc: Any, path: str) -> list[Cause]:
    cc = cc if isinstance(cc, Mapping) else {}
    url, service = cc.get("url"), cc.get("service")
    causes: list[Cause] = []
    if (url is None) == (service is None):
        causes.append(errors.field_required(path, "exactly one of url or service is required"))
    elif url is not None:
        causes.extend(_webhook_url(str(url), f"{path}.url"))
    elif isinstance(service, Mapping):
        causes.extend(_webhook_service(service, f"{path}.service"))
    ca = cc.get("caBundle")
    if ca:
        causes.extend(_ca_bundle(ca, f"{path}.caBundle"))
    return causes


def _webhook_url(url: str, path: str) -> list[Cause]:
    """``ValidateWebhookURL`` with https forced."""
    form = "; desired format: https://host[/path]"
    try:
        parsed = urllib.parse.urlsplit(url)
    except ValueError as exc:
        return [errors.field_required(path, f"url must be a valid URL: {exc}{form}")]
    causes: list[Cause] = []
    if parsed.scheme != "https":
        causes.append(
            errors.field_invalid(path, parsed.scheme, "'https' is the only allowed URL scheme" + form)
        )
    if not parsed.netloc:
        causes.append(errors.field_invalid(path, parsed.netloc, "host must be specified" + form))
    if "@" in parsed.netloc:
        causes.append(
            errors.field_invalid(
                path, parsed.netloc.rpartition("@")[0], "user information is not permitted in the URL"
            )
        )
    if parsed.fragment:
        causes.append(errors.field_invalid(path, parsed.fragment, "fragments are not permitted in the URL"))
    if parsed.query:
        causes.append(
            errors.field_invalid(path, parsed.query, "query parameters are not permitted in the URL")
        )
    return causes


def _webhook_service(service: Mapping[str, Any], path: str) -> list[Cause]:
    """``ValidateWebhookService``."""
    causes: list[Cause] = []
    if not service.get("name"):
        causes.append(errors.field_required(f"{path}.name"))
    if not service.get("namespace"):
        causes.append(errors.field_required(f"{path}.namespace"))
    port = service.get("port", 443)
    if not isinstance(port, int) or not 1 <= port <= 65535:
        causes.append(
            errors.field_invalid(
                f"{path}.port", port, "port is not valid: must be between 1 and 65535, inclusive"
            )
        )
    url_path = service.get("path")
    if not isinstance(url_path, str) or url_path in ("", "/"):
        return causes
    if url_path == "//":
        return [*causes, errors.field_invalid(f"{path}.path", url_path, "segment[0] may not be empty")]
    if not url_path.startswith("/"):
        causes.append(errors.field_invalid(f"{path}.path", url_path, "must start with a '/'"))
    check = url_path[1:]
    if check.endswith("/"):
        check = check[:-1]
    for i, step in enumerate(check.split("/")):
        if not step:
            causes.append(errors.field_invalid(f"{path}.path", url_path, f"segment[{i}] may not be empty"))
            continue
        causes.extend(
            errors.field_invalid(f"{path}.path", url_path, f"segment[{i}]: {m}")
            for m in validation.dns1123_subdomain(step)
        )
    return causes


def _ca_bundle(ca: Any, path: str) -> list[Cause]:
    try:
        data = base64.b64decode(str(ca), validate=True)
    except (binascii.Error, ValueError):
        return [errors.field_invalid(path, ca, "illegal base64 data")]
    if b"-----BEGIN CERTIFICATE-----" not in data:
        return [
            errors.field_invalid(
                path, ca, "unable to load root certificates: unable to parse bytes as PEM block"
            )
        ]
    return []


def _match_conditions(conditions: Any, path: str, *, params: bool) -> list[Cause]:
    if conditions is None:
        return []
    if not isinstance(conditions, list):
        return [errors.field_type_invalid(path, conditions, "must be an array")]
    causes: list[Cause] = []
    if len(conditions) > MAX_MATCH_CONDITIONS:
        causes.append(
            {
                "reason": "FieldValueTooMany",
                "message": f"Too many: {len(conditions)}: must have at most {MAX_MATCH_CONDITIONS} items",
                "field": path,
            }
        )
    names: set[str] = set()
    variables = _MATCH_VARIABLES | ({"params"} if params else set())
    for i, condition in enumerate(conditions):
        item = f"{path}[{i}]"
        if not isinstance(condition, Mapping):
            causes.append(errors.field_type_invalid(item, condition, "must be an object"))
            continue
        expression = str(condition.get("expression") or "").strip()
        if not expression:
            causes.append(errors.field_required(f"{item}.expression"))
        else:
            causes.extend(_compiles(expression, variables, f"{item}.expression", bool_result=True))
        name = condition.get("name")
        if not isinstance(name, str) or not name:
            causes.append(errors.field_required(f"{item}.name"))
        else:
            causes.extend(
                errors.field_invalid(f"{item}.name", name, m) for m in validation.qualified_name(name)
            )
            if name in names:
                causes.append(errors.field_duplicate(f"{item}.name", name))
            names.add(name)
    return causes


def _compiles(
    expression: str, variables: frozenset[str] | set[str], path: str, *, bool_result: bool
) -> list[Cause]:
    try:
        program = cel.compile(expression, variables)
    except cel.CELError as exc:
        return [errors.field_invalid(path, expression, f"compilation failed: {exc.message}")]
    if bool_result and program.output_type not in ("bool", "dyn"):
        return [
            errors.field_invalid(path, expression, f"must evaluate to bool but got {program.output_type}")
        ]
    return []


# --- MutatingAdmissionPolicy ------------------------------------------------------------------------------


def validate_mutating_policy(obj: Obj) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return [errors.field_required("spec")]
    causes: list[Cause] = []
    failure = spec.get("failurePolicy")
    if failure is None:
        causes.append(errors.field_required("spec.failurePolicy"))
    elif failure not in _FAILURE_POLICIES:
        causes.append(errors.field_not_supported("spec.failurePolicy", failure, _FAILURE_POLICIES))
    params = spec.get("paramKind") is not None
    constraints = spec.get("matchConstraints")
    if not isinstance(constraints, Mapping):
        causes.append(errors.field_required("spec.matchConstraints"))
    else:
        causes.extend(_match_resources(constraints, "spec.matchConstraints", require_rules=True))
    causes.extend(_one_of(spec, "reinvocationPolicy", _REINVOCATION, "spec"))
    variables = set(_MATCH_VARIABLES) | {"variables"} | ({"params"} if params else set())
    for i, var in enumerate(spec.get("variables") or []):
        item = f"spec.variables[{i}]"
        if not isinstance(var, Mapping) or not var.get("name"):
            causes.append(errors.field_required(f"{item}.name"))
        if not isinstance(var, Mapping) or not str(var.get("expression") or "").strip():
            causes.append(errors.field_required(f"{item}.expression"))
    causes.extend(_match_conditions(spec.get("matchConditions"), "spec.matchConditions", params=params))
    mutations = spec.get("mutations")
    if not isinstance(mutations, list) or not mutations:
        causes.append(errors.field_required("spec.mutations", "mutations must contain at least one item"))
        return causes
    for i, mutation in enumerate(mutations):
        item = f"spec.mutations[{i}]"
        if not isinstance(mutation, Mapping):
            causes.append(errors.field_type_invalid(item, mutation, "must be an object"))
            continue
        patch_type = mutation.get("patchType")
        if patch_type is None:
            causes.append(errors.field_required(f"{item}.patchType"))
            continue
        if patch_type not in _PATCH_TYPES:
            causes.append(errors.field_not_supported(f"{item}.patchType", patch_type, _PATCH_TYPES))
            continue
        key = "jsonPatch" if patch_type == "JSONPatch" else "applyConfiguration"
        other = "applyConfiguration" if key == "jsonPatch" else "jsonPatch"
        body = mutation.get(key)
        if mutation.get(other) is not None:
            causes.append(
                errors.field_forbidden(
                    f"{item}.{other}", f"must not be specified when patchType is {patch_type}"
                )
            )
        if not isinstance(body, Mapping):
            causes.append(
                errors.field_required(f"{item}.{key}", f"must be specified when patchType is {patch_type}")
            )
            continue
        expression = str(body.get("expression") or "").strip()
        if not expression:
            causes.append(errors.field_required(f"{item}.{key}.expression"))
            continue
        causes.extend(
            _compiles(rewrite(expression), variables, f"{item}.{key}.expression", bool_result=False)
        )
    return causes


def _match_resources(match: Mapping[str, Any], path: str, *, require_rules: bool) -> list[Cause]:
    causes: list[Cause] = []
    causes.extend(_one_of(match, "matchPolicy", _MATCH_POLICIES, path))
    for key in ("namespaceSelector", "objectSelector"):
        causes.extend(validation.validate_label_selector(match.get(key), f"{path}.{key}"))
    rules = match.get("resourceRules") or []
    if require_rules and not rules:
        causes.append(errors.field_required(f"{path}.resourceRules"))
    for key in ("resourceRules", "excludeResourceRules"):
        for i, rule in enumerate(match.get(key) or []):
            if isinstance(rule, Mapping):
                causes.extend(_rule_with_operations(rule, f"{path}.{key}[{i}]", allow_subresources=True))
    return causes


def validate_mutating_policy_binding(obj: Obj) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return [errors.field_required("spec")]
    causes: list[Cause] = []
    if not spec.get("policyName"):
        causes.append(errors.field_required("spec.policyName"))
    match = spec.get("matchResources")
    if isinstance(match, Mapping):
        causes.extend(_match_resources(match, "spec.matchResources", require_rules=False))
    ref = spec.get("paramRef")
    if isinstance(ref, Mapping):
        if ref.get("name") and ref.get("selector") is not None:
            causes.append(
                errors.field_forbidden("spec.paramRef.name", "name and selector are mutually exclusive")
            )
        if not ref.get("name") and ref.get("selector") is None:
            causes.append(errors.field_required("spec.paramRef", "one of name or selector must be specified"))
        action = ref.get("parameterNotFoundAction")
        if action is None:
            causes.append(errors.field_required("spec.paramRef.parameterNotFoundAction"))
        elif action not in ("Allow", "Deny"):
            causes.append(
                errors.field_not_supported("spec.paramRef.parameterNotFoundAction", action, ["Allow", "Deny"])
            )
    return causes
