"""Service-account tokens: expiration rules (upstream's messages and cap) and the in-memory token store."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from vplane.apiserver import satokens, timeutil
from vplane.apiserver.settings import APIServerSettings
from vplane.kube.errors import StatusError
from vplane.support import legacytokens

CAP = 48 * 3600


def test_default_and_in_range_values_pass_unchanged() -> None:
    assert satokens.requested_seconds(None) == 3600
    assert satokens.requested_seconds(1200) == 1200
    assert satokens.expiration(600, CAP) == (600, None)
    assert satokens.expiration(CAP, CAP) == (CAP, None)


def test_longer_requests_are_shortened_to_the_cap_with_upstreams_warning() -> None:
    assert satokens.expiration(CAP + 1, CAP) == (
        CAP,
        f"requested expiration of {CAP + 1} seconds shortened to {CAP} seconds",
    )
    assert satokens.expiration(1 << 32, 0) == (1 << 32, None), "0 means no cap"


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        (0, "Invalid value: 0: may not specify a duration less than 10 minutes"),
        (599, "Invalid value: 599: may not specify a duration less than 10 minutes"),
        (-1, "Invalid value: -1: may not specify a duration less than 10 minutes"),
        (
            (1 << 32) + 1,
            f"Invalid value: {(1 << 32) + 1}: may not specify a duration larger than 2^32 seconds",
        ),
    ],
)
def test_out_of_range_values_are_422_with_upstreams_message(value: int, detail: str) -> None:
    with pytest.raises(StatusError) as err:
        satokens.expiration(value, CAP)
    assert err.value.code == 422
    assert err.value.message == (
        f'TokenRequest.authentication.k8s.io "" is invalid: spec.expirationSeconds: {detail}'
    )


@pytest.mark.parametrize(
    ("value", "what"),
    [
        ("3600", "string"),
        (1.5, "number 1.5"),
        (True, "bool"),
        ([1], "array"),
        ({}, "object"),
        (1 << 64, f"number {1 << 64}"),
    ],
)
def test_values_that_are_not_int64_are_400_decoding_errors(value: object, what: str) -> None:
    with pytest.raises(StatusError) as err:
        satokens.requested_seconds(value)
    assert err.value.code == 400
    assert err.value.message == (
        'TokenRequest in version "v1" cannot be handled as a TokenRequest: json: cannot unmarshal '
        f"{what} into Go struct field TokenRequestSpec.spec.expirationSeconds of type int64"
    )


def test_the_cap_setting_is_checked_as_upstream_checks_its_flag() -> None:
    APIServerSettings(data_dir="/tmp/x", service_account_max_token_expiration_seconds=0)
    APIServerSettings(data_dir="/tmp/x", service_account_max_token_expiration_seconds=3600)
    for bad in (3599, (1 << 32) + 1):
        with pytest.raises(ValueError, match="must be between 1 hour and 2\\^32 seconds"):
            APIServerSettings(data_dir="/tmp/x", service_account_max_token_expiration_seconds=bad)


def _claims(**overrides: object) -> dict[str, object]:
    claims = satokens.claims_for(
        audiences=["https://kubernetes.default.svc.cluster.local", "vault"],
        namespace="ns",
        name="sa",
        uid="uid-1",
        now=1000.0,
        expires=4600.0,
        bound=satokens.Bound("Pod", "web-0", "pod-uid"),
        jti="j-1",
    )
    claims.update(overrides)
    return claims


def test_claims_are_upstreams_bound_token_claims() -> None:
    assert _claims() == {
        "aud": ["https://kubernetes.default.svc.cluster.local", "vault"],
        "exp": 4600,
        "iat": 1000,
        "iss": "https://kubernetes.default.svc.cluster.local",
        "jti": "j-1",
        "kubernetes.io": {
            "namespace": "ns",
            "serviceaccount": {"name": "sa", "uid": "uid-1"},
            "pod": {"name": "web-0", "uid": "pod-uid"},
        },
        "nbf": 1000,
        "sub": "system:serviceaccount:ns:sa",
    }


def test_a_subject_names_the_account_the_bound_pod_and_the_credential() -> None:
    subject = satokens.subject_of(_claims(), 2000.0, [satokens.ISSUER])
    assert subject is not None and subject.audiences == (satokens.ISSUER,)
    user = subject.user()
    assert (user.name, user.uid) == ("system:serviceaccount:ns:sa", "uid-1")
    assert user.groups == ("system:serviceaccounts", "system:serviceaccounts:ns", "system:authenticated")
    assert user.extra == {
        "authentication.kubernetes.io/pod-name": ("web-0",),
        "authentication.kubernetes.io/pod-uid": ("pod-uid",),
        "authentication.kubernetes.io/credential-id": ("JTI=j-1",),
    }
    assert subject.bound == satokens.Bound("Pod", "web-0", "pod-uid")


@pytest.mark.parametrize(
    ("claims", "now", "audiences"),
    [
        (_claims(), 939.0, [satokens.ISSUER]),  # before nbf, past the minute of leeway
        (_claims(), 4660.0, [satokens.ISSUER]),  # at exp plus the leeway
        (_claims(iat=2100), 2000.0, [satokens.ISSUER]),  # issued in the future (past the leeway)
        (_claims(exp=True), 0.5, [satokens.ISSUER]),  # a boolean is no time
        (_claims(), 2000.0, ["other"]),  # meant for other audiences
        (_claims(aud="vault"), 2000.0, [satokens.ISSUER]),
        (_claims(iss="kubernetes/serviceaccount"), 2000.0, [satokens.ISSUER]),  # a legacy token's issuer
        (_claims(exp="soon"), 2000.0, [satokens.ISSUER]),
        (_claims(**{"kubernetes.io": {"namespace": "ns"}}), 2000.0, [satokens.ISSUER]),
    ],
)
def test_claims_that_do_not_make_a_subject(
    claims: dict[str, object], now: float, audiences: list[str]
) -> None:
    assert satokens.subject_of(claims, now, audiences) is None


def test_a_single_audience_string_counts_and_only_matching_audiences_are_reported() -> None:
    subject = satokens.subject_of(_claims(aud="vault"), 2000.0, ["vault", "x"])
    assert subject is not None and subject.audiences == ("vault",)


def test_a_minute_of_clock_skew_is_allowed_as_go_jose_allows() -> None:
    """Replicas' clocks may differ: a token counts from a minute before ``nbf``/``iat`` to a minute past
    ``exp`` (go-jose's default leeway, which upstream's validator uses)."""
    for now in (941.0, 4659.0):
        assert satokens.subject_of(_claims(), now, [satokens.ISSUER]) is not None


def _signed(claims: dict[str, object]) -> tuple[str, ec.EllipticCurvePublicKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    return legacytokens.sign(key, claims), key.public_key()


def test_only_unpadded_base64url_tokens_are_read() -> None:
    """One token, one spelling (go-jose's ``RawURLEncoding``): padding, the standard alphabet's ``+``/``/``
    and stray characters make it no token, though Python's decoder would skip or accept them."""
    token, public = _signed(_claims())
    assert legacytokens.signed_claims(token, public) == _claims()
    head, payload, signature = token.split(".")
    variants = [
        f"{head}.{payload}.{signature}==",
        f"{head}.{payload}.{signature[:10]}!*~{signature[10:]}",
        f"{head}=.{payload}.{signature}",
        f"{head}.{payload}.{signature.replace('-', '+').replace('_', '/')}",
        f"{head}.{payload}.{signature}A",  # a length no base64 text has
    ]
    for variant in variants:
        if variant != token:
            assert legacytokens.signed_claims(variant, public) is None, variant


def test_a_legacy_token_whose_subject_names_another_account_is_refused() -> None:
    """Upstream's legacy validator: ``sub`` must be the account the private claims name."""
    claims = legacytokens.claims_for("ns", "sa", "uid-1", "sa-token")
    token, public = _signed(claims)
    assert legacytokens.verify(token, public) is not None
    forged, public = _signed({**claims, "sub": "system:serviceaccount:ns:admin"})
    assert legacytokens.verify(forged, public) is None


def test_tokens_end_a_minute_past_a_deletion_deadline_or_at_once() -> None:
    """An account, Pod, Secret or Node being deleted (held by a finalizer, or a pod terminating): bound
    tokens keep working until a minute past its ``deletionTimestamp``, legacy tokens stop at once."""
    deleting = {"name": "x", "deletionTimestamp": "2026-12-05T10:00:00Z"}
    at = timeutil.parse_time("2026-12-05T10:00:00Z")
    assert at is not None
    assert not satokens.deleted_since({"name": "x"}, at + 3600, satokens.LEEWAY_SECONDS)
    assert not satokens.deleted_since(deleting, at + 60, satokens.LEEWAY_SECONDS)
    assert satokens.deleted_since(deleting, at + 61, satokens.LEEWAY_SECONDS)
    assert satokens.deleted_since(deleting, at - 5, 0)
