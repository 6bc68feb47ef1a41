"""The request pipeline of one proxied group/version (spec §2.3), as an aiohttp handler.

Order: connection upgrades are refused (501); discovery is forwarded or answered from the fallback (always
200); every other request gets the 60 s end-to-end cap unless it is a watch; namespaced writes need their
namespace on the client and mirror it to the target; ``owned`` mode rewrites and checks ownership; then
the request goes to a target replica chosen round-robin, as the client's platform identity (its access
key), never as the caller. A target 5xx becomes 503, a target 401 ``auth failed``; everything else passes
through, watches streamed.

Every request ends in one ``vcluster_proxy_request_total`` observation whose ``reason`` is the first
reason the request met (spec §7: the first request reason wins).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
import orjson
import structlog
import yaml
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from multidict import CIMultiDict
from prometheus_client import Counter, Histogram

from vplane.kube import errors, requestinfo, yamlsafe
from vplane.kube.proxyconfig import ProxyTarget
from vplane.proxy import discovery, ownership
from vplane.proxy.metrics import ProxyMetrics
from vplane.proxy.peers import Event, EventKind, Host, PeerCache, Reason, Selection
from vplane.proxy.relay import (
    JSON_TYPE,
    Outcome,
    describe,
    end_to_end,
    is_upgrade,
    object_path,
    relay,
    status_response,
)
from vplane.proxy.settings import ProxySettings
from vplane.proxy.upstream import (
    Deadline,
    DeadlineExceeded,
    Dial,
    DialFailed,
    DialObserver,
    HostPool,
    UpstreamResponse,
    bind_selection,
    reset_selection,
)
from vplane.support.httpserver import on_connection_lost
from vplane.support.requestheader import strip_identity_headers

log = structlog.get_logger("vplane.proxy")

UPGRADE_MESSAGE = "resource proxy does not support connection upgrades"
PROXY_FIELD_MANAGER = "vcluster-resource-proxy"


class Unavailable(Exception):
    """The request cannot reach the target: 503 with the generic text (plus the dial error, if any)."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(detail)
        self.detail = detail


NamespaceExists = Callable[[str], Awaitable[bool]]


class ResourceProxy:
    """The proxy of one group/version in one replica: its peer cache, its connections, its handler."""

    def __init__(
        self,
        target: ProxyTarget,
        *,
        client_name: str,
        client_project: str,
        access_key: Callable[[], str],
        dial: Dial,
        namespace_exists: NamespaceExists,
        metrics: ProxyMetrics,
        settings: ProxySettings | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.target = target
        self.settings = settings or ProxySettings()
        self.cache = PeerCache(self.settings.peers, clock)
        self.owner = ownership.Owner(client_name, client_project) if target.access == "owned" else None
        self.metrics = metrics
        self.label = target.target_label
        self.placeholder = f"kube.{target.target_name}.{target.target_project}.vcluster.invalid:443"
        self._base = "https://" + self.placeholder
        self._prefix = f"/apis/{target.group}/{target.version}"
        self._prefix_slash = self._prefix + "/"
        self._access_key = access_key
        self._namespace_exists = namespace_exists
        self._clock = clock
        self._target_namespaces: set[str] = set()
        self._names: dict[str, tuple[str, str]] = {}
        """Singular and kind of each resource, from the target's last live discovery (for the fallback)."""
        self._unavailable = (
            f'target tenant cluster "{target.target_name}" for {target.group_version} is unavailable'
        )
        self.pool = HostPool(
            self.cache,
            dial,
            DialObserver(self._dial_ok, self._dial_failed),
            dial_timeout=lambda: self.settings.peers.dial_timeout_seconds,
            clock=clock,
            connections_per_host=self.settings.connections_per_peer,
            keepalive_timeout=self.settings.keepalive_seconds,
            authority=self.placeholder,
        )
        metrics.add_target(self.label)
        # Label children looked up once: ``labels()`` validates and stringifies its arguments under a lock
        # on every call, a measurable share of a proxied GET.
        self._inflight = metrics.inflight.labels(self.label)
        self._durations: dict[str, Histogram] = {}
        self._counts: dict[tuple[str, int, str], Counter] = {}
        self.first_list = asyncio.Event()
        self.log = log.bind(target=self.label, groupVersion=target.group_version)

    # -- peer feed -------------------------------------------------------------------------------------

    def publish(self, hosts: list[Host]) -> None:
        for event in self.cache.publish(hosts):
            self._event(event)
        self.pool.prune()
        self.first_list.set()

    async def probe(self) -> bool:
        """One request to the target (its discovery for this group/version): is it reachable at all?"""
        headers: CIMultiDict[str] = CIMultiDict(
            {"Accept": JSON_TYPE, "Authorization": f"Bearer {self._access_key()}"}
        )
        path = f"/apis/{self.target.group}/{self.target.version}"
        try:
            # Capped as any request: a target that takes the connection and never answers fails the probe
            # (and logs so) rather than holding it forever.
            async with Deadline(self.settings.request_timeout_seconds):
                upstream = await self._send("GET", path, headers, None, Outcome())
                async with upstream:
                    return upstream.status < 500
        except (Unavailable, DeadlineExceeded):
            return False

    # -- dial accounting ---------------------------------------------------------------------------------

    def _dial_ok(self, host: Host, trial: bool, seconds: float) -> None:
        self.metrics.dial_duration.labels(self.label).observe(seconds)
        for event in self.cache.dial_succeeded(host):
            self._event(event)

    def _dial_failed(
        self, host: Host, trial: bool, reason: str, seconds: float, cause: BaseException | None
    ) -> None:
        self.metrics.dial_duration.labels(self.label).observe(seconds)
        self.metrics.dial_failures.labels(self.label, reason).inc()
        self.log.info(
            "proxy target dial failed",
            host=host.name,
            peer=host.peer_id,
            reason=reason,
            error=describe(cause) if cause is not None else reason,
        )
        if reason in ("canceled", "deadline", "ts_server_unavailable"):
            # The caller or a cap ended it, or this replica's own platform connection is down (no peer was
            # contacted): not the peer's fault, so no step towards its quarantine.
            if trial:
                self.cache.release_trial(host)
            return
        for event in self.cache.dial_failed(host, trial=trial):
            self._event(event)

    def _event(self, event: Event) -> None:
        if event.kind is EventKind.QUARANTINED and event.host is not None:
            self.metrics.quarantines.labels(self.label).inc()
            self.pool.drop(event.host)
            self.log.warning(
                "quarantining proxy target peer host after consecutive dial failures",
                host=event.host.name,
                consecutiveFailures=event.consecutive_failures,
                quarantineSeconds=self.settings.peers.quarantine_seconds,
            )
        elif event.kind is EventKind.ALL_QUARANTINED:
            self.metrics.all_quarantined.labels(self.label).inc()
            self.log.error(
                "all peer hosts for the proxy target are quarantined; requests fail fast with 503 until "
                "a peer becomes dialable"
            )
        elif event.kind is EventKind.RECOVERED:
            self.metrics.recoveries.labels(self.label).inc()
            if event.host is not None:
                self.log.info("proxy target peer host recovered", host=event.host.name)

    # -- the handler ---------------------------------------------------------------------------------

    def serves(self, path: str) -> bool:
        """Only this proxy's group/version is forwarded. After a group/version leaves the config, its
        lingering APIService still names port ``9100 + n``, which may now belong to another group's proxy;
        forwarding it there would keep serving the removed group with that entry's target and access mode.
        Refused, the lingering group reads as unavailable, as the runbook's decommission section says."""
        return path == self._prefix or path.startswith(self._prefix_slash)

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        if not self.serves(request.path):
            return status_response(errors.not_found_path())
        watch = request.query.get("watch", "").lower() in ("true", "1")
        info = requestinfo.parse(request.method, request.path, watch)
        verb = info.verb if info.is_resource else request.method.lower()
        outcome = Outcome()
        if is_upgrade(request):
            outcome.set("upgrade_rejected")
            self.metrics.terminations.labels(self.label, "upgrade_rejected").inc()
            return self._finish(
                outcome, verb, status_response(errors.StatusError(501, "NotImplemented", UPGRADE_MESSAGE))
            )
        if request.method in ("GET", "HEAD") and discovery.is_discovery(request.path, self.target):
            return self._finish(outcome, verb, await self._discovery(request, outcome))
        if info.verb == "watch":
            return await self._watch(request, info, outcome)
        self._inflight.inc()
        started = self._clock()
        response: web.StreamResponse
        try:
            async with Deadline(self.settings.request_timeout_seconds) as deadline:
                response = await self._request(request, info, outcome, deadline)
        except DeadlineExceeded:
            if outcome.reason == "upstream":  # the answer had begun; the cap ended it
                outcome.reason = ""
            outcome.set("deadline")
            self.metrics.terminations.labels(self.label, "deadline").inc()
            self._request_failed(request, info, "context deadline exceeded")
            if outcome.streaming is not None:
                # Its status line and part of its body are out: a 503 now would land inside that body.
                # The connection is cut, so the caller cannot take the partial answer for a whole one.
                response = outcome.streaming
                if request.transport is not None:
                    request.transport.abort()
            else:
                response = self._unavailable_response("context deadline exceeded")
        finally:
            self._inflight.dec()
            duration = self._durations.get(verb)
            if duration is None:
                duration = self._durations[verb] = self.metrics.request_duration.labels(self.label, verb)
            duration.observe(self._clock() - started)
        return self._finish(outcome, verb, response)

    def _finish(self, outcome: Outcome, verb: str, response: web.StreamResponse) -> web.StreamResponse:
        self._count(outcome, verb, response.status)
        return response

    def _count(self, outcome: Outcome, verb: str, code: int) -> None:
        reason = outcome.reason or "upstream"
        counter = self._counts.get((verb, code, reason))
        if counter is None:  # created at its first event, as the series appears then
            counter = self._counts[(verb, code, reason)] = self.metrics.requests.labels(
                self.label, self.target.group_version, verb, str(code), reason
            )
        counter.inc()

    # -- discovery -------------------------------------------------------------------------------------

    async def _discovery(self, request: web.BaseRequest, outcome: Outcome) -> web.StreamResponse:
        status, body, headers = await self._discovery_answer(
            request.method, request.rel_url.raw_path_qs, self._headers(request), outcome
        )
        return web.Response(status=status, body=body, headers=headers)

    async def _discovery_answer(
        self,
        method: str,
        path_qs: str,
        headers: CIMultiDict[str],
        outcome: Outcome,
        budget: float | None = None,
    ) -> tuple[int, bytes, CIMultiDict[str]]:
        """The target's discovery document while it answers, else the fallback (always 200, spec §5)."""
        try:
            async with Deadline(budget if budget is not None else self.settings.discovery_timeout_seconds):
                upstream = await self._send(method, path_qs, headers, None, outcome)
                async with upstream:
                    status = upstream.status
                    body = await upstream.read() if status < 400 else b""
                    answer_headers = end_to_end(upstream.headers)
        except Unavailable:
            reason = outcome.reason if outcome.reason in (r.value for r in Reason) else "upstream_error"
            return self._fallback(reason)
        except DeadlineExceeded:
            # The discovery budget (3 s), not the 60 s request deadline the runbook's `deadline` names: the
            # request's series carries the fallback's reason, as for a target's 5xx (spec §5).
            outcome.set("upstream_error")
            return self._fallback("upstream_error")
        if status in (401, 404) or status >= 500:
            outcome.set("upstream_error")  # the request's series carries the fallback's reason
            return self._fallback("upstream_error")
        outcome.set("upstream")
        if status == 200:
            self._names.update(discovery.names_of(body))
        return status, body, answer_headers

    def _fallback(self, reason: str) -> tuple[int, bytes, CIMultiDict[str]]:
        self.metrics.discovery_fallbacks.labels(self.label, self.target.group_version, reason).inc()
        return (
            200,
            discovery.fallback_body(self.target, self._names),
            CIMultiDict({"Content-Type": JSON_TYPE}),
        )

    async def fetch(self, path: str) -> tuple[int, bytes]:
        """A GET from inside the replica (the aggregator's availability check and OpenAPI download), as
        the client's identity like every proxied request; discovery falls back as for any caller."""
        headers: CIMultiDict[str] = CIMultiDict(
            {"Accept": JSON_TYPE, "Authorization": f"Bearer {self._access_key()}"}
        )
        outcome = Outcome()
        openapi = f"/openapi/v3/apis/{self.target.group}/{self.target.version}"
        if not (self.serves(path) or path == "/openapi/v3" or path.split("?", 1)[0] == openapi):
            return 404, b""
        if discovery.is_discovery(path, self.target):
            # The API server checks the APIService as soon as the leader registers it, which can be before
            # this replica's first peer list: answered then, the check is a certain `no_peer` fallback in the
            # metrics of a cluster nobody has used yet. It waits for the list within the discovery budget.
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.settings.discovery_timeout_seconds
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(deadline):
                    await self.first_list.wait()
            remaining = max(deadline - loop.time(), 0.001)
            status, body, _ = await self._discovery_answer("GET", path, headers, outcome, remaining)
            self._count(outcome, "get", status)
            return status, body
        try:
            upstream = await self._send("GET", path, headers, None, outcome)
        except Unavailable:
            return 503, b""
        async with upstream:
            return upstream.status, await upstream.read()

    # -- resource requests ---------------------------------------------------------------------------

    async def _request(
        self, request: web.BaseRequest, info: requestinfo.RequestInfo, outcome: Outcome, deadline: Deadline
    ) -> web.StreamResponse:
        body: bytes | None = None
        if request.can_read_body:
            # The declared length is refused before reading; a body past the API server's own read limit
            # raises aiohttp's 413, which would otherwise reach the caller as a 500.
            limit = self.settings.max_body_bytes
            length = request.content_length
            try:
                if length is None or length <= limit:
                    body = await request.read()
            except web.HTTPRequestEntityTooLarge:
                body = None
            if body is None or len(body) > limit:
                outcome.set("upstream")
                return status_response(
                    errors.request_entity_too_large(f"Request entity too large: limit is {limit}")
                )
        headers = self._headers(request)
        path_qs = request.rel_url.raw_path_qs
        try:
            if info.is_resource:
                labels: list[Mapping[str, str]] = []  # the object's labels, when its ownership GET read them
                answered = await self._prepare(request, info, outcome, headers, labels)
                if isinstance(answered, web.StreamResponse):
                    return answered
                path_qs = answered
                if body is not None and self.owner is not None and request.method in ("POST", "PUT", "PATCH"):
                    body = self._inject(body, headers, labels[0] if labels else None)
                if self.owner is not None and info.verb == "get" and info.name and not info.subresource:
                    return await self._owned_get(request, info, outcome, headers, path_qs)
            upstream = await self._send(request.method, path_qs, headers, body, outcome)
        except Unavailable as exc:
            if outcome.reason == "upstream":  # not a dial's failure (those log their own line)
                self._request_failed(request, info, exc.detail or "the exchange with the target failed")
            return self._unavailable_response(exc.detail)
        return await self._answer(request, upstream, outcome, info)

    async def _prepare(
        self,
        request: web.BaseRequest,
        info: requestinfo.RequestInfo,
        outcome: Outcome,
        headers: CIMultiDict[str],
        labels: list[Mapping[str, str]],
    ) -> web.StreamResponse | str:
        """Namespace mirroring and ownership checks; the path to send, or the answer already decided (the
        object's labels go to ``labels`` when its ownership GET read them)."""
        if request.method in ("POST", "PUT", "PATCH") and info.namespace:
            if not await self._namespace_exists(info.namespace):
                outcome.set("namespace_missing")
                return status_response(errors.not_found("namespaces", info.namespace))
            await self._ensure_target_namespace(info.namespace, outcome)
        if self.owner is None:
            return request.rel_url.raw_path_qs
        if info.verb in ("list", "watch", "deletecollection"):
            query = list(request.rel_url.query.items())
            selector = ownership.merge_selector(request.rel_url.query.get("labelSelector"), self.owner)
            query = [(k, v) for k, v in query if k != "labelSelector"] + [("labelSelector", selector)]
            return request.rel_url.raw_path + "?" + urlencode(query, quote_via=quote)
        if info.name and info.subresource and request.method in ("GET", "HEAD"):
            # A subresource (status, scale) shows the object too: owned, or 404 as the object's own GET.
            denied = await self._check_owned(info, outcome, headers)
            if denied is not None:
                return denied
        if info.name and request.method in ("PUT", "PATCH", "DELETE"):
            # Server-side apply creates a missing object: its ownership GET's 404 lets it through (the
            # apply patch carries the labels).
            creates = request.method == "PATCH" and ownership.media_type(headers.get("Content-Type")) in (
                ownership.APPLY_PATCH_YAML,
                ownership.APPLY_PATCH_JSON,
            )
            denied = await self._check_owned(info, outcome, headers, missing_ok=creates, labels=labels)
            if denied is not None:
                return denied
        return request.rel_url.raw_path_qs

    async def _check_owned(
        self,
        info: requestinfo.RequestInfo,
        outcome: Outcome,
        headers: CIMultiDict[str],
        *,
        missing_ok: bool = False,
        labels: list[Mapping[str, str]] | None = None,
    ) -> web.StreamResponse | None:
        """The ownership GET before a named mutation (spec §4): 5xx is 503, anything but an owned 200 is 404
        (a 404 passes when ``missing_ok``: an apply that creates the object)."""
        assert self.owner is not None
        path = object_path(info)
        check_headers = CIMultiDict(headers)
        check_headers["Accept"] = JSON_TYPE
        check_headers.popall("Accept-Encoding", None)  # the proxy reads this answer itself
        upstream = await self._send("GET", path, check_headers, None, outcome)
        async with upstream:
            status = upstream.status
            data = await upstream.read() if status == 200 else b""
        if status >= 500:
            outcome.set("ownership_check_failed")
            return self._unavailable_response()
        if status == 404:
            if missing_ok:
                return None
            outcome.set("upstream")
            return status_response(self._not_found(info))
        if status != 200:
            outcome.set("ownership_masked")
            return status_response(self._not_found(info))
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            outcome.set("ownership_check_failed")
            return status_response(self._not_found(info))
        if not self.owner.owns(obj):
            outcome.set("ownership_masked")
            return status_response(self._not_found(info))
        if labels is not None:
            labels.append(obj["metadata"]["labels"])  # owns() checked they are there
        return None

    async def _owned_get(
        self,
        request: web.BaseRequest,
        info: requestinfo.RequestInfo,
        outcome: Outcome,
        headers: CIMultiDict[str],
        path_qs: str,
    ) -> web.StreamResponse:
        """A named GET in owned mode: the object is fetched and shown only if this client owns it."""
        assert self.owner is not None
        headers.popall("Accept-Encoding", None)  # the proxy reads the object to check its labels
        upstream = await self._send("GET", path_qs, headers, None, outcome)
        if upstream.status != 200:
            return await self._answer(request, upstream, outcome, info)
        async with upstream:
            data = await upstream.read()
            content_type = upstream.headers.get("Content-Type", JSON_TYPE)
        try:
            # The caller may have asked for YAML (kubectl does not; other clients do).
            yaml_answer = ownership.media_type(content_type) == ownership.YAML
            doc = yamlsafe.load(data) if yaml_answer else orjson.loads(data)
        except (orjson.JSONDecodeError, yaml.YAMLError):
            outcome.set("ownership_check_failed")
            return status_response(self._not_found(info))
        owned = self._owned_document(doc)
        if owned is None:  # a Table without object metadata: ask for the object itself
            denied = await self._check_owned(info, outcome, headers)
            if denied is not None:
                return denied
            owned = True
        if not owned:
            outcome.set("ownership_masked")
            return status_response(self._not_found(info))
        outcome.set("upstream")
        return web.Response(body=data, status=200, headers={"Content-Type": content_type})

    def _owned_document(self, doc: Any) -> bool | None:
        assert self.owner is not None
        if isinstance(doc, dict) and doc.get("kind") == "Table":
            rows = doc.get("rows") or []
            objects = [r.get("object") for r in rows if isinstance(r, dict)]
            if not objects or any(not isinstance(o, dict) or "metadata" not in o for o in objects):
                return None
            return all(self.owner.owns(o) for o in objects)
        return self.owner.owns(doc)

    def _inject(self, body: bytes, headers: CIMultiDict[str], current: Mapping[str, str] | None) -> bytes:
        assert self.owner is not None
        try:
            labelled, content_type = ownership.inject(body, headers.get("Content-Type"), self.owner, current)
        except ownership.NotInjectable as exc:
            self.log.warning("inject source labels failed", error=str(exc))
            return body
        headers["Content-Type"] = content_type
        return labelled

    async def _ensure_target_namespace(self, namespace: str, outcome: Outcome) -> None:
        if namespace in self._target_namespaces:
            return
        headers: CIMultiDict[str] = CIMultiDict(
            {"Accept": JSON_TYPE, "Authorization": f"Bearer {self._access_key()}"}
        )
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}"
        upstream = await self._send("GET", path, headers, None, outcome)
        async with upstream:
            status = upstream.status
        if status == 404:
            self.log.info("creating namespace on target cluster", namespace=namespace)
            body = orjson.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
            headers["Content-Type"] = JSON_TYPE
            created = await self._send(
                "POST", f"/api/v1/namespaces?fieldManager={PROXY_FIELD_MANAGER}", headers, body, outcome
            )
            async with created:
                status = 200 if created.status in (201, 409) else created.status
        if status == 200:
            self._target_namespaces.add(namespace)
        else:  # the write itself gets the target's answer (e.g. 403 if the client may not create it)
            self.log.warning("cannot mirror namespace to target cluster", namespace=namespace, status=status)

    # -- watches ---------------------------------------------------------------------------------------

    async def _watch(
        self, request: web.BaseRequest, info: requestinfo.RequestInfo, outcome: Outcome
    ) -> web.StreamResponse:
        headers = self._headers(request)
        try:
            answered = await self._prepare(request, info, outcome, headers, [])
            if isinstance(answered, web.StreamResponse):
                return self._finish(outcome, "watch", answered)
            upstream = await self._send("GET", answered, headers, None, outcome)
        except Unavailable as exc:
            if outcome.reason == "upstream":
                self._request_failed(request, info, exc.detail or "the exchange with the target failed")
            return self._finish(outcome, "watch", self._unavailable_response(exc.detail))
        if upstream.status != 200:
            return self._finish(outcome, "watch", await self._answer(request, upstream, outcome, info))
        outcome.set("upstream")
        self._count(outcome, "watch", 200)
        gauge = self.metrics.active_watches.labels(self.label)
        events = self.metrics.watch_events.labels(self.label)
        content_type = upstream.headers.get("Content-Type", "")
        count = content_type.startswith(JSON_TYPE) and not upstream.headers.get("Content-Encoding")
        gauge.inc()
        # A caller that goes ends its watch now, not at the target's next event (which may be long off).
        task = asyncio.current_task()

        def caller_gone() -> None:
            if task is not None:
                task.cancel()

        forget = on_connection_lost(request, caller_gone)
        try:
            return await relay(
                request, upstream, outcome, on_chunk=(lambda c: events.inc(c.count(b"\n"))) if count else None
            )
        finally:
            forget()
            gauge.dec()

    # -- upstream --------------------------------------------------------------------------------------

    def _headers(self, request: web.BaseRequest) -> CIMultiDict[str]:
        headers: CIMultiDict[str] = CIMultiDict(strip_identity_headers(request.headers.items()))
        headers["Authorization"] = f"Bearer {self._access_key()}"
        return headers

    async def _send(
        self, method: str, path_qs: str, headers: CIMultiDict[str], body: bytes | None, outcome: Outcome
    ) -> UpstreamResponse:
        selection = self.cache.select()
        if not isinstance(selection, Selection):
            outcome.set(selection.value)
            self.metrics.dial_failures.labels(self.label, selection.value).inc()
            raise Unavailable()
        token = bind_selection(selection)
        try:
            return await self.pool.request(selection.host, method, path_qs, headers.items(), body)
        except DialFailed as exc:
            outcome.set(exc.reason)
            raise Unavailable(describe(exc.cause if exc.cause is not None else exc)) from exc
        except (aiohttp.ClientError, HttpProcessingError, OSError) as exc:
            outcome.set("upstream")
            raise Unavailable(describe(exc)) from exc
        finally:
            reset_selection(token)
            if selection.trial and not selection.dialled:
                self.cache.release_trial(selection.host)

    def _request_failed(self, request: web.BaseRequest, info: requestinfo.RequestInfo, error: str) -> None:
        """The client's log line for a failed request: the cap (the runbook's ``context deadline exceeded``
        ... ``.vcluster.invalid`` pattern), and a 503 counted as ``upstream``, which the runbook has the
        operator read to tell a target's 5xx from a failure on the proxy's side before blaming the target."""
        url = self._base + request.rel_url.raw_path_qs
        verb = info.verb if info.is_resource else request.method.lower()
        self.log.warning(
            "proxy request failed",
            verb=verb,
            error=f'{request.method.capitalize()} "{url}": {error}',
            url=url,
        )

    async def _answer(
        self,
        request: web.BaseRequest,
        upstream: UpstreamResponse,
        outcome: Outcome,
        info: requestinfo.RequestInfo,
    ) -> web.StreamResponse:
        status = upstream.status
        if status >= 500:
            upstream.release()
            outcome.set("upstream")
            self._request_failed(request, info, f"the target answered {status}")
            return self._unavailable_response()
        if status == 401:
            upstream.release()
            outcome.set("upstream")
            return status_response(errors.unauthorized("auth failed"))
        if status == 404 and upstream.headers.get("Content-Type", "").startswith(JSON_TYPE):
            data = await upstream.read()
            upstream.release()
            self._forget_namespace(data)
            outcome.set("upstream")
            return web.Response(body=data, status=404, headers=end_to_end(upstream.headers))
        outcome.set("upstream")
        return await relay(request, upstream, outcome)

    def _forget_namespace(self, data: bytes) -> None:
        """A write answered ``namespaces "x" not found``: the target lost the namespace; mirror it again."""
        try:
            details = orjson.loads(data).get("details") or {}
        except (orjson.JSONDecodeError, AttributeError):
            return
        if details.get("kind") == "namespaces":
            self._target_namespaces.discard(str(details.get("name", "")))

    # -- answers ---------------------------------------------------------------------------------------

    def _not_found(self, info: requestinfo.RequestInfo) -> errors.StatusError:
        details = {"name": info.name, "group": info.group, "kind": info.resource}
        return errors.StatusError(404, "NotFound", "resource not found", details=details)

    def _unavailable_response(self, detail: str = "") -> web.Response:
        message = f"{self._unavailable}: {detail}" if detail else self._unavailable
        return status_response(errors.service_unavailable(message, self.settings.retry_after_seconds))
