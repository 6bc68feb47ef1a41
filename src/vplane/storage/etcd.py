"""A :class:`~vplane.storage.interface.Store` in etcd, for API server replicas on several machines (HA).

The interface is etcd's model already (one global revision, create and mod revisions per key,
compare-and-swap, compaction), so each operation is one etcd call: creates and updates are transactions
that compare ``create_revision == 0`` or ``mod_revision == expected``; deletes return the deleted value;
reads at a revision are ranges at that revision; compaction is etcd's. It talks to etcd's v3 JSON gateway
(``/v3/kv/*``, ``/v3/watch``) with aiohttp: one HTTP transport, no gRPC stack, and the gateway is part of
every etcd release since 3.3. Keys live under ``prefix`` (kube-apiserver's ``--etcd-prefix``, default
``/registry``) so several clusters can share one etcd.

Events reach the subscriber from one watch on the prefix, in revision order, including every other
replica's writes; a write returns once etcd committed it, and :class:`~vplane.storage.cache.Cache` then
waits for its event (``wait_for``), which keeps read-your-writes. A watch that breaks resumes from the
last delivered revision on the next endpoint; one that finds its revision compacted away cannot recover
the events it missed, so the store fails and the process stops (its supervisor restarts it with a fresh
snapshot), as a SQLite store does on a failed commit.

The compacted revision is kept in etcd under ``<prefix>-compact-revision``, outside the watched prefix,
like kube-apiserver's ``compact_rev_key``, so a replica that starts knows it without probing.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import orjson
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
from vplane.storage.sqlite import prefix_end

log = structlog.get_logger(__name__)

COMPACTED = "required revision has been compacted"
FUTURE = "required revision is a future revision"
PAGE = 1000
"""Keys per range request while taking the snapshot (etcd caps one response's size)."""


class EtcdUnavailable(StorageError):
    """No endpoint answered (every write and read fails with this until one does)."""


def _b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


def _kv(raw: dict[str, Any], strip: int) -> KeyValue:
    return KeyValue(
        base64.b64decode(raw["key"]).decode()[strip:],
        base64.b64decode(raw.get("value", "")),
        int(raw.get("mod_revision", 0)),
        int(raw.get("create_revision", 0)),
    )


class EtcdStore:
    """See the module docstring."""

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        prefix: str = "/registry",
        ssl_context: ssl.SSLContext | None = None,
        request_timeout: float = 10.0,
        retry_interval: float = 1.0,
    ) -> None:
        if not endpoints:
            raise ValueError("etcd storage needs at least one endpoint")
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self.root = prefix.rstrip("/")
        """Every key this store writes starts with it; the API server's keys start with ``/``."""
        self.compact_key = self.root + "-compact-revision"
        self.ssl_context = ssl_context
        self.request_timeout = request_timeout
        self.retry_interval = retry_interval
        self._session: aiohttp.ClientSession | None = None
        self._current = 0
        """Index into ``endpoints`` of the one that answered last."""
        self._revision = 0
        """The newest revision this process has seen committed (its writes' and its watch's)."""
        self._delivered = 0
        """The revision of the last event handed to the subscriber."""
        self._compacted = 0
        self._subscriber: Subscriber | None = None
        self._watch: asyncio.Task[None] | None = None
        self._failure: StorageError | None = None
        self._unreachable: str | None = None
        """Why the last call found no endpoint answering; cleared by the next one that gets an answer."""
        self._failed = asyncio.Event()
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._session is not None:
            return
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self.ssl_context if self.ssl_context is not None else False),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.request_timeout),
        )
        found = await self._call("/v3/kv/range", {"key": _b64(self.compact_key)})
        self._revision = int(found["header"]["revision"])
        kvs = found.get("kvs") or []
        if kvs:
            self._compacted = int(base64.b64decode(kvs[0]["value"]))

    async def close(self) -> None:
        self._closed = True
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        if self._session is not None:
            await self._session.close()

    @property
    def failure(self) -> StorageError | None:
        return self._failure

    def problem(self) -> str | None:
        if self._failure is not None:
            return str(self._failure)
        return self._unreachable

    async def wait_failed(self) -> StorageError:
        """Return when the store has failed for good (a server process stops on it)."""
        await self._failed.wait()
        assert self._failure is not None
        return self._failure

    @property
    def revision(self) -> int:
        return self._revision

    @property
    def compacted_revision(self) -> int:
        return self._compacted

    # -- transport -------------------------------------------------------------------------------

    async def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """One gateway call, tried on each endpoint in turn; etcd's own errors are raised as they are."""
        if self._closed or self._session is None:
            raise StoreClosedError("store is closed")
        last: BaseException | None = None
        for attempt in range(len(self.endpoints)):
            index = (self._current + attempt) % len(self.endpoints)
            try:
                async with asyncio.timeout(self.request_timeout):
                    async with self._session.post(
                        self.endpoints[index] + path, data=orjson.dumps(body)
                    ) as response:
                        data = await response.read()
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                last = exc
                continue
            self._current = index
            self._unreachable = None
            doc: dict[str, Any] = orjson.loads(data) if data else {}
            if response.status != 200 or "error" in doc:
                message = str(doc.get("message") or doc.get("error") or f"HTTP {response.status}")
                if "unavailable" in message or response.status == 503:
                    last = StorageError(message)
                    continue
                raise _etcd_error(message)
            return doc
        self._unreachable = f"etcd unavailable: {last}"
        raise EtcdUnavailable(self._unreachable)

    # -- reads -----------------------------------------------------------------------------------

    async def snapshot(self) -> tuple[list[KeyValue], int]:
        """Every live key at one revision, read in pages pinned to it."""
        revision = 0
        items: list[KeyValue] = []
        start = self.root + "/"
        end = _b64(prefix_end(self.root + "/"))
        while True:
            body: dict[str, Any] = {"key": _b64(start), "range_end": end, "limit": PAGE}
            if revision:
                body["revision"] = revision
            page = await self._call("/v3/kv/range", body)
            revision = revision or int(page["header"]["revision"])
            kvs = page.get("kvs") or []
            items.extend(_kv(raw, len(self.root)) for raw in kvs)
            if not page.get("more") or not kvs:
                break
            start = base64.b64decode(kvs[-1]["key"]).decode() + "\x00"
        self._revision = max(self._revision, revision)
        return items, revision

    def subscribe(self, callback: Subscriber, after: int) -> None:
        self._subscriber = callback
        self._delivered = after
        self._watch = asyncio.create_task(self._watch_forever())

    async def range_at(
        self, prefix: str, revision: int, *, start: str = "", limit: int = 0
    ) -> list[KeyValue]:
        if revision < self._compacted:
            raise CompactedError(revision, self._compacted)
        body: dict[str, Any] = {
            "key": _b64(self.root + max(prefix, start)),
            "range_end": _b64(self.root + prefix_end(prefix)),
            "revision": revision,
        }
        if limit > 0:
            body["limit"] = limit
        try:
            found = await self._call("/v3/kv/range", body)
        except _Compacted as exc:
            raise CompactedError(revision, max(self._compacted, revision)) from exc
        return [_kv(raw, len(self.root)) for raw in found.get("kvs") or []]

    async def history(self, after: int, limit: int = 0) -> list[Event]:
        """Events after ``after`` up to now, read with a watch that ends at the current revision."""
        if after < self._compacted:
            raise CompactedError(after, self._compacted)
        now = int((await self._call("/v3/kv/range", {"key": _b64(self.compact_key)}))["header"]["revision"])
        events: list[Event] = []
        if now <= after:
            return events
        async with contextlib.aclosing(self._watch_stream(after)) as stream:
            async for batch in stream:
                for event in batch:
                    if event.revision > now or (limit and len(events) >= limit):
                        return events
                    events.append(event)
                if batch[-1].revision >= now:
                    break
        return events

    # -- writes ----------------------------------------------------------------------------------

    async def create(self, key: str, value: bytes) -> KeyValue:
        full = _b64(self.root + key)
        result = await self._call(
            "/v3/kv/txn",
            {
                "compare": [{"key": full, "target": "CREATE", "result": "EQUAL", "create_revision": 0}],
                "success": [{"request_put": {"key": full, "value": _b64(value)}}],
            },
        )
        if not result.get("succeeded"):
            raise KeyExistsError(key)
        revision = self._committed(result)
        return KeyValue(key, value, revision, revision)

    async def update(self, key: str, value: bytes, expected_revision: int) -> KeyValue:
        full = _b64(self.root + key)
        result = await self._swap(
            key, expected_revision, {"request_put": {"key": full, "value": _b64(value), "prev_kv": True}}
        )
        put = result["responses"][0]["response_put"]
        return KeyValue(key, value, self._committed(result), int(put["prev_kv"]["create_revision"]))

    async def _swap(self, key: str, expected_revision: int, operation: dict[str, Any]) -> dict[str, Any]:
        """``operation`` on ``key`` if it exists (and was last changed at ``expected_revision``, when
        given), as one transaction whose failure branch reads the key, to say which condition failed."""
        full = _b64(self.root + key)
        compare: list[dict[str, Any]] = [
            {"key": full, "target": "CREATE", "result": "GREATER", "create_revision": 0}
        ]
        if expected_revision:
            compare.append(
                {"key": full, "target": "MOD", "result": "EQUAL", "mod_revision": expected_revision}
            )
        result = await self._call(
            "/v3/kv/txn",
            {"compare": compare, "success": [operation], "failure": [{"request_range": {"key": full}}]},
        )
        if not result.get("succeeded"):
            raise self._refused(key, result)
        return result

    async def delete(self, key: str, expected_revision: int) -> KeyValue:
        full = _b64(self.root + key)
        result = await self._swap(
            key, expected_revision, {"request_delete_range": {"key": full, "prev_kv": True}}
        )
        prev = result["responses"][0]["response_delete_range"]["prev_kvs"][0]
        return KeyValue(
            key,
            base64.b64decode(prev.get("value", "")),
            self._committed(result),
            int(prev["create_revision"]),
        )

    def _committed(self, result: dict[str, Any]) -> int:
        revision = int(result["header"]["revision"])
        self._revision = max(self._revision, revision)
        return revision

    def _refused(self, key: str, result: dict[str, Any]) -> StorageError:
        kvs = result["responses"][0]["response_range"].get("kvs") or []
        if not kvs:
            return KeyNotFoundError(key)
        return RevisionMismatchError(key, _kv(kvs[0], len(self.root)))

    async def compact(self, revision: int) -> None:
        """Record the target outside the watched prefix, then compact; a replica that finds the revision
        already compacted (another replica's compactor) only learns it."""
        revision = min(revision, self._revision)
        if revision <= self._compacted:
            return
        await self._call("/v3/kv/put", {"key": _b64(self.compact_key), "value": _b64(str(revision))})
        try:
            await self._call("/v3/kv/compaction", {"revision": revision})
        except _Compacted:
            pass
        self._compacted = max(self._compacted, revision)

    # -- watch -----------------------------------------------------------------------------------

    async def _watch_forever(self) -> None:
        """Deliver every event after the subscription's revision; resume from the last one delivered where
        the stream broke (not from ``revision``, which this process's writes move ahead of their events);
        fail if etcd compacted past it."""
        while not self._closed:
            try:
                async for batch in self._watch_stream(self._delivered):
                    if batch and self._subscriber is not None:
                        self._delivered = batch[-1].revision
                        self._revision = max(self._revision, self._delivered)
                        self._subscriber(batch)
            except _Compacted as exc:
                self._fail(StorageError(f"watch fell behind compaction: {exc}"))
                return
            except (aiohttp.ClientError, TimeoutError, OSError, StorageError) as exc:
                # close() cancels this task, so a break seen here is a real one
                log.warning("etcd watch broke; resuming", after=self._delivered, error=str(exc))
                self._unreachable = f"etcd watch broke: {exc}"
                self._current = (self._current + 1) % len(self.endpoints)
            await asyncio.sleep(self.retry_interval)

    async def _watch_stream(self, after: int) -> AsyncGenerator[list[Event], None]:
        """Batches of events (one etcd watch response each: whole revisions) with revision > ``after``."""
        if self._session is None:
            raise StoreClosedError("store is closed")
        body = {
            "create_request": {
                "key": _b64(self.root + "/"),
                "range_end": _b64(prefix_end(self.root + "/")),
                "start_revision": after + 1,
                "prev_kv": True,
            }
        }
        endpoint = self.endpoints[self._current]
        async with self._session.post(endpoint + "/v3/watch", data=orjson.dumps(body)) as response:
            if response.status != 200:
                raise StorageError(f"etcd watch: HTTP {response.status}")
            self._unreachable = None  # the watch is (back) up: what the health check follows
            async for line in response.content:
                if not line.strip():
                    continue
                doc = orjson.loads(line)
                if "error" in doc:
                    raise _etcd_error(str(doc["error"].get("message") or doc["error"]))
                result = doc.get("result") or {}
                if result.get("compact_revision") and int(result["compact_revision"]) > after:
                    raise _Compacted(f"compacted at {result['compact_revision']}, watched after {after}")
                if result.get("canceled"):
                    raise StorageError(f"etcd watch canceled: {result.get('cancel_reason', '')}")
                events = [self._event(raw) for raw in result.get("events") or []]
                if events:
                    after = events[-1].revision
                    yield events

    def _event(self, raw: dict[str, Any]) -> Event:
        strip = len(self.root)
        prev = _kv(raw["prev_kv"], strip) if raw.get("prev_kv") else None
        kv = _kv(raw["kv"], strip)
        if raw.get("type") == "DELETE":
            # etcd's delete event has the key and revision only; ours carries the last value.
            value = prev.value if prev is not None else b""
            create = prev.create_revision if prev is not None else kv.mod_revision
            return Event("DELETE", KeyValue(kv.key, value, kv.mod_revision, create), prev)
        return Event("PUT", kv, prev)

    def _fail(self, error: StorageError) -> None:
        log.error("etcd store failed; the process must restart to read a fresh snapshot", error=str(error))
        self._failure = error
        self._failed.set()


class _Compacted(StorageError):
    pass


def _etcd_error(message: str) -> StorageError:
    if COMPACTED in message:
        return _Compacted(message)
    return StorageError(message)


def ssl_context(cafile: Path | None, certfile: Path | None, keyfile: Path | None) -> ssl.SSLContext | None:
    """kube-apiserver's ``--etcd-cafile``/``--etcd-certfile``/``--etcd-keyfile``: TLS to etcd, with a
    client certificate when given; None for plain HTTP endpoints."""
    if cafile is None and certfile is None:
        return None
    context = ssl.create_default_context(cafile=str(cafile) if cafile else None)
    if certfile is not None:
        context.load_cert_chain(str(certfile), str(keyfile) if keyfile else None)
    return context
