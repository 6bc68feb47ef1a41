"""A tenant API server accepts platform access keys as bearer tokens.

Unknown tokens are reviewed by the platform (``TokenReview``). Answers are cached for a short TTL, and
concurrent requests with the same token share one review, so a burst of proxied requests never queues
behind the platform; a key disabled on the platform stops working here within that TTL. The identity is
the platform's (``loft:vcluster:<project-namespace>:<name>`` for a tenant cluster's key) and this tenant's
own RBAC decides what it may do. A key the platform rejects gets 401 ``auth failed``.

Anyone who can reach the tenant can send tokens, so the cache is bounded: accepted and refused answers are
kept apart (random tokens cannot push out the answers for real keys), each is a least-recently-used map of
at most ``max_entries`` keyed by the token's SHA-256 (no token is kept in memory), and tokens longer than
``max_token_bytes`` are refused before anything is asked or stored.
"""

from __future__ import annotations

import asyncio
import hashlib
import ssl
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import structlog

from vplane.apiserver.context import UserInfo
from vplane.kube import errors
from vplane.kube.accesskeys import AUTH_FAILED, TENANT_KEY_REFUSED

log = structlog.get_logger("vplane.tenant.identity")


@dataclass
class _Entry:
    user: UserInfo | None
    expires: float


class _Answers:
    """Least-recently-used answers with expiry; ``put`` says how many it dropped to stay within capacity."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(capacity, 1)
        self._items: OrderedDict[bytes, _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, digest: bytes, now: float) -> _Entry | None:
        entry = self._items.get(digest)
        if entry is None:
            return None
        if entry.expires <= now:
            del self._items[digest]
            return None
        self._items.move_to_end(digest)
        return entry

    def put(self, digest: bytes, entry: _Entry) -> int:
        self._items[digest] = entry
        self._items.move_to_end(digest)
        evicted = 0
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)
            evicted += 1
        return evicted


Review = Callable[[str], Awaitable[UserInfo | None]]
"""The transport seam: ``token -> identity`` (None when the platform says the token is not valid)."""


def review_refused(status: int) -> errors.StatusError:
    """The answer to a caller when the platform does not answer a token review with 2xx. A 401 or 403 is
    about this tenant's own access key (disabled, deleted, rotated): it will not pass with a retry, and the
    runbook's row for it is "401 auth failed" (restart the control plane to take a new key), so the caller
    gets 401 with why. Anything else is the platform's trouble, passing: 503 and a retry."""
    if status in (401, 403):
        return errors.unauthorized(f"{AUTH_FAILED}: {TENANT_KEY_REFUSED} (token review: {status})")
    return errors.service_unavailable(f"platform token review failed: {status}", 1)


class PlatformTokenReviewer:
    def __init__(
        self,
        platform_url: str,
        ca_pem: bytes,
        reviewer_token: str,
        *,
        ttl: float = 10.0,
        timeout: float = 5.0,
        max_entries: int = 10_000,
        max_token_bytes: int = 4096,
        clock: Callable[[], float] = time.monotonic,
        review: Review | None = None,
    ) -> None:
        self.platform_url = platform_url.rstrip("/")
        self.ca_pem = ca_pem
        self.reviewer_token = reviewer_token
        self.ttl = ttl
        self.timeout = timeout
        self.max_token_bytes = max_token_bytes
        self.clock = clock
        self._accepted = _Answers(max_entries)
        self._refused = _Answers(max_entries)
        self._inflight: dict[bytes, asyncio.Future[UserInfo | None]] = {}
        self.evicted = 0
        """Answers dropped to stay within capacity (reported in the log, at most once per TTL)."""
        self._evicted_reported = 0
        self._reported_at: float | None = None
        self._refusal_logged: float | None = None
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

    @property
    def cached(self) -> int:
        """Answers held now (accepted and refused); never more than twice ``max_entries``."""
        return len(self._accepted) + len(self._refused)

    async def authenticate_token(self, token: str) -> UserInfo | None:
        if len(token) > self.max_token_bytes or len(token.encode()) > self.max_token_bytes:
            raise errors.token_too_long(self.max_token_bytes)
        digest = hashlib.sha256(token.encode()).digest()
        now = self.clock()
        entry = self._accepted.get(digest, now) or self._refused.get(digest, now)
        if entry is not None:
            return self._answer(entry.user)
        pending = self._inflight.get(digest)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._inflight[digest] = pending
            try:
                self.reviews += 1
                user = await self._send(token)
            except Exception as exc:
                del self._inflight[digest]
                pending.set_exception(exc)
                pending.exception()  # consumed here; waiters get it from their await
                raise
            self._remember(digest, user)
            del self._inflight[digest]
            pending.set_result(user)
            return self._answer(user)
        return self._answer(await asyncio.shield(pending))

    def _remember(self, digest: bytes, user: UserInfo | None) -> None:
        now = self.clock()
        answers = self._refused if user is None else self._accepted
        self.evicted += answers.put(digest, _Entry(user, now + self.ttl))
        if self.evicted > self._evicted_reported and (
            self._reported_at is None or now - self._reported_at >= self.ttl
        ):
            log.warning(
                "token review cache full; dropped the least recently used answers",
                accepted=len(self._accepted),
                refused=len(self._refused),
                capacity=answers.capacity,
                evicted=self.evicted - self._evicted_reported,
            )
            self._evicted_reported = self.evicted
            self._reported_at = now

    def _report_refusal(self, status: int) -> None:
        """Logged once per TTL: every caller's request asks again while the key stays refused."""
        now = self.clock()
        if status in (401, 403) and (self._refusal_logged is None or now - self._refusal_logged >= self.ttl):
            self._refusal_logged = now
            log.error("the platform refuses this tenant's access key: callers get 401", status=status)

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
                if resp.status // 100 != 2:
                    self._report_refusal(resp.status)
                    raise review_refused(resp.status)
                doc = await resp.json(content_type=None)
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
