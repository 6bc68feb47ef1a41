"""Service-account tokens from TokenRequest: their claims, how long one lives, and which ones still work.

As upstream's bound tokens (``pkg/serviceaccount/claims.go``) they are JWTs: issuer
``https://kubernetes.default.svc.cluster.local``, the audiences asked for (the API server's own by
default), ``iat``/``nbf``/``exp``, a ``jti``, and under ``kubernetes.io`` the namespace, the account's name
and UID and the object the token is bound to (a Pod, Secret or Node, name and UID). They are signed with
the cluster CA's P-256 key (ES256), the service-account key of ``vplane apiserver``, so they survive a
restart, every replica of one cluster accepts them, and anyone can check them with the keys at
``/openid/v1/jwks``. A signature is not enough: the API server also wants one of its audiences in
``aud``, the time inside ``nbf``..``exp``, and the account and the bound object to exist still with the
UIDs the token names, so deleting either revokes it.

Expiration follows kube-apiserver: ``spec.expirationSeconds`` defaults to 3600, must be an integer (a
string or a fraction is a decoding error, 400), at least 10 minutes and at most 2^32 seconds (422), and is
shortened to the server's maximum with a warning. Upstream lengthens pod-bound tokens of exactly 3607 s
(``--service-account-extend-token-expiration``); here they keep the time asked for (the node runtime
refreshes its pods' projected tokens before they expire), so nothing is lengthened.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from vplane.apiserver import timeutil
from vplane.apiserver.context import UserInfo
from vplane.kube import errors

DEFAULT_SECONDS = 3600
LEEWAY_SECONDS = 60
"""Clock skew allowed on ``exp``, ``nbf`` and ``iat``, and after a bound object's or account's deletion
(upstream: go-jose's default leeway, and ``claims.go``'s minute past ``deletionTimestamp``)."""
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


ISSUER = "https://kubernetes.default.svc.cluster.local"
"""``iss`` of the tokens, and the API server's audience (kube-apiserver's ``--api-audiences`` defaults to
its ``--service-account-issuer``, which kubeadm sets to this)."""
OPENID_CONFIGURATION = "/.well-known/openid-configuration"
JWKS = "/openid/v1/jwks"
BOUND_KINDS = ("Pod", "Secret", "Node")
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
POD_UID_EXTRA = "authentication.kubernetes.io/pod-uid"
CREDENTIAL_EXTRA = "authentication.kubernetes.io/credential-id"


@dataclass(frozen=True, slots=True)
class Bound:
    """The object a token is bound to: it works only while that object (this UID) exists."""

    kind: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class Subject:
    """What a valid token names; the caller checks that the account and the bound object still exist."""

    namespace: str
    name: str
    uid: str
    bound: Bound | None
    jti: str
    audiences: tuple[str, ...]

    def user(self) -> UserInfo:
        extra: dict[str, tuple[str, ...]] = {}
        if self.bound is not None and self.bound.kind == "Pod":
            extra[POD_NAME_EXTRA] = (self.bound.name,)
            extra[POD_UID_EXTRA] = (self.bound.uid,)
        if self.jti:
            extra[CREDENTIAL_EXTRA] = (f"JTI={self.jti}",)
        return UserInfo(
            f"system:serviceaccount:{self.namespace}:{self.name}",
            self.uid,
            ("system:serviceaccounts", f"system:serviceaccounts:{self.namespace}", "system:authenticated"),
            extra,
        )


def claims_for(
    *,
    audiences: Sequence[str],
    namespace: str,
    name: str,
    uid: str,
    now: float,
    expires: float,
    bound: Bound | None,
    jti: str,
) -> dict[str, Any]:
    private: dict[str, Any] = {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}}
    if bound is not None:
        private[bound.kind.lower()] = {"name": bound.name, "uid": bound.uid}
    return {
        "aud": list(audiences),
        "exp": int(expires),
        "iat": int(now),
        "iss": ISSUER,
        "jti": jti,
        "kubernetes.io": private,
        "nbf": int(now),
        "sub": f"system:serviceaccount:{namespace}:{name}",
    }


def subject_of(claims: dict[str, Any], now: float, audiences: Sequence[str]) -> Subject | None:
    """The subject of a signed token's claims if it is one of ours, unexpired, and meant for one of
    ``audiences`` (token ``aud`` may be a string or a list, as JWT allows); else None."""
    if claims.get("iss") != ISSUER:
        return None
    aud = claims.get("aud")
    token_audiences = (aud,) if isinstance(aud, str) else tuple(a for a in aud or () if isinstance(a, str))
    matched = tuple(a for a in token_audiences if a in audiences)
    if not matched:
        return None
    exp, nbf, iat = claims.get("exp"), claims.get("nbf", 0), claims.get("iat", 0)
    if not (_time(exp) and _time(nbf) and _time(iat)):
        return None
    # go-jose's checks with its default minute of leeway (replicas' clocks may differ a little): not
    # expired, not before its time, not issued in the future
    if not (nbf - LEEWAY_SECONDS <= now < exp + LEEWAY_SECONDS and iat - LEEWAY_SECONDS <= now):
        return None
    private = claims.get("kubernetes.io")
    if not isinstance(private, dict):
        return None
    account = private.get("serviceaccount") or {}
    namespace, name, uid = private.get("namespace"), account.get("name"), account.get("uid")
    if not (
        isinstance(namespace, str) and isinstance(name, str) and isinstance(uid, str) and namespace and name
    ):
        return None
    bound = None
    for kind in BOUND_KINDS:
        ref = private.get(kind.lower())
        if isinstance(ref, dict) and isinstance(ref.get("name"), str) and isinstance(ref.get("uid"), str):
            bound = Bound(kind, ref["name"], ref["uid"])
            break
    jti = claims.get("jti")
    return Subject(namespace, name, uid, bound, jti if isinstance(jti, str) else "", matched)


def deleted_since(metadata: dict[str, Any], now: float, seconds: float) -> bool:
    """The object is being deleted and its deletion deadline passed more than ``seconds`` ago (with 0: it
    is being deleted at all). Tokens of an account or bound object end then (upstream's ``claims.go``
    allows bound tokens a minute, ``legacy.go`` legacy ones nothing)."""
    deleting = metadata.get("deletionTimestamp")
    if not deleting:
        return False
    return seconds <= 0 or (timeutil.parse_time(str(deleting)) or 0.0) < now - seconds


def _time(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def openid_configuration(jwks_uri: str) -> dict[str, Any]:
    """The OIDC discovery document, naming where the key set is (``service_account_jwks_uri``)."""
    return {
        "issuer": ISSUER,
        "jwks_uri": jwks_uri,
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["ES256"],
    }
