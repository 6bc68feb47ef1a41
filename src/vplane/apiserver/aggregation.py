"""API aggregation: APIService routing, identity forwarding, availability and discovery merge.

A request for ``/apis/<group>/<version>/...`` whose APIService names a Service is proxied to that
Service's endpoint after this server has authenticated and authorized it. The backend sees the caller
in ``X-Remote-*`` headers and trusts them because the request arrives with the front-proxy client
certificate (kube-aggregator's requestheader scheme). A controller probes each backend's discovery
(``GET /apis/<g>/<v>``, 5 s timeout) and keeps the ``Available`` condition; while a backend is not
available, requests for it get 503 with upstream's plain-text ``service unavailable`` body.

Service resolution has no Service network to rely on: ``ExternalName`` Services resolve to their name
(``localhost`` for the resource proxy), other Services to their Endpoints' first address.

Backend policy. Whoever may write APIServices and Services chooses where this server opens HTTPS
connections, presenting its front-proxy client certificate. On the operator's own server
(``vplane apiserver``) that is the operator, and any backend goes. In a tenant cluster it is the tenant's
cluster-admin, who has no rights on the platform, so the tenant restricts backends
(``aggregation_restrict_backends``, ``BackendPolicy``): no loopback, link-local, unspecified, multicast or
platform addresses (the addresses of this host, and ``aggregation_denied_networks``), no
``insecureSkipTLSVerify`` (refused at admission with 422 and again at routing). Names are resolved and
every address they resolve to is checked; the connection goes to the checked addresses (the resolver
hands them to aiohttp), so a name that rebinds between check and connect cannot redirect it. The
exception is the allow-list (``aggregation_allowed_backends``, ``Aggregator.allow_backend``): ``host:port``
pairs the tenant process itself serves, such as its resource proxy's ports, reached as named. An
APIService whose backend is refused is unavailable with reason ``BackendNotAllowed`` and a message that
says why; its requests get 503.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import hashlib
import ipaddress
import socket
import ssl
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp
import orjson
import structlog
import yarl
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from vplane.apiserver import codec, timeutil
from vplane.apiserver.admission import AdmissionRequest
from vplane.apiserver.context import RequestContext
from vplane.apiserver.discovery import ExternalGroup
from vplane.apiserver.watch import WatchEvent
from vplane.kube import errors
from vplane.kube.objects import Obj
from vplane.support import httprelay, requestheader
from vplane.support.httprelay import relay_response
from vplane.support.tasks import wait_event

if TYPE_CHECKING:
    from vplane.apiserver.server import APIServer
    from vplane.apiserver.settings import APIServerSettings

log = structlog.get_logger("vplane.apiserver.aggregation")

DISCOVERY_TIMEOUT_SECONDS = 5.0
APISERVICE_PREFIX = "/apiregistration.k8s.io/apiservices/"
AGGREGATED_ACCEPT = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
APIREGISTRATION = "apiregistration.k8s.io"
INSECURE_REFUSED = (
    "insecureSkipTLSVerify is not allowed in this cluster: set caBundle to the CA of the backend's "
    "serving certificate"
)
REFUSED_KINDS = "loopback, link-local, unspecified, multicast or platform addresses"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_BROADCAST = ipaddress.ip_address("255.255.255.255")


class BackendRefused(OSError):
    """The backend policy refuses this address; raised where aiohttp would resolve or connect, so it
    never does (an ``OSError``, so aiohttp reports it as a connection failure)."""


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, 6to4, Teredo, NAT64), which is where a
    connection to it may end up."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def split_host_port(value: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port``, the host normalized as ``BackendPolicy`` compares it."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r} is not host:port")
    return normalize_host(host), int(port)


def normalize_host(host: str) -> str:
    return host.strip("[]").rstrip(".").lower()


@dataclass
class BackendPolicy:
    """Which addresses aggregation backends may have (see the module docstring). Pure: resolving names
    and knowing this host's addresses is the caller's job."""

    restricted: bool = False
    allowed: set[tuple[str, int]] = field(default_factory=set)
    """``(host, port)`` pairs exempt from every check: backends the process itself serves."""
    denied: list[IPNetwork] = field(default_factory=list)
    """Further networks refused (the platform's addresses when it runs on another host)."""

    @classmethod
    def from_settings(cls, settings: APIServerSettings) -> BackendPolicy:
        policy = cls(settings.aggregation_restrict_backends)
        for pair in settings.aggregation_allowed_backends:
            policy.allow(*split_host_port(pair))
        for network in settings.aggregation_denied_networks:
            policy.deny(network)
        return policy

    def allow(self, host: str, port: int) -> None:
        self.allowed.add((normalize_host(host), port))

    def deny(self, network: str) -> None:
        self.denied.append(ipaddress.ip_network(network, strict=False))

    def exempt(self, host: str, port: int) -> bool:
        return (normalize_host(host), port) in self.allowed

    def address_refusal(self, address: IPAddress, is_host_address: Callable[[IPAddress], bool]) -> str | None:
        """Why ``address`` may not be a backend here, or None."""
        if not self.restricted:
            return None
        for candidate in (address, _embedded_ipv4(address)):
            if candidate is None:
                continue
            if candidate.is_unspecified or candidate in _THIS_NETWORK:
                return f"{address} is an unspecified address"
            if candidate.is_loopback:
                return f"{address} is a loopback address"
            if candidate.is_link_local:
                return f"{address} is a link-local address"
            if candidate.is_multicast or candidate == _BROADCAST:
                return f"{address} is not a unicast address"
            if any(candidate.version == net.version and candidate in net for net in self.denied):
                return f"{address} is a platform address"
        if is_host_address(address):
            return f"{address} is an address of the platform's host"
        return None

    def tls_refusal(self, spec: Obj) -> str | None:
        return INSECURE_REFUSED if self.restricted and spec.get("insecureSkipTLSVerify") else None


def is_host_address(address: IPAddress) -> bool:
    """Whether ``address`` belongs to this host: only a local address can be bound. Binding is refused
    with EADDRNOTAVAIL otherwise; any other failure counts as local, so a doubt refuses the backend."""
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((str(address), 0))
    except OSError as exc:
        return exc.errno not in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT)
    return True


def _refused(host: str, port: int, why: str) -> BackendRefused:
    return BackendRefused(
        f"backend {_host(host)}:{port} is not allowed: {why} (aggregation backends in this cluster may not "
        f"be {REFUSED_KINDS})"
    )


class CheckedResolver(AbstractResolver):
    """aiohttp's resolver, checking every address a name resolves to against the policy. aiohttp connects
    to the addresses returned here, so what is checked is what is dialed."""

    def __init__(
        self, policy: BackendPolicy, host_address: Callable[[IPAddress], bool] = is_host_address
    ) -> None:
        self.policy = policy
        self._host_address = host_address
        self._inner: aiohttp.ThreadedResolver | None = None  # it binds to the running loop

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_UNSPEC
    ) -> list[ResolveResult]:
        if self._inner is None:
            self._inner = aiohttp.ThreadedResolver()
        results = await self._inner.resolve(host, port, family)
        if self.policy.restricted and not self.policy.exempt(host, port):
            self.check(host, port, (r["host"] for r in results))
        return results

    def check(self, host: str, port: int, addresses: Iterable[str]) -> None:
        for raw in addresses:
            try:
                address: IPAddress = ipaddress.ip_address(raw)
            except ValueError:
                raise _refused(host, port, f"{raw} is not an IP address") from None
            why = self.policy.address_refusal(address, self._host_address)
            if why is not None:
                raise _refused(host, port, why)

    async def close(self) -> None:
        if self._inner is not None:
            await self._inner.close()


@dataclass
class Backend:
    name: str
    group: str
    version: str
    spec: Obj
    available: bool = False
    reason: str = ""
    message: str = ""
    resources: list[dict[str, Any]] = field(default_factory=list)
    stale: bool = True
    openapi: tuple[bytes, str] | None = None
    """The backend's OpenAPI v3 document for this group/version and its hash, when it serves one."""
    session: aiohttp.ClientSession | None = None
    openapi_retries: int = 0
    """Checks in a row that found no OpenAPI document for a local backend (they back off)."""
    in_process: tuple[tuple[int, int, int], LocalBackend | None] | None = None
    """``Aggregator._local``'s last answer and what it was read from: the revisions of the Service and its
    Endpoints and the in-process backends' version (every proxied request asks)."""

    @property
    def local(self) -> bool:
        return not self.spec.get("service")


class LocalBackend(Protocol):
    """A backend served inside this process (the tenant's resource proxy): requests are handed to it
    in-process instead of over a socket, so each replica reaches its own backend and replicas or tenants on
    one machine never compete for the address its Service names."""

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse: ...

    async def fetch(self, path: str) -> tuple[int, bytes]:
        """GET ``path`` (availability checks and OpenAPI): status and body."""
        ...


class Aggregator:
    def __init__(self, server: APIServer) -> None:
        self.server = server
        self.local_backends: dict[tuple[str, int], LocalBackend] = {}
        self._local_version = 0
        self.policy = BackendPolicy.from_settings(server.settings)
        self.resolver = CheckedResolver(self.policy)
        self.backends: dict[tuple[str, str], Backend] = {}
        self.probe_interval = server.settings.apiservice_probe_interval_seconds
        self.discovery_timeout = DISCOVERY_TIMEOUT_SECONDS
        self._wake = asyncio.Event()
        self._closing: set[asyncio.Task[None]] = set()
        server.resource_interceptors.append(self.intercept)
        server.nonresource_interceptors.append(self.intercept)
        server.discovery.external = self.external_groups
        server.openapi.external = self.openapi_documents
        server.hub.on_event.append(self.on_event)
        if self.policy.restricted:
            server.admission.add(_TLSAdmission(self))

    def serve_locally(self, host: str, port: int, backend: LocalBackend) -> None:
        """Answer APIServices whose Service resolves to ``host:port`` with ``backend``, in-process."""
        self.local_backends[(normalize_host(host), port)] = backend
        self._local_version += 1
        self._wake.set()

    def _local(self, backend: Backend) -> LocalBackend | None:
        if not self.local_backends:
            return None
        # The address is read from the Service (and its Endpoints), which change far less often than
        # requests arrive: the answer is kept until either object's revision moves.
        stamp = self._address_stamp(backend.spec)
        if backend.in_process is not None and backend.in_process[0] == stamp:
            return backend.in_process[1]
        try:
            host, port = self.service_address(backend.spec)
            found = self.local_backends.get((normalize_host(host), port))
        except errors.StatusError:
            found = None
        backend.in_process = (stamp, found)
        return found

    def _address_stamp(self, apiservice_spec: Obj) -> tuple[int, int, int]:
        """What ``service_address`` reads, as revisions (0: absent)."""
        svc_ref = apiservice_spec.get("service") or {}
        namespace, name = str(svc_ref.get("namespace", "")), str(svc_ref.get("name", ""))
        registry = self.server.registry
        services, endpoints = registry.get("", "v1", "services"), registry.get("", "v1", "endpoints")
        assert services is not None and endpoints is not None
        service = self.server.objects.get_kv(services, namespace, name)
        eps = self.server.objects.get_kv(endpoints, namespace, name)
        return (
            service.mod_revision if service is not None else 0,
            eps.mod_revision if eps is not None else 0,
            self._local_version,
        )

    def allow_backend(self, host: str, port: int) -> None:
        """Exempt ``host:port`` from the backend policy: a backend this process serves itself (the tenant's
        resource proxy adds its ports here). Connections to it go to the name as given."""
        self.policy.allow(host, port)
        self._wake.set()

    # -- state -----------------------------------------------------------------------------------

    def load(self) -> None:
        for kv in self.server.cache.iter_prefix(APISERVICE_PREFIX):
            self._put(codec.decode_kv(kv))

    def _put(self, obj: Obj) -> None:
        spec = obj.get("spec") or {}
        key = _group_version(obj)
        old = self.backends.get(key)
        backend = Backend(obj["metadata"]["name"], key[0], key[1], spec)
        if old is not None and old.spec == spec:
            backend.available, backend.reason, backend.message = old.available, old.reason, old.message
            backend.resources, backend.stale, backend.session = old.resources, old.stale, old.session
            backend.openapi = old.openapi
        elif old is not None and old.session is not None:
            self._close_later(old.session)
        self.backends[key] = backend
        self._wake.set()

    def on_event(self, wevent: WatchEvent) -> None:
        if not wevent.event.kv.key.startswith(APISERVICE_PREFIX):
            return
        obj = wevent.obj()
        key = _group_version(obj)
        if wevent.event.type == "DELETE":
            backend = self.backends.pop(key, None)
            if backend is not None and backend.session is not None:
                self._close_later(backend.session)
            self.server.registry.generation += 1  # discovery must drop the group
            return
        before = self.backends.get(key)
        self._put(obj)
        if before is None or before.spec != obj.get("spec"):
            self.server.registry.generation += 1

    def _close_later(self, session: aiohttp.ClientSession) -> None:
        task = asyncio.get_running_loop().create_task(session.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def external_groups(self) -> list[ExternalGroup]:
        groups: dict[str, ExternalGroup] = {}
        for backend in sorted(
            self.backends.values(), key=lambda b: (-int(b.spec.get("versionPriority") or 0), b.version)
        ):
            if backend.local:
                continue
            entry = groups.setdefault(
                backend.group,
                ExternalGroup(backend.group, [], int(backend.spec.get("groupPriorityMinimum") or 0)),
            )
            if backend.version not in entry.versions:
                entry.versions.append(backend.version)
            entry.resources[backend.version] = backend.resources
            entry.stale[backend.version] = backend.stale
        return list(groups.values())

    # -- proxying --------------------------------------------------------------------------------

    def _backend_for(self, path: str) -> Backend | None:
        parts = path.split("/")
        if len(parts) < 4 or parts[1] != "apis":
            return None
        backend = self.backends.get((parts[2], parts[3]))
        if backend is None or backend.local:
            return None
        return backend

    async def intercept(self, request: web.Request, ctx: RequestContext) -> web.StreamResponse | None:
        backend = self._backend_for(request.path)
        if backend is None:
            return None
        if not backend.available:
            return web.Response(status=503, text="service unavailable\n")
        local = self._local(backend)
        if local is not None:
            return await local.handle(request)
        try:
            url = self.target(backend)
        except errors.StatusError:
            return web.Response(status=503, text="service unavailable\n")
        except BackendRefused as exc:
            log.warning("aggregated backend refused", apiservice=backend.name, error=str(exc))
            return web.Response(status=503, text=f"Error trying to reach service: '{exc}'\n")
        if request.headers.get("Upgrade") or "upgrade" in request.headers.get("Connection", "").lower():
            return await self._proxy_upgrade(request, ctx, backend, url)
        return await self._proxy(request, ctx, backend, url)

    async def _proxy_upgrade(
        self, request: web.Request, ctx: RequestContext, backend: Backend, base: str
    ) -> web.StreamResponse:
        """A connection upgrade (exec, attach, port-forward or a WebSocket of the backend's own) relayed
        as bytes (``httprelay.relay_upgrade``), with the identity headers of any proxied request. The
        address is resolved and checked by the same policy resolver and dialled with the same TLS
        settings as other requests; a refused upgrade is answered as the backend answered it."""
        if not httprelay.is_upgrade(request.headers):
            raise errors.bad_request("Upgrade request required")
        parsed = yarl.URL(base)
        host, port = parsed.raw_host or "", parsed.port or 443
        user = ctx.user
        headers = requestheader.strip_identity_headers(request.headers.items())
        headers.append(("Upgrade", request.headers["Upgrade"]))
        headers += requestheader.forwarding_headers(user.name, user.uid, user.groups, user.extra)
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            head = httprelay.request_head(request.method, request.rel_url.raw_path_qs, authority, headers)
        except ValueError as exc:
            raise errors.bad_request(str(exc)) from None
        ssl_ctx = self._ssl(backend)
        timeout = self.server.settings.aggregation_upgrade_timeout_seconds

        async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            try:
                async with asyncio.timeout(timeout):
                    resolved = await self.resolver.resolve(host, port)
                    return await asyncio.open_connection(
                        resolved[0]["host"],
                        port,
                        ssl=ssl_ctx,
                        server_hostname=self._server_name(backend) or host,
                        limit=httprelay.UPGRADE_HEAD_LIMIT,
                    )
            except (OSError, TimeoutError, IndexError) as exc:
                exc = refusal_of(exc) or exc
                log.info("aggregated backend unreachable", apiservice=backend.name, error=str(exc))
                raise httprelay.UpgradeError(str(exc)) from None

        try:
            reader, writer, answer = await httprelay.while_client_stays(
                request, httprelay.dial_upgrade(connect, head, timeout)
            )
        except (OSError, TimeoutError, httprelay.UpgradeError) as exc:
            return web.Response(status=503, text=f"Error trying to reach service: '{exc}'\n")
        except httprelay.ClientGone:
            return httprelay.TakenResponse()
        return await httprelay.relay_upgrade(request, reader, writer, answer)

    async def _proxy(
        self, request: web.Request, ctx: RequestContext, backend: Backend, base: str
    ) -> web.StreamResponse:
        session = self._session(backend)
        headers = requestheader.strip_identity_headers(request.headers.items())
        user = ctx.user
        headers += requestheader.forwarding_headers(user.name, user.uid, user.groups, user.extra)
        body = await request.read() if request.can_read_body else None
        url = base + request.rel_url.path_qs
        try:
            upstream = await session.request(
                request.method,
                url,
                headers=headers,
                data=body,
                allow_redirects=False,
                server_hostname=self._server_name(backend),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.discovery_timeout),
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            exc = refusal_of(exc) or exc
            log.info("aggregated backend unreachable", apiservice=backend.name, error=str(exc))
            return web.Response(status=503, text=f"Error trying to reach service: '{exc}'\n")
        return await relay_response(request, upstream)

    def target(self, backend: Backend) -> str:
        """The backend's base URL, after the policy's checks that need no DNS (``BackendRefused``); names
        are checked when the connector resolves them."""
        host, port = self.service_address(backend.spec)
        policy = self.policy
        if policy.restricted and not policy.exempt(host, port):
            why = policy.tls_refusal(backend.spec)
            if why is not None:
                raise BackendRefused(why)
            try:
                literal = ipaddress.ip_address(host.strip("[]"))
            except ValueError:
                literal = None
            if literal is not None:
                self.resolver.check(host, port, [str(literal)])
        return f"https://{_host(host)}:{port}"

    def service_address(self, apiservice_spec: Obj) -> tuple[str, int]:
        """The backend's host and port from its Service (ExternalName) or the Service's Endpoints."""
        svc_ref = apiservice_spec.get("service") or {}
        namespace, name = str(svc_ref.get("namespace", "")), str(svc_ref.get("name", ""))
        port = int(svc_ref.get("port") or 443)
        services = self.server.registry.get("", "v1", "services")
        assert services is not None
        service = self.server.objects.get(services, namespace, name)
        if service is None:
            raise errors.service_unavailable(f'service/{name} in "{namespace}" is not present')
        spec = service.get("spec") or {}
        if spec.get("type") == "ExternalName":
            return str(spec.get("externalName", "")), port
        target_port: Any = port
        port_name = ""
        for sp in spec.get("ports") or []:
            if sp.get("port") == port:
                target_port = sp.get("targetPort", port)
                port_name = sp.get("name", "")
        endpoints_type = self.server.registry.get("", "v1", "endpoints")
        assert endpoints_type is not None
        endpoints = self.server.objects.get(endpoints_type, namespace, name)
        for subset in (endpoints or {}).get("subsets") or []:
            addresses = subset.get("addresses") or []
            for ep_port in subset.get("ports") or []:
                if addresses and (
                    ep_port.get("name", "") == port_name
                    or isinstance(target_port, int)
                    and ep_port.get("port") == target_port
                ):
                    return str(addresses[0].get("ip") or addresses[0].get("hostname") or ""), int(
                        ep_port["port"]
                    )
        raise errors.service_unavailable(f'missing endpoints for service/{name} in "{namespace}"')

    def _ssl(self, backend: Backend) -> ssl.SSLContext | bool:
        spec = backend.spec
        ctx = ssl.create_default_context()
        if spec.get("insecureSkipTLSVerify"):
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif spec.get("caBundle"):
            ctx = ssl.create_default_context(cadata=base64.b64decode(spec["caBundle"]).decode())
        cert, key = self.server.front_proxy_client_files
        ctx.load_cert_chain(cert, key)
        return ctx

    def _session(self, backend: Backend) -> aiohttp.ClientSession:
        if backend.session is None or backend.session.closed:
            ssl_ctx = self._ssl(backend)
            # No DNS cache: every new connection resolves through the policy as it stands.
            connector = aiohttp.TCPConnector(
                ssl=ssl_ctx, limit=0, resolver=self.resolver, use_dns_cache=False
            )
            backend.session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
        return backend.session

    @staticmethod
    def _server_name(backend: Backend) -> str | None:
        """TLS name checked against a caBundle: ``<service>.<namespace>.svc``, as kube-aggregator does."""
        if backend.spec.get("insecureSkipTLSVerify"):
            return None
        svc = backend.spec.get("service") or {}
        return f"{svc.get('name', '')}.{svc.get('namespace', '')}.svc"

    # -- availability ----------------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            # Cleared before the checks, not after: an APIService that arrives while they run sets it
            # again and is checked at once, rather than a probe interval later.
            self._wake.clear()
            for backend in list(self.backends.values()):
                try:
                    await self._check(backend)
                except Exception:
                    log.exception("availability check failed", apiservice=backend.name)
            await wait_event(self._wake, self.probe_interval)

    async def _check(self, backend: Backend) -> None:
        if backend.local:
            await self._set_condition(backend, True, "Local", "Local APIServices are always available")
            return
        local = self._local(backend)
        if local is not None:
            await self._check_local(backend, local)
            return
        try:
            url = self.target(backend)
        except errors.StatusError as exc:
            reason = "ServiceNotFound" if "not present" in exc.message else "MissingEndpoints"
            await self._set_condition(backend, False, reason, exc.message)
            return
        except BackendRefused as exc:
            backend.stale = True
            await self._set_condition(backend, False, "BackendNotAllowed", str(exc))
            return
        path = f"/apis/{backend.group}/{backend.version}"
        session = self._session(backend)
        headers = requestheader.forwarding_headers("system:kube-aggregator", "", ("system:masters",), {})
        try:
            async with session.get(
                url + path,
                headers=headers + [("Accept", "application/json")],
                server_hostname=self._server_name(backend),
                timeout=aiohttp.ClientTimeout(total=self.discovery_timeout),
            ) as resp:
                body = await resp.read()
                if resp.status // 100 != 2:
                    raise _DiscoveryError(
                        f"failing or missing response from {url}{path}: bad status from {url}{path}: {resp.status}"
                    )
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            backend.stale = True
            refusal = refusal_of(exc)
            if refusal is not None:
                await self._set_condition(backend, False, "BackendNotAllowed", str(refusal))
                return
            await self._set_condition(
                backend,
                False,
                "FailedDiscoveryCheck",
                f"failing or missing response from {url}{path}: {_describe(exc)}",
            )
            return
        except _DiscoveryError as exc:
            backend.stale = True
            await self._set_condition(backend, False, "FailedDiscoveryCheck", str(exc))
            return
        backend.resources = _aggregated_resources(backend.group, backend.version, body)
        backend.stale = False
        backend.openapi = await self._fetch_openapi(backend, session, url, headers)
        await self._set_condition(backend, True, "Passed", "all checks passed")

    async def _check_local(self, backend: Backend, local: LocalBackend) -> None:
        path = f"/apis/{backend.group}/{backend.version}"
        try:
            async with asyncio.timeout(self.discovery_timeout):
                status, body = await local.fetch(path)
        except TimeoutError:
            status, body = 0, b""
        if status // 100 != 2:
            backend.stale = True
            await self._set_condition(
                backend, False, "FailedDiscoveryCheck", f"failing or missing response from {path}: {status}"
            )
            return
        backend.resources = _aggregated_resources(backend.group, backend.version, body)
        backend.stale = False
        document = await self._local_openapi(backend, local)
        if document is not None:
            backend.openapi = document
            backend.openapi_retries = 0
        elif backend.openapi is None:
            # No schema yet (say the backend's CRD arrives after it does): look again soon, backing off,
            # rather than a whole probe interval later, so kubectl can validate and explain its kinds.
            delay = min(2.0 * 2**backend.openapi_retries, self.probe_interval)
            backend.openapi_retries += 1
            asyncio.get_running_loop().call_later(delay, self._wake.set)
        await self._set_condition(backend, True, "Passed", "all checks passed")

    async def _local_openapi(self, backend: Backend, local: LocalBackend) -> tuple[bytes, str] | None:
        """The backend's OpenAPI for its group/version; None (keep the last one) when it cannot answer."""
        key = f"apis/{backend.group}/{backend.version}"
        try:
            async with asyncio.timeout(self.discovery_timeout):
                status, root_body = await local.fetch("/openapi/v3")
                if status != 200:
                    return None
                relative = ((orjson.loads(root_body).get("paths") or {}).get(key) or {}).get(
                    "serverRelativeURL"
                )
                if not relative:
                    return None
                status, body = await local.fetch(str(relative))
        except (TimeoutError, orjson.JSONDecodeError, AttributeError):
            return None
        if status != 200:
            return None
        return self._openapi_document(backend, body)

    def _openapi_document(self, backend: Backend, body: bytes) -> tuple[bytes, str]:
        digest = hashlib.sha512(body).hexdigest().upper()
        if backend.openapi is None or backend.openapi[1] != digest:
            self.server.registry.generation += 1
        return body, digest

    async def _fetch_openapi(
        self, backend: Backend, session: aiohttp.ClientSession, url: str, headers: list[tuple[str, str]]
    ) -> tuple[bytes, str] | None:
        """The backend's OpenAPI v3 document for its group/version, so kubectl can validate through us."""
        key = f"apis/{backend.group}/{backend.version}"
        timeout = aiohttp.ClientTimeout(total=self.discovery_timeout)
        try:
            async with session.get(
                url + "/openapi/v3",
                headers=headers,
                timeout=timeout,
                server_hostname=self._server_name(backend),
            ) as resp:
                if resp.status != 200:
                    return None
                root = orjson.loads(await resp.read())
            relative = ((root.get("paths") or {}).get(key) or {}).get("serverRelativeURL")
            if not relative:
                return None
            async with session.get(
                url + relative, headers=headers, timeout=timeout, server_hostname=self._server_name(backend)
            ) as resp:
                if resp.status != 200:
                    return None
                body = await resp.read()
        except (aiohttp.ClientError, OSError, TimeoutError, orjson.JSONDecodeError, AttributeError):
            return None
        return self._openapi_document(backend, body)

    def openapi_documents(self) -> dict[str, tuple[bytes, str]]:
        return {
            f"apis/{b.group}/{b.version}": b.openapi
            for b in self.backends.values()
            if b.openapi is not None and b.available and not b.local
        }

    async def _set_condition(self, backend: Backend, available: bool, reason: str, message: str) -> None:
        changed = (backend.available, backend.reason, backend.message) != (available, reason, message)
        backend.available, backend.reason, backend.message = available, reason, message
        if not changed and backend.local:
            return
        rtype = self.server.registry.get("apiregistration.k8s.io", "v1", "apiservices")
        assert rtype is not None
        status = "True" if available else "False"

        def mutate(obj: Obj) -> Obj:
            conditions = [
                c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") != "Available"
            ]
            current = next(
                (
                    c
                    for c in (obj.get("status") or {}).get("conditions") or []
                    if c.get("type") == "Available"
                ),
                None,
            )
            since = (
                current["lastTransitionTime"]
                if current and current.get("status") == status
                else timeutil.rfc3339(self.server.clock())
            )
            conditions.append(
                {
                    "type": "Available",
                    "status": status,
                    "lastTransitionTime": since,
                    "reason": reason,
                    "message": message,
                }
            )
            obj["status"] = {"conditions": conditions}
            return obj

        if changed:
            self.server.registry.generation += 1
        with contextlib.suppress(errors.StatusError):
            await self.server.objects.guaranteed_update(
                self.server.system_context(), rtype, "", backend.name, mutate, subresource="status"
            )

    async def close(self) -> None:
        for backend in self.backends.values():
            if backend.session is not None:
                await backend.session.close()
        await self.resolver.close()


class _TLSAdmission:
    """Refuses ``insecureSkipTLSVerify`` APIServices where backends are restricted (422), unless their
    Service points at an allowed or in-process backend or the update leaves the spec as it was; routing
    refuses them again, should the Service change later."""

    def __init__(self, aggregator: Aggregator) -> None:
        self.aggregator = aggregator

    async def admit(self, request: AdmissionRequest) -> None:
        rtype = request.rtype
        if rtype.group != APIREGISTRATION or rtype.resource != "apiservices" or request.subresource:
            return
        if request.operation not in ("CREATE", "UPDATE") or request.obj is None:
            return
        policy = self.aggregator.policy
        spec = request.obj.get("spec") or {}
        why = policy.tls_refusal(spec)
        if why is None or not spec.get("service"):
            return
        if (
            request.operation == "UPDATE"
            and request.old is not None
            and (request.old.get("spec") or {}) == spec
        ):
            # A metadata-only update chooses no backend (routing still refuses this one): the resource
            # proxy runbook removes the protection label of an APIService its proxy no longer serves.
            return
        with contextlib.suppress(errors.StatusError):
            host, port = self.aggregator.service_address(spec)
            # A backend this process serves in-process (the resource proxy) is never dialled.
            if policy.exempt(host, port) or (normalize_host(host), port) in self.aggregator.local_backends:
                return
        raise errors.invalid(
            "APIService",
            request.name,
            [errors.field_forbidden("spec.insecureSkipTLSVerify", why)],
            APIREGISTRATION,
        )


class _DiscoveryError(Exception):
    pass


def refusal_of(exc: BaseException) -> BackendRefused | None:
    """The policy's refusal inside aiohttp's connection error, if that is what it is."""
    if isinstance(exc, BackendRefused):
        return exc
    if isinstance(exc, aiohttp.ClientConnectorError) and isinstance(exc.os_error, BackendRefused):
        return exc.os_error
    return None


def _group_version(apiservice: Obj) -> tuple[str, str]:
    spec = apiservice.get("spec") or {}
    return str(spec.get("group", "")), str(spec.get("version", ""))


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return text if text else type(exc).__name__


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _aggregated_resources(group: str, version: str, body: bytes) -> list[dict[str, Any]]:
    """Convert a legacy APIResourceList into aggregated-discovery resources (upstream does the same)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return []
    out: dict[str, dict[str, Any]] = {}
    for res in doc.get("resources") or []:
        name = str(res.get("name", ""))
        if "/" in name:
            parent, sub = name.split("/", 1)
            entry = out.get(parent)
            if entry is not None:
                entry.setdefault("subresources", []).append(
                    {
                        "subresource": sub,
                        "responseKind": {
                            "group": res.get("group", group),
                            "version": res.get("version", version),
                            "kind": res.get("kind", ""),
                        },
                        "verbs": res.get("verbs") or [],
                    }
                )
            continue
        out[name] = {
            "resource": name,
            "responseKind": {"group": group, "version": version, "kind": res.get("kind", "")},
            "scope": "Namespaced" if res.get("namespaced") else "Cluster",
            "singularResource": res.get("singularName", ""),
            "verbs": res.get("verbs") or [],
        }
        if res.get("shortNames"):
            out[name]["shortNames"] = res["shortNames"]
        if res.get("categories"):
            out[name]["categories"] = res["categories"]
    return list(out.values())
