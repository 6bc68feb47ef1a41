"""Turn a request path into the Kubernetes attributes authorization and handlers work with.

Follows apiserver's RequestInfoFactory: ``/api/v1/...`` for the core group, ``/apis/<g>/<v>/...`` for
the others, ``namespaces/<ns>/`` scoping, and the verbs derived from method + shape (get vs list,
watch via ``?watch=true``, delete vs deletecollection).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})


@dataclass(frozen=True, slots=True)
class RequestInfo:
    is_resource: bool
    path: str
    verb: str
    api_prefix: str = ""
    group: str = ""
    version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    parts: tuple[str, ...] = ()

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


_METHOD_VERBS = {
    "POST": "create",
    "PUT": "update",
    "PATCH": "patch",
    "GET": "get",
    "HEAD": "get",
    "DELETE": "delete",
}


@functools.lru_cache(maxsize=4096)
def parse(method: str, path: str, watch: bool) -> RequestInfo:
    """Attributes of a request; ``is_resource`` is False for discovery and other non-resource paths.

    Remembered per (method, path, watch): the answer is immutable and clients repeat paths (every create
    of a kind posts to one collection path)."""
    method_verb = _METHOD_VERBS.get(method, method.lower())
    parts = [p for p in path.strip("/").split("/") if p != ""]
    nonresource = RequestInfo(is_resource=False, path=path, verb=method.lower())
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return nonresource
    prefix = parts[0]
    group = namespace = ""
    rest = parts[1:]
    if prefix == "apis":
        if len(rest) < 3:
            return nonresource
        group, version = rest[0], rest[1]
        rest = rest[2:]
    else:
        version = rest[0]
        rest = rest[1:]
    if rest and rest[0] == "namespaces":
        if len(rest) > 1:
            namespace = rest[1]
            if len(rest) > 2 and rest[2] not in NAMESPACE_SUBRESOURCES:
                rest = rest[2:]
    subresource = rest[2] if len(rest) >= 3 else ""
    name = rest[1] if len(rest) >= 2 else ""
    resource = rest[0] if rest else ""
    verb = method_verb
    if not name:
        if method_verb == "get":
            verb = "watch" if watch else "list"
        elif method_verb == "delete":
            verb = "deletecollection"
    elif method_verb == "get" and watch:
        verb = "watch"
    return RequestInfo(
        is_resource=True,
        path=path,
        verb=verb,
        api_prefix=prefix,
        group=group,
        version=version,
        namespace=namespace,
        resource=resource,
        subresource=subresource,
        name=name,
        parts=tuple(rest),
    )
