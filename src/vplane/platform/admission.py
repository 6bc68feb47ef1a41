"""Platform admission: rules about management objects that span objects or need the tenant config parsed.

- At most one Cluster may have ``spec.local: true`` (connected-cluster runbook).
- Creating a Cluster beyond the licence's connected-cluster limit (``connected_cluster_limit``) is
  refused; the platform's own cluster (``spec.local``) does not count. (A Cluster with none of
  ``spec.config``, ``spec.local``, ``spec.networkPeer`` is refused by its validation, ``kinds``.)
- A VirtualClusterInstance's vcluster.yaml (``spec.template.helmRelease.values``) must validate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vplane.apiserver.admission import AdmissionRequest
from vplane.kube import errors
from vplane.kube import tenantconfig as tenant_config
from vplane.kube.accesskeys import GROUP

if TYPE_CHECKING:
    from vplane.apiserver.server import APIServer


def over_cluster_limit(clusters: list[dict[str, Any]], name: str, limit: int | None) -> int | None:
    """How many connected clusters there are when creating ``name`` would exceed ``limit`` (else None)."""
    if limit is None:
        return None
    connected = [
        c for c in clusters if c["metadata"]["name"] != name and not (c.get("spec") or {}).get("local")
    ]
    return len(connected) if len(connected) >= limit else None


class ConnectedClusterLimit:
    """The licence's connected-cluster limit on Cluster creation (wired with the connected clusters)."""

    def __init__(self, server: APIServer, limit: int | None) -> None:
        self.server = server
        self.limit = limit

    async def admit(self, request: AdmissionRequest) -> None:
        rtype = request.rtype
        if (
            rtype.group != GROUP
            or rtype.resource != "clusters"
            or request.operation != "CREATE"
            or request.subresource
            or request.obj is None
            or (request.obj.get("spec") or {}).get("local")
        ):
            return
        count = over_cluster_limit(self.server.objects.list(rtype), request.name, self.limit)
        if count is not None and self.limit is not None:
            raise errors.forbidden("clusters", GROUP, request.name, cluster_limit_message(self.limit, count))


def cluster_limit_message(limit: int, count: int) -> str:
    """The refusal's text, spelled as the runbook's row ("exceeding the license limit") so a search finds it."""
    return (
        f"connecting this cluster would exceed the license's connected-cluster limit of {limit} "
        f"({count} connected already); disconnect an unused cluster or raise the limit"
    )


class PlatformAdmission:
    def __init__(self, server: APIServer) -> None:
        self.server = server

    async def admit(self, request: AdmissionRequest) -> None:
        rtype = request.rtype
        if rtype.group != GROUP or request.operation not in ("CREATE", "UPDATE") or request.obj is None:
            return
        if request.subresource:
            return
        spec = request.obj.get("spec") or {}
        if rtype.resource == "clusters" and spec.get("local"):
            for other in self.server.objects.list(rtype):
                if other["metadata"]["name"] != request.name and (other.get("spec") or {}).get("local"):
                    raise errors.invalid(
                        "Cluster",
                        request.name,
                        [
                            errors.field_forbidden(
                                "spec.local",
                                f'only one cluster may have spec.local set; cluster "{other["metadata"]["name"]}" already does',
                            )
                        ],
                        GROUP,
                    )
        if rtype.resource == "virtualclusterinstances":
            values = ((spec.get("template") or {}).get("helmRelease") or {}).get("values")
            causes = tenant_config.validate(values)
            if causes:
                raise errors.invalid("VirtualClusterInstance", request.name, causes, GROUP)
