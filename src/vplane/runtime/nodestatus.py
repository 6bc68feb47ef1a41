"""The Node object as the kubelet registers and updates it, and its heartbeat Lease.

:func:`machine_info` reads the machine (CPUs, memory, the data directory's disk, kernel, OS, IDs);
:func:`node_object` and :func:`node_status` build what the kubelet writes from it, with upstream's
labels, annotations, condition reasons and messages, and the kubelet server's port in
``status.daemonEndpoints.kubeletEndpoint.Port`` (where the API server connects for logs).
"""

from __future__ import annotations

import os
import platform
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vplane import __version__
from vplane.kube.objects import Obj
from vplane.runtime.status import rfc3339

MEMORY_EVICTION_THRESHOLD = 100 * 1024 * 1024
"""``memory.available<100Mi``: the kubelet's default hard eviction threshold, taken off allocatable."""
STORAGE_EVICTION_FRACTION = 0.10
"""``nodefs.available<10%``."""

CONDITIONS = (
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
)
"""The kubelet's node conditions while healthy (``pkg/kubelet/nodestatus/setters.go``)."""


@dataclass(frozen=True)
class Machine:
    cpus: int
    memory_bytes: int
    storage_bytes: int
    machine_id: str
    system_uuid: str
    boot_id: str
    kernel_version: str
    os_image: str
    architecture: str


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def _os_image() -> str:
    for line in _read("/etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"')
    return platform.system()


def _memory() -> int:
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 0


_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le", "s390x": "s390x"}


def machine_info(data_dir: Path) -> Machine:
    machine_id = _read("/etc/machine-id") or _read("/var/lib/dbus/machine-id")
    try:
        storage = shutil.disk_usage(data_dir).total
    except OSError:
        storage = 0
    return Machine(
        cpus=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1),
        memory_bytes=_memory(),
        storage_bytes=storage,
        machine_id=machine_id,
        system_uuid=_read("/sys/class/dmi/id/product_uuid") or machine_id,
        boot_id=_read("/proc/sys/kernel/random/boot_id"),
        kernel_version=platform.release(),
        os_image=_os_image(),
        architecture=_ARCH.get(platform.machine(), platform.machine()),
    )


def capacity(machine: Machine, max_pods: int) -> dict[str, str]:
    return {
        "cpu": str(machine.cpus),
        "ephemeral-storage": f"{machine.storage_bytes // 1024}Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": f"{machine.memory_bytes // 1024}Ki",
        "pods": str(max_pods),
    }


def allocatable(machine: Machine, max_pods: int, reserved_memory: int) -> dict[str, str]:
    memory = max(machine.memory_bytes - reserved_memory - MEMORY_EVICTION_THRESHOLD, 0)
    storage = int(machine.storage_bytes * (1 - STORAGE_EVICTION_FRACTION))
    return {
        "cpu": str(machine.cpus),
        "ephemeral-storage": str(storage),
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": f"{memory // 1024}Ki",
        "pods": str(max_pods),
    }


def node_labels(name: str, machine: Machine, extra: dict[str, str]) -> dict[str, str]:
    return {
        "beta.kubernetes.io/arch": machine.architecture,
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": machine.architecture,
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        **extra,
    }


def node_status(
    name: str,
    machine: Machine,
    *,
    max_pods: int,
    reserved_memory: int,
    kubelet_port: int,
    kubelet_version: str,
    images: list[Obj],
    previous: Obj | None,
    now: float,
) -> Obj:
    """The node's status; conditions keep their ``lastTransitionTime`` while their status holds."""
    old = {str(c.get("type")): c for c in (previous or {}).get("conditions") or [] if isinstance(c, dict)}
    stamp = rfc3339(now)
    conditions = []
    for kind, status, reason, message in CONDITIONS:
        before = old.get(kind)
        transition = before.get("lastTransitionTime") if before and before.get("status") == status else stamp
        conditions.append(
            {
                "type": kind,
                "status": status,
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": transition or stamp,
                "reason": reason,
                "message": message,
            }
        )
    return {
        "capacity": capacity(machine, max_pods),
        "allocatable": allocatable(machine, max_pods, reserved_memory),
        "conditions": conditions,
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
        "nodeInfo": {
            "machineID": machine.machine_id,
            "systemUUID": machine.system_uuid,
            "bootID": machine.boot_id,
            "kernelVersion": machine.kernel_version,
            "osImage": machine.os_image,
            "containerRuntimeVersion": f"vplane://{__version__}",
            "kubeletVersion": kubelet_version,
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": machine.architecture,
        },
        "images": images,
    }


def node_object(name: str, machine: Machine, labels: dict[str, str], pod_cidr: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels(name, machine, labels),
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr]},
    }


def lease_object(name: str, duration: int, now: float, previous: Obj | None) -> Obj:
    """The node's heartbeat: ``kube-node-lease/<node>``, held by the node, renewed with a micro time."""
    import datetime

    renew = datetime.datetime.fromtimestamp(now, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    lease: dict[str, Any] = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": duration, "renewTime": renew},
    }
    if previous is not None:
        lease["metadata"] = {**(previous.get("metadata") or {}), "name": name, "namespace": "kube-node-lease"}
    return lease
