"""The one seam between controllers and an API server: a small typed facade over lightkube.

Controllers reach any API server (ours or a real cluster) only through its HTTP API with a kubeconfig
(design brief, principle 1), through this module. The rest of vplane sees plain dicts, a
:class:`Resource` descriptor, :class:`~vplane.kube.errors.StatusError` for every answer the server
refuses and :class:`TransportError` when it cannot be reached; no lightkube type leaks out, so a fake
in-memory :class:`KubeAPI` replaces the network in unit tests.

Why lightkube (``AsyncClient``) rather than kubernetes_asyncio or kr8s. All three were run against
``vplane apiserver`` with a kubeconfig holding inline CA data and a bearer token, and all three connect:

- *Custom resources without code generation or discovery.* A lightkube generic resource is built
  from (group, version, kind, plural), which is exactly our descriptor, so no discovery round trip is
  needed and a CRD created a moment ago works at once. kubernetes_asyncio's ``DynamicClient`` and kr8s
  resolve kinds through discovery (and cache it).
- *Watch.* lightkube resumes from the last event's ``resourceVersion`` when the server ends a stream,
  and with an ``on_error`` handler that raises, a 410 ``ERROR`` event reaches the caller, who relists
  (the informer does). kr8s restarts a 410 at the *same* expired version, which loops; kubernetes_asyncio
  retries it once and then raises.
- *Writes.* Merge, JSON and strategic patches, server-side apply with a field manager and ``force``,
  and the ``status`` subresource (a generic resource's ``Status`` class) are all first-class. kr8s has
  no server-side apply and no update (PUT), which the Lease elector needs for optimistic concurrency.
- *Types.* lightkube ships type hints (``py.typed`` with real annotations), so ``mypy --strict`` needs
  no override; kubernetes_asyncio's generated code is mostly unannotated.
- Its generic objects are ``dict`` subclasses decoded losslessly from the wire, so turning them into
  plain dicts costs a shallow copy.

Two lightkube habits are kept away from callers: generic classes are built here rather than with
``create_namespaced_resource``, whose process-wide registry hands back lightkube's typed model when one
was imported for the same kind (and typed models drop fields they do not know); and namespaced calls
never fall back to the kubeconfig's default namespace (a namespaced ``get`` without a namespace is a
``ValueError``; ``list`` and ``watch`` without one cover all namespaces).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, cast

import httpx2
from lightkube import ApiError, AsyncClient, KubeConfig
from lightkube.core import resource as lk_resource
from lightkube.generic_resource import (
    GenericGlobalResource,
    GenericGlobalStatus,
    GenericNamespacedResource,
    GenericNamespacedStatus,
)
from lightkube.types import CascadeType, OnErrorAction, OnErrorResult, PatchType

from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj, split_api_version

__all__ = [
    "CONFIGMAPS",
    "LEASES",
    "NAMESPACES",
    "EventType",
    "KubeAPI",
    "KubeClient",
    "ListResult",
    "Patch",
    "PatchBody",
    "Propagation",
    "Resource",
    "TransportError",
    "WatchEvent",
]


@dataclass(frozen=True)
class Resource:
    """Which collection a call addresses: what a URL needs, nothing discovered."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def group(self) -> str:
        return split_api_version(self.api_version)[0]

    @property
    def version(self) -> str:
        return split_api_version(self.api_version)[1]


LEASES = Resource("coordination.k8s.io/v1", "Lease", "leases", namespaced=True)
CONFIGMAPS = Resource("v1", "ConfigMap", "configmaps", namespaced=True)
NAMESPACES = Resource("v1", "Namespace", "namespaces", namespaced=False)

Patch = Literal["merge", "json", "strategic", "apply"]
"""Patch content types: RFC 7386 merge, RFC 6902 JSON, strategic merge, server-side apply."""

PatchBody = Obj | list[Obj]
"""A merge, strategic or apply patch is an object; a JSON patch is a list of operations."""

EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]

Propagation = Literal["Background", "Foreground", "Orphan"]
"""``DeleteOptions.propagationPolicy``: how the garbage collector treats the object's dependents."""


@dataclass(frozen=True)
class WatchEvent:
    type: EventType
    object: Obj


@dataclass(frozen=True)
class ListResult:
    items: list[Obj]
    resource_version: str
    """The collection's revision: where a watch that follows this list starts."""


class TransportError(Exception):
    """The API server could not be reached, or the connection broke before it answered."""


class KubeAPI(Protocol):
    """What controllers need from an API server. :class:`KubeClient` is the real one; tests fake it."""

    async def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Obj: ...

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: Mapping[str, str] | None = None,
        field_selector: Mapping[str, str] | None = None,
        chunk_size: int | None = None,
    ) -> ListResult: ...

    async def create(self, resource: Resource, obj: Obj, *, namespace: str | None = None) -> Obj: ...

    async def replace(self, resource: Resource, obj: Obj, *, namespace: str | None = None) -> Obj: ...

    async def replace_status(self, resource: Resource, obj: Obj, *, namespace: str | None = None) -> Obj: ...

    async def replace_subresource(
        self, resource: Resource, obj: Obj, subresource: str, *, namespace: str | None = None
    ) -> Obj: ...

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: PatchBody,
        *,
        namespace: str | None = None,
        patch_type: Patch = "merge",
        field_manager: str | None = None,
        force: bool = False,
        subresource: Literal["status"] | None = None,
    ) -> Obj: ...

    async def apply(
        self, resource: Resource, obj: Obj, *, field_manager: str | None = None, force: bool = False
    ) -> Obj: ...

    async def apply_status(
        self, resource: Resource, obj: Obj, *, field_manager: str | None = None, force: bool = False
    ) -> Obj: ...

    async def delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        propagation_policy: Propagation | None = None,
        precondition_uid: str | None = None,
    ) -> None: ...

    def watch(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: Mapping[str, str] | None = None,
        field_selector: Mapping[str, str] | None = None,
        timeout_seconds: int | None = None,
    ) -> AsyncGenerator[WatchEvent, None]: ...

    async def close(self) -> None: ...


_PATCH_TYPES: dict[str, PatchType] = {
    "merge": PatchType.MERGE,
    "json": PatchType.JSON,
    "strategic": PatchType.STRATEGIC,
    "apply": PatchType.APPLY,
}
_VERBS = [
    "delete",
    "deletecollection",
    "get",
    "global_list",
    "global_watch",
    "list",
    "patch",
    "post",
    "put",
    "watch",
]
_ALL_NAMESPACES = "*"  # lightkube's spelling of "every namespace" for list and watch

# lightkube's overloads key on the resource class's scope; the facade's own signatures carry the types,
# so the generic classes are held as ``Any`` at this boundary.
_Generic = Any
_GenericStatus = Any


def _classes(resource: Resource) -> tuple[_Generic, _GenericStatus]:
    """lightkube generic classes for a descriptor, outside lightkube's global registry (see the module doc)."""
    definition = lk_resource.ResourceDef(resource.group, resource.version, resource.kind)
    info = lk_resource.ApiInfo(resource=definition, plural=resource.plural, verbs=list(_VERBS))
    status_info = lk_resource.ApiInfo(
        resource=definition,
        parent=definition,
        plural=resource.plural,
        verbs=["get", "patch", "put"],
        action="status",
    )
    if resource.namespaced:
        ns_status = type(f"{resource.kind}Status", (GenericNamespacedStatus,), {"_api_info": status_info})
        ns_main = type(resource.kind, (GenericNamespacedResource,), {"_api_info": info, "Status": ns_status})
        return ns_main, ns_status
    status = type(f"{resource.kind}Status", (GenericGlobalStatus,), {"_api_info": status_info})
    main = type(resource.kind, (GenericGlobalResource,), {"_api_info": info, "Status": status})
    return main, status


def _plain(obj: Any) -> Obj:
    # Generic objects are dicts decoded straight from JSON; a shallow copy drops the lightkube class.
    return dict(obj)


def _status_error(exc: httpx2.HTTPStatusError) -> StatusError:
    if isinstance(exc, ApiError):
        status = exc.status
        details = status.details.to_dict() if status.details is not None else None
        # A watch ERROR event carries the Status in the stream, with no HTTP response of its own.
        code = status.code or (exc.response.status_code if exc.response is not None else 500)
        return StatusError(
            code,
            status.reason or "",
            status.message or "",
            details=details,
        )
    # A non-JSON error body (a proxy's HTML page, or a watch refused before streaming): code and phrase only.
    response = exc.response
    return StatusError(
        response.status_code, response.reason_phrase, f"{response.status_code} {response.reason_phrase}"
    )


@contextlib.contextmanager
def _errors() -> Iterator[None]:
    """Translate lightkube's and httpx2's exceptions into ours at the seam."""
    try:
        yield
    except httpx2.HTTPStatusError as exc:
        raise _status_error(exc) from exc
    except httpx2.HTTPError as exc:
        raise TransportError(str(exc) or type(exc).__name__) from exc


def _raise(exc: Exception, count: int) -> OnErrorResult:
    """Watch errors go to the caller: the informer decides between resuming and relisting."""
    return OnErrorResult(OnErrorAction.RAISE)


class KubeClient:
    """:class:`KubeAPI` over lightkube's ``AsyncClient``: one connection pool per API server."""

    def __init__(self, client: AsyncClient, *, field_manager: str | None = None) -> None:
        self._lk = client
        self.field_manager = field_manager
        self._resources: dict[Resource, tuple[_Generic, _GenericStatus]] = {}

    @classmethod
    def from_kubeconfig(
        cls,
        path: str | Path,
        context: str | None = None,
        *,
        field_manager: str | None = None,
        timeout: float = 10.0,
    ) -> KubeClient:
        """A client for one context of a kubeconfig (its current context by default).

        ``timeout`` bounds each request except watches, whose streams the server ends; the file is read
        here, once, so call it before the event loop gets busy.
        """
        config = KubeConfig.from_file(str(path)).get(context_name=context)
        if config is None:
            raise ValueError(f"kubeconfig {path} has no context {context!r}")
        client = AsyncClient(config=config, timeout=httpx2.Timeout(timeout), field_manager=field_manager)
        return cls(client, field_manager=field_manager)

    def _cls(self, resource: Resource) -> _Generic:
        return self._pair(resource)[0]

    def _status_cls(self, resource: Resource) -> _GenericStatus:
        return self._pair(resource)[1]

    def _pair(self, resource: Resource) -> tuple[_Generic, _GenericStatus]:
        pair = self._resources.get(resource)
        if pair is None:
            pair = self._resources[resource] = _classes(resource)
        return pair

    @staticmethod
    def _namespace(resource: Resource, namespace: str | None, obj: Obj | None = None) -> str | None:
        if not resource.namespaced:
            return None
        if namespace is None and obj is not None:
            namespace = (obj.get("metadata") or {}).get("namespace")
        if not namespace:
            raise ValueError(f"{resource.plural} are namespaced: give a namespace")
        return namespace

    @staticmethod
    def _name(obj: Obj) -> str:
        name = (obj.get("metadata") or {}).get("name")
        if not name:
            raise ValueError("the object has no metadata.name")
        return str(name)

    def _body(self, resource: Resource, obj: Obj, namespace: str | None = None, status: bool = False) -> Any:
        body = dict(obj)
        body.setdefault("apiVersion", resource.api_version)
        body.setdefault("kind", resource.kind)
        if namespace is not None:
            body["metadata"] = {**(body.get("metadata") or {}), "namespace": namespace}
        return (self._status_cls(resource) if status else self._cls(resource))(body)

    async def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Obj:
        with _errors():
            obj = await self._lk.get(
                self._cls(resource), name, namespace=self._namespace(resource, namespace)
            )
        return _plain(obj)

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: Mapping[str, str] | None = None,
        field_selector: Mapping[str, str] | None = None,
        chunk_size: int | None = None,
    ) -> ListResult:
        """Every matching object and the revision of the (first page's) snapshot; pages follow ``continue``."""
        ns = (namespace or _ALL_NAMESPACES) if resource.namespaced else None
        with _errors():
            pages = self._lk.list(
                self._cls(resource),
                namespace=ns,
                chunk_size=chunk_size,
                labels=dict(label_selector) if label_selector else None,
                fields=dict(field_selector) if field_selector else None,
            )
            items = [_plain(obj) async for obj in pages]
            revision = pages.resourceVersion
        return ListResult(items, revision)

    async def create(self, resource: Resource, obj: Obj, *, namespace: str | None = None) -> Obj:
        ns = self._namespace(resource, namespace, obj)
        with _errors():
            created = await self._lk.create(self._body(resource, obj, ns))
        return _plain(created)

    async def replace(self, resource: Resource, obj: Obj, *, namespace: str | None = None) -> Obj:
        """PUT: with ``metadata.resourceVersion`` set, a concurrent change answers 409 Conflict."""
        ns = self._namespace(resource, namespace, obj)
        with _errors():
            replaced = await self._lk.replace(self._body(resource, obj, ns), self._name(obj), namespace=ns)
        return _plain(replaced)

    async def replace_status(self, resource: Resource, obj: Obj, *, namespace: str | None = None) -> Obj:
        ns = self._namespace(resource, namespace, obj)
        with _errors():
            replaced = await self._lk.replace(
                self._body(resource, obj, ns, status=True), self._name(obj), namespace=ns
            )
        return _plain(replaced)

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: PatchBody,
        *,
        namespace: str | None = None,
        patch_type: Patch = "merge",
        field_manager: str | None = None,
        force: bool = False,
        subresource: Literal["status"] | None = None,
    ) -> Obj:
        """A patch of the given type; ``apply`` needs a field manager (here or on the client)."""
        target = self._status_cls(resource) if subresource == "status" else self._cls(resource)
        manager = field_manager or self.field_manager
        if patch_type == "apply" and not manager:
            raise ValueError("server-side apply needs a field manager")
        with _errors():
            patched = await self._lk.patch(
                target,
                name,
                patch,
                namespace=self._namespace(resource, namespace, patch if isinstance(patch, dict) else None),
                patch_type=_PATCH_TYPES[patch_type],
                field_manager=manager,
                force=force,
            )
        return _plain(patched)

    async def apply(
        self, resource: Resource, obj: Obj, *, field_manager: str | None = None, force: bool = False
    ) -> Obj:
        """Server-side apply of a (partial) object: creates it or updates the fields this manager owns."""
        return await self.patch(
            resource,
            self._name(obj),
            {"apiVersion": resource.api_version, "kind": resource.kind, **obj},
            patch_type="apply",
            field_manager=field_manager,
            force=force,
        )

    async def apply_status(
        self, resource: Resource, obj: Obj, *, field_manager: str | None = None, force: bool = False
    ) -> Obj:
        """Server-side apply to the ``status`` subresource (the main resource ignores status writes)."""
        return await self.patch(
            resource,
            self._name(obj),
            {"apiVersion": resource.api_version, "kind": resource.kind, **obj},
            patch_type="apply",
            field_manager=field_manager,
            force=force,
            subresource="status",
        )

    async def replace_subresource(
        self, resource: Resource, obj: Obj, subresource: str, *, namespace: str | None = None
    ) -> Obj:
        """PUT the object to a subresource of its own kind (``certificatesigningrequests/approval``)."""
        info = lk_resource.ApiInfo(
            resource=lk_resource.ResourceDef(resource.group, resource.version, resource.kind),
            plural=resource.plural,
            verbs=["put"],
            action=subresource,
        )
        base = GenericNamespacedStatus if resource.namespaced else GenericGlobalStatus
        cls: Any = type(f"{resource.kind}{subresource.capitalize()}", (base,), {"_api_info": info})
        ns = self._namespace(resource, namespace, obj)
        body = {"apiVersion": resource.api_version, "kind": resource.kind, **obj}
        with _errors():
            replaced = await self._lk.replace(cls(body), self._name(obj), namespace=ns)
        return _plain(replaced)

    async def create_subresource(
        self, resource: Resource, name: str, subresource: str, body: Obj, *, namespace: str | None = None
    ) -> Obj:
        """POST an object of its own kind to a subresource (``pods/binding``, ``pods/eviction``)."""
        group, version = split_api_version(str(body.get("apiVersion") or "v1"))
        info = lk_resource.ApiInfo(
            resource=lk_resource.ResourceDef(group, version, str(body.get("kind") or "")),
            parent=lk_resource.ResourceDef(resource.group, resource.version, resource.kind),
            plural=resource.plural,
            verbs=["post"],
            action=subresource,
        )
        base = GenericNamespacedStatus if resource.namespaced else GenericGlobalStatus
        cls: Any = type(f"{resource.kind}{subresource.capitalize()}", (base,), {"_api_info": info})
        ns = self._namespace(resource, namespace)
        with _errors():
            answer = await self._lk.create(cls(dict(body)), name, namespace=ns)
        return _plain(answer)

    async def delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        propagation_policy: Propagation | None = None,
        precondition_uid: str | None = None,
    ) -> None:
        """DELETE, optionally with a propagation policy and a UID precondition (the object is deleted only
        if it is still the one the caller looked at; lightkube's ``delete`` sends no body, so that one
        goes through its request builder with a ``DeleteOptions`` body)."""
        ns = self._namespace(resource, namespace)
        with _errors():
            if precondition_uid is None:
                cascade = CascadeType(propagation_policy) if propagation_policy else None
                await self._lk.delete(self._cls(resource), name, namespace=ns, cascade=cascade)
                return
            options: Obj = {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "preconditions": {"uid": precondition_uid},
            }
            if propagation_policy:
                options["propagationPolicy"] = propagation_policy
            generic: Any = self._lk._client  # lightkube's request builder; its send is untyped
            request = generic.prepare_request("delete", self._cls(resource), name=name, namespace=ns)
            request.data = options
            response = await generic.send(generic.build_adapter_request(request))
            generic.raise_for_status(response)

    async def watch(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: Mapping[str, str] | None = None,
        field_selector: Mapping[str, str] | None = None,
        timeout_seconds: int | None = None,
    ) -> AsyncGenerator[WatchEvent, None]:
        """Events after ``resource_version`` until the caller stops or an error is raised.

        When the server ends a stream (``timeout_seconds``), lightkube re-watches from the last event's
        revision, so the iterator does not end on its own. An expired revision raises ``StatusError``
        with code 410; a broken connection raises :class:`TransportError`. Close the iterator
        (``contextlib.aclosing``) when leaving early so the connection is released at once.
        """
        ns = (namespace or _ALL_NAMESPACES) if resource.namespaced else None
        stream = self._lk.watch(
            self._cls(resource),
            namespace=ns,
            labels=dict(label_selector) if label_selector else None,
            fields=dict(field_selector) if field_selector else None,
            server_timeout=timeout_seconds,
            resource_version=resource_version,
            on_error=_raise,
        )
        with _errors():
            async with contextlib.aclosing(cast(AsyncGenerator[tuple[str, Any], None], stream)) as events:
                async for kind, obj in events:
                    yield WatchEvent(cast(EventType, kind), _plain(obj))

    async def logs(
        self, name: str, *, namespace: str, container: str | None = None, tail_lines: int | None = None
    ) -> str:
        """A pod container's log (``pods/log``), the last ``tail_lines`` lines when given."""
        with _errors():
            lines = self._lk.log(name, namespace=namespace, container=container, tail_lines=tail_lines)
            return "".join([line async for line in lines])

    async def close(self) -> None:
        await self._lk.close()
