"""Volume binding and CSR signing decided purely: which volume fits a claim, phases, provisioned volumes,
signer checks with upstream's messages, certificate lifetimes and contents, and the cleaner's deadlines."""

from __future__ import annotations

import base64
import datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from vplane.controllers.kcm import certificates as certs
from vplane.controllers.kcm import persistentvolume as pvs
from vplane.controllers.kcm.timefmt import format_time
from vplane.support import tls

T0 = 1_800_000_000.0


def claim(name: str = "data", size: str = "1Gi", klass: str = "standard", **spec: Any) -> dict:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "5"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": size}},
            "storageClassName": klass,
            **spec,
        },
    }


def volume(name: str, size: str, klass: str = "standard", **spec: Any) -> dict:
    return {
        "metadata": {"name": name, "labels": {"tier": "fast"}},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce", "ReadOnlyMany"],
            "storageClassName": klass,
            **spec,
        },
        "status": {"phase": "Available"},
    }


def test_smallest_fitting_volume_wins() -> None:
    candidates = [
        volume("big", "10Gi"),
        volume("small", "2Gi"),
        volume("tiny", "512Mi"),
        volume("other", "2Gi", "gold"),
    ]
    assert pvs.best_match(candidates, claim())["metadata"]["name"] == "small"  # type: ignore[index]
    assert pvs.best_match(candidates, claim(accessModes=["ReadWriteMany"])) is None
    assert pvs.best_match(candidates, claim(selector={"matchLabels": {"tier": "slow"}})) is None
    taken = volume("taken", "2Gi", claimRef={"namespace": "ns", "name": "someone", "uid": "u"})
    prebound = volume("mine", "20Gi", claimRef={"namespace": "ns", "name": "data"})
    assert pvs.best_match([taken, *candidates, prebound], claim())["metadata"]["name"] == "mine"  # type: ignore[index]


def test_volume_phases() -> None:
    pvc = claim()
    pv = volume("pv", "1Gi")
    assert pvs.volume_phase_for(pv, None) == "Available"
    ref = {"namespace": "ns", "name": "data", "uid": "uid-data"}
    bound = volume("pv", "1Gi", claimRef=ref)
    assert pvs.volume_phase_for(bound, {**pvc, "spec": {**pvc["spec"], "volumeName": "pv"}}) == "Bound"
    assert pvs.volume_phase_for(bound, None) == "Released"
    assert pvs.volume_phase_for(bound, {**pvc, "metadata": {**pvc["metadata"], "uid": "new"}}) == "Released"


def test_provisioned_volume_is_prebound_with_node_affinity() -> None:
    pv = pvs.provisioned_volume(
        claim(), {"reclaimPolicy": "Delete"}, Path("/data/pvc-uid-data_ns_data"), "node-1"
    )
    assert pv["metadata"] == {
        "name": "pvc-uid-data",
        "annotations": {"pv.kubernetes.io/provisioned-by": "vplane.io/local-path"},
    }
    spec = pv["spec"]
    assert spec["claimRef"] == {
        "kind": "PersistentVolumeClaim",
        "namespace": "ns",
        "name": "data",
        "uid": "uid-data",
        "apiVersion": "v1",
    }
    assert spec["capacity"] == {"storage": "1Gi"} and spec["persistentVolumeReclaimPolicy"] == "Delete"
    assert spec["hostPath"] == {"path": "/data/pvc-uid-data_ns_data", "type": "DirectoryOrCreate"}
    terms = spec["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1"]}]}
    ]
    assert pvs.local_path(Path("/data"), claim()) == Path("/data/pvc-uid-data_ns_data")


# -- CSRs ----------------------------------------------------------------------------------------------------


def request(
    cn: str, orgs: list[str] = (), dns: list[str] = (), ips: list[str] = ()
) -> x509.CertificateSigningRequest:  # type: ignore[assignment]
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs] + [
        x509.NameAttribute(NameOID.COMMON_NAME, cn)
    ]
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(attrs))
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns] + [
        x509.IPAddress(ipaddress.ip_address(i)) for i in ips
    ]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(key, hashes.SHA256())


def test_signer_checks_in_upstream_words() -> None:
    alice = request("alice", ["devs"])
    assert certs.validate(certs.KUBE_APISERVER_CLIENT, alice, ["client auth", "digital signature"]) is None
    assert (
        certs.validate(certs.KUBE_APISERVER_CLIENT, alice, ["server auth"])
        == "invalid usage for client certificate: server auth"
    )
    assert certs.validate(certs.KUBE_APISERVER_CLIENT, alice, ["digital signature"]) == (
        "missing required usage for client certificate: client auth"
    )
    node = request("system:node:n1", ["system:nodes"], ips=["10.0.0.1"])
    serving = ["digital signature", "key encipherment", "server auth"]
    assert certs.validate(certs.KUBELET_SERVING, node, serving) is None
    assert certs.validate(certs.KUBELET_SERVING, node, ["server auth"]) == (
        "usages did not match [digital signature key encipherment server auth]"
    )
    assert certs.validate(certs.KUBELET_SERVING, alice, serving) == "subject organization is not system:nodes"
    bare = request("system:node:n1", ["system:nodes"])
    assert certs.validate(certs.KUBELET_SERVING, bare, serving) == "DNS or IP subjectAltName is required"
    assert certs.validate(certs.KUBELET_CLIENT, bare, ["digital signature", "client auth"]) is None
    assert certs.validate(certs.KUBELET_CLIENT, node, ["client auth"]) == "IP subjectAltNames are not allowed"
    assert certs.validate(certs.KUBELET_CLIENT, request("bob", ["system:nodes"]), ["client auth"]) == (
        "subject common name does not begin with system:node:"
    )


def test_lifetimes() -> None:
    year = 365 * 86400.0
    assert certs.duration(None, year) == year
    assert certs.duration(3600, year) == 3600
    assert certs.duration(60, year) == 600  # never under ten minutes
    assert certs.duration(10 * year, year) == year
    assert certs.validity(T0, 3600, T0 + year) == (T0 - 300, T0 + 3600)  # short: not backdated at the end
    assert certs.validity(T0, 86400, T0 + year) == (T0 - 300, T0 + 86100)
    assert certs.validity(T0, year, T0 + 1000) == (T0 - 300, T0 + 1000)  # capped at the CA
    with pytest.raises(ValueError, match="the signer has expired"):
        certs.validity(T0, 3600, T0 - 1)


def test_signed_certificate_carries_the_request_and_usages() -> None:
    ca_pair = tls.make_ca("test-ca")
    ca = certs.SigningCA.load(ca_pair.cert_pem, ca_pair.key_pem)
    req = request("system:node:n1", ["system:nodes"], dns=["n1.local"], ips=["10.0.0.1"])
    now = datetime.datetime.now(datetime.UTC).timestamp()
    pem = certs.sign(ca, req, ["digital signature", "key encipherment", "server auth"], 3600, now)
    cert = x509.load_pem_x509_certificate(pem)
    assert cert.subject == req.subject and cert.issuer == ca.cert.subject
    assert cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value == x509.ExtendedKeyUsage(
        [ExtendedKeyUsageOID.SERVER_AUTH]
    )
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.digital_signature and usage.key_encipherment and not usage.key_cert_sign
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["n1.local"]
    assert int(cert.not_valid_after_utc.timestamp() - cert.not_valid_before_utc.timestamp()) == 3900


def test_cleaner_deadlines() -> None:
    deadlines = certs.CleanerDeadlines(approved=60, denied=30, failed=20, pending=100)
    pending = {"metadata": {"creationTimestamp": format_time(T0)}, "status": {}}
    assert certs.cleanup_at(pending, deadlines) == T0 + 100
    denied = {
        **pending,
        "status": {
            "conditions": [{"type": "Denied", "status": "True", "lastUpdateTime": format_time(T0 + 5)}]
        },
    }
    assert certs.cleanup_at(denied, deadlines) == T0 + 35
    ca_pair = tls.make_ca("test-ca")
    ca = certs.SigningCA.load(ca_pair.cert_pem, ca_pair.key_pem)
    pem = certs.sign(ca, request("alice"), ["client auth"], 600, T0)
    issued = {
        **pending,
        "status": {
            "certificate": base64.b64encode(pem).decode(),
            "conditions": [{"type": "Approved", "status": "True", "lastUpdateTime": format_time(T0)}],
        },
    }
    assert certs.cleanup_at(issued, deadlines) == T0 + 60
    assert certs.needs_signing({"spec": {"signerName": certs.KUBELET_SERVING}, **issued}) is False
