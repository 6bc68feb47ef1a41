"""The PodDisruptionBudget controller (upstream ``pkg/controller/disruption``): the status eviction reads.

For every budget it selects the namespace's pods and writes ``status``: ``expectedPods`` (the pods, or for a
percentage or ``maxUnavailable`` the sum of their controllers' replicas), ``desiredHealthy``,
``currentHealthy`` (ready pods not being deleted nor recently evicted), ``disruptionsAllowed``
(``currentHealthy - desiredHealthy``, never negative, 0 while nothing is expected), ``disruptedPods``
(evictions the API server granted, kept until the pod is seen going or two minutes pass),
``observedGeneration`` and the ``DisruptionAllowed`` condition (``SufficientPods``/``InsufficientPods``;
``SyncFailed`` with ``disruptionsAllowed: 0`` when the count cannot be made). Events are upstream's:
``NoPods``, ``CalculateExpectedPodCountFailed``, ``UnmanagedPods``, and ``NotDeleted`` on a pod an
eviction was granted for that was not deleted.

A pod's controller is found among ReplicaSets (the Deployment's replicas when a Deployment owns the set),
ReplicationControllers and StatefulSets; a controller of another kind makes the count fail, as upstream's
does for kinds without a ``scale`` subresource (custom resources with one are not looked up here).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from vplane.controllers.client import Resource
from vplane.controllers.informer import Informer, object_key
from vplane.controllers.kcm import pods as podutil
from vplane.controllers.kcm.context import ControllerContext, ManagedController
from vplane.controllers.kcm.events import NORMAL, WARNING
from vplane.controllers.kcm.informers import Index
from vplane.controllers.kcm.resources import DEPLOYMENTS, PODS, REPLICASETS, REPLICATIONCONTROLLERS
from vplane.controllers.kcm.timefmt import format_time, parse_time
from vplane.kube import labels as labelsel
from vplane.kube import quantity
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj

PODDISRUPTIONBUDGETS = Resource("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets", namespaced=True)
STATEFULSETS = Resource("apps/v1", "StatefulSet", "statefulsets", namespaced=True)

DELETION_TIMEOUT_SECONDS = 120.0
"""``DeletionTimeout``: how long an eviction the API server granted counts against the budget."""
CONDITION = "DisruptionAllowed"

_NO_SCALE = {
    "DaemonSet": "daemonsets.apps",
    "Job": "jobs.batch",
    "CronJob": "cronjobs.batch",
    "Pod": "pods",
    "Node": "nodes",
}
"""Owner kinds upstream resolves but finds no ``scale`` subresource on."""


class CountFailed(Exception):
    pass


# -- pure decisions -------------------------------------------------------------------------------------------


def selector_of(pdb: Obj) -> labelsel.Selector:
    try:
        return labelsel.from_label_selector(podutil.spec(pdb).get("selector"))
    except StatusError:
        return labelsel.Selector.nothing()


ScaleOf = Callable[[Obj, Obj], tuple[str, int] | None]
"""(controller reference, pod) -> (controller uid, replicas), or None when no such controller exists."""


def expected_scale(pods: Sequence[Obj], scale_of: ScaleOf) -> tuple[int, list[str]]:
    """``getExpectedScale``: the replicas of every distinct controller of the pods, and the unmanaged pods."""
    scales: dict[str, int] = {}
    unmanaged: list[str] = []
    for pod in pods:
        ref = podutil.controller_ref(pod)
        if ref is None:
            unmanaged.append(podutil.name_of(pod))
            continue
        if str(ref.get("uid") or "") in scales:
            continue
        found = scale_of(ref, pod)
        if found is None:
            kind = str(ref.get("kind") or "")
            if kind in _NO_SCALE:
                raise CountFailed(f"{_NO_SCALE[kind]} does not implement the scale subresource")
            raise CountFailed(f'found no controllers for pod "{podutil.name_of(pod)}"')
        uid, replicas = found
        scales[uid] = replicas
    return sum(scales.values()), unmanaged


def expected_pod_count(pdb: Obj, pods: Sequence[Obj], scale_of: ScaleOf) -> tuple[int, int, list[str]]:
    """``getExpectedPodCount``: (expectedPods, desiredHealthy, unmanaged pods)."""
    spec = podutil.spec(pdb)
    max_unavailable, min_available = spec.get("maxUnavailable"), spec.get("minAvailable")
    if max_unavailable is not None:
        expected, unmanaged = expected_scale(pods, scale_of)
        if quantity.int_or_percent(max_unavailable) is None:
            raise CountFailed(f"invalid value for IntOrString: invalid value {max_unavailable!r}")
        desired = max(expected - quantity.scaled_value(max_unavailable, expected, True), 0)
        return expected, desired, unmanaged
    if min_available is not None:
        parsed = quantity.int_or_percent(min_available)
        if parsed is None:
            raise CountFailed(f"invalid value for IntOrString: invalid value {min_available!r}")
        if not parsed[1]:
            return len(pods), parsed[0], []
        expected, unmanaged = expected_scale(pods, scale_of)
        return expected, quantity.scaled_value(min_available, expected, True), unmanaged
    return 0, 0, []


def disrupted_pod_map(
    pods: Iterable[Obj], pdb: Obj, now: float
) -> tuple[dict[str, str], float | None, list[Obj]]:
    """``buildDisruptedPodMap``: the granted evictions still pending (pods that exist and are not yet being
    deleted, within the timeout), when to look again, and the pods whose eviction timed out."""
    granted = podutil.status(pdb).get("disruptedPods") or {}
    kept: dict[str, str] = {}
    recheck: float | None = None
    overdue: list[Obj] = []
    if not isinstance(granted, dict):
        return kept, recheck, overdue
    for pod in pods:
        if podutil.is_deleting(pod):
            continue
        stamp = granted.get(podutil.name_of(pod))
        when = parse_time(stamp)
        if when is None:
            continue
        expires = when + DELETION_TIMEOUT_SECONDS
        if expires < now:
            overdue.append(pod)
            continue
        recheck = expires if recheck is None else min(recheck, expires)
        kept[podutil.name_of(pod)] = str(stamp)
    return kept, recheck, overdue


def count_healthy(pods: Iterable[Obj], disrupted: dict[str, str], now: float) -> int:
    healthy = 0
    for pod in pods:
        if podutil.is_deleting(pod):
            continue
        when = parse_time(disrupted.get(podutil.name_of(pod)))
        if when is not None and when + DELETION_TIMEOUT_SECONDS > now:
            continue
        if podutil.is_pod_ready(pod):
            healthy += 1
    return healthy


def set_condition(conditions: list[Obj], wanted: Obj, now: float) -> list[Obj]:
    """``meta.SetStatusCondition``: the transition time moves only when the status does."""
    out = [dict(c) for c in conditions if isinstance(c, dict)]
    for current in out:
        if current.get("type") == wanted["type"]:
            if current.get("status") != wanted["status"]:
                current["lastTransitionTime"] = format_time(now)
            current.update({k: v for k, v in wanted.items() if k != "lastTransitionTime"})
            return out
    out.append({**wanted, "lastTransitionTime": format_time(now)})
    return out


def allowed_condition(allowed: int, generation: int) -> Obj:
    sufficient = allowed > 0
    return {
        "type": CONDITION,
        "status": "True" if sufficient else "False",
        "observedGeneration": generation,
        "reason": "SufficientPods" if sufficient else "InsufficientPods",
        "message": "",
    }


def _condition(pdb: Obj) -> Obj | None:
    for cond in podutil.status(pdb).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == CONDITION:
            return cond
    return None


def conditions_up_to_date(pdb: Obj) -> bool:
    """``ConditionsAreUpToDate``."""
    cond = _condition(pdb)
    generation = int(podutil.meta(pdb).get("generation") or 0)
    status = podutil.status(pdb)
    if cond is None or int(status.get("observedGeneration") or 0) != generation:
        return False
    if int(cond.get("observedGeneration") or 0) != generation:
        return False
    if int(status.get("disruptionsAllowed") or 0) > 0:
        return cond.get("status") == "True" and cond.get("reason") == "SufficientPods"
    return cond.get("status") == "False" and cond.get("reason") == "InsufficientPods"


@dataclass(frozen=True)
class Counts:
    current_healthy: int
    desired_healthy: int
    expected_pods: int
    disrupted: dict[str, str]


def status_for(pdb: Obj, counts: Counts, now: float) -> Obj | None:
    """``updatePdbStatus``: the status to write, or None when the stored one already says it."""
    allowed = counts.current_healthy - counts.desired_healthy
    if counts.expected_pods <= 0 or allowed <= 0:
        allowed = 0
    status = podutil.status(pdb)
    generation = int(podutil.meta(pdb).get("generation") or 0)
    if (
        int(status.get("currentHealthy") or 0) == counts.current_healthy
        and int(status.get("desiredHealthy") or 0) == counts.desired_healthy
        and int(status.get("expectedPods") or 0) == counts.expected_pods
        and int(status.get("disruptionsAllowed") or 0) == allowed
        and (status.get("disruptedPods") or {}) == counts.disrupted
        and int(status.get("observedGeneration") or 0) == generation
        and conditions_up_to_date(pdb)
    ):
        return None
    new: Obj = {"observedGeneration": generation}
    if counts.disrupted:
        new["disruptedPods"] = dict(counts.disrupted)
    new.update(
        disruptionsAllowed=allowed,
        currentHealthy=counts.current_healthy,
        desiredHealthy=counts.desired_healthy,
        expectedPods=counts.expected_pods,
    )
    new["conditions"] = set_condition(
        list(status.get("conditions") or []), allowed_condition(allowed, generation), now
    )
    return new


def fail_safe_status(pdb: Obj, message: str, now: float) -> Obj:
    """``failSafe``: no disruptions allowed, and the condition says why."""
    status = copy.deepcopy(podutil.status(pdb))
    status["disruptionsAllowed"] = 0
    status["conditions"] = set_condition(
        list(status.get("conditions") or []),
        {
            "type": CONDITION,
            "status": "False",
            "observedGeneration": int(status.get("observedGeneration") or 0),
            "reason": "SyncFailed",
            "message": message,
        },
        now,
    )
    return status


# -- the controller ------------------------------------------------------------------------------------------------


class DisruptionController(ManagedController):
    name = "disruption-controller"
    event_source = "controllermanager"

    def __init__(self, ctx: ControllerContext) -> None:
        informers = ctx.informers
        self.budgets = informers.informer(PODDISRUPTIONBUDGETS)
        self.budgets_by_namespace: Index = informers.namespace_index(PODDISRUPTIONBUDGETS)
        self.pods = informers.informer(PODS)
        self.pods_by_namespace: Index = informers.namespace_index(PODS)
        self.replicasets = informers.informer(REPLICASETS)
        self.deployments = informers.informer(DEPLOYMENTS)
        self.rcs = informers.informer(REPLICATIONCONTROLLERS)
        self.statefulsets = informers.informer(STATEFULSETS)
        secondary: list[Informer] = [
            self.pods,
            self.replicasets,
            self.deployments,
            self.rcs,
            self.statefulsets,
        ]
        super().__init__(ctx, self.budgets, secondary, 1)  # upstream runs one worker
        self.pods.add_handlers(
            on_add=self._pod_changed,
            on_update=lambda old, new: self._pod_changed(new, old),
            on_delete=self._pod_changed,
        )

    def _pod_changed(self, pod: Obj, old: Obj | None = None) -> None:
        """``getPdbForPod``: the budgets whose selector takes the pod (before or after a label change)."""
        for budget in self.budgets_by_namespace.get(podutil.namespace_of(pod)):
            selector = selector_of(budget)
            if selector.matches(podutil.labels_of(pod)) or (
                old is not None and selector.matches(podutil.labels_of(old))
            ):
                self.enqueue(object_key(budget))

    def _owned(self, informer: Informer, namespace: str, ref: Obj) -> Obj | None:
        found = informer.get(f"{namespace}/{ref.get('name')}")
        if found is None or podutil.uid_of(found) != ref.get("uid"):
            return None
        return found

    def scale_of(self, ref: Obj, pod: Obj) -> tuple[str, int] | None:
        """The finders: ReplicaSet (or its Deployment), ReplicationController, StatefulSet."""
        namespace = podutil.namespace_of(pod)
        group = str(ref.get("apiVersion") or "").partition("/")[0]
        kind = ref.get("kind")
        if kind == "ReplicaSet" and group in ("apps", "extensions"):
            rs = self._owned(self.replicasets, namespace, ref)
            if rs is None:
                return None
            parent = podutil.controller_ref(rs)
            if parent is not None and parent.get("kind") == "Deployment":
                deployment = self._owned(self.deployments, namespace, parent)
                if deployment is None:
                    return None
                return podutil.uid_of(deployment), _replicas(deployment)
            return podutil.uid_of(rs), _replicas(rs)
        if kind == "ReplicationController" and "/" not in str(ref.get("apiVersion") or "v1"):
            rc = self._owned(self.rcs, namespace, ref)
            return (podutil.uid_of(rc), _replicas(rc)) if rc is not None else None
        if kind == "StatefulSet" and group == "apps":
            sts = self._owned(self.statefulsets, namespace, ref)
            return (podutil.uid_of(sts), _replicas(sts)) if sts is not None else None
        return None

    async def reconcile(self, key: str) -> float | None:
        budget = self.budgets.get(key)
        if budget is None:
            return None
        namespace = podutil.namespace_of(budget)
        selector = selector_of(budget)
        pods = [p for p in self.pods_by_namespace.get(namespace) if selector.matches(podutil.labels_of(p))]
        if not pods:
            self.recorder.event(budget, NORMAL, "NoPods", "No matching pods found")
        now = self.clock()
        try:
            expected, desired, unmanaged = expected_pod_count(budget, pods, self.scale_of)
        except CountFailed as exc:
            self.recorder.event(
                budget,
                WARNING,
                "CalculateExpectedPodCountFailed",
                f"Failed to calculate the number of expected pods: {exc}",
            )
            await self._write(budget, fail_safe_status(budget, str(exc), now))
            return None  # as upstream: looked at again when a pod or the budget changes
        if unmanaged:
            selector_text = str(podutil.spec(budget).get("selector"))
            self.recorder.event(
                budget,
                WARNING,
                "UnmanagedPods",
                f"Pods selected by this PodDisruptionBudget (selector: {selector_text}) were found to be "
                "unmanaged. As a result, the status of the PDB cannot be calculated correctly, which may result "
                'in undefined behavior. To account for these pods please set ".spec.minAvailable" field of the '
                "PDB to an integer value.",
            )
        disrupted, recheck, overdue = disrupted_pod_map(pods, budget, now)
        for pod in overdue:
            self.recorder.event(
                pod,
                WARNING,
                "NotDeleted",
                f"Pod was expected by PDB {namespace}/{namespace} to be deleted but it wasn't",
            )
        counts = Counts(count_healthy(pods, disrupted, now), desired, expected, disrupted)
        status = status_for(budget, counts, now)
        if status is not None:
            await self._write(budget, status)
        return max(recheck - now, 0.0) + 0.001 if recheck is not None else None

    async def _write(self, budget: Obj, status: Obj) -> None:
        await self.client.replace_status(
            PODDISRUPTIONBUDGETS, {**budget, "status": status}, namespace=podutil.namespace_of(budget)
        )


def _replicas(obj: Obj) -> int:
    value = podutil.spec(obj).get("replicas")
    return int(value) if isinstance(value, int) else 1
