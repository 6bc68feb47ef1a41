"""Serving the platform's relayed requests: each one goes to the cluster's API server with the agent's
credentials, streamed both ways (watches stay open).

Only the platform's own mesh node may use the tunnel: the coordinator lets no other node see agents, and
the agent checks the relayed stream's source kind again here. The caller's ``Authorization`` and
impersonation headers are dropped; the agent's own credentials go upstream, so the platform acts in the
cluster with exactly the agent's service-account permissions.
"""

from __future__ import annotations

import aiohttp
import orjson
import structlog
from aiohttp import web
from yarl import URL

from vplane.agent.upstream import ClusterAPI
from vplane.kube import errors
from vplane.support.httprelay import relay_response
from vplane.support.requestheader import HOP_BY_HOP

log = structlog.get_logger("vplane.agent")

HEALTH_PATH = "/vplane/agent/healthz"
"""Answered by the agent itself: the platform's health check of a tunnel session (the platform spells
the same path; the two layers share no module)."""
PLATFORM_KIND = "platform"
_DROP = frozenset({"authorization", "host", "content-length"}) | HOP_BY_HOP


def _status(exc: errors.StatusError) -> web.Response:
    return web.Response(status=exc.code, body=orjson.dumps(exc.to_status()), content_type="application/json")


class Relay:
    def __init__(self, api: ClusterAPI, connect_timeout: float, verbose: bool = False) -> None:
        self.api = api
        self.connect_timeout = connect_timeout
        self.verbose = verbose
        self._http: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self.api.ssl_context), auto_decompress=False
            )
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    def server(self) -> web.Server:
        """The protocol factory the mesh session serves relayed streams with."""
        return web.Server(self.handle, access_log=None)

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        peer = request.transport.get_extra_info("mesh_peer_info") if request.transport is not None else None
        if not isinstance(peer, dict) or peer.get("kind") != PLATFORM_KIND:
            log.warning("refused a relayed request from a node that is not the platform", peer=peer)
            return _status(errors.forbidden("", "", "", "only the platform may use the agent's tunnel"))
        if request.path == HEALTH_PATH:
            return web.Response(text="ok")
        if request.headers.get("Upgrade"):
            return _status(
                errors.StatusError(
                    501,
                    "NotImplemented",
                    "upgraded connections (exec, attach, port-forward) are not relayed yet",
                )
            )
        headers = [
            (k, v)
            for k, v in request.headers.items()
            if k.lower() not in _DROP and not k.lower().startswith("impersonate-")
        ]
        authorization = self.api.authorization()
        if authorization:
            headers.append(("Authorization", authorization))
        body = await request.content.read() if request.can_read_body else None
        target = URL(self.api.base_url + request.rel_url.raw_path_qs, encoded=True)
        if self.verbose:
            log.info("agent relaying request", method=request.method, path=request.path)
        try:
            upstream = await self._client().request(
                request.method,
                target,
                headers=headers,
                data=body,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout),
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("the cluster's API server is unreachable", url=self.api.base_url, error=str(exc))
            return _status(
                errors.service_unavailable(f"the agent cannot reach its cluster's API server: {exc}", 1)
            )
        return await relay_response(request, upstream)
