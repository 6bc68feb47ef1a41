"""Networking without root or a container engine: loopback addresses, a userspace service proxy, names.

- **Pod IPs.** Linux routes all of 127.0.0.0/8 to the loopback interface, so any address in it can be
  bound without privileges. Each pod gets one of ``RuntimeSettings.pod_cidr`` (127.10.0.0/16 by default),
  allocated round-robin (an address just released is not handed out again at once) and kept across
  runtime restarts. A pod's process must bind its own address (``$POD_IP``) for two pods to use one port.
- **ClusterIPs.** The API server allocates them at Service create from its ``service_cluster_ip_range``
  (127.96.0.0/16, loopback so this proxy can bind them); ``service_cidr`` names the same range here. Only
  a Service that has none (an API server that allocates none) gets one from the runtime, written to
  ``spec.clusterIP`` through the API: a hash of the Service's UID probing past addresses in use, so two
  runtimes agree.
- **The service proxy.** For every ClusterIP Service port, an asyncio listener on ``clusterIP:port``
  forwards each connection to one ready endpoint (Endpoints ``subsets[].addresses``, round-robin),
  the userspace mode kube-proxy once had. No endpoint: the connection is closed at once. The
  ``kubernetes`` Service (127.96.0.1:443) is served like any other: its Endpoints are the API server's.
- **Names.** A hosts file (``<data dir>/hosts``) maps ``<service>.<namespace>.svc.<domain>`` (and the
  shorter forms) to ClusterIPs, headless Services to their endpoints, and ``<hostname>.<subdomain>...``
  to pods; ``vplane.runtime.resolver`` consults it inside vplane's own processes.

Nothing here isolates anything: see docs/runtime.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import ipaddress
import itertools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from vplane.kube.objects import Obj
from vplane.support.files import write_private

log = structlog.get_logger("vplane.runtime.network")

PROXY_DIAL_TIMEOUT = 5.0


def _d(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}


def _l(value: object) -> list[object]:
    return value if isinstance(value, list) else []


# -- addresses ----------------------------------------------------------------------------------


class AddressPool:
    """Addresses of a range handed out round-robin; the network and broadcast addresses are never used.

    Clusters on one machine share loopback: two nodes of separate clusters (``vplane cluster start`` twice,
    tests in parallel) would hand out the same addresses from the start of the same range, and a pod that
    binds its address would then find it taken by another cluster's pod, or answer in its place. A new
    pool starts at a random place in its range (``start``), and ``busy`` (addresses something on this
    machine listens on, :func:`listening_addresses`) is skipped."""

    def __init__(
        self,
        cidr: str,
        used: Iterable[str] = (),
        last: str | None = None,
        *,
        start: Callable[[int, int], int] | None = None,
        busy: Callable[[], set[str]] = lambda: set(),
    ) -> None:
        self.network = ipaddress.IPv4Network(cidr)
        self.used: set[str] = set(used)
        first = int(self.network.network_address) + 1
        self._first, self._last_int = first, int(self.network.broadcast_address) - 1
        if last:
            self._cursor = int(ipaddress.IPv4Address(last))
        elif start is not None and self._last_int > first:
            self._cursor = start(first - 1, self._last_int - 1)
        else:
            self._cursor = first - 1
        self._busy = busy

    def __contains__(self, address: str) -> bool:
        try:
            return ipaddress.IPv4Address(address) in self.network
        except ValueError:
            return False

    def allocate(self) -> str:
        size = self._last_int - self._first + 1
        busy = self._busy()
        for step in range(1, size + 1):
            candidate = self._first + (self._cursor - self._first + step) % size
            text = str(ipaddress.IPv4Address(candidate))
            if text not in self.used and text not in busy:
                self.used.add(text)
                self._cursor = candidate
                return text
        raise RuntimeError(f"no free address left in {self.network}")

    def reserve(self, address: str) -> None:
        self.used.add(address)

    def release(self, address: str) -> None:
        self.used.discard(address)

    @property
    def last(self) -> str:
        return str(ipaddress.IPv4Address(max(self._cursor, self._first)))


def listening_addresses(tables: Iterable[str] = ("/proc/net/tcp",)) -> set[str]:
    """IPv4 addresses a TCP socket listens on on this machine (Linux ``/proc/net/tcp``; empty elsewhere)."""
    found: set[str] = set()
    for table in tables:
        try:
            with open(table) as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    if len(fields) > 3 and fields[3] == "0A":  # TCP_LISTEN
                        hex_address = fields[1].split(":", 1)[0]
                        found.add(
                            str(ipaddress.IPv4Address(int.from_bytes(bytes.fromhex(hex_address), "little")))
                        )
        except (OSError, ValueError):
            continue
    return found


def cluster_ip_for(uid: str, cidr: str, in_use: set[str]) -> str:
    """A ClusterIP for the Service with ``uid``: a hash of the UID in the range, then the next free one."""
    network = ipaddress.IPv4Network(cidr)
    first = int(network.network_address) + 1
    size = network.num_addresses - 2
    start = int.from_bytes(hashlib.sha256(uid.encode()).digest()[:8], "big") % size
    for step in range(size):
        text = str(ipaddress.IPv4Address(first + (start + step) % size))
        if text not in in_use:
            return text
    raise RuntimeError(f"no free ClusterIP left in {network}")


# -- service environment variables --------------------------------------------------------------


def _env_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name.upper())


def service_env(services: Iterable[Obj]) -> dict[str, str]:
    """The Docker-links style variables the kubelet gives a pod for each Service with a ClusterIP in its
    namespace (``<NAME>_SERVICE_HOST``, ``<NAME>_SERVICE_PORT``, ``<NAME>_PORT_<port>_TCP``, ...)."""
    env: dict[str, str] = {}
    for service in services:
        spec = _d(service.get("spec"))
        ip = str(spec.get("clusterIP") or "")
        if not ip or ip == "None":
            continue
        ports = [_d(p) for p in _l(spec.get("ports"))]
        if not ports:
            continue
        name = _env_name(str(_d(service.get("metadata")).get("name", "")))
        env[f"{name}_SERVICE_HOST"] = ip
        env[f"{name}_SERVICE_PORT"] = str(ports[0].get("port"))
        for port in ports:
            if port.get("name"):
                env[f"{name}_SERVICE_PORT_{_env_name(str(port['name']))}"] = str(port.get("port"))
        first = ports[0]
        protocol = str(first.get("protocol") or "TCP")
        env[f"{name}_PORT"] = f"{protocol.lower()}://{ip}:{first.get('port')}"
        for port in ports:
            protocol = str(port.get("protocol") or "TCP")
            prefix = f"{name}_PORT_{port.get('port')}_{protocol.upper()}"
            env[prefix] = f"{protocol.lower()}://{ip}:{port.get('port')}"
            env[f"{prefix}_PROTO"] = protocol.lower()
            env[f"{prefix}_PORT"] = str(port.get("port"))
            env[f"{prefix}_ADDR"] = ip
    return env


def api_server_env(host: str, port: int) -> dict[str, str]:
    """What every pod sees of the ``kubernetes`` Service: here, the cluster's API server itself."""
    return {
        "KUBERNETES_SERVICE_HOST": host,
        "KUBERNETES_SERVICE_PORT": str(port),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(port),
        "KUBERNETES_PORT": f"tcp://{host}:{port}",
        f"KUBERNETES_PORT_{port}_TCP": f"tcp://{host}:{port}",
        f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp",
        f"KUBERNETES_PORT_{port}_TCP_PORT": str(port),
        f"KUBERNETES_PORT_{port}_TCP_ADDR": host,
    }


# -- names --------------------------------------------------------------------------------------


def ready_addresses(endpoints: Obj | None) -> list[tuple[str, str]]:
    """(ip, hostname) of every ready address of an Endpoints object."""
    out: list[tuple[str, str]] = []
    for subset in _l(_d(endpoints).get("subsets")):
        for address in _l(_d(subset).get("addresses")):
            ip = str(_d(address).get("ip") or "")
            if ip:
                out.append((ip, str(_d(address).get("hostname") or "")))
    return out


def host_entries(
    services: Iterable[Obj], endpoints: Mapping[tuple[str, str], Obj], domain: str
) -> list[tuple[str, str]]:
    """(address, name) lines of the hosts file: every Service's fully qualified name and its shorter
    forms ``<svc>.<ns>.svc`` and ``<svc>.<ns>``; headless Services name their ready endpoints, and an
    endpoint with a hostname gets ``<hostname>.<svc>.<ns>.svc.<domain>`` (StatefulSet pods)."""
    out: list[tuple[str, str]] = []
    for service in services:
        meta, spec = _d(service.get("metadata")), _d(service.get("spec"))
        name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
        ip = str(spec.get("clusterIP") or "")
        fqdn = f"{name}.{namespace}.svc.{domain}"
        addresses = ready_addresses(endpoints.get((namespace, name)))
        targets = [a for a, _ in addresses] if ip in ("", "None") else [ip]
        for target in targets:
            for alias in (fqdn, f"{name}.{namespace}.svc", f"{name}.{namespace}"):
                out.append((target, alias))
        for address, hostname in addresses:
            if hostname:
                out.append((address, f"{hostname}.{fqdn}"))
    return out


def write_hosts(path: Path, entries: list[tuple[str, str]]) -> None:
    lines = ["# written by the vplane node runtime: Service and pod names of this cluster"]
    lines += [f"{address}\t{name}" for address, name in sorted(set(entries))]
    text = "\n".join(lines) + "\n"
    try:
        if path.read_text() == text:
            return
    except OSError:
        pass
    write_private(path, text)


# -- the userspace service proxy ----------------------------------------------------------------


@dataclass
class _Listener:
    server: asyncio.Server
    backends: list[tuple[str, int]] = field(default_factory=list)
    counter: itertools.count[int] = field(default_factory=itertools.count)


def backends_for(service: Obj, endpoints: Obj | None) -> dict[tuple[str, int], list[tuple[str, int]]]:
    """For each (clusterIP, port) of a Service, the ready endpoint addresses and ports behind it (matched
    by port name, as kube-proxy does; an unnamed single port matches the unnamed endpoint port)."""
    spec = _d(service.get("spec"))
    ip = str(spec.get("clusterIP") or "")
    if not ip or ip == "None" or spec.get("type") == "ExternalName":
        return {}
    out: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for port in map(_d, _l(spec.get("ports"))):
        if str(port.get("protocol") or "TCP") != "TCP" or not isinstance(port.get("port"), int):
            continue
        name = str(port.get("name") or "")
        targets: list[tuple[str, int]] = []
        for subset in map(_d, _l(_d(endpoints).get("subsets"))):
            ep_port = next(
                (
                    _d(p)
                    for p in _l(subset.get("ports"))
                    if str(_d(p).get("name") or "") == name and str(_d(p).get("protocol") or "TCP") == "TCP"
                ),
                None,
            )
            if ep_port is None or not isinstance(ep_port.get("port"), int):
                continue
            for address in map(_d, _l(subset.get("addresses"))):
                if address.get("ip"):
                    targets.append((str(address["ip"]), int(ep_port["port"])))  # type: ignore[call-overload]
        out[(ip, int(port["port"]))] = targets  # type: ignore[call-overload]
    return out


class ServiceProxy:
    """One listener per (ClusterIP, port); connections go to the ready endpoints, round-robin."""

    def __init__(self) -> None:
        self._listeners: dict[tuple[str, int], _Listener] = {}
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return sorted(self._listeners)

    async def update(self, wanted: Mapping[tuple[str, int], list[tuple[str, int]]]) -> None:
        for key in [k for k in self._listeners if k not in wanted]:
            listener = self._listeners.pop(key)
            listener.server.close()
        for key, backends in wanted.items():
            if key not in self._listeners:
                try:
                    server = await asyncio.start_server(
                        functools.partial(self._serve, key), key[0], key[1], reuse_address=True
                    )
                except OSError as exc:
                    log.warning("cannot serve service address", address=f"{key[0]}:{key[1]}", error=str(exc))
                    continue
                self._listeners[key] = _Listener(server)
            self._listeners[key].backends = list(backends)

    def _serve(
        self, key: tuple[str, int], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        relay = asyncio.ensure_future(self._relay(key, reader, writer))
        self._connections.add(relay)
        relay.add_done_callback(self._connections.discard)

    async def _relay(
        self, key: tuple[str, int], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        listener = self._listeners.get(key)
        backends = list(listener.backends) if listener is not None else []
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        if listener is not None and backends:
            start = next(listener.counter)
            for offset in range(len(backends)):
                host, port = backends[(start + offset) % len(backends)]
                try:
                    async with asyncio.timeout(PROXY_DIAL_TIMEOUT):
                        upstream = await asyncio.open_connection(host, port)
                    break
                except (OSError, TimeoutError):
                    continue
        if upstream is None:
            writer.close()  # no ready endpoint: refuse as a Service without endpoints does
            return
        up_reader, up_writer = upstream
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                w.close()

    async def close(self) -> None:
        for listener in self._listeners.values():
            listener.server.close()
        self._listeners.clear()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(OSError):
            if writer.can_write_eof():
                writer.write_eof()
