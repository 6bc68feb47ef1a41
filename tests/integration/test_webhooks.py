"""Admission webhooks and MutatingAdmissionPolicy through kubectl, against a real HTTPS webhook server.

The webhook server is aiohttp on loopback in a thread of the test process, serving a certificate from a
trustme CA for ``127.0.0.1``, ``localhost`` and the Service names the tests use. Its paths are behaviours
(``/allow``, ``/deny``, ``/patch``, ``/slow``, ...); every review it receives is recorded. Webhooks apply to
the whole server, so this module runs its own API server, each test scopes its webhooks to its own
namespace, and configurations are removed after each test.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml
from aiohttp import web

from harness import APIServerProcess, Kubectl
from threadserver import ThreadedServer

pytestmark = pytest.mark.integration

SERVICE_NAMES = ["hooks.webhook-system.svc", "hooks-ext.webhook-system.svc"]


class WebhookServer:
    """An HTTPS admission webhook whose path picks its behaviour."""

    def __init__(self) -> None:
        self.ca = trustme.CA()
        cert = self.ca.issue_cert("127.0.0.1", "localhost", *SERVICE_NAMES)
        self.ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(self.ssl)
        self.reviews: list[tuple[str, dict[str, Any]]] = []
        self._server = ThreadedServer(self._app, self.ssl)

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca.cert_pem.bytes()).decode()

    @property
    def port(self) -> int:
        return self._server.port

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    def start(self) -> WebhookServer:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/{behaviour}", self._handle)
        return app

    def seen(self, behaviour: str) -> list[dict[str, Any]]:
        return [review for path, review in list(self.reviews) if path == behaviour]

    async def _handle(self, request: web.Request) -> web.Response:
        behaviour = request.match_info["behaviour"]
        review = await request.json()
        self.reviews.append((behaviour, review))
        req = review["request"]
        response: dict[str, Any] = {"uid": req["uid"], "allowed": True}
        obj = req.get("object") or {}
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if behaviour == "deny":
            response = {
                "uid": req["uid"],
                "allowed": False,
                "status": {"code": 403, "reason": "Forbidden", "message": f"no {req['kind']['kind']} today"},
            }
        elif behaviour == "warn":
            response["warnings"] = ["think twice", "and once more"]
        elif behaviour == "deny-with-warning":
            response = {
                "uid": req["uid"],
                "allowed": False,
                "warnings": ["read the docs"],
                "status": {"code": 422, "reason": "Invalid", "message": "missing owner label"},
            }
        elif behaviour == "slow":
            await asyncio.sleep(2.5)
        elif behaviour in ("patch", "patch-b"):
            key = "patched" if behaviour == "patch" else "b"
            ops: list[dict[str, Any]] = []
            if not labels:
                ops.append({"op": "add", "path": "/metadata/labels", "value": {}})
            ops.append({"op": "add", "path": f"/metadata/labels/{key}", "value": "yes"})
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
        elif behaviour == "patch-a":
            # Records whether webhook b had run before this call: only a reinvocation can see its label.
            ops = [] if labels else [{"op": "add", "path": "/metadata/labels", "value": {}}]
            ops.append(
                {
                    "op": "add",
                    "path": "/metadata/labels/a-saw-b",
                    "value": "true" if "b" in labels else "false",
                }
            )
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
        return web.json_response(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        )


@pytest.fixture(scope="module")
def hooks() -> Iterator[WebhookServer]:
    server = WebhookServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[APIServerProcess]:
    server = APIServerProcess(tmp_path_factory.mktemp("webhooks") / "apiserver")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def k(api: APIServerProcess, kubectl_path: str, tmp_path: Path, hooks: WebhookServer) -> Iterator[Kubectl]:
    kubectl = Kubectl(kubectl_path, api.kubeconfig, tmp_path / "kubecache")
    yield kubectl
    for kind in (
        "mutatingwebhookconfigurations",
        "validatingwebhookconfigurations",
        "mutatingadmissionpolicybindings",
        "mutatingadmissionpolicies",
    ):
        kubectl.run("delete", kind, "--all", "--wait=false", check=False)
    hooks.reviews.clear()


@pytest.fixture
def ns(k: Kubectl, request: pytest.FixtureRequest) -> str:
    name = "wh-" + request.node.name.lower().replace("_", "-")[5:30].strip("-") + "-" + os.urandom(2).hex()
    k.run("create", "namespace", name)
    return name


def manifest(*docs: dict[str, Any]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)


def webhook(
    name: str,
    client: dict[str, Any],
    namespace: str | None,
    *,
    operations: tuple[str, ...] = ("CREATE",),
    resources: tuple[str, ...] = ("configmaps",),
    **fields: Any,
) -> dict[str, Any]:
    hook: dict[str, Any] = {
        "name": name,
        "clientConfig": client,
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": list(operations),
                "resources": list(resources),
            }
        ],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    }
    if namespace is not None:
        hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    hook.update(fields)
    return hook


def configuration(kind: str, name: str, *hooks: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": list(hooks),
    }


def validating(name: str, *hooks: dict[str, Any]) -> str:
    return manifest(configuration("ValidatingWebhookConfiguration", name, *hooks))


def mutating(name: str, *hooks: dict[str, Any]) -> str:
    return manifest(configuration("MutatingWebhookConfiguration", name, *hooks))


def by_url(hooks: WebhookServer, path: str) -> dict[str, Any]:
    return {"url": hooks.url(path), "caBundle": hooks.ca_bundle}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def labels_of(k: Kubectl, ns: str, name: str) -> dict[str, str]:
    found: dict[str, str] = json.loads(k.run("get", "configmap", name, "-n", ns, "-o", "json").out)[
        "metadata"
    ].get("labels", {})
    return found


# --- allow, deny, warnings ----------------------------------------------------------------------------


def test_allow_and_deny_by_url(k: Kubectl, ns: str, hooks: WebhookServer) -> None:
    k.apply(validating("allow", webhook("allow.example.com", by_url(hooks, "/allow"), ns)))
    k.run("create", "configmap", "fine", "-n", ns)
    [review] = hooks.seen("allow")
    assert review["apiVersion"] == "admission.k8s.io/v1"
    req = review["request"]
    assert req["operation"] == "CREATE"
    assert req["kind"] == {"group": "", "version": "v1", "kind": "ConfigMap"}
    assert req["resource"] == {"group": "", "version": "v1", "resource": "configmaps"}
    assert req["name"] == "fine" and req["namespace"] == ns
    assert req["userInfo"]["username"] == "admin"
    assert req["object"]["metadata"]["name"] == "fine" and req["oldObject"] is None
    assert req["dryRun"] is False
    assert req["options"]["kind"] == "CreateOptions"

    k.apply(validating("deny", webhook("deny.example.com", by_url(hooks, "/deny"), ns)))
    result = k.fails("create", "configmap", "refused", "-n", ns)
    assert result.stderr.strip() == (
        'error: failed to create configmap: admission webhook "deny.example.com" denied the request: '
        "no ConfigMap today"
    )
    assert k.run("get", "configmap", "refused", "-n", ns, check=False).code != 0


def test_warnings_reach_kubectl(k: Kubectl, ns: str, hooks: WebhookServer) -> None:
    k.apply(validating("warn", webhook("warn.example.com", by_url(hooks, "/warn"), ns)))
    result = k.run("create", "configmap", "warned", "-n", ns)
    assert "Warning: think twice" in result.stderr
    assert "Warning: and once more" in result.stderr
    # A denial keeps the warnings given with it, and the webhook's own code and reason.
    k.apply(validating("warn", webhook("warn.example.com", by_url(hooks, "/deny-with-warning"), ns)))
    result = k.fails(
        "create",
        "-f",
        "-",
        input=manifest({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w", "namespace": ns}}),
    )
    assert result.stderr.strip().splitlines() == [
        "Warning: read the docs",
        # kubectl's wording for an Invalid status without details, as against any server.
        'The request is invalid: error when creating "STDIN": admission webhook "warn.example.com" denied the '
        "request: missing owner label",
    ]


def test_update_and_delete_reach_webhooks(k: Kubectl, ns: str, hooks: WebhookServer) -> None:
    k.run("create", "configmap", "kept", "-n", ns, "--from-literal=a=1")
    k.apply(
        mutating(
            "patch-updates", webhook("patch.example.com", by_url(hooks, "/patch"), ns, operations=("UPDATE",))
        )
    )
    k.apply(
        validating(
            "deny-deletes", webhook("deny.example.com", by_url(hooks, "/deny"), ns, operations=("DELETE",))
        )
    )
    k.run("annotate", "configmap", "kept", "-n", ns, "note=1")
    assert labels_of(k, ns, "kept") == {"patched": "yes"}
    [update] = hooks.seen("patch")
    assert update["request"]["operation"] == "UPDATE"
    assert update["request"]["oldObject"]["data"] == {"a": "1"}
    assert update["request"]["options"]["kind"] == "UpdateOptions"

    result = k.fails("delete", "configmap", "kept", "-n", ns)
    assert result.stderr.strip() == (
        'Error from server (Forbidden): admission webhook "deny.example.com" denied the request: no ConfigMap today'
    )
    [deletion] = hooks.seen("deny")
    assert deletion["request"]["operation"] == "DELETE"
    assert deletion["request"]["object"] is None
    assert deletion["request"]["oldObject"]["metadata"]["name"] == "kept"
    assert deletion["request"]["options"]["kind"] == "DeleteOptions"


def test_configurations_are_defaulted_and_validated(k: Kubectl, hooks: WebhookServer) -> None:
    k.apply(validating("defaults", webhook("defaults.example.com", by_url(hooks, "/allow"), None)))
    stored = json.loads(k.run("get", "validatingwebhookconfiguration", "defaults", "-o", "json").out)
    [hook] = stored["webhooks"]
    assert (hook["failurePolicy"], hook["matchPolicy"], hook["timeoutSeconds"]) == ("Fail", "Equivalent", 10)
    assert (
        hook["namespaceSelector"] == {} and hook["objectSelector"] == {} and hook["rules"][0]["scope"] == "*"
    )
    assert k.run("get", "validatingwebhookconfigurations").out.split()[:3] == ["NAME", "WEBHOOKS", "AGE"]

    bad = webhook("short", {"url": "https://hooks.example.com"}, None, timeoutSeconds=45)
    result = k.fails("apply", "-f", "-", input=validating("bad", bad))
    assert result.stderr.strip() == (
        'The ValidatingWebhookConfiguration "bad" is invalid: \n'
        '* webhooks[0].name: Invalid value: "short": should be a domain with at least three segments separated by dots\n'
        "* webhooks[0].timeoutSeconds: Invalid value: 45: the timeout value must be between 1 and 30 seconds"
    )


# --- mutation -------------------------------------------------------------------------------------------


def test_patch_adds_labels(k: Kubectl, ns: str, hooks: WebhookServer) -> None:
    k.apply(
        mutating(
            "patch",
            webhook("patch.example.com", by_url(hooks, "/patch"), ns, operations=("CREATE", "UPDATE")),
        )
    )
    k.run("create", "configmap", "patched", "-n", ns)
    assert labels_of(k, ns, "patched") == {"patched": "yes"}
    # Mutating webhooks see the object before the server fills in its identity, as upstream's do.
    [review] = hooks.seen("patch")
    assert "uid" not in review["request"]["object"]["metadata"]
    shown = k.run("get", "configmap", "patched", "-n", ns, "--show-labels").out
    assert "patched=yes" in shown


def test_mutation_runs_before_validation(k: Kubectl, ns: str, hooks: WebhookServer) -> None:
    k.apply(mutating("patch", webhook("patch.example.com", by_url(hooks, "/patch"), ns)))
    k.apply(
        validating(
            "deny-unpatched",
            webhook(
                "deny.example.com",
                by_url(hooks, "/deny"),
                ns,
                objectSelector={"matchExpressions": [{"key": "patched", "operator": "DoesNotExist"}]},
            ),
        )
    )
    k.run("create", "configmap", "seen-patched", "-n", ns)
    assert hooks.seen("deny") == []


def test_reinvocation(k: Kubectl, ns: str, hooks: WebhookServer) -> None:
    k.apply(
        mutating(
            "a-first",
            webhook("a.example.com", by_url(hooks, "/patch-a"), ns, reinvocationPolicy="IfNeeded"),
        )
    )
    k.apply(mutating("b-second", webhook("b.example.com", by_url(hooks, "/patch-b"), ns)))
    k.run("create", "configmap", "again", "-n", ns)
    assert labels_of(k, ns, "again") == {"a-saw-b": "true", "b": "yes"}
    assert len(hooks.seen("patch-a")) == 2
    assert len(hooks.seen("patch-b")) == 1


def test_mutating_admission_policy(k: Kubectl, ns: str) -> None:
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": "add-team"},
        "spec": {
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["configmaps"],
                    }
                ]
            },
            "reinvocationPolicy": "Never",
            "mutations": [
                {
                    "patchType": "ApplyConfiguration",
                    "applyConfiguration": {
                        "expression": 'Object{metadata: Object.metadata{labels: {"team": "blue"}}}'
                    },
                },
                {
                    "patchType": "JSONPatch",
                    "jsonPatch": {
                        "expression": '[JSONPatch{op: "add", path: "/data", value: {"from": object.metadata.name}}]'
                    },
                },
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": "add-team"},
        "spec": {
            "policyName": "add-team",
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}},
        },
    }
    k.apply(manifest(policy, binding))
    k.run("create", "configmap", "mutated", "-n", ns)
    cm = json.loads(k.run("get", "configmap", "mutated", "-n", ns, "-o", "json").out)
    assert cm["metadata"]["labels"] == {"team": "blue"}
    assert cm["data"] == {"from": "mutated"}


# --- failures ------------------------------------------------------------------------------------------


def test_timeout_with_both_failure_policies(k: Kubectl, ns: str, hooks: WebhookServer) -> None:
    k.apply(
        validating(
            "slow",
            webhook("slow.example.com", by_url(hooks, "/slow"), ns, timeoutSeconds=1, failurePolicy="Ignore"),
        )
    )
    k.run("create", "configmap", "waited", "-n", ns)
    k.apply(
        validating(
            "slow",
            webhook("slow.example.com", by_url(hooks, "/slow"), ns, timeoutSeconds=1, failurePolicy="Fail"),
        )
    )
    result = k.fails("create", "configmap", "timed-out", "-n", ns)
    assert result.stderr.strip() == (
        'error: failed to create configmap: Internal error occurred: failed calling webhook "slow.example.com": '
        f'failed to call webhook: Post "{hooks.url("/slow")}?timeout=1s": context deadline exceeded'
    )


def test_webhook_down_with_both_failure_policies(k: Kubectl, ns: str, hooks: WebhookServer) -> None:
    port = free_port()
    client = {"url": f"https://127.0.0.1:{port}/down", "caBundle": hooks.ca_bundle}
    k.apply(mutating("down", webhook("down.example.com", client, ns, failurePolicy="Ignore")))
    k.run("create", "configmap", "ignored", "-n", ns)
    k.apply(mutating("down", webhook("down.example.com", client, ns, failurePolicy="Fail")))
    result = k.fails("create", "configmap", "refused", "-n", ns)
    assert result.stderr.strip() == (
        'error: failed to create configmap: Internal error occurred: failed calling webhook "down.example.com": '
        f'failed to call webhook: Post "https://127.0.0.1:{port}/down?timeout=10s": dial tcp 127.0.0.1:{port}: '
        "connect: connection refused"
    )


def test_untrusted_certificate_fails(k: Kubectl, ns: str, hooks: WebhookServer) -> None:
    other = base64.b64encode(trustme.CA().cert_pem.bytes()).decode()
    client = {"url": hooks.url("/allow"), "caBundle": other}
    k.apply(validating("untrusted", webhook("untrusted.example.com", client, ns)))
    result = k.fails("create", "configmap", "refused", "-n", ns)
    assert result.stderr.strip().endswith(
        f'failed to call webhook: Post "{hooks.url("/allow")}?timeout=10s": tls: failed to verify certificate: '
        "x509: certificate signed by unknown authority"
    )


# --- Service references --------------------------------------------------------------------------------


def test_service_reference_by_endpoints_and_external_name(k: Kubectl, hooks: WebhookServer, ns: str) -> None:
    k.run("create", "namespace", "webhook-system", check=False)
    k.apply(
        manifest(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "hooks", "namespace": "webhook-system"},
                "spec": {"ports": [{"name": "https", "port": 443, "targetPort": hooks.port}]},
            },
            {
                "apiVersion": "v1",
                "kind": "Endpoints",
                "metadata": {"name": "hooks", "namespace": "webhook-system"},
                "subsets": [
                    {"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": hooks.port}]}
                ],
            },
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "hooks-ext", "namespace": "webhook-system"},
                "spec": {"type": "ExternalName", "externalName": "localhost"},
            },
        )
    )
    by_endpoints = {
        "service": {"namespace": "webhook-system", "name": "hooks", "path": "/deny"},
        "caBundle": hooks.ca_bundle,
    }
    k.apply(validating("svc", webhook("svc.example.com", by_endpoints, ns)))
    result = k.fails("create", "configmap", "via-endpoints", "-n", ns)
    assert 'admission webhook "svc.example.com" denied the request: no ConfigMap today' in result.stderr
    [review] = hooks.seen("deny")
    assert review["request"]["name"] == "via-endpoints"

    external = {
        "service": {"namespace": "webhook-system", "name": "hooks-ext", "path": "/patch", "port": hooks.port},
        "caBundle": hooks.ca_bundle,
    }
    k.run("delete", "validatingwebhookconfiguration", "svc")
    k.apply(mutating("svc-ext", webhook("ext.example.com", external, ns)))
    k.run("create", "configmap", "via-external-name", "-n", ns)
    assert labels_of(k, ns, "via-external-name") == {"patched": "yes"}

    missing = {
        "service": {"namespace": "webhook-system", "name": "nothing-here"},
        "caBundle": hooks.ca_bundle,
    }
    k.apply(mutating("svc-ext", webhook("ext.example.com", missing, ns)))
    result = k.fails("create", "configmap", "no-service", "-n", ns)
    assert result.stderr.strip().endswith(
        'failed calling webhook "ext.example.com": failed to call webhook: '
        'Post "https://nothing-here.webhook-system.svc:443/?timeout=10s": service "nothing-here" not found'
    )


# --- selection ----------------------------------------------------------------------------------------


def test_namespace_and_object_selectors_and_match_conditions(
    k: Kubectl, ns: str, hooks: WebhookServer
) -> None:
    k.run("create", "namespace", f"{ns}-other")
    k.apply(
        validating(
            "selective",
            webhook(
                "by-object.example.com",
                by_url(hooks, "/deny"),
                ns,
                objectSelector={"matchLabels": {"deny": "yes"}},
            ),
            webhook(
                "by-condition.example.com",
                by_url(hooks, "/deny"),
                ns,
                matchConditions=[
                    {"name": "only-doomed", "expression": "object.metadata.name.startsWith('doomed-')"},
                ],
            ),
            webhook(
                "by-namespace.example.com",
                by_url(hooks, "/deny"),
                None,
                namespaceSelector={"matchLabels": {"webhook-test": "deny"}},
            ),
        )
    )
    k.run("create", "configmap", "plain", "-n", ns)
    k.run("create", "configmap", "plain", "-n", f"{ns}-other")
    assert hooks.seen("deny") == []

    result = k.fails(
        "apply",
        "-f",
        "-",
        input=manifest(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "lab", "namespace": ns, "labels": {"deny": "yes"}},
            }
        ),
    )
    assert 'admission webhook "by-object.example.com" denied the request' in result.stderr
    result = k.fails("create", "configmap", "doomed-one", "-n", ns)
    assert 'admission webhook "by-condition.example.com" denied the request' in result.stderr

    k.run("label", "namespace", f"{ns}-other", "webhook-test=deny")
    result = k.fails("create", "configmap", "other", "-n", f"{ns}-other")
    assert 'admission webhook "by-namespace.example.com" denied the request' in result.stderr


# --- dry run --------------------------------------------------------------------------------------------


def test_dry_run_reaches_side_effect_free_webhooks(k: Kubectl, ns: str, hooks: WebhookServer) -> None:
    k.apply(
        mutating(
            "dry",
            webhook("dry.example.com", by_url(hooks, "/patch"), ns, sideEffects="NoneOnDryRun"),
        )
    )
    out = k.run("create", "configmap", "dry", "-n", ns, "--dry-run=server", "-o", "json").out
    assert json.loads(out)["metadata"]["labels"] == {"patched": "yes"}
    [review] = hooks.seen("patch")
    assert review["request"]["dryRun"] is True
    assert review["request"]["options"]["dryRun"] == ["All"]
    assert k.run("get", "configmap", "dry", "-n", ns, check=False).code != 0
