"""Credentials bound to what they name (issue 7): tenant-cluster keys per instance, service-account tokens
per account, a bounded token-review cache, the tenant path authenticating first, front-proxy certificates.

Real processes: ``vplane platform start`` with its tenant replicas, and ``vplane apiserver``; driven with
kubectl, raw HTTPS and a mesh node built from vplane's own client library.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import APIServerProcess, Kubectl, PlatformProcess
from vplane.mesh import NodeSession, RegistrationError
from vplane.mesh.settings import MeshSettings
from vplane.support.tls import CertPair, client_context, issue_client

pytestmark = pytest.mark.integration

CACHE_ENTRIES = 4
TOKEN_BYTES = 256
SETTINGS = {
    "token_review_ttl_seconds": 1.0,
    "tenant_restart_backoff_seconds": 0.2,
    "mesh": '{"heartbeat_interval_seconds": 0.5, "session_silence_timeout_seconds": 3}',
    "tenant_mesh": '{"heartbeat_interval_seconds": 0.5, "reconnect_backoff_min_seconds": 0.2,'
    ' "reconnect_backoff_max_seconds": 1.0, "dial_timeout_seconds": 2}',
    "token_review_cache_max_entries": CACHE_ENTRIES,
    "token_max_bytes": TOKEN_BYTES,
}


def eventually(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.1)


def vci_manifest(name: str, project: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "management.loft.sh/v1",
            "kind": "VirtualClusterInstance",
            "metadata": {"name": name, "namespace": f"p-{project}"},
            "spec": {"template": {"helmRelease": {"values": ""}}, "networkPeer": True},
        }
    )


def wait_ready(k: Kubectl, name: str, project: str) -> None:
    k.run(
        "wait",
        "--for=jsonpath={.status.phase}=Ready",
        f"virtualclusterinstance/{name}",
        "-n",
        f"p-{project}",
        "--timeout=90s",
        timeout=100,
    )


def call(
    url: str, ctx: ssl.SSLContext, token: str | None = None, method: str = "GET", body: Any = None
) -> tuple[int, bytes, dict[str, str]]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            return resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


def whoami(url: str, ctx: ssl.SSLContext, token: str) -> tuple[int, str]:
    """(status, username) of a SelfSubjectReview with ``token``."""
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    status, body, _ = call(
        f"{url}/apis/authentication.k8s.io/v1/selfsubjectreviews", ctx, token, "POST", review
    )
    if status != 201:
        return status, ""
    return status, str(json.loads(body)["status"]["userInfo"]["username"])


class Keys:
    def __init__(self, proc: PlatformProcess, k: Kubectl) -> None:
        self.proc = proc
        self.k = k

    @property
    def ctx(self) -> ssl.SSLContext:
        return client_context(self.proc.ca.read_bytes())

    def access_key(self, name: str, project: str) -> str:
        raw = self.k.run(
            "get",
            "--raw",
            f"/apis/management.loft.sh/v1/namespaces/p-{project}/virtualclusterinstances/{name}/accesskey",
        ).stdout
        key: str = json.loads(raw)["accessKey"]
        return key

    def node(self, key: str, hostname: str) -> NodeSession:
        settings = MeshSettings(
            direct_ca_pem=(self.proc.data_dir / "mesh" / "ca.crt").read_text(), heartbeat_interval_seconds=0.5
        )
        return NodeSession(self.proc.url, key, hostname=hostname, settings=settings, ssl_context=self.ctx)

    def tenant(self, project: str, name: str) -> tuple[str, ssl.SSLContext]:
        """A tenant replica's own address (not the platform path) and a context trusting its CA."""
        doc = yaml.safe_load((self.proc.tenant_dir(project, name) / "kubeconfig-0.yaml").read_text())
        cluster = doc["clusters"][0]["cluster"]
        ca = base64.b64decode(cluster["certificate-authority-data"])
        return cluster["server"], client_context(ca)

    def pid(self, project: str, name: str) -> int:
        return int((self.proc.tenant_dir(project, name) / "replica-0.pid").read_text())


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory, kubectl_path: str) -> Iterator[Keys]:
    """A platform with projects `x` and `x-y`, and tenants `y-z` in `x` and `z` in `x-y`: the old key name
    ``vcluster-p-x-y-z`` of both."""
    tmp = tmp_path_factory.mktemp("keys")
    proc = PlatformProcess(tmp / "platform", SETTINGS)
    proc.start()
    k = Kubectl(kubectl_path, proc.kubeconfig, tmp / "cache")
    p = Keys(proc, k)
    try:
        for project in ("x", "x-y"):
            k.apply(f"apiVersion: management.loft.sh/v1\nkind: Project\nmetadata: {{name: {project}}}\n")
            eventually(lambda project=project: k.run("get", "ns", f"p-{project}", check=False).code == 0)
        k.apply(vci_manifest("y-z", project="x"))
        k.apply(vci_manifest("z", project="x-y"))
        wait_ready(k, "y-z", "x")
        wait_ready(k, "z", "x-y")
        yield p
    finally:
        proc.stop()
        proc.kill_tenants()


def _key_object(p: Keys, project: str, name: str) -> dict[str, Any]:
    items = json.loads(
        p.k.run(
            "get",
            "accesskeys",
            "-l",
            f"loft.sh/virtualcluster-instance={name},loft.sh/project-namespace=p-{project}",
            "-o",
            "json",
        ).stdout
    )["items"]
    assert len(items) == 1, [i["metadata"]["name"] for i in items]
    key: dict[str, Any] = items[0]
    return key


def test_colliding_tenant_names_get_their_own_keys_and_stay_up(keys: Keys) -> None:
    """`p-x`/`y-z` and `p-x-y`/`z` both run with keys of their own: fetching one never replaces the other,
    each authenticates as its own subject, and neither tenant is restarted."""
    pids = (keys.pid("x", "y-z"), keys.pid("x-y", "z"))
    first = (keys.access_key("y-z", "x"), keys.access_key("z", "x-y"))
    again = (keys.access_key("y-z", "x"), keys.access_key("z", "x-y"))
    assert first == again and first[0] != first[1]
    a, b = _key_object(keys, "x", "y-z"), _key_object(keys, "x-y", "z")
    assert a["metadata"]["name"] != b["metadata"]["name"]
    assert (a["spec"]["subject"], b["spec"]["subject"]) == ("loft:vcluster:p-x:y-z", "loft:vcluster:p-x-y:z")
    assert whoami(keys.proc.url, keys.ctx, first[0]) == (201, "loft:vcluster:p-x:y-z")
    assert whoami(keys.proc.url, keys.ctx, first[1]) == (201, "loft:vcluster:p-x-y:z")
    keys.k.run("annotate", "vci", "y-z", "-n", "p-x", "touched=1")  # one more reconcile of each
    keys.k.run("annotate", "vci", "z", "-n", "p-x-y", "touched=1")
    wait_ready(keys.k, "y-z", "x")
    wait_ready(keys.k, "z", "x-y")
    assert (keys.pid("x", "y-z"), keys.pid("x-y", "z")) == pids
    assert (keys.access_key("y-z", "x"), keys.access_key("z", "x-y")) == first


def test_a_key_of_another_subject_under_a_wanted_name_is_never_replaced(keys: Keys) -> None:
    """The cluster `edge` wants key `cluster-edge`; one held by another subject is refused (409), not
    deleted and re-minted under the holder's nose."""
    k = keys.k
    k.apply("""apiVersion: management.loft.sh/v1
kind: AccessKey
metadata: {name: cluster-edge}
spec: {type: Agent, subject: "loft:cluster:elsewhere", key: elsewhere-key-0001, scope: {roles: [{role: agent}]}}
---
apiVersion: management.loft.sh/v1
kind: Cluster
metadata: {name: edge}
spec: {networkPeer: true}
""")
    result = k.fails("get", "--raw", "/apis/management.loft.sh/v1/clusters/edge/accesskey")
    assert "the access key belongs to another subject" in result.stderr
    assert (
        k.run("get", "accesskey", "cluster-edge", "-o", "jsonpath={.spec.key}").stdout == "elsewhere-key-0001"
    )


def test_an_earlier_clusters_key_is_not_inherited_by_a_cluster_of_the_same_name(keys: Keys) -> None:
    """A Cluster deleted and made again under its name before the platform's loop saw it go leaves the old
    agent's key `cluster-edge` behind, made for the old UID: the new Cluster's key replaces it (the old agent
    is cut off), while a key without the UID label (made before keys carried it) is adopted."""
    k = keys.k
    k.apply("""apiVersion: management.loft.sh/v1
kind: AccessKey
metadata: {name: cluster-edge, labels: {loft.sh/cluster: edge, vplane.io/cluster-object-uid: earlier-uid}}
spec: {type: Agent, subject: "loft:cluster:edge", key: earlier-key-0001, scope: {roles: [{role: agent}]}}
---
apiVersion: management.loft.sh/v1
kind: Cluster
metadata: {name: edge}
spec: {networkPeer: true}
""")
    uid = k.run("get", "cluster", "edge", "-o", "jsonpath={.metadata.uid}").stdout
    answer = json.loads(k.run("get", "--raw", "/apis/management.loft.sh/v1/clusters/edge/accesskey").stdout)
    assert answer["accessKey"] != "earlier-key-0001"
    label = k.run(
        "get", "accesskey", "cluster-edge", "-o", "jsonpath={.metadata.labels.vplane\\.io/cluster-object-uid}"
    )
    assert label.stdout == uid
    again = json.loads(k.run("get", "--raw", "/apis/management.loft.sh/v1/clusters/edge/accesskey").stdout)
    assert again["accessKey"] == answer["accessKey"]  # the live Cluster's own key is reused

    k.apply("""apiVersion: management.loft.sh/v1
kind: AccessKey
metadata: {name: cluster-old, labels: {loft.sh/cluster: old}}
spec: {type: Agent, subject: "loft:cluster:old", key: unlabelled-key-0001, scope: {roles: [{role: agent}]}}
---
apiVersion: management.loft.sh/v1
kind: Cluster
metadata: {name: old}
spec: {networkPeer: true}
""")
    adopted = json.loads(k.run("get", "--raw", "/apis/management.loft.sh/v1/clusters/old/accesskey").stdout)
    assert adopted["accessKey"] == "unlabelled-key-0001"
    old_uid = k.run("get", "cluster", "old", "-o", "jsonpath={.metadata.uid}").stdout
    label = k.run(
        "get", "accesskey", "cluster-old", "-o", "jsonpath={.metadata.labels.vplane\\.io/cluster-object-uid}"
    )
    assert label.stdout == old_uid  # labelled on adoption: the next re-creation does not inherit it


def test_tenant_path_answers_401_alike_for_known_and_unknown_tenants(keys: Keys) -> None:
    """Without credentials or with a bad one, an existing tenant and a missing one get the same 401."""
    url = keys.proc.url + "/kubernetes/project/{}/virtualcluster/{}/api/v1/namespaces"
    answers = set()
    for project, name in (("x", "y-z"), ("x", "nope"), ("nope", "nope")):
        for token in (None, "not-a-key", ""):
            status, body, _ = call(url.format(project, name), keys.ctx, token)
            assert status == 401, (project, name, token, body)
            answers.add(body)
    assert len(answers) == 1, answers
    assert json.loads(answers.pop())["message"] == "auth failed"
    admin = yaml.safe_load(keys.proc.kubeconfig.read_text())["users"][0]["user"]["token"]
    assert call(url.format("x", "y-z"), keys.ctx, admin)[0] == 200
    assert call(url.format("x", "nope"), keys.ctx, admin)[0] == 404


async def test_a_deleted_tenants_key_is_refused_everywhere_and_a_new_instance_gets_a_new_key(
    keys: Keys,
) -> None:
    """Deleting an instance revokes its key on the platform, on other tenants and on the mesh (its sessions
    end); the next instance of that name gets a different key; a key bound to another UID never works."""
    k = keys.k
    await asyncio.to_thread(k.apply, vci_manifest("gone", project="x"))
    await asyncio.to_thread(wait_ready, k, "gone", "x")
    old = await asyncio.to_thread(keys.access_key, "gone", "x")
    peer_url, peer_ctx = keys.tenant("x-y", "z")
    assert whoami(keys.proc.url, keys.ctx, old) == (201, "loft:vcluster:p-x:gone")
    assert whoami(peer_url, peer_ctx, old) == (201, "loft:vcluster:p-x:gone")
    node = keys.node(old, "holder")
    await node.start()
    try:
        async with asyncio.timeout(15):
            await node.wait_ready()
        await asyncio.to_thread(k.run, "delete", "vci", "gone", "-n", "p-x", "--timeout=60s")
        await asyncio.to_thread(eventually, lambda: node.failure is not None, 15)
        assert "access key revoked" in str(node.failure)
    finally:
        await node.close()
    assert whoami(keys.proc.url, keys.ctx, old)[0] == 401
    await asyncio.to_thread(eventually, lambda: whoami(peer_url, peer_ctx, old)[0] == 401, 15)
    late = keys.node(old, "late")
    await late.start()
    with pytest.raises(RegistrationError, match="invalid access key: not found"):
        async with asyncio.timeout(15):
            await late.wait_ready()
    await late.close()

    await asyncio.to_thread(k.apply, vci_manifest("gone", project="x"))
    await asyncio.to_thread(wait_ready, k, "gone", "x")
    new = await asyncio.to_thread(keys.access_key, "gone", "x")
    assert new != old
    assert whoami(keys.proc.url, keys.ctx, new) == (201, "loft:vcluster:p-x:gone")
    assert whoami(keys.proc.url, keys.ctx, old)[0] == 401

    uid = k.run("get", "vci", "gone", "-n", "p-x", "-o", "jsonpath={.metadata.uid}").stdout
    forged = {
        "apiVersion": "management.loft.sh/v1",
        "kind": "AccessKey",
        "metadata": {
            "name": "forged",
            "annotations": {
                "vplane.io/virtualclusterinstance": "p-x/gone",
                "vplane.io/virtualclusterinstance-uid": uid[:-1] + ("0" if uid[-1] != "0" else "1"),
            },
        },
        "spec": {
            "type": "VirtualCluster",
            "subject": "loft:vcluster:p-x:gone",
            "key": "forged-key-0001",
            "scope": {"roles": [{"role": "vcluster"}]},
        },
    }
    await asyncio.to_thread(k.apply, json.dumps(forged))
    assert whoami(keys.proc.url, keys.ctx, "forged-key-0001")[0] == 401


def test_the_token_review_cache_stays_bounded_under_random_tokens(keys: Keys) -> None:
    """Random tokens sent straight to a tenant each get 401 `auth failed`; the tenant's cache drops old
    answers instead of growing (it says so in its log), and overlong tokens are refused outright."""
    url, ctx = keys.tenant("x", "y-z")
    for _ in range(CACHE_ENTRIES * 3):
        status, body, _ = call(url + "/api/v1/namespaces", ctx, secrets.token_urlsafe(24))
        assert (status, json.loads(body)["message"]) == (401, "auth failed")
    status, body, _ = call(url + "/api/v1/namespaces", ctx, "x" * (TOKEN_BYTES + 1))
    assert (status, json.loads(body)["message"]) == (
        401,
        f"the bearer token is longer than {TOKEN_BYTES} bytes",
    )
    log = keys.proc.tenant_dir("x", "y-z") / "replica-0.log"
    eventually(lambda: "token review cache full" in log.read_text(), timeout=10)
    line = next(ln for ln in log.read_text().splitlines() if "token review cache full" in ln)
    assert f"capacity={CACHE_ENTRIES}" in line and f"refused={CACHE_ENTRIES}" in line, line


def test_a_restarted_platform_does_not_adopt_a_replica_running_with_another_key(
    tmp_path: Path, kubectl_path: str
) -> None:
    """Replicas outlive a killed platform; one started with a key that is no longer the tenant's (revoked
    meanwhile) is restarted with the current key instead of being adopted."""
    proc = PlatformProcess(tmp_path / "platform", SETTINGS)
    proc.start()
    k = Kubectl(kubectl_path, proc.kubeconfig, tmp_path / "cache")
    try:
        k.apply("apiVersion: management.loft.sh/v1\nkind: Project\nmetadata: {name: solo}\n")
        eventually(lambda: k.run("get", "ns", "p-solo", check=False).code == 0)
        k.apply(vci_manifest("solo", "solo"))
        wait_ready(k, "solo", "solo")
        directory = proc.tenant_dir("solo", "solo")
        pid = int((directory / "replica-0.pid").read_text())
        proc.kill()
        (directory / "access-key").write_text("a-revoked-key")  # what the running replica started with
        proc.start()
        try:
            eventually(lambda: int((directory / "replica-0.pid").read_text()) != pid, timeout=60)
        except AssertionError:
            raise AssertionError(f"the replica was not restarted:\n{proc.log()[-4000:]}") from None
        wait_ready(k, "solo", "solo")
        assert (directory / "access-key").read_text() == Keys(proc, k).access_key("solo", "solo")
    finally:
        proc.stop()
        proc.kill_tenants()


# -- service-account tokens and front-proxy certificates, on a plain API server ----------------------------


def test_service_account_tokens_stop_working_when_the_account_is_deleted(
    kubectl: Kubectl, namespace: str
) -> None:
    """A token of a deleted account, or of an account deleted and created again, no longer authenticates."""
    kubectl.run("create", "serviceaccount", "robot", "-n", namespace)
    token = kubectl.run("create", "token", "robot", "-n", namespace).stdout.strip()
    assert (
        f"system:serviceaccount:{namespace}:robot" in kubectl.run(f"--token={token}", "auth", "whoami").stdout
    )
    kubectl.run("delete", "serviceaccount", "robot", "-n", namespace)
    assert "You must be logged in" in kubectl.fails(f"--token={token}", "auth", "whoami").stderr
    kubectl.run("create", "serviceaccount", "robot", "-n", namespace)
    assert "You must be logged in" in kubectl.fails(f"--token={token}", "auth", "whoami").stderr
    fresh = kubectl.run("create", "token", "robot", "-n", namespace).stdout.strip()
    assert (
        f"system:serviceaccount:{namespace}:robot" in kubectl.run(f"--token={fresh}", "auth", "whoami").stdout
    )


def test_token_request_expiration_is_checked_and_capped_as_upstream(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    """Out-of-range expirationSeconds is 422, a non-integer 400, both in upstream's words; a request over
    the 48 h cap is shortened to it with upstream's warning."""
    kubectl.run("create", "serviceaccount", "timer", "-n", namespace)
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/timer/token"

    def request(seconds: object) -> tuple[int, dict[str, Any], dict[str, str]]:
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest"}
        body["spec"] = {"expirationSeconds": seconds}  # type: ignore[assignment]
        status, headers, raw = shared_apiserver.request(
            "POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        return status, json.loads(raw), headers

    for seconds, detail in (
        (599, "Invalid value: 599: may not specify a duration less than 10 minutes"),
        (0, "Invalid value: 0: may not specify a duration less than 10 minutes"),
        (
            (1 << 32) + 1,
            f"Invalid value: {(1 << 32) + 1}: may not specify a duration larger than 2^32 seconds",
        ),
    ):
        status, answer, _ = request(seconds)
        assert (status, answer["message"]) == (
            422,
            f'TokenRequest.authentication.k8s.io "" is invalid: spec.expirationSeconds: {detail}',
        )
    for value, what in (("3600", "string"), (1.5, "number 1.5"), (True, "bool")):
        status, answer, _ = request(value)
        assert (status, answer["message"]) == (
            400,
            'TokenRequest in version "v1" cannot be handled as a TokenRequest: json: cannot unmarshal '
            f"{what} into Go struct field TokenRequestSpec.spec.expirationSeconds of type int64",
        )
    status, answer, headers = request(1 << 32)
    assert status == 201 and answer["spec"]["expirationSeconds"] == 48 * 3600
    assert f"requested expiration of {1 << 32} seconds shortened to {48 * 3600} seconds" in headers["Warning"]
    result = kubectl.run("create", "token", "timer", "-n", namespace, "--duration=100h")
    assert "requested expiration of 360000 seconds shortened to 172800 seconds" in result.stderr
    status, answer, _ = request(None)
    assert answer["spec"]["expirationSeconds"] == 3600
    expires = answer["status"]["expirationTimestamp"]
    assert time.strptime(expires, "%Y-%m-%dT%H:%M:%SZ")


def _cert_call(server: APIServerProcess, pair: CertPair, tmp: Path, headers: dict[str, str]) -> int:
    pki = server.data_dir / "pki"
    ctx = client_context((pki / "ca.crt").read_bytes(), pair, tmp)
    req = urllib.request.Request(server.url + "/api/v1/namespaces", headers=headers)
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_front_proxy_certificates_cannot_act_as_users(
    shared_apiserver: APIServerProcess, tmp_path: Path
) -> None:
    """A certificate from the front-proxy CA never authenticates by its own subject, and its X-Remote-*
    headers count only when its name is an allowed proxy name."""
    pki = shared_apiserver.data_dir / "pki"
    proxy_ca = CertPair.read(pki / "front-proxy-ca.crt", pki / "front-proxy-ca.key")
    masters = {"X-Remote-User": "admin", "X-Remote-Group": "system:masters"}
    as_admin = issue_client(proxy_ca, "admin", ["system:masters"])
    assert _cert_call(shared_apiserver, as_admin, tmp_path / "a", {}) == 401
    not_allowed = issue_client(proxy_ca, "not-a-proxy-name", ["system:masters"])
    assert _cert_call(shared_apiserver, not_allowed, tmp_path / "b", masters) == 401
    allowed = issue_client(proxy_ca, "front-proxy-client", ["system:masters"])
    assert _cert_call(shared_apiserver, allowed, tmp_path / "c", {}) == 401
    assert _cert_call(shared_apiserver, allowed, tmp_path / "d", masters) == 200
