"""Platform RBAC for resource-proxy targets (spec §2.4): ``use`` on the target VirtualClusterInstance in
the target project's namespace, checked twice.

1. When a client VirtualClusterInstance is created or updated, against the submitting user: the
   platform refuses a proxy target the user could not use itself (admission, 403).
2. When the client tenant cluster registers with the platform's mesh, against the client's identity
   ``loft:vcluster:<client-project-namespace>:<client-name>``: the registration is refused, so a client
   whose identity lost ``use`` gets no peers and its proxied requests answer 503.

Decision recorded (docs/resource-proxy.md): an update is checked for the proxy entries that reach further
than before (a group/version served from a target it was not: new, enabled or moved; ``owned`` turned to
``all``), so a user who may edit the client but not use its target can change the rest of it (narrowing
to ``owned`` included), and nothing that widens what it reaches. A refused registration is retried by the
tenant: granting ``use`` lets it in without a restart.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from vplane.apiserver.admission import AdmissionRequest
from vplane.apiserver.authz import Attributes
from vplane.apiserver.context import UserInfo
from vplane.kube import errors
from vplane.kube import tenantconfig as tenant_config
from vplane.kube.accesskeys import GROUP
from vplane.kube.objects import Obj
from vplane.kube.proxyconfig import ProxyTarget

if TYPE_CHECKING:
    from vplane.apiserver.server import APIServer

RESOURCE = "virtualclusterinstances"


def proxy_targets(vci: Obj | None, prefix: str) -> list[ProxyTarget]:
    """The enabled proxy targets of a VirtualClusterInstance (none when its config does not parse)."""
    if not vci:
        return []
    values = (((vci.get("spec") or {}).get("template") or {}).get("helmRelease") or {}).get("values")
    try:
        config = tenant_config.parse(values)
    except tenant_config.ConfigInvalid:
        return []
    namespace = str((vci.get("metadata") or {}).get("namespace", ""))
    return config.proxy_targets(namespace.removeprefix(prefix))


def _reaches(target: ProxyTarget) -> tuple[str, str, str, str]:
    """What an entry's ``use`` check is about: which group/version is served from which target (its port,
    resource names and discovery shape are not)."""
    return (target.group, target.version, target.target_project, target.target_name)


def _changed(targets: list[ProxyTarget], before: list[ProxyTarget]) -> list[ProxyTarget]:
    """The entries an update must be allowed to ``use``: a group/version now served from a target it was
    not (new, enabled, or moved), or widened from ``owned`` to ``all`` (which reaches other clients'
    objects). Narrowing, or renaming resources, needs nothing."""
    access = {_reaches(t): t.access for t in before}
    return [t for t in targets if access.get(_reaches(t)) not in (t.access, "all")]


def check_command(target: ProxyTarget, prefix: str, as_user: str = "") -> str:
    """The runbook's check that explains a refusal."""
    command = (
        f"kubectl auth can-i use {RESOURCE}.{GROUP}/{target.target_name} -n {prefix}{target.target_project}"
    )
    return f'{command} --as="{as_user}"' if as_user else command


class ProxyTargetAccess:
    """The admission plug-in (check 1) and the registration check (check 2)."""

    def __init__(self, server: APIServer, project_namespace_prefix: str) -> None:
        self.server = server
        self.prefix = project_namespace_prefix

    async def _may_use(self, user: UserInfo, target: ProxyTarget) -> bool:
        attrs = Attributes(
            user,
            "use",
            True,
            f"{self.prefix}{target.target_project}",
            GROUP,
            "v1",
            RESOURCE,
            "",
            target.target_name,
        )
        return await self.server.authorize(attrs)

    async def refused(self, user: UserInfo, targets: Iterable[ProxyTarget]) -> ProxyTarget | None:
        for target in targets:
            if not await self._may_use(user, target):
                return target
        return None

    async def admit(self, request: AdmissionRequest) -> None:
        rtype = request.rtype
        if rtype.group != GROUP or rtype.resource != RESOURCE or request.subresource:
            return
        if request.operation not in ("CREATE", "UPDATE") or request.obj is None:
            return
        targets = proxy_targets(request.obj, self.prefix)
        if request.operation == "UPDATE":
            targets = _changed(targets, proxy_targets(request.old, self.prefix))
        denied = await self.refused(request.ctx.user, targets)
        if denied is None:
            return
        user = request.ctx.user.name
        raise errors.forbidden(
            RESOURCE,
            GROUP,
            request.name,
            f'user "{user}" cannot use {RESOURCE}.{GROUP} "{denied.target_name}" in the namespace '
            f'"{self.prefix}{denied.target_project}", the resource proxy target of '
            f"{denied.group_version}; check with: {check_command(denied, self.prefix)}",
        )

    async def registration_refusal(self, identity: UserInfo, namespace: str, name: str) -> str | None:
        """Why a client tenant's registration is refused (None: allowed)."""
        rtype = self.server.registry.get(GROUP, "v1", RESOURCE)
        if rtype is None:
            return None
        vci = self.server.objects.get(rtype, namespace, name)
        denied = await self.refused(identity, proxy_targets(vci, self.prefix))
        if denied is None:
            return None
        return (
            f'resource proxy target "{denied.target_project}/{denied.target_name}" of {denied.group_version} '
            f'is not allowed: "{identity.name}" cannot use {RESOURCE}.{GROUP} "{denied.target_name}" in '
            f'"{self.prefix}{denied.target_project}"; check with: '
            f"{check_command(denied, self.prefix, identity.name)}"
        )
