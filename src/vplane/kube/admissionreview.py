"""Admission webhooks: which configured webhooks a request calls, what they are sent, what their answers mean.

Pure: the API server's plug-in (:mod:`vplane.apiserver.webhooks`) compiles the stored
``Mutating/ValidatingWebhookConfiguration`` objects into :class:`Webhook` values with
:func:`compile_configurations`, asks :func:`should_call` per request, builds the ``AdmissionReview`` with
:func:`build_review`, posts it, and hands the answer to :func:`verify_response`; a mutating webhook's
JSON patch is applied by :func:`apply_patch`. Every message a client can see follows k8s.io/apiserver
``pkg/admission/plugin/webhook/{generic,mutating,validating,request,errors,predicates}`` and
``pkg/util/webhook`` (v0.36), because kubectl prints them verbatim and operators' tests match on them.

Where this differs from upstream, on purpose:

* Service references resolve like the aggregator's endpoint resolver (:func:`resolve_service`): an
  ``ExternalName`` Service to its name, any other to the first address of its Endpoints for the port (vplane
  has no Service network to route a ClusterIP through).
* ``matchPolicy: Equivalent`` knows the other served versions of the same group/resource only (as the
  ValidatingAdmissionPolicy matcher, :mod:`vplane.kube.admissionpolicy`).
* Transport failures are described in Go's words for the common cases (refused, timed out, TLS
  verification, name resolution); anything rarer keeps Python's text after upstream's prefix.
"""

from __future__ import annotations

import base64
import binascii
import json
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import jsonpointer

from vplane.kube import admissionpolicy, cel, errors, labels
from vplane.kube.objects import Obj
from vplane.kube.validation import go_quote

GROUP = "admissionregistration.k8s.io"
MUTATING_CONFIGURATIONS = "mutatingwebhookconfigurations"
VALIDATING_CONFIGURATIONS = "validatingwebhookconfigurations"

DEFAULT_TIMEOUT_SECONDS = 10
MAX_TIMEOUT_SECONDS = 30
REVIEW_VERSIONS = ("v1", "v1beta1")
"""``AcceptedAdmissionReviewVersions``: the AdmissionReview versions this server can send."""

# IsExemptAdmissionConfigurationResource: never sent to API-configured webhooks (no circular dependency
# between admission and its own configuration).
EXEMPT_KINDS = frozenset(
    {
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    }
)

MAX_UNSTRUCTURED_RESPONSE_BYTES = 2048
"""client-go's ``maxUnstructuredResponseTextBytes``: how much of a non-Status error body a message quotes."""


# --- compiled configuration ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """Where a webhook is reached (``clientConfig``), with what upstream's REST client would build from it."""

    url: str = ""
    """The configured URL (``clientConfig.url``), empty for a Service reference."""
    service_namespace: str = ""
    service_name: str = ""
    service_path: str = ""
    service_port: int = 443
    ca_bundle: bytes = b""
    """PEM certificates to verify the webhook with; empty means the system's roots."""

    @property
    def is_service(self) -> bool:
        return not self.url

    @property
    def server_name(self) -> str:
        """The TLS name checked against the certificate: ``<service>.<namespace>.svc`` or the URL's host."""
        if self.is_service:
            return f"{self.service_name}.{self.service_namespace}.svc"
        return _url_hostname(self.url)

    def endpoint(self) -> str:
        """``scheme://host:port/path`` as upstream's REST client posts to (without the timeout query)."""
        if self.is_service:
            host = f"{self.server_name}:{self.service_port}"
            return f"https://{host}{_api_path(self.service_path)}"
        scheme, _, rest = self.url.partition("://")
        authority, slash, path = rest.partition("/")
        authority = authority.rpartition("@")[2]
        path = (slash + path).split("?", 1)[0].split("#", 1)[0]
        return f"{scheme}://{authority}{_api_path(path)}"

    def request_url(self, timeout_seconds: int) -> str:
        """The URL upstream posts to and quotes in errors: the endpoint with ``?timeout=<n>s``."""
        return f"{self.endpoint()}?timeout={timeout_seconds}s"


def _api_path(path: str) -> str:
    """``path.Join("/", apiPath)`` as rest.Config's APIPath becomes the request path."""
    joined = posixpath.normpath("/" + path) if path else "/"
    return "/" + joined.lstrip("/")


def _url_hostname(url: str) -> str:
    authority = url.partition("://")[2].split("/", 1)[0].rpartition("@")[2]
    if authority.startswith("["):
        return authority[1:].split("]", 1)[0]
    return authority.rsplit(":", 1)[0] if authority.count(":") == 1 else authority


@dataclass(frozen=True, slots=True)
class Webhook:
    """One webhook of a configuration, with its API defaults applied (upstream ``WebhookAccessor``)."""

    uid: str
    """``<configuration>/<webhook>/<n>``: tells apart webhooks that share a name (reinvocation keys on it)."""
    name: str
    configuration: str
    mutating: bool
    rules: tuple[Mapping[str, Any], ...]
    namespace_selector: Mapping[str, Any]
    object_selector: Mapping[str, Any]
    match_policy: str = "Equivalent"
    failure_policy: str = "Fail"
    side_effects: str | None = None
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    review_versions: tuple[str, ...] = ()
    client: ClientConfig = field(default_factory=ClientConfig)
    match_conditions: tuple[Mapping[str, Any], ...] = ()
    reinvocation_policy: str = "Never"

    @property
    def ignores_failures(self) -> bool:
        return self.failure_policy == "Ignore"


def compile_configurations(configurations: Iterable[Obj], *, mutating: bool) -> list[Webhook]:
    """Every webhook of every configuration, configurations in name order, webhooks in their order."""
    out: list[Webhook] = []
    for config in sorted(configurations, key=lambda c: str((c.get("metadata") or {}).get("name") or "")):
        config_name = str((config.get("metadata") or {}).get("name") or "")
        seen: dict[str, int] = {}
        for hook in config.get("webhooks") or []:
            if not isinstance(hook, Mapping):
                continue
            name = str(hook.get("name") or "")
            uid = f"{config_name}/{name}/{seen.get(name, 0)}"
            seen[name] = seen.get(name, 0) + 1
            out.append(_compile_webhook(hook, uid, config_name, mutating))
    return out


def _compile_webhook(hook: Mapping[str, Any], uid: str, configuration: str, mutating: bool) -> Webhook:
    cc = hook.get("clientConfig") or {}
    service = cc.get("service") if isinstance(cc, Mapping) else None
    ca_raw = cc.get("caBundle") if isinstance(cc, Mapping) else None
    try:
        ca = base64.b64decode(str(ca_raw), validate=True) if ca_raw else b""
    except (binascii.Error, ValueError):
        ca = b""
    if isinstance(service, Mapping):
        client = ClientConfig(
            service_namespace=str(service.get("namespace") or ""),
            service_name=str(service.get("name") or ""),
            service_path=str(service.get("path") or ""),
            service_port=int(service.get("port") or 443),
            ca_bundle=ca,
        )
    else:
        client = ClientConfig(url=str(cc.get("url") or "") if isinstance(cc, Mapping) else "", ca_bundle=ca)
    timeout = hook.get("timeoutSeconds")
    return Webhook(
        uid=uid,
        name=str(hook.get("name") or ""),
        configuration=configuration,
        mutating=mutating,
        rules=tuple(r for r in hook.get("rules") or [] if isinstance(r, Mapping)),
        namespace_selector=_selector_or_empty(hook.get("namespaceSelector")),
        object_selector=_selector_or_empty(hook.get("objectSelector")),
        match_policy=str(hook.get("matchPolicy") or "Equivalent"),
        failure_policy=str(hook.get("failurePolicy") or "Fail"),
        side_effects=str(hook["sideEffects"]) if hook.get("sideEffects") else None,
        timeout_seconds=int(timeout) if isinstance(timeout, int) else DEFAULT_TIMEOUT_SECONDS,
        review_versions=tuple(str(v) for v in hook.get("admissionReviewVersions") or []),
        client=client,
        match_conditions=tuple(c for c in hook.get("matchConditions") or [] if isinstance(c, Mapping)),
        reinvocation_policy=str(hook.get("reinvocationPolicy") or "Never"),
    )


def _selector_or_empty(raw: Any) -> Mapping[str, Any]:
    return raw if isinstance(raw, Mapping) else {}


# --- matching (generic.Webhook.ShouldCallHook) ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Invocation:
    """A webhook that applies to a request, and the version it sees the request in (Equivalent)."""

    webhook: Webhook
    version: str
    kind: str


def is_exempt(request: admissionpolicy.Request) -> bool:
    """Admission configuration and the review kinds never reach API-configured webhooks."""
    if request.group == GROUP and request.kind in EXEMPT_KINDS:
        return True
    return (request.group, request.resource) in admissionpolicy.EXEMPT_RESOURCES


def _parsed(selector: Mapping[str, Any]) -> labels.Selector:
    try:
        return labels.from_label_selector(selector)
    except errors.StatusError as exc:
        raise errors.internal_error(exc.message) from None


def _labels_of(obj: Obj | None) -> dict[str, str] | None:
    if obj is None:
        return None
    meta = obj.get("metadata")
    found = meta.get("labels") if isinstance(meta, dict) else None
    return found if isinstance(found, dict) else {}


def _namespace_matches(hook: Webhook, request: admissionpolicy.Request, namespace: Obj | None) -> bool:
    """namespace.Matcher.MatchNamespaceSelector; raises the NotFound of a missing namespace."""
    is_namespace = request.resource == "namespaces" and not request.group
    if not request.namespace and not is_namespace:
        return True
    selector = _parsed(hook.namespace_selector)
    if selector.empty:
        return True
    if is_namespace and not request.subresource and request.operation in ("CREATE", "UPDATE"):
        found = _labels_of(request.object) or {}
    else:
        if namespace is None:
            raise errors.not_found("namespaces", request.namespace)
        found = _labels_of(namespace) or {}
    return selector.matches(found)


def _object_matches(hook: Webhook, request: admissionpolicy.Request) -> bool:
    selector = _parsed(hook.object_selector)
    if selector.empty:
        return True
    return any(
        found is not None and selector.matches(found)
        for found in (_labels_of(request.object), _labels_of(request.old_object))
    )


def _rules_match(hook: Webhook, request: admissionpolicy.Request) -> tuple[str, str] | None:
    for rule in hook.rules:
        if admissionpolicy.rule_matches(rule, request, request.version):
            return request.version, request.kind
    if hook.match_policy != "Equivalent":
        return None
    for rule in hook.rules:
        for version, kind in request.equivalents:
            if version != request.version and admissionpolicy.rule_matches(rule, request, version):
                return version, kind
    return None


def should_call(
    hook: Webhook,
    request: admissionpolicy.Request,
    namespace: Obj | None,
    authorizer: cel.AuthzCallback | None = None,
) -> Invocation | None:
    """Whether ``hook`` applies to ``request``: selectors, rules, then match conditions.

    ``namespace`` is the request's namespace object (None when it does not exist). Selector errors (a
    missing namespace) only surface for a webhook whose rules match, as upstream.
    """
    ns_error: errors.StatusError | None = None
    try:
        if not _namespace_matches(hook, request, namespace):
            return None
    except errors.StatusError as exc:
        ns_error = exc
    obj_error: errors.StatusError | None = None
    try:
        if not _object_matches(hook, request):
            return None
    except errors.StatusError as exc:
        obj_error = exc
    matched = _rules_match(hook, request)
    if matched is None:
        return None
    if ns_error is not None:
        raise ns_error
    if obj_error is not None:
        raise obj_error
    version, kind = matched
    if hook.match_conditions:
        target = admissionpolicy.Target(version, kind)
        values: dict[str, Any] = {
            "object": in_version(request.object, request, version),
            "oldObject": in_version(request.old_object, request, version),
            "request": admissionpolicy.request_value(request, target),
            "namespaceObject": None,
        }
        if authorizer is not None:
            resource = cel.RequestResource(
                request.group, request.resource, request.subresource, request.namespace, request.name
            )
            values["authorizer"] = cel.Authorizer(authorizer, resource)
        matches, error = admissionpolicy.evaluate_match_conditions(
            hook.match_conditions, hook.failure_policy, values
        )
        if error is not None:
            raise errors.forbidden(request.resource, request.group, request.name, error)
        if not matches:
            return None
    return Invocation(hook, version, kind)


def in_version(obj: Obj | None, request: admissionpolicy.Request, version: str) -> Obj | None:
    """The object as the matched version sees it (vplane's conversion only changes ``apiVersion``)."""
    if obj is None:
        return None
    api_version = f"{request.group}/{version}" if request.group else version
    if obj.get("apiVersion") == api_version:
        return obj
    return {**obj, "apiVersion": api_version}


# --- the review (request.CreateAdmissionObjects) -----------------------------------------------------------


def review_version(hook: Webhook) -> str | None:
    """The first of the webhook's ``admissionReviewVersions`` this server speaks."""
    for version in hook.review_versions:
        if version in REVIEW_VERSIONS:
            return version
    return None


def build_review(invocation: Invocation, request: admissionpolicy.Request, version: str, uid: str) -> Obj:
    """``AdmissionReview`` JSON (admission.k8s.io/``version``; v1 and v1beta1 share the shape)."""
    target = admissionpolicy.Target(invocation.version, invocation.kind)
    body = admissionpolicy.request_value(request, target)
    body["uid"] = uid
    body["object"] = in_version(request.object, request, invocation.version)
    body["oldObject"] = in_version(request.old_object, request, invocation.version)
    body["options"] = request.options
    return {"kind": "AdmissionReview", "apiVersion": f"admission.k8s.io/{version}", "request": body}


# --- the answer (request.VerifyAdmissionResponse) ---------------------------------------------------------


class CallError(Exception):
    """A failure to get a usable answer from a webhook (``ErrCallingWebhook``): its failurePolicy decides."""

    def __init__(self, webhook: str, reason: str) -> None:
        super().__init__(reason)
        self.webhook = webhook
        self.reason = reason

    @property
    def message(self) -> str:
        return f"failed calling webhook {go_quote(self.webhook)}: {self.reason}"


@dataclass(frozen=True, slots=True)
class Response:
    allowed: bool
    patch: list[Any] | None = None
    """The decoded JSON patch (mutating webhooks), None without one."""
    status: Mapping[str, Any] | None = None
    warnings: tuple[str, ...] = ()


def _gvk_string(api_version: str, kind: str) -> str:
    group, _, version = api_version.rpartition("/")
    return f"{group}/{version}, Kind={kind}"


def decode_response_body(hook: Webhook, body: bytes, status: int, content_type: str) -> Any:
    """What upstream's REST client makes of the HTTP answer: the decoded JSON, or a :class:`CallError`."""
    if not 200 <= status <= 206:
        raise CallError(hook.name, f"failed to call webhook: {http_error_text(status, body, content_type)}")
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CallError(
            hook.name, f"failed to call webhook: couldn't get version/kind; json parse error: {exc}"
        ) from None


def http_error_text(status: int, body: bytes, content_type: str) -> str:
    """client-go ``NewGenericServerResponse`` for a non-Status error body."""
    message = "unknown"
    if content_type.split(";", 1)[0].strip().lower() == "text/plain":
        message = body[:MAX_UNSTRUCTURED_RESPONSE_BYTES].decode(errors="replace").strip()
    fixed = {
        409: "the server reported a conflict",
        404: "the server could not find the requested resource",
        400: "the server rejected our request for an unknown reason",
        401: "the server has asked for the client to provide credentials",
        405: "the server does not allow this method on the requested resource",
        422: "the server rejected our request due to an error in our request",
        503: "the server is currently unable to handle the request",
        504: "the server was unable to return a response in the time allotted, but may still be processing the request",
        429: "the server has received too many requests and has asked us to try again later",
    }
    if status in fixed:
        return fixed[status]
    if status in (403, 406, 415):
        return message
    if status >= 500:
        return f"an error on the server ({go_quote(message)}) has prevented the request from succeeding"
    return f"the server responded with the status code {status} but did not return more information"


def verify_response(hook: Webhook, version: str, uid: str, document: Any) -> Response:
    """Check a decoded review answer the way upstream does; a bad answer is a :class:`CallError`."""
    if not isinstance(document, dict):
        raise CallError(
            hook.name,
            f"failed to call webhook: couldn't get version/kind; json parse error: json: cannot unmarshal "
            f"{_json_kind(document)} into Go value of type struct {{ APIVersion string "
            f'"json:\\"apiVersion,omitempty\\""; Kind string "json:\\"kind,omitempty\\"" }}',
        )
    kind = document.get("kind")
    api_version = document.get("apiVersion")
    if not kind:
        raw = json.dumps(document, separators=(",", ":"))
        raise CallError(hook.name, f"failed to call webhook: Object 'Kind' is missing in '{raw}'")

    def invalid(reason: str) -> CallError:
        return CallError(hook.name, f"received invalid webhook response: {reason}")

    response = document.get("response")
    if version == "v1":
        if not isinstance(response, dict):
            raise invalid("webhook response was absent")
        if str(response.get("uid") or "") != uid:
            raise invalid(
                f"expected response.uid={go_quote(uid)}, got {go_quote(str(response.get('uid') or ''))}"
            )
        if api_version != "admission.k8s.io/v1" or kind != "AdmissionReview":
            raise invalid(
                "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got "
                + _gvk_string(str(api_version or ""), str(kind))
            )
    elif not isinstance(response, dict):
        raise invalid("webhook response was absent")
    raw_patch = response.get("patch")
    patch_type = response.get("patchType")
    patch_bytes = b""
    if raw_patch not in (None, ""):
        try:
            patch_bytes = base64.b64decode(str(raw_patch), validate=True)
        except (binascii.Error, ValueError):
            raise CallError(
                hook.name, "failed to call webhook: illegal base64 data in AdmissionResponse.patch"
            ) from None
    patch: list[Any] | None = None
    if hook.mutating:
        if version == "v1":
            if patch_bytes and patch_type is None:
                raise invalid("webhook returned response.patch but not response.patchType")
            if not patch_bytes and patch_type is not None:
                raise invalid("webhook returned response.patchType but not response.patch")
            if patch_type is not None and not patch_type:
                raise invalid(f"webhook returned invalid response.patchType of {go_quote(str(patch_type))}")
        else:
            patch_type = "JSONPatch" if patch_bytes else None
        if patch_bytes:
            if patch_type != "JSONPatch":
                raise CallError(hook.name, f"unsupported patch type {go_quote(str(patch_type))}")
            patch = _decode_patch(hook, patch_bytes)
    elif version == "v1":
        if patch_bytes:
            raise invalid("validating webhook may not return response.patch")
        if patch_type is not None:
            raise invalid("validating webhook may not return response.patchType")
    status = response.get("status")
    warnings = response.get("warnings") or []
    return Response(
        allowed=response.get("allowed") is True,
        patch=patch,
        status=status if isinstance(status, Mapping) else None,
        warnings=tuple(str(w) for w in warnings if isinstance(w, str)),
    )


def _decode_patch(hook: Webhook, data: bytes) -> list[Any]:
    """``jsonpatch.DecodePatch``: a JSON array of operation objects."""
    try:
        ops = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CallError(hook.name, f"received undecodable patch in webhook response: {exc}") from None
    if not isinstance(ops, list) or not all(isinstance(op, dict) for op in ops):
        kind = _json_kind(
            ops if not isinstance(ops, list) else next(o for o in ops if not isinstance(o, dict))
        )
        raise CallError(
            hook.name,
            f"received undecodable patch in webhook response: json: cannot unmarshal {kind} into Go value "
            "of type jsonpatch.Patch",
        )
    return ops


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if value is None:
        return "null"
    return "object"


class PatchError(Exception):
    """A patch that cannot be applied (upstream answers 500 whatever the failurePolicy)."""


def apply_patch(obj: Obj, ops: Sequence[Any]) -> Obj:
    """Apply a JSON patch to the object it was computed for (RFC 6902, the ``jsonpatch`` library).

    Operations are applied one by one so a failure names its operation and path as evanphx/json-patch
    does. A failed ``test`` raises :class:`PatchTestFailed` (a MutatingAdmissionPolicy then leaves the
    object as it was).
    """
    doc: Any = obj
    for op in ops:
        name = str(op.get("op") or "") if isinstance(op, Mapping) else ""
        path = str(op.get("path") or "") if isinstance(op, Mapping) else ""
        try:
            doc = jsonpatch.JsonPatch([op]).apply(doc)
        except jsonpatch.JsonPatchTestFailed:
            raise PatchTestFailed(f"testing value {path} failed: test failed") from None
        except jsonpatch.InvalidJsonPatch as exc:
            raise PatchError(f"Unexpected kind: {name}" if name else str(exc)) from None
        except (
            jsonpatch.JsonPatchException,
            jsonpointer.JsonPointerException,
            KeyError,
            IndexError,
            TypeError,
        ):
            raise PatchError(
                f"{name} operation does not apply: doc is missing path: {go_quote(path)}: missing value"
            ) from None
    if not isinstance(doc, dict):
        raise PatchError("json: cannot unmarshal non-object into Go value of type map[string]interface {}")
    return doc


class PatchTestFailed(PatchError):
    """A ``test`` operation did not hold."""


# --- errors ------------------------------------------------------------------------------------------


def denial(webhook: str, status: Mapping[str, Any] | None) -> errors.StatusError:
    """A webhook's ``allowed: false`` as the caller sees it (webhook/errors.ToStatusErr)."""
    return errors.webhook_denied(webhook, dict(status) if status else None)


def dry_run_unsupported(webhook: str) -> errors.StatusError:
    return errors.bad_request(f"admission webhook {go_quote(webhook)} does not support dry run")


def check_dry_run(hook: Webhook) -> CallError | None:
    """A dry-run request only reaches webhooks without side effects (``None``, ``NoneOnDryRun``): others
    refuse the request (400, whatever the failurePolicy); a webhook without ``sideEffects`` (only possible
    for objects stored before v1) is a call failure."""
    if hook.side_effects in ("None", "NoneOnDryRun"):
        return None
    if hook.side_effects is None:
        return CallError(hook.name, "Webhook SideEffects is nil")
    raise dry_run_unsupported(hook.name)


def post_failure(url: str, detail: str) -> str:
    """``failed to call webhook: Post "<url>": <detail>`` (a net/url error)."""
    return f"failed to call webhook: Post {go_quote(url)}: {detail}"


# --- Service references (the aggregator's endpoint resolver) -----------------------------------------------


class ResolveError(Exception):
    pass


def resolve_service(
    service: Obj | None, endpoints: Obj | None, namespace: str, name: str, port: int
) -> tuple[str, int]:
    """The host and port a Service reference reaches, or :class:`ResolveError` with upstream's text."""
    if service is None:
        raise ResolveError(f"service {go_quote(name)} not found")
    spec = service.get("spec") or {}
    svc_type = str(spec.get("type") or "ClusterIP")
    if svc_type == "ExternalName":
        return str(spec.get("externalName") or ""), port
    if svc_type not in ("ClusterIP", "NodePort", "LoadBalancer"):
        raise ResolveError(f"unsupported service type {go_quote(svc_type)}")
    port_name: str | None = None
    for sp in spec.get("ports") or []:
        if isinstance(sp, Mapping) and sp.get("port") == port:
            port_name = str(sp.get("name") or "")
            break
    if port_name is None:
        raise ResolveError(f"no service port {port} found for service {go_quote(name)}")
    for subset in (endpoints or {}).get("subsets") or []:
        if not isinstance(subset, Mapping):
            continue
        addresses = [a for a in subset.get("addresses") or [] if isinstance(a, Mapping)]
        for ep_port in subset.get("ports") or []:
            if not isinstance(ep_port, Mapping) or str(ep_port.get("name") or "") != port_name:
                continue
            if addresses and isinstance(ep_port.get("port"), int):
                return str(addresses[0].get("ip") or addresses[0].get("hostname") or ""), int(ep_port["port"])
    raise ResolveError(f"no endpoints available for service {go_quote(name)}")
