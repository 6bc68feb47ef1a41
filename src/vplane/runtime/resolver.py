"""Service names for vplane's own processes in pods: a hosts-file resolver in front of the system's.

Pods have no DNS server of their own. The runtime writes a hosts file of Service and pod names
(``vplane.runtime.network``) and gives every container ``VPLANE_HOSTS_FILE`` (its path) and
``VPLANE_DNS_SEARCH`` (``<namespace>.svc.<domain> svc.<domain> <domain>``, a pod's resolv.conf search
list). ``vplane`` commands started in a pod call :func:`install` (``vplane.cli.main`` does when the
variable is set), which makes ``socket.getaddrinfo``, ``socket.gethostbyname`` and the event loops'
``getaddrinfo`` (asyncio's and uvloop's, so aiohttp, httpx and lightkube) answer from the file first:
a name with fewer than five dots is tried with each search suffix first (``ndots:5``), as a pod's
resolver does, then as given; names the file does not know go to the system resolver unchanged.

Other programs (curl, a shell's tools) resolve through the system only: they must use ClusterIPs or
pod IPs. The runtime writes a ``.curlrc`` with ``--resolve`` entries for the curl image.
"""

from __future__ import annotations

import os
import socket

from vplane.runtime.importhook import after_import

TYPE_CHECKING = False  # not typing's: importing typing costs a pod's programs about 7 ms (importhook)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

HOSTS_ENV = "VPLANE_HOSTS_FILE"
SEARCH_ENV = "VPLANE_DNS_SEARCH"
NDOTS = 5


class HostsTable:
    """Name → addresses from a hosts file, re-read when the file changes."""

    def __init__(self, path: str, search: list[str]) -> None:
        self.path = path
        self.search = search
        self._mtime: float | None = None
        self._names: dict[str, list[str]] = {}

    def _load(self) -> None:
        try:
            mtime = os.stat(self.path).st_mtime
        except OSError:
            self._names, self._mtime = {}, None
            return
        if mtime == self._mtime:
            return
        names: dict[str, list[str]] = {}
        try:
            with open(self.path) as f:
                for line in f:
                    fields = line.split("#", 1)[0].split()
                    if len(fields) < 2:
                        continue
                    for name in fields[1:]:
                        names.setdefault(name.lower().rstrip("."), []).append(fields[0])
        except OSError:
            return
        self._names, self._mtime = names, mtime

    def lookup(self, host: str) -> list[str] | None:
        if not host or not isinstance(host, str):
            return None
        self._load()
        name = host.lower()
        if name.endswith("."):
            return self._names.get(name.rstrip("."))
        candidates = [f"{name}.{suffix}" for suffix in self.search] if name.count(".") < NDOTS else []
        for candidate in [*candidates, name]:
            found = self._names.get(candidate)
            if found:
                return found
        return None


_table: HostsTable | None = None


def _infos(addresses: list[str], port: Any, family: int, type_: int, proto: int) -> list[Any]:
    out = []
    number = port if isinstance(port, int) else (int(port) if isinstance(port, str) and port.isdigit() else 0)
    if isinstance(port, str) and not port.isdigit():
        number = socket.getservbyname(port)
    for address in addresses:
        if family not in (0, socket.AF_INET):
            continue
        for kind in [type_] if type_ else [socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_RAW]:
            defaults = {
                int(socket.SOCK_STREAM): int(socket.IPPROTO_TCP),
                int(socket.SOCK_DGRAM): int(socket.IPPROTO_UDP),
            }
            protocol = proto or defaults.get(int(kind), 0)
            out.append((socket.AF_INET, kind, protocol, "", (address, number)))
    return out


def install(path: str | None = None, search: str | None = None) -> bool:
    """Answer lookups from the hosts file named by ``VPLANE_HOSTS_FILE`` first; False when none is set."""
    global _table
    path = path or os.environ.get(HOSTS_ENV)
    if not path:
        return False
    suffixes = (search if search is not None else os.environ.get(SEARCH_ENV, "")).split()
    if _table is not None:
        _table.path, _table.search = path, suffixes
        return True
    table = _table = HostsTable(path, suffixes)
    system_getaddrinfo: Callable[..., Any] = socket.getaddrinfo
    system_gethostbyname: Callable[[str], str] = socket.gethostbyname

    def getaddrinfo(
        host: Any, port: Any, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0
    ) -> Any:
        found = table.lookup(host.decode() if isinstance(host, bytes) else host)
        if found:
            infos = _infos(found, port, family, type, proto)
            if infos:
                return infos
        return system_getaddrinfo(host, port, family, type, proto, flags)

    def gethostbyname(host: str) -> str:
        found = table.lookup(host)
        return found[0] if found else system_gethostbyname(host)

    socket.getaddrinfo = getaddrinfo
    socket.gethostbyname = gethostbyname
    # asyncio's loop looks ``socket.getaddrinfo`` up at call time (in its executor); uvloop resolves with
    # libuv, so its Python-level Loop class gets a wrapper too, once something imports it.
    after_import("uvloop", lambda: _patch_uvloop(table))
    return True


def _patch_uvloop(table: HostsTable) -> None:
    import uvloop

    original = uvloop.Loop.getaddrinfo

    async def loop_getaddrinfo(
        self: Any, host: Any, port: Any, *, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0
    ) -> Any:
        found = table.lookup(host.decode() if isinstance(host, bytes) else host)
        if found:
            infos = _infos(found, port, family, type, proto)
            if infos:
                return infos
        return await original(self, host, port, family=family, type=type, proto=proto, flags=flags)

    uvloop.Loop.getaddrinfo = loop_getaddrinfo  # type: ignore[method-assign]
