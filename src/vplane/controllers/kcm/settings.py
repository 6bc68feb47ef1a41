"""Settings of the controller manager: which controllers run and every limit and timing they use."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from vplane.controllers.informer import InformerSettings
from vplane.controllers.kcm.events import EventSettings
from vplane.controllers.workqueue import WorkQueueSettings


class ControllerManagerSettings(BaseModel):
    """Defaults are kube-controller-manager's."""

    model_config = ConfigDict(extra="forbid")

    controllers: list[str] = Field(default_factory=lambda: ["*"])
    """Upstream's ``--controllers``: ``*`` is every controller on by default, ``name`` turns one on,
    ``-name`` turns one off."""
    concurrent_deployment_syncs: int = Field(default=5, ge=1)
    """Deployments reconciled at once (workers of the deployment controller)."""
    concurrent_replicaset_syncs: int = Field(default=5, ge=1)
    """ReplicaSets reconciled at once."""
    concurrent_rc_syncs: int = Field(default=5, ge=1)
    """ReplicationControllers reconciled at once."""
    concurrent_endpoint_syncs: int = Field(default=5, ge=1)
    """Services whose Endpoints are computed at once."""
    concurrent_serviceaccount_syncs: int = Field(default=1, ge=1)
    """Namespaces checked for their ``default`` ServiceAccount at once."""
    concurrent_root_ca_syncs: int = Field(default=1, ge=1)
    """Namespaces checked for ``kube-root-ca.crt`` at once."""
    burst_replicas: int = Field(default=500, ge=1)
    """Most pods a ReplicaSet creates or deletes in one sync (``BurstReplicas``)."""
    slow_start_initial_batch: int = Field(default=1, ge=1)
    """Creates go in batches of 1, 2, 4, ... so a refused first create costs one request, not hundreds."""
    expectations_timeout_seconds: float = Field(default=300.0, gt=0)
    """How long a ReplicaSet waits to see its own creates and deletes before acting again regardless."""
    endpoints_max_capacity: int = Field(default=1000, ge=1)
    """Addresses one Endpoints object holds; beyond it they are truncated and annotated ``over-capacity``."""
    endpoint_updates_batch_seconds: float = Field(default=0.0, ge=0)
    """Delay that lets pod changes for one Service be written together (``EndpointUpdatesBatchPeriod``)."""
    informer: InformerSettings = Field(default_factory=InformerSettings)
    queue: WorkQueueSettings = Field(default_factory=WorkQueueSettings)
    events: EventSettings = Field(default_factory=EventSettings)
    field_manager: str = "kube-controller-manager"
    """The field manager of every write, as upstream's controllers appear in ``managedFields``."""

    # -- Job, CronJob and TTL-after-finished controllers (issue 9, batch) --------------------------------
    concurrent_job_syncs: int = Field(default=5, ge=1)
    """Jobs reconciled at once (``--concurrent-job-syncs``)."""
    concurrent_cron_job_syncs: int = Field(default=5, ge=1)
    """CronJobs reconciled at once (``--concurrent-cron-job-syncs``)."""
    concurrent_ttl_after_finished_syncs: int = Field(default=5, ge=1)
    """Finished Jobs checked for their TTL at once (``--concurrent-ttl-after-finished-syncs``)."""
    job_sync_batch_seconds: float = Field(default=1.0, ge=0)
    """Pod changes and Job status updates are folded into one Job sync this long (``syncJobBatchPeriod``);
    spec changes sync at once."""
    job_pod_failure_backoff_seconds: float = Field(default=10.0, gt=0)
    """Wait before replacing a Job's failed pod; doubles with each further failure since the last success
    (``DefaultJobPodFailureBackOff``)."""
    job_pod_failure_backoff_max_seconds: float = Field(default=600.0, gt=0)
    """The cap on that wait (``MaxJobPodFailureBackOff``: 10 minutes in the controller's code; the
    Job documentation still says six)."""
    job_max_uncounted_pods: int = Field(default=500, ge=1)
    """Finished pods one sync moves through ``status.uncountedTerminatedPods`` (``MaxUncountedPods``)."""
    job_max_pod_create_delete_per_sync: int = Field(default=500, ge=1)
    """Most pods one Job sync creates or deletes (``MaxPodCreateDeletePerSync``)."""
    cronjob_next_schedule_delta_seconds: float = Field(default=0.1, ge=0)
    """Added to the wait for a CronJob's next time, so a clock slightly behind still finds it due."""
    cronjob_default_time_zone: str = ""
    """The zone of schedules without ``spec.timeZone``: empty is this process's local zone, as
    kube-controller-manager uses its own (``TZ``, else ``/etc/localtime``, else UTC)."""

    # -- issue 9 item 2 (apps): the StatefulSet and DaemonSet controllers ------------------------------
    concurrent_statefulset_syncs: int = Field(default=5, ge=1)
    """StatefulSets reconciled at once (``--concurrent-statefulset-syncs``)."""
    concurrent_daemonset_syncs: int = Field(default=2, ge=1)
    """DaemonSets reconciled at once (``--concurrent-daemonset-syncs``)."""
    daemonset_burst_replicas: int = Field(default=250, ge=1)
    """Most pods a DaemonSet creates or deletes in one sync (upstream's ``BurstReplicas`` of 250)."""
    daemonset_failed_pod_backoff_seconds: float = Field(default=1.0, gt=0)
    """First wait before a DaemonSet deletes another failed pod on the same node; it doubles each time."""
    daemonset_failed_pod_backoff_max_seconds: float = Field(default=900.0, gt=0)
    """The cap on that wait (15 minutes, as kube-controller-manager's failed-pods back-off)."""

    # -- issue 9 item 2 (policy controllers): quota, endpoint slices, disruption, autoscaling, storage, CSRs
    concurrent_resource_quota_syncs: int = Field(default=5, ge=1)
    """ResourceQuotas recomputed at once (``--concurrent-resource-quota-syncs``)."""
    resource_quota_sync_period_seconds: float = Field(default=300.0, gt=0)
    """Every quota is recomputed from what exists this often (``--resource-quota-sync-period``), besides
    the recomputations deletions and finished pods trigger."""
    concurrent_service_endpoint_syncs: int = Field(default=5, ge=1)
    """Services whose EndpointSlices are computed at once (``--concurrent-service-endpoint-syncs``)."""
    max_endpoints_per_slice: int = Field(default=100, ge=1, le=1000)
    """Endpoints one EndpointSlice holds (``--max-endpoints-per-slice``)."""
    endpointslice_updates_batch_seconds: float = Field(default=0.0, ge=0)
    """Delay that lets pod changes for one Service be written together (``--endpointslice-updates-batch-period``)."""
    concurrent_horizontal_pod_autoscaler_syncs: int = Field(default=5, ge=1)
    """HorizontalPodAutoscalers reconciled at once (``--concurrent-horizontal-pod-autoscaler-syncs``)."""
    horizontal_pod_autoscaler_sync_period_seconds: float = Field(default=15.0, gt=0)
    """How often each HorizontalPodAutoscaler is looked at (``--horizontal-pod-autoscaler-sync-period``)."""
    horizontal_pod_autoscaler_downscale_stabilization_seconds: float = Field(default=300.0, ge=0)
    """Scale-down follows the highest recommendation of this window
    (``--horizontal-pod-autoscaler-downscale-stabilization``)."""
    local_path_root: str | None = None
    """Directory the ``vplane.io/local-path`` provisioner makes volumes in (``vplane apiserver`` uses
    ``<data dir>/volumes``); unset, claims of that class wait for another provisioner."""
    cluster_signing_cert_file: str | None = None
    """The CA certificate ``csrsigning`` signs with (``--cluster-signing-cert-file``; ``vplane apiserver``
    gives its own cluster CA). Unset: nothing is signed."""
    cluster_signing_key_file: str | None = None
    """That CA's private key (``--cluster-signing-key-file``)."""
    cluster_signing_duration_seconds: float = Field(default=365 * 24 * 3600.0, ge=600)
    """Longest lifetime of a signed certificate (``--cluster-signing-duration``); ``expirationSeconds``
    may ask for less, down to 10 minutes."""
    csr_approved_expiration_seconds: float = Field(default=3600.0, gt=0)
    """An approved request is deleted this long after approval (the CSR cleaner)."""
    csr_denied_expiration_seconds: float = Field(default=3600.0, gt=0)
    """A denied request is deleted this long after denial."""
    csr_failed_expiration_seconds: float = Field(default=3600.0, gt=0)
    """A failed request is deleted this long after failing."""
    csr_pending_expiration_seconds: float = Field(default=86400.0, gt=0)
    """A request nobody approved or denied is deleted this long after its creation."""

    # -- kcmcorners: storage protection controllers ---------------------------------------------------------
    concurrent_pvc_protection_syncs: int = Field(default=5, ge=1)
    """Claims the ``pvc-protection`` controller looks at once (upstream runs five workers)."""
    concurrent_pv_protection_syncs: int = Field(default=5, ge=1)
    """Volumes the ``pv-protection`` controller looks at once."""

    # -- kcmcorners: legacy service-account token Secrets ------------------------------------------------
    service_account_private_key_file: str | None = None
    """The EC P-256 key legacy token Secrets are signed with (``--service-account-private-key-file``; beside
    ``vplane apiserver`` the cluster CA's key, which the API server verifies them with). Unset: the
    ``serviceaccount-token`` controller does not start."""
    concurrent_serviceaccount_token_syncs: int = Field(default=5, ge=1)
    """Token Secrets looked at once (``--concurrent-serviceaccount-token-syncs``)."""

    # -- kcmlast: HPA readiness handling, ServiceCIDR finalizer, CSR approval resync ---------------------
    horizontal_pod_autoscaler_cpu_initialization_period_seconds: float = Field(default=300.0, ge=0)
    """How long after a pod starts its CPU samples are taken only once it is Ready and a full metric window
    has passed since (``--horizontal-pod-autoscaler-cpu-initialization-period``)."""
    horizontal_pod_autoscaler_initial_readiness_delay_seconds: float = Field(default=30.0, ge=0)
    """After the initialization period, a pod not Ready whose Ready condition last changed within this long
    of its start counts as never ready (``--horizontal-pod-autoscaler-initial-readiness-delay``)."""
    service_cidr_deletion_grace_period_seconds: float = Field(default=10.0, ge=0)
    """How long after a ServiceCIDR's deletion its finalizer stays once nothing blocks it, so allocators that
    still saw the range as usable are done with it (upstream's ``deletionGracePeriod``)."""
    csr_approving_min_resync_period_seconds: float = Field(default=43200.0, gt=0)
    """``csrapproving`` looks at every pending request again after this long, up to twice it (upstream's
    informer resync, ``--min-resync-period`` 12 h): a requester refused before may have been granted since."""
