"""The resource proxy's settings: every constant of the runbook (spec §9) as a named setting."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from vplane.proxy.peers import PeerSettings


class ProxySettings(BaseModel):
    """Every constant of the runbook (spec §9) as a named setting."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    peers: PeerSettings = Field(default_factory=PeerSettings)
    request_timeout_seconds: float = Field(default=60.0, gt=0)
    """End-to-end cap of a non-watch request, body upload included (reason ``deadline``)."""
    discovery_timeout_seconds: float = Field(default=3.0, gt=0)
    """A discovery request past this gets the fallback document. It must stay below the API server's 5 s
    availability check of the APIService (which also asks for discovery) and the 5 s dial timeout: a
    hung target would otherwise make the check give up first, the APIService read unavailable and every
    request get the aggregator's bare 503 instead of the proxy's own answers and metrics."""
    retry_after_seconds: int = Field(default=1, ge=0)
    """``Retry-After`` on every 503 the proxy sends."""
    keepalive_seconds: float = Field(default=30.0, gt=0)
    """Idle connections to a target replica are kept this long for reuse."""
    connections_per_peer: int = Field(default=0, ge=0)
    """Connections to one target replica at once (0: no limit beyond the caller's)."""
    max_body_bytes: int = Field(default=3 * 1024 * 1024, gt=0)
    """Request bodies above this get 413 (the API server's own limit)."""
    registration_backoff_initial_seconds: float = Field(default=1.0, gt=0)
    registration_backoff_factor: float = Field(default=1.5, ge=1)
    registration_backoff_max_seconds: float = Field(default=60.0, gt=0)
    """The leader retries registering the APIService and Service with this back-off (upstream's helper:
    1 s x 1.5, capped at 1 min, unbounded)."""
