"""Slow, idle and vanished clients (issue 7 items 4 and 8a), against real server processes on the wire.

Raw TLS sockets play the clients the limits are about (trickling headers or a body, never reading, going
away); every limit is shrunk through settings, and the server's count of open watches is read from its
debug log (``watch started``/``watch ended`` carry ``watches=<n>``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.client
import json
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from aiohttp import web

from harness import APIServerProcess, Kubectl, PlatformProcess
from vplane.support import tls

pytestmark = pytest.mark.integration

WATCHES = re.compile(r"watch (?:started|ended)\b.*?\bwatches=(\d+)")


def eventually(check: Callable[[], bool], timeout: float = 30.0, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(interval)


def open_watches(log: Path) -> int:
    """The server's count of open watches, from its last ``watch started``/``watch ended`` line."""
    found = WATCHES.findall(log.read_text(errors="replace")) if log.exists() else []
    return int(found[-1]) if found else 0


def started_watches(log: Path) -> int:
    """How many watches the server has started so far (some may already have ended)."""
    return log.read_text(errors="replace").count("watch started") if log.exists() else 0


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


class Wire:
    """Raw TLS connections to one server, for clients that misbehave on purpose."""

    def __init__(self, url: str, ctx: ssl.SSLContext, token: str) -> None:
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None
        self.host, self.port, self.ctx, self.token = parts.hostname, parts.port, ctx, token
        self.opened: list[socket.socket] = []

    def connect(self, rcvbuf: int | None = None) -> ssl.SSLSocket:
        raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:  # a small window, so an unread response backs up into the server quickly
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        raw.settimeout(10)
        self.opened.append(raw)
        raw.connect((self.host, self.port))
        sock = self.ctx.wrap_socket(raw, server_hostname=self.host)
        self.opened.append(sock)
        return sock

    def close(self) -> None:
        for sock in self.opened:
            with contextlib.suppress(OSError):
                sock.close()

    def head(self, method: str, path: str, extra: str = "") -> bytes:
        return (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {self.token}\r\n{extra}\r\n"
        ).encode()

    def send(self, path: str, rcvbuf: int | None = None) -> ssl.SSLSocket:
        sock = self.connect(rcvbuf)
        sock.sendall(self.head("GET", path))
        return sock


def read_head(sock: ssl.SSLSocket) -> tuple[int, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the response head")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), rest


def dropped(sock: ssl.SSLSocket, wait: float = 0.2) -> bool:
    """Whether the server has closed the connection (reading gives EOF or an error within ``wait``)."""
    sock.settimeout(wait)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except (OSError, ssl.SSLError):
        return True


@pytest.fixture
def debug_log(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VPLANE_LOG_LEVEL", "debug")


class Wires:
    """Makes :class:`Wire`\\ s and closes every socket they opened when the test ends."""

    def __init__(self) -> None:
        self.made: list[Wire] = []

    def __call__(self, url: str, ctx: ssl.SSLContext, token: str) -> Wire:
        wire = Wire(url, ctx, token)
        self.made.append(wire)
        return wire

    def of(self, server: APIServerProcess) -> Wire:
        return self(server.url, server.ssl_context(), server.token)


@pytest.fixture
def wires() -> Iterator[Wires]:
    made = Wires()
    yield made
    for wire in made.made:
        wire.close()


def create(server: APIServerProcess, path: str, obj: dict[str, Any]) -> dict[str, Any]:
    code, _, body = server.request(
        "POST", path, json.dumps(obj).encode(), {"Content-Type": "application/json"}
    )
    assert code == 201, body
    created: dict[str, Any] = json.loads(body)
    return created


# -- request headers, bodies, connections -------------------------------------------------------------


def test_trickled_headers_are_dropped_at_the_deadline_while_others_are_served(
    apiserver: APIServerProcess, wires: Wires
) -> None:
    server = apiserver.start(request_header_timeout_seconds=1)
    wire = wires.of(server)
    sock = wire.connect()
    request = wire.head("GET", "/version", "X-Padding: " + "a" * 200 + "\r\n")
    served_meanwhile = False
    for i, byte in enumerate(request):
        try:
            sock.send(bytes([byte]))
        except (OSError, ssl.SSLError):
            break
        if i == 2:
            assert server.request("GET", "/version")[0] == 200
            served_meanwhile = True
        if dropped(sock, 0.25):
            break
    else:
        raise AssertionError("the whole trickled request was accepted")
    assert served_meanwhile and i < len(request) - 1


def test_header_deadline_spares_idle_keep_alive_and_long_watches(
    apiserver: APIServerProcess, wires: Wires
) -> None:
    server = apiserver.start(request_header_timeout_seconds=0.5)
    host, port = urlsplit(server.url).hostname, urlsplit(server.url).port
    auth = {"Authorization": f"Bearer {server.token}"}
    conn = http.client.HTTPSConnection(host or "", port, context=server.ssl_context(), timeout=10)
    conn.request("GET", "/version", headers=auth)
    assert conn.getresponse().read() and conn.sock is not None
    first = conn.sock
    time.sleep(1.5)  # idle on a kept-alive connection for three header deadlines
    conn.request("GET", "/version", headers=auth)
    resp = conn.getresponse()
    assert resp.status == 200 and conn.sock is first
    resp.read()
    conn.close()

    watch = wires.of(server).send("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=0")
    assert read_head(watch)[0] == 200
    time.sleep(1.5)
    create(server, "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "after-deadline"}})
    watch.settimeout(10)
    seen = b""
    while b"after-deadline" not in seen:
        chunk = watch.recv(65536)
        assert chunk, "the watch was closed"
        seen += chunk
    watch.close()


def test_a_body_trickled_under_the_minimum_rate_is_dropped(apiserver: APIServerProcess, wires: Wires) -> None:
    server = apiserver.start(request_body_min_bytes_per_second=200, request_body_grace_seconds=0.5)
    wire = wires.of(server)
    body = json.dumps({"metadata": {"name": "slow"}, "data": {"k": "v" * 4000}}).encode()
    fast = wire.connect()
    fast.sendall(
        wire.head(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n",
        )
        + body.replace(b"slow", b"fast")
    )
    assert read_head(fast)[0] == 201
    fast.close()

    slow = wire.connect()
    slow.sendall(
        wire.head(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n",
        )
    )
    for start in range(0, len(body), 20):  # 80 bytes/s
        try:
            slow.send(body[start : start + 20])
        except (OSError, ssl.SSLError):
            break
        if dropped(slow, 0.25):
            break
    else:
        raise AssertionError("the trickled body was accepted")
    assert server.request("GET", "/api/v1/namespaces/default/configmaps/slow")[0] == 404


def test_connections_over_the_limit_are_refused_while_open_ones_work(
    apiserver: APIServerProcess, wires: Wires
) -> None:
    server = apiserver.start(max_connections=6)
    wire = wires.of(server)
    held = [wire.connect() for _ in range(6)]
    with pytest.raises((OSError, ssl.SSLError)):
        extra = wire.connect()
        extra.sendall(wire.head("GET", "/version"))
        read_head(extra)
    held[0].sendall(wire.head("GET", "/version"))
    assert read_head(held[0])[0] == 200
    held.pop().close()

    def another_one() -> bool:
        try:
            sock = wire.connect()
        except (OSError, ssl.SSLError):
            return False
        held.append(sock)
        return True

    eventually(another_one, timeout=10)
    held[-1].sendall(wire.head("GET", "/version"))
    assert read_head(held[-1])[0] == 200
    for sock in held:
        sock.close()


def test_anonymous_requests_in_flight_are_capped(apiserver: APIServerProcess, wires: Wires) -> None:
    server = apiserver.start(anonymous_auth=True, max_unauthenticated_in_flight=2)
    create(
        server,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": "anonymous-view"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [
                {"kind": "Group", "name": "system:unauthenticated", "apiGroup": "rbac.authorization.k8s.io"}
            ],
        },
    )
    anonymous = wires(server.url, server.ssl_context(), "")

    def anonymous_get(path: str) -> tuple[ssl.SSLSocket, int]:
        sock = anonymous.connect()
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {anonymous.host}\r\n\r\n".encode())
        return sock, read_head(sock)[0]

    listing = "/api/v1/namespaces/default/configmaps"
    eventually(lambda: anonymous_get(listing)[1] == 200)
    held = [anonymous_get(listing + "?watch=1") for _ in range(2)]
    assert [code for _, code in held] == [200, 200]
    assert anonymous_get(listing)[1] == 429
    # authenticated callers and health probes without credentials are still answered
    assert server.request("GET", listing)[0] == 200
    assert anonymous_get("/readyz")[1] == 200
    held[0][0].close()
    eventually(lambda: anonymous_get(listing)[1] == 200, timeout=10)


class SlowTokenReviewer:
    """A main API server stand-in whose TokenReviews answer only when released (for a delegating one)."""

    def __init__(self, workdir: Path) -> None:
        self.ca = tls.make_ca("reviewer-ca")
        tls.issue_serving(self.ca, ["127.0.0.1"]).write(workdir / "r.crt", workdir / "r.key")
        self.cert, self.key = workdir / "r.crt", workdir / "r.key"
        self.waiting = 0
        self.release = threading.Event()
        self.port = 0
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _review(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.waiting += 1
        await asyncio.get_running_loop().run_in_executor(None, self.release.wait, 30)
        body["status"] = {"authenticated": False}
        return web.json_response(body, status=201)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        app = web.Application()
        app.router.add_post("/apis/authentication.k8s.io/v1/tokenreviews", self._review)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.cert, self.key)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        self.port = runner.addresses[0][1]
        self._ready.set()
        await self._stopped.wait()
        await runner.cleanup()

    def start(self) -> None:
        self._thread.start()
        assert self._ready.wait(10)

    def stop(self) -> None:
        self.release.set()
        if self._loop is not None and self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(10)

    def kubeconfig(self, path: Path) -> Path:
        ca = base64.b64encode(self.ca.cert_pem).decode()
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "m",
                    "clusters": [
                        {
                            "name": "m",
                            "cluster": {
                                "server": f"https://127.0.0.1:{self.port}",
                                "certificate-authority-data": ca,
                            },
                        }
                    ],
                    "users": [{"name": "m", "user": {"token": "reviewer"}}],
                    "contexts": [{"name": "m", "context": {"cluster": "m", "user": "m"}}],
                }
            )
        )
        return path


def test_requests_waiting_on_token_reviews_are_capped(apiserver: APIServerProcess, tmp_path: Path) -> None:
    reviewer = SlowTokenReviewer(tmp_path)
    reviewer.start()
    try:
        server = apiserver.start(
            delegate_kubeconfig=reviewer.kubeconfig(tmp_path / "main.yaml"), max_unauthenticated_in_flight=2
        )
        answers: list[int] = []

        def unknown_token(token: str) -> None:
            answers.append(server.request("GET", "/api/v1/namespaces", token=token)[0])

        waiting = [threading.Thread(target=unknown_token, args=(f"unknown-{i}",)) for i in range(2)]
        for thread in waiting:
            thread.start()
        eventually(lambda: reviewer.waiting == 2)
        code, headers, _ = server.request("GET", "/api/v1/namespaces", token="unknown-2")
        assert (code, headers["Retry-After"]) == (429, "1")
        assert reviewer.waiting == 2, "the refused request was not reviewed"
        # tokens the server knows itself are never refused for it
        assert server.request("GET", "/api/v1/namespaces")[0] == 200
        reviewer.release.set()
        for thread in waiting:
            thread.join(20)
        assert answers == [401, 401]
    finally:
        # The API server first: its kept-alive review connections then end from its side. Stopped the other
        # way round, the reviewer's loop could end while closing them (TLS shutdown waits on the peer) and
        # leave their transports to the garbage collector (an unclosed-transport warning, once in the suite).
        apiserver.stop()
        reviewer.stop()


# -- watches -----------------------------------------------------------------------------------------------


def test_watches_whose_clients_close_end_at_once(
    apiserver: APIServerProcess, debug_log: None, wires: Wires
) -> None:
    server = apiserver.start()
    create(server, "/api/v1/namespaces", {"metadata": {"name": "gone"}})
    create(server, "/api/v1/namespaces/gone/configmaps", {"metadata": {"name": "one"}})
    wire = wires.of(server)
    socks = [wire.send("/api/v1/namespaces/gone/configmaps?watch=1") for _ in range(30)]
    eventually(lambda: open_watches(server.log_path) == 30)
    for sock in socks:
        sock.close()
    # no write happens: before, each watch lingered until the next event or its 30-60 min timeout
    eventually(lambda: open_watches(server.log_path) == 0, timeout=20)


def test_unread_watches_end_and_their_memory_is_released(
    apiserver: APIServerProcess, debug_log: None, monkeypatch: pytest.MonkeyPatch, wires: Wires
) -> None:
    # Large allocations straight from mmap, so freed buffers leave RSS (glibc would otherwise keep them).
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    server = apiserver.start(response_send_timeout_seconds=2)
    create(server, "/api/v1/namespaces", {"metadata": {"name": "big"}})
    for i in range(8):
        create(
            server,
            "/api/v1/namespaces/big/configmaps",
            {"metadata": {"name": f"c{i}"}, "data": {"k": "x" * 1_000_000}},
        )
    assert server.proc is not None
    pid = server.proc.pid
    baseline = rss_mib(pid)
    wire = wires.of(server)
    socks = [wire.send("/api/v1/namespaces/big/configmaps?watch=1", rcvbuf=4096) for _ in range(40)]
    # All 40 started (on a loaded machine the first may already have met the send timeout).
    eventually(lambda: started_watches(server.log_path) == 40)
    peak = rss_mib(pid)
    # Before, each unread watch buffered whole frames (plain and encrypted, about 4 MiB here), forever.
    assert peak - baseline < 80, (baseline, peak)
    eventually(lambda: open_watches(server.log_path) == 0, timeout=30)
    eventually(lambda: rss_mib(pid) - baseline < 40, timeout=10)
    for sock in socks:
        assert ends(sock), "the server kept the connection of a watch it ended"


def ends(sock: ssl.SSLSocket, wait: float = 5) -> bool:
    """Whether the connection ends (EOF or reset) after what the server had sent on it."""
    sock.settimeout(wait)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except (OSError, ssl.SSLError):
        pass
    return True


def test_watches_per_user_are_capped(apiserver: APIServerProcess, wires: Wires) -> None:
    server = apiserver.start(max_watches_per_user=3)
    wire = wires.of(server)
    path = "/api/v1/namespaces/default/configmaps?watch=1"
    held = [wire.send(path) for _ in range(3)]
    for sock in held:
        assert read_head(sock)[0] == 200
    code, headers, body = server.request("GET", path)
    assert code == 429
    assert headers["Retry-After"] == "1"
    assert json.loads(body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Too many requests, please try again later.",
        "reason": "TooManyRequests",
        "details": {"retryAfterSeconds": 1},
        "code": 429,
    }
    # another user is not affected
    create(server, "/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": "watcher"}})
    create(
        server,
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
        {
            "metadata": {"name": "watcher-view"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "ServiceAccount", "name": "watcher", "namespace": "default"}],
        },
    )
    token = create(server, "/api/v1/namespaces/default/serviceaccounts/watcher/token", {"spec": {}})[
        "status"
    ]["token"]
    other = wires(server.url, server.ssl_context(), token).send(path)
    assert read_head(other)[0] == 200
    other.close()
    # a watch that ends gives its place back
    held.pop().close()

    def admitted() -> bool:
        sock = wire.send(path)
        code = read_head(sock)[0]
        if code == 200:
            held.append(sock)
        else:
            sock.close()
        return code == 200

    eventually(admitted, timeout=10)
    for sock in held:
        sock.close()


# -- resource versions from the future (8a) ---------------------------------------------------------------

TOO_LARGE_CAUSES = [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]


def current_of(status: dict[str, Any], floor: int) -> int:
    """The ``current`` revision a 504 names: at least ``floor`` (the server may write on its own meanwhile,
    e.g. objects it keeps in place at start-up)."""
    match = re.search(r"current: (\d+)$", str(status.get("message", "")))
    assert match is not None, status
    assert int(match.group(1)) >= floor
    return int(match.group(1))


def too_large(wanted: int, current: int) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"Timeout: Too large resource version: {wanted}, current: {current}",
        "reason": "Timeout",
        "details": {"causes": TOO_LARGE_CAUSES, "retryAfterSeconds": 1},
        "code": 504,
    }


def test_resource_versions_from_the_future_answer_as_upstream(apiserver: APIServerProcess) -> None:
    server = apiserver.start(resource_version_wait_seconds=0.5)
    created = create(server, "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "now"}})
    current = int(created["metadata"]["resourceVersion"])
    future = current + 1000
    base = "/api/v1/namespaces/default/configmaps"

    # watch-list: upstream's cache waits for the revision, then ends the watch with an ERROR event
    code, _, body = server.request(
        "GET",
        f"{base}?watch=1&sendInitialEvents=true&allowWatchBookmarks=true"
        f"&resourceVersionMatch=NotOlderThan&resourceVersion={future}",
    )
    assert code == 200
    events = [json.loads(line) for line in body.splitlines()]
    now = current_of(events[0]["object"], current)
    assert events == [{"type": "ERROR", "object": too_large(future, now)}]
    for query in (f"resourceVersion={future}", f"resourceVersion={future}&resourceVersionMatch=Exact"):
        code, headers, body = server.request("GET", f"{base}?{query}")
        status = json.loads(body)
        assert (code, headers["Retry-After"], status) == (
            504,
            "1",
            too_large(future, current_of(status, now)),
        )
    code, _, body = server.request("GET", f"{base}/now?resourceVersion={future}")
    status = json.loads(body)
    assert (code, status) == (504, too_large(future, current_of(status, now)))
    # "0" and older versions are served at once
    assert server.request("GET", f"{base}?resourceVersion=0")[0] == 200
    assert server.request("GET", f"{base}/now?resourceVersion={current}")[0] == 200


def settled(server: APIServerProcess, quiet: float = 1.0) -> None:
    """Wait until the server has stopped writing on its own (objects it keeps in place after start-up)."""
    last, since = "", time.monotonic()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        _, _, body = server.request("GET", "/api/v1/namespaces?limit=1")
        revision = json.loads(body)["metadata"]["resourceVersion"]
        if revision != last:
            last, since = revision, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
        time.sleep(0.1)


def test_a_list_waits_for_a_revision_about_to_arrive(apiserver: APIServerProcess) -> None:
    server = apiserver.start(resource_version_wait_seconds=10)
    settled(server)
    created = create(server, "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "before"}})
    wanted = int(created["metadata"]["resourceVersion"]) + 1
    answer: list[tuple[int, bytes]] = []

    def list_ahead() -> None:
        code, _, body = server.request(
            "GET", f"/api/v1/namespaces/default/configmaps?resourceVersion={wanted}"
        )
        answer.append((code, body))

    thread = threading.Thread(target=list_ahead)
    thread.start()
    time.sleep(0.3)
    create(server, "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "after"}})
    thread.join(20)
    code, body = answer[0]
    assert code == 200
    doc = json.loads(body)
    assert int(doc["metadata"]["resourceVersion"]) >= wanted
    assert {"before", "after"} <= {item["metadata"]["name"] for item in doc["items"]}


# -- relays ------------------------------------------------------------------------------------------------

GROUP = "relay.example.com"


def test_the_aggregator_closes_its_upstream_when_the_client_goes(
    tmp_path: Path, kubectl_path: str, monkeypatch: pytest.MonkeyPatch, wires: Wires
) -> None:
    main = APIServerProcess(tmp_path / "main", {"apiservice_probe_interval_seconds": 0.5})
    main.start()
    monkeypatch.setenv("VPLANE_LOG_LEVEL", "debug")
    ext = APIServerProcess(
        tmp_path / "ext",
        {
            "requestheader_client_ca_file": main.data_dir / "pki" / "front-proxy-ca.crt",
            "server_names": '["ext.kube-system.svc","127.0.0.1","localhost"]',
        },
    )
    try:
        ext.start()
        ext_k = Kubectl(kubectl_path, ext.kubeconfig, tmp_path / "ext-cache")
        ext_k.apply(
            f"""apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: things.{GROUP}}}
spec:
  group: {GROUP}
  scope: Namespaced
  names: {{plural: things, singular: thing, kind: Thing}}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}
"""
        )
        ext_k.run("wait", "--for=condition=Established", f"crd/things.{GROUP}", "--timeout=20s")
        main_k = Kubectl(kubectl_path, main.kubeconfig, tmp_path / "main-cache")
        port = urlsplit(ext.url).port
        ca = base64.b64encode((ext.data_dir / "pki" / "ca.crt").read_bytes()).decode()
        main_k.apply(
            f"""apiVersion: v1
kind: Service
metadata: {{name: ext, namespace: kube-system}}
spec: {{type: ExternalName, externalName: localhost, ports: [{{port: {port}}}]}}
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {{name: v1.{GROUP}}}
spec:
  group: {GROUP}
  version: v1
  service: {{name: ext, namespace: kube-system, port: {port}}}
  groupPriorityMinimum: 100
  versionPriority: 100
  caBundle: {ca}
"""
        )
        main_k.run("wait", "--for=condition=Available", f"apiservice/v1.{GROUP}", "--timeout=20s")
        wire = wires.of(main)
        path = f"/apis/{GROUP}/v1/namespaces/default/things?watch=1"
        client = wire.send(path)
        assert read_head(client)[0] == 200
        eventually(lambda: open_watches(ext.log_path) == 1)
        client.close()
        eventually(lambda: open_watches(ext.log_path) == 0, timeout=20)
        # and the other way: a backend watch that ends ends the client's
        client = wire.send(path + "&timeoutSeconds=1")
        code, seen = read_head(client)
        assert code == 200
        client.settimeout(20)
        while not seen.endswith(b"0\r\n\r\n"):  # the chunked body's end
            chunk = client.recv(65536)
            assert chunk, "the connection closed before the response ended"
            seen += chunk
        client.close()
    finally:
        ext.stop()
        main.stop()


@pytest.fixture
def platform(tmp_path: Path, kubectl_path: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[PlatformProcess]:
    monkeypatch.setenv("VPLANE_LOG_LEVEL", "debug")  # tenants inherit it
    # The tenant's leader runs no controllers and no node here: their watches would move the counts these
    # tests read.
    proc = PlatformProcess(
        tmp_path / "platform",
        {"tenant_apiserver": '{"controller_manager": false, "scheduler": false}', "tenant_node": "false"},
    )
    proc.start()
    try:
        k = Kubectl(kubectl_path, proc.kubeconfig, tmp_path / "platform-cache")
        k.apply("apiVersion: management.loft.sh/v1\nkind: Project\nmetadata: {name: default}\n")
        eventually(lambda: k.run("get", "namespace", "p-default", check=False).code == 0)
        k.apply(
            yaml.safe_dump(
                {
                    "apiVersion": "management.loft.sh/v1",
                    "kind": "VirtualClusterInstance",
                    "metadata": {"name": "t1", "namespace": "p-default"},
                    "spec": {"template": {"helmRelease": {"values": ""}}},
                }
            )
        )
        k.run(
            "wait",
            "--for=jsonpath={.status.phase}=Ready",
            "virtualclusterinstance/t1",
            "-n",
            "p-default",
            "--timeout=90s",
            timeout=100,
        )
        yield proc
    finally:
        proc.stop()
        proc.kill_tenants()


def test_the_platform_closes_the_tenant_connection_when_the_client_goes(
    platform: PlatformProcess, wires: Wires
) -> None:
    admin = yaml.safe_load(platform.kubeconfig.read_text())["users"][0]["user"]["token"]
    wire = wires(platform.url, tls.client_context(platform.ca.read_bytes()), admin)
    tenant_log = platform.tenant_dir("default", "t1") / "replica-0.log"
    path = "/kubernetes/project/default/virtualcluster/t1/api/v1/namespaces/default/configmaps?watch=1"
    before = open_watches(tenant_log)  # the tenant's own components may watch it too
    client = wire.send(path)
    assert read_head(client)[0] == 200
    eventually(lambda: open_watches(tenant_log) == before + 1)
    client.close()
    eventually(lambda: open_watches(tenant_log) == before, timeout=20)
