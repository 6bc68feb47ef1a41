"""The HorizontalPodAutoscaler controller (upstream ``pkg/controller/podautoscaler``), every 15 s per HPA.

It reads the scale target (Deployment, ReplicaSet, StatefulSet, ReplicationController, or a custom resource
whose CRD declares a ``scale`` subresource): ``AbleToScale`` says whether that worked
(``SucceededGetScale``, or ``FailedGetScale`` with the error). A target outside ``minReplicas`` ..
``maxReplicas`` is scaled into the range at once (``Current number of replicas below Spec.MinReplicas``);
a target at zero replicas is left alone (``ScalingDisabled``). Within the range, resource metrics come from
``metrics.k8s.io`` (a metrics server registered as an APIService); without one, each metric fails as
upstream's does (``FailedGetResourceMetric``: ``... unable to fetch metrics from resource metrics API: the
server could not find the requested resource (get pods.metrics.k8s.io)``), ``ScalingActive`` turns False
with that reason and nothing is scaled. With metrics, the replica count follows upstream's utilization
ratio with its 10% tolerance, the scale-up limit (``max(2 * current, 4)``), the bounds and the five-minute
downscale stabilization; ``ScalingLimited`` says which bound applied. With ``spec.behavior`` the
stabilization windows, policies and tolerances of each direction apply instead (``podautoscalerutil``).
Custom and external metrics always fail (no custom metrics adapter is spoken to).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from vplane.controllers.client import Resource
from vplane.controllers.kcm import pods as podutil
from vplane.controllers.kcm.context import ControllerContext, ManagedController
from vplane.controllers.kcm.events import NORMAL, WARNING
from vplane.controllers.kcm.informers import Index
from vplane.controllers.kcm.podautoscalerutil import (
    TOO_FEW,
    WITHIN_RANGE,
    History,
    behavior_rules,
    normalize_with_behaviors,
    tolerances,
    upper_bound,
)
from vplane.controllers.kcm.replicacalc import (
    PodFacts,
    ReplicaCalcError,
    Sample,
    parse_window,
    plain_replicas,
    resource_replicas,
)
from vplane.controllers.kcm.replicaset import error_text
from vplane.controllers.kcm.resources import DEPLOYMENTS, PODS, REPLICASETS, REPLICATIONCONTROLLERS
from vplane.controllers.kcm.timefmt import format_time, parse_time
from vplane.kube import labels as labelsel
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj
from vplane.kube.quantity import Quantity

HPAS = Resource("autoscaling/v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers", namespaced=True)
STATEFULSETS = Resource("apps/v1", "StatefulSet", "statefulsets", namespaced=True)
POD_METRICS = Resource("metrics.k8s.io/v1beta1", "PodMetrics", "pods", namespaced=True)
CRDS = Resource("apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", False)

BUILTIN_TARGETS = {
    ("apps", "Deployment"): DEPLOYMENTS,
    ("apps", "ReplicaSet"): REPLICASETS,
    ("apps", "StatefulSet"): STATEFULSETS,
    ("", "ReplicationController"): REPLICATIONCONTROLLERS,
}
TOLERANCE = 0.1
"""``--horizontal-pod-autoscaler-tolerance``."""
NO_METRICS_API = "the server could not find the requested resource (get pods.metrics.k8s.io)"

_METRIC_FAILURE_REASON = {
    "Resource": "FailedGetResourceMetric",
    "ContainerResource": "FailedGetContainerResourceMetric",
    "Pods": "FailedGetPodsMetric",
    "Object": "FailedGetObjectMetric",
    "External": "FailedGetExternalMetric",
}


# -- pure decisions -------------------------------------------------------------------------------------------


def set_condition(status: Obj, kind: str, value: str, reason: str, message: str, now: float) -> None:
    """``setCondition``: the transition time moves only when the status does; the order of first setting
    is kept."""
    conditions: list[Obj] = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    for cond in conditions:
        if cond.get("type") == kind:
            if cond.get("status") != value:
                cond["lastTransitionTime"] = format_time(now)
            cond.update(status=value, reason=reason, message=message)
            break
    else:
        conditions.append(
            {
                "type": kind,
                "status": value,
                "lastTransitionTime": format_time(now),
                "reason": reason,
                "message": message,
            }
        )
    status["conditions"] = conditions


def min_replicas(hpa: Obj) -> int:
    value = podutil.spec(hpa).get("minReplicas")
    return int(value) if isinstance(value, int) else 1


def max_replicas(hpa: Obj) -> int:
    value = podutil.spec(hpa).get("maxReplicas")
    return int(value) if isinstance(value, int) else 1


def bounds_decision(current: int, low: int, high: int) -> tuple[str, int, str] | None:
    """The branches taken before metrics are looked at: ("disabled", 0, "") for a target at zero,
    ("rescale", n, reason) outside the range, None within it."""
    if current == 0 and low != 0:
        return "disabled", 0, ""
    if current > high:
        return "rescale", high, "Current number of replicas above Spec.MaxReplicas"
    if current < low:
        return "rescale", low, "Current number of replicas below Spec.MinReplicas"
    return None


def scale_up_limit(current: int) -> int:
    """``calculateScaleUpLimit``: at most double, and at least 4."""
    return max(2 * current, 4)


def convert_with_rules(current: int, desired: int, low: int, high: int) -> tuple[int, str, str]:
    """``convertDesiredReplicasWithRules``: (replicas, ScalingLimited reason, message)."""
    maximum, reason, message = upper_bound(scale_up_limit(current), high)
    if desired < low:
        return (low, *TOO_FEW)
    if desired > maximum:
        return maximum, reason, message
    return (desired, *WITHIN_RANGE)


class MetricFailed(Exception):
    """One metric could not be computed: ``reason`` and ``condition`` are what ``ScalingActive`` says (the
    inner error), the message what the aggregate error wraps."""

    def __init__(self, reason: str, message: str, condition: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.condition = condition or message


# -- target lookup -------------------------------------------------------------------------------------------------


@dataclass
class Target:
    resource: Resource
    obj: Obj
    replicas_path: tuple[str, ...] = ("spec", "replicas")
    selector_path: tuple[str, ...] | None = None
    """For a custom resource: where its scale selector string lives (``labelSelectorPath``)."""

    @property
    def replicas(self) -> int:
        value: Any = self.obj
        for part in self.replicas_path:
            value = value.get(part) if isinstance(value, dict) else None
        return int(value) if isinstance(value, int) else 0

    def selector(self) -> str:
        if self.selector_path is not None:
            value: Any = self.obj
            for part in self.selector_path:
                value = value.get(part) if isinstance(value, dict) else None
            return str(value or "")
        raw = podutil.spec(self.obj).get("selector")
        if self.resource.kind == "ReplicationController":
            return str(labelsel.exact(raw)) if isinstance(raw, dict) else ""
        try:
            return str(labelsel.from_label_selector(raw)) if isinstance(raw, dict) else ""
        except StatusError:
            return ""


def _path(text: str) -> tuple[str, ...]:
    return tuple(p for p in text.lstrip(".").split(".") if p)


# -- the controller ------------------------------------------------------------------------------------------------


class HorizontalPodAutoscalerController(ManagedController):
    name = "horizontal-pod-autoscaler"

    def __init__(self, ctx: ControllerContext) -> None:
        informers = ctx.informers
        self.hpas = informers.informer(HPAS)
        self.pods = informers.informer(PODS)
        self.pods_by_namespace: Index = informers.namespace_index(PODS)
        super().__init__(ctx, self.hpas, [self.pods], ctx.settings.concurrent_horizontal_pod_autoscaler_syncs)
        self.sync_period = ctx.settings.horizontal_pod_autoscaler_sync_period_seconds
        self.downscale_window = ctx.settings.horizontal_pod_autoscaler_downscale_stabilization_seconds
        self.history = History()
        self.cpu_initialization_period = (
            ctx.settings.horizontal_pod_autoscaler_cpu_initialization_period_seconds
        )
        self.initial_readiness_delay = ctx.settings.horizontal_pod_autoscaler_initial_readiness_delay_seconds

    async def _target(self, hpa: Obj) -> Target:
        ref = podutil.spec(hpa).get("scaleTargetRef") or {}
        namespace = podutil.namespace_of(hpa)
        group, _, _version = str(ref.get("apiVersion") or "").rpartition("/")
        kind, name = str(ref.get("kind") or ""), str(ref.get("name") or "")
        builtin = BUILTIN_TARGETS.get((group, kind))
        if builtin is not None:
            return Target(builtin, await self.client.get(builtin, name, namespace=namespace))
        for crd in (await self.client.list(CRDS)).items:
            spec = podutil.spec(crd)
            if spec.get("group") != group or (spec.get("names") or {}).get("kind") != kind:
                continue
            for version in spec.get("versions") or []:
                scale = ((version.get("subresources") or {}).get("scale")) if version.get("served") else None
                if scale:
                    resource = Resource(
                        f"{group}/{version['name']}",
                        kind,
                        spec["names"]["plural"],
                        spec.get("scope") == "Namespaced",
                    )
                    obj = await self.client.get(
                        resource, name, namespace=namespace if resource.namespaced else None
                    )
                    selector = scale.get("labelSelectorPath")
                    return Target(
                        resource, obj, _path(scale["specReplicasPath"]), _path(selector) if selector else None
                    )
        raise StatusError(404, "NotFound", f'no matches for kind "{kind}" in group "{group}"')

    async def reconcile(self, key: str) -> float | None:
        cached = self.hpas.get(key)
        if cached is None:
            self.history.forget(key)
            return None
        hpa = {**cached, "status": dict(podutil.status(cached))}
        status: Obj = hpa["status"]
        original = dict(podutil.status(cached))
        now = self.clock()
        try:
            target = await self._target(hpa)
        except StatusError as exc:
            message = error_text(exc)
            self.recorder.event(hpa, WARNING, "FailedGetScale", message)
            set_condition(
                status,
                "AbleToScale",
                "False",
                "FailedGetScale",
                f"the HPA controller was unable to get the target's current scale: {message}",
                now,
            )
            await self._write(hpa, original)
            return self.sync_period
        set_condition(
            status,
            "AbleToScale",
            "True",
            "SucceededGetScale",
            "the HPA controller was able to get the target's current scale",
            now,
        )
        current = target.replicas
        self.history.initial(key, current, now)
        low, high = min_replicas(hpa), max_replicas(hpa)
        rules = behavior_rules(podutil.spec(hpa).get("behavior"), self.downscale_window)
        decided = bounds_decision(current, low, high)
        metric_statuses: list[Obj] | None = None
        if decided is not None and decided[0] == "disabled":
            rescale, desired, reason = False, 0, ""
            set_condition(
                status,
                "ScalingActive",
                "False",
                "ScalingDisabled",
                "scaling is disabled since the replica count of the target is zero",
                now,
            )
        elif decided is not None:
            rescale, desired, reason = True, decided[1], decided[2]
        else:
            try:
                proposal, metric_name, metric_statuses = await self._metrics_replicas(
                    hpa, target, current, now
                )
            except MetricFailed as exc:
                status["currentReplicas"] = current
                await self._write(hpa, original)
                self.recorder.event(hpa, WARNING, "FailedComputeMetricsReplicas", str(exc))
                return self.sync_period
            reason = ""
            if proposal > current:
                reason = f"{metric_name} above target"
            elif proposal < current:
                reason = "All metrics below target"
            if rules is not None:
                normalized = normalize_with_behaviors(
                    self.history, key, current, proposal, low, high, rules, now
                )
                set_condition(status, "AbleToScale", "True", *normalized.able, now)
                set_condition(status, "ScalingLimited", *normalized.limited, now)
                desired = normalized.replicas
            else:
                desired = self._normalize(status, key, current, proposal, low, high, now)
            rescale = desired != current
        if rescale:
            try:
                await self._scale(target, desired)
            except StatusError as exc:
                self.recorder.event(
                    hpa,
                    WARNING,
                    "FailedRescale",
                    f"New size: {desired}; reason: {reason}; error: {error_text(exc)}",
                )
                set_condition(
                    status,
                    "AbleToScale",
                    "False",
                    "FailedUpdateScale",
                    f"the HPA controller was unable to update the target scale: {error_text(exc)}",
                    now,
                )
                status["currentReplicas"] = current
                await self._write(hpa, original)
                raise
            set_condition(
                status,
                "AbleToScale",
                "True",
                "SucceededRescale",
                f"the HPA controller was able to update the target scale to {desired}",
                now,
            )
            self.recorder.event(hpa, NORMAL, "SuccessfulRescale", f"New size: {desired}; reason: {reason}")
            self.history.store_scale_event(key, rules, current, desired, now)
            status["lastScaleTime"] = format_time(now)
        else:
            desired = current
        status["currentReplicas"] = current
        status["desiredReplicas"] = desired
        if metric_statuses:
            status["currentMetrics"] = metric_statuses
        else:
            status.pop("currentMetrics", None)
        await self._write(hpa, original)
        return self.sync_period

    def _normalize(
        self, status: Obj, key: str, current: int, proposal: int, low: int, high: int, now: float
    ) -> int:
        """``normalizeDesiredReplicas`` (no ``behavior``): the downscale window, then the fixed rules."""
        stabilized = self.history.stabilize(key, proposal, self.downscale_window, now)
        if stabilized != proposal:
            set_condition(
                status,
                "AbleToScale",
                "True",
                "ScaleDownStabilized",
                "recent recommendations were higher than current one, applying the highest recent recommendation",
                now,
            )
        else:
            set_condition(
                status,
                "AbleToScale",
                "True",
                "ReadyForNewScale",
                "recommended size matches current size",
                now,
            )
        desired, limited, message = convert_with_rules(current, stabilized, low, high)
        set_condition(
            status, "ScalingLimited", "False" if desired == stabilized else "True", limited, message, now
        )
        return desired

    async def _metrics_replicas(
        self, hpa: Obj, target: Target, current: int, now: float
    ) -> tuple[int, str, list[Obj]]:
        """``computeReplicasForMetrics``: the largest proposal; when every metric fails (or some fail and the
        rest would scale down), the first failure's condition and the aggregate error."""
        status = hpa["status"]
        selector_text = target.selector()
        if not selector_text:
            self.recorder.event(hpa, WARNING, "SelectorRequired", "selector is required")
            set_condition(
                status,
                "ScalingActive",
                "False",
                "InvalidSelector",
                "the HPA target's scale is missing a selector",
                now,
            )
            raise MetricFailed("InvalidSelector", "selector is required")
        specs = [m for m in podutil.spec(hpa).get("metrics") or [] if isinstance(m, dict)]
        if not specs:
            specs = [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
                }
            ]
        replicas, name, statuses = 0, "", []
        failures: list[MetricFailed] = []
        for spec in specs:
            try:
                proposal, metric_name, metric_status = await self._one_metric(
                    hpa, spec, current, selector_text
                )
            except MetricFailed as exc:
                failures.append(exc)
                continue
            statuses.append(metric_status)
            if replicas == 0 or proposal > replicas:
                replicas, name = proposal, metric_name
        if failures and (len(failures) >= len(specs) or replicas < current):
            first = failures[0]
            set_condition(
                status,
                "ScalingActive",
                "False",
                first.reason,
                f"the HPA was unable to compute the replica count: {first.condition}",
                now,
            )
            raise MetricFailed(
                first.reason,
                f"invalid metrics ({len(failures)} invalid out of {len(specs)}), first error is: {first}",
            )
        set_condition(
            status,
            "ScalingActive",
            "True",
            "ValidMetricFound",
            f"the HPA was able to successfully calculate a replica count from {name}",
            now,
        )
        return replicas, name, statuses

    async def _one_metric(
        self, hpa: Obj, spec: Obj, current: int, selector_text: str
    ) -> tuple[int, str, Obj]:
        kind = str(spec.get("type") or "")
        reason = _METRIC_FAILURE_REASON.get(kind, "FailedGetResourceMetric")
        if kind not in ("Resource", "ContainerResource"):
            message = (
                f"failed to get {kind.lower()} metric value: unable to fetch metrics from custom metrics API: "
                + ("the server could not find the requested resource")
            )
            self.recorder.event(hpa, WARNING, reason, message)
            raise MetricFailed(reason, message, message)
        source = spec.get("resource" if kind == "Resource" else "containerResource") or {}
        resource = str(source.get("name") or "cpu")
        container = str(source.get("container") or "")
        try:
            return await self._resource_metric(hpa, source, resource, container, current, selector_text)
        except MetricFailed as exc:
            self.recorder.event(hpa, WARNING, reason, str(exc))
            detail = f"failed to get {resource} resource metric value: {exc}"
            if kind == "ContainerResource":
                detail = f"failed to get {resource} container metric value: {exc}"
            raise MetricFailed(reason, detail, str(exc)) from None

    async def _resource_metric(
        self, hpa: Obj, source: Obj, resource: str, container: str, current: int, selector_text: str
    ) -> tuple[int, str, Obj]:
        target = source.get("target") or {}
        namespace = podutil.namespace_of(hpa)
        what = "utilization" if target.get("averageUtilization") is not None else "usage"
        try:
            listed = await self.client.list(
                POD_METRICS, namespace=namespace, label_selector=_selector_map(selector_text)
            )
        except StatusError as exc:
            detail = NO_METRICS_API if exc.code == 404 else error_text(exc)
            raise MetricFailed(
                "",
                f"failed to get {resource} {what}: unable to get metrics for resource {resource}: "
                f"unable to fetch metrics from resource metrics API: {detail}",
            ) from None
        if not listed.items:
            raise MetricFailed(
                "",
                f"failed to get {resource} {what}: unable to get metrics for resource {resource}: "
                "no metrics returned from resource metrics API",
            )
        samples: dict[str, Sample] = {}
        for entry in listed.items:
            used = _usage_milli(entry, resource, container)
            if used is not None:
                samples[podutil.name_of(entry)] = Sample(
                    used, parse_time(entry.get("timestamp")), parse_window(entry.get("window"))
                )
        selector = labelsel.parse(selector_text)
        pods = [
            _pod_facts(p, resource, container)
            for p in self.pods_by_namespace.get(namespace)
            if selector.matches(podutil.labels_of(p))
        ]
        tolerance = tolerances(podutil.spec(hpa).get("behavior"), TOLERANCE)
        timing = (self.clock(), self.cpu_initialization_period, self.initial_readiness_delay)
        try:
            if target.get("averageValue") is not None:
                average = Quantity.parse(target["averageValue"])
                per_pod = average.milli_value() if average is not None else 0
                proposal, usage = plain_replicas(
                    current, per_pod, resource, pods, samples, tolerance, *timing
                )
                status = {
                    "type": "Resource",
                    "resource": {"name": resource, "current": {"averageValue": _milli(usage)}},
                }
                return proposal, f"{resource} resource", status
            found = resource_replicas(
                current,
                int(target.get("averageUtilization") or 0),
                resource,
                pods,
                samples,
                tolerance,
                *timing,
            )
        except ReplicaCalcError as exc:
            raise MetricFailed("", f"failed to get {resource} {what}: {exc}") from None
        status = {
            "type": "Resource",
            "resource": {
                "name": resource,
                "current": {
                    "averageUtilization": found.utilization,
                    "averageValue": _milli(found.raw_average),
                },
            },
        }
        return found.replicas, f"{resource} resource utilization (percentage of request)", status

    async def _scale(self, target: Target, replicas: int) -> None:
        patch: Obj = {}
        cursor = patch
        for part in target.replicas_path[:-1]:
            cursor = cursor.setdefault(part, {})
        cursor[target.replicas_path[-1]] = replicas
        namespace = podutil.namespace_of(target.obj) if target.resource.namespaced else None
        await self.client.patch(target.resource, podutil.name_of(target.obj), patch, namespace=namespace)

    async def _write(self, hpa: Obj, original: Obj) -> None:
        status = hpa["status"]
        status.setdefault("desiredReplicas", 0)  # the one count without omitempty
        if not status.get("currentReplicas"):
            status.pop("currentReplicas", None)
        if status == original:
            return
        await self.client.replace_status(HPAS, hpa, namespace=podutil.namespace_of(hpa))


def _selector_map(text: str) -> dict[str, str]:
    """The selector as the client's label-selector map (exact matches; other terms are kept verbatim)."""
    out: dict[str, str] = {}
    for term in text.split(","):
        key, sep, value = term.partition("=")
        if sep and not key.endswith("!"):
            out[key.strip()] = value.strip()
    return out


def _usage_milli(metrics: Obj, resource: str, container: str) -> int | None:
    """A pod's usage summed over its containers (or the one named); None, as the metrics client skips the
    pod, when a container reports no such usage or the named container is absent."""
    total, seen = 0, False
    for entry in metrics.get("containers") or []:
        if container and entry.get("name") != container:
            continue
        amount = Quantity.parse((entry.get("usage") or {}).get(resource))
        if amount is None:
            return None
        total += amount.milli_value()
        seen = True
    return total if seen else None


def _milli(value: int) -> str:
    """``resource.NewMilliQuantity(value, DecimalSI)`` as the wire shows it."""
    return str(Quantity(Decimal(value) / 1000))


def _pod_facts(pod: Obj, resource: str, container: str) -> PodFacts:
    ready = podutil.ready_condition(pod)
    state = podutil.status(pod)
    request = _request_milli(pod, resource, container)
    return PodFacts(
        podutil.name_of(pod),
        phase=str(state.get("phase") or ""),
        deleting=podutil.is_deleting(pod),
        ready=str(ready.get("status") or "") if ready is not None else None,
        ready_changed=parse_time(ready.get("lastTransitionTime")) if ready is not None else None,
        started=parse_time(state.get("startTime")),
        request=request,
        unrequested=container or _first_missing(pod, resource) if request is None else "",
    )


def _request_milli(pod: Obj, resource: str, container: str) -> int | None:
    total = 0
    for entry in podutil.spec(pod).get("containers") or []:
        if container and entry.get("name") != container:
            continue
        amount = Quantity.parse(((entry.get("resources") or {}).get("requests") or {}).get(resource))
        if amount is None:
            return None
        total += amount.milli_value()
    return total


def _first_missing(pod: Obj, resource: str) -> str:
    for entry in podutil.spec(pod).get("containers") or []:
        if resource not in ((entry.get("resources") or {}).get("requests") or {}):
            return str(entry.get("name") or "")
    return ""
