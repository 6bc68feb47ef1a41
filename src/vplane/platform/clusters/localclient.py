"""The platform's own mesh node: how it reaches agent tunnels (upstream's "local client").

The coordinator relays streams between node sessions only, so the platform joins its own mesh as a node
(key ``loft-platform``, subject ``loft:platform``, kind ``platform``) that may see every agent and no one
else. HTTP to an agent is aiohttp over a mesh dial (``http://<node-id>/...``). When this node is not
connected, tunnel clusters report ``LocalClient``; the node keeps retrying, also after its key was
refused (an administrator may re-enable it).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import cast

import aiohttp
import structlog

from vplane.kube import accesskeys
from vplane.kube.objects import Obj
from vplane.mesh.dialer import Dialer
from vplane.mesh.session import Netmap, NodeSession, RegistrationError, Stream
from vplane.mesh.settings import MeshSettings

log = structlog.get_logger("vplane.platform.clusters")

PLATFORM_KEY_NAME = "loft-platform"
PLATFORM_SUBJECT = "loft:platform"
PLATFORM_KIND = "platform"
KEY_TYPE_OTHER = "Other"


def platform_key_object() -> Obj:
    return accesskeys.key_object(
        PLATFORM_KEY_NAME,
        KEY_TYPE_OTHER,
        subject=PLATFORM_SUBJECT,
        roles=(accesskeys.ROLE_NETWORK_PEER,),
        display_name="the platform's own mesh node (created by vplane)",
    )


def is_platform_identity(user: str, key_type: str, key_name: str) -> bool:
    """Whether a registering node is the platform's own (kind ``platform``: it may see every agent)."""
    return user == PLATFORM_SUBJECT and key_type == KEY_TYPE_OTHER and key_name == PLATFORM_KEY_NAME


class Unavailable(Exception):
    pass


class LocalClient:
    def __init__(
        self,
        url: str,
        ssl_context: ssl.SSLContext,
        ensure_key: Callable[[Obj], Awaitable[Obj]],
        *,
        hostname: str,
        settings: MeshSettings,
        retry_seconds: float,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.url = url
        self.ssl_context = ssl_context
        self.ensure_key = ensure_key
        self.hostname = hostname
        self.settings = settings
        self.retry_seconds = retry_seconds
        self.on_change = on_change
        self.session: NodeSession | None = None
        self.error = ""
        self._http: aiohttp.ClientSession | None = None
        self._dialer: Dialer | None = None
        self._task: asyncio.Task[None] | None = None
        self._up = False
        self._ready = asyncio.Event()

    @property
    def available(self) -> bool:
        session = self.session
        return session is not None and session.connected and session.netmap.seq > 0

    def http(self) -> aiohttp.ClientSession:
        """aiohttp over mesh dials; URLs are ``http://<node-id>/path``."""
        if not self.available or self._http is None:
            raise Unavailable(self.error or "the platform's mesh client is not connected")
        return self._http

    async def dial(self, node_id: str) -> Stream:
        """A raw connection to ``node_id`` (an upgrade relayed as bytes: exec, attach, port-forward)."""
        if not self.available or self._dialer is None:
            raise Unavailable(self.error or "the platform's mesh client is not connected")
        return await self._dialer.dial(node_id)

    async def wait_peer(self, node_id: str, within: float) -> bool:
        """Whether ``node_id`` is (or within ``within`` seconds becomes) dialable: a node that just registered
        reaches this node's netmap a moment after the coordinator reported it."""
        session = self.session
        if session is None:
            return False
        if node_id in session.peers:
            return True
        with contextlib.suppress(TimeoutError):
            async with (
                asyncio.timeout(within),
                contextlib.aclosing(cast(AsyncGenerator[Netmap, None], session.subscribe())) as netmaps,
            ):
                async for netmap in netmaps:
                    if node_id in netmap.peers:
                        return True
        return False

    async def start(self, ready_timeout: float) -> None:
        self._task = asyncio.create_task(self._run(), name="platform-local-client")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(ready_timeout):
                await self._ready.wait()
        if not self.available:
            log.warning("the platform's mesh client is not connected yet", error=self.error)

    async def _run(self) -> None:
        while True:
            try:
                key = await self.ensure_key(platform_key_object())
                session = NodeSession(
                    self.url,
                    str(key["spec"]["key"]),
                    hostname=self.hostname,
                    settings=self.settings,
                    ssl_context=self.ssl_context,
                )
                self.session = session
                self._dialer = Dialer(session)
                self._http = aiohttp.ClientSession(connector=self._dialer.connector(), auto_decompress=False)
                await session.start()
                async for _ in session.subscribe():
                    self._changed()
                if session.failure is not None:
                    raise session.failure
            except asyncio.CancelledError:
                raise
            except RegistrationError as exc:
                self.error = f"registration refused: {exc}"
                log.error("the platform's mesh client was refused by its coordinator", error=str(exc))
            except Exception as exc:
                self.error = f"{type(exc).__name__}: {exc}"
                log.exception("the platform's mesh client failed")
            await self._teardown()
            self._changed()
            await asyncio.sleep(self.retry_seconds)

    def _changed(self) -> None:
        up = self.available
        if up != self._up:
            self._up = up
            if up:
                self.error = ""
            if up:
                log.info("platform mesh client connected")
                self._ready.set()
            else:
                log.warning("platform mesh client disconnected", error=self.error or None)
            self.on_change()

    async def _teardown(self) -> None:
        if self._http is not None:
            with contextlib.suppress(Exception):
                await self._http.close()
            self._http = None
        self._dialer = None
        if self.session is not None:
            with contextlib.suppress(Exception):
                await self.session.close()
            self.session = None

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._teardown()
