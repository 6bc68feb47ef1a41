"""Authentication: who sent a request.

In order: a client certificate signed by the cluster CA (CN = user, O = groups), then a bearer token
checked by each token authenticator in turn (static tokens from the data directory, then any added at
run time, such as platform access keys). A request with no credentials is anonymous, which the server
refuses except on the health and version endpoints. A bad credential is always 401, never anonymous.

The server's TLS layer also accepts certificates from the request-header (front-proxy) CA; those speak
only for the proxy (``X-Remote-*`` headers, when their name is allowed) and never as a user themselves.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote

import orjson

from vplane.apiserver.context import UserInfo
from vplane.kube import errors
from vplane.support import requestheader, tls

AUTHENTICATED = "system:authenticated"


class TokenAuthenticator(Protocol):
    async def authenticate_token(self, token: str) -> UserInfo | None:
        """The user a token belongs to, or None when this authenticator does not know it."""


@dataclass
class StaticToken:
    token: str
    user: str
    uid: str
    groups: tuple[str, ...]


class StaticTokens:
    """Tokens kept in ``<data-dir>/auth/tokens.json`` (the admin token is created on first start)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._tokens: list[StaticToken] = []

    def load(self) -> None:
        if not self.path.exists():
            self._tokens = []
            return
        raw = orjson.loads(self.path.read_bytes())
        self._tokens = [
            StaticToken(t["token"], t["user"], t.get("uid", t["user"]), tuple(t.get("groups", [])))
            for t in raw
        ]

    def ensure(self, user: str, groups: tuple[str, ...]) -> str:
        """The token of ``user``, minting and saving one if it has none."""
        for t in self._tokens:
            if t.user == user:
                return t.token
        token = secrets.token_urlsafe(32)
        self._tokens.append(StaticToken(token, user, user, groups))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_bytes(
            orjson.dumps(
                [
                    {"token": t.token, "user": t.user, "uid": t.uid, "groups": list(t.groups)}
                    for t in self._tokens
                ],
                option=orjson.OPT_INDENT_2,
            )
        )
        self.path.chmod(0o600)
        return token

    async def authenticate_token(self, token: str) -> UserInfo | None:
        for t in self._tokens:
            if hmac.compare_digest(t.token, token):
                return UserInfo(t.user, t.uid, with_authenticated(t.groups))
        return None


def certificate_user(
    peercert: Mapping[str, object] | None,
    client_ca: requestheader.Issuer,
    proxy: requestheader.RequestHeaderConfig,
    headers: Mapping[str, str],
    all_values: Callable[[], Mapping[str, Sequence[str]]],
) -> UserInfo | None:
    """The user a verified client certificate stands for, or None when it stands for no one.

    An allowed front-proxy certificate stands for the user in its ``X-Remote-*`` headers (``all_values``
    gives every value of every header); a certificate of the cluster CA for its subject (CN = user,
    O = groups); any other verified certificate (the request-header CA's with a name that is not allowed,
    or an allowed one without headers) for no one, so the request falls through to its bearer token."""
    if not peercert:
        return None
    if requestheader.is_proxy_certificate(peercert, proxy):
        remote = requestheader.identity_from_headers(headers, all_values())
        if remote is None:
            return None
        return UserInfo(remote.user, remote.uid, remote.groups, remote.extra)
    if not requestheader.issued_by(peercert, client_ca):
        return None
    identity = tls.subject_identity(dict(peercert))
    if identity is None:
        return None
    user, groups = identity
    return UserInfo(user, "", with_authenticated(groups))


def with_authenticated(groups: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    out = tuple(groups)
    return out if AUTHENTICATED in out else (*out, AUTHENTICATED)


def bearer_token(headers: Mapping[str, str]) -> str | None:
    value = headers.get("Authorization", "")
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise errors.unauthorized()
    return token.strip()


@dataclass(frozen=True)
class Impersonation:
    user: str
    uid: str
    groups: tuple[str, ...]
    extra: dict[str, tuple[str, ...]]


def impersonation_from(
    headers: Mapping[str, str], all_groups: list[str], extras: dict[str, list[str]]
) -> Impersonation | None:
    """Read ``Impersonate-*`` headers (groups and extras may repeat); None when there are none."""
    user = headers.get("Impersonate-User", "")
    uid = headers.get("Impersonate-Uid", "")
    if not user and not all_groups and not uid and not extras:
        return None
    if not user:
        raise errors.bad_request("requested impersonation without a user: Impersonate-User is required")
    return Impersonation(user, uid, tuple(all_groups), {unquote(k): tuple(v) for k, v in extras.items()})
