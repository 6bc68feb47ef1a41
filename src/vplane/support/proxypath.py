"""What the API server and the kubelet share for proxying to pods (``pods/proxy``, ``services/proxy``):
the kubelet path of vplane's pod proxy (``vplane.runtime.podproxy``) and which headers a hop passes on."""

from __future__ import annotations

import contextlib
from typing import Any
from urllib.parse import quote

import aiohttp
from aiohttp import web

from vplane.support.requestheader import HOP_BY_HOP

POD_PROXY_PREFIX = "/vplane/podProxy/"


def pod_proxy_path(scheme: str, namespace: str, pod: str, port: int, path: str) -> str:
    """The kubelet path for ``path`` (already percent-encoded, may be empty) on ``pod``'s ``port``."""
    return POD_PROXY_PREFIX + "/".join(quote(p, safe="") for p in (scheme, namespace, pod, str(port))) + path


def end_to_end(headers: Any) -> list[tuple[str, str]]:
    """Headers without the hop-by-hop ones (RFC 9110 §7.6.1), including those the Connection header names
    (``Host`` and ``Content-Length`` too: the next hop sets its own)."""
    items = list(headers.items())
    named = {
        token.strip().lower() for k, v in items if k.lower() == "connection" for token in str(v).split(",")
    }
    return [(k, v) for k, v in items if k.lower() not in HOP_BY_HOP and k.lower() not in named]


async def relay_body(
    request: web.BaseRequest, response: web.StreamResponse, upstream: aiohttp.ClientResponse
) -> web.StreamResponse:
    """Send ``response`` (status and headers set) with ``upstream``'s body copied as it arrives: a caller or
    backend that goes away mid-way ends it quietly."""
    await response.prepare(request)
    with contextlib.suppress(ConnectionResetError, aiohttp.ClientPayloadError):
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
    with contextlib.suppress(ConnectionResetError):
        await response.write_eof()
    return response
