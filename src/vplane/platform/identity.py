"""Access keys on the platform's API server: authentication, the ``accesskey`` subresources, and the
answer the mesh coordinator gives a node that registers.

The index maps key strings to AccessKey objects and is kept current from watch events, so checking a
token is a dictionary lookup plus the pure :func:`vplane.kube.accesskeys.check`.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from aiohttp import web

from vplane.apiserver import codec, timeutil
from vplane.apiserver.context import RequestContext, UserInfo
from vplane.apiserver.handlers import object_response, response_format
from vplane.apiserver.objects import DeleteOptions
from vplane.apiserver.registry import ResourceType
from vplane.apiserver.watch import WatchEvent
from vplane.kube import accesskeys, errors
from vplane.kube.accesskeys import GROUP, Identity, KeyRejected
from vplane.kube.objects import Obj
from vplane.kube.requestinfo import RequestInfo

if TYPE_CHECKING:
    from vplane.apiserver.server import APIServer

KEY_PREFIX = f"/{GROUP}/accesskeys/"
USER_PREFIX = f"/{GROUP}/users/"


class AccessKeyIndex:
    def __init__(self, server: APIServer) -> None:
        self.server = server
        self.by_key: dict[str, Obj] = {}
        self.by_name: dict[str, Obj] = {}
        self.user_groups: dict[str, list[str]] = {}
        server.hub.on_event.append(self.on_event)
        server.token_authenticators.append(self)

    def load(self) -> None:
        for kv in self.server.cache.iter_prefix(KEY_PREFIX):
            self._put(codec.decode_kv(kv))
        for kv in self.server.cache.iter_prefix(USER_PREFIX):
            user = codec.decode_kv(kv)
            self.user_groups[user["metadata"]["name"]] = list((user.get("spec") or {}).get("groups") or [])

    def _put(self, obj: Obj | None, name: str = "") -> None:
        old = self.by_name.pop(name or (obj or {}).get("metadata", {}).get("name", ""), None)
        if old is not None:
            self.by_key.pop(str((old.get("spec") or {}).get("key", "")), None)
        if obj is not None:
            self.by_name[obj["metadata"]["name"]] = obj
            key = str((obj.get("spec") or {}).get("key", ""))
            if key:
                self.by_key[key] = obj

    def on_event(self, wevent: WatchEvent) -> None:
        key = wevent.event.kv.key
        if key.startswith(KEY_PREFIX):
            obj = wevent.obj()
            if wevent.event.type == "DELETE":
                self._put(None, obj["metadata"]["name"])
            else:
                self._put(obj)
        elif key.startswith(USER_PREFIX):
            user = wevent.obj()
            if wevent.event.type == "DELETE":
                self.user_groups.pop(user["metadata"]["name"], None)
            else:
                self.user_groups[user["metadata"]["name"]] = list(
                    (user.get("spec") or {}).get("groups") or []
                )

    def check(self, token: str) -> Identity:
        """The identity behind ``token``; raises KeyRejected with the reason it cannot be used."""
        if not token:
            raise KeyRejected(accesskeys.NO_KEY)
        obj = self.by_key.get(token)
        if obj is None:
            raise KeyRejected("invalid access key: not found")
        try:
            accesskeys.check(obj, self.server.clock(), timeutil.parse_time)
        except KeyRejected as exc:
            raise KeyRejected(f"invalid access key: {exc}") from None
        return accesskeys.identity_of(obj, lambda user: self.user_groups.get(user, []))

    async def authenticate_token(self, token: str) -> UserInfo | None:
        try:
            identity = self.check(token)
        except KeyRejected:
            return None
        return UserInfo(identity.user, identity.key_name, (*identity.groups, "system:authenticated"))

    # -- subresources ----------------------------------------------------------------------------

    def key_type(self) -> ResourceType:
        rtype = self.server.registry.get(GROUP, "v1", "accesskeys")
        assert rtype is not None
        return rtype

    async def ensure_key(
        self, name: str, key_type: str, subject: str, roles: tuple[str, ...], labels: dict[str, str]
    ) -> Obj:
        """The key named ``name``, created if missing; reused unless its scope is malformed (runbook)."""
        rtype = self.key_type()
        current = self.server.objects.get(rtype, "", name)
        if current is not None:
            spec = current.get("spec") or {}
            if spec.get("subject") == subject and set(roles) <= set(accesskeys.roles_of(current)):
                return current  # disabled or expired keys come back unchanged, as upstream
            with contextlib.suppress(errors.StatusError):
                await self.server.objects.delete(
                    self.server.system_context(), rtype, "", name, DeleteOptions("Background")
                )
        obj = accesskeys.key_object(name, key_type, subject=subject, roles=roles, labels=labels)
        return await self.server.objects.create(self.server.system_context(), rtype, "", obj)

    async def vci_accesskey(
        self, request: web.Request, ctx: RequestContext, rtype: ResourceType, info: RequestInfo
    ) -> web.StreamResponse:
        if request.method != "GET":
            raise errors.method_not_allowed()
        self.server.objects.must_get(rtype, info.namespace, info.name)
        key = await self.ensure_key(
            vci_key_name(info.namespace, info.name),
            accesskeys.TYPE_VCLUSTER,
            accesskeys.vcluster_subject(info.namespace, info.name),
            (accesskeys.ROLE_VCLUSTER,),
            {"loft.sh/virtualcluster-instance": info.name, "loft.sh/project-namespace": info.namespace},
        )
        body = {
            "apiVersion": f"{GROUP}/v1",
            "kind": "VirtualClusterAccessKey",
            "metadata": {"name": info.name, "namespace": info.namespace},
            "accessKey": key["spec"]["key"],
        }
        return object_response(body, response_format(request), 200, ctx)

    async def cluster_accesskey(
        self, request: web.Request, ctx: RequestContext, rtype: ResourceType, info: RequestInfo
    ) -> web.StreamResponse:
        if request.method != "GET":
            raise errors.method_not_allowed()
        self.server.objects.must_get(rtype, "", info.name)
        key = await self.ensure_key(
            cluster_key_name(info.name),
            accesskeys.TYPE_AGENT,
            accesskeys.agent_subject(info.name),
            (accesskeys.ROLE_AGENT,),
            {"loft.sh/cluster": info.name},
        )
        assert self.server.ca is not None
        body = {
            "apiVersion": f"{GROUP}/v1",
            "kind": "ClusterAccessKey",
            "metadata": {"name": info.name},
            "accessKey": key["spec"]["key"],
            "loftHost": self.server.url.removeprefix("https://"),
            "insecure": False,
            "caCert": self.server.ca.cert_pem.decode(),
        }
        return object_response(body, response_format(request), 200, ctx)


def vci_key_name(namespace: str, name: str) -> str:
    return f"vcluster-{namespace}-{name}"


def cluster_key_name(name: str) -> str:
    return f"cluster-{name}"
