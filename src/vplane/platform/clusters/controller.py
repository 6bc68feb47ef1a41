"""The Cluster reconcile loop: the steps, in order, each result handed to :mod:`.status`.

It reaches the management API over HTTP like every platform controller, and each connected cluster's API
with a client built for its mode: the platform's own API (``spec.local``), the kubeconfig in the Secret
``spec.config`` names (direct), or the gateway through the agent's tunnel (``spec.networkPeer``). The agent
release is installed and upgraded with the real helm binary over the same kubeconfig (:mod:`.release`).

One pass: LocalClient -> tunnel sessions (Offline, NoOnlinePeers, PeerHealthCheck) -> client and the
``kube-system`` UID (InitializeCluster, ClusterUID) -> management namespace, agent release (a stuck pending
operation recovered; an upgrade through the bridge, :mod:`.upgrade`: DeployProxyOnlyAgent or a silent wait),
RBAC (InitializeCluster) -> agent pods (HealthCheckCluster, pod conditions). The first outcome is written.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import shutil
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import structlog
import yaml

from vplane.apiserver import timeutil
from vplane.controllers.client import NAMESPACES, KubeClient, Resource, TransportError
from vplane.controllers.informer import Informer, split_key
from vplane.controllers.reconciler import Controller
from vplane.kube import errors
from vplane.kube.accesskeys import ADMINS_GROUP, API_VERSION, cluster_key_made_for, cluster_key_name
from vplane.kube.objects import Obj
from vplane.mesh.coordinator import NodeInfo
from vplane.platform.clusters import bridge as br
from vplane.platform.clusters import diagnostics as diag
from vplane.platform.clusters import releasecache as rc
from vplane.platform.clusters import status as st
from vplane.platform.clusters import values as av
from vplane.platform.clusters.gateway import AGENT_HEALTH_PATH, Gateway, agent_sessions
from vplane.platform.clusters.helm import Helm, HelmError, find_helm
from vplane.platform.clusters.localclient import LocalClient, Unavailable
from vplane.platform.clusters.release import (
    AgentReleases,
    BridgeError,
    BridgeWaiting,
    ReleaseApplier,
    ReleasePending,
    cluster_dir,
    helm_directly,
)
from vplane.platform.settings import PlatformSettings
from vplane.support.files import private_dir, write_private

log = structlog.get_logger("vplane.platform.clusters")

CLUSTERS = Resource(API_VERSION, "Cluster", "clusters", False)
ACCESS_KEYS = Resource(API_VERSION, "AccessKey", "accesskeys", False)
SECRETS = Resource("v1", "Secret", "secrets", True)
PODS = Resource("v1", "Pod", "pods", True)
CLUSTER_ROLE_BINDINGS = Resource(
    "rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "clusterrolebindings", False
)
DEFAULT_SECRET_NAMESPACE = "vcluster-platform"
DEFAULT_SECRET_KEY = "config"
ADMINS_BINDING = "loft-admins"
AGENT_IDENTITY_PREFIX = "loft:cluster:"


class ClientBuildError(Exception):
    pass


@dataclass
class ClusterDeps:
    management: KubeClient
    settings: PlatformSettings
    local: LocalClient
    gateway: Gateway
    nodes: Callable[[], Sequence[NodeInfo]]
    platform_url: str
    ca_pem: bytes
    agent_key: Callable[[str, str], Awaitable[Obj]]
    """The agent access key of the Cluster (name, UID): created on first use, reused after, as the
    accesskey subresource does; an earlier Cluster's key of the same name is replaced."""
    local_kubeconfig: Path
    """The platform's own API (for ``spec.local``)."""
    version: str
    data_dir: Path
    reconciles: Callable[[Sequence[NodeInfo]], bool] = lambda sessions: True
    """Whether this platform replica reconciles the Cluster with these agent sessions (issue 11 item 4:
    the one holding its tunnel; ``vplane.platform.replicas``)."""
    holds: Callable[[NodeInfo], bool] = lambda node: True
    """Whether this replica holds the session: only those answer its health checks (the relay does not
    cross replicas), so checking another replica's would only wait out the timeout."""


class ClusterClient:
    def __init__(self, fingerprint: str, kubeconfig: Path, client: KubeClient) -> None:
        self.fingerprint = fingerprint
        self.kubeconfig = kubeconfig
        self.client = client


class ClusterController:
    def __init__(
        self,
        deps: ClusterDeps,
        *,
        clock: Callable[[], float] = time.time,
        apply_release: ReleaseApplier = helm_directly,
    ) -> None:
        self.deps = deps
        self.settings = deps.settings
        self.clock = clock
        self.releases = AgentReleases(deps, apply_release, self._reachable)
        self.informer = Informer(deps.management, CLUSTERS)
        self.controller = Controller(
            "clusters", self.informer, self.reconcile, workers=self.settings.cluster_workers
        )
        self._clients: dict[str, ClusterClient] = {}
        self._claims: dict[str, tuple[str, int]] = {}
        """The kube-system UID this replica recorded per Cluster, with the resourceVersion its patch made:
        the informer's annotation is the record once the informer has seen that version (so removing the
        annotation clears it); before, the memory stands in for a patch the informer has not delivered, and
        that patch's version is the precondition of the pass's status write."""
        self._uid_lock = asyncio.Lock()

    # -- events from outside the API ------------------------------------------------------------

    def node_changed(self, node: NodeInfo) -> None:
        if node.kind == "agent" and node.identity.startswith(AGENT_IDENTITY_PREFIX):
            self.controller.enqueue(node.identity[len(AGENT_IDENTITY_PREFIX) :])

    def local_client_changed(self) -> None:
        pending = self.informer.keys()
        for key in pending:
            self.controller.enqueue(key)

    async def close(self) -> None:
        for entry in self._clients.values():
            with contextlib.suppress(Exception):
                await entry.client.close()
        self._clients.clear()

    # -- the loop ---------------------------------------------------------------------------------

    async def reconcile(self, key: str) -> float | None:
        _, name = split_key(key)
        cluster = self.informer.get(key)
        if cluster is None or (cluster.get("metadata") or {}).get("deletionTimestamp"):
            await self._forget(name, deleted=cluster is None)
            return None
        spec = cluster.get("spec") or {}
        mode = st.mode_of(spec)
        if mode is None:
            return None  # admission refuses such a Cluster; nothing to connect
        sessions = agent_sessions(self.deps.nodes(), name)
        if not self.deps.reconciles(sessions):
            return self.settings.cluster_resync_seconds  # another replica holds the tunnel: it writes
        online = any(n.online for n in sessions) if spec.get("networkPeer") else None
        outcome, grace_left = await self._pass(name, cluster, mode, sessions)
        outcome = st.tunnel_lost(mode, outcome)
        if not await self._write(cluster, outcome, online):
            return self.settings.cluster_offline_requeue_seconds  # and at once, for the newer object's event
        s = self.settings
        delay = st.requeue_after(
            outcome,
            waiting=s.cluster_offline_requeue_seconds,
            failing=s.cluster_failed_requeue_seconds,
            resync=s.cluster_resync_seconds,
            grace_left=grace_left,
        )
        if rc.recheck_due(self.releases.checked.get(name)):
            # The pass doubted where the release lives: the next one asks helm, as soon as a wait would.
            delay = min(delay, s.cluster_offline_requeue_seconds)
        return delay

    async def _pass(
        self, name: str, cluster: Obj, mode: st.Mode, sessions: list[NodeInfo]
    ) -> tuple[st.Outcome, float | None]:
        spec = cluster.get("spec") or {}
        meta = cluster.get("metadata") or {}
        gate = st.local_client_gate(mode, self.deps.local.available, self.deps.local.error)
        if gate is not None:
            return gate, None
        if mode is st.Mode.TUNNEL:
            now = self.clock()
            created = timeutil.parse_time(str(meta.get("creationTimestamp") or ""))
            online_nodes = [n for n in sessions if n.online]
            try:
                responding = await self._health_check([n for n in online_nodes if self.deps.holds(n)])
            except Exception as exc:
                log.exception("health-checking agent sessions failed", cluster=name)
                return st.peer_check_failed(st.describe(exc)), None
            peers = st.Peers(len(sessions), len(online_nodes), responding)
            grace = self.settings.cluster_offline_grace_seconds
            # The UID record is written once the platform first reached the cluster.
            before = bool((meta.get("annotations") or {}).get(st.CLUSTER_UID_ANNOTATION))
            gate = st.peer_gate(mode, peers, created, now, grace, connected_before=before)
            if gate is not None:
                return gate, st.offline_grace_left(mode, peers, created, now, grace, connected_before=before)
        try:
            entry = await self._client(name, cluster, mode)
            kube_system = await entry.client.get(NAMESPACES, "kube-system")
        except ClientBuildError as exc:
            return st.step_failed(st.Step.CLIENT, str(exc)), None
        except (errors.StatusError, TransportError) as exc:
            return st.step_failed(st.Step.CLIENT, f"reading namespace kube-system: {st.describe(exc)}"), None
        client = entry.client
        uid = str((kube_system.get("metadata") or {}).get("uid") or "")
        failure = await self._claim_uid(name, cluster, uid)
        if failure is not None:
            return failure, None
        namespace = st.management_namespace(spec)
        try:
            await self._ensure_namespace(client, namespace)
        except (errors.StatusError, TransportError) as exc:
            return st.step_failed(st.Step.NAMESPACE, st.describe(exc), namespace), None
        fresh = False
        if mode is not st.Mode.LOCAL:
            try:
                namespace, fresh = await self.releases.ensure(name, cluster, mode, namespace, entry, sessions)
            except BridgeError as exc:
                return st.deploy_proxy_only_agent_failed(str(exc)), None
            except (BridgeWaiting, ReleasePending):
                return st.SILENT, None
            except (HelmError, av.AgentValuesInvalid, errors.StatusError, TransportError, OSError) as exc:
                if isinstance(exc, HelmError) and rc.helm_says_missing(str(exc)):
                    self.releases.checked.pop(name, None)  # wherever it is, it is not where remembered
                return st.step_failed(st.Step.RELEASE, st.describe(exc)), None
        try:
            await self._ensure_rbac(client)
        except (errors.StatusError, TransportError) as exc:
            return st.step_failed(st.Step.RBAC, st.describe(exc)), None
        if mode is st.Mode.LOCAL:
            return st.initialized(), None  # the platform is its own agent there
        try:
            pods = await client.list(PODS, namespace=namespace, label_selector=dict([st.AGENT_LABEL]))
        except (errors.StatusError, TransportError) as exc:
            return st.health_check_failed(namespace, st.describe(exc)), None
        self.releases.observe(name, namespace, fresh, sessions, len(pods.items))
        return st.pods_outcome(pods.items, namespace), None

    async def _reachable(self, node_id: str) -> bool:
        node = next(
            (n for n in self.deps.nodes() if n.id == node_id and n.online and self.deps.holds(n)), None
        )
        return node is not None and await self._health_check([node]) == 1

    async def _health_check(self, nodes: list[NodeInfo]) -> int:
        """How many of the online sessions answer through the tunnel; dial and HTTP failures count as not
        answering, anything else is the platform's own error (PeerHealthCheck)."""
        if not nodes:
            return 0
        try:
            http = self.deps.local.http()
        except Unavailable:
            return 0
        timeout = aiohttp.ClientTimeout(total=self.settings.cluster_peer_health_timeout_seconds)

        async def one(node: NodeInfo) -> bool:
            if not await self.deps.local.wait_peer(
                node.id, self.settings.cluster_peer_health_timeout_seconds
            ):
                return False
            try:
                async with http.get(f"http://{node.id}{AGENT_HEALTH_PATH}", timeout=timeout) as resp:
                    await resp.read()
                    return resp.status == 200
            except (aiohttp.ClientError, OSError, TimeoutError):
                return False

        results = await asyncio.gather(*(one(n) for n in nodes))
        return sum(results)

    # -- issue 11 item 6: tenant clusters placed on connected clusters ------------------------------

    async def client_for(self, name: str) -> KubeClient:
        """The client this loop reaches cluster ``name`` with (raises LookupError when there is none)."""
        cluster = self.informer.get(name)
        mode = st.mode_of((cluster or {}).get("spec") or {})
        if cluster is None or mode is None:
            raise LookupError("no such Cluster")
        try:
            return (await self._client(name, cluster, mode)).client
        except ClientBuildError as exc:
            raise LookupError(str(exc)) from None

    # -- diagnosis (vplane doctor cluster) ---------------------------------------------------------

    async def diagnose(self, name: str) -> dict[str, Any]:
        """The Cluster's ``diagnostics`` subresource: what the platform knows (mode, its mesh client, the
        agent's tunnel sessions) and what it reads of the cluster through its own connection."""
        cluster = self.informer.get(name)
        if cluster is None:
            raise errors.not_found("clusters", name, CLUSTERS.group)
        spec = cluster.get("spec") or {}
        mode = st.mode_of(spec)
        spec_namespace = st.management_namespace(spec)
        checked = self.releases.checked.get(name)
        doc: dict[str, Any] = {
            "mode": mode.value if mode is not None else "",
            "managementNamespace": spec_namespace,
            "localClient": {"connected": self.deps.local.available, "error": self.deps.local.error},
            "sessions": [
                {
                    "id": n.id,
                    "hostname": n.name,
                    "mode": n.labels.get(br.MODE_LABEL, ""),
                    "namespace": n.labels.get(br.NAMESPACE_LABEL, ""),
                    "online": n.online,
                    "connectedAt": timeutil.rfc3339(n.connected_at) if n.connected_at else "",
                    "lastSeen": timeutil.rfc3339(n.last_seen) if n.last_seen else "",
                }
                for n in agent_sessions(self.deps.nodes(), name)
            ],
        }
        if mode is None or mode is st.Mode.LOCAL:
            return {**doc, "cluster": None}
        try:
            entry = await self._client(name, cluster, mode)
        except ClientBuildError as exc:
            return {**doc, "cluster": {"via": "platform", "reachable": False, "error": str(exc)}}
        helm = Helm(
            find_helm(self.settings.helm_binary),
            entry.kubeconfig,
            self.deps.data_dir / "helm",
            self.settings.cluster_request_timeout_seconds,
        )
        namespace = checked.namespace if checked is not None else spec_namespace
        doc["cluster"] = await diag.collect(entry.client, helm, namespace, "platform")
        return doc

    # -- clients ----------------------------------------------------------------------------------

    async def _client(self, name: str, cluster: Obj, mode: st.Mode) -> ClusterClient:
        if mode is st.Mode.LOCAL:
            path = self.deps.local_kubeconfig
            fingerprint = "local"
        else:
            doc = await self._kubeconfig_doc(name, cluster, mode)
            raw = yaml.safe_dump(doc, sort_keys=True)
            fingerprint = hashlib.sha256(raw.encode()).hexdigest()
            path = cluster_dir(self.deps.data_dir, name) / "kubeconfig.yaml"
            current = self._clients.get(name)
            if current is None or current.fingerprint != fingerprint or not path.exists():
                private_dir(self.deps.data_dir / "clusters")
                write_private(path, raw)
        current = self._clients.get(name)
        if current is not None and current.fingerprint == fingerprint:
            return current
        if current is not None:
            with contextlib.suppress(Exception):
                await current.client.close()
        try:
            client = KubeClient.from_kubeconfig(
                path, field_manager="vplane-platform", timeout=self.settings.cluster_request_timeout_seconds
            )
        except Exception as exc:
            raise ClientBuildError(f"the kubeconfig cannot be used: {exc}") from None
        entry = ClusterClient(fingerprint, path, client)
        self._clients[name] = entry
        self.releases.checked.pop(name, None)
        return entry

    async def _kubeconfig_doc(self, name: str, cluster: Obj, mode: st.Mode) -> dict[str, Any]:
        if mode is st.Mode.TUNNEL:
            return av.kubeconfig(
                self.deps.gateway.server_url(self.deps.platform_url, name),
                self.deps.ca_pem,
                self.deps.gateway.token,
            )
        ref = (cluster.get("spec") or {}).get("config") or {}
        secret_name = str(ref.get("secretName") or "")
        secret_ns = str(ref.get("secretNamespace") or DEFAULT_SECRET_NAMESPACE)
        secret_key = str(ref.get("key") or DEFAULT_SECRET_KEY)
        where = f"secret {secret_ns}/{secret_name}"
        try:
            secret = await self.deps.management.get(SECRETS, secret_name, namespace=secret_ns)
        except (errors.StatusError, TransportError) as exc:
            raise ClientBuildError(f"reading the kubeconfig {where}: {st.describe(exc)}") from None
        data = (secret.get("data") or {}).get(secret_key)
        if not data:
            raise ClientBuildError(f"{where} has no key {secret_key!r} with a kubeconfig")
        try:
            text = base64.b64decode(str(data)).decode()
            return av.sanitize_kubeconfig(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ClientBuildError(f"the kubeconfig in {where}, key {secret_key}: {exc}") from None

    async def _forget(self, name: str, deleted: bool) -> None:
        entry = self._clients.pop(name, None)
        if entry is not None:
            with contextlib.suppress(Exception):
                await entry.client.close()
        self._claims.pop(name, None)
        self.releases.forget(name)
        shutil.rmtree(cluster_dir(self.deps.data_dir, name), ignore_errors=True)
        if deleted:
            # The cluster's agent key goes with it: its sessions end (the platform revokes on deletion).
            with contextlib.suppress(errors.StatusError, TransportError):
                await self._revoke_key(name)

    async def _revoke_key(self, name: str) -> None:
        """Delete the deleted Cluster's agent key, unless a Cluster made again under its name (which this
        informer may not have delivered yet) already holds it."""
        key = await self.deps.management.get(ACCESS_KEYS, cluster_key_name(name))
        try:
            live = await self.deps.management.get(CLUSTERS, name)
        except errors.StatusError as exc:
            if exc.code != 404:
                raise
            live = None
        made_for = cluster_key_made_for(key)
        if live is not None and made_for and made_for == str(live["metadata"].get("uid") or ""):
            return
        key_uid = str((key.get("metadata") or {}).get("uid") or "")
        await self.deps.management.delete(
            ACCESS_KEYS, cluster_key_name(name), precondition_uid=key_uid or None
        )

    # -- steps ------------------------------------------------------------------------------------

    async def _claim_uid(self, name: str, cluster: Obj, uid: str) -> st.Outcome | None:
        async with self._uid_lock:
            others: dict[str, str] = {}
            for other in self.informer.objects():
                other_name = str(other["metadata"]["name"])
                if other_name == name or other["metadata"].get("deletionTimestamp"):
                    continue
                recorded_other = self._recorded_uid(other)
                if recorded_other:
                    others[other_name] = recorded_other
            recorded = self._recorded_uid(cluster)
            failure, record = st.cluster_uid_gate(name, uid, recorded, others)
            if failure is not None:
                return failure
            if record:
                # On the version the pass read: a change made since (a status another replica wrote, an
                # edited spec) refuses it, and the newer object's pass decides again.
                read_version = str((cluster.get("metadata") or {}).get("resourceVersion") or "")
                meta: Obj = {"annotations": {st.CLUSTER_UID_ANNOTATION: uid}}
                if read_version:
                    meta["resourceVersion"] = read_version
                try:
                    patched = await self.deps.management.patch(CLUSTERS, name, {"metadata": meta})
                except errors.StatusError as exc:
                    if exc.code != 409:
                        raise
                    return st.SILENT
                version = str((patched.get("metadata") or {}).get("resourceVersion") or "")
                self._claims[name] = (uid, _revision(version))
            return None

    def _recorded_uid(self, cluster: Obj) -> str:
        meta = cluster.get("metadata") or {}
        annotation = str((meta.get("annotations") or {}).get(st.CLUSTER_UID_ANNOTATION) or "")
        claim = self._claims.get(str(meta.get("name", "")))
        if claim is None or _revision(str(meta.get("resourceVersion") or "")) >= claim[1]:
            return annotation  # the informer has seen this replica's patch: the annotation is the record
        return annotation or claim[0]

    async def _ensure_namespace(self, client: KubeClient, namespace: str) -> None:
        try:
            await client.get(NAMESPACES, namespace)
        except errors.StatusError as exc:
            if exc.code != 404:
                raise
            with contextlib.suppress(errors.StatusError):
                await client.create(
                    NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
                )
            await client.get(NAMESPACES, namespace)  # a refused create surfaces here, or a race settled

    async def _ensure_rbac(self, client: KubeClient) -> None:
        """Platform administrators administer every connected cluster (as on the platform and in every
        tenant): ClusterRoleBinding ``loft-admins``, group ``loft:admins`` -> ``cluster-admin``."""
        try:
            await client.get(CLUSTER_ROLE_BINDINGS, ADMINS_BINDING)
            return
        except errors.StatusError as exc:
            if exc.code != 404:
                raise
        await client.create(
            CLUSTER_ROLE_BINDINGS,
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": ADMINS_BINDING},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "cluster-admin",
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": ADMINS_GROUP}
                ],
            },
        )

    async def _write(self, cluster: Obj, outcome: st.Outcome, online: bool | None) -> bool:
        """Write the pass's outcome on the Cluster as it was read at the pass's start (its resourceVersion is
        the precondition): a pass that outlived a pause of this replica, or raced another writer, must not
        overwrite what was written meanwhile. False when it was refused; the newer object requeues it."""
        meta = cluster["metadata"]
        name = meta["name"]
        version = str(meta.get("resourceVersion") or "")
        claim = self._claims.get(name)
        if claim is not None and claim[1] > _revision(version):
            # This replica's UID patch, which the informer has not delivered yet, moved the version the pass
            # read; that patch is no one else's change.
            version = str(claim[1])
        current = cluster.get("status") or {}
        patch = st.status_patch(current, outcome, online)
        if patch is None:
            return True
        body: Obj = {"status": patch}
        if version:
            body["metadata"] = {"resourceVersion": version}
        try:
            await self.deps.management.patch(CLUSTERS, name, body, subresource="status")
        except errors.StatusError as exc:
            if exc.code == 404:
                return True  # deleted meanwhile: the delete event follows
            if exc.code == 409:
                log.debug("cluster status not written: the cluster changed meanwhile", cluster=name)
            else:
                # Said, and tried again soon: the status would otherwise stand as it was until the resync.
                log.warning("cluster status not written", cluster=name, code=exc.code, error=exc.message)
            return False
        if (current.get("phase"), current.get("reason")) != (outcome.phase, outcome.reason):
            log.info(
                "cluster status",
                cluster=name,
                phase=outcome.phase,
                reason=outcome.reason,
                message=outcome.message,
            )
        return True


def _revision(version: str) -> int:
    """A resourceVersion as the number vplane's API server makes it (0 for anything else)."""
    return int(version) if version.isdigit() else 0
