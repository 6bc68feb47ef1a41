"""A :class:`~vplane.storage.interface.Store` in etcd, for API server replicas on several machines (HA).

The interface is etcd's model already (one global revision, create and mod revisions per key,
compare-and-swap, compaction), so each operation is one etcd call: creates and updates are transactions
that compare ``create_revision == 0`` or ``mod_revision == expected``; deletes return the deleted value;
reads at a revision are ranges at that revision; compaction is etcd's. It talks to etcd's v3 JSON gateway
(``/v3/kv/*``, ``/v3/watch``) with aiohttp: one HTTP transport, no gRPC stack, and the gateway is part of
every etcd release since 3.4 (3.3 served it under ``/v3beta``). Keys live under ``prefix``
(kube-apiserver's ``--etcd-prefix``, default ``/registry``) so several clusters can share one etcd.

Events reach the subscriber from one watch on the prefix, in revision order, including every other
replica's writes; a write returns once etcd committed it, and :class:`~vplane.storage.cache.Cache` then
waits for its event (``wait_for``), which keeps read-your-writes. A watch that breaks resumes from the
last delivered revision on the next endpoint, and so does one that goes silent: a watch quiet for
``watch_check`` seconds gets a mark written (``<prefix>-progress``, inside its range), and one that has not
answered for twice that is opened again, since a connection that died without closing (a host gone, a
dropped NAT entry) would otherwise leave the replica's cache stale for good (etcd's own clients use gRPC
keepalive pings for this; the JSON gateway has none). One that finds its revision compacted away cannot recover
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
        watch_check: float = 10.0,
    ) -> None:
        if not endpoints:
            raise ValueError("etcd storage needs at least one endpoint")
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self.root = prefix.rstrip("/")
        """Every key this store writes starts with it; the API server's keys start with ``/``."""
        self.compact_key = self.root + "-compact-revision"
        self.progress_key = self.root + "-progress"
        """Written by :meth:`history` to mark how far its watch must read (outside the prefix, so no
        replica's cache holds it)."""
        self.ssl_context = ssl_context
        self.request_timeout = request_timeout
        self.retry_interval = retry_interval
        self.watch_check = watch_check
        """A watch silent this long gets a mark; silent twice as long, it is opened again."""
        self._heard = 0.0
        """Loop time of the watch's last answer (an event or a mark)."""
        self._heartbeat: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None
        self._current = 0
        """Index into ``endpoints`` of the one that answered last."""
        self._revision = 0
        """The newest revision this process has seen committed (its writes' and its watch's)."""
        self._delivered = 0
        """The revision of the last event handed to the subscriber."""
        self._seen = 0
        """The newest revision the watch has read past (an event or a mark): where a reopened one starts."""
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
        # https endpoints are verified against the system's CAs unless a CA file is given, never skipped.
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self.ssl_context if self.ssl_context is not None else True),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.request_timeout),
        )
        try:
            found = await self._compact_record()
        except BaseException:
            session, self._session = self._session, None
            await session.close()  # a later start() tries again from scratch
            raise
        self._revision = int(found["header"]["revision"])

    async def close(self) -> None:
        self._closed = True
        try:
            for task in (self._heartbeat, self._watch):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(BaseException):  # its failure, if any, was reported by _fail
                        await task
        finally:
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
        """One read, tried on each endpoint in turn; etcd's own errors are raised as they are."""
        doc, _ = await self._exchange(path, body, write=False)
        return doc

    async def _write(self, path: str, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """One write, and whether an earlier attempt of it may have been applied.

        A write moves to the next endpoint only when it could not connect (nothing was sent). A write whose
        connection closed before the answer (most often a kept-alive connection the server had closed, as
        etcd does when it restarts) is sent once more, and reported as maybe applied twice: the caller
        checks what a refused compare-and-swap found. A write that was sent and then timed out or got a 503
        may have been committed; sent again, a create would read "exists" and a compare-and-swap "conflict"
        for its own success, and an unconditional update would apply twice: it fails with
        :class:`EtcdOutcomeUnknown`, as an etcd client's "request timed out". The watch delivers the write
        if it was committed."""
        return await self._exchange(path, body, write=True)

    async def _exchange(self, path: str, body: dict[str, Any], *, write: bool) -> tuple[dict[str, Any], bool]:
        if self._closed or self._session is None:
            raise StoreClosedError("store is closed")
        last: BaseException | None = None
        maybe_applied = False
        attempts = [(self._current + n) % len(self.endpoints) for n in range(len(self.endpoints))]
        while attempts:
            index = attempts.pop(0)
            try:
                async with asyncio.timeout(self.request_timeout):
                    async with self._session.post(
                        self.endpoints[index] + path, data=orjson.dumps(body)
                    ) as response:
                        data = await response.read()
            except aiohttp.ClientConnectorError as exc:
                last = exc
                continue
            except aiohttp.ServerDisconnectedError as exc:
                last = exc
                if write and not maybe_applied:
                    maybe_applied = True
                    attempts.insert(0, index)  # on a fresh connection
                continue
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                if write:
                    raise EtcdOutcomeUnknown(f"etcd write outcome unknown: {_describe(exc)}") from exc
                last = exc
                continue
            self._current = index
            self._unreachable = None
            try:
                doc: dict[str, Any] = orjson.loads(data) if data else {}
            except orjson.JSONDecodeError:  # a text/plain 404, a proxy's HTML page
                doc = {"message": f"HTTP {response.status}: {data[:200].decode(errors='replace')}"}
            if response.status != 200 or "error" in doc:
                message = str(doc.get("message") or doc.get("error") or f"HTTP {response.status}")
                if "unavailable" in message or response.status == 503:
                    if write:
                        raise EtcdOutcomeUnknown(f"etcd write outcome unknown: {message}")
                    last = StorageError(message)
                    continue
                if response.status != 200 and "error" not in doc and "code" not in doc:
                    # Not etcd's answer (a proxy, a wrong URL): the next endpoint, unless a write may
                    # have passed through to etcd before the failure.
                    if write and response.status >= 500:
                        raise EtcdOutcomeUnknown(f"etcd write outcome unknown: {message}")
                    last = StorageError(message)
                    continue
                raise _etcd_error(message)
            return doc, maybe_applied
        self._unreachable = f"etcd unavailable: {_describe(last) if last is not None else 'no endpoint'}"
        raise EtcdUnavailable(self._unreachable)

    async def _compact_record(self) -> dict[str, Any]:
        """Read ``<prefix>-compact-revision`` and learn the compacted revision from it (another replica's
        compactor moves it); the answer's header carries etcd's current revision."""
        found = await self._call("/v3/kv/range", {"key": _b64(self.compact_key)})
        kvs = found.get("kvs") or []
        if kvs:
            self._compacted = max(self._compacted, int(base64.b64decode(kvs[0]["value"])))
        return found

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
        self._seen = after
        self._heard = asyncio.get_running_loop().time()
        self._watch = asyncio.create_task(self._watch_forever())
        self._heartbeat = asyncio.create_task(self._mark_when_silent())

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
            raise await self._compacted_error(revision) from exc
        return [_kv(raw, len(self.root)) for raw in found.get("kvs") or []]

    async def _compacted_error(self, revision: int, compacted: int = 0) -> CompactedError:
        """``revision`` was compacted by someone (often another replica's compactor): the error names the
        compacted revision as recorded, which this replica learns too."""
        self._compacted = max(self._compacted, compacted)
        with contextlib.suppress(StorageError):
            await self._compact_record()
        return CompactedError(revision, max(self._compacted, revision + 1))

    async def history(self, after: int, limit: int = 0) -> list[Event]:
        """Events after ``after`` up to now, read with a watch from ``after`` that ends at a mark.

        The mark is a write of ``<prefix>-progress`` (beside the prefix, inside the range this watch
        covers): every event before it has been seen once its own event arrives. Ending at etcd's current
        revision instead would hang whenever that revision changed a key outside the range (another
        cluster's); etcd's progress requests cannot be used through the JSON gateway over HTTP/1.1 (it
        answers once the request body ends) and, before etcd 3.5.8, may answer ahead of pending events."""
        if after < self._compacted:
            raise CompactedError(after, self._compacted)
        written, _ = await self._write(
            "/v3/kv/put", {"key": _b64(self.progress_key), "value": _b64(str(after))}
        )
        mark = self._committed(written)
        events: list[Event] = []
        try:
            async with asyncio.timeout(self.request_timeout):
                async with contextlib.aclosing(self._watch_stream(after, marks=True)) as stream:
                    async for batch, marked in stream:
                        for event in batch:
                            if event.revision > mark or (limit and len(events) >= limit):
                                return events
                            events.append(event)
                        if marked >= mark:
                            break
        except _Compacted as exc:
            raise await self._compacted_error(after, exc.revision) from exc
        except TimeoutError as exc:
            raise EtcdUnavailable(
                f"etcd history after {after}: no answer within {self.request_timeout}s"
            ) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise EtcdUnavailable(f"etcd history after {after}: {_describe(exc)}") from exc
        return events

    # -- writes ----------------------------------------------------------------------------------

    async def create(self, key: str, value: bytes) -> KeyValue:
        full = _b64(self.root + key)
        result, maybe_applied = await self._write(
            "/v3/kv/txn",
            {
                "compare": [{"key": full, "target": "CREATE", "result": "EQUAL", "create_revision": 0}],
                "success": [{"request_put": {"key": full, "value": _b64(value)}}],
                "failure": [{"request_range": {"key": full}}],
            },
        )
        if not result.get("succeeded"):
            found = self._found(result)
            if maybe_applied and found is not None and found.value == value:
                return found  # the first attempt created it
            raise KeyExistsError(key)
        revision = self._committed(result)
        return KeyValue(key, value, revision, revision)

    async def update(self, key: str, value: bytes, expected_revision: int) -> KeyValue:
        full = _b64(self.root + key)
        result, found = await self._swap(
            key, expected_revision, {"request_put": {"key": full, "value": _b64(value), "prev_kv": True}}
        )
        if found is not None:
            if found.value == value:
                return found  # the first attempt applied it
            raise RevisionMismatchError(key, found)
        put = result["responses"][0]["response_put"]
        return KeyValue(key, value, self._committed(result), int(put["prev_kv"]["create_revision"]))

    async def _swap(
        self, key: str, expected_revision: int, operation: dict[str, Any]
    ) -> tuple[dict[str, Any], KeyValue | None]:
        """``operation`` on ``key`` if it exists (and was last changed at ``expected_revision``, when
        given), as one transaction whose failure branch reads the key, to say which condition failed.

        Refused after an attempt that may have been applied, the key as found is returned with the answer
        (the caller tells its own write from another's); otherwise a refusal raises."""
        full = _b64(self.root + key)
        compare: list[dict[str, Any]] = [
            {"key": full, "target": "CREATE", "result": "GREATER", "create_revision": 0}
        ]
        if expected_revision:
            compare.append(
                {"key": full, "target": "MOD", "result": "EQUAL", "mod_revision": expected_revision}
            )
        result, maybe_applied = await self._write(
            "/v3/kv/txn",
            {"compare": compare, "success": [operation], "failure": [{"request_range": {"key": full}}]},
        )
        if result.get("succeeded"):
            return result, None
        found = self._found(result)
        if not maybe_applied:
            raise KeyNotFoundError(key) if found is None else RevisionMismatchError(key, found)
        if found is None:
            raise EtcdOutcomeUnknown(f"etcd write outcome unknown: {key} is gone, perhaps by this write")
        return result, found

    async def delete(self, key: str, expected_revision: int) -> KeyValue:
        full = _b64(self.root + key)
        result, found = await self._swap(
            key, expected_revision, {"request_delete_range": {"key": full, "prev_kv": True}}
        )
        if found is not None:
            raise RevisionMismatchError(key, found)
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

    def _found(self, result: dict[str, Any]) -> KeyValue | None:
        """The key as a refused transaction's failure branch read it."""
        kvs = result["responses"][0]["response_range"].get("kvs") or []
        return _kv(kvs[0], len(self.root)) if kvs else None

    async def compact(self, revision: int) -> None:
        """Record the target outside the watched prefix, then compact; a replica that finds the revision
        already compacted (another replica's compactor) only learns it."""
        revision = min(revision, self._revision)
        if revision <= self._compacted:
            return
        # The record only moves forward: it is replaced only if nobody changed it since it was read, and
        # only by a larger revision (a lagging replica's compactor would otherwise move it back).
        found = await self._compact_record()
        if revision <= self._compacted:
            return
        kvs = found.get("kvs") or []
        key = _b64(self.compact_key)
        seen = int(kvs[0]["mod_revision"]) if kvs else 0
        recorded, _ = await self._write(
            "/v3/kv/txn",
            {
                "compare": [{"key": key, "target": "MOD", "result": "EQUAL", "mod_revision": seen}],
                "success": [{"request_put": {"key": key, "value": _b64(str(revision))}}],
            },
        )
        if not recorded.get("succeeded"):
            return  # another replica recorded its compaction meanwhile; the next interval reads it
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
        loop = asyncio.get_running_loop()
        silence = 2 * self.watch_check
        while not self._closed:
            try:
                # Marks in range (every replica's heartbeat and history marks): an answer while all is quiet.
                stream = self._watch_stream(self._seen, marks=True)
                async with asyncio.timeout(silence) as silent, contextlib.aclosing(stream):
                    async for batch, marked in stream:
                        self._heard = loop.time()
                        silent.reschedule(self._heard + silence)
                        # A mark's event follows every event of the prefix before it: a reopened watch
                        # starts past it (on a quiet cluster, nearer etcd's compaction than the last event).
                        self._seen = max(self._seen, marked, batch[-1].revision if batch else 0)
                        if batch and self._subscriber is not None:
                            self._delivered = batch[-1].revision
                            self._revision = max(self._revision, self._delivered)
                            self._subscriber(batch)
            except _Compacted as exc:
                self._fail(StorageError(f"watch fell behind compaction: {exc}"))
                return
            except (aiohttp.ClientError, TimeoutError, OSError, StorageError, orjson.JSONDecodeError) as exc:
                # close() cancels this task, so a break seen here is a real one
                error = f"no answer for {silence:g}s" if isinstance(exc, TimeoutError) else _describe(exc)
                log.warning("etcd watch broke; resuming", after=self._seen, error=error)
                self._unreachable = f"etcd watch broke: {error}"
                self._current = (self._current + 1) % len(self.endpoints)
            except Exception as exc:  # anything else would end the watch unseen, writes waiting on it
                self._fail(StorageError(f"etcd watch failed: {_describe(exc)}"))
                return
            await asyncio.sleep(self.retry_interval)

    async def _mark_when_silent(self) -> None:
        """Write a mark whenever the watch has been quiet for ``watch_check``: its event is the watch's
        answer; no answer, and the watch is opened again (:meth:`_watch_forever`)."""
        loop = asyncio.get_running_loop()
        while not self._closed:
            # A mark exactly one period after the last answer leaves it a whole period to come back before
            # the watch's deadline (twice the period after that answer).
            wait = self._heard + self.watch_check - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            try:
                await self._write("/v3/kv/put", {"key": _b64(self.progress_key), "value": _b64("heartbeat")})
            except (StorageError, aiohttp.ClientError, OSError) as exc:
                # etcd unreachable: the health check says so already; the watch's own deadline acts.
                log.debug("etcd watch mark not written", error=_describe(exc))
            await asyncio.sleep(self.watch_check)  # its answer, or the deadline, comes first

    async def _watch_stream(
        self, after: int, *, marks: bool = False
    ) -> AsyncGenerator[tuple[list[Event], int], None]:
        """Batches of events under the prefix (one etcd watch response each: whole revisions) with revision
        > ``after``, each with 0, or with ``marks`` the revision of the newest ``<prefix>-progress`` write
        in that response (the watch then also covers the keys beside the prefix, whose other events are
        skipped; a response may then carry no event of the prefix)."""
        if self._session is None:
            raise StoreClosedError("store is closed")
        inside = self.root + "/"
        # From the mark key (``<root>-progress`` sorts before ``<root>/``) to the prefix's end: the compaction
        # record and other prefixes that start with the root's text stay outside.
        start = self.progress_key if marks else inside
        body = {
            "create_request": {
                "key": _b64(start),
                "range_end": _b64(prefix_end(inside)),
                "start_revision": after + 1,
                "prev_kv": True,
            }
        }
        mark_key = _b64(self.progress_key)
        endpoint = self.endpoints[self._current]
        async with self._session.post(endpoint + "/v3/watch", data=orjson.dumps(body)) as response:
            if response.status != 200:
                raise StorageError(f"etcd watch: HTTP {response.status}")
            self._unreachable = None  # the watch is (back) up: what the health check follows
            async for line in _lines(response.content):
                doc = orjson.loads(line)
                if "error" in doc:
                    raise _etcd_error(str(doc["error"].get("message") or doc["error"]))
                result = doc.get("result") or {}
                compacted = int(result.get("compact_revision") or 0)
                if compacted > after:
                    raise _Compacted(f"compacted at {compacted}, watched after {after}", compacted)
                if result.get("canceled"):
                    raise StorageError(f"etcd watch canceled: {result.get('cancel_reason', '')}")
                raw_events = result.get("events") or []
                marked = 0
                if marks:
                    marked = max(
                        (int(e["kv"]["mod_revision"]) for e in raw_events if e["kv"]["key"] == mark_key),
                        default=0,
                    )
                    raw_events = [
                        e for e in raw_events if base64.b64decode(e["kv"]["key"]).startswith(inside.encode())
                    ]
                events = [self._event(raw) for raw in raw_events]
                if events:
                    after = events[-1].revision
                if events or marked:
                    yield events, marked

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
    def __init__(self, message: str, revision: int = 0) -> None:
        super().__init__(message)
        self.revision = revision
        """The compacted revision, when etcd said (a watch does; a range's error does not)."""


class EtcdOutcomeUnknown(StorageError):
    """A write was sent and then timed out or failed: etcd may or may not have committed it."""


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


async def _lines(content: aiohttp.StreamReader) -> AsyncGenerator[bytes, None]:
    """The non-empty newline-delimited documents of a watch stream, of any length: one watch response
    holds up to a thousand revisions of values (base64, with their previous values), far past aiohttp's
    line limit of 128 KiB (a catching-up watch would otherwise end with ``LineTooLong``)."""
    pending = bytearray()
    async for chunk in content.iter_any():
        pending += chunk
        if b"\n" not in chunk:
            continue
        *complete, rest = pending.split(b"\n")
        pending = bytearray(rest)
        for line in complete:
            if line.strip():
                yield bytes(line)
    # A document cut off by the end of the stream is no document: the watch resumes from its last event.


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
