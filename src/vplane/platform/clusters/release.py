"""The agent release step of the Cluster loop (:mod:`.controller`): install or upgrade the agent's Helm
release with the real helm binary, recover a release whose last operation is stuck, and remember where each
cluster's release lives so a resync costs no subprocess (:mod:`.releasecache`). An upgrade of a tunnel
cluster's chart goes through a :class:`ReleaseApplier`, the platform's being :class:`.upgrade.UpgradeBridge`.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson
import structlog
import yaml

from vplane.controllers.client import KubeClient, Resource
from vplane.kube import errors
from vplane.kube.objects import Obj
from vplane.mesh.coordinator import NodeInfo
from vplane.platform.clusters import bridge as br
from vplane.platform.clusters import releasecache as rc
from vplane.platform.clusters import status as st
from vplane.platform.clusters import values as av
from vplane.platform.clusters.gateway import agent_sessions
from vplane.platform.clusters.helm import Helm, HelmError, find_chart, find_helm
from vplane.platform.settings import PlatformSettings
from vplane.support.files import write_private

if TYPE_CHECKING:
    from vplane.platform.clusters.controller import ClusterClient, ClusterDeps

log = structlog.get_logger("vplane.platform.clusters")

SECRETS = Resource("v1", "Secret", "secrets", True)


class BridgeError(Exception):
    """An actual error of the upgrade bridge (``proxy-only-agent``): DeployProxyOnlyAgent."""


class BridgeWaiting(Exception):
    """The upgrade waits for the bridge's tunnel session: the pass ends silently (status unchanged)."""


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


def cluster_dir(data_dir: Path, name: str) -> Path:
    """Where the platform keeps a cluster's private files (kubeconfigs for its client and helm)."""
    return data_dir / "clusters" / name


def _session(node: NodeInfo) -> br.Session:
    return br.Session(node.id, node.name, node.labels, node.online, node.connected_at or 0.0)


def session_namespaces(sessions: Sequence[NodeInfo]) -> list[str]:
    """Where the cluster's online agents say they run (their ``agent-namespace`` label)."""
    return [str(n.labels.get(br.NAMESPACE_LABEL) or "") for n in sessions if n.online]


class AgentReleases:
    """The release step and what it remembers per cluster: where its release was found (and what the
    platform wanted then), and since when a pending operation has been seen pending."""

    def __init__(
        self,
        deps: ClusterDeps,
        applier: ReleaseApplier,
        reachable: Callable[[str], Awaitable[bool]],
    ) -> None:
        self.deps = deps
        self.settings: PlatformSettings = deps.settings
        self.applier = applier
        self.reachable = reachable
        """Whether an agent session answers the platform's health check through the tunnel."""
        self.checked: dict[str, rc.Located] = {}
        """Where each cluster's release was found, with the fingerprint of what the platform wanted then."""
        self._pending_seen: dict[tuple[str, str, int], float] = {}
        """(cluster, namespace, revision) of a pending release -> when this process first saw it pending."""

    def forget(self, name: str) -> None:
        """The Cluster is gone (or going): nothing of it is remembered, here or in the applier."""
        self.checked.pop(name, None)
        self.applier.forget(name)
        for seen in [k for k in self._pending_seen if k[0] == name]:
            del self._pending_seen[seen]

    def observe(self, name: str, namespace: str, fresh: bool, sessions: list[NodeInfo], pods: int) -> None:
        """What the pass saw of the agent, weighed against where the release is remembered to live."""
        located = self.checked.get(name)
        if located is None or located.namespace != namespace:
            return
        doubts = rc.session_doubts(namespace, session_namespaces(sessions)) | rc.pod_doubts(namespace, pods)
        self.checked[name] = rc.observed(located, doubts, fresh)

    async def ensure(
        self,
        name: str,
        cluster: Obj,
        mode: st.Mode,
        spec_namespace: str,
        entry: ClusterClient,
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
        checked = self.checked.get(name)
        agent_namespaces = session_namespaces(sessions)
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
        helm = self.helm(entry.kubeconfig)
        namespace, current = await self._find(helm, spec_namespace)
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
            helm_through=lambda node: self.helm(self._pinned_kubeconfig(name, node)),
            reachable=self.reachable,
        )
        if action != "none":
            log.info(
                "agent release needs a change", cluster=name, action=action, why=why, namespace=namespace
            )
            await self.applier.apply(change)
            log.info("agent release applied", cluster=name, action=action, namespace=namespace)
        else:
            await self.applier.settle(change)
        self.checked[name] = rc.located(
            checked, fingerprint, now, namespace, rc.session_doubts(namespace, agent_namespaces)
        )
        return namespace, True

    def helm(self, kubeconfig: Path) -> Helm:
        return Helm(
            find_helm(self.settings.helm_binary),
            kubeconfig,
            self.deps.data_dir / "helm",
            self.settings.helm_timeout_seconds,
            exit_margin_seconds=self.settings.helm_exit_margin_seconds,
        )

    def _pinned_kubeconfig(self, name: str, node: str) -> Path:
        """A private kubeconfig whose server is the gateway pinned to one agent session."""
        doc = av.kubeconfig(
            self.deps.gateway.server_url(self.deps.platform_url, name, node),
            self.deps.ca_pem,
            self.deps.gateway.token,
        )
        path = cluster_dir(self.deps.data_dir, name) / "kubeconfig-bridge.yaml"
        write_private(path, yaml.safe_dump(doc, sort_keys=True))
        return path

    async def _find(self, helm: Helm, spec_namespace: str) -> tuple[str, av.Release | None]:
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
