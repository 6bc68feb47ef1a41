"""A Kubernetes scheduler that reaches the API over HTTP (kube-scheduler's default profile, reduced).

Pending pods whose ``spec.schedulerName`` is ``default-scheduler`` are bound to nodes through
``pods/binding``. The decision logic is pure and mirrors upstream's plugins and messages:

- ``resources``: what a pod requests (containers, init and sidecar containers, pod-level resources,
  overhead) and what a node has allocatable, as integers;
- ``model``: pods and nodes as the algorithm sees them; ``nodeselection``: node selectors, node affinity,
  tolerations;
- ``plugins`` (NodeUnschedulable, NodeName, TaintToleration, NodeAffinity, NodePorts, NodeResourcesFit,
  BalancedAllocation), ``topologyspread`` (PodTopologySpread), ``interpodaffinity`` (InterPodAffinity);
- ``framework``: statuses and the ``0/N nodes are available: ...`` message; ``algorithm``: one cycle;
- ``preemption``: DefaultPreemption (victims, PodDisruptionBudgets, the node to nominate);
- ``queue``: active, back-off and unschedulable pods; ``events``: the events recorder's series;
- ``cache``: the cluster view fed by informers; ``scheduler``: the asyncio glue and :func:`run_scheduler`.

Not done (yet): volume plugins (the pods' volumes are not considered), ImageLocality scoring, the
cluster-default topology spread constraints, dynamic resource claims, extenders and profiles other than
the default one, and leader election among several schedulers.
"""

from vplane.controllers.scheduler.scheduler import Scheduler, SchedulerAPI, run_scheduler
from vplane.controllers.scheduler.settings import SchedulerSettings

__all__ = ["Scheduler", "SchedulerAPI", "SchedulerSettings", "run_scheduler"]
