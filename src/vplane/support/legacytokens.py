"""Legacy service-account tokens: the JWTs the token controller puts in ``kubernetes.io/service-account-token``
Secrets, and their check.

As upstream's (``pkg/serviceaccount/legacy.go``) they carry the issuer ``kubernetes/serviceaccount`` and the
namespace, Secret, account name and UID claims, never expire, and are signed by the controller manager's
service-account key (``--service-account-private-key-file``; beside ``vplane apiserver`` the cluster CA's
P-256 key, so ES256) and verified with its public key by the API server. A signature alone does not make a
token good: the API server also wants the Secret to still hold exactly this token and the account to still
exist with that UID, so deleting either revokes it.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature
from cryptography.x509 import load_pem_x509_certificate

ISSUER = "kubernetes/serviceaccount"
NAMESPACE_CLAIM = "kubernetes.io/serviceaccount/namespace"
SECRET_NAME_CLAIM = "kubernetes.io/serviceaccount/secret.name"
ACCOUNT_NAME_CLAIM = "kubernetes.io/serviceaccount/service-account.name"
ACCOUNT_UID_CLAIM = "kubernetes.io/serviceaccount/service-account.uid"
_P256_BYTES = 32
MAX_TOKEN_LENGTH = 16 * 1024
"""Longer bearer tokens are not looked at (a legacy token is well under a kilobyte)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


_B64URL = re.compile(r"[A-Za-z0-9_-]*")


def _unb64(text: str) -> bytes:
    """Unpadded base64url only, as go-jose decodes (``RawURLEncoding``): Python's decoder would also take
    padding, ``+``/``/`` and skip stray characters, giving one token many spellings."""
    if not _B64URL.fullmatch(text) or len(text) % 4 == 1:
        raise ValueError("not unpadded base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def claims_for(namespace: str, account: str, uid: str, secret: str) -> dict[str, str]:
    return {
        "iss": ISSUER,
        NAMESPACE_CLAIM: namespace,
        SECRET_NAME_CLAIM: secret,
        ACCOUNT_NAME_CLAIM: account,
        ACCOUNT_UID_CLAIM: uid,
        "sub": f"system:serviceaccount:{namespace}:{account}",
    }


def load_signing_key(pem: bytes) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise ValueError("the service-account key must be an EC P-256 key (ES256)")
    return key


def public_key_of_certificate(pem: bytes) -> ec.EllipticCurvePublicKey | None:
    key = load_pem_x509_certificate(pem).public_key()
    if isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1):
        return key
    return None


def sign(key: ec.EllipticCurvePrivateKey, claims: dict[str, Any], kid: str = "") -> str:
    """A compact ES256 JWS of ``claims`` (legacy tokens carry an empty ``kid``, as upstream's do)."""
    header = _b64(json.dumps({"alg": "ES256", "kid": kid}, separators=(",", ":")).encode())
    payload = _b64(json.dumps(claims, separators=(",", ":")).encode())
    signing_input = f"{header}.{payload}".encode()
    r, s = decode_dss_signature(key.sign(signing_input, ec.ECDSA(hashes.SHA256())))
    return f"{header}.{payload}.{_b64(r.to_bytes(_P256_BYTES, 'big') + s.to_bytes(_P256_BYTES, 'big'))}"


def signed_claims(token: str, key: ec.EllipticCurvePublicKey) -> dict[str, Any] | None:
    """The claims of an ES256 JWS this key signed, or None (not a JWT, too long, a bad signature)."""
    if len(token) > MAX_TOKEN_LENGTH or token.count(".") != 2:
        return None
    header_text, payload_text, signature_text = token.split(".")
    try:
        header = json.loads(_unb64(header_text))
        signature = _unb64(signature_text)
        if not isinstance(header, dict) or header.get("alg") != "ES256" or len(signature) != 2 * _P256_BYTES:
            return None
        der = encode_dss_signature(
            int.from_bytes(signature[:_P256_BYTES], "big"), int.from_bytes(signature[_P256_BYTES:], "big")
        )
        key.verify(der, f"{header_text}.{payload_text}".encode(), ec.ECDSA(hashes.SHA256()))
        claims = json.loads(_unb64(payload_text))
    except (ValueError, binascii.Error, InvalidSignature, UnicodeDecodeError):
        return None
    return claims if isinstance(claims, dict) else None


def verify(token: str, key: ec.EllipticCurvePublicKey) -> dict[str, str] | None:
    """The claims of a legacy token this key signed, or None (not a JWT, another issuer, a bad signature,
    missing claims)."""
    claims = signed_claims(token, key)
    if claims is None or claims.get("iss") != ISSUER:
        return None
    wanted = (NAMESPACE_CLAIM, SECRET_NAME_CLAIM, ACCOUNT_NAME_CLAIM, ACCOUNT_UID_CLAIM)
    if not all(isinstance(claims.get(c), str) and claims.get(c) for c in wanted):
        return None
    # upstream's legacy validator: ``sub`` must name the same account ("sub claim is invalid")
    if claims.get("sub") != f"system:serviceaccount:{claims[NAMESPACE_CLAIM]}:{claims[ACCOUNT_NAME_CLAIM]}":
        return None
    return {c: str(claims[c]) for c in wanted}


def key_id(key: ec.EllipticCurvePublicKey) -> str:
    """Upstream's ``kid``: the unpadded URL-safe base64 SHA-256 of the public key's DER (SubjectPublicKeyInfo)."""
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    digest = hashes.Hash(hashes.SHA256())
    digest.update(der)
    return _b64(digest.finalize())


def jwk(key: ec.EllipticCurvePublicKey) -> dict[str, str]:
    """The public key as a JSON Web Key (``/openid/v1/jwks``)."""
    numbers = key.public_numbers()
    return {
        "use": "sig",
        "kty": "EC",
        "kid": key_id(key),
        "crv": "P-256",
        "alg": "ES256",
        "x": _b64(numbers.x.to_bytes(_P256_BYTES, "big")),
        "y": _b64(numbers.y.to_bytes(_P256_BYTES, "big")),
    }
