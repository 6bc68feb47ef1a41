"""Agent upgrades through the temporary bridge ``proxy-only-agent`` (the asyncio glue of :mod:`.bridge`).

For a tunnel cluster whose agent chart is not the platform's version, one pass at a time:

1. render the chart the platform installs (``helm template``) and build the bridge from its agent
   Deployment; create it, or refresh it when what it should be changed. Errors: DeployProxyOnlyAgent.
2. wait for the bridge's tunnel session (label ``agent-mode=proxy-only``) to answer the platform's health
   check; until then the pass ends silently (:class:`~.release.BridgeWaiting`), and after
   ``agent_bridge_timeout_seconds`` the wait's log line names a real error of the bridge (a warning when it
   shows or changes, info while it stays).
3. ``helm upgrade`` through the bridge's session only (the gateway pinned to it). On failure, roll back
   through the bridge when helm left the release failed; the bridge stays for the next attempt.
4. delete the bridge.

Every other release change runs helm directly. When the release is as wanted, a bridge left by an
interrupted upgrade is deleted once a primary agent session is online.
"""

from __future__ import annotations

import time

import structlog

from vplane.controllers.client import Resource, TransportError
from vplane.kube import errors
from vplane.kube.objects import Obj
from vplane.platform.clusters import bridge as br
from vplane.platform.clusters import status as st
from vplane.platform.clusters import values as av
from vplane.platform.clusters.helm import Helm, HelmError
from vplane.platform.clusters.release import BridgeError, BridgeWaiting, ReleaseChange
from vplane.platform.settings import PlatformSettings

log = structlog.get_logger("vplane.platform.clusters")

DEPLOYMENTS = Resource("apps/v1", "Deployment", "deployments", True)
PODS = Resource("v1", "Pod", "pods", True)


class UpgradeBridge:
    def __init__(self, settings: PlatformSettings) -> None:
        self.settings = settings
        self._waiting_since: dict[tuple[str, str], float] = {}
        """(cluster, bridge spec digest) -> when this process started waiting for that bridge."""
        self._problems: dict[str, str] = {}
        """cluster -> the kind of bridge problem its wait last logged (``ImagePullBackOff``, ...)."""

    async def apply(self, change: ReleaseChange) -> None:
        if not br.needs_bridge(change.mode, change.current, change.version):
            await change.helm.upgrade_install(
                change.chart, change.namespace, change.values, description=change.description
            )
            return
        wanted = await self._build(change)
        digest = wanted["metadata"]["annotations"][br.SPEC_ANNOTATION]
        await self._deploy(change, wanted)
        node = await self._online_bridge(change)
        if node is None:
            now = time.monotonic()
            waited = now - self._waiting_since.setdefault((change.cluster, digest), now)
            problem = (
                await self._problem(change) if waited >= self.settings.agent_bridge_timeout_seconds else ""
            )
            # A warning when a problem shows or becomes another kind, info while it stays (a pass every few
            # seconds; its text moves: ErrImagePull and Back-off alternate, a crash loop's back-off grows).
            kind = problem.partition(":")[0]
            new_problem = bool(kind) and self._problems.get(change.cluster) != kind
            if kind:  # a read that failed says nothing: it does not reset what was seen
                self._problems[change.cluster] = kind
            (log.warning if new_problem else log.info)(
                "waiting for the bridge's tunnel session",
                cluster=change.cluster,
                namespace=change.namespace,
                waited_seconds=round(waited, 1),
                **({"problem": problem} if problem else {}),
            )
            raise BridgeWaiting()
        self._forget_waits(change.cluster)
        deployed = av.chart_version_of(change.current.chart) if change.current else ""
        log.info(
            "upgrading the agent release through the bridge",
            cluster=change.cluster,
            namespace=change.namespace,
            session=node,
            chart_from=deployed,
            chart_to=change.version,
        )
        helm = change.helm_through(node)
        try:
            # Until the new agent is ready: the bridge goes only once the upgrade completed, and an agent
            # that never becomes ready fails the release, which is then rolled back through the bridge.
            await helm.upgrade_install(
                change.chart, change.namespace, change.values, description=change.description, wait=True
            )
        except (HelmError, TimeoutError) as exc:
            # helm killed past its own timeout leaves the release pending (rolled back once stuck, by the
            # release step); a failed one is rolled back here.
            note = await self._roll_back(change, helm)
            text = (
                str(exc) or f"helm did not exit within {helm.timeout_seconds + helm.exit_margin_seconds:g}s"
            )
            raise HelmError(f"{text} (upgrade through the bridge {br.BRIDGE_NAME}{note})") from None
        log.info("agent release upgraded through the bridge; removing it", cluster=change.cluster)
        await self._remove(change)

    async def settle(self, change: ReleaseChange) -> None:
        """A bridge left by an upgrade that ended elsewhere (a platform restart) goes once the primary agent
        holds a session: with none, the bridge may be the only way in."""
        if change.mode is st.Mode.TUNNEL and not br.primary_sessions(change.sessions()):
            return
        self._forget_waits(change.cluster)
        try:
            await change.client.get(DEPLOYMENTS, br.BRIDGE_NAME, namespace=change.namespace)
        except errors.StatusError as exc:
            if exc.code != 404:
                log.warning("cannot read the bridge deployment", cluster=change.cluster, error=exc.message)
            return
        log.info("removing a bridge the release no longer needs", cluster=change.cluster)
        await self._remove(change)

    # -- steps --------------------------------------------------------------------------------------

    async def _build(self, change: ReleaseChange) -> Obj:
        target = f"{av.CHART_NAME}-{change.version}"
        try:
            manifests = await change.helm.template(change.chart, change.namespace, change.values)
            return br.bridge_deployment(br.agent_deployment(manifests), change.namespace, target)
        except (HelmError, br.BridgeBuildError, OSError) as exc:
            raise BridgeError(f"building the bridge deployment {br.BRIDGE_NAME}: {exc}") from None

    async def _deploy(self, change: ReleaseChange, wanted: Obj) -> None:
        where = f"the bridge deployment {br.BRIDGE_NAME} in namespace {change.namespace}"
        try:
            existing: Obj | None = await change.client.get(
                DEPLOYMENTS, br.BRIDGE_NAME, namespace=change.namespace
            )
        except errors.StatusError as exc:
            if exc.code != 404:
                raise BridgeError(f"reading {where}: {exc.message}") from None
            existing = None
        except TransportError as exc:
            raise BridgeError(f"reading {where}: {exc}") from None
        what = br.bridge_current(existing, wanted)
        if what == "keep":
            return
        try:
            if what == "create":
                await change.client.create(DEPLOYMENTS, wanted, namespace=change.namespace)
            else:
                assert existing is not None
                wanted["metadata"]["resourceVersion"] = existing["metadata"].get("resourceVersion")
                await change.client.replace(DEPLOYMENTS, wanted, namespace=change.namespace)
        except (errors.StatusError, TransportError) as exc:
            verb = "creating" if what == "create" else "refreshing"
            raise BridgeError(f"{verb} {where}: {st.describe(exc)}") from None
        log.info(
            "bridge deployed" if what == "create" else "bridge refreshed",
            cluster=change.cluster,
            namespace=change.namespace,
            target=wanted["metadata"]["annotations"][br.TARGET_ANNOTATION],
        )

    async def _online_bridge(self, change: ReleaseChange) -> str | None:
        for session in br.bridge_sessions(change.sessions()):
            if await change.reachable(session.id):
                return session.id
        return None

    async def _problem(self, change: ReleaseChange) -> str:
        """What the bridge's Deployment and pods say; a read that fails says nothing (keep waiting)."""
        try:
            deployment = await change.client.get(DEPLOYMENTS, br.BRIDGE_NAME, namespace=change.namespace)
            pods = await change.client.list(
                PODS, namespace=change.namespace, label_selector=dict([br.BRIDGE_LABEL])
            )
        except (errors.StatusError, TransportError) as exc:
            log.info("cannot read the bridge's state", cluster=change.cluster, error=st.describe(exc))
            return ""
        return br.bridge_problem(deployment, pods.items)

    async def _roll_back(self, change: ReleaseChange, helm: Helm) -> str:
        """After a failed upgrade through the bridge: back to the last good revision if helm left the
        release failed. Returns a note for the message."""
        try:
            current = await helm.release(change.namespace)
            if current is None or current.status != "failed":
                return ""
            history = await helm.history(change.namespace)
            good = [r.revision for r in history if r.status in ("deployed", "superseded")]
            if not good:
                return ""
            await helm.rollback(change.namespace, max(good))
        except HelmError as exc:
            log.warning("rolling back through the bridge failed", cluster=change.cluster, error=str(exc))
            return f"; rolling back failed: {exc}"
        log.warning("rolled the agent release back through the bridge", cluster=change.cluster, to=max(good))
        return f"; rolled back to revision {max(good)}"

    async def _remove(self, change: ReleaseChange) -> None:
        try:
            await change.client.delete(DEPLOYMENTS, br.BRIDGE_NAME, namespace=change.namespace)
        except (errors.StatusError, TransportError) as exc:
            if isinstance(exc, errors.StatusError) and exc.code == 404:
                return
            # Left for the next check (settle): the upgrade itself succeeded.
            log.warning("cannot remove the bridge deployment", cluster=change.cluster, error=st.describe(exc))

    def forget(self, cluster: str) -> None:
        """The Cluster was deleted: a Cluster made again under its name waits for its bridge afresh."""
        self._forget_waits(cluster)

    def _forget_waits(self, cluster: str) -> None:
        for key in [k for k in self._waiting_since if k[0] == cluster]:
            del self._waiting_since[key]
        self._problems.pop(cluster, None)
