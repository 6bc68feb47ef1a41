"""Admission: checks every write passes after validation and before it is stored.

Plug-ins see an :class:`AdmissionRequest` and raise a :class:`~vplane.kube.errors.StatusError` to deny.
Built in: namespace lifecycle (no new content in a missing or terminating namespace). The
ValidatingAdmissionPolicy plug-in joins the chain in :mod:`vplane.apiserver.vap`, admission webhooks in
:mod:`vplane.apiserver.webhooks`, MutatingAdmissionPolicy in :mod:`vplane.apiserver.mutatingpolicy`.

Mutating plug-ins run first (:meth:`Admission.mutate`), in upstream's order (MutatingAdmissionPolicy, then
mutating webhooks), and replace ``request.obj`` when they change it; if any of them asks, the mutating
chain runs once more (upstream's reinvocation: only what opted in with ``reinvocationPolicy: IfNeeded``
runs again). Validating plug-ins follow (:meth:`Admission.admit`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

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


@dataclass(slots=True)
class Reinvocation:
    """One request's pass through the mutating chain (upstream ``ReinvocationContext``)."""

    is_reinvoke: bool = False
    should_reinvoke: bool = False
    """Set by a plug-in whose mutation changed the object: the chain then runs once more."""
    state: dict[str, Any] = field(default_factory=dict)
    """Per-plug-in memory kept across the two passes, keyed by plug-in name."""


class MutatingPlugin(Protocol):
    @property
    def active(self) -> bool:
        """Whether anything is configured at all: a cheap check, made on every write."""

    async def mutate(self, request: AdmissionRequest, reinvocation: Reinvocation) -> None:
        """Replace ``request.obj`` with the mutated object (never change it in place), or deny."""


class Admission:
    """The chain, run in order; the first denial wins."""

    def __init__(self) -> None:
        self.plugins: list[AdmissionPlugin] = []
        self.mutators: list[MutatingPlugin] = []

    def add(self, plugin: AdmissionPlugin) -> None:
        self.plugins.append(plugin)

    def add_mutating(self, plugin: MutatingPlugin) -> None:
        self.mutators.append(plugin)

    @property
    def mutating(self) -> bool:
        """Whether any mutating plug-in has something configured (writes skip the phase otherwise)."""
        for mutator in self.mutators:  # noqa: SIM110 - asked on every write; a loop is half any()'s cost
            if mutator.active:
                return True
        return False

    async def mutate(self, request: AdmissionRequest) -> Obj | None:
        """The mutating phase; answers ``request.obj`` as the plug-ins left it."""
        if not self.mutating:
            return request.obj
        reinvocation = Reinvocation()
        try:
            for plugin in self.mutators:
                await plugin.mutate(request, reinvocation)
            if reinvocation.should_reinvoke:
                reinvocation.is_reinvoke = True
                for plugin in self.mutators:
                    await plugin.mutate(request, reinvocation)
        except errors.StatusError as exc:
            _carry_warnings(exc, request.ctx.warnings)
            raise
        return request.obj

    async def admit(self, request: AdmissionRequest) -> None:
        try:
            for plugin in self.plugins:
                await plugin.admit(request)
        except errors.StatusError as exc:
            _carry_warnings(exc, request.ctx.warnings)
            raise


def _carry_warnings(exc: errors.StatusError, warnings: list[str]) -> None:
    """Warnings gathered before a denial reach the client with it, as upstream's do (one ``Warning``
    header; client-go splits comma-separated warn-values)."""
    if warnings and "Warning" not in exc.headers:
        exc.headers["Warning"] = ", ".join('299 - "' + w.replace('"', '\\"') + '"' for w in warnings)


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
