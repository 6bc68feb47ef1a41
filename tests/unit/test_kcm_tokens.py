"""Legacy service-account token Secrets decided purely: the JWT the token controller signs and the API
server's check of it (signature, issuer, claims), which Secrets name which account, and what a Secret still
lacks."""

from __future__ import annotations

import base64

from cryptography.hazmat.primitives.asymmetric import ec

from vplane.controllers.kcm import tokens
from vplane.kube.objects import Obj
from vplane.support import legacytokens, tls


def secret(name: str = "t", account: str = "sa", uid: str = "", **data: str) -> Obj:
    notes = {tokens.ACCOUNT_NAME: account}
    if uid:
        notes[tokens.ACCOUNT_UID] = uid
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": "secret-uid", "annotations": notes},
        "type": tokens.TOKEN_TYPE,
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


ACCOUNT = {"metadata": {"name": "sa", "namespace": "ns", "uid": "sa-uid"}}


def test_tokens_signed_with_the_ca_key_verify_with_its_certificate() -> None:
    ca = tls.make_ca("test-ca")
    key = legacytokens.load_signing_key(ca.key_pem)
    public = legacytokens.public_key_of_certificate(ca.cert_pem)
    assert public is not None
    claims = legacytokens.claims_for("ns", "sa", "sa-uid", "t")
    token = legacytokens.sign(key, claims)
    assert legacytokens.verify(token, public) == {
        legacytokens.NAMESPACE_CLAIM: "ns",
        legacytokens.SECRET_NAME_CLAIM: "t",
        legacytokens.ACCOUNT_NAME_CLAIM: "sa",
        legacytokens.ACCOUNT_UID_CLAIM: "sa-uid",
    }
    other = ec.generate_private_key(ec.SECP256R1())
    assert legacytokens.verify(token, other.public_key()) is None  # another key's signature
    head, payload, signature = token.split(".")
    forged = legacytokens.sign(other, {**claims, "iss": "someone"})
    assert legacytokens.verify(forged, public) is None
    tampered = base64.urlsafe_b64encode(b'{"iss":"kubernetes/serviceaccount"}').rstrip(b"=").decode()
    assert legacytokens.verify(f"{head}.{tampered}.{signature}", public) is None
    assert legacytokens.verify("not-a-jwt", public) is None
    assert legacytokens.verify("a.b.c", public) is None
    assert legacytokens.verify("x" * 20000 + "..", public) is None
    wrong_issuer = legacytokens.sign(key, {**claims, "iss": "https://kubernetes.default.svc"})
    assert legacytokens.verify(wrong_issuer, public) is None  # bound tokens are not legacy ones


def test_which_secrets_belong_to_an_account() -> None:
    assert tokens.account_of(secret(uid="u")) == ("sa", "u")
    assert tokens.account_of({**secret(), "type": "Opaque"}) is None
    assert tokens.references(secret(), ACCOUNT)
    assert tokens.references(secret(uid="sa-uid"), ACCOUNT)
    assert not tokens.references(secret(uid="old-uid"), ACCOUNT)  # an earlier account of that name
    assert not tokens.references(secret(account="other"), ACCOUNT)


def test_what_a_secret_lacks_and_how_it_is_filled() -> None:
    ca = b"-----BEGIN CERTIFICATE-----\n"
    assert tokens.missing(secret(), ca) == ["ca.crt", "namespace", "token"]
    assert tokens.missing(secret(token="t", namespace="ns", **{"ca.crt": ca.decode()}), ca) == []
    assert tokens.missing(secret(token="t", namespace="ns", **{"ca.crt": "old"}), ca) == ["ca.crt"]
    made = tokens.filled(secret(), ACCOUNT, ca, "jwt")
    assert {k: base64.b64decode(v) for k, v in made["data"].items()} == {
        "ca.crt": ca,
        "namespace": b"ns",
        "token": b"jwt",
    }
    assert made["metadata"]["annotations"] == {tokens.ACCOUNT_NAME: "sa", tokens.ACCOUNT_UID: "sa-uid"}
    kept = tokens.filled(secret(token="first"), ACCOUNT, ca, "second")
    assert base64.b64decode(kept["data"]["token"]) == b"first"  # an existing token is never replaced
