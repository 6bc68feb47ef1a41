"""The framework ceiling: a bare aiohttp HTTPS handler returning fixed JSON bytes, nothing else."""

from __future__ import annotations

import ssl
import sys

from aiohttp import web


def main() -> None:
    port, cert, key, body_path = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    with open(body_path, "rb") as f:
        body = f.read()

    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=body, headers={"Content-Type": "application/json"})

    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    # The same event loop as vplane's servers (uvloop), so the ratio compares handlers, not loops.
    import uvloop

    web.run_app(
        app,
        host="127.0.0.1",
        port=port,
        ssl_context=ctx,
        access_log=None,
        print=None,
        loop=uvloop.new_event_loop(),
    )


if __name__ == "__main__":
    main()
