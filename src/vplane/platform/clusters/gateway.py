"""The platform's private door to a tunnel cluster's API: ``<platform>/vplane/cluster-gateway/<name>/...``.

Helm and the platform's Kubernetes client need an HTTPS URL; this path turns one into a relayed request
through the cluster's agent session (platform mesh node -> coordinator relay -> agent -> the cluster's
API server, with the agent's credentials). It accepts only a token that lives in this process's memory
(and in the private kubeconfigs it writes for its helm runs), so it is no door for users: users reach
connected clusters through ``/kubernetes/cluster/<name>`` once that exists (with their own identity).
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable, Sequence

import aiohttp
import orjson
import structlog
from aiohttp import web
from yarl import URL

from vplane.kube import errors
from vplane.kube.accesskeys import agent_subject
from vplane.mesh.coordinator import NodeInfo
from vplane.platform.clusters import status as st
from vplane.platform.clusters.localclient import LocalClient, Unavailable
from vplane.support.httprelay import relay_response
from vplane.support.requestheader import HOP_BY_HOP

log = structlog.get_logger("vplane.platform.clusters")

PREFIX = "/vplane/cluster-gateway/"
AGENT_HEALTH_PATH = "/vplane/agent/healthz"
"""Answered by the agent itself (``vplane.agent.relay.HEALTH_PATH``; the layers share no module)."""
NODE_SEPARATOR = "~"
"""``<cluster>~<node-id>`` pins the gateway to one session (the upgrade bridge's); no Kubernetes name has a
``~``."""
_DROP = frozenset({"authorization", "host", "content-length"}) | HOP_BY_HOP


def _status(exc: errors.StatusError) -> web.Response:
    return web.Response(status=exc.code, body=orjson.dumps(exc.to_status()), content_type="application/json")


def agent_sessions(nodes: Sequence[NodeInfo], cluster: str) -> list[NodeInfo]:
    """The cluster's agent sessions known to this coordinator, online ones first, newest first."""
    subject = agent_subject(cluster)
    mine = [n for n in nodes if n.kind == "agent" and n.identity == subject]
    return sorted(mine, key=lambda n: (not n.online, -(n.connected_at or 0.0), n.id))


class Gateway:
    def __init__(self, local: LocalClient, nodes: Callable[[], Sequence[NodeInfo]]) -> None:
        self.local = local
        self.nodes = nodes
        self.token = secrets.token_urlsafe(32)

    def server_url(self, platform_url: str, cluster: str, node: str | None = None) -> str:
        """The cluster through its newest online agent session, or through session ``node`` only."""
        pinned = f"{NODE_SEPARATOR}{node}" if node else ""
        return f"{platform_url.rstrip('/')}{PREFIX}{cluster}{pinned}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        header = request.headers.get("Authorization", "")
        given = header[7:] if header.lower().startswith("bearer ") else ""
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            return _status(errors.unauthorized())
        segment, _, rest = request.rel_url.raw_path[len(PREFIX) :].partition("/")
        name, _, node = segment.partition(NODE_SEPARATOR)
        online = [n for n in agent_sessions(self.nodes(), name) if n.online and (not node or n.id == node)]
        if not online:
            what = f"{st.GATEWAY_NO_SESSION} {node}" if node else st.GATEWAY_NO_SESSION
            return _status(errors.service_unavailable(f'cluster "{name}" {what}', 1))
        try:
            http = self.local.http()
        except Unavailable as exc:
            return _status(errors.service_unavailable(f"the platform's mesh client is unavailable: {exc}", 1))
        headers = [
            (k, v)
            for k, v in request.headers.items()
            if k.lower() not in _DROP and not k.lower().startswith("impersonate-")
        ]
        body = await request.read() if request.can_read_body else None
        target = f"http://{online[0].id}/{rest}"
        if request.rel_url.raw_query_string:
            target += "?" + request.rel_url.raw_query_string
        try:
            upstream = await http.request(
                request.method,
                URL(target, encoded=True),
                headers=headers,
                data=body,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=None),
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            return _status(
                errors.service_unavailable(f'cannot reach cluster "{name}" {st.GATEWAY_UNREACHABLE} {exc}', 1)
            )
        return await relay_response(request, upstream)
