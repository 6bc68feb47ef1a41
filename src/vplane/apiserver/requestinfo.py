"""Turn a request path into the Kubernetes attributes authorization and handlers work with.

Follows apiserver's RequestInfoFactory: ``/api/v1/...`` for the core group, ``/apis/<g>/<v>/...`` for
the others, ``namespaces/<ns>/`` scoping, and the verbs derived from method + shape (get vs list,
watch via ``?watch=true``, delete vs deletecollection).
"""

from __future__ import annotations

from dataclasses import dataclass, field

NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})


@dataclass(slots=True)
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
    parts: list[str] = field(default_factory=list)

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


def parse(method: str, path: str, watch: bool) -> RequestInfo:
    """Attributes of a request; ``is_resource`` is False for discovery and other non-resource paths."""
    method_verb = _METHOD_VERBS.get(method, method.lower())
    parts = [p for p in path.strip("/").split("/") if p != ""]
    nonresource = RequestInfo(is_resource=False, path=path, verb=method.lower())
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return nonresource
    prefix = parts[0]
    info = RequestInfo(is_resource=True, path=path, verb=method_verb, api_prefix=prefix)
    rest = parts[1:]
    if prefix == "apis":
        if len(rest) < 3:
            return nonresource
        info.group, info.version = rest[0], rest[1]
        rest = rest[2:]
    else:
        info.version = rest[0]
        rest = rest[1:]
    if rest and rest[0] == "namespaces":
        if len(rest) > 1:
            info.namespace = rest[1]
            if len(rest) > 2 and rest[2] not in NAMESPACE_SUBRESOURCES:
                rest = rest[2:]
    info.parts = rest
    if len(rest) >= 3:
        info.subresource = rest[2]
    if len(rest) >= 2:
        info.name = rest[1]
    if rest:
        info.resource = rest[0]
    if not info.name:
        if method_verb == "get":
            info.verb = "watch" if watch else "list"
        elif method_verb == "delete":
            info.verb = "deletecollection"
    elif method_verb == "get" and watch:
        info.verb = "watch"
    return info
