"""The kubelet's pod proxy: the API server's ``pods/proxy`` and ``services/proxy`` reach a pod through it.

Upstream's API server dials the pod's IP itself. vplane's API server opens no connection to an address an
object names (a tenant could point one at the platform host's own network), so it asks the pod's kubelet
instead, over the kubelet API it already uses for logs, under its kubelet client certificate: the kubelet
forwards only to pods it runs, at the address it gave them. Not a route of the real kubelet API; the path
is vplane's own:

    /vplane/podProxy/<scheme>/<namespace>/<pod>/<port><path>?<query>

The answer is passed back as the pod gave it (status, end-to-end headers, body streamed); HTTPS pods are
not verified, as upstream's proxy transport does not verify them. The API server rewrites links to the
proxy path afterwards (``vplane.support.proxyrewrite``).
"""

from __future__ import annotations

import os

import aiohttp
import yarl
from aiohttp import web

from vplane.kube import errors
from vplane.runtime.cri import ContainerRuntime
from vplane.support.proxypath import POD_PROXY_PREFIX, end_to_end, relay_body

ROUTE = POD_PROXY_PREFIX + "{scheme}/{namespace}/{pod}/{port}{tail:.*}"
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
CONNECT_TIMEOUT_SECONDS = 10.0


async def pod_proxy_handler(request: web.Request, runtime: ContainerRuntime) -> web.StreamResponse:
    info = request.match_info
    scheme, namespace, pod, port = info["scheme"], info["namespace"], info["pod"], info["port"]
    if scheme not in ("http", "https") or not port.isdigit() or not 0 < int(port) < 65536:
        return web.Response(status=400, text=f"invalid scheme or port: {scheme}:{port}")
    address = runtime.pod_ip(namespace, pod)
    if address is None:
        return web.Response(status=404, text=f'pod "{pod}" does not exist on this node')
    # The pod's path as the caller encoded it: everything after the port segment of the raw path.
    raw = request.rel_url.raw_path.split("/", 7)
    path = "/" + raw[7] if len(raw) == 8 else ""
    url = yarl.URL(f"{scheme}://{address}:{port}{path or '/'}", encoded=True)
    if request.rel_url.raw_query_string:
        url = url.with_query(request.rel_url.raw_query_string)
    body = await request.read() if request.can_read_body else None
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_SECONDS)
    async with aiohttp.ClientSession(auto_decompress=False, timeout=timeout) as session:
        try:
            upstream = await session.request(
                request.method,
                url,
                headers=end_to_end(request.headers),
                data=body,
                allow_redirects=False,
                ssl=False,
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            # As upstream's API server answers a proxy it cannot dial: a 503 Status kubectl prints as is.
            message = f"error trying to reach service: dial tcp {address}:{port}: {_dial_failure(exc)}"
            return web.json_response(errors.service_unavailable(message).to_status(), status=503)
        async with upstream:
            headers = end_to_end(upstream.headers)
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers=headers)
            if upstream.content_length is not None:
                response.content_length = upstream.content_length
            return await relay_body(request, response, upstream)


def _dial_failure(exc: BaseException) -> str:
    """Go's words for a failed dial (``connect: connection refused``, ``i/o timeout``)."""
    cause = exc.os_error if isinstance(exc, aiohttp.ClientConnectorError) else exc
    if isinstance(cause, TimeoutError) or isinstance(exc, TimeoutError):
        return "i/o timeout"
    if isinstance(cause, OSError) and cause.errno is not None:
        return f"connect: {os.strerror(cause.errno).lower()}"
    return str(exc) or type(exc).__name__
