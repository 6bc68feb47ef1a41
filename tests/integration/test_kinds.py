"""Every built-in kind of Kubernetes 1.36, driven by kubectl 1.36 and 1.32 (issue 9, items 1 and 4).

For each kind: create, get (server-side table), describe, explain and delete; ``kubectl scale`` on the four
scalable kinds; the CSR approval flow; eviction with and without a PodDisruptionBudget; ``kubectl
api-resources -o wide`` against the reference a real 1.36 server printed; the discovery and OpenAPI shapes
item 4 asks for; and a Helm chart that uses most of the kinds, installed and uninstalled.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from harness import APIServerProcess, Kubectl

pytestmark = pytest.mark.integration

REFERENCE = Path(__file__).resolve().parent.parent / "data" / "kube-1.36-discovery"
"""What a real kube-apiserver 1.36 answers on its discovery endpoints (copied from shared/reference)."""
CHART = Path(__file__).resolve().parent.parent / "data" / "kinds-chart"
ROOT = Path(__file__).resolve().parents[2]

NOT_YET_SERVED: set[str] = set()
"""Reference kinds vplane does not serve (none)."""


@pytest.fixture(params=["kubectl132", "kubectl"], ids=["kubectl-1.32", "kubectl-1.36"])
def k(request: pytest.FixtureRequest) -> Kubectl:
    client: Kubectl = request.getfixturevalue(request.param)
    return client


def _uid() -> str:
    return os.urandom(3).hex()


def _csr_pem(common_name: str) -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .sign(key, hashes.SHA256())
    )
    return base64.b64encode(request.public_bytes(serialization.Encoding.PEM)).decode()


# (kubectl resource, kind, namespaced, manifest with {name} and {ns})
KINDS: list[tuple[str, str, bool, str]] = [
    (
        "nodes",
        "Node",
        False,
        "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}}}\nspec: {{unschedulable: true}}",
    ),
    (
        "persistentvolumes",
        "PersistentVolume",
        False,
        "apiVersion: v1\nkind: PersistentVolume\nmetadata: {{name: {name}}}\nspec:\n  capacity: {{storage: 1Gi}}\n"
        "  accessModes: [ReadWriteOnce]\n  hostPath: {{path: /tmp/{name}}}",
    ),
    (
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        True,
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {name}}}\nspec:\n  accessModes: [ReadWriteOnce]\n"
        "  resources: {{requests: {{storage: 1Gi}}}}",
    ),
    (
        "resourcequotas",
        "ResourceQuota",
        True,
        "apiVersion: v1\nkind: ResourceQuota\nmetadata: {{name: {name}}}\nspec: {{hard: {{pods: '10', requests.cpu: '2'}}}}",
    ),
    (
        "limitranges",
        "LimitRange",
        True,
        "apiVersion: v1\nkind: LimitRange\nmetadata: {{name: {name}}}\nspec:\n  limits:\n"
        "  - type: Container\n    default: {{cpu: 500m}}\n    max: {{cpu: '1'}}",
    ),
    (
        "replicationcontrollers",
        "ReplicationController",
        True,
        "apiVersion: v1\nkind: ReplicationController\nmetadata: {{name: {name}}}\nspec:\n  replicas: 1\n"
        "  selector: {{app: {name}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n"
        "    spec: {{containers: [{{name: c, image: nginx}}]}}",
    ),
    (
        "podtemplates",
        "PodTemplate",
        True,
        "apiVersion: v1\nkind: PodTemplate\nmetadata: {{name: {name}}}\ntemplate:\n"
        "  metadata: {{labels: {{app: {name}}}}}\n  spec: {{containers: [{{name: c, image: nginx}}]}}",
    ),
    (
        "statefulsets",
        "StatefulSet",
        True,
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {{name: {name}}}\nspec:\n  serviceName: {name}\n"
        "  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n"
        "    spec: {{containers: [{{name: c, image: nginx}}]}}",
    ),
    (
        "daemonsets",
        "DaemonSet",
        True,
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {{name: {name}}}\nspec:\n"
        "  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n"
        "    spec: {{containers: [{{name: c, image: nginx}}]}}",
    ),
    (
        "controllerrevisions",
        "ControllerRevision",
        True,
        "apiVersion: apps/v1\nkind: ControllerRevision\nmetadata: {{name: {name}}}\nrevision: 1\ndata: {{spec: {{}}}}",
    ),
    (
        "jobs",
        "Job",
        True,
        "apiVersion: batch/v1\nkind: Job\nmetadata: {{name: {name}}}\nspec:\n  template:\n"
        "    spec: {{restartPolicy: Never, containers: [{{name: c, image: busybox}}]}}",
    ),
    (
        "cronjobs",
        "CronJob",
        True,
        "apiVersion: batch/v1\nkind: CronJob\nmetadata: {{name: {name}}}\nspec:\n  schedule: '*/5 * * * *'\n"
        "  jobTemplate:\n    spec:\n      template:\n"
        "        spec: {{restartPolicy: OnFailure, containers: [{{name: c, image: busybox}}]}}",
    ),
    (
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        True,
        "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {{name: {name}}}\nspec:\n"
        "  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: web}}\n  minReplicas: 1\n  maxReplicas: 3",
    ),
    (
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        True,
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {{name: {name}}}\nspec:\n  maxUnavailable: 1\n"
        "  selector: {{matchLabels: {{app: {name}}}}}",
    ),
    (
        "ingresses",
        "Ingress",
        True,
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: {name}}}\nspec:\n  rules:\n"
        "  - host: {name}.example.com\n    http:\n      paths:\n      - path: /\n        pathType: Prefix\n"
        "        backend: {{service: {{name: web, port: {{number: 80}}}}}}",
    ),
    (
        "ingressclasses",
        "IngressClass",
        False,
        "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {{name: {name}}}\n"
        "spec: {{controller: example.com/ingress}}",
    ),
    (
        "networkpolicies",
        "NetworkPolicy",
        True,
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{name: {name}}}\nspec:\n"
        "  podSelector: {{matchLabels: {{app: {name}}}}}\n  ingress:\n  - from: [{{ipBlock: {{cidr: 10.0.0.0/8}}}}]",
    ),
    (
        "ipaddresses",
        "IPAddress",
        False,
        "apiVersion: networking.k8s.io/v1\nkind: IPAddress\nmetadata: {{name: '{ip}'}}\nspec:\n"
        "  parentRef: {{resource: services, namespace: default, name: kubernetes}}",
    ),
    (
        "servicecidrs",
        "ServiceCIDR",
        False,
        "apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata: {{name: {name}}}\nspec: {{cidrs: [10.{octet}.0.0/16]}}",
    ),
    (
        "storageclasses",
        "StorageClass",
        False,
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {{name: {name}}}\nprovisioner: example.com/disk",
    ),
    (
        "csidrivers",
        "CSIDriver",
        False,
        "apiVersion: storage.k8s.io/v1\nkind: CSIDriver\nmetadata: {{name: {name}.example.com}}\nspec: {{attachRequired: false}}",
    ),
    (
        "csinodes",
        "CSINode",
        False,
        "apiVersion: storage.k8s.io/v1\nkind: CSINode\nmetadata: {{name: {name}}}\nspec:\n"
        "  drivers: [{{name: disk.example.com, nodeID: {name}}}]",
    ),
    (
        "csistoragecapacities",
        "CSIStorageCapacity",
        True,
        "apiVersion: storage.k8s.io/v1\nkind: CSIStorageCapacity\nmetadata: {{name: {name}}}\nstorageClassName: standard\n"
        "capacity: 10Gi",
    ),
    (
        "volumeattachments",
        "VolumeAttachment",
        False,
        "apiVersion: storage.k8s.io/v1\nkind: VolumeAttachment\nmetadata: {{name: {name}}}\nspec:\n"
        "  attacher: disk.example.com\n  nodeName: n1\n  source: {{persistentVolumeName: pv1}}",
    ),
    (
        "volumeattributesclasses",
        "VolumeAttributesClass",
        False,
        "apiVersion: storage.k8s.io/v1\nkind: VolumeAttributesClass\nmetadata: {{name: {name}}}\n"
        "driverName: disk.example.com\nparameters: {{iops: '100'}}",
    ),
    (
        "priorityclasses",
        "PriorityClass",
        False,
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {{name: {name}}}\nvalue: 1000\n"
        "description: test",
    ),
    (
        "runtimeclasses",
        "RuntimeClass",
        False,
        "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {{name: {name}}}\nhandler: runc",
    ),
    (
        "endpointslices",
        "EndpointSlice",
        True,
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {name}}}\naddressType: IPv4\n"
        "endpoints: [{{addresses: [10.1.2.3]}}]\nports: [{{name: http, port: 80, protocol: TCP}}]",
    ),
    (
        "events.events.k8s.io",
        "Event",
        True,
        "apiVersion: events.k8s.io/v1\nkind: Event\nmetadata: {{name: {name}}}\neventTime: '2026-01-01T00:00:00.000000Z'\n"
        "reportingController: example.com/test\nreportingInstance: i1\naction: Testing\nreason: Tested\n"
        "type: Normal\nnote: hello\nregarding: {{kind: Pod, name: p, namespace: {ns}}}",
    ),
    (
        "certificatesigningrequests",
        "CertificateSigningRequest",
        False,
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata: {{name: {name}}}\nspec:\n"
        "  request: {csr}\n  signerName: example.com/signer\n  usages: [client auth]",
    ),
    (
        "deviceclasses",
        "DeviceClass",
        False,
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {{name: {name}}}\nspec:\n"
        "  selectors: [{{cel: {{expression: 'device.driver == \"gpu.example.com\"'}}}}]",
    ),
    (
        "resourceclaims",
        "ResourceClaim",
        True,
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{name: {name}}}\nspec:\n  devices:\n"
        "    requests: [{{name: gpu, exactly: {{deviceClassName: gpu}}}}]",
    ),
    (
        "resourceclaimtemplates",
        "ResourceClaimTemplate",
        True,
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {{name: {name}}}\nspec:\n  spec:\n"
        "    devices:\n      requests: [{{name: gpu, exactly: {{deviceClassName: gpu}}}}]",
    ),
    (
        "resourceslices",
        "ResourceSlice",
        False,
        "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: {name}}}\nspec:\n"
        "  driver: gpu.example.com\n  nodeName: n1\n  pool: {{name: n1, generation: 1, resourceSliceCount: 1}}\n"
        "  devices: [{{name: gpu-0}}]",
    ),
    (
        "flowschemas",
        "FlowSchema",
        False,
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {{name: {name}}}\nspec:\n"
        "  priorityLevelConfiguration: {{name: global-default}}\n  matchingPrecedence: 5000\n"
        "  distinguisherMethod: {{type: ByUser}}\n  rules:\n  - subjects: [{{kind: Group, group: {{name: {name}}}}}]\n"
        "    nonResourceRules: [{{verbs: ['*'], nonResourceURLs: ['*']}}]",
    ),
    (
        "prioritylevelconfigurations",
        "PriorityLevelConfiguration",
        False,
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata: {{name: {name}}}\n"
        "spec:\n  type: Limited\n  limited:\n    nominalConcurrencyShares: 5\n    limitResponse: {{type: Reject}}",
    ),
]


KUBECTL_132_BETA_DESCRIBERS = {"IPAddress", "ServiceCIDR", "VolumeAttributesClass"}
"""Kinds kubectl 1.32's describers fetch as v1beta1 (beta in 1.32, only v1 in 1.36): upstream's answer is 404."""

TEMPLATES = {kind: template for _resource, kind, _namespaced, template in KINDS}


def _manifest(template: str, name: str, namespace: str) -> str:
    octet = int(_uid()[:2], 16)
    return template.format(
        name=name,
        ns=namespace,
        ip=f"10.{octet}.{int(_uid()[:2], 16)}.{int(_uid()[:2], 16)}",
        octet=octet,
        csr=_csr_pem(name),
    )


@pytest.mark.parametrize(("resource", "kind", "namespaced", "template"), KINDS, ids=[k[1] for k in KINDS])
def test_create_get_describe_explain_delete(
    k: Kubectl, namespace: str, resource: str, kind: str, namespaced: bool, template: str
) -> None:
    """Each kind round-trips through kubectl: create, get as a table, describe, explain, delete."""
    name = f"{kind.lower()}-{_uid()}"
    manifest = _manifest(template, name, namespace)
    if kind == "IPAddress":
        name = re.search(r"name: '([^']+)'", manifest)[1]  # type: ignore[index]
    elif kind == "CSIDriver":
        name += ".example.com"
    scope = ["-n", namespace] if namespaced else []
    created = k.run("create", "-f", "-", *scope, input=manifest)
    assert "created" in created.out
    got = k.run("get", resource, name, *scope)
    header, row = got.out.splitlines()[:2]
    if kind == "Event":  # events print LAST SEEN first; their name is a wide column
        assert header.split()[:2] == ["LAST", "SEEN"], got.out
    else:
        assert header.startswith("NAME"), got.out
        assert row.split()[0].startswith(name), got.out
    if k.binary.endswith("1.32") and kind in KUBECTL_132_BETA_DESCRIBERS:
        # kubectl 1.32 describes these through the beta version it knew; a 1.36 server no longer serves it.
        assert (
            "the server could not find the requested resource" in k.fails("describe", resource, name).stderr
        )
    else:
        described = k.run("describe", resource, name, *scope)
        assert name in described.out
    plural, _, group = resource.partition(".")
    explained = k.run("explain", plural, *([f"--api-version={group}/v1"] if group else []))
    assert f"KIND:       {kind}" in explained.out, explained.out
    if kind in PROTECTED_KINDS:
        # the protection finalizer stays without the controller manager (this server runs none), as upstream
        k.run("delete", resource, name, *scope, "--wait=false")
        k.run("patch", resource, name, *scope, "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    else:
        k.run("delete", resource, name, *scope)
    assert k.run("get", resource, name, *scope, check=False).code != 0


PROTECTED_KINDS = {"PersistentVolume", "PersistentVolumeClaim"}
"""Kinds the API server gives the ``kubernetes.io/pv-protection`` / ``pvc-protection`` finalizer."""


def test_explain_nested_field(k: Kubectl) -> None:
    """`kubectl explain` walks into the generated schemas (fields of new kinds are there)."""
    out = k.run("explain", "statefulset.spec.updateStrategy.rollingUpdate").out
    assert "partition" in out and "maxUnavailable" in out
    out = k.run("explain", "cronjobs.spec").out
    assert "schedule" in out and "jobTemplate" in out


def test_nodes_are_served(k: Kubectl) -> None:
    """`kubectl get nodes` works (it answered "the server doesn't have a resource type" before)."""
    result = k.run("get", "nodes")
    assert "doesn't have a resource type" not in result.stderr


@pytest.mark.parametrize(
    ("resource", "template"),
    [
        (
            "deployment",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}}}\nspec:\n"
            "  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n"
            "    spec: {{containers: [{{name: c, image: nginx}}]}}",
        ),
        (
            "replicaset",
            "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {{name: {name}}}\nspec:\n"
            "  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n"
            "    spec: {{containers: [{{name: c, image: nginx}}]}}",
        ),
        ("statefulset", TEMPLATES["StatefulSet"]),
        ("replicationcontroller", TEMPLATES["ReplicationController"]),
    ],
)
def test_kubectl_scale(k: Kubectl, namespace: str, resource: str, template: str) -> None:
    """`kubectl scale` goes through the scale subresource (it answered 404 before)."""
    name = f"s-{_uid()}"
    k.run("create", "-f", "-", "-n", namespace, input=template.format(name=name, ns=namespace))
    out = k.run("scale", resource, name, "--replicas=3", "-n", namespace).out
    assert out.strip() == f"{resource}/{name} scaled" or out.strip().endswith(f"/{name} scaled"), out
    obj = json.loads(k.run("get", resource, name, "-n", namespace, "-o", "json").out)
    assert obj["spec"]["replicas"] == 3
    k.run("scale", resource, name, "--replicas=1", "--current-replicas=3", "-n", namespace)
    assert (
        json.loads(k.run("get", resource, name, "-n", namespace, "-o", "json").out)["spec"]["replicas"] == 1
    )
    failed = k.fails("scale", resource, name, "--replicas=5", "--current-replicas=3", "-n", namespace)
    assert "Expected replicas to be 3, was 1" in failed.stderr


def test_scale_subresource_shape(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    """GET scale answers an autoscaling/v1 Scale with the selector as a string; PUT validates replicas."""
    kubectl.run("create", "deployment", "web", "--image=nginx", "--replicas=2", "-n", namespace)
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/web/scale"
    code, _, body = shared_apiserver.request("GET", path)
    scale = json.loads(body)
    assert code == 200
    assert (scale["kind"], scale["apiVersion"]) == ("Scale", "autoscaling/v1")
    assert scale["spec"] == {"replicas": 2}
    assert scale["status"] == {"replicas": 0, "selector": "app=web"}
    scale["spec"]["replicas"] = -1
    code, _, body = shared_apiserver.request(
        "PUT", path, json.dumps(scale).encode(), {"Content-Type": "application/json"}
    )
    status = json.loads(body)
    assert code == 422
    assert status["message"] == (
        'Scale.autoscaling "web" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0'
    )


def test_certificate_approve_and_deny(k: Kubectl) -> None:
    """`kubectl certificate approve|deny` drive the approval subresource; the requestor is recorded."""
    names = [f"csr-{_uid()}", f"csr-{_uid()}"]
    for name in names:
        k.run("create", "-f", "-", input=_manifest(TEMPLATES["CertificateSigningRequest"], name, "default"))
    assert "Pending" in k.run("get", "csr", names[0]).out
    assert k.run("certificate", "approve", names[0]).out.strip().endswith("approved")
    row = k.run("get", "csr", names[0]).out.splitlines()[1].split()
    assert row[3] == "admin"  # REQUESTOR: the user who created it, not what the body said
    assert row[-1] == "Approved"
    csr = json.loads(k.run("get", "csr", names[0], "-o", "json").out)
    approved = csr["status"]["conditions"][0]
    assert approved["type"] == "Approved" and approved["reason"] == "KubectlApprove"
    assert approved["lastUpdateTime"] and approved["lastTransitionTime"]
    k.run("certificate", "deny", names[1])
    assert k.run("get", "csr", names[1]).out.splitlines()[1].split()[-1] == "Denied"
    failed = k.fails("certificate", "deny", names[0])
    assert "is already Approved" in failed.stderr
    for name in names:
        k.run("delete", "csr", name)


def _bound_running_pod(
    server: APIServerProcess, kubectl: Kubectl, namespace: str, name: str, node: str
) -> None:
    kubectl.run("run", name, "--image=nginx", "--labels=app=guarded", "-n", namespace)
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name},
        "target": {"kind": "Node", "name": node},
    }
    code, _, body = server.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/pods/{name}/binding",
        json.dumps(binding).encode(),
        {"Content-Type": "application/json"},
    )
    assert code == 201, body
    kubectl.run(
        "patch",
        "pod",
        name,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}',
    )


def test_drain_honours_pod_disruption_budget(
    shared_apiserver: APIServerProcess, k: Kubectl, kubectl: Kubectl, namespace: str
) -> None:
    """`kubectl drain` evicts through pods/eviction: a budget with no disruptions allowed refuses with
    upstream's 429 text; once it allows one, the pod goes and the budget is charged."""
    node = f"node-{_uid()}"
    kubectl.run("create", "-f", "-", input=f"apiVersion: v1\nkind: Node\nmetadata: {{name: {node}}}")
    _bound_running_pod(shared_apiserver, kubectl, namespace, "guarded", node)
    kubectl.run("create", "pdb", "guard", "--selector=app=guarded", "--min-available=1", "-n", namespace)
    kubectl.run(
        "patch",
        "pdb",
        "guard",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"observedGeneration":1,"disruptionsAllowed":0,"currentHealthy":1,"desiredHealthy":1,"expectedPods":1}}',
    )
    drained = k.run("drain", node, "--timeout=3s", "--ignore-daemonsets", "--force", check=False)
    assert drained.code != 0
    assert "Cannot evict pod as it would violate the pod's disruption budget." in drained.stderr
    assert k.run("get", "node", node).out.splitlines()[1].split()[1] == "Unknown,SchedulingDisabled"
    code, _, body = shared_apiserver.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/pods/guarded/eviction",
        json.dumps({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "guarded"}}).encode(),
        {"Content-Type": "application/json"},
    )
    status = json.loads(body)
    assert code == 429
    assert status["reason"] == "TooManyRequests"
    assert status["details"]["causes"] == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget guard needs 1 healthy pods and has 1 currently",
        }
    ]
    kubectl.run(
        "patch",
        "pdb",
        "guard",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"disruptionsAllowed":1}}',
    )
    drained = k.run("drain", node, "--timeout=20s", "--ignore-daemonsets", "--force")
    assert "pod/guarded evicted" in drained.out, drained.out + drained.stderr
    assert k.run("get", "pod", "guarded", "-n", namespace, check=False).code != 0
    pdb = json.loads(kubectl.run("get", "pdb", "guard", "-n", namespace, "-o", "json").out)
    assert pdb["status"]["disruptionsAllowed"] == 0
    assert "guarded" in pdb["status"]["disruptedPods"]
    kubectl.run("delete", "node", node)


def test_eviction_without_budget(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    """A pod no budget covers is evicted at once: 201 Status Success, and the pod is gone."""
    node = f"node-{_uid()}"
    _bound_running_pod(shared_apiserver, kubectl, namespace, "free", node)
    code, _, body = shared_apiserver.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/pods/free/eviction",
        json.dumps({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "free"}}).encode(),
        {"Content-Type": "application/json"},
    )
    assert code == 201
    assert json.loads(body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }
    assert kubectl.run("get", "pod", "free", "-n", namespace, check=False).code != 0


def test_evicted_pod_gets_the_disruption_target_condition(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    """Eviction (here through a budget, which pins the pod's version) marks the pod DisruptionTarget=True
    with upstream's reason and message before deleting it; a finalizer keeps the pod to be read."""
    node = f"node-{_uid()}"
    _bound_running_pod(shared_apiserver, kubectl, namespace, "marked", node)
    kubectl.run(
        "patch",
        "pod",
        "marked",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"metadata":{"finalizers":["example.com/hold"]}}',
    )
    kubectl.run("create", "pdb", "allow", "--selector=app=guarded", "--min-available=0", "-n", namespace)
    kubectl.run(
        "patch",
        "pdb",
        "allow",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"observedGeneration":1,"disruptionsAllowed":1,"currentHealthy":1,"desiredHealthy":0,"expectedPods":1}}',
    )
    code, _, body = shared_apiserver.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/pods/marked/eviction",
        json.dumps({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "marked"}}).encode(),
        {"Content-Type": "application/json"},
    )
    assert code == 201, body
    pod = json.loads(kubectl.run("get", "pod", "marked", "-n", namespace, "-o", "json").out)
    assert pod["metadata"]["deletionTimestamp"]
    (cond,) = [c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "True",
        "EvictionByEvictionAPI",
        "Eviction API: evicting",
    )
    kubectl.run(
        "patch", "pod", "marked", "-n", namespace, "--type=merge", "-p", '{"metadata":{"finalizers":null}}'
    )


def test_binding_and_connect_errors(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    """pods/binding sets spec.nodeName once (409 after); attach/portforward on an unbound pod answer upstream's 400."""
    kubectl.run("run", "lone", "--image=nginx", "-n", namespace)
    failed = kubectl.fails("attach", "lone", "-n", namespace)
    assert "pod lone does not have a host assigned" in failed.stderr
    code, _, body = shared_apiserver.request("POST", f"/api/v1/namespaces/{namespace}/pods/lone/portforward")
    assert code == 400
    assert json.loads(body)["message"] == "pod lone does not have a host assigned"
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "lone"}, "target": {"name": "n9"}}
    path = f"/api/v1/namespaces/{namespace}/bindings"
    code, _, _ = shared_apiserver.request(
        "POST", path, json.dumps(binding).encode(), {"Content-Type": "application/json"}
    )
    assert code == 201
    pod = json.loads(kubectl.run("get", "pod", "lone", "-n", namespace, "-o", "json").out)
    assert pod["spec"]["nodeName"] == "n9"
    assert [c["type"] for c in pod["status"]["conditions"]] == ["PodScheduled"]
    code, _, body = shared_apiserver.request(
        "POST", path, json.dumps(binding).encode(), {"Content-Type": "application/json"}
    )
    assert code == 409
    assert (
        json.loads(body)["message"]
        == 'Operation cannot be fulfilled on pods/binding "lone": pod lone is already assigned to node "n9"'
    )


def test_node_keeps_status_and_service_proxy_needs_endpoints(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    """A node is created with the status its kubelet reports (upstream keeps it); a service proxy with no
    endpoints answers upstream's 503."""
    node = f"ready-{_uid()}"
    manifest = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node, "labels": {"node-role.kubernetes.io/worker": ""}},
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "addresses": [{"type": "InternalIP", "address": "10.9.9.9"}],
            "nodeInfo": {"kubeletVersion": "v1.36.2"},
        },
    }
    kubectl.run("create", "-f", "-", input=json.dumps(manifest))
    row = kubectl.run("get", "node", node, "-o", "wide").out.splitlines()[1].split()
    assert row[:3] == [node, "Ready", "worker"] and row[4:6] == ["v1.36.2", "10.9.9.9"]
    kubectl.run("delete", "node", node)
    kubectl.run("create", "service", "clusterip", "nowhere", "--tcp=80:80", "-n", namespace)
    code, _, body = shared_apiserver.request("GET", f"/api/v1/namespaces/{namespace}/services/nowhere/proxy/")
    assert code == 503
    assert json.loads(body)["message"] == 'no endpoints available for service "nowhere"'


def test_upstream_validation_messages(k: Kubectl, namespace: str) -> None:
    """What users commonly hit, in upstream's words."""
    bad_selector = (
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: bad}\nspec:\n  selector: {matchLabels: {app: a}}\n"
        "  template:\n    metadata: {labels: {app: b}}\n    spec: {containers: [{name: c, image: nginx}]}"
    )
    failed = k.fails("create", "-f", "-", "-n", namespace, input=bad_selector)
    assert 'The StatefulSet "bad" is invalid: spec.template.metadata.labels: Invalid value: ' in failed.stderr
    assert "`selector` does not match template `labels`" in failed.stderr
    bad_cron = (
        "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: badcron}\nspec:\n  schedule: 'every minute'\n"
        "  jobTemplate: {spec: {template: {spec: {restartPolicy: Never, containers: [{name: c, image: busybox}]}}}}"
    )
    failed = k.fails("create", "-f", "-", "-n", namespace, input=bad_cron)
    assert (
        'spec.schedule: Invalid value: "every minute": expected exactly 5 fields, found 2: [every minute]'
        in failed.stderr
    )
    failed = k.fails(
        "create",
        "-f",
        "-",
        input="apiVersion: v1\nkind: PersistentVolume\nmetadata: {name: nocap}\nspec: {hostPath: {path: /x}}",
    )
    assert "spec.accessModes: Required value" in failed.stderr
    assert "spec.capacity: Required value" in failed.stderr
    failed = k.fails("create", "priorityclass", "system-mine", "--value=5")
    assert "priority class names with 'system-' prefix are reserved for system use only" in failed.stderr
    failed = k.fails(
        "create",
        "-f",
        "-",
        "-n",
        namespace,
        input="apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: both}\n"
        "spec: {minAvailable: 1, maxUnavailable: 1, selector: {matchLabels: {a: b}}}",
    )
    assert "minAvailable and maxUnavailable cannot be both set" in failed.stderr
    k.run("create", "job", "j1", "--image=busybox", "-n", namespace)
    failed = k.fails("set", "image", "job/j1", "j1=busybox:2", "-n", namespace)
    assert "field is immutable" in failed.stderr


def test_field_selectors(kubectl: Kubectl, namespace: str) -> None:
    """Upstream's per-kind field selectors: nodes by spec.unschedulable, jobs by status.successful."""
    node = f"fs-{_uid()}"
    kubectl.run(
        "create",
        "-f",
        "-",
        input=f"apiVersion: v1\nkind: Node\nmetadata: {{name: {node}}}\nspec: {{unschedulable: true}}",
    )
    names = kubectl.run("get", "nodes", "--field-selector=spec.unschedulable=true", "-o", "name").out.split()
    assert f"node/{node}" in names
    kubectl.run("create", "job", "fsj", "--image=busybox", "-n", namespace)
    assert kubectl.run(
        "get", "jobs", "-n", namespace, "--field-selector=status.successful=0", "-o", "name"
    ).out.split() == ["job.batch/fsj"]
    failed = kubectl.fails("get", "jobs", "-n", namespace, "--field-selector=spec.nope=1")
    assert 'field label "spec.nope" not supported for "Job"' in failed.stderr
    kubectl.run("delete", "node", node)


def test_system_objects_present(kubectl: Kubectl) -> None:
    """A fresh cluster has the system priority classes, APF defaults and local APIServices."""
    classes = json.loads(kubectl.run("get", "priorityclasses", "-o", "json").out)["items"]
    by_name = {c["metadata"]["name"]: c for c in classes}
    assert by_name["system-node-critical"]["value"] == 2000001000
    assert by_name["system-cluster-critical"]["value"] == 2000000000
    assert by_name["system-cluster-critical"]["description"] == (
        "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary."
    )
    schemas = kubectl.run("get", "flowschemas").out.splitlines()
    assert schemas[1].split()[:3] == ["exempt", "exempt", "1"]
    assert schemas[-1].split()[:3] == ["catch-all", "catch-all", "10000"]
    levels = {
        line.split()[0] for line in kubectl.run("get", "prioritylevelconfigurations").out.splitlines()[1:]
    }
    assert {"exempt", "catch-all", "workload-low", "global-default"} <= levels
    services = kubectl.run("get", "apiservices").out.splitlines()
    assert services[0].split() == ["NAME", "SERVICE", "AVAILABLE", "AGE"]
    rows = {line.split()[0]: line.split()[1:3] for line in services[1:]}
    for name in ("v1.", "v1.apps", "v1.batch", "v2.autoscaling", "v1.autoscaling", "v1.storage.k8s.io"):
        assert rows[name] == ["Local", "True"], services


@pytest.fixture(scope="module")
def fresh_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[APIServerProcess]:
    """A server no other test adds custom resources to: discovery must read as a fresh 1.36 cluster's."""
    server = APIServerProcess(tmp_path_factory.mktemp("fresh"))
    server.start()
    yield server
    server.stop()


@pytest.mark.parametrize("binary", ["kubectl132_path", "kubectl_path"], ids=["kubectl-1.32", "kubectl-1.36"])
def test_api_resources_match_reference(
    fresh_server: APIServerProcess, binary: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """`kubectl api-resources -o wide` prints what a real 1.36 server's discovery makes it print, line for
    line; the only lines allowed to be missing are the admission kinds another change serves."""
    k = Kubectl(request.getfixturevalue(binary), fresh_server.kubeconfig, tmp_path / "cache")
    ours = k.run("api-resources", "-o", "wide").out.splitlines()
    reference = (REFERENCE / "kubectl-api-resources-o-wide.txt").read_text().splitlines()
    expected = [line for line in reference if line.split()[0] not in NOT_YET_SERVED]
    present = [line for line in ours if line.split()[0] not in NOT_YET_SERVED]
    if k.binary.endswith("1.32"):
        # kubectl 1.32 pads columns the same way but cannot differ in content: compare fields.
        assert [line.split() for line in present] == [line.split() for line in expected]
    else:
        assert present == expected


def _get_json(server: APIServerProcess, path: str, accept: str = "application/json") -> Any:
    code, _, body = server.request("GET", path, headers={"Accept": accept})
    assert code == 200, body
    return json.loads(body)


def test_version_reports_1_36(shared_apiserver: APIServerProcess) -> None:
    ours = _get_json(shared_apiserver, "/version")
    reference = json.loads((REFERENCE / "discovery_version.json").read_text())
    assert list(ours) == list(reference)
    for key in (
        "major",
        "minor",
        "emulationMajor",
        "emulationMinor",
        "minCompatibilityMajor",
        "minCompatibilityMinor",
    ):
        assert ours[key] == reference[key], key
    assert re.fullmatch(r"v1\.36\.\d+", ours["gitVersion"])


def test_discovery_documents_match_reference(fresh_server: APIServerProcess) -> None:
    """Per-group resource lists (storageVersionHash included), the group list's order and the aggregated
    documents' responseKind shape match the reference server's."""
    shared_apiserver = fresh_server
    for ref_file in sorted(REFERENCE.glob("discovery_api*_v*.json")):
        reference = json.loads(ref_file.read_text())
        group_version = reference["groupVersion"]
        path = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
        ours = _get_json(shared_apiserver, path)
        expected = [r for r in reference["resources"] if r["name"].split("/")[0] not in NOT_YET_SERVED]
        assert ours["resources"] == expected, group_version
        assert list(ours) == list(reference), group_version
    groups = [g["name"] for g in _get_json(shared_apiserver, "/apis")["groups"]]
    reference_groups = [
        g["name"] for g in json.loads((REFERENCE / "discovery_apis.json").read_text())["groups"]
    ]
    assert groups == reference_groups
    aggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    for ours_path, ref_name in (
        ("/api", "discovery_aggregated_api.json"),
        ("/apis", "discovery_aggregated_apis.json"),
    ):
        ours_doc = _get_json(shared_apiserver, ours_path, aggregated)
        reference_doc = json.loads((REFERENCE / ref_name).read_text())
        assert [i["metadata"] for i in ours_doc["items"]] == [i["metadata"] for i in reference_doc["items"]]
        for ours_item, ref_item in zip(ours_doc["items"], reference_doc["items"], strict=True):
            for ours_version, ref_version in zip(ours_item["versions"], ref_item["versions"], strict=True):
                expected = [r for r in ref_version["resources"] if r["resource"] not in NOT_YET_SERVED]
                assert ours_version["resources"] == expected, (ours_item["metadata"], ref_version["version"])


def test_openapi_root_lists_group_and_top_level_paths(
    shared_apiserver: APIServerProcess, kubectl: Kubectl
) -> None:
    """The OpenAPI v3 root lists what the reference lists (the OpenID discovery paths aside: vplane does not
    serve them), and each listed document is served."""
    ours = _get_json(shared_apiserver, "/openapi/v3")["paths"]
    reference = json.loads((REFERENCE / "openapi_v3_root.json").read_text())["paths"]
    expected = {p for p in reference if not p.startswith((".well-known", "openid"))}
    assert expected <= set(ours)
    for key in ("api", "apis", "apis/apps", "version"):
        doc = _get_json(shared_apiserver, ours[key]["serverRelativeURL"])
        assert doc["info"]["version"].startswith("v1.36")
        assert len(doc["paths"]) == 1


def test_list_items_carry_no_kind(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    """Items of a built-in list have no kind/apiVersion (upstream encodes typed lists); a GET, a watch event
    and custom resources' items keep them."""
    kubectl.run("create", "configmap", "c1", "-n", namespace, "--from-literal=a=b")
    listed = _get_json(shared_apiserver, f"/api/v1/namespaces/{namespace}/configmaps")
    assert listed["kind"] == "ConfigMapList"
    assert "kind" not in listed["items"][0] and "apiVersion" not in listed["items"][0]
    assert listed["items"][0]["metadata"]["name"] == "c1"
    single = _get_json(shared_apiserver, f"/api/v1/namespaces/{namespace}/configmaps/c1")
    assert (single["kind"], single["apiVersion"]) == ("ConfigMap", "v1")
    assert list(single)[:3] == ["kind", "apiVersion", "metadata"]
    hpa = _manifest(TEMPLATES["HorizontalPodAutoscaler"], "h1", namespace)
    kubectl.run("create", "-f", "-", "-n", namespace, input=hpa)
    for version in ("v1", "v2"):
        items = _get_json(
            shared_apiserver, f"/apis/autoscaling/{version}/namespaces/{namespace}/horizontalpodautoscalers"
        )["items"]
        assert "kind" not in items[0]


def test_multi_version_and_shared_storage(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    """HPAs are one object in autoscaling/v1 and v2; events.k8s.io events are core events."""
    manifest = _manifest(TEMPLATES["HorizontalPodAutoscaler"], "scaler", namespace).replace(
        "maxReplicas: 3",
        "maxReplicas: 3\n  metrics:\n  - type: Resource\n    resource: {name: cpu, target: {type: Utilization, averageUtilization: 60}}",
    )
    kubectl.run("create", "-f", "-", "-n", namespace, input=manifest)
    v1 = _get_json(
        shared_apiserver, f"/apis/autoscaling/v1/namespaces/{namespace}/horizontalpodautoscalers/scaler"
    )
    assert v1["apiVersion"] == "autoscaling/v1"
    assert v1["spec"]["targetCPUUtilizationPercentage"] == 60
    v2 = _get_json(
        shared_apiserver, f"/apis/autoscaling/v2/namespaces/{namespace}/horizontalpodautoscalers/scaler"
    )
    assert v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 60
    assert v1["metadata"]["resourceVersion"] == v2["metadata"]["resourceVersion"]
    event = _manifest(TEMPLATES["Event"], "e1", namespace)
    kubectl.run("create", "-f", "-", "-n", namespace, input=event)
    core = _get_json(shared_apiserver, f"/api/v1/namespaces/{namespace}/events/e1")
    assert core["message"] == "hello"
    assert core["involvedObject"]["name"] == "p"
    assert core["reportingComponent"] == "example.com/test"
    listed = kubectl.run(
        "get", "events", "-n", namespace, "--field-selector=involvedObject.name=p", "-o", "name"
    ).out
    assert "event/e1" in listed


def test_helm_chart_installs_and_uninstalls(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    """A chart with a StatefulSet, PodDisruptionBudget, Ingress, NetworkPolicy, CronJob, Job, HPA,
    PriorityClass and StorageClass installs and uninstalls cleanly."""
    helm = ROOT / ".tools" / "bin" / "helm"
    if not helm.exists():
        found = shutil.which("helm")
        if found is None:
            pytest.skip("helm is not installed")
        helm = Path(found)
    release = f"r{_uid()}"
    env = {
        **os.environ,
        "KUBECONFIG": str(kubectl.kubeconfig),
        "HELM_CACHE_HOME": str(kubectl.cache_dir / "helm"),
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(helm), *args], capture_output=True, text=True, env=env, timeout=90)

    # No --wait: readiness needs the workload controllers, which another change brings.
    installed = run("install", release, str(CHART), "-n", namespace)
    assert installed.returncode == 0, installed.stderr
    for resource in ("statefulset", "pdb", "ingress", "networkpolicy", "cronjob", "job", "hpa"):
        kubectl.run("get", resource, f"{release}-app", "-n", namespace)
    kubectl.run("get", "priorityclass", f"{release}-high")
    kubectl.run("get", "storageclass", f"{release}-fast")
    assert "deployed" in run("status", release, "-n", namespace).stdout
    uninstalled = run("uninstall", release, "-n", namespace, "--wait", "--timeout", "60s")
    assert uninstalled.returncode == 0, uninstalled.stderr
    for resource in ("statefulset", "pdb", "ingress", "networkpolicy", "cronjob", "job", "hpa"):
        assert kubectl.run("get", resource, f"{release}-app", "-n", namespace, check=False).code != 0
    assert kubectl.run("get", "priorityclass", f"{release}-high", check=False).code != 0
    assert kubectl.run("get", "storageclass", f"{release}-fast", check=False).code != 0


def test_metrics_count_requests_as_kube_apiserver_does(k: Kubectl, namespace: str) -> None:
    """`kubectl get --raw /metrics` (Prometheus's scrape of the API server): upstream's series, readable by
    cluster admins and the system:monitoring group only."""
    k.run("create", "configmap", "counted", "-n", namespace, "--from-literal=a=b")
    k.run("get", "configmap", "counted", "-n", namespace)
    text = k.run("get", "--raw", "/metrics").out
    assert "# TYPE apiserver_request_total counter" in text
    assert "# TYPE apiserver_request_duration_seconds histogram" in text
    created = (
        'apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="configmaps",'
        'scope="namespace",subresource="",verb="POST",version="v1"}'
    )
    assert created in text
    assert 'apiserver_current_inflight_requests{request_kind="readOnly"}' in text
    assert "process_resident_memory_bytes" in text
    denied = k.run("get", "--raw", "/metrics", "--as=nobody", check=False)
    assert denied.code != 0 and 'cannot get path "/metrics"' in denied.stderr
    allowed = k.run("get", "--raw", "/metrics", "--as=prometheus", "--as-group=system:monitoring")
    assert "apiserver_request_total" in allowed.out
