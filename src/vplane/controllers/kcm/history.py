"""ControllerRevisions: the template history of StatefulSets and DaemonSets (upstream
``pkg/controller/history`` and the revision halves of the two controllers).

A revision's ``data`` is a strategic merge patch that puts a template back:
``{"spec":{"template":{...,"$patch":"replace"}}}`` — what ``kubectl rollout undo`` sends and ``kubectl
rollout history --revision`` shows. Upstream compares and hashes the patch as the bytes Go's
``json.Marshal`` writes for a map (sorted keys, no spaces, ``<>&`` escaped); :func:`go_json` writes the
same bytes, so a revision written by either controller is recognised by the other.

Everything here is pure except :func:`create_revision` and :func:`set_revision_number`, thin writes with
upstream's collision and conflict handling.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Iterable, Sequence
from typing import Any

from vplane.controllers.client import KubeAPI, Resource
from vplane.controllers.kcm import pods as podutil
from vplane.controllers.kcm.deploymentutil import safe_encode
from vplane.controllers.kcm.timefmt import parse_time
from vplane.kube import openapi
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj
from vplane.kube.patch import apply_strategic_merge_patch
from vplane.kube.schema_meta import SchemaNode

CONTROLLERREVISIONS = Resource("apps/v1", "ControllerRevision", "controllerrevisions", namespaced=True)

HASH_LABEL = "controller.kubernetes.io/hash"
"""``ControllerRevisionHashLabel``: the hash of a StatefulSet revision's data."""
MAX_PREFIX = 223
"""A revision name is ``<prefix>-<hash>``; the prefix is cut so the name stays within 253 characters."""
_MAX_INT32 = 2**31 - 1


# -- bytes as Go writes them ---------------------------------------------------------------------------


def go_json(value: Any) -> bytes:
    """``json.Marshal`` of decoded JSON: keys sorted by their UTF-8 bytes (code point order is the same),
    compact, HTML-sensitive characters and the two JavaScript line separators escaped."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escaped)
    return text.encode()


def fnv32(data: bytes, value: int = 0x811C9DC5) -> int:
    """FNV-1 (multiply, then xor), 32 bits: Go's ``fnv.New32`` that ``HashControllerRevision`` uses."""
    for byte in data:
        value = ((value * 0x01000193) & 0xFFFFFFFF) ^ byte
    return value


def hash_data(data: bytes, probe: int | None) -> str:
    """``HashControllerRevision``: FNV-1 of the data, then of the collision count in decimal, safe-encoded."""
    value = fnv32(data)
    if probe is not None:
        value = fnv32(str(probe).encode(), value)
    return safe_encode(str(value))


def revision_name(prefix: str, hash_: str) -> str:
    return f"{prefix[:MAX_PREFIX]}-{hash_}"


# -- reading revisions ------------------------------------------------------------------------------------


def data_of(revision: Obj) -> Any:
    return revision.get("data")


def data_bytes(revision: Obj) -> bytes:
    """The revision's data as upstream holds it (``Data.Raw``)."""
    data = data_of(revision)
    return go_json(data) if data is not None else b""


def number(revision: Obj) -> int:
    value = revision.get("revision")
    return int(value) if isinstance(value, int) else 0


def sort_revisions(revisions: Iterable[Obj]) -> list[Obj]:
    """``SortControllerRevisions``: by revision, then creation time, then name (a stable sort)."""

    def key(rev: Obj) -> tuple[int, float, str]:
        created = parse_time(podutil.meta(rev).get("creationTimestamp")) or 0.0
        return number(rev), created, podutil.name_of(rev)

    return sorted(revisions, key=key)


def _label_hash(revision: Obj) -> int | None:
    """The hash label read as Go's ``ParseInt(hash, 10, 32)``: only an all-digit hash that fits counts."""
    text = podutil.labels_of(revision).get(HASH_LABEL)
    if text is None:
        return None
    try:
        value = int(text, 10)
    except ValueError:
        return None
    if not text.lstrip("+-").isdigit() or not -(2**31) <= value <= _MAX_INT32:
        return None
    return value


def equal_revision(lhs: Obj | None, rhs: Obj | None) -> bool:
    """``EqualRevision``: differing parsable hash labels mean different; otherwise the data bytes decide."""
    if lhs is None or rhs is None:
        return lhs is rhs
    left, right = _label_hash(lhs), _label_hash(rhs)
    if left is not None and right is not None and left != right:
        return False
    return data_bytes(lhs) == data_bytes(rhs)


def find_equal(revisions: Sequence[Obj], needle: Obj) -> list[Obj]:
    return [rev for rev in revisions if equal_revision(rev, needle)]


def next_number(sorted_revisions: Sequence[Obj]) -> int:
    """One more than the highest revision (1 for none); ``sorted_revisions`` is sorted."""
    return number(sorted_revisions[-1]) + 1 if sorted_revisions else 1


def template_patch(owner: Obj) -> Obj:
    """``getPatch``: the owner's pod template as a patch that replaces ``spec.template`` wholesale."""
    template = copy.deepcopy(podutil.spec(owner).get("template") or {})
    template["$patch"] = "replace"
    return {"spec": {"template": template}}


def owned_or_orphaned(revisions: Iterable[Obj], owner: Obj) -> list[Obj]:
    """``ListControllerRevisions`` after the selector: revisions with no controller or this owner."""
    uid = podutil.uid_of(owner)
    out = []
    for rev in revisions:
        ref = podutil.controller_ref(rev)
        if ref is None or ref.get("uid") == uid:
            out.append(rev)
    return out


@functools.cache
def _schema(group: str, version: str, kind: str) -> SchemaNode | None:
    builtin = openapi.load_builtin()
    definition = builtin.definition_for(group, version, kind)
    return SchemaNode.from_component(definition, builtin.schemas) if definition else None


def apply_revision(owner: Obj, revision: Obj, resource: Resource) -> Obj:
    """``ApplyRevision``: a copy of ``owner`` with the revision's patch applied as a strategic merge patch
    (upstream applies it to the set's own encoding; a patch that does not apply leaves the owner as is)."""
    data = data_of(revision)
    if not isinstance(data, dict):
        return copy.deepcopy(owner)
    schema = _schema(resource.group, resource.version, resource.kind)
    try:
        return apply_strategic_merge_patch(owner, data, schema)
    except StatusError:
        return copy.deepcopy(owner)


# -- writes -----------------------------------------------------------------------------------------------


async def create_revision(
    client: KubeAPI, parent: Obj, revision: Obj, collision_count: int
) -> tuple[Obj, int]:
    """``CreateControllerRevision``: create under ``<parent>-<hash>``; an existing revision with the same
    data is the one wanted, another one is a hash collision: count it and try the next name. Returns the
    revision and the collision count reached."""
    namespace = podutil.namespace_of(parent)
    raw = data_bytes(revision)
    while True:
        hash_ = hash_data(raw, collision_count)
        body = copy.deepcopy(revision)
        body["metadata"]["name"] = revision_name(podutil.name_of(parent), hash_)
        try:
            created = await client.create(CONTROLLERREVISIONS, body, namespace=namespace)
        except StatusError as exc:
            if exc.code != 409 or exc.reason != "AlreadyExists":
                raise
            existing = await client.get(CONTROLLERREVISIONS, body["metadata"]["name"], namespace=namespace)
            if data_bytes(existing) == raw:
                return _typed(existing), collision_count
            collision_count += 1
            continue
        return _typed(created), collision_count


async def set_revision_number(client: KubeAPI, revision: Obj, new_number: int, attempts: int = 5) -> Obj:
    """``UpdateControllerRevision``: raise an equal older revision to the newest number (a rollback),
    retrying on conflicts with a fresh read."""
    current = copy.deepcopy(revision)
    namespace = podutil.namespace_of(revision)
    for attempt in range(attempts):
        if number(current) == new_number:
            return current
        current["revision"] = new_number
        try:
            return _typed(await client.replace(CONTROLLERREVISIONS, current, namespace=namespace))
        except StatusError as exc:
            if exc.code != 409 or attempt == attempts - 1:
                raise
            current = _typed(
                await client.get(CONTROLLERREVISIONS, podutil.name_of(revision), namespace=namespace)
            )
    return current


def _typed(obj: Obj) -> Obj:
    obj.setdefault("apiVersion", CONTROLLERREVISIONS.api_version)
    obj.setdefault("kind", CONTROLLERREVISIONS.kind)
    return obj
