"""The aggregation backend policy of tenant clusters, without sockets: which addresses are refused and why,
the allow-list, the TLS rule, and the resolver's check of every resolved address."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pydantic
import pytest

from vplane.apiserver.aggregation import BackendPolicy, BackendRefused, CheckedResolver, split_host_port
from vplane.apiserver.settings import APIServerSettings


def not_local(address: object) -> bool:
    return False


POLICY = BackendPolicy(restricted=True, denied=[ipaddress.ip_network("203.0.113.0/24")])


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("127.0.0.1", "127.0.0.1 is a loopback address"),
        ("127.8.9.10", "127.8.9.10 is a loopback address"),
        ("::1", "::1 is a loopback address"),
        ("0.0.0.0", "0.0.0.0 is an unspecified address"),
        ("0.1.2.3", "0.1.2.3 is an unspecified address"),
        ("::", ":: is an unspecified address"),
        ("169.254.169.254", "169.254.169.254 is a link-local address"),
        ("fe80::1", "fe80::1 is a link-local address"),
        ("224.0.0.1", "224.0.0.1 is not a unicast address"),
        ("255.255.255.255", "255.255.255.255 is not a unicast address"),
        ("ff02::1", "ff02::1 is not a unicast address"),
        ("203.0.113.7", "203.0.113.7 is a platform address"),
        # IPv6 forms that reach an IPv4 address are judged by that address too.
        ("::ffff:127.0.0.1", "::ffff:7f00:1 is a loopback address"),
        ("64:ff9b::7f00:1", "64:ff9b::7f00:1 is a loopback address"),
        ("2002:7f00:1::", "2002:7f00:1:: is a loopback address"),
        ("::ffff:169.254.0.1", "::ffff:a9fe:1 is a link-local address"),
    ],
)
def test_refused_addresses_say_why(address: str, why: str) -> None:
    assert POLICY.address_refusal(ipaddress.ip_address(address), not_local) == why


@pytest.mark.parametrize("address", ["192.0.2.10", "10.1.2.3", "2001:db8::5", "8.8.8.8"])
def test_other_addresses_are_allowed(address: str) -> None:
    assert POLICY.address_refusal(ipaddress.ip_address(address), not_local) is None


def test_this_hosts_addresses_are_refused() -> None:
    local = ipaddress.ip_address("192.0.2.10")
    why = POLICY.address_refusal(local, lambda a: a == local)
    assert why == "192.0.2.10 is an address of the platform's host"


def test_an_unrestricted_policy_refuses_nothing() -> None:
    open_policy = BackendPolicy()
    assert open_policy.address_refusal(ipaddress.ip_address("127.0.0.1"), lambda a: True) is None
    assert open_policy.tls_refusal({"insecureSkipTLSVerify": True}) is None


def test_insecure_skip_tls_verify_is_refused_when_restricted() -> None:
    assert POLICY.tls_refusal({"insecureSkipTLSVerify": True}) == (
        "insecureSkipTLSVerify is not allowed in this cluster: set caBundle to the CA of the backend's "
        "serving certificate"
    )
    assert POLICY.tls_refusal({"caBundle": "eA=="}) is None


def test_the_allow_list_matches_normalized_host_and_port() -> None:
    policy = BackendPolicy(restricted=True)
    policy.allow("LocalHost.", 9100)
    policy.allow("[::1]", 9101)
    assert policy.exempt("localhost", 9100) and policy.exempt("::1", 9101)
    assert not policy.exempt("localhost", 9101) and not policy.exempt("127.0.0.1", 9100)
    assert split_host_port("[::1]:443") == ("::1", 443)
    with pytest.raises(ValueError, match="not host:port"):
        split_host_port("localhost")


def test_the_resolver_check_refuses_if_any_address_is_refused() -> None:
    resolver = CheckedResolver(POLICY, not_local)
    resolver.check("example.com", 443, ["192.0.2.1", "2001:db8::1"])
    with pytest.raises(BackendRefused) as err:
        resolver.check("rebind.example", 443, ["192.0.2.1", "127.0.0.1"])
    assert str(err.value) == (
        "backend rebind.example:443 is not allowed: 127.0.0.1 is a loopback address (aggregation backends "
        "in this cluster may not be loopback, link-local, unspecified, multicast or platform addresses)"
    )


def test_settings_build_the_policy_and_refuse_malformed_entries() -> None:
    settings = APIServerSettings(
        data_dir=Path("/nonexistent"),
        aggregation_restrict_backends=True,
        aggregation_allowed_backends=["localhost:9100"],
        aggregation_denied_networks=["198.51.100.1", "2001:db8::/32"],
    )
    policy = BackendPolicy.from_settings(settings)
    assert policy.restricted and policy.exempt("localhost", 9100)
    assert policy.address_refusal(ipaddress.ip_address("2001:db8::9"), not_local) == (
        "2001:db8::9 is a platform address"
    )
    assert not BackendPolicy.from_settings(APIServerSettings(data_dir=Path("/x"))).restricted
    with pytest.raises(pydantic.ValidationError, match="is not host:port"):
        APIServerSettings(data_dir=Path("/x"), aggregation_allowed_backends=["localhost"])
    with pytest.raises(pydantic.ValidationError):
        APIServerSettings(data_dir=Path("/x"), aggregation_denied_networks=["not-an-address"])
