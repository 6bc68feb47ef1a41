"""Client certificates: only the cluster CA's authenticate users; front-proxy ones speak only as the proxy."""

from __future__ import annotations

from vplane.apiserver import authn
from vplane.support.requestheader import RequestHeaderConfig

CLUSTER_CA = ((("commonName", "vplane-ca-1234"),),)
PROXY_CA = ((("commonName", "vplane-front-proxy-ca-5678"),),)
PROXY = RequestHeaderConfig(PROXY_CA, ("front-proxy-client",))


def cert(issuer: object, cn: str, groups: tuple[str, ...] = ()) -> dict[str, object]:
    subject = tuple((("organizationName", g),) for g in groups) + ((("commonName", cn),),)
    return {"issuer": issuer, "subject": subject}


def user(peercert: dict[str, object], headers: dict[str, str] | None = None) -> authn.UserInfo | None:
    hdrs = headers or {}
    return authn.certificate_user(
        peercert, CLUSTER_CA, PROXY, hdrs, lambda: {k: [v] for k, v in hdrs.items()}
    )


def test_cluster_ca_certificates_authenticate_their_subject() -> None:
    found = user(cert(CLUSTER_CA, "bob", ("devs",)))
    assert found is not None
    assert (found.name, found.groups) == ("bob", ("devs", "system:authenticated"))


def test_a_front_proxy_certificate_never_authenticates_by_its_own_subject() -> None:
    assert user(cert(PROXY_CA, "admin", ("system:masters",))) is None
    assert user(cert(PROXY_CA, "front-proxy-client", ("system:masters",))) is None


def test_remote_headers_count_only_from_an_allowed_proxy_name() -> None:
    headers = {"X-Remote-User": "alice", "X-Remote-Group": "devs"}
    found = user(cert(PROXY_CA, "front-proxy-client"), headers)
    assert found is not None and (found.name, found.groups) == ("alice", ("devs",))
    assert user(cert(PROXY_CA, "someone-else"), headers) is None
    assert user(cert(CLUSTER_CA, "bob"), headers) is not None
    assert user(cert(CLUSTER_CA, "bob"), headers).name == "bob"  # type: ignore[union-attr]


def test_a_cluster_ca_that_is_also_the_proxy_ca_keeps_both_roles_apart() -> None:
    same = RequestHeaderConfig(CLUSTER_CA, ("front-proxy-client",))
    proxy_cert = cert(CLUSTER_CA, "front-proxy-client")
    assert authn.certificate_user(proxy_cert, CLUSTER_CA, same, {}, dict) is None
    bob = authn.certificate_user(cert(CLUSTER_CA, "bob"), CLUSTER_CA, same, {}, dict)
    assert bob is not None and bob.name == "bob"
