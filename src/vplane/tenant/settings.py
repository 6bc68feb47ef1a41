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

    # -- issue 10 (tenant nodes): the tenant's pods run on a node of its own ------------------------------
    node_enabled: bool = True
    """Run the tenant's node: the leader replica runs a node runtime (node ``node_name``, data under
    ``<data dir>/node``) on which the tenant's pods are scheduled and run as local processes. Off: pods stay
    Pending, as in a cluster without nodes (saves a process's worth of CPU per tenant)."""
    node_name: str = ""
    """The tenant node's name; default ``<tenant name>-node``. Stable, so every leader runs the same Node and
    adopts the pods the previous one left running."""
    node_pod_cidr: str = ""
    """The tenant's pod IP range (a range of 127.0.0.0/8 the platform assigns each tenant, so two clusters'
    pods on this machine do not share addresses); default: the runtime's. The Service range is the API
    server's ``service_cluster_ip_range``, which the platform sets as well."""
    node: dict[str, object] = Field(default_factory=dict)
    """Overrides for the tenant node's RuntimeSettings (intervals, back-offs, ...)."""
    node_start_retry_seconds: float = Field(default=5.0, gt=0)
    """A leader whose node did not start (its API not answering yet, ...) tries again after this long."""
    node_lock_poll_seconds: float = Field(default=0.2, gt=0)
    """A new leader waits for the previous leader's runtime to let go of the node's directory (an ``flock``,
    released when that runtime stops or its process ends), looking this often."""

    @property
    def node_data_dir(self) -> Path:
        return self.data_dir / "node"

    @property
    def node_display_name(self) -> str:
        return self.node_name or f"{self.name}-node"

    @property
    def lease_name(self) -> str:
        return f"vcluster-{self.name}-controller"

    @property
    def identity(self) -> str:
        return f"{self.name}-{self.replica}"
