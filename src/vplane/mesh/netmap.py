"""Netmaps that fit what a node accepts: the peer cap and pages, both ends, without I/O.

A node announces in HELLO the largest control frame and the most peers it accepts; the coordinator
sends at most that many peers (``omitted`` says how many it left out) and splits a netmap into pages
that each fit in one control frame. A page is a NETMAP payload:

- the first page is complete (``peers``) or incremental (``upsert`` and ``remove``), as before;
- further pages carry ``upsert`` and ``remove`` with the same ``seq``;
- every page but the last has ``"more": true``.

The node applies pages to a copy and publishes only after the last one, so subscribers never see half a
netmap. A page with ``peers`` starts over: a coordinator that replaces an unsent netmap with a newer one
always sends a complete one, so a node whose previous netmap stopped halfway discards the half.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import orjson

T = TypeVar("T")

_OVERHEAD = len(b'{"seq":18446744073709551615,"upsert":[],"remove":[],"omitted":4294967295,"more":true}')
"""The most a page's own fields take, so entries fill the rest of the budget."""


def cap_peers(
    visible: Mapping[str, bytes], previous: Mapping[str, bytes] | None, limit: int
) -> tuple[dict[str, bytes], int]:
    """At most ``limit`` of the visible peers, and how many were left out.

    Peers the node already has are kept first, so a full node's view does not churn as others come and
    go; the rest follow in the policy's order.
    """
    if len(visible) <= limit:
        return dict(visible), 0
    kept: dict[str, bytes] = {}
    for peer_id in previous or ():
        if len(kept) >= limit:
            break
        wire = visible.get(peer_id)
        if wire is not None:
            kept[peer_id] = wire
    for peer_id, wire in visible.items():
        if len(kept) >= limit:
            break
        kept.setdefault(peer_id, wire)
    return kept, len(visible) - len(kept)


@dataclass(slots=True)
class Pages:
    payloads: list[bytes]
    dropped: list[str] = field(default_factory=list)
    """Peers whose entry alone does not fit in a page (not sent; counted in ``omitted``)."""


def paginate(
    seq: int,
    *,
    complete: bool,
    entries: Mapping[str, bytes],
    removes: Iterable[str] = (),
    omitted: int = 0,
    budget: int,
) -> Pages:
    """NETMAP payloads of at most ``budget`` bytes each for one netmap (see the module docstring)."""
    room = budget - _OVERHEAD
    dropped = [peer_id for peer_id, wire in entries.items() if len(wire) + 1 > room]
    items: list[tuple[bool, bytes]] = [(True, w) for p, w in entries.items() if len(w) + 1 <= room]
    items += [(False, orjson.dumps(peer_id)) for peer_id in removes]
    omitted += len(dropped)
    pages: list[tuple[list[bytes], list[bytes]]] = [([], [])]
    used = 0
    for is_entry, raw in items:
        if used + len(raw) + 1 > room and (pages[-1][0] or pages[-1][1]):
            pages.append(([], []))
            used = 0
        pages[-1][0 if is_entry else 1].append(raw)
        used += len(raw) + 1
    payloads = []
    for index, (upserts, removed) in enumerate(pages):
        parts = [b'{"seq":%d' % seq]
        if index == 0 and complete:
            parts.append(b',"peers":[%b]' % b",".join(upserts))
        else:
            parts.append(b',"upsert":[%b],"remove":[%b]' % (b",".join(upserts), b",".join(removed)))
        if index == 0 and omitted:
            parts.append(b',"omitted":%d' % omitted)
        if index < len(pages) - 1:
            parts.append(b',"more":true')
        parts.append(b"}")
        payloads.append(b"".join(parts))
    return Pages(payloads, dropped)


class Assembler(Generic[T]):
    """The node's side: applies pages to a copy of its peers and hands back the result after the last.

    ``parse`` turns one wire entry into ``(id, peer)`` (None to skip it). At most ``max_peers`` are kept,
    whatever the coordinator sends; ``omitted`` adds what the coordinator said it left out and what was
    dropped here.
    """

    def __init__(self, parse: Callable[[Mapping[str, Any]], tuple[str, T] | None], max_peers: int) -> None:
        self._parse = parse
        self._max = max_peers
        self._pending: dict[str, T] | None = None
        self._omitted = 0

    @property
    def in_progress(self) -> bool:
        return self._pending is not None

    def reset(self) -> None:
        """The session ended: a half-received netmap is worthless."""
        self._pending = None
        self._omitted = 0

    def feed(self, body: Mapping[str, Any], current: Mapping[str, T]) -> tuple[dict[str, T], int] | None:
        """One page; returns (peers, omitted) after the last page of a netmap, else None."""
        if "peers" in body:
            self._pending, self._omitted = {}, 0
            upserts = body.get("peers")
        else:
            if self._pending is None:
                self._pending, self._omitted = dict(current), 0
            upserts = body.get("upsert")
            removes = body.get("remove")
            if isinstance(removes, list):
                for peer_id in removes:
                    if isinstance(peer_id, str):
                        self._pending.pop(peer_id, None)
        pending = self._pending
        omitted = body.get("omitted")
        if isinstance(omitted, int) and not isinstance(omitted, bool) and omitted > 0:
            self._omitted += omitted
        if isinstance(upserts, list):
            for item in upserts:
                parsed = self._parse(item) if isinstance(item, dict) else None
                if parsed is None:
                    continue
                peer_id, peer = parsed
                if peer_id not in pending and len(pending) >= self._max:
                    self._omitted += 1
                    continue
                pending[peer_id] = peer
        if body.get("more") is True:
            return None
        result, omitted_total = pending, self._omitted
        self.reset()
        return result, omitted_total
