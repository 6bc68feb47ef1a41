"""Pod specs: upstream's defaults and the validation users hit, for pods and every pod template.

Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs, CronJobs, ReplicationControllers and
PodTemplates all embed a pod template; their strategies call :func:`default_template` and
:func:`validate_template` with the path of the template. Field paths and messages follow upstream's
``ValidatePodSpec`` (k8s.io/kubernetes ``pkg/apis/core/validation``), for the rules a kubectl or Helm user
commonly meets; rules that guard kubelet internals are left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vplane.kube import errors, quantity, validation
from vplane.kube.errors import Cause

RESTART_POLICIES = ["Always", "OnFailure", "Never"]
DNS_POLICIES = ["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"]
PULL_POLICIES = ["Always", "IfNotPresent", "Never"]
PROTOCOLS = ["SCTP", "TCP", "UDP"]
TOLERATION_OPERATORS = ["Equal", "Exists"]
TAINT_EFFECTS = ["NoExecute", "NoSchedule", "PreferNoSchedule"]
VOLUME_SOURCES = (
    "hostPath",
    "emptyDir",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "persistentVolumeClaim",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "downwardAPI",
    "fc",
    "azureFile",
    "configMap",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "projected",
    "portworxVolume",
    "scaleIO",
    "storageos",
    "csi",
    "ephemeral",
    "image",
)
DEFAULT_MODE = 420
"""0644, the mode configMap, secret, projected and downwardAPI volumes default to."""


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


# -- defaults -------------------------------------------------------------------------------------


def default_template(template: Any) -> None:
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        default_pod_spec(template["spec"])


def default_pod_spec(spec: dict[str, Any]) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    for key in ("containers", "initContainers", "ephemeralContainers"):
        for container in _l(spec.get(key)):
            if isinstance(container, dict):
                _default_container(container)
    for volume in _l(spec.get("volumes")):
        if not isinstance(volume, dict):
            continue
        for source in ("configMap", "secret", "projected", "downwardAPI"):
            if isinstance(volume.get(source), dict):
                volume[source].setdefault("defaultMode", DEFAULT_MODE)


def _default_container(container: dict[str, Any]) -> None:
    image = str(container.get("image", ""))
    tagged = ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest")
    container.setdefault("imagePullPolicy", "IfNotPresent" if tagged or "@" in image else "Always")
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    resources = container.setdefault("resources", {})
    if isinstance(resources, dict) and isinstance(resources.get("limits"), dict) and resources["limits"]:
        # Upstream's defaulting: a limit without a request is also the request.
        requests = resources.setdefault("requests", {})
        if isinstance(requests, dict):
            for name, amount in resources["limits"].items():
                requests.setdefault(name, amount)
    for port in _l(container.get("ports")):
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        value = container.get(probe)
        if isinstance(value, dict):
            value.setdefault("timeoutSeconds", 1)
            value.setdefault("periodSeconds", 10)
            value.setdefault("successThreshold", 1)
            value.setdefault("failureThreshold", 3)
            for handler in ("httpGet",):
                if isinstance(value.get(handler), dict):
                    value[handler].setdefault("path", "/")
                    value[handler].setdefault("scheme", "HTTP")
    for env in _l(container.get("env")):
        field_ref = _d(_d(env).get("valueFrom")).get("fieldRef")
        if isinstance(field_ref, dict):
            field_ref.setdefault("apiVersion", "v1")


# -- validation -----------------------------------------------------------------------------------


def validate_template(template: Any, path: str, *, restart_policies: list[str] | None = None) -> list[Cause]:
    """A pod template at ``path`` (``spec.template``): labels, annotations and the pod spec.

    ``restart_policies`` narrows what the template may use (Jobs: OnFailure or Never; workloads: Always)."""
    if not isinstance(template, dict):
        return [errors.field_required(path)]
    meta = _d(template.get("metadata"))
    causes = validation.validate_labels(meta.get("labels"), f"{path}.metadata.labels")
    causes += validation.validate_annotations(meta.get("annotations"), f"{path}.metadata.annotations")
    spec = template.get("spec")
    if not isinstance(spec, dict):
        return [*causes, errors.field_required(f"{path}.spec.containers")]
    causes += validate_pod_spec(spec, f"{path}.spec")
    if restart_policies is not None:
        policy = spec.get("restartPolicy")
        if policy not in restart_policies and policy in RESTART_POLICIES:
            causes.append(errors.field_not_supported(f"{path}.spec.restartPolicy", policy, restart_policies))
    return causes


def validate_pod_spec(spec: Mapping[str, Any], path: str) -> list[Cause]:
    causes: list[Cause] = []
    volumes = _validate_volumes(spec.get("volumes"), f"{path}.volumes", causes)
    containers = spec.get("containers")
    if not containers:
        causes.append(errors.field_required(f"{path}.containers"))
    names: set[str] = set()
    for key in ("initContainers", "containers"):
        for i, container in enumerate(_l(spec.get(key))):
            causes += _validate_container(container, f"{path}.{key}[{i}]", names, volumes)
    for i, container in enumerate(_l(spec.get("ephemeralContainers"))):
        causes += _validate_container(container, f"{path}.ephemeralContainers[{i}]", names, volumes)
    policy = spec.get("restartPolicy")
    if policy is not None and policy not in RESTART_POLICIES:
        causes.append(errors.field_not_supported(f"{path}.restartPolicy", policy, RESTART_POLICIES))
    dns = spec.get("dnsPolicy")
    if dns is not None and dns not in DNS_POLICIES:
        causes.append(errors.field_not_supported(f"{path}.dnsPolicy", dns, DNS_POLICIES))
    causes += validation.validate_labels(spec.get("nodeSelector"), f"{path}.nodeSelector")
    for field in ("serviceAccountName", "nodeName", "priorityClassName"):
        value = spec.get(field)
        if isinstance(value, str) and value:
            causes += [
                errors.field_invalid(f"{path}.{field}", value, m) for m in validation.dns1123_subdomain(value)
            ]
    grace = spec.get("activeDeadlineSeconds")
    if isinstance(grace, int) and not isinstance(grace, bool) and grace <= 0:
        causes.append(
            errors.field_invalid(
                f"{path}.activeDeadlineSeconds", grace, "must be between 1 and 2147483647, inclusive"
            )
        )
    for i, toleration in enumerate(_l(spec.get("tolerations"))):
        causes += _validate_toleration(_d(toleration), f"{path}.tolerations[{i}]")
    return causes


def _validate_volumes(value: Any, path: str, causes: list[Cause]) -> set[str]:
    names: set[str] = set()
    for i, volume in enumerate(_l(value)):
        vpath = f"{path}[{i}]"
        volume = _d(volume)
        name = volume.get("name")
        if not name:
            causes.append(errors.field_required(f"{vpath}.name"))
        elif isinstance(name, str):
            causes.extend(
                errors.field_invalid(f"{vpath}.name", name, m) for m in validation.dns1123_label(name)
            )
            if name in names:
                causes.append(errors.field_duplicate(f"{vpath}.name", name))
            names.add(name)
        sources = [s for s in VOLUME_SOURCES if volume.get(s) is not None]
        if not sources:
            causes.append(errors.field_required(vpath, "must specify a volume type"))
        elif len(sources) > 1:
            causes.append(
                errors.field_forbidden(f"{vpath}.{sources[1]}", "may not specify more than 1 volume type")
            )
        claim = _d(volume.get("persistentVolumeClaim"))
        if "persistentVolumeClaim" in sources and not claim.get("claimName"):
            causes.append(errors.field_required(f"{vpath}.persistentVolumeClaim.claimName"))
        host = _d(volume.get("hostPath"))
        if "hostPath" in sources and not host.get("path"):
            causes.append(errors.field_required(f"{vpath}.hostPath.path"))
    return names


def _validate_container(container: Any, path: str, names: set[str], volumes: set[str]) -> list[Cause]:
    if not isinstance(container, dict):
        return [errors.field_required(f"{path}.name")]
    causes: list[Cause] = []
    name = container.get("name")
    if not name:
        causes.append(errors.field_required(f"{path}.name"))
    elif isinstance(name, str):
        causes.extend(errors.field_invalid(f"{path}.name", name, m) for m in validation.dns1123_label(name))
        if name in names:
            causes.append(errors.field_duplicate(f"{path}.name", name))
        names.add(name)
    if not container.get("image"):
        causes.append(errors.field_required(f"{path}.image"))
    pull = container.get("imagePullPolicy")
    if pull is not None and pull not in PULL_POLICIES:
        causes.append(errors.field_not_supported(f"{path}.imagePullPolicy", pull, PULL_POLICIES))
    for i, port in enumerate(_l(container.get("ports"))):
        causes += _validate_port(_d(port), f"{path}.ports[{i}]")
    for i, env in enumerate(_l(container.get("env"))):
        if not _d(env).get("name"):
            causes.append(errors.field_required(f"{path}.env[{i}].name"))
    mounts: set[str] = set()
    for i, mount in enumerate(_l(container.get("volumeMounts"))):
        mount = _d(mount)
        mpath = f"{path}.volumeMounts[{i}]"
        mount_name = mount.get("name")
        if not mount_name:
            causes.append(errors.field_required(f"{mpath}.name"))
        elif mount_name not in volumes:
            causes.append(errors.field_not_found(f"{mpath}.name", mount_name))
        mount_path = mount.get("mountPath")
        if not mount_path:
            causes.append(errors.field_required(f"{mpath}.mountPath"))
        elif mount_path in mounts:
            causes.append(errors.field_invalid(f"{mpath}.mountPath", mount_path, "must be unique"))
        else:
            mounts.add(mount_path)
    causes += _validate_resources(_d(container.get("resources")), f"{path}.resources")
    return causes


def _validate_port(port: dict[str, Any], path: str) -> list[Cause]:
    causes: list[Cause] = []
    number = port.get("containerPort")
    if number is None:
        causes.append(errors.field_required(f"{path}.containerPort"))
    elif not isinstance(number, int) or isinstance(number, bool) or not 0 < number < 65536:
        causes.append(
            errors.field_invalid(f"{path}.containerPort", number, "must be between 1 and 65535, inclusive")
        )
    host = port.get("hostPort")
    if isinstance(host, int) and not isinstance(host, bool) and host != 0 and not 0 < host < 65536:
        causes.append(
            errors.field_invalid(f"{path}.hostPort", host, "must be between 1 and 65535, inclusive")
        )
    protocol = port.get("protocol")
    if protocol is not None and protocol not in PROTOCOLS:
        causes.append(errors.field_not_supported(f"{path}.protocol", protocol, PROTOCOLS))
    name = port.get("name")
    if isinstance(name, str) and name:
        causes.extend(errors.field_invalid(f"{path}.name", name, m) for m in port_name(name))
    return causes


def port_name(name: str) -> list[str]:
    """Upstream ``IsValidPortName`` (an IANA service name)."""
    out: list[str] = []
    if len(name) < 1 or len(name) > 15:
        out.append("must be no more than 15 characters")
    if not all(c.islower() or c.isdigit() or c == "-" for c in name if c.isascii()) or not name.isascii():
        out.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if "--" in name:
        out.append("must not contain consecutive hyphens")
    if not any(c.isalpha() for c in name):
        out.append("must contain at least one letter (a-z)")
    if name.startswith("-") or name.endswith("-"):
        out.append("must not begin or end with a hyphen")
    return out


def _validate_resources(resources: dict[str, Any], path: str) -> list[Cause]:
    causes: list[Cause] = []
    values: dict[str, dict[str, Any]] = {}
    for part in ("limits", "requests"):
        amounts = _d(resources.get(part))
        values[part] = {}
        for name, raw in amounts.items():
            parsed = quantity.parse(raw)
            if parsed is None:
                causes.append(errors.field_invalid(f"{path}.{part}[{name}]", raw, quantity.QUANTITY_MESSAGE))
                continue
            if parsed < 0:
                causes.append(
                    errors.field_invalid(
                        f"{path}.{part}[{name}]", str(raw), "must be greater than or equal to 0"
                    )
                )
            values[part][name] = parsed
    for name, request in values["requests"].items():
        limit = values["limits"].get(name)
        if limit is not None and request > limit:
            raw = _d(resources.get("requests")).get(name)
            causes.append(
                errors.field_invalid(
                    f"{path}.requests",
                    str(raw),
                    f"must be less than or equal to {name} limit of {_d(resources.get('limits')).get(name)}",
                )
            )
    return causes


def _validate_toleration(toleration: dict[str, Any], path: str) -> list[Cause]:
    causes: list[Cause] = []
    operator = toleration.get("operator")
    if operator is not None and operator not in TOLERATION_OPERATORS:
        causes.append(errors.field_not_supported(f"{path}.operator", operator, TOLERATION_OPERATORS))
    if operator == "Exists" and toleration.get("value"):
        causes.append(
            errors.field_invalid(
                f"{path}.operator", toleration.get("value"), "value must be empty when `operator` is 'Exists'"
            )
        )
    effect = toleration.get("effect")
    if effect and effect not in TAINT_EFFECTS:
        causes.append(errors.field_not_supported(f"{path}.effect", effect, TAINT_EFFECTS))
    key = toleration.get("key")
    if isinstance(key, str) and key:
        causes += validation.validate_label_key(key, f"{path}.key")
    elif operator != "Exists":
        causes.append(
            errors.field_invalid(
                f"{path}.operator",
                operator or "",
                'operator must be Exists when `key` is empty, which means "match all values and all keys"',
            )
        )
    return causes


def validate_taints(taints: Any, path: str) -> list[Cause]:
    """Node taints: a qualified-name key and a known effect, no duplicate key and effect."""
    causes: list[Cause] = []
    seen: set[tuple[str, str]] = set()
    for i, taint in enumerate(_l(taints)):
        taint = _d(taint)
        key = taint.get("key")
        if not key:
            causes.append(errors.field_required(f"{path}[{i}].key"))
        elif isinstance(key, str):
            causes += validation.validate_label_key(key, f"{path}[{i}].key")
        value = taint.get("value")
        if isinstance(value, str) and value:
            causes += [
                errors.field_invalid(f"{path}[{i}].value", value, m) for m in validation.label_value(value)
            ]
        effect = taint.get("effect")
        if not effect:
            causes.append(errors.field_required(f"{path}[{i}].effect"))
        elif effect not in TAINT_EFFECTS:
            causes.append(errors.field_not_supported(f"{path}[{i}].effect", effect, TAINT_EFFECTS))
        pair = (str(key), str(effect))
        if pair in seen:
            causes.append(
                errors.field_duplicate(f"{path}[{i}]", "taints must be unique by key and effect pair")
            )
        seen.add(pair)
    return causes
