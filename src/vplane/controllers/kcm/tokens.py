"""The service-account token controller (upstream ``pkg/controller/serviceaccount/tokens_controller.go``,
``--controllers`` name ``serviceaccount-token``): legacy token Secrets.

A Secret of type ``kubernetes.io/service-account-token`` naming an account in its
``kubernetes.io/service-account.name`` annotation gets ``token`` (a legacy JWT, ``support.legacytokens``,
signed with ``service_account_private_key_file``), ``ca.crt`` (the cluster CA) and ``namespace``, and the
account's UID in ``kubernetes.io/service-account.uid``. A Secret whose account does not exist (or exists
under another UID) is deleted, and so are an account's token Secrets when the account is deleted. Secrets
are written with their resourceVersion; a conflict is looked at again with the fresh object.
"""

from __future__ import annotations

import base64
from pathlib import Path

from vplane.controllers.informer import object_key
from vplane.controllers.kcm import pods as podutil
from vplane.controllers.kcm.context import ControllerContext, ManagedController
from vplane.controllers.kcm.resourcequota import SECRETS
from vplane.controllers.kcm.resources import SERVICEACCOUNTS
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj
from vplane.support import legacytokens

TOKEN_TYPE = "kubernetes.io/service-account-token"
ACCOUNT_NAME = "kubernetes.io/service-account.name"
ACCOUNT_UID = "kubernetes.io/service-account.uid"
CONFLICT_RETRY_SECONDS = 0.05


# -- pure decisions ------------------------------------------------------------------------------------------


def account_of(secret: Obj) -> tuple[str, str] | None:
    """(name, uid or "") of the account a token Secret is for, or None for other Secrets."""
    if secret.get("type") != TOKEN_TYPE:
        return None
    notes = podutil.annotations_of(secret)
    name = notes.get(ACCOUNT_NAME)
    return (str(name), str(notes.get(ACCOUNT_UID) or "")) if name else None


def references(secret: Obj, account: Obj) -> bool:
    """``IsServiceAccountToken``: the Secret names the account, and its UID if it records one."""
    ref = account_of(secret)
    if ref is None or podutil.namespace_of(secret) != podutil.namespace_of(account):
        return False
    name, uid = ref
    return name == podutil.name_of(account) and (not uid or uid == podutil.uid_of(account))


def _data(secret: Obj, key: str) -> bytes:
    raw = (secret.get("data") or {}).get(key)
    try:
        return base64.b64decode(raw) if isinstance(raw, str) else b""
    except ValueError:
        return b""


def missing(secret: Obj, root_ca: bytes) -> list[str]:
    """What the Secret still lacks: ``ca.crt`` (or an outdated one), ``namespace``, ``token``."""
    lacks = []
    if root_ca and _data(secret, "ca.crt") != root_ca:
        lacks.append("ca.crt")
    if not _data(secret, "namespace"):
        lacks.append("namespace")
    if not _data(secret, "token"):
        lacks.append("token")
    return lacks


def filled(secret: Obj, account: Obj, root_ca: bytes, token: str | None) -> Obj:
    """The Secret with its data and annotations completed (``token`` only when it had none)."""
    namespace = podutil.namespace_of(secret)
    data = dict(secret.get("data") or {})
    if root_ca:
        data["ca.crt"] = base64.b64encode(root_ca).decode()
    if not _data(secret, "namespace"):
        data["namespace"] = base64.b64encode(namespace.encode()).decode()
    if token is not None and not _data(secret, "token"):
        data["token"] = base64.b64encode(token.encode()).decode()
    meta = dict(podutil.meta(secret))
    meta["annotations"] = {
        **podutil.annotations_of(secret),
        ACCOUNT_NAME: podutil.name_of(account),
        ACCOUNT_UID: podutil.uid_of(account),
    }
    return {**secret, "metadata": meta, "data": data}


# -- the controller ------------------------------------------------------------------------------------------


class TokensController(ManagedController):
    name = "serviceaccount-token"
    event_source = "serviceaccount-token-controller"

    def __init__(self, ctx: ControllerContext) -> None:
        key_file = ctx.settings.service_account_private_key_file
        if not key_file:
            raise ValueError("the token controller needs service_account_private_key_file")
        self.key = legacytokens.load_signing_key(Path(key_file).read_bytes())
        self.root_ca = ctx.root_ca or b""
        informers = ctx.informers
        self.secrets = informers.informer(SECRETS, field_selector={"type": TOKEN_TYPE})
        self.accounts = informers.informer(SERVICEACCOUNTS)
        super().__init__(
            ctx, self.secrets, [self.accounts], ctx.settings.concurrent_serviceaccount_token_syncs
        )
        self.accounts.add_handlers(on_add=self._account_changed, on_delete=self._account_changed)

    def _account_changed(self, account: Obj) -> None:
        """A new account may be what a waiting Secret names; a deleted one takes its Secrets along."""
        namespace = podutil.namespace_of(account)
        for secret in self.secrets.objects():
            ref = account_of(secret)
            if (
                ref is not None
                and podutil.namespace_of(secret) == namespace
                and ref[0] == podutil.name_of(account)
            ):
                self.enqueue(object_key(secret))

    async def _account(self, namespace: str, name: str, uid: str) -> Obj | None:
        """``getServiceAccount`` with a live read on a cache miss (the cache may not have a new account)."""
        account = self.accounts.get(f"{namespace}/{name}")
        if account is None:
            try:
                account = await self.client.get(SERVICEACCOUNTS, name, namespace=namespace)
            except StatusError as exc:
                if exc.code != 404:
                    raise
                return None
        if uid and podutil.uid_of(account) != uid:
            return None
        return account

    async def reconcile(self, key: str) -> float | None:
        secret = self.secrets.get(key)
        if secret is None or podutil.is_deleting(secret):
            return None
        ref = account_of(secret)
        if ref is None:
            return None
        namespace = podutil.namespace_of(secret)
        account = await self._account(namespace, *ref)
        if account is None or podutil.is_deleting(account):
            try:
                await self.client.delete(
                    SECRETS,
                    podutil.name_of(secret),
                    namespace=namespace,
                    precondition_uid=podutil.uid_of(secret),
                )
            except StatusError as exc:
                if exc.code not in (404, 409):
                    raise
            return None
        lacks = missing(secret, self.root_ca)
        annotated = podutil.annotations_of(secret).get(ACCOUNT_UID) == podutil.uid_of(account)
        if not lacks and annotated:
            return None
        token = None
        if "token" in lacks:
            claims = legacytokens.claims_for(
                namespace, podutil.name_of(account), podutil.uid_of(account), podutil.name_of(secret)
            )
            token = legacytokens.sign(self.key, claims)
        try:
            await self.client.replace(
                SECRETS, filled(secret, account, self.root_ca, token), namespace=namespace
            )
        except StatusError as exc:
            if exc.code == 404:
                return None
            if exc.code == 409:
                return CONFLICT_RETRY_SECONDS  # the informer brings the newer version
            raise
        return None
