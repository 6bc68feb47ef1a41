"""RBAC escalation prevention: nobody grants, through a role or a binding, rights they do not hold.

Without it, anyone allowed to create a ClusterRoleBinding could bind ``cluster-admin`` to themselves, and a
namespace ``admin`` could write itself a Role with ``*``. Upstream enforces this in the RBAC kinds'
storage (``pkg/registry/rbac/{role,clusterrole,rolebinding,clusterrolebinding}/policybased``); here it is
an admission plug-in, so it sees every create and update of the four kinds however they arrive (POST, PUT,
every patch type, server-side apply, dry runs), and returns at once for any other kind.

The rules, as upstream:

* members of ``system:masters`` (the admin user, the server's own writes) are not checked;
* a Role or ClusterRole passes when its author holds every rule in it (for a Role, in its namespace), or
  may ``escalate`` that resource (asked of the full authorizer, with the name the request's URL carries);
  setting or changing a ClusterRole's ``aggregationRule`` needs cluster-admin's rules unless ``escalate``;
* a RoleBinding or ClusterRoleBinding passes when its author may ``bind`` the referenced role (in the
  binding's namespace, with the role's name, so ``resourceNames`` restrict it), or holds its rules in the
  binding's scope; a missing role is 404;
* an update that changes only owner references and finalizers is not checked.

"Held" rules are the author's RBAC rules (cluster-wide ones plus, in a namespace, that namespace's); a
delegated authorizer can grant ``bind``/``escalate`` but holds no rules, as upstream's rule resolver reads
RBAC objects only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from vplane.apiserver.admission import AdmissionRequest
from vplane.apiserver.authz import RBAC_GROUP, SUPERUSER_GROUP, Attributes, RBACAuthorizer
from vplane.apiserver.context import RequestContext, UserInfo
from vplane.kube import errors, rbacrules
from vplane.kube.objects import Obj

_ROLES = frozenset({"roles", "clusterroles"})
_BINDINGS = frozenset({"rolebindings", "clusterrolebindings"})


class EscalationPrevention:
    """The admission plug-in; ``authorize`` is the server's full authorizer (RBAC, then any delegate)."""

    def __init__(self, rbac: RBACAuthorizer, authorize: Callable[[Attributes], Awaitable[bool]]) -> None:
        self.rbac = rbac
        self.authorize = authorize

    async def admit(self, request: AdmissionRequest) -> None:
        rtype = request.rtype
        if rtype.group != RBAC_GROUP or request.operation not in ("CREATE", "UPDATE") or request.subresource:
            return
        resource = rtype.resource
        if resource not in _ROLES and resource not in _BINDINGS:
            return
        user = request.ctx.user
        obj = request.obj
        if SUPERUSER_GROUP in user.groups or obj is None:
            return
        namespace = request.namespace if rtype.namespaced else ""
        if resource in _ROLES:
            await self._check_role(request, obj, namespace)
        else:
            await self._check_binding(request, obj, namespace)

    async def _check_role(self, request: AdmissionRequest, obj: Obj, namespace: str) -> None:
        if await self._may_escalate(request.ctx):
            return
        old = request.old
        if old is not None and rbacrules.only_gc_fields_change(obj, old):
            return
        resource, name, user = request.rtype.resource, request.name, request.ctx.user
        self._confirm(resource, name, user, namespace, rbacrules.rules_from(obj.get("rules") or []))
        if resource == "clusterroles" and (_aggregates(obj) or (old is not None and _aggregates(old))):
            owner, _problems = self.rbac.rules_with_errors(user, "")
            if rbacrules.covers(rbacrules.rules_from(owner), rbacrules.FULL_AUTHORITY):
                raise errors.rbac_aggregation_rule(name)

    async def _check_binding(self, request: AdmissionRequest, obj: Obj, namespace: str) -> None:
        old = request.old
        if old is not None and rbacrules.only_gc_fields_change(obj, old):
            return
        ref = obj.get("roleRef")
        if not isinstance(ref, dict):
            return  # validation has refused it already
        user = request.ctx.user
        if await self._may_bind(user, ref, namespace):
            return
        granted = self.rbac.role_ref_rules(ref, namespace)
        self._confirm(request.rtype.resource, request.name, user, namespace, rbacrules.rules_from(granted))

    def _confirm(
        self, resource: str, name: str, user: UserInfo, namespace: str, rules: list[rbacrules.PolicyRule]
    ) -> None:
        """Upstream ``ConfirmNoEscalation``: 403 listing the rules ``user`` does not hold in ``namespace``."""
        owner, problems = self.rbac.rules_with_errors(user, namespace)
        missing = rbacrules.covers(rbacrules.rules_from(owner), rules)
        if missing:
            raise errors.rbac_escalation(
                resource, name, user.name, user.groups, rbacrules.describe_missing(missing), problems
            )

    async def _may_escalate(self, ctx: RequestContext) -> bool:
        """Upstream ``RoleEscalationAuthorized``: the ``escalate`` verb on the resource the request names."""
        info = ctx.info
        if not info.is_resource or info.group != RBAC_GROUP or info.resource not in _ROLES:
            return False
        attrs = Attributes(
            ctx.user, "escalate", True, info.namespace, info.group, "*", info.resource, "", info.name
        )
        return await self.authorize(attrs)

    async def _may_bind(self, user: UserInfo, ref: Obj, namespace: str) -> bool:
        """Upstream ``BindingAuthorized``: the ``bind`` verb on the referenced role, in the binding's
        namespace (empty for a ClusterRoleBinding)."""
        kind = ref.get("kind")
        if kind not in ("ClusterRole", "Role"):
            return False
        resource = "clusterroles" if kind == "ClusterRole" else "roles"
        group, name = str(ref.get("apiGroup") or ""), str(ref.get("name") or "")
        return await self.authorize(Attributes(user, "bind", True, namespace, group, "", resource, "", name))


def _aggregates(obj: Obj) -> bool:
    rule = obj.get("aggregationRule")
    return isinstance(rule, dict) and bool(rule.get("clusterRoleSelectors"))
