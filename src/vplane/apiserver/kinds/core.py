"""core/v1: the legacy group's kinds and their rules.

Defaults, validation messages and field selectors follow upstream (``pkg/apis/core/v1/defaults.go``,
``pkg/apis/core/validation``, ``pkg/apis/core/v1/conversion.go``) where a kubectl or Helm user can notice.
"""

from __future__ import annotations

import base64
import binascii
import copy
import re
from collections.abc import Callable
from typing import Any

from vplane.apiserver import timeutil
from vplane.apiserver.kinds.common import (
    CREATE_ONLY,
    SCALE,
    GenerationStrategy,
    d,
    dns_name_causes,
    lst,
    non_negative,
    rt,
    validate_enum,
)
from vplane.apiserver.registry import ResourceType, Strategy, Subresource
from vplane.kube import errors, labels, limitrange, podspec, quantity, services, validation
from vplane.kube.errors import Cause
from vplane.kube.objects import Obj

CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
CONFIG_KEY_MESSAGE = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
ACCESS_MODES = ["ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"]
RECLAIM_POLICIES = ["Delete", "Recycle", "Retain"]
VOLUME_MODES = ["Block", "Filesystem"]
PV_SOURCES = (
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "hostPath",
    "glusterfs",
    "nfs",
    "rbd",
    "iscsi",
    "cinder",
    "cephfs",
    "fc",
    "flocker",
    "flexVolume",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "local",
    "storageos",
    "csi",
)
LIMIT_TYPES = ["Container", "PersistentVolumeClaim", "Pod"]
QUOTA_SCOPES = [
    "BestEffort",
    "CrossNamespacePodAffinity",
    "NotBestEffort",
    "NotTerminating",
    "PriorityClass",
    "Terminating",
    "VolumeAttributesClass",
]
POD_UPDATE_FORBIDDEN = (
    "pod updates may not change fields other than `spec.containers[*].image`, `spec.initContainers[*].image`, "
    "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing tolerations) or "
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


def _config_keys(data: Any, field: str) -> list[Cause]:
    causes: list[Cause] = []
    if data is None:
        return causes
    if not isinstance(data, dict):
        return [errors.field_type_invalid(field, data, "must be an object")]
    for key in data:
        if len(key) > 253 or not CONFIG_KEY.match(key):
            causes.append(errors.field_invalid(f"{field}[{key}]", key, CONFIG_KEY_MESSAGE))
    return causes


class ConfigMapStrategy(Strategy):
    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        causes = _config_keys(obj.get("data"), "data") + _config_keys(obj.get("binaryData"), "binaryData")
        data, binary = obj.get("data") or {}, obj.get("binaryData") or {}
        if isinstance(data, dict):
            for key, value in data.items():
                if not isinstance(value, str):
                    causes.append(errors.field_type_invalid(f"data[{key}]", value, "must be a string"))
        if isinstance(data, dict) and isinstance(binary, dict):
            for key in set(data) & set(binary):
                causes.append(errors.field_duplicate(f"data[{key}]", key))
        if (
            old is not None
            and old.get("immutable")
            and (old.get("data") != obj.get("data") or old.get("binaryData") != obj.get("binaryData"))
        ):
            causes.append(errors.field_forbidden("data", "field is immutable when `immutable` is set"))
        return causes


class SecretStrategy(Strategy):
    supported_field_labels = frozenset({"type"})

    def default(self, obj: Obj) -> None:
        obj.setdefault("type", "Opaque")
        string_data = obj.pop("stringData", None)
        if isinstance(string_data, dict):
            data = obj.setdefault("data", {})
            if isinstance(data, dict):
                for key, value in string_data.items():
                    data[key] = base64.b64encode(str(value).encode()).decode()

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        causes = _config_keys(obj.get("data"), "data")
        for key, value in (obj.get("data") or {}).items():
            try:
                base64.b64decode(str(value), validate=True)
            except (binascii.Error, ValueError):
                causes.append(
                    errors.field_invalid(f"data[{key}]", "<secret contents redacted>", "illegal base64 data")
                )
        if old is not None and old.get("type") != obj.get("type"):
            causes.append(errors.field_invalid("type", obj.get("type"), "field is immutable"))
        return causes

    def field_labels(self, obj: Obj) -> dict[str, str]:
        return {"type": str(obj.get("type", ""))}


class NamespaceStrategy(Strategy):
    name_validator = staticmethod(validation.dns1123_label)
    supported_field_labels = frozenset({"status.phase"})

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {"phase": "Active"}
        spec = obj.setdefault("spec", {})
        if isinstance(spec, dict):
            spec["finalizers"] = ["kubernetes"]

    def prepare_for_update(self, obj: Obj, old: Obj) -> None:
        # spec.finalizers changes only through the finalize subresource; status only through status.
        obj["spec"] = old.get("spec", {})

    def default(self, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        if name:
            labels_ = meta.setdefault("labels", {})
            if isinstance(labels_, dict):
                labels_["kubernetes.io/metadata.name"] = name

    def field_labels(self, obj: Obj) -> dict[str, str]:
        return {"status.phase": str((obj.get("status") or {}).get("phase", ""))}


def qos_class(spec: Obj) -> str:
    """The pod's QoS class (``GetPodQOS``): Guaranteed, Burstable or BestEffort."""
    containers = [d(c) for c in lst(spec.get("containers")) + lst(spec.get("initContainers"))]
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    guaranteed = True
    for c in containers:
        res = d(c.get("resources"))
        req, lim = d(res.get("requests")), d(res.get("limits"))
        for name, value in req.items():
            if name in ("cpu", "memory") and (quantity.parse(value) or 0) != 0:
                requests[name] = value
        present = set()
        for name, value in lim.items():
            if name in ("cpu", "memory") and (quantity.parse(value) or 0) != 0:
                limits[name] = value
                present.add(name)
        if present != {"cpu", "memory"}:
            guaranteed = False
        for name in ("cpu", "memory"):
            request = req.get(name, lim.get(name))
            if name in lim and quantity.parse(request) != quantity.parse(lim.get(name)):
                guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    return "Guaranteed" if guaranteed and containers else "Burstable"


class PodStrategy(Strategy):
    supported_field_labels = frozenset(
        {
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
        }
    )

    def __init__(self, clock: timeutil.Clock = timeutil.wall_clock) -> None:
        self.clock = clock
        self.node_serves: Callable[[str], bool] = lambda node: False
        """Whether a kubelet runs the node's pods (set by the server: its Node posts Ready)."""

    def default(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if isinstance(spec, dict):
            podspec.default_pod_spec(spec)

    def deletion_grace(self, obj: Obj, requested: int | None) -> int | None:
        """Upstream's pod ``CheckGracefulDelete``: the request's grace period or the pod's
        ``terminationGracePeriodSeconds``; none for a pod not scheduled or already finished. vplane also
        deletes at once a pod whose node has no kubelet posting Ready: nothing would finish its deletion
        (upstream's pod garbage collector removes such pods later)."""
        spec, status = d(obj.get("spec")), d(obj.get("status"))
        period = requested if requested is not None else int(spec.get("terminationGracePeriodSeconds") or 0)
        node = str(spec.get("nodeName") or "")
        if not node or status.get("phase") in ("Failed", "Succeeded"):
            period = 0
        if period < 0:
            period = 1
        if period > 0 and not self.node_serves(node):
            period = 0
        return period

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {"phase": "Pending", "qosClass": qos_class(d(obj.get("spec")))}

    def prepare_for_update(self, obj: Obj, old: Obj) -> None:
        # Ephemeral containers change only through their subresource.
        spec, old_spec = obj.get("spec"), d(old.get("spec"))
        if isinstance(spec, dict):
            if "ephemeralContainers" in old_spec:
                spec["ephemeralContainers"] = copy.deepcopy(old_spec["ephemeralContainers"])
            else:
                spec.pop("ephemeralContainers", None)

    def prepare_for_subresource_update(self, subresource: str, obj: Obj, old: Obj) -> None:
        if subresource == "ephemeralcontainers":
            wanted = d(obj.get("spec")).get("ephemeralContainers")
            new = {k: copy.deepcopy(v) for k, v in old.items() if k != "metadata"}
            new["spec"] = dict(d(new.get("spec")))
            if wanted:
                new["spec"]["ephemeralContainers"] = wanted
            else:
                new["spec"].pop("ephemeralContainers", None)
            _replace_body(obj, new)
        elif subresource == "resize":
            wanted_containers = {d(c).get("name"): d(c) for c in lst(d(obj.get("spec")).get("containers"))}
            new = {k: copy.deepcopy(v) for k, v in old.items() if k != "metadata"}
            for container in lst(d(new.get("spec")).get("containers")):
                source = wanted_containers.get(d(container).get("name"))
                if source is None:
                    continue
                for key in ("resources", "resizePolicy"):
                    if key in source:
                        container[key] = source[key]
            _replace_body(obj, new)
        elif subresource == "binding":
            self.prepare_for_update(obj, old)
            status = obj.setdefault("status", {})
            conditions = [c for c in lst(status.get("conditions")) if d(c).get("type") != "PodScheduled"]
            conditions.append(
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": timeutil.rfc3339(self.clock()),
                }
            )
            status["conditions"] = conditions
        else:
            self.prepare_for_update(obj, old)

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        return podspec.validate_pod_spec(d(obj.get("spec")), "spec")

    def validate_update(self, obj: Obj, old: Obj, subresource: str) -> list[Cause]:
        causes = self.validate(obj, old)
        if subresource == "ephemeralcontainers":
            return causes + _ephemeral_changes(d(obj.get("spec")), d(old.get("spec")))
        if subresource in ("status", "resize", "binding"):
            return causes
        if (obj.get("spec") or {}).get("containers") and old.get("spec") != obj.get("spec"):
            mutable = ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds")
            a = {k: copy.deepcopy(v) for k, v in (old.get("spec") or {}).items() if k not in mutable}
            b = {k: copy.deepcopy(v) for k, v in (obj.get("spec") or {}).items() if k not in mutable}
            for spec in (a, b):
                for key in ("containers", "initContainers"):
                    for c in spec.get(key) or []:
                        if isinstance(c, dict):
                            c.pop("image", None)
            if a != b:
                causes.append(errors.field_forbidden("spec", POD_UPDATE_FORBIDDEN))
        return causes

    def field_labels(self, obj: Obj) -> dict[str, str]:
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        ips = ",".join(str(d(ip).get("ip", "")) for ip in lst(status.get("podIPs")))
        return {
            "spec.nodeName": str(spec.get("nodeName", "")),
            "spec.restartPolicy": str(spec.get("restartPolicy", "")),
            "spec.schedulerName": str(spec.get("schedulerName", "")),
            "spec.serviceAccountName": str(spec.get("serviceAccountName", "")),
            "spec.hostNetwork": "true" if spec.get("hostNetwork") else "false",
            "status.phase": str(status.get("phase", "")),
            "status.podIP": str(status.get("podIP", "")),
            "status.podIPs": ips,
            "status.nominatedNodeName": str(status.get("nominatedNodeName", "")),
        }


def _replace_body(obj: Obj, new: Obj) -> None:
    """Keep ``obj``'s metadata (the write's bookkeeping) and take everything else from ``new``."""
    meta = obj.get("metadata")
    obj.clear()
    obj.update(new)
    obj["metadata"] = meta


def _ephemeral_changes(spec: Obj, old: Obj) -> list[Cause]:
    """Ephemeral containers may be added, never changed or removed (upstream ``ValidatePodEphemeralContainersUpdate``)."""
    causes: list[Cause] = []
    new_by_name = {d(c).get("name"): c for c in lst(spec.get("ephemeralContainers"))}
    for i, container in enumerate(lst(old.get("ephemeralContainers"))):
        name = d(container).get("name")
        path = f"spec.ephemeralContainers[{i}]"
        if name not in new_by_name:
            causes.append(
                errors.field_forbidden(
                    "spec.ephemeralContainers", f'existing ephemeral containers "{name}" may not be removed\n'
                )
            )
        elif new_by_name[name] != container:
            causes.append(errors.field_forbidden(path, "existing ephemeral containers may not be changed\n"))
    return causes


class ServiceStrategy(Strategy):
    name_validator = staticmethod(validation.dns1035_label)
    supported_field_labels = frozenset({"spec.clusterIP", "spec.type"})

    def default(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        if isinstance(spec, dict):
            services.apply_defaults(spec)

    def prepare_for_create(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if isinstance(spec, dict):
            services.apply_defaults(spec)
            services.normalize_cluster_ips(spec, None)

    def prepare_for_update(self, obj: Obj, old: Obj) -> None:
        spec, old_spec = obj.get("spec"), old.get("spec")
        if isinstance(spec, dict) and isinstance(old_spec, dict):
            services.apply_defaults(spec)
            services.patch_allocated_values(spec, old_spec)
            services.normalize_cluster_ips(spec, old_spec)
            services.drop_type_dependent_fields(spec, old_spec)

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = obj.get("spec") or {}
        causes: list[Cause] = []
        kinds = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"]
        if spec.get("type") not in kinds:
            causes.append(errors.field_not_supported("spec.type", spec.get("type"), kinds))
        if spec.get("type") == "ExternalName" and not spec.get("externalName"):
            causes.append(errors.field_required("spec.externalName"))
        ports = lst(spec.get("ports"))
        names: set[str] = set()
        for i, port in enumerate(ports):
            port = d(port)
            value = port.get("port")
            if not isinstance(value, int) or not 0 < value < 65536:
                causes.append(
                    errors.field_invalid(
                        f"spec.ports[{i}].port", value, "must be between 1 and 65535, inclusive"
                    )
                )
            name = port.get("name")
            if len(ports) > 1 and not name:
                causes.append(errors.field_required(f"spec.ports[{i}].name"))
            elif isinstance(name, str) and name:
                causes += [
                    errors.field_invalid(f"spec.ports[{i}].name", name, m)
                    for m in validation.dns1123_label(name)
                ]
                if name in names:
                    causes.append(errors.field_duplicate(f"spec.ports[{i}].name", name))
                names.add(name)
            protocol = port.get("protocol")
            if protocol is not None and protocol not in podspec.PROTOCOLS:
                causes.append(
                    errors.field_not_supported(f"spec.ports[{i}].protocol", protocol, podspec.PROTOCOLS)
                )
        causes += validation.validate_labels(spec.get("selector"), "spec.selector")
        if isinstance(spec, dict):
            causes += services.validate_cluster_ip_fields(spec)
            causes += services.validate_node_ports(spec)
            old_spec = old.get("spec") if old is not None else None
            if isinstance(old_spec, dict):
                causes += services.validate_update(spec, old_spec)
        return causes

    def field_labels(self, obj: Obj) -> dict[str, str]:
        spec = d(obj.get("spec"))
        return {"spec.clusterIP": str(spec.get("clusterIP", "")), "spec.type": str(spec.get("type", ""))}


EVENT_FIELD_LABELS = frozenset(
    {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    }
)


def core_event_fields(obj: Obj) -> dict[str, str]:
    involved = obj.get("involvedObject") or {}
    out = {
        f"involvedObject.{k}": str(involved.get(k, ""))
        for k in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
    }
    out["reason"] = str(obj.get("reason", ""))
    out["reportingComponent"] = str(obj.get("reportingComponent", ""))
    out["source"] = str((obj.get("source") or {}).get("component", ""))
    out["type"] = str(obj.get("type", ""))
    return out


class EventStrategy(Strategy):
    supported_field_labels = EVENT_FIELD_LABELS

    def field_labels(self, obj: Obj) -> dict[str, str]:
        return core_event_fields(obj)

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        if not isinstance(obj.get("involvedObject"), dict):
            return [errors.field_required("involvedObject")]
        causes: list[Cause] = []
        event_type = obj.get("type")
        if event_type and event_type not in ("Normal", "Warning"):
            causes.append(errors.field_not_supported("type", event_type, ["Normal", "Warning"]))
        return causes


class NodeStrategy(Strategy):
    supported_field_labels = frozenset({"spec.unschedulable"})
    reset_status_on_create = False

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = d(obj.get("spec"))
        causes = podspec.validate_taints(spec.get("taints"), "spec.taints")
        if old is not None:
            old_cidrs = d(old.get("spec")).get("podCIDRs")
            if old_cidrs and spec.get("podCIDRs") != old_cidrs:
                causes.append(
                    errors.field_forbidden(
                        "spec.podCIDRs", 'node updates may not change podCIDR except from "" to valid'
                    )
                )
        return causes

    def field_labels(self, obj: Obj) -> dict[str, str]:
        return {"spec.unschedulable": "true" if d(obj.get("spec")).get("unschedulable") else "false"}


def _access_modes(modes: Any, path: str, required_detail: str = "") -> list[Cause]:
    if not modes:
        return [errors.field_required(path, required_detail)]
    causes: list[Cause] = []
    for mode in lst(modes):
        if mode not in ACCESS_MODES:
            causes.append(errors.field_not_supported(path, mode, ACCESS_MODES))
    if "ReadWriteOncePod" in lst(modes) and len(lst(modes)) > 1:
        causes.append(errors.field_forbidden(path, "may not use ReadWriteOncePod with other access modes"))
    return causes


class PersistentVolumeStrategy(Strategy):
    name_validator = staticmethod(validation.dns1123_subdomain)

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {"phase": "Pending"}

    def default(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if isinstance(spec, dict):
            spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
            spec.setdefault("volumeMode", "Filesystem")

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [errors.field_required("spec")]
        causes = _access_modes(spec.get("accessModes"), "spec.accessModes")
        capacity = spec.get("capacity")
        if not capacity:
            causes.append(errors.field_required("spec.capacity"))
        elif not isinstance(capacity, dict) or set(capacity) != {"storage"}:
            causes.append(errors.field_not_supported("spec.capacity", capacity, ["storage"]))
        else:
            causes += _positive_storage(capacity.get("storage"), "spec.capacity[storage]")
        causes += validate_enum(spec, "persistentVolumeReclaimPolicy", RECLAIM_POLICIES)
        causes += validate_enum(spec, "volumeMode", VOLUME_MODES)
        sources = [s for s in PV_SOURCES if spec.get(s) is not None]
        if not sources:
            causes.append(errors.field_required("spec", "must specify a volume type"))
        elif len(sources) > 1:
            causes.append(
                errors.field_forbidden(f"spec.{sources[1]}", "may not specify more than 1 volume type")
            )
        if spec.get("hostPath") is not None and not d(spec.get("hostPath")).get("path"):
            causes.append(errors.field_required("spec.hostPath.path"))
        if old is not None:
            old_spec = d(old.get("spec"))
            if any(old_spec.get(s) != spec.get(s) for s in PV_SOURCES):
                causes.append(
                    errors.field_forbidden(
                        "spec.persistentvolumesource",
                        "spec.persistentvolumesource is immutable after creation",
                    )
                )
        return [_spec_prefixed(c) for c in causes]


def _spec_prefixed(cause: Cause) -> Cause:
    field = cause.get("field", "")
    if field and not field.startswith(("spec", "metadata", "status")):
        return {**cause, "field": f"spec.{field}"}
    return cause


def _positive_storage(value: Any, path: str) -> list[Cause]:
    parsed = quantity.parse(value)
    if parsed is None:
        return [errors.field_invalid(path, value, quantity.QUANTITY_MESSAGE)]
    if parsed <= 0:
        return [errors.field_invalid(path, str(value), "must be greater than zero")]
    return []


class PersistentVolumeClaimStrategy(Strategy):
    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {"phase": "Pending"}

    def default(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if isinstance(spec, dict):
            spec.setdefault("volumeMode", "Filesystem")

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [errors.field_required("spec")]
        causes = _access_modes(
            spec.get("accessModes"), "spec.accessModes", "at least 1 access mode is required"
        )
        requests = d(d(spec.get("resources")).get("requests"))
        if "storage" not in requests:
            causes.append(errors.field_required("spec.resources[storage]"))
        else:
            causes += _positive_storage(requests.get("storage"), "spec.resources[storage]")
        mode = spec.get("volumeMode")
        if mode is not None and mode not in VOLUME_MODES:
            causes.append(errors.field_not_supported("spec.volumeMode", mode, VOLUME_MODES))
        if old is not None:
            old_spec = copy.deepcopy(d(old.get("spec")))
            new_spec = copy.deepcopy(spec)
            for s in (old_spec, new_spec):
                d(s.get("resources")).pop("requests", None)
                s.pop("volumeAttributesClassName", None)
                if not old_spec.get("volumeName"):
                    s.pop("volumeName", None)
            if old_spec != new_spec:
                causes.append(
                    errors.field_forbidden(
                        "spec",
                        "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
                    )
                )
        return causes


class ResourceQuotaStrategy(Strategy):
    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = d(obj.get("spec"))
        causes: list[Cause] = []
        for name, value in d(spec.get("hard")).items():
            causes += validation.validate_label_key(name, f"spec.hard[{name}]") if "/" in name else []
            parsed = quantity.parse(value)
            if parsed is None:
                causes.append(errors.field_invalid(f"spec.hard[{name}]", value, quantity.QUANTITY_MESSAGE))
            elif parsed < 0:
                causes.append(
                    errors.field_invalid(
                        f"spec.hard[{name}]", str(value), "must be greater than or equal to 0"
                    )
                )
        for i, scope in enumerate(lst(spec.get("scopes"))):
            if scope not in QUOTA_SCOPES:
                causes.append(errors.field_not_supported(f"spec.scopes[{i}]", scope, QUOTA_SCOPES))
        return causes


class LimitRangeStrategy(Strategy):
    def default(self, obj: Obj) -> None:
        limitrange.default_limit_range(obj)

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        causes: list[Cause] = []
        for i, limit in enumerate(lst(d(obj.get("spec")).get("limits"))):
            limit = d(limit)
            path = f"spec.limits[{i}]"
            kind = limit.get("type")
            if not kind:
                causes.append(errors.field_required(f"{path}.type"))
            elif kind not in LIMIT_TYPES:
                causes.append(errors.field_not_supported(f"{path}.type", kind, LIMIT_TYPES))
            for part in ("max", "min", "default", "defaultRequest", "maxLimitRequestRatio"):
                for name, value in d(limit.get(part)).items():
                    if quantity.parse(value) is None:
                        causes.append(
                            errors.field_invalid(f"{path}.{part}[{name}]", value, quantity.QUANTITY_MESSAGE)
                        )
            maximum, default = d(limit.get("max")), d(limit.get("default"))
            for name, value in default.items():
                top = maximum.get(name)
                if top is not None and (quantity.parse(value) or 0) > (quantity.parse(top) or 0):
                    causes.append(
                        errors.field_invalid(
                            f"{path}.default[{name}]",
                            str(value),
                            f"default value {value} is greater than max value {top}",
                        )
                    )
        return causes


class ReplicationControllerStrategy(GenerationStrategy):
    supported_field_labels = frozenset({"status.replicas"})

    def default(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        if not isinstance(spec, dict):
            return
        spec.setdefault("replicas", 1)
        spec.setdefault("minReadySeconds", 0)
        template = d(spec.get("template"))
        template_labels = d(d(template.get("metadata")).get("labels"))
        if template_labels:
            if not spec.get("selector"):
                spec["selector"] = dict(template_labels)
            meta = d(obj.get("metadata"))
            if not meta.get("labels"):
                meta["labels"] = dict(template_labels)
        podspec.default_template(spec.get("template"))

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = d(obj.get("spec"))
        causes = non_negative(obj, "spec.replicas") + non_negative(obj, "spec.minReadySeconds")
        selector = d(spec.get("selector"))
        if not selector:
            causes.append(errors.field_required("spec.selector"))
        else:
            causes += validation.validate_labels(selector, "spec.selector")
        template = spec.get("template")
        if not isinstance(template, dict):
            causes.append(errors.field_required("spec.template"))
            return causes
        template_labels = d(d(template.get("metadata")).get("labels"))
        if selector and not labels.exact(selector).matches(template_labels):
            causes.append(
                errors.field_invalid(
                    "spec.template.metadata.labels",
                    template_labels,
                    "`selector` does not match template `labels`",
                )
            )
        causes += podspec.validate_template(template, "spec.template", restart_policies=["Always"])
        return causes

    def field_labels(self, obj: Obj) -> dict[str, str]:
        return {"status.replicas": str(d(obj.get("status")).get("replicas", 0))}


class PodTemplateStrategy(Strategy):
    def default(self, obj: Obj) -> None:
        podspec.default_template(obj.get("template"))

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        return podspec.validate_template(obj.get("template"), "template")


class ServiceAccountStrategy(Strategy):
    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        causes: list[Cause] = []
        for i, ref in enumerate(lst(obj.get("imagePullSecrets"))):
            causes += dns_name_causes(d(ref).get("name"), f"imagePullSecrets[{i}].name")
        return causes


def types(clock: timeutil.Clock = timeutil.wall_clock) -> list[ResourceType]:
    return [
        rt("", "v1", "bindings", "Binding", True, verbs=CREATE_ONLY, stored=False),
        rt(
            "",
            "v1",
            "componentstatuses",
            "ComponentStatus",
            False,
            short_names=("cs",),
            verbs=("get", "list"),
            stored=False,
        ),
        rt("", "v1", "configmaps", "ConfigMap", True, short_names=("cm",), strategy=ConfigMapStrategy()),
        rt("", "v1", "endpoints", "Endpoints", True, short_names=("ep",), singular="endpoints"),
        rt("", "v1", "events", "Event", True, short_names=("ev",), strategy=EventStrategy()),
        rt(
            "",
            "v1",
            "limitranges",
            "LimitRange",
            True,
            short_names=("limits",),
            strategy=LimitRangeStrategy(),
        ),
        rt(
            "",
            "v1",
            "namespaces",
            "Namespace",
            False,
            short_names=("ns",),
            strategy=NamespaceStrategy(),
            status=True,
            subresources={"finalize": Subresource("finalize", "Namespace", ("update",))},
            verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
        ),
        rt(
            "",
            "v1",
            "nodes",
            "Node",
            False,
            short_names=("no",),
            strategy=NodeStrategy(),
            status=True,
            subresources={
                "proxy": Subresource(
                    "proxy", "NodeProxyOptions", ("create", "delete", "get", "patch", "update")
                )
            },
        ),
        rt(
            "",
            "v1",
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            True,
            short_names=("pvc",),
            strategy=PersistentVolumeClaimStrategy(),
            status=True,
        ),
        rt(
            "",
            "v1",
            "persistentvolumes",
            "PersistentVolume",
            False,
            short_names=("pv",),
            strategy=PersistentVolumeStrategy(),
            status=True,
        ),
        rt(
            "",
            "v1",
            "pods",
            "Pod",
            True,
            short_names=("po",),
            categories=("all",),
            strategy=PodStrategy(clock),
            status=True,
            subresources={
                "attach": Subresource("attach", "PodAttachOptions", ("create", "get")),
                "binding": Subresource("binding", "Binding", CREATE_ONLY),
                "ephemeralcontainers": Subresource("ephemeralcontainers", "Pod", ("get", "patch", "update")),
                "eviction": Subresource("eviction", "Eviction", CREATE_ONLY, "policy", "v1"),
                "exec": Subresource("exec", "PodExecOptions", ("create", "get")),
                "log": Subresource("log", "Pod", ("get",)),
                "portforward": Subresource("portforward", "PodPortForwardOptions", ("create", "get")),
                "proxy": Subresource(
                    "proxy", "PodProxyOptions", ("create", "delete", "get", "patch", "update")
                ),
                "resize": Subresource("resize", "Pod", ("get", "patch", "update")),
            },
        ),
        rt("", "v1", "podtemplates", "PodTemplate", True, strategy=PodTemplateStrategy()),
        rt(
            "",
            "v1",
            "replicationcontrollers",
            "ReplicationController",
            True,
            short_names=("rc",),
            categories=("all",),
            strategy=ReplicationControllerStrategy(),
            status=True,
            subresources={"scale": SCALE},
        ),
        rt(
            "",
            "v1",
            "resourcequotas",
            "ResourceQuota",
            True,
            short_names=("quota",),
            strategy=ResourceQuotaStrategy(),
            status=True,
        ),
        rt("", "v1", "secrets", "Secret", True, strategy=SecretStrategy()),
        rt(
            "",
            "v1",
            "serviceaccounts",
            "ServiceAccount",
            True,
            short_names=("sa",),
            strategy=ServiceAccountStrategy(),
            subresources={
                "token": Subresource("token", "TokenRequest", CREATE_ONLY, "authentication.k8s.io", "v1")
            },
        ),
        rt(
            "",
            "v1",
            "services",
            "Service",
            True,
            short_names=("svc",),
            categories=("all",),
            strategy=ServiceStrategy(),
            status=True,
            subresources={
                "proxy": Subresource(
                    "proxy", "ServiceProxyOptions", ("create", "delete", "get", "patch", "update")
                )
            },
        ),
    ]
