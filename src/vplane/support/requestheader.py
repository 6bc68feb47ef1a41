"""Request-header authentication: trusting ``X-Remote-*`` identity headers from an authenticating proxy.

An aggregating API server forwards requests with the caller's identity in headers and proves it is the
proxy with a client certificate (the front-proxy certificate). The headers are trusted only when that
certificate was issued by the request-header CA and its common name is allowed, exactly as upstream's
``requestheader`` authenticator does; anyone else sending the headers gets them ignored.

A certificate from the request-header CA is a proxy's credential and nothing else: it never authenticates
as a user by its own subject (only the cluster CA's certificates do, see :func:`issued_by`), whatever its
common name, so whoever holds a front-proxy key can speak for users only as the proxy it is allowed to be.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote

USER_HEADERS = ("X-Remote-User",)
UID_HEADERS = ("X-Remote-Uid",)
GROUP_HEADERS = ("X-Remote-Group",)
EXTRA_PREFIXES = ("X-Remote-Extra-",)


@dataclass(frozen=True)
class RequestHeaderConfig:
    issuer: tuple[tuple[tuple[str, str], ...], ...]
    """The request-header CA's subject, as ``ssl`` reports a certificate's issuer."""
    allowed_names: tuple[str, ...] = ("front-proxy-client",)
    """Common names a proxy certificate may have; empty allows any certificate from the CA."""


@dataclass(frozen=True)
class RemoteIdentity:
    user: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, tuple[str, ...]] = field(default_factory=dict)


def _common_name(rdns: object) -> str:
    if not isinstance(rdns, tuple):
        return ""
    for rdn in rdns:
        for attr in rdn:
            if isinstance(attr, tuple) and len(attr) == 2 and attr[0] == "commonName":
                return str(attr[1])
    return ""


Issuer = tuple[tuple[tuple[str, str], ...], ...]
"""A CA's subject in the shape ``ssl.getpeercert()`` reports a certificate's issuer."""


def issued_by(peercert: Mapping[str, object] | None, issuer: Issuer) -> bool:
    """Whether a verified peer certificate was issued by the CA with subject ``issuer``.

    The TLS layer verified the chain against the CAs the server trusts (the cluster CA and the request-header
    CA), and their subjects are distinct (each carries a random suffix), so the issuer name says which one
    signed it."""
    if not peercert or not issuer:
        return False
    return peercert.get("issuer") == issuer


def is_proxy_certificate(peercert: Mapping[str, object] | None, config: RequestHeaderConfig) -> bool:
    """Whether a verified peer certificate is an allowed front-proxy certificate."""
    if peercert is None or not issued_by(peercert, config.issuer):
        return False
    return not config.allowed_names or _common_name(peercert.get("subject")) in config.allowed_names


def identity_from_headers(
    headers: Mapping[str, str], all_values: Mapping[str, Sequence[str]]
) -> RemoteIdentity | None:
    """The identity in the headers (``all_values`` maps a header to every value it was sent with)."""
    user = next((headers[h] for h in USER_HEADERS if headers.get(h)), "")
    if not user:
        return None
    uid = next((headers[h] for h in UID_HEADERS if headers.get(h)), "")
    groups: list[str] = []
    for h in GROUP_HEADERS:
        groups.extend(all_values.get(h, ()))
    extra: dict[str, list[str]] = {}
    for name, values in all_values.items():
        for prefix in EXTRA_PREFIXES:
            if name.lower().startswith(prefix.lower()):
                key = unquote(name[len(prefix) :]).lower()
                extra.setdefault(key, []).extend(values)
    return RemoteIdentity(user, uid, tuple(groups), {k: tuple(v) for k, v in extra.items()})


def forwarding_headers(
    user: str, uid: str, groups: Sequence[str], extra: Mapping[str, Sequence[str]]
) -> list[tuple[str, str]]:
    """Headers an aggregator sets for the backend (client-go ``SetAuthProxyHeaders``)."""
    from urllib.parse import quote

    out = [("X-Remote-User", user)]
    if uid:
        out.append(("X-Remote-Uid", uid))
    out.extend(("X-Remote-Group", g) for g in groups)
    for key, values in extra.items():
        out.extend((f"X-Remote-Extra-{quote(key, safe='')}", v) for v in values)
    return out


HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)


def strip_identity_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Every header but credentials, identity and hop-by-hop ones, which a proxy must not pass on."""
    drop = ("authorization", "impersonate-", "x-remote-")
    return [(k, v) for k, v in headers if not (low := k.lower()).startswith(drop) and low not in HOP_BY_HOP]
