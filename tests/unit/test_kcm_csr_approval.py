"""csrapproving decided purely: which kubelet client requests are asked about (``selfnodeclient`` when the
requester is the node itself, then ``nodeclient``), the SubjectAccessReview sent for the requester, and
the ``AutoApproved`` condition."""

from __future__ import annotations

import base64
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from vplane.controllers.kcm import certificates as certs
from vplane.kube.objects import Obj


def request(cn: str, org: str = "system:nodes", dns: str | None = None) -> bytes:
    builder = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name(
            [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org), x509.NameAttribute(NameOID.COMMON_NAME, cn)]
        )
    )
    if dns:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(dns)]), critical=False)
    csr = builder.sign(ec.generate_private_key(ec.SECP256R1()), hashes.SHA256())
    return csr.public_bytes(serialization.Encoding.PEM)


def csr(pem: bytes, username: str, **spec: Any) -> Obj:
    return {
        "metadata": {"name": "r"},
        "spec": {
            "request": base64.b64encode(pem).decode(),
            "signerName": certs.KUBELET_CLIENT,
            "usages": ["digital signature", "client auth"],
            "username": username,
            "groups": ["system:bootstrappers", "system:authenticated"],
            **spec,
        },
    }


def candidates(obj: Obj) -> list[str]:
    return [sub for sub, _ in certs.approval_candidates(obj, certs.parse_request(obj))]


def test_which_requests_are_asked_about() -> None:
    node = request("system:node:n1")
    assert candidates(csr(node, "system:bootstrap:abc")) == ["nodeclient"]
    assert candidates(csr(node, "system:node:n1")) == ["selfnodeclient", "nodeclient"]
    assert candidates(csr(node, "u", signerName=certs.KUBE_APISERVER_CLIENT)) == []
    assert candidates(csr(request("system:node:n1", org="other"), "u")) == []  # not a kubelet client request
    assert candidates(csr(request("system:node:n1", dns="n1"), "u")) == []
    assert candidates(csr(node, "u", usages=["client auth", "server auth"])) == []


def test_access_review_and_approval() -> None:
    obj = csr(request("system:node:n1"), "system:bootstrap:abc", uid="u-1", extra={"k": ["v"]})
    assert certs.access_review(obj, "nodeclient") == {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": "system:bootstrap:abc",
            "groups": ["system:bootstrappers", "system:authenticated"],
            "resourceAttributes": {
                "group": "certificates.k8s.io",
                "resource": "certificatesigningrequests",
                "verb": "create",
                "subresource": "nodeclient",
                "version": "*",
            },
            "uid": "u-1",
            "extra": {"k": ["v"]},
        },
    }
    assert not certs.decided(obj)
    done = certs.approved(obj, certs.NODE_CLIENT[1], 0.0)
    assert done["status"]["conditions"] == [
        {
            "type": "Approved",
            "status": "True",
            "reason": "AutoApproved",
            "message": "Auto approving kubelet client certificate after SubjectAccessReview.",
            "lastUpdateTime": "1970-01-01T00:00:00Z",
            "lastTransitionTime": "1970-01-01T00:00:00Z",
        }
    ]
    assert certs.decided(done)
    assert (
        certs.SELF_NODE_CLIENT[1]
        == "Auto approving self kubelet client certificate after SubjectAccessReview."
    )


def test_resync_hands_back_only_pending_requests() -> None:
    assert certs.resync_period(43200, lambda: 0.0) == 43200
    assert certs.resync_period(43200, lambda: 0.5) == 64800
    pending = {"metadata": {"name": "a"}, "status": {}}
    approved = {"metadata": {"name": "b"}, "status": {"conditions": [{"type": "Approved", "status": "True"}]}}
    denied = {"metadata": {"name": "c"}, "status": {"conditions": [{"type": "Denied", "status": "True"}]}}
    issued = {"metadata": {"name": "d"}, "status": {"certificate": "eA=="}}
    assert certs.pending_keys([pending, approved, denied, issued]) == ["a"]
