"""The API server's side of ``pods/log``: find the pod's node and stream the answer of its kubelet.

As kube-apiserver does (``pkg/registry/core/pod/rest/log.go``, ``LogLocation``): the container is
checked (``validateContainer``), the ``PodLogOptions`` validated, a pod not scheduled yet has no log
(204), the node's address is taken in the order of ``kubelet_preferred_address_types`` and its port from
``status.daemonEndpoints.kubeletEndpoint.Port`` (10250 when unset), and the request goes to
``https://<address>:<port>/containerLogs/<namespace>/<pod>/<container>`` with the same options. The API
server authenticates itself with a client certificate of its own CA (``kube-apiserver-kubelet-client``,
group ``system:masters``, kept in ``pki/``) and, unlike upstream's default, verifies the kubelet's
serving certificate against its own CA (or ``kubelet_certificate_authority``): a Node object that names
some other address gets no request sent past the TLS handshake. The kubelet's answer is streamed as it
comes (``kubectl logs -f``); its errors become Statuses as ``GenericHttpResponseChecker`` makes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import ssl
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import aiohttp
import structlog
import yarl
from aiohttp import web

from vplane.apiserver.context import RequestContext
from vplane.apiserver.registry import ResourceType
from vplane.kube import errors, remotecommand
from vplane.kube.objects import Obj
from vplane.kube.requestinfo import RequestInfo
from vplane.support import httprelay, proxypath, proxyrewrite, requestheader, tls

if TYPE_CHECKING:
    from vplane.apiserver.server import APIServer

log = structlog.get_logger("vplane.apiserver.kubeletclient")

DEFAULT_KUBELET_PORT = 10250
CLIENT_USER = "kube-apiserver-kubelet-client"
CLIENT_GROUPS = ("system:masters",)
LOG_OPTIONS = ("follow", "previous", "sinceSeconds", "sinceTime", "timestamps", "tailLines", "limitBytes")
ERROR_BODY_LIMIT = 4096


def _d(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int_option(query: dict[str, str], name: str) -> int | None:
    raw = query.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise errors.bad_request(
            f'{name}: Invalid value: "{raw}": strconv.ParseInt: parsing "{raw}": invalid syntax'
        ) from None


def validate_log_options(name: str, query: dict[str, str]) -> None:
    """``ValidatePodLogOptions``: 422 ``PodLogOptions "<pod>" is invalid`` with upstream's causes."""
    causes = []
    tail = _int_option(query, "tailLines")
    if tail is not None and tail < 0:
        causes.append(errors.field_invalid("tailLines", tail, "must be greater than or equal to 0"))
    limit = _int_option(query, "limitBytes")
    if limit is not None and limit < 1:
        causes.append(errors.field_invalid("limitBytes", limit, "must be greater than 0"))
    since = _int_option(query, "sinceSeconds")
    if since is not None and query.get("sinceTime"):
        causes.append(
            errors.field_forbidden("", "at most one of `sinceTime` or `sinceSeconds` may be specified")
        )
    elif since is not None and since < 1:
        causes.append(errors.field_invalid("sinceSeconds", since, "must be greater than 0"))
    if causes:
        raise errors.invalid("PodLogOptions", name, causes)


def node_address(node: Obj, preferred: list[str]) -> str:
    addresses = [_d(a) for a in _d(node.get("status")).get("addresses") or []]
    for kind in preferred:
        for address in addresses:
            if address.get("type") == kind and address.get("address"):
                return str(address["address"])
    known = ", ".join(f"{{{a.get('type')} {a.get('address')}}}" for a in addresses)
    raise errors.bad_request(f"no preferred addresses found; known addresses: [{known}]")


def kubelet_port(node: Obj) -> int:
    endpoint = _d(_d(_d(node.get("status")).get("daemonEndpoints")).get("kubeletEndpoint"))
    port = endpoint.get("Port")
    return port if isinstance(port, int) and 0 < port < 65536 else DEFAULT_KUBELET_PORT


def _dial_error(url: str, host: str, port: int, exc: BaseException) -> str:
    """Go's ``*url.Error`` text for a failed GET, which is what kubectl shows for an unreachable kubelet."""
    target = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError | ssl.SSLCertVerificationError):
        return (
            f'Get "{url}": tls: failed to verify certificate: x509: certificate signed by unknown authority'
        )
    if isinstance(exc, aiohttp.ClientSSLError):
        return f'Get "{url}": remote error: tls: handshake failure'
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return f'Get "{url}": dial tcp {target}: i/o timeout'
    os_error = getattr(exc, "os_error", exc)
    number = getattr(os_error, "errno", None)
    text = os.strerror(number).lower() if isinstance(number, int) and number > 0 else str(exc).lower()
    return f'Get "{url}": dial tcp {target}: connect: {text}'


class KubeletClient:
    def __init__(self, server: APIServer) -> None:
        self.server = server
        self._session: aiohttp.ClientSession | None = None
        self._stream_ssl: ssl.SSLContext | None = None

    def _ssl_context(self) -> ssl.SSLContext:
        server = self.server
        assert server.ca is not None, "the API server has not loaded its CA yet"
        pki = server.data_dir / "pki"
        cert, key = pki / "apiserver-kubelet-client.crt", pki / "apiserver-kubelet-client.key"
        if not cert.exists() or not key.exists():
            tls.issue_client(server.ca, CLIENT_USER, CLIENT_GROUPS).write(cert, key)
        settings = server.settings
        authority = (
            settings.kubelet_certificate_authority.read_bytes()
            if settings.kubelet_certificate_authority is not None
            else server.ca.cert_pem
        )
        ctx = ssl.create_default_context(cadata=authority.decode())
        ctx.load_cert_chain(cert, key)
        return ctx

    async def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            ctx = await asyncio.to_thread(self._ssl_context)
            connector = aiohttp.TCPConnector(ssl=ctx, limit=0, enable_cleanup_closed=True)
            self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def pod_logs(
        self,
        request: web.Request,
        ctx: RequestContext,
        rtype: ResourceType,
        info: RequestInfo,
        container: str,
        pod: Obj,
    ) -> web.StreamResponse:
        query = {k: request.query[k] for k in request.query}
        validate_log_options(info.name, query)
        node_name = str(_d(pod.get("spec")).get("nodeName") or "")
        if not node_name:
            return web.Response(status=204)
        nodes = self.server.registry.get("", "v1", "nodes")
        node = self.server.objects.get(nodes, "", node_name) if nodes is not None else None
        if node is None:
            raise errors.not_found("nodes", node_name)
        host = node_address(node, self.server.settings.kubelet_preferred_address_types)
        port = kubelet_port(node)
        params = {k: query[k] for k in LOG_OPTIONS if query.get(k) not in (None, "")}
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        path = "/".join(quote(p, safe="") for p in (info.namespace, info.name, container))
        url = f"https://{authority}/containerLogs/{path}" + (f"?{urlencode(params)}" if params else "")
        session = await self._client()
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.server.settings.kubelet_timeout_seconds, sock_read=None
        )
        try:
            upstream = await session.get(url, timeout=timeout)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise errors.kubelet_unreachable(_dial_error(url, host, port, exc)) from None
        try:
            if not 200 <= upstream.status <= 206:
                body = (await upstream.content.read(ERROR_BODY_LIMIT)).decode(errors="replace")
                raise errors.kubelet_answer(upstream.status, body, "pods/log", info.name)
            response = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
            response.enable_chunked_encoding()
            return await proxypath.relay_body(request, response, upstream)
        finally:
            upstream.release()

    # -- proxy ---------------------------------------------------------------------------------------

    def node(self, node_name: str) -> Obj:
        nodes = self.server.registry.get("", "v1", "nodes")
        node = self.server.objects.get(nodes, "", node_name) if nodes is not None and node_name else None
        if node is None:
            raise errors.not_found("nodes", node_name)
        return node

    async def proxy(
        self, request: web.Request, node: Obj, target: str, path: str, backend_host: str = ""
    ) -> web.StreamResponse:
        """``nodes/proxy`` (``target`` a kubelet path) and ``pods/``/``services/proxy`` (the kubelet's pod
        proxy, :mod:`vplane.runtime.podproxy`): the request (method, end-to-end headers without the caller's
        credentials, body) goes to the node's kubelet under this server's kubelet client certificate, and the
        answer comes back streamed, as upstream's ``UpgradeAwareHandler`` passes it on: a GET of the bare
        proxy path is redirected to it with a slash, ``X-Forwarded-Uri`` names the caller's path, CORS
        headers are dropped, and links to the backend (``backend_host``, ``Location``, HTML attributes) go
        through the proxy path (:mod:`vplane.support.proxyrewrite`). ``target`` and ``path`` (what follows
        ``/proxy``) are percent-encoded."""
        raw_path = request.rel_url.raw_path
        if not path and request.method in ("GET", "HEAD"):
            query = request.rel_url.raw_query_string
            location = raw_path + "/" + (f"?{query}" if query else "")
            return web.Response(status=301, headers={"Location": location})
        prepend = proxyrewrite.path_prepend(raw_path, path)
        host = node_address(node, self.server.settings.kubelet_preferred_address_types)
        port = kubelet_port(node)
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        url = yarl.URL(f"https://{authority}{target}", encoded=True)
        if request.rel_url.raw_query_string:
            url = url.with_query(request.rel_url.raw_query_string)
        headers = requestheader.strip_identity_headers(proxypath.end_to_end(request.headers))
        headers.append(("X-Forwarded-Uri", proxyrewrite.forwarded_uri(prepend, path)))
        body = await request.read() if request.can_read_body else None
        session = await self._client()
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.server.settings.kubelet_timeout_seconds, sock_read=None
        )
        try:
            upstream = await session.request(
                request.method, url, headers=headers, data=body, allow_redirects=False, timeout=timeout
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise errors.kubelet_unreachable(_dial_error(str(url), host, port, exc)) from None

        def link(value: str) -> str:
            return proxyrewrite.rewrite_url(value, backend_host, request.host, prepend)

        async with upstream:
            answer = [
                (k, link(v) if k.lower() == "location" else v)
                for k, v in proxypath.end_to_end(upstream.headers)
                if k.lower() not in proxyrewrite.CORS_HEADERS
            ]
            content_type = upstream.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
            if (
                content_type == "text/html"
                and "Location" not in upstream.headers
                and request.method != "HEAD"
            ):
                page = await upstream.read()
                encoding = upstream.headers.get("Content-Encoding", "")
                rewritten = proxyrewrite.rewrite_html(page, encoding, backend_host, request.host, prepend)
                return web.Response(
                    status=upstream.status,
                    reason=upstream.reason,
                    headers=answer,
                    body=page if rewritten is None else rewritten,
                )
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers=answer)
            if upstream.content_length is not None:
                response.content_length = upstream.content_length
            return await proxypath.relay_body(request, response, upstream)

    # -- exec, attach, port-forward ---------------------------------------------------------------

    async def pod_stream(
        self, request: web.Request, info: RequestInfo, container: str, pod: Obj
    ) -> web.StreamResponse:
        """Relay an upgraded exec, attach or port-forward request to the pod's kubelet (``ExecLocation``,
        ``AttachLocation``, ``PortForwardLocation``): the client's upgrade headers (never its credentials)
        go to ``/exec/<ns>/<pod>/<container>``, ``/attach/...`` or ``/portForward/<ns>/<pod>`` with the
        kubelet's parameter names, under this server's kubelet client certificate; a 101 is passed back and
        the two connections spliced, so every subprotocol the kubelet speaks reaches the client unchanged.

        A kubelet that refuses (``container not found ("main")``): a WebSocket remote-command client gets
        the upgrade and the refusal as an internal error on the error channel, as upstream's stream
        translator answers (``unable to upgrade connection: ...``); any other client gets the kubelet's
        answer as it is, as upstream's upgrade-aware proxy passes it on."""
        node_name = str(_d(pod.get("spec")).get("nodeName") or "")
        if not node_name:
            raise errors.pod_without_host(info.name)
        nodes = self.server.registry.get("", "v1", "nodes")
        node = self.server.objects.get(nodes, "", node_name) if nodes is not None else None
        if node is None:
            raise errors.not_found("nodes", node_name)
        host = node_address(node, self.server.settings.kubelet_preferred_address_types)
        port = kubelet_port(node)
        if not httprelay.is_upgrade(request.headers):
            raise errors.bad_request("Upgrade request required")
        query = {k: request.query.getall(k) for k in set(request.query.keys())}
        params = remotecommand.kubelet_query(info.subresource, query)
        if info.subresource == "portforward":
            parts: tuple[str, ...] = ("portForward", info.namespace, info.name)
        else:
            parts = (info.subresource, info.namespace, info.name, container)
        target = (
            "/" + "/".join(quote(p, safe="") for p in parts) + (f"?{urlencode(params)}" if params else "")
        )
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        headers = [
            (k, v) for k, v in request.headers.items() if k.lower() in httprelay.UPGRADE_REQUEST_HEADERS
        ]
        try:
            head = httprelay.request_head(request.method, target, authority, headers)
        except ValueError as exc:
            raise errors.bad_request(str(exc)) from None
        ctx = await self._ssl()
        timeout = self.server.settings.kubelet_timeout_seconds
        url = f"https://{authority}{target}"

        async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            try:
                return await asyncio.wait_for(
                    asyncio.open_connection(host, port, ssl=ctx, limit=httprelay.UPGRADE_HEAD_LIMIT), timeout
                )
            except (OSError, TimeoutError, ssl.SSLError) as exc:
                raise errors.kubelet_unreachable(_upgrade_dial_error(url, host, port, exc)) from None

        try:
            reader, writer, answer = await httprelay.while_client_stays(
                request, httprelay.dial_upgrade(connect, head, timeout)
            )
        except (OSError, TimeoutError, httprelay.UpgradeError) as exc:
            raise errors.kubelet_unreachable(
                f"error dialing backend: {str(exc) or type(exc).__name__}"
            ) from None
        except httprelay.ClientGone:
            return httprelay.TakenResponse()
        if answer.status == 101:
            return await httprelay.relay_upgrade(request, reader, writer, answer)
        client = remotecommand.offered(request.headers.getall("Sec-WebSocket-Protocol", []))
        channel_protocol = remotecommand.negotiate(client, remotecommand.REMOTE_COMMAND_WEBSOCKET)
        if info.subresource == "portforward" or request.headers.get("Upgrade", "").lower() != "websocket":
            return await httprelay.relay_upgrade(request, reader, writer, answer)
        try:
            body = (
                (await httprelay.read_body(reader, answer, ERROR_BODY_LIMIT)).decode(errors="replace").strip()
            )
        except (OSError, TimeoutError, ValueError):
            body = ""
        finally:
            writer.close()
        if channel_protocol is None:
            raise errors.internal_error(f"unable to upgrade connection: {body}")
        return await _refusal_on_error_channel(
            request, channel_protocol, f"unable to upgrade connection: {body}"
        )

    async def _ssl(self) -> ssl.SSLContext:
        if self._stream_ssl is None:
            self._stream_ssl = await asyncio.to_thread(self._ssl_context)
        return self._stream_ssl


async def _refusal_on_error_channel(request: web.Request, protocol: str, message: str) -> web.StreamResponse:
    """Upstream's ``StreamTranslatorHandler``: the client's WebSocket is upgraded first, so what stops the
    stream after that is an internal error Status on the error channel."""
    ws = web.WebSocketResponse(protocols=[protocol] if protocol else ())
    await ws.prepare(request)
    status = errors.internal_error(message).to_status()
    payload = (
        json.dumps(status).encode() if remotecommand.status_on_error_channel(protocol) else message.encode()
    )
    with contextlib.suppress(ConnectionError, OSError, RuntimeError):
        frame = remotecommand.encode(protocol or remotecommand.V1, remotecommand.ERROR, payload)
        if isinstance(frame, str):
            await ws.send_str(frame)
        else:
            await ws.send_bytes(frame)
        await ws.close()
    return ws


def _upgrade_dial_error(url: str, host: str, port: int, exc: BaseException) -> str:
    """The upgrade-aware proxy's words: ``error dialing backend: dial tcp ...: connect: connection
    refused`` (the dial error after ``Get "<url>": ``)."""
    message = _dial_error(url, host, port, exc)
    return "error dialing backend: " + message.split(": ", 1)[1]
