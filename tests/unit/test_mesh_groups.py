"""Netmaps under a ``GroupVisibility`` policy: the coordinator visits only the sessions a change concerns,
and what every node ends up holding is exactly what the policy says (checked against the policy called as
a plain function, through the pages a node would receive). No sockets: sessions with a stand-in WebSocket."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from vplane.mesh import frames, netmap
from vplane.mesh.coordinator import (
    NO_GROUPS,
    Coordinator,
    Groups,
    GroupVisibility,
    NodeIdentity,
    NodeInfo,
    VisibilityPolicy,
    _Limits,
    _Session,
    same_label,
)
from vplane.mesh.settings import MeshSettings

AGENTS, TENANTS = frozenset({"agent"}), frozenset({"vcluster"})


def platform_groups(node: NodeInfo) -> Groups:
    if node.kind == "platform":
        return Groups(sees=AGENTS)
    if node.kind == "vcluster":
        return Groups(TENANTS, TENANTS)
    if node.kind == "agent":
        return Groups(member_of=AGENTS)
    return NO_GROUPS


PLATFORM_POLICY = GroupVisibility(platform_groups)
KINDS = ("platform", "agent", "vcluster", "agent", "other", "agent")


class WS:
    closed = False

    async def send_bytes(self, data: bytes) -> None:
        raise AssertionError("no writer runs in these tests")


class Mesh:
    def __init__(self, policy: VisibilityPolicy, settings: MeshSettings | None = None) -> None:
        self.settings = settings or MeshSettings()
        self.coordinator = Coordinator(self._auth, visible_peers=policy, settings=self.settings, environ={})
        self.sessions: dict[int, _Session] = {}
        self.views: dict[_Session, dict[str, Any]] = {}
        self.netmaps: dict[_Session, int] = {}

    async def _auth(self, key: str) -> NodeIdentity:
        raise AssertionError("not used")

    def join(self, i: int, endpoints: tuple[str, ...] = ()) -> None:
        if i in self.sessions:
            return
        limits = _Limits(
            self.settings.max_frame_bytes,
            self.settings.max_control_frame_bytes,
            self.settings.max_netmap_peers,
        )
        identity = NodeIdentity(f"id-{i}", KINDS[i % len(KINDS)], {"project": f"p{i % 3}"})
        session = self.coordinator._register(WS(), identity, f"host-{i}", {}, endpoints, None, limits)  # type: ignore[arg-type]
        self.sessions[i] = session
        self.views[session] = {}

    def leave(self, i: int) -> None:
        session = self.sessions.pop(i, None)
        if session is not None:
            self.coordinator._unregister(session, "left")

    def move(self, i: int, port: int) -> None:
        session = self.sessions.get(i)
        if session is not None:
            self.coordinator._dispatch(
                session,
                frames.control(frames.FrameType.ENDPOINTS, {"endpoints": [f"127.0.0.1:{port}"]}),
            )

    def push(self) -> None:
        """The coordinator's push, then every queued netmap delivered to its node."""
        self.coordinator._push_netmaps()
        for session in self.sessions.values():
            pages = list(session.netmap)
            session.netmap.clear()
            if pages:
                self.netmaps[session] = self.netmaps.get(session, 0) + 1
            assembler: netmap.Assembler[Any] = netmap.Assembler(lambda item: (item["id"], item), 10_000)
            for page in pages:
                body = orjson.loads(page[frames.HEADER_SIZE :])
                result = assembler.feed(body, self.views[session])
                if result is not None:
                    self.views[session] = result[0]

    def expected(self, policy: VisibilityPolicy) -> dict[_Session, set[str]]:
        online = [s.record.info() for s in self.sessions.values()]
        return {
            s: {v.id for v in policy(s.record.info(), online) if v.id != s.record.id}
            for s in self.sessions.values()
        }


def check(mesh: Mesh, policy: VisibilityPolicy) -> None:
    for session, ids in mesh.expected(policy).items():
        assert set(session.peers_sent or {}) == ids
        assert set(mesh.views[session]) == ids
        for peer_id in ids:
            record = mesh.coordinator._records[peer_id]
            assert mesh.views[session][peer_id]["endpoints"] == list(record.endpoints)


OPS = st.lists(st.tuples(st.sampled_from(["join", "leave", "move"]), st.integers(0, 11)), max_size=40)


@settings(max_examples=60, deadline=None)
@given(ops=OPS, policy_name=st.sampled_from(["platform", "project"]))
def test_every_node_holds_what_the_policy_says_after_any_changes(
    ops: list[tuple[str, int]], policy_name: str
) -> None:
    policy = PLATFORM_POLICY if policy_name == "platform" else same_label("project")

    async def run() -> None:
        mesh = Mesh(policy)
        for step, (op, i) in enumerate(ops):
            if op == "join":
                mesh.join(i)
            elif op == "leave":
                mesh.leave(i)
            else:
                mesh.move(i, 1000 + step)
            if step % 3 == 0:  # several changes in one push, too
                mesh.push()
        mesh.push()
        check(mesh, policy)

    asyncio.run(run())


def test_an_agent_joining_concerns_only_the_sessions_that_see_agents() -> None:
    async def run() -> None:
        mesh = Mesh(PLATFORM_POLICY)
        for i in range(12):
            mesh.join(i)
        mesh.push()
        before = dict(mesh.netmaps)
        mesh.join(13)  # an agent (13 % 6 == 1)
        mesh.push()
        got = {s.record.info().kind for s, n in mesh.netmaps.items() if n != before.get(s, 0)}
        # The platform's node got the new agent; the newcomer got its own (empty) first netmap; no one else.
        assert got == {"platform", "agent"}
        assert [
            s for s in mesh.netmaps if mesh.netmaps[s] != before.get(s, 0) and s.record.info().kind == "agent"
        ] == [mesh.sessions[13]]
        check(mesh, PLATFORM_POLICY)

    asyncio.run(run())


def test_a_node_at_its_peer_cap_keeps_the_peers_it_has() -> None:
    async def run() -> None:
        settings = MeshSettings(max_netmap_peers=3)
        mesh = Mesh(PLATFORM_POLICY, settings)
        mesh.join(0)  # the platform's node
        agents = [1, 3, 5, 7, 9]
        for i in agents:
            mesh.join(i)
            mesh.push()
        platform = mesh.sessions[0]
        kept = set(platform.peers_sent or {})
        assert len(kept) == 3 and platform.omitted_sent == 2
        gone = next(iter(kept))
        mesh.leave(next(i for i in agents if mesh.sessions[i].record.id == gone))
        mesh.push()
        assert kept - {gone} <= set(platform.peers_sent or {}) and len(platform.peers_sent or {}) == 3
        assert platform.omitted_sent == 1

    asyncio.run(run())
