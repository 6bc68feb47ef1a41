"""MutatingAdmissionPolicy decisions: which policies and bindings apply, and the object their CEL makes.

Pure, like its validating sibling :mod:`vplane.kube.admissionpolicy`, whose matching, params and compiled
expression machinery it shares. Follows k8s.io/apiserver ``pkg/admission/plugin/policy/mutating``
(dispatcher, compilation, ``patch/json_patch.go``, ``patch/smd.go``) and ``policy/generic``'s dispatcher
for the error text (v0.36).

CEL here builds typed values (``Object{spec: Object.spec{replicas: 1}}``, ``JSONPatch{op: "add", ...}``),
which cel-expr-python cannot declare. :func:`rewrite` turns them into map literals carrying their type name
under :data:`TYPE_KEY` before compiling, and results are checked and stripped of it afterwards, which gives
upstream's "type names match field paths" check; ``jsonpatch.escapeKey(k)`` becomes two ``replace`` calls.
An ``ApplyConfiguration`` merges with server-side apply's merge (:func:`vplane.kube.managedfields.merge_applied`)
under the kind's schema, refusing atomic lists, maps and structs as upstream does.

Where this differs from upstream, on purpose: variables are evaluated again for each mutation (against the
object as the previous mutations left it) rather than cached per invocation, and with no schema known
(a kind without one) nothing counts as atomic.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vplane.kube import admissionpolicy, cel, errors, managedfields
from vplane.kube.admissionpolicy import (  # the compiled-expression machinery both policy kinds share
    _BASE_VARIABLES,
    _OPAQUE,
    ConfigError,
    ParamSource,
    Request,
    Target,
    _Expression,
    _Failed,
    _match_conditions,
    _param_gvk,
    _Phase,
    _Policy,
)
from vplane.kube.admissionreview import PatchError, PatchTestFailed, apply_patch
from vplane.kube.objects import Obj
from vplane.kube.schema_meta import SchemaNode

POLICIES = "mutatingadmissionpolicies"
BINDINGS = "mutatingadmissionpolicybindings"
TYPE_KEY = "@type"
"""Marks a map built from a typed object literal (no Kubernetes field name starts with ``@``)."""
_TYPE_ROOTS = ("Object", "JSONPatch")
_ESCAPE_SUFFIX = '.replace("~", "~0").replace("/", "~1")'

SchemaFor = Callable[[Target], SchemaNode | None]


# --- expression text --------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def rewrite(expression: str) -> str:
    """``Object.x{f: v}`` and ``JSONPatch{f: v}`` as ``{"@type": "Object.x", "f": v}``; ``jsonpatch.escapeKey``
    as string replacements. Everything else, literals and whitespace included, is kept."""
    toks = cel.tokenize(expression)
    out: list[str] = []
    last = 0
    stack: list[str] = []
    field_position = False
    i = 0
    while i < len(toks):
        tok = toks[i]
        after_dot = i > 0 and toks[i - 1].text == "."
        if tok.kind == "id" and tok.text in _TYPE_ROOTS and not after_dot:
            j, name = i, tok.text
            if tok.text == "Object":
                while j + 2 < len(toks) and toks[j + 1].text == "." and toks[j + 2].kind == "id":
                    name += "." + toks[j + 2].text
                    j += 2
            if j + 1 < len(toks) and toks[j + 1].text == "{":
                empty = j + 2 < len(toks) and toks[j + 2].text == "}"
                out.append(expression[last : tok.start])
                out.append("{" + json.dumps(TYPE_KEY) + ": " + json.dumps(name) + ("" if empty else ", "))
                last = toks[j + 1].end
                stack.append("struct")
                field_position = True
                i = j + 2
                continue
        if (
            tok.kind == "id"
            and tok.text == "jsonpatch"
            and not after_dot
            and i + 3 < len(toks)
            and toks[i + 1].text == "."
            and toks[i + 2].text == "escapeKey"
            and toks[i + 3].text == "("
        ):
            out.append(expression[last : tok.start] + "(")
            last = toks[i + 3].end
            stack.append("escape")
            field_position = False
            i += 4
            continue
        if field_position and tok.kind == "id" and i + 1 < len(toks) and toks[i + 1].text == ":":
            out.append(expression[last : tok.start] + json.dumps(tok.text))
            last = tok.end
            field_position = False
            i += 1
            continue
        field_position = False
        if tok.text in ("{", "(", "["):
            stack.append("other")
        elif tok.text in ("}", ")", "]"):
            kind = stack.pop() if stack else "other"
            if kind == "escape":
                out.append(expression[last : tok.end] + _ESCAPE_SUFFIX)
                last = tok.end
        elif tok.text == "," and stack and stack[-1] == "struct":
            field_position = True
        i += 1
    out.append(expression[last:])
    return "".join(out)


def _untyped(value: Any, path: list[str], problems: list[str]) -> Any:
    """``value`` without type markers; typed maps whose name does not follow the field path are reported
    (dynamic.ObjectVal.CheckTypeNamesMatchFieldPathNames)."""
    if isinstance(value, dict):
        name = value.get(TYPE_KEY)
        if isinstance(name, str):
            expected = ".".join(path)
            if name != expected:
                problems.append(
                    f"unexpected type name {json.dumps(name)}, expected {json.dumps(expected)}, which matches "
                    "field name path from root Object type"
                )
            return {k: _untyped(v, [*path, k], problems) for k, v in value.items() if k != TYPE_KEY}
        return {k: _untyped(v, path, []) for k, v in value.items()}
    if isinstance(value, list):
        return [_untyped(v, path, problems) for v in value]
    return value


def _type_of(value: Any) -> str:
    if isinstance(value, dict):
        name = value.get(TYPE_KEY)
        return name if isinstance(name, str) else "map"
    if isinstance(value, list):
        return "list"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    return "null_type" if value is None else "dyn"


# --- compiled policy ------------------------------------------------------------------------------------


class _Mutation:
    def __init__(self, patch_type: str, expression: _Expression) -> None:
        self.patch_type = patch_type
        self.expression = expression


class _MutatingPolicy(_Policy):
    """A MutatingAdmissionPolicy's expressions: the validating policy's (variables, match conditions) plus
    its mutations, compiled from their rewritten text."""

    def __init__(self, policy: Obj) -> None:
        super().__init__(policy)
        spec = self.spec
        self.reinvocation_policy = str(spec.get("reinvocationPolicy") or "Never")
        declared = (
            set(_BASE_VARIABLES) | {"authorizer"} | ({"params"} if self.param_kind is not None else set())
        )
        variables = frozenset(declared)
        self.mutations: list[_Mutation] = []
        for m in spec.get("mutations") or []:
            if not isinstance(m, Mapping):
                continue
            patch_type = str(m.get("patchType") or "")
            body = m.get("jsonPatch") if patch_type == "JSONPatch" else m.get("applyConfiguration")
            if patch_type not in ("JSONPatch", "ApplyConfiguration") or not isinstance(body, Mapping):
                continue  # upstream compiles nothing for it
            source = str(body.get("expression") or "")
            self.mutations.append(_Mutation(patch_type, _Expression(source, variables, (), rewrite(source))))


# --- reinvocation (policyReinvokeContext) ----------------------------------------------------------------

_UNSET: Any = object()


@dataclass(slots=True)
class ReinvocationState:
    """What this plug-in remembers between the first pass and the reinvocation of one request."""

    last_output: Any = _UNSET
    previously_invoked: set[tuple[str, str, str, str]] = field(default_factory=set)
    to_reinvoke: set[tuple[str, str, str, str]] = field(default_factory=set)

    def require_reinvoking_previously_invoked(self) -> None:
        self.to_reinvoke |= self.previously_invoked
        self.previously_invoked = set()


@dataclass(slots=True)
class Outcome:
    object: Obj | None
    """The object after every applicable mutation (the request's own when nothing applied)."""
    dirty: bool = False
    """A mutation ran (upstream then asks the chain for a reinvocation even when nothing changed)."""
    error: errors.StatusError | None = None


@dataclass(slots=True)
class _PolicyError:
    policy: str
    binding: str | None
    message: str
    failure_policy: str
    reason: str = ""

    @property
    def text(self) -> str:
        if self.binding is not None:
            return f"policy '{self.policy}' with binding '{self.binding}' denied request: {self.message}"
        return f"policy {json.dumps(self.policy)} denied request: {self.message}"


@dataclass(slots=True)
class _Invocation:
    policy: _MutatingPolicy
    binding: str
    target: Target
    param: Obj | None


# --- the dispatcher -------------------------------------------------------------------------------------


def evaluate(
    policies: Mapping[str, Obj],
    bindings: Iterable[Obj],
    request: Request,
    *,
    namespace: Obj | None,
    params: ParamSource,
    schema_for: SchemaFor,
    state: ReinvocationState,
    reinvoke: bool = False,
    authorizer: cel.AuthzCallback | None = None,
) -> Outcome:
    """Every binding of every matching policy, mutating ``request.object`` in policy then binding name order.

    ``namespace`` is the request's namespace object (None when it is missing or the request is cluster
    scoped). ``reinvoke`` is the chain's second pass: only invocations marked for reinvocation run.
    """
    outcome = Outcome(request.object)
    if (
        request.operation not in ("CREATE", "UPDATE")
        or (request.group, request.resource) in admissionpolicy.EXEMPT_RESOURCES
    ):
        return outcome
    by_policy: dict[str, list[Obj]] = {}
    for binding in bindings:
        name = str((binding.get("spec") or {}).get("policyName") or "")
        if name:
            by_policy.setdefault(name, []).append(binding)
    policy_errors: list[_PolicyError] = []
    invocations: list[_Invocation] = []
    for policy_name in sorted(by_policy):
        policy_obj = policies.get(policy_name)
        if policy_obj is not None:
            _collect(
                _MutatingPolicy(policy_obj),
                sorted(
                    by_policy[policy_name], key=lambda b: str((b.get("metadata") or {}).get("name") or "")
                ),
                request,
                namespace,
                params,
                invocations,
                policy_errors,
            )
    if invocations:
        is_namespace = request.resource == "namespaces" and not request.group
        if request.namespace and not is_namespace and namespace is None:
            outcome.error = errors.not_found("namespaces", request.namespace)
            return outcome
        _dispatch(
            invocations, request, namespace, schema_for, state, reinvoke, authorizer, outcome, policy_errors
        )
    failing = [e for e in policy_errors if e.failure_policy != "Ignore"]
    if failing and outcome.error is None:
        name = request.name
        if not name and request.object is not None:
            meta = request.object.get("metadata") or {}
            name = str(meta.get("name") or meta.get("generateName") or "")
        outcome.error = errors.admission_policy_denied(
            request.resource,
            request.group,
            name or "Unknown",
            [e.text for e in failing],
            failing[0].reason,
        )
    return outcome


def _collect(
    policy: _MutatingPolicy,
    bindings: list[Obj],
    request: Request,
    namespace: Obj | None,
    params: ParamSource,
    invocations: list[_Invocation],
    policy_errors: list[_PolicyError],
) -> None:
    def config_error(message: str, binding: str | None) -> None:
        prefix = "failed to configure binding" if binding is not None else "failed to configure policy"
        policy_errors.append(
            _PolicyError(policy.name, binding, f"{prefix}: {message}", policy.failure_policy)
        )

    constraints = policy.spec.get("matchConstraints")
    try:
        if not isinstance(constraints, Mapping):
            raise ConfigError("policy contained no match constraints, a required field")
        target = admissionpolicy.matches(constraints, request, namespace)
    except ConfigError as exc:
        config_error(str(exc), None)
        return
    if target is None:
        return
    scope: str | None = None
    if policy.param_kind is not None:
        kind = policy.param_kind
        scope = params.scope(str(kind.get("apiVersion") or ""), str(kind.get("kind") or ""))
        if scope is None:
            config_error(f"failed to find resource referenced by paramKind: '{_param_gvk(kind)}'", None)
            return
    for binding in bindings:
        binding_name = str((binding.get("metadata") or {}).get("name") or "")
        spec = binding.get("spec") or {}
        match_resources = spec.get("matchResources")
        try:
            if (
                isinstance(match_resources, Mapping)
                and admissionpolicy.matches(match_resources, request, namespace) is None
            ):
                continue
            param_list = admissionpolicy.collect_params(
                policy.param_kind, scope, spec.get("paramRef"), request.namespace, params
            )
        except ConfigError as exc:
            config_error(str(exc), binding_name)
            continue
        for param in param_list:
            invocations.append(_Invocation(policy, binding_name, target, param))


def _invocation_key(inv: _Invocation) -> tuple[str, str, str, str]:
    meta = (inv.param or {}).get("metadata") or {}
    return (inv.policy.name, inv.binding, str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _dispatch(
    invocations: list[_Invocation],
    request: Request,
    namespace: Obj | None,
    schema_for: SchemaFor,
    state: ReinvocationState,
    reinvoke: bool,
    authorizer: cel.AuthzCallback | None,
    outcome: Outcome,
    policy_errors: list[_PolicyError],
) -> None:
    obj = request.object
    if reinvoke and state.last_output is not _UNSET and state.last_output != obj:
        state.require_reinvoking_previously_invoked()
    is_namespace = request.resource == "namespaces" and not request.group
    ns_value = admissionpolicy.namespace_value(namespace) if request.namespace and not is_namespace else None
    authz: cel.Authorizer | None = None
    if authorizer is not None:
        resource = cel.RequestResource(
            request.group, request.resource, request.subresource, request.namespace, request.name
        )
        authz = cel.Authorizer(authorizer, resource)
    for inv in invocations:
        policy = inv.policy

        def base(current: Obj | None, inv: _Invocation = inv) -> dict[str, Any]:
            values: dict[str, Any] = {
                "object": _converted(current, request, inv.target),
                "oldObject": _converted(request.old_object, request, inv.target),
                "request": admissionpolicy.request_value(request, inv.target),
                "params": inv.param,
            }
            if authz is not None:
                values["authorizer"] = authz
            return values

        if policy.match_conditions:
            matched, error = _match_conditions(policy, _Phase(policy, {**base(obj), "namespaceObject": None}))
            if error is not None:
                policy_errors.append(
                    _PolicyError(policy.name, inv.binding, error, policy.failure_policy, "Invalid")
                )
                continue
            if not matched:
                continue
        key = _invocation_key(inv)
        if reinvoke and key not in state.to_reinvoke:
            continue
        before = obj
        for mutation in policy.mutations:
            if obj is None:
                continue
            phase = _Phase(policy, {**base(obj), "namespaceObject": ns_value})
            try:
                obj = _mutate(mutation, phase, obj, schema_for(inv.target))
            except _Failed as exc:
                policy_errors.append(
                    _PolicyError(policy.name, inv.binding, exc.message, policy.failure_policy, "Invalid")
                )
                continue
            outcome.dirty = True
        if obj != before:
            state.require_reinvoking_previously_invoked()
        if policy.reinvocation_policy == "IfNeeded":
            state.previously_invoked.add(key)
    if outcome.dirty:
        state.require_reinvoking_previously_invoked()
    outcome.object = obj
    state.last_output = obj


def _converted(obj: Obj | None, request: Request, target: Target) -> Obj | None:
    if obj is None or target.version == request.version:
        return obj
    api_version = f"{request.group}/{target.version}" if request.group else target.version
    return {**obj, "apiVersion": api_version}


# --- one mutation ---------------------------------------------------------------------------------------


def _mutate(mutation: _Mutation, phase: _Phase, obj: Obj, schema: SchemaNode | None) -> Obj:
    value = phase.run(mutation.expression)
    if mutation.patch_type == "JSONPatch":
        return _json_patch(value, obj)
    return _apply_configuration(value, obj, schema)


def _json_patch(value: Any, obj: Obj) -> Obj:
    if not isinstance(value, list):
        raise _Failed("type mismatch: JSONPatchType.expression should evaluate to array")
    ops: list[dict[str, Any]] = []
    for item in value:
        if not isinstance(item, dict) or item.get(TYPE_KEY) != "JSONPatch":
            raise _Failed(
                "type mismatch: JSONPatchType.expression should evaluate to array of JSONPatch, got element "
                f"of {_type_of(item)}"
            )
        op: dict[str, Any] = {"op": str(item.get("op") or ""), "path": str(item.get("path") or "")}
        if item.get("from"):
            op["from"] = str(item["from"])
        if "value" in item:
            raw = item["value"]
            problems: list[str] = []
            root = raw.get(TYPE_KEY) if isinstance(raw, dict) else None
            op["value"] = _untyped(raw, [root] if isinstance(root, str) else [], problems)
            if problems:
                raise _Failed("type mismatch: " + "\n".join(problems))
            if raw is _OPAQUE:
                raise _Failed(
                    "JSONPath valueExpression evaluated to a type that could not marshal to JSON: optional_type"
                )
        ops.append(op)
    try:
        return apply_patch(obj, ops)
    except PatchTestFailed:
        return obj  # a failed test leaves the object as it was (upstream's ErrTestFailed)
    except PatchError as exc:
        raise _Failed(f"JSON Patch: {exc}") from None


def _apply_configuration(value: Any, obj: Obj, schema: SchemaNode | None) -> Obj:
    if not isinstance(value, dict) or value.get(TYPE_KEY) != "Object":
        raise _Failed(f"unsupported return type from ApplyConfiguration expression: {_type_of(value)}")
    problems: list[str] = []
    patch = _untyped(value, ["Object"], problems)
    if problems:
        raise _Failed("type mismatch: " + "\n".join(problems))
    patch["apiVersion"] = obj.get("apiVersion")
    patch["kind"] = obj.get("kind")
    atomics = _atomics(patch, schema, "")
    if atomics:
        raise _Failed(
            "error applying patch: invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: "
            + ", ".join(atomics)
        )
    try:
        merged = managedfields.merge_applied(obj, patch, schema)
    except ValueError as exc:
        raise _Failed(f"error applying patch: failed to merge patch: {exc}") from None
    if not isinstance(merged, dict):
        raise _Failed("error applying patch: failed to convert typed object to object")
    return merged


def _atomics(value: Any, schema: SchemaNode | None, path: str) -> list[str]:
    """smd.go ``findAtomics``: the paths of atomic lists, maps and structs an apply configuration sets."""
    if schema is None:
        return []
    out: list[str] = []
    if isinstance(value, dict):
        if schema.map_atomic:
            out.append(path)
        for key, item in value.items():
            if schema.has_field(key):
                out.extend(_atomics(item, schema.child(key), f"{path}.{key}"))
    elif isinstance(value, list):
        if schema.list_relationship()[0] == "atomic":
            out.append(path)
        items = schema.items()
        for index, item in enumerate(value):
            out.extend(_atomics(item, items, f"{path}[{index}]"))
    return out
