"""Settings of the platform process; every timing and limit is a named field with its default."""

from __future__ import annotations

import ipaddress
import secrets
from pathlib import Path
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vplane import __version__

HOST_POD_CIDR = "127.10.0.0/16"
"""The node runtime's default ``pod_cidr`` (``RuntimeSettings``; the platform does not import the runtime, a
unit test checks they agree): the host cluster's pods, which tenants' ranges must not overlap."""
LOOPBACK_RESERVED = "127.0.0.0/16"
"""127.0.0.1 and its neighbours: every server on the machine listens here; no tenant range may hold them."""


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

    # -- issue 11 (connected clusters): the Cluster reconcile loop, the agent release, the licence --------
    connected_cluster_limit: int | None = Field(default=None, ge=0)
    """The licence's connected-cluster limit (licence resource ``connected-cluster``): creating a Cluster
    beyond it is refused. ``spec.local`` clusters do not count. None: no limit."""
    cluster_workers: int = Field(default=2, ge=1)
    """Clusters reconciled at once (a pass may wait for helm)."""
    cluster_offline_grace_seconds: float = Field(default=10.0, ge=0)
    """A new tunnel cluster's reason stays blank this long before it reads ``Offline`` (runbook: blank
    "during the earliest part of the wait")."""
    cluster_offline_requeue_seconds: float = Field(default=5.0, gt=0)
    """Offline and NoOnlinePeers requeue after this long (the agent's arrival requeues at once)."""
    cluster_failed_requeue_seconds: float = Field(default=10.0, gt=0)
    """A pass that ended in a hard error (phase Failed) is retried after this long."""
    cluster_resync_seconds: float = Field(default=30.0, gt=0)
    """An Initialized cluster is checked again (agent pods, tunnel sessions) this often."""
    cluster_peer_health_timeout_seconds: float = Field(default=5.0, gt=0)
    """A tunnel session that does not answer the platform's health check within this long is not online."""
    cluster_request_timeout_seconds: float = Field(default=10.0, gt=0)
    """Each request the platform makes to a connected cluster's API."""
    agent_values: dict[str, object] = Field(default_factory=dict)
    """The platform's ``agentValues``: Helm values for every agent, under each Cluster's
    ``loft.sh/agent-values`` annotation and over the chart's defaults."""
    agent_chart: Path | None = None
    """The agent chart directory (default: ``charts/vplane-agent`` next to the sources, or
    ``$VPLANE_AGENT_CHART``)."""
    helm_binary: str | None = None
    """The helm binary (default: ``$VPLANE_HELM``, ``helm`` on PATH, then ``.tools/bin/helm``)."""
    helm_timeout_seconds: float = Field(default=120.0, gt=0)
    """One helm command (list, get values, upgrade --install) may take this long."""
    helm_exit_margin_seconds: float = Field(default=60.0, ge=0)
    """How long after its own ``--timeout`` a helm process is killed: helm, not the kill, ends an upgrade
    that ran out of time, so the release reads ``failed`` (rolled back at once), not ``pending-upgrade``."""
    agent_release_recheck_seconds: float = Field(default=300.0, ge=0)
    """Helm is asked about an agent release whose desired values did not change at most this often (a
    drift by hand is found within it)."""
    local_client_retry_seconds: float = Field(default=5.0, gt=0)
    """The platform's own mesh node retries this long after its coordinator refused it."""
    local_client_ready_timeout_seconds: float = Field(default=10.0, gt=0)
    """At start, the Cluster loop waits this long for the platform's own mesh node to connect."""

    # -- issue 11 item 7 (agent upgrades): the bridge proxy-only-agent and stuck releases ----------------
    agent_bridge_timeout_seconds: float = Field(default=300.0, ge=0)
    """How long the upgrade waits for the bridge ``proxy-only-agent`` to hold a tunnel session before each
    wait's log line (a warning once, then info) names a real error of the bridge (its pod in
    ImagePullBackOff or CrashLoopBackOff, pods that cannot be created). The wait never writes the status."""
    agent_release_stuck_seconds: float = Field(default=600.0, ge=0)
    """An agent release whose last operation stays pending (pending-install, -upgrade, -rollback) this long,
    as seen by this process, is stuck: it is rolled back to its last good revision (an interrupted install's
    record is forgotten). Helm's own operations time out after 5 minutes by default."""

    # -- streams: connection upgrades on the tenant path ------------------------------------------------
    tenant_upgrade_timeout_seconds: float = Field(default=10.0, gt=0)
    """Seconds a tenant replica has to accept an upgrade's connection (exec, attach, port-forward, a
    WebSocket) on ``/kubernetes/project/<p>/virtualcluster/<n>`` and answer it; past it the caller gets
    503. A caller that goes before the answer closes the replica's connection at once."""

    # -- issue 10 item 3 (tenant control planes as pods) ---------------------------------------------------
    tenant_placement: Literal["process", "pods"] = "process"
    """How tenant replicas run. ``process``: child processes of the platform (``vplane.platform.tenants``).
    ``pods``: a StatefulSet ``<name>`` in namespace ``vcluster-<name>`` of the platform's own cluster, run by a
    node runtime, controller manager and scheduler the platform starts beside its API server
    (``vplane.platform.tenantpods``). ``vplane platform start`` defaults to ``process``; ``vplane up`` to
    ``pods``."""
    host_node: dict[str, object] = Field(default_factory=dict)
    """With ``pods``: overrides for the platform's node runtime (RuntimeSettings: ``node_name``, ``pod_cidr``,
    back-offs, ...). Its data directory is ``<data dir>/node``."""
    tenant_image: str = f"ghcr.io/vplane/vplane:v{__version__}"
    """With ``pods``: the image tenant pods run (the node's ``vplane_image``, any tag, is ``vplane``)."""
    tenant_pod_port: int = Field(default=0, ge=0, le=65535)
    """With ``pods``: the port each tenant replica serves on its pod IP; 0 gives each tenant a port of its own,
    chosen once and kept in its directory (``ports.json``), so tenants of two platforms on one machine whose pod
    addresses overlap do not collide."""
    tenant_service_port: int = Field(default=443, ge=1, le=65535)
    """With ``pods``: the port of the tenant's Service (``<name>`` in ``vcluster-<name>``), to the pods' port."""
    tenant_readiness_period_seconds: int = Field(default=2, ge=1)
    """With ``pods``: the tenant pods' readiness probe (``GET /readyz`` over HTTPS) runs this often (vcluster's
    chart: 2 s)."""
    tenant_namespace_delete_timeout_seconds: float = Field(default=60.0, gt=0)
    """With ``pods``: deleting a VirtualClusterInstance waits this long for namespace ``vcluster-<name>`` (its
    pods stopped) to be gone before its data is removed; after that the deletion is retried."""

    # -- issue 11 item 4: platform replicas (vplane.platform.replicas) -----------------------------------
    shared_dir: Path | None = None
    """Run as one replica of a platform whose replicas share this directory: the store (SQLite in shared
    mode), the API server's PKI and tokens, and the mesh CA live there; ``data_dir`` keeps what is this
    process's own (its lock, kubeconfigs, helm state). None: everything is in ``data_dir`` (one replica)."""
    replica_heartbeat_seconds: float = Field(default=10.0, gt=0)
    """Each replica renews its Lease (``kube-system/vplane-platform-<instance_id>``) this often, and as
    often checks the other replicas' Leases and the sessions they hold."""
    replica_offline_after_seconds: float = Field(default=120.0, gt=0)
    """A replica whose Lease has not been renewed for this long has stopped reporting: the others mark the
    agent sessions it held offline (runbook: "stops reporting for about two minutes")."""
    tenant_controllers: bool = True
    """Run the VirtualClusterInstance controller and the tenant supervisor here. Tenant control planes are
    local processes of the replica that runs them, so with several replicas exactly one may run them:
    set it false on all the others."""

    # -- issue 10 (tenant nodes): each tenant's pods run on a node of its own, in ranges of its own ------------
    tenant_node: bool = True
    """Each tenant cluster runs a node (its leader replica runs a node runtime), so its pods are scheduled and
    run as local processes, as in any cluster. Off: tenants have no node and their pods stay Pending (tests
    that need no pods save the CPU)."""
    tenant_node_settings: dict[str, object] = Field(default_factory=dict)
    """Overrides for every tenant node's RuntimeSettings (intervals, back-offs, ...)."""
    tenant_pod_cidr_pool: str = "127.16.0.0/12"
    tenant_pod_cidr_prefix: int = Field(default=20, ge=8, le=30)
    """Each tenant's pods get a ``/tenant_pod_cidr_prefix`` of this pool (4096 addresses by default), chosen
    once and recorded in its directory (``network.json``)."""
    tenant_service_cidr_pool: str = "127.112.0.0/12"
    tenant_service_cidr_prefix: int = Field(default=20, ge=12, le=30)
    """Each tenant's Services get their ClusterIPs from a ``/tenant_service_cidr_prefix`` of this pool (the
    tenant API server's ``service_cluster_ip_range``, which its node's proxy serves), in the same slot as its
    pod range."""

    @model_validator(mode="after")
    def _tenant_ranges(self) -> Self:
        loopback = ipaddress.IPv4Network("127.0.0.0/8")
        pods = ipaddress.IPv4Network(self.tenant_pod_cidr_pool)
        services = ipaddress.IPv4Network(self.tenant_service_cidr_pool)
        host_services = str(self.apiserver.get("service_cluster_ip_range") or "127.96.0.0/16")
        reserved = {
            "127.0.0.0/16 (the machine's servers)": LOOPBACK_RESERVED,
            "the host cluster's pod range": str(self.host_node.get("pod_cidr") or HOST_POD_CIDR),
            "the host cluster's Service range": host_services,
        }
        for field, pool, prefix in (
            ("tenant_pod_cidr_pool", pods, self.tenant_pod_cidr_prefix),
            ("tenant_service_cidr_pool", services, self.tenant_service_cidr_prefix),
        ):
            if not pool.subnet_of(loopback):
                raise ValueError(f"{field}: {pool} is not a range of 127.0.0.0/8")
            if prefix < pool.prefixlen:
                raise ValueError(f"{field}: a /{prefix} per tenant does not fit in {pool}")
            for what, other in reserved.items():
                if pool.overlaps(ipaddress.ip_network(other, strict=False)):
                    raise ValueError(f"{field}: {pool} overlaps {what} ({other})")
        if pods.overlaps(services):
            raise ValueError(f"tenant_pod_cidr_pool {pods} overlaps tenant_service_cidr_pool {services}")
        return self

    # -- issue 11 item 6 (tenant clusters on connected clusters) ------------------------------------------
    connected_tenant_requeue_seconds: float = Field(default=5.0, gt=0)
    """A VirtualClusterInstance on a connected cluster that waits for its cluster (missing, not initialized)
    or runs there unmanaged (the cluster offline) is looked at again this often (and at once when a Cluster
    changes)."""
    connected_tenant_storage: str = "5Gi"
    """The size the tenant's store claim (PersistentVolumeClaim ``data-<name>``) requests on a connected
    cluster; replicas share it, as they share their directory on the platform."""
