"""Settings of one API server process. Every limit and timing is a named field, so tests shrink them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class APIServerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    data_dir: Path
    listen_host: str = "127.0.0.1"
    listen_port: int = 6443
    server_names: list[str] = Field(default_factory=lambda: ["127.0.0.1", "localhost", "::1"])
    """Names and addresses in the serving certificate."""
    max_body_bytes: int = 3 * 1024 * 1024
    """Request bodies above this get 413 (upstream's limit is 3 MiB)."""
    durable: bool = True
    """Acknowledge writes only after fsync (SQLite ``synchronous=FULL``)."""
    commit_linger_seconds: float = Field(default=0.005, ge=0, le=1)
    """Longest a commit waits for write requests already being processed to reach the store, so one
    fsync serves them all (only while such requests exist; 0 turns the wait off)."""
    shared_store: bool = False
    """Several processes (replicas of one tenant) use the same store file; each catches up on the others."""
    kubeconfig_name: str = "kubeconfig.yaml"
    """File in the data directory that gets an admin kubeconfig for this process's address."""
    history_window: int = 10_000
    """Revisions kept for watches that resume and for paginated lists (older ones answer 410)."""
    compact_interval_seconds: float = 60.0
    watch_queue_capacity: int = 10_000
    """Events a slow watcher may fall behind before the server closes its stream."""
    bookmark_interval_seconds: float = 60.0
    watch_timeout_min_seconds: float = 1800.0
    watch_timeout_max_seconds: float = 3600.0
    """Watches without ``timeoutSeconds`` end at a random point in this range (as upstream)."""
    anonymous_auth: bool = False
    """Serve anonymous requests beyond health and version (off: they get 401)."""
    write_queue_limit: int = 2000
    """Writes in flight beyond this get 429 with Retry-After."""
    kubernetes_version: str = "v1.35.3"
    requestheader_client_ca_file: Path | None = None
    """CA of the front proxy whose ``X-Remote-*`` headers are trusted (default: this server's own)."""
    requestheader_allowed_names: list[str] = Field(default_factory=lambda: ["front-proxy-client"])
    delegate_kubeconfig: Path | None = None
    """Run as an extension server: authenticate tokens and authorize requests through this server too."""
    apiservice_probe_interval_seconds: float = 30.0
    """How often aggregated backends' discovery is checked for the ``Available`` condition."""
    admin_user: str = "admin"

    # -- issue 7 item 2: decoded and stored size ---------------------------------------------------
    max_object_bytes: int = Field(default=1536 * 1024, gt=0)
    """Largest stored form of one object (etcd's default ``--max-request-bytes``, 1.5 MiB): creates,
    updates, patches and subresource writes past it get 413 ``etcdserver: request is too large``. Request
    bodies may be larger (``max_body_bytes``), as upstream allows for JSON being wordier than storage."""
    # -- shutdown (issue 7, item 9) --
    shutdown_grace_seconds: float = Field(default=3.0, ge=0)
    """On stop, how long requests still being handled may finish before they are cancelled (aiohttp's
    default of 60 s kept a stopping server waiting on relays whose client had gone)."""

    # -- issue 9 (workloads): the controller manager run with this server ------------------------
    controller_manager: bool = True
    """Run the controller manager (Deployments, ReplicaSets, Endpoints, ServiceAccounts, the root CA
    ConfigMap) against this server over loopback HTTP, as kube-controller-manager runs beside
    kube-apiserver. Off: nothing acts on workloads unless ``vplane controller-manager`` runs elsewhere."""
    controller_manager_settings: dict[str, Any] = Field(default_factory=dict)
    """ControllerManagerSettings fields for that controller manager, as a YAML map (for example
    ``--set controller_manager_settings='{controllers: [deployment, replicaset]}'``)."""
