"""Settings of the platform process; every timing and limit is a named field with its default."""

from __future__ import annotations

import secrets
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class PlatformSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    data_dir: Path
    listen_host: str = "127.0.0.1"
    listen_port: int = 10443
    """The platform's HTTPS port (management API, coordinator, DERP probe), as upstream's in-cluster port."""
    instance_id: str = Field(default_factory=lambda: secrets.token_hex(6))
    """This platform process; NetworkPeers record which instance owns a node's session."""
    project_namespace_prefix: str = "p-"
    tenant_ready_timeout_seconds: float = 60.0
    """How long a tenant replica may take to serve before the platform reports it failed."""
    tenant_restart_backoff_seconds: float = 1.0
    tenant_restart_backoff_max_seconds: float = 30.0
    token_review_ttl_seconds: float = 10.0
    """Tenants cache the platform's answer about an access key this long (a disabled key stops working
    within it)."""
    resync_seconds: float = 30.0
    """Controllers re-check every object this often even without events."""
    apiserver: dict[str, object] = Field(default_factory=dict)
    """Overrides for the platform's own API server settings (see APIServerSettings)."""
    mesh: dict[str, object] = Field(default_factory=dict)
    """Overrides for the coordinator's MeshSettings (heartbeat, offline and GC timings, windows)."""
    tenant_mesh: dict[str, object] = Field(default_factory=dict)
    """Overrides for every tenant replica's MeshSettings (dial timeout, reconnect backoff, ...)."""
    tenant_proxy: dict[str, object] = Field(default_factory=dict)
    """Overrides for every tenant replica's resource-proxy ProxySettings (dial timeout, quarantine, ...)."""
    tenant_apiserver: dict[str, object] = Field(default_factory=dict)
    """Overrides passed to every tenant replica's API server (``--set`` on ``vplane tenant start``)."""

    # -- shutdown (issue 7, item 9) --
    tenant_stop_timeout_seconds: float = Field(default=10.0, gt=0)
    """How long stopping the platform waits for a tenant replica to exit after SIGTERM before killing it
    (a second Ctrl-C kills at once)."""
    # -- issue 7 (keys): tenants' token-review cache bounds, passed to every tenant replica ---------------
    token_review_cache_max_entries: int = Field(default=10_000, ge=1)
    """Tenants keep the platform's accepted and refused answers for at most this many tokens each."""
    token_max_bytes: int = Field(default=4096, ge=1)
    """Tenants refuse longer bearer tokens with 401 before asking the platform."""
