"""Settings of one tenant control-plane replica."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from vplane.controllers.leaderelection import LeaderElectionSettings


class TenantSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    data_dir: Path
    name: str
    project: str
    project_namespace: str
    replica: int = 0
    replicas: int = 1
    listen_host: str = "127.0.0.1"
    listen_port: int = 0
    platform_url: str
    platform_ca: Path
    access_key_file: Path
    token_review_ttl_seconds: float = 10.0
    """Platform answers about access keys are cached this long."""
    leader_election: LeaderElectionSettings = Field(default_factory=LeaderElectionSettings)
    """Lease ``vcluster-<name>-controller`` in kube-system: 60 s / 40 s / 15 s as upstream's chart."""
    apiserver: dict[str, object] = Field(default_factory=dict)
    """Overrides for this replica's API server settings."""
    mesh: dict[str, object] = Field(default_factory=dict)
    """Overrides for this replica's MeshSettings (dial timeout, heartbeats, reconnect backoff)."""
    mesh_ready_timeout_seconds: float = 10.0
    """How long start-up waits for the first netmap before serving anyway (the platform may be down)."""

    # -- issue 7 (keys): the token-review cache is bounded --------------------------------------------
    token_review_cache_max_entries: int = Field(default=10_000, ge=1)
    """Accepted and refused platform answers are each kept for at most this many tokens (least recently
    used go first), so random tokens cannot grow the cache."""
    token_max_bytes: int = Field(default=4096, ge=1)
    """Longer bearer tokens get 401 before the platform is asked (access keys are 64 characters)."""

    # -- the resource proxy (issue 8) ---------------------------------------------------------------
    config_file: Path | None = None
    """This tenant's vcluster.yaml (the VirtualClusterInstance's helm values, written by the platform);
    ``experimental.proxy.customResources`` in it starts the resource proxy."""
    proxy: dict[str, object] = Field(default_factory=dict)
    """Overrides for the resource proxy's ProxySettings (dial timeout, quarantine, staleness, request cap)."""
    proxy_registration_resync_seconds: float = Field(default=60.0, gt=0)
    """The leader re-applies the proxy's APIServices, Services and protection this often."""

    # -- issue 10 item 3 (tenant control planes as pods) ---------------------------------------------
    mesh_cert_wait_seconds: float = Field(default=10.0, ge=0)
    """A replica on a pod IP waits this long at start for the mesh certificate the platform issues for its
    address (``mesh-<replica>.crt``); without one peers reach it through the relay."""

    @property
    def lease_name(self) -> str:
        return f"vcluster-{self.name}-controller"

    @property
    def identity(self) -> str:
        return f"{self.name}-{self.replica}"
