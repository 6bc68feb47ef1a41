"""Wildcard binds of a pod's Python programs go to the pod's own address.

Pods share the machine's network namespace (docs/runtime.md, Networking): a server that binds
``0.0.0.0:8080`` takes port 8080 on every loopback address, so the second replica of a Deployment (or any
pod already on that port) fails with ``Address already in use``, where on a real node each pod has a
network of its own. Python programs in the ``python`` image get this module installed at start (its
``sitecustomize``): a bind to the wildcard address binds the pod's address instead, and a passive lookup of
the wildcard (``getaddrinfo(None, port, flags=AI_PASSIVE)``, what ``http.server`` and asyncio's
``create_server`` ask before they bind) answers with it, so ``python -m http.server 8080`` in three
replicas gives three servers.

The address comes from ``VPLANE_BIND_ADDRESS``, which the runtime sets for pods with an address of their
own (not ``hostNetwork`` pods, whose wildcard is the node's, as on a real node). Explicit addresses are left
alone; an IPv6 wildcard on an IPv6-only socket is too, as a pod has no IPv6 address of its own to give.
Other programs (a shell's ``nc -l``) cannot be changed this way: they must bind ``$POD_IP``.
"""

from __future__ import annotations

import os
import socket

TYPE_CHECKING = False  # not typing's: importing typing costs a pod's programs about 7 ms (importhook)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

BIND_ENV = "VPLANE_BIND_ADDRESS"
WILDCARDS_V4 = frozenset({"", "0.0.0.0"})
WILDCARDS_V6 = frozenset({"", "::", "::0"})
WILDCARD_HOSTS = frozenset({None, "", "0.0.0.0", "::", b"", b"0.0.0.0", b"::"})


def bind_address(family: int, address: Any, pod_ip: str, *, v6only: Callable[[], bool] = lambda: True) -> Any:
    """The address to bind instead of ``address`` (itself when nothing changes)."""
    if not isinstance(address, tuple) or not address or not isinstance(address[0], str):
        return address
    host = address[0]
    if family == socket.AF_INET and host in WILDCARDS_V4:
        return (pod_ip, *address[1:])
    if family == socket.AF_INET6 and host in WILDCARDS_V6 and not v6only():
        # A dual-stack socket takes IPv4 connections to a mapped address: the pod's only.
        return (f"::ffff:{pod_ip}", *address[1:])
    return address


def passive_host(host: Any, family: int, flags: int) -> bool:
    """Is this lookup a server asking where to bind "everything"?"""
    return bool(flags & socket.AI_PASSIVE) and host in WILDCARD_HOSTS and family in (0, socket.AF_INET)


_installed: str | None = None


def install(pod_ip: str | None = None) -> bool:
    """Rewrite wildcard binds to ``pod_ip`` (default: ``VPLANE_BIND_ADDRESS``); False when there is none."""
    global _installed
    pod_ip = pod_ip or os.environ.get(BIND_ENV, "")
    if not pod_ip:
        return False
    if _installed is not None:
        _installed = pod_ip
        return True
    _installed = pod_ip
    original_bind = socket.socket.bind
    original_getaddrinfo: Callable[..., Any] = socket.getaddrinfo

    def bind(self: socket.socket, address: Any) -> None:
        assert _installed is not None

        def v6only() -> bool:
            return bool(self.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY))

        original_bind(self, bind_address(self.family, address, _installed, v6only=v6only))

    def getaddrinfo(
        host: Any, port: Any, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0
    ) -> Any:
        if passive_host(host, family, flags):
            assert _installed is not None
            return original_getaddrinfo(
                _installed, port, socket.AF_INET, type, proto, flags & ~socket.AI_PASSIVE
            )
        return original_getaddrinfo(host, port, family, type, proto, flags)

    socket.socket.bind = bind  # type: ignore[method-assign,assignment]
    socket.getaddrinfo = getaddrinfo
    return True
