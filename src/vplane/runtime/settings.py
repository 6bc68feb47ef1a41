"""Settings of one node runtime (the kubelet stand-in). Every timing and limit is a named field, so tests
shrink them; defaults are the kubelet's where it has one."""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator


def _hostname() -> str:
    # A node name is a DNS subdomain: lower case, and the machine's name may carry a domain or capitals.
    return socket.gethostname().lower().strip(".") or "localhost"


class RuntimeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    data_dir: Path
    """Pods' directories, container logs, the pid and state files that let a restarted runtime adopt them."""
    node_name: str = Field(default_factory=_hostname)
    """The Node object this runtime registers and whose pods it runs (the kubelet's ``--hostname-override``;
    default: the machine's host name)."""
    node_labels: dict[str, str] = Field(default_factory=dict)
    """Extra labels on the Node object (beside kubernetes.io/hostname, os and arch)."""

    # -- the kubelet server ------------------------------------------------------------------------
    kubelet_listen_host: str = "127.0.0.1"
    kubelet_port: int = Field(default=0, ge=0, le=65535)
    """The kubelet API's HTTPS port (upstream's 10250); 0 lets the system pick one. The Node reports it in
    ``status.daemonEndpoints.kubeletEndpoint.Port``, which is where the API server connects for logs."""
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    """The kubelet server's certificate (the kubelet's ``--tls-cert-file``); without one it serves a
    self-signed certificate, which an API server that verifies kubelets refuses."""
    client_ca_file: Path | None = None
    """CA whose client certificates may call the kubelet API (default: the kubeconfig's cluster CA)."""
    authorization_cache_seconds: float = 300.0
    """How long an allowed SubjectAccessReview answer is reused (the kubelet's webhook cache, 5 min)."""
    authorization_denied_cache_seconds: float = 30.0

    # -- node status and heartbeat -----------------------------------------------------------------
    node_lease_duration_seconds: int = Field(default=40, ge=1)
    """``spec.leaseDurationSeconds`` of the node's Lease in kube-node-lease."""
    node_lease_renew_interval_seconds: float = Field(default=10.0, gt=0)
    """How often the Lease is renewed (upstream: a quarter of the lease duration, 10 s)."""
    node_status_update_frequency_seconds: float = Field(default=10.0, gt=0)
    """How often the node's status is computed and compared (``nodeStatusUpdateFrequency``)."""
    node_status_report_frequency_seconds: float = Field(default=300.0, gt=0)
    """An unchanged status is still written this often (``nodeStatusReportFrequency``, 5 min)."""
    kubelet_version: str = "v1.36.2"
    """What ``status.nodeInfo.kubeletVersion`` reports (kubectl shows it as the node's VERSION)."""
    max_pods: int = Field(default=110, ge=1)
    """``status.capacity.pods`` (the kubelet's ``maxPods``)."""
    system_reserved_memory_bytes: int = Field(default=0, ge=0)
    """Subtracted from the machine's memory for ``allocatable`` (``--system-reserved``)."""

    # -- images --------------------------------------------------------------------------------------
    vplane_image: str = "ghcr.io/vplane/vplane"
    """vplane's own image: any tag or digest of this repository runs ``vplane <args>`` from this install."""
    image_catalogue_file: Path | None = None
    """A YAML file of more images (see docs/runtime.md); it extends and may override the built-in ones."""
    image_pull_backoff_seconds: float = Field(default=10.0, gt=0)
    image_pull_backoff_max_seconds: float = Field(default=300.0, gt=0)
    """An image that cannot be pulled is retried after 10 s, doubling to 5 min (``ImagePullBackOff``)."""

    # -- containers ------------------------------------------------------------------------------
    container_start_timeout_seconds: float = Field(default=120.0, gt=0)
    """How long a container's shim may take to start its process before the start fails (``StartError``,
    ``failed to start container process: timed out``): the kubelet's ``--runtime-request-timeout`` (2 min).
    A shim is a Python process, slow to start on a loaded machine."""
    crash_backoff_seconds: float = Field(default=10.0, gt=0)
    crash_backoff_max_seconds: float = Field(default=300.0, gt=0)
    """A container that exits is restarted after 10 s, doubling to 5 min (``CrashLoopBackOff``)."""
    crash_backoff_reset_seconds: float = Field(default=600.0, gt=0)
    """A container that ran this long since its last back-off starts again from the first delay (10 min,
    twice the maximum, as the kubelet's back-off forgets entries)."""
    pod_resync_seconds: float = Field(default=10.0, gt=0)
    """A pod waiting on something (an image pull back-off, a missing ConfigMap) is looked at again after
    this long (the kubelet's pod worker back-off period)."""
    minimum_grace_period_seconds: float = Field(default=2.0, ge=0)
    """The least time a container gets between SIGTERM and SIGKILL (the kubelet's minimum shutdown window)."""
    stop_grace_period_seconds: float = Field(default=10.0, ge=0)
    """Stopping the runtime stops its pods' processes: SIGTERM, then SIGKILL after this long at most."""
    status_batch_seconds: float = Field(default=0.05, ge=0)
    """Status changes of one pod within this window are written as one update."""
    volume_resync_seconds: float = Field(default=60.0, gt=0)
    """Secret, ConfigMap and downward API volumes are rewritten this often when their source changed (the
    kubelet's sync period)."""
    volume_retry_seconds: float = Field(default=1.0, gt=0)
    """A volume that could not be set up (a missing ConfigMap or Secret) is tried again this often."""
    service_account_wait_seconds: float = Field(default=10.0, ge=0)
    """A pod whose service account has no token yet (its ServiceAccount not created yet) waits this long
    for it, as ``ContainerCreating`` with ``FailedMount``, then runs without in-cluster credentials."""
    token_expiration_seconds: int = Field(default=3607, ge=600)
    """Service-account tokens are requested for this long and renewed at 80% of their life."""

    # -- networking ------------------------------------------------------------------------------
    pod_cidr: str = "127.10.0.0/16"
    """Pod IPs come from this loopback range: each pod its own address, so pods may bind the same port."""
    service_cidr: str = "127.96.0.0/16"
    """The cluster's Service IP range (the API server's ``service_cluster_ip_range``): the proxy serves the
    ClusterIPs in it, and a Service that has none gets one from it."""
    service_proxy: bool = True
    """Serve each Service's ClusterIP and ports with a userspace TCP proxy to its ready endpoints."""
    allocate_cluster_ips: bool = True
    """Give a Service without ``spec.clusterIP`` one from ``service_cidr`` (written through the API). A
    fallback: vplane's API server allocates them at create, as kube-apiserver does."""
    cluster_domain: str = "cluster.local"
    api_server_url: str = ""
    """What pods see as their cluster's API server (``KUBERNETES_SERVICE_HOST``/``PORT`` and the
    in-pod kubeconfig); default: the server of the runtime's kubeconfig."""

    @field_validator("pod_cidr", "service_cidr")
    @classmethod
    def _loopback(cls, value: str) -> str:
        network = ipaddress.ip_network(value, strict=False)
        if not isinstance(network, ipaddress.IPv4Network) or not network.subnet_of(
            ipaddress.IPv4Network("127.0.0.0/8")
        ):
            raise ValueError(
                f"{value} is not a range of 127.0.0.0/8 (pods and services use loopback addresses)"
            )
        if network.num_addresses < 4:
            raise ValueError(f"{value} is too small")
        return str(network)

    @property
    def pods_dir(self) -> Path:
        return self.data_dir / "pods"
