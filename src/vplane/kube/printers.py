"""Built-in printers: kubectl's columns for every built-in kind, as upstream's server prints them.

Column names, types, priorities and descriptions, and the cell formats, follow kubernetes
``pkg/printers/internalversion/printers.go`` (descriptions are the fields' API documentation where upstream
uses it, read from the generated OpenAPI data), the APIService convertor (kube-aggregator) and upstream's
default convertor for kinds without a printer. The server renders the wide (``priority > 0``) cells too;
kubectl hides them unless ``-o wide``.
"""

from __future__ import annotations

from typing import Any

from vplane.kube.tablecells import (
    AGE,
    CONTAINERS,
    DEFAULT_PRINTER,
    IMAGES,
    NAME,
    CellFn,
    Obj,
    Printer,
    age,
    column,
    containers_and_images,
    d,
    doc,
    format_label_selector,
    format_labels,
    human_duration,
    i,
    join_host_port,
    lst,
    meta,
    name_of,
    obj_age,
    parse_time,
    s,
    selector_string,
)

CORE = "io.k8s.api.core.v1"
APPS = "io.k8s.api.apps.v1"
BATCH = "io.k8s.api.batch.v1"
AUTOSCALING = "io.k8s.api.autoscaling.v2"
NETWORKING = "io.k8s.api.networking.v1"
STORAGE = "io.k8s.api.storage.v1"
SCHEDULING = "io.k8s.api.scheduling.v1"
DISCOVERY = "io.k8s.api.discovery.v1"
CERTIFICATES = "io.k8s.api.certificates.v1"
FLOWCONTROL = "io.k8s.api.flowcontrol.v1"
RESOURCE = "io.k8s.api.resource.v1"
RBAC = "io.k8s.api.rbac.v1"
COORDINATION = "io.k8s.api.coordination.v1"
SELECTOR_P1 = "Selector"


def _namespace_cells(obj: Obj, now: float) -> list[Any]:
    # Upstream sets phase Active on create; fall back to it for objects stored without a status.
    phase = s(d(obj.get("status")).get("phase")) or "Active"
    return [name_of(obj), phase, obj_age(obj, now)]


def _configmap_cells(obj: Obj, now: float) -> list[Any]:
    count = len(d(obj.get("data"))) + len(d(obj.get("binaryData")))
    return [name_of(obj), count, obj_age(obj, now)]


def _secret_cells(obj: Obj, now: float) -> list[Any]:
    return [name_of(obj), s(obj.get("type")) or "Opaque", len(d(obj.get("data"))), obj_age(obj, now)]


def _service_account_cells(obj: Obj, now: float) -> list[Any]:
    return [name_of(obj), len(lst(obj.get("secrets"))), obj_age(obj, now)]


def _service_external_ip(spec: Obj, status: Obj) -> str:
    svc_type = s(spec.get("type")) or "ClusterIP"
    external = [s(ip) for ip in lst(spec.get("externalIPs"))]
    if svc_type in ("ClusterIP", "NodePort"):
        return ",".join(external) if external else "<none>"
    if svc_type == "LoadBalancer":
        found: set[str] = set()
        for ing in lst(d(status.get("loadBalancer")).get("ingress")):
            entry = d(ing)
            value = s(entry.get("ip")) or s(entry.get("hostname"))
            if value:
                found.add(value)
        lb = ",".join(sorted(found))  # wide output: never clipped
        if external:
            return ",".join([*(lb.split(",") if lb else []), *external])
        return lb or "<pending>"
    if svc_type == "ExternalName":
        return s(spec.get("externalName"))
    return "<unknown>"


def _service_ports(spec: Obj) -> str:
    pieces = []
    for p in lst(spec.get("ports")):
        port = d(p)
        protocol = s(port.get("protocol")) or "TCP"
        node_port = i(port.get("nodePort"))
        if node_port > 0:
            pieces.append(f"{i(port.get('port'))}:{node_port}/{protocol}")
        else:
            pieces.append(f"{i(port.get('port'))}/{protocol}")
    return ",".join(pieces) or "<none>"


def _service_cells(obj: Obj, now: float) -> list[Any]:
    spec, status = d(obj.get("spec")), d(obj.get("status"))
    cluster_ips = lst(spec.get("clusterIPs"))
    internal = s(cluster_ips[0]) if cluster_ips else s(spec.get("clusterIP"))
    return [
        name_of(obj),
        s(spec.get("type")) or "ClusterIP",
        internal or "<none>",
        _service_external_ip(spec, status),
        _service_ports(spec),
        obj_age(obj, now),
        format_labels(d(spec.get("selector"))),
    ]


def format_endpoints(endpoints: Obj) -> str:
    """The ENDPOINTS cell: up to three ``ip:port`` entries, then ``+ N more...``."""
    subsets = lst(endpoints.get("subsets"))
    if not subsets:
        return "<none>"
    shown: list[str] = []
    limit, more, count = 3, False, 0
    for raw in subsets:
        subset = d(raw)
        addresses = [s(d(a).get("ip")) for a in lst(subset.get("addresses"))]
        ports = [d(p) for p in lst(subset.get("ports"))]
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
                shown.append(join_host_port(ip, i(port.get("port"))))
    text = ",".join(shown)
    return f"{text} + {count - limit} more..." if more else text


def _endpoints_cells(obj: Obj, now: float) -> list[Any]:
    return [name_of(obj), format_endpoints(obj), obj_age(obj, now)]


def _terminated_text(terminated: Obj, prefix: str) -> str:
    reason = s(terminated.get("reason"))
    if reason:
        return prefix + reason
    signal = i(terminated.get("signal"))
    if signal != 0:
        return f"{prefix}Signal:{signal}"
    return f"{prefix}ExitCode:{i(terminated.get('exitCode'))}"


def _last_termination(status: Obj) -> float | None:
    finished = d(d(status.get("lastState")).get("terminated")).get("finishedAt")
    return parse_time(finished)


def _later(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def _has_condition(conditions: Any, cond_type: str, status: str = "True") -> bool:
    return any(d(c).get("type") == cond_type and d(c).get("status") == status for c in lst(conditions))


def pod_status_cells(pod: Obj, now: float) -> tuple[str, str, str]:
    """READY, STATUS and RESTARTS for a pod, with upstream's precedence of init, container and deletion states."""
    spec, status = d(pod.get("spec")), d(pod.get("status"))
    init_specs = [d(c) for c in lst(spec.get("initContainers"))]
    restartable = {s(c.get("name")) for c in init_specs if c.get("restartPolicy") == "Always"}
    total = len(lst(spec.get("containers"))) + sum(
        1 for c in init_specs if c.get("restartPolicy") == "Always"
    )
    ready = 0
    restarts = restartable_restarts = 0
    last_restart: float | None = None
    last_restartable: float | None = None

    phase = s(status.get("phase"))
    reason = s(status.get("reason")) or phase
    for cond in lst(status.get("conditions")):
        c = d(cond)
        if c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"

    initializing = False
    for index, raw in enumerate(lst(status.get("initContainerStatuses"))):
        cs = d(raw)
        restarts += i(cs.get("restartCount"))
        last_restart = _later(last_restart, _last_termination(cs))
        is_restartable = s(cs.get("name")) in restartable
        if is_restartable:
            restartable_restarts += i(cs.get("restartCount"))
            last_restartable = _later(last_restartable, _last_termination(cs))
        state = d(cs.get("state"))
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if isinstance(terminated, dict) and i(terminated.get("exitCode")) == 0:
            continue
        if is_restartable and cs.get("started") is True:
            if cs.get("ready") is True:
                ready += 1
            continue
        if isinstance(terminated, dict):
            reason = _terminated_text(terminated, "Init:")
        elif isinstance(waiting, dict) and s(waiting.get("reason")) not in ("", "PodInitializing"):
            reason = "Init:" + s(waiting.get("reason"))
        else:
            reason = f"Init:{index}/{len(init_specs)}"
        initializing = True
        break

    if not initializing or _has_condition(status.get("conditions"), "Initialized"):
        restarts, last_restart = restartable_restarts, last_restartable
        has_running = False
        for raw in reversed(lst(status.get("containerStatuses"))):
            cs = d(raw)
            restarts += i(cs.get("restartCount"))
            last_restart = _later(last_restart, _last_termination(cs))
            state = d(cs.get("state"))
            terminated, waiting = state.get("terminated"), state.get("waiting")
            if isinstance(waiting, dict) and s(waiting.get("reason")):
                reason = s(waiting.get("reason"))
            elif isinstance(terminated, dict):
                reason = _terminated_text(terminated, "")
            elif cs.get("ready") is True and isinstance(state.get("running"), dict):
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            reason = "Running" if _has_condition(status.get("conditions"), "Ready") else "NotReady"

    if meta(pod).get("deletionTimestamp"):
        if status.get("reason") == "NodeLost":
            reason = "Unknown"
        elif phase not in ("Succeeded", "Failed"):
            reason = "Terminating"

    restarts_text = str(restarts)
    if restarts != 0 and last_restart is not None:
        restarts_text = f"{restarts} ({human_duration(now - last_restart)} ago)"
    return f"{ready}/{total}", reason, restarts_text


def _pod_cells(obj: Obj, now: float) -> list[Any]:
    spec, status = d(obj.get("spec")), d(obj.get("status"))
    ready, reason, restarts = pod_status_cells(obj, now)
    pod_ips = lst(status.get("podIPs"))
    # Upstream reads podIPs only (its strategy always fills it); podIP covers objects stored without it.
    pod_ip = s(d(pod_ips[0]).get("ip")) if pod_ips else s(status.get("podIP"))
    gates = lst(spec.get("readinessGates"))
    readiness = "<none>"
    if gates:
        conditions = {
            s(d(c).get("type")): d(c).get("status") for c in reversed(lst(status.get("conditions")))
        }
        true_count = sum(1 for g in gates if conditions.get(s(d(g).get("conditionType"))) == "True")
        readiness = f"{true_count}/{len(gates)}"
    return [
        name_of(obj),
        ready,
        reason,
        restarts,
        obj_age(obj, now),
        pod_ip or "<none>",
        s(spec.get("nodeName")) or "<none>",
        s(status.get("nominatedNodeName")) or "<none>",
        readiness,
    ]


def _pod_conditions(obj: Obj) -> list[Obj]:
    # Row conditions tell clients a pod is finished (metav1.RowCompleted), worded as upstream.
    phase = d(obj.get("status")).get("phase")
    if phase == "Succeeded":
        return [
            {
                "type": "Completed",
                "status": "True",
                "reason": "Succeeded",
                "message": "The pod has completed successfully.",
            }
        ]
    if phase == "Failed":
        return [{"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}]
    return []


def _event_source(source: Obj, controller: str, instance: str) -> str:
    component = s(source.get("component")) or controller
    host = s(source.get("host")) or instance
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
        count = i(obj.get("count"))
        series = obj.get("series")
        if isinstance(series, dict):
            last = age(series.get("lastObservedTime"), now)
            count = i(series.get("count"))
        elif count == 0:
            count = 1  # singleton events in the new API carry no count
        involved = d(obj.get("involvedObject"))
        kind = s(involved.get("kind")).lower()
        target = f"{kind}/{s(involved.get('name'))}" if involved.get("name") else kind
        return [
            last,
            s(obj.get("type")),
            s(obj.get("reason")),
            target,
            s(involved.get("fieldPath")),
            _event_source(
                d(obj.get("source")), s(obj.get("reportingComponent")), s(obj.get("reportingInstance"))
            ),
            s(obj.get("message")).strip(),
            first,
            count,
            name_of(raw),
        ]

    return cells


def _node_cells(obj: Obj, now: float) -> list[Any]:
    spec, status = d(obj.get("spec")), d(obj.get("status"))
    states: list[str] = []
    ready = [c for c in map(d, lst(status.get("conditions"))) if c.get("type") == "Ready"]
    if ready:
        states.append("Ready" if ready[-1].get("status") == "True" else "NotReady")
    else:
        states.append("Unknown")
    if spec.get("unschedulable") is True:
        states.append("SchedulingDisabled")
    roles: set[str] = set()
    for key, value in d(meta(obj).get("labels")).items():
        if key.startswith("node-role.kubernetes.io/") and len(key) > len("node-role.kubernetes.io/"):
            roles.add(key[len("node-role.kubernetes.io/") :])
        elif key == "kubernetes.io/role" and value:
            roles.add(s(value))
    info = d(status.get("nodeInfo"))
    addresses = [d(a) for a in lst(status.get("addresses"))]

    def address(kind: str) -> str:
        return next((s(a.get("address")) for a in addresses if a.get("type") == kind), "<none>")

    return [
        name_of(obj),
        ",".join(states),
        ",".join(sorted(roles)) or "<none>",
        obj_age(obj, now),
        s(info.get("kubeletVersion")),
        address("InternalIP"),
        address("ExternalIP"),
        s(info.get("osImage")) or "<unknown>",
        s(info.get("kernelVersion")) or "<unknown>",
        s(info.get("containerRuntimeVersion")) or "<unknown>",
    ]


def _replicas(spec: Obj) -> int:
    # Upstream defaults spec.replicas to 1 before anything is stored.
    return i(spec.get("replicas"), 1)


def _deployment_cells(obj: Obj, now: float) -> list[Any]:
    spec, status = d(obj.get("spec")), d(obj.get("status"))
    names, images = containers_and_images(d(spec.get("template")).get("spec"))
    return [
        name_of(obj),
        f"{i(status.get('readyReplicas'))}/{_replicas(spec)}",
        i(status.get("updatedReplicas")),
        i(status.get("availableReplicas")),
        obj_age(obj, now),
        names,
        images,
        selector_string(spec.get("selector")),
    ]


def _replicaset_cells(obj: Obj, now: float) -> list[Any]:
    spec, status = d(obj.get("spec")), d(obj.get("status"))
    names, images = containers_and_images(d(spec.get("template")).get("spec"))
    return [
        name_of(obj),
        _replicas(spec),
        i(status.get("replicas")),
        i(status.get("readyReplicas")),
        obj_age(obj, now),
        names,
        images,
        format_label_selector(spec.get("selector")),
    ]


def _job_cells(obj: Obj, now: float) -> list[Any]:
    spec, status = d(obj.get("spec")), d(obj.get("status"))
    succeeded = i(status.get("succeeded"))
    if isinstance(spec.get("completions"), int):
        completions = f"{succeeded}/{spec['completions']}"
    else:
        parallelism = i(spec.get("parallelism"))
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
    elif meta(obj).get("deletionTimestamp"):
        state = "Terminating"
    elif _has_condition(conditions, "Suspended"):
        state = "Suspended"
    elif _has_condition(conditions, "FailureTarget"):
        state = "FailureTarget"
    else:
        state = "Running"
    names, images = containers_and_images(d(spec.get("template")).get("spec"))
    return [
        name_of(obj),
        state,
        completions,
        duration,
        obj_age(obj, now),
        names,
        images,
        format_label_selector(spec.get("selector")),
    ]


def _lease_cells(obj: Obj, now: float) -> list[Any]:
    return [name_of(obj), s(d(obj.get("spec")).get("holderIdentity")), obj_age(obj, now)]


def _apiservice_cells(obj: Obj, now: float) -> list[Any]:
    spec, status = d(obj.get("spec")), d(obj.get("status"))
    service = "Local"
    if isinstance(spec.get("service"), dict):
        svc = spec["service"]
        service = f"{s(svc.get('namespace'))}/{s(svc.get('name'))}"
    available = "Unknown"
    for raw in lst(status.get("conditions")):
        cond = d(raw)
        if cond.get("type") == "Available":
            cond_status, reason = s(cond.get("status")), s(cond.get("reason"))
            available = f"{cond_status} ({reason})" if cond_status != "True" and reason else cond_status
            break
    return [name_of(obj), service, available, obj_age(obj, now)]


def _binding_cells(obj: Obj, now: float) -> list[Any]:
    ref = d(obj.get("roleRef"))
    users: list[str] = []
    groups: list[str] = []
    accounts: list[str] = []
    for raw in lst(obj.get("subjects")):
        subject = d(raw)
        kind, name = subject.get("kind"), s(subject.get("name"))
        if kind == "ServiceAccount":
            accounts.append(f"{s(subject.get('namespace'))}/{name}")
        elif kind == "User":
            users.append(name)
        elif kind == "Group":
            groups.append(name)
    return [
        name_of(obj),
        f"{s(ref.get('kind'))}/{s(ref.get('name'))}",
        obj_age(obj, now),
        ", ".join(users),
        ", ".join(groups),
        ", ".join(accounts),
    ]


def _vap_cells(obj: Obj, now: float) -> list[Any]:
    spec = d(obj.get("spec"))
    param_kind = "<unset>"
    if isinstance(spec.get("paramKind"), dict):
        pk = spec["paramKind"]
        param_kind = f"{s(pk.get('apiVersion'))}/{s(pk.get('kind'))}"
    return [name_of(obj), len(lst(spec.get("validations"))), param_kind, obj_age(obj, now)]


def _map_cells(obj: Obj, now: float) -> list[Any]:
    cells = _vap_cells(obj, now)
    cells[1] = len(lst(d(obj.get("spec")).get("mutations")))
    return cells


def _vap_binding_cells(obj: Obj, now: float) -> list[Any]:
    spec = d(obj.get("spec"))
    param = "<unset>"
    if isinstance(spec.get("paramRef"), dict):
        ref = spec["paramRef"]
        if s(ref.get("name")):
            # A param without a namespace may be cluster-scoped or in every namespace: upstream prints "*".
            param = f"{s(ref.get('namespace')) or '*'}/{s(ref.get('name'))}"
        elif isinstance(ref.get("selector"), dict):
            # Upstream prints the Go struct dump of the selector here; the selector syntax reads better.
            param = selector_string(ref["selector"])
    return [name_of(obj), s(spec.get("policyName")), param, obj_age(obj, now)]


def _scale_cells(obj: Obj, now: float) -> list[Any]:
    return [
        name_of(obj),
        i(d(obj.get("spec")).get("replicas")),
        i(d(obj.get("status")).get("replicas")),
        obj_age(obj, now),
    ]


def access_modes(modes: Any) -> str:
    """``GetAccessModesAsString``: RWO, ROX, RWX, RWOP in that order, each once."""
    present = set(lst(modes))
    short = (
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    )
    return ",".join(abbrev for mode, abbrev in short if mode in present)


def _storage_class(obj: Obj) -> str:
    """The beta annotation wins over ``spec.storageClassName``, as upstream's helpers read it."""
    annotated = d(meta(obj).get("annotations")).get("volume.beta.kubernetes.io/storage-class")
    if isinstance(annotated, str):
        return annotated
    return s(d(obj.get("spec")).get("storageClassName"))


def _pv_cells(obj: Obj, now: float) -> list[Any]:
    spec, status = d(obj.get("spec")), d(obj.get("status"))
    claim = ""
    if isinstance(spec.get("claimRef"), dict):
        ref = spec["claimRef"]
        claim = f"{s(ref.get('namespace'))}/{s(ref.get('name'))}"
    phase = "Terminating" if meta(obj).get("deletionTimestamp") else s(status.get("phase"))
    return [
        name_of(obj),
        s(d(spec.get("capacity")).get("storage")) or "0",
        access_modes(spec.get("accessModes")),
        s(spec.get("persistentVolumeReclaimPolicy")),
        phase,
        claim,
        _storage_class(obj),
        s(spec.get("volumeAttributesClassName")) or "<unset>",
        s(status.get("reason")),
        obj_age(obj, now),
        s(spec.get("volumeMode")) or "<unset>",
    ]


def _pvc_cells(obj: Obj, now: float) -> list[Any]:
    spec, status = d(obj.get("spec")), d(obj.get("status"))
    phase = "Terminating" if meta(obj).get("deletionTimestamp") else s(status.get("phase"))
    capacity = modes = ""
    if s(spec.get("volumeName")):
        modes = access_modes(status.get("accessModes"))
        capacity = s(d(status.get("capacity")).get("storage")) or "0"
    return [
        name_of(obj),
        phase,
        s(spec.get("volumeName")),
        capacity,
        modes,
        _storage_class(obj),
        s(spec.get("volumeAttributesClassName")) or "<unset>",
        obj_age(obj, now),
        s(spec.get("volumeMode")) or "<unset>",
    ]


def _pod_template_cells(obj: Obj, now: float) -> list[Any]:
    template = d(obj.get("template"))
    names, images = containers_and_images(template.get("spec"))
    return [name_of(obj), names, images, format_labels(d(d(template.get("metadata")).get("labels")))]


def _int_or_string(value: Any) -> str:
    return "N/A" if value is None else str(value)


def _pdb_cells(obj: Obj, now: float) -> list[Any]:
    spec, status = d(obj.get("spec")), d(obj.get("status"))
    return [
        name_of(obj),
        _int_or_string(spec.get("minAvailable")),
        _int_or_string(spec.get("maxUnavailable")),
        i(status.get("disruptionsAllowed")),
        obj_age(obj, now),
    ]


def _rc_cells(obj: Obj, now: float) -> list[Any]:
    spec, status = d(obj.get("spec")), d(obj.get("status"))
    names, images = containers_and_images(d(spec.get("template")).get("spec"))
    return [
        name_of(obj),
        _replicas(spec),
        i(status.get("replicas")),
        i(status.get("readyReplicas")),
        obj_age(obj, now),
        names,
        images,
        format_labels(d(spec.get("selector"))),
    ]


def _daemonset_cells(obj: Obj, now: float) -> list[Any]:
    spec, status = d(obj.get("spec")), d(obj.get("status"))
    template_spec = d(d(spec.get("template")).get("spec"))
    names, images = containers_and_images(template_spec)
    return [
        name_of(obj),
        i(status.get("desiredNumberScheduled")),
        i(status.get("currentNumberScheduled")),
        i(status.get("numberReady")),
        i(status.get("updatedNumberScheduled")),
        i(status.get("numberAvailable")),
        format_labels(d(template_spec.get("nodeSelector"))),
        obj_age(obj, now),
        names,
        images,
        format_label_selector(spec.get("selector")),
    ]


def _statefulset_cells(obj: Obj, now: float) -> list[Any]:
    spec, status = d(obj.get("spec")), d(obj.get("status"))
    names, images = containers_and_images(d(spec.get("template")).get("spec"))
    return [
        name_of(obj),
        f"{i(status.get('readyReplicas'))}/{_replicas(spec)}",
        obj_age(obj, now),
        names,
        images,
    ]


def _bool_text(value: Any) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    return "<unset>"


def _cronjob_cells(obj: Obj, now: float) -> list[Any]:
    spec, status = d(obj.get("spec")), d(obj.get("status"))
    job_spec = d(d(spec.get("jobTemplate")).get("spec"))
    names, images = containers_and_images(d(job_spec.get("template")).get("spec"))
    last = status.get("lastScheduleTime")
    return [
        name_of(obj),
        s(spec.get("schedule")),
        s(spec.get("timeZone")) or "<none>",
        _bool_text(spec.get("suspend")),
        len(lst(status.get("active"))),
        age(last, now) if last else "<none>",
        obj_age(obj, now),
        names,
        images,
        format_label_selector(job_spec.get("selector")),
    ]


def _ingress_hosts(rules: list[Any]) -> str:
    shown: list[str] = []
    more = False
    for rule in rules:
        if len(shown) == 3:
            more = True
        host = s(d(rule).get("host"))
        if not more and host:
            shown.append(host)
    if not shown:
        return "*"
    text = ",".join(shown)
    return f"{text} + {len(rules) - 3} more..." if more else text


def _load_balancer(ingress: Any) -> str:
    found: list[str] = []
    for entry in lst(ingress):
        value = s(d(entry).get("ip")) or s(d(entry).get("hostname"))
        if value and value not in found:
            found.append(value)
    return ",".join(found)


def _ingress_cells(obj: Obj, now: float) -> list[Any]:
    spec, status = d(obj.get("spec")), d(obj.get("status"))
    return [
        name_of(obj),
        s(spec.get("ingressClassName")) or "<none>",
        _ingress_hosts(lst(spec.get("rules"))),
        _load_balancer(d(status.get("loadBalancer")).get("ingress")),
        "80, 443" if lst(spec.get("tls")) else "80",
        obj_age(obj, now),
    ]


def _ingress_class_cells(obj: Obj, now: float) -> list[Any]:
    spec = d(obj.get("spec"))
    parameters = "<none>"
    params = spec.get("parameters")
    if isinstance(params, dict):
        parameters = s(params.get("kind"))
        if params.get("apiGroup") is not None:
            parameters += "." + s(params.get("apiGroup"))
        parameters += "/" + s(params.get("name"))
    return [name_of(obj), s(spec.get("controller")), parameters, obj_age(obj, now)]


def _network_policy_cells(obj: Obj, now: float) -> list[Any]:
    return [
        name_of(obj),
        format_label_selector(d(obj.get("spec")).get("podSelector") or {}),
        obj_age(obj, now),
    ]


def _quantity_text(value: Any) -> str:
    return s(value) if isinstance(value, str) else str(value) if value is not None else "<unknown>"


def hpa_targets(specs: list[Any], statuses: list[Any]) -> str:
    """``formatHPAMetrics``: each metric as current/target, at most two, then ``+ N more...``."""
    if not specs:
        return "<none>"
    shown: list[str] = []
    for index, raw in enumerate(specs):
        spec = d(raw)
        kind = spec.get("type")
        status = d(statuses[index]) if index < len(statuses) else {}
        key = {
            "External": "external",
            "Pods": "pods",
            "Object": "object",
            "Resource": "resource",
            "ContainerResource": "containerResource",
        }.get(str(kind))
        if key is None:
            shown.append("<unknown type>")
            continue
        source, current_source = d(spec.get(key)), d(status.get(key))
        target, current = d(source.get("target")), d(current_source.get("current"))
        if key in ("external", "object"):
            if target.get("averageValue") is not None:
                now_value = (
                    _quantity_text(current.get("averageValue"))
                    if current.get("averageValue") is not None
                    else "<unknown>"
                )
                shown.append(f"{now_value}/{_quantity_text(target.get('averageValue'))} (avg)")
            else:
                now_value = _quantity_text(current.get("value")) if current_source else "<unknown>"
                shown.append(f"{now_value}/{_quantity_text(target.get('value'))}")
        elif key == "pods":
            now_value = _quantity_text(current.get("averageValue")) if current_source else "<unknown>"
            shown.append(f"{now_value}/{_quantity_text(target.get('averageValue'))}")
        else:
            resource = s(source.get("name"))
            if target.get("averageValue") is not None:
                now_value = _quantity_text(current.get("averageValue")) if current_source else "<unknown>"
                shown.append(f"{resource}: {now_value}/{_quantity_text(target.get('averageValue'))}")
            else:
                utilization = current.get("averageUtilization")
                now_value = f"{utilization}%" if current_source and utilization is not None else "<unknown>"
                wanted = target.get("averageUtilization")
                shown.append(f"{resource}: {now_value}/{f'{wanted}%' if wanted is not None else '<auto>'}")
    if len(shown) > 2:
        return f"{', '.join(shown[:2])} + {len(shown) - 2} more..."
    return ", ".join(shown)


def _hpa_cells(obj: Obj, now: float) -> list[Any]:
    spec, status = d(obj.get("spec")), d(obj.get("status"))
    ref = d(spec.get("scaleTargetRef"))
    minimum = spec.get("minReplicas")
    return [
        name_of(obj),
        f"{s(ref.get('kind'))}/{s(ref.get('name'))}",
        hpa_targets(lst(spec.get("metrics")), lst(status.get("currentMetrics"))),
        str(minimum) if isinstance(minimum, int) else "<unset>",
        i(spec.get("maxReplicas")),
        i(status.get("currentReplicas")),
        obj_age(obj, now),
    ]


def csr_condition(obj: Obj) -> str:
    """``extractCSRStatus``: Denied or Approved or Pending, then Failed and Issued."""
    kinds = {d(c).get("type") for c in lst(d(obj.get("status")).get("conditions"))}
    text = "Denied" if "Denied" in kinds else "Approved" if "Approved" in kinds else "Pending"
    if "Failed" in kinds:
        text += ",Failed"
    if d(obj.get("status")).get("certificate"):
        text += ",Issued"
    return text


def _csr_cells(obj: Obj, now: float) -> list[Any]:
    spec = d(obj.get("spec"))
    seconds = spec.get("expirationSeconds")
    requested = human_duration(seconds) if isinstance(seconds, int) else "<none>"
    return [
        name_of(obj),
        obj_age(obj, now),
        s(spec.get("signerName")) or "<none>",
        s(spec.get("username")),
        requested,
        csr_condition(obj),
    ]


def _storage_class_cells(obj: Obj, now: float) -> list[Any]:
    name = name_of(obj)
    annotations = d(meta(obj).get("annotations"))
    default = "storageclass.kubernetes.io/is-default-class"
    beta = "storageclass.beta.kubernetes.io/is-default-class"
    if annotations.get(default) == "true" or annotations.get(beta) == "true":
        name += " (default)"
    return [
        name,
        s(obj.get("provisioner")),
        s(obj.get("reclaimPolicy")) or "Delete",
        s(obj.get("volumeBindingMode")) or "Immediate",
        obj.get("allowVolumeExpansion") is True,
        obj_age(obj, now),
    ]


def _controller_revision_cells(obj: Obj, now: float) -> list[Any]:
    controller = "<none>"
    for ref in lst(meta(obj).get("ownerReferences")):
        ref = d(ref)
        if ref.get("controller") is True:
            group = s(ref.get("apiVersion")).rpartition("/")[0]
            kind = s(ref.get("kind")).lower()
            controller = f"{kind}.{group}/{s(ref.get('name'))}" if group else f"{kind}/{s(ref.get('name'))}"
            break
    return [name_of(obj), controller, i(obj.get("revision")), obj_age(obj, now)]


def _resource_quota_cells(obj: Obj, now: float) -> list[Any]:
    status = d(obj.get("status"))
    hard, used = d(status.get("hard")), d(status.get("used"))
    requests: list[str] = []
    limits: list[str] = []
    for resource in sorted(hard):
        pieces = resource.split(".")
        target = limits if len(pieces) > 1 and pieces[0] == "limits" else requests
        target.append(f"{resource}: {s(used.get(resource)) or '0'}/{s(hard.get(resource))}")
    return [name_of(obj), obj_age(obj, now), ", ".join(requests), ", ".join(limits)]


def _priority_class_cells(obj: Obj, now: float) -> list[Any]:
    return [
        name_of(obj),
        i(obj.get("value")),
        obj.get("globalDefault") is True,
        obj_age(obj, now),
        s(obj.get("preemptionPolicy")),
    ]


def _runtime_class_cells(obj: Obj, now: float) -> list[Any]:
    return [name_of(obj), s(obj.get("handler")), obj_age(obj, now)]


def _volume_attachment_cells(obj: Obj, now: float) -> list[Any]:
    spec, status = d(obj.get("spec")), d(obj.get("status"))
    return [
        name_of(obj),
        s(spec.get("attacher")),
        s(d(spec.get("source")).get("persistentVolumeName")),
        s(spec.get("nodeName")),
        status.get("attached") is True,
        obj_age(obj, now),
    ]


def _list_with_more(shown: list[str], count: int) -> str:
    text = ",".join(shown)
    if count > 3:
        return f"{text} + {count - 3} more..."
    return text or "<unset>"


def _endpoint_slice_cells(obj: Obj, now: float) -> list[Any]:
    ports: list[str] = []
    for port in lst(obj.get("ports")):
        port = d(port)
        if port.get("port") is not None:
            ports.append(str(i(port.get("port"))))
        elif port.get("name") is not None:
            ports.append(s(port.get("name")))
        else:
            ports.append("*")
    addresses = [s(a) for e in lst(obj.get("endpoints")) for a in lst(d(e).get("addresses"))]
    return [
        name_of(obj),
        s(obj.get("addressType")),
        _list_with_more(ports[:3], len(ports)),
        _list_with_more(addresses[:3], len(addresses)),
        obj_age(obj, now),
    ]


def _csi_node_cells(obj: Obj, now: float) -> list[Any]:
    return [name_of(obj), len(lst(d(obj.get("spec")).get("drivers"))), obj_age(obj, now)]


def _csi_driver_cells(obj: Obj, now: float) -> list[Any]:
    spec = d(obj.get("spec"))
    tokens = spec.get("tokenRequests")
    token_text = ",".join(s(d(t).get("audience")) for t in lst(tokens)) if tokens is not None else "<unset>"
    modes = ",".join(s(m) for m in lst(spec.get("volumeLifecycleModes"))) or "<none>"
    return [
        name_of(obj),
        spec.get("attachRequired") is not False,
        spec.get("podInfoOnMount") is True,
        spec.get("storageCapacity") is True,
        token_text,
        spec.get("requiresRepublish") is True,
        modes,
        obj_age(obj, now),
    ]


def _csi_capacity_cells(obj: Obj, now: float) -> list[Any]:
    capacity = obj.get("capacity")
    return [
        name_of(obj),
        s(obj.get("storageClassName")),
        _quantity_text(capacity) if capacity is not None else "<unset>",
    ]


def _flow_schema_cells(obj: Obj, now: float) -> list[Any]:
    spec = d(obj.get("spec"))
    method = spec.get("distinguisherMethod")
    dangling = "?"
    for condition in lst(d(obj.get("status")).get("conditions")):
        if d(condition).get("type") == "Dangling":
            dangling = s(d(condition).get("status"))
            break
    return [
        name_of(obj),
        s(d(spec.get("priorityLevelConfiguration")).get("name")),
        i(spec.get("matchingPrecedence")),
        s(d(method).get("type")) if isinstance(method, dict) else "<none>",
        obj_age(obj, now),
        dangling,
    ]


def _flow_schema_order(objs: list[Obj]) -> list[Obj]:
    return sorted(objs, key=lambda o: (i(d(o.get("spec")).get("matchingPrecedence")), name_of(o)))


def _priority_level_cells(obj: Obj, now: float) -> list[Any]:
    spec = d(obj.get("spec"))
    shares: Any = "<none>"
    queues: Any = "<none>"
    hand: Any = "<none>"
    length: Any = "<none>"
    limited = spec.get("limited")
    if isinstance(limited, dict):
        shares = i(limited.get("nominalConcurrencyShares"))
        queuing = d(limited.get("limitResponse")).get("queuing")
        if isinstance(queuing, dict):
            queues, hand, length = (
                i(queuing.get("queues")),
                i(queuing.get("handSize")),
                i(queuing.get("queueLengthLimit")),
            )
    return [name_of(obj), s(spec.get("type")), shares, queues, hand, length, obj_age(obj, now)]


def _resource_claim_cells(obj: Obj, now: float) -> list[Any]:
    status = d(obj.get("status"))
    deleting = bool(meta(obj).get("deletionTimestamp"))
    states: list[str] = ["deleted"] if deleting else []
    if status.get("allocation") is None:
        if not deleting:
            states.append("pending")
    else:
        states.append("allocated")
        if lst(status.get("reservedFor")):
            states.append("reserved")
    return [name_of(obj), ",".join(states), obj_age(obj, now)]


def _resource_slice_cells(obj: Obj, now: float) -> list[Any]:
    spec = d(obj.get("spec"))
    return [
        name_of(obj),
        s(spec.get("nodeName")),
        s(spec.get("driver")),
        s(d(spec.get("pool")).get("name")),
        obj_age(obj, now),
    ]


def _ip_address_cells(obj: Obj, now: float) -> list[Any]:
    ref = d(obj.get("spec")).get("parentRef")
    parent = "<none>"
    if isinstance(ref, dict):
        resource = s(ref.get("resource"))
        group = s(ref.get("group"))
        parent = (f"{resource}.{group}" if group else resource).lower()
        if s(ref.get("namespace")):
            parent += "/" + s(ref.get("namespace"))
        parent += "/" + s(ref.get("name"))
    return [name_of(obj), parent]


def _service_cidr_cells(obj: Obj, now: float) -> list[Any]:
    return [name_of(obj), ",".join(s(c) for c in lst(d(obj.get("spec")).get("cidrs"))), obj_age(obj, now)]


def _vac_cells(obj: Obj, now: float) -> list[Any]:
    return [name_of(obj), s(obj.get("driverName")), obj_age(obj, now)]


def _name_age_cells(obj: Obj, now: float) -> list[Any]:
    return [name_of(obj), obj_age(obj, now)]


def _webhook_cells(obj: Obj, now: float) -> list[Any]:
    return [name_of(obj), len(lst(obj.get("webhooks"))), obj_age(obj, now)]


def _component_status_cells(obj: Obj, now: float) -> list[Any]:
    status, message, error = "Unknown", "", ""
    for condition in lst(obj.get("conditions")):
        condition = d(condition)
        if condition.get("type") == "Healthy":
            status = "Healthy" if condition.get("status") == "True" else "Unhealthy"
            message, error = s(condition.get("message")), s(condition.get("error"))
            break
    return [name_of(obj), status, message, error]


_EVENT_COLUMNS = (
    column("Last Seen", description=doc(f"{CORE}.Event.lastTimestamp")),
    column("Type", description=doc(f"{CORE}.Event.type")),
    column("Reason", description=doc(f"{CORE}.Event.reason")),
    column("Object", description=doc(f"{CORE}.Event.involvedObject")),
    column("Subobject", description=doc(f"{CORE}.ObjectReference.fieldPath"), priority=1),
    column("Source", description=doc(f"{CORE}.Event.source"), priority=1),
    column("Message", description=doc(f"{CORE}.Event.message")),
    column("First Seen", description=doc(f"{CORE}.Event.firstTimestamp"), priority=1),
    column("Count", description=doc(f"{CORE}.Event.count"), priority=1),
    column("Name", description=doc("ObjectMeta.name"), fmt="name", priority=1),
)


def _selector(definition: str) -> Any:
    return column(SELECTOR_P1, description=doc(definition), priority=1)


def _binding_columns(what: str) -> tuple[Any, ...]:
    return (
        NAME,
        column(
            "Role",
            description=doc(
                f"{RBAC}.{'RoleBinding' if what == 'roleBinding' else 'ClusterRoleBinding'}.roleRef"
            ),
        ),
        AGE,
        column("Users", description=f"Users in the {what}", priority=1),
        column("Groups", description=f"Groups in the {what}", priority=1),
        column("ServiceAccounts", description=f"ServiceAccounts in the {what}", priority=1),
    )


PRINTERS: dict[tuple[str, str], Printer] = {
    ("", "Namespace"): Printer(
        (NAME, column("Status", description="The status of the namespace"), AGE), _namespace_cells
    ),
    ("", "ConfigMap"): Printer(
        (NAME, column("Data", description=doc(f"{CORE}.ConfigMap.data")), AGE), _configmap_cells
    ),
    ("", "Secret"): Printer(
        (
            NAME,
            column("Type", description=doc(f"{CORE}.Secret.type")),
            column("Data", description=doc(f"{CORE}.Secret.data")),
            AGE,
        ),
        _secret_cells,
    ),
    ("", "ServiceAccount"): Printer(
        (NAME, column("Secrets", description=doc(f"{CORE}.ServiceAccount.secrets")), AGE),
        _service_account_cells,
    ),
    ("", "Service"): Printer(
        (
            NAME,
            column("Type", description=doc(f"{CORE}.ServiceSpec.type")),
            column("Cluster-IP", description=doc(f"{CORE}.ServiceSpec.clusterIP")),
            column("External-IP", description=doc(f"{CORE}.ServiceSpec.externalIPs")),
            column("Port(s)", description=doc(f"{CORE}.ServiceSpec.ports")),
            AGE,
            _selector(f"{CORE}.ServiceSpec.selector"),
        ),
        _service_cells,
    ),
    ("", "Endpoints"): Printer(
        (NAME, column("Endpoints", description=doc(f"{CORE}.Endpoints.subsets")), AGE), _endpoints_cells
    ),
    ("", "Pod"): Printer(
        (
            NAME,
            column("Ready", description="The aggregate readiness state of this pod for accepting traffic."),
            column("Status", description="The aggregate status of the containers in this pod."),
            column(
                "Restarts",
                description="The number of times the containers in this pod have been restarted and when the "
                "last container in this pod has restarted.",
            ),
            AGE,
            column("IP", description=doc(f"{CORE}.PodStatus.podIP"), priority=1),
            column("Node", description=doc(f"{CORE}.PodSpec.nodeName"), priority=1),
            column("Nominated Node", description=doc(f"{CORE}.PodStatus.nominatedNodeName"), priority=1),
            column("Readiness Gates", description=doc(f"{CORE}.PodSpec.readinessGates"), priority=1),
        ),
        _pod_cells,
        _pod_conditions,
    ),
    ("", "PodTemplate"): Printer(
        (
            NAME,
            column("Containers", description="Names of each container in the template."),
            column("Images", description="Images referenced by each container in the template."),
            column("Pod Labels", description="The labels for the pod template."),
        ),
        _pod_template_cells,
    ),
    ("", "ReplicationController"): Printer(
        (
            NAME,
            column("Desired", "integer", doc(f"{CORE}.ReplicationControllerSpec.replicas")),
            column("Current", "integer", doc(f"{CORE}.ReplicationControllerStatus.replicas")),
            column("Ready", "integer", doc(f"{CORE}.ReplicationControllerStatus.readyReplicas")),
            AGE,
            CONTAINERS,
            IMAGES,
            _selector(f"{CORE}.ReplicationControllerSpec.selector"),
        ),
        _rc_cells,
    ),
    ("", "Event"): Printer(_EVENT_COLUMNS, _event_cells_for("")),
    ("events.k8s.io", "Event"): Printer(_EVENT_COLUMNS, _event_cells_for("events.k8s.io")),
    ("", "Node"): Printer(
        (
            NAME,
            column("Status", description="The status of the node"),
            column("Roles", description="The roles of the node"),
            AGE,
            column("Version", description=doc(f"{CORE}.NodeSystemInfo.kubeletVersion")),
            column("Internal-IP", description=doc(f"{CORE}.NodeStatus.addresses"), priority=1),
            column("External-IP", description=doc(f"{CORE}.NodeStatus.addresses"), priority=1),
            column("OS-Image", description=doc(f"{CORE}.NodeSystemInfo.osImage"), priority=1),
            column("Kernel-Version", description=doc(f"{CORE}.NodeSystemInfo.kernelVersion"), priority=1),
            column(
                "Container-Runtime",
                description=doc(f"{CORE}.NodeSystemInfo.containerRuntimeVersion"),
                priority=1,
            ),
        ),
        _node_cells,
    ),
    ("", "PersistentVolume"): Printer(
        (
            NAME,
            column("Capacity", description=doc(f"{CORE}.PersistentVolumeSpec.capacity")),
            column("Access Modes", description=doc(f"{CORE}.PersistentVolumeSpec.accessModes")),
            column(
                "Reclaim Policy",
                description=doc(f"{CORE}.PersistentVolumeSpec.persistentVolumeReclaimPolicy"),
            ),
            column("Status", description=doc(f"{CORE}.PersistentVolumeStatus.phase")),
            column("Claim", description=doc(f"{CORE}.PersistentVolumeSpec.claimRef")),
            column("StorageClass", description="StorageClass of the pv"),
            column("VolumeAttributesClass", description="VolumeAttributesClass of the pv"),
            column("Reason", description=doc(f"{CORE}.PersistentVolumeStatus.reason")),
            AGE,
            column("VolumeMode", description=doc(f"{CORE}.PersistentVolumeSpec.volumeMode"), priority=1),
        ),
        _pv_cells,
    ),
    ("", "PersistentVolumeClaim"): Printer(
        (
            NAME,
            column("Status", description=doc(f"{CORE}.PersistentVolumeClaimStatus.phase")),
            column("Volume", description=doc(f"{CORE}.PersistentVolumeClaimSpec.volumeName")),
            column("Capacity", description=doc(f"{CORE}.PersistentVolumeClaimStatus.capacity")),
            column("Access Modes", description=doc(f"{CORE}.PersistentVolumeClaimStatus.accessModes")),
            column("StorageClass", description="StorageClass of the pvc"),
            column("VolumeAttributesClass", description="VolumeAttributesClass of the pvc"),
            AGE,
            column("VolumeMode", description=doc(f"{CORE}.PersistentVolumeClaimSpec.volumeMode"), priority=1),
        ),
        _pvc_cells,
    ),
    ("", "ComponentStatus"): Printer(
        (
            NAME,
            column("Status", description="Status of the component conditions"),
            column("Message", description="Message of the component conditions"),
            column("Error", description="Error of the component conditions"),
        ),
        _component_status_cells,
    ),
    ("", "ResourceQuota"): Printer(
        (
            NAME,
            AGE,
            column(
                "Request",
                description="Request represents a minimum amount of cpu/memory that a container may consume.",
            ),
            column(
                "Limit",
                description="Limits control the maximum amount of cpu/memory that a container may use independent "
                "of contention on the node.",
            ),
        ),
        _resource_quota_cells,
    ),
    ("apps", "Deployment"): Printer(
        (
            NAME,
            column("Ready", description="Number of the pod with ready state"),
            column("Up-to-date", description=doc(f"{APPS}.DeploymentStatus.updatedReplicas")),
            column("Available", description=doc(f"{APPS}.DeploymentStatus.availableReplicas")),
            AGE,
            CONTAINERS,
            IMAGES,
            _selector(f"{APPS}.DeploymentSpec.selector"),
        ),
        _deployment_cells,
    ),
    ("apps", "ReplicaSet"): Printer(
        (
            NAME,
            column("Desired", "integer", doc(f"{APPS}.ReplicaSetSpec.replicas")),
            column("Current", "integer", doc(f"{APPS}.ReplicaSetStatus.replicas")),
            column("Ready", "integer", doc(f"{APPS}.ReplicaSetStatus.readyReplicas")),
            AGE,
            CONTAINERS,
            IMAGES,
            _selector(f"{APPS}.ReplicaSetSpec.selector"),
        ),
        _replicaset_cells,
    ),
    ("apps", "DaemonSet"): Printer(
        (
            NAME,
            column("Desired", "integer", doc(f"{APPS}.DaemonSetStatus.desiredNumberScheduled")),
            column("Current", "integer", doc(f"{APPS}.DaemonSetStatus.currentNumberScheduled")),
            column("Ready", "integer", doc(f"{APPS}.DaemonSetStatus.numberReady")),
            column("Up-to-date", "integer", doc(f"{APPS}.DaemonSetStatus.updatedNumberScheduled")),
            column("Available", "integer", doc(f"{APPS}.DaemonSetStatus.numberAvailable")),
            column("Node Selector", description=doc(f"{CORE}.PodSpec.nodeSelector")),
            AGE,
            CONTAINERS,
            IMAGES,
            _selector(f"{APPS}.DaemonSetSpec.selector"),
        ),
        _daemonset_cells,
    ),
    ("apps", "StatefulSet"): Printer(
        (
            NAME,
            column("Ready", description="Number of the pod with ready state"),
            AGE,
            CONTAINERS,
            IMAGES,
        ),
        _statefulset_cells,
    ),
    ("apps", "ControllerRevision"): Printer(
        (
            NAME,
            column("Controller", description="Controller of the object"),
            column("Revision", description=doc(f"{APPS}.ControllerRevision.revision")),
            AGE,
        ),
        _controller_revision_cells,
    ),
    ("batch", "Job"): Printer(
        (
            NAME,
            column("Status", description="Status of the job."),
            column("Completions", description=doc(f"{BATCH}.JobStatus.succeeded")),
            column("Duration", description="Time required to complete the job."),
            AGE,
            CONTAINERS,
            IMAGES,
            _selector(f"{BATCH}.JobSpec.selector"),
        ),
        _job_cells,
    ),
    ("batch", "CronJob"): Printer(
        (
            NAME,
            column("Schedule", description=doc(f"{BATCH}.CronJobSpec.schedule")),
            column("Timezone", description=doc(f"{BATCH}.CronJobSpec.timeZone")),
            column("Suspend", "boolean", doc(f"{BATCH}.CronJobSpec.suspend")),
            column("Active", "integer", doc(f"{BATCH}.CronJobStatus.active")),
            column("Last Schedule", description=doc(f"{BATCH}.CronJobStatus.lastScheduleTime")),
            AGE,
            CONTAINERS,
            IMAGES,
            _selector(f"{BATCH}.JobSpec.selector"),
        ),
        _cronjob_cells,
    ),
    ("autoscaling", "HorizontalPodAutoscaler"): Printer(
        (
            NAME,
            column("Reference", description=doc(f"{AUTOSCALING}.HorizontalPodAutoscalerSpec.scaleTargetRef")),
            column("Targets", description=doc(f"{AUTOSCALING}.HorizontalPodAutoscalerSpec.metrics")),
            column("MinPods", description=doc(f"{AUTOSCALING}.HorizontalPodAutoscalerSpec.minReplicas")),
            column("MaxPods", description=doc(f"{AUTOSCALING}.HorizontalPodAutoscalerSpec.maxReplicas")),
            column(
                "Replicas", description=doc(f"{AUTOSCALING}.HorizontalPodAutoscalerStatus.currentReplicas")
            ),
            AGE,
        ),
        _hpa_cells,
    ),
    ("autoscaling", "Scale"): Printer(
        (
            column("Name", description=doc("ObjectMeta.name"), fmt="name"),
            column("Desired", "integer", "Desired replicas."),
            column("Available", "integer", "Observed replicas."),
            AGE,
        ),
        _scale_cells,
    ),
    ("policy", "PodDisruptionBudget"): Printer(
        (
            NAME,
            column("Min Available", description="The minimum number of pods that must be available."),
            column("Max Unavailable", description="The maximum number of pods that may be unavailable."),
            column(
                "Allowed Disruptions",
                "integer",
                "Calculated number of pods that may be disrupted at this time.",
            ),
            AGE,
        ),
        _pdb_cells,
    ),
    ("networking.k8s.io", "Ingress"): Printer(
        (
            NAME,
            column(
                "Class",
                description="The name of the IngressClass resource that should be used for additional configuration",
            ),
            column(
                "Hosts",
                description="Hosts that incoming requests are matched against before the ingress rule",
            ),
            column(
                "Address", description="Address is a list containing ingress points for the load-balancer"
            ),
            column("Ports", description="Ports of TLS configurations that open"),
            AGE,
        ),
        _ingress_cells,
    ),
    ("networking.k8s.io", "IngressClass"): Printer(
        (
            NAME,
            column("Controller", description="Controller that is responsible for handling this class"),
            column("Parameters", description="A reference to a resource with additional parameters"),
            AGE,
        ),
        _ingress_class_cells,
    ),
    ("networking.k8s.io", "NetworkPolicy"): Printer(
        (NAME, column("Pod-Selector", description=doc(f"{NETWORKING}.NetworkPolicySpec.podSelector")), AGE),
        _network_policy_cells,
    ),
    ("networking.k8s.io", "IPAddress"): Printer(
        (NAME, column("ParentRef", description=doc(f"{NETWORKING}.IPAddressSpec.parentRef"))),
        _ip_address_cells,
    ),
    ("networking.k8s.io", "ServiceCIDR"): Printer(
        (NAME, column("CIDRs", description=doc(f"{NETWORKING}.ServiceCIDRSpec.cidrs")), AGE),
        _service_cidr_cells,
    ),
    ("rbac.authorization.k8s.io", "RoleBinding"): Printer(_binding_columns("roleBinding"), _binding_cells),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): Printer(
        _binding_columns("clusterRoleBinding"), _binding_cells
    ),
    ("certificates.k8s.io", "CertificateSigningRequest"): Printer(
        (
            NAME,
            AGE,
            column("SignerName", description=doc(f"{CERTIFICATES}.CertificateSigningRequestSpec.signerName")),
            column("Requestor", description=doc(f"{CERTIFICATES}.CertificateSigningRequestSpec.request")),
            column(
                "RequestedDuration",
                description=doc(f"{CERTIFICATES}.CertificateSigningRequestSpec.expirationSeconds"),
            ),
            column(
                "Condition", description=doc(f"{CERTIFICATES}.CertificateSigningRequestStatus.conditions")
            ),
        ),
        _csr_cells,
    ),
    ("coordination.k8s.io", "Lease"): Printer(
        (NAME, column("Holder", description=doc(f"{COORDINATION}.LeaseSpec.holderIdentity")), AGE),
        _lease_cells,
    ),
    ("storage.k8s.io", "StorageClass"): Printer(
        (
            NAME,
            column("Provisioner", description=doc(f"{STORAGE}.StorageClass.provisioner")),
            column("ReclaimPolicy", description=doc(f"{STORAGE}.StorageClass.reclaimPolicy")),
            column("VolumeBindingMode", description=doc(f"{STORAGE}.StorageClass.volumeBindingMode")),
            column("AllowVolumeExpansion", description=doc(f"{STORAGE}.StorageClass.allowVolumeExpansion")),
            AGE,
        ),
        _storage_class_cells,
    ),
    ("storage.k8s.io", "VolumeAttachment"): Printer(
        (
            NAME,
            column("Attacher", description=doc(f"{STORAGE}.VolumeAttachmentSpec.attacher"), fmt="name"),
            column("PV", description=doc(f"{STORAGE}.VolumeAttachmentSource.persistentVolumeName")),
            column("Node", description=doc(f"{STORAGE}.VolumeAttachmentSpec.nodeName")),
            column("Attached", "boolean", doc(f"{STORAGE}.VolumeAttachmentStatus.attached")),
            AGE,
        ),
        _volume_attachment_cells,
    ),
    ("storage.k8s.io", "CSINode"): Printer(
        (
            NAME,
            column(
                "Drivers", "integer", "Drivers indicates the number of CSI drivers registered on the node"
            ),
            AGE,
        ),
        _csi_node_cells,
    ),
    ("storage.k8s.io", "CSIDriver"): Printer(
        (
            NAME,
            column("AttachRequired", "boolean", doc(f"{STORAGE}.CSIDriverSpec.attachRequired")),
            column("PodInfoOnMount", "boolean", doc(f"{STORAGE}.CSIDriverSpec.podInfoOnMount")),
            column("StorageCapacity", "boolean", doc(f"{STORAGE}.CSIDriverSpec.storageCapacity")),
            column("TokenRequests", description=doc(f"{STORAGE}.CSIDriverSpec.tokenRequests")),
            column("RequiresRepublish", "boolean", doc(f"{STORAGE}.CSIDriverSpec.requiresRepublish")),
            column("Modes", description=doc(f"{STORAGE}.CSIDriverSpec.volumeLifecycleModes")),
            AGE,
        ),
        _csi_driver_cells,
    ),
    ("storage.k8s.io", "CSIStorageCapacity"): Printer(
        (
            NAME,
            column("StorageClassName", description=doc(f"{STORAGE}.CSIStorageCapacity.storageClassName")),
            column("Capacity", description=doc(f"{STORAGE}.CSIStorageCapacity.capacity")),
        ),
        _csi_capacity_cells,
    ),
    ("storage.k8s.io", "VolumeAttributesClass"): Printer(
        (NAME, column("DriverName", description=doc(f"{STORAGE}.VolumeAttributesClass.driverName")), AGE),
        _vac_cells,
    ),
    ("scheduling.k8s.io", "PriorityClass"): Printer(
        (
            NAME,
            column("Value", "integer", doc(f"{SCHEDULING}.PriorityClass.value")),
            column("Global-Default", "boolean", doc(f"{SCHEDULING}.PriorityClass.globalDefault")),
            AGE,
            column("PreemptionPolicy", description=doc(f"{SCHEDULING}.PriorityClass.preemptionPolicy")),
        ),
        _priority_class_cells,
    ),
    # Upstream describes this column with ObjectMeta's (absent) "handler" field: the description is empty.
    ("node.k8s.io", "RuntimeClass"): Printer((NAME, column("Handler"), AGE), _runtime_class_cells),
    ("discovery.k8s.io", "EndpointSlice"): Printer(
        (
            NAME,
            column("AddressType", description=doc(f"{DISCOVERY}.EndpointSlice.addressType")),
            column("Ports", description=doc(f"{DISCOVERY}.EndpointSlice.ports")),
            column("Endpoints", description=doc(f"{DISCOVERY}.EndpointSlice.endpoints")),
            AGE,
        ),
        _endpoint_slice_cells,
    ),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"): Printer(
        (
            NAME,
            column(
                "PriorityLevel", description=doc(f"{FLOWCONTROL}.PriorityLevelConfigurationReference.name")
            ),
            column("MatchingPrecedence", description=doc(f"{FLOWCONTROL}.FlowSchemaSpec.matchingPrecedence")),
            column(
                "DistinguisherMethod", description=doc(f"{FLOWCONTROL}.FlowSchemaSpec.distinguisherMethod")
            ),
            AGE,
            column("MissingPL", description="references a broken or non-existent PriorityLevelConfiguration"),
        ),
        _flow_schema_cells,
        order=_flow_schema_order,
    ),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"): Printer(
        (
            NAME,
            column("Type", description=doc(f"{FLOWCONTROL}.PriorityLevelConfigurationSpec.type")),
            column(
                "NominalConcurrencyShares",
                description=doc(f"{FLOWCONTROL}.LimitedPriorityLevelConfiguration.nominalConcurrencyShares"),
            ),
            column("Queues", description=doc(f"{FLOWCONTROL}.QueuingConfiguration.queues")),
            column("HandSize", description=doc(f"{FLOWCONTROL}.QueuingConfiguration.handSize")),
            column(
                "QueueLengthLimit", description=doc(f"{FLOWCONTROL}.QueuingConfiguration.queueLengthLimit")
            ),
            AGE,
        ),
        _priority_level_cells,
    ),
    ("resource.k8s.io", "ResourceClaim"): Printer(
        (
            NAME,
            column(
                "State", description="A summary of the current state (allocated, pending, reserved, etc.)."
            ),
            AGE,
        ),
        _resource_claim_cells,
    ),
    ("resource.k8s.io", "ResourceSlice"): Printer(
        (
            NAME,
            column("Node", description=doc(f"{RESOURCE}.ResourceSliceSpec.nodeName")),
            column("Driver", description=doc(f"{RESOURCE}.ResourceSliceSpec.driver")),
            column("Pool", description=doc(f"{RESOURCE}.ResourcePool.name")),
            AGE,
        ),
        _resource_slice_cells,
    ),
    ("resource.k8s.io", "ResourceClaimTemplate"): Printer((NAME, AGE), _name_age_cells),
    ("resource.k8s.io", "DeviceClass"): Printer((NAME, AGE), _name_age_cells),
    ("apiregistration.k8s.io", "APIService"): Printer(
        (
            NAME,
            column("Service", description="The reference to the service that hosts this API endpoint."),
            column("Available", description="Whether this service is available."),
            AGE,
        ),
        _apiservice_cells,
    ),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"): Printer(
        (
            NAME,
            column(
                "Validations",
                "integer",
                "Validations indicates the number of validation rules defined in this configuration",
            ),
            column(
                "ParamKind",
                description="ParamKind specifies the kind of resources used to parameterize this policy",
            ),
            AGE,
        ),
        _vap_cells,
    ),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"): Printer(
        (
            NAME,
            column(
                "PolicyName",
                description="PolicyName indicates the policy definition which the policy binding binded to",
            ),
            column(
                "ParamRef",
                description="ParamRef indicates the param resource which sets the configration param",
            ),
            AGE,
        ),
        _vap_binding_cells,
    ),
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"): Printer(
        (
            NAME,
            column(
                "Webhooks",
                "integer",
                "Webhooks indicates the number of webhooks registered in this configuration",
            ),
            AGE,
        ),
        _webhook_cells,
    ),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"): Printer(
        (
            NAME,
            column(
                "Webhooks",
                "integer",
                "Webhooks indicates the number of webhooks registered in this configuration",
            ),
            AGE,
        ),
        _webhook_cells,
    ),
    ("admissionregistration.k8s.io", "MutatingAdmissionPolicy"): Printer(
        (
            NAME,
            column("Mutations", "integer", "Mutations indicates the number of mutations in this policy"),
            column(
                "ParamKind",
                description="ParamKind specifies the kind of resources used to parameterize this policy",
            ),
            AGE,
        ),
        _map_cells,
    ),
    ("admissionregistration.k8s.io", "MutatingAdmissionPolicyBinding"): Printer(
        (
            NAME,
            column(
                "PolicyName",
                description="PolicyName indicates the policy definition which the policy binding binded to",
            ),
            column(
                "ParamRef",
                description="ParamRef indicates the param resource which sets the configration param",
            ),
            AGE,
        ),
        _vap_binding_cells,
    ),
}


def printer_for(group: str, kind: str) -> Printer:
    """The built-in printer for a kind (``ConfigMapList`` works too), else upstream's default convertor."""
    found = PRINTERS.get((group, kind))
    if found is None and kind.endswith("List"):
        found = PRINTERS.get((group, kind[: -len("List")]))
    return found or DEFAULT_PRINTER
