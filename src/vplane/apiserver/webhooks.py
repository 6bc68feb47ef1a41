"""Admission webhooks: the ``Mutating/ValidatingWebhookConfiguration`` objects stored here, called.

Decisions (matching, the review, the answer, patches, messages) are :mod:`vplane.kube.admissionreview`'s;
this module keeps the configurations in memory (loaded from the cache once admission first runs, then kept
current from watch events, like the ValidatingAdmissionPolicy plug-in), resolves Service references from
the cache, and posts the reviews with aiohttp: one client session per CA bundle, kept alive, closed when
the server stops.

With nothing configured the plug-ins cost a property read per write (:attr:`MutatingWebhooks.active`) and
an early return.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import ssl
import urllib.parse
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson
import structlog

from vplane.apiserver.admission import AdmissionRequest, Reinvocation
from vplane.apiserver.aggregation import BackendRefused, CheckedResolver, refusal_of
from vplane.apiserver.mutatingpolicy import MutatingAdmissionPolicyPlugin
from vplane.apiserver.vap import (
    ValidatingAdmissionPolicyPlugin,
    authorizer_for,
    build_policy_request,
    namespace_object,
)
from vplane.apiserver.watch import WatchEvent
from vplane.kube import admissionpolicy, admissionreview, errors
from vplane.kube.admissionreview import CallError, Invocation, Webhook
from vplane.kube.objects import Obj

if TYPE_CHECKING:
    from vplane.apiserver.server import APIServer

log = structlog.get_logger("vplane.apiserver.webhooks")

USER_AGENT = "kube-apiserver-admission"


class WebhookClients:
    """HTTP clients for webhooks: one aiohttp session (and connection pool) per CA bundle.

    Where the server restricts backends (tenant clusters: the tenant's cluster-admin writes the webhook
    configurations but has no rights on the platform), webhook addresses obey the same policy as
    aggregation backends: every resolved address is checked and only checked addresses are dialled, so
    a webhook cannot make the tenant process POST to loopback, link-local or platform addresses."""

    def __init__(self, resolver: Callable[[], CheckedResolver | None] = lambda: None) -> None:
        self._sessions: dict[bytes, aiohttp.ClientSession] = {}
        self._resolver = resolver

    def check_literal(self, url: str) -> None:
        """IP-literal hosts are never resolved, so they are checked here (``BackendRefused``)."""
        resolver = self._resolver()
        if resolver is None:
            return
        parsed = urllib.parse.urlsplit(url)
        host = (parsed.hostname or "").strip("[]")
        try:
            literal = ipaddress.ip_address(host)
        except ValueError:
            return
        port = parsed.port or 443
        if resolver.policy.exempt(host, port):  # an address the operator allowed
            return
        resolver.check(host, port, [str(literal)])

    def session(self, ca_bundle: bytes) -> aiohttp.ClientSession:
        session = self._sessions.get(ca_bundle)
        if session is None or session.closed:
            ctx = (
                ssl.create_default_context(cadata=ca_bundle.decode())
                if ca_bundle
                else ssl.create_default_context()
            )
            resolver = self._resolver()
            connector = (
                aiohttp.TCPConnector(ssl=ctx, resolver=resolver, use_dns_cache=False)
                if resolver is not None
                else aiohttp.TCPConnector(ssl=ctx)
            )
            session = aiohttp.ClientSession(connector=connector, auto_decompress=True)
            self._sessions[ca_bundle] = session
        return session

    async def close(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            await session.close()


class _Configurations:
    """The stored configurations of one kind, compiled into the webhooks they declare."""

    def __init__(self, server: APIServer, resource: str, *, mutating: bool) -> None:
        self.server = server
        self.resource = resource
        self.mutating = mutating
        self.prefix = f"/{admissionreview.GROUP}/{resource}/"
        self.configs: dict[str, Obj] = {}
        self.hooks: list[Webhook] = []
        self._synced = False
        server.hub.on_event.append(self._on_event)

    def ensure_synced(self) -> None:
        """Load from the cache the first time admission runs (it has started by then)."""
        if self._synced:
            return
        rtype = self.server.registry.get(admissionreview.GROUP, "v1", self.resource)
        if rtype is not None:
            self.configs = {o["metadata"]["name"]: o for o in self.server.objects.list(rtype)}
            self._compile()
        self._synced = True

    def _on_event(self, wevent: WatchEvent) -> None:
        key = wevent.event.kv.key
        if not key.startswith(self.prefix):
            return
        name = key[len(self.prefix) :]
        if wevent.event.type == "DELETE":
            self.configs.pop(name, None)
        else:
            self.configs[name] = wevent.obj()
        self._compile()

    def _compile(self) -> None:
        self.hooks = admissionreview.compile_configurations(self.configs.values(), mutating=self.mutating)


class _Caller:
    """What both plug-ins share: the request as webhooks see it, and one call."""

    def __init__(self, server: APIServer, clients: WebhookClients, configs: _Configurations) -> None:
        self.server = server
        self.clients = clients
        self.configs = configs

    def review_request(self, request: AdmissionRequest) -> admissionpolicy.Request:
        """Upstream's attributes: a namespace's own create has no namespace, its other requests its name."""
        preq = build_policy_request(self.server, request)
        rtype = request.rtype
        if rtype.resource == "namespaces" and not rtype.group and request.operation == "CREATE":
            preq = dataclasses.replace(preq, namespace="")
        return preq

    def namespace_for(self, preq: admissionpolicy.Request) -> Obj | None:
        is_namespace = preq.resource == "namespaces" and not preq.group
        return namespace_object(self.server, preq.name if is_namespace else preq.namespace)

    def invocations(
        self, hooks: Sequence[Webhook], preq: admissionpolicy.Request, request: AdmissionRequest
    ) -> list[Invocation]:
        namespace = self.namespace_for(preq)
        authz = authorizer_for(self.server, request.ctx.user)
        found: list[Invocation] = []
        for hook in hooks:
            invocation = admissionreview.should_call(hook, preq, namespace, authz)
            if invocation is not None:
                found.append(invocation)
        return found

    async def call(
        self, invocation: Invocation, preq: admissionpolicy.Request, request: AdmissionRequest
    ) -> admissionreview.Response | None:
        """Post the review and check the answer; None when the call failed and the webhook ignores failures.

        Denials and refusals (dry run) are raised as :class:`~vplane.kube.errors.StatusError`.
        """
        hook = invocation.webhook
        if request.ctx.dry_run:
            problem = admissionreview.check_dry_run(hook)
            if problem is not None:
                return self._failed(hook, problem)
        version = admissionreview.review_version(hook)
        if version is None:
            return self._failed(
                hook,
                CallError(
                    hook.name,
                    "could not create admission objects: webhook does not accept known AdmissionReview "
                    "versions (v1, v1beta1)",
                ),
            )
        uid = str(uuid.uuid4())
        review = admissionreview.build_review(invocation, preq, version, uid)
        try:
            document = await self._post(hook, review)
            response = admissionreview.verify_response(hook, version, uid, document)
        except CallError as exc:
            return self._failed(hook, exc)
        for warning in response.warnings:
            request.ctx.warn(warning)
        if not response.allowed:
            raise admissionreview.denial(hook.name, response.status)
        return response

    @staticmethod
    def _failed(hook: Webhook, exc: CallError) -> None:
        if hook.ignores_failures:
            log.warning("failed calling webhook, failing open", webhook=hook.name, error=exc.reason)
            return None
        log.warning("failed calling webhook, failing closed", webhook=hook.name, error=exc.reason)
        raise errors.internal_error(exc.message)

    async def _post(self, hook: Webhook, review: Obj) -> Any:
        client = hook.client
        url = client.request_url(hook.timeout_seconds)
        headers = {"Content-Type": "application/json", "Accept": "application/json", "User-Agent": USER_AGENT}
        target = url
        server_hostname: str | None = None
        if client.is_service:
            try:
                host, port = self._resolve(hook)
            except admissionreview.ResolveError as exc:
                raise CallError(hook.name, admissionreview.post_failure(url, str(exc))) from None
            authority = f"[{host}]" if ":" in host else host
            target = url.replace(
                f"https://{client.server_name}:{client.service_port}", f"https://{authority}:{port}", 1
            )
            headers["Host"] = f"{client.server_name}:{client.service_port}"
            server_hostname = client.server_name
        try:
            self.clients.check_literal(target)
        except BackendRefused as exc:
            raise CallError(hook.name, admissionreview.post_failure(url, str(exc))) from None
        try:
            session = self.clients.session(client.ca_bundle)
        except (ssl.SSLError, ValueError) as exc:
            raise CallError(
                hook.name, f"could not get REST client: unable to load root certificates: {exc}"
            ) from None
        try:
            async with session.post(
                target,
                data=orjson.dumps(review),
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=hook.timeout_seconds),
                server_hostname=server_hostname,
                allow_redirects=False,
            ) as resp:
                body = await resp.read()
                status, content_type = resp.status, resp.headers.get("Content-Type", "")
        except TimeoutError:
            raise CallError(
                hook.name, admissionreview.post_failure(url, "context deadline exceeded")
            ) from None
        except (aiohttp.ClientError, OSError, ssl.SSLError) as exc:
            refusal = refusal_of(exc)
            detail = str(refusal) if refusal is not None else _describe(exc, target)
            raise CallError(hook.name, admissionreview.post_failure(url, detail)) from None
        return admissionreview.decode_response_body(hook, body, status, content_type)

    def _resolve(self, hook: Webhook) -> tuple[str, int]:
        client = hook.client
        services = self.server.registry.get("", "v1", "services")
        endpoints = self.server.registry.get("", "v1", "endpoints")
        ns, name = client.service_namespace, client.service_name
        service = self.server.objects.get(services, ns, name) if services is not None else None
        eps = self.server.objects.get(endpoints, ns, name) if endpoints is not None else None
        return admissionreview.resolve_service(service, eps, ns, name, client.service_port)


def _describe(exc: BaseException, target: str) -> str:
    """A transport failure in Go's words where it has a well-known one."""
    authority = target.partition("://")[2].split("/", 1)[0]
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        cert_error = exc.certificate_error
        code = getattr(cert_error, "verify_code", None)
        if code in (18, 19, 20, 21):  # self-signed, self-signed in chain, unknown issuer, unverifiable leaf
            return "tls: failed to verify certificate: x509: certificate signed by unknown authority"
        detail = getattr(cert_error, "verify_message", "") or str(cert_error)
        return f"tls: failed to verify certificate: x509: {detail}"
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return f"dial tcp: lookup {authority.rsplit(':', 1)[0]}: no such host"
    if isinstance(exc, aiohttp.ClientConnectorError):
        if isinstance(exc.os_error, ConnectionRefusedError):
            return f"dial tcp {authority}: connect: connection refused"
        return f"dial tcp {authority}: {exc.os_error.strerror or exc.os_error}"
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError)):
        return "EOF"
    return str(exc) or type(exc).__name__


class _WebhookReinvocation:
    """``webhookReinvokeContext``: what the mutating webhooks plug-in remembers between passes."""

    def __init__(self) -> None:
        self.last_output: Obj | None = None
        self.previously_invoked: set[str] = set()
        self.to_reinvoke: set[str] = set()

    def require_reinvoking_previously_invoked(self) -> None:
        self.to_reinvoke |= self.previously_invoked
        self.previously_invoked = set()


class MutatingWebhooks(_Caller):
    """Upstream's MutatingAdmissionWebhook plug-in: webhooks called one after the other, patches applied."""

    name = "MutatingAdmissionWebhook"

    @property
    def active(self) -> bool:
        self.configs.ensure_synced()
        return bool(self.configs.hooks)

    async def mutate(self, request: AdmissionRequest, reinvocation: Reinvocation) -> None:
        hooks = self.configs.hooks
        if not hooks:
            return
        preq = self.review_request(request)
        if admissionreview.is_exempt(preq):
            return
        state = reinvocation.state.setdefault(self.name, _WebhookReinvocation())
        assert isinstance(state, _WebhookReinvocation)
        if reinvocation.is_reinvoke and state.last_output != request.obj:
            state.require_reinvoking_previously_invoked()
        namespace = self.namespace_for(preq)
        authz = authorizer_for(self.server, request.ctx.user)
        try:
            for hook in hooks:
                preq = dataclasses.replace(preq, object=request.obj)
                invocation = admissionreview.should_call(hook, preq, namespace, authz)
                if invocation is None:
                    continue
                if reinvocation.is_reinvoke and hook.uid not in state.to_reinvoke:
                    continue
                if await self._call_one(invocation, preq, request):
                    state.require_reinvoking_previously_invoked()
                    reinvocation.should_reinvoke = True
                if hook.reinvocation_policy == "IfNeeded":
                    state.previously_invoked.add(hook.uid)
        finally:
            state.last_output = request.obj

    async def _call_one(
        self, invocation: Invocation, preq: admissionpolicy.Request, request: AdmissionRequest
    ) -> bool:
        """Call one webhook and apply its patch; True when the object changed."""
        response = await self.call(invocation, preq, request)
        if response is None or not response.patch:
            return False
        hook = invocation.webhook
        current = request.obj
        if current is None:
            raise errors.internal_error(
                f'admission webhook "{hook.name}" attempted to modify the object, which is not supported for '
                "this operation"
            )
        api_version = current.get("apiVersion")
        seen = admissionreview.in_version(current, preq, invocation.version) or current
        try:
            patched = admissionreview.apply_patch(seen, response.patch)
        except admissionreview.PatchError as exc:
            raise errors.internal_error(str(exc)) from None
        if invocation.version != preq.version:
            patched["apiVersion"] = api_version
        if patched == current:
            return False
        request.obj = patched
        return True


class ValidatingWebhooks(_Caller):
    """Upstream's ValidatingAdmissionWebhook plug-in: matching webhooks called in parallel."""

    async def admit(self, request: AdmissionRequest) -> None:
        self.configs.ensure_synced()
        hooks = self.configs.hooks
        if not hooks:
            return
        preq = self.review_request(request)
        if admissionreview.is_exempt(preq):
            return
        invocations = self.invocations(hooks, preq, request)
        if not invocations:
            return
        results = await asyncio.gather(
            *(self.call(invocation, preq, request) for invocation in invocations), return_exceptions=True
        )
        for (
            result
        ) in results:  # the first refusal in configuration order wins (upstream: the first to arrive)
            if isinstance(result, BaseException):
                raise result


class Admission:
    """The admission plug-ins for dynamic configuration, in upstream's order, and their shared clients."""

    def __init__(self, server: APIServer) -> None:
        self.clients = WebhookClients(
            lambda: server.aggregator.resolver if server.aggregator.policy.restricted else None
        )
        self.mutating_policies = MutatingAdmissionPolicyPlugin(server)
        self.mutating = MutatingWebhooks(
            server,
            self.clients,
            _Configurations(server, admissionreview.MUTATING_CONFIGURATIONS, mutating=True),
        )
        self.validating_policies = ValidatingAdmissionPolicyPlugin(server)
        self.validating = ValidatingWebhooks(
            server,
            self.clients,
            _Configurations(server, admissionreview.VALIDATING_CONFIGURATIONS, mutating=False),
        )
        server.admission.add_mutating(self.mutating_policies)
        server.admission.add_mutating(self.mutating)
        server.admission.add(self.validating_policies)
        server.admission.add(self.validating)

    async def close(self) -> None:
        await self.clients.close()


def install(server: APIServer) -> Admission:
    """Add MutatingAdmissionPolicy, mutating webhooks, ValidatingAdmissionPolicy and validating webhooks
    to ``server``'s admission chain (after what it already has)."""
    return Admission(server)
