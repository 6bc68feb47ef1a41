"""The node runtime: one Node, its heartbeat, the pods bound to it, their network, the kubelet API.

:class:`NodeRuntime` reaches the API server only over HTTP with a kubeconfig, like a kubelet: it
registers its Node (and keeps its status and its Lease in ``kube-node-lease`` fresh), watches the pods
whose ``spec.nodeName`` is this node (a pod worker each, ``vplane.runtime.pods``), watches Services and
Endpoints for the pods' environment, the service proxy and the names file (``vplane.runtime.network``),
and serves the kubelet API (``vplane.runtime.kubelet``). It implements
:class:`vplane.runtime.cri.ContainerRuntime` for the kubelet API's handlers.

Stopping the runtime stops its pods' processes (SIGTERM, SIGKILL after ``stop_grace_period_seconds``)
and records how they ended; they start again when the runtime does. A runtime that is killed leaves them
running, and the next one adopts them (their shims' pid and state files), so nothing is restarted.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import random
import shutil
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import structlog
import yaml

from vplane.controllers.client import LEASES, TransportError
from vplane.controllers.informer import Informer, InformerSettings
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj
from vplane.runtime import images, network, nodestatus
from vplane.runtime.api import CONFIGMAPS, ENDPOINTS, NODES, PODS, SECRETS, SERVICES, RuntimeClient
from vplane.runtime.containers import ContainerProcess, read_json
from vplane.runtime.cri import AttachSession, ExecProcess, RunningContainer, spawn_exec
from vplane.runtime.events import EventRecorder
from vplane.runtime.kubelet import Authorizer, KubeletServer, LogError, LogSource, serving_material
from vplane.runtime.pods import PodWorker, stop_process
from vplane.runtime.settings import RuntimeSettings
from vplane.runtime.status import Backoff
from vplane.runtime.volumes import PodVolumes
from vplane.support.files import private_dir, write_private
from vplane.support.tasks import cancel_and_wait

log = structlog.get_logger("vplane.runtime")


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def kubeconfig_cluster(path: Path, context: str | None = None) -> tuple[str, bytes]:
    """The server URL and CA of a kubeconfig's (current) context."""
    doc = yaml.safe_load(path.read_text()) or {}
    name = context or doc.get("current-context")
    contexts = {c.get("name"): _d(c.get("context")) for c in _l(doc.get("contexts"))}
    clusters = {c.get("name"): _d(c.get("cluster")) for c in _l(doc.get("clusters"))}
    cluster = clusters.get(contexts.get(name, {}).get("cluster")) or (
        next(iter(clusters.values()), {}) if clusters else {}
    )
    ca = b""
    if cluster.get("certificate-authority-data"):
        ca = base64.b64decode(cluster["certificate-authority-data"])
    elif cluster.get("certificate-authority"):
        ca_path = Path(cluster["certificate-authority"])
        ca = (ca_path if ca_path.is_absolute() else path.parent / ca_path).read_bytes()
    return str(cluster.get("server") or ""), ca


def log_status_error(pod: str, status: Obj, container: str, previous: bool) -> str | None:
    """The kubelet's ``validateContainerLogStatus``: which container ID's log to read, or why none.

    Returns the container ID; raises :class:`LogError` with the kubelet's text."""
    found = None
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for cs in map(_d, _l(status.get(key))):
            if cs.get("name") == container:
                found = cs
                break
        if found is not None:
            break
    if found is None:
        raise LogError(400, f'container "{container}" in pod "{pod}" is not available')
    state, last = _d(found.get("state")), _d(_d(found.get("lastState")).get("terminated"))
    waiting, running, terminated = state.get("waiting"), state.get("running"), state.get("terminated")
    if previous:
        if not last or not last.get("containerID"):
            raise LogError(400, f'previous terminated container "{container}" in pod "{pod}" not found')
        return str(last["containerID"])
    if running is not None:
        return str(found.get("containerID") or "")
    if terminated is not None:
        if _d(terminated).get("containerID"):
            return str(_d(terminated)["containerID"])
        if last.get("containerID"):
            return str(last["containerID"])
        raise LogError(400, f'container "{container}" in pod "{pod}" is terminated')
    if last:
        if not last.get("containerID"):
            raise LogError(400, f'container "{container}" in pod "{pod}" is terminated')
        return str(last["containerID"])
    if waiting is not None:
        reason = str(_d(waiting).get("reason") or "")
        if reason == "ErrImagePull":
            raise LogError(
                400, f'container "{container}" in pod "{pod}" is waiting to start: image can\'t be pulled'
            )
        if reason == "ImagePullBackOff":
            raise LogError(
                400,
                f'container "{container}" in pod "{pod}" is waiting to start: trying and failing to pull image',
            )
        raise LogError(400, f'container "{container}" in pod "{pod}" is waiting to start: {reason}')
    raise LogError(400, f'container "{container}" in pod "{pod}" is waiting to start - no logs yet')


class ApiSources:
    """ConfigMaps, Secrets and service-account tokens for volumes and environments, from the API."""

    def __init__(self, client: RuntimeClient) -> None:
        self.client = client

    async def _get(self, resource: Any, namespace: str, name: str) -> Obj | None:
        try:
            return await self.client.get(resource, name, namespace=namespace)
        except StatusError as exc:
            if exc.code == 404:
                return None
            raise

    async def configmap(self, namespace: str, name: str) -> Obj | None:
        return await self._get(CONFIGMAPS, namespace, name)

    async def secret(self, namespace: str, name: str) -> Obj | None:
        return await self._get(SECRETS, namespace, name)

    async def token(
        self, namespace: str, service_account: str, audiences: list[str], seconds: int, pod: Obj
    ) -> tuple[str, float]:
        meta = _d(pod.get("metadata"))
        spec: Obj = {
            "expirationSeconds": seconds,
            "boundObjectRef": {
                "kind": "Pod",
                "apiVersion": "v1",
                "name": meta.get("name"),
                "uid": meta.get("uid"),
            },
        }
        if audiences:
            spec["audiences"] = audiences
        try:
            answer = await self.client.token_request(namespace, service_account, spec)
        except StatusError as exc:
            raise RuntimeError(exc.message) from None
        status = _d(answer.get("status"))
        from vplane.runtime.logs import parse_rfc3339

        expires = status.get("expirationTimestamp")
        return str(status.get("token") or ""), parse_rfc3339(
            str(expires)
        ) if expires else time.time() + seconds


class NodeRuntime:
    pods_resource = PODS

    def __init__(self, settings: RuntimeSettings, kubeconfig: Path, context: str | None = None) -> None:
        self.settings = settings
        self.kubeconfig = kubeconfig
        self.context = context
        self.node_name = settings.node_name
        self.host_ip = "127.0.0.1"
        self.catalogue = images.ImageCatalogue.load(settings.vplane_image, settings.image_catalogue_file)
        self.crash_backoff = Backoff(
            settings.crash_backoff_seconds,
            settings.crash_backoff_max_seconds,
            settings.crash_backoff_reset_seconds,
            time.time,
        )
        self.image_backoff = Backoff(
            settings.image_pull_backoff_seconds,
            settings.image_pull_backoff_max_seconds,
            2 * settings.image_pull_backoff_max_seconds,
            time.time,
        )
        self.pull_errors: dict[str, str] = {}
        self.workers: dict[str, PodWorker] = {}
        self.saved: dict[str, Obj] = {}
        self.client: RuntimeClient
        self.sources: ApiSources
        self.events: EventRecorder
        self.machine = nodestatus.machine_info(settings.data_dir)
        self.allocatable = nodestatus.allocatable(
            self.machine, settings.max_pods, settings.system_reserved_memory_bytes
        )
        self.ip_pool = network.AddressPool(
            settings.pod_cidr, start=random.randint, busy=network.listening_addresses
        )
        self.proxy = network.ServiceProxy()
        self.api_url = settings.api_server_url
        self.ca_pem = b""
        self.kubelet: KubeletServer | None = None
        self.node_uid = ""
        self._tasks: list[asyncio.Task[None]] = []
        self._informers: list[Informer] = []
        self._network_dirty = asyncio.Event()
        self._last_node_status: Obj | None = None
        self._last_node_write = 0.0
        self._stopped = False
        self.pod_informer: Informer
        self.service_informer: Informer
        self.endpoints_informer: Informer

    # -- paths ------------------------------------------------------------------------------------

    @property
    def hosts_path(self) -> Path:
        return self.settings.data_dir / "hosts"

    def curlrc_dir(self) -> Path | None:
        path = self.settings.data_dir / "curl"
        return path if (path / ".curlrc").exists() else None

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        settings = self.settings
        private_dir(settings.pods_dir)
        server, ca = await asyncio.to_thread(kubeconfig_cluster, self.kubeconfig, self.context)
        self.api_url = self.api_url or server
        self.ca_pem = ca
        self.client = await asyncio.to_thread(RuntimeClient.for_runtime, str(self.kubeconfig), self.context)
        self.sources = ApiSources(self.client)
        self.events = EventRecorder(self.client, self.node_name)
        self._tasks.append(asyncio.create_task(self.events.run()))
        self._load_saved()
        client_ca = settings.client_ca_file.read_bytes() if settings.client_ca_file is not None else ca
        serving = await asyncio.to_thread(
            serving_material,
            settings.data_dir / "pki",
            ["127.0.0.1", self.node_name, "localhost"],
            settings.tls_cert_file,
            settings.tls_key_file,
        )
        authorizer = Authorizer(
            self.client,
            self.node_name,
            settings.authorization_cache_seconds,
            settings.authorization_denied_cache_seconds,
        )
        self.kubelet = KubeletServer(
            self, authorizer, settings.kubelet_listen_host, settings.kubelet_port, serving, client_ca
        )
        await self.kubelet.start()
        await self._register()
        informer_settings = InformerSettings(page_size=None)
        self.pod_informer = Informer(
            self.client, PODS, field_selector={"spec.nodeName": self.node_name}, settings=informer_settings
        )
        self.service_informer = Informer(self.client, SERVICES, settings=informer_settings)
        self.endpoints_informer = Informer(self.client, ENDPOINTS, settings=informer_settings)
        self.pod_informer.add_handlers(
            on_add=self._pod_event, on_update=lambda _o, n: self._pod_event(n), on_delete=self._pod_deleted
        )
        for informer in (self.service_informer, self.endpoints_informer):
            informer.add_handlers(
                on_add=lambda _o: self._network_dirty.set(),
                on_update=lambda _o, _n: self._network_dirty.set(),
                on_delete=lambda _o: self._network_dirty.set(),
            )
        self._informers = [self.service_informer, self.endpoints_informer, self.pod_informer]
        for informer in self._informers:
            self._tasks.append(asyncio.create_task(informer.run()))
        await self.service_informer.wait_for_sync()
        await self.endpoints_informer.wait_for_sync()
        await self._update_network()
        self._tasks.append(asyncio.create_task(self._network_loop()))
        await self.pod_informer.wait_for_sync()
        await self._remove_orphans()
        self._tasks.append(asyncio.create_task(self._node_status_loop()))
        self._tasks.append(asyncio.create_task(self._lease_loop()))
        log.info(
            "node runtime ready",
            node=self.node_name,
            kubelet=f"https://{settings.kubelet_listen_host}:{self.kubelet.port}",
            pods=len(self.workers),
        )

    async def stop(self, *, keep_pods: bool = False) -> None:
        """Stop the node. Its pods' processes are stopped too (they start again when a runtime of this node
        does), unless ``keep_pods``: then they keep running, as after a killed runtime, for the next runtime
        of this node (same data directory and node name) to adopt; a tenant's leader that loses its lease
        hands its node over this way."""
        if self._stopped:
            return
        self._stopped = True
        await cancel_and_wait(self._tasks[1:])  # informers and loops; the event writer goes last
        grace = self.settings.stop_grace_period_seconds
        if keep_pods:
            if self.workers:
                log.info("leaving pods running for the next runtime of this node", pods=len(self.workers))
            await asyncio.gather(*(w.detach() for w in list(self.workers.values())), return_exceptions=True)
        else:
            if self.workers:
                log.info("stopping pods", pods=len(self.workers))
            await asyncio.gather(
                *(w.stop(grace, write_status=True) for w in list(self.workers.values())),
                return_exceptions=True,
            )
        if self.kubelet is not None:
            with contextlib.suppress(Exception):
                await self.kubelet.stop()
        await self.proxy.close()
        if hasattr(self, "events"):
            await self.events.flush()
        await cancel_and_wait(self._tasks[:1])
        if hasattr(self, "client"):
            await self.client.close()

    def force_stop(self) -> None:
        """SIGKILL every container process at once (a second Ctrl-C)."""
        for worker in self.workers.values():
            worker.kill_now()

    # -- saved state and orphans ------------------------------------------------------------------

    def _load_saved(self) -> None:
        for state_file in self.settings.pods_dir.glob("*/pod.json"):
            saved = read_json(state_file)
            if saved is None or not saved.get("uid"):
                continue
            self.saved[str(saved["uid"])] = saved
            if saved.get("ip") and saved["ip"] in self.ip_pool:
                self.ip_pool.reserve(str(saved["ip"]))
        net = read_json(self.settings.data_dir / "network.json")
        if net and net.get("last") and net["last"] in self.ip_pool:
            self.ip_pool = network.AddressPool(
                self.settings.pod_cidr, self.ip_pool.used, str(net["last"]), busy=network.listening_addresses
            )

    async def _remove_orphans(self) -> None:
        """Pods deleted while the runtime was down: end what they left running and remove their files."""
        for uid, saved in list(self.saved.items()):
            if uid in self.workers:
                continue
            directory = self.settings.pods_dir / uid
            stops = []
            for name, container in _d(saved.get("containers")).items():
                instance = int(_d(container).get("instance", -1))
                cid = str(_d(container).get("containerID") or "")
                if instance < 0 or not cid:
                    continue
                process = ContainerProcess.adopt(
                    directory / "containers" / name / str(instance),
                    directory / "logs" / name / f"{instance}.log",
                    cid,
                )
                if process.running:
                    stops.append(stop_process(process, self.settings.minimum_grace_period_seconds))
            await asyncio.gather(*stops, return_exceptions=True)
            if saved.get("ip"):
                self.ip_pool.release(str(saved["ip"]))
            shutil.rmtree(directory, ignore_errors=True)
            self.saved.pop(uid, None)
            log.info(
                "removed pod deleted while the runtime was down",
                pod=f"{saved.get('namespace')}/{saved.get('name')}",
            )

    # -- pods -------------------------------------------------------------------------------------

    def _pod_event(self, pod: Obj) -> None:
        if self._stopped:
            return
        uid = str(_d(pod.get("metadata")).get("uid", ""))
        worker = self.workers.get(uid)
        if worker is not None:
            worker.update(pod)
            return
        worker = PodWorker(self, pod, self.saved.pop(uid, None))
        self.workers[uid] = worker
        worker.start()

    def _pod_deleted(self, pod: Obj) -> None:
        uid = str(_d(pod.get("metadata")).get("uid", ""))
        worker = self.workers.pop(uid, None)
        if worker is not None:
            worker.remove()

    def _worker_for(self, namespace: str, name: str) -> PodWorker | None:
        pod = self.pod_informer.get(f"{namespace}/{name}") if hasattr(self, "pod_informer") else None
        if pod is None:
            return None
        return self.workers.get(str(_d(pod.get("metadata")).get("uid", "")))

    def allocate_ip(self, uid: str) -> str:
        ip = self.ip_pool.allocate()
        with contextlib.suppress(OSError):
            write_private(self.settings.data_dir / "network.json", json.dumps({"last": self.ip_pool.last}))
        return ip

    def release_ip(self, uid: str, ip: str) -> None:
        if ip:
            self.ip_pool.release(ip)

    def pod_volumes(self, directory: Path, ip: str) -> PodVolumes:
        return PodVolumes(
            pod_dir=directory,
            claims_dir=self.settings.data_dir / "claims",
            sources=self.sources,
            ca_pem=self.ca_pem,
            api_server=self.api_url,
            token_seconds=self.settings.token_expiration_seconds,
            allocatable=self.allocatable,
            host_ip=self.host_ip,
            pod_ip=ip,
            token_wait=self.settings.service_account_wait_seconds,
        )

    def catalogue_has(self, image: str) -> bool:
        try:
            self.catalogue.pull(image)
        except (images.ImagePullError, images.InvalidImageName):
            return False
        return True

    async def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """Remove a pod whose containers have stopped, unless the name now belongs to another pod."""
        current = await self.client.get(PODS, name, namespace=namespace)
        if str(_d(current.get("metadata")).get("uid")) != uid:
            raise StatusError(409, "Conflict", f'pod "{name}" is another pod now')
        await self.client.delete_now(PODS, name, namespace=namespace)

    # -- environment ------------------------------------------------------------------------------

    def service_env(self, namespace: str) -> dict[str, str]:
        services = [
            s for s in self.service_informer.objects() if _d(s.get("metadata")).get("namespace") == namespace
        ]
        return network.service_env(services)

    def api_env(self) -> dict[str, str]:
        parts = urlsplit(self.api_url)
        host = parts.hostname or "127.0.0.1"
        return network.api_server_env(host, parts.port or 443)

    # -- network ----------------------------------------------------------------------------------

    async def _network_loop(self) -> None:
        while True:
            await self._network_dirty.wait()
            await asyncio.sleep(0.05)
            self._network_dirty.clear()
            try:
                await self._update_network()
            except Exception:
                log.exception("service network update failed")

    async def _update_network(self) -> None:
        settings = self.settings
        services = self.service_informer.objects()
        endpoints = {
            (str(_d(e.get("metadata")).get("namespace")), str(_d(e.get("metadata")).get("name"))): e
            for e in self.endpoints_informer.objects()
        }
        if settings.allocate_cluster_ips:
            await self._allocate_cluster_ips(services)
        entries = network.host_entries(services, endpoints, settings.cluster_domain)
        network.write_hosts(self.hosts_path, entries)
        self._write_curlrc(services, entries)
        if settings.service_proxy:
            wanted: dict[tuple[str, int], list[tuple[str, int]]] = {}
            for service in services:
                meta = _d(service.get("metadata"))
                ip = str(_d(service.get("spec")).get("clusterIP") or "")
                if ip not in network.AddressPool(settings.service_cidr):
                    continue  # only addresses of our range are served here
                wanted.update(
                    network.backends_for(
                        service, endpoints.get((str(meta.get("namespace")), str(meta.get("name"))))
                    )
                )
            await self.proxy.update(wanted)

    async def _allocate_cluster_ips(self, services: list[Obj]) -> None:
        """The fallback for Services without a ClusterIP; an API server that allocates them (vplane's,
        kube-apiserver) leaves none, so nothing is patched."""
        in_use = {
            str(_d(s.get("spec")).get("clusterIP")) for s in services if _d(s.get("spec")).get("clusterIP")
        }
        for service in sorted(
            services, key=lambda s: str(_d(s.get("metadata")).get("creationTimestamp", ""))
        ):
            meta, spec = _d(service.get("metadata")), _d(service.get("spec"))
            if spec.get("clusterIP") or spec.get("type") == "ExternalName" or meta.get("deletionTimestamp"):
                continue
            ip = network.cluster_ip_for(str(meta.get("uid", "")), self.settings.service_cidr, in_use)
            in_use.add(ip)
            try:
                await self.client.patch(
                    SERVICES,
                    str(meta.get("name")),
                    {"spec": {"clusterIP": ip, "clusterIPs": [ip]}},
                    namespace=str(meta.get("namespace")),
                )
            except (StatusError, TransportError) as exc:
                log.warning("cannot set the service's clusterIP", service=meta.get("name"), error=str(exc))

    def _write_curlrc(self, services: list[Obj], entries: list[tuple[str, str]]) -> None:
        """``--resolve`` lines for the curl image: Service names with each of their ports."""
        ports: dict[str, list[int]] = {}
        for service in services:
            meta, spec = _d(service.get("metadata")), _d(service.get("spec"))
            fqdn = f"{meta.get('name')}.{meta.get('namespace')}.svc.{self.settings.cluster_domain}"
            ports[fqdn] = [
                p["port"] for p in map(_d, _l(spec.get("ports"))) if isinstance(p.get("port"), int)
            ]
        lines = []
        for address, name in sorted(set(entries)):
            base = next((f for f in ports if name == f or f.startswith(name + ".")), None)
            for port in ports.get(base or "", []):
                lines.append(f"resolve = {name}:{port}:{address}")
        directory = self.settings.data_dir / "curl"
        directory.mkdir(parents=True, exist_ok=True)
        text = "\n".join(lines) + "\n"
        path = directory / ".curlrc"
        if not path.exists() or path.read_text() != text:
            write_private(path, text)

    # -- node -------------------------------------------------------------------------------------

    def _node_status(self) -> Obj:
        assert self.kubelet is not None
        image_list = [
            {"names": [f"{entry.name}@{entry.digest()}", entry.name], "sizeBytes": 0}
            for entry in self.catalogue.entries.values()
        ]
        return nodestatus.node_status(
            self.node_name,
            self.machine,
            max_pods=self.settings.max_pods,
            reserved_memory=self.settings.system_reserved_memory_bytes,
            kubelet_port=self.kubelet.port,
            kubelet_version=self.settings.kubelet_version,
            images=image_list,
            previous=self._last_node_status,
            now=time.time(),
        )

    async def _register(self) -> None:
        """Create the Node (or take over an existing one of this name) with its status."""
        node = nodestatus.node_object(
            self.node_name, self.machine, self.settings.node_labels, self.settings.pod_cidr
        )
        try:
            existing = await self.client.get(NODES, self.node_name)
        except StatusError as exc:
            if exc.code != 404:
                raise
            existing = None
        if existing is not None:
            self._last_node_status = _d(existing.get("status"))
        status = self._node_status()
        ready_before = any(
            _d(c).get("type") == "Ready" and _d(c).get("status") == "True"
            for c in _l(_d(existing or {}).get("status", {}).get("conditions"))
        )
        if existing is None:
            created = await self.client.create(NODES, {**node, "status": status})
            self.node_uid = str(_d(created.get("metadata")).get("uid", ""))
        else:
            self.node_uid = str(_d(existing.get("metadata")).get("uid", ""))
            await self.client.patch(
                NODES,
                self.node_name,
                {
                    "metadata": {
                        "labels": node["metadata"]["labels"],
                        "annotations": node["metadata"]["annotations"],
                    }
                },
            )
        await self.client.patch(NODES, self.node_name, {"status": status}, subresource="status")
        self._last_node_status = status
        self._last_node_write = time.time()
        self.events.node_event("Normal", "Starting", "Starting kubelet.")
        self.events.node_event(
            "Normal", "NodeAllocatableEnforced", "Updated Node Allocatable limit across pods"
        )
        for reason in ("NodeHasSufficientMemory", "NodeHasNoDiskPressure", "NodeHasSufficientPID"):
            self.events.node_event("Normal", reason, f"Node {self.node_name} status is now: {reason}")
        if not ready_before:
            self.events.node_event("Normal", "NodeReady", f"Node {self.node_name} status is now: NodeReady")

    async def _node_status_loop(self) -> None:
        settings = self.settings
        while True:
            await asyncio.sleep(settings.node_status_update_frequency_seconds)
            status = self._node_status()
            changed = _without_heartbeats(status) != _without_heartbeats(self._last_node_status or {})
            due = time.time() - self._last_node_write >= settings.node_status_report_frequency_seconds
            if not changed and not due:
                continue
            try:
                await self.client.patch(NODES, self.node_name, {"status": status}, subresource="status")
            except (StatusError, TransportError) as exc:
                log.warning("cannot update node status", error=str(exc))
                continue
            self._last_node_status = status
            self._last_node_write = time.time()

    async def _lease_loop(self) -> None:
        settings = self.settings
        while True:
            try:
                await self._renew_lease()
            except (StatusError, TransportError) as exc:
                log.warning("cannot renew the node lease", error=str(exc))
            await asyncio.sleep(settings.node_lease_renew_interval_seconds)

    async def _renew_lease(self) -> None:
        try:
            current: Obj | None = await self.client.get(LEASES, self.node_name, namespace="kube-node-lease")
        except StatusError as exc:
            if exc.code != 404:
                raise
            current = None
        lease = nodestatus.lease_object(
            self.node_name, self.settings.node_lease_duration_seconds, time.time(), current
        )
        if self.node_uid:
            lease["metadata"]["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": self.node_name, "uid": self.node_uid}
            ]
        if current is None:
            await self.client.create(LEASES, lease, namespace="kube-node-lease")
        else:
            await self.client.replace(LEASES, lease, namespace="kube-node-lease")

    # -- ContainerRuntime -------------------------------------------------------------------------

    def pod(self, namespace: str, name: str) -> Obj | None:
        worker = self._worker_for(namespace, name)
        return worker.pod if worker is not None else None

    def pod_ip(self, namespace: str, name: str) -> str | None:
        worker = self._worker_for(namespace, name)
        return worker.ip or None if worker is not None else None

    def container(self, namespace: str, pod: str, container: str) -> RunningContainer | None:
        worker = self._worker_for(namespace, pod)
        if worker is None:
            return None
        running = worker.running.get(container)
        if running is None or running.process.pid is None:
            return None
        spec = next((c for c, _ in worker._container_specs() if c.get("name") == container), {})
        return RunningContainer(
            namespace,
            pod,
            container,
            running.process.container_id,
            running.process.pid,
            bool(spec.get("tty")),
            bool(spec.get("stdin")),
            bool(spec.get("stdinOnce")),
            running.process.attach_address,
            running.exec_context,
        )

    async def attach(self, namespace: str, pod: str, container: str) -> AttachSession:
        found = self.container(namespace, pod, container)
        if found is None:
            raise LookupError(f'container "{container}" in pod "{pod}" is not running')
        return await AttachSession.open(found.attach_address)

    async def exec(
        self, namespace: str, pod: str, container: str, command: Sequence[str], *, tty: bool, stdin: bool
    ) -> ExecProcess:
        found = self.container(namespace, pod, container)
        if found is None or found.exec_context is None:
            raise LookupError(f'container "{container}" in pod "{pod}" is not running')
        return await spawn_exec(found.exec_context, command, tty=tty, stdin=stdin)

    def log_source(self, namespace: str, pod: str, container: str, previous: bool) -> LogSource:
        worker = self._worker_for(namespace, pod)
        if worker is None:
            raise LogError(404, f'pod "{pod}" does not exist')
        if not any(c.get("name") == container for c, _ in worker._container_specs()):
            raise LogError(404, f'container "{container}" not found in pod "{pod}"')
        container_id = log_status_error(pod, worker.status(), container, previous)
        path = worker.log_path_by_id(container, container_id or "")
        current = worker.running.get(container)

        def still_running() -> bool:
            now = worker.running.get(container)
            return now is not None and now is current and now.process.container_id == container_id

        return LogSource(path, still_running)


def _without_heartbeats(status: Obj) -> Obj:
    copy = json.loads(json.dumps(status))
    for condition in copy.get("conditions") or []:
        condition.pop("lastHeartbeatTime", None)
    return copy  # type: ignore[no-any-return]


def kill_everything(pods_dir: Path) -> int:
    """SIGKILL every container process recorded under ``pods_dir`` (tests and emergencies)."""
    killed = 0
    for state_file in pods_dir.glob("*/containers/*/*/state.json"):
        process = ContainerProcess.adopt(state_file.parent, state_file.parent / "unused.log", "vplane://x")
        if process.running and process.signal(signal.SIGKILL):
            killed += 1
        process.kill_shim()
    return killed
