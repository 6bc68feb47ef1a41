"""Admission: checks every write passes after validation and before it is stored.

Plug-ins see an :class:`AdmissionRequest` and raise a :class:`~vplane.kube.errors.StatusError` to deny.
Built in: namespace lifecycle (no new content in a missing or terminating namespace). The
ValidatingAdmissionPolicy plug-in joins the chain in :mod:`vplane.apiserver.vap`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from vplane.apiserver.context import RequestContext
from vplane.kube import errors
from vplane.kube.objects import Obj

if TYPE_CHECKING:
    from vplane.apiserver.registry import ResourceType


@dataclass(slots=True)
class AdmissionRequest:
    ctx: RequestContext
    operation: str
    """CREATE, UPDATE or DELETE."""
    rtype: ResourceType
    subresource: str
    namespace: str
    name: str
    obj: Obj | None
    old: Obj | None


class AdmissionPlugin(Protocol):
    async def admit(self, request: AdmissionRequest) -> None: ...


class Admission:
    """The chain, run in order; the first denial wins."""

    def __init__(self) -> None:
        self.plugins: list[AdmissionPlugin] = []

    def add(self, plugin: AdmissionPlugin) -> None:
        self.plugins.append(plugin)

    async def admit(self, request: AdmissionRequest) -> None:
        for plugin in self.plugins:
            await plugin.admit(request)


class NamespaceLookup(Protocol):
    def namespace_phase(self, name: str) -> str | None:
        """``Active``, ``Terminating`` or ``None`` when the namespace does not exist."""


IMMORTAL_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})


class NamespaceLifecycle:
    """Upstream's NamespaceLifecycle: creates need an existing, non-terminating namespace."""

    def __init__(self, lookup: NamespaceLookup) -> None:
        self.lookup = lookup

    async def admit(self, request: AdmissionRequest) -> None:
        rtype = request.rtype
        if request.operation == "DELETE" and rtype.resource == "namespaces" and not rtype.group:
            if request.name in IMMORTAL_NAMESPACES:
                raise errors.forbidden("namespaces", "", request.name, "this namespace may not be deleted")
            return
        if request.operation != "CREATE" or not rtype.namespaced or not request.namespace:
            return
        if rtype.resource in ("subjectaccessreviews", "localsubjectaccessreviews", "tokenreviews"):
            return
        phase = self.lookup.namespace_phase(request.namespace)
        if phase is None:
            raise errors.not_found("namespaces", request.namespace)
        if phase == "Terminating":
            raise errors.forbidden(
                rtype.resource,
                rtype.group,
                request.name,
                f"unable to create new content in namespace {request.namespace} because it is being terminated",
            )
