"""Field ownership (``metadata.managedFields``) and server-side apply.

This is upstream's field manager in miniature: ``sigs.k8s.io/structured-merge-diff`` (``fieldpath`` sets,
``typed`` merge/compare/remove, ``merge.Updater``) plus the wrappers in apimachinery
``pkg/util/managedfields/internal`` (manager identifiers, stripped metadata fields, the update-manager
cap, timestamps, kubectl's hand-over from client-side apply). List and map semantics come from the kind's OpenAPI schema
(:meth:`SchemaNode.list_relationship`); without a schema, maps are granular and lists atomic, like
upstream's "deduced" type.

A field set is a ``frozenset`` of paths; a path is a tuple of path elements ``(kind, text)`` where kind is
``f`` (field name), ``k`` (keyed list item, text is the compact JSON of its key fields), ``v`` (set item,
text is its JSON) or ``i`` (index). That is the FieldsV1 spelling (``f:data``, ``k:{"name":"c"}``), so
encoding is a tree walk.

Deviations from upstream (kept small on purpose):

* no version conversion: every manager's set is compared at the request's version;
* ``null`` in an applied configuration means "not specified", and a map or list that pruning empties is
  dropped instead of left as ``null`` (typed decoding, or structural pruning, does the same upstream);
* the applied configuration is merged again after pruning, so an empty list it sets survives;
* on create of a built-in kind, every struct-typed field counts as pre-existing (upstream's empty typed
  object has non-pointer structs only), so none gets a ``.`` entry of its own;
* malformed list items (missing keys, duplicates in an applied configuration) are 400 where upstream
  answers 500.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from typing import Any, Final

import orjson

from vplane.kube import errors
from vplane.kube.objects import Obj, split_api_version
from vplane.kube.schema_meta import SchemaNode

PathElement = tuple[str, str]
Path = tuple[PathElement, ...]
FieldSet = frozenset[Path]

MAX_UPDATE_MANAGERS: Final = 10
"""``DefaultMaxUpdateManagers``: older Update entries are folded into ``ancient-changes`` beyond this."""

FIELD_MANAGER_MAX_LENGTH: Final = 128
"""``validation.FieldManagerMaxLength`` (bytes)."""

LAST_APPLIED_ANNOTATION: Final = "kubectl.kubernetes.io/last-applied-configuration"
KUBECTL: Final = "kubectl"
"""The manager name ``kubectl apply --server-side`` uses; upstream special-cases it for client-side apply."""
_ANNOTATIONS_SIZE_LIMIT: Final = 256 * 1024
"""``TotalAnnotationSizeLimitB``."""

APPLY: Final = "Apply"
UPDATE: Final = "Update"
_ANCIENT_CHANGES: Final = "ancient-changes"


def field_path(*names: str) -> Path:
    """The path of nested object fields, e.g. ``field_path("metadata", "labels")``."""
    return tuple(("f", name) for name in names)


STRIPPED_FIELDS: Final[FieldSet] = frozenset(
    {
        field_path("apiVersion"),
        field_path("kind"),
        field_path("metadata"),
        field_path("metadata", "name"),
        field_path("metadata", "namespace"),
        field_path("metadata", "creationTimestamp"),
        field_path("metadata", "selfLink"),
        field_path("metadata", "uid"),
        field_path("metadata", "clusterName"),
        field_path("metadata", "generation"),
        field_path("metadata", "managedFields"),
        field_path("metadata", "resourceVersion"),
    }
)
"""Paths nobody owns (``NewStripMetaManager``). Exact paths: ``metadata.labels.x`` stays ownable."""


# -- public API -----------------------------------------------------------------------------------------------


def fields_of(obj: Obj, schema: SchemaNode | None, *, ignored: Collection[Path] = ()) -> FieldSet:
    """The fields ``obj`` sets, as an applier of ``obj`` would own them.

    ``ignored`` lists subtrees another endpoint owns, e.g. ``[field_path("status")]`` for the main
    resource of a kind with a status subresource. System metadata (:data:`STRIPPED_FIELDS`) never counts.
    """
    try:
        found = _to_set(_without_managed_fields(obj), schema, strict=False)
    except _Invalid as e:
        raise errors.bad_request(str(e)) from None
    except RecursionError:
        raise errors.bad_request("the object is nested too deeply") from None
    return _drop_ignored(frozenset(found) - STRIPPED_FIELDS, ignored)


def server_side_apply(
    live: Obj | None,
    applied: Obj,
    *,
    manager: str,
    force: bool,
    schema: SchemaNode | None,
    api_version: str,
    now: str,
    subresource: str = "",
    ignored: Collection[Path] = (),
) -> Obj:
    """Merge ``applied`` into ``live`` (None to create) as ``manager``; return the new object.

    Fields the manager applied last time and omits now are removed unless someone else owns them.
    Changing a field another manager owns is a 409 ``Conflict`` unless ``force``, which takes the field
    over. ``now`` is the RFC 3339 timestamp recorded when the object changes. ``ignored`` is as for
    :func:`fields_of`; the caller still resets those subtrees, as upstream's strategies do.
    """
    try:
        return _apply(live, applied, manager, force, schema, api_version, now, subresource, ignored)
    except RecursionError:
        raise errors.bad_request("the object is nested too deeply") from None


def record_update(
    old: Obj | None,
    new: Obj,
    *,
    manager: str,
    schema: SchemaNode | None,
    api_version: str,
    now: str,
    subresource: str = "",
    ignored: Collection[Path] = (),
    builtin: bool = False,
) -> Obj:
    """``new`` with ``metadata.managedFields`` updated for a create (``old`` None), update or patch.

    Fields this write adds or changes move to ``manager``'s ``Update`` entry; fields it removes leave every
    entry. A client may replace ``managedFields`` itself on the main resource (``[]`` resets it).
    Upstream never fails a write over field tracking, so neither does this: on malformed content the
    previous ``managedFields`` are kept.

    ``builtin`` marks kinds upstream implements as Go structs: their create starts from an empty typed
    object in which struct fields already exist, so those get no ``.`` entry (custom resources do).
    """
    if old is None and not (_meta_of(new).get("managedFields")):
        memo_key = _create_memo_key(new, manager, schema, api_version, subresource, ignored, builtin)
        if memo_key is not None:
            return _record_create_memoized(
                memo_key,
                new,
                manager=manager,
                schema=schema,
                api_version=api_version,
                now=now,
                subresource=subresource,
                ignored=ignored,
                builtin=builtin,
            )
    return _record_update(
        old,
        new,
        manager=manager,
        schema=schema,
        api_version=api_version,
        now=now,
        subresource=subresource,
        ignored=ignored,
        builtin=builtin,
    )


# A create's field set depends only on the object's shape (map keys, list contents, which containers are
# empty), not on scalar values, so objects of one shape (Events, Pods from one template, the same
# ConfigMap layout) share one computed answer. The memo is exact: on a miss the general algorithm runs.
_CREATE_MEMO: dict[tuple[Any, ...], tuple[SchemaNode | None, Any]] = {}
_CREATE_MEMO_MAX = 2048


def _shape_of(value: Any, schema: SchemaNode | None) -> Any:
    """What the field set of ``value`` depends on: map keys, list item identities (as the diff keys them),
    and which containers are empty; never scalar values outside list keys.

    Scalars stand for themselves by their key alone (no call per leaf: this runs for every create).
    Maps start with ``"{"`` and lists with ``"["``, so no two shapes collide.
    """
    if isinstance(value, dict):
        if not value:
            return "{}"
        parts: list[Any] = ["{"]
        for k, v in value.items():
            if isinstance(v, dict | list):
                parts.append((k, _shape_of(v, schema.member(k) if schema is not None else None)))
            else:
                parts.append(k)
        return tuple(parts)
    if isinstance(value, list):
        if not value:
            return "[]"
        kind, keys = _list_kind(schema)
        if kind == "atomic":
            return "L"
        item_schema = _items_of(schema)
        return (
            "[",
            tuple((_item_pe(item, kind, keys, item_schema), _shape_of(item, item_schema)) for item in value),
        )
    return "s"


def _create_memo_key(
    new: Obj,
    manager: str,
    schema: SchemaNode | None,
    api_version: str,
    subresource: str,
    ignored: Collection[Path],
    builtin: bool,
) -> tuple[Any, ...] | None:
    try:
        shape = _shape_of(new, schema)
    except (_Invalid, TypeError, ValueError, RecursionError):
        return None  # malformed lists and the like: the general algorithm reports or tolerates them
    return (shape, manager, id(schema), api_version, subresource, tuple(sorted(ignored)), builtin)


def _record_create_memoized(key: tuple[Any, ...], new: Obj, **kwargs: Any) -> Obj:
    hit = _CREATE_MEMO.get(key)
    if hit is not None and hit[0] is kwargs["schema"]:
        result: Obj = dict(new)
        meta = dict(new["metadata"]) if isinstance(new.get("metadata"), dict) else {}
        result["metadata"] = meta
        entries = hit[1]
        if entries:
            meta["managedFields"] = [
                {**entry, "time": kwargs["now"], "fieldsV1": orjson.loads(orjson.dumps(entry["fieldsV1"]))}
                if "time" in entry
                else orjson.loads(orjson.dumps(entry))
                for entry in entries
            ]
        else:
            meta.pop("managedFields", None)
        return result
    result = _record_update(None, new, **kwargs)
    if len(_CREATE_MEMO) >= _CREATE_MEMO_MAX:
        _CREATE_MEMO.clear()
    entries = _meta_of(result).get("managedFields")
    _CREATE_MEMO[key] = (kwargs["schema"], orjson.loads(orjson.dumps(entries)) if entries else None)
    return result


def _record_update(
    old: Obj | None,
    new: Obj,
    *,
    manager: str,
    schema: SchemaNode | None,
    api_version: str,
    now: str,
    subresource: str = "",
    ignored: Collection[Path] = (),
    builtin: bool = False,
) -> Obj:
    result: Obj = dict(new)  # only metadata.managedFields changes; the rest may be shared
    if isinstance(new.get("metadata"), dict):
        result["metadata"] = dict(new["metadata"])
    old_obj: Obj = old if old is not None else {}
    try:
        managed = _managed_for_update(old_obj, new, ignore_request=bool(subresource))
        diff = _Diff()
        _compare(
            _without_managed_fields(old_obj),
            _without_managed_fields(new),
            schema,
            (),
            diff,
            create=builtin and old is None,
        )
    except (_Invalid, RecursionError):
        _set_raw_managed_fields(result, _meta_of(old_obj).get("managedFields"))
        return result

    changed = _drop_ignored(frozenset(diff.modified | diff.added), ignored)
    removed = _drop_ignored(frozenset(diff.removed), ignored)
    for entry in managed.values():
        entry.fields = entry.fields - changed - removed
    _drop_empty(managed)

    owned = changed - STRIPPED_FIELDS
    if owned:
        me = _Manager(manager or "unknown", UPDATE, api_version, subresource)
        previous = managed.get(me)
        managed[me] = _Entry(owned | previous.fields if previous else owned, api_version, now)
    _cap_update_managers(managed)
    _set_managed_fields(result, managed)
    return result


@functools.lru_cache(maxsize=256)
def manager_from_user_agent(user_agent: str) -> str:
    """``prefixFromUserAgent``: the user agent up to the first ``/``, printable, at most 128 bytes.

    ``kubectl/v1.35.2 (linux/amd64) kubernetes/fdc9d74`` gives ``kubectl``. Remembered: a server sees few
    distinct user agents and asks on every write.
    """
    out: list[str] = []
    size = 0
    for char in user_agent.split("/", 1)[0]:
        if not char.isprintable():
            continue
        width = len(char.encode())
        if size + width > FIELD_MANAGER_MAX_LENGTH:
            break
        out.append(char)
        size += width
    return "".join(out)


def manager_or_user_agent(manager: str, user_agent: str) -> str:
    """The ``fieldManager`` query parameter, else the user-agent prefix (``managerOrUserAgent``)."""
    return manager if manager else manager_from_user_agent(user_agent)


def fields_to_v1(fields: Iterable[Path]) -> dict[str, Any]:
    """Encode a field set as FieldsV1 JSON (keys in structured-merge-diff's order)."""
    return _emit(_trie(fields))


def fields_from_v1(data: Mapping[str, Any]) -> FieldSet:
    """Decode FieldsV1 JSON; raises ``ValueError`` on malformed input."""
    out: set[Path] = set()
    _read_v1(data, (), out)
    return frozenset(out)


def path_string(path: Path) -> str:
    """A path as upstream prints it in conflicts: ``.spec.containers[name="c"].image``."""
    parts: list[str] = []
    for kind, text in path:
        if kind == "f":
            parts.append("." + text)
        elif kind == "k":
            fields = json.loads(text)
            parts.append("[" + ",".join(f"{k}={_value_text(v)}" for k, v in fields.items()) + "]")
        elif kind == "v":
            parts.append("[=" + _value_text(json.loads(text)) + "]")
        else:
            parts.append("[" + text + "]")
    return "".join(parts)


# -- managers -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Manager:
    """Upstream's manager identifier: apiVersion only for Update (appliers keep one entry across versions)."""

    manager: str
    operation: str
    api_version: str
    subresource: str

    def ident(self) -> str:
        """``BuildManagerIdentifier``: the JSON of the entry without fields or time (upstream sorts by it)."""
        parts = []
        if self.manager:
            parts.append('"manager":' + _go_str(self.manager))
        parts.append('"operation":' + _go_str(self.operation))
        if self.api_version:
            parts.append('"apiVersion":' + _go_str(self.api_version))
        if self.subresource:
            parts.append('"subresource":' + _go_str(self.subresource))
        return "{" + ",".join(parts) + "}"

    def describe(self) -> str:
        """``printManager`` in conflict messages: ``"kubectl" using v1`` for updaters."""
        text = _go_str(self.manager)
        if self.subresource:
            text += f" with subresource {_go_str(self.subresource)}"
        if self.operation == UPDATE:
            text += f" using {self.api_version}"
        return text


@dataclass
class _Entry:
    fields: FieldSet
    api_version: str
    time: str | None


_Managed = dict[_Manager, _Entry]


def _decode_managed(entries: Any) -> _Managed:
    """``DecodeManagedFields``, with its validation."""
    managed: _Managed = {}
    if entries is None:
        return managed
    if not isinstance(entries, list):
        raise ValueError("managedFields must be a list")
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise ValueError(f"managed fields entry {i} is not an object")
        operation = entry.get("operation")
        if operation not in (APPLY, UPDATE):
            raise ValueError("operation must be `Apply` or `Update`")
        api_version = entry.get("apiVersion")
        if not isinstance(api_version, str) or not api_version:
            raise ValueError("apiVersion must not be empty")
        fields_type = entry.get("fieldsType")
        if not fields_type:
            raise ValueError(f"missing fieldsType in managed fields entry {i}")
        if fields_type != "FieldsV1":
            raise ValueError(f"invalid fieldsType {fields_type!r} in managed fields entry {i}")
        name = entry.get("manager") or ""
        subresource = entry.get("subresource") or ""
        if not isinstance(name, str) or not isinstance(subresource, str):
            raise ValueError(f"invalid manager in managed fields entry {i}")
        raw = entry.get("fieldsV1")
        fields = fields_from_v1(raw) if isinstance(raw, Mapping) else frozenset()
        time = entry.get("time")
        key = _Manager(name, operation, "" if operation == APPLY else api_version, subresource)
        managed[key] = _Entry(fields, api_version, time if isinstance(time, str) else None)
    return managed


def _encode_managed(managed: _Managed) -> list[dict[str, Any]]:
    def order(item: tuple[_Manager, _Entry]) -> tuple[str, int, str, str, str]:
        key, entry = item
        return (key.operation, _seconds(entry.time), key.manager, entry.api_version, key.subresource)

    out = []
    items = list(managed.items())
    for key, entry in sorted(items, key=order) if len(items) > 1 else items:
        encoded: dict[str, Any] = {}
        if key.manager:
            encoded["manager"] = key.manager
        encoded["operation"] = key.operation
        encoded["apiVersion"] = entry.api_version
        if entry.time is not None:
            encoded["time"] = entry.time
        encoded["fieldsType"] = "FieldsV1"
        encoded["fieldsV1"] = fields_to_v1(entry.fields)
        if key.subresource:
            encoded["subresource"] = key.subresource
        out.append(encoded)
    return out


@functools.lru_cache(maxsize=1024)
def _seconds(time: str | None) -> int:
    """Entries are ordered by time on every write; the same few timestamps recur, so parse each once."""
    if not time:
        return 0
    try:
        return int(datetime.fromisoformat(time.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return 0


def _managed_for_update(old: Obj, new: Obj, *, ignore_request: bool) -> _Managed:
    """``decodeLiveOrNew``: the request's managedFields win unless absent, broken, or a subresource write."""
    live_entries = _meta_of(old).get("managedFields")
    if not ignore_request:
        requested = _meta_of(new).get("managedFields")
        if isinstance(requested, list) and (requested == [] or requested == [{}]):
            return {}
        try:
            managed = _decode_managed(requested)
        except ValueError:
            managed = {}
        if managed:
            return managed
    try:
        return _decode_managed(live_entries)
    except ValueError:
        return {}


def _drop_empty(managed: _Managed) -> None:
    for key in [k for k, e in managed.items() if not e.fields]:
        del managed[key]


def _cap_update_managers(managed: _Managed) -> None:
    """``capUpdateManagers``: fold the oldest Update entries into per-version ``ancient-changes``."""
    updaters = [k for k in managed if k.operation == UPDATE]
    if len(updaters) <= MAX_UPDATE_MANAGERS:
        return
    updaters.sort(key=lambda k: (_seconds(managed[k].time), k.ident()))
    first_for_version: dict[str, _Manager] = {}
    length = len(updaters)
    for key in updaters:
        if length <= MAX_UPDATE_MANAGERS:
            break
        entry = managed[key]
        version = entry.api_version
        bucket = _Manager(_ANCIENT_CHANGES, UPDATE, version, "")
        if version not in first_for_version:
            first_for_version[version] = key
            continue
        if bucket not in managed:
            managed[bucket] = managed.pop(first_for_version[version])
        managed[bucket] = _Entry(entry.fields | managed[bucket].fields, version, entry.time)
        if key != bucket:
            del managed[key]
        length -= 1


def _set_managed_fields(obj: Obj, managed: _Managed) -> None:
    _set_raw_managed_fields(obj, _encode_managed(managed) if managed else None)


def _set_raw_managed_fields(obj: Obj, entries: Any) -> None:
    meta = obj.get("metadata")
    if entries:
        if not isinstance(meta, dict):
            meta = {}
            obj["metadata"] = meta
        meta["managedFields"] = list(entries) if isinstance(entries, list) else entries
    elif isinstance(meta, dict):
        meta.pop("managedFields", None)


def _conflict_error(conflicts: Mapping[_Manager, FieldSet]) -> errors.StatusError:
    """``NewConflictError``: 409 with one ``FieldManagerConflict`` cause per field.

    errors.py has no factory for this shape: upstream builds it only here (``NewApplyConflict``).
    """
    managers = sorted(conflicts, key=lambda k: k.ident())
    items = [(key, path) for key in managers for path in _iterate(conflicts[key])]
    causes = [
        {
            "reason": "FieldManagerConflict",
            "message": f"conflict with {key.describe()}",
            "field": path_string(path),
        }
        for key, path in items
    ]
    if len(items) == 1:
        key, path = items[0]
        message = f"Apply failed with 1 conflict: conflict with {key.describe()}: {path_string(path)}"
    else:
        lines: list[str] = []
        for key in managers:
            lines.append(f"conflicts with {key.describe()}:")
            lines.extend(f"- {path_string(path)}" for path in _iterate(conflicts[key]))
        message = f"Apply failed with {len(items)} conflicts: " + "\n".join(lines)
    return errors.StatusError(409, "Conflict", message, details={"causes": causes})


# -- apply ----------------------------------------------------------------------------------------------------


def _apply(
    live: Obj | None,
    applied: Any,
    manager: str,
    force: bool,
    schema: SchemaNode | None,
    api_version: str,
    now: str,
    subresource: str,
    ignored: Collection[Path],
) -> Obj:
    if not isinstance(applied, dict):
        raise errors.bad_request("error decoding patch: the applied configuration must be an object")
    meta = applied.get("metadata")
    if isinstance(meta, dict) and meta.get("managedFields") is not None:
        raise errors.bad_request("metadata.managedFields must be nil")
    applied_version = applied.get("apiVersion")
    applied_kind = applied.get("kind")
    if applied_version != api_version or (live is not None and applied_kind != live.get("kind")):
        group, version = split_api_version(applied_version if isinstance(applied_version, str) else "")
        raise errors.bad_request(f"invalid object type: {group}/{version}, Kind={applied_kind or ''}")

    live_obj: Obj = live if live is not None else {}
    try:
        managed = _decode_managed(_meta_of(live_obj).get("managedFields"))
    except ValueError as e:
        raise errors.internal_error(f"failed to decode managed fields: {e}") from None
    before = _copy(_without_managed_fields(live_obj))
    config = _drop_nulls(applied)

    try:
        applied_set = _drop_ignored(frozenset(_to_set(config, schema, strict=True)), ignored)
    except _Invalid as e:
        raise errors.bad_request(f"failed to create typed patch object ({_describe(config)}): {e}") from None
    try:
        merged = _merge(before, config, schema, ())
        me = _Manager(manager or "unknown", APPLY, "", subresource)
        last = managed.get(me)
        managed[me] = _Entry(applied_set, api_version, last.time if last else None)
        if last is not None and last.fields:
            # merging the configuration back restores empty lists it sets, which nobody can own and
            # prune may have taken with their parent; upstream's typed decoding hides that difference
            merged = _merge(_prune(merged, managed, last.fields, schema), config, schema, ())
        diff = _Diff()
        _compare(before, merged, schema, (), diff, create=False)
    except _Invalid as e:
        raise errors.bad_request(
            f"failed to merge the applied configuration ({_describe(config)}): {e}"
        ) from None

    changed = _drop_ignored(frozenset(diff.modified | diff.added), ignored)
    removed = _drop_ignored(frozenset(diff.removed), ignored)
    conflicts = {key: entry.fields & changed for key, entry in managed.items() if key != me}
    conflicts = {key: fields for key, fields in conflicts.items() if fields}
    if conflicts and not force:
        if manager == KUBECTL:
            conflicts = _outside_last_applied(conflicts, live_obj, schema, api_version)
        if conflicts:
            raise _conflict_error(conflicts)
        # only fields kubectl itself last applied client-side: take them over (lastAppliedManager)
        conflicts = {key: entry.fields & changed for key, entry in managed.items() if key != me}
    for key, entry in managed.items():
        if key != me:
            entry.fields = entry.fields - conflicts.get(key, frozenset()) - removed
    managed[me].fields = managed[me].fields - STRIPPED_FIELDS
    _drop_empty(managed)

    if _json_equal(before, merged):
        result: Obj = before  # upstream keeps the live object (and the applier's old timestamp)
    else:
        result = _copy(merged)
        if me in managed:
            managed[me].time = now
    if manager == KUBECTL:
        _update_last_applied(result, applied)
    _set_managed_fields(result, managed)
    return result


def _outside_last_applied(
    conflicts: dict[_Manager, FieldSet], live: Obj, schema: SchemaNode | None, api_version: str
) -> dict[_Manager, FieldSet]:
    """``lastAppliedManager``: conflicts kubectl may ignore when moving from client-side apply.

    Fields the live object still holds exactly as the ``last-applied-configuration`` annotation says
    were kubectl's own; only conflicts outside them remain.
    """
    annotations = _meta_of(live).get("annotations")
    text = annotations.get(LAST_APPLIED_ANNOTATION) if isinstance(annotations, Mapping) else None
    if not isinstance(text, str) or not text:
        return conflicts
    try:
        last = json.loads(text)
    except ValueError:
        return conflicts
    if not isinstance(last, dict) or last.get("apiVersion") != api_version:
        return conflicts
    try:
        allowed = _to_set(last, schema, strict=True)
        diff = _Diff()
        _compare(last, _without_managed_fields(live), schema, (), diff, create=False)
    except _Invalid:
        return conflicts
    allowed -= diff.modified | diff.added | diff.removed
    remaining = {key: fields - allowed for key, fields in conflicts.items()}
    return {key: fields for key, fields in remaining.items() if fields}


def _update_last_applied(obj: Obj, applied: Obj) -> None:
    """``lastAppliedUpdater``: keep an existing annotation in step so client-side apply still works."""
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if not isinstance(annotations, dict) or not annotations.get(LAST_APPLIED_ANNOTATION):
        return
    config = _copy(applied)
    config_annotations = _meta_of(config).get("annotations")
    if isinstance(config_annotations, dict):
        config_annotations.pop(LAST_APPLIED_ANNOTATION, None)
    annotations = dict(annotations)
    annotations[LAST_APPLIED_ANNOTATION] = _go_json(config) + "\n"  # json.Encoder adds the newline
    if sum(len(k) + len(v) for k, v in annotations.items() if isinstance(v, str)) > _ANNOTATIONS_SIZE_LIMIT:
        del annotations[LAST_APPLIED_ANNOTATION]
    assert isinstance(meta, dict)
    meta["annotations"] = annotations


def _describe(obj: Obj) -> str:
    """``objectGVKNN``: ``namespace/name; group/version, Kind=kind``."""
    meta = _meta_of(obj)
    version = obj.get("apiVersion")
    group, ver = split_api_version(version if isinstance(version, str) else "")
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}; {group}/{ver}, Kind={obj.get('kind', '')}"


def _prune(merged: Any, managed: _Managed, last: FieldSet, schema: SchemaNode | None) -> Any:
    """``Updater.prune``: drop what the applier applied last time, does not apply now, nobody else owns.

    Written as upstream's three steps (remove the last applied set, add back owned items, add back
    dangling items) because the interplay of struct fields and map keys is subtle.
    """
    last_named = _ensure_named(last, schema)
    merged_named = _ensure_named(_to_set(merged, schema, strict=False), schema)
    pruned = _remove(merged, last_named, schema, drop_emptied=False)
    pruned_named = _ensure_named(_to_set(pruned, schema, strict=False), schema)
    owned: set[Path] = set()
    for entry in managed.values():
        owned |= entry.fields
    owned_named = _ensure_named(owned, schema)
    pruned = _remove(merged, merged_named - (pruned_named | owned_named), schema, drop_emptied=False)
    pruned_named = _ensure_named(_to_set(pruned, schema, strict=False), schema)
    return _remove(merged, (merged_named - pruned_named) & last_named, schema, drop_emptied=True)


# -- typed walks ----------------------------------------------------------------------------------------------


class _Invalid(Exception):
    """A value that does not fit its schema (upstream's ValidationErrors)."""


class _Absent:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<absent>"


_ABSENT: Final = _Absent()


class _Diff:
    __slots__ = ("added", "modified", "removed")

    def __init__(self) -> None:
        self.added: set[Path] = set()
        self.modified: set[Path] = set()
        self.removed: set[Path] = set()


def _member(schema: SchemaNode | None, key: str) -> SchemaNode | None:
    return schema.member(key) if schema is not None else None


def _is_field(schema: SchemaNode | None, key: str) -> bool:
    return schema is not None and schema.has_field(key)


def _items_of(schema: SchemaNode | None) -> SchemaNode | None:
    return schema.items() if schema is not None else None


def _list_kind(schema: SchemaNode | None) -> tuple[str, tuple[str, ...]]:
    return schema.list_relationship() if schema is not None else ("atomic", ())


def _map_atomic(schema: SchemaNode | None) -> bool:
    return schema is not None and schema.map_atomic


def _item_pe(item: Any, kind: str, keys: tuple[str, ...], item_schema: SchemaNode | None) -> PathElement:
    """``listItemToPathElement``: the key fields (with schema defaults) or the value of a set item."""
    if kind == "map":
        if item is None:
            raise _Invalid("associative list with keys may not have a null element")
        if not isinstance(item, dict):
            raise _Invalid("associative list with keys may not have non-map elements")
        fields: list[tuple[str, Any]] = []
        for key in keys:
            if key in item:
                fields.append((key, item[key]))
                continue
            sub = item_schema.child(key) if item_schema is not None else None
            if sub is not None and sub.has_default:
                fields.append((key, sub.default))
        if not fields:
            quoted = " ".join(_go_str(k) for k in keys)
            raise _Invalid(
                f"associative list with keys has an element that omits all key fields [{quoted}] "
                "(and doesn't have default values for any key fields)"
            )
        fields.sort(key=lambda f: f[0])
        return ("k", "{" + ",".join(f"{_go_str(k)}:{_go_json(v)}" for k, v in fields) + "}")
    if isinstance(item, dict):
        raise _Invalid("associative list without keys has an element that's a map type")
    if isinstance(item, list):
        raise _Invalid("not supported: associative list with lists as elements")
    if item is None:
        raise _Invalid("associative list without keys has an element that's an explicit null")
    return ("v", _go_json(item))


def _item_pes(items: list[Any], schema: SchemaNode | None, path: Path) -> list[PathElement]:
    kind, keys = _list_kind(schema)
    item_schema = _items_of(schema)
    pes = []
    for i, item in enumerate(items):
        try:
            pes.append(_item_pe(item, kind, keys, item_schema))
        except _Invalid as e:
            raise _Invalid(f"{path_string(path)}: element {i}: {e}") from None
    return pes


def _to_set(value: Any, schema: SchemaNode | None, *, strict: bool) -> set[Path]:
    """``TypedValue.ToFieldSet``; ``strict`` rejects duplicate list keys as an applied object must."""
    out: set[Path] = set()
    _walk_set(value, schema, (), out, strict)
    return out


def _walk_set(value: Any, schema: SchemaNode | None, path: Path, out: set[Path], strict: bool) -> None:
    if isinstance(value, dict):
        if _map_atomic(schema):
            if path:
                out.add(path)
            return
        for key, child in value.items():
            child_path = path + (("f", key),)
            _walk_set(child, _member(schema, key), child_path, out, strict)
            # struct fields are implied by their children; map keys and empty values are owned themselves
            if child is None or child == {} or not _is_field(schema, key):
                out.add(child_path)
        return
    if isinstance(value, list):
        if _list_kind(schema)[0] == "atomic":
            if path:
                out.add(path)
            return
        pes = _item_pes(value, schema, path)
        counts: dict[PathElement, int] = {}
        for pe in pes:
            counts[pe] = counts.get(pe, 0) + 1
        duplicates = {pe for pe, n in counts.items() if n > 1}
        if strict and duplicates:
            first = next(pe for pe in pes if pe in duplicates)
            raise _Invalid(f"{path_string(path)}: duplicate entries for key {path_string((first,))}")
        item_schema = _items_of(schema)
        for pe in duplicates:
            out.add(path + (pe,))
        for item, pe in zip(value, pes):
            if pe in duplicates:
                continue
            _walk_set(item, item_schema, path + (pe,), out, strict)
            out.add(path + (pe,))
        return
    if path:
        out.add(path)


def merge_applied(live: Any, applied: Any, schema: SchemaNode | None) -> Any:
    """``TypedValue.Merge`` of ``applied`` over ``live`` on its own (a MutatingAdmissionPolicy's
    ApplyConfiguration); ``ValueError`` for a list whose applied items repeat a key."""
    try:
        return _merge(live, applied, schema, ())
    except _Invalid as exc:
        raise ValueError(str(exc)) from None


def _merge(lhs: Any, rhs: Any, schema: SchemaNode | None, path: Path) -> Any:
    """``TypedValue.Merge``: the applied configuration (rhs) over the live object (lhs)."""
    if rhs is _ABSENT:
        return lhs
    if lhs is _ABSENT:
        return rhs
    if isinstance(lhs, dict) and isinstance(rhs, dict):
        if _map_atomic(schema) or (not lhs and not rhs):
            return rhs
        out: dict[str, Any] = {}
        for key, value in lhs.items():
            out[key] = _merge(value, rhs.get(key, _ABSENT), _member(schema, key), path + (("f", key),))
        for key, value in rhs.items():
            if key not in lhs:
                out[key] = value
        return out
    if isinstance(lhs, list) and isinstance(rhs, list):
        if _list_kind(schema)[0] == "atomic" or (not lhs and not rhs):
            return rhs
        return _merge_list(lhs, rhs, schema, path)
    return rhs


def _merge_list(lhs: list[Any], rhs: list[Any], schema: SchemaNode | None, path: Path) -> list[Any]:
    """``mergingWalker.visitListItems``: keep live order, slotting applied items in after their peers."""
    item_schema = _items_of(schema)
    rhs_pes = _item_pes(rhs, schema, path)
    observed_rhs: dict[PathElement, Any] = {}
    for pe, item in zip(rhs_pes, rhs):
        if pe in observed_rhs:
            raise _Invalid(f"{path_string(path)}: duplicate entries for key {path_string((pe,))}")
        observed_rhs[pe] = item
    lhs_pes = _item_pes(lhs, schema, path)
    observed_lhs: dict[PathElement, Any] = {}
    for pe, item in zip(lhs_pes, lhs):
        observed_lhs[pe] = None if pe in observed_lhs else item  # live duplicates merge as null

    shared = [pe for pe in rhs_pes if pe in observed_lhs]
    next_shared = shared.pop(0) if shared else None
    merged_rhs: set[PathElement] = set()
    out: list[Any] = []
    li = ri = 0
    while li < len(lhs_pes) or ri < len(rhs_pes):
        if li < len(lhs_pes) and ri < len(rhs_pes):
            pe = lhs_pes[li]
            if pe == rhs_pes[ri]:
                merged_rhs.add(pe)
                out.append(_merge(observed_lhs[pe], observed_rhs[pe], item_schema, path + (pe,)))
                li += 1
                ri += 1
                next_shared = shared.pop(0) if shared else None
                continue
            if pe in observed_rhs and next_shared is not None and next_shared != pe:
                li += 1
                continue
        if li < len(lhs_pes):
            pe = lhs_pes[li]
            if pe not in observed_rhs:
                out.append(lhs[li])
                li += 1
                continue
            if pe in merged_rhs:
                li += 1
        if ri < len(rhs_pes):
            pe = rhs_pes[ri]
            merged_rhs.add(pe)
            out.append(_merge(observed_lhs.get(pe, _ABSENT), observed_rhs[pe], item_schema, path + (pe,)))
            ri += 1
            if next_shared is not None and next_shared == pe:
                next_shared = shared.pop(0) if shared else None
    return out


def _shape(value: Any) -> str | None:
    if value is _ABSENT:
        return None
    if isinstance(value, dict):
        return "map"
    if isinstance(value, list):
        return "list"
    return "scalar"


def _granular(shape: str | None, schema: SchemaNode | None) -> bool:
    if shape == "map":
        return not _map_atomic(schema)
    if shape == "list":
        return _list_kind(schema)[0] != "atomic"
    return False


def _compare(lhs: Any, rhs: Any, schema: SchemaNode | None, path: Path, diff: _Diff, *, create: bool) -> None:
    """``TypedValue.Compare``: which paths ``rhs`` adds, modifies or removes relative to ``lhs``."""
    l_shape, r_shape = _shape(lhs), _shape(rhs)
    if l_shape is None or r_shape is None or l_shape == r_shape:
        shape = r_shape or l_shape
        empty = (lhs is _ABSENT or not lhs) and (rhs is _ABSENT or not rhs)
        if _granular(shape, schema) and not empty:
            _compare_children(shape, lhs, rhs, schema, path, diff, create)
            if path and lhs is _ABSENT:
                if not (create and shape == "map" and schema is not None and schema.properties):
                    diff.added.add(path)
            elif path and rhs is _ABSENT:
                diff.removed.add(path)
            return
        _compare_leaf(lhs, rhs, path, diff)
        return
    # a map became a scalar or similar: the node changed, and the granular side's children come or go
    _compare_leaf(lhs, rhs, path, diff)
    if _granular(l_shape, schema):
        _compare_children(l_shape, lhs, _ABSENT, schema, path, diff, create)
    if _granular(r_shape, schema):
        _compare_children(r_shape, _ABSENT, rhs, schema, path, diff, create)


def _compare_leaf(lhs: Any, rhs: Any, path: Path, diff: _Diff) -> None:
    if not path:
        return
    if lhs is _ABSENT:
        diff.added.add(path)
    elif rhs is _ABSENT:
        diff.removed.add(path)
    elif not _json_equal(lhs, rhs):
        diff.modified.add(path)


_SYSTEM_KEYS: Final[dict[Path, frozenset[str]]] = {
    (): frozenset({"apiVersion", "kind"}),
    (("f", "metadata"),): frozenset(
        {
            "name",
            "namespace",
            "creationTimestamp",
            "selfLink",
            "uid",
            "clusterName",
            "generation",
            "managedFields",
            "resourceVersion",
        }
    ),
}


def _compare_children(
    shape: str | None, lhs: Any, rhs: Any, schema: SchemaNode | None, path: Path, diff: _Diff, create: bool
) -> None:
    if shape == "map":
        left: dict[str, Any] = lhs if isinstance(lhs, dict) else {}
        right: dict[str, Any] = rhs if isinstance(rhs, dict) else {}
        skip = _SYSTEM_KEYS.get(path, ())
        for key in list(left) + [k for k in right if k not in left]:
            if key in skip:
                continue  # system fields (STRIPPED_FIELDS) are never owned: no need to compare them
            _compare(
                left.get(key, _ABSENT),
                right.get(key, _ABSENT),
                _member(schema, key),
                path + (("f", key),),
                diff,
                create=create,
            )
        return
    left_items: list[Any] = lhs if isinstance(lhs, list) else []
    right_items: list[Any] = rhs if isinstance(rhs, list) else []
    item_schema = _items_of(schema)
    groups: dict[PathElement, tuple[list[Any], list[Any]]] = {}
    for pe, item in zip(_item_pes(left_items, schema, path), left_items):
        groups.setdefault(pe, ([], []))[0].append(item)
    for pe, item in zip(_item_pes(right_items, schema, path), right_items):
        groups.setdefault(pe, ([], []))[1].append(item)
    for pe, (old, new) in groups.items():
        item_path = path + (pe,)
        if len(old) <= 1 and len(new) <= 1:
            _compare(
                old[0] if old else _ABSENT,
                new[0] if new else _ABSENT,
                item_schema,
                item_path,
                diff,
                create=create,
            )
        elif len(old) >= 2 and len(new) >= 2:
            if len(old) != len(new) or not all(_json_equal(a, b) for a, b in zip(old, new)):
                diff.modified.add(item_path)
        elif len(old) >= 2:
            if new:
                _compare(_ABSENT, new[0], item_schema, item_path, diff, create=create)
            diff.removed.add(item_path)
        else:
            if old:
                _compare(old[0], _ABSENT, item_schema, item_path, diff, create=create)
            diff.added.add(item_path)


class _Emptied:
    __slots__ = ()


_EMPTIED: Final = _Emptied()


def _remove(value: Any, paths: Collection[Path], schema: SchemaNode | None, *, drop_emptied: bool) -> Any:
    """``TypedValue.RemoveItems``: drop each member path's subtree.

    A container emptied by the removal becomes ``null`` upstream; the final pass (``drop_emptied``) drops it
    instead, as decoding into a typed object (or structural pruning) would.
    """
    result = _remove_in(value, paths, schema, drop_emptied)
    return {} if result is _EMPTIED else result


def _remove_in(value: Any, paths: Collection[Path], schema: SchemaNode | None, drop_emptied: bool) -> Any:
    if not paths:
        return value
    exact: set[PathElement] = set()
    deeper: dict[PathElement, set[Path]] = {}
    for path in paths:
        if not path:
            continue
        if len(path) == 1:
            exact.add(path[0])
        else:
            deeper.setdefault(path[0], set()).add(path[1:])
    if isinstance(value, dict):
        if not value or _map_atomic(schema):
            return value
        out: dict[str, Any] = {}
        for key, child in value.items():
            field = ("f", key)
            if field in exact:
                continue
            sub = deeper.get(field)
            if sub:
                child = _remove_in(child, sub, _member(schema, key), drop_emptied)
                if child is _EMPTIED:
                    if drop_emptied:
                        continue
                    child = None
            out[key] = child
        return out if out else _EMPTIED
    if isinstance(value, list):
        if not value or _list_kind(schema)[0] == "atomic":
            return value
        kind, keys = _list_kind(schema)
        item_schema = _items_of(schema)
        items: list[Any] = []
        for item in value:
            try:
                element: PathElement | None = _item_pe(item, kind, keys, item_schema)
            except _Invalid:
                element = None  # unaddressable items stay, as upstream
            if element is not None and element in exact:
                continue
            sub = deeper.get(element) if element is not None else None
            if sub:
                item = _remove_in(item, sub, item_schema, drop_emptied)
                if item is _EMPTIED:
                    if drop_emptied:
                        continue
                    item = None
            items.append(item)
        return items if items else _EMPTIED
    return value


def _ensure_named(paths: Iterable[Path], schema: SchemaNode | None) -> set[Path]:
    """``Set.EnsureNamedFieldsAreMembers``: struct fields with owned children count as owned themselves."""
    out = set(paths)
    for path in list(out):
        node = schema
        for i, (kind, text) in enumerate(path[:-1]):
            if node is None:
                break
            if kind == "f":
                if node.has_field(text):
                    out.add(path[: i + 1])
                node = node.member(text)
            else:
                node = node.items()
    return out


def _drop_ignored(fields: FieldSet, ignored: Collection[Path]) -> FieldSet:
    if not ignored:
        return fields
    return frozenset(p for p in fields if not any(p[: len(q)] == q for q in ignored))


# -- FieldsV1 -------------------------------------------------------------------------------------------------


class _Node:
    __slots__ = ("children", "member")

    def __init__(self) -> None:
        self.member = False
        self.children: dict[PathElement, _Node] = {}


def _trie(fields: Iterable[Path]) -> _Node:
    root = _Node()
    for path in fields:
        node = root
        for pe in path:
            node = node.children.setdefault(pe, _Node())
        if path:
            node.member = True
    return root


def _emit(node: _Node) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pe in sorted(node.children, key=_pe_order):
        child = node.children[pe]
        body: dict[str, Any] = {}
        if child.children:
            if child.member:
                body["."] = {}
            body.update(_emit(child))
        out[f"{pe[0]}:{pe[1]}"] = body
    return out


def _iterate(fields: Iterable[Path]) -> list[Path]:
    """Upstream's ``Set.Iterate`` order: a level's members first, then its children, each sorted."""
    out: list[Path] = []

    def walk(node: _Node, prefix: Path) -> None:
        ordered = sorted(node.children, key=_pe_order)
        out.extend(prefix + (pe,) for pe in ordered if node.children[pe].member)
        for pe in ordered:
            if node.children[pe].children:
                walk(node.children[pe], prefix + (pe,))

    walk(_trie(fields), ())
    return out


def _read_v1(data: Mapping[str, Any], prefix: Path, out: set[Path]) -> None:
    for key, body in data.items():
        if key == ".":
            if prefix:
                out.add(prefix)
            continue
        if not isinstance(body, Mapping):
            raise ValueError(f"expected an object for {key!r}")
        path = prefix + (_parse_pe(key),)
        if body:
            _read_v1(body, path, out)
        else:
            out.add(path)


def _parse_pe(text: str) -> PathElement:
    """``DeserializePathElement``, normalised so equal elements compare equal."""
    if len(text) < 2 or text[1] != ":":
        raise ValueError(f"invalid path element {text!r}")
    kind, body = text[0], text[2:]
    if kind == "f":
        return ("f", body)
    try:
        if kind == "v":
            return ("v", _go_json(json.loads(body)))
        if kind == "k":
            fields = json.loads(body)
            if not isinstance(fields, dict):
                raise ValueError(f"invalid key {body!r}")
            return ("k", "{" + ",".join(f"{_go_str(k)}:{_go_json(fields[k])}" for k in sorted(fields)) + "}")
        if kind == "i":
            return ("i", str(int(body)))
    except json.JSONDecodeError as e:
        raise ValueError(f"invalid path element {text!r}: {e}") from None
    raise ValueError("unknown path element type")


@lru_cache(maxsize=4096)
def _pe_order(pe: PathElement) -> tuple[Any, ...]:
    """``PathElement.Compare``: fields < keys < values < indexes; values by structured-merge-diff's order."""
    kind, text = pe
    if kind == "f":
        return (0, text)
    if kind == "k":
        fields = json.loads(text)
        return (1, tuple((k, _value_order(v)) for k, v in fields.items()))
    if kind == "v":
        return (2, _value_order(json.loads(text)))
    return (3, int(text))


def _value_order(value: Any) -> tuple[Any, ...]:
    if isinstance(value, bool):
        return (2, value)
    if isinstance(value, int | float):
        return (0, value)
    if isinstance(value, str):
        return (1, value)
    if isinstance(value, list):
        return (3, tuple(_value_order(v) for v in value))
    if isinstance(value, dict):
        return (4, tuple((k, _value_order(value[k])) for k in sorted(value)))
    return (5,)


# -- JSON as Go writes it ---------------------------------------------------------------------------------------


def _go_str(text: str) -> str:
    """A JSON string as Go's encoder writes it (HTML-safe escapes)."""
    return (
        json.dumps(text, ensure_ascii=False)
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _go_json(value: Any) -> str:
    """Compact JSON as Go's ``encoding/json`` writes it: sorted keys, ``1`` for ``1.0``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, str):
        return _go_str(value)
    if isinstance(value, list):
        return "[" + ",".join(_go_json(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{_go_str(k)}:{_go_json(value[k])}" for k in sorted(value)) + "}"
    return _go_str(str(value))


def _go_float(value: float) -> str:
    if value != value or value in (float("inf"), float("-inf")):
        return "null"
    magnitude = abs(value)
    if magnitude != 0 and (magnitude < 1e-6 or magnitude >= 1e21):
        mantissa, _, exponent = repr(value).partition("e")
        sign, digits = exponent[0], exponent[1:].lstrip("0") or "0"
        return f"{mantissa}e{sign}{digits if sign == '-' else digits.zfill(2)}"
    if value.is_integer():
        return str(int(value))
    return format(Decimal(repr(value)), "f")


def _value_text(value: Any) -> str:
    """``value.ToString``: how a key value appears in a conflict path."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ",".join(_value_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "".join(f"{k}={_value_text(value[k])}" for k in sorted(value))
    return str(value)


# -- small helpers ----------------------------------------------------------------------------------------------


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def _meta_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _without_managed_fields(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return obj
    out = dict(obj)
    out["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return out


def _json_equal(a: Any, b: Any) -> bool:
    """Deep equality with JSON types: ``true`` is not ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict):
        return (
            isinstance(b, dict) and a.keys() == b.keys() and all(_json_equal(v, b[k]) for k, v in a.items())
        )
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, int | float):
        return isinstance(b, int | float) and a == b
    return type(a) is type(b) and bool(a == b)
