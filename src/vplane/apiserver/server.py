"""The API server process: TLS, authentication, authorization, routing, and the in-process controllers.

One aiohttp catch-all route feeds :meth:`APIServer.handle`, which authenticates, applies impersonation,
authorizes and dispatches. Everything a later component adds (aggregation, admission policies, the
platform's kinds) plugs in through :attr:`APIServer.registry`, :attr:`APIServer.admission`,
:attr:`APIServer.token_authenticators` and :attr:`APIServer.extra_routes` without touching this file.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import orjson
import structlog
from aiohttp import web

from vplane.apiserver import authn, builtin, codec, discovery, health, policy, timeutil, webhooks
from vplane.apiserver.admission import Admission, NamespaceLifecycle
from vplane.apiserver.aggregation import Aggregator
from vplane.apiserver.authz import Attributes, RBACAuthorizer, RBACIndex, forbidden_reason
from vplane.apiserver.context import ANONYMOUS, SYSTEM, RequestContext, UserInfo
from vplane.apiserver.controllers import CRDController, GarbageCollector, NamespaceController
from vplane.apiserver.delegation import Delegate, Kubeconfig
from vplane.apiserver.escalation import EscalationPrevention
from vplane.apiserver.handlers import ResourceHandlers, json_response
from vplane.apiserver.kinds.kubernetesservice import KubernetesService
from vplane.apiserver.kinds.quota import ResourceQuotaAdmission
from vplane.apiserver.kinds.serviceips import ServiceAllocator
from vplane.apiserver.objects import ObjectStore
from vplane.apiserver.openapi import OpenAPI
from vplane.apiserver.registry import Registry, ResourceType
from vplane.apiserver.requestmetrics import CONTENT_TYPE as METRICS_TYPE
from vplane.apiserver.requestmetrics import RequestMetrics
from vplane.apiserver.reviews import Reviews, SubresourceHandler
from vplane.apiserver.schemas import SchemaSource
from vplane.apiserver.settings import APIServerSettings
from vplane.apiserver.watch import WatchEvent, WatchHub
from vplane.kube import errors, requestinfo, services, tables
from vplane.kube.objects import Obj
from vplane.storage.cache import Cache
from vplane.storage.etcd import EtcdStore
from vplane.storage.etcd import ssl_context as etcd_ssl_context
from vplane.storage.interface import Store
from vplane.storage.sqlite import SQLiteStore
from vplane.support import httpserver, kubeconfig, requestheader, tls
from vplane.support.tasks import cancel_and_wait

log = structlog.get_logger("vplane.apiserver")

PUBLIC_PATHS = frozenset({"/healthz", "/livez", "/readyz", "/version", "/version/"})
Route = Callable[[web.Request, RequestContext], Awaitable[web.StreamResponse]]
Interceptor = Callable[[web.Request, RequestContext], Awaitable[web.StreamResponse | None]]


class APIServer:
    def __init__(
        self,
        settings: APIServerSettings,
        *,
        store: Store | None = None,
        clock: timeutil.Clock = timeutil.wall_clock,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.data_dir = settings.data_dir
        self.store: Store = store or self._store(settings)
        self.cache = Cache(
            self.store, window=settings.history_window, write_wait=settings.write_cache_wait_seconds
        )
        self.registry = Registry()
        builtin.install(self.registry, clock)
        self.hub = WatchHub()
        self.admission = Admission()
        self.schemas = SchemaSource(self.registry)
        self.objects = ObjectStore(
            self.cache, self.admission, self.schemas, clock, max_object_bytes=settings.max_object_bytes
        )
        self.rbac = RBACIndex()
        self.authorizer = RBACAuthorizer(self.rbac)
        self.static_tokens = authn.StaticTokens(self.data_dir / "auth" / "tokens.json")
        self.token_authenticators: list[authn.TokenAuthenticator] = [self.static_tokens]
        self.discovery = discovery.Discovery(self.registry)
        self.openapi = OpenAPI(self.registry, self.schemas)
        self.handlers = ResourceHandlers(self)
        self.extra_routes: dict[str, Route] = {"/metrics": self._metrics}
        """Non-resource paths served by add-ons (exact path, or a prefix ending in ``/``)."""
        self.reviews = Reviews(self)
        self.namespaces = NamespaceController(self)
        self.crds = CRDController(self)
        self.gc = GarbageCollector(self)
        self.request_metrics = RequestMetrics()
        self.resource_interceptors: list[Interceptor] = []
        """Hooks that may answer a resource request before the local registry (API aggregation)."""
        self.public_routes: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] = {}
        """Paths served before authentication (the mesh's DERP probe and its own key-authenticated session);
        a key ending in ``/`` matches every path under it."""
        self.path_prefixes: list[str] = []
        """Prefixes stripped before routing (the platform serves its API under /kubernetes/management too)."""
        self.subresource_handlers: dict[tuple[str, str, str], SubresourceHandler] = {}
        """Custom subresources by (group, resource, subresource), e.g. the platform's ``accesskey``."""
        self.nonresource_interceptors: list[Interceptor] = []
        """The same for non-resource paths (aggregated discovery documents)."""
        self.delegate: Delegate | None = (
            Delegate(Kubeconfig.load(settings.delegate_kubeconfig)) if settings.delegate_kubeconfig else None
        )
        if self.delegate is not None:
            self.token_authenticators.append(self.delegate)
        self.admission.add(NamespaceLifecycle(self.namespaces))
        self.admission.add(EscalationPrevention(self.authorizer, self.authorize))
        builtin.attach(self)
        self.service_allocator = ServiceAllocator(self)
        self.service_allocator.attach()
        self.kubernetes_service = KubernetesService(self, self.service_allocator)
        self.dynamic_admission = webhooks.install(self)
        self.admission.add(ResourceQuotaAdmission(self))  # last, as upstream: refused writes are not charged
        self._runner: web.ServerRunner | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.ca: tls.CertPair | None = None
        self.front_proxy_ca: tls.CertPair | None = None
        self.front_proxy_client_files: tuple[Path, Path] = (Path(), Path())
        self.requestheader = requestheader.RequestHeaderConfig(())
        self.client_ca_issuer: requestheader.Issuer = ()
        """Only certificates this CA issued authenticate users by their subject."""
        self.requestheader_ca_pem = b""
        self.port = settings.listen_port
        self.ready = False
        """Caches filled and loops started (``informer-sync``)."""
        self.stopping = False
        """stop() has begun (``shutdown`` fails, so load balancers take this server out first)."""
        self._checks: dict[str, health.Check] = {
            "ping": lambda: None,
            "log": lambda: None,
            "etcd": lambda: self.store.problem(),
            "etcd-readiness": lambda: self.store.problem(),
            "informer-sync": lambda: (
                None if self.ready or self.stopping else "the server has not finished starting"
            ),
            "shutdown": lambda: "process is shutting down" if self.stopping else None,
        }
        self._pending_writes = 0
        self._authenticating = 0
        """Requests waiting on a token authenticator that may ask another server."""
        self._anonymous = 0
        """Anonymous requests in flight."""
        self.connections = httpserver.ConnectionSlots(settings.max_connections)
        self.aggregator = Aggregator(self)

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        ssl_ctx = await asyncio.to_thread(self._tls)
        await asyncio.to_thread(self.static_tokens.load)
        admin_token = await asyncio.to_thread(
            self.static_tokens.ensure, self.settings.admin_user, ("system:masters",)
        )
        await self.cache.start()
        self.cache.add_listener(self.hub)
        self.hub.on_event.append(self._on_event)
        self._load_rbac()
        self.crds.load_existing()
        self.aggregator.load()
        await self._bootstrap()
        await self.service_allocator.repair()  # every allocated address and port has its record
        # The low-level server: every path goes to one handler, so aiohttp's router and application
        # machinery would only add per-request cost.
        limit = self.settings.max_body_bytes + 1024

        def make_request(
            message: Any, payload: Any, protocol: Any, writer: Any, task: Any
        ) -> web.BaseRequest:
            return web.Request(
                message, payload, protocol, writer, task, asyncio.get_running_loop(), client_max_size=limit
            )

        settings = self.settings
        limits = httpserver.ConnectionLimits(
            header_timeout=settings.request_header_timeout_seconds,
            body_grace=settings.request_body_grace_seconds,
            body_min_rate=settings.request_body_min_bytes_per_second,
            send_timeout=settings.response_send_timeout_seconds,
        )
        server = httpserver.GuardedServer(
            cast(httpserver.Handler, self.handle),  # make_request makes every request a web.Request
            limits=limits,
            request_factory=make_request,
            access_log=None,
            keepalive_timeout=settings.idle_timeout_seconds,
        )
        runner = web.ServerRunner(
            server, handle_signals=False, shutdown_timeout=settings.shutdown_grace_seconds
        )
        self._runner = runner
        await runner.setup()
        self.connections = httpserver.ConnectionSlots(self._connection_limit())
        site = httpserver.GuardedSite(
            runner,
            settings.listen_host,
            settings.listen_port,
            ssl_context=ssl_ctx,
            handshake_timeout=settings.request_header_timeout_seconds,
            slots=self.connections,
        )
        await site.start()
        self.port = site.port
        await self.kubernetes_service.start()
        if not settings.shared_store and settings.endpoint_reconciler_type == "lease":
            # Replicas on a shared store leave the endpoints to the one their process elects.
            await self.kubernetes_service.sync_endpoints()
            self._tasks.append(asyncio.create_task(self.kubernetes_service.run()))
        self._tasks.append(asyncio.create_task(self.service_allocator.repair_forever()))
        self._write_kubeconfig(admin_token)
        self._tasks.append(asyncio.create_task(self._compactor()))
        self._tasks.extend(self.gc.start())
        self._tasks.extend(self.namespaces.start())
        self._tasks.append(asyncio.create_task(self.aggregator.run()))
        self.ready = True
        log.info("API server listening", url=self.url, kubeconfig=str(self.kubeconfig_path))

    async def stop(self) -> None:
        self.ready = False
        self.stopping = True
        self.hub.close_all()
        await cancel_and_wait(self._tasks)
        if self._runner is not None:
            await self._runner.cleanup()
        await self.aggregator.close()
        await self.reviews.kubelets.close()
        await self.dynamic_admission.close()
        if self.delegate is not None:
            await self.delegate.close()
        await self.store.close()

    def _connection_limit(self) -> int:
        """``max_connections``, kept to half the descriptors this process may open (after raising its
        soft limit to the hard one): the rest are for the store, logs and outgoing connections."""
        descriptors = httpserver.raise_open_file_limit()
        limit = min(self.settings.max_connections, max(1, descriptors // 2))
        if limit < self.settings.max_connections:
            log.warning(
                "connection limit lowered to half the descriptor limit",
                max_connections=self.settings.max_connections,
                descriptors=descriptors,
                limit=limit,
            )
        return limit

    @property
    def web_server(self) -> web.Server:
        """The aiohttp protocol factory serving this API, for other listeners (the mesh's direct and
        relayed paths serve the same API)."""
        assert self._runner is not None and self._runner.server is not None
        return self._runner.server

    @property
    def url(self) -> str:
        host = self.settings.listen_host
        if ":" in host:
            host = f"[{host}]"
        return f"https://{host}:{self.port}"

    @property
    def kubeconfig_path(self) -> Path:
        return self.data_dir / self.settings.kubeconfig_name

    def _tls(self) -> ssl.SSLContext:
        pki = self.data_dir / "pki"
        self.ca = _load_or_make_ca(pki / "ca.crt", pki / "ca.key", "vplane-ca")
        self.front_proxy_ca = _load_or_make_ca(
            pki / "front-proxy-ca.crt", pki / "front-proxy-ca.key", "vplane-front-proxy-ca"
        )
        fp_crt, fp_key = pki / "front-proxy-client.crt", pki / "front-proxy-client.key"
        if not fp_crt.exists():
            tls.issue_client(self.front_proxy_ca, "front-proxy-client").write(fp_crt, fp_key)
        self.front_proxy_client_files = (fp_crt, fp_key)
        base = self.settings.serving_cert_name
        srv_crt, srv_key = pki / f"{base}.crt", pki / f"{base}.key"
        names_file = pki / f"{base}.names"
        # In-cluster clients reach this server through the `kubernetes` Service too, as upstream's do.
        server_names = list(self.settings.server_names)
        server_names += [
            n
            for n in services.serving_names(self.service_allocator.ip_range.service_ip)
            if n not in server_names
        ]
        names = ",".join(server_names)
        if not srv_crt.exists() or not names_file.exists() or names_file.read_text() != names:
            tls.issue_serving(self.ca, server_names).write(srv_crt, srv_key)
            names_file.write_text(names)
        requestheader_ca = (
            self.settings.requestheader_client_ca_file.read_bytes()
            if self.settings.requestheader_client_ca_file is not None
            else self.front_proxy_ca.cert_pem
        )
        self.requestheader = requestheader.RequestHeaderConfig(
            tls.ssl_subject(requestheader_ca), tuple(self.settings.requestheader_allowed_names)
        )
        self.requestheader_ca_pem = requestheader_ca
        self.client_ca_issuer = tls.ssl_subject(self.ca.cert_pem)
        ctx = tls.server_context(tls.CertPair.read(srv_crt, srv_key), srv_crt, srv_key, self.ca.cert_pem)
        ctx.load_verify_locations(cadata=requestheader_ca.decode())
        return ctx

    def _write_kubeconfig(self, token: str) -> None:
        assert self.ca is not None
        write_kubeconfig(self.kubeconfig_path, self.url, self.ca.cert_pem, token, "vplane")

    async def _bootstrap(self) -> None:
        ctx = self.system_context()
        assert self.ca is not None
        objects = policy.namespaces() + policy.cluster_roles() + policy.cluster_role_bindings()
        objects += policy.extension_authentication(
            self.ca.cert_pem.decode(),
            self.requestheader_ca_pem.decode(),
            self.settings.requestheader_allowed_names,
        )
        for obj in objects:
            group, _, version = obj["apiVersion"].rpartition("/")
            rtype = self.registry.for_kind(group, version, obj["kind"])
            assert rtype is not None
            namespace = obj["metadata"].get("namespace", "")
            current = self.objects.get(rtype, namespace, obj["metadata"]["name"])
            with contextlib.suppress(errors.StatusError):
                if current is None:
                    await self.objects.create(ctx, rtype, namespace, obj)
                elif "data" in obj and current.get("data") != obj["data"]:
                    await self.objects.guaranteed_update(
                        ctx, rtype, namespace, obj["metadata"]["name"], _replace_field("data", obj["data"])
                    )
                elif (
                    obj["kind"] == "ClusterRole"
                    and _auto_update(current)
                    and current.get("rules") != obj.get("rules")
                ):
                    # Bootstrap roles follow the release that serves them, as upstream reconciles its own
                    # (unless an administrator set rbac.authorization.kubernetes.io/autoupdate: "false").
                    await self.objects.guaranteed_update(
                        ctx,
                        rtype,
                        namespace,
                        obj["metadata"]["name"],
                        _replace_field("rules", obj.get("rules")),
                    )
        await builtin.bootstrap(self)

    async def _compactor(self) -> None:
        while True:
            await asyncio.sleep(self.settings.compact_interval_seconds)
            target = self.cache.revision - self.settings.history_window
            if target > self.store.compacted_revision:
                try:
                    await self.store.compact(target)
                except Exception:
                    log.exception("compaction failed")

    def system_context(self) -> RequestContext:
        return RequestContext(
            SYSTEM, requestinfo.RequestInfo(True, "", "create"), field_manager="vplane-apiserver"
        )

    # -- in-process consumers of events ----------------------------------------------------------

    def _load_rbac(self) -> None:
        for resource in ("roles", "clusterroles", "rolebindings", "clusterrolebindings"):
            for kv in self.cache.iter_prefix(f"/rbac.authorization.k8s.io/{resource}/"):
                obj = codec.decode_kv(kv)
                meta = obj["metadata"]
                self.rbac.put(resource, obj, meta.get("namespace", ""), meta["name"])

    def _on_event(self, wevent: WatchEvent) -> None:
        key = wevent.event.kv.key
        if key.startswith("/rbac.authorization.k8s.io/"):
            obj = wevent.obj()
            meta = obj["metadata"]
            resource = key.split("/")[2]
            self.rbac.put(
                resource,
                None if wevent.event.type == "DELETE" else obj,
                meta.get("namespace", ""),
                meta["name"],
            )
        elif key.startswith("/apiextensions.k8s.io/customresourcedefinitions/"):
            self.crds.on_event(wevent)
        self.gc.on_event(wevent)
        self.namespaces.on_event(wevent)

    # -- helpers for handlers --------------------------------------------------------------------

    async def read_body(self, request: web.Request) -> bytes:
        length = request.content_length
        limit = self.settings.max_body_bytes
        if length is not None and length > limit:
            raise errors.request_entity_too_large(f"Request entity too large: limit is {limit}")
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise errors.request_entity_too_large(f"Request entity too large: limit is {limit}") from None
        if len(body) > limit:
            raise errors.request_entity_too_large(f"Request entity too large: limit is {limit}")
        return body

    def table(
        self,
        rtype: ResourceType,
        objs: list[Obj],
        include_object: str,
        list_meta: Obj,
        with_columns: bool = True,
    ) -> Obj:
        return tables.build_table(
            rtype.kind,
            rtype.group,
            objs,
            include_object=include_object,
            now=self.clock(),
            printer_columns=rtype.printer_columns,
            with_columns=with_columns,
            list_meta=list_meta,
        )

    async def authorize(self, attrs: Attributes) -> bool:
        if self.authorizer.authorize(attrs).allowed:
            return True
        if self.delegate is not None:
            return await self.delegate.authorize(attrs)
        return False

    # -- request handling ------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._handle(request)
        except errors.StatusError as exc:
            return status_response(exc)
        except (ConnectionError, asyncio.CancelledError):
            raise  # the client went away (aiohttp drops the connection quietly)
        except Exception as exc:
            log.exception("request failed", path=request.path, method=request.method)
            return status_response(errors.internal_error(str(exc) or type(exc).__name__))

    async def authenticate(self, request: web.Request) -> UserInfo | None:
        transport = request.transport
        peercert = transport.get_extra_info("peercert") if transport is not None else None
        if peercert:
            found = authn.certificate_user(
                peercert,
                self.client_ca_issuer,
                self.requestheader,
                request.headers,
                lambda: {k: request.headers.getall(k) for k in set(request.headers.keys())},
            )
            if found is not None:
                return found
        token = authn.bearer_token(request.headers)
        if token is None:
            return None
        found = await self.static_tokens.authenticate_token(token)  # a file read at start: never waits
        if found is not None:
            return found
        # The other authenticators may ask another server (a TokenReview): requests waiting on them are
        # capped, so a flood of unknown tokens cannot pile up here; certificates and static tokens, which
        # need no asking, are never refused for it.
        if self._authenticating >= self.settings.max_unauthenticated_in_flight:
            raise errors.try_again_later()
        self._authenticating += 1
        try:
            for authenticator in self.token_authenticators:
                if authenticator is not self.static_tokens:
                    found = await authenticator.authenticate_token(token)
                    if found is not None:
                        return found
        finally:
            self._authenticating -= 1
        raise errors.unauthorized()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        for prefix in self.path_prefixes:
            if request.path.startswith(prefix + "/"):
                request = request.clone(rel_url=request.rel_url.with_path(request.path[len(prefix) :]))
                break
        path = request.path
        public = self.public_routes.get(path)
        if public is None:
            for prefix, route in self.public_routes.items():
                if prefix.endswith("/") and path.startswith(prefix):
                    public = route
                    break
        if public is not None:
            return await public(request)
        user = await self.authenticate(request)
        if user is not None:
            return await self._authenticated(request, user, path)
        if path in PUBLIC_PATHS:
            return self._public(request, path)
        if not self.settings.anonymous_auth:
            raise errors.unauthorized()
        # Anonymous requests may be long (watches): capped, so anonymous callers cannot hold the server.
        if self._anonymous >= self.settings.max_unauthenticated_in_flight:
            raise errors.try_again_later()
        self._anonymous += 1
        try:
            return await self._authenticated(request, ANONYMOUS, path)
        finally:
            self._anonymous -= 1

    async def _authenticated(self, request: web.Request, user: UserInfo, path: str) -> web.StreamResponse:
        query = request.query
        info = requestinfo.parse(request.method, path, query.get("watch", "").lower() in ("true", "1"))
        metrics = self.request_metrics
        method = request.method
        series = metrics.begin(
            method, info, request.headers.get("Content-Type", "") if method == "PATCH" else ""
        )
        began = time.perf_counter()
        code, dry_run = 500, False
        try:
            user = await self._impersonate(request, user)
            ctx = RequestContext(user, info, user_agent=request.headers.get("User-Agent", ""))
            if request.method in ("POST", "PUT", "PATCH", "DELETE"):
                self._write_options(request, ctx)
                dry_run = ctx.dry_run
            response = await self._serve(request, ctx, info, path)
            code = response.status
            return response
        except errors.StatusError as exc:
            code = exc.code
            raise
        finally:
            metrics.end(series, code, time.perf_counter() - began, dry_run, info)

    async def _serve(
        self, request: web.Request, ctx: RequestContext, info: requestinfo.RequestInfo, path: str
    ) -> web.StreamResponse:
        user = ctx.user
        attrs = Attributes(
            user,
            info.verb,
            info.is_resource,
            info.namespace,
            info.group,
            info.version,
            info.resource,
            info.subresource,
            info.name,
            path,
        )
        if not await self.authorize(attrs):
            if info.is_resource:
                raise errors.forbidden(info.resource, info.group, info.name, forbidden_reason(attrs))
            raise errors.StatusError(403, "Forbidden", f"forbidden: {forbidden_reason(attrs)}", details={})
        if not info.is_resource:
            for interceptor in self.nonresource_interceptors:
                answered = await interceptor(request, ctx)
                if answered is not None:
                    return answered
            return await self._nonresource(request, ctx, path)
        for interceptor in self.resource_interceptors:
            answered = await interceptor(request, ctx)
            if answered is not None:
                return answered
        return await self._resource(request, ctx, info)

    def _write_options(self, request: web.Request, ctx: RequestContext) -> None:
        query = request.query
        dry = query.getall("dryRun", [])
        for value in dry:
            if value != "All":
                raise errors.bad_request(f'dryRun: unsupported value {value!r}; supported values: "All"')
        ctx.dry_run = bool(dry)
        ctx.field_manager = query.get("fieldManager", "")
        if len(ctx.field_manager) > 128:
            raise errors.bad_request("fieldManager: Too long: must have at most 128 bytes")
        validation = query.get("fieldValidation", "")
        if validation and validation not in ("Ignore", "Warn", "Strict"):
            raise errors.bad_request(
                f'fieldValidation: Unsupported value: "{validation}": supported values: "Ignore", "Warn", "Strict"'
            )
        ctx.field_validation = validation or "Warn"

    async def _impersonate(self, request: web.Request, user: UserInfo) -> UserInfo:
        headers = request.headers
        groups = headers.getall("Impersonate-Group", [])
        extras: dict[str, list[str]] = {}
        for name, value in headers.items():
            if name.lower().startswith("impersonate-extra-"):
                extras.setdefault(name[len("impersonate-extra-") :].lower(), []).append(value)
        imp = authn.impersonation_from(headers, list(groups), extras)
        if imp is None:
            return user
        checks = [("users", imp.user, "")]
        checks += [("groups", g, "") for g in imp.groups]
        if imp.uid:
            checks.append(("uids", imp.uid, "authentication.k8s.io"))
        for key in imp.extra:
            for value in imp.extra[key]:
                checks.append((f"userextras/{key}", value, "authentication.k8s.io"))
        for resource, name, group in checks:
            res, _, sub = resource.partition("/")
            attrs = Attributes(user, "impersonate", True, "", group, "", res, sub, name)
            if not await self.authorize(attrs):
                raise errors.forbidden(res, group, name, forbidden_reason(attrs))
        return UserInfo(
            imp.user,
            imp.uid,
            authn.with_authenticated(imp.groups) if imp.user != "system:anonymous" else imp.groups,
            imp.extra,
        )

    def _public(self, request: web.Request, path: str) -> web.StreamResponse:
        if path.startswith("/version"):
            return json_response(orjson.dumps(self.version_info()))
        endpoint, _, check = path.strip("/").partition("/")
        found = health.answer(
            endpoint, check or None, {k: request.query.getall(k) for k in request.query}, self._checks
        )
        if found is None:
            raise errors.not_found_path()
        status, text = found
        return web.Response(
            status=status,
            text=text,
            content_type="text/plain",
            headers={"X-Content-Type-Options": "nosniff"},
        )

    def _store(self, settings: APIServerSettings) -> Store:
        if settings.storage_backend == "etcd":
            return EtcdStore(
                settings.etcd_servers,
                prefix=settings.etcd_prefix,
                ssl_context=etcd_ssl_context(
                    settings.etcd_cafile, settings.etcd_certfile, settings.etcd_keyfile
                ),
                request_timeout=settings.etcd_request_timeout_seconds,
                watch_check=settings.etcd_watch_check_seconds,
            )
        return SQLiteStore(
            self.data_dir / "state.db",
            durable=settings.durable,
            shared=settings.shared_store,
            writes_in_flight=lambda: self._pending_writes,
            commit_linger=settings.commit_linger_seconds,
        )

    def version_info(self) -> Obj:
        version = self.settings.kubernetes_version
        major, minor = version.lstrip("v").split(".")[:2]
        return {
            "major": major,
            "minor": minor,
            "emulationMajor": major,
            "emulationMinor": minor,
            "minCompatibilityMajor": major,
            "minCompatibilityMinor": str(max(int(minor) - 1, 0)),
            "gitVersion": version,
            "gitCommit": "vplane",
            "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "python",
            "compiler": "cpython",
            "platform": "linux/amd64",
        }

    async def _nonresource(self, request: web.Request, ctx: RequestContext, path: str) -> web.StreamResponse:
        if request.method not in ("GET", "HEAD") and path not in self.extra_routes:
            route = self._extra_route(path)
            if route is None:
                raise errors.method_not_allowed()
            return await route(request, ctx)
        route = self._extra_route(path)
        if route is not None:
            return await route(request, ctx)
        if path in PUBLIC_PATHS or path.startswith(("/healthz/", "/livez/", "/readyz/")):
            return self._public(request, path)
        parts = [p for p in path.split("/") if p]
        accept = request.headers.get("Accept", "")
        if parts == ["api"]:
            if discovery.wants_aggregated(accept):
                return web.Response(
                    body=self.discovery.aggregated(True),
                    headers={"Content-Type": discovery.AGGREGATED_CONTENT_TYPE},
                )
            return json_response(self.discovery.api_versions(request.host))
        if parts == ["apis"]:
            if discovery.wants_aggregated(accept):
                return web.Response(
                    body=self.discovery.aggregated(False),
                    headers={"Content-Type": discovery.AGGREGATED_CONTENT_TYPE},
                )
            return json_response(self.discovery.api_group_list())
        if len(parts) == 2 and parts[0] == "api":
            body = self.discovery.resource_list("", parts[1])
            if body is None:
                raise errors.not_found_path()
            return json_response(body)
        if len(parts) == 2 and parts[0] == "apis":
            body = self.discovery.api_group(parts[1])
            if body is None:
                raise errors.not_found_path()
            return json_response(body)
        if len(parts) == 3 and parts[0] == "apis":
            body = self.discovery.resource_list(parts[1], parts[2])
            if body is None:
                raise errors.not_found_path()
            return json_response(body)
        if parts and parts[0] == "openapi":
            return self.openapi.serve(request, parts[1:])
        raise errors.not_found_path()

    async def _metrics(self, request: web.Request, ctx: RequestContext) -> web.StreamResponse:
        """``/metrics``: this server's request series (:mod:`vplane.apiserver.requestmetrics`)."""
        if request.method not in ("GET", "HEAD"):
            raise errors.method_not_allowed()
        return web.Response(body=self.request_metrics.render(), headers={"Content-Type": METRICS_TYPE})

    def _extra_route(self, path: str) -> Route | None:
        route = self.extra_routes.get(path)
        if route is not None:
            return route
        for prefix, candidate in self.extra_routes.items():
            if prefix.endswith("/") and path.startswith(prefix):
                return candidate
        return None

    async def _resource(
        self, request: web.Request, ctx: RequestContext, info: requestinfo.RequestInfo
    ) -> web.StreamResponse:
        rtype = self.registry.get(info.group, info.version, info.resource)
        if rtype is None:
            raise errors.not_found_path()
        if (
            info.namespace
            and not rtype.namespaced
            and not (rtype.resource == "namespaces" and not rtype.group)
        ):
            raise errors.not_found_path()
        if info.subresource and info.subresource not in rtype.subresources:
            raise errors.not_found_path()
        if len(info.parts) > 3 and info.subresource != "proxy":
            raise errors.not_found_path()
        verb = info.verb
        if not info.name and verb in ("update", "patch"):
            raise errors.method_not_allowed()  # upstream routes no PUT or PATCH to a collection
        if verb not in rtype.verbs and not info.subresource:
            raise errors.method_not_allowed()
        if info.subresource:
            sub = rtype.subresources[info.subresource]
            allowed = "get" if verb in ("get", "watch", "list") else verb
            if allowed not in sub.verbs:
                raise errors.method_not_allowed()
            handler = self.subresource_handlers.get((rtype.group, rtype.resource, info.subresource))
            if handler is None:
                handler = self.reviews.subresource_handler(rtype, info.subresource)
            if handler is not None:
                return await handler(request, ctx, rtype, info)
        h = self.handlers
        if verb == "get":
            return await h.get(request, ctx, rtype, info)
        if verb == "list":
            return await h.list_objects(request, ctx, rtype, info)
        if verb == "watch":
            return await h.watch(request, ctx, rtype, info)
        if verb in ("create", "update", "patch", "delete", "deletecollection"):
            if self._pending_writes >= self.settings.write_queue_limit:
                raise errors.try_again_later()
            self._pending_writes += 1
            try:
                if verb == "create":
                    if info.name and not info.subresource:
                        raise errors.method_not_allowed()
                    return await h.create(request, ctx, rtype, info)
                if verb == "update":
                    return await h.update(request, ctx, rtype, info)
                if verb == "patch":
                    return await h.patch(request, ctx, rtype, info)
                if verb == "delete":
                    return await h.delete(request, ctx, rtype, info)
                return await h.delete_collection(request, ctx, rtype, info)
            finally:
                self._pending_writes -= 1
        raise errors.method_not_allowed()


def _replace_field(name: str, value: Any) -> Callable[[Obj], Obj]:
    def mutate(current: Obj) -> Obj:
        current[name] = value
        return current

    return mutate


def _auto_update(obj: Obj) -> bool:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return bool(annotations.get("rbac.authorization.kubernetes.io/autoupdate", "true") != "false")


def _load_or_make_ca(cert: Path, key: Path, prefix: str) -> tls.CertPair:
    if cert.exists():
        return tls.CertPair.read(cert, key)
    pair = tls.make_ca(tls.unique_ca_name(prefix))
    pair.write(cert, key)
    return pair


def status_response(exc: errors.StatusError) -> web.Response:
    resp = web.Response(
        body=orjson.dumps(exc.to_status()), status=exc.code, headers={"Content-Type": "application/json"}
    )
    for name, value in exc.headers.items():
        resp.headers[name] = value
    return resp


def write_kubeconfig(path: Path, server: str, ca_pem: bytes, token: str, name: str) -> None:
    """An admin kubeconfig for one server, CA data inline."""
    kubeconfig.write_kubeconfig(path, kubeconfig.kubeconfig_doc([(name, server, ca_pem, token)], name))
