"""Create-only review kinds (access reviews, self reviews, token reviews) and the token subresource.

These are never stored: a POST computes an answer from the authorizer or the authenticators and returns
the request object with ``status`` filled in, as upstream does.
"""

from __future__ import annotations

import base64
import hmac
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec

from vplane.apiserver import codec, satokens, timeutil
from vplane.apiserver.authz import Attributes, forbidden_reason
from vplane.apiserver.context import RequestContext, UserInfo
from vplane.apiserver.handlers import object_response, response_format
from vplane.apiserver.kinds.kubernetesservice import advertise_address
from vplane.apiserver.kubeletclient import KubeletClient
from vplane.apiserver.registry import CreateHandler, ResourceType
from vplane.kube import errors, openapi, structural
from vplane.kube.objects import Obj
from vplane.kube.requestinfo import RequestInfo
from vplane.support import legacytokens

if TYPE_CHECKING:
    from vplane.apiserver.server import APIServer

SubresourceHandler = Callable[
    [web.Request, RequestContext, ResourceType, RequestInfo], Awaitable[web.StreamResponse]
]

POD_STREAMS = ("exec", "attach", "portforward")


def pod_container(pod: Obj, container: str) -> str:
    """The container a log or exec request addresses (upstream's ``validateContainer``): the one named,
    which must exist (init and ephemeral containers count), or the pod's only container."""
    spec = pod.get("spec") or {}
    name = str((pod.get("metadata") or {}).get("name", ""))
    every = [
        str(c.get("name", ""))
        for part in ("initContainers", "containers", "ephemeralContainers")
        for c in spec.get(part) or []
    ]
    if container:
        if container not in every:
            raise errors.pod_container_invalid(container, name)
        return container
    regular = [str(c.get("name", "")) for c in spec.get("containers") or []]
    if len(regular) != 1:
        raise errors.pod_container_required(name, every if regular else [])
    return regular[0]


class Reviews:
    def __init__(self, server: APIServer) -> None:
        self.server = server
        self._legacy_key: tuple[bytes, ec.EllipticCurvePublicKey | None] | None = None
        """The cluster CA's public key, which verifies legacy Secret-based tokens (kept per certificate)."""
        self.kubelets = KubeletClient(server)
        handlers = {
            "selfsubjectaccessreviews": self.self_subject_access_review,
            "subjectaccessreviews": self.subject_access_review,
            "localsubjectaccessreviews": self.local_subject_access_review,
            "selfsubjectrulesreviews": self.self_subject_rules_review,
            "selfsubjectreviews": self.self_subject_review,
            "tokenreviews": self.token_review,
        }
        for rtype in server.registry:
            if rtype.resource in handlers and not rtype.stored:
                rtype.create_handler = self._into_schema(rtype, handlers[rtype.resource])
        server.token_authenticators.append(self)
        for path in (satokens.OPENID_CONFIGURATION, satokens.JWKS):
            server.extra_routes[path] = server.extra_routes[path + "/"] = self._issuer_discovery

    def _into_schema(self, rtype: ResourceType, handler: CreateHandler) -> CreateHandler:
        definition = self.server.schemas.definition_name(rtype)

        async def decoded(ctx: RequestContext, obj: Obj) -> Obj:
            decode_into_schema(ctx, obj, definition, rtype.kind, rtype.version)
            return await handler(ctx, obj)

        return decoded

    def subresource_handler(self, rtype: ResourceType, subresource: str) -> SubresourceHandler | None:
        if rtype.resource == "serviceaccounts" and not rtype.group and subresource == "token":
            return self.token_request
        if rtype.resource == "pods" and not rtype.group and subresource == "log":
            return self.server_log_handler
        if rtype.resource == "pods" and not rtype.group and subresource in POD_STREAMS:
            return self.pod_stream_handler
        return None

    async def server_log_handler(
        self, request: web.Request, ctx: RequestContext, rtype: ResourceType, info: RequestInfo
    ) -> web.StreamResponse:
        """The pod's log from its node's kubelet (``vplane.apiserver.kubeletclient``); a pod not scheduled
        yet has no log location, which is 204 No Content, so kubectl prints nothing. An add-on may serve
        logs itself through ``extra_routes["pods/log"]``."""
        handler = self.server.extra_routes.get("pods/log")
        if handler is not None:
            return await handler(request, ctx)
        _, pod = self.server.objects.must_get(rtype, info.namespace, info.name)
        container = pod_container(pod, request.query.get("container", ""))
        return await self.kubelets.pod_logs(request, ctx, rtype, info, container, pod)

    async def pod_stream_handler(
        self, request: web.Request, ctx: RequestContext, rtype: ResourceType, info: RequestInfo
    ) -> web.StreamResponse:
        """exec, attach, port-forward: relayed to the pod's kubelet (``vplane.apiserver.kubeletclient``);
        an add-on may serve them itself through ``extra_routes["pods/<sub>"]``.

        A WebSocket request is a GET, which the request's own authorization checked as ``get``: as
        kube-apiserver 1.35+ does (``AuthorizePodWebsocketUpgradeCreatePermission``), ``create`` on the
        subresource is required too, the verb a SPDY request (a POST) is checked for."""
        if request.method == "GET":
            attrs = Attributes(
                ctx.user,
                "create",
                True,
                info.namespace,
                info.group,
                info.version,
                info.resource,
                info.subresource,
                info.name,
                request.path,
            )
            if not await self.server.authorize(attrs):
                raise errors.forbidden(info.resource, info.group, info.name, forbidden_reason(attrs))
        handler = self.server.extra_routes.get(f"pods/{info.subresource}")
        if handler is not None:
            return await handler(request, ctx)
        _, pod = self.server.objects.must_get(rtype, info.namespace, info.name)
        container = ""
        if info.subresource != "portforward":
            container = pod_container(pod, request.query.get("container", ""))
        return await self.kubelets.pod_stream(request, info, container, pod)

    @staticmethod
    def _attrs(user: UserInfo, spec: Obj, namespace_override: str | None = None) -> Attributes:
        res = spec.get("resourceAttributes")
        if isinstance(res, dict):
            return Attributes(
                user,
                str(res.get("verb", "")),
                True,
                namespace_override if namespace_override is not None else str(res.get("namespace", "")),
                str(res.get("group", "")),
                str(res.get("version", "")),
                str(res.get("resource", "")),
                str(res.get("subresource", "")),
                str(res.get("name", "")),
            )
        non = spec.get("nonResourceAttributes")
        if isinstance(non, dict):
            return Attributes(user, str(non.get("verb", "")), False, path=str(non.get("path", "")))
        raise errors.invalid(
            "SubjectAccessReview",
            "",
            [
                errors.field_required(
                    "spec.resourceAttributes",
                    "exactly one of nonResourceAttributes or resourceAttributes must be specified",
                )
            ],
            "authorization.k8s.io",
        )

    def _decide(self, attrs: Attributes) -> Obj:
        decision = self.server.authorizer.authorize(attrs)
        status: Obj = {"allowed": decision.allowed}
        if decision.allowed and decision.reason == "RBAC":
            status["reason"] = "RBAC: allowed"
        return status

    async def self_subject_access_review(self, ctx: RequestContext, obj: Obj) -> Obj:
        spec = obj.get("spec") or {}
        obj["status"] = self._decide(self._attrs(ctx.user, spec))
        obj.setdefault("metadata", {}).setdefault("creationTimestamp", None)
        return _typed(obj, "authorization.k8s.io/v1", "SelfSubjectAccessReview")

    async def subject_access_review(self, ctx: RequestContext, obj: Obj) -> Obj:
        spec = obj.get("spec") or {}
        user = self._spec_user(spec)
        obj["status"] = self._decide(self._attrs(user, spec))
        return _typed(obj, "authorization.k8s.io/v1", "SubjectAccessReview")

    async def local_subject_access_review(self, ctx: RequestContext, obj: Obj) -> Obj:
        spec = obj.get("spec") or {}
        namespace = ctx.info.namespace
        res = spec.get("resourceAttributes") or {}
        if res.get("namespace") and res["namespace"] != namespace:
            raise errors.bad_request(f"spec.resourceAttributes.namespace must match namespace: {namespace}")
        user = self._spec_user(spec)
        obj["status"] = self._decide(self._attrs(user, spec, namespace_override=namespace))
        return _typed(obj, "authorization.k8s.io/v1", "LocalSubjectAccessReview")

    @staticmethod
    def _spec_user(spec: Obj) -> UserInfo:
        if not spec.get("user") and not spec.get("groups"):
            raise errors.invalid(
                "SubjectAccessReview",
                "",
                [errors.field_required("spec.user", "at least one of user or group must be specified")],
                "authorization.k8s.io",
            )
        extra = {k: tuple(v) for k, v in (spec.get("extra") or {}).items()}
        return UserInfo(
            str(spec.get("user", "")), str(spec.get("uid", "")), tuple(spec.get("groups") or ()), extra
        )

    async def self_subject_rules_review(self, ctx: RequestContext, obj: Obj) -> Obj:
        spec = obj.get("spec") or {}
        namespace = str(spec.get("namespace", ""))
        rules = self.server.authorizer.rules_for(ctx.user, namespace)
        if "system:masters" in ctx.user.groups:
            rules = [
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]},
            ]
        resource_rules: list[Obj] = []
        nonresource_rules: list[Obj] = []
        for rule in rules:
            if rule.get("nonResourceURLs"):
                nonresource_rules.append(
                    {"verbs": list(rule.get("verbs") or []), "nonResourceURLs": list(rule["nonResourceURLs"])}
                )
            else:
                entry: Obj = {
                    "verbs": list(rule.get("verbs") or []),
                    "apiGroups": list(rule.get("apiGroups") or []),
                    "resources": list(rule.get("resources") or []),
                }
                if rule.get("resourceNames"):
                    entry["resourceNames"] = list(rule["resourceNames"])
                resource_rules.append(entry)
        obj["status"] = {
            "resourceRules": resource_rules,
            "nonResourceRules": nonresource_rules,
            "incomplete": False,
        }
        return _typed(obj, "authorization.k8s.io/v1", "SelfSubjectRulesReview")

    async def self_subject_review(self, ctx: RequestContext, obj: Obj) -> Obj:
        obj["status"] = {"userInfo": ctx.user.to_dict()}
        obj.setdefault("metadata", {}).setdefault("creationTimestamp", None)
        return _typed(obj, "authentication.k8s.io/v1", "SelfSubjectReview")

    async def token_review(self, ctx: RequestContext, obj: Obj) -> Obj:
        spec = obj.get("spec") or {}
        token = str(spec.get("token", ""))
        user: UserInfo | None = None
        requested = [str(a) for a in spec.get("audiences") or []]
        wanted = requested or [satokens.ISSUER]  # upstream: the API server's own audiences by default
        answered: list[str] = []
        if token:
            subject = self.service_account_subject(token, wanted)
            if subject is not None:
                user = subject.user()
                answered = [a for a in wanted if a in subject.audiences]
            # Every other kind of token (static, add-on, legacy Secret tokens) is for this API server only,
            # as upstream wraps audience-agnostic authenticators: asked for other audiences, it is no answer.
            others = self.server.token_authenticators if user is None and satokens.ISSUER in wanted else ()
            for authenticator in others:
                try:
                    if authenticator is self:  # bound tokens were checked above, for these audiences
                        user = self._legacy_token_user(token) if token.count(".") == 2 else None
                    else:
                        user = await authenticator.authenticate_token(token)
                except errors.StatusError:
                    user = None
                if user is not None:
                    answered = [satokens.ISSUER]
                    break
        status: Obj = {"authenticated": user is not None, "user": user.to_dict() if user else {}}
        if answered:
            status["audiences"] = answered
        if user is None:
            status["error"] = "invalid bearer token"
        obj["status"] = status
        return _typed(obj, "authentication.k8s.io/v1", "TokenReview")

    # -- service account tokens ------------------------------------------------------------------

    async def token_request(
        self, request: web.Request, ctx: RequestContext, rtype: ResourceType, info: RequestInfo
    ) -> web.StreamResponse:
        if request.method != "POST":
            raise errors.method_not_allowed()
        _, account = self.server.objects.must_get(rtype, info.namespace, info.name)
        body = await self.server.read_body(request)
        value, duplicates = codec.decode_body(
            body,
            request.headers.get("Content-Type", ""),
            want_duplicates=ctx.field_validation in ("Strict", "Warn"),
            max_bytes=self.server.settings.max_body_bytes,
            kind="TokenRequest",
        )
        obj = codec.require_object(value)
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            spec = obj["spec"] = {}
        requested = satokens.requested_seconds(spec.get("expirationSeconds"))
        ctx.duplicate_fields = duplicates
        decode_into_schema(ctx, obj, TOKEN_REQUEST_DEFINITION, "TokenRequest", "v1")
        spec = obj.setdefault("spec", {})
        seconds, shortened = satokens.expiration(
            requested, self.server.settings.service_account_max_token_expiration_seconds
        )
        if shortened:
            ctx.warn(shortened)
        spec["expirationSeconds"] = seconds
        audiences = [str(a) for a in spec.get("audiences") or []] or [satokens.ISSUER]
        spec["audiences"] = audiences
        bound = self._bound_object(info.namespace, info.name, spec.get("boundObjectRef"))
        key = self._signing_key()
        now = self.server.clock()
        expires = now + seconds
        claims = satokens.claims_for(
            audiences=audiences,
            namespace=info.namespace,
            name=info.name,
            uid=str(account["metadata"].get("uid", "")),
            now=now,
            expires=expires,
            bound=bound,
            jti=str(uuid.uuid4()),
        )
        token = legacytokens.sign(key, claims, legacytokens.key_id(key.public_key()))
        obj["status"] = {"token": token, "expirationTimestamp": timeutil.rfc3339(expires)}
        obj.setdefault("metadata", {}).update({"name": info.name, "namespace": info.namespace})
        return object_response(
            _typed(obj, "authentication.k8s.io/v1", "TokenRequest"), response_format(request), 201, ctx
        )

    async def authenticate_token(self, token: str, audiences: list[str] | None = None) -> UserInfo | None:
        """A service-account token: bound (TokenRequest) for ``audiences`` (the API server's own by
        default), or legacy (Secret-based, audience-free as upstream's)."""
        if token.count(".") != 2:
            return None
        subject = self.service_account_subject(token, audiences or [satokens.ISSUER])
        if subject is not None:
            return subject.user()
        return self._legacy_token_user(token)

    def service_account_subject(self, token: str, audiences: list[str]) -> satokens.Subject | None:
        key = self._public_key()
        claims = legacytokens.signed_claims(token, key) if key is not None else None
        if claims is None:
            return None
        subject = satokens.subject_of(claims, self.server.clock(), audiences)
        live = (
            self._live_account(subject.namespace, subject.name, satokens.LEEWAY_SECONDS) if subject else None
        )
        if subject is None or live != subject.uid:
            return None
        if (
            subject.bound is not None
            and self._live_uid(subject.namespace, subject.bound) != subject.bound.uid
        ):
            return None  # the pod, secret or node it was bound to is gone (or was created again)
        return subject

    async def _issuer_discovery(self, request: web.Request, ctx: RequestContext) -> web.StreamResponse:
        """Service account issuer discovery (OIDC): where the keys are, and the keys, so others can check
        this cluster's tokens (upstream's ``/.well-known/openid-configuration`` and ``/openid/v1/jwks``)."""
        if request.method not in ("GET", "HEAD"):
            raise errors.method_not_allowed()
        key = self._public_key()
        if key is None:
            raise errors.not_found_path()
        if request.path.rstrip("/") == satokens.JWKS:
            body, kind = {"keys": [legacytokens.jwk(key)]}, "application/jwk-set+json"
        else:
            body, kind = satokens.openid_configuration(self._jwks_uri()), "application/json"
        return web.Response(
            body=json.dumps(body).encode(),
            headers={"Content-Type": kind, "Cache-Control": "public, max-age=3600"},
        )

    def _jwks_uri(self) -> str:
        settings = self.server.settings
        if settings.service_account_jwks_uri:
            return settings.service_account_jwks_uri
        host = advertise_address(settings.advertise_address, settings.listen_host)
        return f"https://{f'[{host}]' if ':' in host else host}:{self.server.port}{satokens.JWKS}"

    def _signing_key(self) -> ec.EllipticCurvePrivateKey:
        ca = self.server.ca
        if ca is None:
            raise errors.internal_error("no service-account signing key")
        return legacytokens.load_signing_key(ca.key_pem)

    def _public_key(self) -> ec.EllipticCurvePublicKey | None:
        ca = self.server.ca
        if ca is None:
            return None
        if self._legacy_key is None or self._legacy_key[0] != ca.cert_pem:
            self._legacy_key = (ca.cert_pem, legacytokens.public_key_of_certificate(ca.cert_pem))
        return self._legacy_key[1]

    def _bound_object(self, namespace: str, account: str, ref: object) -> satokens.Bound | None:
        """TokenRequest's ``boundObjectRef``, checked as upstream checks it: a Pod, Secret or Node that
        exists (NotFound otherwise), with the UID given if one is, and a pod must run as this account."""
        if not isinstance(ref, dict) or not ref:
            return None
        kind, name, uid = str(ref.get("kind", "")), str(ref.get("name", "")), str(ref.get("uid", ""))
        group, _, version = str(ref.get("apiVersion", "")).rpartition("/")
        if group or kind not in satokens.BOUND_KINDS:  # a core Pod, Secret or Node only, as upstream
            raise errors.bad_request(f"cannot bind token to object of type {group}/{version}, Kind={kind}")
        resource = {"Pod": "pods", "Secret": "secrets", "Node": "nodes"}[kind]
        rtype = self.server.registry.get("", "v1", resource)
        found = self.server.objects.get(rtype, "" if kind == "Node" else namespace, name) if rtype else None
        if found is None:
            raise errors.not_found(resource, name)
        actual = str(found["metadata"].get("uid", ""))
        if uid and uid != actual:
            raise errors.conflict(
                kind,  # upstream names the kind here, not the resource
                name,
                reason=f"the UID in the bound object reference ({uid}) does not match the UID in record. "
                "The object might have been deleted and then recreated",
            )
        if kind == "Pod" and (found.get("spec") or {}).get("serviceAccountName", "default") != account:
            raise errors.bad_request(
                f'cannot bind token for serviceaccount "{account}" to pod running with different '
                "serviceaccount name."
            )
        return satokens.Bound(kind, name, actual)

    def _live_uid(self, namespace: str, bound: satokens.Bound) -> str | None:
        resource = {"Pod": "pods", "Secret": "secrets", "Node": "nodes"}[bound.kind]
        rtype = self.server.registry.get("", "v1", resource)
        found = (
            self.server.objects.get(rtype, "" if bound.kind == "Node" else namespace, bound.name)
            if rtype is not None
            else None
        )
        if found is None:
            return None
        if self._deleted_since(found, satokens.LEEWAY_SECONDS):
            return (
                None  # upstream keeps a terminating object's tokens working until a minute past its deadline
            )
        return str(found["metadata"].get("uid", ""))

    def _deleted_since(self, obj: Obj, seconds: float) -> bool:
        return satokens.deleted_since(obj["metadata"], self.server.clock(), seconds)

    def _legacy_token_user(self, token: str) -> UserInfo | None:
        """A legacy Secret-based token (``legacytokens``): signed with the cluster CA's key, held by its
        Secret still, and its account still there with the same UID (upstream's legacy validator)."""
        key = self._public_key()
        claims = legacytokens.verify(token, key) if key is not None else None
        if claims is None:
            return None
        namespace = claims[legacytokens.NAMESPACE_CLAIM]
        account = claims[legacytokens.ACCOUNT_NAME_CLAIM]
        uid = claims[legacytokens.ACCOUNT_UID_CLAIM]
        secrets_type = self.server.registry.get("", "v1", "secrets")
        secret = (
            self.server.objects.get(secrets_type, namespace, claims[legacytokens.SECRET_NAME_CLAIM])
            if secrets_type is not None
            else None
        )
        if secret is None or secret.get("metadata", {}).get("deletionTimestamp"):
            return None
        stored = (secret.get("data") or {}).get("token")
        try:
            held = base64.b64decode(stored, validate=True).decode() if isinstance(stored, str) else None
        except (ValueError, UnicodeDecodeError):
            held = None
        if held is None or not hmac.compare_digest(held, token):
            return None
        if self._live_account(namespace, account, 0) != uid:  # legacy: invalid once deletion starts
            return None
        return UserInfo(
            f"system:serviceaccount:{namespace}:{account}",
            uid,
            ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
        )

    def _live_account(self, namespace: str, name: str, grace: float) -> str | None:
        """The account's UID while it exists and is not deleted (a bound token keeps ``grace`` seconds past
        its deletion deadline, a legacy token none: upstream's ``claims.go`` and ``legacy.go``)."""
        rtype = self.server.registry.get("", "v1", "serviceaccounts")
        account = self.server.objects.get(rtype, namespace, name) if rtype is not None else None
        if account is None or self._deleted_since(account, grace):
            return None
        return str(account["metadata"].get("uid", ""))


def decode_into_schema(ctx: RequestContext, obj: Obj, definition: str, kind: str, version: str) -> None:
    """Make ``obj`` what decoding it into upstream's typed struct would: unknown fields dropped (refused
    under ``fieldValidation=Strict``, warned about under ``Warn``) and values of the wrong type refused
    with 400, so a review answers with its own fields only and its handler reads the types it expects."""
    builtin = openapi.load_builtin()
    schema = builtin.schemas[definition]
    unknown = [p.removeprefix(".") for p in structural.prune(obj, schema, components=builtin.schemas)]
    duplicates = ctx.duplicate_fields
    if (unknown or duplicates) and ctx.field_validation != "Ignore":
        if ctx.field_validation == "Strict":
            raise structural.strict_decoding_error(kind, version, unknown, duplicates)
        for text in structural.strict_errors(unknown, duplicates):
            ctx.warn(text)
    # Only types: Go's decoder checks those, while ``required`` and formats are left to validation.
    causes = [
        c
        for c in structural.validate(obj, schema, components=builtin.schemas)
        if c.get("reason") == "FieldValueTypeInvalid"
    ]
    if causes:
        raise errors.bad_request(
            f'{kind} in version "{version}" cannot be handled as a {kind}: '
            + ", ".join(f"{c.get('field', '')}: {c.get('message', '')}" for c in causes)
        )


TOKEN_REQUEST_DEFINITION = "io.k8s.api.authentication.v1.TokenRequest"


def _typed(obj: Obj, api_version: str, kind: str) -> Obj:
    obj["apiVersion"] = api_version
    obj["kind"] = kind
    return obj
