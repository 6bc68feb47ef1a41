"""The MutatingAdmissionPolicy admission plug-in: policies and bindings stored here, applied on writes.

Decisions are :mod:`vplane.kube.mutatingpolicy`'s. Like the ValidatingAdmissionPolicy plug-in, this keeps
the policies and bindings in memory (loaded from the cache when admission first runs, then kept current
from watch events) and supplies what the decisions need from the server: the namespace, params, RBAC for
``authorizer`` and the kind's schema for ``ApplyConfiguration`` merges.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vplane.apiserver.admission import AdmissionRequest, Reinvocation
from vplane.apiserver.vap import StoreParams, authorizer_for, build_policy_request, namespace_object
from vplane.apiserver.watch import WatchEvent
from vplane.kube import admissionpolicy, mutatingpolicy
from vplane.kube.objects import Obj
from vplane.kube.schema_meta import SchemaNode

if TYPE_CHECKING:
    from vplane.apiserver.server import APIServer

_POLICY_PREFIX = f"/{admissionpolicy.GROUP}/{mutatingpolicy.POLICIES}/"
_BINDING_PREFIX = f"/{admissionpolicy.GROUP}/{mutatingpolicy.BINDINGS}/"


class MutatingAdmissionPolicyPlugin:
    name = "MutatingAdmissionPolicy"

    def __init__(self, server: APIServer) -> None:
        self.server = server
        self.policies: dict[str, Obj] = {}
        self.bindings: dict[str, Obj] = {}
        self._params = StoreParams(server)
        self._synced = False
        server.hub.on_event.append(self._on_event)

    def _load(self) -> None:
        registry = self.server.registry
        policy_type = registry.get(admissionpolicy.GROUP, "v1", mutatingpolicy.POLICIES)
        binding_type = registry.get(admissionpolicy.GROUP, "v1", mutatingpolicy.BINDINGS)
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

    @property
    def active(self) -> bool:
        if not self._synced:
            # Admission only runs once the cache has started; events seen before then are in it too.
            self._load()
            self._synced = True
        return bool(self.bindings)

    async def mutate(self, request: AdmissionRequest, reinvocation: Reinvocation) -> None:
        if not self.bindings or request.operation not in ("CREATE", "UPDATE"):
            return
        preq = build_policy_request(self.server, request)
        is_namespace = preq.resource == "namespaces" and not preq.group
        namespace = None if is_namespace else namespace_object(self.server, preq.namespace)
        state = reinvocation.state.setdefault(self.name, mutatingpolicy.ReinvocationState())
        assert isinstance(state, mutatingpolicy.ReinvocationState)
        outcome = mutatingpolicy.evaluate(
            self.policies,
            list(self.bindings.values()),
            preq,
            namespace=namespace,
            params=self._params,
            schema_for=lambda target: self._schema(request, target),
            state=state,
            reinvoke=reinvocation.is_reinvoke,
            authorizer=authorizer_for(self.server, request.ctx.user),
        )
        if outcome.error is not None:
            raise outcome.error
        if outcome.dirty:
            reinvocation.should_reinvoke = True
        if outcome.object is not None and outcome.object != request.obj:
            request.obj = outcome.object

    def _schema(self, request: AdmissionRequest, target: admissionpolicy.Target) -> SchemaNode | None:
        rtype = request.rtype
        other = self.server.registry.get(rtype.group, target.version, rtype.resource)
        return self.server.schemas.node_for(other or rtype)
