"""The resource proxy end to end: client tenant clusters serve `myresources.example.com/v1`, stored in a
target tenant cluster, with real platform and tenant processes, kubectl, raw HTTPS and the `kubernetes`
client, as the runbook's operator sees it: status codes, messages, headers, `vcluster_proxy_*` series and
log lines, one test per symptom.

Three groups, each with a platform of its own (class-scoped, so it stops when its group is done) and
settings shrunk for what it tests; `xdist_group` keeps a group on one worker (`--dist loadgroup`):

- `TestProxy` (group proxy-main): a healthy target and several clients (owned, all, a second owned
  client, one whose registration is refused, one with every entry disabled, one whose key gets disabled,
  one that is decommissioned last). Non-destructive tests, or tests that put back what they change.
- `TestPeers` (group proxy-peers): the target is hung (SIGSTOP), killed and restarted by the platform.
- `TestReplicas` (group proxy-replicas): a two-replica client; then the platform itself is killed and
  restarted (tenants outlive it).

503 answers are read with raw HTTPS: kubectl's client retries a 503 that carries `Retry-After` ten times,
which would only slow the tests down and hide the header.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from harness import Kubectl, PlatformProcess
from platformkit import FAST, Platform, eventually, stop_platform, vci_manifest, wait_ready
from threadserver import ThreadedServer
from vplane.support import tls

pytestmark = pytest.mark.integration

GV = "example.com/v1"
GENERIC_503 = 'target tenant cluster "target" for example.com/v1 is unavailable'
UPGRADE_501 = "resource proxy does not support connection upgrades"
DENIAL = (
    "deletion of vCluster-protected resources is denied; remove the corresponding entry from your "
    "vCluster configuration"
)
QUARANTINE_LOG = "quarantining proxy target peer host after consecutive dial failures"
ALL_QUARANTINED_LOG = "all peer hosts for the proxy target are quarantined"
STALE_LOG = "peer watch subscription is down and no fresh netmap is available"
NO_SYNC_LOG = "peer cache did not sync in time for the startup probe"
TARGET_LABEL = {"target": "default/target"}
GV_LABEL = {"target": "default/target", "group_version": GV}
OWNED = {"vcluster.com/owner-vcluster": "client", "vcluster.com/owner-project": "default"}
OWNER_VCLUSTER_KEY = "vcluster.com/owner-vcluster"

CRD = """apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: myresources.example.com}
spec:
  group: example.com
  names: {kind: MyResource, plural: myresources, singular: myresource, listKind: MyResourceList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
              color: {type: string}
          status:
            type: object
            properties:
              phase: {type: string}
"""
TARGET_RBAC = """apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: proxy-{name}}}
rules:
- apiGroups: [example.com, zz.example]
  resources: [myresources, myresources/status, widgets]
  verbs: [{verbs}]
- apiGroups: [""]
  resources: [namespaces]
  verbs: [get, list, watch, create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: proxy-{name}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: proxy-{name}}}
subjects:
- {{apiGroup: rbac.authorization.k8s.io, kind: User, name: "loft:vcluster:p-default:{name}"}}
"""
ALL_VERBS = "get, list, watch, create, update, patch, delete, deletecollection"
PLATFORM_RBAC = """apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: vcluster-proxy-target-access, namespace: p-default}
rules:
- apiGroups: [management.loft.sh]
  resources: [virtualclusterinstances]
  resourceNames: [target]
  verbs: [use]
"""
PLATFORM_BINDING = """apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: proxy-target-{name}, namespace: p-default}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: vcluster-proxy-target-access}}
subjects:
- {{apiGroup: rbac.authorization.k8s.io, kind: User, name: "{user}"}}
"""


def proxy_values(
    *keys: str,
    access: str = "",
    replicas: int = 1,
    enabled: bool = True,
    target: str = "target",
    env: dict[str, str] | None = None,
) -> str:
    """A vcluster.yaml proxying ``keys`` (default ``myresources.example.com/v1``) from ``target``; ``env`` for
    the control plane (``controlPlane.statefulSet.env``)."""
    entry: dict[str, Any] = {"enabled": enabled, "targetVirtualCluster": {"name": target}}
    if access:
        entry["accessResources"] = access
    doc: dict[str, Any] = {
        "experimental": {
            "proxy": {
                "customResources": {k: json.loads(json.dumps(entry)) for k in keys or (f"myresources.{GV}",)}
            }
        }
    }
    stateful_set: dict[str, Any] = {}
    if replicas > 1:
        stateful_set["highAvailability"] = {"replicas": replicas}
    if env:
        stateful_set["env"] = [{"name": k, "value": v} for k, v in env.items()]
    if stateful_set:
        doc["controlPlane"] = {"statefulSet": stateful_set}
    return yaml.safe_dump(doc)


def dump(doc: Any) -> str:
    """YAML without anchors and aliases (tenant configs refuse aliases)."""
    return yaml.safe_dump(json.loads(json.dumps(doc)))


def widget(name: str, namespace: str = "default", size: int = 1, labels: dict[str, str] | None = None) -> str:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return yaml.safe_dump({"apiVersion": GV, "kind": "MyResource", "metadata": meta, "spec": {"size": size}})


def objects_path(namespace: str, name: str = "") -> str:
    path = f"/apis/{GV}/namespaces/{namespace}/myresources"
    return f"{path}/{name}" if name else path


# -- the wire ---------------------------------------------------------------------------------------


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def message(self) -> str:
        try:
            return str(self.json().get("message", ""))
        except ValueError:
            return self.body.decode(errors="replace")


@dataclass
class Endpoint:
    """One API server address with a bearer token: the platform's tenant path, or a replica directly."""

    base: str
    token: str
    ctx: ssl.SSLContext

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        timeout: float = 30,
    ) -> Answer:
        hdrs = {"Authorization": f"Bearer {self.token}", "Accept": "application/json", **(headers or {})}
        data: bytes | None = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=timeout) as resp:
                return Answer(resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read())
        except urllib.error.HTTPError as exc:
            return Answer(exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read())

    def metrics(self) -> str:
        answer = self.call("GET", "/metrics/syncer", headers={"Accept": "text/plain"})
        assert answer.status == 200, answer
        return answer.body.decode()


def series(text: str, name: str, **labels: str) -> float | None:
    """The sum of the samples of ``name`` whose labels include ``labels`` (None when there is none)."""
    total: float | None = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total = (total or 0.0) + sample.value
    return total


def count(text: str, name: str, **labels: str) -> float:
    return series(text, name, **labels) or 0.0


def assert_unavailable(answer: Answer, detail: bool = False) -> None:
    """The proxy's 503: the runbook's generic text (plus the dial error when ``detail``), Retry-After 1."""
    assert answer.status == 503, (answer.status, answer.body)
    assert answer.headers.get("retry-after") == "1", answer.headers
    if detail:
        assert answer.message.startswith(GENERIC_503 + ": "), answer.message
    else:
        assert answer.message == GENERIC_503, answer.message


class Env:
    """A platform with tenant `target` (CRD installed) and client tenants proxying example.com/v1 from it."""

    def __init__(self, platform: Platform, tmp: Path) -> None:
        self.p = platform
        self.tmp = tmp
        admin = yaml.safe_load(platform.proc.kubeconfig.read_text())
        self.admin_token: str = admin["users"][0]["user"]["token"]
        self.platform_ctx = tls.client_context(platform.proc.ca.read_bytes())
        self.target = platform.tenant_kubectl("target", None, tmp)
        self.slow: SlowWebhook | None = None

    # -- reaching tenants ---------------------------------------------------------------------------

    def kubectl(self, name: str) -> Kubectl:
        """kubectl against a tenant through the platform's tenant path, as the platform admin."""
        return self.p.tenant_kubectl(name, None, self.tmp)

    def via(self, name: str) -> Endpoint:
        base = f"{self.p.proc.url}/kubernetes/project/default/virtualcluster/{name}"
        return Endpoint(base, self.admin_token, self.platform_ctx)

    def tenant_dir(self, name: str) -> Path:
        return self.p.proc.tenant_dir("default", name)

    def direct(self, name: str, replica: int) -> Endpoint:
        """One replica, at the endpoint the VirtualClusterInstance's status lists, with the platform admin key."""
        endpoints = json.loads(
            self.p.k.run("get", "vci", name, "-n", "p-default", "-o", "jsonpath={.status.endpoints}").stdout
        )
        ctx = tls.client_context((self.tenant_dir(name) / "pki" / "ca.crt").read_bytes())
        return Endpoint(endpoints[replica], self.admin_token, ctx)

    def local(self, name: str, replica: int = 0) -> Endpoint:
        """One replica with its own administrator credentials: works while the platform is down."""
        doc = yaml.safe_load((self.tenant_dir(name) / f"kubeconfig-{replica}.yaml").read_text())
        cluster, user = doc["clusters"][0]["cluster"], doc["users"][0]["user"]
        ctx = tls.client_context(base64.b64decode(cluster["certificate-authority-data"]))
        return Endpoint(cluster["server"], user["token"], ctx)

    def metrics(self, name: str) -> str:
        """The runbook's step 2: `kubectl get --raw /metrics/syncer`, against the client tenant cluster."""
        return self.kubectl(name).run("get", "--raw", "/metrics/syncer").stdout

    def log(self, name: str, replica: int = 0) -> str:
        path = self.tenant_dir(name) / f"replica-{replica}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def log_lines(self, name: str, text: str, replica: int = 0) -> list[str]:
        return [line for line in self.log(name, replica).splitlines() if text in line]

    def wait_log(self, name: str, text: str, replica: int = 0, timeout: float = 15) -> str:
        """The first line of the replica's log that contains ``text``, once there is one."""
        deadline = time.monotonic() + timeout
        while not (lines := self.log_lines(name, text, replica)):
            if time.monotonic() > deadline:
                tail = "\n".join(self.log(name, replica).splitlines()[-30:])
                raise AssertionError(f"{text!r} not in {name}-{replica}'s log; it ends with:\n{tail}")
            time.sleep(0.2)
        return lines[0]

    # -- tenants ------------------------------------------------------------------------------------

    def pid(self, name: str, replica: int = 0) -> int:
        return int((self.tenant_dir(name) / f"replica-{replica}.pid").read_text())

    def signal(self, name: str, sig: signal.Signals, replica: int = 0) -> None:
        os.kill(self.pid(name, replica), sig)

    def phase(self, name: str) -> str:
        return self.p.k.run("get", "vci", name, "-n", "p-default", "-o", "jsonpath={.status.phase}").stdout

    def grant(self, name: str, verbs: str = ALL_VERBS) -> None:
        """Target RBAC for the client identity `loft:vcluster:p-default:<name>`."""
        self.target.apply(TARGET_RBAC.format(name=name, verbs=verbs))

    def allow_use(self, name: str) -> None:
        """Platform RBAC: the client identity may `use` the target VirtualClusterInstance."""
        self.p.k.apply(PLATFORM_RBAC + "---\n" + PLATFORM_BINDING.format(name=name, user=identity(name)))

    def add_clients(self, clients: dict[str, str], *, proxied: tuple[str, ...] | None = None) -> None:
        """Create client tenants at once, wait until they serve and their APIService is available."""
        for name, values in clients.items():
            self.p.k.apply(vci_manifest(name, values))
        for name in clients:
            wait_ready(self.p.k, name)
        for name in proxied if proxied is not None else tuple(clients):
            eventually(lambda n=name: available(self.kubectl(n)), timeout=60)  # type: ignore[misc]

    def ok(self, name: str, namespace: str = "default") -> bool:
        return self.via(name).call("GET", objects_path(namespace)).status == 200


def identity(name: str) -> str:
    return f"loft:vcluster:p-default:{name}"


def available(k: Kubectl, apiservice: str = "v1.example.com") -> bool:
    result = k.run(
        "get",
        "apiservice",
        apiservice,
        "-o",
        'jsonpath={.status.conditions[?(@.type=="Available")].status}',
        check=False,
    )
    return result.stdout == "True"


def start_env(tmp: Path, kubectl_path: str, proxy: dict[str, Any], **settings: Any) -> Env:
    proxy_settings = {k: json.dumps(v) if isinstance(v, dict) else v for k, v in proxy.items()}
    proc = PlatformProcess(tmp / "platform", {**FAST, "tenant_proxy": json.dumps(proxy_settings), **settings})
    proc.start()
    k = Kubectl(kubectl_path, proc.kubeconfig, tmp / "platform-cache")
    k.apply("apiVersion: management.loft.sh/v1\nkind: Project\nmetadata: {name: default}\n")
    eventually(lambda: k.run("get", "namespace", "p-default", check=False).code == 0)
    platform = Platform(proc, k, tmp / "home")
    try:
        k.apply(vci_manifest("target"))
        wait_ready(k, "target")
        env = Env(platform, tmp)
        env.target.apply(CRD)
        env.target.run("wait", "--for=condition=Established", "crd/myresources.example.com")
    except BaseException:
        stop_platform(platform)
        raise
    return env


def target_object(env: Env, name: str, namespace: str = "default") -> dict[str, Any] | None:
    result = env.target.run("get", "myresources", name, "-n", namespace, "-o", "json", check=False)
    return json.loads(result.stdout) if result.code == 0 else None


def labels_of(obj: dict[str, Any] | None) -> dict[str, str]:
    assert obj is not None
    return dict(obj["metadata"].get("labels") or {})


# -- an admission webhook for the target ---------------------------------------------------------------


class SlowWebhook:
    """An HTTPS validating webhook in a thread of the test process that answers after ``delay`` seconds,
    recording when a review started and when it finished."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.ca = trustme.CA()
        self.ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ca.issue_cert("127.0.0.1").configure_cert(self.ssl)
        self.started = threading.Event()
        self.finished = threading.Event()
        self._server = ThreadedServer(self._app, self.ssl)

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca.cert_pem.bytes()).decode()

    @property
    def port(self) -> int:
        return self._server.port

    def start(self) -> SlowWebhook:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/slow", self._handle)
        return app

    async def _handle(self, request: web.Request) -> web.Response:
        review = await request.json()
        self.started.set()
        await asyncio.sleep(self.delay)
        self.finished.set()
        response = {"uid": review["request"]["uid"], "allowed": True}
        return web.json_response(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        )


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def webhooks(slow: SlowWebhook) -> str:
    """Validating webhooks on the target for objects labelled `hook`: `broken` has no backend (connection
    refused, failurePolicy Fail: the target answers 500), `slow` answers after its delay."""
    rule = {
        "apiGroups": ["example.com"],
        "apiVersions": ["v1"],
        "operations": ["CREATE"],
        "resources": ["myresources"],
    }
    common = {
        "rules": [rule],
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    }
    return yaml.safe_dump(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "proxy-tests"},
            "webhooks": [
                {
                    "name": "broken.proxy-tests.example.com",
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{closed_port()}/broken",
                        "caBundle": slow.ca_bundle,
                    },
                    "objectSelector": {"matchLabels": {"hook": "broken"}},
                    "timeoutSeconds": 5,
                    **common,
                },
                {
                    "name": "slow.proxy-tests.example.com",
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{slow.port}/slow",
                        "caBundle": slow.ca_bundle,
                    },
                    "objectSelector": {"matchLabels": {"hook": "slow"}},
                    "timeoutSeconds": 15,
                    **common,
                },
            ],
        }
    )


# ====================================================================================================
# A healthy target and many clients
# ====================================================================================================

MAIN_PROXY = {
    "peers": {"dial_timeout_seconds": 2, "quarantine_seconds": 3, "startup_sync_seconds": 1},
    "request_timeout_seconds": 3,
}
MAIN_CLIENTS = {
    "client": proxy_values(),
    # Direct dialing off (the runbook's TS_DEBUG_DIAL_DIRECT=false for vCluster pods), verbose mesh logs on:
    # everything client2 proxies, the two-client isolation test's watches included, goes over the relay.
    # DEBUG=true: its control plane's verbose log (the runbook's `Connected to target`).
    "client2": proxy_values(
        env={"TS_DEBUG_DIAL_DIRECT": "false", "LOFT_LOG_TSNET_AGENT": "true", "DEBUG": "true"}
    ),
    "allc": proxy_values(access="all"),
    "decom": proxy_values(f"myresources.{GV}", "widgets.zz.example/v1"),
    "keyed": proxy_values(),
    "noreg": proxy_values(),
    "off": proxy_values(f"myresources.{GV}", "*.other.example/v1", enabled=False),
}


@pytest.fixture(scope="class")
def env(tmp_path_factory: pytest.TempPathFactory, kubectl_path: str) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("proxy-main")
    # A long probe interval: the clients' APIServices must become available at once, without waiting for
    # a periodic availability check (they waited a whole interval when registered during a round).
    slow = SlowWebhook(delay=8).start()
    # Tenants never call loopback webhooks unless the operator allows the address (docs/security.md).
    e = start_env(
        tmp,
        kubectl_path,
        MAIN_PROXY,
        tenant_apiserver=json.dumps(
            {
                "apiservice_probe_interval_seconds": 300,
                "aggregation_allowed_backends": [f"127.0.0.1:{slow.port}"],
            }
        ),
    )
    try:
        e.slow = slow
        e.target.apply(webhooks(slow))
        for name in ("client", "client2", "allc", "decom", "keyed"):
            e.grant(name)
            e.allow_use(name)
        e.add_clients(MAIN_CLIENTS, proxied=("client", "client2", "allc", "decom", "keyed", "noreg"))
        e.p.vplane(
            "platform", "login", e.p.proc.url, "--access-key", e.admin_token, "--ca-file", str(e.p.proc.ca)
        )
        yield e
    finally:
        stop_platform(e.p)
        slow.stop()


def runbook_can_i(e: Env, *args: str) -> str:
    """`vplane connect target --driver platform --project default -- kubectl auth can-i ...`."""
    result = e.p.vplane(
        "connect",
        "target",
        "--driver",
        "platform",
        "--project",
        "default",
        "--",
        e.p.k.binary,
        "auth",
        "can-i",
        *args,
        check=False,
    )
    return result.stdout.strip()


@pytest.mark.xdist_group("proxy-main")
class TestProxy:
    def test_create_through_the_client_lands_on_the_target_with_ownership_labels(self, env: Env) -> None:
        client = env.kubectl("client")
        client.apply(widget("w1"))
        got = target_object(env, "w1")
        assert labels_of(got) == OWNED
        assert got is not None and got["spec"] == {"size": 1}
        listed = client.run("get", "myresources", "-n", "default", "-o", "name").stdout.split()
        assert "myresource.example.com/w1" in listed

    def test_a_client_without_direct_dialing_proxies_over_the_platform_relay(self, env: Env) -> None:
        """client2's control plane has TS_DEBUG_DIAL_DIRECT=false in its vcluster.yaml's
        controlPlane.statefulSet.env: its proxy reaches the target through the platform's relay (the
        direct path's fallback), and its verbose mesh log (LOFT_LOG_TSNET_AGENT, set the same way) shows
        netmaps but never a direct dial; DEBUG=true gives its verbose log the runbook's `Connected to target`
        (client, at the platform's level, has none)."""
        client = env.kubectl("client2")
        client.apply(widget("relayed"))
        got = target_object(env, "relayed")
        assert labels_of(got) == {**OWNED, "vcluster.com/owner-vcluster": "client2"}
        listed = client.run("get", "myresources", "relayed", "-n", "default", "-o", "name").stdout
        assert listed.strip() == "myresource.example.com/relayed"
        assert env.log_lines("client2", "mesh netmap received"), "the environment reached the control plane"
        assert not env.log_lines("client2", "mesh direct dial")
        assert env.log_lines("client2", "Connected to target") and not env.log_lines(
            "client", "Connected to target"
        )
        client.run("delete", "myresources", "relayed", "-n", "default")

    def test_protected_objects_read_as_upstream(self, env: Env) -> None:
        """The APIService and the ExternalName Service are upstream's, labelled, and cannot be deleted;
        label updates pass."""
        client = env.kubectl("client")
        api = json.loads(client.run("get", "apiservice", "v1.example.com", "-o", "json").stdout)
        assert api["metadata"]["labels"] == {"vcluster.loft.sh/protected": "resource-proxy"}
        assert api["spec"]["service"] == {
            "name": "proxy-example-com-v1",
            "namespace": "kube-system",
            "port": 9100,
        }
        assert (api["spec"]["groupPriorityMinimum"], api["spec"]["versionPriority"]) == (100, 100)
        assert api["spec"]["insecureSkipTLSVerify"] is True
        svc = json.loads(
            client.run("get", "service", "-n", "kube-system", "proxy-example-com-v1", "-o", "json").stdout
        )
        assert svc["spec"]["type"] == "ExternalName" and svc["spec"]["externalName"] == "localhost"
        assert svc["metadata"]["labels"] == {"vcluster.loft.sh/protected": "resource-proxy"}
        for args in (
            ("apiservice", "v1.example.com"),
            ("service", "-n", "kube-system", "proxy-example-com-v1"),
        ):
            denied = client.fails("delete", *args)
            assert DENIAL in denied.stderr
            client.run("label", *args, "extra=1")  # updates pass
            client.run("label", *args, "extra-")
        assert available(client)
        policy = json.loads(
            client.run(
                "get", "validatingadmissionpolicybinding", "vcluster-protected-resource-proxy", "-o", "json"
            ).stdout
        )
        assert policy["spec"]["policyName"] == "vcluster-protected-apiservices"

    def test_metrics_and_startup_logs(self, env: Env) -> None:
        """Runbook quick triage, steps 2 and 3: every series carries `target`, the peer gauges are all there,
        and the start-up pair is logged once per group/version."""
        client = env.kubectl("client")
        client.run("get", "myresources", "-n", "default")
        text = env.metrics("client")
        for state, value in (("healthy", 1.0), ("quarantined", 0.0), ("half_open", 0.0)):
            assert series(text, "vcluster_proxy_peers", state=state, **GV_LABEL) == value
        assert series(text, "vcluster_proxy_peer_cache_synced", **GV_LABEL) == 1.0
        assert series(text, "vcluster_proxy_peer_list_age_seconds", **GV_LABEL) is not None
        assert (
            count(
                text, "vcluster_proxy_request_total", verb="list", code="200", reason="upstream", **GV_LABEL
            )
            >= 1
        )
        assert series(text, "vcluster_proxy_inflight_requests", **TARGET_LABEL) == 0.0
        assert series(text, "vcluster_proxy_active_watches", **TARGET_LABEL) == 0.0
        assert count(text, "vcluster_proxy_request_duration_seconds_count", verb="list", **TARGET_LABEL) >= 1
        assert count(text, "vcluster_proxy_peer_dial_duration_seconds_count", **TARGET_LABEL) >= 1
        log = env.log("client")
        assert len(env.log_lines("client", "Starting proxy server")) == 1
        assert len(env.log_lines("client", "Starting target transport")) == 1
        assert log.index("Starting proxy server") < log.index("Starting target transport")
        assert "initial probe of proxy target failed" not in log

    def test_every_write_type_carries_the_ownership_labels(self, env: Env) -> None:
        """Create, replace, merge patch, JSON patch, server-side apply (create and update) and a status write
        all leave both ownership labels on the target object, even when the body tries to change them;
        a strategic merge patch gets the target's own 415 (custom resources do not support it)."""
        client, ns = env.kubectl("client"), "writes"
        client.run("create", "namespace", ns)
        client.run("create", "-f", "-", input=widget("c1", ns))
        assert labels_of(target_object(env, "c1", ns)) == OWNED
        client.run("replace", "-f", "-", input=widget("c1", ns, size=2, labels={"app": "x"}))
        got = target_object(env, "c1", ns)
        assert labels_of(got) == {**OWNED, "app": "x"} and got is not None and got["spec"]["size"] == 2
        steal = {"metadata": {"labels": {"vcluster.com/owner-vcluster": "client2"}}, "spec": {"size": 3}}
        client.run("patch", "myresource", "c1", "-n", ns, "--type", "merge", "-p", json.dumps(steal))
        got = target_object(env, "c1", ns)
        assert labels_of(got) == {**OWNED, "app": "x"} and got is not None and got["spec"]["size"] == 3
        ops = [{"op": "replace", "path": "/spec/size", "value": 4}]
        client.run("patch", "myresource", "c1", "-n", ns, "--type", "json", "-p", json.dumps(ops))
        got = target_object(env, "c1", ns)
        assert labels_of(got) == {**OWNED, "app": "x"} and got is not None and got["spec"]["size"] == 4
        strategic = client.fails(
            "patch", "myresource", "c1", "-n", ns, "--type", "strategic", "-p", '{"spec":{"size":5}}'
        )
        assert "the body of the request was in an unknown format" in strategic.stderr
        client.run("apply", "--server-side", "-f", "-", input=widget("c2", ns, size=7))
        client.run("apply", "--server-side", "-f", "-", input=widget("c2", ns, size=8))
        got = json.loads(
            env.target.run("get", "myresources", "c2", "-n", ns, "-o", "json", "--show-managed-fields").stdout
        )
        assert labels_of(got) == OWNED and got["spec"]["size"] == 8
        applied = [m for m in got["metadata"]["managedFields"] if m["operation"] == "Apply"]
        assert applied and "f:labels" in applied[0]["fieldsV1"]["f:metadata"], "the applier owns the labels"
        status = {"status": {"phase": "Ready"}}
        client.run(
            "patch",
            "myresource",
            "c2",
            "-n",
            ns,
            "--subresource",
            "status",
            "--type",
            "merge",
            "-p",
            json.dumps(status),
        )
        got = target_object(env, "c2", ns)
        assert got is not None and got["status"] == {"phase": "Ready"} and labels_of(got) == OWNED
        text = env.metrics("client")
        for verb in ("create", "update", "patch"):
            assert (
                count(
                    text, "vcluster_proxy_request_total", verb=verb, code="200", reason="upstream", **GV_LABEL
                )
                + count(
                    text, "vcluster_proxy_request_total", verb=verb, code="201", reason="upstream", **GV_LABEL
                )
                >= 1
            ), verb
        assert (
            count(
                text, "vcluster_proxy_request_total", verb="patch", code="415", reason="upstream", **GV_LABEL
            )
            == 1
        )

    def test_all_mode_sees_and_changes_everything(self, env: Env) -> None:
        """`accessResources: all`: no filtering, no masking, no labels: target RBAC alone decides."""
        env.target.apply(widget("everyones", "default", size=1))
        env.kubectl("client").apply(widget("clients-own", "default", size=1))
        allc = env.kubectl("allc")
        names = allc.run("get", "myresources", "-n", "default", "-o", "name").stdout.split()
        assert {"myresource.example.com/everyones", "myresource.example.com/clients-own"} <= set(names)
        # A set-based selector (its query carries + for spaces) reaches the target as the caller sent it.
        selector = f"{OWNER_VCLUSTER_KEY} in (client,x)"
        selected = allc.run(
            "get", "myresources", "-n", "default", "-l", selector, "-o", "name"
        ).stdout.split()
        assert "myresource.example.com/clients-own" in selected
        assert "myresource.example.com/everyones" not in selected
        allc.run("get", "myresource", "everyones", "-n", "default")
        allc.run(
            "patch",
            "myresource",
            "clients-own",
            "-n",
            "default",
            "--type",
            "merge",
            "-p",
            '{"spec":{"size":9}}',
        )
        got = target_object(env, "clients-own")
        assert got is not None and got["spec"]["size"] == 9 and labels_of(got) == OWNED
        allc.apply(widget("allcs", "default"))
        assert labels_of(target_object(env, "allcs")) == {}, "all mode injects no ownership labels"
        allc.run("delete", "myresource", "everyones", "-n", "default")
        assert target_object(env, "everyones") is None

    def test_unparsable_body_is_forwarded_and_logged(self, env: Env) -> None:
        """A YAML body the proxy cannot label (a second document) goes to the target unchanged: the caller
        gets the target's own answer, and the client logs `inject source labels failed`."""
        body = widget("twodocs").encode() + b"---\nkind: Other\n"
        answer = env.via("client").call(
            "POST", objects_path("default"), body, {"Content-Type": "application/yaml"}
        )
        assert answer.status == 400, answer
        assert "expected a single document in the stream" in answer.message, "the target's own parse error"
        lines = env.log_lines("client", "inject source labels failed")
        assert lines and "groupVersion=example.com/v1" in lines[-1] and "target=default/target" in lines[-1]

    def test_two_clients_never_see_or_change_each_others_objects(self, env: Env) -> None:
        """Owned mode, two clients of one target, one namespace: every verb is isolated, watches and
        deletecollection included; a name collision is the target's 409."""
        ns = "iso"
        one, two = env.via("client"), env.via("client2")
        k1, k2 = env.kubectl("client"), env.kubectl("client2")
        k1.run("create", "namespace", ns)
        k2.run("create", "namespace", ns)
        rv0 = one.call("GET", objects_path(ns)).json()["metadata"]["resourceVersion"]
        k1.run("create", "-f", "-", input=widget("a1", ns, labels={"app": "x"}))
        k1.run("create", "-f", "-", input=widget("a2", ns))
        k2.run("create", "-f", "-", input=widget("b1", ns, size=5))
        before = target_object(env, "b1", ns)

        def names(endpoint: Endpoint, query: str = "") -> set[str]:
            items = endpoint.call("GET", objects_path(ns) + query).json()["items"]
            return {i["metadata"]["name"] for i in items}

        assert names(one) == {"a1", "a2"} and names(two) == {"b1"}
        assert names(one, "?labelSelector=app%3Dx") == {"a1"}
        assert names(one, "?labelSelector=vcluster.com%2Fowner-vcluster%3Dclient2") == set()
        assert {
            i["metadata"]["name"]
            for i in json.loads(env.target.run("get", "myresources", "-n", ns, "-o", "json").stdout)["items"]
        } == {"a1", "a2", "b1"}
        assert one.call("GET", objects_path(ns, "b1")).status == 404
        assert two.call("GET", objects_path(ns, "a1")).status == 404
        put = {
            "apiVersion": GV,
            "kind": "MyResource",
            "metadata": {"name": "b1", "namespace": ns},
            "spec": {"size": 0},
        }
        merge = {"Content-Type": "application/merge-patch+json"}
        for method, path, body, headers in (
            ("PUT", objects_path(ns, "b1"), put, {}),
            ("PATCH", objects_path(ns, "b1"), {"spec": {"size": 0}}, merge),
            ("PATCH", objects_path(ns, "b1") + "/status", {"status": {"phase": "x"}}, merge),
            ("DELETE", objects_path(ns, "b1"), None, {}),
        ):
            answer = one.call(method, path, body, headers)
            assert (answer.status, answer.message) == (404, "resource not found"), (method, path, answer)
        collision = one.call("POST", objects_path(ns), {**put, "spec": {"size": 1}})
        assert collision.status == 409 and collision.json()["reason"] == "AlreadyExists"
        after = target_object(env, "b1", ns)
        assert before is not None and after is not None
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
        for endpoint, expected in ((one, {"a1", "a2"}), (two, {"b1"})):
            stream = endpoint.call(
                "GET", objects_path(ns) + f"?watch=1&resourceVersion={rv0}&timeoutSeconds=2"
            )
            events = [json.loads(line) for line in stream.body.splitlines() if line.strip()]
            assert {ev["object"]["metadata"]["name"] for ev in events} == expected
        text = env.metrics("client")
        assert count(text, "vcluster_proxy_request_total", verb="watch", code="200", **GV_LABEL) >= 1
        assert count(text, "vcluster_proxy_watch_events_total", **TARGET_LABEL) >= 2
        gone = one.call("DELETE", objects_path(ns))  # deletecollection
        assert gone.status == 200, gone
        assert target_object(env, "a1", ns) is None and target_object(env, "a2", ns) is None
        assert target_object(env, "b1", ns) is not None, "deletecollection deleted only its own objects"
        k2.run("delete", "myresources", "--all", "-n", ns)
        assert target_object(env, "b1", ns) is None

    def test_each_404_cause(self, env: Env) -> None:
        """The runbook's 404 list: unowned objects, a denied ownership GET, a namespace missing on the client
        (and one mirrored to the target), and a genuine 404 for a CRD the target does not have."""
        client, via = env.kubectl("client"), env.via("client")
        env.target.apply(widget("foreign"))
        assert "resource not found" in client.fails("get", "myresources", "foreign", "-n", "default").stderr
        assert "foreign" not in client.run("get", "myresources", "-n", "default", "-o", "name").stdout
        put = {
            "apiVersion": GV,
            "kind": "MyResource",
            "metadata": {"name": "foreign", "namespace": "default"},
            "spec": {"size": 2},
        }
        answer = via.call("PUT", objects_path("default", "foreign"), put)
        assert (answer.status, answer.message) == (404, "resource not found")
        patch = via.call(
            "PATCH",
            objects_path("default", "foreign"),
            {"spec": {"size": 3}},
            {"Content-Type": "application/merge-patch+json"},
        )
        assert (patch.status, patch.message) == (404, "resource not found")
        assert "resource not found" in client.fails("delete", "myresource", "foreign", "-n", "default").stderr
        # A subresource shows the object as well: its GET is masked as the object's own.
        status = via.call("GET", objects_path("default", "foreign") + "/status")
        assert (status.status, status.message) == (404, "resource not found")
        assert client.run("get", "myresource", "foreign", "-n", "default", check=False).code == 1
        assert labels_of(target_object(env, "foreign")) == {}, "untouched"
        text = env.metrics("client")
        for verb in ("get", "update", "patch", "delete"):
            assert (
                count(
                    text,
                    "vcluster_proxy_request_total",
                    verb=verb,
                    code="404",
                    reason="ownership_masked",
                    **GV_LABEL,
                )
                >= 1
            ), verb

        # The namespace is missing on the client: POST, PUT and PATCH answer 404 and create nothing.
        merge = {"Content-Type": "application/merge-patch+json"}
        for method, path, body, headers in (
            ("POST", objects_path("nowhere"), {**put, "metadata": {"name": "x", "namespace": "nowhere"}}, {}),
            (
                "PUT",
                objects_path("nowhere", "x"),
                {**put, "metadata": {"name": "x", "namespace": "nowhere"}},
                {},
            ),
            ("PATCH", objects_path("nowhere", "x"), {"spec": {}}, merge),
        ):
            answer = via.call(method, path, body, headers)
            assert (answer.status, answer.message) == (404, 'namespaces "nowhere" not found'), (
                method,
                answer,
            )
        assert env.target.run("get", "namespace", "nowhere", check=False).code != 0
        text = env.metrics("client")
        assert (
            count(text, "vcluster_proxy_request_total", code="404", reason="namespace_missing", **GV_LABEL)
            == 3
        )

        # Present on the client, absent on the target: mirrored on the first write.
        client.run("create", "namespace", "mirrored")
        assert env.target.run("get", "namespace", "mirrored", check=False).code != 0
        client.run("create", "-f", "-", input=widget("m1", "mirrored"))
        env.target.run("get", "namespace", "mirrored")
        assert labels_of(target_object(env, "m1", "mirrored")) == OWNED
        lines = env.log_lines("client", "creating namespace on target cluster")
        assert [line for line in lines if "namespace=mirrored" in line and "target=default/target" in line]

        # The ownership GET is denied (target RBAC grants update but not get): masked as 404.
        k2 = env.kubectl("client2")
        k2.apply(widget("own2"))
        masked = count(
            env.metrics("client2"), "vcluster_proxy_request_total", reason="ownership_masked", **GV_LABEL
        )
        env.grant("client2", verbs="list, watch, create, update, patch, delete")
        try:
            assert runbook_can_i(env, "get", "myresources.example.com", f"--as={identity('client2')}") == "no"
            assert (
                runbook_can_i(env, "update", "myresources.example.com", f"--as={identity('client2')}")
                == "yes"
            )
            two = env.via("client2")
            for method, body, headers in (
                ("PUT", {**put, "metadata": {"name": "own2", "namespace": "default"}}, {}),
                ("PATCH", {"spec": {"size": 3}}, merge),
                ("DELETE", None, {}),
            ):
                answer = two.call(method, objects_path("default", "own2"), body, headers)
                assert (answer.status, answer.message) == (404, "resource not found"), (method, answer)
        finally:
            env.grant("client2")
        assert target_object(env, "own2") is not None
        assert (
            count(
                env.metrics("client2"),
                "vcluster_proxy_request_total",
                code="404",
                reason="ownership_masked",
                **GV_LABEL,
            )
            == masked + 3
        )

        # A genuine 404: the target has no CRD for widgets.zz.example (the runbook's check says so).
        answer = env.via("decom").call("GET", "/apis/zz.example/v1/namespaces/default/widgets/w")
        assert answer.status == 404 and answer.message == "the server could not find the requested resource"
        check = env.p.vplane(
            "connect",
            "target",
            "--driver",
            "platform",
            "--project",
            "default",
            "--",
            env.p.k.binary,
            "get",
            "crd",
            "widgets.zz.example",
            check=False,
        )
        assert check.returncode != 0 and "NotFound" in check.stderr

        def zz(**labels: str) -> float:
            return count(
                env.metrics("decom"), "vcluster_proxy_request_total", group_version="zz.example/v1", **labels
            )

        assert zz(code="404", reason="upstream") == 1
        # Its discovery: the target's 404 gives the fallback, and the request's series carries the
        # fallback's reason (spec: "the matching request_total series also carries the fallback reason").
        before = zz(reason="upstream_error")
        discovery = env.via("decom").call("GET", "/apis/zz.example/v1")
        assert discovery.status == 200 and [r["verbs"] for r in discovery.json()["resources"]] == [["get"]]
        assert zz(verb="get", code="200", reason="upstream_error") > before
        assert not zz(code="200", reason="upstream")

    def test_target_rbac_403_passes_through(self, env: Env) -> None:
        """Target RBAC governs proxied requests: without `create`, the target's 403 reaches the caller as is,
        and the runbook's `kubectl auth can-i ... --as=loft:vcluster:p-default:client` says no."""
        client = env.kubectl("client")
        assert runbook_can_i(env, "create", "myresources.example.com", f"--as={identity('client')}") == "yes"
        env.grant("client", verbs="get, list, watch, update, patch, delete")
        try:
            assert (
                runbook_can_i(env, "create", "myresources.example.com", f"--as={identity('client')}") == "no"
            )
            denied = client.fails("create", "-f", "-", input=widget("nope"))
            assert (
                'myresources.example.com is forbidden: User "loft:vcluster:p-default:client" cannot create resource '
                '"myresources" in API group "example.com" in the namespace "default"' in denied.stderr
            )
            answer = env.via("client").call("POST", objects_path("default"), yaml.safe_load(widget("nope")))
            assert answer.status == 403 and answer.json()["reason"] == "Forbidden"
        finally:
            env.grant("client")
        assert runbook_can_i(env, "create", "myresources.example.com", f"--as={identity('client')}") == "yes"
        text = env.metrics("client")
        assert (
            count(
                text, "vcluster_proxy_request_total", verb="create", code="403", reason="upstream", **GV_LABEL
            )
            == 2
        )

    def test_target_5xx_becomes_503_upstream(self, env: Env) -> None:
        """A target webhook whose backend is down (failurePolicy Fail) makes the target answer 500; the caller
        gets the generic 503 with Retry-After, reason `upstream`, and the client's log says the target
        answered 500 (the runbook: check the client proxy logs before attributing an `upstream` 503)."""
        direct = env.target.fails("create", "-f", "-", input=widget("hooked", labels={"hook": "broken"}))
        assert "failed calling webhook" in direct.stderr
        answer = env.via("client").call(
            "POST", objects_path("default"), yaml.safe_load(widget("hooked", labels={"hook": "broken"}))
        )
        assert_unavailable(answer)
        text = env.metrics("client")
        assert (
            count(
                text, "vcluster_proxy_request_total", verb="create", code="503", reason="upstream", **GV_LABEL
            )
            == 1
        )
        assert count(text, "vcluster_proxy_peer_quarantines_total", **TARGET_LABEL) == 0, "not a peer problem"
        line = env.wait_log("client", "the target answered 500")
        assert "proxy request failed" in line and "verb=create" in line and ".vcluster.invalid" in line

    def test_a_request_hitting_the_cap_answers_503_deadline(self, env: Env) -> None:
        """request_timeout_seconds is 3 here; a target webhook that takes 8 s: the caller gets 503 while the
        webhook is still running, reason `deadline`, a termination, and the log pattern the runbook names."""
        slow = env.slow
        assert slow is not None
        answer = env.via("client").call(
            "POST", objects_path("default"), yaml.safe_load(widget("slowpoke", labels={"hook": "slow"}))
        )
        assert slow.started.is_set() and not slow.finished.is_set(), "answered before the target did"
        assert_unavailable(answer, detail=True)
        assert answer.message == GENERIC_503 + ": context deadline exceeded"
        text = env.metrics("client")
        assert (
            count(
                text, "vcluster_proxy_request_total", verb="create", code="503", reason="deadline", **GV_LABEL
            )
            == 1
        )
        assert (
            count(text, "vcluster_proxy_request_terminations_total", reason="deadline", **TARGET_LABEL) == 1
        )
        assert series(text, "vcluster_proxy_inflight_requests", **TARGET_LABEL) == 0.0
        # The runbook's comparison: a long request with short dials isolates the delay to the target.
        creates = count(text, "vcluster_proxy_request_duration_seconds_count", verb="create", **TARGET_LABEL)
        assert (
            count(
                text,
                "vcluster_proxy_request_duration_seconds_bucket",
                verb="create",
                le="2.5",
                **TARGET_LABEL,
            )
            < creates
        )
        dials = count(text, "vcluster_proxy_peer_dial_duration_seconds_count", **TARGET_LABEL)
        assert (
            count(text, "vcluster_proxy_peer_dial_duration_seconds_bucket", le="1.0", **TARGET_LABEL) == dials
        )
        lines = env.log_lines("client", "context deadline exceeded")
        assert lines and ".vcluster.invalid:443" in lines[-1]
        assert "url=https://kube.target.default.vcluster.invalid:443/" in lines[-1]  # as the error text says
        assert (
            "kube.target.default.vcluster.invalid:443/apis/example.com/v1/namespaces/default/myresources"
            in lines[-1]
        )

    def test_a_slow_or_huge_body_cannot_hold_a_proxy_slot(self, env: Env) -> None:
        """A caller that stops sending its body mid-way gets 503 `deadline` at the request cap (3 s here),
        not a slot held for as long as it likes; an oversized body gets 413."""
        direct = env.direct("client", 0)
        url = urllib.parse.urlsplit(direct.base)
        assert url.hostname is not None and url.port is not None
        before = count(
            direct.metrics(), "vcluster_proxy_request_terminations_total", reason="deadline", **TARGET_LABEL
        )
        raw = socket.create_connection((url.hostname, url.port), timeout=30)
        with direct.ctx.wrap_socket(raw, server_hostname=url.hostname) as conn:
            conn.sendall(
                (
                    f"POST {objects_path('default')} HTTP/1.1\r\nHost: {url.netloc}\r\n"
                    f"Authorization: Bearer {direct.token}\r\nContent-Type: application/json\r\n"
                    'Content-Length: 1000\r\n\r\n{"apiVersion": '
                ).encode()
            )
            head = conn.recv(65536).decode(errors="replace")
        assert head.startswith("HTTP/1.1 503"), head
        assert "retry-after: 1" in head.lower() and "context deadline exceeded" in head
        after = count(
            direct.metrics(), "vcluster_proxy_request_terminations_total", reason="deadline", **TARGET_LABEL
        )
        assert after == before + 1
        huge = {
            "apiVersion": GV,
            "kind": "MyResource",
            "metadata": {"name": "huge"},
            "spec": {"color": "x" * (4 << 20)},
        }
        answer = direct.call("POST", objects_path("default"), huge)
        assert (answer.status, answer.message) == (413, "Request entity too large: limit is 3145728")

    def test_a_caller_hanging_up_on_a_large_list_is_no_error(self, env: Env) -> None:
        """Answers of 64 KiB or more are relayed as they arrive; a caller that hangs up before the answer
        starts (a cancelled kubectl, wrk at the end of a run) ends the relay quietly: the request is
        counted and the replica logs no `Error handling request`."""
        ns = "biglist"
        env.kubectl("client").run("create", "namespace", ns)
        direct = env.direct("client", 0)
        for i in range(3):
            body = {"apiVersion": GV, "kind": "MyResource", "metadata": {"name": f"big-{i}"}}
            body["spec"] = {"color": "x" * 30_000}
            assert direct.call("POST", objects_path(ns), body).status == 201
        relayed = direct.call("GET", objects_path(ns))
        assert len(relayed.body) >= 64 * 1024
        assert relayed.headers.get("content-length") == str(len(relayed.body))
        items = relayed.json()["items"]
        assert sorted(i["metadata"]["name"] for i in items) == ["big-0", "big-1", "big-2"]
        assert all(i["spec"]["color"] == "x" * 30_000 for i in items)
        url = urllib.parse.urlsplit(direct.base)
        assert url.hostname is not None and url.port is not None
        lists = count(direct.metrics(), "vcluster_proxy_request_total", verb="list", code="200", **GV_LABEL)
        errors_before = len(env.log_lines("client", "Error handling request"))
        for _ in range(5):
            raw = socket.create_connection((url.hostname, url.port), timeout=30)
            with direct.ctx.wrap_socket(raw, server_hostname=url.hostname) as conn:
                conn.sendall(
                    f"GET {objects_path(ns)} HTTP/1.1\r\nHost: {url.netloc}\r\n"
                    f"Authorization: Bearer {direct.token}\r\n\r\n".encode()
                )
        eventually(
            lambda: (
                count(direct.metrics(), "vcluster_proxy_request_total", verb="list", code="200", **GV_LABEL)
                >= lists + 5
            ),
            timeout=15,
        )
        assert len(env.log_lines("client", "Error handling request")) == errors_before

    def test_connection_upgrades_answer_501(self, env: Env) -> None:
        """exec-, attach- and port-forward-like upgrade requests to the proxied group get 501. Sent to a replica
        directly (the platform's tenant path relays upgrades as they are: tests/integration/test_streams.py)."""
        direct = env.direct("client", 0)
        before = count(
            direct.metrics(),
            "vcluster_proxy_request_terminations_total",
            reason="upgrade_rejected",
            **TARGET_LABEL,
        )
        for method, sub, upgrade in (
            ("POST", "exec", "SPDY/3.1"),
            ("GET", "attach", "websocket"),
            ("POST", "portforward", "SPDY/3.1"),
        ):
            answer = direct.call(
                method,
                objects_path("default", "w1") + "/" + sub,
                headers={"Connection": "Upgrade", "Upgrade": upgrade},
            )
            assert (answer.status, answer.message) == (501, UPGRADE_501), (sub, answer)
        text = direct.metrics()
        assert (
            count(
                text, "vcluster_proxy_request_terminations_total", reason="upgrade_rejected", **TARGET_LABEL
            )
            == before + 3
        )
        assert (
            count(text, "vcluster_proxy_request_total", code="501", reason="upgrade_rejected", **GV_LABEL)
            >= 3
        )

    def test_explain_and_client_side_validation_use_the_targets_openapi(self, env: Env) -> None:
        client = env.kubectl("client")
        explained = client.run("explain", "myresources.spec").stdout
        assert "size" in explained and "color" in explained and "MyResource" in explained
        v2 = client.run("explain", "myresources.spec", "--output", "plaintext-openapiv2").stdout
        assert "size" in v2 and "color" in v2 and "MyResource" in v2
        root = json.loads(client.run("get", "--raw", "/openapi/v3").stdout)
        assert "apis/example.com/v1" in root["paths"]
        bad = yaml.safe_load(widget("typo"))
        bad["spec"]["colour"] = "red"
        refused = client.fails("apply", "-f", "-", input=yaml.safe_dump(bad))
        assert 'unknown field "spec.colour"' in refused.stderr
        assert target_object(env, "typo") is None

    def test_invalid_configs_are_refused_at_admission_and_nothing_is_applied(self, env: Env) -> None:
        base = "experimental.proxy.customResources"
        tv = {"name": "target"}
        cases: list[tuple[dict[str, Any], str]] = [
            (
                {"myresources.example.com": {"enabled": True, "targetVirtualCluster": tv}},
                f"{base}['myresources.example.com']: invalid resource path \"myresources.example.com\", expected format "
                "'resource.group/version' or '*.group/version' (e.g., 'resource.my-org.com/v1' or '*.my-org.com/v1')",
            ),
            (
                {"*/v1": {"enabled": True, "targetVirtualCluster": tv}},
                f"{base}['*/v1']: invalid resource path \"*/v1\"",
            ),
            (
                {"/v1": {"enabled": True, "targetVirtualCluster": tv}},
                f"{base}['/v1']: invalid resource path \"/v1\"",
            ),
            (
                {f"myresources.{GV}": {"enabled": False}},
                f"{base}['myresources.{GV}'].targetVirtualCluster is required",
            ),
            (
                {
                    f"myresources.{GV}": {
                        "enabled": True,
                        "targetVirtualCluster": tv,
                        "accessResources": "some",
                    }
                },
                f"{base}['myresources.{GV}'].accessResources: invalid value \"some\", must be 'owned' or 'all'",
            ),
            (
                {
                    f"*.{GV}": {"enabled": True, "targetVirtualCluster": tv},
                    f"myresources.{GV}": {"enabled": True, "targetVirtualCluster": tv},
                },
                f'{base}: wildcard entry "*.{GV}" cannot be combined with explicit entry "myresources.{GV}" for the same group/version',
            ),
            (
                {
                    f"a.{GV}": {"enabled": True, "targetVirtualCluster": tv},
                    f"b.{GV}": {"enabled": True, "targetVirtualCluster": {"name": "other"}},
                },
                f'{base}: entries "a.{GV}" and "b.{GV}" share group/version "{GV}" but set different targetVirtualCluster',
            ),
            (
                {
                    f"a.{GV}": {"enabled": True, "targetVirtualCluster": tv},
                    f"b.{GV}": {"enabled": True, "targetVirtualCluster": tv, "accessResources": "owned"},
                },
                f'{base}: entries "a.{GV}" and "b.{GV}" share group/version "{GV}" but set different accessResources',
            ),
        ]
        path = "/apis/management.loft.sh/v1/namespaces/p-default/virtualclusterinstances"
        platform = Endpoint(env.p.proc.url, env.admin_token, env.platform_ctx)
        for index, (entries, message) in enumerate(cases):
            values = dump({"experimental": {"proxy": {"customResources": entries}}})
            vci = yaml.safe_load(vci_manifest(f"bad{index}", values))
            answer = platform.call("POST", path, vci)
            assert answer.status == 422, (entries, answer)
            causes = answer.json()["details"]["causes"]
            assert any(
                message in c["message"] and c["field"] == "spec.template.helmRelease.values" for c in causes
            ), (message, causes)
            assert platform.call("GET", f"{path}/bad{index}").status == 404, "nothing applied"
        conflict = {
            "sync": {"toHost": {"customResources": {f"myresources.{GV}": {"enabled": True}}}},
            "experimental": {
                "proxy": {
                    "customResources": {f"myresources.{GV}": {"enabled": True, "targetVirtualCluster": tv}}
                }
            },
        }
        refused = env.p.k.fails("apply", "-f", "-", input=vci_manifest("badsync", yaml.safe_dump(conflict)))
        assert "spec.template.helmRelease.values" in refused.stderr
        assert (
            f'custom resource group "example.com" is used in both sync.toHost.customResources (myresources.{GV}) and '
            f"proxy.customResources (myresources.{GV}). Resources from the same group cannot be used in both sync and proxy"
        ) in refused.stderr
        # An update is refused too, and the stored configuration stays as it was.
        before = env.p.k.run(
            "get", "vci", "off", "-n", "p-default", "-o", "jsonpath={.spec.template.helmRelease.values}"
        ).stdout
        bad = {
            "spec": {
                "template": {
                    "helmRelease": {
                        "values": dump({"experimental": {"proxy": {"customResources": cases[3][0]}}})
                    }
                }
            }
        }
        answer = platform.call("PATCH", f"{path}/off", bad, {"Content-Type": "application/merge-patch+json"})
        assert answer.status == 422 and cases[3][1] in answer.message
        assert (
            env.p.k.run(
                "get", "vci", "off", "-n", "p-default", "-o", "jsonpath={.spec.template.helmRelease.values}"
            ).stdout
            == before
        )

    def test_a_config_whose_every_entry_is_disabled_starts_no_proxy(self, env: Env) -> None:
        off = env.kubectl("off")
        assert off.run("get", "apiservice", "v1.example.com", check=False).code != 0
        assert (
            off.run(
                "get",
                "service",
                "-n",
                "kube-system",
                "-l",
                "vcluster.loft.sh/protected=resource-proxy",
                "-o",
                "name",
            ).stdout
            == ""
        )
        assert "Starting proxy server" not in env.log("off")
        assert "vcluster_proxy" not in env.metrics("off")

    def test_platform_refuses_a_client_whose_creator_cannot_use_the_target(self, env: Env) -> None:
        """Creating or updating a client VirtualClusterInstance needs `use` on the target for the submitting
        user; the refusal names the runbook's check, which answers no for that user."""
        key = "alice-proxy-test-key-0001"
        env.p.k.apply(f"""apiVersion: management.loft.sh/v1
kind: AccessKey
metadata: {{name: alice-key}}
spec: {{type: User, user: alice, key: {key}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: vci-editor, namespace: p-default}}
rules:
- apiGroups: [management.loft.sh]
  resources: [virtualclusterinstances]
  verbs: [get, list, create, update, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: vci-editor-alice, namespace: p-default}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: vci-editor}}
subjects:
- {{apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}}
""")
        doc = yaml.safe_load(env.p.proc.kubeconfig.read_text())
        doc["users"][0]["user"] = {"token": key}
        path = env.tmp / "alice.yaml"
        path.write_text(yaml.safe_dump(doc))
        alice = Kubectl(env.p.k.binary, path, env.tmp / "alice-cache")
        check = (
            "auth",
            "can-i",
            "use",
            "virtualclusterinstances.management.loft.sh/target",
            "-n",
            "p-default",
        )
        assert alice.run(*check, check=False).stdout.strip() == "no"
        refused = alice.fails("apply", "-f", "-", input=vci_manifest("fromalice", proxy_values()))
        assert 'virtualclusterinstances.management.loft.sh "fromalice" is forbidden' in refused.stderr
        assert (
            "check with: kubectl auth can-i use virtualclusterinstances.management.loft.sh/target -n p-default"
            in refused.stderr
        )
        assert env.p.k.run("get", "vci", "fromalice", "-n", "p-default", check=False).code != 0
        enable = {"spec": {"template": {"helmRelease": {"values": proxy_values()}}}}
        refused = alice.fails(
            "patch", "vci", "off", "-n", "p-default", "--type", "merge", "-p", json.dumps(enable)
        )
        assert 'cannot use virtualclusterinstances.management.loft.sh "target"' in refused.stderr
        # Nor may she change how an existing client reaches the target (owned to all mode), while edits
        # that leave its proxy entries alone pass.
        widen = {"spec": {"template": {"helmRelease": {"values": proxy_values(access="all")}}}}
        refused = alice.fails(
            "patch", "vci", "noreg", "-n", "p-default", "--type", "merge", "-p", json.dumps(widen)
        )
        assert 'cannot use virtualclusterinstances.management.loft.sh "target"' in refused.stderr
        alice.run("annotate", "vci", "noreg", "-n", "p-default", "example.com/reviewed-by=alice")
        env.p.k.apply(PLATFORM_BINDING.format(name="alice", user="alice"))
        eventually(lambda: alice.run(*check, check=False).stdout.strip() == "yes", timeout=10)
        alice.run("apply", "--dry-run=server", "-f", "-", input=vci_manifest("fromalice", proxy_values()))

    def test_a_client_without_use_is_refused_registration_and_has_no_peers(self, env: Env) -> None:
        """`noreg` was created by an admin, but its own identity may not use the target: its registration is
        refused (its log says why and how to check), so it never gets a peer list: `no_peer`, cache not
        synced, the start-up sync warning, and discovery from the fallback document. Once the operator grants
        `use` (the runbook's fix), the tenant, still retrying, registers and proxies without a restart."""
        check = (
            "auth",
            "can-i",
            "use",
            "virtualclusterinstances.management.loft.sh/target",
            f"--as={identity('noreg')}",
            "-n",
            "p-default",
        )
        assert env.p.k.run(*check, check=False).stdout.strip() == "no"
        (refusal,) = env.log_lines("noreg", "the platform refused this tenant's registration")
        assert (
            '"loft:vcluster:p-default:noreg" cannot use virtualclusterinstances.management.loft.sh "target" in '
            '"p-default"; check with: kubectl auth can-i use virtualclusterinstances.management.loft.sh/target '
            '-n p-default --as="loft:vcluster:p-default:noreg"' in refusal
        )
        lines = env.log_lines("noreg", NO_SYNC_LOG)
        assert lines and "requests fail with 503 until the first netmap arrives" in lines[0]
        answer = env.via("noreg").call("GET", objects_path("default"))
        assert_unavailable(answer)
        discovery = env.via("noreg").call("GET", f"/apis/{GV}")
        assert discovery.status == 200
        # Never seen live, so the kind is derived from the plural (docs/resource-proxy.md).
        assert [(r["name"], r["kind"], r["verbs"]) for r in discovery.json()["resources"]] == [
            ("myresources", "Myresource", ["get"])
        ]
        text = env.metrics("noreg")
        assert series(text, "vcluster_proxy_peer_cache_synced", **GV_LABEL) == 0.0
        assert series(text, "vcluster_proxy_peer_list_age_seconds", **GV_LABEL) is None
        assert count(text, "vcluster_proxy_peers", **GV_LABEL) == 0
        assert (
            count(text, "vcluster_proxy_request_total", verb="list", code="503", reason="no_peer", **GV_LABEL)
            == 1
        )
        assert count(text, "vcluster_proxy_peer_dial_failures_total", reason="no_peer", **TARGET_LABEL) >= 1
        assert count(text, "vcluster_proxy_discovery_fallbacks_total", reason="no_peer", **GV_LABEL) >= 1
        assert "retrying=True" in refusal

        pid = env.pid("noreg")
        env.grant("noreg")
        env.allow_use("noreg")
        eventually(lambda: env.via("noreg").call("GET", objects_path("default")).status == 200, timeout=60)
        assert env.pid("noreg") == pid  # the same process: no restart
        assert series(env.metrics("noreg"), "vcluster_proxy_peer_cache_synced", **GV_LABEL) == 1.0

    def test_401_auth_failed_after_the_clients_key_is_disabled(self, env: Env) -> None:
        """The target rejects the client's platform access key once it is disabled on the platform: 401
        `auth failed`. The client itself can no longer review its callers' tokens with the platform either:
        reached through the platform, every request is 401 `auth failed` too, saying why (the runbook's row and
        action are the same: the client's key)."""
        local = env.local("keyed")
        assert local.call("GET", objects_path("default")).status == 200
        key = env.p.k.run(
            "get",
            "accesskeys",
            "-l",
            "loft.sh/virtualcluster-instance=keyed",
            "-o",
            "jsonpath={.items[0].metadata.name}",
        ).stdout
        env.p.k.run("patch", "accesskey", key, "--type", "merge", "-p", '{"spec":{"disabled":true}}')
        try:
            eventually(lambda: local.call("GET", objects_path("default")).status == 401, timeout=20)
            answer = local.call("GET", objects_path("default"))
            assert answer.message == "auth failed"
            refused = env.via("keyed").call("GET", objects_path("default"))
            assert refused.status == 401, refused
            assert refused.message == (
                "auth failed: the platform refuses this tenant cluster's access key (token review: 401)"
            )
            text = local.metrics()
            assert (
                count(
                    text,
                    "vcluster_proxy_request_total",
                    verb="list",
                    code="401",
                    reason="upstream",
                    **GV_LABEL,
                )
                >= 1
            )
        finally:
            env.p.k.run("patch", "accesskey", key, "--type", "merge", "-p", '{"spec":{"disabled":false}}')

    def test_decommissioning_a_group_version_with_the_runbooks_steps(self, env: Env) -> None:
        """Removing the entry restarts the client; the APIService stays (and, refused by the proxy now on its
        port, reads unavailable); the runbook's lookup, label removal and deletes then work word for word."""
        decom = env.kubectl("decom")
        pid = env.pid("decom")
        patch = {"spec": {"template": {"helmRelease": {"values": proxy_values("widgets.zz.example/v1")}}}}
        env.p.k.run("patch", "vci", "decom", "-n", "p-default", "--type", "merge", "-p", json.dumps(patch))
        eventually(lambda: env.pid("decom") != pid and env.phase("decom") == "Ready", timeout=60)
        eventually(lambda: available(decom, "v1.zz.example"), timeout=30)
        listed = decom.run("get", "apiservice", "-l", "vcluster.loft.sh/protected=resource-proxy").stdout
        assert "v1.example.com" in listed and "v1.zz.example" in listed
        services = decom.run(
            "get", "service", "-n", "kube-system", "-l", "vcluster.loft.sh/protected=resource-proxy"
        ).stdout
        assert "proxy-example-com-v1" in services and "proxy-zz-example-v1" in services
        # The lingering APIService names port 9100, which is zz.example/v1's proxy now: it is not served.
        eventually(lambda: not available(decom), timeout=30)
        assert env.via("decom").call("GET", objects_path("default")).status == 503
        where = decom.run(
            "get",
            "apiservice",
            "v1.example.com",
            "-o",
            'jsonpath={.spec.service.namespace}{"/"}{.spec.service.name}{"\\n"}',
        ).stdout
        assert where == "kube-system/proxy-example-com-v1\n"
        service = where.strip().split("/")[1]
        decom.run("label", "apiservice", "v1.example.com", "vcluster.loft.sh/protected-")
        decom.run("delete", "apiservice", "v1.example.com")
        decom.run("label", "-n", "kube-system", "service", service, "vcluster.loft.sh/protected-")
        decom.run("delete", "-n", "kube-system", "service", service)
        assert decom.run("get", "apiservice", "v1.example.com", check=False).code != 0
        assert available(decom, "v1.zz.example")


# ====================================================================================================
# Peers: a hung target, a killed one, a restarted one
# ====================================================================================================

PEERS_DIAL_TIMEOUT = 3.0
PEERS_PROXY = {
    # Quarantine long enough that the fail-fast request still finds it on a loaded machine.
    "peers": {"dial_timeout_seconds": PEERS_DIAL_TIMEOUT, "quarantine_seconds": 8},
    "request_timeout_seconds": 20,
    "keepalive_seconds": 0.1,
    "discovery_timeout_seconds": 1,
}


@pytest.fixture(scope="class")
def peers(tmp_path_factory: pytest.TempPathFactory, kubectl_path: str) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("proxy-peers")
    e = start_env(
        tmp,
        kubectl_path,
        PEERS_PROXY,
        # Aggregated discovery follows the proxy's answers quickly; a killed target stays down a while.
        tenant_apiserver=json.dumps({"apiservice_probe_interval_seconds": 1}),
        tenant_restart_backoff_seconds=3,
    )
    try:
        for name in ("client", "wild"):
            e.grant(name)
            e.allow_use(name)
        e.add_clients({"client": proxy_values(), "wild": proxy_values(f"*.{GV}")})
        yield e
    finally:
        stop_platform(e.p)


def hung_target_request(e: Env, name: str = "client") -> Answer:
    return e.via(name).call("GET", objects_path("default"), timeout=60)


@pytest.mark.xdist_group("proxy-peers")
class TestPeers:
    def test_a_hung_target_is_quarantined_fails_fast_falls_back_and_recovers(self, peers: Env) -> None:
        e = peers
        assert e.ok("client")
        recovered = count(e.metrics("client"), "vcluster_proxy_peer_recoveries_total", **TARGET_LABEL)
        e.signal("target", signal.SIGSTOP)
        try:
            time.sleep(0.5)  # idle keep-alive connections (0.1 s here) are gone: requests dial
            # Discovery answers within its own budget (1 s here), before a dial could time out: the
            # fallback, so the API server's availability check (5 s) never gives up on the APIService.
            fallbacks = count(
                e.metrics("client"),
                "vcluster_proxy_discovery_fallbacks_total",
                reason="upstream_error",
                **GV_LABEL,
            )
            started = time.monotonic()
            answer = e.via("client").call("GET", f"/apis/{GV}")
            assert answer.status == 200 and time.monotonic() - started < PEERS_DIAL_TIMEOUT
            assert [r["verbs"] for r in answer.json()["resources"]] == [["get"]]
            text = e.metrics("client")
            assert (
                count(text, "vcluster_proxy_discovery_fallbacks_total", reason="upstream_error", **GV_LABEL)
                > fallbacks
            )
            assert (
                count(text, "vcluster_proxy_peer_dial_failures_total", reason="deadline", **TARGET_LABEL) >= 1
            )
            with ThreadPoolExecutor(3) as pool:
                answers = list(pool.map(lambda _: hung_target_request(e), range(3)))
            for answer in answers:
                assert_unavailable(answer, detail=answer.message != GENERIC_503)
            e.wait_log("client", QUARANTINE_LOG)
            line = e.log_lines("client", QUARANTINE_LOG)[0]
            assert (
                "host=target-0" in line
                and "consecutiveFailures=3" in line
                and "target=default/target" in line
            )
            assert e.log_lines("client", ALL_QUARANTINED_LOG)
            text = e.metrics("client")
            assert count(text, "vcluster_proxy_peer_quarantines_total", **TARGET_LABEL) >= 1
            assert count(text, "vcluster_proxy_target_all_peers_quarantined_total", **TARGET_LABEL) >= 1
            assert (
                count(text, "vcluster_proxy_peer_dial_failures_total", reason="timeout", **TARGET_LABEL) >= 3
            )
            assert count(text, "vcluster_proxy_request_total", code="503", reason="timeout", **GV_LABEL) >= 1

            # Fail fast while quarantined: at once, well inside the dial timeout.
            eventually(
                lambda: (
                    series(e.metrics("client"), "vcluster_proxy_peers", state="quarantined", **GV_LABEL)
                    == 1.0
                ),
                timeout=10,
            )
            fast = count(
                e.metrics("client"),
                "vcluster_proxy_request_total",
                code="503",
                reason="all_quarantined",
                **GV_LABEL,
            )
            started = time.monotonic()
            answer = hung_target_request(e)
            elapsed = time.monotonic() - started
            assert_unavailable(answer)
            assert elapsed < PEERS_DIAL_TIMEOUT / 2, elapsed
            text = e.metrics("client")
            assert (
                count(text, "vcluster_proxy_request_total", code="503", reason="all_quarantined", **GV_LABEL)
                == fast + 1
            )
            assert (
                count(
                    text, "vcluster_proxy_peer_dial_failures_total", reason="all_quarantined", **TARGET_LABEL
                )
                >= 1
            )

            # Discovery keeps answering 200 from the fallback: explicit keys with `get` only, a wildcard empty.
            answer = e.via("client").call("GET", f"/apis/{GV}")
            assert answer.status == 200
            assert [
                (r["name"], r["kind"], r["namespaced"], r["verbs"]) for r in answer.json()["resources"]
            ] == [("myresources", "MyResource", True, ["get"])]  # as live discovery named it
            assert (
                count(
                    e.metrics("client"),
                    "vcluster_proxy_discovery_fallbacks_total",
                    reason="all_quarantined",
                    **GV_LABEL,
                )
                >= 1
            )
            answer = e.via("wild").call("GET", f"/apis/{GV}", timeout=60)
            assert answer.status == 200 and answer.json()["resources"] == []
            assert count(e.metrics("wild"), "vcluster_proxy_discovery_fallbacks_total", **GV_LABEL) >= 1
            client, wild = e.kubectl("client"), e.kubectl("wild")

            def api_resources(k: Kubectl) -> str:
                return k.run("api-resources", "--api-group=example.com", "-o", "wide").stdout

            eventually(
                lambda: [row.split()[-1] for row in api_resources(client).splitlines()[1:]] == ["get"],
                timeout=15,
            )
            eventually(lambda: "myresources" not in api_resources(wild), timeout=15)
            wild.run("api-resources")  # the rest of discovery is unharmed

            # The single half-open trial after quarantine_seconds: it fails (still hung) and re-quarantines.
            quarantines = count(e.metrics("client"), "vcluster_proxy_peer_quarantines_total", **TARGET_LABEL)
            eventually(
                lambda: (
                    series(e.metrics("client"), "vcluster_proxy_peers", state="half_open", **GV_LABEL) == 1.0
                ),
                timeout=15,
                interval=0.1,
            )
            hung_target_request(e)
            eventually(
                lambda: (
                    count(e.metrics("client"), "vcluster_proxy_peer_quarantines_total", **TARGET_LABEL)
                    > quarantines
                ),
                timeout=15,
            )
        finally:
            e.signal("target", signal.SIGCONT)
        # The target answers again: the same tracked host passes its trial, which is a recovery.
        eventually(lambda: e.ok("client"), timeout=30)
        text = e.metrics("client")
        assert count(text, "vcluster_proxy_peer_recoveries_total", **TARGET_LABEL) >= recovered + 1
        assert series(text, "vcluster_proxy_peers", state="healthy", **GV_LABEL) == 1.0
        assert "proxy target peer host recovered" in e.log("client")
        eventually(
            lambda: "list" in e.via("client").call("GET", f"/apis/{GV}").json()["resources"][0]["verbs"],
            timeout=15,
        )
        eventually(lambda: e.via("wild").call("GET", f"/apis/{GV}").json()["resources"] != [], timeout=15)

    def test_target_down_then_back_with_new_peers(self, peers: Env) -> None:
        """The target's replica hangs (a dial fails on its endpoint), then dies: its VCI is not Ready, the
        peer list is empty (`no_peer`), discovery falls back. The platform restarts it as a new host: the
        proxy recovers by itself, and the recoveries counter is unchanged (a new endpoint is no recovery)."""
        e = peers
        eventually(lambda: e.ok("client"), timeout=30)
        recovered = count(e.metrics("client"), "vcluster_proxy_peer_recoveries_total", **TARGET_LABEL)
        old_pid = e.pid("target")
        e.signal("target", signal.SIGSTOP)
        try:
            time.sleep(0.5)
            answer = hung_target_request(e)  # a dial to the old endpoint fails
            assert_unavailable(answer, detail=True)
        finally:
            e.signal("target", signal.SIGKILL)  # the platform restarts it
        eventually(lambda: e.phase("target") != "Ready", timeout=15)

        def no_peers() -> bool:
            return count(e.metrics("client"), "vcluster_proxy_peers", **GV_LABEL) == 0

        eventually(no_peers, timeout=15)
        answer = hung_target_request(e)
        assert_unavailable(answer)
        text = e.metrics("client")
        assert count(text, "vcluster_proxy_request_total", code="503", reason="no_peer", **GV_LABEL) >= 1
        assert series(text, "vcluster_proxy_peer_cache_synced", **GV_LABEL) == 1.0, "a fresh, empty list"
        discovery = e.via("client").call("GET", f"/apis/{GV}")
        assert discovery.status == 200 and discovery.json()["resources"][0]["verbs"] == ["get"]
        assert (
            count(
                e.metrics("client"), "vcluster_proxy_discovery_fallbacks_total", reason="no_peer", **GV_LABEL
            )
            >= 1
        )

        eventually(lambda: e.phase("target") == "Ready", timeout=60)
        assert e.pid("target") != old_pid
        eventually(lambda: e.ok("client"), timeout=30)
        e.kubectl("client").apply(widget("after-restart"))
        text = e.metrics("client")
        assert count(text, "vcluster_proxy_peer_recoveries_total", **TARGET_LABEL) == recovered
        assert series(text, "vcluster_proxy_peers", state="healthy", **GV_LABEL) == 1.0

    def test_a_controller_on_the_client_keeps_working_across_a_target_restart(self, peers: Env) -> None:
        """A list-then-watch controller (the `kubernetes` client) on the client: its watch ends when the target
        restarts, it re-lists and sees objects created afterwards."""
        from kubernetes import client as kclient
        from kubernetes import config as kconfig
        from kubernetes import watch as kwatch

        e = peers
        eventually(lambda: e.ok("client"), timeout=30)
        k = e.kubectl("client")
        k.run("create", "namespace", "ctl")
        api = kclient.CustomObjectsApi(kconfig.new_client_from_config(config_file=str(k.kubeconfig)))
        seen: set[str] = set()
        ends: list[str] = []
        stop = threading.Event()

        def run() -> None:
            while not stop.is_set():
                try:
                    listed = api.list_namespaced_custom_object("example.com", "v1", "ctl", "myresources")
                    seen.update(i["metadata"]["name"] for i in listed["items"])
                    w = kwatch.Watch()
                    for event in w.stream(
                        api.list_namespaced_custom_object,
                        "example.com",
                        "v1",
                        "ctl",
                        "myresources",
                        resource_version=listed["metadata"]["resourceVersion"],
                        timeout_seconds=60,
                        _request_timeout=90,
                    ):
                        seen.add(event["object"]["metadata"]["name"])
                        if stop.is_set():
                            w.stop()
                    ends.append("ended")
                except Exception as exc:  # a controller re-lists after any failure
                    ends.append(type(exc).__name__)
                    stop.wait(0.5)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        try:
            k.run("create", "-f", "-", input=widget("c1", "ctl"))
            eventually(lambda: "c1" in seen, timeout=20)
            ended = len(ends)
            old_pid = e.pid("target")
            e.signal("target", signal.SIGKILL)
            eventually(lambda: len(ends) > ended, timeout=20)
            eventually(lambda: e.phase("target") == "Ready" and e.pid("target") != old_pid, timeout=60)
            eventually(
                lambda: (
                    e.via("client")
                    .call("POST", objects_path("ctl"), yaml.safe_load(widget("c2", "ctl")))
                    .status
                    == 201
                ),
                timeout=30,
            )
            eventually(lambda: "c2" in seen, timeout=30)
        finally:
            stop.set()
            thread.join(timeout=5)
        assert "c1" in seen and "c2" in seen


# ====================================================================================================
# Two client replicas; then the platform drops
# ====================================================================================================

REPLICAS_PROXY = {
    "peers": {"dial_timeout_seconds": 2, "quarantine_seconds": 60, "stale_after_seconds": 3},
    "request_timeout_seconds": 10,
    "keepalive_seconds": 0.1,
}


@pytest.fixture(scope="class")
def replicas(tmp_path_factory: pytest.TempPathFactory, kubectl_path: str) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("proxy-replicas")
    # No periodic availability checks: a replica dials only for the requests it is sent.
    e = start_env(
        tmp,
        kubectl_path,
        REPLICAS_PROXY,
        tenant_apiserver=json.dumps({"apiservice_probe_interval_seconds": 600}),
    )
    try:
        for name in ("client", "ha"):
            e.grant(name)
            e.allow_use(name)
        e.add_clients({"client": proxy_values(), "ha": proxy_values(replicas=2)})
        yield e
    finally:
        stop_platform(e.p)


@pytest.mark.xdist_group("proxy-replicas")
class TestReplicas:
    def test_two_replicas_one_leader_and_replica_local_symptoms(self, replicas: Env) -> None:
        """Every replica runs its own proxy and peer cache; only the leader registers the APIService. A
        symptom of one replica (its own dials failing into quarantine) shows only in its metrics and log."""
        e = replicas
        leaders = [i for i in (0, 1) if "became leader" in e.log("ha", i)]
        assert len(leaders) == 1
        holder = (
            e.kubectl("ha")
            .run(
                "get",
                "lease",
                "-n",
                "kube-system",
                "vcluster-ha-controller",
                "-o",
                "jsonpath={.spec.holderIdentity}",
            )
            .stdout
        )
        assert holder == f"ha-{leaders[0]}"
        for i in (0, 1):
            assert len(e.log_lines("ha", "Starting proxy server", i)) == 1
        assert available(e.kubectl("ha"))
        r0, r1 = e.direct("ha", 0), e.direct("ha", 1)
        for endpoint, requests in ((r0, 1), (r1, 2)):
            for _ in range(requests):
                assert endpoint.call("GET", objects_path("default")).status == 200
        for endpoint, requests in ((r0, 1), (r1, 2)):
            assert (
                count(endpoint.metrics(), "vcluster_proxy_request_total", verb="list", code="200", **GV_LABEL)
                == requests
            )

        e.signal("target", signal.SIGSTOP)
        try:
            time.sleep(0.5)
            with ThreadPoolExecutor(3) as pool:
                answers = list(
                    pool.map(lambda _: r0.call("GET", objects_path("default"), timeout=60), range(3))
                )
            assert all(a.status == 503 for a in answers)
            e.wait_log("ha", QUARANTINE_LOG, 0)
            m0, m1 = r0.metrics(), r1.metrics()
        finally:
            e.signal("target", signal.SIGCONT)
        assert count(m0, "vcluster_proxy_peer_quarantines_total", **TARGET_LABEL) == 1
        assert series(m0, "vcluster_proxy_peers", state="quarantined", **GV_LABEL) == 1.0
        assert count(m0, "vcluster_proxy_target_all_peers_quarantined_total", **TARGET_LABEL) == 1
        assert count(m1, "vcluster_proxy_peer_quarantines_total", **TARGET_LABEL) == 0
        assert series(m1, "vcluster_proxy_peers", state="healthy", **GV_LABEL) == 1.0
        # The other replica's own background reads (its aggregator's availability and OpenAPI checks, its
        # controllers' discovery when it leads) may have dialled the stopped target too: what it must not
        # show is the quarantine (above and in its log, below).
        assert e.log_lines("ha", ALL_QUARANTINED_LOG, 0)
        assert not e.log_lines("ha", QUARANTINE_LOG, 1) and not e.log_lines("ha", ALL_QUARANTINED_LOG, 1)
        assert r1.call("GET", objects_path("default")).status == 200, "the other replica serves on"

    def test_stale_peer_list_after_the_platform_drops(self, replicas: Env) -> None:
        """The platform process dies (tenants keep running): the client's peer subscription is down, and
        after stale_after_seconds (3 here) requests answer 503 `stale_peers`, the log says so with
        `lastNetmapAge`, the cache reads unsynced. A restarted platform brings the feed back."""
        e = replicas
        local = e.local("client")
        assert local.call("GET", objects_path("default")).status == 200
        e.p.proc.kill()
        try:
            e.wait_log("client", STALE_LOG, timeout=20)
            line = e.log_lines("client", STALE_LOG)[0]
            assert (
                "requests to the target fail with 503 until it recovers" in line and "lastNetmapAge=" in line
            )
            answer = local.call("GET", objects_path("default"))
            assert_unavailable(answer)
            discovery = local.call("GET", f"/apis/{GV}")
            assert discovery.status == 200 and discovery.json()["resources"][0]["verbs"] == ["get"]
            text = local.metrics()
            assert series(text, "vcluster_proxy_peer_cache_synced", **GV_LABEL) == 0.0
            assert (
                count(text, "vcluster_proxy_request_total", code="503", reason="stale_peers", **GV_LABEL) == 1
            )
            assert (
                count(text, "vcluster_proxy_peer_dial_failures_total", reason="stale_peers", **TARGET_LABEL)
                >= 1
            )
            assert (
                count(text, "vcluster_proxy_discovery_fallbacks_total", reason="stale_peers", **GV_LABEL) >= 1
            )
        finally:
            e.p.proc.start()
        eventually(
            lambda: series(local.metrics(), "vcluster_proxy_peer_cache_synced", **GV_LABEL) == 1.0, timeout=30
        )
        eventually(lambda: local.call("GET", objects_path("default")).status == 200, timeout=30)
        eventually(lambda: e.ok("client"), timeout=30)
