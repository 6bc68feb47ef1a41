"""The runtime's API client: :class:`~vplane.controllers.client.KubeClient` plus the two calls a kubelet
makes that the controllers' facade has no use for: a TokenRequest (a subresource create) and a pod
deletion with a grace period of zero."""

from __future__ import annotations

from typing import Any

from lightkube import KubeConfig
from lightkube.core import resource as lk_resource
from lightkube.generic_resource import GenericNamespacedResource

from vplane.controllers.client import KubeClient, Resource, _errors
from vplane.kube.objects import Obj

PODS = Resource("v1", "Pod", "pods", namespaced=True)
NODES = Resource("v1", "Node", "nodes", namespaced=False)
SERVICES = Resource("v1", "Service", "services", namespaced=True)
ENDPOINTS = Resource("v1", "Endpoints", "endpoints", namespaced=True)
SECRETS = Resource("v1", "Secret", "secrets", namespaced=True)
CONFIGMAPS = Resource("v1", "ConfigMap", "configmaps", namespaced=True)
SERVICE_ACCOUNTS = Resource("v1", "ServiceAccount", "serviceaccounts", namespaced=True)
SUBJECT_ACCESS_REVIEWS = Resource(
    "authorization.k8s.io/v1", "SubjectAccessReview", "subjectaccessreviews", namespaced=False
)

_TOKEN_REQUEST: Any = type(
    "TokenRequest",
    (GenericNamespacedResource,),
    {
        "_api_info": lk_resource.ApiInfo(
            resource=lk_resource.ResourceDef("authentication.k8s.io", "v1", "TokenRequest"),
            parent=lk_resource.ResourceDef("", "v1", "ServiceAccount"),
            plural="serviceaccounts",
            verbs=["post"],
            action="token",
        )
    },
)


class RuntimeClient(KubeClient):
    @classmethod
    def for_runtime(cls, path: str, context: str | None = None, timeout: float = 10.0) -> RuntimeClient:
        import httpx2
        from lightkube import AsyncClient

        config = KubeConfig.from_file(path).get(context_name=context)
        if config is None:
            raise ValueError(f"kubeconfig {path} has no context {context!r}")
        client = AsyncClient(config=config, timeout=httpx2.Timeout(timeout), field_manager="kubelet")
        return cls(client, field_manager="kubelet")

    async def token_request(self, namespace: str, service_account: str, spec: Obj) -> Obj:
        body = _TOKEN_REQUEST(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "metadata": {}, "spec": spec}
        )
        with _errors():
            created = await self._lk.create(body, service_account, namespace=namespace)
        return dict(created)

    async def delete_now(self, resource: Resource, name: str, *, namespace: str | None = None) -> None:
        """DELETE with ``gracePeriodSeconds=0``: how the kubelet removes a pod it has finished terminating."""
        with _errors():
            await self._lk.delete(self._cls(resource), name, namespace=namespace, grace_period=0)
