"""Settings of the mesh, node side and coordinator side in one model so a test shrinks them in one place.

Every timing and limit is a named field with its documented default. Spec references are to
``shared/spec/platform-behaviour.md``; where the spec gives no number the anchor it comes from is named.
Environment switches (``TS_DEBUG_DIAL_DIRECT``, ``LOFT_LOG_TSNET_*``) are read by the helpers at the
bottom, so a process's environment can turn a setting off but a test never depends on its own environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

DIAL_DIRECT_ENV = "TS_DEBUG_DIAL_DIRECT"
"""``false`` disables direct dialing (spec §3.1, the tsnet knob vCluster documents)."""
INSECURE_SKIP_VERIFY_ENV = "TS_DEBUG_TLS_DIAL_INSECURE_SKIP_VERIFY"
"""``true`` skips verification of the platform's certificate (spec §10.3, ``insecureSkipVerify``)."""
CONTROL_PLANE_LOG_ENV = "LOFT_LOG_TSNET_CONTROL_PLANE"
"""Verbose coordinator and relay logs (spec §12)."""
AGENT_LOG_ENV = "LOFT_LOG_TSNET_AGENT"
"""Verbose node-side mesh logs (spec §12)."""


class MeshSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # -- dialing (node side) ------------------------------------------------------------------------
    dial_timeout_seconds: float = Field(default=5.0, gt=0)
    """A direct dial (TCP connect and TLS handshake) that takes longer fails and the dial falls back to
    the relay (spec §3.1: 5 s dial timeout)."""
    direct_head_start_seconds: float = Field(default=1.0, ge=0)
    """A direct dial not connected after this long gets a relayed one raced beside it, and the first to
    connect carries the connection (Tailscale sends over DERP until a direct path answers): an endpoint
    that drops packets costs this head start, not the whole ``dial_timeout_seconds``, which a caller's
    own dial deadline (the resource proxy's 5 s) would otherwise spend before the relay got a turn."""
    dial_direct: bool = True
    """False: every dial uses the relay. ``TS_DEBUG_DIAL_DIRECT=false`` has the same effect."""
    direct_ca_pem: str | None = None
    """PEM of the CA that signs peers' direct-listener certificates. Without it (and without an
    ``ssl_context`` given to the dialer) direct paths are not tried: we never dial TLS unverified."""
    direct_retry_after_seconds: float = Field(default=30.0, ge=0)
    """After a direct dial to an endpoint fails, dials to it go straight to the relay for this long, so a
    firewalled peer costs one dial timeout, not one per request (Tailscale's magicsock remembers paths the
    same way)."""
    relay_open_timeout_seconds: float = Field(default=10.0, gt=0)
    """Waiting for the peer to accept a relayed stream (OPEN to OPEN_OK through the coordinator)."""

    # -- session (node side) ------------------------------------------------------------------------
    connect_timeout_seconds: float = Field(default=10.0, gt=0)
    """Connecting the session: TCP, TLS, WebSocket upgrade and the REGISTERED answer."""
    heartbeat_interval_seconds: float = Field(default=10.0, gt=0)
    """A node sends a heartbeat this often (the agent liveness loop runs every 10 s, spec §10.4); the
    coordinator answers each one, so both ends notice a dead path."""
    session_silence_timeout_seconds: float = Field(default=30.0, gt=0)
    """A node that hears nothing from the coordinator for this long drops the session and reconnects
    (three missed heartbeat answers; shorter than typical load-balancer idle timeouts)."""
    reconnect_backoff_min_seconds: float = Field(default=1.0, gt=0)
    reconnect_backoff_max_seconds: float = Field(default=10.0, gt=0)
    reconnect_backoff_factor: float = Field(default=1.5, ge=1.0)
    reconnect_jitter: float = Field(default=0.2, ge=0, lt=1)
    """Reconnect delays: start at min, multiply by factor, cap at max, each spread by +/- jitter; reset
    after a successful registration (Konnectivity's agent: 1 s x 1.5 capped at 10 s)."""
    close_grace_seconds: float = Field(default=1.0, gt=0)
    """How long a closing WebSocket waits for the other side's close frame before the connection is
    dropped (a dead path would otherwise delay the reconnect)."""
    insecure_skip_verify: bool = False
    """Do not verify the platform's certificate (also ``TS_DEBUG_TLS_DIAL_INSECURE_SKIP_VERIFY=true``)."""

    # -- coordinator side ---------------------------------------------------------------------------
    hello_timeout_seconds: float = Field(default=10.0, gt=0)
    """An upgraded session that has not sent HELLO within this long is closed."""
    authenticate_timeout_seconds: float = Field(default=10.0, gt=0)
    """Checking a node's access key (with the platform's API) that takes longer is refused as unavailable;
    the node retries with backoff rather than its connection waiting on a hung check."""
    offline_timeout_seconds: float = Field(default=120.0, gt=0)
    """The coordinator closes a session it has heard nothing from for this long and marks the node
    offline (spec §10.4: about 2 min). A session that drops is marked offline at once. Checked every
    quarter of this period."""
    gc_after_seconds: float = Field(default=900.0, gt=0)
    """An offline node is forgotten after this long (spec §10.4: about 15 min); it is recreated when it
    reconnects."""
    netmap_coalesce_seconds: float = Field(default=0.0, ge=0)
    """Changes within this window produce one netmap recomputation. 0 coalesces the changes of one event
    loop turn; raise it for large fleets, where a recomputation costs O(nodes x peers)."""
    max_streams_per_session: int = Field(default=1000, gt=0)
    """Relayed streams one session may have open."""
    max_session_queue_bytes: int = Field(default=256 * 1024 * 1024, gt=0)
    """Frames the coordinator may hold for one session that does not read them; past this the session is
    closed (the node reconnects). Credit does not bound it: a node grants its peers the windows it likes
    and control frames (OPEN_FAIL answers) take no credit. The default holds 1,000 streams' default windows."""

    # -- streams and framing (both sides) -----------------------------------------------------------
    initial_window_bytes: int = Field(default=256 * 1024, gt=0, le=2**31 - 1)
    """Per-stream receive window each side grants when a relayed stream opens: at most this much unread
    data is in flight or buffered per stream and direction."""
    max_frame_bytes: int = Field(default=64 * 1024, ge=1024)
    """Largest DATA payload in one frame; bigger writes are split so streams interleave."""
    max_control_frame_bytes: int = Field(default=4 * 1024 * 1024, ge=64 * 1024)
    """Largest control payload (a netmap of a few thousand peers fits)."""
    write_buffer_high_bytes: int = Field(default=64 * 1024, gt=0)
    """A relayed stream's writer pauses (``drain`` waits) above this much unsent data (asyncio's own
    default high-water mark)."""

    # -- logging ------------------------------------------------------------------------------------
    verbose_logs: bool | None = None
    """Frame-level logs. None: read ``verbose_env`` (node side) or ``LOFT_LOG_TSNET_CONTROL_PLANE``
    (coordinator side)."""
    verbose_env: Literal["LOFT_LOG_TSNET_AGENT", "LOFT_LOG_TSNET_CONTROL_PLANE"] = "LOFT_LOG_TSNET_AGENT"
    """The switch a node reads for ``verbose_logs``: an agent's or a tenant's own, or, for the platform's
    own node (its local client to the agents' tunnels), the control plane's, which turns on the
    coordinator's, the relay's and that node's logs together (the runbook: "all three share the same
    toggle")."""

    # -- limits on what one node or identity may claim (issue 7, item 7) -----------------------------
    max_node_labels: int = Field(default=64, ge=0)
    """Labels a node may send in HELLO. Each must follow Kubernetes' label key and value rules (so an entry
    is at most about 380 bytes), and keys under ``loft.sh/`` and ``vplane.io/`` are refused: the platform
    sets those (``NodeIdentity.labels``). A node that breaks these rules is refused for good (``invalid``)."""
    max_node_endpoints: int = Field(default=16, ge=0)
    """Direct endpoints a node may publish (in HELLO or ENDPOINTS); with the label rules this bounds the size
    of one netmap entry."""
    max_nodes_per_identity: int = Field(default=8, gt=0)
    """Nodes (online, or offline and not yet forgotten) one identity may have. A new node of an identity at
    the limit replaces its longest-offline node; when all are online it is refused (``limit``) and retries.
    Tenants have at most 7 replicas. Together with ``max_streams_per_pair`` it bounds what one identity can
    take of a peer's streams: 8 x 100 < ``max_streams_per_session``."""
    max_streams_per_pair: int = Field(default=100, gt=0)
    """Relayed streams one session may have open to one peer session. Below ``max_streams_per_session``, so
    one node opening idle streams cannot take every slot a peer has and lock the other nodes out of it."""
    max_netmap_peers: int = Field(default=10_000, gt=0)
    """Both sides: a node announces in HELLO how many peers it accepts (this value, and its
    ``max_control_frame_bytes``); the coordinator sends at most the smaller of its own and the node's, in
    pages of at most the node's control frame, and says how many it left out (``Netmap.omitted``)."""

    @property
    def max_message_bytes(self) -> int:
        """Largest WebSocket message: writers batch frames up to four data frames plus one control frame."""
        return 4 * (self.max_frame_bytes + 16) + self.max_control_frame_bytes + 64


def env_bool(value: str | None, default: bool) -> bool:
    """Go's ``strconv.ParseBool``, which tailscale's envknob and loft's env switches use; anything else is
    the default."""
    if value is None:
        return default
    if value in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if value in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    return default


def direct_dialing_enabled(settings: MeshSettings, environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return settings.dial_direct and env_bool(env.get(DIAL_DIRECT_ENV), True)


def insecure_skip_verify(settings: MeshSettings, environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return settings.insecure_skip_verify or env_bool(env.get(INSECURE_SKIP_VERIFY_ENV), False)


def verbose(settings: MeshSettings, env_name: str, environ: Mapping[str, str] | None = None) -> bool:
    if settings.verbose_logs is not None:
        return settings.verbose_logs
    env = os.environ if environ is None else environ
    return env_bool(env.get(env_name), False)
