"""API aggregation: APIService routing, identity headers, availability, discovery merge, and an extension
server built on vplane's own API server with delegated authentication and authorization."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from harness import APIServerProcess, Kubectl
from threadserver import ThreadedServer
from vplane.support import tls

pytestmark = pytest.mark.integration

GROUP = "ext.example.com"


def eventually(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.2)


class EchoBackend:
    """A tiny third-party extension server: answers discovery and echoes the identity headers it got.

    It checks the front-proxy client certificate the way extension servers do, so a test failure here
    means the aggregator did not present it.
    """

    def __init__(self, workdir: Path, front_proxy_ca: Path) -> None:
        self.ca = tls.make_ca("echo-ca")
        serving = tls.issue_serving(self.ca, ["echo.kube-system.svc", "127.0.0.1", "localhost"])
        self.cert, self.key = workdir / "echo.crt", workdir / "echo.key"
        serving.write(self.cert, self.key)
        self.seen: list[dict[str, Any]] = []
        self._server = ThreadedServer.catch_all(self._handle, self.cert, self.key, client_ca=front_proxy_ca)

    @property
    def port(self) -> int:
        return self._server.port

    async def _handle(self, request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(x[0] for x in (peer or {}).get("subject", ()))
        record = {
            "path": request.path,
            "user": request.headers.get("X-Remote-User"),
            "groups": request.headers.getall("X-Remote-Group", []),
            "authorization": request.headers.get("Authorization"),
            "client_cn": subject.get("commonName"),
        }
        self.seen.append(record)
        if request.path == f"/apis/{GROUP}/v1":
            return web.json_response(
                {
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": f"{GROUP}/v1",
                    "resources": [
                        {
                            "name": "echoes",
                            "singularName": "echo",
                            "namespaced": True,
                            "kind": "Echo",
                            "verbs": ["get", "list"],
                        }
                    ],
                }
            )
        return web.json_response(record)

    def start(self) -> None:
        self._server.start()

    def stop(self) -> None:
        self._server.stop()


def register(kubectl: Kubectl, name: str, group: str, port: int, ca_pem: bytes | None) -> None:
    ca = f"caBundle: {base64.b64encode(ca_pem).decode()}" if ca_pem else "insecureSkipTLSVerify: true"
    kubectl.apply(
        f"""apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: kube-system}}
spec: {{type: ExternalName, externalName: localhost, ports: [{{port: {port}}}]}}
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {{name: v1.{group}}}
spec:
  group: {group}
  version: v1
  service: {{name: {name}, namespace: kube-system, port: {port}}}
  groupPriorityMinimum: 100
  versionPriority: 100
  {ca}
"""
    )


@pytest.fixture
def main_server(tmp_path: Path) -> Iterator[APIServerProcess]:
    server = APIServerProcess(tmp_path / "main", {"apiservice_probe_interval_seconds": 0.5})
    server.start()
    yield server
    server.stop()


@pytest.fixture
def main_kubectl(main_server: APIServerProcess, kubectl_path: str, tmp_path: Path) -> Kubectl:
    return Kubectl(kubectl_path, main_server.kubeconfig, tmp_path / "cache")


def condition(kubectl: Kubectl, name: str) -> tuple[str, str]:
    doc = json.loads(kubectl.run("get", "apiservice", name, "-o", "json").stdout)
    for cond in (doc.get("status") or {}).get("conditions") or []:
        if cond["type"] == "Available":
            return cond["status"], cond.get("reason", "")
    return "", ""


def test_aggregated_group_is_proxied_with_identity_headers(
    main_server: APIServerProcess, main_kubectl: Kubectl, tmp_path: Path
) -> None:
    """S12: the aggregator proxies /apis/<g>/<v> with X-Remote-* headers and the front-proxy certificate."""
    echo = EchoBackend(tmp_path, main_server.data_dir / "pki" / "front-proxy-ca.crt")
    echo.start()
    try:
        register(main_kubectl, "echo", GROUP, echo.port, echo.ca.cert_pem)
        main_kubectl.run("wait", "--for=condition=Available", f"apiservice/v1.{GROUP}", "--timeout=20s")
        assert condition(main_kubectl, f"v1.{GROUP}") == ("True", "Passed")
        out = json.loads(
            main_kubectl.run("get", "--raw", f"/apis/{GROUP}/v1/namespaces/default/echoes/x").stdout
        )
        assert out["user"] == "admin"
        assert "system:masters" in out["groups"] and "system:authenticated" in out["groups"]
        assert out["authorization"] is None, "the caller's credentials must not reach the backend"
        assert out["client_cn"] == "front-proxy-client"
        # impersonation is resolved by the front server; the backend sees the effective user
        main_kubectl.apply(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: echo-reader}\n"
            f"rules: [{{apiGroups: [{GROUP}], resources: [echoes], verbs: [get]}}]\n---\n"
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: echo-reader}\n"
            "roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: echo-reader}\n"
            "subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}]\n"
        )
        out = json.loads(
            main_kubectl.run(
                "get",
                "--raw",
                f"/apis/{GROUP}/v1/namespaces/default/echoes/y",
                "--as=alice",
                "--as-group=devs",
            ).stdout
        )
        assert out["user"] == "alice"
        assert out["groups"] == ["devs", "system:authenticated"]
        # the front server authorizes first: bob has no grant and never reaches the backend
        denied = main_kubectl.fails(
            "get", "--raw", f"/apis/{GROUP}/v1/namespaces/default/echoes/z", "--as=bob"
        )
        assert 'User "bob" cannot get resource "echoes"' in denied.stderr
        assert all(r["user"] != "bob" for r in echo.seen)
        # discovery merges the aggregated group (legacy and aggregated forms)
        resources = main_kubectl.run("api-resources", f"--api-group={GROUP}").stdout
        assert "echoes" in resources and "Echo" in resources
        groups = json.loads(main_kubectl.run("get", "--raw", "/apis").stdout)
        assert any(g["name"] == GROUP for g in groups["groups"])
        table = main_kubectl.run("get", "apiservice", f"v1.{GROUP}").stdout
        assert "kube-system/echo" in table and "True" in table
    finally:
        echo.stop()
    # with the backend gone, the APIService turns unavailable and requests get 503
    eventually(lambda: condition(main_kubectl, f"v1.{GROUP}")[0] == "False")
    assert condition(main_kubectl, f"v1.{GROUP}")[1] == "FailedDiscoveryCheck"
    failed = main_kubectl.fails("get", "--raw", f"/apis/{GROUP}/v1/namespaces/default/echoes/x")
    assert "the server is currently unable to handle the request" in failed.stderr
    status, headers, body = main_server.request("GET", f"/apis/{GROUP}/v1/namespaces/default/echoes/x")
    assert status == 503 and body == b"service unavailable\n"
    assert headers["Content-Type"].startswith("text/plain")


def test_missing_service_is_reported(main_kubectl: Kubectl) -> None:
    """An APIService whose Service does not exist is unavailable with reason ServiceNotFound."""
    main_kubectl.apply(
        "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {name: v1.nosvc.example.com}\n"
        "spec: {group: nosvc.example.com, version: v1, insecureSkipTLSVerify: true, groupPriorityMinimum: 100,"
        " versionPriority: 100, service: {name: nope, namespace: kube-system, port: 443}}\n"
    )
    eventually(lambda: condition(main_kubectl, "v1.nosvc.example.com") == ("False", "ServiceNotFound"))


def test_extension_server_built_on_vplane_delegates_auth(
    main_server: APIServerProcess, main_kubectl: Kubectl, kubectl_path: str, tmp_path: Path
) -> None:
    """S13: a vplane API server behind an APIService trusts the front proxy and delegates authn/authz."""
    ext = APIServerProcess(
        tmp_path / "ext",
        {
            "delegate_kubeconfig": main_server.kubeconfig,
            "requestheader_client_ca_file": main_server.data_dir / "pki" / "front-proxy-ca.crt",
            "server_names": '["ext.kube-system.svc","127.0.0.1","localhost"]',
        },
    )
    ext.start()
    try:
        ext_kubectl = Kubectl(kubectl_path, ext.kubeconfig, tmp_path / "ext-cache")
        ext_kubectl.apply(
            f"""apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: things.{GROUP}}}
spec:
  group: {GROUP}
  scope: Namespaced
  names: {{plural: things, singular: thing, kind: Thing}}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}
"""
        )
        ext_kubectl.run("wait", "--for=condition=Established", f"crd/things.{GROUP}", "--timeout=20s")
        ca = (ext.data_dir / "pki" / "ca.crt").read_bytes()
        register(main_kubectl, "ext", GROUP, int(ext.url.rsplit(":", 1)[1]), ca)
        main_kubectl.run("wait", "--for=condition=Available", f"apiservice/v1.{GROUP}", "--timeout=20s")
        main_kubectl.apply(
            f"apiVersion: {GROUP}/v1\nkind: Thing\nmetadata: {{name: t1, namespace: default}}\nspec: {{a: 1}}\n"
        )
        assert "t1" in main_kubectl.run("get", "things").stdout
        assert "t1" in ext_kubectl.run("get", "things").stdout
        # a token issued by the main server works directly against the extension server (TokenReview)
        main_kubectl.run("create", "serviceaccount", "reader")
        token = main_kubectl.run("create", "token", "reader").stdout.strip()
        cfg = yaml.safe_load(ext.kubeconfig.read_text())
        cfg["users"][0]["user"] = {"token": token}
        direct = tmp_path / "direct.yaml"
        direct.write_text(yaml.safe_dump(cfg))
        as_reader = Kubectl(kubectl_path, direct, tmp_path / "direct-cache")
        assert "system:serviceaccount:default:reader" in as_reader.run("auth", "whoami").stdout
        # ... and is authorized by the main server's RBAC (SubjectAccessReview): no grant, no access
        denied = as_reader.fails("get", "things")
        assert "forbidden" in denied.stderr
        main_kubectl.run(
            "create", "clusterrole", "thing-reader", "--verb=list,get", f"--resource=things.{GROUP}"
        )
        main_kubectl.run(
            "create",
            "clusterrolebinding",
            "thing-reader",
            "--clusterrole=thing-reader",
            "--serviceaccount=default:reader",
        )
        eventually(lambda: as_reader.run("get", "things", check=False).code == 0, timeout=25)
    finally:
        ext.stop()
