"""The built-in kinds a kube-apiserver 1.36 serves, one module per group (or concern).

:func:`builtin_types` declares them (names, scope, verbs, subresources, strategy); :func:`attach` plugs
their subresource handlers and admission into a server; :func:`bootstrap` creates the objects a fresh
cluster has (system priority classes, API priority and fairness defaults, local APIServices).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from vplane.apiserver import admissionkinds, timeutil
from vplane.apiserver.kinds import (
    apis,
    apps,
    autoscaling,
    batch,
    certificates,
    core,
    endpointslices,
    events,
    flowcontrol,
    networking,
    policy,
    resource,
    scheduling,
    storage,
)
from vplane.apiserver.kinds.admission import (
    DefaultStorageClassAdmission,
    PriorityAdmission,
    StorageObjectInUseProtectionAdmission,
)
from vplane.apiserver.kinds.csradmission import CertificateAdmission
from vplane.apiserver.kinds.limitranger import LimitRanger
from vplane.apiserver.kinds.subresources import Subresources
from vplane.apiserver.registry import Registry, ResourceType
from vplane.kube import errors
from vplane.kube.objects import Obj

if TYPE_CHECKING:
    from vplane.apiserver.server import APIServer


def builtin_types(clock: timeutil.Clock = timeutil.wall_clock) -> list[ResourceType]:
    return [
        *core.types(clock),
        *apps.types(),
        *batch.types(),
        *autoscaling.types(),
        *policy.types(),
        *networking.types(),
        *storage.types(),
        *scheduling.types(),
        *endpointslices.types(),
        *events.types(),
        *certificates.types(clock),
        *resource.types(),
        *flowcontrol.types(),
        *apis.types(),
    ]


def install(registry: Registry, clock: timeutil.Clock = timeutil.wall_clock) -> None:
    for rtype in builtin_types(clock):
        registry.add(rtype)
    admissionkinds.install(registry)


def attach(server: APIServer) -> None:
    """Subresource handlers and admission for the kinds above."""
    Subresources(server).attach()
    server.admission.add(PriorityAdmission(server.registry, server.objects))
    server.admission.add(DefaultStorageClassAdmission(server.registry, server.objects))
    server.admission.add(StorageObjectInUseProtectionAdmission())
    server.admission.add(certificates.RequesterAdmission())
    server.admission.add(CertificateAdmission(server.authorize))
    limit_ranger = LimitRanger(server)
    server.admission.add_mutating(limit_ranger)  # before the policies and webhooks, as upstream orders them
    server.admission.add(limit_ranger)


def builtin_group_versions() -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    for rtype in builtin_types():
        if (rtype.group, rtype.version) not in seen:
            seen.append((rtype.group, rtype.version))
    return seen


def bootstrap_objects() -> list[Obj]:
    return [
        *scheduling.system_priority_classes(),
        *flowcontrol.bootstrap_objects(),
        *apis.local_api_services(builtin_group_versions()),
    ]


async def bootstrap(server: APIServer) -> None:
    """Create what a fresh cluster has, leaving objects that exist alone (an admin may have changed them)."""
    ctx = server.system_context()
    objects = bootstrap_objects()
    if server.settings.default_storage_class:
        objects.append(storage.default_storage_class())
    for obj in objects:
        group, _, version = obj["apiVersion"].rpartition("/")
        rtype = server.registry.for_kind(group, version, obj["kind"])
        if rtype is None or server.objects.get(rtype, "", obj["metadata"]["name"]) is not None:
            continue
        with contextlib.suppress(errors.StatusError):
            await server.objects.create(ctx, rtype, "", obj)
    await _flow_schema_status(server)


async def _flow_schema_status(server: APIServer) -> None:
    """The ``Dangling`` condition upstream's APF controller keeps (``kubectl get flowschemas`` shows it)."""
    schemas = server.registry.get("flowcontrol.apiserver.k8s.io", "v1", "flowschemas")
    levels = server.registry.get("flowcontrol.apiserver.k8s.io", "v1", "prioritylevelconfigurations")
    if schemas is None or levels is None:
        return
    names = {str(o["metadata"]["name"]) for o in server.objects.list(levels)}
    now = timeutil.rfc3339(server.clock())
    for schema in server.objects.list(schemas):
        level = str((schema.get("spec") or {}).get("priorityLevelConfiguration", {}).get("name", ""))
        wanted = flowcontrol.dangling_condition(level, level in names, now)
        current = [
            c for c in (schema.get("status") or {}).get("conditions") or [] if c.get("type") == "Dangling"
        ]
        if current and current[0].get("status") == wanted["status"]:
            continue

        def mutate(obj: Obj, wanted: Obj = wanted) -> Obj:
            status = obj.setdefault("status", {})
            others = [c for c in status.get("conditions") or [] if c.get("type") != "Dangling"]
            status["conditions"] = [*others, wanted]
            obj["metadata"].pop("resourceVersion", None)
            return obj

        with contextlib.suppress(errors.StatusError):
            await server.objects.guaranteed_update(
                server.system_context(), schemas, "", schema["metadata"]["name"], mutate, subresource="status"
            )
