"""The scheduler's settings: every timing and limit, named, with upstream's defaults."""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vplane.controllers.informer import InformerSettings

DEFAULT_SCHEDULER_NAME = "default-scheduler"


class SchedulerSettings(BaseModel):
    """kube-scheduler's defaults (``KubeSchedulerConfiguration`` v1 and the scheduling queue's constants)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    """Pods whose ``spec.schedulerName`` is this are ours; others are left to their own scheduler."""
    pod_initial_backoff_seconds: float = Field(default=1.0, gt=0)
    """A pod's first back-off after a failed attempt (upstream ``podInitialBackoffSeconds``)."""
    pod_max_backoff_seconds: float = Field(default=10.0, gt=0)
    """The back-off doubles with each attempt up to this (upstream ``podMaxBackoffSeconds``)."""
    pod_max_in_unschedulable_seconds: float = Field(default=300.0, gt=0)
    """An unschedulable pod is retried after this long even if nothing in the cluster changed (upstream
    ``podMaxInUnschedulablePodsDuration``)."""
    percentage_of_nodes_to_score: int = Field(default=0, ge=0, le=100)
    """Stop looking for feasible nodes after this share of a large cluster; 0 is upstream's adaptive
    ``50 - nodes/125`` percent (at least 5%); clusters under 100 nodes are always searched whole."""
    min_candidate_nodes_percentage: int = Field(default=10, ge=0, le=100)
    """Preemption dry-runs at least this share of the nodes (``DefaultPreemptionArgs``)..."""
    min_candidate_nodes_absolute: int = Field(default=100, ge=0)
    """... and at least this many."""
    hard_pod_affinity_weight: int = Field(default=1, ge=0, le=100)
    """The score an existing pod's required affinity to the incoming pod adds (``InterPodAffinityArgs``)."""
    bind_concurrency: int = Field(default=16, ge=1)
    """Bindings (and their events) in flight at once; upstream binds each pod in a goroutine of its own."""
    event_series_window_seconds: float = Field(default=360.0, gt=0)
    """A repeated event within this long of the last one joins its series (client-go events: 6 minutes)."""
    event_series_heartbeat_seconds: float = Field(default=1800.0, gt=0)
    """A series' count is written at most this often after its second occurrence (client-go: 30 minutes)."""
    event_cache_size: int = Field(default=4096, ge=1)
    """How many distinct events the recorder remembers for series (the oldest are forgotten first)."""
    dra_post_filter_message: bool = True
    """Prefix the preemption part of a failure with ``no new claims to deallocate,`` as a 1.34+ scheduler does:
    its DynamicResources post-filter runs before preemption and says so for pods without claims."""
    informer: InformerSettings = InformerSettings()

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.pod_initial_backoff_seconds > self.pod_max_backoff_seconds:
            raise ValueError("podInitialBackoffSeconds must not be greater than podMaxBackoffSeconds")
        return self
