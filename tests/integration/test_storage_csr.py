"""Local volumes and certificate signing against ``vplane apiserver`` with its controller manager, driven by
kubectl, openssl-free Python (``cryptography``) and the ``kubernetes`` client: the default ``standard``
class, claims bound to provisioned volumes under the server's data directory (Immediate and
WaitForFirstConsumer), static binding, reclaim on delete, and CSRs signed by the cluster CA (a signed client
certificate then authenticates), refused by signer checks, and cleaned up."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes import client as kclient
from kubernetes import config as kconfig

from controllerkit import api, call, condition, events_for, reasons, wait_for
from harness import APIServerProcess, Kubectl, with_controllers

pytestmark = pytest.mark.integration

DENIED_EXPIRATION = 2
RESYNC = 0.5
"""csrapproving's resync period, shrunk (12 h upstream)."""


@pytest.fixture(scope="module")
def shared_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[APIServerProcess]:
    yield from with_controllers(
        tmp_path_factory.mktemp("storage") / "apiserver",
        {
            "csr_denied_expiration_seconds": DENIED_EXPIRATION,
            "csr_approving_min_resync_period_seconds": RESYNC,
        },
    )


@pytest.fixture
def kubectl(shared_apiserver: APIServerProcess, kubectl_path: str, tmp_path: Path) -> Kubectl:
    return Kubectl(kubectl_path, shared_apiserver.kubeconfig, tmp_path / "kubecache")


def claim_manifest(name: str, size: str = "1Gi", klass: str | None = None) -> str:
    cls = f"\n  storageClassName: {klass}" if klass is not None else ""
    return (
        f"apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {name}}}\n"
        f"spec:\n  accessModes: [ReadWriteOnce]\n  resources: {{requests: {{storage: {size}}}}}{cls}\n"
    )


def get_claim(server: APIServerProcess, namespace: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = api(
        server, "GET", f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}"
    )
    return result


def get_volume(server: APIServerProcess, name: str) -> dict[str, Any] | None:
    code, body = call(server, "GET", f"/api/v1/persistentvolumes/{name}")
    return body if code == 200 else None


def bound(server: APIServerProcess, namespace: str, name: str) -> dict[str, Any] | None:
    pvc = get_claim(server, namespace, name)
    return pvc if pvc.get("status", {}).get("phase") == "Bound" else None


def test_default_class_and_immediate_provisioning(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    classes = kubectl.run("get", "storageclass").out.splitlines()
    assert classes[1].split()[:5] == [
        "standard",
        "(default)",
        "vplane.io/local-path",
        "Delete",
        "WaitForFirstConsumer",
    ]
    kubectl.apply(
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: "
        f"now-{namespace}}}\nprovisioner: vplane.io/local-path\nvolumeBindingMode: Immediate\n"
    )
    kubectl.apply(claim_manifest("data", "2Gi", f"now-{namespace}"), "-n", namespace)
    pvc = wait_for(lambda: bound(shared_apiserver, namespace, "data"), "bound")
    uid = pvc["metadata"]["uid"]
    assert pvc["spec"]["volumeName"] == f"pvc-{uid}"
    assert pvc["status"]["capacity"] == {"storage": "2Gi"} and pvc["status"]["accessModes"] == [
        "ReadWriteOnce"
    ]
    annotations = pvc["metadata"]["annotations"]
    assert annotations["pv.kubernetes.io/bind-completed"] == "yes"
    assert annotations["volume.kubernetes.io/storage-provisioner"] == "vplane.io/local-path"
    pv = wait_for(
        lambda: (v := get_volume(shared_apiserver, f"pvc-{uid}")) and v["status"]["phase"] == "Bound" and v,
        "pv",
    )
    path = Path(pv["spec"]["hostPath"]["path"])
    assert path == shared_apiserver.data_dir / "volumes" / f"pvc-{uid}_{namespace}_data"
    assert path.is_dir()
    assert pv["spec"]["claimRef"]["uid"] == uid and pv["spec"]["persistentVolumeReclaimPolicy"] == "Delete"
    assert pv["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"] == "vplane.io/local-path"
    events = wait_for(
        lambda: (
            (found := {e["reason"]: e for e in events_for(shared_apiserver, namespace, "data")}).keys()
            >= {"Provisioning", "ProvisioningSucceeded"}
            and found
        ),
        "the provisioner's events",
    )
    assert events["ProvisioningSucceeded"]["message"] == f"Successfully provisioned volume pvc-{uid}"
    assert events["Provisioning"]["source"] == {"component": "vplane.io/local-path"}
    # Delete reclaims the volume and its directory
    kubectl.run("delete", "pvc", "data", "-n", namespace)
    wait_for(lambda: get_volume(shared_apiserver, f"pvc-{uid}") is None, "the volume deleted")
    assert not path.exists()


def test_wait_for_first_consumer(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    kubectl.apply(claim_manifest("data"), "-n", namespace)  # the default class
    waiting = wait_for(
        lambda: reasons(shared_apiserver, namespace, "data").get("WaitForFirstConsumer"), "waiting"
    )
    assert waiting == "waiting for first consumer to be created before binding"
    assert get_claim(shared_apiserver, namespace, "data")["spec"]["storageClassName"] == "standard"
    pod = {
        "metadata": {"name": "user"},
        "spec": {
            "nodeName": "node-a",
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}],
            "containers": [{"name": "c", "image": "nginx"}],
        },
    }
    api(shared_apiserver, "POST", f"/api/v1/namespaces/{namespace}/pods", pod)
    pvc = wait_for(lambda: bound(shared_apiserver, namespace, "data"), "bound")
    assert pvc["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == "node-a"
    pv = get_volume(shared_apiserver, pvc["spec"]["volumeName"])
    assert pv is not None
    (term,) = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a"]}
    ]
    table = kubectl.run("get", "pvc", "data", "-n", namespace).out.splitlines()
    assert table[1].split()[:2] == ["data", "Bound"]


def test_static_binding_and_retain(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    for name, size in ((f"{namespace}-small", "1Gi"), (f"{namespace}-big", "5Gi")):
        kubectl.apply(
            f"apiVersion: v1\nkind: PersistentVolume\nmetadata: {{name: {name}, labels: {{ns: {namespace}}}}}\n"
            f"spec:\n  capacity: {{storage: {size}}}\n  accessModes: [ReadWriteOnce]\n"
            f"  storageClassName: manual-{namespace}\n  hostPath: {{path: /tmp/{name}}}\n"
        )
    wait_for(
        lambda: (
            (v := get_volume(shared_apiserver, f"{namespace}-small")) and v["status"]["phase"] == "Available"
        ),
        "Available",
    )
    kubectl.apply(claim_manifest("claim", "512Mi", f"manual-{namespace}"), "-n", namespace)
    pvc = wait_for(lambda: bound(shared_apiserver, namespace, "claim"), "bound")
    assert pvc["spec"]["volumeName"] == f"{namespace}-small"
    pv = get_volume(shared_apiserver, f"{namespace}-small")
    assert pv is not None and pv["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] == "yes"
    kubectl.run("delete", "pvc", "claim", "-n", namespace)
    released = wait_for(
        lambda: (
            (v := get_volume(shared_apiserver, f"{namespace}-small"))
            and v["status"]["phase"] == "Released"
            and v
        ),
        "Released",
    )
    assert released["spec"]["persistentVolumeReclaimPolicy"] == "Retain"


def test_claim_in_use_is_protected_until_its_pod_goes(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    """Claims and volumes carry the protection finalizers from their creation; deleting a claim a pod uses
    leaves it Terminating until the pod is gone, then the claim, and its released volume, go."""
    kubectl.apply(
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: "
        f"prot-{namespace}}}\nprovisioner: vplane.io/local-path\nvolumeBindingMode: Immediate\n"
    )
    kubectl.apply(claim_manifest("held", "1Gi", f"prot-{namespace}"), "-n", namespace)
    pvc = wait_for(lambda: bound(shared_apiserver, namespace, "held"), "bound")
    assert pvc["metadata"]["finalizers"] == ["kubernetes.io/pvc-protection"]
    volume_name = pvc["spec"]["volumeName"]
    pv = get_volume(shared_apiserver, volume_name)
    assert pv is not None and pv["metadata"]["finalizers"] == ["kubernetes.io/pv-protection"]
    pod = {
        "metadata": {"name": "holder"},
        "spec": {
            "nodeName": "node-a",
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "held"}}],
            "containers": [{"name": "c", "image": "nginx"}],
        },
    }
    api(shared_apiserver, "POST", f"/api/v1/namespaces/{namespace}/pods", pod)
    kubectl.run("delete", "pvc", "held", "-n", namespace, "--wait=false")
    # a change to the pod makes the controller look at the claim again: it stays
    kubectl.run("label", "pod", "holder", "-n", namespace, "touched=yes")
    time.sleep(1)
    line = kubectl.run("get", "pvc", "held", "-n", namespace, "--no-headers").out.split()
    assert line[:2] == ["held", "Terminating"]
    claim = get_claim(shared_apiserver, namespace, "held")
    assert claim["metadata"]["deletionTimestamp"] and claim["metadata"]["finalizers"] == [
        "kubernetes.io/pvc-protection"
    ]
    kubectl.run("delete", "pod", "holder", "-n", namespace, "--grace-period=0", "--force")
    wait_for(
        lambda: (
            call(shared_apiserver, "GET", f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/held")[0]
            == 404
        ),
        "the claim gone with its pod",
    )
    wait_for(lambda: get_volume(shared_apiserver, volume_name) is None, "the released volume deleted")


# -- CSRs ---------------------------------------------------------------------------------------------------------


def make_request(cn: str, orgs: tuple[str, ...] = ()) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(attrs)).sign(key, hashes.SHA256())
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return csr.public_bytes(serialization.Encoding.PEM), key_pem


def csr_manifest(
    name: str, request: bytes, signer: str, usages: list[str], seconds: int | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "request": base64.b64encode(request).decode(),
        "signerName": signer,
        "usages": usages,
    }
    if seconds is not None:
        spec["expirationSeconds"] = seconds
    return {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": spec,
    }


def get_csr(server: APIServerProcess, name: str) -> dict[str, Any] | None:
    code, body = call(server, "GET", f"/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}")
    return body if code == 200 else None


def test_approved_client_csr_is_signed_and_authenticates(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, kubectl_path: str, tmp_path: Path, namespace: str
) -> None:
    name = f"{namespace}-alice"
    request, key = make_request(f"alice-{namespace}", ("devs",))
    certificates = kclient.CertificatesV1Api(kconfig.new_client_from_config(str(shared_apiserver.kubeconfig)))
    certificates.create_certificate_signing_request(
        csr_manifest(name, request, "kubernetes.io/kube-apiserver-client", ["client auth"], 3600)
    )
    kubectl.run("certificate", "approve", name)
    csr = wait_for(
        lambda: (c := get_csr(shared_apiserver, name)) and c.get("status", {}).get("certificate") and c,
        "issued",
    )
    pem = base64.b64decode(csr["status"]["certificate"])
    cert = x509.load_pem_x509_certificate(pem)
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert lifetime.total_seconds() == 3600 + 300  # backdated five minutes, not shortened (under 8 h)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == f"alice-{namespace}"
    assert kubectl.run("get", "csr", name).out.splitlines()[1].split()[-1] == "Approved,Issued"
    (tmp_path / "alice.crt").write_bytes(pem)
    (tmp_path / "alice.key").write_bytes(key)
    kubeconfig = tmp_path / "alice.kubeconfig"
    kubeconfig.write_bytes(shared_apiserver.kubeconfig.read_bytes())
    base = [kubectl_path, "--kubeconfig", str(kubeconfig)]
    subprocess.run(
        [
            *base,
            "config",
            "set-credentials",
            "alice",
            f"--client-certificate={tmp_path / 'alice.crt'}",
            f"--client-key={tmp_path / 'alice.key'}",
        ],
        check=True,
        capture_output=True,
    )
    whoami = subprocess.run(
        [*base, "--user", "alice", "auth", "whoami", "-o", "json"], capture_output=True, text=True, check=True
    )
    status = json.loads(whoami.stdout)["status"]["userInfo"]
    assert status["username"] == f"alice-{namespace}" and "devs" in status["groups"]


def test_signer_checks_fail_the_request_and_the_cleaner_removes_denied(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    bad, _ = make_request("system:node:n1", ("not-nodes",))
    name = f"{namespace}-serving"
    api(
        shared_apiserver,
        "POST",
        "/apis/certificates.k8s.io/v1/certificatesigningrequests",
        csr_manifest(
            name,
            bad,
            "kubernetes.io/kubelet-serving",
            ["digital signature", "key encipherment", "server auth"],
        ),
    )
    kubectl.run("certificate", "approve", name)
    failed = wait_for(lambda: (c := get_csr(shared_apiserver, name)) and condition(c, "Failed"), "Failed")
    assert (failed["status"], failed["reason"], failed["message"]) == (
        "True",
        "SignerValidationFailure",
        "subject organization is not system:nodes",
    )
    assert "certificate" not in (get_csr(shared_apiserver, name) or {}).get("status", {})
    denied_name = f"{namespace}-denied"
    request, _ = make_request("bob")
    api(
        shared_apiserver,
        "POST",
        "/apis/certificates.k8s.io/v1/certificatesigningrequests",
        csr_manifest(denied_name, request, "kubernetes.io/kube-apiserver-client", ["client auth"]),
    )
    kubectl.run("certificate", "deny", denied_name)
    wait_for(lambda: get_csr(shared_apiserver, denied_name) is None, "the denied request cleaned up")


def test_approving_needs_approve_on_the_signer_and_masters_is_refused(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    """Upstream's CertificateApproval and CertificateSubjectRestriction: with a signer that signs whatever
    is approved, updating ``/approval`` alone must not be enough to mint a client certificate."""
    user = f"eve-{namespace}"
    kubectl.apply(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\n"
        f"metadata: {{name: {user}-csr}}\nrules:\n"
        "- apiGroups: [certificates.k8s.io]\n"
        "  resources: [certificatesigningrequests, certificatesigningrequests/approval]\n"
        "  verbs: [create, get, list, update, patch]\n"
    )
    kubectl.run("create", "clusterrolebinding", f"{user}-csr", f"--clusterrole={user}-csr", f"--user={user}")
    name = f"{namespace}-self"
    request, _ = make_request(user)
    api(
        shared_apiserver,
        "POST",
        "/apis/certificates.k8s.io/v1/certificatesigningrequests",
        csr_manifest(name, request, "kubernetes.io/kube-apiserver-client", ["client auth"]),
    )
    refused = kubectl.fails("certificate", "approve", name, f"--as={user}").stderr
    assert (
        f'certificatesigningrequests.certificates.k8s.io "{name}" is forbidden: user not permitted to approve '
        'requests with signerName "kubernetes.io/kube-apiserver-client"'
    ) in refused
    assert condition(get_csr(shared_apiserver, name) or {}, "Approved") is None
    kubectl.apply(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\n"
        f"metadata: {{name: {user}-signer}}\nrules:\n"
        "- apiGroups: [certificates.k8s.io]\n  resources: [signers]\n"
        "  resourceNames: [kubernetes.io/*]\n  verbs: [approve]\n"
    )
    kubectl.run(
        "create", "clusterrolebinding", f"{user}-signer", f"--clusterrole={user}-signer", f"--user={user}"
    )
    wait_for(
        lambda: kubectl.run("certificate", "approve", name, f"--as={user}", check=False).code == 0, "approved"
    )
    wait_for(lambda: (c := get_csr(shared_apiserver, name)) and c["status"].get("certificate"), "issued")
    masters, _ = make_request("root", ("system:masters",))
    code, answer = call(
        shared_apiserver,
        "POST",
        "/apis/certificates.k8s.io/v1/certificatesigningrequests",
        csr_manifest(f"{namespace}-root", masters, "kubernetes.io/kube-apiserver-client", ["client auth"]),
    )
    assert (code, answer["message"]) == (
        403,
        f'certificatesigningrequests.certificates.k8s.io "{namespace}-root" is forbidden: use of '
        "kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed",
    )


KUBELET_CLIENT = "kubernetes.io/kube-apiserver-client-kubelet"
KUBELET_USAGES = ["digital signature", "client auth"]


def csr_requester(kubectl: Kubectl, namespace: str, account: str, role: str) -> str:
    """A service account that may create and get CSRs, but not certificatesigningrequests/nodeclient: its
    token."""
    kubectl.run("create", "serviceaccount", account, "-n", namespace)
    kubectl.run("create", "clusterrole", role, "--verb=create,get", "--resource=certificatesigningrequests")
    kubectl.run(
        "create",
        "clusterrolebinding",
        role,
        f"--clusterrole={role}",
        f"--serviceaccount={namespace}:{account}",
    )
    return kubectl.run("create", "token", account, "-n", namespace).out.strip()


def post_kubelet_csr(server: APIServerProcess, token: str, name: str, request: bytes) -> None:
    code, _, body = server.request(
        "POST",
        "/apis/certificates.k8s.io/v1/certificatesigningrequests",
        json.dumps(csr_manifest(name, request, KUBELET_CLIENT, KUBELET_USAGES)).encode(),
        {"Content-Type": "application/json"},
        token=token,
    )
    assert code == 201, body


def test_kubelet_client_csr_auto_approved_after_access_review(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    """csrapproving: a kubelet client request from someone a SubjectAccessReview allows to create
    certificatesigningrequests/nodeclient is approved (AutoApproved, upstream's message) and then signed;
    one from a requester without that permission stays pending."""
    role = f"csr-create-{namespace}"
    token = csr_requester(kubectl, namespace, "bootstrapper", role)
    plain, _ = make_request(f"system:node:{namespace}-b", ("system:nodes",))
    pending = f"{namespace}-unprivileged"
    post_kubelet_csr(shared_apiserver, token, pending, plain)
    # the admin may create certificatesigningrequests/nodeclient
    request, _ = make_request(f"system:node:{namespace}-a", ("system:nodes",))
    name = f"{namespace}-kubelet"
    api(
        shared_apiserver,
        "POST",
        "/apis/certificates.k8s.io/v1/certificatesigningrequests",
        csr_manifest(name, request, KUBELET_CLIENT, KUBELET_USAGES),
    )
    csr = wait_for(
        lambda: (c := get_csr(shared_apiserver, name)) and c.get("status", {}).get("certificate") and c,
        "approved and issued",
    )
    (approved,) = [c for c in csr["status"]["conditions"] if c["type"] == "Approved"]
    assert (approved["status"], approved["reason"], approved["message"]) == (
        "True",
        "AutoApproved",
        "Auto approving kubelet client certificate after SubjectAccessReview.",
    )
    time.sleep(1)  # the other request was seen first; it is left to a human
    left = get_csr(shared_apiserver, pending)
    assert left is not None and not left.get("status", {}).get("conditions")
    kubectl.run("delete", "clusterrolebinding", role)
    kubectl.run("delete", "clusterrole", role)


def test_pending_kubelet_csr_approved_at_resync_once_its_requester_may(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    """csrapproving's resync: a kubelet client request refused by the SubjectAccessReview stays pending, and
    is approved at a later resync once its requester is granted certificatesigningrequests/nodeclient (the
    request itself never changes)."""
    role = f"csr-late-{namespace}"
    token = csr_requester(kubectl, namespace, "latecomer", role)
    request, _ = make_request(f"system:node:{namespace}-late", ("system:nodes",))
    name = f"{namespace}-late"
    post_kubelet_csr(shared_apiserver, token, name, request)
    time.sleep(4 * RESYNC)  # several resyncs refused by the access review
    left = get_csr(shared_apiserver, name)
    assert left is not None and not left.get("status", {}).get("conditions")
    nodeclient = f"csr-nodeclient-{namespace}"
    rules = [
        {
            "apiGroups": ["certificates.k8s.io"],
            "resources": ["certificatesigningrequests/nodeclient"],
            "verbs": ["create"],
        }
    ]
    api(
        shared_apiserver,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": nodeclient},
            "rules": rules,
        },
    )
    kubectl.run(
        "create",
        "clusterrolebinding",
        nodeclient,
        f"--clusterrole={nodeclient}",
        f"--serviceaccount={namespace}:latecomer",
    )
    csr = wait_for(
        lambda: (c := get_csr(shared_apiserver, name)) and condition(c, "Approved") and c,
        "approved at a resync",
    )
    approved = condition(csr, "Approved")
    assert approved is not None and approved["reason"] == "AutoApproved"
    for binding in (role, nodeclient):
        kubectl.run("delete", "clusterrolebinding", binding)
        kubectl.run("delete", "clusterrole", binding)
