"""The ResourceQuota controller (upstream ``pkg/controller/resourcequota``).

For every ResourceQuota it writes ``status.hard`` (the spec's, canonical) and ``status.used``: what the
namespace's objects use of each resource the quota limits, counted by :mod:`vplane.kube.quota`'s
evaluators. Quota admission charges creates to ``status.used`` as they happen; this controller gives back
what deletions and finished pods free (it is told by the informers of the kinds it watches) and corrects
any drift on a full recount every ``resource_quota_sync_period_seconds``.

Pods, Services, claims, ConfigMaps, Secrets, ReplicationControllers and ResourceQuotas are watched;
``count/<resource>.<group>`` of any other built-in kind, or of a custom resource (its CRD says how to list
it), is counted by listing the namespace when the quota is recomputed. A kind that cannot be listed is
left out of ``status.used``, so admission refuses its creates (``status unknown for quota``) as upstream
does for a resource it cannot count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from vplane.controllers.client import CONFIGMAPS, Resource
from vplane.controllers.informer import Informer, object_key
from vplane.controllers.kcm import pods as podutil
from vplane.controllers.kcm.context import ControllerContext, ManagedController
from vplane.controllers.kcm.informers import Index
from vplane.controllers.kcm.resources import PODS, REPLICATIONCONTROLLERS, SERVICES
from vplane.kube import quota as quotalib
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj

RESOURCEQUOTAS = Resource("v1", "ResourceQuota", "resourcequotas", namespaced=True)
PERSISTENTVOLUMECLAIMS = Resource("v1", "PersistentVolumeClaim", "persistentvolumeclaims", namespaced=True)
SECRETS = Resource("v1", "Secret", "secrets", namespaced=True)
CRDS = Resource("apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", False)

_WATCHED: dict[tuple[str, str], Resource] = {
    ("", "pods"): PODS,
    ("", "services"): SERVICES,
    ("", "persistentvolumeclaims"): PERSISTENTVOLUMECLAIMS,
    ("", "configmaps"): CONFIGMAPS,
    ("", "secrets"): SECRETS,
    ("", "replicationcontrollers"): REPLICATIONCONTROLLERS,
    ("", "resourcequotas"): RESOURCEQUOTAS,
}


def _r(api_version: str, kind: str, plural: str) -> Resource:
    return Resource(api_version, kind, plural, namespaced=True)


LISTED: dict[tuple[str, str], Resource] = {
    (r.group, r.plural): r
    for r in (
        _r("v1", "Endpoints", "endpoints"),
        _r("v1", "Event", "events"),
        _r("v1", "LimitRange", "limitranges"),
        _r("v1", "PodTemplate", "podtemplates"),
        _r("v1", "ServiceAccount", "serviceaccounts"),
        _r("apps/v1", "Deployment", "deployments"),
        _r("apps/v1", "ReplicaSet", "replicasets"),
        _r("apps/v1", "StatefulSet", "statefulsets"),
        _r("apps/v1", "DaemonSet", "daemonsets"),
        _r("apps/v1", "ControllerRevision", "controllerrevisions"),
        _r("batch/v1", "Job", "jobs"),
        _r("batch/v1", "CronJob", "cronjobs"),
        _r("autoscaling/v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers"),
        _r("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets"),
        _r("networking.k8s.io/v1", "Ingress", "ingresses"),
        _r("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies"),
        _r("discovery.k8s.io/v1", "EndpointSlice", "endpointslices"),
        _r("coordination.k8s.io/v1", "Lease", "leases"),
        _r("rbac.authorization.k8s.io/v1", "Role", "roles"),
        _r("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings"),
        _r("events.k8s.io/v1", "Event", "events"),
        _r("storage.k8s.io/v1", "CSIStorageCapacity", "csistoragecapacities"),
        _r("resource.k8s.io/v1", "ResourceClaim", "resourceclaims"),
        _r("resource.k8s.io/v1", "ResourceClaimTemplate", "resourceclaimtemplates"),
    )
}
"""Built-in namespaced kinds ``count/<resource>.<group>`` may name, counted by a list when needed."""


def crd_resource(crd: Obj) -> Resource | None:
    """How to list a custom resource: its CRD's names and a served version (the storage one if served)."""
    spec = podutil.spec(crd)
    names = spec.get("names") or {}
    versions = [v for v in spec.get("versions") or [] if isinstance(v, dict) and v.get("served")]
    if not versions or spec.get("scope") != "Namespaced" or not names.get("kind"):
        return None
    version = next((v for v in versions if v.get("storage")), versions[0])
    return Resource(f"{spec.get('group')}/{version.get('name')}", names["kind"], names["plural"], True)


def needs_sync(quota: Obj) -> bool:
    """A quota whose spec changed, or that has never been counted, is recounted at once."""
    status = podutil.status(quota)
    if status.get("hard") is None or status.get("used") is None:
        return True
    spec_hard = quotalib.parse_list(podutil.spec(quota).get("hard"))
    return not quotalib.equals(spec_hard, quotalib.parse_list(status.get("hard")))


def pod_quota_changed(old: Obj, new: Obj, now: float) -> bool:
    """Upstream's pod replenishment: a pod stopped being charged (finished, or stuck terminating)."""
    return quotalib.pod_is_charged(old, now) and not quotalib.pod_is_charged(new, now)


def service_quota_changed(old: Obj, new: Obj) -> bool:
    """A Service's type or port count changed (node ports and load balancers are charged by those)."""
    old_spec, new_spec = podutil.spec(old), podutil.spec(new)
    return old_spec.get("type") != new_spec.get("type") or len(old_spec.get("ports") or []) != len(
        new_spec.get("ports") or []
    )


def claim_quota_changed(old: Obj, new: Obj) -> bool:
    return quotalib.claim_storage(old) != quotalib.claim_storage(new)


class ResourceQuotaController(ManagedController):
    name = "resourcequota-controller"

    def __init__(self, ctx: ControllerContext) -> None:
        informers = ctx.informers
        self.quotas = informers.informer(RESOURCEQUOTAS)
        self.quotas_by_namespace: Index = informers.namespace_index(RESOURCEQUOTAS)
        self.watched: dict[tuple[str, str], Informer] = {}
        self.by_namespace: dict[tuple[str, str], Index] = {}
        for key, resource in _WATCHED.items():
            self.watched[key] = informers.informer(resource)
            self.by_namespace[key] = informers.namespace_index(resource)
        secondary = [informer for key, informer in self.watched.items() if key != ("", "resourcequotas")]
        super().__init__(ctx, self.quotas, secondary, ctx.settings.concurrent_resource_quota_syncs)
        self.resync = ctx.settings.resource_quota_sync_period_seconds
        self._due: dict[str, float] = {}
        """When each quota's next full recount is due."""
        self._dirty: set[str] = set()
        """Quotas a change to what they count asked to recompute."""
        self.watched[("", "pods")].add_handlers(
            on_update=lambda old, new: self._changed(
                ("", "pods"), new, pod_quota_changed(old, new, self.clock())
            ),
            on_delete=lambda obj: self._changed(("", "pods"), obj, True),
        )
        self.watched[("", "services")].add_handlers(
            on_update=lambda old, new: self._changed(("", "services"), new, service_quota_changed(old, new)),
            on_delete=lambda obj: self._changed(("", "services"), obj, True),
        )
        self.watched[("", "persistentvolumeclaims")].add_handlers(
            on_update=lambda old, new: self._changed(
                ("", "persistentvolumeclaims"), new, claim_quota_changed(old, new)
            ),
            on_delete=lambda obj: self._changed(("", "persistentvolumeclaims"), obj, True),
        )
        for key in (("", "configmaps"), ("", "secrets"), ("", "replicationcontrollers")):
            self.watched[key].add_handlers(on_delete=self._deleted_handler(key))

    def _deleted_handler(self, group_resource: tuple[str, str]) -> Callable[[Obj], None]:
        return lambda obj: self._changed(group_resource, obj, True)

    def _changed(self, group_resource: tuple[str, str], obj: Obj, relevant: bool) -> None:
        """``replenishQuota``: recompute the namespace's quotas that limit something of this kind."""
        if not relevant:
            return
        group, resource = group_resource
        for quota in self.quotas_by_namespace.get(podutil.namespace_of(obj)):
            hard = (podutil.spec(quota).get("hard") or {}).keys()
            if quotalib.replenish_resources(group, resource, hard):
                key = object_key(quota)
                self._dirty.add(key)
                self.enqueue(key)

    async def _list(self, group: str, resource: str, namespace: str) -> list[Obj] | None:
        descriptor = LISTED.get((group, resource))
        if descriptor is None and group:
            try:
                descriptor = crd_resource(await self.client.get(CRDS, f"{resource}.{group}"))
            except StatusError as exc:
                if exc.code not in (403, 404):
                    raise
        if descriptor is None:
            return None
        try:
            return (await self.client.list(descriptor, namespace=namespace)).items
        except StatusError as exc:
            if exc.code in (403, 404):
                return None
            raise

    async def reconcile(self, key: str) -> float | None:
        quota = self.quotas.get(key)
        if quota is None:
            self._due.pop(key, None)
            self._dirty.discard(key)
            return None
        now = self.clock()
        due = self._due.get(key)
        if due is not None and now < due and key not in self._dirty and not needs_sync(quota):
            # A change of status only: this controller's or admission's own charge. Recounting now could
            # see the charge before the object it is for and take it back (upstream ignores these too).
            return due - now
        self._dirty.discard(key)
        self._due[key] = now + self.resync
        namespace = podutil.namespace_of(quota)
        hard = (podutil.spec(quota).get("hard") or {}).keys()
        listed: dict[tuple[str, str], list[Obj] | None] = {}
        for group_resource in quotalib.counted_group_resources(hard):
            if group_resource not in self.watched:
                listed[group_resource] = await self._list(*group_resource, namespace)

        def objects(group: str, resource: str) -> Iterable[Obj] | None:
            index = self.by_namespace.get((group, resource))
            return index.get(namespace) if index is not None else listed.get((group, resource))

        usage = quotalib.calculate_usage(quota, objects, now)
        status = quotalib.status_for(quota, usage)
        if status is not None:
            await self.client.replace_status(RESOURCEQUOTAS, {**quota, "status": status}, namespace=namespace)
        return self.resync
