"""Access keys on the platform's API server: authentication, the ``accesskey`` subresources, and the
answer the mesh coordinator gives a node that registers.

The index maps key strings to AccessKey objects and is kept current from watch events, so checking a
token is a dictionary lookup plus the pure :func:`vplane.kube.accesskeys.check`. It also follows the
VirtualClusterInstances, because a tenant cluster's key works only while the instance it was minted for
(that UID) is alive; whoever holds revocation duties (the mesh coordinator) hears of every key that stops
working through :attr:`AccessKeyIndex.on_revoked`.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog
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

log = structlog.get_logger("vplane.platform.identity")

KEY_PREFIX = f"/{GROUP}/accesskeys/"
USER_PREFIX = f"/{GROUP}/users/"
VCI_PREFIX = f"/{GROUP}/virtualclusterinstances/"


class AccessKeyIndex:
    def __init__(self, server: APIServer) -> None:
        self.server = server
        self.by_key: dict[str, Obj] = {}
        self.by_name: dict[str, Obj] = {}
        self.user_groups: dict[str, list[str]] = {}
        self.instances: dict[tuple[str, str], str] = {}
        """``(namespace, name) -> uid`` of every live VirtualClusterInstance (deleting ones are not live)."""
        self.on_revoked: list[Callable[[Obj], None]] = []
        """Called with a key that stopped working: deleted, disabled, or its instance deleted."""
        server.hub.on_event.append(self.on_event)
        server.token_authenticators.append(self)

    def load(self) -> None:
        for kv in self.server.cache.iter_prefix(KEY_PREFIX):
            self._put(codec.decode_kv(kv))
        for kv in self.server.cache.iter_prefix(USER_PREFIX):
            user = codec.decode_kv(kv)
            self.user_groups[user["metadata"]["name"]] = list((user.get("spec") or {}).get("groups") or [])
        for kv in self.server.cache.iter_prefix(VCI_PREFIX):
            self._put_instance(codec.decode_kv(kv), deleted=False)

    def _put(self, obj: Obj | None, name: str = "") -> None:
        old = self.by_name.pop(name or (obj or {}).get("metadata", {}).get("name", ""), None)
        if old is not None:
            self.by_key.pop(str((old.get("spec") or {}).get("key", "")), None)
        if obj is not None:
            self.by_name[obj["metadata"]["name"]] = obj
            key = str((obj.get("spec") or {}).get("key", ""))
            if key:
                self.by_key[key] = obj

    def _put_instance(self, vci: Obj, deleted: bool) -> None:
        meta = vci.get("metadata") or {}
        ref = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        uid = str(meta.get("uid", ""))
        if deleted or meta.get("deletionTimestamp"):
            if self.instances.get(ref) == uid:
                del self.instances[ref]
            for key in list(self.by_name.values()):
                if accesskeys.bound_instance(key) == (*ref, uid):
                    self._revoked(key)
        else:
            self.instances[ref] = uid

    def live_instance(self, namespace: str, name: str) -> str | None:
        return self.instances.get((namespace, name))

    def _revoked(self, key: Obj) -> None:
        for callback in self.on_revoked:
            try:
                callback(key)
            except Exception:
                log.exception("revocation callback failed", key=key.get("metadata", {}).get("name"))

    def on_event(self, wevent: WatchEvent) -> None:
        key = wevent.event.kv.key
        if key.startswith(KEY_PREFIX):
            obj = wevent.obj()
            if wevent.event.type == "DELETE":
                self._put(None, obj["metadata"]["name"])
                self._revoked(obj)
            else:
                self._put(obj)
                if (obj.get("spec") or {}).get("disabled"):
                    self._revoked(obj)
        elif key.startswith(USER_PREFIX):
            user = wevent.obj()
            if wevent.event.type == "DELETE":
                self.user_groups.pop(user["metadata"]["name"], None)
            else:
                self.user_groups[user["metadata"]["name"]] = list(
                    (user.get("spec") or {}).get("groups") or []
                )
        elif key.startswith(VCI_PREFIX):
            self._put_instance(wevent.obj(), deleted=wevent.event.type == "DELETE")

    def check(self, token: str) -> Identity:
        """The identity behind ``token``; raises KeyRejected with the reason it cannot be used."""
        if not token:
            raise KeyRejected(accesskeys.NO_KEY)
        obj = self.by_key.get(token)
        if obj is None:
            raise KeyRejected("invalid access key: not found")
        try:
            accesskeys.check(obj, self.server.clock(), timeutil.parse_time, self.live_instance)
        except KeyRejected as exc:
            raise KeyRejected(f"invalid access key: {exc}") from None
        return accesskeys.identity_of(obj, lambda user: self.user_groups.get(user, []))

    async def authenticate_token(self, token: str) -> UserInfo | None:
        try:
            identity = self.check(token)
        except KeyRejected:
            return None
        return UserInfo(identity.user, identity.key_name, (*identity.groups, "system:authenticated"))

    # -- minting and revoking ------------------------------------------------------------------------

    def key_type(self) -> ResourceType:
        rtype = self.server.registry.get(GROUP, "v1", "accesskeys")
        assert rtype is not None
        return rtype

    async def _delete_key(self, name: str, uid: str = "") -> None:
        """Delete key ``name`` (only the object with UID ``uid``, when given: not one made meanwhile)."""
        with contextlib.suppress(errors.StatusError):
            await self.server.objects.delete(
                self.server.system_context(),
                self.key_type(),
                "",
                name,
                DeleteOptions("Background", precondition_uid=uid),
            )

    async def ensure_key(self, desired: Obj, instance_uid: str = "") -> Obj:
        """The key stored under ``desired``'s name, created from ``desired`` if missing.

        A key of the same holder is reused (disabled or expired ones unchanged, as upstream) unless its scope
        is malformed; a key of another holder under that name is never touched: the request fails with 409."""
        rtype = self.key_type()
        name = desired["metadata"]["name"]
        spec = desired["spec"]
        subject = str(spec.get("subject", ""))
        roles = accesskeys.roles_of(desired)
        for _ in range(2):
            current = self.server.objects.get(rtype, "", name)
            if current is not None:
                decision = accesskeys.reuse_decision(current, subject, roles, instance_uid)
                if decision == "reuse":
                    return current
                if decision == "conflict":
                    raise errors.conflict(
                        rtype.resource, name, GROUP, "the access key belongs to another subject"
                    )
                await self._delete_key(name)
            try:
                return await self.server.objects.create(self.server.system_context(), rtype, "", desired)
            except errors.StatusError as exc:
                # AlreadyExists: created concurrently (the controller and a subresource GET); decide again.
                if exc.reason != "AlreadyExists":
                    raise
        raise errors.conflict(rtype.resource, name, GROUP)

    async def ensure_cluster_key(self, name: str, uid: str) -> Obj:
        """The agent key of Cluster ``name``, the live object with UID ``uid``; a key left by an earlier
        Cluster of that name (deleted before the platform's loop saw it go) is revoked first, its sessions
        end. A caller holding another UID than the live Cluster's (a pass that read it before it was deleted
        and made again) is refused: it must not revoke the live Cluster's key."""
        clusters = self.server.registry.get(GROUP, "v1", "clusters")
        assert clusters is not None
        live = self.server.objects.get(clusters, "", name)
        if live is None or str(live["metadata"].get("uid") or "") != uid:
            raise errors.conflict(
                "clusters", name, GROUP, "the Cluster changed; its key follows the live object"
            )
        key_name = accesskeys.cluster_key_name(name)
        current = self.server.objects.get(self.key_type(), "", key_name)
        if current is not None and accesskeys.cluster_key_stale(current, uid):
            await self._delete_key(key_name, str(current["metadata"].get("uid") or ""))
            log.info("revoked access key", key=key_name, cluster=name, reason="earlier Cluster")
        elif current is not None and accesskeys.cluster_key_unlabelled(current, name):
            # Adopted (made before keys carried the UID), and labelled now, so a later re-creation of the
            # Cluster does not inherit it either.
            labelled = copy.deepcopy(current)
            labelled["metadata"].setdefault("labels", {})[accesskeys.CLUSTER_UID_LABEL] = uid
            with contextlib.suppress(errors.StatusError):  # changed meanwhile: the next call labels it
                await self.server.objects.update(
                    self.server.system_context(), self.key_type(), "", key_name, labelled
                )
        return await self.ensure_key(accesskeys.cluster_key_object(name, uid))

    async def ensure_vci_key(self, vci: Obj) -> Obj:
        """The key of this VirtualClusterInstance (this UID); keys of earlier instances of its name go."""
        meta = vci["metadata"]
        namespace, name, uid = str(meta["namespace"]), str(meta["name"]), str(meta.get("uid", ""))
        if meta.get("deletionTimestamp") or not uid:
            raise errors.conflict(
                "virtualclusterinstances", name, GROUP, "the virtual cluster instance is being deleted"
            )
        key = await self.ensure_key(accesskeys.vci_key_object(namespace, name, uid), uid)
        await self.revoke_vci_keys(namespace, name)
        return key

    async def revoke_vci_keys(self, namespace: str, name: str) -> list[str]:
        """Delete the keys of instance name ``namespace/name`` but the live instance's (all of them when
        none is live, deleting ones included); keys of any other subject are never among them. Their mesh
        sessions end through :attr:`on_revoked` when the deletions are observed."""
        live = self.live_instance(namespace, name)
        stale = accesskeys.stale_vci_keys(list(self.by_name.values()), namespace, name, live)
        for key_name in stale:
            await self._delete_key(key_name)
            log.info("revoked access key", key=key_name, instance=f"{namespace}/{name}")
        return stale

    # -- subresources ----------------------------------------------------------------------------

    async def vci_accesskey(
        self, request: web.Request, ctx: RequestContext, rtype: ResourceType, info: RequestInfo
    ) -> web.StreamResponse:
        if request.method != "GET":
            raise errors.method_not_allowed()
        _, vci = self.server.objects.must_get(rtype, info.namespace, info.name)
        key = await self.ensure_vci_key(vci)
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
        _, cluster = self.server.objects.must_get(rtype, "", info.name)
        key = await self.ensure_cluster_key(info.name, str(cluster["metadata"].get("uid") or ""))
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
