"""Kubernetes ``Status`` errors.

Every failure a client can see is a :class:`StatusError`: it carries the HTTP code, the machine-readable
``reason`` and the human ``message`` that kubectl and the Python clients key on, so the wire text lives in
one place. The factory functions spell the upstream messages exactly, because clients match on them
(kubectl prints them verbatim; lightkube and kopf map codes and reasons to exception types).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict


class Cause(TypedDict, total=False):
    reason: str
    message: str
    field: str


class StatusError(Exception):
    """An error that becomes a ``kind: Status`` response body."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        # An empty mapping is kept: upstream sends ``details: {}`` for the errors whose StatusDetails it sets
        # with nothing in them (405 and 404 from its router, 403 on non-resource paths).
        self.details = dict(details) if details is not None else None
        self.headers = dict(headers) if headers else {}

    def to_status(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details is not None:
            status["details"] = self.details
        status["code"] = self.code
        return status

    def __repr__(self) -> str:
        return f"StatusError({self.code}, {self.reason!r}, {self.message!r})"


def _details(name: str | None, kind: str | None, group: str | None = None, **extra: Any) -> dict[str, Any]:
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    if kind:
        details["kind"] = kind
    details.update({k: v for k, v in extra.items() if v is not None})
    return details


def qualified_resource(resource: str, group: str = "") -> str:
    """``configmaps`` for the core group, ``widgets.example.com`` otherwise (upstream GroupResource.String)."""
    return f"{resource}.{group}" if group else resource


def bad_request(message: str, causes: Sequence[Cause] | None = None) -> StatusError:
    details = {"causes": list(causes)} if causes else None
    return StatusError(400, "BadRequest", message, details=details)


def unauthorized(message: str = "Unauthorized") -> StatusError:
    return StatusError(401, "Unauthorized", message)


def token_too_long(limit: int) -> StatusError:
    """A bearer token over the length an authenticator accepts: refused before it is looked up or stored
    (upstream has no such limit of its own beyond the header size; the wording is ours)."""
    return StatusError(401, "Unauthorized", f"the bearer token is longer than {limit} bytes")


def forbidden(resource: str, group: str, name: str, reason: str) -> StatusError:
    """403 in upstream's shape: ``<resource> "<name>" is forbidden: <reason>``."""
    qualified = qualified_resource(resource, group)
    if name:
        message = f'{qualified} "{name}" is forbidden: {reason}'
    elif qualified:
        message = f"{qualified} is forbidden: {reason}"
    else:
        message = f"forbidden: {reason}"
    return StatusError(403, "Forbidden", message, details=_details(name, resource, group))


def rbac_escalation(
    resource: str,
    name: str,
    user: str,
    groups: Sequence[str],
    missing: Sequence[str],
    resolution_errors: Sequence[str] = (),
) -> StatusError:
    """403 for a role or binding that grants rules its author does not hold (upstream
    ``rbac/validation.ConfirmNoEscalation``): ``missing`` are the rules in ``CompactString`` form, one a line;
    ``resolution_errors`` the author's own bindings that could not be resolved (a role that is gone)."""
    from vplane.kube.validation import go_quote  # validation imports this module

    quoted_groups = "[" + " ".join(go_quote(g) for g in groups) + "]"
    reason = (
        f"user {go_quote(user)} (groups={quoted_groups}) is attempting to grant RBAC permissions not currently "
        "held:\n" + "\n".join(missing)
    )
    if resolution_errors:
        # Go prints the []error holding one utilerrors.Aggregate: "[" + aggregate + "]", and an aggregate of
        # several distinct messages is itself "[a, b]".
        distinct = list(dict.fromkeys(resolution_errors))
        aggregate = distinct[0] if len(distinct) == 1 else "[" + ", ".join(distinct) + "]"
        reason += f"; resolution errors: [{aggregate}]"
    return forbidden(resource, "rbac.authorization.k8s.io", name, reason)


def rbac_aggregation_rule(name: str) -> StatusError:
    """403 for setting or changing a ClusterRole's ``aggregationRule`` without cluster-admin's rules
    (upstream ``clusterrole/policybased``)."""
    return forbidden(
        "clusterroles",
        "rbac.authorization.k8s.io",
        name,
        "must have cluster-admin privileges to use the aggregationRule",
    )


def not_found(resource: str, name: str, group: str = "") -> StatusError:
    qualified = qualified_resource(resource, group)
    return StatusError(
        404, "NotFound", f'{qualified} "{name}" not found', details=_details(name, resource, group)
    )


def not_found_path() -> StatusError:
    return StatusError(404, "NotFound", "the server could not find the requested resource", details={})


def method_not_allowed() -> StatusError:
    """405 as upstream's router answers a method a path has no route for (``NewGenericServerResponse``
    with no resource: empty ``details``), e.g. PUT or PATCH on a collection, POST on an object."""
    return StatusError(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        details={},
    )


def not_acceptable(accepted: Sequence[str]) -> StatusError:
    return StatusError(
        406, "NotAcceptable", "only the following media types are accepted: " + ", ".join(accepted)
    )


def already_exists(resource: str, name: str, group: str = "") -> StatusError:
    qualified = qualified_resource(resource, group)
    return StatusError(
        409, "AlreadyExists", f'{qualified} "{name}" already exists', details=_details(name, resource, group)
    )


def conflict(resource: str, name: str, group: str = "", reason: str | None = None) -> StatusError:
    qualified = qualified_resource(resource, group)
    why = (
        reason
        or "the object has been modified; please apply your changes to the latest version and try again"
    )
    return StatusError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified} "{name}": {why}',
        details=_details(name, resource, group),
    )


def gone(message: str) -> StatusError:
    return StatusError(410, "Expired", message)


def request_entity_too_large(message: str) -> StatusError:
    return StatusError(413, "RequestEntityTooLarge", message)


def object_too_large() -> StatusError:
    """An object whose stored form is over the per-object limit (etcd's ``--max-request-bytes``).

    The message is etcd's, which kube-apiserver passes through. Upstream answers it as a 500 with an
    empty reason (kubernetes/kubernetes#112152, still open); we answer 413 RequestEntityTooLarge, since
    retrying cannot help, and keep etcd's words so clients that match on them still do."""
    return StatusError(413, "RequestEntityTooLarge", "etcdserver: request is too large")


def decoded_body_too_large(limit: int) -> StatusError:
    """A body whose decoded value re-encodes to more than the body limit (YAML can be terser than JSON)."""
    return StatusError(
        413,
        "RequestEntityTooLarge",
        f"Request entity too large: the decoded body exceeds the limit of {limit}",
    )


def json_parse_error(detail: str) -> StatusError:
    """A JSON body that is not JSON, where upstream's serializer reads ``apiVersion`` and ``kind`` first
    (``json.SimpleMetaFactory.Interpret``); ``detail`` is Go's ``encoding/json`` syntax error
    (:mod:`vplane.kube.gojson`). Upstream answers this 500 for a DeleteOptions body (a plain error reaches
    its response writer); we answer 400, since the client sent it."""
    return bad_request(f"couldn't get version/kind; json parse error: {detail}")


def unrecognized_object(kind: str, detail: str, body: bytes) -> StatusError:
    """A create or update body that is not JSON (upstream ``transformDecodeError`` in
    ``endpoints/handlers/rest.go``, around the serializer's :func:`json_parse_error` text): ``the object
    provided is unrecognized (must be of type ConfigMap): couldn't get version/kind; json parse error:
    unexpected end of JSON input ({"apiVersion":"v1","kind":"Con ...)``."""
    return bad_request(
        f"the object provided is unrecognized (must be of type {kind}): couldn't get version/kind; "
        f"json parse error: {detail} ({summarize_body(body)})"
    )


def summarize_body(body: bytes, limit: int = 30) -> str:
    """Upstream's ``summarizeData(body, 30)``: ``<empty>``, or the first 30 bytes as text when the body
    starts with ``{`` and as hex otherwise, `` ...`` marking a cut. Bytes that are not UTF-8 become U+FFFD
    one each, as Go's JSON encoder writes them in the answer."""
    if not body:
        return "<empty>"
    suffix = " ..." if len(body) > limit else ""
    head = body[:limit]
    if head[:1] != b"{":
        return head.hex() + suffix
    text = head.decode("utf-8", "surrogateescape")
    return _LONE_SURROGATES.sub("\ufffd", text) + suffix


_LONE_SURROGATES = re.compile("[\udc80-\udcff]")


def error_decoding_patch(detail: str) -> StatusError:
    """A JSON or merge patch that is not JSON, with fieldValidation Warn or Strict (the default): upstream
    decodes it strictly first (``jsonPatcher.applyJSPatch``)."""
    return bad_request(f"error decoding patch: {detail}")


def invalid_json_patch() -> StatusError:
    """A merge patch that is not JSON with fieldValidation=Ignore (json-patch's ``ErrBadJSONPatch``)."""
    return bad_request("Invalid JSON Patch")


def yaml_alias(line: int, alias: str) -> StatusError:
    """A YAML body that uses an alias (``*name``): refused before anything is built from it."""
    return bad_request(
        f"yaml: line {line}: aliases are not supported (found *{alias}); write the value out in full"
    )


def nested_too_deeply(limit: int, *, stored: bool = False) -> StatusError:
    """A body or object nested deeper than the server can encode (upstream's decoder stops at 10000)."""
    what = (
        "the object to store, with its metadata.managedFields, may be"
        if stored
        else "objects and arrays may be"
    )
    return bad_request(f"exceeded max depth: {what} nested at most {limit} levels deep")


def query_int_unparsable(raw: str, out_of_range: bool) -> StatusError:
    """An integer query parameter Go's ``strconv.ParseInt`` (base 10, 64 bits) rejects: upstream answers
    ``strconv.ParseInt: parsing "0.1s": invalid syntax`` (kubernetes/kubernetes#101350)."""
    why = "value out of range" if out_of_range else "invalid syntax"
    return bad_request(f"strconv.ParseInt: parsing {_render_value(raw)}: {why}")


def query_negative(name: str, value: int) -> StatusError:
    """A negative count or duration in the query (upstream has no wording of its own: field.Invalid's)."""
    return bad_request(_cause_text(field_invalid(name, value, "must be greater than or equal to 0")))


def not_representable_in_json(detail: str) -> StatusError:
    """A YAML or protobuf body holding a value JSON has no form for (binary, sets, integers over 64 bits)."""
    return bad_request(f"the request body cannot be represented as JSON: {detail}")


def cannot_unmarshal(kind: str, version: str, struct_field: str, go_type: str, value: Any) -> StatusError:
    """400 for a body field of the wrong JSON type, as Go's decoder words it:
    ``TokenRequest in version "v1" cannot be handled as a TokenRequest: json: cannot unmarshal string into
    Go struct field TokenRequestSpec.spec.expirationSeconds of type int64``."""
    if isinstance(value, bool):
        what = "bool"
    elif isinstance(value, int | float):
        what = f"number {value}"
    elif isinstance(value, str):
        what = "string"
    elif isinstance(value, list):
        what = "array"
    else:
        what = "object"
    return bad_request(
        f'{kind} in version "{version}" cannot be handled as a {kind}: '
        f"json: cannot unmarshal {what} into Go struct field {struct_field} of type {go_type}"
    )


def unsupported_media_type(content_type: str, accepted: Sequence[str]) -> StatusError:
    message = "the body of the request was in an unknown format - accepted media types include: " + ", ".join(
        accepted
    )
    return StatusError(415, "UnsupportedMediaType", message)


def invalid(kind: str, name: str, causes: Sequence[Cause], group: str = "") -> StatusError:
    """422 Invalid; ``details.kind`` is the Kind (not the plural), as upstream does."""
    joined = ", ".join(_cause_text(c) for c in causes)
    if len(causes) > 1:
        joined = f"[{joined}]"
    message = (
        f'{kind}.{group} "{name}" is invalid: {joined}' if group else f'{kind} "{name}" is invalid: {joined}'
    )
    return StatusError(422, "Invalid", message, details=_details(name, kind, group, causes=list(causes)))


def _cause_text(cause: Cause) -> str:
    field = cause.get("field", "")
    message = cause.get("message", "")
    return f"{field}: {message}" if field else message


def field_invalid(field: str, value: Any, detail: str) -> Cause:
    """A ``FieldValueInvalid`` cause rendered like upstream's ``field.Invalid``."""
    return {
        "reason": "FieldValueInvalid",
        "message": f"Invalid value: {_render_value(value)}: {detail}",
        "field": field,
    }


def field_invalid_omitted(field: str, detail: str, shown: str | None = None) -> Cause:
    """``field.Invalid`` with ``field.OmitValueType{}`` (no value printed), or with ``shown`` as the Go
    rendering of a value ``_render_value`` cannot produce (``[]int32{2, 1}``)."""
    value = f" {shown}:" if shown is not None else ""
    return {"reason": "FieldValueInvalid", "message": f"Invalid value:{value} {detail}", "field": field}


def field_required(field: str, detail: str = "") -> Cause:
    message = "Required value" + (f": {detail}" if detail else "")
    return {"reason": "FieldValueRequired", "message": message, "field": field}


def field_forbidden(field: str, detail: str) -> Cause:
    return {"reason": "FieldValueForbidden", "message": f"Forbidden: {detail}", "field": field}


def field_not_supported(field: str, value: Any, supported: Sequence[str]) -> Cause:
    quoted = ", ".join(f'"{s}"' for s in supported)
    return {
        "reason": "FieldValueNotSupported",
        "message": f"Unsupported value: {_render_value(value)}: supported values: {quoted}",
        "field": field,
    }


def field_duplicate(field: str, value: Any) -> Cause:
    return {
        "reason": "FieldValueDuplicate",
        "message": f"Duplicate value: {_render_value(value)}",
        "field": field,
    }


def field_too_long(field: str, limit: int) -> Cause:
    return {
        "reason": "FieldValueTooLong",
        "message": f"Too long: may not be more than {limit} bytes",
        "field": field,
    }


def field_type_invalid(field: str, value: Any, detail: str) -> Cause:
    return {
        "reason": "FieldValueTypeInvalid",
        "message": f"Invalid value: {_render_value(value)}: {detail}",
        "field": field,
    }


def _render_value(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        # Go's %#v of a []string, as upstream prints one (``[]string{"10.0.0.1"}``).
        return "[]string{" + ", ".join(_render_value(v) for v in value) + "}"
    return '"' + type(value).__name__ + '"'


# -- Service ClusterIP and NodePort allocation (pkg/registry/core/service/storage/alloc.go) --------------


def cluster_ip_not_allocated(name: str, ips: Sequence[str], ip: str, reason: str) -> StatusError:
    """A requested ClusterIP the allocator refused (``provided IP is already allocated``, not in range)."""
    return invalid(
        "Service",
        name,
        [field_invalid("spec.clusterIPs", list(ips), f"failed to allocate IP {ip}: {reason}")],
    )


def node_port_not_allocated(name: str, index: int, port: int, reason: str) -> StatusError:
    """A requested node port the allocator refused."""
    return invalid("Service", name, [field_invalid(f"spec.ports[{index}].nodePort", port, reason)])


def allocation_failed(what: str, reason: str) -> StatusError:
    """Dynamic allocation that found nothing free: ``failed to allocate a serviceIP: range is full``
    (``what`` is ``serviceIP`` or ``nodePort``)."""
    return internal_error(f"failed to allocate a {what}: {reason}")


def health_check_node_port_not_allocated(port: int, reason: str) -> StatusError:
    return internal_error(f"failed to allocate requested HealthCheck NodePort {port}: {reason}")


def too_many_requests(message: str, retry_after: int) -> StatusError:
    return StatusError(
        429,
        "TooManyRequests",
        message,
        details={"retryAfterSeconds": retry_after},
        headers={"Retry-After": str(retry_after)},
    )


def try_again_later(retry_after: int = 1) -> StatusError:
    """429 in the words of upstream's max-in-flight and priority-and-fairness filters (used for our own
    caps too: clients key on the code and Retry-After, and retry)."""
    return too_many_requests("Too many requests, please try again later.", retry_after)


def too_large_resource_version(requested: int, current: int, retry_after: int = 1) -> StatusError:
    """A read asking for a resourceVersion newer than the server's, still so after waiting for it: upstream's
    ``storage.NewTooLargeResourceVersionError`` (apiserver ``pkg/storage/errors.go``), a
    ``NewTimeoutError``, which prefixes ``Timeout: ``; the watch cache asks for a retry after 1 s
    (``resourceVersionTooHighRetrySeconds``), and the Retry-After header follows details, as upstream's
    response writer does."""
    return StatusError(
        504,
        "Timeout",
        f"Timeout: Too large resource version: {requested}, current: {current}",
        details={
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": retry_after,
        },
        headers={"Retry-After": str(retry_after)},
    )


def internal_error(message: str) -> StatusError:
    return StatusError(
        500,
        "InternalError",
        f"Internal error occurred: {message}",
        details={"causes": [{"message": message}]},
    )


def service_unavailable(message: str, retry_after: int | None = None) -> StatusError:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    details = {"retryAfterSeconds": retry_after} if retry_after is not None else None
    return StatusError(503, "ServiceUnavailable", message, details=details, headers=headers)


def timeout(message: str) -> StatusError:
    return StatusError(504, "Timeout", message)


# -- pods/log, pods/exec, pods/attach, pods/portforward (pkg/registry/core/pod/strategy.go) --


def pod_without_host(name: str) -> StatusError:
    """exec, attach and port-forward to a pod not scheduled to a node (``streamLocation``)."""
    return bad_request(f"pod {name} does not have a host assigned")


def pod_container_required(name: str, containers: Sequence[str]) -> StatusError:
    """No ``container`` parameter and not exactly one container (``validateContainer``; Go prints the
    names as ``[a b]``)."""
    if not containers:
        return bad_request(f"a container name must be specified for pod {name}")
    return bad_request(
        f"a container name must be specified for pod {name}, choose one of: [{' '.join(containers)}]"
    )


def pod_container_invalid(container: str, name: str) -> StatusError:
    return bad_request(f"container {container} is not valid for pod {name}")


def webhook_denied(webhook: str, status: Mapping[str, Any] | None) -> StatusError:
    """An admission webhook's refusal (webhook/errors.ToStatusErr): the webhook's own Status, its message
    prefixed with ``admission webhook "<name>" denied the request``, and never a code below 400."""
    result = dict(status or {})
    denied_by = f"admission webhook {_go_quote(webhook)} denied the request"
    if result.get("message"):
        message = f"{denied_by}: {result['message']}"
    elif result.get("reason"):
        message = f"{denied_by}: {result['reason']}"
    else:
        message = f"{denied_by} without explanation"
    code = result.get("code")
    if not isinstance(code, int) or code < 400:
        code = 400
    details = result.get("details")
    return StatusError(
        code,
        str(result.get("reason") or ""),
        message,
        details=details if isinstance(details, Mapping) else None,
    )


def admission_policy_denied(
    resource: str, group: str, name: str, messages: Sequence[str], reason: str = ""
) -> StatusError:
    """A MutatingAdmissionPolicy's refusal (policy/generic ``Dispatch``): ``admission.NewForbidden`` whose
    message is replaced by the first policy error, every error a cause, the reason the first error's."""
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = resource
    details["causes"] = [{"message": m} for m in messages]
    return StatusError(403, reason or "Forbidden", messages[0], details=details)


def _go_quote(value: str) -> str:
    """``%q`` for the validated names these messages quote (DNS subdomains need no other escapes)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def field_not_found(field: str, value: Any) -> Cause:
    """A ``FieldValueNotFound`` cause (``field.NotFound``): a reference to something that does not exist."""
    return {"reason": "FieldValueNotFound", "message": f"Not found: {_render_value(value)}", "field": field}


def field_too_many(field: str, actual: int, limit: int) -> Cause:
    """A ``FieldValueTooMany`` cause (``field.TooMany``)."""
    return {
        "reason": "FieldValueTooMany",
        "message": f"Too many: {actual}: must have at most {limit} items",
        "field": field,
    }


def field_internal(field: str, detail: str) -> Cause:
    """A ``InternalError`` cause (``field.InternalError``)."""
    return {"reason": "InternalError", "message": f"Internal error: {detail}", "field": field}


# -- issue 10 (runtime): the kubelet behind pods/log (GenericHttpResponseChecker, ErrorToAPIStatus) ------


def kubelet_unreachable(message: str) -> StatusError:
    """The API server could not reach (or talk TLS with) the pod's kubelet: a plain Go error, which the
    API server answers as a 500 Status with no reason (``ErrorToAPIStatus``), so kubectl prints
    ``Error from server: Get "https://...": dial tcp ...``."""
    return StatusError(500, "", message)


def kubelet_answer(code: int, body: str, resource: str, name: str) -> StatusError:
    """A kubelet's non-2xx answer, as ``GenericHttpResponseChecker`` turns it into a Status: 400 keeps
    the kubelet's text, 500 is an internal error, others get ``NewGenericServerResponse``'s wording."""
    if code == 400:
        return bad_request(body)
    if code == 500:
        return internal_error(body)
    reasons = {
        401: ("Unauthorized", "the server has asked for the client to provide credentials"),
        403: ("Forbidden", body),
        404: ("NotFound", "the server could not find the requested resource"),
        409: ("Conflict", "the server reported a conflict"),
        429: (
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later",
        ),
    }
    reason, message = reasons.get(
        code,
        (
            "InternalError" if code >= 500 else "",
            f"an error on the server ({json.dumps(body, ensure_ascii=False)}) has prevented the request from succeeding"
            if code >= 500
            else f"the server responded with the status code {code} but did not return more information",
        ),
    )
    return StatusError(
        code, reason, f"{message} ( {resource} {name})", details={"name": name, "kind": resource}
    )
