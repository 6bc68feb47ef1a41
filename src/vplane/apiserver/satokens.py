"""Service-account tokens from TokenRequest: how long one lives, and which ones still work.

Tokens are random strings kept in memory (they end with the process), each bound to the ServiceAccount's
UID as upstream binds its JWTs: once the account is deleted, or deleted and created again under the same
name, its earlier tokens stop working. Expired tokens are dropped as time passes (a heap of expiry times,
checked on every issue and lookup), and only a digest of each token is held.

Expiration follows kube-apiserver: ``spec.expirationSeconds`` defaults to 3600, must be an integer (a
string or a fraction is a decoding error, 400), at least 10 minutes and at most 2^32 seconds (422), and is
shortened to the server's maximum with a warning. Upstream lengthens pod-bound tokens of exactly 3607 s
(``--service-account-extend-token-expiration``); tokens here are never bound to pods, so nothing is.
"""

from __future__ import annotations

import hashlib
import heapq
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from vplane.apiserver.context import UserInfo
from vplane.kube import errors

DEFAULT_SECONDS = 3600
MIN_SECONDS = 10 * 60
MAX_SECONDS = 1 << 32
_INT64 = 1 << 63


def requested_seconds(raw: object) -> int:
    """The requested ``spec.expirationSeconds`` as decoding reads it: absent or null is the default, and
    anything but a 64-bit integer is upstream's 400 decoding error (checked before the body's other fields
    are, so its wording is Go's for this field)."""
    if raw is None:
        return DEFAULT_SECONDS
    if isinstance(raw, bool) or not isinstance(raw, int) or not -_INT64 <= raw < _INT64:
        raise errors.cannot_unmarshal(
            "TokenRequest", "v1", "TokenRequestSpec.spec.expirationSeconds", "int64", raw
        )
    return raw


def expiration(seconds: int, max_seconds: int) -> tuple[int, str | None]:
    """``(seconds, warning)`` for a requested lifetime: upstream's 422 outside 10 minutes to 2^32 seconds,
    shortened to ``max_seconds`` (0: no cap) with upstream's warning text."""
    if seconds < MIN_SECONDS:
        detail = "may not specify a duration less than 10 minutes"
    elif seconds > MAX_SECONDS:
        detail = "may not specify a duration larger than 2^32 seconds"
    else:
        detail = ""
    if detail:
        # Upstream names no object here: its validation runs on the request, not the account.
        raise errors.invalid(
            "TokenRequest",
            "",
            [errors.field_invalid("spec.expirationSeconds", seconds, detail)],
            "authentication.k8s.io",
        )
    if max_seconds > 0 and seconds > max_seconds:
        return max_seconds, f"requested expiration of {seconds} seconds shortened to {max_seconds} seconds"
    return seconds, None


@dataclass(frozen=True, slots=True)
class _Issued:
    user: UserInfo
    namespace: str
    name: str
    uid: str
    expires: float


LiveAccount = Callable[[str, str], str | None]
"""``(namespace, name) -> uid`` of the ServiceAccount that exists now, or None."""


class ServiceAccountTokens:
    def __init__(self, prefix: str = "vpsa-") -> None:
        self.prefix = prefix
        self._tokens: dict[bytes, _Issued] = {}
        self._expiry: list[tuple[float, bytes]] = []

    def __len__(self) -> int:
        return len(self._tokens)

    @staticmethod
    def _digest(token: str) -> bytes:
        return hashlib.sha256(token.encode()).digest()

    def issue(self, namespace: str, name: str, uid: str, expires: float, now: float) -> tuple[str, UserInfo]:
        """A new token for the account ``namespace/name`` with ``uid``, valid until ``expires``."""
        self.purge(now)
        token = self.prefix + secrets.token_urlsafe(32)
        user = UserInfo(
            f"system:serviceaccount:{namespace}:{name}",
            uid,
            ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
        )
        digest = self._digest(token)
        self._tokens[digest] = _Issued(user, namespace, name, uid, expires)
        heapq.heappush(self._expiry, (expires, digest))
        return token, user

    def lookup(self, token: str, now: float, live: LiveAccount) -> UserInfo | None:
        """The account behind ``token`` while it is unexpired and its account (that UID) exists."""
        self.purge(now)
        if not token.startswith(self.prefix):
            return None
        digest = self._digest(token)
        issued = self._tokens.get(digest)
        if issued is None:
            return None
        if live(issued.namespace, issued.name) != issued.uid:
            del self._tokens[digest]  # the account is gone for good: so is the token
            return None
        return issued.user

    def purge(self, now: float) -> int:
        """Drop every token whose expiry has passed; returns how many went."""
        dropped = 0
        while self._expiry and self._expiry[0][0] <= now:
            _, digest = heapq.heappop(self._expiry)
            if self._tokens.pop(digest, None) is not None:
                dropped += 1
        return dropped
