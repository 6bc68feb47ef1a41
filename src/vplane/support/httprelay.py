"""Relaying an upstream HTTP response to a downstream client, streaming (watches stay open).

Each side's end is the other's: a client that goes closes the upstream connection at once (its watch on
the backend ends then, not at its next event or its timeout), and an upstream that breaks mid-body drops
the client's connection (as Go's reverse proxy aborts the handler), so a truncated body never looks
complete. Writes wait for the client (back-pressure), so a slow client slows the upstream read instead
of making the relay buffer.
"""

from __future__ import annotations

import contextlib

import aiohttp
from aiohttp import web

from vplane.support.httpserver import abort, on_connection_lost
from vplane.support.requestheader import HOP_BY_HOP


async def relay_response(request: web.BaseRequest, upstream: aiohttp.ClientResponse) -> web.StreamResponse:
    """Copy status, end-to-end headers and body chunk by chunk."""
    async with upstream:
        # Registered before anything is awaited, so a client gone while the upstream answered is seen too.
        forget = on_connection_lost(request, upstream.close)
        try:
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
            try:
                await resp.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await resp.write(chunk)
            except ConnectionError:
                return resp  # the client went (its callback closed the upstream)
            except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError):
                if request.transport is not None:
                    abort(request.transport)  # the upstream broke mid-body
                return resp
            with contextlib.suppress(ConnectionError):
                await resp.write_eof()
            return resp
        finally:
            forget()
