"""Delegated authentication and authorization for an API server that extends another one.

An extension server (one behind an APIService) asks the main server who a bearer token belongs to
(TokenReview) and whether a user may do something (SubjectAccessReview), caching both answers briefly
as upstream's delegating authenticator and authorizer do, so a burst of requests does not queue behind
reviews. Requests forwarded by the main server's aggregator carry the caller in ``X-Remote-*`` headers
and are handled by request-header authentication instead (see :mod:`vplane.support.requestheader`).
"""

from __future__ import annotations

import base64
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from vplane.apiserver.authz import Attributes
from vplane.apiserver.context import UserInfo

ALLOWED_TTL_SECONDS = 10.0
DENIED_TTL_SECONDS = 10.0
TOKEN_TTL_SECONDS = 10.0


@dataclass(frozen=True)
class Kubeconfig:
    server: str
    token: str
    ca_pem: bytes

    @classmethod
    def load(cls, path: Path, context: str | None = None) -> Kubeconfig:
        doc: dict[str, Any] = yaml.safe_load(path.read_text())
        ctx_name = context or doc.get("current-context")
        ctx = next(c["context"] for c in doc["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == ctx["cluster"])
        user = next(u["user"] for u in doc["users"] if u["name"] == ctx["user"])
        return cls(
            cluster["server"], user.get("token", ""), base64.b64decode(cluster["certificate-authority-data"])
        )


class Delegate:
    def __init__(self, kubeconfig: Kubeconfig, clock: Any = time.monotonic) -> None:
        self.kubeconfig = kubeconfig
        self.clock = clock
        self._session: aiohttp.ClientSession | None = None
        self._tokens: dict[str, tuple[UserInfo | None, float]] = {}
        self._decisions: dict[tuple[Any, ...], tuple[bool, float]] = {}

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            ctx = ssl.create_default_context(cadata=self.kubeconfig.ca_pem.decode())
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=ctx),
                headers={
                    "Authorization": f"Bearer {self.kubeconfig.token}",
                    "Content-Type": "application/json",
                },
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        async with self._client().post(
            self.kubeconfig.server + path, json=body, timeout=aiohttp.ClientTimeout(total=10)
        ) as resp:
            doc: dict[str, Any] = await resp.json(content_type=None)
            if resp.status // 100 != 2:
                raise RuntimeError(f"{path}: {resp.status} {doc.get('message', '')}")
            return doc

    async def authenticate_token(self, token: str) -> UserInfo | None:
        now = self.clock()
        hit = self._tokens.get(token)
        if hit is not None and hit[1] > now:
            return hit[0]
        review = await self._post(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}},
        )
        status = review.get("status") or {}
        user: UserInfo | None = None
        if status.get("authenticated"):
            info = status.get("user") or {}
            user = UserInfo(
                info.get("username", ""),
                info.get("uid", ""),
                tuple(info.get("groups") or ()),
                {k: tuple(v) for k, v in (info.get("extra") or {}).items()},
            )
        self._tokens[token] = (user, now + TOKEN_TTL_SECONDS)
        return user

    async def authorize(self, attrs: Attributes) -> bool:
        """The delegate's answer to a SubjectAccessReview for these attributes (cached briefly)."""
        user = attrs.user
        key = (
            user.name,
            user.uid,
            user.groups,
            tuple(sorted(user.extra.items())),
            attrs.verb,
            attrs.resource_request,
            attrs.namespace,
            attrs.group,
            attrs.version,
            attrs.resource,
            attrs.subresource,
            attrs.name,
            attrs.path,
        )
        now = self.clock()
        hit = self._decisions.get(key)
        if hit is not None and hit[1] > now:
            return hit[0]
        spec: dict[str, Any] = {"user": user.name, "groups": list(user.groups)}
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra.items()}
        if attrs.resource_request:
            spec["resourceAttributes"] = {
                "namespace": attrs.namespace,
                "verb": attrs.verb,
                "group": attrs.group,
                "version": attrs.version,
                "resource": attrs.resource,
                "subresource": attrs.subresource,
                "name": attrs.name,
            }
        else:
            spec["nonResourceAttributes"] = {"path": attrs.path, "verb": attrs.verb}
        review = await self._post(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec},
        )
        allowed = bool((review.get("status") or {}).get("allowed"))
        self._decisions[key] = (allowed, now + (ALLOWED_TTL_SECONDS if allowed else DENIED_TTL_SECONDS))
        return allowed
