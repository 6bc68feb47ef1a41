"""Settings of one API server process. Every limit and timing is a named field, so tests shrink them."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from vplane.kube.serviceip import PortRange


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
    storage_backend: Literal["sqlite", "etcd"] = "sqlite"
    """Where objects live: a SQLite file in the data directory, or etcd (replicas on several machines)."""
    etcd_servers: list[str] = Field(default_factory=list)
    """etcd client URLs (kube-apiserver's ``--etcd-servers``), tried in turn; needed for ``etcd``."""
    etcd_prefix: str = "/registry"
    """Key prefix in etcd (``--etcd-prefix``), so several clusters can share one etcd."""
    etcd_cafile: Path | None = None
    etcd_certfile: Path | None = None
    etcd_keyfile: Path | None = None
    """TLS to etcd and the client certificate (``--etcd-cafile``, ``--etcd-certfile``, ``--etcd-keyfile``)."""
    etcd_request_timeout_seconds: float = Field(default=10.0, gt=0)
    """Longest one etcd call may take on one endpoint before the next is tried."""
    etcd_watch_check_seconds: float = Field(default=10.0, gt=0)
    """The etcd watch quiet this long gets a mark written; without an answer for twice as long it is opened
    again on the next endpoint (a connection that died without closing would leave the cache stale)."""
    write_cache_wait_seconds: float = Field(default=3.0, gt=0)
    """Longest a write's answer waits for the cache to hold it (etcd feeds the cache from its watch); the
    write is committed either way, and after this the answer goes out without read-your-writes."""
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
    kubernetes_version: str = "v1.36.2"
    """What ``/version`` reports (emulation and minimum compatibility versions follow from it, as a server
    that emulates its own version answers)."""
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
    # -- issue 7 (keys): service-account tokens --------------------------------------------------------
    service_account_max_token_expiration_seconds: int = 48 * 3600
    """Longest validity a TokenRequest token gets (kube-apiserver's ``--service-account-max-token-expiration``):
    longer requests are shortened to it with a warning. 0 means no cap; otherwise 1 hour to 2^32 seconds, as
    upstream checks the flag."""

    # -- issue 10 (runtime): reaching kubelets for pods/log -------------------------------------------
    kubelet_preferred_address_types: list[str] = Field(
        default_factory=lambda: ["InternalIP", "Hostname", "InternalDNS", "ExternalDNS", "ExternalIP"]
    )
    """Which of a Node's addresses the API server connects to for a pod's logs, first match wins
    (``--kubelet-preferred-address-types``; InternalIP first, as kubeadm-style clusters set it)."""
    kubelet_timeout_seconds: float = Field(default=5.0, gt=0)
    """How long connecting to a kubelet may take (``--kubelet-timeout``)."""
    kubelet_certificate_authority: Path | None = None
    """CA that kubelets' serving certificates must be issued by (default: this server's own CA). Upstream
    verifies nothing unless ``--kubelet-certificate-authority`` is set; vplane always verifies."""

    @field_validator("service_account_max_token_expiration_seconds")
    @classmethod
    def _max_expiration_in_range(cls, value: int) -> int:
        if value != 0 and not 3600 <= value <= 1 << 32:
            raise ValueError(
                "the service-account-max-token-expiration must be between 1 hour and 2^32 seconds"
            )
        return value

    # -- aggregation backend policy (issue 7, item 6) ------------------------------------------------
    aggregation_restrict_backends: bool = False
    """Refuse aggregation backends on loopback, link-local, unspecified, multicast and platform addresses
    (this host's own, and ``aggregation_denied_networks``) and APIServices with ``insecureSkipTLSVerify``
    (422 at admission, 503 at routing), except ``aggregation_allowed_backends``. Off for ``vplane
    apiserver``, whose operator is the one registering backends; tenant replicas turn it on, because there
    the tenant's cluster-admin chooses them (``vplane.apiserver.aggregation``)."""
    aggregation_allowed_backends: list[str] = Field(default_factory=list)
    """``host:port`` pairs exempt from the restriction and reached as named: backends this process serves
    itself (the tenant's resource proxy ports; they can also be added at run time with
    ``Aggregator.allow_backend``)."""
    aggregation_denied_networks: list[str] = Field(default_factory=list)
    """Addresses or CIDRs also refused when restricted (the platform's addresses; a tenant adds its
    platform's resolved address)."""

    @field_validator("aggregation_allowed_backends")
    @classmethod
    def _host_ports(cls, value: list[str]) -> list[str]:
        for pair in value:
            host, sep, port = pair.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"{pair!r} is not host:port")
        return value

    @field_validator("aggregation_denied_networks")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for network in value:
            ipaddress.ip_network(network, strict=False)
        return value

    # -- issue 7 items 4 and 8a: slow and idle clients, resource versions from the future --------------
    request_header_timeout_seconds: float = Field(default=32.0, gt=0)
    """Longest a client may take to send a request's headers: from the connection's start, or on a
    kept-alive connection from the request's first byte. The TLS handshake has the same bound. Past it the
    connection is dropped without an answer, as Go's server does (kube-apiserver's ``ReadHeaderTimeout``
    is 32 s). Idle kept-alive connections and requests already being answered (watches) are not under it."""
    idle_timeout_seconds: float = Field(default=90.0, gt=0)
    """Kept-alive connections with no request for this long are closed (kube-apiserver's ``IdleTimeout``)."""
    request_body_min_bytes_per_second: float = Field(default=1024.0, ge=0)
    """A request body must arrive at least this fast on average once ``request_body_grace_seconds`` have
    passed, or the connection is dropped (0: no minimum). Time the server itself is not reading (its
    buffer is full until the handler takes the body) does not count against the client."""
    request_body_grace_seconds: float = Field(default=30.0, ge=0)
    """Seconds a request body may take before its minimum rate applies."""
    response_send_timeout_seconds: float = Field(default=60.0, ge=0)
    """A client that takes no bytes of a response for this long, while the server has more for it than
    the transport buffers (64 KiB), is dropped, and what was buffered for it freed (0: never). A watch
    whose client stops reading ends this way too."""
    max_connections: int = Field(default=8192, gt=0)
    """Open client connections (counted at accept, so TLS handshakes in progress count); connections over
    it are reset at once. The server also keeps it at or under half its descriptor limit (raised to the
    hard limit at start, as Go programs do), so connections can never take the descriptors its store and
    outgoing connections need."""
    max_unauthenticated_in_flight: int = Field(default=400, gt=0)
    """Requests in flight whose caller is not authenticated, of each of two kinds: waiting on a token
    authenticator that may ask another server (a TokenReview; tokens from the static file and client
    certificates never wait), and served as anonymous (when ``anonymous_auth`` is on). More of a kind get
    429 with Retry-After; health probes without credentials are always answered."""
    max_watches_per_user: int = Field(default=1000, gt=0)
    """Open watches of one user (after impersonation) across all resources; more get 429 with
    Retry-After. About ten times what a controller manager holds."""
    resource_version_wait_seconds: float = Field(default=3.0, ge=0)
    """How long a GET, LIST, or watch with ``sendInitialEvents=true`` that asks for a resourceVersion
    newer than this server's waits for it before answering 504 ``Too large resource version`` (the
    kube-apiserver cache waits 3 s). Replicas on a shared store can briefly lag each other."""

    # -- issue 9 (workloads): the controller manager run with this server ------------------------
    controller_manager: bool = True
    """Run the controller manager (Deployments, ReplicaSets, Endpoints, ServiceAccounts, the root CA
    ConfigMap) against this server over loopback HTTP, as kube-controller-manager runs beside
    kube-apiserver. Off: nothing acts on workloads unless ``vplane controller-manager`` runs elsewhere."""
    controller_manager_settings: dict[str, Any] = Field(default_factory=dict)
    scheduler: bool = True
    """Run the scheduler (``default-scheduler``) against this server over loopback HTTP, as kube-scheduler
    runs beside kube-apiserver: pending pods are bound to nodes, or say why none fits."""
    scheduler_settings: dict[str, Any] = Field(default_factory=dict)
    """SchedulerSettings fields for that scheduler, as a YAML map."""
    """ControllerManagerSettings fields for that controller manager, as a YAML map (for example
    ``--set controller_manager_settings='{controllers: [deployment, replicaset]}'``)."""

    # -- issue 9 item 2 (policy controllers): the local storage class -----------------------------------
    default_storage_class: bool = True
    """Create the default StorageClass ``standard`` (provisioner ``vplane.io/local-path``,
    ``WaitForFirstConsumer``, reclaim ``Delete``) on first start, as kind and k3s clusters have one; the
    controller manager's ``persistentvolume-binder`` provisions its claims under ``<data dir>/volumes``."""

    # -- streams: connection upgrades relayed to aggregated backends -----------------------------------
    aggregation_upgrade_timeout_seconds: float = Field(default=5.0, gt=0)
    """Seconds an aggregated backend has to accept an upgrade's connection (exec, attach, port-forward, a
    WebSocket of its own) and answer it; past it the caller gets 503. A caller that goes before the answer
    closes the backend's connection at once."""

    # -- issue 10 item 3 (tenant control planes as pods) -----------------------------------------
    serving_cert_name: str = Field(default="serving", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    """The serving certificate's files in ``<data dir>/pki`` (``<name>.crt``, ``.key``, ``.names``). Tenant
    replicas that serve on addresses of their own (pod IPs) share a data directory, so each keeps its own."""

    # -- issue 9 (Service ClusterIPs and node ports, the `kubernetes` Service) ------------------------
    service_cluster_ip_range: str = "127.96.0.0/16"
    """Services get their ClusterIP from this range when they are created (``--service-cluster-ip-range``);
    its first address is the ``kubernetes`` Service's. Each allocation is an IPAddress object, and the
    range is the ServiceCIDR ``kubernetes``. A loopback range by default: Linux routes all of 127.0.0.0/8 to
    the loopback interface, so vplane's node runtime can bind ClusterIPs for its userspace service proxy
    without privileges (its ``service_cidr`` must name the same range). At most 2^20 addresses."""
    service_node_port_range: str = "30000-32767"
    """NodePort and LoadBalancer Services get their node ports from this range (``--service-node-port-range``,
    both ends included)."""
    endpoint_reconciler_type: Literal["lease", "none"] = "lease"
    """``lease`` (upstream's default): the ``kubernetes`` Endpoints and EndpointSlice name this server, kept
    so every ``endpoint_reconciler_interval_seconds``. Replicas on a shared store leave it to the replica
    their embedding process elects (a tenant's leader), so they agree. ``none``: nothing maintains them."""
    endpoint_reconciler_interval_seconds: float = Field(default=10.0, gt=0)
    """How often the ``kubernetes`` Service, its endpoints and the ServiceCIDR ``kubernetes`` are checked
    (upstream's ``--endpoint-reconciler`` interval, 10 s)."""
    advertise_address: str = ""
    """The address the ``kubernetes`` endpoints give for this server (``--advertise-address``); empty: the
    listen address, or 127.0.0.1 (::1) when it is unspecified or a name."""
    service_account_jwks_uri: str = ""
    """``jwks_uri`` of the issuer discovery document (``--service-account-jwks-uri``); empty:
    ``https://<advertise address>:<port>/openid/v1/jwks``, never the Host a caller sent (a shared cache of
    the public document must not learn an attacker's address)."""
    service_ip_repair_interval_seconds: float = Field(default=180.0, gt=0)
    """How often allocation records are checked against Services (upstream repairs every 3 minutes): a
    missing IPAddress or node port record is written, one no Service holds is removed once it is this
    old (a younger one may belong to a create still under way). Also done once at start."""

    @field_validator("service_cluster_ip_range")
    @classmethod
    def _service_range(cls, value: str) -> str:
        network = ipaddress.ip_network(value, strict=True)
        if network.max_prefixlen - network.prefixlen > 20:
            raise ValueError(f"{value} is too large: a Service IP range has at most 2^20 addresses")
        if network.num_addresses < 4:
            raise ValueError(f"{value} is too small: a Service IP range has at least 4 addresses")
        return value

    @field_validator("service_node_port_range")
    @classmethod
    def _node_port_range(cls, value: str) -> str:
        PortRange.parse(value)
        return value

    @field_validator("service_account_jwks_uri")
    @classmethod
    def _jwks_uri(cls, value: str) -> str:
        if value and not value.startswith("https://"):
            raise ValueError("must be an https:// URL")
        return value

    @field_validator("advertise_address")
    @classmethod
    def _advertise(cls, value: str) -> str:
        if value:
            ipaddress.ip_address(value)
        return value

    @field_validator("etcd_servers")
    @classmethod
    def _etcd_servers(cls, value: list[str]) -> list[str]:
        for url in value:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"{url!r} is not an etcd client URL (http://host:port or https://host:port)")
        return value

    @model_validator(mode="after")
    def _etcd_backend(self) -> APIServerSettings:
        if self.storage_backend == "etcd" and not self.etcd_servers:
            raise ValueError("storage_backend etcd needs etcd_servers (the etcd client URLs)")
        if self.etcd_keyfile is not None and self.etcd_certfile is None:
            raise ValueError("etcd_keyfile needs etcd_certfile")
        return self
