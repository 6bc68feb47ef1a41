"""An aiohttp application served over TLS from the test process: webhooks and aggregated backends that the
real vplane processes under test call back into.

The server runs on an event loop of its own in a daemon thread. Stopping it aborts every connection still
open: a kept-alive connection's TLS goodbye waits for the peer, and a loop closed meanwhile leaves its
socket to the garbage collector, which reports it as an unclosed-socket warning in whatever test runs
next on that worker (warnings are errors there).
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Self

from aiohttp import web


class ThreadedServer:
    """``app`` served on ``127.0.0.1:port`` (0 picks a free port, read back from ``port`` once started)."""

    def __init__(
        self,
        app: Callable[[], web.Application],
        ssl_context: ssl.SSLContext,
        port: int = 0,
        shutdown_timeout: float = 1.0,
    ) -> None:
        self._app = app
        self._ssl = ssl_context
        self.port = port
        self._shutdown_timeout = shutdown_timeout
        self.loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._taken: set[asyncio.BaseTransport] = set()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @classmethod
    def catch_all(
        cls,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
        cert: Path,
        key: Path,
        *,
        client_ca: Path | None = None,
        port: int = 0,
    ) -> ThreadedServer:
        """``handler`` for every method and path, serving ``cert``; with ``client_ca``, clients must present
        a certificate it signed (an aggregator's front-proxy certificate)."""
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(cert, key)
        if client_ca is not None:
            ctx.load_verify_locations(cafile=str(client_ca))
            ctx.verify_mode = ssl.CERT_REQUIRED

        def app() -> web.Application:
            application = web.Application()
            application.router.add_route("*", "/{tail:.*}", handler)
            return application

        return cls(app, ctx, port)

    def start(self) -> Self:
        self._thread.start()
        assert self._ready.wait(10), "the test server did not start"
        return self

    def stop(self) -> None:
        if self._thread.is_alive() and self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(10)

    def track(self, transport: asyncio.BaseTransport | None) -> None:
        """Abort ``transport`` too at stop: a connection a handler took over from aiohttp (an upgrade it
        serves itself) is no longer among the server's connections."""
        if transport is not None:
            self._taken.add(transport)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._main())
        finally:
            self.loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=self._shutdown_timeout)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port, ssl_context=self._ssl).start()
        self.port = runner.addresses[0][1]
        self._ready.set()
        await self._stop.wait()
        server = runner.server
        transports = [h.transport for h in server.connections] if server is not None else []
        await runner.cleanup()
        for transport in [*transports, *self._taken]:
            if isinstance(transport, asyncio.Transport):
                transport.abort()
        for _ in range(3):  # the aborts' callbacks run before the loop closes
            await asyncio.sleep(0)
