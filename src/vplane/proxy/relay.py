"""How the proxy answers: relaying the target's answer to the caller (in one write when short, as it
arrives otherwise), its own Status answers, and the request's outcome for ``vcluster_proxy_request_total``.
Pure aiohttp plumbing with no proxy state, kept apart from the request pipeline in :mod:`.handler`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
from aiohttp import web
from multidict import CIMultiDict

from vplane.kube import errors, requestinfo
from vplane.proxy.upstream import UpstreamResponse

JSON_TYPE = "application/json"
STREAM_ABOVE = 64 * 1024
"""Answers at least this long (or of unknown length) are relayed as they arrive; shorter ones in one write."""


class Outcome:
    """The request's reason and code for ``vcluster_proxy_request_total``: the first reason wins. It also
    holds the answer once its headers went out (``streaming``): a cap that fires then can only cut it."""

    __slots__ = ("reason", "streaming")

    def __init__(self) -> None:
        self.reason = ""
        self.streaming: web.StreamResponse | None = None

    def set(self, reason: str) -> None:
        if not self.reason:
            self.reason = reason


async def relay(
    request: web.BaseRequest,
    upstream: UpstreamResponse,
    outcome: Outcome,
    on_chunk: Callable[[bytes], object] | None = None,
) -> web.StreamResponse:
    """The target's answer to the caller: a short one in one write, a longer one (or a watch, whose chunks
    ``on_chunk`` sees) as it arrives; a target answer that breaks off cuts the caller's connection too."""
    async with upstream:
        length = upstream.content_length if on_chunk is None else None
        if length is not None and length < STREAM_ABOVE:
            data = await upstream.read()
            return web.Response(body=data, status=upstream.status, headers=end_to_end(upstream.headers))
        # Larger bodies go through as they arrive, with their length when the target gave one (a
        # LIST is not copied into one buffer and out again).
        response: web.StreamResponse
        if length is not None:
            response = RelayedBody(status=upstream.status, headers=end_to_end(upstream.headers))
            response.content_length = length
        else:
            response = web.StreamResponse(status=upstream.status, headers=end_to_end(upstream.headers))
            response.enable_chunked_encoding()
        outcome.streaming = response
        try:
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                if on_chunk is not None:
                    on_chunk(chunk)
                await response.write(chunk)
        except ConnectionResetError:
            pass  # the caller went away (a LIST cut short, a watch closed): nothing is left to send
        except aiohttp.ClientPayloadError:
            # The target's answer broke off: so does the caller's, rather than looking complete.
            if request.transport is not None:
                request.transport.close()
        else:
            await response.write_eof()
        return response


def status_response(error: errors.StatusError) -> web.Response:
    return web.Response(
        status=error.code,
        body=orjson.dumps(error.to_status()),
        headers={"Content-Type": JSON_TYPE, **error.headers},
    )


class RelayedBody(web.StreamResponse):
    """A relayed answer of known length: its headers leave with the first piece of the body, as
    ``web.Response`` sends them, instead of in a TLS record and a loopback send of their own (about a
    tenth of the client replica's CPU per proxied LIST of 1,000 objects). A watch, whose caller waits for
    the headers before any event, keeps the immediate send."""

    _send_headers_immediately = False


def is_upgrade(request: web.BaseRequest) -> bool:
    return bool(request.headers.get("Upgrade")) or "upgrade" in request.headers.get("Connection", "").lower()


def object_path(info: requestinfo.RequestInfo) -> str:
    """The object's own path (a subresource write is checked against its object)."""
    base = f"/apis/{info.group}/{info.version}" if info.group else f"/api/{info.version}"
    if info.namespace:
        base += f"/namespaces/{quote(info.namespace, safe='')}"
    return f"{base}/{info.resource}/{quote(info.name, safe='')}"


_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "upgrade", "te", "trailer"}
)


def end_to_end(headers: Any) -> CIMultiDict[str]:
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in _HOP)


def describe(exc: BaseException) -> str:
    text = str(exc)
    return text if text else type(exc).__name__
