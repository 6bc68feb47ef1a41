"""Platform admission: rules about management objects that span objects or need the tenant config parsed.

- At most one Cluster may have ``spec.local: true`` (connected-cluster runbook).
- A VirtualClusterInstance's vcluster.yaml (``spec.template.helmRelease.values``) must validate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vplane.apiserver.admission import AdmissionRequest
from vplane.kube import errors
from vplane.kube import tenantconfig as tenant_config
from vplane.kube.accesskeys import GROUP

if TYPE_CHECKING:
    from vplane.apiserver.server import APIServer


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
