"""Upstream's ResourceQuota admission plug-in: a write that would take a namespace over one of its quotas
is refused (403 ``exceeded quota: ...``), and one that fits is charged to the quotas' ``status.used``
before it is stored, so concurrent creates cannot all slip under the same limit.

The decisions are :func:`vplane.kube.quota.check_request`'s. Writes to one namespace's quotas are made
one at a time here (a lock per namespace, where upstream batches them per namespace), each a
compare-and-swap on the quota's resourceVersion, retried on a conflict with the controller's writes as
upstream does (three retries, then the conflict is the answer). A namespace without quotas costs a dict
lookup (:mod:`.presence`); the plug-in runs last, as upstream's does, so a write another plug-in refuses is
never charged.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from vplane.apiserver.admission import AdmissionRequest
from vplane.apiserver.kinds.presence import Presence
from vplane.kube import errors
from vplane.kube import quota as quotalib
from vplane.kube.objects import Obj

if TYPE_CHECKING:
    from vplane.apiserver.registry import ResourceType
    from vplane.apiserver.server import APIServer

RETRIES = 3


class ResourceQuotaAdmission:
    def __init__(self, server: APIServer) -> None:
        self.server = server
        self.present = Presence(server, "", "v1", "resourcequotas")
        self._locks: dict[str, asyncio.Lock] = {}
        self._waiting: dict[str, int] = {}

    async def admit(self, request: AdmissionRequest) -> None:
        if not request.namespace or request.obj is None or request.operation not in ("CREATE", "UPDATE"):
            return
        if not self.present.holds(request.namespace):
            return
        quotas = self.present.rtype
        rtype = request.rtype
        if (rtype.group, rtype.resource) in quotalib.IGNORED_RESOURCES:
            return
        evaluator = quotalib.evaluator_for(rtype.group, rtype.resource)
        if not evaluator.handles(request.operation, request.subresource, request.obj, request.old):
            return
        namespace = request.namespace
        lock = self._locks.setdefault(namespace, asyncio.Lock())
        self._waiting[namespace] = self._waiting.get(namespace, 0) + 1
        try:
            async with lock:
                await self._charge(request, evaluator, quotas)
        finally:
            self._waiting[namespace] -= 1
            if not self._waiting[namespace]:
                del self._waiting[namespace]
                del self._locks[namespace]

    async def _charge(
        self, request: AdmissionRequest, evaluator: quotalib.Evaluator, quotas: ResourceType
    ) -> None:
        assert request.obj is not None
        rtype = request.rtype
        objects = self.server.objects
        names: set[str] | None = None
        last: errors.StatusError | None = None
        for _ in range(RETRIES + 1):
            current = objects.list(quotas, request.namespace)
            if names is not None:
                # A retry looks again only at the quotas whose update failed (upstream's checkQuotas).
                current = [q for q in current if q["metadata"]["name"] in names]
            try:
                charged = quotalib.check_request(
                    current,
                    evaluator,
                    operation=request.operation,
                    subresource=request.subresource,
                    obj=request.obj,
                    old=request.old,
                    now=self.server.clock(),
                )
            except quotalib.QuotaDenied as exc:
                raise errors.forbidden(rtype.resource, rtype.group, request.name, exc.message) from None
            if request.ctx.dry_run:
                return
            failed: set[str] = set()
            for before, after in zip(current, charged, strict=True):
                if after is before:
                    continue
                try:
                    await self._write(quotas, after)
                except errors.StatusError as exc:
                    if exc.code != 409:
                        raise
                    failed.add(after["metadata"]["name"])
                    last = exc
            if not failed:
                return
            names = failed
        assert last is not None
        raise last

    async def _write(self, quotas: ResourceType, quota: Obj) -> None:
        meta = quota["metadata"]
        await self.server.objects.update(
            self.server.system_context(), quotas, meta["namespace"], meta["name"], quota, "status"
        )
