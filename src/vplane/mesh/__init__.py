"""The mesh: how platform, tenant control-plane replicas and agents reach each other.

What the incumbent does. vCluster Platform embeds Tailscale (``tsnet``). Each node registers with the
platform's coordinator (Tailscale's control protocol) using an access key and receives *netmaps*: the
peers it may talk to, with their WireGuard keys and endpoints. Traffic between two nodes is WireGuard
(UDP, end-to-end encrypted, NAT traversal with STUN and disco pings); when no UDP path exists, the
encrypted WireGuard packets go through DERP, a relay over HTTPS on the platform, which sees only
ciphertext.

What we do instead, and what that means:

- **Control**: each node holds one WebSocket over HTTPS to the coordinator (``/coordinator/session``),
  registers with its access key (``no auth key provided`` / ``invalid access key: <reason>`` when
  refused), sends heartbeats, and receives netmaps pushed on every change. The platform decides who
  may see whom (``Coordinator(visible_peers=...)``), and the relay enforces the same decision.
- **Direct path**: TCP + TLS to an endpoint the peer published, with the peer's certificate verified
  against a CA the platform distributes. No UDP, no hole punching: a direct path exists only where the
  peer's listener is reachable over TCP (same network, or an exposed port). Dial timeout 5 s.
- **Relayed path** (the DERP analogue): a stream multiplexed over the dialer's session, through the
  coordinator, to the peer's session. Unlike DERP it relays *streams*, not packets, with per-stream
  credit-based flow control (HTTP/2's model), so a slow stream (a watch) never stalls the others.
  Each hop is TLS (node to platform); the coordinator sees the relayed bytes in clear. That is a real
  difference from DERP: the platform is trusted with relayed traffic, as it already is with the
  access keys and identities. Relayed traffic also shares the platform's CPU and bandwidth.
- **Limits** (``MeshSettings``, issue 7): a node's labels follow Kubernetes' rules, are at most 64, and
  may not use ``loft.sh/`` or ``vplane.io/`` keys (the platform sets those, from the access key, so a
  node cannot claim to be another tenant); at most 16 endpoints; at most 8 nodes per identity (a new one
  replaces the identity's longest-offline node, or is refused while all are online); at most 100 relayed
  streams per (opener, acceptor) pair within the 1,000 per session, so one node cannot take all of a
  peer's slots; netmaps capped at the peers a node accepts and paged to its largest control frame, both
  announced in HELLO.
- **One session per node**: while a node's session is alive a second registration for it is refused
  (``conflict``; it retries) unless it presents the resume secret the coordinator gave the live session
  (the same process back on a new path). Tailscale and DERP let the newest win; here that would let any
  holder of the key take over the node's callers for as long as it likes.
- **Not provided**: end-to-end encryption of relayed streams, UDP paths, NAT traversal, relaying between
  coordinator instances (a node reaches only peers on the same platform replica over the relay), and
  peer-to-peer identity on direct paths below HTTP (callers authenticate at the HTTP layer with their
  access key, spec principle 4).

Modules: ``frames`` (wire format and the sans-I/O multiplexer and relay table), ``session``
(``NodeSession``, relayed streams as asyncio transports, the direct listener), ``dialer`` (``Dialer``
and the aiohttp ``MeshConnector``), ``coordinator`` (the platform side), ``settings`` (every timing),
``backoff`` (reconnect backoff and failed-path memory). Verbose logs: ``LOFT_LOG_TSNET_CONTROL_PLANE``
on the platform, ``LOFT_LOG_TSNET_AGENT`` on nodes.
"""

from vplane.mesh.coordinator import (
    AuthenticationError,
    Coordinator,
    Groups,
    GroupVisibility,
    NodeChange,
    NodeIdentity,
    NodeInfo,
    RegistrationForbidden,
    VisibilityPolicy,
    all_peers,
    invalid_access_key,
    node_id_for,
    same_label,
)
from vplane.mesh.dialer import Dialer, MeshConnector
from vplane.mesh.session import (
    DialError,
    DirectListener,
    MeshError,
    Netmap,
    NodeSession,
    Peer,
    RegistrationError,
    RegistrationRefused,
    RelayTransport,
    SessionError,
    Stream,
    stream_protocol_factory,
    tls_server_context,
)
from vplane.mesh.settings import MeshSettings

__all__ = [
    "AuthenticationError",
    "Coordinator",
    "DialError",
    "Dialer",
    "DirectListener",
    "GroupVisibility",
    "Groups",
    "MeshConnector",
    "MeshError",
    "MeshSettings",
    "Netmap",
    "NodeChange",
    "NodeIdentity",
    "NodeInfo",
    "NodeSession",
    "Peer",
    "RegistrationError",
    "RegistrationForbidden",
    "RegistrationRefused",
    "RelayTransport",
    "SessionError",
    "Stream",
    "VisibilityPolicy",
    "all_peers",
    "invalid_access_key",
    "node_id_for",
    "same_label",
    "stream_protocol_factory",
    "tls_server_context",
]
