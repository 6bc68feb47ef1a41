"""The ValidatingAdmissionPolicy admission plug-in: policies and bindings stored here, enforced on writes.

The decisions are :mod:`vplane.kube.admissionpolicy`'s; this module keeps an in-memory index of the
``admissionregistration.k8s.io/v1`` policies and bindings (loaded from the store, then kept current from
watch events, so a policy applies to the very next request after it is stored) and supplies what the
decisions need from the server: the namespace object, params from the store, and RBAC for ``authorizer``.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Literal

from vplane.apiserver.admission import AdmissionRequest
from vplane.apiserver.authz import Attributes
from vplane.apiserver.context import UserInfo
from vplane.apiserver.watch import WatchEvent
from vplane.kube import admissionpolicy, cel, labels
from vplane.kube.objects import Obj, split_api_version

if TYPE_CHECKING:
    from vplane.apiserver.registry import ResourceType
    from vplane.apiserver.server import APIServer

_POLICY_PREFIX = f"/{admissionpolicy.GROUP}/{admissionpolicy.POLICIES}/"
_BINDING_PREFIX = f"/{admissionpolicy.GROUP}/{admissionpolicy.BINDINGS}/"
_OPTIONS_KIND = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}


class StoreParams:
    """Params (``paramKind`` objects) read from the server's cache."""

    def __init__(self, server: APIServer) -> None:
        self.server = server

    def _rtype(self, api_version: str, kind: str) -> ResourceType | None:
        group, version = split_api_version(api_version)
        return self.server.registry.for_kind(group, version, kind)

    def scope(self, api_version: str, kind: str) -> Literal["Namespaced", "Cluster"] | None:
        rtype = self._rtype(api_version, kind)
        if rtype is None:
            return None
        return "Namespaced" if rtype.namespaced else "Cluster"

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None:
        rtype = self._rtype(api_version, kind)
        if rtype is None:
            return None
        found: Obj | None = self.server.objects.get(rtype, namespace if rtype.namespaced else "", name)
        return found

    def list(self, api_version: str, kind: str, namespace: str, selector: labels.Selector) -> list[Obj]:
        rtype = self._rtype(api_version, kind)
        if rtype is None:
            return []
        items: list[Obj] = self.server.objects.list(rtype, namespace if rtype.namespaced else "")
        return [o for o in items if selector.matches((o.get("metadata") or {}).get("labels") or {})]


class ValidatingAdmissionPolicyPlugin:
    """Upstream's ValidatingAdmissionPolicy plug-in for this server."""

    def __init__(self, server: APIServer) -> None:
        self.server = server
        self.policies: dict[str, Obj] = {}
        self.bindings: dict[str, Obj] = {}
        self._params = StoreParams(server)
        self._synced = False
        server.hub.on_event.append(self._on_event)
        self._load()

    def _load(self) -> None:
        """(Re)build the index from the store; the cache is empty until the server has started."""
        registry = self.server.registry
        policy_type = registry.get(admissionpolicy.GROUP, "v1", admissionpolicy.POLICIES)
        binding_type = registry.get(admissionpolicy.GROUP, "v1", admissionpolicy.BINDINGS)
        if policy_type is None or binding_type is None:
            return
        self.policies = {o["metadata"]["name"]: o for o in self.server.objects.list(policy_type)}
        self.bindings = {o["metadata"]["name"]: o for o in self.server.objects.list(binding_type)}

    def _on_event(self, wevent: WatchEvent) -> None:
        key = wevent.event.kv.key
        if key.startswith(_POLICY_PREFIX):
            index, name = self.policies, key[len(_POLICY_PREFIX) :]
        elif key.startswith(_BINDING_PREFIX):
            index, name = self.bindings, key[len(_BINDING_PREFIX) :]
        else:
            return
        if wevent.event.type == "DELETE":
            index.pop(name, None)
        else:
            index[name] = wevent.obj()

    async def admit(self, request: AdmissionRequest) -> None:
        if not self._synced:
            # Admission only runs once the cache has started; events seen before then are in it too.
            self._load()
            self._synced = True
        if not self.bindings:
            return
        rtype = request.rtype
        if (rtype.group, rtype.resource) in admissionpolicy.EXEMPT_RESOURCES:
            return
        ctx = request.ctx
        policy_request = build_policy_request(self.server, request)
        result = admissionpolicy.evaluate(
            self.policies,
            list(self.bindings.values()),
            policy_request,
            namespace=namespace_object(self.server, policy_request.namespace),
            params=self._params,
            authorizer=authorizer_for(self.server, ctx.user),
        )
        for text in result.warnings:
            ctx.warn(text)
        ctx.audit_annotations.update(result.audit_annotations)
        error = result.error(policy_request)
        if error is not None:
            raise error


def build_policy_request(server: APIServer, request: AdmissionRequest) -> admissionpolicy.Request:
    """The request as admission policies see it (upstream ``admission.Attributes``); a namespace's own
    requests carry its name as their namespace."""
    rtype = request.rtype
    ctx = request.ctx
    is_namespace = rtype.resource == "namespaces" and not rtype.group
    options: Obj | None = None
    if request.operation in _OPTIONS_KIND:
        options = {"kind": _OPTIONS_KIND[request.operation], "apiVersion": "meta.k8s.io/v1"}
        if ctx.dry_run:
            options["dryRun"] = ["All"]
        if ctx.field_manager and request.operation != "DELETE":
            options["fieldManager"] = ctx.field_manager
    return admissionpolicy.Request(
        operation=request.operation,
        group=rtype.group,
        version=rtype.version,
        resource=rtype.resource,
        kind=rtype.kind,
        subresource=request.subresource,
        name=request.name,
        namespace=request.name if is_namespace else request.namespace,
        user=ctx.user.to_dict(),
        object=request.obj,
        old_object=request.old,
        dry_run=ctx.dry_run,
        options=options,
        uid=str(uuid.uuid4()),
        equivalents=tuple(
            (t.version, t.kind)
            for t in server.registry
            if t.group == rtype.group and t.resource == rtype.resource and t.version != rtype.version
        ),
    )


def namespace_object(server: APIServer, name: str) -> Obj | None:
    """The namespace ``name`` from the cache (None when it does not exist or ``name`` is empty)."""
    if not name:
        return None
    ns_type = server.registry.get("", "v1", "namespaces")
    if ns_type is None:
        return None
    found: Obj | None = server.objects.get(ns_type, "", name)
    return found


def authorizer_for(server: APIServer, user: UserInfo) -> cel.AuthzCallback:
    """``authorizer`` checks run through the server's RBAC as the requesting user."""

    def check(c: cel.AuthzCheck) -> cel.AuthzDecision:
        who = user
        if c.service_account is not None:
            ns, name = c.service_account
            who = UserInfo(
                f"system:serviceaccount:{ns}:{name}",
                groups=("system:serviceaccounts", f"system:serviceaccounts:{ns}"),
            )
        attrs = Attributes(
            user=who,
            verb=c.verb,
            resource_request=c.resource_request,
            namespace=c.namespace,
            group=c.group,
            version="*",
            resource=c.resource,
            subresource=c.subresource,
            name=c.name,
            path=c.path,
        )
        decision = server.authorizer.authorize(attrs)
        return cel.AuthzDecision(decision.allowed, decision.reason)

    return check
