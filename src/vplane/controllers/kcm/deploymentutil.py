"""Pure decisions of the Deployment controller (upstream ``pkg/controller/deployment/util`` and the
status and progress computations of ``sync.go`` and ``progress.go``). Deployments and ReplicaSets are plain
dicts; times are floats from the caller's clock, written as ``metav1.Time``.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from vplane.controllers.kcm import pods as podutil
from vplane.controllers.kcm.timefmt import format_time, parse_time
from vplane.kube.objects import Obj

POD_TEMPLATE_HASH = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
REVISION_HISTORY = "deployment.kubernetes.io/revision-history"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
ROLLBACK_TO = "deprecated.deployment.rollback.to"
MAX_REVISION_HISTORY_CHARS = 2000
MAX_INT32 = 2**31 - 1

# Condition reasons (deployment_util.go), with the messages progress.go and sync.go write.
REPLICA_SET_UPDATED = "ReplicaSetUpdated"
FAILED_RS_CREATE = "ReplicaSetCreateError"
NEW_REPLICA_SET = "NewReplicaSetCreated"
FOUND_NEW_RS = "FoundNewReplicaSet"
NEW_RS_AVAILABLE = "NewReplicaSetAvailable"
TIMED_OUT = "ProgressDeadlineExceeded"
PAUSED = "DeploymentPaused"
RESUMED = "DeploymentResumed"
MINIMUM_REPLICAS_AVAILABLE = "MinimumReplicasAvailable"
MINIMUM_REPLICAS_UNAVAILABLE = "MinimumReplicasUnavailable"

_SKIPPED_ANNOTATIONS = frozenset(
    {LAST_APPLIED, REVISION, REVISION_HISTORY, DESIRED_REPLICAS, MAX_REPLICAS, ROLLBACK_TO}
)


# -- the pod template hash -------------------------------------------------------------------------------

_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def safe_encode(text: str) -> str:
    """apimachinery's ``rand.SafeEncodeString``: each byte to a character no word can be spelled with."""
    return "".join(_SAFE_ALPHABET[b % len(_SAFE_ALPHABET)] for b in text.encode())


def fnv32a(data: bytes, value: int = 0x811C9DC5) -> int:
    for byte in data:
        value ^= byte
        value = (value * 0x01000193) & 0xFFFFFFFF
    return value


def compute_hash(template: Obj, collision_count: int | None) -> str:
    """``controller.ComputeHash``: FNV-1a (32 bits) of the template, then of the collision count as
    eight little-endian bytes when there is one; the decimal sum rendered with :func:`safe_encode`.

    Upstream hashes a ``spew`` dump of the Go struct, which no other program can reproduce byte for byte
    (and which changes whenever a field is added to PodSpec); here the template's canonical JSON is hashed.
    Nothing depends on the value beyond it being stable for one template: the controller finds a
    Deployment's ReplicaSet by comparing templates, as upstream does.
    """
    canonical = json.dumps(template, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    value = fnv32a(canonical.encode())
    if collision_count is not None:
        value = fnv32a((collision_count & 0xFFFFFFFF).to_bytes(4, "little") + bytes(4), value)
    return safe_encode(str(value))


# -- small accessors -------------------------------------------------------------------------------------


def replicas(obj: Obj) -> int:
    value = podutil.spec(obj).get("replicas")
    return int(value) if isinstance(value, int) else 1


def status_int(obj: Obj, field: str) -> int:
    value = podutil.status(obj).get(field)
    return int(value) if isinstance(value, int) else 0


def generation(obj: Obj) -> int:
    value = podutil.meta(obj).get("generation")
    return int(value) if isinstance(value, int) else 0


def template(obj: Obj) -> Obj:
    value = podutil.spec(obj).get("template")
    return value if isinstance(value, dict) else {}


def strategy_type(d: Obj) -> str:
    strategy = podutil.spec(d).get("strategy") or {}
    return str(strategy.get("type") or "RollingUpdate")


def is_rolling(d: Obj) -> bool:
    return strategy_type(d) == "RollingUpdate"


def has_progress_deadline(d: Obj) -> bool:
    value = podutil.spec(d).get("progressDeadlineSeconds")
    return isinstance(value, int) and value != MAX_INT32


def has_revision_history_limit(d: Obj) -> bool:
    value = podutil.spec(d).get("revisionHistoryLimit")
    return isinstance(value, int) and value != MAX_INT32


# -- maxSurge and maxUnavailable -------------------------------------------------------------------------


def int_or_percent(value: Any, total: int, round_up: bool) -> int:
    """``intstr.GetScaledValueFromIntOrPercent``: an int as is, ``"N%"`` of ``total`` rounded up or down."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise ValueError(f"invalid value for IntOrString: invalid type: {type(value).__name__}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        if not value.endswith("%"):
            raise ValueError("invalid value for IntOrString: invalid type: string is not a percentage")
        try:
            percent = int(value[:-1])
        except ValueError:
            raise ValueError(
                f'invalid value "{value}": strconv.Atoi: parsing "{value[:-1]}": invalid syntax'
            ) from None
        # Go computes ceil/floor of float64(v)*float64(total)/100; for these sizes the exact integer
        # result is the same.
        product = percent * total
        return -(-product // 100) if round_up else product // 100
    raise ValueError(f"invalid value for IntOrString: invalid type: {type(value).__name__}")


def resolve_fenceposts(max_surge: Any, max_unavailable: Any, desired: int) -> tuple[int, int]:
    """``ResolveFenceposts``: surge rounds up, unavailability down; both zero becomes one unavailable."""
    surge = int_or_percent(max_surge if max_surge is not None else 0, desired, True)
    unavailable = int_or_percent(max_unavailable if max_unavailable is not None else 0, desired, False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def _rolling(d: Obj) -> Obj:
    strategy = podutil.spec(d).get("strategy") or {}
    rolling = strategy.get("rollingUpdate")
    return rolling if isinstance(rolling, dict) else {}


def max_surge(d: Obj) -> int:
    if not is_rolling(d):
        return 0
    rolling = _rolling(d)
    return resolve_fenceposts(rolling.get("maxSurge"), rolling.get("maxUnavailable"), replicas(d))[0]


def max_unavailable(d: Obj) -> int:
    if not is_rolling(d) or replicas(d) == 0:
        return 0
    rolling = _rolling(d)
    unavailable = resolve_fenceposts(rolling.get("maxSurge"), rolling.get("maxUnavailable"), replicas(d))[1]
    return min(unavailable, replicas(d))


# -- conditions ------------------------------------------------------------------------------------------


def new_condition(cond_type: str, status: str, reason: str, message: str, now: float) -> Obj:
    stamp = format_time(now)
    return {
        "type": cond_type,
        "status": status,
        "lastUpdateTime": stamp,
        "lastTransitionTime": stamp,
        "reason": reason,
        "message": message,
    }


def get_condition(status: Obj, cond_type: str) -> Obj | None:
    for cond in status.get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == cond_type:
            return cond
    return None


def set_condition(status: Obj, condition: Obj) -> None:
    """``SetDeploymentCondition``: no change for the same status and reason; the transition time is kept
    while the status stays the same; the condition moves to the end of the list."""
    current = get_condition(status, condition["type"])
    if (
        current is not None
        and current.get("status") == condition["status"]
        and current.get("reason") == condition["reason"]
    ):
        return
    condition = dict(condition)
    if current is not None and current.get("status") == condition["status"]:
        condition["lastTransitionTime"] = current.get("lastTransitionTime")
    status["conditions"] = [
        c for c in status.get("conditions") or () if c.get("type") != condition["type"]
    ] + [condition]


def remove_condition(status: Obj, cond_type: str) -> None:
    kept = [c for c in status.get("conditions") or () if c.get("type") != cond_type]
    if kept:
        status["conditions"] = kept
    else:
        status.pop("conditions", None)


def rs_condition_to_deployment(cond: Obj) -> Obj:
    """``ReplicaSetToDeploymentCondition``: a ReplicaSet's failure as the Deployment's."""
    return {
        "type": cond.get("type"),
        "status": cond.get("status"),
        "lastUpdateTime": cond.get("lastTransitionTime"),
        "lastTransitionTime": cond.get("lastTransitionTime"),
        "reason": cond.get("reason"),
        "message": cond.get("message"),
    }


# -- revisions and annotations ---------------------------------------------------------------------------


def revision(obj: Obj) -> int:
    """The revision annotation (0 when absent); ValueError when it is not a number."""
    value = podutil.annotations_of(obj).get(REVISION)
    if value is None:
        return 0
    return int(value)


def max_revision(sets: Iterable[Obj]) -> int:
    best = 0
    for rs in sets:
        try:
            best = max(best, revision(rs))
        except ValueError:
            continue
    return best


def set_deployment_revision(d: Obj, value: str) -> bool:
    annotations = podutil.meta(d).setdefault("annotations", {})
    if annotations.get(REVISION) != value:
        annotations[REVISION] = value
        return True
    return False


def _copy_annotations(d: Obj, rs: Obj) -> bool:
    changed = False
    rs_annotations = podutil.meta(rs).setdefault("annotations", {})
    for key, value in podutil.annotations_of(d).items():
        if key in _SKIPPED_ANNOTATIONS or rs_annotations.get(key) == value:
            continue
        rs_annotations[key] = value
        changed = True
    return changed


def set_replicas_annotations(rs: Obj, desired: int, maximum: int) -> bool:
    annotations = podutil.meta(rs).setdefault("annotations", {})
    changed = False
    for key, value in ((DESIRED_REPLICAS, str(desired)), (MAX_REPLICAS, str(maximum))):
        if annotations.get(key) != value:
            annotations[key] = value
            changed = True
    return changed


def replicas_annotations_need_update(rs: Obj, desired: int, maximum: int) -> bool:
    annotations = podutil.annotations_of(rs)
    return annotations.get(DESIRED_REPLICAS) != str(desired) or annotations.get(MAX_REPLICAS) != str(maximum)


def set_new_rs_annotations(d: Obj, rs: Obj, new_revision: str, exists: bool) -> bool:
    """``SetNewReplicaSetAnnotations``: copy the Deployment's annotations, raise the revision (keeping the
    revisions a rolled-back-to set served in ``revision-history``, at most 2000 characters), and on a new
    set record desired and max replicas."""
    changed = _copy_annotations(d, rs)
    annotations = podutil.meta(rs).setdefault("annotations", {})
    had = REVISION in annotations
    old = annotations.get(REVISION, "")
    try:
        old_int = int(old) if old else 0
    except ValueError:
        return False
    try:
        new_int = int(new_revision)
    except ValueError:
        return False
    if old_int < new_int:
        annotations[REVISION] = new_revision
        changed = True
    if had and old_int < new_int:
        history = annotations.get(REVISION_HISTORY, "")
        if not history:
            annotations[REVISION_HISTORY] = old
        else:
            parts = history.split(",")
            total = len(history) + len(old) + 1
            start = 0
            while total > MAX_REVISION_HISTORY_CHARS and start < len(parts):
                total -= len(parts[start]) + 1
                start += 1
            if total <= MAX_REVISION_HISTORY_CHARS:
                annotations[REVISION_HISTORY] = ",".join([*parts[start:], old])
    if not exists and set_replicas_annotations(rs, replicas(d), replicas(d) + max_surge(d)):
        changed = True
    return changed


def desired_replicas_annotation(rs: Obj) -> int | None:
    return _int_annotation(rs, DESIRED_REPLICAS)


def _int_annotation(rs: Obj, key: str) -> int | None:
    value = podutil.annotations_of(rs).get(key)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


# -- finding and ordering replica sets ---------------------------------------------------------------------


def _created(obj: Obj) -> float:
    return parse_time(podutil.meta(obj).get("creationTimestamp")) or 0.0


def by_creation(sets: Iterable[Obj]) -> list[Obj]:
    """``ReplicaSetsByCreationTimestamp``: oldest first, then by name."""
    return sorted(sets, key=lambda rs: (_created(rs), podutil.name_of(rs)))


def by_revision(sets: Iterable[Obj]) -> list[Obj]:
    """``ReplicaSetsByRevision`` (unparsable or equal revisions fall back to creation order)."""

    def key(rs: Obj) -> tuple[int, float, str]:
        try:
            rev = revision(rs)
        except ValueError:
            rev = -1
        return rev, _created(rs), podutil.name_of(rs)

    return sorted(sets, key=key)


def by_size_newer(sets: Iterable[Obj]) -> list[Obj]:
    """Larger first; among equals, newer first (scaling up favours new sets)."""
    return sorted(sets, key=lambda rs: (-replicas(rs), -_created(rs), _reverse_name(rs)))


def by_size_older(sets: Iterable[Obj]) -> list[Obj]:
    """Larger first; among equals, older first (scaling down takes from old sets first)."""
    return sorted(sets, key=lambda rs: (-replicas(rs), _created(rs), podutil.name_of(rs)))


def _reverse_name(rs: Obj) -> tuple[int, ...]:
    return tuple(-ord(c) for c in podutil.name_of(rs))


def filter_active(sets: Iterable[Obj | None]) -> list[Obj]:
    return [rs for rs in sets if rs is not None and replicas(rs) > 0]


def _semantic(value: Any) -> Any:
    """Normalize for apimachinery's semantic equality, which treats nil and empty maps and lists alike."""
    if isinstance(value, dict):
        return {k: _semantic(v) for k, v in value.items() if v is not None and v != {} and v != []}
    if isinstance(value, list):
        return [_semantic(v) for v in value]
    return value


def _without_hash(tmpl: Obj) -> Obj:
    tmpl = copy.deepcopy(tmpl)
    labels = (tmpl.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop(POD_TEMPLATE_HASH, None)
    return tmpl


def equal_ignore_hash(t1: Obj, t2: Obj) -> bool:
    """``EqualIgnoreHash``: templates equal apart from the ``pod-template-hash`` label."""
    same: bool = _semantic(_without_hash(t1)) == _semantic(_without_hash(t2))
    return same


def find_new_rs(d: Obj, sets: Sequence[Obj]) -> Obj | None:
    """The oldest set whose template is the Deployment's."""
    tmpl = template(d)
    for rs in by_creation(sets):
        if equal_ignore_hash(template(rs), tmpl):
            return rs
    return None


def find_old_rss(d: Obj, sets: Sequence[Obj], new_rs: Obj | None = None) -> tuple[list[Obj], list[Obj]]:
    """(old sets with replicas, every old set)."""
    if new_rs is None:
        new_rs = find_new_rs(d, sets)
    new_uid = podutil.uid_of(new_rs) if new_rs is not None else None
    every = [rs for rs in sets if podutil.uid_of(rs) != new_uid]
    return [rs for rs in every if replicas(rs) != 0], every


def find_active_or_latest(new_rs: Obj | None, old_rss: Sequence[Obj]) -> Obj | None:
    """The only active set, or the newest when none is active; None when several are active."""
    if new_rs is None and not old_rss:
        return None
    newest_first = list(reversed(by_creation(old_rss)))
    active = filter_active([*newest_first, new_rs])
    if len(active) == 0:
        return new_rs if new_rs is not None else newest_first[0]
    if len(active) == 1:
        return active[0]
    return None


def replica_count(sets: Iterable[Obj | None]) -> int:
    return sum(replicas(rs) for rs in sets if rs is not None)


def actual_count(sets: Iterable[Obj | None]) -> int:
    return sum(status_int(rs, "replicas") for rs in sets if rs is not None)


def ready_count(sets: Iterable[Obj | None]) -> int:
    return sum(status_int(rs, "readyReplicas") for rs in sets if rs is not None)


def available_count(sets: Iterable[Obj | None]) -> int:
    return sum(status_int(rs, "availableReplicas") for rs in sets if rs is not None)


# -- scaling ------------------------------------------------------------------------------------------------


def round_half_away(value: float) -> int:
    """Go's ``math.Round``."""
    return int(math.floor(abs(value) + 0.5)) * (1 if value >= 0 else -1)


def get_proportion(rs: Obj | None, d: Obj, to_add: int, added: int) -> int:
    """``GetProportion``: this set's share of a scaling event, bounded by what is left to add or remove."""
    if rs is None or replicas(rs) == 0 or to_add == 0 or to_add == added:
        return 0
    fraction = _fraction(rs, d)
    allowed = to_add - added
    return min(fraction, allowed) if to_add > 0 else max(fraction, allowed)


def _fraction(rs: Obj, d: Obj) -> int:
    if replicas(d) == 0:
        return -replicas(rs)
    deployment_replicas = replicas(d) + max_surge(d)
    annotated = _int_annotation(rs, MAX_REPLICAS)
    if annotated is None:
        annotated = status_int(d, "replicas")
    if annotated == 0:
        return 0
    return round_half_away(replicas(rs) * deployment_replicas / annotated) - replicas(rs)


def new_rs_new_replicas(d: Obj, all_rss: Iterable[Obj | None], new_rs: Obj) -> int:
    """``NewRSNewReplicas``: how far the new set may grow now (surge-bounded for a rolling update)."""
    kind = strategy_type(d)
    if kind == "RollingUpdate":
        surge = int_or_percent(_rolling(d).get("maxSurge"), replicas(d), True)
        current = replica_count(all_rss)
        max_total = replicas(d) + surge
        if current >= max_total:
            return replicas(new_rs)
        scale_up = min(max_total - current, replicas(d) - replicas(new_rs))
        return replicas(new_rs) + scale_up
    if kind == "Recreate":
        return replicas(d)
    raise ValueError(f"deployment type {kind} isn't supported")


def is_saturated(d: Obj, rs: Obj | None) -> bool:
    if rs is None:
        return False
    desired = desired_replicas_annotation(rs)
    if desired is None:
        return False
    return (
        replicas(rs) == replicas(d)
        and desired == replicas(d)
        and status_int(rs, "availableReplicas") == replicas(d)
    )


# -- status and progress --------------------------------------------------------------------------------------


def deployment_complete(d: Obj, status: Obj) -> bool:
    want = replicas(d)
    return (
        int(status.get("updatedReplicas") or 0) == want
        and int(status.get("replicas") or 0) == want
        and int(status.get("availableReplicas") or 0) == want
        and int(status.get("observedGeneration") or 0) >= generation(d)
    )


def deployment_progressing(d: Obj, new: Obj) -> bool:
    old = podutil.status(d)

    def n(status: Obj, field: str) -> int:
        return int(status.get(field) or 0)

    old_old = n(old, "replicas") - n(old, "updatedReplicas")
    new_old = n(new, "replicas") - n(new, "updatedReplicas")
    return (
        n(new, "updatedReplicas") > n(old, "updatedReplicas")
        or new_old < old_old
        or n(new, "readyReplicas") > n(old, "readyReplicas")
        or n(new, "availableReplicas") > n(old, "availableReplicas")
    )


def deployment_timed_out(d: Obj, status: Obj, now: float) -> bool:
    if not has_progress_deadline(d):
        return False
    cond = get_condition(status, "Progressing")
    if cond is None or cond.get("reason") == NEW_RS_AVAILABLE:
        return False
    if cond.get("reason") == TIMED_OUT:
        return True
    since = parse_time(cond.get("lastUpdateTime"))
    if since is None:
        return False
    return since + int(podutil.spec(d)["progressDeadlineSeconds"]) < now


def calculate_status(all_rss: Sequence[Obj | None], new_rs: Obj | None, d: Obj, now: float) -> Obj:
    """``calculateStatus``: counts from the sets, and the ``Available`` condition."""
    available = available_count(all_rss)
    total = replica_count(all_rss)
    status: Obj = {
        "observedGeneration": generation(d),
        "replicas": actual_count(all_rss),
        "updatedReplicas": actual_count([new_rs]),
        "readyReplicas": ready_count(all_rss),
        "availableReplicas": available,
        "unavailableReplicas": max(total - available, 0),
    }
    present = [rs for rs in all_rss if rs is not None]
    if present and all("terminatingReplicas" in podutil.status(rs) for rs in present):
        # upstream's pointer sum: known only when every set reports it
        status["terminatingReplicas"] = sum(status_int(rs, "terminatingReplicas") for rs in present)
    collision = podutil.status(d).get("collisionCount")
    if collision is not None:
        status["collisionCount"] = collision
    conditions = copy.deepcopy(podutil.status(d).get("conditions") or [])
    if conditions:
        status["conditions"] = conditions
    if available >= replicas(d) - max_unavailable(d):
        set_condition(
            status,
            new_condition(
                "Available", "True", MINIMUM_REPLICAS_AVAILABLE, "Deployment has minimum availability.", now
            ),
        )
    else:
        set_condition(
            status,
            new_condition(
                "Available",
                "False",
                MINIMUM_REPLICAS_UNAVAILABLE,
                "Deployment does not have minimum availability.",
                now,
            ),
        )
    return status


def replica_failures(all_rss: Sequence[Obj | None], new_rs: Obj | None) -> list[Obj]:
    """``getReplicaFailures``: the new set's failure first, else any old set's."""

    def of(rs: Obj | None) -> list[Obj]:
        if rs is None:
            return []
        return [
            rs_condition_to_deployment(c)
            for c in podutil.status(rs).get("conditions") or ()
            if c.get("type") == "ReplicaFailure"
        ]

    found = of(new_rs)
    if found:
        return found
    return [c for rs in all_rss for c in of(rs)]


def rollout_status(all_rss: Sequence[Obj | None], new_rs: Obj | None, d: Obj, now: float) -> Obj:
    """``syncRolloutStatus`` without the write: counts, ``Available``, ``Progressing`` and ``ReplicaFailure``."""
    status = calculate_status(all_rss, new_rs, d, now)
    if not has_progress_deadline(d):
        remove_condition(status, "Progressing")
    current = get_condition(podutil.status(d), "Progressing")
    complete_before = (
        int(status.get("replicas") or 0) == int(status.get("updatedReplicas") or 0)
        and current is not None
        and current.get("reason") == NEW_RS_AVAILABLE
    )
    name = podutil.name_of(d)
    rs_name = podutil.name_of(new_rs) if new_rs is not None else None
    if has_progress_deadline(d) and not complete_before:
        if deployment_complete(d, status):
            message = (
                f'ReplicaSet "{rs_name}" has successfully progressed.'
                if rs_name is not None
                else f'Deployment "{name}" has successfully progressed.'
            )
            set_condition(status, new_condition("Progressing", "True", NEW_RS_AVAILABLE, message, now))
        elif deployment_progressing(d, status):
            message = (
                f'ReplicaSet "{rs_name}" is progressing.'
                if rs_name is not None
                else f'Deployment "{name}" is progressing.'
            )
            condition = new_condition("Progressing", "True", REPLICA_SET_UPDATED, message, now)
            if current is not None:
                if current.get("status") == "True":
                    condition["lastTransitionTime"] = current.get("lastTransitionTime")
                remove_condition(status, "Progressing")
            set_condition(status, condition)
        elif deployment_timed_out(d, status, now):
            message = (
                f'ReplicaSet "{rs_name}" has timed out progressing.'
                if rs_name is not None
                else f'Deployment "{name}" has timed out progressing.'
            )
            set_condition(status, new_condition("Progressing", "False", TIMED_OUT, message, now))
    failures = replica_failures(all_rss, new_rs)
    if failures:
        set_condition(status, failures[0])
    else:
        remove_condition(status, "ReplicaFailure")
    return status


def progress_check_in(d: Obj, new_status: Obj, now: float) -> float | None:
    """``requeueStuckDeployment``: seconds until the progress deadline should be checked again (0: now,
    None: no check needed)."""
    current = get_condition(podutil.status(d), "Progressing")
    if not has_progress_deadline(d) or current is None:
        return None
    if deployment_complete(d, new_status) or current.get("reason") == TIMED_OUT:
        return None
    since = parse_time(current.get("lastUpdateTime"))
    if since is None:
        return None
    after = since + int(podutil.spec(d)["progressDeadlineSeconds"]) - now
    if after < 1:
        return 0.0
    return after + 1  # upstream adds a second against rounding in AddAfter


def omit_zero(status: Obj) -> Obj:
    """The wire form of a status: ``omitempty`` drops zero counts and empty lists."""
    return {k: v for k, v in status.items() if v not in (0, None, [], {})}
