"""The controller manager (kube-controller-manager's analogue): controllers that make workloads act.

- ``manager``: :func:`run_controller_manager`, the one entry point, and ``--controllers`` parsing.
- ``deployment`` (+ ``deploymentutil``, pure), ``replicaset`` (ReplicaSets, and ReplicationControllers
  through a thin adapter), ``statefulset`` (+ ``statefulsetutil``), ``daemonset`` (+ ``daemonsetutil``),
  ``job`` (+ ``jobutil``), ``cronjob`` (+ ``cronjobutil``), ``ttlafterfinished``, ``endpoints``,
  ``endpointslices``, ``serviceaccounts`` (the ``default`` ServiceAccount and the ``kube-root-ca.crt``
  publisher), ``resourcequota``, ``disruption`` (PodDisruptionBudget status), ``podautoscaler``
  (HorizontalPodAutoscalers), ``persistentvolume`` (binding and the local-path provisioner),
  ``certificates`` (CSR signing and cleaning): one module per controller; ``history`` is the
  ControllerRevision history the StatefulSet and DaemonSet controllers keep.
- ``informers`` (shared informers and indexes: one watch per resource for all controllers), ``events``
  (core/v1 Events with upstream's dedupe, aggregation and spam filter), ``expectations``, ``refmanager``
  (adoption and release), ``pods`` (pure pod helpers), ``settings``.

Everything talks to the API server over HTTP through :class:`vplane.controllers.client.KubeAPI`, so the
same controllers run against vplane and against any Kubernetes API server.
"""

from vplane.controllers.kcm.manager import (
    CONTROLLERS,
    ControllerManager,
    enabled_controllers,
    run_controller_manager,
)
from vplane.controllers.kcm.settings import ControllerManagerSettings

__all__ = [
    "CONTROLLERS",
    "ControllerManager",
    "ControllerManagerSettings",
    "enabled_controllers",
    "run_controller_manager",
]
