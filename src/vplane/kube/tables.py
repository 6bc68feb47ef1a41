"""Server-side ``Table`` rendering for ``kubectl get`` (spec section 2 and S1).

kubectl has printed built-in kinds from server-made Tables for years: without them ``kubectl get cm`` shows only
``NAME AGE``. The column names, cell types and cell formats here follow upstream's printers
(kubernetes ``pkg/printers/internalversion/printers.go``), the default convertor
(apiserver ``pkg/registry/rest/table.go``), the APIService convertor (kube-aggregator
``pkg/registry/apiservice/etcd``) and the custom resource convertor (apiextensions-apiserver
``pkg/registry/customresource/tableconvertor``). Column descriptions are our own.

The server always renders the wide (``priority > 0``) cells, as upstream does; kubectl hides them unless
``-o wide``. Times are injected (``now`` in epoch seconds) so rendering is pure and testable.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, TypedDict

from vplane.kube.errors import bad_request

Obj = dict[str, Any]

TABLE_API_VERSION = "meta.k8s.io/v1"
INCLUDE_OBJECT_VALUES = ("None", "Object", "Metadata")


class ColumnDef(TypedDict):
    """One ``columnDefinitions`` entry; every key is always present on the wire."""

    name: str
    type: str
    format: str
    description: str
    priority: int


def column(
    name: str, type_: str = "string", description: str = "", *, fmt: str = "", priority: int = 0
) -> ColumnDef:
    return {"name": name, "type": type_, "format": fmt, "description": description, "priority": priority}


# --------------------------------------------------------------------------------------------------
# Durations and timestamps
# --------------------------------------------------------------------------------------------------
_NS = 1_000_000_000
_MINUTE = 60 * _NS
_HOUR = 60 * _MINUTE


def _trunc_div(a: int, b: int) -> int:
    """Integer division rounding toward zero, as Go's ``/`` on integers does."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def human_duration(seconds: float) -> str:
    """``k8s.io/apimachinery/pkg/util/duration.HumanDuration``: 2-3 significant figures, Go's rounding.

    Thresholds: seconds below 2 minutes, ``XmYs`` below 10 minutes, minutes below 3 hours, ``XhYm`` below
    8 hours, hours below 2 days, ``XdYh`` below 8 days, days below 2 years, ``XyYd`` below 8 years, then years.
    Up to one second in the future reads ``0s`` (clock skew); further is ``<invalid>``.
    """
    d = round(seconds * _NS)
    secs = _trunc_div(d, _NS)
    if secs < -1:
        return "<invalid>"
    if secs < 0:
        return "0s"
    if secs < 60 * 2:
        return f"{secs}s"
    minutes = d // _MINUTE
    if minutes < 10:
        s = (d // _NS) % 60
        return f"{minutes}m" if s == 0 else f"{minutes}m{s}s"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = d // _HOUR
    if hours < 8:
        m = minutes % 60
        return f"{hours}h" if m == 0 else f"{hours}h{m}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d" if h == 0 else f"{hours // 24}d{h}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if dy == 0 else f"{hours // 24 // 365}y{dy}d"
    return f"{hours // 24 // 365}y"


def parse_time(value: Any) -> float | None:
    """An RFC 3339 timestamp (Time or MicroTime) as epoch seconds; None if absent or malformed."""
    if not isinstance(value, str) or "T" not in value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None
    return parsed.timestamp()


def age(creation_timestamp: str | None, now: float) -> str:
    """How long ago a timestamp was, as ``kubectl get`` shows it; ``<unknown>`` for a zero/missing time."""
    if not creation_timestamp:
        return "<unknown>"
    t = parse_time(creation_timestamp)
    if t is None:
        return "<invalid>"
    return human_duration(now - t)


def _rfc3339_utc(value: Any) -> str:
    """A timestamp re-rendered as Go's ``Time.UTC().Format(time.RFC3339)`` (zero time if missing)."""
    t = parse_time(value)
    if t is None:
        return "0001-01-01T00:00:00Z"
    return datetime.fromtimestamp(math.floor(t), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------------------------------
# Small accessors and the label formats kubectl users know
# --------------------------------------------------------------------------------------------------
def _d(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _s(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _i(value: Any, default: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return int(value)


def _meta(obj: Obj) -> Obj:
    return _d(obj.get("metadata"))


def format_labels(labels: Mapping[str, Any] | None) -> str:
    """``labels.FormatLabels``: sorted ``k=v`` pairs, or ``<none>``."""
    pairs = sorted(f"{k}={v}" for k, v in (labels or {}).items())
    return ",".join(pairs) or "<none>"


def _requirement_string(key: str, op: str, values: Sequence[str]) -> str:
    if op == "Exists":
        return key
    if op == "DoesNotExist":
        return "!" + key
    joined = values[0] if len(values) == 1 else ",".join(sorted(values))
    if op == "=":
        return f"{key}={joined}"
    word = "in" if op == "In" else "notin"
    return f"{key} {word} ({joined})"


def selector_string(selector: Any) -> str:
    """``labels.Selector.String()`` of a LabelSelector: requirements sorted by key, ``""`` for nil or empty.

    Unlike upstream, key and value syntax is not validated (upstream prints ``<error>``/``<invalid>``).
    """
    sel = _d(selector)
    reqs: list[tuple[str, str]] = []
    for key, value in _d(sel.get("matchLabels")).items():
        reqs.append((key, _requirement_string(key, "=", [_s(value)])))
    for expr in _l(sel.get("matchExpressions")):
        e = _d(expr)
        key = _s(e.get("key"))
        values = [_s(v) for v in _l(e.get("values"))]
        reqs.append((key, _requirement_string(key, _s(e.get("operator")), values)))
    reqs.sort(key=lambda r: r[0])
    return ",".join(r for _, r in reqs)


def format_label_selector(selector: Any) -> str:
    """``metav1.FormatLabelSelector``: the selector string, or ``<none>`` when it selects nothing/everything."""
    return selector_string(selector) or "<none>"


def _containers_and_images(pod_spec: Any) -> tuple[str, str]:
    containers = [_d(c) for c in _l(_d(pod_spec).get("containers"))]
    return ",".join(_s(c.get("name")) for c in containers), ",".join(_s(c.get("image")) for c in containers)


def _join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# --------------------------------------------------------------------------------------------------
# Built-in printers: columns plus a cell function per (group, kind)
# --------------------------------------------------------------------------------------------------
NAME = column("Name", description="Name of the object, unique within its namespace.", fmt="name")
AGE = column("Age", description="Time since the object was created.")
CREATED_AT = column("Created At", "date", "When the object was created (RFC 3339, UTC).")
CONTAINERS = column("Containers", description="Names of the pod template's containers.", priority=1)
IMAGES = column("Images", description="Images of the pod template's containers.", priority=1)

CellFn = Callable[[Obj, float], list[Any]]


@dataclass(frozen=True)
class Printer:
    """How one kind becomes table rows."""

    columns: tuple[ColumnDef, ...]
    cells: CellFn
    conditions: Callable[[Obj], list[Obj]] | None = None


def _name(obj: Obj) -> str:
    return _s(_meta(obj).get("name"))


def _obj_age(obj: Obj, now: float) -> str:
    return age(_meta(obj).get("creationTimestamp"), now)


def _default_cells(obj: Obj, now: float) -> list[Any]:
    return [_name(obj), _rfc3339_utc(_meta(obj).get("creationTimestamp"))]


DEFAULT_PRINTER = Printer((NAME, CREATED_AT), _default_cells)
"""Upstream's default convertor, used for kinds without a printer (Role, ClusterRole, CRD, ...)."""


def _namespace_cells(obj: Obj, now: float) -> list[Any]:
    # Upstream sets phase Active on create; fall back to it for objects stored without a status.
    phase = _s(_d(obj.get("status")).get("phase")) or "Active"
    return [_name(obj), phase, _obj_age(obj, now)]


def _configmap_cells(obj: Obj, now: float) -> list[Any]:
    count = len(_d(obj.get("data"))) + len(_d(obj.get("binaryData")))
    return [_name(obj), count, _obj_age(obj, now)]


def _secret_cells(obj: Obj, now: float) -> list[Any]:
    return [_name(obj), _s(obj.get("type")) or "Opaque", len(_d(obj.get("data"))), _obj_age(obj, now)]


def _service_account_cells(obj: Obj, now: float) -> list[Any]:
    return [_name(obj), len(_l(obj.get("secrets"))), _obj_age(obj, now)]


def _service_external_ip(spec: Obj, status: Obj) -> str:
    svc_type = _s(spec.get("type")) or "ClusterIP"
    external = [_s(ip) for ip in _l(spec.get("externalIPs"))]
    if svc_type in ("ClusterIP", "NodePort"):
        return ",".join(external) if external else "<none>"
    if svc_type == "LoadBalancer":
        found: set[str] = set()
        for ing in _l(_d(status.get("loadBalancer")).get("ingress")):
            entry = _d(ing)
            value = _s(entry.get("ip")) or _s(entry.get("hostname"))
            if value:
                found.add(value)
        lb = ",".join(sorted(found))  # wide output: never clipped
        if external:
            return ",".join([*(lb.split(",") if lb else []), *external])
        return lb or "<pending>"
    if svc_type == "ExternalName":
        return _s(spec.get("externalName"))
    return "<unknown>"


def _service_ports(spec: Obj) -> str:
    pieces = []
    for p in _l(spec.get("ports")):
        port = _d(p)
        protocol = _s(port.get("protocol")) or "TCP"
        node_port = _i(port.get("nodePort"))
        if node_port > 0:
            pieces.append(f"{_i(port.get('port'))}:{node_port}/{protocol}")
        else:
            pieces.append(f"{_i(port.get('port'))}/{protocol}")
    return ",".join(pieces) or "<none>"


def _service_cells(obj: Obj, now: float) -> list[Any]:
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    cluster_ips = _l(spec.get("clusterIPs"))
    internal = _s(cluster_ips[0]) if cluster_ips else _s(spec.get("clusterIP"))
    return [
        _name(obj),
        _s(spec.get("type")) or "ClusterIP",
        internal or "<none>",
        _service_external_ip(spec, status),
        _service_ports(spec),
        _obj_age(obj, now),
        format_labels(_d(spec.get("selector"))),
    ]


def format_endpoints(endpoints: Obj) -> str:
    """The ENDPOINTS cell: up to three ``ip:port`` entries, then ``+ N more...``."""
    subsets = _l(endpoints.get("subsets"))
    if not subsets:
        return "<none>"
    shown: list[str] = []
    limit, more, count = 3, False, 0
    for raw in subsets:
        subset = _d(raw)
        addresses = [_s(_d(a).get("ip")) for a in _l(subset.get("addresses"))]
        ports = [_d(p) for p in _l(subset.get("ports"))]
        if not ports:  # headless services may have no ports
            count += len(addresses)
            for ip in addresses:
                if len(shown) == limit:
                    more = True
                    break
                shown.append(ip)
            continue
        for port in ports:
            count += len(addresses)
            for ip in addresses:
                if len(shown) == limit:
                    more = True
                    break
                shown.append(_join_host_port(ip, _i(port.get("port"))))
    text = ",".join(shown)
    return f"{text} + {count - limit} more..." if more else text


def _endpoints_cells(obj: Obj, now: float) -> list[Any]:
    return [_name(obj), format_endpoints(obj), _obj_age(obj, now)]


def _terminated_text(terminated: Obj, prefix: str) -> str:
    reason = _s(terminated.get("reason"))
    if reason:
        return prefix + reason
    signal = _i(terminated.get("signal"))
    if signal != 0:
        return f"{prefix}Signal:{signal}"
    return f"{prefix}ExitCode:{_i(terminated.get('exitCode'))}"


def _last_termination(status: Obj) -> float | None:
    finished = _d(_d(status.get("lastState")).get("terminated")).get("finishedAt")
    return parse_time(finished)


def _later(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def _has_condition(conditions: Any, cond_type: str, status: str = "True") -> bool:
    return any(_d(c).get("type") == cond_type and _d(c).get("status") == status for c in _l(conditions))


def pod_status_cells(pod: Obj, now: float) -> tuple[str, str, str]:
    """READY, STATUS and RESTARTS for a pod, with upstream's precedence of init, container and deletion states."""
    spec, status = _d(pod.get("spec")), _d(pod.get("status"))
    init_specs = [_d(c) for c in _l(spec.get("initContainers"))]
    restartable = {_s(c.get("name")) for c in init_specs if c.get("restartPolicy") == "Always"}
    total = len(_l(spec.get("containers"))) + sum(1 for c in init_specs if c.get("restartPolicy") == "Always")
    ready = 0
    restarts = restartable_restarts = 0
    last_restart: float | None = None
    last_restartable: float | None = None

    phase = _s(status.get("phase"))
    reason = _s(status.get("reason")) or phase
    for cond in _l(status.get("conditions")):
        c = _d(cond)
        if c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"

    initializing = False
    for index, raw in enumerate(_l(status.get("initContainerStatuses"))):
        cs = _d(raw)
        restarts += _i(cs.get("restartCount"))
        last_restart = _later(last_restart, _last_termination(cs))
        is_restartable = _s(cs.get("name")) in restartable
        if is_restartable:
            restartable_restarts += _i(cs.get("restartCount"))
            last_restartable = _later(last_restartable, _last_termination(cs))
        state = _d(cs.get("state"))
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if isinstance(terminated, dict) and _i(terminated.get("exitCode")) == 0:
            continue
        if is_restartable and cs.get("started") is True:
            if cs.get("ready") is True:
                ready += 1
            continue
        if isinstance(terminated, dict):
            reason = _terminated_text(terminated, "Init:")
        elif isinstance(waiting, dict) and _s(waiting.get("reason")) not in ("", "PodInitializing"):
            reason = "Init:" + _s(waiting.get("reason"))
        else:
            reason = f"Init:{index}/{len(init_specs)}"
        initializing = True
        break

    if not initializing or _has_condition(status.get("conditions"), "Initialized"):
        restarts, last_restart = restartable_restarts, last_restartable
        has_running = False
        for raw in reversed(_l(status.get("containerStatuses"))):
            cs = _d(raw)
            restarts += _i(cs.get("restartCount"))
            last_restart = _later(last_restart, _last_termination(cs))
            state = _d(cs.get("state"))
            terminated, waiting = state.get("terminated"), state.get("waiting")
            if isinstance(waiting, dict) and _s(waiting.get("reason")):
                reason = _s(waiting.get("reason"))
            elif isinstance(terminated, dict):
                reason = _terminated_text(terminated, "")
            elif cs.get("ready") is True and isinstance(state.get("running"), dict):
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            reason = "Running" if _has_condition(status.get("conditions"), "Ready") else "NotReady"

    if _meta(pod).get("deletionTimestamp"):
        if status.get("reason") == "NodeLost":
            reason = "Unknown"
        elif phase not in ("Succeeded", "Failed"):
            reason = "Terminating"

    restarts_text = str(restarts)
    if restarts != 0 and last_restart is not None:
        restarts_text = f"{restarts} ({human_duration(now - last_restart)} ago)"
    return f"{ready}/{total}", reason, restarts_text


def _pod_cells(obj: Obj, now: float) -> list[Any]:
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    ready, reason, restarts = pod_status_cells(obj, now)
    pod_ips = _l(status.get("podIPs"))
    # Upstream reads podIPs only (its strategy always fills it); podIP covers objects stored without it.
    pod_ip = _s(_d(pod_ips[0]).get("ip")) if pod_ips else _s(status.get("podIP"))
    gates = _l(spec.get("readinessGates"))
    readiness = "<none>"
    if gates:
        conditions = {
            _s(_d(c).get("type")): _d(c).get("status") for c in reversed(_l(status.get("conditions")))
        }
        true_count = sum(1 for g in gates if conditions.get(_s(_d(g).get("conditionType"))) == "True")
        readiness = f"{true_count}/{len(gates)}"
    return [
        _name(obj),
        ready,
        reason,
        restarts,
        _obj_age(obj, now),
        pod_ip or "<none>",
        _s(spec.get("nodeName")) or "<none>",
        _s(status.get("nominatedNodeName")) or "<none>",
        readiness,
    ]


def _pod_conditions(obj: Obj) -> list[Obj]:
    # Row conditions tell clients a pod is finished (metav1.RowCompleted); the messages are ours.
    phase = _d(obj.get("status")).get("phase")
    if phase == "Succeeded":
        return [
            {"type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod completed."}
        ]
    if phase == "Failed":
        return [{"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}]
    return []


def _event_source(source: Obj, controller: str, instance: str) -> str:
    component = _s(source.get("component")) or controller
    host = _s(source.get("host")) or instance
    return f"{component}, {host}" if host else component


def _core_event_view(obj: Obj, group: str) -> Obj:
    """events.k8s.io/v1 names the same fields differently; upstream prints both from one internal type."""
    if group != "events.k8s.io":
        return obj
    return {
        "metadata": obj.get("metadata"),
        "involvedObject": obj.get("regarding"),
        "reason": obj.get("reason"),
        "message": obj.get("note"),
        "source": obj.get("deprecatedSource"),
        "firstTimestamp": obj.get("deprecatedFirstTimestamp"),
        "lastTimestamp": obj.get("deprecatedLastTimestamp"),
        "count": obj.get("deprecatedCount"),
        "type": obj.get("type"),
        "eventTime": obj.get("eventTime"),
        "series": obj.get("series"),
        "reportingComponent": obj.get("reportingController"),
        "reportingInstance": obj.get("reportingInstance"),
    }


def _event_cells_for(group: str) -> CellFn:
    def cells(raw: Obj, now: float) -> list[Any]:
        obj = _core_event_view(raw, group)
        first = (
            age(obj.get("firstTimestamp"), now)
            if obj.get("firstTimestamp")
            else age(obj.get("eventTime"), now)
        )
        last = age(obj.get("lastTimestamp"), now) if obj.get("lastTimestamp") else first
        count = _i(obj.get("count"))
        series = obj.get("series")
        if isinstance(series, dict):
            last = age(series.get("lastObservedTime"), now)
            count = _i(series.get("count"))
        elif count == 0:
            count = 1  # singleton events in the new API carry no count
        involved = _d(obj.get("involvedObject"))
        kind = _s(involved.get("kind")).lower()
        target = f"{kind}/{_s(involved.get('name'))}" if involved.get("name") else kind
        return [
            last,
            _s(obj.get("type")),
            _s(obj.get("reason")),
            target,
            _s(involved.get("fieldPath")),
            _event_source(
                _d(obj.get("source")), _s(obj.get("reportingComponent")), _s(obj.get("reportingInstance"))
            ),
            _s(obj.get("message")).strip(),
            first,
            count,
            _name(raw),
        ]

    return cells


def _node_cells(obj: Obj, now: float) -> list[Any]:
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    states: list[str] = []
    ready = [c for c in map(_d, _l(status.get("conditions"))) if c.get("type") == "Ready"]
    if ready:
        states.append("Ready" if ready[-1].get("status") == "True" else "NotReady")
    else:
        states.append("Unknown")
    if spec.get("unschedulable") is True:
        states.append("SchedulingDisabled")
    roles: set[str] = set()
    for key, value in _d(_meta(obj).get("labels")).items():
        if key.startswith("node-role.kubernetes.io/") and len(key) > len("node-role.kubernetes.io/"):
            roles.add(key[len("node-role.kubernetes.io/") :])
        elif key == "kubernetes.io/role" and value:
            roles.add(_s(value))
    info = _d(status.get("nodeInfo"))
    addresses = [_d(a) for a in _l(status.get("addresses"))]

    def address(kind: str) -> str:
        return next((_s(a.get("address")) for a in addresses if a.get("type") == kind), "<none>")

    return [
        _name(obj),
        ",".join(states),
        ",".join(sorted(roles)) or "<none>",
        _obj_age(obj, now),
        _s(info.get("kubeletVersion")),
        address("InternalIP"),
        address("ExternalIP"),
        _s(info.get("osImage")) or "<unknown>",
        _s(info.get("kernelVersion")) or "<unknown>",
        _s(info.get("containerRuntimeVersion")) or "<unknown>",
    ]


def _replicas(spec: Obj) -> int:
    # Upstream defaults spec.replicas to 1 before anything is stored.
    return _i(spec.get("replicas"), 1)


def _deployment_cells(obj: Obj, now: float) -> list[Any]:
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    names, images = _containers_and_images(_d(spec.get("template")).get("spec"))
    return [
        _name(obj),
        f"{_i(status.get('readyReplicas'))}/{_replicas(spec)}",
        _i(status.get("updatedReplicas")),
        _i(status.get("availableReplicas")),
        _obj_age(obj, now),
        names,
        images,
        selector_string(spec.get("selector")),
    ]


def _replicaset_cells(obj: Obj, now: float) -> list[Any]:
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    names, images = _containers_and_images(_d(spec.get("template")).get("spec"))
    return [
        _name(obj),
        _replicas(spec),
        _i(status.get("replicas")),
        _i(status.get("readyReplicas")),
        _obj_age(obj, now),
        names,
        images,
        format_label_selector(spec.get("selector")),
    ]


def _job_cells(obj: Obj, now: float) -> list[Any]:
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    succeeded = _i(status.get("succeeded"))
    if isinstance(spec.get("completions"), int):
        completions = f"{succeeded}/{spec['completions']}"
    else:
        parallelism = _i(spec.get("parallelism"))
        completions = f"{succeeded}/1 of {parallelism}" if parallelism > 1 else f"{succeeded}/1"
    start, end = parse_time(status.get("startTime")), parse_time(status.get("completionTime"))
    duration = ""
    if start is not None:
        duration = human_duration((end if end is not None else now) - start)
    conditions = status.get("conditions")
    if _has_condition(conditions, "Complete"):
        state = "Complete"
    elif _has_condition(conditions, "Failed"):
        state = "Failed"
    elif _meta(obj).get("deletionTimestamp"):
        state = "Terminating"
    elif _has_condition(conditions, "Suspended"):
        state = "Suspended"
    elif _has_condition(conditions, "FailureTarget"):
        state = "FailureTarget"
    else:
        state = "Running"
    names, images = _containers_and_images(_d(spec.get("template")).get("spec"))
    return [
        _name(obj),
        state,
        completions,
        duration,
        _obj_age(obj, now),
        names,
        images,
        format_label_selector(spec.get("selector")),
    ]


def _lease_cells(obj: Obj, now: float) -> list[Any]:
    return [_name(obj), _s(_d(obj.get("spec")).get("holderIdentity")), _obj_age(obj, now)]


def _apiservice_cells(obj: Obj, now: float) -> list[Any]:
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    service = "Local"
    if isinstance(spec.get("service"), dict):
        svc = spec["service"]
        service = f"{_s(svc.get('namespace'))}/{_s(svc.get('name'))}"
    available = "Unknown"
    for raw in _l(status.get("conditions")):
        cond = _d(raw)
        if cond.get("type") == "Available":
            cond_status, reason = _s(cond.get("status")), _s(cond.get("reason"))
            available = f"{cond_status} ({reason})" if cond_status != "True" and reason else cond_status
            break
    return [_name(obj), service, available, _obj_age(obj, now)]


def _binding_cells(obj: Obj, now: float) -> list[Any]:
    ref = _d(obj.get("roleRef"))
    users: list[str] = []
    groups: list[str] = []
    accounts: list[str] = []
    for raw in _l(obj.get("subjects")):
        subject = _d(raw)
        kind, name = subject.get("kind"), _s(subject.get("name"))
        if kind == "ServiceAccount":
            accounts.append(f"{_s(subject.get('namespace'))}/{name}")
        elif kind == "User":
            users.append(name)
        elif kind == "Group":
            groups.append(name)
    return [
        _name(obj),
        f"{_s(ref.get('kind'))}/{_s(ref.get('name'))}",
        _obj_age(obj, now),
        ", ".join(users),
        ", ".join(groups),
        ", ".join(accounts),
    ]


def _vap_cells(obj: Obj, now: float) -> list[Any]:
    spec = _d(obj.get("spec"))
    param_kind = "<unset>"
    if isinstance(spec.get("paramKind"), dict):
        pk = spec["paramKind"]
        param_kind = f"{_s(pk.get('apiVersion'))}/{_s(pk.get('kind'))}"
    return [_name(obj), len(_l(spec.get("validations"))), param_kind, _obj_age(obj, now)]


def _vap_binding_cells(obj: Obj, now: float) -> list[Any]:
    spec = _d(obj.get("spec"))
    param = "<unset>"
    if isinstance(spec.get("paramRef"), dict):
        ref = spec["paramRef"]
        if _s(ref.get("name")):
            # A param without a namespace may be cluster-scoped or in every namespace: upstream prints "*".
            param = f"{_s(ref.get('namespace')) or '*'}/{_s(ref.get('name'))}"
        elif isinstance(ref.get("selector"), dict):
            # Upstream prints the Go struct dump of the selector here; the selector syntax reads better.
            param = selector_string(ref["selector"])
    return [_name(obj), _s(spec.get("policyName")), param, _obj_age(obj, now)]


def _map_cells(obj: Obj, now: float) -> list[Any]:
    cells = _vap_cells(obj, now)
    cells[1] = len(_l(_d(obj.get("spec")).get("mutations")))
    return cells


def _webhook_configuration_cells(obj: Obj, now: float) -> list[Any]:
    return [_name(obj), len(_l(obj.get("webhooks"))), _obj_age(obj, now)]


def _scale_cells(obj: Obj, now: float) -> list[Any]:
    return [
        _name(obj),
        _i(_d(obj.get("spec")).get("replicas")),
        _i(_d(obj.get("status")).get("replicas")),
        _obj_age(obj, now),
    ]


_EVENT_COLUMNS = (
    column("Last Seen", description="Time since the event was last observed."),
    column("Type", description="Normal or Warning."),
    column("Reason", description="Short machine-readable cause."),
    column("Object", description="The object the event is about, as kind/name."),
    column("Subobject", description="Field path within the object, if any.", priority=1),
    column("Source", description="Component (and host) that reported the event.", priority=1),
    column("Message", description="Human-readable description."),
    column("First Seen", description="Time since the event was first observed.", priority=1),
    column("Count", description="How many times the event occurred.", priority=1),
    column("Name", description="Name of the event object.", fmt="name", priority=1),
)

PRINTERS: dict[tuple[str, str], Printer] = {
    ("", "Namespace"): Printer(
        (NAME, column("Status", description="Namespace phase."), AGE), _namespace_cells
    ),
    ("", "ConfigMap"): Printer(
        (NAME, column("Data", description="Number of data and binaryData keys."), AGE), _configmap_cells
    ),
    ("", "Secret"): Printer(
        (
            NAME,
            column("Type", description="Secret type."),
            column("Data", description="Number of data keys."),
            AGE,
        ),
        _secret_cells,
    ),
    ("", "ServiceAccount"): Printer(
        (NAME, column("Secrets", description="Number of secrets listed on the account."), AGE),
        _service_account_cells,
    ),
    ("", "Service"): Printer(
        (
            NAME,
            column("Type", description="Service type."),
            column("Cluster-IP", description="Primary cluster IP."),
            column("External-IP", description="External or load-balancer addresses."),
            column("Port(s)", description="Service ports, with node ports and protocols."),
            AGE,
            column("Selector", description="Pod label selector.", priority=1),
        ),
        _service_cells,
    ),
    ("", "Endpoints"): Printer(
        (NAME, column("Endpoints", description="Backend addresses and ports."), AGE), _endpoints_cells
    ),
    ("", "Pod"): Printer(
        (
            NAME,
            column("Ready", description="Ready containers out of all containers."),
            column("Status", description="Summary of the pod's state."),
            column("Restarts", description="Container restarts, with the time since the last one."),
            AGE,
            column("IP", description="Primary pod IP.", priority=1),
            column("Node", description="Node the pod is bound to.", priority=1),
            column("Nominated Node", description="Node the scheduler nominated for preemption.", priority=1),
            column("Readiness Gates", description="Readiness gates that are true, out of all.", priority=1),
        ),
        _pod_cells,
        _pod_conditions,
    ),
    ("", "Event"): Printer(_EVENT_COLUMNS, _event_cells_for("")),
    ("events.k8s.io", "Event"): Printer(_EVENT_COLUMNS, _event_cells_for("events.k8s.io")),
    ("", "Node"): Printer(
        (
            NAME,
            column("Status", description="Readiness and schedulability."),
            column("Roles", description="Roles from node-role labels."),
            AGE,
            column("Version", description="Kubelet version."),
            column("Internal-IP", description="First internal address.", priority=1),
            column("External-IP", description="First external address.", priority=1),
            column("OS-Image", description="Operating system image.", priority=1),
            column("Kernel-Version", description="Kernel version.", priority=1),
            column("Container-Runtime", description="Container runtime and version.", priority=1),
        ),
        _node_cells,
    ),
    ("apps", "Deployment"): Printer(
        (
            NAME,
            column("Ready", description="Ready replicas out of desired replicas."),
            column("Up-to-date", description="Replicas running the current template."),
            column("Available", description="Replicas available to serve."),
            AGE,
            CONTAINERS,
            IMAGES,
            column("Selector", description="Pod label selector.", priority=1),
        ),
        _deployment_cells,
    ),
    ("apps", "ReplicaSet"): Printer(
        (
            NAME,
            column("Desired", "integer", "Desired replicas."),
            column("Current", "integer", "Observed replicas."),
            column("Ready", "integer", "Ready replicas."),
            AGE,
            CONTAINERS,
            IMAGES,
            column("Selector", description="Pod label selector.", priority=1),
        ),
        _replicaset_cells,
    ),
    ("batch", "Job"): Printer(
        (
            NAME,
            column("Status", description="Summary of the job's conditions."),
            column("Completions", description="Succeeded pods out of required completions."),
            column("Duration", description="Time the job has been (or was) running."),
            AGE,
            CONTAINERS,
            IMAGES,
            column("Selector", description="Pod label selector.", priority=1),
        ),
        _job_cells,
    ),
    ("autoscaling", "Scale"): Printer(
        (
            column("Name", description="Name of the scaled object."),
            column("Desired", "integer", "Desired replicas."),
            column("Available", "integer", "Observed replicas."),
            AGE,
        ),
        _scale_cells,
    ),
    ("coordination.k8s.io", "Lease"): Printer(
        (NAME, column("Holder", description="Current holder identity."), AGE), _lease_cells
    ),
    ("apiregistration.k8s.io", "APIService"): Printer(
        (
            NAME,
            column("Service", description="namespace/name of the backing service, or Local."),
            column("Available", description="The Available condition, with its reason when not True."),
            AGE,
        ),
        _apiservice_cells,
    ),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"): Printer(
        (
            NAME,
            column("Validations", "integer", "Number of validation expressions."),
            column("ParamKind", description="apiVersion/kind of the parameter resource."),
            AGE,
        ),
        _vap_cells,
    ),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"): Printer(
        (
            NAME,
            column("PolicyName", description="The bound policy."),
            column("ParamRef", description="The parameter resource, as namespace/name or a selector."),
            AGE,
        ),
        _vap_binding_cells,
    ),
    **{
        ("admissionregistration.k8s.io", kind): Printer(
            (NAME, column("Webhooks", "integer", "Number of webhooks in the configuration."), AGE),
            _webhook_configuration_cells,
        )
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
    },
    ("admissionregistration.k8s.io", "MutatingAdmissionPolicy"): Printer(
        (
            NAME,
            column("Mutations", "integer", "Number of mutations."),
            column("ParamKind", description="apiVersion/kind of the parameter resource."),
            AGE,
        ),
        _map_cells,
    ),
    ("admissionregistration.k8s.io", "MutatingAdmissionPolicyBinding"): Printer(
        (
            NAME,
            column("PolicyName", description="The bound policy."),
            column("ParamRef", description="The parameter resource, as namespace/name or a selector."),
            AGE,
        ),
        _vap_binding_cells,
    ),
}

for _binding_kind in ("RoleBinding", "ClusterRoleBinding"):
    PRINTERS[("rbac.authorization.k8s.io", _binding_kind)] = Printer(
        (
            NAME,
            column("Role", description="kind/name of the referenced role."),
            AGE,
            column("Users", description="User subjects.", priority=1),
            column("Groups", description="Group subjects.", priority=1),
            column("ServiceAccounts", description="namespace/name of service account subjects.", priority=1),
        ),
        _binding_cells,
    )


def printer_for(group: str, kind: str) -> Printer:
    """The built-in printer for a kind (``ConfigMapList`` works too), else upstream's default convertor."""
    found = PRINTERS.get((group, kind))
    if found is None and kind.endswith("List"):
        found = PRINTERS.get((group, kind[: -len("List")]))
    return found or DEFAULT_PRINTER


# --------------------------------------------------------------------------------------------------
# JSONPath: the subset custom resource printer columns use (client-go util/jsonpath semantics)
# --------------------------------------------------------------------------------------------------
class JsonPathError(ValueError):
    """A path that cannot be parsed, or a comparison client-go would reject."""


@dataclass(frozen=True)
class _Field:
    name: str  # "*" for a wildcard over map values or list items


@dataclass(frozen=True)
class _Recursive:
    pass


@dataclass(frozen=True)
class _Index:
    start: int | None
    end: int | None
    step: int | None
    is_slice: bool


@dataclass(frozen=True)
class _Union:
    names: tuple[str, ...]


@dataclass(frozen=True)
class _Filter:
    left: tuple[Any, ...]
    op: str  # "exists", "==", "!=", "<", ">", "<=", ">="
    right: tuple[Any, ...] | None
    literal: Any


_Step = _Field | _Recursive | _Index | _Union | _Filter
_MISSING = object()
_FILTER_RE = re.compile(r"^([^!<>=]+)([!<>=]+)(.+?)$", re.S)
_SLICE_RE = re.compile(r"^(-?\d*)(?::(-?\d*))?(?::(-?\d*))?$")


@dataclass(frozen=True)
class JsonPath:
    """A compiled path; :meth:`find` returns every match, in document order."""

    source: str
    steps: tuple[_Step, ...]

    def find(self, data: Any) -> list[Any]:
        return _evaluate(self.steps, [data])


def compile_jsonpath(expr: str) -> JsonPath:
    """Parse a printer-column path such as ``.status.conditions[?(@.type=="Ready")].status``.

    Braces (``{.spec.x}``) and a leading ``$`` are accepted, as client-go does. Raises JsonPathError.
    """
    text = expr.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    return JsonPath(expr, tuple(_parse_steps(text)))


def _parse_steps(text: str) -> list[_Step]:
    steps: list[_Step] = []
    i = 0
    if text.startswith(("$", "@")):
        i = 1
    while i < len(text):
        ch = text[i]
        if text.startswith("..", i):
            steps.append(_Recursive())
            i += 2
            if i < len(text) and text[i] not in ".[":
                i = _parse_field(text, i, steps)
        elif ch == ".":
            i = _parse_field(text, i + 1, steps)
        elif ch == "[":
            i = _parse_bracket(text, i, steps)
        elif ch.isspace():
            i += 1
        else:
            raise JsonPathError(f"unrecognized character in path {text!r} at {i}")
    return steps


def _parse_field(text: str, i: int, steps: list[_Step]) -> int:
    name: list[str] = []
    while i < len(text) and text[i] not in ".[":
        if text[i] == "\\" and i + 1 < len(text):
            name.append(text[i + 1])
            i += 2
            continue
        name.append(text[i])
        i += 1
    field = "".join(name).strip()
    if not field:
        if i >= len(text):
            return i  # a bare "." selects the current object
        raise JsonPathError(f"empty field name in path {text!r}")
    steps.append(_Field(field))
    return i


def _matching_bracket(text: str, i: int) -> int:
    """Index of the ``]`` closing the bracket at ``i``, skipping quoted text and parentheses."""
    depth = 0
    quote = ""
    j = i + 1
    while j < len(text):
        ch = text[j]
        if quote:
            if ch == "\\":
                j += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "]" and depth == 0:
            return j
        j += 1
    raise JsonPathError(f"unclosed bracket in path {text!r}")


def _unquote(token: str) -> str | None:
    token = token.strip()
    if len(token) >= 2 and token[0] == token[-1] and token[0] in "'\"":
        return token[1:-1].replace("\\" + token[0], token[0])
    return None


def _parse_bracket(text: str, i: int, steps: list[_Step]) -> int:
    end = _matching_bracket(text, i)
    inner = text[i + 1 : end].strip()
    if inner.startswith("?(") and inner.endswith(")"):
        steps.append(_parse_filter(inner[2:-1]))
    elif inner == "*":
        steps.append(_Field("*"))
    elif inner and inner[0] in "'\"":
        parts = [_unquote(p) for p in _split_union(inner)]
        if any(p is None for p in parts):
            raise JsonPathError(f"bad quoted key in path {text!r}")
        names = tuple(p for p in parts if p is not None)
        steps.append(_Field(names[0]) if len(names) == 1 else _Union(names))
    else:
        m = _SLICE_RE.match(inner.replace(" ", ""))
        if m is None:
            raise JsonPathError(f"bad array index in path {text!r}")
        raw_start, raw_end, raw_step = m.group(1), m.group(2), m.group(3)
        is_slice = raw_end is not None
        if not is_slice and not raw_start:
            raise JsonPathError(f"empty array index in path {text!r}")
        steps.append(
            _Index(
                int(raw_start) if raw_start else None,
                int(raw_end) if raw_end else None,
                int(raw_step) if raw_step else None,
                is_slice,
            )
        )
    return end + 1


def _split_union(inner: str) -> list[str]:
    parts: list[str] = []
    quote = ""
    current: list[str] = []
    for ch in inner:
        if quote:
            current.append(ch)
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
            current.append(ch)
        elif ch == ",":
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def _parse_literal(token: str) -> Any:
    quoted = _unquote(token)
    if quoted is not None:
        return quoted
    token = token.strip()
    if token in ("true", "false"):
        return token == "true"
    try:
        return int(token)
    except ValueError:
        pass
    try:
        return float(token)
    except ValueError:
        return _MISSING


def _parse_operand(token: str) -> tuple[tuple[_Step, ...] | None, Any]:
    token = token.strip()
    if token.startswith(("@", "$")):
        return tuple(_parse_steps(token)), _MISSING
    literal = _parse_literal(token)
    if literal is _MISSING:
        raise JsonPathError(f"unrecognized filter operand {token!r}")
    return None, literal


def _parse_filter(body: str) -> _Filter:
    m = _FILTER_RE.match(body.strip())
    if m is None:
        left, _ = _parse_operand(body)
        if left is None:
            raise JsonPathError(f"filter needs a path: {body!r}")
        return _Filter(left, "exists", None, _MISSING)
    op = m.group(2)
    if op not in ("==", "!=", "<", ">", "<=", ">="):
        raise JsonPathError(f"unrecognized filter operator {op!r}")
    left, left_literal = _parse_operand(m.group(1))
    right, right_literal = _parse_operand(m.group(3))
    if left is None:  # literal on the left: swap so the path is evaluated
        flipped = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}.get(op, op)
        if right is None:
            raise JsonPathError(f"filter needs a path: {body!r}")
        return _Filter(right, flipped, None, left_literal)
    return _Filter(left, op, right, right_literal)


def _children(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [value[k] for k in sorted(value)]
    if isinstance(value, list):
        return list(value)
    return []


def _descendants(value: Any) -> list[Any]:
    out = [value]
    for child in _children(value):
        out.extend(_descendants(child))
    return out


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "other"


def _compare(left: Any, op: str, right: Any) -> bool:
    kind = _kind(left)
    if kind != _kind(right) or kind == "other":
        raise JsonPathError(f"incompatible types for comparison: {left!r} {op} {right!r}")
    if op == "==":
        return bool(left == right)
    if op == "!=":
        return bool(left != right)
    if kind == "bool":
        raise JsonPathError("invalid type for comparison")
    if op == "<":
        return bool(left < right)
    if op == ">":
        return bool(left > right)
    if op == "<=":
        return bool(left <= right)
    return bool(left >= right)


def _apply_index(value: list[Any], step: _Index) -> list[Any]:
    n = len(value)
    if not step.is_slice:
        assert step.start is not None
        index = step.start + n if step.start < 0 else step.start
        if index < 0 or index >= n:
            raise JsonPathError(f"array index out of bounds: index {step.start}, length {n}")
        return [value[index]]
    return value[slice(step.start, step.end, step.step)]


def _evaluate(steps: Sequence[_Step], values: list[Any]) -> list[Any]:
    for step in steps:
        out: list[Any] = []
        for value in values:
            if value is None:
                continue  # client-go skips nil values (a JSON null reached mid-path)
            if isinstance(step, _Field):
                if step.name == "*":
                    out.extend(_children(value))
                elif isinstance(value, dict) and step.name in value:
                    out.append(value[step.name])
            elif isinstance(step, _Union):
                if isinstance(value, dict):
                    out.extend(value[n] for n in step.names if n in value)
            elif isinstance(step, _Recursive):
                out.extend(_descendants(value))
            elif isinstance(step, _Index):
                if not isinstance(value, list):
                    raise JsonPathError("not an array or slice")
                out.extend(_apply_index(value, step))
            else:
                if not isinstance(value, list):
                    raise JsonPathError("not an array or slice and cannot be filtered")
                out.extend(item for item in value if _filter_matches(step, item))
        values = out
    return values


def _filter_matches(step: _Filter, item: Any) -> bool:
    lefts = _evaluate(step.left, [item])
    if not lefts:
        return False
    if len(lefts) > 1:
        raise JsonPathError("can only compare one element at a time")
    if step.op == "exists":
        return True
    if step.right is not None:
        rights = _evaluate(step.right, [item])
        if len(rights) != 1:
            raise JsonPathError("can only compare one element at a time")
        right = rights[0]
    else:
        right = step.literal
    return _compare(lefts[0], step.op, right)


# --------------------------------------------------------------------------------------------------
# Custom resource printer columns
# --------------------------------------------------------------------------------------------------
DEFAULT_CRD_COLUMNS: tuple[Obj, ...] = (
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
)
"""What apiextensions serves when a CRD version lists no additionalPrinterColumns."""


def crd_columns(columns: Sequence[Mapping[str, Any]]) -> list[ColumnDef]:
    """Column definitions for a CRD version: Name, then each additionalPrinterColumn in order."""
    defs = [NAME]
    for col in columns or DEFAULT_CRD_COLUMNS:
        path = _s(col.get("jsonPath"))
        defs.append(
            column(
                _s(col.get("name")),
                _s(col.get("type")) or "string",
                _s(col.get("description")) or f"Custom resource column at JSONPath {path}",
                fmt=_s(col.get("format")),
                priority=_i(col.get("priority")),
            )
        )
    return defs


def _go_float(value: float) -> str:
    """A float as Go's ``%v`` prints it: shortest digits, exponent form below 1e-4 and from 1e6."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    sign = "-" if value < 0 else ""
    parts = Decimal(repr(abs(value))).as_tuple()
    assert isinstance(parts.exponent, int)
    point = len(parts.digits) + parts.exponent  # position of the decimal point within the digits
    digits = "".join(map(str, parts.digits)).rstrip("0")
    exponent = point - 1
    if exponent < -4 or exponent >= 6:  # strconv 'g' with shortest precision decides with precision 6
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return f"{sign}{digits[:point]}.{digits[point:]}"


def _go_json(value: Any) -> str:
    """``encoding/json`` output: compact, map keys sorted, and <, >, & escaped as Go does."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _as_text(value: Any) -> str | None:
    """How client-go's JSONPath printer renders one value into a string column."""
    if value is None:
        return None
    if isinstance(value, dict | list):
        return _go_json(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _go_float(value)
    return str(value)


def crd_cell(column_type: str, value: Any, now: float) -> Any:
    """One custom-resource cell from the first match: typed as the column says, None (``<none>``) otherwise."""
    if value is None:
        return None
    if column_type == "string":
        return _as_text(value)
    if column_type == "integer":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return int(value)
    if column_type == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value)
    if column_type == "boolean":
        return value if isinstance(value, bool) else None
    if column_type == "date":
        if not isinstance(value, str):
            return None
        t = parse_time(value)
        if t is None:
            return "<invalid>"
        return human_duration(now - t)
    return None


def crd_cells(paths: Sequence[tuple[JsonPath | None, str]], obj: Obj, now: float) -> list[Any]:
    cells: list[Any] = [_name(obj)]
    for path, column_type in paths:
        if path is None:
            cells.append(None)
            continue
        try:
            found = path.find(obj)
        except JsonPathError:
            found = []
        cells.append(crd_cell(column_type, found[0], now) if found else None)
    return cells


def _crd_printer(columns: Sequence[Mapping[str, Any]]) -> Printer:
    compiled: list[tuple[JsonPath | None, str]] = []
    for col in columns or DEFAULT_CRD_COLUMNS:
        try:
            path: JsonPath | None = compile_jsonpath(_s(col.get("jsonPath")))
        except JsonPathError:
            path = None  # CRD validation rejects these; render an empty cell rather than fail the list
        compiled.append((path, _s(col.get("type")) or "string"))
    return Printer(tuple(crd_columns(columns)), lambda obj, now: crd_cells(compiled, obj, now))


# --------------------------------------------------------------------------------------------------
# The Table
# --------------------------------------------------------------------------------------------------
def _row_object(obj: Obj, include_object: str, api_version: str) -> Obj | None:
    if include_object == "Object":
        return obj
    if include_object == "None":
        return None
    return {"kind": "PartialObjectMetadata", "apiVersion": api_version, "metadata": _meta(obj)}


def build_table(
    kind: str,
    group: str,
    objects: Iterable[Obj],
    *,
    include_object: str = "Metadata",
    now: float,
    printer_columns: Sequence[Mapping[str, Any]] | None = None,
    with_columns: bool = True,
    list_meta: Mapping[str, Any] | None = None,
    api_version: str = TABLE_API_VERSION,
) -> Obj:
    """A ``meta.k8s.io`` Table of ``objects`` (items of one ``group``/``kind``), as kubectl asks with ``as=Table``.

    * ``printer_columns``: a custom resource version's ``additionalPrinterColumns`` (an empty list means the
      default Age column); None selects the built-in printer for ``(group, kind)`` or the default convertor.
    * ``include_object``: ``Metadata`` (also ``""``) puts PartialObjectMetadata in ``rows[].object``,
      ``Object`` the whole object, ``None`` a JSON null. Anything else is a 400, worded as upstream.
    * ``with_columns=False`` is for watch events after the first: ``columnDefinitions`` is then null, as
      upstream's ``noHeaders`` gives, and kubectl keeps the columns it already has.
    * ``list_meta`` (resourceVersion, continue, remainingItemCount) becomes the Table's metadata; without it
      a single object's resourceVersion is used.
    * ``api_version``: ``meta.k8s.io/v1`` or ``meta.k8s.io/v1beta1``, whichever the client negotiated.
    """
    if include_object == "":
        include_object = "Metadata"
    if include_object not in INCLUDE_OBJECT_VALUES:
        raise bad_request(f"unrecognized includeObject value: {json.dumps(include_object)}")
    printer = _crd_printer(printer_columns) if printer_columns is not None else printer_for(group, kind)
    items = list(objects)

    rows: list[Obj] = []
    for obj in items:
        row: Obj = {"cells": printer.cells(obj, now)}
        if printer.conditions is not None:
            conditions = printer.conditions(obj)
            if conditions:
                row["conditions"] = conditions
        row["object"] = _row_object(obj, include_object, api_version)
        rows.append(row)

    metadata: Obj = {}
    if list_meta is not None:
        for key in ("resourceVersion", "continue", "remainingItemCount"):
            if list_meta.get(key) not in (None, ""):
                metadata[key] = list_meta[key]
    elif len(items) == 1:
        rv = _meta(items[0]).get("resourceVersion")
        if rv:
            metadata["resourceVersion"] = rv

    return {
        "kind": "Table",
        "apiVersion": api_version,
        "metadata": metadata,
        "columnDefinitions": [dict(c) for c in printer.columns] if with_columns else None,
        "rows": rows,
    }
