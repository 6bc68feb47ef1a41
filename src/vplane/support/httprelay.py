"""Relaying an upstream HTTP response to a downstream client, streaming (watches stay open)."""

from __future__ import annotations

import contextlib

import aiohttp
from aiohttp import web

from vplane.support.requestheader import HOP_BY_HOP


async def relay_response(request: web.BaseRequest, upstream: aiohttp.ClientResponse) -> web.StreamResponse:
    """Copy status, end-to-end headers and body chunk by chunk; a client or upstream that goes away
    ends the relay quietly (the other side sees a closed stream, as with any proxy)."""
    async with upstream:
        resp = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        for name, value in upstream.headers.items():
            if name.lower() not in HOP_BY_HOP:
                resp.headers.add(name, value)
        if (
            upstream.headers.get("Transfer-Encoding", "").lower() == "chunked"
            or upstream.content_length is None
        ):
            resp.enable_chunked_encoding()
        else:
            resp.content_length = upstream.content_length
        await resp.prepare(request)
        with contextlib.suppress(ConnectionResetError, aiohttp.ClientPayloadError):
            async for chunk in upstream.content.iter_any():
                await resp.write(chunk)
        with contextlib.suppress(ConnectionResetError):
            await resp.write_eof()
        return resp
