"""Pure decisions of the DaemonSet controller (upstream ``pkg/controller/daemon``: ``daemon_controller.go``,
``update.go`` and ``util/daemonset_util.go``).

A DaemonSet wants one pod on every node its pod could run on: the template's ``nodeName``, its node
selector and required node affinity match the node, and the node has no ``NoSchedule``/``NoExecute``
taint the pod does not tolerate, counting the tolerations every DaemonSet pod gets
(:data:`DAEMON_TOLERATIONS`). A node with an untolerated ``NoSchedule`` taint keeps a pod already there
(it only may not get a new one); an untolerated ``NoExecute`` taint evicts it.

Pods are created for a node with a required node affinity ``metadata.name In [<node>]`` (the scheduler
binds them), labelled ``controller-revision-hash`` with the hash of the template they were made from.
The template's history is kept in ControllerRevisions ``<daemonset>-<hash>``.

Rolling updates follow ``update.go``: without surge, old pods are deleted while fewer than
``maxUnavailable`` pods are unavailable (unavailable old pods first) and the manage loop creates their
replacements; with ``maxSurge``, a new pod is created next to an old one (at most ``maxSurge`` at a
time, immediately where the old one is unavailable) and the old one deleted once the new one is
available.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vplane.controllers.client import Resource
from vplane.controllers.kcm import deploymentutil as du
from vplane.controllers.kcm import history
from vplane.controllers.kcm import pods as podutil
from vplane.controllers.kcm.timefmt import parse_time
from vplane.controllers.scheduler.nodeselection import RequiredNodeAffinity, untolerated_taint
from vplane.kube.objects import Obj

DAEMONSETS = Resource("apps/v1", "DaemonSet", "daemonsets", namespaced=True)
NODES = Resource("v1", "Node", "nodes", namespaced=False)

CONTROLLER_NAME = "daemonset-controller"
HASH_LABEL = "controller-revision-hash"
"""``DefaultDaemonSetUniqueLabelKey``: on pods and revisions, the template hash."""
TEMPLATE_GENERATION_LABEL = "pod-template-generation"
TEMPLATE_GENERATION_ANNOTATION = "deprecated.daemonset.template.generation"
NAME_FIELD = "metadata.name"

DAEMON_TOLERATIONS: tuple[tuple[str, str], ...] = (
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
)
"""``AddOrUpdateDaemonPodTolerations``: DaemonSet pods survive node problems and cordons (key, effect;
operator ``Exists``, no ``tolerationSeconds``). Host-network pods also tolerate
``node.kubernetes.io/network-unavailable:NoSchedule``."""
NETWORK_UNAVAILABLE = ("node.kubernetes.io/network-unavailable", "NoSchedule")


# -- the pods a DaemonSet makes -----------------------------------------------------------------------------


def _same_toleration(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """``Toleration.MatchToleration``: key, operator, value and effect."""
    return all((a.get(k) or "") == (b.get(k) or "") for k in ("key", "operator", "value", "effect"))


def add_toleration(spec: Obj, toleration: Obj) -> None:
    """``AddOrUpdateTolerationInPodSpec``: replace a matching toleration (dropping its
    ``tolerationSeconds``), or append."""
    current = [t for t in spec.get("tolerations") or () if isinstance(t, dict)]
    out: list[Obj] = []
    updated = False
    for old in current:
        if _same_toleration(toleration, old):
            if old == toleration:
                return
            out.append(dict(toleration))
            updated = True
            continue
        out.append(old)
    if not updated:
        out.append(dict(toleration))
    spec["tolerations"] = out


def add_daemon_tolerations(spec: Obj) -> None:
    wanted = list(DAEMON_TOLERATIONS)
    if spec.get("hostNetwork"):
        wanted.append(NETWORK_UNAVAILABLE)
    for key, effect in wanted:
        add_toleration(spec, {"key": key, "operator": "Exists", "effect": effect})


def template_generation(ds: Obj) -> int | None:
    """The deprecated ``templateGeneration`` annotation, when present and a number."""
    value = podutil.annotations_of(ds).get(TEMPLATE_GENERATION_ANNOTATION)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def pod_template(ds: Obj, hash_: str) -> Obj:
    """``CreatePodTemplate``: the template with the daemon tolerations, the hash label and (for
    DaemonSets that carry it) the template generation label."""
    template = copy.deepcopy(podutil.spec(ds).get("template") or {})
    spec = template.setdefault("spec", {})
    add_daemon_tolerations(spec)
    labels = template.setdefault("metadata", {}).setdefault("labels", {})
    generation = template_generation(ds)
    if generation is not None:
        labels[TEMPLATE_GENERATION_LABEL] = str(generation)
    if hash_:
        labels[HASH_LABEL] = hash_
    return template


def replace_node_affinity(affinity: Any, node_name: str) -> Obj:
    """``ReplaceDaemonSetPodNodeNameNodeAffinity``: the required node affinity becomes ``metadata.name In
    [node]``; preferred terms and pod (anti-)affinity stay."""
    required = {
        "nodeSelectorTerms": [{"matchFields": [{"key": NAME_FIELD, "operator": "In", "values": [node_name]}]}]
    }
    out: Obj = copy.deepcopy(affinity) if isinstance(affinity, dict) else {}
    node_affinity = out.get("nodeAffinity")
    if not isinstance(node_affinity, dict):
        out["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": required}
        return out
    current = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not isinstance(current, dict):
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = required
    else:
        current["nodeSelectorTerms"] = required["nodeSelectorTerms"]
    return out


def pod_for_node(template: Obj, ds: Obj, node_name: str) -> Obj:
    """The pod to create on ``node_name`` (``GetPodFromTemplate`` of the node-pinned template)."""
    pinned = copy.deepcopy(template)
    spec = pinned.setdefault("spec", {})
    spec["affinity"] = replace_node_affinity(spec.get("affinity"), node_name)
    pod = podutil.pod_from_template(pinned, ds, CONTROLLER_NAME)
    pod["metadata"]["namespace"] = podutil.namespace_of(ds)
    return pod


def target_node(pod: Obj) -> str | None:
    """``GetTargetNodeName``: ``spec.nodeName``, or the node a pending pod's required affinity pins."""
    spec = podutil.spec(pod)
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not isinstance(required, dict):
        return None
    for term in required.get("nodeSelectorTerms") or ():
        for expr in (term or {}).get("matchFields") or ():
            if expr.get("key") == NAME_FIELD and expr.get("operator") == "In":
                values = expr.get("values") or []
                return str(values[0]) if len(values) == 1 else None
    return None


def is_pod_updated(pod: Obj, hash_: str, generation: int | None) -> bool:
    """``IsPodUpdated``: the pod carries the current hash (or, for old pods, the template generation)."""
    labels = podutil.labels_of(pod)
    template_matches = generation is not None and labels.get(TEMPLATE_GENERATION_LABEL) == str(generation)
    return bool(hash_) and labels.get(HASH_LABEL) == hash_ or template_matches


# -- which nodes -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """What decides where a DaemonSet's pods may run, worked out once per DaemonSet and sync (the
    controller asks it for every node, several times a sync)."""

    node_name: str
    affinity: RequiredNodeAffinity
    tolerations: tuple[Mapping[str, Any], ...]

    @classmethod
    def of(cls, ds: Obj) -> Placement:
        spec = copy.deepcopy(((podutil.spec(ds).get("template") or {}).get("spec")) or {})
        add_daemon_tolerations(spec)
        return cls(
            str(spec.get("nodeName") or ""),
            RequiredNodeAffinity.of(spec),
            tuple(t for t in spec.get("tolerations") or () if isinstance(t, dict)),
        )

    def should_run(self, node: Obj) -> tuple[bool, bool]:
        """``NodeShouldRunDaemonPod``: (should a pod be created here, may a pod here keep running)."""
        name = podutil.name_of(node)
        if self.node_name and self.node_name != name:
            return False, False
        if not self.affinity.matches(podutil.labels_of(node), name):
            return False, False
        taints = [t for t in podutil.spec(node).get("taints") or () if isinstance(t, dict)]
        tolerations = list(self.tolerations)
        blocking = untolerated_taint(
            taints, tolerations, lambda t: t.get("effect") in ("NoSchedule", "NoExecute")
        )
        if blocking is not None:
            evicting = untolerated_taint(taints, tolerations, lambda t: t.get("effect") == "NoExecute")
            return False, evicting is None
        return True, True


def node_should_run(node: Obj, ds: Obj) -> tuple[bool, bool]:
    return Placement.of(ds).should_run(node)


def _creation_order(pod: Obj) -> tuple[int, float, str]:
    """``podByCreationTimestampAndPhase``: scheduled pods first, then oldest, then by name."""
    scheduled = 0 if podutil.spec(pod).get("nodeName") else 1
    created = parse_time(podutil.meta(pod).get("creationTimestamp")) or 0.0
    return scheduled, created, podutil.name_of(pod)


def by_creation(pods: Iterable[Obj]) -> list[Obj]:
    return sorted(pods, key=_creation_order)


def nodes_to_pods(pods: Iterable[Obj], *, include_deleted_terminal: bool = False) -> dict[str, list[Obj]]:
    """``getNodesToDaemonPods``: the set's pods by target node (terminal pods being deleted left out
    unless asked for; pods without a target node dropped)."""
    out: dict[str, list[Obj]] = {}
    for pod in pods:
        if not include_deleted_terminal and podutil.is_pod_terminal(pod) and podutil.is_deleting(pod):
            continue
        node = target_node(pod)
        if node is None:
            continue
        out.setdefault(node, []).append(pod)
    return out


# -- failed pods -------------------------------------------------------------------------------------------


class FailedPodBackoff:
    """client-go's ``flowcontrol.Backoff`` as the DaemonSet controller uses it for failed pods on a node:
    each deletion doubles the wait before the next (from ``initial`` to ``maximum``); an entry idle for
    twice the maximum starts over. Pure bookkeeping; times are passed in."""

    def __init__(self, initial: float, maximum: float) -> None:
        self.initial = initial
        self.maximum = maximum
        self._entries: dict[str, tuple[float, float]] = {}
        """key -> (current wait, last update)."""

    def get(self, key: str) -> float:
        entry = self._entries.get(key)
        return entry[0] if entry is not None else 0.0

    def in_backoff_since_update(self, key: str, now: float) -> bool:
        entry = self._entries.get(key)
        return entry is not None and now - entry[1] < entry[0]

    def next(self, key: str, now: float) -> None:
        entry = self._entries.get(key)
        if entry is None or now - entry[1] > 2 * self.maximum:
            self._entries[key] = (self.initial, now)
        else:
            self._entries[key] = (min(entry[0] * 2, self.maximum), now)

    def gc(self, now: float) -> None:
        """Forget entries idle for more than twice the maximum (upstream's ``GC``)."""
        for key, (_, last) in list(self._entries.items()):
            if now - last > 2 * self.maximum:
                del self._entries[key]


def failed_pod_key(ds: Obj, node_name: str) -> str:
    """``failedPodsBackoffKey``: per set, observed generation and node."""
    return f"{podutil.uid_of(ds)}/{du.status_int(ds, 'observedGeneration')}/{node_name}"


# -- manage: pods to create and delete ---------------------------------------------------------------------


@dataclass
class Decision:
    create_on: list[str] = field(default_factory=list)
    """Nodes that need a pod."""
    delete: list[Obj] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    """(type, reason, message) to record on the DaemonSet."""
    requeue_after: float | None = None

    def wait(self, delay: float) -> None:
        self.requeue_after = delay if self.requeue_after is None else min(self.requeue_after, delay)


def surge_count(ds: Obj, total: int) -> int:
    """``SurgeCount``: maxSurge of ``total`` rounded up; 0 unless rolling with a maxSurge."""
    strategy = podutil.spec(ds).get("updateStrategy") or {}
    rolling = strategy.get("rollingUpdate")
    if (strategy.get("type") or "RollingUpdate") != "RollingUpdate" or not isinstance(rolling, dict):
        return 0
    if rolling.get("maxSurge") is None:
        return 0
    return du.int_or_percent(rolling["maxSurge"], total, True)


def unavailable_count(ds: Obj, total: int) -> int:
    """``UnavailableCount``: maxUnavailable of ``total`` rounded up; 0 unless rolling."""
    strategy = podutil.spec(ds).get("updateStrategy") or {}
    rolling = strategy.get("rollingUpdate")
    if (strategy.get("type") or "RollingUpdate") != "RollingUpdate" or not isinstance(rolling, dict):
        return 0
    return du.int_or_percent(rolling.get("maxUnavailable"), total, True)


def allows_surge(ds: Obj) -> bool:
    try:
        return surge_count(ds, 1) != 0
    except ValueError:
        return False


def min_ready_seconds(ds: Obj) -> int:
    value = podutil.spec(ds).get("minReadySeconds")
    return int(value) if isinstance(value, int) else 0


def pods_should_be_on_node(
    node: Obj,
    node_pods: Mapping[str, list[Obj]],
    ds: Obj,
    hash_: str,
    now: float,
    backoff: FailedPodBackoff,
    decision: Decision,
    placement: Placement | None = None,
) -> None:
    """``podsShouldBeOnNode``: adds to ``decision`` what this node needs."""
    name = podutil.name_of(node)
    should_run, should_continue = (placement or Placement.of(ds)).should_run(node)
    pods = node_pods.get(name)
    if should_run and pods is None:
        decision.create_on.append(name)
        return
    if should_continue:
        running: list[Obj] = []
        for pod in pods or ():
            if podutil.is_deleting(pod):
                continue
            phase = podutil.phase(pod)
            where = f"{podutil.namespace_of(pod)}/{podutil.name_of(pod)}"
            if phase == "Failed":
                key = failed_pod_key(ds, name)
                if backoff.in_backoff_since_update(key, now):
                    decision.wait(backoff.get(key))
                    continue
                backoff.next(key, now)
                decision.events.append(
                    (
                        "Warning",
                        "FailedDaemonPod",
                        f"Found failed daemon pod {where} on node {name}, will try to kill it",
                    )
                )
                decision.delete.append(pod)
            elif phase == "Succeeded":
                decision.events.append(
                    (
                        "Normal",
                        "SucceededDaemonPod",
                        f"Found succeeded daemon pod {where} on node {name}, will try to delete it",
                    )
                )
                decision.delete.append(pod)
            else:
                running.append(pod)
        if not allows_surge(ds):
            if len(running) > 1:  # keep the oldest
                decision.delete.extend(by_creation(running)[1:])
            return
        if len(running) <= 1:
            if not running and should_run:
                decision.create_on.append(name)
            return
        # Surging: an old and a new pod may share the node while the new one becomes available.
        oldest_new: Obj | None = None
        oldest_old: Obj | None = None
        for pod in by_creation(running):
            if podutil.labels_of(pod).get(HASH_LABEL) == hash_:
                if oldest_new is None:
                    oldest_new = pod
                    continue
            elif oldest_old is None:
                oldest_old = pod
                continue
            decision.delete.append(pod)
        if oldest_new is not None and oldest_old is not None:
            if not podutil.is_pod_ready(oldest_old) or podutil.is_pod_available(
                oldest_new, min_ready_seconds(ds), now
            ):
                decision.delete.append(oldest_old)
        return
    if pods:
        decision.delete.extend(p for p in pods if not podutil.is_deleting(p))


def manage(
    ds: Obj,
    nodes: Sequence[Obj],
    node_pods: Mapping[str, list[Obj]],
    hash_: str,
    now: float,
    backoff: FailedPodBackoff,
) -> Decision:
    """``manage``: every node's needs, and the unscheduled pods aimed at nodes that no longer exist."""
    decision = Decision()
    placement = Placement.of(ds)
    for node in nodes:
        pods_should_be_on_node(node, node_pods, ds, hash_, now, backoff, decision, placement)
    names = {podutil.name_of(n) for n in nodes}
    for node_name, pods in node_pods.items():
        if node_name in names:
            continue
        decision.delete.extend(p for p in pods if not podutil.spec(p).get("nodeName"))
    return decision


# -- rolling update ----------------------------------------------------------------------------------------


def updated_and_old(ds: Obj, pods: Iterable[Obj], hash_: str) -> tuple[Obj | None, Obj | None, bool]:
    """``findUpdatedPodsOnNode``: (new pod, old pod, ok); not ok when either kind is doubled up."""
    new: Obj | None = None
    old: Obj | None = None
    generation = template_generation(ds)
    for pod in pods:
        if podutil.is_deleting(pod):
            continue
        if is_pod_updated(pod, hash_, generation):
            if new is not None:
                return None, None, False
            new = pod
        else:
            if old is not None:
                return None, None, False
            old = pod
    return new, old, True


def rolling_update(
    ds: Obj, nodes: Sequence[Obj], node_pods: Mapping[str, list[Obj]], hash_: str, now: float
) -> tuple[list[Obj], list[str]]:
    """``rollingUpdate``: (old pods to delete, nodes to surge onto)."""
    by_name = {podutil.name_of(n): n for n in nodes}
    pods_by_node: dict[str, list[Obj]] = {k: list(v) for k, v in node_pods.items()}
    desired = 0
    placement = Placement.of(ds)
    for node in nodes:
        if placement.should_run(node)[0]:
            desired += 1
            pods_by_node.setdefault(podutil.name_of(node), [])
    max_surge = surge_count(ds, desired)
    max_unavailable = unavailable_count(ds, desired)
    if desired > 0 and max_unavailable == 0 and max_surge == 0:
        max_unavailable = 1
    min_ready = min_ready_seconds(ds)

    def available(pod: Obj) -> bool:
        return podutil.is_pod_available(pod, min_ready, now)

    if max_surge == 0:
        unavailable = 0
        replace: list[Obj] = []
        candidates: list[Obj] = []
        for _, pods in sorted(pods_by_node.items()):
            new, old, ok = updated_and_old(ds, pods, hash_)
            if not ok:
                unavailable += 1
                continue
            if (old is None) == (new is None):
                unavailable += 1  # nothing here yet, or both: the manage loop acts first
            elif new is not None:
                if not available(new):
                    unavailable += 1
            elif old is not None:
                if not available(old):
                    replace.append(old)
                    unavailable += 1
                elif unavailable < max_unavailable:
                    candidates.append(old)
        room = min(max(max_unavailable - unavailable, 0), len(candidates))
        return replace + candidates[:room], []

    doomed: list[Obj] = []
    should_not_run: list[Obj] = []
    candidate_nodes: list[str] = []
    allowed_nodes: list[str] = []
    surging = 0
    available_count = 0
    for node_name, pods in sorted(pods_by_node.items()):
        new, old, ok = updated_and_old(ds, pods, hash_)
        if not ok:
            surging += 1
            continue
        if old is not None:
            available_count += 1 if available(old) else 0
        elif new is not None:
            available_count += 1 if available(new) else 0
        if old is None:
            continue
        target = by_name.get(node_name)
        runs_here = target is not None and placement.should_run(target)[0]
        if new is None:
            if not available(old):
                if not runs_here:
                    doomed.append(old)
                    continue
                allowed_nodes.append(node_name)
                continue
            if not runs_here:
                should_not_run.append(old)
                continue
            if surging >= max_surge:
                continue
            candidate_nodes.append(node_name)
            continue
        if not available(new):
            surging += 1
            continue
        doomed.append(old)
    deletable = available_count - desired
    if deletable > 0:
        doomed.extend(should_not_run[: min(deletable, len(should_not_run))])
    room = min(max(max_surge - surging, 0), len(candidate_nodes))
    return doomed, allowed_nodes + candidate_nodes[:room]


# -- status ------------------------------------------------------------------------------------------------


def status_counts(
    ds: Obj, nodes: Sequence[Obj], node_pods: Mapping[str, list[Obj]], hash_: str, now: float
) -> Obj:
    """``updateDaemonSetStatus``'s counts (the oldest pod of each node speaks for it)."""
    desired = current = misscheduled = ready = updated = available = 0
    generation = template_generation(ds)
    min_ready = min_ready_seconds(ds)
    placement = Placement.of(ds)
    for node in nodes:
        should_run, _ = placement.should_run(node)
        pods = node_pods.get(podutil.name_of(node)) or []
        if should_run:
            desired += 1
            if not pods:
                continue
            current += 1
            pod = by_creation(pods)[0]
            if podutil.is_pod_ready(pod):
                ready += 1
                if podutil.is_pod_available(pod, min_ready, now):
                    available += 1
            if is_pod_updated(pod, hash_, generation):
                updated += 1
        elif pods:
            misscheduled += 1
    return {
        "desiredNumberScheduled": desired,
        "currentNumberScheduled": current,
        "numberMisscheduled": misscheduled,
        "numberReady": ready,
        "updatedNumberScheduled": updated,
        "numberAvailable": available,
        "numberUnavailable": desired - available,
    }


_COUNTS = (
    "desiredNumberScheduled",
    "currentNumberScheduled",
    "numberMisscheduled",
    "numberReady",
    "updatedNumberScheduled",
    "numberAvailable",
    "numberUnavailable",
)
_REQUIRED = ("currentNumberScheduled", "numberMisscheduled", "desiredNumberScheduled", "numberReady")


def status_for_write(ds: Obj, counts: Obj, observe_generation: bool) -> Obj | None:
    """``storeDaemonSetStatus``: None when the counts are the stored ones and this generation is observed;
    otherwise the status upstream writes (required counts always, the others when non-zero)."""
    stored = podutil.status(ds)
    if all(int(stored.get(k) or 0) == counts[k] for k in _COUNTS) and du.status_int(
        ds, "observedGeneration"
    ) >= du.generation(ds):
        return None
    status = {k: v for k, v in stored.items() if k not in _COUNTS}
    if observe_generation:
        status["observedGeneration"] = du.generation(ds)
    for key in _COUNTS:
        if counts[key] or key in _REQUIRED:
            status[key] = counts[key]
    return status


# -- history -----------------------------------------------------------------------------------------------


def matches(ds: Obj, revision: Obj) -> bool:
    """``Match``: the revision holds this DaemonSet's template (byte for byte, as upstream compares)."""
    return history.go_json(history.template_patch(ds)) == history.data_bytes(revision)


def template_hash(ds: Obj) -> str:
    """``ComputeHash`` of the template with the collision count (as Deployments name ReplicaSets)."""
    collision = podutil.status(ds).get("collisionCount")
    template = podutil.spec(ds).get("template") or {}
    return du.compute_hash(template, collision if isinstance(collision, int) else None)


def snapshot(ds: Obj, number: int) -> Obj:
    """``snapshot``: the revision ``<daemonset>-<hash>`` of the current template."""
    hash_ = template_hash(ds)
    template_labels = ((podutil.spec(ds).get("template") or {}).get("metadata") or {}).get("labels") or {}
    meta: Obj = {
        "name": f"{podutil.name_of(ds)}-{hash_}",
        "namespace": podutil.namespace_of(ds),
        "labels": {**template_labels, HASH_LABEL: hash_},
        "ownerReferences": [podutil.new_controller_ref(ds)],
    }
    if podutil.annotations_of(ds):
        meta["annotations"] = dict(podutil.annotations_of(ds))
    return {
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": meta,
        "data": history.template_patch(ds),
        "revision": number,
    }


def max_revision(revisions: Iterable[Obj]) -> int:
    return max((history.number(r) for r in revisions), default=0)


def keep_of(current: Sequence[Obj]) -> Obj:
    """``dedupCurHistories``: of several revisions equal to the template, the highest (the last of equals)."""
    keep = current[0]
    best = 0
    for rev in current:
        if history.number(rev) >= best:
            keep, best = rev, history.number(rev)
    return keep


def revisions_to_clean(ds: Obj, old: Sequence[Obj], live_hashes: set[str]) -> list[Obj]:
    """``cleanupHistory``: the oldest old revisions beyond ``revisionHistoryLimit`` whose hash no pod
    carries."""
    limit = podutil.spec(ds).get("revisionHistoryLimit")
    limit = int(limit) if isinstance(limit, int) else 10
    to_kill = len(old) - limit
    out: list[Obj] = []
    for rev in sorted(old, key=history.number):
        if to_kill <= 0:
            break
        if podutil.labels_of(rev).get(HASH_LABEL) in live_hashes:
            continue
        out.append(rev)
        to_kill -= 1
    return out
