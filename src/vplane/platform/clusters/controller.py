"""The Cluster reconcile loop: the steps, in order, each result handed to :mod:`.status`.

It reaches the management API over HTTP like every platform controller, and each connected cluster's API
with a client built for its mode: the platform's own API (``spec.local``), the kubeconfig in the Secret
``spec.config`` names (direct), or the gateway through the agent's tunnel (``spec.networkPeer``). The agent
release is installed and upgraded with the real helm binary over the same kubeconfig.

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
from typing import Any, Protocol

import aiohttp
import orjson
import structlog
import yaml

from vplane.apiserver import timeutil
from vplane.controllers.client import NAMESPACES, KubeClient, Resource, TransportError
from vplane.controllers.informer import Informer, split_key
from vplane.controllers.reconciler import Controller
from vplane.kube import errors
from vplane.kube.accesskeys import ADMINS_GROUP, API_VERSION, cluster_key_name
from vplane.kube.objects import Obj
from vplane.mesh.coordinator import NodeInfo
from vplane.platform.clusters import bridge as br
from vplane.platform.clusters import diagnostics as diag
from vplane.platform.clusters import releasecache as rc
from vplane.platform.clusters import status as st
from vplane.platform.clusters import values as av
from vplane.platform.clusters.gateway import AGENT_HEALTH_PATH, Gateway, agent_sessions
from vplane.platform.clusters.helm import Helm, HelmError, find_chart, find_helm
from vplane.platform.clusters.localclient import LocalClient, Unavailable
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


class BridgeError(Exception):
    """An actual error of the upgrade bridge (``proxy-only-agent``): DeployProxyOnlyAgent."""


class BridgeWaiting(Exception):
    """The upgrade waits for the bridge's tunnel session: the pass ends with ``outcome`` (silent, or
    DeployProxyOnlyAgent once the wait has lasted and a real error shows)."""

    def __init__(self, outcome: st.Outcome) -> None:
        super().__init__(outcome.message or "waiting for the bridge")
        self.outcome = outcome


class ReleasePending(Exception):
    """The release's last operation is still pending and may be running: requeue silently."""


@dataclass
class ReleaseChange:
    """Everything an applier needs to change one cluster's agent release."""

    cluster: str
    mode: st.Mode
    namespace: str
    """Where the release lives (or is installed)."""
    chart: Path
    values: dict[str, Any]
    version: str
    action: av.Action
    why: str
    current: av.Release | None
    helm: Helm
    """helm through the cluster's usual connection."""
    client: KubeClient
    sessions: Callable[[], list[br.Session]]
    """The cluster's agent sessions on this platform, now."""
    helm_through: Callable[[str], Helm]
    """helm pinned to one agent session (the bridge's)."""
    reachable: Callable[[str], Awaitable[bool]]
    """Whether that session answers the platform's health check through the tunnel."""

    @property
    def description(self) -> str:
        """The revision's description in ``helm history``: written by the platform, what, why."""
        return av.release_description(self.action, self.why, self.version, self.values)


class ReleaseApplier(Protocol):
    """Changes the agent release. :func:`helm_directly` runs helm; :class:`.upgrade.UpgradeBridge` (what the
    platform uses) puts the temporary ``proxy-only-agent`` bridge in front of a tunnel cluster's chart
    upgrade and raises :class:`BridgeError` or :class:`BridgeWaiting`."""

    async def apply(self, change: ReleaseChange) -> None:
        """Install or upgrade (``change.action`` is not ``none``)."""

    async def settle(self, change: ReleaseChange) -> None:
        """The release is as the platform wants it: clear what an interrupted change left behind."""

    def forget(self, cluster: str) -> None:
        """The Cluster is gone (or going): drop what the applier remembers of it."""


class HelmDirectly:
    async def apply(self, change: ReleaseChange) -> None:
        await change.helm.upgrade_install(
            change.chart, change.namespace, change.values, description=change.description
        )

    async def settle(self, change: ReleaseChange) -> None:
        return None

    def forget(self, cluster: str) -> None:
        return None


helm_directly = HelmDirectly()


def _session(node: NodeInfo) -> br.Session:
    return br.Session(node.id, node.name, node.labels, node.online, node.connected_at or 0.0)


def _session_namespaces(sessions: Sequence[NodeInfo]) -> list[str]:
    """Where the cluster's online agents say they run (their ``agent-namespace`` label)."""
    return [str(n.labels.get(br.NAMESPACE_LABEL) or "") for n in sessions if n.online]


def _describe(exc: BaseException) -> str:
    if isinstance(exc, errors.StatusError):
        return exc.message
    return str(exc) or type(exc).__name__


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


class _ClusterClient:
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
        self.apply_release = apply_release
        self.informer = Informer(deps.management, CLUSTERS)
        self.controller = Controller(
            "clusters", self.informer, self.reconcile, workers=self.settings.cluster_workers
        )
        self._clients: dict[str, _ClusterClient] = {}
        self._release_checked: dict[str, rc.Located] = {}
        self._claims: dict[str, tuple[str, int]] = {}
        """The kube-system UID this replica recorded per Cluster, with the resourceVersion its patch made:
        the informer's annotation is the record once the informer has seen that version (so removing the
        annotation clears it); before, the memory stands in for a patch the informer has not delivered."""
        self._patched: dict[str, str] = {}
        """The resourceVersion a pass's own patch made, the precondition of that pass's status write."""
        self._pending_seen: dict[tuple[str, str, int], float] = {}
        """(cluster, namespace, revision) of a pending release -> when this process first saw it pending."""
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
        if rc.recheck_due(self._release_checked.get(name)):
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
                responding = await self._health_check(online_nodes)
            except Exception as exc:
                log.exception("health-checking agent sessions failed", cluster=name)
                return st.peer_check_failed(_describe(exc)), None
            peers = st.Peers(len(sessions), len(online_nodes), responding)
            grace = self.settings.cluster_offline_grace_seconds
            gate = st.peer_gate(mode, peers, created, now, grace)
            if gate is not None:
                return gate, st.offline_grace_left(mode, peers, created, now, grace)
        try:
            entry = await self._client(name, cluster, mode)
            kube_system = await entry.client.get(NAMESPACES, "kube-system")
        except ClientBuildError as exc:
            return st.step_failed(st.Step.CLIENT, str(exc)), None
        except (errors.StatusError, TransportError) as exc:
            return st.step_failed(st.Step.CLIENT, f"reading namespace kube-system: {_describe(exc)}"), None
        client = entry.client
        uid = str((kube_system.get("metadata") or {}).get("uid") or "")
        failure = await self._claim_uid(name, cluster, uid)
        if failure is not None:
            return failure, None
        namespace = st.management_namespace(spec)
        try:
            await self._ensure_namespace(client, namespace)
        except (errors.StatusError, TransportError) as exc:
            return st.step_failed(st.Step.NAMESPACE, _describe(exc), namespace), None
        fresh = False
        if mode is not st.Mode.LOCAL:
            try:
                namespace, fresh = await self._release(name, cluster, mode, namespace, entry, sessions)
            except BridgeError as exc:
                return st.deploy_proxy_only_agent_failed(str(exc)), None
            except BridgeWaiting as exc:
                return exc.outcome, None
            except ReleasePending:
                return st.SILENT, None
            except (HelmError, av.AgentValuesInvalid, errors.StatusError, TransportError, OSError) as exc:
                if isinstance(exc, HelmError) and rc.helm_says_missing(str(exc)):
                    self._release_checked.pop(name, None)  # wherever it is, it is not where remembered
                return st.step_failed(st.Step.RELEASE, _describe(exc)), None
        try:
            await self._ensure_rbac(client)
        except (errors.StatusError, TransportError) as exc:
            return st.step_failed(st.Step.RBAC, _describe(exc)), None
        if mode is st.Mode.LOCAL:
            return st.initialized(), None  # the platform is its own agent there
        try:
            pods = await client.list(PODS, namespace=namespace, label_selector=dict([st.AGENT_LABEL]))
        except (errors.StatusError, TransportError) as exc:
            return st.health_check_failed(namespace, _describe(exc)), None
        self._observe(name, namespace, fresh, sessions, len(pods.items))
        return st.pods_outcome(pods.items, namespace), None

    def _observe(self, name: str, namespace: str, fresh: bool, sessions: list[NodeInfo], pods: int) -> None:
        """What the pass saw of the agent, weighed against where the release is remembered to live."""
        located = self._release_checked.get(name)
        if located is None or located.namespace != namespace:
            return
        doubts = rc.session_doubts(namespace, _session_namespaces(sessions)) | rc.pod_doubts(namespace, pods)
        self._release_checked[name] = rc.observed(located, doubts, fresh)

    async def _reachable(self, node_id: str) -> bool:
        node = next((n for n in self.deps.nodes() if n.id == node_id and n.online), None)
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
        checked = self._release_checked.get(name)
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

    def _dir(self, name: str) -> Path:
        return self.deps.data_dir / "clusters" / name

    async def _client(self, name: str, cluster: Obj, mode: st.Mode) -> _ClusterClient:
        if mode is st.Mode.LOCAL:
            path = self.deps.local_kubeconfig
            fingerprint = "local"
        else:
            doc = await self._kubeconfig_doc(name, cluster, mode)
            raw = yaml.safe_dump(doc, sort_keys=True)
            fingerprint = hashlib.sha256(raw.encode()).hexdigest()
            path = self._dir(name) / "kubeconfig.yaml"
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
        entry = _ClusterClient(fingerprint, path, client)
        self._clients[name] = entry
        self._release_checked.pop(name, None)
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
            raise ClientBuildError(f"reading the kubeconfig {where}: {_describe(exc)}") from None
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
        self._release_checked.pop(name, None)
        self._claims.pop(name, None)
        self._patched.pop(name, None)
        self.apply_release.forget(name)
        for seen in [k for k in self._pending_seen if k[0] == name]:
            del self._pending_seen[seen]
        shutil.rmtree(self._dir(name), ignore_errors=True)
        if deleted:
            # The cluster's agent key goes with it: its sessions end (the platform revokes on deletion).
            with contextlib.suppress(errors.StatusError, TransportError):
                await self.deps.management.delete(ACCESS_KEYS, cluster_key_name(name))

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
                patched = await self.deps.management.patch(
                    CLUSTERS, name, {"metadata": {"annotations": {st.CLUSTER_UID_ANNOTATION: uid}}}
                )
                version = str((patched.get("metadata") or {}).get("resourceVersion") or "")
                self._claims[name] = (uid, _revision(version))
                if version:
                    self._patched[name] = version
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

    async def _release(
        self,
        name: str,
        cluster: Obj,
        mode: st.Mode,
        spec_namespace: str,
        entry: _ClusterClient,
        sessions: list[NodeInfo],
    ) -> tuple[str, bool]:
        """Install or upgrade the agent release when absent, of another chart version, not ``deployed``,
        or with drifted values; helm is asked only when the desired values changed, every
        ``agent_release_recheck_seconds``, or when a pass saw evidence that the release is not where it was
        found (:mod:`.releasecache`), so a resync costs no subprocess. Returns the namespace the release
        lives in (``spec.managementNamespace``, else ``loft`` or ``vcluster-platform``, spec §13.6) and
        whether helm was asked this pass."""
        annotations = (cluster.get("metadata") or {}).get("annotations") or {}
        extra = av.extra_values({}, self.settings.agent_values, annotations.get(st.AGENT_VALUES_ANNOTATION))
        key = await self.deps.agent_key(name, str((cluster.get("metadata") or {}).get("uid") or ""))
        desired = av.desired_values(
            extra, av.connection_values(str(key["spec"]["key"]), self.deps.platform_url, self.deps.ca_pem)
        )
        fingerprint = hashlib.sha256(
            orjson.dumps(
                [desired, self.deps.version, spec_namespace, entry.fingerprint], option=orjson.OPT_SORT_KEYS
            )
        ).hexdigest()
        now = time.monotonic()
        checked = self._release_checked.get(name)
        agent_namespaces = _session_namespaces(sessions)
        doubts = rc.session_doubts(checked.namespace, agent_namespaces) if checked else frozenset()
        why = rc.recheck_reason(
            checked, fingerprint, now, self.settings.agent_release_recheck_seconds, doubts
        )
        if checked is not None and not why:
            return checked.namespace, False
        if why not in rc.ROUTINE:
            log.info(
                "asking helm again where the agent release lives",
                cluster=name,
                namespace=checked.namespace if checked else spec_namespace,
                why=why,
            )
        helm = self._helm(entry.kubeconfig)
        namespace, current = await self._find_release(helm, spec_namespace)
        if current is not None and current.status in br.IN_PROGRESS:
            current = await self._recover_pending(name, helm, entry.client, namespace, current)
        searched = br.release_namespaces(spec_namespace)
        if current is None and (mode is st.Mode.TUNNEL or br.agents_elsewhere(searched, agent_namespaces)):
            # The agent is connected (a tunnel pass got here through it; a direct cluster's agent says where
            # it runs), so its release is somewhere else: installing a second agent would not fix that (the
            # runbook's "release does not exist" loop). A direct cluster with no agent connected elsewhere
            # gets its agent installed.
            raise HelmError(br.missing_release_message(searched, agent_namespaces))
        action, why = av.release_action(current, desired, self.deps.version)
        change = ReleaseChange(
            cluster=name,
            mode=mode,
            namespace=namespace,
            chart=find_chart(self.settings.agent_chart),
            values=desired,
            version=self.deps.version,
            action=action,
            why=why,
            current=current,
            helm=helm,
            client=entry.client,
            sessions=lambda: [_session(n) for n in agent_sessions(self.deps.nodes(), name)],
            helm_through=lambda node: self._helm(self._pinned_kubeconfig(name, node)),
            reachable=self._reachable,
        )
        if action != "none":
            log.info(
                "agent release needs a change", cluster=name, action=action, why=why, namespace=namespace
            )
            await self.apply_release.apply(change)
            log.info("agent release applied", cluster=name, action=action, namespace=namespace)
        else:
            await self.apply_release.settle(change)
        self._release_checked[name] = rc.located(
            checked, fingerprint, now, namespace, rc.session_doubts(namespace, agent_namespaces)
        )
        return namespace, True

    def _helm(self, kubeconfig: Path) -> Helm:
        return Helm(
            find_helm(self.settings.helm_binary),
            kubeconfig,
            self.deps.data_dir / "helm",
            self.settings.helm_timeout_seconds,
        )

    def _pinned_kubeconfig(self, name: str, node: str) -> Path:
        """A private kubeconfig whose server is the gateway pinned to one agent session."""
        doc = av.kubeconfig(
            self.deps.gateway.server_url(self.deps.platform_url, name, node),
            self.deps.ca_pem,
            self.deps.gateway.token,
        )
        path = self._dir(name) / "kubeconfig-bridge.yaml"
        write_private(path, yaml.safe_dump(doc, sort_keys=True))
        return path

    async def _find_release(self, helm: Helm, spec_namespace: str) -> tuple[str, av.Release | None]:
        for namespace in br.release_namespaces(spec_namespace):
            current = await helm.release(namespace)
            if current is not None:
                if namespace != spec_namespace:
                    log.info(
                        "the agent release is in a default namespace, not spec.managementNamespace",
                        namespace=namespace,
                        management_namespace=spec_namespace,
                    )
                return namespace, current
        return spec_namespace, None

    async def _recover_pending(
        self, name: str, helm: Helm, client: KubeClient, namespace: str, current: av.Release
    ) -> av.Release | None:
        """A release whose last operation is pending or uninstalling: wait while it may still run (another
        helm, another replica), then roll back to the last good revision, forget an interrupted install's
        record (the next install adopts what it left), or finish a cut-short uninstall. Raises
        :class:`ReleasePending` while waiting."""
        seen_key = (name, namespace, current.revision)
        first_seen = self._pending_seen.setdefault(seen_key, time.monotonic())
        pending_for = time.monotonic() - first_seen
        try:
            history = await helm.history(namespace)
        except HelmError as exc:
            if not rc.helm_says_missing(str(exc)):
                raise
            self._pending_seen.pop(seen_key, None)  # the operation finished and removed the release
            return None
        recovery, revision = br.pending_recovery(
            history, pending_for, self.settings.agent_release_stuck_seconds
        )
        if recovery == "wait":
            log.info(
                "the agent release has an operation pending; waiting before recovering it",
                cluster=name,
                namespace=namespace,
                status=current.status,
                revision=current.revision,
                pending_seconds=round(pending_for, 1),
            )
            raise ReleasePending(current.status)
        if recovery == "rollback" and revision is not None:
            log.warning(
                "the agent release is stuck; rolling back",
                cluster=name,
                namespace=namespace,
                status=current.status,
                revision=current.revision,
                to_revision=revision,
            )
            await helm.rollback(namespace, revision)
        elif recovery == "uninstall":
            log.warning(
                "the agent release's uninstall is stuck; finishing it",
                cluster=name,
                namespace=namespace,
                revision=current.revision,
            )
            await helm.uninstall(namespace)
        elif revision is not None:
            record = f"sh.helm.release.v1.{av.RELEASE_NAME}.v{revision}"
            log.warning(
                "the agent release's install is stuck; forgetting its pending record",
                cluster=name,
                namespace=namespace,
                status=current.status,
                record=record,
            )
            with contextlib.suppress(errors.StatusError):
                await client.delete(SECRETS, record, namespace=namespace)
        self._pending_seen.pop(seen_key, None)
        return await helm.release(namespace)

    async def _write(self, cluster: Obj, outcome: st.Outcome, online: bool | None) -> bool:
        """Write the pass's outcome on the Cluster as it was read at the pass's start (its resourceVersion is
        the precondition): a pass that outlived a pause of this replica, or raced another writer, must not
        overwrite what was written meanwhile. False when it was refused; the newer object requeues it."""
        meta = cluster["metadata"]
        name = meta["name"]
        # The pass's own UID patch moved the version it read; that patch is no one else's change.
        version = self._patched.pop(name, None) or meta.get("resourceVersion")
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
