"""HTTP handlers for resource requests: get, list, watch, create, update, patch, delete, deletecollection.

The read path relays stored bytes: a GET is a cache lookup plus a splice, a LIST joins item bytes into
the list envelope. Objects are decoded only when a selector, a Table or a write needs their fields.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
import structlog
import yaml
from aiohttp import web

from vplane.apiserver import codec
from vplane.apiserver.context import RequestContext
from vplane.apiserver.objects import DeleteOptions, patch_types_for
from vplane.apiserver.registry import ResourceType
from vplane.apiserver.watch import Watcher, WatchEvent, frame_obj, next_bookmark_at
from vplane.kube import errors, fields, labels
from vplane.kube.objects import Obj
from vplane.kube.requestinfo import RequestInfo
from vplane.storage.interface import CompactedError, KeyValue
from vplane.support.httpserver import on_connection_lost

if TYPE_CHECKING:
    from vplane.apiserver.server import APIServer

CONTINUE_TOO_OLD = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter, or use the continue token in this response to retrieve the remainder of the "
    "results. Continuing with the provided token results in an inconsistent list - objects that were created, "
    "modified, or deleted between the time the first chunk was returned and now may show up in the list."
)

JSON_HEADERS = {"Content-Type": "application/json"}

WRITE_SLICE = 64 * 1024
"""Watch frames are written at most this much at a time, each write waiting for the client to take the
last (aiohttp drains past 64 KiB), so an unread watch holds about this much, not whole large objects."""

log = structlog.get_logger("vplane.apiserver.handlers")


@dataclass(slots=True)
class ResponseFormat:
    table: bool = False
    include_object: str = "Metadata"
    yaml: bool = False


def response_format(request: web.Request) -> ResponseFormat:
    accept = request.headers.get("Accept", "")
    fmt = ResponseFormat()
    if not accept:
        return fmt
    acceptable = False
    for part in accept.split(","):
        pieces = [p.strip() for p in part.split(";")]
        mtype = pieces[0].lower()
        params = {p.split("=", 1)[0]: p.split("=", 1)[1] for p in pieces[1:] if "=" in p}
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io" and mtype == "application/json":
            fmt.table = True
            acceptable = True
            break
        if params.get("as"):
            continue
        if mtype in ("application/json", "*/*", "application/*", "application/vnd.kubernetes.protobuf"):
            acceptable = True
            break
        if mtype == "application/yaml":
            fmt.yaml = True
            acceptable = True
            break
    if not acceptable:
        raise errors.not_acceptable(
            ["application/json", "application/yaml", "application/vnd.kubernetes.protobuf"]
        )
    include = request.query.get("includeObject")
    if include:
        if include not in ("None", "Object", "Metadata"):
            raise errors.bad_request(
                f"includeObject: unsupported value {include!r}; supported: None, Object, Metadata"
            )
        fmt.include_object = include
    return fmt


async def write_flowing(resp: web.StreamResponse, *pieces: bytes | memoryview) -> None:
    """Write a frame with back-pressure at slice granularity (the transport would take a frame whole)."""
    if sum(len(piece) for piece in pieces) <= WRITE_SLICE:
        await resp.write(pieces[0] if len(pieces) == 1 else b"".join(pieces))
        return
    for piece in pieces:
        view = memoryview(piece)
        for start in range(0, len(view), WRITE_SLICE):
            await resp.write(view[start : start + WRITE_SLICE])


def json_response(body: bytes, status: int = 200, ctx: RequestContext | None = None) -> web.Response:
    headers = dict(JSON_HEADERS)
    resp = web.Response(body=body, status=status, headers=headers)
    if ctx is not None:
        add_warnings(resp, ctx)
    return resp


def add_warnings(resp: web.StreamResponse, ctx: RequestContext) -> None:
    for text in ctx.warnings:
        resp.headers.add("Warning", '299 - "' + text.replace('"', '\\"') + '"')


def object_response(obj: Obj, fmt: ResponseFormat, status: int, ctx: RequestContext) -> web.Response:
    if fmt.yaml:
        resp = web.Response(
            body=yaml.safe_dump(obj, sort_keys=False).encode(),
            status=status,
            headers={"Content-Type": "application/yaml"},
        )
        add_warnings(resp, ctx)
        return resp
    return json_response(orjson.dumps(obj), status, ctx)


@functools.lru_cache(maxsize=512)
def _label_selector(text: str) -> labels.Selector:
    """Parsed once per distinct text: selectors are immutable, and clients repeat theirs (every list the
    resource proxy forwards in owned mode carries the same one)."""
    return labels.parse(text)


def _int_param(query: Any, name: str, default: int | None = None) -> int | None:
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise errors.bad_request(f"{name}: invalid value {raw!r}: must be an integer") from None
    if value < 0:
        raise errors.bad_request(f"{name}: invalid value {raw!r}: must be a non-negative integer")
    return value


_INT64_MAX = 2**63 - 1


def _timeout_param(query: Any) -> int | None:
    """``timeoutSeconds`` as upstream's query decoding reads it (``strconv.ParseInt``, base 10, 64 bits),
    on lists as well as watches; negative values are refused too (upstream would end a watch at once)."""
    raw = query.get("timeoutSeconds")
    if raw is None or raw == "":
        return None
    negative = raw[:1] == "-"
    digits = raw[1:] if raw[:1] in ("+", "-") else raw
    if not digits.isascii() or not digits.isdigit():
        raise errors.query_int_unparsable(raw, out_of_range=False)
    significant = digits.lstrip("0") or "0"
    if len(significant) > 19:  # before int(), which refuses very long strings with its own error
        raise errors.query_int_unparsable(raw, out_of_range=True)
    value = -int(significant) if negative else int(significant)
    if not -_INT64_MAX - 1 <= value <= _INT64_MAX:
        raise errors.query_int_unparsable(raw, out_of_range=True)
    if value < 0:
        raise errors.query_negative("timeoutSeconds", value)
    return value


def _bool_param(query: Any, name: str) -> bool:
    raw = query.get(name)
    if raw is None or raw == "":
        return False
    if raw.lower() in ("true", "1"):
        return True
    if raw.lower() in ("false", "0"):
        return False
    raise errors.bad_request(f"{name}: invalid value {raw!r}: must be a boolean")


def encode_continue(rv: int, start_key: str) -> str:
    token = orjson.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start_key + "\x00"})
    return base64.urlsafe_b64encode(token).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = orjson.loads(raw)
        rv, start = int(data["rv"]), str(data["start"])
        if data.get("v") != "meta.k8s.io/v1" or rv <= 0:
            raise ValueError
    except (ValueError, KeyError, TypeError, orjson.JSONDecodeError):
        raise errors.bad_request(f"continue key is not valid: {token!r}") from None
    return rv, start


class LabelMemo:
    """The labels of stored values, remembered per (key, revision): a value never changes at a revision, so
    a label-selected list decodes each object once, not once per request. Label selectors are how
    controllers, ``kubectl -l`` and the resource proxy's owned mode (every list it forwards) read. Kept as
    frozen sets of (key, value) pairs: an equality-only selector is then one C-level subset test per object
    (about half the cost of testing a dict's items). Bounded: the oldest entries go first."""

    def __init__(self, capacity: int = 100_000) -> None:
        self.capacity = capacity
        self._labels: dict[tuple[str, int], frozenset[tuple[str, str]]] = {}

    def of(self, kv: KeyValue) -> frozenset[tuple[str, str]]:
        found = self._labels.get((kv.key, kv.mod_revision))
        return found if found is not None else self._load(kv)

    def _load(self, kv: KeyValue) -> frozenset[tuple[str, str]]:
        metadata = codec.decode_kv(kv).get("metadata") or {}
        labels_ = metadata.get("labels") or {}
        found = frozenset(
            (k, v) for k, v in (labels_.items() if isinstance(labels_, dict) else ()) if isinstance(v, str)
        )
        if len(self._labels) >= self.capacity:
            del self._labels[next(iter(self._labels))]
        self._labels[(kv.key, kv.mod_revision)] = found
        return found

    def with_labels(self, kvs: Iterable[KeyValue], required: frozenset[tuple[str, str]]) -> list[KeyValue]:
        """The values carrying every one of ``required``'s (key, value) pairs, in order."""
        get = self._labels.get
        load = self._load
        return [kv for kv in kvs if required <= (get((kv.key, kv.mod_revision)) or load(kv))]


class ResourceHandlers:
    def __init__(self, server: APIServer) -> None:
        self.server = server
        self.objects = server.objects
        self.cache = server.cache
        self.settings = server.settings
        self.label_memo = LabelMemo()

    # -- selectors -------------------------------------------------------------------------------

    def _selectors(self, rtype: ResourceType, query: Any) -> tuple[labels.Selector, fields.FieldSelector]:
        # The query is already form-decoded (``+`` is a space), so it parses as is.
        label_sel = _label_selector(query.get("labelSelector", ""))
        field_sel = fields.parse(query.get("fieldSelector", ""))
        if not field_sel.empty:
            supported = (
                {"metadata.name", "metadata.namespace"}
                | set(rtype.strategy.supported_field_labels)
                | set(rtype.selectable_fields)
            )
            fields.check_supported(field_sel, supported, rtype.strategy.field_label_error)
        return label_sel, field_sel

    def field_values(self, rtype: ResourceType) -> Any:
        if rtype.selectable_fields:

            def values(obj: Obj) -> dict[str, str]:
                out = rtype.strategy.field_labels(obj)
                for path in rtype.selectable_fields:
                    out[path] = _lookup_path(obj, path)
                return out

            return values
        return rtype.strategy.field_labels

    def _filter(
        self,
        rtype: ResourceType,
        kvs: Iterable[KeyValue],
        label_sel: labels.Selector,
        field_sel: fields.FieldSelector,
    ) -> Iterable[tuple[KeyValue, Obj | None]]:
        if label_sel.empty and field_sel.empty:
            for kv in kvs:
                yield kv, None
            return
        if field_sel.empty:
            memo = self.label_memo
            required = label_sel.required_labels()
            if required is not None:  # equalities only (the resource proxy's owned lists)
                for kv in memo.with_labels(kvs, frozenset(required.items())):
                    yield kv, None
                return
            for kv in kvs:
                if label_sel.matches(dict(memo.of(kv))):
                    yield kv, None
            return
        watcher = Watcher("", labels=label_sel, fields=field_sel, field_values=self.field_values(rtype))
        for kv in kvs:
            obj = codec.decode_kv(kv)
            if watcher.matches_obj(obj):
                yield kv, obj

    # -- get / list ------------------------------------------------------------------------------

    async def get(
        self, request: web.Request, ctx: RequestContext, rtype: ResourceType, info: RequestInfo
    ) -> web.StreamResponse:
        fmt = response_format(request)
        if request.query_string:
            await self._fresh_enough(request.query.get("resourceVersion", ""))
        kv = self.objects.get_kv(rtype, info.namespace, info.name)
        if kv is None:
            raise errors.not_found(rtype.resource, info.name, rtype.group)
        if fmt.table:
            obj = self.objects.to_version(rtype, codec.decode_kv(kv))
            table = self.server.table(
                rtype, [obj], fmt.include_object, {"resourceVersion": str(kv.mod_revision)}
            )
            return json_response(orjson.dumps(table))
        if rtype.converts or fmt.yaml:
            return object_response(self.objects.to_version(rtype, codec.decode_kv(kv)), fmt, 200, ctx)
        return json_response(codec.wire_bytes(kv))

    async def list_objects(
        self, request: web.Request, ctx: RequestContext, rtype: ResourceType, info: RequestInfo
    ) -> web.StreamResponse:
        query = request.query
        fmt = response_format(request)
        label_sel, field_sel = self._selectors(rtype, query)
        limit = _int_param(query, "limit", 0) or 0
        _timeout_param(query)  # checked as upstream does; a list answers at once anyway
        token = query.get("continue", "")
        rv_param = query.get("resourceVersion", "")
        rv_match = query.get("resourceVersionMatch", "")
        if rv_match and rv_match not in ("Exact", "NotOlderThan"):
            raise errors.bad_request(f"resourceVersionMatch: unsupported value {rv_match!r}")
        if rv_match and not rv_param:
            raise errors.bad_request("resourceVersionMatch is forbidden unless resourceVersion is provided")
        if token and rv_param:
            raise errors.bad_request("specifying resource version is not allowed when using continue")
        prefix = rtype.prefix(info.namespace)
        name_only = fields.exact_value(field_sel, "metadata.name")
        current = self.cache.revision
        start = prefix
        snapshot = current
        wanted = 0
        pinned = False
        if token:
            snapshot, start = decode_continue(token)
            wanted, pinned = snapshot, True
            if not start.startswith(prefix):
                raise errors.bad_request("continue key is not valid: it does not belong to this list")
        elif rv_param:
            try:
                wanted = int(rv_param)
            except ValueError:
                raise errors.bad_request(f"resourceVersion: invalid value {rv_param!r}") from None
            if rv_match == "Exact":
                snapshot, pinned = wanted, True
        if wanted > current:
            # As upstream's watch cache: wait a little for the revision (another replica on the shared
            # store may have answered it), then 504 Too large resource version.
            if not await self._fresh(wanted):
                raise errors.too_large_resource_version(wanted, self.cache.revision)
            current = self.cache.revision
            if not pinned:
                snapshot = current
        source: Iterable[KeyValue]
        if snapshot == current:
            if name_only is not None and (not rtype.namespaced or info.namespace):
                kv = self.cache.get(rtype.key(info.namespace, name_only))
                source = [kv] if kv is not None and kv.key >= start else []
            else:
                source = self.cache.iter_prefix(prefix, start)
        else:
            try:
                source = await self.cache.store.range_at(prefix, snapshot, start=start)
            except CompactedError:
                if token:
                    raise errors.gone(CONTINUE_TOO_OLD) from None
                raise errors.gone(
                    f"too old resource version: {snapshot} ({self.cache.store.compacted_revision})"
                ) from None
        selected: list[tuple[KeyValue, Obj | None]] = []
        next_token = ""
        remaining: int | None = None
        for kv, obj in self._filter(rtype, source, label_sel, field_sel):
            if limit and len(selected) == limit:
                next_token = encode_continue(snapshot, selected[-1][0].key)
                if label_sel.empty and field_sel.empty:
                    if isinstance(source, list):  # read at an older revision: the rest is in hand
                        remaining = len(source) - len(selected)
                    elif snapshot == current:
                        remaining = self.cache.count_prefix(prefix, selected[-1][0].key + "\x00")
                break
            selected.append((kv, obj))
        list_meta: dict[str, Any] = {"resourceVersion": str(snapshot)}
        if next_token:
            list_meta["continue"] = next_token
            if remaining is not None:
                list_meta["remainingItemCount"] = remaining
        if fmt.table:
            objs = [
                self.objects.to_version(rtype, obj if obj is not None else codec.decode_kv(kv))
                for kv, obj in selected
            ]
            return json_response(orjson.dumps(self.server.table(rtype, objs, fmt.include_object, list_meta)))
        if fmt.yaml or rtype.converts:
            items = [
                self.objects.to_version(rtype, obj if obj is not None else codec.decode_kv(kv))
                for kv, obj in selected
            ]
            if not rtype.list_items_typed:
                items = [{k: v for k, v in item.items() if k not in ("kind", "apiVersion")} for item in items]
            doc = {
                "apiVersion": rtype.api_version,
                "kind": rtype.list_kind,
                "metadata": list_meta,
                "items": items,
            }
            return object_response(doc, fmt, 200, ctx)
        head = orjson.dumps({"apiVersion": rtype.api_version, "kind": rtype.list_kind, "metadata": list_meta})
        untyped = None if rtype.list_items_typed else codec.typed_prefix(rtype.kind, rtype.api_version)
        items_bytes = codec.join_wire([kv for kv, _ in selected], untyped=untyped)
        body = b"".join((head[:-1], b',"items":[', items_bytes, b"]}"))
        return json_response(body)

    # -- watch -----------------------------------------------------------------------------------

    async def watch(
        self, request: web.Request, ctx: RequestContext, rtype: ResourceType, info: RequestInfo
    ) -> web.StreamResponse:
        query = request.query
        fmt = response_format(request)
        label_sel, field_sel = self._selectors(rtype, query)
        name = info.name or fields.exact_value(field_sel, "metadata.name") or ""
        if info.name:
            field_sel = fields.parse(f"metadata.name={info.name}") if field_sel.empty else field_sel
        rv_param = query.get("resourceVersion", "")
        bookmarks = _bool_param(query, "allowWatchBookmarks")
        send_initial = query.get("sendInitialEvents")
        timeout = _timeout_param(query)
        if send_initial is not None and send_initial != "":
            initial = _bool_param(query, "sendInitialEvents")
            if query.get("resourceVersionMatch") != "NotOlderThan":
                raise errors.invalid(
                    "ListOptions",
                    "",
                    [
                        errors.field_invalid(
                            "resourceVersionMatch",
                            query.get("resourceVersionMatch", ""),
                            "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                        )
                    ],
                )
            if initial and not bookmarks:
                raise errors.invalid(
                    "ListOptions",
                    "",
                    [
                        errors.field_forbidden(
                            "allowWatchBookmarks",
                            "sendInitialEvents requires setting allowWatchBookmarks to true",
                        )
                    ],
                )
        else:
            initial = rv_param in ("", "0")
        start_rev = 0
        if rv_param not in ("", "0"):
            try:
                start_rev = int(rv_param)
            except ValueError:
                raise errors.bad_request(f"resourceVersion: invalid value {rv_param!r}") from None
        elif not initial:
            start_rev = self.cache.revision  # sendInitialEvents=false without a version: changes from now on
        if timeout is None:
            timeout = int(
                random.uniform(
                    self.settings.watch_timeout_min_seconds, self.settings.watch_timeout_max_seconds
                )
            )
        prefix = rtype.prefix(info.namespace)
        hub = self.server.hub
        user = ctx.user.name
        if not hub.admit(user, self.settings.max_watches_per_user):
            log.info("watch refused: per-user limit", user=user, limit=self.settings.max_watches_per_user)
            raise errors.try_again_later()
        try:
            if initial and start_rev > self.cache.revision and not await self._fresh(start_rev):
                # Upstream's cache waits for a watch-list's revision, then ends the watch with the error.
                too_large = errors.too_large_resource_version(start_rev, self.cache.revision)
                return await self._error_stream(request, ctx, too_large)
            watcher = Watcher(
                prefix,
                name=name if (not rtype.namespaced or info.namespace) else "",
                labels=label_sel,
                fields=field_sel,
                field_values=self.field_values(rtype),
                capacity=self.settings.watch_queue_capacity,
            )
            hub.register(watcher)
            log.debug("watch started", user=user, prefix=prefix, watches=hub.watcher_count())
            try:
                return await self._stream(
                    request, ctx, rtype, fmt, watcher, initial, start_rev, bookmarks, timeout
                )
            finally:
                hub.unregister(watcher)
                log.debug("watch ended", user=user, prefix=prefix, watches=hub.watcher_count())
        finally:
            hub.release(user)

    async def _fresh_enough(self, rv_param: str) -> None:
        """A GET's ``resourceVersion`` is a minimum (upstream serves it from the watch cache, waiting for
        a newer revision as for a list); values that are not revisions are ignored, as before."""
        if not (rv_param.isascii() and rv_param.isdigit()):
            return
        wanted = int(rv_param)
        if wanted > self.cache.revision and not await self._fresh(wanted):
            raise errors.too_large_resource_version(wanted, self.cache.revision)

    async def _fresh(self, revision: int) -> bool:
        """Whether the cache has reached ``revision``, waiting up to ``resource_version_wait_seconds``."""
        if self.cache.revision >= revision:
            return True
        try:
            async with asyncio.timeout(self.settings.resource_version_wait_seconds):
                await self.server.hub.wait_for_revision(revision)
        except TimeoutError:
            pass
        return self.cache.revision >= revision

    async def _error_stream(
        self, request: web.Request, ctx: RequestContext, exc: errors.StatusError
    ) -> web.StreamResponse:
        """A watch that ends with one ERROR event (upstream answers errors found after admission so)."""
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        add_warnings(resp, ctx)
        try:
            await resp.prepare(request)
            await resp.write(frame_obj("ERROR", exc.to_status()))
        except ConnectionError:
            pass
        return resp

    async def _stream(
        self,
        request: web.Request,
        ctx: RequestContext,
        rtype: ResourceType,
        fmt: ResponseFormat,
        watcher: Watcher,
        initial: bool,
        start_rev: int,
        bookmarks: bool,
        timeout_seconds: int,
    ) -> web.StreamResponse:
        # Everything up to the first await runs in one loop step, so the snapshot or replay below and the
        # live events the watcher queues afterwards neither overlap nor leave a gap.
        snapshot_rev = self.cache.revision
        initial_kvs: list[KeyValue] = []
        replay: list[Any] | None = None
        if initial:
            initial_kvs = list(self.cache.iter_prefix(watcher.prefix))
            watcher.last_revision = snapshot_rev
        else:
            replay = self.cache.recent_events_after(start_rev)
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        add_warnings(resp, ctx)
        # A client that goes ends its watch now, not at the next event or the timeout.
        forget = on_connection_lost(request, watcher.close)
        try:
            await resp.prepare(request)
            await self._send_events(
                resp,
                rtype,
                fmt,
                watcher,
                initial,
                initial_kvs,
                replay,
                start_rev,
                snapshot_rev,
                bookmarks,
                timeout_seconds,
                request,
            )
        except ConnectionError:
            pass  # the client went away; its watcher is unregistered by the caller
        finally:
            forget()
        return resp

    async def _send_events(
        self,
        resp: web.StreamResponse,
        rtype: ResourceType,
        fmt: ResponseFormat,
        watcher: Watcher,
        initial: bool,
        initial_kvs: list[KeyValue],
        replay: list[Any] | None,
        start_rev: int,
        snapshot_rev: int,
        bookmarks: bool,
        timeout_seconds: int,
        request: web.Request,
    ) -> None:
        state = _TableState(self, rtype, fmt)
        if initial:
            for kv in initial_kvs:
                if not watcher.matches_key(kv):
                    continue
                if watcher.filtered and not watcher.matches_obj(codec.decode_kv(kv)):
                    continue
                await write_flowing(resp, *state.frame_kv("ADDED", kv))
            if bookmarks and self._wants_initial_end(request):
                await resp.write(frame_obj("BOOKMARK", self._bookmark(rtype, snapshot_rev, initial_end=True)))
        else:
            if replay is None:
                try:
                    events = await self.cache.events_after(start_rev)
                except CompactedError as exc:
                    await resp.write(
                        frame_obj(
                            "ERROR",
                            errors.gone(
                                f"too old resource version: {start_rev} ({exc.compacted})"
                            ).to_status(),
                        )
                    )
                    return
                replay = [WatchEvent(e) for e in events]
            else:
                replay = [WatchEvent(e) for e in replay]
            backlog: list[Any] = []
            while not watcher.queue.empty():
                backlog.append(watcher.queue.get_nowait())
            watcher.last_revision = start_rev
            for wevent in replay:
                watcher.offer(wevent)
            for item in backlog:
                if item is not None and item.event.revision > watcher.last_revision:
                    watcher.queue.put_nowait(item)
                    watcher.last_revision = item.event.revision
                elif item is None:
                    watcher.queue.put_nowait(None)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_seconds
        bookmark_every = self.settings.bookmark_interval_seconds
        next_bookmark = next_bookmark_at(loop.time(), bookmark_every, deadline) if bookmarks else None
        last_rev = max(snapshot_rev, start_rev)
        queue = watcher.queue
        while True:
            now = loop.time()
            if now >= deadline:
                break
            if next_bookmark is not None and now >= next_bookmark:
                # With nothing queued every event up to the cache's revision has been sent; otherwise only
                # those up to the last one sent have.
                rev = max(last_rev, self.cache.revision) if queue.empty() else last_rev
                await resp.write(frame_obj("BOOKMARK", self._bookmark(rtype, rev)))
                next_bookmark = next_bookmark_at(loop.time(), bookmark_every, deadline)
                continue
            if not queue.empty():  # no timer needed while events are waiting
                item = queue.get_nowait()
            else:
                wait = deadline - now
                if next_bookmark is not None:
                    wait = min(wait, max(0.0, next_bookmark - now))
                try:
                    # asyncio.timeout, not wait_for: on 3.11 wait_for wraps the get in a task per event
                    # and can swallow a cancel that arrives as an event does.
                    async with asyncio.timeout(wait):
                        item = await queue.get()
                except TimeoutError:
                    continue
            if item is None:
                break  # overflowed, the client went, or the server stops: clients re-watch
            last_rev = item.event.revision
            await write_flowing(resp, state.frame_event(item.type, item.event))

    @staticmethod
    def _wants_initial_end(request: web.Request) -> bool:
        return _bool_param(request.query, "sendInitialEvents")

    @staticmethod
    def _bookmark(rtype: ResourceType, rev: int, initial_end: bool = False) -> Obj:
        meta: Obj = {"resourceVersion": str(rev)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return {"kind": rtype.kind, "apiVersion": rtype.api_version, "metadata": meta}

    # -- writes ----------------------------------------------------------------------------------

    async def _body(
        self,
        request: web.Request,
        ctx: RequestContext,
        rtype: ResourceType,
        allowed: tuple[str, ...] = codec.BODY_TYPES,
    ) -> tuple[Any, list[str]]:
        body = await self.server.read_body(request)
        want_dupes = ctx.field_validation in ("Strict", "Warn")
        return codec.decode_body(
            body,
            request.headers.get("Content-Type", ""),
            allowed=allowed,
            want_duplicates=want_dupes,
            max_bytes=self.settings.max_body_bytes,
            kind=rtype.kind,
        )

    async def create(
        self, request: web.Request, ctx: RequestContext, rtype: ResourceType, info: RequestInfo
    ) -> web.StreamResponse:
        fmt = response_format(request)
        value, duplicates = await self._body(request, ctx, rtype)
        obj = codec.require_object(value)
        ctx.duplicate_fields = duplicates
        if not rtype.stored:
            if rtype.create_handler is None:
                raise errors.method_not_allowed()
            result = await rtype.create_handler(ctx, obj)
            return object_response(result, fmt, 201, ctx)
        created = await self.objects.create_stored(ctx, rtype, info.namespace, obj)
        return self._written_response(rtype, created, fmt, 201, ctx)

    async def update(
        self, request: web.Request, ctx: RequestContext, rtype: ResourceType, info: RequestInfo
    ) -> web.StreamResponse:
        fmt = response_format(request)
        value, duplicates = await self._body(request, ctx, rtype)
        obj = codec.require_object(value)
        ctx.duplicate_fields = duplicates
        if info.subresource == "finalize":
            return object_response(
                await self.server.namespaces.finalize(ctx, rtype, info.name, obj), fmt, 200, ctx
            )
        updated = await self.objects.update_stored(
            ctx, rtype, info.namespace, info.name, obj, info.subresource
        )
        return self._written_response(rtype, updated, fmt, 200, ctx)

    def _written_response(
        self,
        rtype: ResourceType,
        result: KeyValue | Obj,
        fmt: ResponseFormat,
        status: int,
        ctx: RequestContext,
    ) -> web.Response:
        """Serve what a write stored as its bytes when the request's version is the stored one (JSON)."""
        if isinstance(result, KeyValue) and not fmt.yaml and not rtype.converts:
            return json_response(codec.wire_bytes(result), status, ctx)
        return object_response(self.objects.as_object(rtype, result), fmt, status, ctx)

    async def patch(
        self, request: web.Request, ctx: RequestContext, rtype: ResourceType, info: RequestInfo
    ) -> web.StreamResponse:
        fmt = response_format(request)
        content_type = codec.media_type(request.headers.get("Content-Type"))
        allowed = patch_types_for(rtype)
        if content_type not in allowed:
            raise errors.unsupported_media_type(content_type, allowed)
        body = await self.server.read_body(request)
        value, _ = codec.decode_body(
            body,
            content_type,
            allowed=allowed,
            max_bytes=self.settings.max_body_bytes,
            field_validation=ctx.field_validation,
        )
        force = _bool_param(request.query, "force")
        if force and content_type != codec.APPLY_PATCH:
            raise errors.bad_request("force flag is not supported for patch types other than apply")
        patched = await self.objects.patch(
            ctx,
            rtype,
            info.namespace,
            info.name,
            content_type,
            value,
            subresource=info.subresource,
            force=force,
        )
        status = 200
        return object_response(patched, fmt, status, ctx)

    async def delete(
        self, request: web.Request, ctx: RequestContext, rtype: ResourceType, info: RequestInfo
    ) -> web.StreamResponse:
        fmt = response_format(request)
        options = await self._delete_options(request, ctx)
        result = await self.objects.delete(ctx, rtype, info.namespace, info.name, options)
        if not result.deleted or rtype.is_custom:
            return object_response(result.obj, fmt, 200, ctx)
        details: Obj = {
            "name": info.name,
            "group": rtype.group,
            "kind": rtype.resource,
            "uid": result.obj["metadata"].get("uid", ""),
        }
        if not rtype.group:
            del details["group"]
        status = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": details,
        }
        return json_response(orjson.dumps(status), 200, ctx)

    async def _delete_options(self, request: web.Request, ctx: RequestContext) -> DeleteOptions:
        body = await self.server.read_body(request)
        parsed: Obj | None = None
        if body.strip():
            value, _ = codec.decode_body(
                body,
                request.headers.get("Content-Type", "") or codec.JSON,
                max_bytes=self.settings.max_body_bytes,
            )
            parsed = codec.require_object(value)
        policy = request.query.get("propagationPolicy", "")
        if policy and policy not in ("Background", "Foreground", "Orphan"):
            raise errors.bad_request(f"propagationPolicy: unsupported value {policy!r}")
        options = DeleteOptions.from_body(parsed, policy, ctx.dry_run)
        grace = request.query.get("gracePeriodSeconds")
        if options.grace_period_seconds is None and grace not in (None, ""):
            # As a query parameter too (lightkube and client-go's DeleteOptions as parameters), issue 10.
            digits = grace.removeprefix("-")
            if not digits.isascii() or not digits.isdigit() or len(digits) > 18:
                raise errors.query_int_unparsable(grace, out_of_range=digits.isdigit())
            options.grace_period_seconds = int(grace)
        if options.propagation_policy and options.propagation_policy not in (
            "Background",
            "Foreground",
            "Orphan",
        ):
            raise errors.invalid(
                "DeleteOptions",
                "",
                [
                    errors.field_not_supported(
                        "propagationPolicy",
                        options.propagation_policy,
                        ["Foreground", "Background", "Orphan", "nil"],
                    )
                ],
            )
        return options

    async def delete_collection(
        self, request: web.Request, ctx: RequestContext, rtype: ResourceType, info: RequestInfo
    ) -> web.StreamResponse:
        options = await self._delete_options(request, ctx)
        label_sel, field_sel = self._selectors(rtype, request.query)
        deleted: list[Obj] = []
        kvs = list(self.cache.iter_prefix(rtype.prefix(info.namespace)))
        for kv, _obj in list(self._filter(rtype, kvs, label_sel, field_sel)):
            meta = codec.decode_kv(kv)["metadata"]
            try:
                result = await self.objects.delete(
                    ctx, rtype, meta.get("namespace", ""), meta["name"], options
                )
            except errors.StatusError as exc:
                if exc.code == 404:
                    continue
                raise
            deleted.append(result.obj)
        doc = {
            "apiVersion": rtype.api_version,
            "kind": rtype.list_kind,
            "metadata": {"resourceVersion": str(self.cache.revision)},
            "items": deleted,
        }
        return json_response(orjson.dumps(doc), 200, ctx)


class _TableState:
    """Frames watch events, as Tables when the client asked for them (column definitions only once)."""

    def __init__(self, handlers: ResourceHandlers, rtype: ResourceType, fmt: ResponseFormat) -> None:
        self.handlers = handlers
        self.rtype = rtype
        self.fmt = fmt
        self.sent_columns = False

    def _table(self, obj: Obj) -> Obj:
        table = self.handlers.server.table(
            self.rtype,
            [obj],
            self.fmt.include_object,
            {"resourceVersion": obj["metadata"].get("resourceVersion", "")},
            with_columns=not self.sent_columns,
        )
        self.sent_columns = True
        return table

    def frame_kv(self, event_type: str, kv: KeyValue) -> tuple[bytes | memoryview, ...]:
        """The frame in pieces: the stored value is not copied for each watcher of the initial list."""
        if not self.fmt.table and not self.rtype.converts:
            head, value = codec.wire_pieces(kv)
            return b'{"type":"' + event_type.encode() + b'","object":' + head, value, b"}\n"
        obj = self.handlers.objects.to_version(self.rtype, codec.decode_kv(kv))
        return (frame_obj(event_type, self._table(obj) if self.fmt.table else obj),)

    def frame_event(self, event_type: str, wevent: Any) -> bytes:
        if not self.fmt.table and not self.rtype.converts:
            framed: bytes = wevent.frame(event_type)
            return framed
        obj = self.handlers.objects.to_version(self.rtype, dict(wevent.obj()))
        return frame_obj(event_type, self._table(obj) if self.fmt.table else obj)


def _lookup_path(obj: Obj, path: str) -> str:
    value: Any = obj
    for part in path.strip(".").split("."):
        if not isinstance(value, dict):
            return ""
        value = value.get(part)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
