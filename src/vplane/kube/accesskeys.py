"""Platform access keys: what a key is, whether it still works, and whose identity it carries.

Keys are ``AccessKey`` objects in ``management.loft.sh/v1``. A user key authenticates as its user; a
tenant-cluster key as ``loft:vcluster:<project-namespace>:<name>``; an agent key as
``loft:cluster:<name>``. A key stops working when it is deleted, disabled or past its TTL. The checks
here are pure (an injectable clock) so the mesh coordinator, the API's token authenticator and the
``accesskey`` subresources agree on one answer.

A tenant cluster's key belongs to one VirtualClusterInstance, not to a name: it records the instance's
UID and is refused once no live instance has that UID (deleted, or deleted and created again), and its
object name embeds that UID, so two instances never share a key name however their project and
instance names are spelled.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from vplane.kube import validation
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
AUTH_FAILED = "auth failed"
"""The 401 message when a tenant cluster refuses a caller's platform access key (resource-proxy runbook)."""
TENANT_KEY_REFUSED = "the platform refuses this tenant cluster's access key"
"""Why a tenant cluster answers every caller 401 once the platform refuses the key it reviews tokens with
(``vplane.tenant.identity``); ``vplane doctor proxy`` looks for it."""

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


VCI_LABEL = "loft.sh/virtualcluster-instance"
VCI_NAMESPACE_LABEL = "loft.sh/project-namespace"
VCI_ANNOTATION = "vplane.io/virtualclusterinstance"
"""``<namespace>/<name>`` of the instance a tenant-cluster key belongs to (annotations have no length limit,
unlike label values)."""
VCI_UID_ANNOTATION = "vplane.io/virtualclusterinstance-uid"
"""The UID of that instance: the key works only while a live instance has it."""

_NAME_MAX = 253
_UID_SAFE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def vci_key_name(namespace: str, name: str, uid: str) -> str:
    """``vcluster-<namespace>.<name>.<uid>``: a valid object name (DNS-1123 subdomain) that is readable and
    never shared by two instances.

    Namespaces are DNS labels (no dots) and UIDs have no dots, so the first and last dots split the name
    back into its parts: the old ``vcluster-<namespace>-<name>`` made ``p-x``/``y-z`` and ``p-x-y``/``z``
    one key, and the two tenants deleted each other's key forever. Only a name too long to fit is
    shortened (with a digest of the full name), and the UID still keeps it unique.
    """
    safe_uid = uid if _UID_SAFE.fullmatch(uid) else hashlib.sha256(uid.encode()).hexdigest()[:32]
    room = _NAME_MAX - len("vcluster-") - len(namespace) - len(safe_uid) - 2
    if len(name) > room:
        digest = hashlib.sha256(name.encode()).hexdigest()[:16]
        name = name[: max(room - len(digest) - 1, 1)].rstrip(".-") + "-" + digest
    return f"vcluster-{namespace}.{name}.{safe_uid}"


def legacy_vci_key_name(namespace: str, name: str) -> str:
    """The name tenant-cluster keys had before they were bound to an instance (removed when found)."""
    return f"vcluster-{namespace}-{name}"


def cluster_key_name(name: str) -> str:
    return f"cluster-{name}"


CLUSTER_LABEL = "loft.sh/cluster"
CLUSTER_UID_LABEL = "vplane.io/cluster-object-uid"
"""The UID of the Cluster object a cluster's agent key was made for: the key's name is the Cluster's name
only, and a Cluster deleted and made again under that name must not inherit the old agent's key."""


def cluster_key_object(name: str, uid: str) -> Obj:
    """A new agent key for Cluster ``name`` (the object with UID ``uid``)."""
    labels = {CLUSTER_LABEL: name}
    if uid:
        labels[CLUSTER_UID_LABEL] = uid
    return key_object(
        cluster_key_name(name), TYPE_AGENT, subject=agent_subject(name), roles=(ROLE_AGENT,), labels=labels
    )


def cluster_key_made_for(key: Obj) -> str:
    """The UID of the Cluster object an agent key was made for ("" for a key made before keys had it)."""
    return str(((key.get("metadata") or {}).get("labels") or {}).get(CLUSTER_UID_LABEL) or "")


def cluster_key_unlabelled(key: Obj, cluster: str) -> bool:
    """Whether ``key`` is Cluster ``cluster``'s agent key without the UID label (made before keys had it)."""
    subject = (key.get("spec") or {}).get("subject")
    return subject == agent_subject(cluster) and not cluster_key_made_for(key)


def cluster_key_stale(key: Obj, uid: str) -> bool:
    """Whether ``key`` was made for an earlier Cluster of the same name. A key without the UID label (made
    before keys carried it) is adopted: deleting it would cut off the agents connected with it."""
    made_for = cluster_key_made_for(key)
    return bool(uid) and bool(made_for) and made_for != uid


def bound_instance(key: Obj) -> tuple[str, str, str] | None:
    """``(namespace, name, uid)`` of the VirtualClusterInstance a key belongs to, if it is bound to one."""
    annotations = (key.get("metadata") or {}).get("annotations") or {}
    ref = str(annotations.get(VCI_ANNOTATION) or "")
    uid = str(annotations.get(VCI_UID_ANNOTATION) or "")
    namespace, sep, name = ref.partition("/")
    if not (sep and namespace and name and uid):
        return None
    return namespace, name, uid


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


def check(
    key: Obj,
    now: float,
    parse_time: Callable[[str], float | None],
    live_instance: Callable[[str, str], str | None] = lambda namespace, name: None,
) -> None:
    """Raise :class:`KeyRejected` when ``key`` is disabled or expired, or bound to an instance that is gone.

    ``live_instance(namespace, name)`` is the UID of the live (not deleting) VirtualClusterInstance of that
    name, or None. A key bound to an instance that no longer exists reads as ``not found``: to its holder it
    is a deleted key, whether or not the key object was removed yet."""
    bound = bound_instance(key)
    if bound is not None and live_instance(bound[0], bound[1]) != bound[2]:
        raise KeyRejected("not found")
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
    annotations: dict[str, str] | None = None,
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
    metadata: dict[str, Any] = {"name": name, "labels": labels or {}}
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": API_VERSION, "kind": "AccessKey", "metadata": metadata, "spec": spec}


def vci_key_object(namespace: str, name: str, uid: str) -> Obj:
    """A new key for the VirtualClusterInstance ``namespace/name`` with UID ``uid``."""
    labels = {VCI_LABEL: name, VCI_NAMESPACE_LABEL: namespace}
    return key_object(
        vci_key_name(namespace, name, uid),
        TYPE_VCLUSTER,
        subject=vcluster_subject(namespace, name),
        roles=(ROLE_VCLUSTER,),
        # Labels are for selecting keys by eye (kubectl -l); a name too long for a label value goes
        # without, the annotations are what the platform relies on.
        labels={k: v for k, v in labels.items() if not validation.label_value(v)},
        annotations={VCI_ANNOTATION: f"{namespace}/{name}", VCI_UID_ANNOTATION: uid},
    )


Reuse = Literal["reuse", "replace", "conflict"]


def reuse_decision(current: Obj, subject: str, roles: tuple[str, ...], instance_uid: str = "") -> Reuse:
    """What to do with the key already stored under the name a holder's key should have.

    ``conflict`` when it belongs to someone else (another subject or instance): such a key is never
    deleted, the caller refuses instead; ``replace`` when it is the holder's but its scope is malformed
    (upstream regenerates those); ``reuse`` otherwise, disabled or expired keys included, as upstream."""
    spec = current.get("spec") or {}
    if spec.get("subject") != subject:
        return "conflict"
    if instance_uid:
        bound = bound_instance(current)
        if bound is None or bound[2] != instance_uid:
            return "conflict"
    if not set(roles) <= set(roles_of(current)):
        return "replace"
    return "reuse"


def stale_vci_keys(keys: Iterable[Obj], namespace: str, name: str, live_uid: str | None) -> list[str]:
    """Names of keys that belonged to an earlier (or the deleted) instance ``namespace/name``: bound to it
    with another UID than ``live_uid``, or the unbound key of the old naming with exactly its subject. A
    key of any other subject is never among them."""
    subject = vcluster_subject(namespace, name)
    legacy = legacy_vci_key_name(namespace, name)
    out: list[str] = []
    for key in keys:
        key_name = str((key.get("metadata") or {}).get("name", ""))
        if (key.get("spec") or {}).get("subject") != subject:
            continue
        bound = bound_instance(key)
        if bound is None:
            if key_name == legacy:
                out.append(key_name)
        elif bound[:2] == (namespace, name) and bound[2] != live_uid:
            out.append(key_name)
    return out
