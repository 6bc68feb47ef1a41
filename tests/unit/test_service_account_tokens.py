"""Service-account tokens: expiration rules (upstream's messages and cap) and the in-memory token store."""

from __future__ import annotations

import pytest

from vplane.apiserver import satokens
from vplane.apiserver.settings import APIServerSettings
from vplane.kube.errors import StatusError

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


def test_a_token_works_only_while_its_account_with_that_uid_exists() -> None:
    store = satokens.ServiceAccountTokens()
    accounts = {("ns", "sa"): "uid-1"}
    token, user = store.issue("ns", "sa", "uid-1", expires=2000.0, now=1000.0)
    assert user.name == "system:serviceaccount:ns:sa" and user.uid == "uid-1"

    def live(ns: str, name: str) -> str | None:
        return accounts.get((ns, name))

    assert store.lookup(token, 1000.0, live) == user
    accounts[("ns", "sa")] = "uid-2"  # deleted and created again
    assert store.lookup(token, 1000.0, live) is None
    accounts[("ns", "sa")] = "uid-1"
    assert store.lookup(token, 1000.0, live) is None, "a refused token stays refused"
    assert len(store) == 0


def test_expired_tokens_are_purged_from_memory() -> None:
    store = satokens.ServiceAccountTokens()
    tokens = [store.issue("ns", "sa", "u", expires=1000.0 + i, now=0.0)[0] for i in range(1000)]
    assert len(store) == 1000
    assert store.lookup(tokens[-1], 1500.0, lambda ns, name: "u") is not None
    assert len(store) == 499  # expiry 1000..1500 inclusive went
    store.issue("ns", "sa", "u", expires=10_000.0, now=5000.0)
    assert len(store) == 1
    assert store.lookup(tokens[-1], 5000.0, lambda ns, name: "u") is None


def test_unknown_tokens_are_not_found() -> None:
    store = satokens.ServiceAccountTokens()
    assert store.lookup("vpsa-nope", 0.0, lambda ns, name: "u") is None
    assert store.lookup("other", 0.0, lambda ns, name: "u") is None
