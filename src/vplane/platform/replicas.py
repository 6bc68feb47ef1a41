"""Platform replicas: several ``vplane platform start`` processes on one store, each holding its own agent
sessions (issue 11 item 4; spec §10.4).

Upstream says only that a connection is marked offline when "the platform component that owned that
session stops reporting for about two minutes", and that idle tracking is collected after about 15 minutes
and recreated on reconnect. How we do it:

- **Reporting** is one Lease per replica, ``kube-system/vplane-platform-<instance_id>`` (``holderIdentity``
  the instance id), renewed every ``replica_heartbeat_seconds``: one write per replica per interval however
  many sessions it holds (a heartbeat per session would be 500 writes a second at 5,000 sessions).
- **Who holds a session** is its NetworkPeer: ``loft.sh/coordinator-instance-id`` and ``status.online``,
  written by the holder when the session comes and goes (``Platform._on_node_change``). A replica never
  overwrites a peer that another replica has taken since (an agent that moved).
- **Every replica sweeps** on the same beat. A replica is alive while its Lease's ``renewTime`` keeps
  changing: judged by the observer's own clock from when it saw the last change, as client-go's leader
  election does, so clock skew between hosts does not matter. A peer marked online whose holder has not
  reported for ``replica_offline_after_seconds`` (or has no Lease for that long) is marked offline, with
  ``lastSeen`` when the holder last reported. A peer offline for ``mesh.gc_after_seconds`` (the
  coordinator's own time for forgetting an offline node) whose holder is gone is deleted, and so is that
  holder's Lease: the tracking is recreated when the agent reconnects.
- **The holder re-asserts** its sessions on each beat: after a pause in which others marked them offline,
  they read online again; peers the store says it holds but it does not (a restart under the same
  instance id, a lost write) are marked offline.
- **Online-ness everyone agrees on** (``ReplicaView.nodes``): this replica's coordinator for the sessions it
  holds, the NetworkPeers (with the liveness above applied) for the others.
- **Who reconciles a Cluster** (``reconciler``): the holder of an online session of its agent (the lowest
  instance id if several replicas hold one), else the live replica with the lowest instance id. Only the
  holder can reach the tunnel (the relay does not cross replicas), and one writer per Cluster keeps two
  replicas from running helm against one cluster at once.

The decisions (``Liveness``, ``plan_sweep``, ``merged_nodes``, ``reconciler``) are pure with injected clocks;
``Replicas`` is the loop that reads them from and writes them to the platform's own API.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import math
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

import orjson
import structlog

from vplane.apiserver import codec, timeutil
from vplane.apiserver.objects import DeleteOptions
from vplane.apiserver.watch import WatchEvent
from vplane.kube import errors
from vplane.kube.accesskeys import GROUP, agent_subject
from vplane.kube.objects import Obj
from vplane.mesh.coordinator import NodeInfo
from vplane.platform.clusters.bridge import MODE_LABEL, MODE_PROXY_ONLY
from vplane.support.tasks import cancel_and_wait

if TYPE_CHECKING:
    from vplane.apiserver.server import APIServer

log = structlog.get_logger("vplane.platform.replicas")

LEASE_NAMESPACE = "kube-system"
LEASE_PREFIX = "vplane-platform-"
REPLICA_LABEL = "vplane.io/platform-replica"
"""On every replica's Lease (value ``"true"``)."""
COORDINATOR_ANNOTATION = "loft.sh/coordinator-instance-id"
CLUSTER_ANNOTATION = "loft.sh/cluster-name"
NAME_ANNOTATION = "vplane.io/node-name"
IDENTITY_ANNOTATION = "vplane.io/node-identity"
KIND_ANNOTATION = "vplane.io/node-kind"
CONNECTED_ANNOTATION = "vplane.io/connected-at"
NODE_LABELS_ANNOTATION = "vplane.io/node-labels"
"""What a NetworkPeer carries besides upstream's annotations, so another replica can see the node as its
holder does (``NodeInfo``); the last, as JSON, the node's own labels (``agent-mode``: an upgrade bridge),
which are not the NetworkPeer's labels (those carry only the platform's prefixed ones)."""
STARTUP_LOCK = "startup.lock"


# -- the records --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PeerState:
    """A NetworkPeer as the sweep and the view need it."""

    id: str
    holder: str
    """The coordinator instance that holds (or last held) the session; "" if the peer does not say."""
    online: bool
    last_seen: float | None
    """Wall seconds; set when the peer went offline."""
    resource_version: str = ""
    name: str = ""
    identity: str = ""
    kind: str = ""
    connected_at: float | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    endpoints: tuple[str, ...] = ()

    def info(self, online: bool) -> NodeInfo:
        return NodeInfo(
            id=self.id,
            name=self.name or self.id,
            identity=self.identity,
            kind=self.kind,
            labels=self.labels,
            endpoints=self.endpoints,
            online=online,
            last_seen=self.last_seen or 0.0,
            connected_at=self.connected_at,
            coordinator_id=self.holder,
        )


def peer_state(obj: Obj) -> PeerState:
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    status = obj.get("status") or {}
    cluster = str(annotations.get(CLUSTER_ANNOTATION) or "")
    identity = str(annotations.get(IDENTITY_ANNOTATION) or (agent_subject(cluster) if cluster else ""))
    kind = str(annotations.get(KIND_ANNOTATION) or ("agent" if cluster else ""))
    return PeerState(
        id=str(meta.get("name") or ""),
        holder=str(annotations.get(COORDINATOR_ANNOTATION) or ""),
        online=status.get("online") is True,
        last_seen=timeutil.parse_time(str(status.get("lastSeen") or "")),
        resource_version=str(meta.get("resourceVersion") or ""),
        name=str(annotations.get(NAME_ANNOTATION) or ""),
        identity=identity,
        kind=kind,
        connected_at=timeutil.parse_time(str(annotations.get(CONNECTED_ANNOTATION) or "")),
        # The platform's labels win over the node's own, as on the holder (``NodeInfo.labels``).
        labels=MappingProxyType(
            {**_own_labels(annotations.get(NODE_LABELS_ANNOTATION)), **(meta.get("labels") or {})}
        ),
        endpoints=tuple(str(e) for e in (obj.get("spec") or {}).get("endpoints") or ()),
    )


def peer_annotations(node: NodeInfo) -> dict[str, str]:
    """The annotations a holder writes on a node's NetworkPeer (upstream's and ours)."""
    annotations = {
        "loft.sh/network-peer-type": "vplane-mesh",
        COORDINATOR_ANNOTATION: node.coordinator_id,
        NAME_ANNOTATION: node.name,
        IDENTITY_ANNOTATION: node.identity,
        KIND_ANNOTATION: node.kind,
    }
    if node.connected_at is not None:
        annotations[CONNECTED_ANNOTATION] = timeutil.rfc3339_micro(node.connected_at)
    if node.kind == "agent" and node.identity.startswith("loft:cluster:"):
        annotations[CLUSTER_ANNOTATION] = node.identity.removeprefix("loft:cluster:")
    own = {k: v for k, v in sorted(node.labels.items()) if "/" not in k}
    if own:
        annotations[NODE_LABELS_ANNOTATION] = orjson.dumps(own).decode()
    return annotations


def _own_labels(text: object) -> dict[str, str]:
    """The node's own labels from their annotation; anything but a JSON object of strings is none."""
    try:
        found = orjson.loads(str(text or "{}"))
    except orjson.JSONDecodeError:
        return {}
    if not isinstance(found, dict):
        return {}
    return {str(k): v for k, v in found.items() if isinstance(v, str)}


def lease_name(instance_id: str) -> str:
    return f"{LEASE_PREFIX}{instance_id}"


# -- liveness -----------------------------------------------------------------------------------------


class Liveness:
    """Which replicas report, judged by this replica's own clock (monotonic seconds).

    A holder is alive while its Lease's ``renewTime`` changed less than ``offline_after`` ago by our clock;
    one we have no Lease for is given ``offline_after`` from when we first needed it. This replica is
    always alive to itself.

    Our own pauses are no evidence against the others: when this replica has not ticked for
    ``pause_after`` (it was stopped, or its loop was blocked) it has not been watching, so every clock it
    keeps restarts at that moment (the Lease events it missed arrive just after it resumes).
    """

    def __init__(
        self,
        me: str,
        offline_after: float,
        clock: Callable[[], float] = time.monotonic,
        pause_after: float | None = None,
    ) -> None:
        self.me = me
        self.offline_after = offline_after
        self.pause_after = pause_after
        self._clock = clock
        self._seen: dict[str, tuple[str, float]] = {}
        """holder -> (renewTime as written, when we saw it change)."""
        self._missing: dict[str, float] = {}
        """holder without a Lease -> when we first looked for one."""
        self._ticked = clock()
        self._resumed_at = -math.inf

    def tick(self) -> None:
        """This replica's loop is running (called every beat)."""
        self._catch_up(self._clock())

    def _catch_up(self, now: float) -> None:
        if self.pause_after is not None and now - self._ticked > self.pause_after:
            self._seen = {holder: (renew, now) for holder, (renew, _) in self._seen.items()}
            self._missing = dict.fromkeys(self._missing, now)
            self._resumed_at = now
        self._ticked = now

    def resumed_recently(self) -> bool:
        """Whether this replica came back from a pause less than ``pause_after`` ago: what it knows of the
        store may be stale until the writes it missed have arrived, so it should not act on it yet."""
        if self.pause_after is None:
            return False
        now = self._clock()
        if now - self._ticked > self.pause_after:
            self._catch_up(now)
        return now - self._resumed_at < self.pause_after

    @property
    def resumed_at(self) -> float:
        """When this replica last came back from a pause (our clock); -inf if it never did."""
        return self._resumed_at

    def observe(self, holder: str, renew_time: str) -> None:
        previous = self._seen.get(holder)
        if previous is None or previous[0] != renew_time:
            self._seen[holder] = (renew_time, self._clock())
        self._missing.pop(holder, None)

    def forget(self, holder: str) -> None:
        """Its Lease was deleted."""
        self._seen.pop(holder, None)

    def silent_for(self, holder: str) -> float:
        """Seconds since ``holder`` last reported, by our clock (0 for ourselves)."""
        if holder == self.me:
            return 0.0
        now = self._clock()
        if self.pause_after is not None and now - self._ticked > self.pause_after:
            self._catch_up(now)
        seen = self._seen.get(holder)
        if seen is not None:
            return now - seen[1]
        return now - self._missing.setdefault(holder, now)

    def alive(self, holder: str) -> bool:
        return self.silent_for(holder) <= self.offline_after

    def known(self) -> list[str]:
        return sorted(self._seen)

    def live(self) -> list[str]:
        """The replicas reporting now, this one included, sorted."""
        return sorted({self.me, *(h for h in self._seen if self.alive(h))})


# -- the sweep ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SweepPlan:
    reassert: tuple[str, ...] = ()
    """Sessions this replica holds whose NetworkPeer does not say so: write them again."""
    mark_offline: tuple[tuple[PeerState, float], ...] = ()
    """Peers to mark offline, with ``lastSeen`` (wall seconds)."""
    delete_peers: tuple[PeerState, ...] = ()
    delete_leases: tuple[str, ...] = ()
    """Holders whose Lease goes: gone for the collection time."""


def plan_sweep(
    liveness: Liveness,
    local: Mapping[str, NodeInfo],
    peers: Iterable[PeerState],
    *,
    wall_now: float,
    gc_after: float,
    settle: float,
) -> SweepPlan:
    """What one sweep writes.

    ``local`` is this replica's coordinator's registry (online and offline nodes it has not forgotten);
    ``settle`` is how long after connecting a session's own NetworkPeer write is left to land before a
    missing or stale peer counts as one to re-assert.
    """
    me = liveness.me
    reassert: list[str] = []
    offline: list[tuple[PeerState, float]] = []
    delete: list[PeerState] = []
    seen: set[str] = set()

    def gone_for(peer: PeerState) -> float:
        return wall_now - peer.last_seen if peer.last_seen is not None else math.inf

    for peer in peers:
        seen.add(peer.id)
        node = local.get(peer.id)
        if node is not None and node.online:
            if peer.holder != me and peer.online and liveness.alive(peer.holder):
                continue  # a live replica took the node since: our session is the stale one, on its way out
            if (peer.holder != me or not peer.online) and _settled(node, wall_now, settle):
                reassert.append(peer.id)
            continue
        if peer.holder == me:
            if peer.online:
                offline.append((peer, node.last_seen if node is not None else wall_now))
            elif node is None and gone_for(peer) > gc_after:
                delete.append(peer)  # ours from an earlier run; our coordinator does not know it
            continue
        if liveness.alive(peer.holder):
            continue  # its holder reports: the holder's coordinator decides
        if peer.online:
            offline.append((peer, wall_now - liveness.silent_for(peer.holder)))
        elif gone_for(peer) > gc_after:
            delete.append(peer)
    for node_id, node in local.items():
        if (
            node.online
            and node_id not in seen
            and node.kind != "platform"
            and _settled(node, wall_now, settle)
        ):
            reassert.append(node_id)
    leases = tuple(h for h in liveness.known() if h != me and liveness.silent_for(h) > gc_after)
    return SweepPlan(tuple(reassert), tuple(offline), tuple(delete), leases)


def _settled(node: NodeInfo, wall_now: float, settle: float) -> bool:
    return node.connected_at is None or wall_now - node.connected_at >= settle


# -- the view -----------------------------------------------------------------------------------------


def merged_nodes(
    liveness: Liveness, local: Sequence[NodeInfo], peers: Mapping[str, PeerState]
) -> list[NodeInfo]:
    """Every node as all replicas see it: a session this replica holds from its coordinator; the others
    from their NetworkPeer, online only while the peer says so and its holder reports.

    When a live replica holds a newer session of a node this replica still thinks it holds, the newer one
    is the node's (a process has one session; ours is a dead path we have not noticed yet, e.g. after this
    replica was paused)."""
    me = liveness.me
    out: list[NodeInfo] = []
    mine: set[str] = set()
    for node in local:
        peer = peers.get(node.id)
        if peer is not None and peer.holder != me:
            if not node.online:
                continue  # another replica holds it now: its NetworkPeer is the newer word
            if peer.online and _newer(peer, node) and liveness.alive(peer.holder):
                continue
        out.append(node)
        mine.add(node.id)
    for peer_id, peer in peers.items():
        if peer_id in mine:
            continue
        online = peer.online and peer.holder != me and liveness.alive(peer.holder)
        out.append(peer.info(online))
    return out


def _newer(peer: PeerState, node: NodeInfo) -> bool:
    return (peer.connected_at or 0.0) > (node.connected_at or 0.0)


def heard_since(sessions: Iterable[NodeInfo], me: str, resumed_wall: float) -> list[NodeInfo]:
    """The sessions that count for who reconciles after this replica's last pause (wall time): its own only
    once heard from since. One whose agent went away meanwhile still reads online until its connection's end
    is noticed, and acting on it would take the cluster from the replica the agent has moved to."""
    return [n for n in sessions if n.coordinator_id != me or n.last_seen >= resumed_wall]


def reconciler(sessions: Iterable[NodeInfo], live: Sequence[str]) -> str:
    """The replica that reconciles a Cluster with these agent sessions (``live``: sorted, non-empty).

    While an upgrade bridge is online, the replica holding the bridge's session: the upgrade goes through
    that session, and the relay does not cross replicas (a replica holding only the primary agent's
    session would wait for the bridge for ever, silently). That replica reaches the cluster through the
    bridge for the rest of the pass too (the bridge serves the platform's requests as the agent does)."""
    online = [n for n in sessions if n.online and n.coordinator_id]
    bridges = [n for n in online if n.labels.get(MODE_LABEL) == MODE_PROXY_ONLY]
    holders = sorted({n.coordinator_id for n in (bridges or online)})
    return holders[0] if holders else live[0]


# -- startup ------------------------------------------------------------------------------------------


class StartupLock:
    """Replicas starting at once take turns creating the shared PKI, tokens and bootstrap objects (an
    ``flock``, released by the kernel however the holder ends)."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def startup_lock(directory: Path) -> StartupLock:
    """Wait for the turn (blocking: run it in a thread)."""
    fd = os.open(directory / STARTUP_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return StartupLock(fd)


# -- the loop -----------------------------------------------------------------------------------------


PeerWriter = Callable[[NodeInfo], Awaitable[None]]


class Replicas:
    """This replica's Lease, the sweep, and the view, on the platform's own API (in process)."""

    def __init__(
        self,
        api: APIServer,
        instance_id: str,
        *,
        local_nodes: Callable[[], Sequence[NodeInfo]],
        write_peer: PeerWriter,
        heartbeat_seconds: float,
        offline_after_seconds: float,
        gc_after_seconds: float,
        url: Callable[[], str] = lambda: "",
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.me = instance_id
        # Three missed beats of our own mean we were not watching (see Liveness); always less than the time
        # the others wait before they act on our silence.
        pause = min(3 * heartbeat_seconds, offline_after_seconds / 2)
        self.liveness = Liveness(instance_id, offline_after_seconds, clock, pause_after=pause)
        self._local_nodes = local_nodes
        self._write_peer = write_peer
        self.heartbeat_seconds = heartbeat_seconds
        self.gc_after_seconds = gc_after_seconds
        self._url = url
        self._wall = wall_clock
        self._clock = clock
        self.peers: dict[str, PeerState] = {}
        self.on_lost: list[Callable[[NodeInfo], None]] = []
        """Called with each peer this replica marked offline (the Cluster loop requeues its cluster)."""
        self.on_replicas_changed: list[Callable[[], None]] = []
        """Called when the set of live replicas changed (Cluster ownership may have moved)."""
        self._live: list[str] = [instance_id]
        self._task: asyncio.Task[None] | None = None
        peers_type = api.registry.get(GROUP, "v1", "networkpeers")
        leases_type = api.registry.get("coordination.k8s.io", "v1", "leases")
        assert peers_type is not None and leases_type is not None
        self._peers_type = peers_type
        self._leases_type = leases_type
        self._peers_prefix = peers_type.prefix("")
        self._leases_prefix = leases_type.key(LEASE_NAMESPACE, LEASE_PREFIX)
        api.hub.on_event.append(self._on_event)

    # -- the view ---------------------------------------------------------------------------------

    def nodes(self) -> list[NodeInfo]:
        return merged_nodes(self.liveness, self._local_nodes(), self.peers)

    def reconciles(self, sessions: Sequence[NodeInfo]) -> bool:
        """Whether this replica reconciles the Cluster whose agent sessions these are."""
        if self.liveness.resumed_recently():
            return False  # back from a pause: the cluster's holder may have changed meanwhile
        return reconciler(self._heard_since_resume(sessions), self.liveness.live()) == self.me

    def _heard_since_resume(self, sessions: Sequence[NodeInfo]) -> list[NodeInfo]:
        resumed = self.liveness.resumed_at
        if resumed == -math.inf:
            return list(sessions)
        return heard_since(sessions, self.me, self._wall() - (self._clock() - resumed))

    # -- following the store ----------------------------------------------------------------------

    def load(self) -> None:
        for kv in self.api.cache.iter_prefix(self._peers_prefix):
            self._put_peer(codec.decode_kv(kv))
        for kv in self.api.cache.iter_prefix(self._leases_prefix):
            self._put_lease(codec.decode_kv(kv))

    def _on_event(self, wevent: WatchEvent) -> None:
        key = wevent.event.kv.key
        deleted = wevent.event.type == "DELETE"
        if key.startswith(self._peers_prefix):
            obj = wevent.obj()
            if deleted:
                self.peers.pop(str(obj["metadata"]["name"]), None)
            else:
                self._put_peer(obj)
        elif key.startswith(self._leases_prefix):
            obj = wevent.obj()
            if deleted:
                holder = str((obj.get("spec") or {}).get("holderIdentity") or "")
                if holder and holder != self.me:
                    self.liveness.forget(holder)
            else:
                self._put_lease(obj)

    def _put_peer(self, obj: Obj) -> None:
        peer = peer_state(obj)
        if peer.id:
            self.peers[peer.id] = peer

    def _put_lease(self, obj: Obj) -> None:
        spec = obj.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        if holder and holder != self.me:
            self.liveness.observe(holder, str(spec.get("renewTime") or ""))

    # -- running ----------------------------------------------------------------------------------

    async def start(self) -> None:
        self.load()
        await self._renew()
        self._live = self.liveness.live()
        self._task = asyncio.create_task(self._run(), name="platform-replicas")

    async def stop(self) -> None:
        """After the coordinator closed its sessions: say so in the store and withdraw the Lease, so the
        other replicas need not wait for it to go stale."""
        if self._task is not None:
            await cancel_and_wait([self._task])
            self._task = None
        held = [p for p in self.peers.values() if p.holder == self.me and p.online]
        now = self._wall()
        for peer in held:
            await self._mark_offline(peer, now)
        with contextlib.suppress(errors.StatusError):
            await self.api.objects.delete(
                self.api.system_context(),
                self._leases_type,
                LEASE_NAMESPACE,
                lease_name(self.me),
                DeleteOptions("Background"),
            )

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_seconds)
            self.liveness.tick()
            try:
                await self._renew()
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("platform replica heartbeat failed")

    async def _renew(self) -> None:
        rtype, ctx = self._leases_type, self.api.system_context()
        now = timeutil.rfc3339_micro(self._wall())
        name = lease_name(self.me)
        duration = max(1, math.ceil(self.liveness.offline_after))
        if self.api.objects.get(rtype, LEASE_NAMESPACE, name) is None:
            with contextlib.suppress(
                errors.StatusError
            ):  # a race with ourselves cannot happen; a 409 is fine
                await self.api.objects.create(
                    ctx,
                    rtype,
                    LEASE_NAMESPACE,
                    {
                        "apiVersion": "coordination.k8s.io/v1",
                        "kind": "Lease",
                        "metadata": {
                            "name": name,
                            "namespace": LEASE_NAMESPACE,
                            "labels": {REPLICA_LABEL: "true"},
                            "annotations": {"vplane.io/url": self._url()},
                        },
                        "spec": {
                            "holderIdentity": self.me,
                            "leaseDurationSeconds": duration,
                            "acquireTime": now,
                            "renewTime": now,
                        },
                    },
                )
            return

        def renew(obj: Obj) -> Obj:
            obj.setdefault("spec", {})["renewTime"] = now
            obj["spec"]["holderIdentity"] = self.me
            obj["spec"]["leaseDurationSeconds"] = duration
            return obj

        try:
            await self.api.objects.guaranteed_update(ctx, rtype, LEASE_NAMESPACE, name, renew)
        except errors.StatusError as exc:
            if exc.code != 404:
                raise
            # Collected by another replica while we were not reporting (our cache had not heard yet): the
            # next beat creates it again.
            log.info("this replica's lease was collected by another replica; creating it again")

    async def sweep(self) -> SweepPlan:
        """One pass of the plan (also what the loop runs each beat)."""
        live = self.liveness.live()
        if live != self._live:
            gone = sorted(set(self._live) - set(live))
            came = sorted(set(live) - set(self._live))
            log.info("platform replicas changed", live=live, stopped_reporting=gone, started=came)
            self._live = live
            for callback in self.on_replicas_changed:
                callback()
        local = {n.id: n for n in self._local_nodes()}
        plan = plan_sweep(
            self.liveness,
            local,
            list(self.peers.values()),
            wall_now=self._wall(),
            gc_after=self.gc_after_seconds,
            settle=self.heartbeat_seconds,
        )
        for node_id in plan.reassert:
            node = local.get(node_id)
            if node is not None:
                await self._write_peer(node)
        for peer, last_seen in plan.mark_offline:
            if await self._mark_offline(peer, last_seen):
                log.info(
                    "agent session marked offline: its platform replica stopped reporting",
                    node=peer.id,
                    replica=peer.holder,
                )
                info = peer.info(False)
                for lost in self.on_lost:
                    lost(info)
        ctx = self.api.system_context()
        for peer in plan.delete_peers:
            log.info("network peer collected after being offline", node=peer.id, replica=peer.holder)
            with contextlib.suppress(errors.StatusError):  # changed meanwhile (reconnected): kept
                await self.api.objects.delete(
                    ctx,
                    self._peers_type,
                    "",
                    peer.id,
                    DeleteOptions("Background", None, "", peer.resource_version),
                )
        for holder in plan.delete_leases:
            log.info("platform replica's lease collected", replica=holder)
            with contextlib.suppress(errors.StatusError):
                await self.api.objects.delete(
                    ctx, self._leases_type, LEASE_NAMESPACE, lease_name(holder), DeleteOptions("Background")
                )
        return plan

    async def _mark_offline(self, peer: PeerState, last_seen: float) -> bool:
        """Offline, if it is still the session of that holder and online (never a peer taken since)."""
        changed = False

        def mutate(obj: Obj) -> Obj:
            nonlocal changed
            current = peer_state(obj)
            if current.holder != peer.holder or not current.online:
                return obj
            changed = True
            obj["status"] = {"online": False, "lastSeen": timeutil.rfc3339(last_seen)}
            return obj

        try:
            await self.api.objects.guaranteed_update(
                self.api.system_context(), self._peers_type, "", peer.id, mutate, subresource="status"
            )
        except errors.StatusError:
            return False
        return changed
