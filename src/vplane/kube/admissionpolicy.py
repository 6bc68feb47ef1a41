"""ValidatingAdmissionPolicy decisions: which policies and bindings apply to a request, and what they say.

Pure: the caller hands in the policies, bindings, the request, the namespace object, a :class:`ParamSource`
over its store and an authorizer callback, and gets a :class:`Result` back. The logic and every message
follow k8s.io/apiserver ``pkg/admission/plugin/policy/{generic,matching,validating}``,
``pkg/admission/plugin/cel`` and ``plugin/webhook/{predicates,matchconditions}``, because kubectl prints
the denial verbatim and the resource proxy relies on it protecting its APIService.

Where this differs from upstream, on purpose:

* ``matchPolicy: Equivalent`` considers the other served versions of the same group/resource (the caller
  lists them in :attr:`Request.equivalents`); upstream also knows cross-group equivalents such as
  ``extensions/v1beta1`` Deployments, which vplane does not serve. Objects are "converted" by setting
  ``apiVersion``, which is all vplane's conversion (strategy ``None``) does anyway.
* Missing ``matchPolicy``, selectors and ``failurePolicy`` take their API defaults (Equivalent, ``{}``,
  Fail), since vplane stores these objects without the defaulting upstream's registry applies.
* Variables are evaluated once per phase and request, up front for the ones an expression names, instead
  of lazily inside the evaluation; failures stay lazy (an expression only fails if it reads the variable).
  ``messageExpression`` and audit annotations share the validations' variables.
* No cost budget (see :mod:`vplane.kube.cel`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from vplane.kube import cel, errors, labels
from vplane.kube.objects import Obj
from vplane.kube.validation import go_quote

Action = Literal["Deny", "Warn", "Audit"]
_ACTIONS: dict[str, Action] = {"Deny": "Deny", "Warn": "Warn", "Audit": "Audit"}

GROUP = "admissionregistration.k8s.io"
POLICIES = "validatingadmissionpolicies"
BINDINGS = "validatingadmissionpolicybindings"

# Never evaluated against API-defined policies (generic/plugin.go admissionResources; kube-apiserver's
# excluded non-persisted review resources).
EXEMPT_RESOURCES = frozenset(
    {
        (GROUP, POLICIES),
        (GROUP, BINDINGS),
        (GROUP, "mutatingadmissionpolicies"),
        (GROUP, "mutatingadmissionpolicybindings"),
        ("authentication.k8s.io", "selfsubjectreviews"),
        ("authentication.k8s.io", "tokenreviews"),
        ("authorization.k8s.io", "localsubjectaccessreviews"),
        ("authorization.k8s.io", "selfsubjectaccessreviews"),
        ("authorization.k8s.io", "selfsubjectrulesreviews"),
        ("authorization.k8s.io", "subjectaccessreviews"),
    }
)

VALIDATION_FAILURE_ANNOTATION = "validation.policy.admission.k8s.io/validation_failure"
MAX_VALIDATION_FAILURES = 50
MAX_AUDIT_ANNOTATION_VALUE = 10 * 1024
MAX_MESSAGE_EXPRESSION_BYTES = 5 * 1024

_REASON_CODES = {"Forbidden": 403, "Unauthorized": 401, "RequestEntityTooLarge": 413, "Invalid": 422}


def reason_to_code(reason: str) -> int:
    """Upstream ``reasonToCode``: anything unknown is 422, like Invalid."""
    return _REASON_CODES.get(reason, 422)


@dataclass(frozen=True, slots=True)
class Request:
    """An admission request as policies see it (upstream ``admission.Attributes``)."""

    operation: str
    group: str
    version: str
    resource: str
    kind: str
    subresource: str = ""
    name: str = ""
    namespace: str = ""
    """For ``namespaces`` themselves this is the namespace's own name, as upstream's request info sets it."""
    user: Mapping[str, Any] = field(default_factory=dict)
    """``authentication.k8s.io/v1`` UserInfo JSON: username, uid, groups, extra (empty ones left out)."""
    object: Obj | None = None
    old_object: Obj | None = None
    dry_run: bool = False
    options: Obj | None = None
    uid: str = ""
    equivalents: tuple[tuple[str, str], ...] = ()
    """Other served ``(version, kind)`` of the same group and resource, for ``matchPolicy: Equivalent``."""


class ParamSource(Protocol):
    """Where ``paramKind`` objects come from (the caller's store)."""

    def scope(self, api_version: str, kind: str) -> Literal["Namespaced", "Cluster"] | None:
        """The kind's scope, or None when no such kind is served."""

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None: ...

    def list(self, api_version: str, kind: str, namespace: str, selector: labels.Selector) -> list[Obj]: ...


@dataclass(frozen=True, slots=True)
class Decision:
    """One failed validation (or configuration error) as a binding's action turns it into."""

    action: Action
    policy: str
    binding: str
    """Empty for a policy-level configuration error."""
    message: str
    reason: str = "Invalid"
    expression_index: int = 0

    @property
    def code(self) -> int:
        return reason_to_code(self.reason)

    @property
    def text(self) -> str:
        """Deny: the Status message's tail; Warn: the warning header's text (dispatcher.go)."""
        if self.action == "Warn":
            return (
                f"Validation failed for ValidatingAdmissionPolicy '{self.policy}' with binding "
                f"'{self.binding}': {self.message}"
            )
        if self.binding:
            return (
                f"ValidatingAdmissionPolicy '{self.policy}' with binding '{self.binding}' denied request: "
                f"{self.message}"
            )
        return f"ValidatingAdmissionPolicy '{self.policy}' denied request: {self.message}"


@dataclass(slots=True)
class Result:
    decisions: list[Decision] = field(default_factory=list)
    audit_annotations: dict[str, str] = field(default_factory=dict)

    @property
    def denial(self) -> Decision | None:
        """The first Deny, which upstream reports."""
        return next((d for d in self.decisions if d.action == "Deny"), None)

    @property
    def warnings(self) -> list[str]:
        return [d.text for d in self.decisions if d.action == "Warn"]

    def error(self, request: Request) -> errors.StatusError | None:
        denial = self.denial
        return None if denial is None else denial_error(denial, request)


def denial_error(decision: Decision, request: Request) -> errors.StatusError:
    """``admission.NewForbidden`` with the VAP's reason and code and the message as a cause."""
    name = request.name
    if not name:
        meta = (request.object or {}).get("metadata") or {}
        name = str(meta.get("name") or meta.get("generateName") or "Unknown") if request.object else "Unknown"
    message = decision.text
    qualified = errors.qualified_resource(request.resource, request.group)
    details: dict[str, Any] = {"name": name}
    if request.group:
        details["group"] = request.group
    details["kind"] = request.resource
    details["causes"] = [{"message": message}]
    return errors.StatusError(
        decision.code,
        decision.reason,
        f"{qualified} {go_quote(name)} is forbidden: {message}",
        details=details,
    )


class ConfigError(Exception):
    """A policy or binding that cannot be applied; its failurePolicy decides what happens."""


# --- matching (policy/matching, webhook/predicates) ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class Target:
    """The GVR/GVK a policy matched the request as (differs from the request under Equivalent)."""

    version: str
    kind: str


def _selector(criteria: Mapping[str, Any], key: str) -> labels.Selector:
    raw = criteria.get(key)
    try:
        return labels.from_label_selector({} if raw is None else raw)
    except errors.StatusError as exc:
        raise ConfigError(f"Internal error occurred: {exc.message}") from None


def _labels_of(obj: Obj | None) -> dict[str, str] | None:
    if obj is None:
        return None
    meta = obj.get("metadata")
    found = meta.get("labels") if isinstance(meta, dict) else None
    return found if isinstance(found, dict) else {}


def _namespace_matches(criteria: Mapping[str, Any], request: Request, namespace: Obj | None) -> bool:
    if not request.namespace and request.resource != "namespaces":
        return True
    selector = _selector(criteria, "namespaceSelector")
    if selector.empty:
        return True
    if (
        request.resource == "namespaces"
        and not request.group
        and not request.subresource
        and request.operation in ("CREATE", "UPDATE")
    ):
        found = _labels_of(request.object) or {}
    else:
        if namespace is None:
            raise ConfigError(errors.not_found("namespaces", request.namespace).message)
        found = _labels_of(namespace) or {}
    return selector.matches(found)


def _object_matches(criteria: Mapping[str, Any], request: Request) -> bool:
    selector = _selector(criteria, "objectSelector")
    if selector.empty:
        return True
    return any(
        found is not None and selector.matches(found)
        for found in (_labels_of(request.object), _labels_of(request.old_object))
    )


def _exact_or_wildcard(items: Any, wanted: str) -> bool:
    return isinstance(items, list) and any(item == "*" or item == wanted for item in items)


def rule_matches(rule: Mapping[str, Any], request: Request, version: str) -> bool:
    """webhook/predicates/rules ``Matcher.Matches`` for the request seen as ``version``."""
    scope = rule.get("scope") or "*"
    is_namespace = request.resource == "namespaces" and not request.group and version == "v1"
    if scope == "Namespaced":
        if is_namespace or not request.namespace:
            return False
    elif scope == "Cluster":
        if not (is_namespace or not request.namespace):
            return False
    elif scope != "*":
        return False
    operations = rule.get("operations") or []
    if not any(op in ("*", request.operation) for op in operations):
        return False
    if not _exact_or_wildcard(rule.get("apiGroups"), request.group):
        return False
    if not _exact_or_wildcard(rule.get("apiVersions"), version):
        return False
    for entry in rule.get("resources") or []:
        res, _, sub = str(entry).partition("/")
        if (res in ("*", request.resource)) and (sub in ("*", request.subresource)):
            return True
    return False


def _named_rule_matches(rule: Mapping[str, Any], request: Request, version: str) -> bool:
    if not rule_matches(rule, request, version):
        return False
    names = rule.get("resourceNames") or []
    return not names or request.name in names


def _rules_match(rules: Any, match_policy: str, request: Request) -> Target | None:
    rules = rules if isinstance(rules, list) else []
    for rule in rules:
        if isinstance(rule, Mapping) and _named_rule_matches(rule, request, request.version):
            return Target(request.version, request.kind)
    if match_policy == "Exact":
        return None
    for rule in rules:
        for version, kind in request.equivalents:
            if (
                version != request.version
                and isinstance(rule, Mapping)
                and _named_rule_matches(rule, request, version)
            ):
                return Target(version, kind)
    return None


def matches(criteria: Mapping[str, Any], request: Request, namespace: Obj | None) -> Target | None:
    """``matching.Matcher.Matches``: selectors, exclusions, then rules; errors surface only on a match."""
    ns_error: ConfigError | None = None
    try:
        ns_ok = _namespace_matches(criteria, request, namespace)
    except ConfigError as exc:
        ns_ok, ns_error = True, exc
    if not ns_ok:
        return None
    obj_error: ConfigError | None = None
    try:
        obj_ok = _object_matches(criteria, request)
    except ConfigError as exc:
        obj_ok, obj_error = True, exc
    if not obj_ok:
        return None
    policy = str(criteria.get("matchPolicy") or "Equivalent")
    if _rules_match(criteria.get("excludeResourceRules"), policy, request) is not None:
        return None
    rules = criteria.get("resourceRules")
    target = _rules_match(rules, policy, request) if rules else Target(request.version, request.kind)
    if target is None:
        return None
    if ns_error is not None:
        raise ns_error
    if obj_error is not None:
        raise obj_error
    return target


# --- params (generic.CollectParams) -------------------------------------------------------------------


def _param_gvk(param_kind: Mapping[str, Any]) -> str:
    """``schema.GroupVersionKind.String()``: ``group/version, Kind=kind``."""
    api_version = str(param_kind.get("apiVersion") or "")
    group, _, version = api_version.rpartition("/")
    return f"{group}/{version}, Kind={param_kind.get('kind') or ''}"


def collect_params(
    param_kind: Mapping[str, Any] | None,
    scope: str | None,
    param_ref: Mapping[str, Any] | None,
    namespace: str,
    source: ParamSource,
) -> list[Obj | None]:
    """The params a binding evaluates with: ``[None]`` without params, possibly ``[]`` (nothing to check)."""
    if param_kind is None or param_ref is None:
        return [None]
    api_version = str(param_kind.get("apiVersion") or "")
    kind = str(param_kind.get("kind") or "")
    ref_namespace = str(param_ref.get("namespace") or "")
    params_namespace = ""
    if scope == "Namespaced":
        params_namespace = ref_namespace or namespace
        if not params_namespace:
            raise ConfigError(
                "cannot use namespaced paramRef in policy binding that matches cluster-scoped resources"
            )
    if ref_namespace and scope == "Cluster":
        raise ConfigError("paramRef.namespace must not be provided for a cluster-scoped `paramKind`")
    name = str(param_ref.get("name") or "")
    selector = param_ref.get("selector")
    params: list[Obj | None]
    if name:
        if selector is not None:
            raise ConfigError("paramRef.name and paramRef.selector are mutually exclusive")
        found = source.get(api_version, kind, params_namespace, name)
        params = [] if found is None else [found]
    elif selector is not None:
        try:
            parsed = labels.from_label_selector(selector)
        except errors.StatusError as exc:
            raise ConfigError(exc.message) from None
        params = list(source.list(api_version, kind, params_namespace, parsed))
    else:
        raise ConfigError("one of name or selector must be provided")
    if not params and param_ref.get("parameterNotFoundAction") == "Deny":
        raise ConfigError("no params found for policy binding with `Deny` parameterNotFoundAction")
    for i, param in enumerate(params):
        if param is not None and not (param.get("apiVersion") and param.get("kind")):
            params[i] = {"apiVersion": api_version, "kind": kind, **param}
    return params


# --- CEL inputs ------------------------------------------------------------------------------------


def request_value(request: Request, target: Target) -> Obj:
    """The ``request`` variable: admission/v1 AdmissionRequest JSON (omitempty fields left out)."""
    out: Obj = {
        "uid": request.uid,
        "kind": {"group": request.group, "version": target.version, "kind": target.kind},
        "resource": {"group": request.group, "version": target.version, "resource": request.resource},
    }
    if request.subresource:
        out["subResource"] = request.subresource
    out["requestKind"] = {"group": request.group, "version": request.version, "kind": request.kind}
    out["requestResource"] = {
        "group": request.group,
        "version": request.version,
        "resource": request.resource,
    }
    if request.subresource:
        out["requestSubResource"] = request.subresource
    if request.name:
        out["name"] = request.name
    if request.namespace:
        out["namespace"] = request.namespace
    out["operation"] = request.operation
    out["userInfo"] = dict(request.user)
    out["dryRun"] = request.dry_run
    if request.options is not None:
        out["options"] = request.options
    return out


_NAMESPACE_META = (
    "name",
    "generateName",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "finalizers",
)


def namespace_value(namespace: Obj | None) -> Obj | None:
    """``CreateNamespaceObject``: metadata trimmed to what policies may see, spec and status."""
    if namespace is None:
        return None
    meta = namespace.get("metadata") or {}
    return {
        "metadata": {k: meta[k] for k in _NAMESPACE_META if meta.get(k) not in (None, "", [], {})},
        "spec": namespace.get("spec") or {},
        "status": namespace.get("status") or {},
    }


def _converted(obj: Obj | None, request: Request, target: Target) -> Obj | None:
    if obj is None or target.version == request.version:
        return obj
    api_version = f"{request.group}/{target.version}" if request.group else target.version
    return {**obj, "apiVersion": api_version}


# --- compiled policy and evaluation phases ------------------------------------------------------------

_BASE_VARIABLES = ("object", "oldObject", "request", "namespaceObject", "variables")


@dataclass(frozen=True, slots=True)
class _Expression:
    source: str
    variables: frozenset[str]
    returns: tuple[str, ...]
    """Accepted checked types besides ``dyn``, in cel-go spelling (empty: anything)."""
    compiled: str = ""
    """The text handed to the engine when it differs from ``source`` (MutatingAdmissionPolicy's typed
    object construction, rewritten as map literals); messages quote ``source``."""

    @property
    def text(self) -> str:
        return self.compiled or self.source


def _type_error(returns: tuple[str, ...], got: str) -> str | None:
    if not returns or got == "dyn" or got in returns:
        return None
    if len(returns) == 1:
        return f"must evaluate to {returns[0]} but got {got}"
    return f"must evaluate to one of [{' '.join(returns)}] but got {got}"


class _OpaqueResult:
    """A result CEL has but Python cannot hold (an optional): not true, not a string, not null."""

    def __repr__(self) -> str:
        return "optional_type"


_OPAQUE = _OpaqueResult()


class _Failed(Exception):
    """An expression's evaluation error, with upstream's text."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _Phase:
    """One upstream ``ForInput`` context: an activation and the variables evaluated in it."""

    def __init__(self, policy: _Policy, base: dict[str, Any]) -> None:
        self.policy = policy
        self.base = base
        self.values: dict[str, Any] = {}
        self.failures: dict[str, str] = {}
        self.inline: dict[str, str] = {}
        self._activation: cel.Activation | None = None
        self._activation_size = -1

    def activation(self) -> cel.Activation:
        if self._activation is None or self._activation_size != len(self.values):
            self._activation = cel.Activation({**self.base, "variables": dict(self.values)})
            self._activation_size = len(self.values)
        return self._activation

    def _ensure(self, name: str) -> None:
        if name in self.values or name in self.failures or name in self.inline:
            return
        expr = self.policy.variables[name]
        try:
            program, text = self._prepare(expr, self.policy.variable_names_before(name))
        except _Failed as exc:
            self.failures[name] = f"composited variable {go_quote(name)} fails to compile: {exc.message}"
            return
        try:
            self.values[name] = program.evaluate(self.activation())
        except cel.UnsupportedResult:
            self.inline[name] = text
        except cel.CELError as exc:
            self.failures[name] = (
                f"composited variable {go_quote(name)} fails to evaluate: {self._explain(exc)}"
            )

    def _prepare(self, expr: _Expression, known: Sequence[str]) -> tuple[cel.Program, str]:
        """Compile ``expr`` after evaluating the variables it names; variables without a JSON value are
        substituted by their expression."""
        refs, whole = cel.variable_references(expr.text)
        for name, offset in refs.items():
            if name not in known:
                err = cel.compile_error(expr.text, offset, f"undefined field '{name}'")
                raise _Failed(f"compilation failed: {err.message}")
        wanted = list(known) if whole else [n for n in known if n in refs]
        for name in wanted:
            self._ensure(name)
        text = expr.text
        for name in wanted:
            if name in self.inline:
                text = cel.substitute_field(text, "variables", name, self.inline[name])
        try:
            program = cel.compile(text, expr.variables)
        except cel.CELError as exc:
            raise _Failed(f"compilation failed: {exc.message}") from None
        problem = _type_error(expr.returns, program.output_type)
        if problem is not None:
            raise _Failed(problem)
        return program, text

    def _explain(self, exc: cel.CELError) -> str:
        message = exc.message
        if message.startswith("no such key: "):
            failed = self.failures.get(message.removeprefix("no such key: "))
            if failed is not None:
                return failed
        return message

    def run(self, expr: _Expression) -> Any:
        """Evaluate, raising :class:`_Failed` with upstream's evaluation-error text."""
        try:
            program, _text = self._prepare(expr, self.policy.variable_order)
        except _Failed as exc:
            raise _Failed(f"compilation error: {exc.message}") from None
        try:
            return program.evaluate(self.activation())
        except cel.UnsupportedResult:
            return _OPAQUE
        except cel.CELError as exc:
            raise _Failed(f"expression '{expr.source}' resulted in error: {self._explain(exc)}") from None


class _Phases:
    """The two contexts upstream evaluates in: match conditions (no namespace object) and the rest."""

    def __init__(self, policy: _Policy, base: dict[str, Any], namespace: Obj | None) -> None:
        self.policy = policy
        self.base = base
        self.namespace = namespace
        self._phases: dict[bool, _Phase] = {}

    def get(self, with_namespace: bool) -> _Phase:
        phase = self._phases.get(with_namespace)
        if phase is None:
            values = {**self.base, "namespaceObject": self.namespace if with_namespace else None}
            phase = self._phases[with_namespace] = _Phase(self.policy, values)
        return phase


class _Policy:
    """A policy's expressions with the variables each may use declared."""

    def __init__(self, policy: Obj) -> None:
        spec = policy.get("spec") or {}
        self.name = str((policy.get("metadata") or {}).get("name") or "")
        self.spec = spec
        self.param_kind: Mapping[str, Any] | None = spec.get("paramKind") or None
        declared = set(_BASE_VARIABLES) | ({"params"} if self.param_kind is not None else set())
        with_authz = frozenset(declared | {"authorizer"})
        without_authz = frozenset(declared)
        self.failure_policy = str(spec.get("failurePolicy") or "Fail")
        self.variable_order: list[str] = []
        self.variables: dict[str, _Expression] = {}
        for var in spec.get("variables") or []:
            if isinstance(var, Mapping) and var.get("name"):
                name = str(var["name"])
                self.variable_order.append(name)
                self.variables[name] = _Expression(str(var.get("expression") or ""), with_authz, ())
        self.match_conditions = [
            (str(c.get("name") or ""), _Expression(str(c.get("expression") or ""), with_authz, ("bool",)))
            for c in spec.get("matchConditions") or []
            if isinstance(c, Mapping)
        ]
        self.validations: list[tuple[Mapping[str, Any], _Expression, _Expression | None]] = []
        for v in spec.get("validations") or []:
            if not isinstance(v, Mapping):
                continue
            message_expr = v.get("messageExpression")
            self.validations.append(
                (
                    v,
                    _Expression(str(v.get("expression") or ""), with_authz, ("bool",)),
                    _Expression(str(message_expr), without_authz, ("string",)) if message_expr else None,
                )
            )
        self.audit_annotations = [
            (
                str(a.get("key") or ""),
                _Expression(str(a.get("valueExpression") or ""), with_authz, ("string", "null_type")),
            )
            for a in spec.get("auditAnnotations") or []
            if isinstance(a, Mapping)
        ]

    def variable_names_before(self, name: str) -> list[str]:
        return self.variable_order[: self.variable_order.index(name)]


@dataclass(slots=True)
class _Validated:
    """What one (binding, param) evaluation decided: failed validations and audit annotation outcomes."""

    denials: list[tuple[int, str, str]] = field(default_factory=list)
    """(expression index, message, status reason)."""
    annotations: list[tuple[str, str]] = field(default_factory=list)
    annotation_errors: list[str] = field(default_factory=list)


def _match_conditions(policy: _Policy, phase: _Phase) -> tuple[bool, str | None]:
    """matchconditions.Matcher: any false means no match; otherwise errors decide by failurePolicy."""
    failures: list[str] = []
    for _name, expr in policy.match_conditions:
        try:
            value = phase.run(expr)
        except _Failed as exc:
            failures.append(exc.message)
            continue
        if value is False:
            return False, None
    if failures:
        if policy.failure_policy == "Fail":
            return False, failures[0] if len(failures) == 1 else "[" + ", ".join(failures) + "]"
        return False, None
    return True, None


def evaluate_match_conditions(
    conditions: Sequence[Mapping[str, Any]], failure_policy: str, values: Mapping[str, Any]
) -> tuple[bool, str | None]:
    """An admission webhook's ``matchConditions`` (webhook/matchconditions): ``(matches, error)``.

    ``values`` binds ``object``, ``oldObject``, ``request``, ``namespaceObject`` and ``authorizer``; an error
    is only returned under ``failurePolicy: Fail`` (under Ignore an erroring condition means no match).
    """
    policy = _Policy({"spec": {"matchConditions": list(conditions), "failurePolicy": failure_policy}})
    return _match_conditions(policy, _Phase(policy, dict(values)))


def _message_for(validation: Mapping[str, Any], message_expr: _Expression | None, phase: _Phase) -> str:
    message = ""
    if message_expr is not None:
        try:
            value = phase.run(message_expr)
        except _Failed:
            value = None  # upstream logs and falls back
        if isinstance(value, str):
            message = value.strip()
            if len(message.encode()) > MAX_MESSAGE_EXPRESSION_BYTES or "\n" in message:
                message = ""
    if not message:
        message = str(validation.get("message") or "").strip()
    if not message:
        message = f"failed expression: {str(validation.get('expression') or '').strip()}"
    return message


def _cel_type_of(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "map"
    if isinstance(value, bytes):
        return "bytes"
    if isinstance(value, str):
        return "string"
    if value is _OPAQUE:
        return "optional_type"
    return type(value).__name__


def _validate(policy: _Policy, phases: _Phases) -> _Validated:
    """validator.Validate for one param: match conditions, validations, audit annotations."""
    out = _Validated()
    fail = policy.failure_policy != "Ignore"
    if policy.match_conditions:
        matched, error = _match_conditions(policy, phases.get(False))
        if error is not None:
            if fail:
                out.denials.append((0, error, "Invalid"))
            return out
        if not matched:
            return out
    phase = phases.get(True)
    for index, (validation, expr, message_expr) in enumerate(policy.validations):
        try:
            value = phase.run(expr)
        except _Failed as exc:
            if fail:
                out.denials.append((index, exc.message, "Invalid"))
            continue
        if value is not True:
            reason = str(validation.get("reason") or "Invalid")
            out.denials.append((index, _message_for(validation, message_expr, phase), reason))
    for key, expr in policy.audit_annotations:
        try:
            value = phase.run(expr)
        except _Failed as exc:
            if fail:
                out.annotation_errors.append(exc.message)
            continue
        if value is None:
            continue
        if isinstance(value, str):
            if value.strip():
                out.annotations.append((key, value.strip()))
            continue
        if fail:
            out.annotation_errors.append(
                f"valueExpression '{expr.source}' resulted in unsupported return type: {_cel_type_of(value)}. "
                "Return type must be either string or null."
            )
    return out


def _go_json(value: Any) -> str:
    """encoding/json output: compact, with <, > and & escaped as Go does."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for raw, escaped in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(raw, escaped)
    return text


def _truncate(value: str, limit: int) -> str:
    data = value.encode()
    return value if len(data) <= limit else data[:limit].decode(errors="ignore")


# --- the dispatcher ------------------------------------------------------------------------------


def evaluate(
    policies: Mapping[str, Obj],
    bindings: Iterable[Obj],
    request: Request,
    *,
    namespace: Obj | None,
    params: ParamSource,
    authorizer: cel.AuthzCallback | None = None,
) -> Result:
    """Every binding of every matching policy against ``request`` (dispatcher.go ``Dispatch``).

    ``namespace`` is the request's namespace object (the namespace itself for ``namespaces``), or None
    when there is none. Policies run in name order and bindings in name order within a policy, so "the
    first denial" is deterministic (upstream iterates maps).
    """
    result = Result()
    if (request.group, request.resource) in EXEMPT_RESOURCES:
        return result
    by_policy: dict[str, list[Obj]] = {}
    for binding in bindings:
        name = str((binding.get("spec") or {}).get("policyName") or "")
        if name:
            by_policy.setdefault(name, []).append(binding)
    failures: list[dict[str, Any]] = []
    for policy_name in sorted(by_policy):
        policy_obj = policies.get(policy_name)
        if policy_obj is None:
            continue  # bindings of a missing policy do nothing
        policy = _Policy(policy_obj)
        annotations: dict[str, list[str]] = {}
        _dispatch_policy(
            policy,
            sorted(by_policy[policy_name], key=lambda b: str((b.get("metadata") or {}).get("name") or "")),
            request,
            namespace,
            params,
            authorizer,
            result,
            annotations,
            failures,
        )
        for key, values in annotations.items():
            result.audit_annotations[f"{policy_name}/{key}"] = ", ".join(values)
    if failures:
        result.audit_annotations[VALIDATION_FAILURE_ANNOTATION] = _go_json(failures[:MAX_VALIDATION_FAILURES])
    return result


def _dispatch_policy(
    policy: _Policy,
    bindings: list[Obj],
    request: Request,
    namespace: Obj | None,
    params: ParamSource,
    authorizer: cel.AuthzCallback | None,
    result: Result,
    annotations: dict[str, list[str]],
    failures: list[dict[str, Any]],
) -> None:
    def config_error(message: str, binding: str) -> None:
        if policy.failure_policy == "Ignore":
            return
        if policy.failure_policy == "Fail":
            text = f"failed to configure {'binding' if binding else 'policy'}: {message}"
        else:
            text = f"unrecognized failure policy: '{policy.failure_policy}'"
        result.decisions.append(Decision("Deny", policy.name, binding, text))

    scope: str | None = None
    paramkind_error: str | None = None
    if policy.param_kind is not None:
        scope = params.scope(
            str(policy.param_kind.get("apiVersion") or ""), str(policy.param_kind.get("kind") or "")
        )
        if scope is None:
            paramkind_error = (
                f"failed to find resource referenced by paramKind: '{_param_gvk(policy.param_kind)}'"
            )
    constraints = policy.spec.get("matchConstraints")
    try:
        if not isinstance(constraints, Mapping):
            raise ConfigError("policy contained no match constraints, a required field")
        target = matches(constraints, request, namespace)
    except ConfigError as exc:
        config_error(str(exc), "")
        return
    if target is None:
        return
    if paramkind_error is not None:
        config_error(paramkind_error, "")
        return
    for binding in bindings:
        binding_name = str((binding.get("metadata") or {}).get("name") or "")
        spec = binding.get("spec") or {}
        match_resources = spec.get("matchResources")
        try:
            if isinstance(match_resources, Mapping) and matches(match_resources, request, namespace) is None:
                continue
            param_list = collect_params(
                policy.param_kind, scope, spec.get("paramRef"), request.namespace, params
            )
        except ConfigError as exc:
            config_error(str(exc), binding_name)
            continue
        ns_value: Obj | None = None
        if request.namespace and not (request.resource == "namespaces" and not request.group):
            if namespace is None:
                raise errors.not_found("namespaces", request.namespace)
            ns_value = namespace_value(namespace)
        actions = [str(a) for a in spec.get("validationActions") or []]
        authz = None
        if authorizer is not None:
            resource = cel.RequestResource(
                request.group, request.resource, request.subresource, request.namespace, request.name
            )
            authz = cel.Authorizer(authorizer, resource)
        for param in param_list:
            base: dict[str, Any] = {
                "object": _converted(request.object, request, target),
                "oldObject": _converted(request.old_object, request, target),
                "request": request_value(request, target),
                "params": param,
            }
            if authz is not None:
                base["authorizer"] = authz
            validated = _validate(policy, _Phases(policy, base, ns_value))
            for index, message, reason in validated.denials:
                for action in actions:
                    known = _ACTIONS.get(action)
                    if known is None:
                        continue
                    result.decisions.append(
                        Decision(known, policy.name, binding_name, message, reason, index)
                    )
                    if action == "Audit":
                        failures.append(
                            {
                                "message": message,
                                "policy": policy.name,
                                "binding": binding_name,
                                "expressionIndex": index,
                                "validationActions": actions,
                            }
                        )
            for key, value in validated.annotations:
                value = _truncate(value, MAX_AUDIT_ANNOTATION_VALUE)
                values = annotations.setdefault(key, [])
                if value not in values:
                    values.append(value)
            for message in validated.annotation_errors:
                result.decisions.append(Decision("Deny", policy.name, binding_name, message))
