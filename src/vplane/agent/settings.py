"""Settings of the agent process; every timing is a named field with its default."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class AgentSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    token: str = ""
    """The cluster's access key (chart: Secret ``loft-agent-connection``, key ``token``)."""
    url: str = ""
    """The platform's URL (same Secret, key ``url``)."""
    ca_pem: str = ""
    """PEM of the CA that signs the platform's certificate (Secret ``loft-additional-ca``); empty: the
    system's trust store."""
    name: str = "loft-agent"
    """This agent's node name on the mesh (the pod's name in a cluster)."""
    namespace: str = ""
    """The agent's namespace (``POD_NAMESPACE``), told to the platform as a session label."""
    kubeconfig: Path | None = None
    """Reach the cluster's API with this kubeconfig instead of the in-cluster service account."""
    kube_context: str | None = None
    service_account_dir: Path = SERVICE_ACCOUNT_DIR
    """In-cluster credentials: ``token`` and ``ca.crt`` here, the API at ``$KUBERNETES_SERVICE_HOST``."""
    token_reload_seconds: float = Field(default=60.0, gt=0)
    """The service-account token file is re-read this often (kubelet rotates bound tokens)."""
    liveness_interval_seconds: float = Field(default=10.0, gt=0)
    """The liveness loop checks the path to the platform this often (spec §10.4: every 10 s) and logs
    ``Agent cannot reach platform`` with an increasing failure counter while it fails."""
    probe_retry_seconds: float = Field(default=5.0, gt=0)
    """Before the tunnel starts, a failed ``/derp/probe`` is retried after this long."""
    upstream_timeout_seconds: float = Field(default=10.0, gt=0)
    """Connecting to the cluster's API server (requests themselves are unbounded: watches stay open)."""
    mesh: dict[str, object] = Field(default_factory=dict)
    """Overrides of the mesh session's MeshSettings (heartbeat, reconnect backoff, ...)."""

    # -- issue 11 items 1 and 7: the agent as a pod, and the upgrade bridge ---------------------------
    health_port: int = Field(default=0, ge=0, le=65535)
    """Serve ``/healthz`` (the process is up) and ``/readyz`` (its tunnel session is registered) over plain
    HTTP on this port, for the pod's probes; 0 serves nothing. The chart sets 8080."""
    health_host: str = "0.0.0.0"
    """The address the health endpoints bind (the chart passes the pod's IP: under vplane's node runtime
    pods share the machine's loopback network, so each binds its own address)."""
    proxy_only: bool = False
    """The upgrade bridge (Deployment ``proxy-only-agent``): hold a tunnel session and serve the platform's
    requests, nothing else (no liveness reports). The platform deploys it, and removes it after the
    upgrade."""
