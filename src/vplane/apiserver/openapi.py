"""OpenAPI v3: the root index and one document per group/version, built from the registry; and the
Swagger 2.0 document of the whole API at ``/openapi/v2``, converted from them (:mod:`vplane.kube.openapiv2`).

kubectl needs, per group/version, a PATCH operation tagged with ``x-kubernetes-group-version-kind``
that lists the ``fieldValidation`` query parameter (then it validates server-side and sends
``fieldValidation=Strict``), and the kinds' schemas with ``metadata`` as an ObjectMeta ``$ref`` (client
side apply computes strategic merge patches from them). Documents are addressed by a content hash, so
kubectl's disk cache refreshes when a CRD changes.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from email.utils import formatdate
from typing import Any

import orjson
from aiohttp import web

from vplane.apiserver.registry import Registry, ResourceType
from vplane.apiserver.schemas import SchemaSource
from vplane.kube import errors, gnostic, openapiv2
from vplane.kube import openapi as builtin_openapi

OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
STATUS = "io.k8s.apimachinery.pkg.apis.meta.v1.Status"
DELETE_OPTIONS = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions"
API_VERSIONS = "io.k8s.apimachinery.pkg.apis.meta.v1.APIVersions"
API_GROUP_LIST = "io.k8s.apimachinery.pkg.apis.meta.v1.APIGroupList"
API_GROUP = "io.k8s.apimachinery.pkg.apis.meta.v1.APIGroup"
VERSION_INFO = "io.k8s.apimachinery.pkg.version.Info"
OPENAPI_VERSION = "v1.36.2"
"""The version the documents' ``info`` reports (the Kubernetes version whose API they describe)."""
PATCH_MEDIA = ["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"]
SMP = "application/strategic-merge-patch+json"

_QUERY = [
    ("dryRun", "string"),
    ("fieldManager", "string"),
    ("fieldValidation", "string"),
    ("force", "boolean"),
    ("pretty", "string"),
]


def _param(name: str, kind: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "schema": {"type": kind, "uniqueItems": True}}


class OpenAPI:
    def __init__(self, registry: Registry, schemas: SchemaSource) -> None:
        self.registry = registry
        self.schemas = schemas
        self.external: Callable[[], dict[str, tuple[bytes, str]]] = dict
        """Documents of aggregated group/versions, keyed like the root's paths (``apis/<g>/<v>``)."""
        self._docs: dict[str, tuple[bytes, str]] = {}
        self._generation = -1
        self._v2: _V2 | None = None

    def _fresh(self) -> None:
        if self._generation != self.registry.generation:
            self._docs = {}
            self._generation = self.registry.generation

    def _path_key(self, group: str, version: str) -> str:
        return f"apis/{group}/{version}" if group else f"api/{version}"

    def document(self, group: str, version: str) -> tuple[bytes, str] | None:
        self._fresh()
        key = self._path_key(group, version)
        cached = self._docs.get(key)
        if cached is not None:
            return cached
        types = self.registry.resources_in(group, version)
        if not types:
            return None
        doc = self._build(group, version, types)
        body = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
        digest = hashlib.sha512(body).hexdigest().upper()
        self._docs[key] = (body, digest)
        return body, digest

    def _discovery_document(self, key: str) -> tuple[bytes, str] | None:
        """The documents of the discovery endpoints themselves (``/api/``, ``/apis/``, ``/apis/<g>/``,
        ``/version/``), which upstream's root lists beside the group/versions."""
        self._fresh()
        cached = self._docs.get(key)
        if cached is not None:
            return cached
        if key == "version":
            path, operation, schema, tag = "/version/", "getCodeVersion", VERSION_INFO, "version"
        elif key == "api":
            path, operation, schema, tag = "/api/", "getCoreAPIVersions", API_VERSIONS, "core"
        elif key == "apis":
            path, operation, schema, tag = "/apis/", "getAPIVersions", API_GROUP_LIST, "apis"
        elif key.startswith("apis/") and key.count("/") == 1:
            group = key[len("apis/") :]
            if group not in self.registry.group_versions() and not any(
                k.startswith(f"{key}/") for k in self.external()
            ):
                return None
            path, schema, tag = f"/{key}/", API_GROUP, group
            operation = (
                "get"
                + "".join(p[:1].upper() + p[1:] for p in group.replace("-", ".").split("."))
                + "APIGroup"
            )
        else:
            return None
        builtin = builtin_openapi.load_builtin()
        doc = {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": OPENAPI_VERSION},
            "paths": {
                path: {
                    "get": {
                        "tags": [tag],
                        "description": "get available resources"
                        if key != "version"
                        else "get the version information for this server",
                        "operationId": operation,
                        "responses": {
                            "200": {
                                "description": "OK",
                                "content": {
                                    "application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}
                                },
                            },
                            "401": {"description": "Unauthorized"},
                        },
                    }
                }
            },
            "components": {"schemas": builtin.closure([schema])},
        }
        body = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
        found = (body, hashlib.sha512(body).hexdigest().upper())
        self._docs[key] = found
        return found

    def root(self) -> bytes:
        paths: dict[str, Any] = {}
        for key, (_body, digest) in self.external().items():
            paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest}"}
        keys = ["api", "apis", "version"]
        for group, versions in self.registry.group_versions().items():
            if group:
                keys.append(f"apis/{group}")
            for version in versions:
                doc = self.document(group, version)
                if doc is not None:
                    key = self._path_key(group, version)
                    paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={doc[1]}"}
        for key in list(paths):
            if key.count("/") == 2 and key.startswith("apis/"):
                keys.append(key.rsplit("/", 1)[0])
        for key in keys:
            found = self._discovery_document(key)
            if found is not None:
                paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={found[1]}"}
        return orjson.dumps({"paths": dict(sorted(paths.items()))})

    def v2(self) -> _V2:
        """The Swagger 2.0 document: rebuilt when a group/version or an aggregated document changes."""
        self._fresh()
        external = self.external()
        key = (self._generation, tuple(sorted((k, digest) for k, (_body, digest) in external.items())))
        if self._v2 is not None and self._v2.key == key:
            return self._v2
        docs: list[Any] = []
        for group, versions in self.registry.group_versions().items():
            for version in versions:
                found = self.document(group, version)
                if found is not None:
                    docs.append(orjson.loads(found[0]))
        docs.extend(orjson.loads(body) for _key, (body, _digest) in sorted(external.items()))
        self._v2 = _V2(key, openapiv2.document(docs, OPENAPI_VERSION))
        return self._v2

    def serve(self, request: web.Request, parts: list[str]) -> web.StreamResponse:
        if parts == ["v2"]:
            return self._serve_v2(request)
        if parts == ["v3"]:
            return web.Response(body=self.root(), headers={"Content-Type": "application/json"})
        if len(parts) >= 2 and parts[0] == "v3":
            if len(parts) == 2 or (len(parts) == 3 and parts[1] == "apis"):
                found = self._discovery_document("/".join(parts[1:]))
            elif parts[1] == "api" and len(parts) == 3:
                found = self.document("", parts[2])
            elif parts[1] == "apis" and len(parts) == 4:
                found = self.external().get(f"apis/{parts[2]}/{parts[3]}") or self.document(
                    parts[2], parts[3]
                )
            else:
                found = None
            if found is not None:
                body, digest = found
                wanted = request.query.get("hash")
                headers = {"Content-Type": "application/json", "Etag": f'"{digest}"'}
                if wanted and wanted != digest:
                    raise web.HTTPMovedPermanently(location=f"{request.path}?hash={digest}")
                headers["Cache-Control"] = "public, immutable" if wanted else "no-cache, private"
                return web.Response(body=body, headers=headers)
        raise errors.not_found_path()

    def _serve_v2(self, request: web.Request) -> web.StreamResponse:
        """kube-openapi's handler: the first Accept clause (by preference) naming JSON or gnostic's
        protobuf wins, ``*/*`` is JSON, anything else is 406; the ETag is the JSON's hash either way."""
        proto = openapiv2.negotiate(request.headers.get("Accept", ""))
        if proto is None:
            return web.Response(status=406, headers={"Vary": "Accept"})
        doc = self.v2()
        headers = {
            "Content-Type": gnostic.MEDIA_TYPE if proto else "application/json",
            "Etag": f'"{doc.etag}"',
            "Last-Modified": doc.modified,
            "Vary": "Accept",
        }
        if request.headers.get("If-None-Match", "") in (f'"{doc.etag}"', "*"):
            return web.Response(status=304, headers=headers)
        return web.Response(body=doc.proto() if proto else doc.json, headers=headers)

    def _build(self, group: str, version: str, types: list[ResourceType]) -> dict[str, Any]:
        builtin = builtin_openapi.load_builtin()
        wanted: list[str] = [OBJECT_META, STATUS, DELETE_OPTIONS]
        components: dict[str, Any] = {}
        paths: dict[str, Any] = {}
        for rtype in types:
            definition = self.schemas.definition_name(rtype)
            if rtype.is_custom:
                components[definition] = self._crd_schema(rtype)
            elif definition in builtin.schemas:
                wanted.append(definition)
            else:
                continue
            paths.update(self._paths(rtype, definition))
        components.update(builtin.closure(wanted))
        for schema in list(components.values()):
            for ref in _refs(schema):
                if ref not in components:
                    components.update(builtin.closure([ref]))
        return {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": OPENAPI_VERSION},
            "paths": paths,
            "components": {"schemas": components},
        }

    def _crd_schema(self, rtype: ResourceType) -> dict[str, Any]:
        schema = dict(rtype.crd_schema or {"type": "object"})
        props = dict(schema.get("properties") or {})
        props["apiVersion"] = {"type": "string"}
        props["kind"] = {"type": "string"}
        props["metadata"] = {"allOf": [{"$ref": f"#/components/schemas/{OBJECT_META}"}]}
        schema["properties"] = props
        schema["type"] = "object"
        schema["x-kubernetes-group-version-kind"] = [
            {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}
        ]
        return schema

    def _paths(self, rtype: ResourceType, definition: str) -> dict[str, Any]:
        gvk = {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}
        base = f"/apis/{rtype.group}/{rtype.version}" if rtype.group else f"/api/{rtype.version}"
        collection = (
            f"{base}/namespaces/{{namespace}}/{rtype.resource}"
            if rtype.namespaced
            else f"{base}/{rtype.resource}"
        )
        item = collection + "/{name}"
        ref = {"$ref": f"#/components/schemas/{definition}"}
        media = (
            list(PATCH_MEDIA) if rtype.is_custom else [PATCH_MEDIA[0], PATCH_MEDIA[1], SMP, PATCH_MEDIA[2]]
        )
        params = [_param(n, t) for n, t in _QUERY]
        ok = {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}}
        out: dict[str, Any] = {}
        if "create" in rtype.verbs:
            out[collection] = {
                "post": {
                    "operationId": f"create{rtype.kind}",
                    "parameters": params[:3],
                    "requestBody": {"content": {"*/*": {"schema": ref}}, "required": True},
                    "responses": ok,
                    "x-kubernetes-action": "post",
                    "x-kubernetes-group-version-kind": gvk,
                }
            }
        if "get" in rtype.verbs:
            out[item] = {
                "get": {
                    "operationId": f"read{rtype.kind}",
                    "responses": ok,
                    "x-kubernetes-action": "get",
                    "x-kubernetes-group-version-kind": gvk,
                },
                "put": {
                    "operationId": f"replace{rtype.kind}",
                    "parameters": params[:3],
                    "requestBody": {"content": {"*/*": {"schema": ref}}, "required": True},
                    "responses": ok,
                    "x-kubernetes-action": "put",
                    "x-kubernetes-group-version-kind": gvk,
                },
                "patch": {
                    "operationId": f"patch{rtype.kind}",
                    "parameters": params,
                    "requestBody": {
                        "content": {m: {"schema": {"type": "object"}} for m in media},
                        "required": True,
                    },
                    "responses": ok,
                    "x-kubernetes-action": "patch",
                    "x-kubernetes-group-version-kind": gvk,
                },
                "delete": {
                    "operationId": f"delete{rtype.kind}",
                    "responses": ok,
                    "x-kubernetes-action": "delete",
                    "x-kubernetes-group-version-kind": gvk,
                },
            }
        return out


def _refs(schema: Any) -> list[str]:
    out: list[str] = []
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            out.append(ref[len("#/components/schemas/") :])
        for value in schema.values():
            out.extend(_refs(value))
    elif isinstance(schema, list):
        for value in schema:
            out.extend(_refs(value))
    return out


class _V2:
    """One built v2 document: its JSON, ETag and, made on first request, its protobuf form."""

    def __init__(self, key: Any, doc: dict[str, Any]) -> None:
        self.key = key
        self.doc = doc
        self.json = orjson.dumps(doc)
        self.etag = hashlib.sha512(self.json).hexdigest().upper()
        self.modified = formatdate(time.time(), usegmt=True)
        self._proto: bytes | None = None

    def proto(self) -> bytes:
        if self._proto is None:
            self._proto = gnostic.encode_document(self.doc)
        return self._proto
