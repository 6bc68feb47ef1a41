"""A tenant API server accepts platform access keys as bearer tokens.

Unknown tokens are reviewed by the platform (``TokenReview``). Answers are cached for a short TTL, and
concurrent requests with the same token share one review, so a burst of proxied requests never queues
behind the platform; a key disabled on the platform stops working here within that TTL. The identity is
the platform's (``loft:vcluster:<project-namespace>:<name>`` for a tenant cluster's key) and this tenant's
own RBAC decides what it may do. A key the platform rejects gets 401 ``auth failed``.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import structlog

from vplane.apiserver.context import UserInfo
from vplane.kube import errors

log = structlog.get_logger("vplane.tenant.identity")

AUTH_FAILED = "auth failed"


@dataclass
class _Entry:
    user: UserInfo | None
    expires: float


Review = Callable[[str], Awaitable[UserInfo | None]]
"""The transport seam: ``token -> identity`` (None when the platform says the token is not valid)."""


class PlatformTokenReviewer:
    def __init__(
        self,
        platform_url: str,
        ca_pem: bytes,
        reviewer_token: str,
        *,
        ttl: float = 10.0,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        review: Review | None = None,
    ) -> None:
        self.platform_url = platform_url.rstrip("/")
        self.ca_pem = ca_pem
        self.reviewer_token = reviewer_token
        self.ttl = ttl
        self.timeout = timeout
        self.clock = clock
        self._cache: dict[str, _Entry] = {}
        self._inflight: dict[str, asyncio.Future[UserInfo | None]] = {}
        self._session: aiohttp.ClientSession | None = None
        self.reviews = 0
        """Reviews actually sent (tests check that a burst shares one)."""
        self._send: Review = review or self._review_over_http

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            ctx = ssl.create_default_context(cadata=self.ca_pem.decode())
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=ctx),
                headers={"Authorization": f"Bearer {self.reviewer_token}"},
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def authenticate_token(self, token: str) -> UserInfo | None:
        now = self.clock()
        entry = self._cache.get(token)
        if entry is not None and entry.expires > now:
            return self._answer(entry.user)
        pending = self._inflight.get(token)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._inflight[token] = pending
            try:
                self.reviews += 1
                user = await self._send(token)
            except Exception as exc:
                del self._inflight[token]
                pending.set_exception(exc)
                pending.exception()  # consumed here; waiters get it from their await
                raise
            self._cache[token] = _Entry(user, self.clock() + self.ttl)
            del self._inflight[token]
            pending.set_result(user)
            return self._answer(user)
        return self._answer(await asyncio.shield(pending))

    @staticmethod
    def _answer(user: UserInfo | None) -> UserInfo | None:
        if user is None:
            raise errors.unauthorized(AUTH_FAILED)
        return user

    async def _review_over_http(self, token: str) -> UserInfo | None:
        body: dict[str, Any] = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        try:
            async with self._client().post(
                f"{self.platform_url}/apis/authentication.k8s.io/v1/tokenreviews",
                json=body,
                timeout=aiohttp.ClientTimeout(total=self.timeout),
            ) as resp:
                doc = await resp.json(content_type=None)
                if resp.status // 100 != 2:
                    raise errors.service_unavailable(f"platform token review failed: {resp.status}", 1)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("platform unreachable for token review", error=str(exc))
            raise errors.service_unavailable(
                "the platform could not be reached to review the token", 1
            ) from None
        status = doc.get("status") or {}
        if not status.get("authenticated"):
            return None
        info = status.get("user") or {}
        groups = tuple(info.get("groups") or ())
        return UserInfo(
            str(info.get("username", "")),
            str(info.get("uid", "")),
            groups,
            {k: tuple(v) for k, v in (info.get("extra") or {}).items()},
        )
