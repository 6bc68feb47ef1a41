"""The kubelet API: an HTTPS server the API server calls for a pod's logs (and, through routes other modules
add, exec, attach and port-forward).

Like upstream's port 10250: TLS with the runtime's serving certificate, callers authenticated by a client
certificate of the cluster's CA and authorized with a SubjectAccessReview (``nodes/proxy`` for container
logs and streams, cached five minutes when allowed, thirty seconds when denied); ``/healthz`` is open.
The routes are the table :data:`ROUTES`: a module that serves more of the kubelet API adds one line,
``(method, path, authorization subresource, handler)``, where a handler is
``async def handler(request, runtime: ContainerRuntime) -> web.StreamResponse``.

``/containerLogs/{namespace}/{pod}/{container}`` serves the container's log with ``follow``,
``tailLines``, ``sinceSeconds``/``sinceTime``, ``timestamps``, ``previous`` and ``limitBytes``; its
errors are the kubelet's (``container "x" in pod "y" is waiting to start: ContainerCreating``, 400).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

from vplane.controllers.client import KubeAPI, TransportError
from vplane.kube.errors import StatusError
from vplane.runtime import logs, podproxy, streams
from vplane.runtime.api import SUBJECT_ACCESS_REVIEWS
from vplane.runtime.cri import ContainerRuntime
from vplane.support import tls

log = structlog.get_logger("vplane.runtime.kubelet")

Handler = Callable[[web.Request, ContainerRuntime], Awaitable[web.StreamResponse]]


class LogError(Exception):
    """A log request the kubelet refuses: the HTTP code and the plain-text message it answers with."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class LogSource:
    path: Path | None
    running: Callable[[], bool]


async def healthz(request: web.Request, runtime: ContainerRuntime) -> web.StreamResponse:
    return web.Response(text="ok")


async def container_logs(request: web.Request, runtime: ContainerRuntime) -> web.StreamResponse:
    info = request.match_info
    query = {k: request.query[k] for k in request.query}
    try:
        options = logs.options_from_query(query, time.time())
    except ValueError as exc:
        return web.Response(status=400, text=str(exc))
    source_of = getattr(runtime, "log_source", None)
    if source_of is None:
        return web.Response(status=404, text="container logs are not served by this runtime")
    try:
        source: LogSource = source_of(info["namespace"], info["pod"], info["container"], options.previous)
    except LogError as exc:
        return web.Response(status=exc.code, text=exc.message)
    response = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await response.prepare(request)
    if source.path is not None:
        async for chunk in logs.read_log(source.path, options, source.running):
            await response.write(chunk)
    await response.write_eof()
    return response


ROUTES: list[tuple[str, str, str, Handler]] = [
    ("GET", "/healthz", "", healthz),
    ("GET", "/containerLogs/{namespace}/{pod}/{container}", "proxy", container_logs),
    *[(m, "/exec/{namespace}/{pod}/{container}", "proxy", streams.exec_handler) for m in ("GET", "POST")],
    *[(m, "/attach/{namespace}/{pod}/{container}", "proxy", streams.attach_handler) for m in ("GET", "POST")],
    *[(m, "/portForward/{namespace}/{pod}", "proxy", streams.portforward_handler) for m in ("GET", "POST")],
    *[(m, podproxy.ROUTE, "proxy", podproxy.pod_proxy_handler) for m in podproxy.METHODS],
]
"""The kubelet API: (method, path, ``nodes/<subresource>`` checked by SubjectAccessReview or "" for
none, handler). Add a line per route (exec, attach, port-forward) before the server starts."""


@dataclass
class _Decision:
    allowed: bool
    until: float


@dataclass
class Authorizer:
    """SubjectAccessReviews for kubelet API calls, with the kubelet's webhook cache."""

    client: KubeAPI
    node_name: str
    allowed_ttl: float
    denied_ttl: float
    _cache: dict[tuple[Any, ...], _Decision] = field(default_factory=dict)

    async def allowed(self, user: str, groups: list[str], verb: str, subresource: str) -> bool:
        key = (user, tuple(groups), verb, subresource)
        now = time.monotonic()
        cached = self._cache.get(key)
        if cached is not None and cached.until > now:
            return cached.allowed
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": groups,
                "resourceAttributes": {
                    "verb": verb,
                    "resource": "nodes",
                    "subresource": subresource,
                    "name": self.node_name,
                },
            },
        }
        try:
            answer = await self.client.create(SUBJECT_ACCESS_REVIEWS, review)
        except (StatusError, TransportError) as exc:
            log.warning("subject access review failed", error=str(exc))
            return False
        allowed = bool((answer.get("status") or {}).get("allowed"))
        if len(self._cache) > 1024:
            self._cache.clear()
        self._cache[key] = _Decision(allowed, now + (self.allowed_ttl if allowed else self.denied_ttl))
        return allowed


_VERBS = {
    "GET": "get",
    "HEAD": "get",
    "POST": "create",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}


class KubeletServer:
    def __init__(
        self,
        runtime: ContainerRuntime,
        authorizer: Authorizer,
        host: str,
        port: int,
        serving: tuple[Path, Path],
        client_ca_pem: bytes,
    ) -> None:
        self.runtime = runtime
        self.authorizer = authorizer
        self.host = host
        self.port = port
        self.serving = serving
        self.client_ca_pem = client_ca_pem
        self._runner: web.AppRunner | None = None

    def _ssl(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(*self.serving)
        ctx.load_verify_locations(cadata=self.client_ca_pem.decode())
        ctx.verify_mode = ssl.CERT_OPTIONAL
        return ctx

    def _guard(
        self, handler: Handler, subresource: str
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def guarded(request: web.Request) -> web.StreamResponse:
            if subresource:
                transport = request.transport
                peercert = transport.get_extra_info("peercert") if transport is not None else None
                identity = tls.subject_identity(peercert)
                if identity is None:
                    return web.Response(status=401, text="Unauthorized")
                user, groups = identity
                verb = _VERBS.get(request.method, request.method.lower())
                if not await self.authorizer.allowed(user, groups, verb, subresource):
                    return web.Response(
                        status=403,
                        text=f"Forbidden (user={user}, verb={verb}, resource=nodes, subresource={subresource})",
                    )
            return await handler(request, self.runtime)

        return guarded

    async def start(self) -> None:
        app = web.Application()
        for method, path, subresource, handler in ROUTES:
            app.router.add_route(method, path, self._guard(handler, subresource))
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, ssl_context=self._ssl(), reuse_address=True)
        await site.start()
        self._runner = runner
        if self.port == 0:
            server = site._server
            sockets = getattr(server, "sockets", None) or []
            self.port = sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._runner is not None:
            await asyncio.wait_for(self._runner.cleanup(), 5.0)
            self._runner = None


def serving_material(
    directory: Path, names: list[str], cert: Path | None, key: Path | None
) -> tuple[Path, Path]:
    """The serving certificate files: the operator's, or a self-signed pair kept in ``directory``."""
    if cert is not None and key is not None:
        return cert, key
    cert_path, key_path = directory / "kubelet.crt", directory / "kubelet.key"
    if not cert_path.exists() or not key_path.exists():
        ca = tls.make_ca(tls.unique_ca_name("vplane-kubelet"))
        pair = tls.issue_serving(ca, names)
        cert_path.parent.mkdir(parents=True, exist_ok=True)
        cert_path.write_bytes(pair.cert_pem + ca.cert_pem)
        key_path.write_bytes(pair.key_pem)
        key_path.chmod(0o600)
    return cert_path, key_path
