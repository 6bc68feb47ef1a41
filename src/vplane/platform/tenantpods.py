"""Tenant control planes as pods: the ``pods`` placement (:class:`vplane.platform.placement.TenantPlacement`).

Each VirtualClusterInstance ``<name>`` runs on the platform's own cluster (its API server, with the node
runtime, controller manager and scheduler the platform starts beside it) as upstream's chart lays a vcluster
out: namespace ``vcluster-<name>``, StatefulSet ``<name>`` (label ``app=vcluster``) with one pod per replica
running ``vplane tenant start``, a readiness probe on the replica's ``/readyz`` over HTTPS, a Service ``<name>``
and a headless Service ``<name>-headless``. So ``kubectl get pods -n vcluster-<name>``, ``kubectl logs -l
app=vcluster --prefix`` and a pod's restart count read as they do for a real vcluster.

**The tenant's data.** Replicas share the tenant's directory under the platform's data directory (the SQLite
store in shared mode, the PKI, the access key, vcluster.yaml, the mesh material and a copy of the platform's
CA), exactly as the process placement's replicas do. The pod mounts it as a ``hostPath`` volume ``data``; the
node runtime has no mount namespace, so the process reads the directory named by ``$VPLANE_MOUNT_DATA`` (the
arguments say ``--data-dir $(VPLANE_MOUNT_DATA)``). Nothing here isolates one tenant's files from another
tenant's pods: every pod runs as the runtime's user (see docs/runtime.md).

**Addresses.** A replica listens on its pod IP (``$(POD_IP):<port>``): the Tenant's replicas, hence the VCI's
``status.endpoints`` and the platform's tenant path, follow the pods' IPs. Its serving certificate names that
address (``pki/serving-<replica>.crt``); the platform issues it a mesh certificate for that address
(``mesh-<replica>.crt``) when it first sees the pod's IP, so peers can dial it directly.

**Changes.** The pod template carries a checksum of the access key and vcluster.yaml, so a new key or a
changed configuration rolls the pods (the StatefulSet's RollingUpdate, highest ordinal first), as a changed
helm release restarts upstream's. A killed platform leaves the pods running (the node runtime's shims keep
them); the next platform's runtime adopts them and the StatefulSet it re-applies is unchanged, so nothing
restarts. Deleting the instance deletes the namespace and waits until its pods are gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from vplane.controllers.client import NAMESPACES, KubeClient, Resource
from vplane.controllers.informer import Informer
from vplane.kube import errors
from vplane.kube.objects import Obj
from vplane.platform.placement import (
    ACCESS_KEY_FILE,
    CONFIG_FILE,
    NODE_DIR,
    Replica,
    Tenant,
    TenantSpec,
    mesh_material,
    reap_node_processes,
    tenant_args,
)
from vplane.platform.settings import PlatformSettings
from vplane.platform.tenantnet import tenant_network
from vplane.platform.tenants import recorded_ports
from vplane.support import tls
from vplane.support.files import private_dir, write_private
from vplane.support.tasks import cancel_and_wait

log = structlog.get_logger("vplane.platform.tenantpods")

PODS = Resource("v1", "Pod", "pods", namespaced=True)
SERVICES = Resource("v1", "Service", "services", namespaced=True)
STATEFULSETS = Resource("apps/v1", "StatefulSet", "statefulsets", namespaced=True)

NAMESPACE_PREFIX = "vcluster-"
APP_LABEL = "app"
APP = "vcluster"
RELEASE_LABEL = "release"
OWNER_ANNOTATION = "vplane.io/tenant"
"""On the namespace: ``<project namespace>/<name>`` of the instance it belongs to."""
CHECKSUM_ANNOTATION = "vplane.io/config-checksum"
"""On the pod template: a digest of the access key and vcluster.yaml (a change rolls the pods)."""
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
CONTAINER = "syncer"
"""The container's name, as in upstream's chart."""
DATA_VOLUME = "data"
DATA_MOUNT = "/data"
PLATFORM_CA_FILE = "platform-ca.crt"
PORT_NAME = "https"
FIELD_MANAGER = "vplane-platform"

FAILING_REASONS = frozenset(
    {
        "CrashLoopBackOff",
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
"""A replica's container waiting for one of these will not become ready by itself: the instance says so."""


def host_namespace(name: str) -> str:
    return f"{NAMESPACE_PREFIX}{name}"


def owner(spec_namespace: str, name: str) -> str:
    return f"{spec_namespace}/{name}"


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


# -- pure: what the cluster should hold --------------------------------------------------------------


@dataclass(frozen=True)
class PodParams:
    """What the pod template needs beyond the instance: where and how its replicas run."""

    image: str
    port: int
    service_port: int
    directory: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    readiness_period_seconds: int = 2
    termination_grace_seconds: int = 10
    liveness_initial_delay_seconds: int = 60
    liveness_period_seconds: int = 2
    liveness_failure_threshold: int = 60
    """The liveness probe (``GET /livez``) of upstream's chart: a replica whose server stops answering for
    two minutes, after a minute to start, is restarted. Generous on purpose: a replica busy catching up with
    its store must not be killed for being slow."""


def config_checksum(spec: TenantSpec) -> str:
    return hashlib.sha256(f"{spec.access_key}\0{spec.values}".encode()).hexdigest()[:32]


def manifests(spec: TenantSpec, params: PodParams) -> tuple[Obj, list[Obj]]:
    """The namespace, and what goes in it: the Services and the StatefulSet."""
    ns = host_namespace(spec.name)
    selector = {APP_LABEL: APP, RELEASE_LABEL: spec.name}
    namespace: Obj = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": ns,
            "labels": {"vplane.io/virtualcluster": spec.name},
            "annotations": {OWNER_ANNOTATION: owner(spec.namespace, spec.name)},
        },
    }
    port = {"name": PORT_NAME, "port": params.service_port, "targetPort": PORT_NAME, "protocol": "TCP"}
    service: Obj = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": spec.name, "namespace": ns, "labels": dict(selector)},
        "spec": {"type": "ClusterIP", "selector": dict(selector), "ports": [port]},
    }
    headless: Obj = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"{spec.name}-headless", "namespace": ns, "labels": dict(selector)},
        "spec": {
            "clusterIP": "None",
            "selector": dict(selector),
            "publishNotReadyAddresses": True,
            "ports": [{**port, "port": params.port}],
        },
    }
    env: list[Obj] = [
        {
            "name": "VPLANE_REPLICA",
            "valueFrom": {
                "fieldRef": {"apiVersion": "v1", "fieldPath": f"metadata.labels['{POD_INDEX_LABEL}']"}
            },
        },
        *({"name": k, "value": v} for k, v in params.env),
    ]
    container: Obj = {
        "name": CONTAINER,
        "image": params.image,
        "imagePullPolicy": "IfNotPresent",
        "args": list(params.args),
        "env": env,
        "ports": [{"name": PORT_NAME, "containerPort": params.port, "protocol": "TCP"}],
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": PORT_NAME, "scheme": "HTTPS"},
            "periodSeconds": params.readiness_period_seconds,
            "timeoutSeconds": 3,
            "failureThreshold": 3,
        },
        "livenessProbe": {
            "httpGet": {"path": "/livez", "port": PORT_NAME, "scheme": "HTTPS"},
            "initialDelaySeconds": params.liveness_initial_delay_seconds,
            "periodSeconds": params.liveness_period_seconds,
            "timeoutSeconds": 3,
            "failureThreshold": params.liveness_failure_threshold,
        },
        "volumeMounts": [{"name": DATA_VOLUME, "mountPath": DATA_MOUNT}],
    }
    statefulset: Obj = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": spec.name, "namespace": ns, "labels": dict(selector)},
        "spec": {
            "replicas": spec.replicas,
            "serviceName": f"{spec.name}-headless",
            "podManagementPolicy": "OrderedReady",
            "selector": {"matchLabels": dict(selector)},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {
                    "labels": dict(selector),
                    "annotations": {CHECKSUM_ANNOTATION: config_checksum(spec)},
                },
                "spec": {
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": params.termination_grace_seconds,
                    "containers": [container],
                    "volumes": [
                        {"name": DATA_VOLUME, "hostPath": {"path": params.directory, "type": "Directory"}}
                    ],
                },
            },
        },
    }
    return namespace, [service, headless, statefulset]


def digest(objects: list[Obj]) -> str:
    return hashlib.sha256(json.dumps(objects, sort_keys=True).encode()).hexdigest()


def pod_ordinal(pod: Obj) -> int | None:
    meta = _d(pod.get("metadata"))
    raw = _d(meta.get("labels")).get(POD_INDEX_LABEL)
    if raw is None:
        raw = str(meta.get("name", "")).rpartition("-")[2]
    try:
        return int(raw)
    except (TypeError, ValueError):
        return None


def pod_ready(pod: Obj) -> bool:
    if _d(pod.get("metadata")).get("deletionTimestamp"):
        return False
    conditions = _l(_d(pod.get("status")).get("conditions"))
    return any(_d(c).get("type") == "Ready" and _d(c).get("status") == "True" for c in conditions)


def _parse_time(value: Any) -> float | None:
    try:
        return datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def follow_pods(tenant: Tenant, pods: list[Obj], port: int, ready_timeout: float) -> bool:
    """Set the tenant's replicas and failure from its pods (``replicas_from_pods``); whether an endpoint, a
    readiness or the failure changed."""
    replicas, failed = replicas_from_pods(
        pods, tenant.spec.replicas, port, datetime.datetime.now(datetime.UTC).timestamp(), ready_timeout
    )
    before = {i: (r.ready, r.host) for i, r in tenant.replicas.items()}
    changed = before != {i: (r.ready, r.host) for i, r in replicas.items()} or failed != tenant.failed
    tenant.replicas = replicas
    tenant.failed = failed
    return changed


def replicas_from_pods(
    pods: list[Obj], replicas: int, port: int, now: float, ready_timeout: float
) -> tuple[dict[int, Replica], str]:
    """The replicas the pods stand for (ordinals below ``replicas`` with a pod IP, their readiness) and why the
    instance is failing, if it is: a container waiting for something that will not pass by itself, or one
    running longer than ``ready_timeout`` without becoming ready."""
    found: dict[int, Replica] = {}
    failed = ""
    for pod in sorted(pods, key=lambda p: str(_d(p.get("metadata")).get("name", ""))):
        index = pod_ordinal(pod)
        if index is None or index >= replicas:
            continue
        meta, status = _d(pod.get("metadata")), _d(pod.get("status"))
        ip = str(status.get("podIP") or "")
        statuses = [_d(s) for s in _l(status.get("containerStatuses"))]
        ready = bool(ip) and pod_ready(pod)
        if ip:  # a pod without an address yet is no endpoint
            replica = Replica(index, port, host=ip, ready=ready)
            replica.restarts = sum(int(s.get("restartCount") or 0) for s in statuses)
            found[index] = replica
        if ready or failed:
            continue
        where = f"replica {index} (pod {meta.get('namespace')}/{meta.get('name')})"
        for cs in statuses:
            state = _d(cs.get("state"))
            waiting = _d(state.get("waiting"))
            reason = str(waiting.get("reason") or "")
            if reason in FAILING_REASONS:
                message = str(waiting.get("message") or "")
                failed = f"{where}: {reason}" + (f": {message}" if message else "")
                break
            started = _parse_time(_d(state.get("running")).get("startedAt"))
            if started is not None and now - started > ready_timeout:
                failed = f"replica {index} did not become ready within {ready_timeout:g}s"
                break
    return found, failed


# -- the placement -----------------------------------------------------------------------------------


class TenantPods:
    """Tenants as StatefulSets of the platform's own cluster (see the module docstring)."""

    def __init__(
        self,
        settings: PlatformSettings,
        client: KubeClient,
        platform_url: str,
        platform_ca: Path,
        mesh_ca: tls.CertPair | None = None,
    ) -> None:
        self.settings = settings
        self.client = client
        self.platform_url = platform_url
        self.platform_ca = platform_ca
        self.mesh_ca = mesh_ca
        self.root = settings.data_dir / "tenants"
        self.tenants: dict[tuple[str, str], Tenant] = {}
        self.changed = asyncio.Event()
        self.closing = False
        self._by_host_namespace: dict[str, tuple[str, str]] = {}
        self._applied: dict[tuple[str, str], str] = {}
        self._mesh_ips: dict[tuple[str, str, int], str] = {}
        self.pods = Informer(client, PODS, label_selector={APP_LABEL: APP})
        self.pods.add_handlers(
            on_add=self._pod_event,
            on_update=lambda _old, new: self._pod_event(new),
            on_delete=self._pod_event,
        )
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._tasks.append(asyncio.create_task(self.pods.run()))
        await self.pods.wait_for_sync()

    def directory(self, namespace: str, name: str) -> Path:
        return self.root / namespace / name

    def get(self, namespace: str, name: str) -> Tenant | None:
        return self.tenants.get((namespace, name))

    # -- ensure ----------------------------------------------------------------------------------

    async def ensure(self, spec: TenantSpec) -> Tenant:
        tenant = self.tenants.get(spec.key)
        if tenant is None:
            tenant = Tenant(spec, self.directory(spec.namespace, spec.name))
            self.tenants[spec.key] = tenant
        tenant.spec = spec
        await asyncio.to_thread(self._write_files, tenant)
        port = await asyncio.to_thread(self._port, tenant.directory)
        namespace, objects = manifests(spec, self._params(tenant, port))
        wanted = digest([namespace, *objects])
        if self._applied.get(spec.key) != wanted:
            if not await self._apply(tenant, namespace, objects):
                return tenant  # the namespace is another instance's: failed says so
            self._applied[spec.key] = wanted
            # Pods of the namespace are this tenant's from now on (it is ours: _apply checked).
            self._by_host_namespace[host_namespace(spec.name)] = spec.key
            log.info(
                "tenant statefulset applied",
                tenant=spec.name,
                namespace=host_namespace(spec.name),
                replicas=spec.replicas,
            )
        self._refresh(tenant, port)
        return tenant

    def _write_files(self, tenant: Tenant) -> None:
        private_dir(tenant.directory)
        platform_ca = self.platform_ca.read_bytes()
        for name, content in (
            (ACCESS_KEY_FILE, tenant.spec.access_key.encode()),
            (CONFIG_FILE, tenant.spec.values.encode()),
            (PLATFORM_CA_FILE, platform_ca),
        ):
            path = tenant.directory / name
            try:
                if path.read_bytes() == content:
                    continue
            except OSError:
                pass
            write_private(path, content)
        mesh_material(self.mesh_ca, tenant.directory)
        if tenant.network is None:
            tenant.network = tenant_network(self.settings, self.root, tenant.directory)

    def _port(self, directory: Path) -> int:
        """The tenant's port: the setting, else replica 0's recorded port (the process placement's too)."""
        return self.settings.tenant_pod_port or recorded_ports(directory, 1)[0]

    def _params(self, tenant: Tenant, port: int) -> PodParams:
        data = "$(VPLANE_MOUNT_DATA)"
        args = tenant_args(
            tenant.spec,
            self.settings,
            data_dir=data,
            replica="$(VPLANE_REPLICA)",
            listen=f"$(POD_IP):{port}",
            platform_url=self.platform_url,
            platform_ca=f"{data}/{PLATFORM_CA_FILE}",
            network=tenant.network,
        )
        # The vcluster.yaml's own first: the platform's, after them, win (a later duplicate wins in a pod).
        env = [*tenant.spec.env, ("PYTHONUNBUFFERED", "1")]
        level = os.environ.get("VPLANE_LOG_LEVEL")
        if level:
            env.append(("VPLANE_LOG_LEVEL", level))
        return PodParams(
            image=self.settings.tenant_image,
            port=port,
            service_port=self.settings.tenant_service_port,
            directory=str(tenant.directory),
            args=tuple(args),
            env=tuple(env),
            readiness_period_seconds=self.settings.tenant_readiness_period_seconds,
            termination_grace_seconds=max(1, round(self.settings.tenant_stop_timeout_seconds)),
        )

    async def _apply(self, tenant: Tenant, namespace: Obj, objects: list[Obj]) -> bool:
        """Create the namespace (or find it is another instance's: the instance fails saying so), then apply
        the Services and the StatefulSet. False when nothing was applied."""
        ns_name = namespace["metadata"]["name"]
        wanted_owner = namespace["metadata"]["annotations"][OWNER_ANNOTATION]
        try:
            current = await self.client.get(NAMESPACES, ns_name)
        except errors.StatusError as exc:
            if exc.code != 404:
                raise
            current = await self.client.create(NAMESPACES, namespace)
        current_owner = _d(_d(current.get("metadata")).get("annotations")).get(OWNER_ANNOTATION)
        if current_owner != wanted_owner:
            other = f" to tenant cluster {current_owner}" if current_owner else " to something else"
            tenant.failed = f'namespace "{ns_name}" of the platform\'s cluster belongs{other}'
            self.changed.set()
            return False
        if _d(current.get("metadata")).get("deletionTimestamp"):
            raise RuntimeError(f'namespace "{ns_name}" is still being deleted')
        for obj in objects:
            resource = STATEFULSETS if obj["kind"] == "StatefulSet" else SERVICES
            await self.client.apply(resource, obj, field_manager=FIELD_MANAGER, force=True)
        return True

    # -- pods ------------------------------------------------------------------------------------

    def _pod_event(self, pod: Obj) -> None:
        key = self._by_host_namespace.get(str(_d(pod.get("metadata")).get("namespace", "")))
        tenant = self.tenants.get(key) if key is not None else None
        if tenant is None or self.closing:
            return
        port = _pod_port(pod)
        if port is not None:
            self._refresh(tenant, port)

    def _refresh(self, tenant: Tenant, port: int) -> None:
        ns = host_namespace(tenant.spec.name)
        pods = [p for p in self.pods.objects() if _d(p.get("metadata")).get("namespace") == ns]
        if follow_pods(tenant, pods, port, self.settings.tenant_ready_timeout_seconds):
            self.changed.set()
        for pod in pods:
            index, ip = pod_ordinal(pod), str(_d(pod.get("status")).get("podIP") or "")
            if index is not None and ip:
                self._mesh_cert(tenant, index, ip)

    def _mesh_cert(self, tenant: Tenant, index: int, ip: str) -> None:
        """``mesh-<replica>.crt`` for the replica's pod IP (the key is replaced first, then the certificate the
        replica waits for, so the pair it reads always matches)."""
        if self.mesh_ca is None:
            return
        marker = (*tenant.spec.key, index)
        if self._mesh_ips.get(marker) == ip:
            return
        cert, key = tenant.directory / f"mesh-{index}.crt", tenant.directory / f"mesh-{index}.key"
        with contextlib.suppress(OSError, ValueError):
            if ip in tls.certificate_names(cert.read_bytes()):
                self._mesh_ips[marker] = ip
                return
        pair = tls.issue_serving(self.mesh_ca, [ip])
        write_private(key, pair.key_pem)
        write_private(cert, pair.cert_pem)
        self._mesh_ips[marker] = ip

    # -- removal and shutdown --------------------------------------------------------------------

    async def remove(self, namespace: str, name: str) -> None:
        """Delete namespace ``vcluster-<name>`` (if it is this instance's), wait until it is gone (its pods
        stopped), then delete the tenant's data."""
        key = (namespace, name)
        self.tenants.pop(key, None)
        self._applied.pop(key, None)
        ns_name = host_namespace(name)
        if self._by_host_namespace.get(ns_name) == key:
            del self._by_host_namespace[ns_name]
        for marker in [m for m in self._mesh_ips if m[:2] == key]:
            del self._mesh_ips[marker]
        deadline = asyncio.get_running_loop().time() + self.settings.tenant_namespace_delete_timeout_seconds
        deleting = False
        while True:
            try:
                current = await self.client.get(NAMESPACES, ns_name)
            except errors.StatusError as exc:
                if exc.code != 404:
                    raise
                break
            annotations = _d(_d(current.get("metadata")).get("annotations"))
            if annotations.get(OWNER_ANNOTATION) != owner(namespace, name):
                break  # another instance's (or not ours at all): leave it
            if not deleting and not _d(current.get("metadata")).get("deletionTimestamp"):
                with contextlib.suppress(errors.StatusError):
                    await self.client.delete(NAMESPACES, ns_name)
                log.info("deleting tenant namespace", tenant=name, namespace=ns_name)
            deleting = True
            if asyncio.get_running_loop().time() > deadline:
                raise RuntimeError(
                    f'namespace "{ns_name}" was not deleted within '
                    f"{self.settings.tenant_namespace_delete_timeout_seconds:g}s"
                )
            await asyncio.sleep(0.2)
        directory = self.directory(namespace, name)
        left = await asyncio.to_thread(reap_node_processes, directory / NODE_DIR)  # issue 10
        if left:
            log.warning("killed the pods a removed tenant's node left running", tenant=name, processes=left)
        await asyncio.to_thread(shutil.rmtree, directory, True)

    def begin_shutdown(self) -> None:
        self.closing = True

    async def close(self) -> None:
        """Say which replicas stopping waits for (the node runtime stops them: its pods), then stop watching."""
        self.begin_shutdown()
        running = sorted(
            str(_d(p.get("metadata")).get("name"))
            for p in self.pods.objects()
            if _d(p.get("metadata")).get("namespace") in self._by_host_namespace
            and any(
                "running" in _d(_d(s).get("state")) for s in _l(_d(p.get("status")).get("containerStatuses"))
            )
        )
        if running:
            log.info("stopping: waiting for tenant replicas", replicas=", ".join(running))
        await cancel_and_wait(self._tasks)

    def kill_all(self) -> None:
        """Nothing of its own to kill: the node runtime's ``force_stop`` kills the pods' processes."""


def _pod_port(pod: Obj) -> int | None:
    for container in _l(_d(pod.get("spec")).get("containers")):
        if _d(container).get("name") != CONTAINER:
            continue
        for port in _l(_d(container).get("ports")):
            if _d(port).get("name") == PORT_NAME and isinstance(_d(port).get("containerPort"), int):
                return int(_d(port)["containerPort"])
    return None
