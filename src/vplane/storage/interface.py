"""The storage interface every backend implements.

The model is etcd's: one global, strictly increasing revision; every write (create, update, delete)
gets the next revision; a key remembers the revision that created it and the one that last changed it.
The revision is the Kubernetes ``resourceVersion``. Values are opaque bytes.

Backends deliver committed events to one subscriber callback, on the event loop, in revision order,
*before* the write that caused them returns. That ordering lets the in-memory cache above answer reads
that are consistent with every acknowledged write without asking the backend again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: str
    value: bytes
    mod_revision: int
    create_revision: int


@dataclass(frozen=True, slots=True)
class Event:
    """A committed change. For ``DELETE`` the ``kv`` holds the last value at the deletion's revision."""

    type: Literal["PUT", "DELETE"]
    kv: KeyValue
    prev: KeyValue | None

    @property
    def revision(self) -> int:
        return self.kv.mod_revision


class StorageError(Exception):
    """Base class of the errors a store raises."""


class KeyExistsError(StorageError):
    def __init__(self, key: str) -> None:
        super().__init__(f"key exists: {key}")
        self.key = key


class KeyNotFoundError(StorageError):
    def __init__(self, key: str) -> None:
        super().__init__(f"key not found: {key}")
        self.key = key


class RevisionMismatchError(StorageError):
    """The key changed since the revision the caller read (optimistic concurrency)."""

    def __init__(self, key: str, current: KeyValue | None) -> None:
        super().__init__(f"revision mismatch: {key}")
        self.key = key
        self.current = current


class CompactedError(StorageError):
    """The requested revision is older than the oldest one still kept."""

    def __init__(self, requested: int, compacted: int) -> None:
        super().__init__(f"revision {requested} has been compacted (compact revision {compacted})")
        self.requested = requested
        self.compacted = compacted


class StoreClosedError(StorageError):
    pass


Subscriber = Callable[[Sequence[Event]], None]


class Store(Protocol):
    """What the API server needs from a backend."""

    async def start(self) -> None:
        """Open the backend (create files, connect); idempotent."""

    async def close(self) -> None: ...

    @property
    def failure(self) -> StorageError | None:
        """Why the store refuses writes (a commit failed), or None while it takes them."""

    def problem(self) -> str | None:
        """Why the store cannot serve right now (failed for good, or its server unreachable), or None:
        what the ``etcd`` health check reports."""

    @property
    def revision(self) -> int:
        """The newest committed revision this process has seen."""

    @property
    def compacted_revision(self) -> int:
        """Revisions at or below this one may be gone."""

    async def snapshot(self) -> tuple[list[KeyValue], int]:
        """Every live key and the revision the snapshot was taken at (used once, to fill the cache)."""

    def subscribe(self, callback: Subscriber, after: int) -> None:
        """Deliver every event with revision > ``after`` to ``callback`` in order (one subscriber)."""

    async def create(self, key: str, value: bytes) -> KeyValue: ...

    async def update(self, key: str, value: bytes, expected_revision: int) -> KeyValue: ...

    async def delete(self, key: str, expected_revision: int) -> KeyValue:
        """Delete; returns the last value stamped with the deletion's revision."""

    async def range_at(
        self, prefix: str, revision: int, *, start: str = "", limit: int = 0
    ) -> list[KeyValue]:
        """Live keys under ``prefix`` (and >= ``start``) as they were at ``revision``; raises CompactedError."""

    async def history(self, after: int, limit: int = 0) -> list[Event]:
        """Committed events with revision > ``after``, oldest first; raises CompactedError."""

    async def compact(self, revision: int) -> None:
        """Forget superseded values and tombstones at or below ``revision``."""
