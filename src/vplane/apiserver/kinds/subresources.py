"""Subresources with their own semantics: scale, eviction, binding, the proxies and connect verbs, and the
computed ComponentStatus list.

Registered through the server's extension points (``subresource_handlers``, ``resource_interceptors``,
``create_handler``), so the generic handlers stay untouched. Subresources that are a restricted update
of the object itself (status, ephemeralcontainers, resize, approval) need no handler: the generic update
path passes the subresource to the kind's strategy.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import orjson
from aiohttp import web

from vplane.apiserver import codec, timeutil
from vplane.apiserver.context import RequestContext
from vplane.apiserver.handlers import add_warnings, json_response, object_response, response_format
from vplane.apiserver.kinds.common import d, lst
from vplane.apiserver.kinds.core import PodStrategy
from vplane.apiserver.kubeletclient import kubelet_port
from vplane.apiserver.objects import DeleteOptions, patch_types_for
from vplane.apiserver.registry import ResourceType
from vplane.kube import errors, labels, patch, tables
from vplane.kube.objects import Obj
from vplane.kube.requestinfo import RequestInfo
from vplane.support import proxypath

if TYPE_CHECKING:
    from vplane.apiserver.server import APIServer

DISRUPTION_BUDGET_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."
MAX_DISRUPTED_PODS = 2000
"""Upstream's ``MaxDisruptedPodSize``: evictions the PDB controller has not yet confirmed."""
EVICTION_RETRIES = 20
COMPONENTS = ("scheduler", "controller-manager", "etcd-0")
COMPONENT_STATUS_WARNING = "v1 ComponentStatus is deprecated in v1.19+"


def success_status(code: int) -> Obj:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}


# -- scale ----------------------------------------------------------------------------------------


def selector_text(rtype: ResourceType, obj: Obj) -> str:
    """``status.selector`` of a Scale: the label selector as a string (a map for ReplicationControllers)."""
    selector = d(obj.get("spec")).get("selector")
    if not rtype.group:
        return str(labels.exact({str(k): str(v) for k, v in d(selector).items()})) if selector else ""
    if not isinstance(selector, dict):
        return ""
    return tables.selector_string(selector)


def scale_of(rtype: ResourceType, obj: Obj) -> Obj:
    meta = d(obj.get("metadata"))
    scale_meta: Obj = {"name": meta.get("name")}
    for key in ("namespace", "uid", "resourceVersion", "creationTimestamp"):
        if meta.get(key) is not None:
            scale_meta[key] = meta[key]
    status: Obj = {"replicas": int(d(obj.get("status")).get("replicas") or 0)}
    selector = selector_text(rtype, obj)
    if selector:
        status["selector"] = selector
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": scale_meta,
        "spec": {"replicas": int(d(obj.get("spec")).get("replicas") or 0)},
        "status": status,
    }


class Subresources:
    def __init__(self, server: APIServer) -> None:
        self.server = server
        self.objects = server.objects
        self.registry = server.registry

    def attach(self) -> None:
        handlers = self.server.subresource_handlers
        for group, resource in (
            ("apps", "deployments"),
            ("apps", "replicasets"),
            ("apps", "statefulsets"),
            ("", "replicationcontrollers"),
        ):
            handlers[(group, resource, "scale")] = self.scale
        handlers[("", "pods", "eviction")] = self.eviction
        handlers[("", "pods", "binding")] = self.pod_binding
        # pods exec, attach and portforward: Reviews.pod_stream_handler (container checks, node runtime seam)
        handlers[("", "pods", "proxy")] = self.pod_proxy
        handlers[("", "services", "proxy")] = self.service_proxy
        handlers[("", "nodes", "proxy")] = self.node_proxy
        pods = self.registry.get("", "v1", "pods")
        if pods is not None and isinstance(pods.strategy, PodStrategy):
            pods.strategy.node_serves = self._node_ready  # issue 10: graceful deletion needs a kubelet
        bindings = self.registry.get("", "v1", "bindings")
        if bindings is not None:
            bindings.create_handler = self.create_binding
        self.server.resource_interceptors.append(self.component_statuses)

    # -- scale --------------------------------------------------------------------------------------

    async def scale(
        self, request: web.Request, ctx: RequestContext, rtype: ResourceType, info: RequestInfo
    ) -> web.StreamResponse:
        fmt = response_format(request)
        _kv, current = self.objects.must_get(rtype, info.namespace, info.name)
        if info.verb == "get":
            return object_response(scale_of(rtype, current), fmt, 200, ctx)
        body = await self.server.read_body(request)
        if info.verb == "patch":
            content_type = codec.media_type(request.headers.get("Content-Type"))
            allowed = patch_types_for(rtype)
            if content_type not in allowed:
                raise errors.unsupported_media_type(content_type, allowed)
            value, _ = codec.decode_body(
                body, content_type, allowed=allowed, field_validation=ctx.field_validation
            )
            wanted = _patched_scale(scale_of(rtype, current), content_type, value)
            user_rv = ""
        else:
            value, _ = codec.decode_body(body, request.headers.get("Content-Type", ""), kind="Scale")
            wanted = codec.require_object(value)
            kind, api_version = wanted.get("kind"), wanted.get("apiVersion")
            if (
                kind
                and kind != "Scale"
                or api_version
                and api_version not in ("autoscaling/v1", "extensions/v1beta1", "apps/v1beta2")
            ):
                raise errors.bad_request(
                    f"the kind of the provided object ({kind}) does not match the kind of the request (Scale)"
                )
            user_rv = str(d(wanted.get("metadata")).get("resourceVersion") or "")
        name = d(wanted.get("metadata")).get("name")
        if name and name != info.name:
            raise errors.bad_request(
                f"the name of the object ({name}) does not match the name on the URL ({info.name})"
            )
        replicas = d(wanted.get("spec")).get("replicas", 0)
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise errors.invalid(
                "Scale",
                info.name,
                [errors.field_invalid("spec.replicas", replicas, "must be greater than or equal to 0")],
                "autoscaling",
            )

        def mutate(obj: Obj) -> Obj:
            obj.setdefault("spec", {})["replicas"] = replicas
            obj["metadata"].pop("resourceVersion", None)
            return obj

        updated = await self.objects.guaranteed_update(
            ctx, rtype, info.namespace, info.name, mutate, user_rv=user_rv, subresource="scale"
        )
        return object_response(scale_of(rtype, updated), fmt, 200, ctx)

    # -- eviction -----------------------------------------------------------------------------------

    async def eviction(
        self, request: web.Request, ctx: RequestContext, rtype: ResourceType, info: RequestInfo
    ) -> web.StreamResponse:
        if info.verb != "create":
            raise errors.method_not_allowed()
        body = await self.server.read_body(request)
        value, _ = codec.decode_body(body, request.headers.get("Content-Type", ""), kind="Eviction")
        eviction = codec.require_object(value)
        name = d(eviction.get("metadata")).get("name")
        if name and name != info.name:
            raise errors.bad_request("name in URL does not match name in Eviction object")
        options = DeleteOptions.from_body(d(eviction.get("deleteOptions")), "", ctx.dry_run)
        for _ in range(EVICTION_RETRIES):
            kv, pod = self.objects.must_get(rtype, info.namespace, info.name)
            if not self._ignores_budgets(pod):
                budget = await self._check_budgets(ctx, pod)
                if budget == "retry":
                    continue
                if budget == "checked" and not options.precondition_rv:
                    options.precondition_rv = str(kv.mod_revision)
            try:
                if not ctx.dry_run:
                    await self._mark_disruption_target(ctx, rtype, info, options)
                await self.objects.delete(ctx, rtype, info.namespace, info.name, options)
            except errors.StatusError as exc:
                if exc.code == 409 and options.precondition_rv == str(kv.mod_revision):
                    options.precondition_rv = ""
                    continue
                raise
            return json_response(orjson.dumps(success_status(201)), 201, ctx)
        raise errors.too_many_requests(DISRUPTION_BUDGET_MESSAGE, 1)

    async def _mark_disruption_target(
        self, ctx: RequestContext, rtype: ResourceType, info: RequestInfo, options: DeleteOptions
    ) -> None:
        """Upstream's ``addConditionAndDeletePod``: the pod gets ``DisruptionTarget=True``
        (``EvictionByEvictionAPI``) before it is deleted, so a Job's pod failure policy can tell an
        eviction from a crash. The delete's preconditions hold for this write, and a version the budget
        check pinned moves on to the version written here."""
        now = timeutil.rfc3339(self.server.clock())

        def mark(current: Obj) -> Obj:
            meta = d(current.get("metadata"))
            if options.precondition_uid and options.precondition_uid != meta.get("uid"):
                raise errors.conflict(rtype.resource, info.name, rtype.group)
            if options.precondition_rv and options.precondition_rv != str(meta.get("resourceVersion")):
                raise errors.conflict(rtype.resource, info.name, rtype.group)
            status = current.setdefault("status", {})
            conditions = [c for c in lst(status.get("conditions")) if d(c).get("type") != "DisruptionTarget"]
            previous = next(
                (c for c in lst(status.get("conditions")) if d(c).get("type") == "DisruptionTarget"), None
            )
            changed = previous is None or d(previous).get("status") != "True"
            conditions.append(
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": now if changed else d(previous).get("lastTransitionTime"),
                    "reason": "EvictionByEvictionAPI",
                    "message": "Eviction API: evicting",
                }
            )
            status["conditions"] = conditions
            meta.pop("resourceVersion", None)
            return current

        updated = await self.objects.guaranteed_update(
            ctx, rtype, info.namespace, info.name, mark, subresource="status"
        )
        if options.precondition_rv:
            options.precondition_rv = str(d(updated.get("metadata")).get("resourceVersion", ""))

    @staticmethod
    def _ignores_budgets(pod: Obj) -> bool:
        """Pods that are being deleted, have ended or never started are evicted without a budget check."""
        if d(pod.get("metadata")).get("deletionTimestamp"):
            return True
        return d(pod.get("status")).get("phase") in ("Succeeded", "Failed", "Pending")

    async def _check_budgets(self, ctx: RequestContext, pod: Obj) -> str:
        """'none' (no budget covers the pod), 'checked' (one allowed it and was decremented), 'retry' (the
        budget changed meanwhile); raises when eviction is refused."""
        pdb_type = self.registry.get("policy", "v1", "poddisruptionbudgets")
        if pdb_type is None:
            return "none"
        meta = d(pod.get("metadata"))
        pod_labels = {str(k): str(v) for k, v in d(meta.get("labels")).items()}
        matching = []
        for pdb in self.objects.list(pdb_type, str(meta.get("namespace", ""))):
            selector = d(pdb.get("spec")).get("selector")
            if selector is None:
                continue
            try:
                if labels.from_label_selector(selector).matches(pod_labels):
                    matching.append(pdb)
            except errors.StatusError:
                continue
        if not matching:
            return "none"
        if len(matching) > 1:
            raise errors.internal_error(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
            )
        pdb = matching[0]
        pdb_meta, spec, status = d(pdb.get("metadata")), d(pdb.get("spec")), d(pdb.get("status"))
        pdb_name = str(pdb_meta.get("name", ""))
        ready = any(
            d(c).get("type") == "Ready" and d(c).get("status") == "True"
            for c in lst(d(pod.get("status")).get("conditions"))
        )
        if not ready:
            policy = spec.get("unhealthyPodEvictionPolicy") or "IfHealthyBudget"
            desired, healthy = int(status.get("desiredHealthy") or 0), int(status.get("currentHealthy") or 0)
            if policy == "AlwaysAllow" or (healthy >= desired > 0):
                return "none"
        if int(status.get("observedGeneration") or 0) < int(pdb_meta.get("generation") or 0):
            raise _budget_refusal(f"The disruption budget {pdb_name} is still being processed by the server.")
        allowed = int(status.get("disruptionsAllowed") or 0)
        if allowed < 0:
            raise errors.forbidden(
                "pods", "", str(meta.get("name", "")), "pdb disruptions allowed is negative"
            )
        if len(d(status.get("disruptedPods"))) > MAX_DISRUPTED_PODS:
            raise errors.forbidden(
                "pods",
                "",
                str(meta.get("name", "")),
                "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
            )
        if allowed == 0:
            raise _budget_refusal(
                f"The disruption budget {pdb_name} needs {int(status.get('desiredHealthy') or 0)} healthy pods "
                f"and has {int(status.get('currentHealthy') or 0)} currently"
            )
        if ctx.dry_run:
            return "checked"
        now = timeutil.rfc3339(self.server.clock())
        pod_name = str(meta.get("name", ""))

        def decrement(current: Obj) -> Obj:
            current_status = current.setdefault("status", {})
            if int(current_status.get("disruptionsAllowed") or 0) != allowed:
                raise _Changed()
            current_status["disruptionsAllowed"] = allowed - 1
            current_status.setdefault("disruptedPods", {})[pod_name] = now
            if allowed - 1 == 0:
                conditions = [
                    c
                    for c in lst(current_status.get("conditions"))
                    if d(c).get("type") != "DisruptionAllowed"
                ]
                conditions.append(
                    {
                        "type": "DisruptionAllowed",
                        "status": "False",
                        "reason": "InsufficientPods",
                        "message": "",
                        "observedGeneration": pdb_meta.get("generation"),
                        "lastTransitionTime": now,
                    }
                )
                current_status["conditions"] = conditions
            current["metadata"].pop("resourceVersion", None)
            return current

        try:
            await self.objects.guaranteed_update(
                self.server.system_context(),
                pdb_type,
                str(pdb_meta.get("namespace", "")),
                pdb_name,
                decrement,
                subresource="status",
            )
        except _Changed:
            return "retry"
        return "checked"

    # -- binding ------------------------------------------------------------------------------------

    async def pod_binding(
        self, request: web.Request, ctx: RequestContext, rtype: ResourceType, info: RequestInfo
    ) -> web.StreamResponse:
        if info.verb != "create":
            raise errors.method_not_allowed()
        body = await self.server.read_body(request)
        value, _ = codec.decode_body(body, request.headers.get("Content-Type", ""), kind="Binding")
        binding = codec.require_object(value)
        name = d(binding.get("metadata")).get("name")
        if name and name != info.name:
            raise errors.bad_request("name in URL does not match name in Binding object")
        binding.setdefault("metadata", {})["name"] = info.name
        result = await self._bind(ctx, info.namespace, binding)
        return json_response(orjson.dumps(result), 201, ctx)

    async def create_binding(self, ctx: RequestContext, obj: Obj) -> Obj:
        return await self._bind(ctx, ctx.info.namespace, obj)

    async def _bind(self, ctx: RequestContext, namespace: str, binding: Obj) -> Obj:
        meta = d(binding.get("metadata"))
        pod_name = str(meta.get("name") or "")
        target = d(binding.get("target"))
        causes = []
        if target.get("kind") not in (None, "", "Node"):
            causes.append(errors.field_not_supported("target.kind", target.get("kind"), ["Node", "<empty>"]))
        if not target.get("name"):
            causes.append(errors.field_required("target.name"))
        if not pod_name:
            causes.append(errors.field_required("metadata.name", "name or generateName is required"))
        if causes:
            raise errors.invalid("Binding", pod_name, causes)
        pods = self.registry.get("", "v1", "pods")
        assert pods is not None
        node = str(target["name"])
        annotations = d(meta.get("annotations"))

        def assign(pod: Obj) -> Obj:
            pod_meta = pod["metadata"]
            if pod_meta.get("deletionTimestamp"):
                raise errors.conflict(
                    "pods/binding",
                    pod_name,
                    reason=f"pod {pod_name} is being deleted, cannot be assigned to a host",
                )
            current = d(pod.get("spec")).get("nodeName")
            if current:
                raise errors.conflict(
                    "pods/binding", pod_name, reason=f'pod {pod_name} is already assigned to node "{current}"'
                )
            pod.setdefault("spec", {})["nodeName"] = node
            # As a 1.34+ API server does: the nomination is done once the pod is bound.
            status = pod.get("status")
            if isinstance(status, dict):
                status.pop("nominatedNodeName", None)
            if annotations:
                pod_meta.setdefault("annotations", {}).update(annotations)
            pod_meta.pop("resourceVersion", None)
            return pod

        if ctx.dry_run:
            self.objects.must_get(pods, namespace, pod_name)
        else:
            await self.objects.guaranteed_update(
                ctx, pods, namespace, pod_name, assign, subresource="binding"
            )
        return success_status(201)

    def _node_ready(self, name: str) -> bool:
        nodes = self.registry.get("", "v1", "nodes")
        node = self.objects.get(nodes, "", name) if nodes is not None and name else None
        return node is not None and any(
            d(c).get("type") == "Ready" and d(c).get("status") == "True"
            for c in lst(d(node.get("status")).get("conditions"))
        )

    # -- connect and proxy --------------------------------------------------------------------------

    async def pod_proxy(
        self, request: web.Request, ctx: RequestContext, rtype: ResourceType, info: RequestInfo
    ) -> web.StreamResponse:
        """``pods/proxy`` through the pod's kubelet (``vplane.runtime.podproxy``), never by dialling the
        address the pod's status names."""
        scheme, name, port = split_scheme_name_port(info.name)
        _kv, pod = self.objects.must_get(rtype, info.namespace, name)
        node_name = str(d(pod.get("spec")).get("nodeName") or "")
        if not node_name or not d(pod.get("status")).get("podIP"):
            raise errors.bad_request(f'pod "{name}" has no address yet')
        kubelets = self.server.reviews.kubelets
        number, tail = _number(port, 80), _tail(request, info)
        target = proxypath.pod_proxy_path(scheme or "http", info.namespace, name, number, tail)
        backend = f"{d(pod.get('status')).get('podIP')}:{number}"
        return await kubelets.proxy(request, kubelets.node(node_name), target, tail, backend)

    async def service_proxy(
        self, request: web.Request, ctx: RequestContext, rtype: ResourceType, info: RequestInfo
    ) -> web.StreamResponse:
        """``services/proxy``: a ready endpoint of the Service's port chosen at random, as upstream does, and
        reached through its pod's kubelet. An endpoint that names no pod (Endpoints written by hand) is not
        dialled."""
        scheme, name, port_ref = split_scheme_name_port(info.name)
        _kv, svc = self.objects.must_get(rtype, info.namespace, name)
        ports = [d(p) for p in lst(d(svc.get("spec")).get("ports"))]
        chosen = next(
            (p for p in ports if port_ref in (str(p.get("name") or ""), str(p.get("port")))),
            ports[0] if not port_ref and len(ports) == 1 else None,
        )
        if chosen is None:
            raise errors.service_unavailable(f'no service port "{port_ref}" found for service "{name}"')
        endpoints_type = self.registry.get("", "v1", "endpoints")
        assert endpoints_type is not None
        endpoints = self.objects.get(endpoints_type, info.namespace, name) or {}
        candidates: list[tuple[Obj, int]] = []
        for subset in map(d, lst(endpoints.get("subsets"))):
            for entry in map(d, lst(subset.get("ports"))):
                if str(entry.get("name") or "") == str(chosen.get("name") or ""):
                    candidates += [(d(a), int(entry.get("port") or 0)) for a in lst(subset.get("addresses"))]
        if not candidates:
            raise errors.service_unavailable(f'no endpoints available for service "{name}"')
        address, ep_port = random.choice(candidates)
        ref = d(address.get("targetRef"))
        if ref.get("kind") != "Pod" or not ref.get("name"):
            raise _unreachable(f"{address.get('ip')}:{ep_port}")
        pods = self.registry.get("", "v1", "pods")
        assert pods is not None
        namespace = str(ref.get("namespace") or info.namespace)
        pod = self.objects.get(pods, namespace, str(ref["name"]))
        node_name = str(address.get("nodeName") or d((pod or {}).get("spec")).get("nodeName") or "")
        if pod is None or not node_name:
            raise errors.service_unavailable(f'no endpoints available for service "{name}"')
        kubelets = self.server.reviews.kubelets
        tail = _tail(request, info)
        target = proxypath.pod_proxy_path(scheme or "http", namespace, str(ref["name"]), ep_port, tail)
        backend = f"{address.get('ip')}:{ep_port}"
        return await kubelets.proxy(request, kubelets.node(node_name), target, tail, backend)

    async def node_proxy(
        self, request: web.Request, ctx: RequestContext, rtype: ResourceType, info: RequestInfo
    ) -> web.StreamResponse:
        """``nodes/proxy``: the node's kubelet API (``/healthz``, ``/containerLogs/...``). Only the kubelet's
        own port: it is the one address of a node whose certificate this server verifies."""
        _scheme, name, port = split_scheme_name_port(info.name)
        _kv, node = self.objects.must_get(rtype, "", name)
        if not lst(d(node.get("status")).get("addresses")):
            raise errors.bad_request("no preferred addresses found; known addresses: []")
        if port and _number(port, 0) != kubelet_port(node):
            raise errors.bad_request(
                f"only the kubelet's port ({kubelet_port(node)}) of a node can be proxied"
            )
        tail = _tail(request, info)
        return await self.server.reviews.kubelets.proxy(request, node, tail or "/", tail)

    # -- componentstatuses --------------------------------------------------------------------------

    async def component_statuses(
        self, request: web.Request, ctx: RequestContext
    ) -> web.StreamResponse | None:
        path = request.path
        if not path.startswith("/api/v1/componentstatuses"):
            return None
        info = ctx.info
        rtype = self.registry.get("", "v1", "componentstatuses")
        if rtype is None or info.resource != "componentstatuses" or info.subresource:
            return None
        if info.verb not in ("get", "list"):
            raise errors.method_not_allowed()
        ctx.warn(COMPONENT_STATUS_WARNING)
        healthy = self.server.ready
        items = [_component(name, healthy) for name in COMPONENTS]
        fmt = response_format(request)
        if info.name:
            found = [i for i in items if i["metadata"]["name"] == info.name]
            if not found:
                raise errors.not_found("componentstatuses", info.name)
            items = found
        if fmt.table:
            table = self.server.table(rtype, items, fmt.include_object, {"resourceVersion": ""})
            resp = json_response(orjson.dumps(table))
            add_warnings(resp, ctx)
            return resp
        if info.name:
            return object_response(items[0], fmt, 200, ctx)
        doc = {
            "kind": "ComponentStatusList",
            "apiVersion": "v1",
            "metadata": {},
            "items": [{k: v for k, v in i.items() if k not in ("kind", "apiVersion")} for i in items],
        }
        return object_response(doc, fmt, 200, ctx)


def _component(name: str, healthy: bool) -> Obj:
    condition: Obj = {"type": "Healthy", "status": "True" if healthy else "False"}
    if healthy:
        condition["message"] = "ok"
    else:
        condition["error"] = "the API server is not ready"
    return {
        "kind": "ComponentStatus",
        "apiVersion": "v1",
        "metadata": {"name": name},
        "conditions": [condition],
    }


def _unreachable(address: str) -> errors.StatusError:
    """A Service endpoint that names no pod (Endpoints written by hand): the API server deliberately opens
    no connection to an address an object names (a tenant could point one at the platform host's own
    network), and no kubelet runs a pod there to reach it through."""
    return errors.service_unavailable(
        f"error trying to reach {address}: the endpoint names no pod of this cluster"
    )


def split_scheme_name_port(text: str) -> tuple[str, str, str]:
    """``[scheme:]name[:port]`` of a proxy path (upstream's ``SplitSchemeNamePort``)."""
    parts = text.split(":")
    if len(parts) == 1:
        scheme, name, port = "", parts[0], ""
    elif len(parts) == 2:
        scheme, (name, port) = "", parts
    elif len(parts) == 3:
        scheme, name, port = parts
    else:
        raise errors.bad_request(f"invalid proxy name: {text}")
    if not name or scheme not in ("", "http", "https"):
        raise errors.bad_request(f"invalid proxy name: {text}")
    return scheme, name, port


def _number(port: str, default: int) -> int:
    """A pod's or node's proxy port: a number (a Service's may be a port's name)."""
    if not port:
        return default
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise errors.bad_request(f"invalid port: {port}")
    return int(port)


def _tail(request: web.Request, info: RequestInfo) -> str:
    """What follows ``<resource>/<name>/proxy`` in the raw path: "" when nothing, "/" for a trailing slash."""
    segments = request.rel_url.raw_path.split("/")
    for i in range(2, len(segments)):
        if (
            segments[i] == "proxy"
            and segments[i - 2] == info.resource
            and unquote(segments[i - 1]) == info.name
        ):
            rest = segments[i + 1 :]
            return "/" + "/".join(rest) if rest else ""
    return ""


class _Changed(Exception):
    """The budget changed between the check and the write: check again."""


def _budget_refusal(message: str) -> errors.StatusError:
    return errors.StatusError(
        429,
        "TooManyRequests",
        DISRUPTION_BUDGET_MESSAGE,
        details={"causes": [{"reason": "DisruptionBudget", "message": message}]},
    )


def _patched_scale(scale: Obj, content_type: str, value: Any) -> Obj:
    if content_type == codec.JSON_PATCH:
        return patch.apply_json_patch(scale, value)
    if content_type == codec.MERGE_PATCH or content_type == codec.APPLY_PATCH:
        return patch.apply_merge_patch_to_object(scale, codec.require_object(value))
    return patch.apply_strategic_merge_patch(scale, codec.require_object(value), None)
