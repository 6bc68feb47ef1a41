"""The mesh's limits over the real protocol: vplane's own mesh client (``NodeSession``, the code tenants
run) against ``vplane platform start`` with its limits shrunk through settings.

Each limit is reached: node labels (Kubernetes rules, a count, reserved prefixes), endpoints, nodes per
identity, relayed streams per (opener, acceptor) pair, netmaps within what a node accepts, a second
session for a live node, and relayed streams ending on both sides when one side goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest

from harness import Kubectl, PlatformProcess
from vplane.mesh import DialError, NodeSession, RegistrationError, Stream
from vplane.mesh.settings import MeshSettings
from vplane.support import tls

pytestmark = pytest.mark.integration

LIMITS = {
    "heartbeat_interval_seconds": 0.5,
    "session_silence_timeout_seconds": 3,
    "max_node_endpoints": 2,
    "max_nodes_per_identity": 2,
    "max_streams_per_pair": 3,
    "max_streams_per_session": 8,
}
NODE = MeshSettings(
    heartbeat_interval_seconds=0.5,
    reconnect_backoff_min_seconds=0.05,
    reconnect_backoff_max_seconds=0.3,
    relay_open_timeout_seconds=5,
    dial_direct=False,
)
WAIT = 20.0


class Mesh:
    def __init__(self, proc: PlatformProcess, kubectl: Kubectl) -> None:
        self.proc = proc
        self.k = kubectl
        self.keys: set[str] = set()

    def key(self, name: str) -> str:
        """A tenant-cluster access key of its own identity (``loft:vcluster:p-default:<name>``)."""
        key = f"mesh-limits-{name}-0001"
        if name not in self.keys:
            self.k.apply(
                "apiVersion: management.loft.sh/v1\nkind: AccessKey\n"
                f"metadata: {{name: mesh-{name}}}\n"
                f'spec: {{type: VirtualCluster, subject: "loft:vcluster:p-default:{name}", key: {key},'
                " scope: {roles: [{role: vcluster}]}}\n"
            )
            self.keys.add(name)
        return key

    def node(
        self,
        identity: str,
        hostname: str,
        *,
        labels: dict[str, str] | None = None,
        endpoints: list[str] | None = None,
        settings: MeshSettings = NODE,
        serve: Callable[[Stream], Awaitable[None]] | None = None,
    ) -> NodeSession:
        node = NodeSession(
            self.proc.url,
            self.key(identity),
            hostname=hostname,
            labels=labels,
            endpoints=endpoints or [],
            settings=settings,
            ssl_context=tls.client_context(self.proc.ca.read_bytes()),
            environ={},
        )
        if serve is not None:
            node.serve_streams(serve)
        return node


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory, kubectl_path: str) -> Iterator[Mesh]:
    tmp = tmp_path_factory.mktemp("meshlimits")
    proc = PlatformProcess(tmp / "platform", {"mesh": json.dumps(LIMITS)})
    proc.start()
    try:
        yield Mesh(proc, Kubectl(kubectl_path, proc.kubeconfig, tmp / "cache"))
    finally:
        proc.stop()
        proc.kill_tenants()


@contextlib.asynccontextmanager
async def running(*nodes: NodeSession, ready: bool = True) -> AsyncIterator[None]:
    try:
        for node in nodes:
            await node.start()
            if ready:
                async with asyncio.timeout(WAIT):
                    await node.wait_ready()
        yield
    finally:
        for node in nodes:
            await node.close()


async def eventually(check: Callable[[], bool], what: str) -> None:
    """Poll state that no event announces (a refusal, a handler in another task)."""
    try:
        async with asyncio.timeout(WAIT):
            while True:
                if check():
                    return
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"not within {WAIT}s: {what}") from None


async def sees(node: NodeSession, peer: NodeSession) -> None:
    await eventually(lambda: peer.node_id in node.peers, f"{node.hostname} sees {peer.hostname}")


# -- what a node may claim --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "endpoints", "message"),
    [
        ({"vplane.io/tenant": "target"}, [], "label 'vplane.io/tenant' is reserved"),
        ({"loft.sh/cluster-name": "x"}, [], "keys under loft.sh/, vplane.io/ are set by the platform only"),
        ({"a": "v" * 64}, [], "invalid value for label 'a': must be no more than 63 bytes"),
        ({"Bad Key!": "v"}, [], "invalid label key 'Bad Key!'"),
        ({f"l{i}": "v" for i in range(65)}, [], "too many labels: 65 (at most 64)"),
        ({}, ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"], "too many endpoints: 3 (at most 2)"),
    ],
)
async def test_node_labels_and_endpoints_are_bounded(
    mesh: Mesh, labels: dict[str, str], endpoints: list[str], message: str
) -> None:
    """A node that claims a reserved label (one the platform sets, such as the tenant it belongs to), breaks
    Kubernetes' label rules, or sends too many labels or endpoints is refused for good, with the reason."""
    node = mesh.node("labels", "bad", labels=labels, endpoints=endpoints)
    async with running(node, ready=False):
        with pytest.raises(RegistrationError) as err:
            async with asyncio.timeout(WAIT):
                await node.wait_ready()
    assert message in str(err.value)


async def test_platform_labels_reach_peers_and_node_labels_are_kept(mesh: Mesh) -> None:
    good = mesh.node("labels", "good", labels={"replica": "0", "example.com/role": "db"})
    watcher = mesh.node("watcher", "w")
    async with running(good, watcher):
        await sees(watcher, good)
        peer = watcher.peers[good.node_id or ""]
        assert peer.labels["replica"] == "0" and peer.labels["example.com/role"] == "db"


# -- nodes per identity and a second session -------------------------------------------------------------


async def test_nodes_per_identity_are_capped(mesh: Mesh) -> None:
    """A third node of one identity is refused while its two nodes are online, and gets in once one of them
    is offline (replacing it)."""
    first, second, third = (mesh.node("capped", f"n{i}") for i in range(3))
    async with running(first, second), running(third, ready=False):
        await eventually(lambda: third.last_error is not None, "the third node is refused")
        assert "already has 2 nodes online; at most 2 nodes per identity" in (third.last_error or "")
        assert third.registrations == 0 and first.connected and second.connected
        await first.close()
        async with asyncio.timeout(WAIT):
            await third.wait_ready()


async def test_a_second_session_for_a_live_node_is_refused(mesh: Mesh) -> None:
    """Registering the same node again (same key, same hostname) while its session is alive does not take
    it over: callers' streams keep reaching the first session; the second registers once the first ends."""
    served: list[str] = []

    def answer(name: str) -> Callable[[Stream], Awaitable[None]]:
        async def handler(stream: Stream) -> None:
            served.append(name)
            await stream.write(name.encode())

        return handler

    first = mesh.node("dup", "same", serve=answer("first"))
    second = mesh.node("dup", "same", serve=answer("second"))
    caller = mesh.node("caller", "c")
    async with running(first, caller), running(second, ready=False):
        await eventually(lambda: second.last_error is not None, "the second session is refused")
        assert 'node "same" of loft:vcluster:p-default:dup already has a live session' in (
            second.last_error or ""
        )
        await sees(caller, first)
        stream = await caller.open_relayed(first.node_id or "")
        assert await stream.read() == b"first"
        await stream.close()
        assert first.registrations == 1 and first.connected and second.registrations == 0
        await first.close()
        async with asyncio.timeout(WAIT):
            await second.wait_ready()
        assert second.node_id == first.node_id


# -- relayed streams -------------------------------------------------------------------------------------


class Holder:
    """A stream handler that holds each stream open without reading, as an idle watch does, and records
    when the stream ends under it."""

    def __init__(self) -> None:
        self.open = 0
        self.ended = 0

    async def __call__(self, stream: Stream) -> None:
        self.open += 1
        with contextlib.suppress(ConnectionError):
            await stream.writer.wait_closed()
        self.ended += 1


async def test_relayed_streams_are_capped_per_pair_and_freed_by_closing(mesh: Mesh) -> None:
    """One node holding idle streams to a peer stops at the per-pair limit while another node still gets
    through; closing the streams ends them at the peer and gives the slots back."""
    holder = Holder()
    target = mesh.node("pair-target", "t", serve=holder)
    greedy, other = mesh.node("pair-greedy", "g"), mesh.node("pair-other", "o")
    async with running(target, greedy, other):
        await sees(greedy, target)
        await sees(other, target)
        streams = [await greedy.open_relayed(target.node_id or "") for _ in range(3)]
        with pytest.raises(DialError, match=r"too many streams to this peer \(at most 3 per pair\)"):
            await greedy.open_relayed(target.node_id or "")
        third_party = await other.open_relayed(target.node_id or "")
        await eventually(lambda: holder.open == 4, "the target accepted four streams")
        for stream in streams:
            await stream.close()
        await eventually(lambda: holder.ended == 3, "the target saw the three streams end")
        again = [await greedy.open_relayed(target.node_id or "") for _ in range(3)]
        for stream in [*again, third_party]:
            await stream.close()
        await eventually(lambda: holder.ended == 7, "every stream ended at the target")


async def test_a_relayed_stream_ends_on_the_other_side_when_one_side_goes(mesh: Mesh) -> None:
    """The acceptor's end goes as soon as the opener's does: a close (even one the acceptor's handler does
    not read), a close with data left unread while the acceptor is blocked writing, or the opener's
    session ending."""
    holder = Holder()
    writer_failed: list[BaseException] = []

    async def flood(stream: Stream) -> None:
        try:
            while True:
                await stream.write(b"x" * 65536)
        except ConnectionError as exc:
            writer_failed.append(exc)

    small = NODE.model_copy(update={"initial_window_bytes": 32 * 1024})
    idle_peer = mesh.node("ends-idle", "i", serve=holder)
    flood_peer = mesh.node("ends-flood", "f", serve=flood, settings=small)
    opener = mesh.node("ends-opener", "o", settings=small)
    async with running(idle_peer, flood_peer, opener):
        await sees(opener, idle_peer)
        await sees(opener, flood_peer)
        stream = await opener.open_relayed(idle_peer.node_id or "")
        await eventually(lambda: holder.open == 1, "the idle peer has the stream")
        await stream.close()
        await eventually(lambda: holder.ended == 1, "a close ends the idle peer's stream")

        stream = await opener.open_relayed(flood_peer.node_id or "")
        stream.writer.transport.pause_reading()  # a client that stopped reading its watch
        await eventually(
            lambda: bool(stream.writer.transport._recv_pending),  # type: ignore[attr-defined]
            "the flood filled the opener's window",
        )
        await stream.close()
        await eventually(lambda: bool(writer_failed), "the blocked writer is released with an error")

        stream = await opener.open_relayed(idle_peer.node_id or "")
        await eventually(lambda: holder.open == 2, "the idle peer has the second stream")
        await opener.close()
        await eventually(lambda: holder.ended == 2, "the opener's session ending ends the stream")
        await stream.close()


# -- netmaps ---------------------------------------------------------------------------------------------


def big_labels(index: int) -> dict[str, str]:
    """64 labels of the largest size Kubernetes allows (about 25 KB per netmap entry)."""
    prefix = ".".join(c * 63 for c in "abc") + "." + "d" * 61
    return {f"{prefix}/{i:02d}{'n' * 61}": f"{index:02d}{'v' * 61}" for i in range(64)}


async def test_a_netmap_never_exceeds_what_a_node_accepts(mesh: Mesh) -> None:
    """A node that accepts 64 KiB control frames and 3 peers gets its netmap in pages that fit and at most
    3 peers (told how many were left out), and never loses its session over it."""
    peers = [mesh.node(f"net{i // 2}", f"p{i}", labels=big_labels(i)) for i in range(5)]
    small = NODE.model_copy(update={"max_control_frame_bytes": 64 * 1024, "max_netmap_peers": 3})
    observer = mesh.node("net-observer", "observer", settings=small)
    async with running(*peers), running(observer):
        await eventually(
            lambda: len(observer.peers) == 3 and observer.netmap.omitted == 2, "three peers, two omitted"
        )
        for peer in observer.peers.values():
            own = [k for k in peer.labels if not k.startswith(("loft.sh/", "vplane.io/"))]
            assert len(own) == 64, "entries arrive whole"
        kept = set(observer.peers)
        assert kept <= {p.node_id for p in peers}
        gone = next(p for p in peers if p.node_id in kept)
        await gone.close()
        await eventually(
            lambda: (
                len(observer.peers) == 3
                and observer.netmap.omitted == 1
                and gone.node_id not in observer.peers
            ),
            "a left-out peer takes the free place",
        )
        assert observer.registrations == 1, "no netmap ever broke the session"
        assert kept - {gone.node_id} <= set(observer.peers), "the peers it had are kept"
