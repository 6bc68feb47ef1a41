"""Platform access keys: what a key is, whether it still works, and whose identity it carries.

Keys are ``AccessKey`` objects in ``management.loft.sh/v1``. A user key authenticates as its user; a
tenant-cluster key as ``loft:vcluster:<project-namespace>:<name>``; an agent key as
``loft:cluster:<name>``. A key stops working when it is deleted, disabled or past its TTL. The checks
here are pure (an injectable clock) so the mesh coordinator, the API's token authenticator and the
``accesskey`` subresources agree on one answer.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vplane.kube.objects import Obj

GROUP = "management.loft.sh"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"

TYPE_USER = "User"
TYPE_VCLUSTER = "VirtualCluster"
TYPE_AGENT = "Agent"

ROLE_VCLUSTER = "vcluster"
ROLE_AGENT = "agent"
ROLE_NETWORK_PEER = "network-peer"

NO_KEY = "no auth key provided"
"""The coordinator's answer to a registration without a key (connected-cluster runbook)."""

PROJECT_NAMESPACE_PREFIX = "p-"
ADMINS_GROUP = "loft:admins"
USERS_GROUP = "loft:users"
VCLUSTERS_GROUP = "loft:vclusters"
CLUSTERS_GROUP = "loft:clusters"


def project_namespace(project: str, prefix: str = PROJECT_NAMESPACE_PREFIX) -> str:
    return f"{prefix}{project}"


def vcluster_subject(project_namespace_name: str, name: str) -> str:
    """The identity a tenant cluster acts as toward its peers: ``loft:vcluster:<project-namespace>:<name>``."""
    return f"loft:vcluster:{project_namespace_name}:{name}"


def agent_subject(cluster: str) -> str:
    return f"loft:cluster:{cluster}"


def new_key() -> str:
    return secrets.token_urlsafe(48)


@dataclass(frozen=True)
class Identity:
    user: str
    groups: tuple[str, ...]
    key_name: str
    key_type: str
    roles: tuple[str, ...]

    def has_role(self, role: str) -> bool:
        """Scope check; ``agent`` and ``vcluster`` include ``network-peer`` (upstream ContainsRole)."""
        if role in self.roles:
            return True
        return role == ROLE_NETWORK_PEER and bool({ROLE_AGENT, ROLE_VCLUSTER} & set(self.roles))


class KeyRejected(Exception):
    """A key that exists but must not be used; the message says why (disabled, expired)."""


def roles_of(key: Obj) -> tuple[str, ...]:
    scope = (key.get("spec") or {}).get("scope") or {}
    return tuple(
        str(r.get("role", "")) for r in scope.get("roles") or [] if isinstance(r, dict) and r.get("role")
    )


def check(key: Obj, now: float, parse_time: Callable[[str], float | None]) -> None:
    """Raise :class:`KeyRejected` when ``key`` is disabled or expired."""
    spec = key.get("spec") or {}
    if spec.get("disabled"):
        raise KeyRejected("disabled")
    ttl = spec.get("ttl")
    if isinstance(ttl, int) and ttl > 0:
        created = parse_time(str((key.get("metadata") or {}).get("creationTimestamp", "")))
        if created is not None and now >= created + ttl:
            raise KeyRejected("expired")


def identity_of(key: Obj, user_groups: Callable[[str], list[str]]) -> Identity:
    spec = key.get("spec") or {}
    key_type = str(spec.get("type") or TYPE_USER)
    name = str((key.get("metadata") or {}).get("name", ""))
    groups = [str(g) for g in spec.get("groups") or []]
    if key_type == TYPE_USER:
        user = str(spec.get("user", ""))
        groups = [*user_groups(user), *groups, USERS_GROUP]
    else:
        user = str(spec.get("subject", ""))
        groups.append(VCLUSTERS_GROUP if key_type == TYPE_VCLUSTER else CLUSTERS_GROUP)
    return Identity(user, tuple(dict.fromkeys(groups)), name, key_type, roles_of(key))


def key_object(
    name: str,
    key_type: str,
    *,
    subject: str = "",
    user: str = "",
    roles: tuple[str, ...] = (),
    labels: dict[str, str] | None = None,
    ttl: int | None = None,
    display_name: str = "",
) -> Obj:
    spec: dict[str, Any] = {"type": key_type, "key": new_key()}
    if subject:
        spec["subject"] = subject
    if user:
        spec["user"] = user
    if roles:
        spec["scope"] = {"roles": [{"role": r} for r in roles]}
    if ttl:
        spec["ttl"] = ttl
    if display_name:
        spec["displayName"] = display_name
    return {
        "apiVersion": API_VERSION,
        "kind": "AccessKey",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }
