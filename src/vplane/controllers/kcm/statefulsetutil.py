"""Pure decisions of the StatefulSet controller (upstream ``pkg/controller/statefulset``: the helpers of
``stateful_set_utils.go``, the ordering rules of ``stateful_set_control.go`` and the claim ownership of
``stateful_pod_control.go``, with ``MaxUnavailableStatefulSet`` on as it is by default since 1.35).

A StatefulSet's pods are ``<set>-<ordinal>`` for ordinals ``start .. start+replicas-1``; pods outside
that range are *condemned*. :func:`plan` looks at the set, its pods, its current and update revisions and
the PersistentVolumeClaims it knows of, and says what one sync does, in phases:

1. each replica in ordinal order: delete it if it failed or succeeded, create it if missing (with its
   claims), create missing claims of a pending pod, fix its identity, storage or claim ownership. Under
   ``OrderedReady`` ("monotonic") the sync stops at the first replica it created or that is not yet
   Running, Ready and available;
2. the claim ownership of condemned pods (the ``persistentVolumeClaimRetentionPolicy``);
3. condemned pods, highest ordinal first: one at a time, each only once every other pod is healthy
   (monotonic), or all at once (``Parallel``);
4. for ``RollingUpdate``: pods not at the update revision from the highest ordinal down to the
   partition, at most ``maxUnavailable`` unavailable at a time.

The controller runs the steps (in order for ``OrderedReady``, in slow-start batches for ``Parallel``) and
stops at the first error. Times are floats from the caller's clock.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vplane.controllers.client import Resource
from vplane.controllers.kcm import deploymentutil as du
from vplane.controllers.kcm import history
from vplane.controllers.kcm import pods as podutil
from vplane.kube.objects import Obj

STATEFULSETS = Resource("apps/v1", "StatefulSet", "statefulsets", namespaced=True)
PERSISTENTVOLUMECLAIMS = Resource("v1", "PersistentVolumeClaim", "persistentvolumeclaims", namespaced=True)

CONTROLLER_NAME = "statefulset-controller"
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
REVISION_LABEL = "controller-revision-hash"
RETAIN = "Retain"
DELETE = "Delete"
_MAX_INT32 = 2**31 - 1
_ORDINAL = re.compile(r"(.*)-([0-9]+)")

# The steps of a sync.
CREATE = "create"
"""Create the pod (its missing claims first)."""
DELETE_POD = "delete"
UPDATE = "update"
"""Make the pod's identity, storage and claim ownership conform (a PUT of the pod)."""
CLAIMS = "claims"
"""Create a pending pod's missing claims and set their ownership."""
RETENTION = "retention"
"""Set the ownership of a condemned pod's claims."""


# -- names and ordinals ------------------------------------------------------------------------------------


def parent_and_ordinal(name: str) -> tuple[str, int]:
    """``getParentNameAndOrdinal``: ``web-3`` is (``web``, 3); no ordinal (or one past int32) is -1."""
    match = _ORDINAL.fullmatch(name)
    if match is None:
        return "", -1
    value = int(match[2])
    return match[1], value if value <= _MAX_INT32 else -1


def ordinal(pod: Obj) -> int:
    return parent_and_ordinal(podutil.name_of(pod))[1]


def replicas(sts: Obj) -> int:
    value = podutil.spec(sts).get("replicas")
    return int(value) if isinstance(value, int) else 1


def start_ordinal(sts: Obj) -> int:
    ordinals = podutil.spec(sts).get("ordinals")
    start = ordinals.get("start") if isinstance(ordinals, dict) else None
    return int(start) if isinstance(start, int) else 0


def end_ordinal(sts: Obj) -> int:
    return start_ordinal(sts) + replicas(sts) - 1


def in_range(pod: Obj, sts: Obj) -> bool:
    return start_ordinal(sts) <= ordinal(pod) <= end_ordinal(sts)


def pod_name(sts: Obj, ordinal_: int) -> str:
    return f"{podutil.name_of(sts)}-{ordinal_}"


def claim_templates(sts: Obj) -> list[Obj]:
    return [t for t in podutil.spec(sts).get("volumeClaimTemplates") or () if isinstance(t, dict)]


def claim_name(sts: Obj, template: Obj, ordinal_: int) -> str:
    """``<template>-<set>-<ordinal>``."""
    return f"{podutil.name_of(template)}-{podutil.name_of(sts)}-{ordinal_}"


def is_member(sts: Obj, pod: Obj) -> bool:
    return parent_and_ordinal(podutil.name_of(pod))[0] == podutil.name_of(sts)


def revision_of(pod: Obj) -> str:
    return podutil.labels_of(pod).get(REVISION_LABEL, "")


def min_ready_seconds(sts: Obj) -> int:
    value = podutil.spec(sts).get("minReadySeconds")
    return int(value) if isinstance(value, int) else 0


def allows_burst(sts: Obj) -> bool:
    return podutil.spec(sts).get("podManagementPolicy") == "Parallel"


def update_strategy(sts: Obj) -> Obj:
    value = podutil.spec(sts).get("updateStrategy")
    return value if isinstance(value, dict) else {}


def strategy_type(sts: Obj) -> str:
    return str(update_strategy(sts).get("type") or "RollingUpdate")


def _rolling(sts: Obj) -> Obj | None:
    value = update_strategy(sts).get("rollingUpdate")
    return value if isinstance(value, dict) else None


def partition(sts: Obj) -> int:
    rolling = _rolling(sts)
    value = rolling.get("partition") if rolling is not None else None
    return int(value) if isinstance(value, int) else 0


def max_unavailable(sts: Obj, replica_count: int) -> int:
    """``getStatefulSetMaxUnavailable``: 1 unless set; a percentage rounds down but never below 1."""
    rolling = _rolling(sts) or {}
    value = rolling.get("maxUnavailable")
    number = du.int_or_percent(value if value is not None else 1, replica_count, False)
    return max(number, 1)


# -- pod state ---------------------------------------------------------------------------------------------


def is_created(pod: Obj) -> bool:
    """A pod the API server holds has a phase; one this sync means to create has none."""
    return bool(podutil.phase(pod))


def is_terminating(pod: Obj) -> bool:
    return podutil.is_deleting(pod)


def running_and_ready(pod: Obj) -> bool:
    return podutil.phase(pod) == "Running" and podutil.is_pod_ready(pod)


def is_healthy(pod: Obj) -> bool:
    return running_and_ready(pod) and not is_terminating(pod)


def is_unavailable(pod: Obj, min_ready: int, now: float) -> bool:
    return not is_healthy(pod) or not podutil.is_pod_available(pod, min_ready, now)


# -- identity and storage ----------------------------------------------------------------------------------


def identity_matches(sts: Obj, pod: Obj) -> bool:
    parent, ordinal_ = parent_and_ordinal(podutil.name_of(pod))
    return (
        ordinal_ >= 0
        and parent == podutil.name_of(sts)
        and podutil.name_of(pod) == pod_name(sts, ordinal_)
        and podutil.namespace_of(pod) == podutil.namespace_of(sts)
        and podutil.labels_of(pod).get(POD_NAME_LABEL) == podutil.name_of(pod)
    )


def storage_matches(sts: Obj, pod: Obj) -> bool:
    ordinal_ = ordinal(pod)
    if ordinal_ < 0:
        return False
    volumes = {v.get("name"): v for v in podutil.spec(pod).get("volumes") or () if isinstance(v, dict)}
    for template in claim_templates(sts):
        volume = volumes.get(podutil.name_of(template))
        source = volume.get("persistentVolumeClaim") if volume is not None else None
        if not isinstance(source, dict) or source.get("claimName") != claim_name(sts, template, ordinal_):
            return False
    return True


def claims_for(sts: Obj, ordinal_: int) -> list[tuple[str, Obj]]:
    """``getPersistentVolumeClaims``: (template name, the claim to create) for each template; the claim's
    labels are the template's plus the set's ``matchLabels``."""
    match_labels = (podutil.spec(sts).get("selector") or {}).get("matchLabels") or {}
    out = []
    for template in claim_templates(sts):
        claim = copy.deepcopy(template)
        claim.pop("status", None)
        meta = claim.setdefault("metadata", {})
        meta["name"] = claim_name(sts, template, ordinal_)
        meta["namespace"] = podutil.namespace_of(sts)
        meta["labels"] = {**(meta.get("labels") or {}), **match_labels}
        if not meta["labels"]:
            del meta["labels"]
        claim["apiVersion"], claim["kind"] = "v1", "PersistentVolumeClaim"
        out.append((podutil.name_of(template), claim))
    return out


def update_identity(sts: Obj, pod: Obj) -> None:
    ordinal_ = ordinal(pod)
    meta = pod.setdefault("metadata", {})
    meta["name"] = pod_name(sts, ordinal_)
    meta["namespace"] = podutil.namespace_of(sts)
    labels = meta.setdefault("labels", {})
    labels[POD_NAME_LABEL] = meta["name"]
    labels[POD_INDEX_LABEL] = str(ordinal_)


def update_storage(sts: Obj, pod: Obj) -> None:
    """The claims' volumes (in template order), then the pod's other volumes."""
    spec = pod.setdefault("spec", {})
    claims = claims_for(sts, ordinal(pod))
    names = {name for name, _ in claims}
    volumes: list[Obj] = [
        {"name": name, "persistentVolumeClaim": {"claimName": podutil.name_of(claim)}}
        for name, claim in claims
    ]
    volumes += [v for v in spec.get("volumes") or () if isinstance(v, dict) and v.get("name") not in names]
    if volumes:
        spec["volumes"] = volumes


def new_pod(sts: Obj, ordinal_: int) -> Obj:
    """``newStatefulSetPod``: the template's pod named ``<set>-<ordinal>``, with hostname and subdomain
    (set only at creation: both are immutable), the identity labels and the claim volumes."""
    template: Any = podutil.spec(sts).get("template") or {}
    pod = podutil.pod_from_template(template, sts, CONTROLLER_NAME)
    pod["metadata"]["name"] = pod_name(sts, ordinal_)
    update_identity(sts, pod)
    service = podutil.spec(sts).get("serviceName")
    pod["spec"]["hostname"] = podutil.name_of(pod)
    if service:
        pod["spec"]["subdomain"] = service
    update_storage(sts, pod)
    return pod


def new_versioned_pod(current_set: Obj, update_set: Obj, current: str, update: str, ordinal_: int) -> Obj:
    """``newVersionedStatefulSetPod``: ordinals below the partition stay at the current revision.

    Upstream's condition reads ``A && B || C`` (Go's ``&&`` binds tighter): a RollingUpdate set without a
    ``rollingUpdate`` block keeps ``status.currentReplicas`` pods at the current revision, and any set with a
    ``rollingUpdate`` block keeps the pods below its partition there."""
    start = start_ordinal(current_set)
    rolling = _rolling(current_set)
    current_replicas = du.status_int(current_set, "currentReplicas")
    keep = (
        strategy_type(current_set) == "RollingUpdate"
        and rolling is None
        and ordinal_ < start + current_replicas
    ) or (rolling is not None and ordinal_ < start + partition(current_set))
    source, revision = (current_set, current) if keep else (update_set, update)
    pod = new_pod(source, ordinal_)
    pod["metadata"].setdefault("labels", {})[REVISION_LABEL] = revision
    return pod


# -- claim ownership (persistentVolumeClaimRetentionPolicy) ------------------------------------------------


def retention_policy(sts: Obj) -> tuple[str, str]:
    """(whenDeleted, whenScaled); Retain when unset."""
    policy = podutil.spec(sts).get("persistentVolumeClaimRetentionPolicy")
    policy = policy if isinstance(policy, dict) else {}
    return str(policy.get("whenDeleted") or RETAIN), str(policy.get("whenScaled") or RETAIN)


def _refs(obj: Obj) -> list[Obj]:
    return [r for r in podutil.meta(obj).get("ownerReferences") or () if isinstance(r, dict)]


def _matches_ref(ref: Obj, name: str, api_version: str, kind: str) -> bool:
    return ref.get("apiVersion") == api_version and ref.get("kind") == kind and ref.get("name") == name


def _matches_set(ref: Obj, sts: Obj) -> bool:
    return _matches_ref(ref, podutil.name_of(sts), "apps/v1", "StatefulSet")


def _matches_pod(ref: Obj, pod: Obj) -> bool:
    return _matches_ref(ref, podutil.name_of(pod), "v1", "Pod")


def has_owner_ref(target: Obj, owner: Obj) -> bool:
    uid = podutil.uid_of(owner)
    return any(r.get("uid") == uid for r in _refs(target))


def has_stale_set_ref(claim: Obj, sts: Obj) -> bool:
    for ref in _refs(claim):
        if _matches_set(ref, sts):
            return bool(ref.get("uid") != podutil.uid_of(sts))
    return False


def has_stale_pod_ref(claim: Obj, pod: Obj) -> bool:
    """A reference to a pod of this name but another UID (a pod that no longer exists, or that this sync
    has not created yet)."""
    for ref in _refs(claim):
        if _matches_pod(ref, pod):
            return bool(ref.get("uid") != podutil.uid_of(pod))
    return False


def has_unexpected_controller(claim: Obj, sts: Obj, pod: Obj) -> bool:
    """Under a Delete policy, another controller of the claim (or a reference to an earlier set or pod of
    the same name) means the claim is not ours to manage."""
    if retention_policy(sts) == (RETAIN, RETAIN):
        return False
    for ref in _refs(claim):
        if _matches_set(ref, sts):
            if ref.get("uid") != podutil.uid_of(sts):
                return True
            continue
        if _matches_pod(ref, pod):
            if ref.get("uid") != podutil.uid_of(pod):
                return True
            continue
        if ref.get("controller") is True:
            return True
    return False


def has_non_controller_owner(claim: Obj, sts: Obj, pod: Obj) -> bool:
    owners = {podutil.uid_of(sts), podutil.uid_of(pod)}
    return any(r.get("uid") in owners and r.get("controller") is not True for r in _refs(claim))


def claim_owner_up_to_date(claim: Obj, sts: Obj, pod: Obj) -> bool:
    """``isClaimOwnerUpToDate``: Retain/Retain no reference; Delete on set deletion a reference to the set;
    Delete on scale-down a reference to the pod once it is condemned (to the set while it is not, when
    both are Delete). Claims in a state the controller does not understand are left alone."""
    if has_stale_set_ref(claim, sts) or has_stale_pod_ref(claim, pod):
        return True
    if has_unexpected_controller(claim, sts, pod):
        return not (has_owner_ref(claim, sts) or has_owner_ref(claim, pod))
    if has_non_controller_owner(claim, sts, pod):
        return False
    when_deleted, when_scaled = retention_policy(sts)
    scaled_down = not in_range(pod, sts)
    on_set, on_pod = has_owner_ref(claim, sts), has_owner_ref(claim, pod)
    if when_scaled == DELETE and when_deleted == DELETE:
        return scaled_down != on_set and scaled_down == on_pod
    if when_scaled == DELETE:
        return not on_set and scaled_down == on_pod
    if when_deleted == DELETE:
        return on_set and not on_pod
    return not on_set and not on_pod


def _controller_ref_to_pod(pod: Obj) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": podutil.name_of(pod),
        "uid": podutil.uid_of(pod),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def updated_claim_refs(claim: Obj, sts: Obj, pod: Obj) -> list[Obj]:
    """``updateClaimOwnerRefForSetAndPod``: the claim's owner references under the set's policy."""
    unexpected = has_unexpected_controller(claim, sts, pod)
    refs = [r for r in _refs(claim) if not (_matches_set(r, sts) or _matches_pod(r, pod))]
    if unexpected:
        return refs

    def add(ref: Obj) -> None:
        if not any(r.get("uid") == ref["uid"] for r in refs):
            refs.append(ref)

    when_deleted, when_scaled = retention_policy(sts)
    scaled_down = not in_range(pod, sts)
    set_ref = podutil.new_controller_ref(sts)
    set_ref["apiVersion"], set_ref["kind"] = "apps/v1", "StatefulSet"
    if when_scaled == DELETE and scaled_down:
        add(_controller_ref_to_pod(pod))
    if when_deleted == DELETE and not (when_scaled == DELETE and scaled_down):
        add(set_ref)
    return refs


def _claim_key(claim: Obj) -> str:
    return f"{podutil.namespace_of(claim)}/{podutil.name_of(claim)}"


def claims_match_retention(sts: Obj, pod: Obj, claims: Mapping[str, Obj]) -> bool:
    """``ClaimsMatchRetentionPolicy`` over the known claims (a missing claim is picked up later)."""
    for _, wanted in claims_for(sts, ordinal(pod)):
        existing = claims.get(_claim_key(wanted))
        if existing is not None and not claim_owner_up_to_date(existing, sts, pod):
            return False
    return True


def claims_missing(sts: Obj, pod: Obj, claims: Mapping[str, Obj]) -> list[Obj]:
    return [wanted for _, wanted in claims_for(sts, ordinal(pod)) if _claim_key(wanted) not in claims]


def claim_is_stale(sts: Obj, pod: Obj, claims: Mapping[str, Obj]) -> bool:
    """``PodClaimIsStale``: under ``whenScaled: Delete`` a claim still owned by an earlier pod of this
    name blocks the new pod until the garbage collector has removed it."""
    if retention_policy(sts)[1] == RETAIN:
        return False
    for _, wanted in claims_for(sts, ordinal(pod)):
        existing = claims.get(_claim_key(wanted))
        if existing is not None and has_stale_pod_ref(existing, pod):
            return True
    return False


# -- revisions -----------------------------------------------------------------------------------------------


def new_revision(sts: Obj, number: int, collision_count: int) -> Obj:
    """``newRevision``: the template patch, named ``<set>-<hash>``, labelled with the template's labels and
    the hash, annotated with the set's annotations, controlled by the set."""
    data = history.template_patch(sts)
    hash_ = history.hash_data(history.go_json(data), collision_count)
    template_labels = ((podutil.spec(sts).get("template") or {}).get("metadata") or {}).get("labels") or {}
    meta: Obj = {
        "name": history.revision_name(podutil.name_of(sts), hash_),
        "namespace": podutil.namespace_of(sts),
        "labels": {**template_labels, history.HASH_LABEL: hash_},
        "ownerReferences": [podutil.new_controller_ref(sts)],
    }
    if podutil.annotations_of(sts):
        meta["annotations"] = dict(podutil.annotations_of(sts))
    return {
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": meta,
        "data": data,
        "revision": number,
    }


@dataclass(frozen=True)
class RevisionChoice:
    """What ``getStatefulSetRevisions`` does for the update revision."""

    revision: Obj
    action: str
    """``keep`` (the newest revision is the set's), ``renumber`` (an older equal revision becomes the
    newest: a rollback) or ``create``."""
    number: int


def choose_update_revision(sts: Obj, sorted_revisions: Sequence[Obj], collision_count: int) -> RevisionChoice:
    wanted = new_revision(sts, history.next_number(sorted_revisions), collision_count)
    equal = history.find_equal(sorted_revisions, wanted)
    if equal and history.equal_revision(sorted_revisions[-1], equal[-1]):
        return RevisionChoice(sorted_revisions[-1], "keep", history.number(sorted_revisions[-1]))
    if equal:
        return RevisionChoice(equal[-1], "renumber", history.number(wanted))
    return RevisionChoice(wanted, "create", history.number(wanted))


def current_revision(sts: Obj, sorted_revisions: Sequence[Obj], update: Obj) -> Obj:
    """The revision ``status.currentRevision`` names, or the update revision for a new set."""
    name = podutil.status(sts).get("currentRevision")
    for rev in sorted_revisions:
        if podutil.name_of(rev) == name:
            return rev
    return update


def revisions_to_delete(
    sts: Obj, pods: Iterable[Obj], sorted_revisions: Sequence[Obj], current: str, update: str
) -> list[Obj]:
    """``truncateHistory``: the oldest revisions that no pod uses, beyond ``revisionHistoryLimit``."""
    live = {current, update, *(revision_of(p) for p in pods)}
    old = [rev for rev in sorted_revisions if podutil.name_of(rev) not in live]
    limit = podutil.spec(sts).get("revisionHistoryLimit")
    limit = int(limit) if isinstance(limit, int) else 10
    if limit < 0 or len(old) <= limit:
        return []
    return old[: len(old) - limit]


# -- status ----------------------------------------------------------------------------------------------------


def count_replicas(pods: Iterable[Obj], min_ready: int, current: str, update: str, now: float) -> Obj:
    """``computeReplicaStatus``: replicas (created), ready and available (Running and Ready), current and
    updated (created, not terminating, by revision label)."""
    counts = {
        "replicas": 0,
        "readyReplicas": 0,
        "availableReplicas": 0,
        "currentReplicas": 0,
        "updatedReplicas": 0,
    }
    for pod in pods:
        if is_created(pod):
            counts["replicas"] += 1
        if running_and_ready(pod):
            counts["readyReplicas"] += 1
            if podutil.is_pod_available(pod, min_ready, now):
                counts["availableReplicas"] += 1
        if is_created(pod) and not is_terminating(pod):
            revision = revision_of(pod)
            if revision == current:
                counts["currentReplicas"] += 1
            if revision == update:
                counts["updatedReplicas"] += 1
    return counts


def complete_rolling_update(sts: Obj, status: Obj) -> None:
    """``completeRollingUpdate``: once every replica is updated and ready, the update revision is current."""
    want = replicas(sts)
    if (
        strategy_type(sts) == "RollingUpdate"
        and status.get("updatedReplicas", 0) == want
        and status.get("readyReplicas", 0) == want
        and status.get("replicas", 0) == want
    ):
        status["currentReplicas"] = status.get("updatedReplicas", 0)
        status["currentRevision"] = status.get("updateRevision", "")


def status_changed(sts: Obj, status: Obj) -> bool:
    """``inconsistentStatus``: a newer generation observed, or any count or revision differs."""
    old = podutil.status(sts)
    if int(status.get("observedGeneration") or 0) > int(old.get("observedGeneration") or 0):
        return True
    for key in ("replicas", "currentReplicas", "readyReplicas", "updatedReplicas", "availableReplicas"):
        if int(status.get(key) or 0) != int(old.get(key) or 0):
            return True
    return any((status.get(k) or "") != (old.get(k) or "") for k in ("currentRevision", "updateRevision"))


def wire_status(sts: Obj, status: Obj) -> Obj:
    """The status as upstream serializes it: zero counts and empty revisions left out, except ``replicas``
    and ``availableReplicas`` (no ``omitempty``) and ``collisionCount`` (a pointer); conditions kept."""
    out = {
        k: v for k, v in status.items() if v not in (0, "", None) or k in ("replicas", "availableReplicas")
    }
    out["collisionCount"] = int(status.get("collisionCount") or 0)
    conditions = podutil.status(sts).get("conditions")
    if conditions:
        out["conditions"] = conditions
    return out


# -- one sync ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    action: str
    pod: Obj
    for_update: bool = False
    """A deletion of the rolling update: counted out of ``currentReplicas`` once done."""


@dataclass
class Phase:
    steps: list[Step] = field(default_factory=list)
    halt: bool = False
    """Under OrderedReady nothing after this phase runs this sync."""


@dataclass
class Plan:
    status: Obj
    monotonic: bool
    phases: list[Phase] = field(default_factory=list)
    replicas: list[Obj] = field(default_factory=list)
    """The pod of each ordinal in range, existing or to be created."""
    condemned: list[Obj] = field(default_factory=list)


def _replica_steps(
    sts: Obj, update_set: Obj, pod: Obj, claims: Mapping[str, Obj], monotonic: bool, now: float
) -> tuple[list[Step], bool]:
    """``processReplica``: (steps, whether a monotonic sync stops here)."""
    if podutil.phase(pod) in ("Failed", "Succeeded"):
        # Evicted or finished: replaced once it is gone, whatever its exit code.
        return ([] if is_terminating(pod) else [Step(DELETE_POD, pod)]), True
    if not is_created(pod):
        if claim_is_stale(sts, pod, claims):
            return [], True
        return [Step(CREATE, pod)], monotonic
    steps: list[Step] = []
    if podutil.phase(pod) == "Pending" and (
        claims_missing(sts, pod, claims) or not claims_match_retention(update_set, pod, claims)
    ):
        steps.append(Step(CLAIMS, pod))
    if monotonic and (
        is_terminating(pod)
        or not running_and_ready(pod)
        or not podutil.is_pod_available(pod, min_ready_seconds(sts), now)
    ):
        return steps, True
    if (
        identity_matches(sts, pod)
        and storage_matches(sts, pod)
        and claims_match_retention(update_set, pod, claims)
    ):
        return steps, False
    steps.append(Step(UPDATE, pod))
    return steps, False


def plan(
    sts: Obj,
    pods: Sequence[Obj],
    current: Obj,
    update: Obj,
    current_set: Obj,
    update_set: Obj,
    claims: Mapping[str, Obj],
    collision_count: int,
    now: float,
) -> Plan:
    """``updateStatefulSet``: the status and the steps of one sync (see the module docstring)."""
    current_name, update_name = podutil.name_of(current), podutil.name_of(update)
    min_ready = min_ready_seconds(sts)
    status: Obj = {
        "observedGeneration": du.generation(sts),
        **count_replicas(pods, min_ready, current_name, update_name, now),
        "currentRevision": current_name,
        "updateRevision": update_name,
        "collisionCount": collision_count,
    }
    count, start = replicas(sts), start_ordinal(sts)
    slots: list[Obj | None] = [None] * max(count, 0)
    condemned: list[Obj] = []
    for pod in pods:
        ordinal_ = ordinal(pod)
        if start <= ordinal_ <= start + count - 1:
            slots[ordinal_ - start] = pod
        elif ordinal_ >= 0:
            condemned.append(pod)
    in_range_pods = [
        pod
        if pod is not None
        else new_versioned_pod(current_set, update_set, current_name, update_name, start + i)
        for i, pod in enumerate(slots)
    ]
    condemned.sort(key=ordinal, reverse=True)
    result = Plan(status, not allows_burst(sts), replicas=in_range_pods, condemned=condemned)
    status.update(count_replicas([*in_range_pods, *condemned], min_ready, current_name, update_name, now))
    if podutil.is_deleting(sts):
        status.update(count_replicas(pods, min_ready, current_name, update_name, now))
        return result
    monotonic = result.monotonic

    first_unhealthy: Obj | None = next(
        (p for p in [*in_range_pods, *reversed(condemned)] if is_unavailable(p, min_ready, now)), None
    )

    phase = Phase()
    for pod in in_range_pods:
        steps, stop = _replica_steps(sts, update_set, pod, claims, monotonic, now)
        phase.steps += steps
        if stop and monotonic:
            phase.halt = True
            break
    result.phases.append(phase)
    if phase.halt:
        return result

    result.phases.append(
        Phase([Step(RETENTION, p) for p in condemned if not claims_match_retention(update_set, p, claims)])
    )

    phase = Phase()
    for pod in condemned:
        if is_terminating(pod):
            if monotonic:  # wait for it to be gone before the next one
                phase.halt = True
                break
            continue
        if monotonic and pod is not first_unhealthy and is_unavailable(pod, min_ready, now):
            phase.halt = True
            break
        phase.steps.append(Step(DELETE_POD, pod))
        if monotonic:
            phase.halt = True
            break
    result.phases.append(phase)
    if phase.halt or strategy_type(sts) == "OnDelete":
        return result

    # rolling update (MaxUnavailableStatefulSet): highest ordinals first, down to the partition
    budget = max_unavailable(sts, count)
    unavailable = sum(1 for p in in_range_pods if is_unavailable(p, min_ready, now))
    phase = Phase()
    if unavailable <= budget:
        allowed = budget - unavailable
        for target in range(len(in_range_pods) - 1, partition(sts) - 1, -1):
            if len(phase.steps) >= allowed:
                break
            pod = in_range_pods[target]
            if revision_of(pod) != update_name and not is_terminating(pod):
                phase.steps.append(Step(DELETE_POD, pod, for_update=True))
    result.phases.append(phase)
    return result
