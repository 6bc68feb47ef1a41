"""The framework ceiling: a bare aiohttp HTTPS handler returning fixed JSON bytes, nothing else.

It uses aiohttp's low-level server (no router, no application), as vplane's API server does, so the
ratio compares vplane's request handling with the least aiohttp can do per request.
"""

from __future__ import annotations

import asyncio
import ssl
import sys

from aiohttp import web


def main() -> None:
    port, cert, key, body_path = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    with open(body_path, "rb") as f:
        body = f.read()

    async def handler(request: web.BaseRequest) -> web.Response:
        return web.Response(body=body, headers={"Content-Type": "application/json"})

    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    # The same event loop as vplane's servers (uvloop), so the ratio compares handlers, not loops.
    import uvloop

    async def serve() -> None:
        runner = web.ServerRunner(web.Server(handler, access_log=None), handle_signals=True)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port, ssl_context=ctx).start()
        await asyncio.Event().wait()

    uvloop.run(serve())


if __name__ == "__main__":
    main()
