"""The embedded SQLite backend.

Shape (after kine): one append-only ``log`` table whose integer primary key *is* the global revision.
Every create, update and delete inserts a row; a key's current value is its newest row; a deletion is a
tombstone row that keeps the last value so a ``DELETED`` watch event can carry it. Listing at an older
revision takes, per key, the newest row at or below it. Compaction removes superseded rows and old
tombstones, keeping a window of recent revisions for watches that resume.

One dedicated writer thread owns the write connection and commits in batches ("group commit"): requests
that arrive while a commit is being made durable share the next ``fsync``. ``synchronous=FULL`` in WAL
mode means a write is acknowledged only after its commit is on disk. Compare-and-swap checks use an
in-memory index of key -> (mod_revision, create_revision) owned by the writer thread, so a write costs
one ``INSERT``. Reads of history run on a separate connection in a worker thread.

The database file is created with mode 0600 in a 0700 directory (SQLite gives its WAL and shared-memory
files the database file's mode): it holds every credential of the server.

A commit that fails is fatal to the store: the writer's index may no longer match the file (another
process wrote it: ``UNIQUE constraint failed: log.rev``; the disk failed), so answering further writes
from it could lose or fork data. The store logs the failure, fails the writes queued behind it and every
later one, and :meth:`SQLiteStore.wait_failed` returns, so the process stops (``vplane`` server commands
exit non-zero) and a restart reloads the index from the file.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import structlog

from vplane.storage.interface import (
    CompactedError,
    Event,
    KeyExistsError,
    KeyNotFoundError,
    KeyValue,
    RevisionMismatchError,
    StorageError,
    StoreClosedError,
    Subscriber,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS log (
    rev INTEGER PRIMARY KEY,
    key TEXT NOT NULL,
    create_rev INTEGER NOT NULL,
    prev_rev INTEGER NOT NULL,
    deleted INTEGER NOT NULL,
    value BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS log_key_rev ON log (key, rev);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""

_RANGE_AT = """
SELECT l.key, l.value, l.rev, l.create_rev FROM log AS l
JOIN (SELECT key, MAX(rev) AS r FROM log WHERE key >= ? AND key < ? AND rev <= ? GROUP BY key) AS m
  ON l.rev = m.r
WHERE l.deleted = 0
ORDER BY l.key
"""

_HISTORY = """
SELECT l.rev, l.key, l.create_rev, l.deleted, l.value, p.rev, p.create_rev, p.value
FROM log AS l LEFT JOIN log AS p ON p.rev = l.prev_rev
WHERE l.rev > ? ORDER BY l.rev
"""

log = structlog.get_logger("vplane.storage.sqlite")

COMPACT_BATCH = 1000
"""Revisions compacted per writer-thread step, so a large compaction never stalls writes for long."""


def prefix_end(prefix: str) -> str:
    """The smallest string greater than every string starting with ``prefix``."""
    if not prefix:
        return "\U0010ffff"
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


@dataclass(slots=True)
class _Op:
    kind: Literal["create", "update", "delete", "compact"]
    key: str
    value: bytes
    expected: int
    future: asyncio.Future[Any]


class SQLiteStore:
    """A :class:`~vplane.storage.interface.Store` in one SQLite file (WAL, durable commits)."""

    def __init__(
        self,
        path: Path,
        *,
        batch_max: int = 512,
        durable: bool = True,
        shared: bool = False,
        poll_interval: float = 0.05,
        writes_in_flight: Callable[[], int] | None = None,
        commit_linger: float = 0.005,
    ) -> None:
        self.path = path
        self.batch_max = batch_max
        self.durable = durable
        self.shared = shared
        """Other processes write the same file (replicas of one tenant): catch up on their rows."""
        self.poll_interval = poll_interval
        self.writes_in_flight = writes_in_flight
        """How many writes the caller has under way, submitted or not (the API server's write requests).

        While some of them have not reached the store yet, the writer waits up to ``commit_linger`` seconds
        for them, so one commit and one fsync serve them all (group commit, like PostgreSQL's
        ``commit_delay``). Without it every commit takes just what is queued."""
        self._unresolved = 0  # submitted writes not answered yet; changed on the event loop only
        self.commit_linger = commit_linger
        self.commits = 0
        """Transactions committed so far (one per batch)."""
        self._queue: queue.SimpleQueue[_Op | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._index: dict[str, KeyValue] = {}
        self._revision = 0
        self._compacted = 0
        self._subscriber: Subscriber | None = None
        self._subscribed_after = 0
        self._reader: sqlite3.Connection | None = None
        self._read_lock = threading.Lock()
        self._closed = False
        self._failure: StorageError | None = None
        """Set by the writer thread when a commit failed; from then on every write fails."""
        self._failed: asyncio.Event | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._thread is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._failed = asyncio.Event()
        await asyncio.to_thread(self._create_private)
        ready: asyncio.Future[None] = self._loop.create_future()
        self._thread = threading.Thread(target=self._writer_main, args=(ready,), name="vplane-sqlite-writer")
        self._thread.daemon = True
        self._thread.start()
        await ready
        self._reader = await asyncio.to_thread(self._connect)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:
            self._queue.put(None)
            await asyncio.to_thread(self._thread.join)
        if self._reader is not None:
            self._reader.close()

    def _create_private(self) -> None:
        """Create the directory 0700 and the database file 0600 before SQLite opens it, so it is never
        readable by others (SQLite creates the WAL and shm files with the database file's mode)."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))

    @property
    def failure(self) -> StorageError | None:
        """Why the writer stopped, once a commit failed."""
        return self._failure

    def problem(self) -> str | None:
        return None if self._failure is None else f"the store refuses writes: {self._failure}"

    async def wait_failed(self) -> StorageError:
        """Return when a commit has failed and the store refuses writes (a process stops on it)."""
        assert self._failed is not None, "store not started"
        await self._failed.wait()
        assert self._failure is not None
        return self._failure

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=" + ("FULL" if self.durable else "NORMAL"))
        conn.execute("PRAGMA busy_timeout=30000")
        return conn

    # -- properties ------------------------------------------------------------------------------

    @property
    def revision(self) -> int:
        return self._revision

    @property
    def compacted_revision(self) -> int:
        return self._compacted

    # -- reads -----------------------------------------------------------------------------------

    async def snapshot(self) -> tuple[list[KeyValue], int]:
        """Served from the writer's index, so the cache shares its value bytes instead of copying them."""
        if self._subscriber is not None:
            raise StorageError("snapshot is only taken before subscribing")
        return sorted(self._index.values(), key=lambda kv: kv.key), self._revision

    def subscribe(self, callback: Subscriber, after: int) -> None:
        if after != self._revision:
            raise StorageError("subscribe must start at the current revision of an idle store")
        self._subscriber = callback
        self._subscribed_after = after

    async def range_at(
        self, prefix: str, revision: int, *, start: str = "", limit: int = 0
    ) -> list[KeyValue]:
        if revision < self._compacted:
            raise CompactedError(revision, self._compacted)
        low = max(prefix, start)
        sql = _RANGE_AT + (f" LIMIT {int(limit)}" if limit > 0 else "")
        rows = await self._read(sql, (low, prefix_end(prefix), revision))
        if revision < self._compacted:  # compaction raced with the read
            raise CompactedError(revision, self._compacted)
        return [KeyValue(key, bytes(value), rev, create) for key, value, rev, create in rows]

    async def history(self, after: int, limit: int = 0) -> list[Event]:
        if after < self._compacted:
            raise CompactedError(after, self._compacted)
        sql = _HISTORY + (f" LIMIT {int(limit)}" if limit > 0 else "")
        rows = await self._read(sql, (after,))
        if after < self._compacted:
            raise CompactedError(after, self._compacted)
        events: list[Event] = []
        for rev, key, create, deleted, value, prev_rev, prev_create, prev_value in rows:
            kv = KeyValue(key, bytes(value), rev, create)
            prev = KeyValue(key, bytes(prev_value), prev_rev, prev_create) if prev_rev is not None else None
            events.append(Event("DELETE" if deleted else "PUT", kv, prev))
        return events

    async def _read(self, sql: str, params: Sequence[Any]) -> list[Any]:
        reader = self._reader
        if reader is None or self._closed:
            raise StoreClosedError("store is closed")

        def run() -> list[Any]:
            with self._read_lock:
                return reader.execute(sql, params).fetchall()

        return await asyncio.to_thread(run)

    # -- writes ----------------------------------------------------------------------------------

    async def create(self, key: str, value: bytes) -> KeyValue:
        result: KeyValue = await self._submit("create", key, value, 0)
        return result

    async def update(self, key: str, value: bytes, expected_revision: int) -> KeyValue:
        result: KeyValue = await self._submit("update", key, value, expected_revision)
        return result

    async def delete(self, key: str, expected_revision: int) -> KeyValue:
        result: KeyValue = await self._submit("delete", key, b"", expected_revision)
        return result

    async def compact(self, revision: int) -> None:
        revision = min(revision, self._revision)
        while self._compacted < revision:
            step = min(revision, self._compacted + COMPACT_BATCH)
            await self._submit("compact", "", b"", step)

    def _submit(
        self, kind: Literal["create", "update", "delete", "compact"], key: str, value: bytes, expected: int
    ) -> asyncio.Future[Any]:
        if self._failure is not None:
            raise StorageError(f"store refuses writes after a failed commit ({self._failure})")
        if self._closed or self._loop is None:
            raise StoreClosedError("store is closed")
        future: asyncio.Future[Any] = self._loop.create_future()
        self._unresolved += 1
        self._queue.put(_Op(kind, key, value, expected, future))
        return future

    # -- writer thread ---------------------------------------------------------------------------

    def _writer_main(self, ready: asyncio.Future[None]) -> None:
        loop = self._loop
        assert loop is not None
        try:
            conn = self._connect()
            conn.executescript(_SCHEMA)
            self._load(conn)
        except BaseException as exc:  # reported to the awaiting coroutine
            loop.call_soon_threadsafe(_fail, ready, exc)
            return
        loop.call_soon_threadsafe(_succeed, ready, None)
        try:
            while True:
                try:
                    op = self._queue.get(timeout=self.poll_interval) if self.shared else self._queue.get()
                except queue.Empty:
                    self._catch_up(conn)
                    continue
                if op is None:
                    break
                batch, stop = self._gather(op)
                if not self._commit_batch(conn, batch) or stop:
                    break
        finally:
            conn.close()
            self._fail_pending()

    def _gather(self, first: _Op) -> tuple[list[_Op], bool]:
        """The batch to commit after ``first``: what is queued, plus the writes still on their way when
        the caller says more are under way (group commit); True when the store is closing."""
        batch = [first]
        deadline: float | None = None
        while len(batch) < self.batch_max:
            try:
                nxt = self._queue.get_nowait()
            except queue.Empty:
                hint = self.writes_in_flight
                if hint is None or self.commit_linger <= 0 or hint() <= self._unresolved:
                    break  # every write under way is queued or committed: waiting would gain nothing
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.commit_linger
                if now >= deadline:
                    break
                try:
                    nxt = self._queue.get(timeout=deadline - now)
                except queue.Empty:
                    break
            if nxt is None:
                return batch, True
            batch.append(nxt)
        return batch, False

    def _foreign_rows(self, conn: sqlite3.Connection) -> list[Event]:
        """Apply rows other processes committed since our last revision; return their events."""
        events: list[Event] = []
        for rev, key, create, deleted, value in conn.execute(
            "SELECT rev, key, create_rev, deleted, value FROM log WHERE rev > ? ORDER BY rev",
            (self._revision,),
        ):
            prev = self._index.get(key)
            kv = KeyValue(key, bytes(value), rev, create)
            if deleted:
                self._index.pop(key, None)
                events.append(Event("DELETE", kv, prev))
            else:
                self._index[key] = kv
                events.append(Event("PUT", kv, prev))
            self._revision = rev
        row = conn.execute("SELECT value FROM meta WHERE name = 'compact_rev'").fetchone()
        if row is not None:
            self._compacted = max(self._compacted, int(row[0]))
        return events

    def _catch_up(self, conn: sqlite3.Connection) -> None:
        loop = self._loop
        assert loop is not None
        try:
            conn.execute("BEGIN")
            events = self._foreign_rows(conn)
            conn.execute("COMMIT")
        except sqlite3.Error:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            return
        if events:
            loop.call_soon_threadsafe(self._deliver, events, [])

    def _load(self, conn: sqlite3.Connection) -> None:
        row = conn.execute("SELECT value FROM meta WHERE name = 'compact_rev'").fetchone()
        self._compacted = int(row[0]) if row else 0
        (max_rev,) = conn.execute("SELECT COALESCE(MAX(rev), 0) FROM log").fetchone()
        self._revision = max(int(max_rev), self._compacted)
        for key, value, rev, create in conn.execute(_RANGE_AT, ("", prefix_end(""), self._revision)):
            self._index[key] = KeyValue(key, bytes(value), rev, create)

    def _fail_pending(self) -> None:
        loop = self._loop
        assert loop is not None
        while True:
            try:
                op = self._queue.get_nowait()
            except queue.Empty:
                return
            if op is not None:
                error = self._failure or StoreClosedError("store is closed")
                loop.call_soon_threadsafe(_fail, op.future, error)

    def _commit_batch(self, conn: sqlite3.Connection, batch: list[_Op]) -> bool:
        """Commit one batch and answer its writers; False when the commit failed (the writer stops)."""
        loop = self._loop
        assert loop is not None
        events: list[Event] = []
        results: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
        staged: dict[str, KeyValue | None] = {}
        revision = self._revision
        compacted = self._compacted
        rows: list[tuple[int, str, int, int, int, bytes]] = []
        foreign: list[Event] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            if self.shared:
                # The write lock is held: every row other processes committed is visible and no new one
                # can appear, so our revisions follow theirs and events stay in revision order.
                foreign = self._foreign_rows(conn)
                events.extend(foreign)
                revision = self._revision
                compacted = self._compacted
            for op in batch:
                if op.kind == "compact":
                    compacted = self._compact_step(conn, op.expected, compacted)
                    results.append((op.future, None, None))
                    continue
                current = staged[op.key] if op.key in staged else self._index.get(op.key)
                try:
                    kv, event = self._apply(op, current, revision + 1)
                except StorageError as exc:
                    results.append((op.future, None, exc))
                    continue
                revision += 1
                deleted = event.type == "DELETE"
                prev_rev = current.mod_revision if current is not None else 0
                rows.append((revision, op.key, kv.create_revision, prev_rev, int(deleted), kv.value))
                staged[op.key] = None if deleted else kv
                events.append(event)
                results.append((op.future, kv, None))
            if rows:
                conn.executemany("INSERT INTO log VALUES (?, ?, ?, ?, ?, ?)", rows)
            conn.execute("COMMIT")
        except BaseException as exc:  # every waiter learns the batch failed
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            error = StorageError(f"commit failed: {exc}")
            self._failure = error
            failed: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = [
                (op.future, None, error) for op in batch
            ]
            loop.call_soon_threadsafe(self._deliver, foreign, failed)
            loop.call_soon_threadsafe(self._report_failure, error)
            return False
        for key, entry in staged.items():
            if entry is None:
                self._index.pop(key, None)
            else:
                self._index[key] = entry
        self._revision = revision
        self._compacted = compacted
        self.commits += 1  # before the answers go out, so a caller that got one sees the count
        loop.call_soon_threadsafe(self._deliver, events, results)
        return True

    def _report_failure(self, error: StorageError) -> None:
        """Runs on the loop: say it loudly once, and wake whoever stops the process."""
        log.error("store writer failed; refusing every further write", path=str(self.path), error=str(error))
        if self._failed is not None:
            self._failed.set()

    @staticmethod
    def _apply(op: _Op, current: KeyValue | None, revision: int) -> tuple[KeyValue, Event]:
        """The compare-and-swap decision for one write; pure, so a failed op leaves no trace."""
        if op.kind == "create":
            if current is not None:
                raise KeyExistsError(op.key)
            kv = KeyValue(op.key, op.value, revision, revision)
            return kv, Event("PUT", kv, None)
        if current is None:
            raise KeyNotFoundError(op.key)
        if op.expected and current.mod_revision != op.expected:
            raise RevisionMismatchError(op.key, current)
        if op.kind == "update":
            kv = KeyValue(op.key, op.value, revision, current.create_revision)
            return kv, Event("PUT", kv, current)
        kv = KeyValue(op.key, current.value, revision, current.create_revision)
        return kv, Event("DELETE", kv, current)

    def _compact_step(self, conn: sqlite3.Connection, target: int, compacted: int) -> int:
        if target <= compacted:
            return compacted
        conn.execute(
            "DELETE FROM log WHERE rev IN (SELECT prev_rev FROM log WHERE rev > ? AND rev <= ? AND prev_rev != 0)",
            (compacted, target),
        )
        conn.execute("DELETE FROM log WHERE deleted = 1 AND rev <= ?", (target,))
        conn.execute("INSERT OR REPLACE INTO meta (name, value) VALUES ('compact_rev', ?)", (target,))
        return target

    def _deliver(
        self, events: list[Event], results: list[tuple[asyncio.Future[Any], Any, BaseException | None]]
    ) -> None:
        """Runs on the loop: publish events first, then wake the writers (read-your-writes)."""
        if events and self._subscriber is not None:
            self._subscriber(events)
        self._unresolved -= len(results)
        for future, value, error in results:
            if future.done():
                continue
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(value)


def _succeed(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _fail(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
