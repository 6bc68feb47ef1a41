"""``/kubernetes/project/<project>/virtualcluster/<name>/...``: reach a tenant cluster through the platform.

This is what ``vplane connect --driver platform`` kubeconfigs point at, so a user needs only the platform's
address, its CA and their access key. The request is relayed as is (credentials included) to a ready
replica of the tenant, which authenticates the access key with the platform and authorizes with its own
RBAC; the platform adds nothing to the caller's identity.

The platform authenticates the caller first (any platform credential: an access key, a token, a client
certificate), so strangers never reach a tenant's API, and every caller it cannot authenticate gets the
same 401 whether or not the tenant exists: the path is no oracle for which projects and tenants there are.

A request may name one replica with the header ``X-Vplane-Replica: <index>`` (``vplane doctor`` reads
each replica's own metrics this way: a symptom of the resource proxy can be replica-local).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
from aiohttp import web

from vplane.apiserver.context import UserInfo
from vplane.kube import errors
from vplane.kube.accesskeys import AUTH_FAILED, project_namespace
from vplane.platform.placement import Replica, Tenant
from vplane.support import httprelay
from vplane.support.httprelay import relay_response
from vplane.support.requestheader import HOP_BY_HOP

PREFIX = "/kubernetes/project/"
REPLICA_HEADER = "X-Vplane-Replica"

Connect = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]
"""Opens an upgrade's connection to a replica (raises OSError or TimeoutError when it cannot)."""
Authenticate = Callable[[web.Request], Awaitable[UserInfo | None]]
"""The platform API server's authentication: the caller's identity, None without credentials, 401 for bad
ones."""


class TenantProxy:
    def __init__(
        self,
        tenants: Callable[[str, str], Tenant | None],
        ca_file: Callable[[str, str], Path],
        namespace_prefix: str,
        authenticate: Authenticate,
        upgrade_timeout: float = 10.0,
    ) -> None:
        self.authenticate = authenticate
        self.upgrade_timeout = upgrade_timeout
        self.tenants = tenants
        self.ca_file = ca_file
        self.namespace_prefix = namespace_prefix
        self._sessions: dict[tuple[str, str], aiohttp.ClientSession] = {}

    def _session(self, namespace: str, name: str) -> aiohttp.ClientSession:
        session = self._sessions.get((namespace, name))
        if session is None or session.closed:
            ctx = ssl.create_default_context(cafile=str(self.ca_file(namespace, name)))
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx), auto_decompress=False)
            self._sessions[(namespace, name)] = session
        return session

    async def close(self) -> None:
        for session in self._sessions.values():
            await session.close()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        from vplane.apiserver.server import status_response

        try:
            return await self._handle(request)
        except errors.StatusError as exc:
            return status_response(exc)

    async def _caller(self, request: web.Request) -> UserInfo:
        """Who is asking, before anything about the tenant is looked up; one answer for every refusal."""
        try:
            user = await self.authenticate(request)
        except errors.StatusError as exc:
            if exc.code != 401:
                raise
            user = None
        if user is None:
            raise errors.unauthorized(AUTH_FAILED)
        return user

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        await self._caller(request)
        parts = request.path[len(PREFIX) :].split("/", 3)
        if len(parts) < 3 or parts[1] != "virtualcluster":
            raise errors.not_found_path()
        project, name = parts[0], parts[2]
        rest = "/" + (parts[3] if len(parts) > 3 else "")
        namespace = project_namespace(project, self.namespace_prefix)
        tenant = self.tenants(namespace, name)
        if tenant is None:
            raise errors.not_found("virtualclusterinstances", name, "management.loft.sh")
        replicas = [r for _, r in sorted(tenant.replicas.items()) if r.ready]
        wanted = request.headers.get(REPLICA_HEADER)
        if wanted is not None:
            replicas = [r for r in replicas if str(r.index) == wanted.strip()]
            if not replicas:
                raise errors.service_unavailable(
                    f'replica {wanted} of tenant cluster "{name}" in project "{project}" is not ready', 1
                )
        if not replicas:
            raise errors.service_unavailable(
                f'tenant cluster "{name}" in project "{project}" is not ready', 1
            )
        target = f"{replicas[0].url}{rest}"  # loopback for a process, the pod IP for a pod
        if request.query_string:
            target += "?" + request.query_string
        if httprelay.is_upgrade(request.headers):
            raw = request.rel_url.raw_path[len(PREFIX) :].split("/", 3)
            path_qs = "/" + (raw[3] if len(raw) > 3 else "")
            if request.rel_url.raw_query_string:
                path_qs += "?" + request.rel_url.raw_query_string
            return await self._upgrade(request, namespace, name, replicas[0], path_qs)
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP]
        body = await request.read() if request.can_read_body else None
        session, target = self._route(namespace, name, replicas[0], target)
        try:
            upstream = await session.request(
                request.method,
                target,
                headers=headers,
                data=body,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=None),
            )
        except (aiohttp.ClientError, OSError) as exc:
            raise errors.service_unavailable(f'tenant cluster "{name}" is unreachable: {exc}', 1) from None
        return await relay_response(request, upstream)

    def _route(
        self, namespace: str, name: str, replica: Replica, target: str
    ) -> tuple[aiohttp.ClientSession, str]:
        """The session and URL a request to ``replica`` goes through: its own address over TLS verified with
        the tenant's CA (a subclass reaches tenants on connected clusters through the mesh instead)."""
        return self._session(namespace, name), target

    def _upgrade_dial(self, namespace: str, name: str, replica: Replica) -> tuple[str, Connect]:
        """The ``Host`` of an upgrade to ``replica`` and how to open its connection: TLS to the replica's
        address (loopback for a process, its pod IP for a pod), verified with the tenant's CA (a subclass
        reaches tenants on connected clusters through the mesh instead)."""
        host, port = replica.host, replica.port
        ctx = ssl.create_default_context(cafile=str(self.ca_file(namespace, name)))
        timeout = self.upgrade_timeout

        async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            return await asyncio.wait_for(
                asyncio.open_connection(
                    host,
                    port,
                    ssl=ctx,
                    server_hostname=host,
                    limit=httprelay.UPGRADE_HEAD_LIMIT,
                ),
                timeout,
            )

        return f"{host}:{port}", connect

    async def _upgrade(
        self, request: web.Request, namespace: str, name: str, replica: Replica, path_qs: str
    ) -> web.StreamResponse:
        """A connection upgrade (exec, attach, port-forward, a WebSocket) relayed as bytes, both ways, with
        the caller's headers as they came (the tenant authenticates them); each side's end closes the
        other."""
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP]
        headers.append(("Upgrade", request.headers["Upgrade"]))
        authority, connect = self._upgrade_dial(namespace, name, replica)
        try:
            head = httprelay.request_head(request.method, path_qs, authority, headers)
        except ValueError as exc:
            raise errors.bad_request(str(exc)) from None
        try:
            reader, writer, answer = await httprelay.while_client_stays(
                request, httprelay.dial_upgrade(connect, head, self.upgrade_timeout)
            )
        except (OSError, TimeoutError, httprelay.UpgradeError) as exc:
            raise errors.service_unavailable(f'tenant cluster "{name}" is unreachable: {exc}', 1) from None
        except httprelay.ClientGone:
            return httprelay.TakenResponse()
        return await httprelay.relay_upgrade(request, reader, writer, answer)
