"""A tenant cluster's aggregation backends: its cluster-admin (no platform rights) cannot make the tenant
process connect to loopback services, link-local or platform addresses, nor register an APIService that
skips TLS verification; backends the tenant process allows itself (the resource proxy's seam) still work.

Driven with kubectl as the tenant's own administrator against ``vplane platform start`` and the tenant
replica it starts; a listener the test opens counts the connections that reach it.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from harness import Kubectl, PlatformProcess
from threadserver import ThreadedServer
from vplane.support import tls

pytestmark = pytest.mark.integration

GROUP = "tenant-agg.example.com"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


ALLOWED_PORT = free_port()


def eventually(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.2)


class Listener:
    """A TCP listener that records every connection made to it (and says nothing back)."""

    def __init__(self, host: str) -> None:
        self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self.sock.bind((host, 0))
        self.sock.listen()
        self.sock.settimeout(0.1)
        self.port: int = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


class Tenant:
    def __init__(self, proc: PlatformProcess, admin: Kubectl) -> None:
        self.proc = proc
        self.admin = admin
        """The tenant's own cluster-admin (its replica's admin kubeconfig): no rights on the platform."""

    def register(self, name: str, port: int, service_spec: str, api_spec: str) -> None:
        self.admin.apply(
            f"apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: kube-system}}\n"
            f"spec: {service_spec}\n---\n"
            "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\n"
            f"metadata: {{name: v1.{name}.{GROUP}}}\n"
            f"spec: {{group: {name}.{GROUP}, version: v1, groupPriorityMinimum: 100, versionPriority: 100,"
            f" service: {{name: {name}, namespace: kube-system, port: {port}}}, {api_spec}}}\n"
        )

    def condition(self, name: str) -> tuple[str, str, str]:
        doc = json.loads(self.admin.run("get", "apiservice", f"v1.{name}.{GROUP}", "-o", "json").stdout)
        for cond in (doc.get("status") or {}).get("conditions") or []:
            if cond["type"] == "Available":
                return cond["status"], cond.get("reason", ""), cond.get("message", "")
        return "", "", ""


@pytest.fixture(scope="module")
def tenant(tmp_path_factory: pytest.TempPathFactory, kubectl_path: str) -> Iterator[Tenant]:
    tmp = tmp_path_factory.mktemp("tenantagg")
    proc = PlatformProcess(
        tmp / "platform",
        {
            "tenant_restart_backoff_seconds": 0.2,
            "tenant_apiserver": json.dumps(
                {
                    "apiservice_probe_interval_seconds": 0.5,
                    # The seam the resource proxy uses for its own ports, set here as an operator would.
                    "aggregation_allowed_backends": [f"localhost:{ALLOWED_PORT}"],
                }
            ),
        },
    )
    proc.start()
    try:
        k = Kubectl(kubectl_path, proc.kubeconfig, tmp / "cache")
        k.apply("apiVersion: management.loft.sh/v1\nkind: Project\nmetadata: {name: default}\n")
        eventually(lambda: k.run("get", "namespace", "p-default", check=False).code == 0, "project namespace")
        k.apply(
            yaml.safe_dump(
                {
                    "apiVersion": "management.loft.sh/v1",
                    "kind": "VirtualClusterInstance",
                    "metadata": {"name": "agg", "namespace": "p-default"},
                    "spec": {"template": {"helmRelease": {"values": ""}}, "networkPeer": True},
                }
            )
        )
        k.run(
            "wait",
            "--for=jsonpath={.status.phase}=Ready",
            "virtualclusterinstance/agg",
            "-n",
            "p-default",
            "--timeout=90s",
            timeout=100,
        )
        directory = proc.tenant_dir("default", "agg")
        yield Tenant(proc, Kubectl(kubectl_path, directory / "kubeconfig-0.yaml", tmp / "tenant-cache"))
    finally:
        proc.stop()
        proc.kill_tenants()


@pytest.fixture
def ca_bundle() -> str:
    return base64.b64encode(tls.make_ca("some-backend-ca").cert_pem).decode()


def outbound_address() -> str | None:
    """This host's address on its default route (no packet is sent), if it has one."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect(("192.0.2.1", 9))
            address: str = sock.getsockname()[0]
    except OSError:
        return None
    return None if address.startswith("127.") else address


@pytest.mark.parametrize(
    ("name", "host", "why"),
    [
        ("literal", "127.0.0.1", "127.0.0.1 is a loopback address"),
        ("byname", "localhost", "is a loopback address"),
        ("hostaddr", "<outbound>", "is an address of the platform's host"),
    ],
)
def test_a_backend_on_this_host_is_refused_and_never_dialed(
    tenant: Tenant, ca_bundle: str, name: str, host: str, why: str
) -> None:
    """An ExternalName Service pointing at loopback (as an address or a name that resolves to it) or at an
    address of the platform's host: the APIService is unavailable, says why, its requests get 503, and
    nothing connects to the listener behind that address."""
    if host == "<outbound>":
        address = outbound_address()
        if address is None:
            pytest.skip("this host has no non-loopback address")
        host, bind = address, "0.0.0.0"
    else:
        bind = "127.0.0.1"
    listener = Listener(bind)
    try:
        tenant.register(
            name,
            listener.port,
            f"{{type: ExternalName, externalName: {host}, ports: [{{port: {listener.port}}}]}}",
            f"caBundle: {ca_bundle}",
        )
        eventually(lambda: tenant.condition(name)[0] == "False", "the APIService is unavailable")
        status, reason, message = tenant.condition(name)
        assert reason == "BackendNotAllowed", message
        assert why in message and f":{listener.port} is not allowed" in message
        failed = tenant.admin.fails("get", "--raw", f"/apis/{name}.{GROUP}/v1")
        assert "the server is currently unable to handle the request" in failed.stderr
        assert listener.accepted == 0, "the tenant connected to a refused backend"
    finally:
        listener.close()


def test_a_link_local_endpoint_is_refused(tenant: Tenant, ca_bundle: str) -> None:
    """Endpoints are checked like ExternalNames (a cloud metadata address here). The Service comes first:
    Endpoints without one are deleted by the endpoints controller's leftover check when it starts, which in a
    fresh tenant can be after this test's first write."""
    tenant.register("meta", 80, "{ports: [{port: 80}]}", f"caBundle: {ca_bundle}")
    tenant.admin.apply(
        "apiVersion: v1\nkind: Endpoints\nmetadata: {name: meta, namespace: kube-system}\n"
        "subsets: [{addresses: [{ip: 169.254.169.254}], ports: [{port: 80}]}]\n"
    )
    eventually(lambda: tenant.condition("meta")[1] == "BackendNotAllowed", "the APIService is refused")
    assert "169.254.169.254 is a link-local address" in tenant.condition("meta")[2]


def test_insecure_skip_tls_verify_is_refused_at_admission(tenant: Tenant) -> None:
    """An APIService that would skip verifying its backend's certificate is refused with 422."""
    failed = tenant.admin.fails(
        "apply",
        "-f",
        "-",
        input="apiVersion: apiregistration.k8s.io/v1\nkind: APIService\n"
        f"metadata: {{name: v1.insecure.{GROUP}}}\n"
        f"spec: {{group: insecure.{GROUP}, version: v1, groupPriorityMinimum: 100, versionPriority: 100,"
        " insecureSkipTLSVerify: true, service: {name: insecure, namespace: kube-system, port: 443}}\n",
    )
    assert (
        f'The APIService "v1.insecure.{GROUP}" is invalid: spec.insecureSkipTLSVerify: Forbidden: '
        "insecureSkipTLSVerify is not allowed in this cluster: set caBundle to the CA of the backend's "
        "serving certificate" in failed.stderr
    )


class Backend:
    """A TLS extension server on 127.0.0.1 answering discovery (what the resource proxy will be)."""

    def __init__(self, workdir: Path, port: int) -> None:
        ca = tls.make_ca("allowed-ca")
        self.cert, self.key = workdir / "b.crt", workdir / "b.key"
        tls.issue_serving(ca, ["localhost", "127.0.0.1"]).write(self.cert, self.key)
        self.port = port
        self.requests = 0
        self._server = ThreadedServer.catch_all(self._handle, self.cert, self.key, port=port)

    async def _handle(self, request: web.Request) -> web.Response:
        self.requests += 1
        return web.json_response(
            {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"allowed.{GROUP}/v1",
                "resources": [],
            }
        )

    def __enter__(self) -> Backend:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()


def test_an_allowed_backend_of_the_tenant_process_is_served(tenant: Tenant, tmp_path: Path) -> None:
    """The allow-list (``localhost:<port>`` here, as the resource proxy registers itself) exempts exactly
    that host and port: insecureSkipTLSVerify is admitted for it and the backend is available."""
    with Backend(tmp_path, ALLOWED_PORT) as backend:
        tenant.register(
            "allowed",
            ALLOWED_PORT,
            f"{{type: ExternalName, externalName: localhost, ports: [{{port: {ALLOWED_PORT}}}]}}",
            "insecureSkipTLSVerify: true",
        )
        eventually(lambda: tenant.condition("allowed")[0] == "True", "the allowed backend is available")
        tenant.admin.run("get", "--raw", f"/apis/allowed.{GROUP}/v1")
        assert backend.requests > 0


def test_an_orphaned_insecure_apiservice_can_be_unlabelled_and_deleted(tenant: Tenant) -> None:
    """The resource proxy runbook's decommission: once its proxy no longer serves the port, the lingering
    protected APIService (insecureSkipTLSVerify) still takes the label removal, then the delete; a change
    of its spec is refused as at creation."""
    name = f"v1.orphan.{GROUP}"
    tenant.register(
        "orphan",
        ALLOWED_PORT,
        f"{{type: ExternalName, externalName: localhost, ports: [{{port: {ALLOWED_PORT}}}]}}",
        "insecureSkipTLSVerify: true",
    )
    tenant.admin.run("label", "apiservice", name, "vcluster.loft.sh/protected=resource-proxy")
    # What the proxy no longer serves: its backend is no longer the exempt one.
    tenant.admin.run("delete", "-n", "kube-system", "service", "orphan")
    refused = tenant.admin.fails(
        "patch", "apiservice", name, "--type", "merge", "-p", '{"spec":{"versionPriority":5}}'
    )
    assert "spec.insecureSkipTLSVerify: Forbidden" in refused.stderr
    tenant.admin.run("label", "apiservice", name, "vcluster.loft.sh/protected-")
    tenant.admin.run("delete", "apiservice", name)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_webhook_on_this_host_is_refused_and_never_dialed(
    tenant: Tenant, ca_bundle: str, host: str
) -> None:
    """Admission webhooks obey the same policy: a tenant's cluster-admin cannot make the tenant process POST
    AdmissionReviews to loopback. With failurePolicy Fail the write is refused, saying why; the listener
    behind the address sees no connection."""
    listener = Listener("127.0.0.1")
    name = f"loopback-{host.replace('.', '-')}"
    try:
        tenant.admin.apply(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\n"
            f"metadata: {{name: {name}}}\n"
            f"webhooks:\n- name: {name}.tenant.example.com\n"
            f"  clientConfig: {{url: 'https://{host}:{listener.port}/validate', caBundle: {ca_bundle}}}\n"
            "  rules: [{operations: [CREATE], apiGroups: [''], apiVersions: [v1], resources: [configmaps]}]\n"
            "  namespaceSelector: {matchLabels: {webhook: " + name + "}}\n"
            "  failurePolicy: Fail\n  sideEffects: None\n  admissionReviewVersions: [v1]\n"
        )
        tenant.admin.run("create", "namespace", name)
        tenant.admin.run("label", "namespace", name, f"webhook={name}")
        failed = tenant.admin.fails("create", "configmap", "x", "-n", name)
        assert f'failed calling webhook "{name}.tenant.example.com"' in failed.stderr
        assert "is a loopback address" in failed.stderr and "is not allowed" in failed.stderr
        assert listener.accepted == 0
    finally:
        listener.close()
