"""Per-namespace defaults: the ``default`` ServiceAccount (upstream ``serviceaccounts-controller``) and
the ``kube-root-ca.crt`` ConfigMap (upstream ``root-ca-cert-publisher``), both keyed by namespace.
"""

from __future__ import annotations

from vplane.controllers.kcm import pods as podutil
from vplane.controllers.kcm.context import ControllerContext, ManagedController
from vplane.controllers.kcm.replicaset import namespace_terminating
from vplane.controllers.kcm.resources import CONFIGMAPS, NAMESPACES, SERVICEACCOUNTS
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj

DEFAULT_SERVICE_ACCOUNTS = ("default",)
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
DESCRIPTION_ANNOTATION = "kubernetes.io/description"
DESCRIPTION = (
    "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as "
    "the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of "
    "Kubernetes clusters."
)


def _active(namespace: Obj | None) -> bool:
    return namespace is not None and (namespace.get("status") or {}).get("phase", "Active") == "Active"


class ServiceAccountsController(ManagedController):
    """Every active namespace has the ``default`` ServiceAccount; a deleted one comes back."""

    name = "serviceaccount-controller"

    def __init__(self, ctx: ControllerContext) -> None:
        self.namespaces = ctx.informers.informer(NAMESPACES)
        self.accounts = ctx.informers.informer(SERVICEACCOUNTS, field_selector={"metadata.name": "default"})
        super().__init__(ctx, self.namespaces, [self.accounts], ctx.settings.concurrent_serviceaccount_syncs)
        self.accounts.add_handlers(on_delete=lambda sa: self.enqueue(podutil.namespace_of(sa)))

    async def reconcile(self, key: str) -> float | None:
        namespace = self.namespaces.get(key)
        if not _active(namespace):
            return None
        for name in DEFAULT_SERVICE_ACCOUNTS:
            if self.accounts.get(f"{key}/{name}") is not None:
                continue
            try:
                await self.client.create(SERVICEACCOUNTS, {"metadata": {"name": name}}, namespace=key)
            except StatusError as exc:
                if exc.code == 409 or exc.code == 404 or namespace_terminating(exc):
                    continue
                raise
        return None


class RootCAPublisher(ManagedController):
    """Every namespace has ``kube-root-ca.crt`` holding the cluster CA, put back when changed or deleted."""

    name = "root-ca-cert-publisher"

    def __init__(self, ctx: ControllerContext) -> None:
        if not ctx.root_ca:
            raise ValueError("the root CA publisher needs the cluster's CA certificate")
        self.root_ca = ctx.root_ca.decode()
        self.namespaces = ctx.informers.informer(NAMESPACES)
        self.configmaps = ctx.informers.informer(
            CONFIGMAPS, field_selector={"metadata.name": ROOT_CA_CONFIGMAP}
        )
        super().__init__(ctx, self.namespaces, [self.configmaps], ctx.settings.concurrent_root_ca_syncs)
        self.configmaps.add_handlers(
            on_update=lambda old, new: self.enqueue(podutil.namespace_of(new)),
            on_delete=lambda cm: self.enqueue(podutil.namespace_of(cm)),
        )

    async def reconcile(self, key: str) -> float | None:
        namespace = self.namespaces.get(key)
        if not _active(namespace):
            return None
        current = self.configmaps.get(f"{key}/{ROOT_CA_CONFIGMAP}")
        data = {"ca.crt": self.root_ca}
        if current is None:
            try:
                await self.client.create(
                    CONFIGMAPS,
                    {
                        "metadata": {
                            "name": ROOT_CA_CONFIGMAP,
                            "annotations": {DESCRIPTION_ANNOTATION: DESCRIPTION},
                        },
                        "data": data,
                    },
                    namespace=key,
                )
            except StatusError as exc:
                if exc.code == 404 or namespace_terminating(exc):
                    return None
                raise
            return None
        if current.get("data") == data and podutil.annotations_of(current).get(DESCRIPTION_ANNOTATION):
            return None
        updated = {**current, "data": data}
        updated["metadata"] = {
            **podutil.meta(current),
            "annotations": {**podutil.annotations_of(current), DESCRIPTION_ANNOTATION: DESCRIPTION},
        }
        await self.client.replace(CONFIGMAPS, updated, namespace=key)
        return None
