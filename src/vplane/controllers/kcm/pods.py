"""Pure pod and owner helpers shared by the controllers (upstream ``pkg/api/v1/pod`` and
``pkg/controller/controller_utils.go``): readiness, availability, the order pods are deleted in, owner
references, pods from templates, named ports.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from vplane.controllers.kcm.timefmt import parse_time
from vplane.kube.objects import Obj

POD_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"

_PHASE_ORDINAL = {"Pending": 0, "Unknown": 1, "Running": 2}


def meta(obj: Obj) -> Obj:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def name_of(obj: Obj) -> str:
    return str(meta(obj).get("name") or "")


def namespace_of(obj: Obj) -> str:
    return str(meta(obj).get("namespace") or "")


def uid_of(obj: Obj) -> str:
    return str(meta(obj).get("uid") or "")


def labels_of(obj: Obj) -> dict[str, str]:
    value = meta(obj).get("labels")
    return value if isinstance(value, dict) else {}


def annotations_of(obj: Obj) -> dict[str, str]:
    value = meta(obj).get("annotations")
    return value if isinstance(value, dict) else {}


def is_deleting(obj: Obj) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def controller_ref(obj: Obj) -> Obj | None:
    """The owner reference with ``controller: true`` (``metav1.GetControllerOf``)."""
    for ref in meta(obj).get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller") is True:
            return ref
    return None


def new_controller_ref(owner: Obj) -> Obj:
    """``metav1.NewControllerRef``: the reference a controller puts on what it creates or adopts."""
    return {
        "apiVersion": owner.get("apiVersion", ""),
        "kind": owner.get("kind", ""),
        "name": name_of(owner),
        "uid": uid_of(owner),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def status(obj: Obj) -> Obj:
    value = obj.get("status")
    return value if isinstance(value, dict) else {}


def spec(obj: Obj) -> Obj:
    value = obj.get("spec")
    return value if isinstance(value, dict) else {}


def phase(pod: Obj) -> str:
    return str(status(pod).get("phase") or "")


def is_pod_active(pod: Obj) -> bool:
    """``controller.IsPodActive``: not finished and not being deleted."""
    return phase(pod) not in ("Succeeded", "Failed") and not is_deleting(pod)


def is_pod_terminal(pod: Obj) -> bool:
    return phase(pod) in ("Succeeded", "Failed")


def ready_condition(pod: Obj) -> Obj | None:
    for cond in status(pod).get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            return cond
    return None


def is_pod_ready(pod: Obj) -> bool:
    cond = ready_condition(pod)
    return cond is not None and cond.get("status") == "True"


def ready_since(pod: Obj) -> float | None:
    cond = ready_condition(pod)
    return parse_time(cond.get("lastTransitionTime")) if cond is not None else None


def is_pod_available(pod: Obj, min_ready_seconds: int, now: float) -> bool:
    """Ready, and ready for longer than ``min_ready_seconds`` (strictly, as upstream's ``Before``)."""
    if not is_pod_ready(pod):
        return False
    if min_ready_seconds <= 0:
        return True
    since = ready_since(pod)
    return since is not None and since + min_ready_seconds < now


def available_in(pods: Iterable[Obj], min_ready_seconds: int, now: float) -> float | None:
    """Seconds until the next ready-but-not-yet-available pod becomes available, if there is one.

    Upstream requeues a whole ``minReadySeconds`` later; the exact moment is known, so wait for it.
    """
    if min_ready_seconds <= 0:
        return None
    soonest: float | None = None
    for pod in pods:
        if not is_pod_ready(pod) or is_pod_available(pod, min_ready_seconds, now):
            continue
        since = ready_since(pod)
        if since is None:
            continue
        wait = max(since + min_ready_seconds - now, 0.0) + 0.001  # available strictly after the mark
        soonest = wait if soonest is None else min(soonest, wait)
    return soonest


# -- the order pods are deleted in ----------------------------------------------------------------------


def deletion_cost(pod: Obj) -> int:
    raw = annotations_of(pod).get(POD_DELETION_COST)
    try:
        return int(raw) if raw is not None else 0
    except ValueError:
        return 0


def _max_restarts(pod: Obj) -> tuple[int, int]:
    """(regular containers, restartable init containers): the largest restart count of each."""
    regular = max(
        (int(s.get("restartCount") or 0) for s in status(pod).get("containerStatuses") or ()), default=0
    )
    sidecars = {
        c.get("name")
        for c in spec(pod).get("initContainers") or ()
        if isinstance(c, dict) and c.get("restartPolicy") == "Always"
    }
    sidecar = max(
        (
            int(s.get("restartCount") or 0)
            for s in status(pod).get("initContainerStatuses") or ()
            if s.get("name") in sidecars
        ),
        default=0,
    )
    return regular, sidecar


def _log_rank(then: float, now: float) -> int:
    elapsed_ns = (now - then) * 1e9
    return int(math.log2(elapsed_ns)) if elapsed_ns > 0 else -1


def _newer_first(t1: float | None, t2: float | None, now: float, uid1: str, uid2: str) -> bool:
    """Upstream's ``afterOrZero`` with LogarithmicScaleDown: zero times first, then younger by powers of
    two of their age, ties broken by UID."""
    if t1 is None or t2 is None or now <= 0:
        if t1 is None or t2 is None:
            return t1 is None
        return t1 > t2
    diff = _log_rank(t1, now) - _log_rank(t2, now)
    if diff == 0:
        return uid1 < uid2
    return diff < 0


def _delete_first(a: tuple[Obj, int], b: tuple[Obj, int], now: float) -> bool:
    """``ActivePodsWithRanks.Less``: is pod ``a`` a better candidate for deletion than ``b``?"""
    pa, rank_a = a
    pb, rank_b = b
    node_a, node_b = spec(pa).get("nodeName") or "", spec(pb).get("nodeName") or ""
    if node_a != node_b and (not node_a or not node_b):
        return not node_a  # 1. unscheduled first
    ord_a, ord_b = _PHASE_ORDINAL.get(phase(pa), 0), _PHASE_ORDINAL.get(phase(pb), 0)
    if ord_a != ord_b:
        return ord_a < ord_b  # 2. Pending < Unknown < Running
    ready_a, ready_b = is_pod_ready(pa), is_pod_ready(pb)
    if ready_a != ready_b:
        return not ready_a  # 3. not ready first
    cost_a, cost_b = deletion_cost(pa), deletion_cost(pb)
    if cost_a != cost_b:
        return cost_a < cost_b  # 4. lower pod-deletion-cost first
    if rank_a != rank_b:
        return rank_a > rank_b  # 5. doubled up on a node first
    if ready_a and ready_b:
        ta, tb = ready_since(pa), ready_since(pb)
        if ta != tb:
            return _newer_first(ta, tb, now, uid_of(pa), uid_of(pb))  # 6. ready for less time first
    restarts_a, restarts_b = _max_restarts(pa), _max_restarts(pb)
    if restarts_a[0] != restarts_b[0]:
        return restarts_a[0] > restarts_b[0]  # 7. more restarts first
    if restarts_a[1] != restarts_b[1]:
        return restarts_a[1] > restarts_b[1]
    ca, cb = parse_time(meta(pa).get("creationTimestamp")), parse_time(meta(pb).get("creationTimestamp"))
    if ca != cb:
        return _newer_first(ca, cb, now, uid_of(pa), uid_of(pb))  # 8. newer first
    return False


def pods_to_delete(pods: Sequence[Obj], related: Iterable[Obj], count: int, now: float) -> list[Obj]:
    """``getPodsToDelete``: the ``count`` pods to remove, ranked as upstream (related pods are those of
    sibling controllers, which make a pod "doubled up" on its node)."""
    if count >= len(pods):
        return list(pods[:count])
    on_node: dict[str, int] = {}
    for pod in related:
        node = spec(pod).get("nodeName") or ""
        if node and is_pod_active(pod):
            on_node[node] = on_node.get(node, 0) + 1
    ranked = [(pod, on_node.get(spec(pod).get("nodeName") or "", 0)) for pod in pods]

    def compare(a: tuple[Obj, int], b: tuple[Obj, int]) -> int:
        if _delete_first(a, b, now):
            return -1
        if _delete_first(b, a, now):
            return 1
        return 0

    ranked.sort(key=functools.cmp_to_key(compare))
    return [pod for pod, _ in ranked[:count]]


# -- pods from templates ---------------------------------------------------------------------------------


def pod_from_template(template: Mapping[str, Any], parent: Obj, controller_name: str) -> Obj:
    """``GetPodFromTemplate``: labels, annotations and finalizers from the template, a controller reference,
    and ``generateName`` from the parent's name (the controller's name when that would be invalid)."""
    tmeta = template.get("metadata") or {}
    prefix = f"{name_of(parent)}-"
    if len(prefix) > 58:  # upstream validates the prefix as a pod name with room for the random suffix
        prefix = f"{controller_name}-"
    pod_meta: Obj = {"generateName": prefix, "ownerReferences": [new_controller_ref(parent)]}
    if tmeta.get("labels"):
        pod_meta["labels"] = dict(tmeta["labels"])
    if tmeta.get("annotations"):
        pod_meta["annotations"] = dict(tmeta["annotations"])
    if tmeta.get("finalizers"):
        pod_meta["finalizers"] = list(tmeta["finalizers"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": pod_meta,
        "spec": copy.deepcopy(template.get("spec") or {}),
    }


def find_port(pod: Obj, service_port: Mapping[str, Any]) -> int | None:
    """``podutil.FindPort``: a number as is, a name looked up among the containers' ports of the same protocol
    (restartable init containers too)."""
    target = service_port.get("targetPort", service_port.get("port"))
    if isinstance(target, int):
        return target
    if not isinstance(target, str):
        return None
    if target.isdigit():
        return int(target)
    protocol = service_port.get("protocol") or "TCP"
    containers = list(spec(pod).get("containers") or [])
    containers += [c for c in spec(pod).get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    for container in containers:
        for port in container.get("ports") or ():
            if port.get("name") == target and (port.get("protocol") or "TCP") == protocol:
                value = port.get("containerPort")
                return int(value) if isinstance(value, int) else None
    return None
