"""Upstream's LimitRanger admission plug-in: the namespace's LimitRanges default a new pod's container
resources (mutating phase, before webhooks, so they and validation see the result) and hold pods and
claims to their minimums, maximums and ratios (validating phase). Decisions are :mod:`vplane.kube.limitrange`'s.

Only while some LimitRange exists does the plug-in count as configured, so a server without any keeps
skipping the mutating phase; which namespaces hold one is kept from committed events (:mod:`.presence`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from vplane.apiserver.admission import AdmissionRequest, Reinvocation
from vplane.apiserver.kinds.presence import Presence
from vplane.kube import errors, limitrange
from vplane.kube.objects import Obj

if TYPE_CHECKING:
    from vplane.apiserver.server import APIServer


class LimitRanger:
    name = "LimitRanger"

    def __init__(self, server: APIServer) -> None:
        self.server = server
        self.present = Presence(server, "", "v1", "limitranges")

    @property
    def active(self) -> bool:
        return self.present.anywhere

    def _in_namespace(self, namespace: str) -> list[Obj]:
        if not namespace or not self.present.holds(namespace):
            return []
        return self.server.objects.list(self.present.rtype, namespace)

    async def mutate(self, request: AdmissionRequest, reinvocation: Reinvocation) -> None:
        rtype = request.rtype
        if (
            request.operation != "CREATE"
            or rtype.group
            or rtype.resource != "pods"
            or request.subresource
            or request.obj is None
        ):
            return
        ranges = self._in_namespace(request.namespace)
        if ranges:
            request.obj = limitrange.apply_defaults(request.obj, ranges)

    async def admit(self, request: AdmissionRequest) -> None:
        rtype = request.rtype
        if rtype.group or request.subresource or request.obj is None:
            return
        check: Callable[[Obj, Obj], list[str]]
        if rtype.resource == "pods":
            if request.operation != "CREATE":
                return  # containers' resources cannot change on update (upstream skips pod updates)
            check = limitrange.validate_pod
        elif rtype.resource == "persistentvolumeclaims":
            if request.operation not in ("CREATE", "UPDATE"):
                return
            check = limitrange.validate_claim
        else:
            return
        if request.old is not None and (request.old.get("metadata") or {}).get("deletionTimestamp"):
            return
        for item in self._in_namespace(request.namespace):
            failures = check(item, request.obj)
            if failures:
                raise errors.forbidden(
                    rtype.resource, rtype.group, request.name, limitrange.aggregate(failures)
                )
