"""PATCH bodies: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic merge patch.

Strategic merge patch follows apimachinery ``pkg/util/strategicpatch/patch.go`` (``mergeMap`` with
``MergeParallelList`` and ``IgnoreUnmatchedNulls``, as ``StrategicMergeMapPatch`` runs it on the server),
with the patch strategy and merge key of each field read from the kind's OpenAPI schema
(:mod:`vplane.kube.schema_meta`), so clients that compute patches from ``/openapi/v3`` agree with us.

Error codes follow ``k8s.io/apiserver/pkg/endpoints/handlers/patch.go``:

* a JSON patch document that is not a list of objects is 400 (``jsonpatch.DecodePatch`` failed); any
  failing operation, including a failed ``test``, is 422 ``Invalid`` with upstream's generic message
  (``NewGenericServerResponse(422, ...)``): upstream drops the library's text, so do we;
* strategic merge patch format errors are 400 and "lists of lists" is 422
  (``interpretStrategicMergePatchError``). Upstream passes every other engine error through as a 500 with
  reason ``Unknown``; they are all caused by the patch body (unknown ``$patch`` values, missing merge keys,
  mixed element types), so we answer 400 with upstream's text instead.

Deviations, all in corners that upstream reaches only with hand-written patches:

* ``$patch: merge`` is accepted as an explicit "merge as usual" (upstream rejects it in maps and lists);
* directive keys (``$patch``, ``$retainKeys``, ``$setElementOrder/…``, ``$deleteFromPrimitiveList/…``)
  are removed from values the patch adds or replaces wholesale; upstream leaves some of them in place;
* a field the schema does not know is treated as schema-less (lists replaced, maps merged) where upstream
  answers 500 "unable to find api field".
"""

from __future__ import annotations

import json
from typing import Any, Final

import jsonpatch

from vplane.kube import errors
from vplane.kube.objects import Obj
from vplane.kube.schema_meta import SchemaNode

JSON_PATCH: Final = "application/json-patch+json"
MERGE_PATCH: Final = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"
APPLY_PATCH_YAML: Final = "application/apply-patch+yaml"

PATCH_TYPES: Final = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH_YAML)
"""Every patch media type we accept, in upstream's order (it is the order of the 415 message)."""

CUSTOM_RESOURCE_PATCH_TYPES: Final = (JSON_PATCH, MERGE_PATCH, APPLY_PATCH_YAML)
"""Custom resources have no strategic merge patch upstream; kubectl relies on the 415 to say so."""

MAX_JSON_PATCH_OPERATIONS: Final = 10000
"""``maxJSONPatchOperations`` in handlers/patch.go."""

_GENERIC_422: Final = "the server rejected our request due to an error in our request"


# -- JSON merge patch ---------------------------------------------------------------------------------------


def apply_merge_patch(original: Any, patch: Any) -> Any:
    """RFC 7386 ``MergePatch(original, patch)``: objects merge, ``null`` deletes, anything else replaces.

    The result shares nothing with the inputs (callers mutate it; the original may be a cached object).
    Upstream's library additionally drops ``null`` inside objects nested in arrays; RFC 7386 (and this
    function) keeps array values verbatim, which keeps the patch idempotent.
    """
    try:
        return _merge_patch(_copy(original), patch)
    except RecursionError:
        raise _too_deep() from None


def apply_merge_patch_to_object(original: Obj, patch: Any) -> Obj:
    """A merge patch against a stored object, with the errors upstream's PATCH handler gives.

    ``null`` or a scalar patch is 400 ``Invalid JSON Patch`` (evanphx ``ErrBadJSONPatch``); an array
    replaces the object and then fails to decode, which upstream reports as 422.
    """
    if not isinstance(patch, dict):
        if isinstance(patch, list):
            try:
                raise _not_an_object(patch)
            except RecursionError:
                raise _too_deep() from None
        raise errors.bad_request("Invalid JSON Patch")
    result = apply_merge_patch(original, patch)
    assert isinstance(result, dict)
    return result


def _merge_patch(target: Any, patch: Any) -> Any:
    """Merge into ``target``, which the caller owns; ``patch`` is only read."""
    if not isinstance(patch, dict):
        return _copy(patch)
    doc: dict[str, Any] = target if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = _merge_patch(doc.get(key), value)
    return doc


# -- JSON patch -------------------------------------------------------------------------------------------


def apply_json_patch(original: Obj, patch: Any) -> Obj:
    """RFC 6902 via the ``jsonpatch`` library (its ``test`` compares with JSON types, ``1`` is not ``true``)."""
    try:
        return _json_patch(original, patch)
    except RecursionError:
        raise _too_deep() from None


def _json_patch(original: Obj, patch: Any) -> Obj:
    if not isinstance(patch, list):
        raise errors.bad_request(
            f"json: cannot unmarshal {_json_kind(patch)} into Go value of type jsonpatch.Patch"
        )
    for op in patch:
        if not isinstance(op, dict):
            raise errors.bad_request(
                f"json: cannot unmarshal {_json_kind(op)} into Go value of type jsonpatch.Operation"
            )
    if len(patch) > MAX_JSON_PATCH_OPERATIONS:
        raise errors.request_entity_too_large(
            f"The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {len(patch)}"
        )
    try:
        result = jsonpatch.JsonPatch(patch).apply(original)
    except Exception:  # the library raises a zoo of types; upstream maps every apply failure to 422
        raise _unprocessable() from None
    if not isinstance(result, dict):
        raise _not_an_object(result)
    return result


# -- strategic merge patch ------------------------------------------------------------------------------------

_DIRECTIVE: Final = "$patch"
_DELETE: Final = "delete"
_REPLACE: Final = "replace"
_MERGE: Final = "merge"
_RETAIN_KEYS_STRATEGY: Final = "retainKeys"
_RETAIN_KEYS: Final = "$retainKeys"
_DELETE_FROM_PRIMITIVE_LIST: Final = "$deleteFromPrimitiveList"
_SET_ELEMENT_ORDER: Final = "$setElementOrder"

# mergepatch/errors.go
_ERR_BAD_JSON_DOC: Final = "invalid JSON document"
_ERR_BAD_PRIMITIVE_LIST: Final = "invalid patch format of primitive list"
_ERR_BAD_RETAIN_KEYS: Final = "invalid patch format of retainKeys"
_ERR_BAD_SET_ELEMENT_ORDER: Final = "invalid patch format of setElementOrder list"


def apply_strategic_merge_patch(original: Obj, patch: Any, schema: SchemaNode | None) -> Obj:
    """Apply a strategic merge patch, reading strategies and merge keys from ``schema``.

    ``schema`` is the kind's root schema; None means unknown, so maps merge and lists are replaced (for
    ConfigMap, Secret and Namespace, whose lists are atomic anyway, that equals a merge patch). Inputs are
    not modified.
    """
    if not isinstance(original, dict):
        raise errors.bad_request(_ERR_BAD_JSON_DOC)
    if patch is None:  # decoding JSON null into a Go map leaves it empty: a no-op
        return {k: _copy(v) for k, v in original.items()}
    if not isinstance(patch, dict):
        raise errors.bad_request(
            f"json: cannot unmarshal {_json_kind(patch)} into Go value of type map[string]interface {{}}"
        )
    try:
        return _merge_map(_copy(original), _copy(patch), schema)
    except RecursionError:
        raise _too_deep() from None


def _merge_map(original: dict[str, Any], patch: dict[str, Any], schema: SchemaNode | None) -> dict[str, Any]:
    if _DIRECTIVE in patch:
        directive = patch.pop(_DIRECTIVE)
        if directive == _REPLACE:
            return _strip(patch, drop_nulls=False)[0]  # type: ignore[no-any-return]
        if directive == _DELETE:
            return {}
        if directive != _MERGE:
            patch[_DIRECTIVE] = directive
            raise _bad(f"unknown patch type: {_go_fmt(directive)} in map: {_go_fmt(patch)}")

    _apply_retain_keys(original, patch)
    _merge_set_element_order(original, patch, schema)

    for key, patch_value in list(patch.items()):
        is_delete_list = False
        if key.startswith(_DELETE_FROM_PRIMITIVE_LIST):
            key = _extract_key(key, _DELETE_FROM_PRIMITIVE_LIST)
            is_delete_list = True

        if patch_value is None:
            original.pop(key, None)
            continue
        if key not in original:
            if not is_delete_list:
                _set_new(original, key, patch_value)
            continue
        current = original[key]
        if _go_type(current) != _go_type(patch_value):
            if not is_delete_list:
                _set_new(original, key, patch_value)
            continue
        if isinstance(current, dict):
            sub, strategy, _ = _lookup(schema, key, slice_=False)
            if strategy == _REPLACE:
                original[key] = _replace_map(patch_value)
            else:
                original[key] = _merge_map(current, patch_value, sub)
        elif isinstance(current, list):
            sub, strategy, merge_key = _lookup(schema, key, slice_=True)
            original[key] = _merge_slice_handler(
                current, patch_value, sub, strategy, merge_key, is_delete_list
            )
        else:
            original[key] = patch_value
    return original


def _lookup(schema: SchemaNode | None, key: str, *, slice_: bool) -> tuple[SchemaNode | None, str, str]:
    """Subschema, patch strategy (without retainKeys) and merge key of field ``key``."""
    field = schema.member(key) if schema is not None else None
    if field is None:
        return None, "", ""
    strategy = _strategy_without_retain_keys(field.patch_strategies)
    # a list field without ``items`` keeps its own schema for the elements, as PatchMetaFromOpenAPIV3 does
    sub = (field.items() or field) if slice_ else field
    return sub, strategy, field.patch_merge_key


def _strategy_without_retain_keys(strategies: tuple[str, ...]) -> str:
    """``extractRetainKeysPatchStrategy``: retainKeys is a directive of the patch, not a merge rule."""
    others = [s for s in strategies if s != _RETAIN_KEYS_STRATEGY]
    if len(strategies) > 2 or len(others) > 1:
        # a schema problem, not the client's
        raise errors.internal_error(f"unexpected patch strategy: [{' '.join(strategies)}]")
    return others[0] if others else ""


def _replace_map(patch_value: dict[str, Any]) -> dict[str, Any]:
    value = dict(patch_value)
    directive = value.pop(_DIRECTIVE, None)
    if directive == _DELETE:
        return {}
    if directive not in (None, _REPLACE, _MERGE):
        raise _bad(f"unknown patch type: {_go_fmt(directive)} in map: {_go_fmt(patch_value)}")
    return _strip(value, drop_nulls=False)[0]  # type: ignore[no-any-return]


def _set_new(original: dict[str, Any], key: str, patch_value: Any) -> None:
    """A value with nothing to merge into: nulls mean nothing and directives must not survive."""
    value, keep = _strip(patch_value, drop_nulls=True)
    if keep:
        original[key] = value
    else:
        original.pop(key, None)


def _is_directive_key(key: str) -> bool:
    return key in (_DIRECTIVE, _RETAIN_KEYS) or key.startswith(
        (_SET_ELEMENT_ORDER, _DELETE_FROM_PRIMITIVE_LIST)
    )


def _strip(value: Any, *, drop_nulls: bool) -> tuple[Any, bool]:
    """``removeDirectives``: a map carrying ``$patch`` is dropped, other directive keys removed."""
    if isinstance(value, dict):
        if _DIRECTIVE in value:
            return None, False
        out: dict[str, Any] = {}
        for k, v in value.items():
            if _is_directive_key(k) or (v is None and drop_nulls):
                continue
            nv, keep = _strip(v, drop_nulls=drop_nulls)
            if keep:
                out[k] = nv
        return out, True
    if isinstance(value, list):
        items = []
        for v in value:
            nv, keep = _strip(v, drop_nulls=drop_nulls)
            if keep:
                items.append(nv)
        return items, True
    return value, True


def _extract_key(key: str, prefix: str) -> str:
    parts = key.split("/", 1)
    if len(parts) <= 1 or parts[0] != prefix:
        if prefix == _DELETE_FROM_PRIMITIVE_LIST:
            raise _bad(_ERR_BAD_PRIMITIVE_LIST)
        raise _bad(_ERR_BAD_SET_ELEMENT_ORDER)
    return parts[1]


def _apply_retain_keys(original: dict[str, Any], patch: dict[str, Any]) -> None:
    """``$retainKeys``: clear every key of ``original`` not listed; the patch may only set listed keys."""
    if _RETAIN_KEYS not in patch:
        return
    retain = patch.pop(_RETAIN_KEYS)
    if not isinstance(retain, list):
        raise _bad(_ERR_BAD_RETAIN_KEYS)
    keep = {k for k in retain if isinstance(k, str)}
    for key, value in patch.items():
        if value is None or key.startswith((_DELETE_FROM_PRIMITIVE_LIST, _SET_ELEMENT_ORDER)):
            continue
        if key not in keep:
            raise _bad(_ERR_BAD_RETAIN_KEYS)
    for key in list(original):
        if key not in keep:
            del original[key]


def _merge_set_element_order(
    original: dict[str, Any], patch: dict[str, Any], schema: SchemaNode | None
) -> None:
    """``mergePatchIntoOriginal``: merge each list that has ``$setElementOrder/<list>``, then order it.

    Precedence is ``$setElementOrder`` > order in the patch list > order in the live list.
    """
    for directive_key in [k for k in patch if k.startswith(_SET_ELEMENT_ORDER)]:
        order = patch.pop(directive_key)
        if not isinstance(order, list):
            raise _bad(_err_bad_arg_type([], order))
        key = _extract_key(directive_key, _SET_ELEMENT_ORDER)
        found_original, found_patch = key in original, key in patch
        original_list: list[Any] = []
        patch_list: list[Any] = []
        if found_original:
            if not isinstance(original[key], list):
                raise _bad(_err_bad_arg_type([], original[key]))
            original_list = original[key]
        if found_patch:
            if not isinstance(patch[key], list):
                raise _bad(_err_bad_arg_type([], patch[key]))
            patch_list = patch[key]
        sub, strategy, merge_key = _lookup(schema, key, slice_=True)
        _validate_patch_with_set_order(patch_list, order, merge_key)

        if found_original and not found_patch:
            merged = original_list
        elif found_patch and not found_original:
            merged = _strip(patch_list, drop_nulls=False)[0]
        elif found_original and found_patch:
            merged = _merge_slice_handler(original_list, patch_list, sub, strategy, merge_key, False)
        else:
            continue

        if not original_list and not patch_list:
            original[key] = merged
            patch.pop(key, None)
            continue
        if merge_key:
            patch_items, server_only = _partition_maps(merged, order, merge_key)
        else:
            patch_items, server_only = _partition_primitives(merged, order)
        kind = _slice_element_kind(original_list, patch_list)
        original[key] = _normalize_element_order(
            patch_items, server_only, order, original_list, merge_key, kind
        )
        patch.pop(key, None)


def _validate_patch_with_set_order(patch_list: list[Any], order: list[Any], merge_key: str) -> None:
    """Items of the patch list must appear in ``$setElementOrder``, in the same relative order."""
    if not order or not patch_list:
        return
    items = _extract_to_delete(patch_list)[0] if merge_key else patch_list
    pi = si = 0
    while pi < len(items) and si < len(order):
        if isinstance(items[pi], dict) and _DIRECTIVE in items[pi]:
            pi += 1
            continue
        if _merge_key_equal(items[pi], order[si], merge_key):
            pi += 1
        si += 1
    if pi < len(items) and si >= len(order):
        raise _bad(
            f"The order in patch list:\n{_go_fmt(patch_list)}\n doesn't match "
            f"{_SET_ELEMENT_ORDER} list:\n{_go_fmt(order)}\n"
        )


def _merge_key_equal(left: Any, right: Any, merge_key: str) -> bool:
    if not merge_key:
        return bool(_vkey(left) == _vkey(right))
    if not isinstance(left, dict):
        raise _bad(_err_bad_arg_type({}, left))
    if not isinstance(right, dict):
        raise _bad(_err_bad_arg_type({}, right))
    if merge_key not in left:
        raise _bad(_err_no_merge_key(left, merge_key))
    if merge_key not in right:
        raise _bad(_err_no_merge_key(right, merge_key))
    return bool(_vkey(left[merge_key]) == _vkey(right[merge_key]))


def _merge_slice_handler(
    original: list[Any],
    patch: list[Any],
    schema: SchemaNode | None,
    strategy: str,
    merge_key: str,
    is_delete_list: bool,
) -> list[Any]:
    if strategy == _MERGE or is_delete_list:
        return _merge_slice(original, patch, schema, merge_key, is_delete_list)
    return _strip(patch, drop_nulls=False)[0]  # type: ignore[no-any-return]


def _merge_slice(
    original: list[Any], patch: list[Any], schema: SchemaNode | None, merge_key: str, is_delete_list: bool
) -> list[Any]:
    if not original and not patch:
        return original
    kind = _slice_element_kind(original, patch)
    if kind != "map":
        if is_delete_list:
            doomed = {_vkey(v) for v in patch}
            return [v for v in original if _vkey(v) not in doomed]
        merged = _dedupe(original + patch)
    else:
        if not merge_key:
            name = (schema.type if schema is not None else None) or "Struct"
            raise _bad(f"cannot merge lists without merge key for {name}")
        live = _GoSlice(original)
        live, patch = _merge_slice_with_special_elements(live, patch, merge_key)
        original = live.view()
        merged = _merge_slice_without_special_elements(live, patch, merge_key, schema)

    if merge_key:
        patch_items, server_only = _partition_maps(merged, patch, merge_key)
    else:
        patch_items, server_only = _partition_primitives(merged, patch)
    return _normalize_element_order(patch_items, server_only, patch, original, merge_key, kind)


class _GoSlice:
    """A Go slice over a Python list, aliasing included.

    Upstream deletes list entries with ``append(s[:i], s[i+1:]...)`` and appends new ones in place, both
    writing through to the live list that ``$setElementOrder`` later uses as the server order. The element
    order kubectl users get (and upstream's own tests expect) depends on that, so we reproduce it.
    """

    __slots__ = ("backing", "length")

    def __init__(self, backing: list[Any]) -> None:
        self.backing = backing
        self.length = len(backing)

    def view(self) -> list[Any]:
        return self.backing[: self.length]

    def delete(self, i: int) -> None:
        self.backing[i : self.length - 1] = self.backing[i + 1 : self.length]
        self.length -= 1

    def append(self, value: Any) -> None:
        if self.length < len(self.backing):
            self.backing[self.length] = value
        else:
            self.backing = self.backing[: self.length] + [value]  # reallocated: no longer aliased
        self.length += 1


def _merge_slice_with_special_elements(
    live: _GoSlice, patch: list[Any], merge_key: str
) -> tuple[_GoSlice, list[Any]]:
    """Handle list elements carrying ``$patch``: delete by merge key, or replace the whole list."""
    plain: list[Any] = []
    replace = False
    for item in patch:
        if _DIRECTIVE not in item:
            plain.append(item)
            continue
        directive = item[_DIRECTIVE]
        if directive == _DELETE:
            if merge_key not in item:
                raise _bad(_err_no_merge_key(item, merge_key))
            while (index := _find_by_key(live.view(), merge_key, item[merge_key])) is not None:
                live.delete(index)
        elif directive == _REPLACE:
            replace = True
        elif directive == _MERGE:
            plain.append({k: v for k, v in item.items() if k != _DIRECTIVE})
        else:
            raise _bad(f"unknown patch type: {_go_fmt(directive)} in map: {_go_fmt(item)}")
    if replace:
        return _GoSlice(plain), []
    return live, plain


def _merge_slice_without_special_elements(
    live: _GoSlice, patch: list[Any], merge_key: str, schema: SchemaNode | None
) -> list[Any]:
    for item in patch:
        if merge_key not in item:
            raise _bad(_err_no_merge_key(item, merge_key))
        index = _find_by_key(live.view(), merge_key, item[merge_key])
        if index is None:
            live.append(_strip(item, drop_nulls=True)[0])
        else:
            live.backing[index] = _merge_map(live.backing[index], item, schema)
    return live.view()


def _find_by_key(items: list[Any], merge_key: str, value: Any) -> int | None:
    _check_all_maps(items)
    wanted = _vkey(value)
    for i, item in enumerate(items):
        if merge_key in item and _vkey(item[merge_key]) == wanted:
            return i
    return None


def _check_all_maps(items: list[Any]) -> None:
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise _bad(f"value for key {i} is not a map")


def _partition_primitives(merged: list[Any], by: list[Any]) -> tuple[list[Any], list[Any]]:
    present = {_vkey(v) for v in by}
    inside = [v for v in merged if _vkey(v) in present]
    outside = [v for v in merged if _vkey(v) not in present]
    return inside, outside


def _partition_maps(merged: list[Any], by: list[Any], merge_key: str) -> tuple[list[Any], list[Any]]:
    inside: list[Any] = []
    outside: list[Any] = []
    for item in merged:
        if not isinstance(item, dict):
            raise _bad(_err_bad_arg_type({}, item))
        if merge_key not in item:
            raise _bad(_err_no_merge_key(item, merge_key))
        (inside if _find_by_key(by, merge_key, item[merge_key]) is not None else outside).append(item)
    return inside, outside


def _normalize_element_order(
    patch_items: list[Any],
    server_only: list[Any],
    patch_order: list[Any],
    server_order: list[Any],
    merge_key: str,
    kind: str,
) -> list[Any]:
    patch_items = _normalize_slice_order(patch_items, patch_order, merge_key, kind)
    server_only = _normalize_slice_order(server_only, server_order, merge_key, kind)
    return _merge_sorted_slice(server_only, patch_items, server_order, merge_key, kind)


def _normalize_slice_order(items: list[Any], order: list[Any], merge_key: str, kind: str) -> list[Any]:
    doomed: list[Any] = []
    if kind == "map":
        for part in (items, order):
            for item in part:
                if not isinstance(item, dict):
                    raise _bad(_err_bad_arg_type({}, item))
                if merge_key not in item:
                    raise _bad(_err_no_merge_key(item, merge_key))
        items, doomed = _extract_to_delete(items)
    positions = _positions(order, merge_key, kind)
    ranked = sorted(items, key=lambda v: positions.get(_order_key(v, merge_key, kind), len(order)))
    return ranked + doomed


def _merge_sorted_slice(
    left: list[Any], right: list[Any], server_order: list[Any], merge_key: str, kind: str
) -> list[Any]:
    """``mergeSortedSlice``: interleave server-only items into the patch items by their live order."""
    positions = _positions(server_order, merge_key, kind)
    out: list[Any] = []
    i = j = 0
    while i < len(left) or j < len(right):
        if i >= len(left):
            out.append(right[j])
            j += 1
        elif j >= len(right):
            out.append(left[i])
            i += 1
        else:
            li = positions.get(_order_key(left[i], merge_key, kind))
            ri = positions.get(_order_key(right[j], merge_key, kind))
            if li is not None and ri is not None and li < ri:
                out.append(left[i])
                i += 1
            else:
                out.append(right[j])
                j += 1
    return out


def _order_key(item: Any, merge_key: str, kind: str) -> Any:
    if kind == "map":
        return _vkey(item.get(merge_key)) if isinstance(item, dict) else _vkey(None)
    return _vkey(item)


def _positions(order: list[Any], merge_key: str, kind: str) -> dict[Any, int]:
    """First index of each item (by merge key for maps), as upstream's ``index``."""
    positions: dict[Any, int] = {}
    for i, item in enumerate(order):
        positions.setdefault(_order_key(item, merge_key, kind), i)
    return positions


def _extract_to_delete(items: list[Any]) -> tuple[list[Any], list[Any]]:
    keep: list[Any] = []
    doomed: list[Any] = []
    for item in items:
        if not isinstance(item, dict):
            raise _bad(_err_bad_arg_type({}, item))
        (doomed if item.get(_DIRECTIVE) == _DELETE else keep).append(item)
    return keep, doomed


def _dedupe(items: list[Any]) -> list[Any]:
    seen: set[Any] = set()
    out = []
    for item in items:
        key = _vkey(item)
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


def _slice_element_kind(*slices: list[Any]) -> str:
    """``sliceElementType``: every element of every slice must have the same JSON type."""
    found: str | None = None
    for items in slices:
        for item in items:
            kind = _go_type(item)
            if found is None:
                if kind == "slice":
                    raise _unprocessable()  # ErrNoListOfLists; the 422 does not carry its text
                found = kind
            elif kind != found:
                raise _bad("list element types are not identical: " + _go_fmt([list(s) for s in slices]))
    if found is None:
        raise _bad("no elements in any of the given slices")
    return found


# -- helpers ----------------------------------------------------------------------------------------------


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _vkey(value: Any) -> Any:
    """A hashable identity for a JSON value that tells ``true`` from ``1`` (Go compares types too)."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int | float):
        return ("n", value)
    if isinstance(value, str):
        return ("s", value)
    if value is None:
        return ("z",)
    if isinstance(value, list):
        return ("l", tuple(_vkey(v) for v in value))
    if isinstance(value, dict):
        return ("m", tuple(sorted((k, _vkey(v)) for k, v in value.items())))
    return ("?", repr(value))


def _go_type(value: Any) -> str:
    """The Go type ``encoding/json`` would decode ``value`` into (with ints preserved)."""
    if isinstance(value, dict):
        return "map"
    if isinstance(value, list):
        return "slice"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    return "nil"


_GO_TYPE_NAMES: Final = {
    "map": "map[string]interface {}",
    "slice": "[]interface {}",
    "bool": "bool",
    "int64": "int64",
    "float64": "float64",
    "string": "string",
    "nil": "<nil>",
}


def _err_bad_arg_type(expected: Any, actual: Any) -> str:
    return (
        f"expected a {_GO_TYPE_NAMES[_go_type(expected)]}, but received a {_GO_TYPE_NAMES[_go_type(actual)]}"
    )


def _err_no_merge_key(item: Any, merge_key: str) -> str:
    return f"map: {_go_fmt(item)} does not contain declared merge key: {merge_key}"


def _go_fmt(value: Any) -> str:
    """Roughly Go's ``%v`` of a decoded JSON value, for error texts that quote the patch."""
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_go_fmt(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_go_fmt(v) for v in value) + "]"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return str(value)


def _json_kind(value: Any) -> str:
    """The JSON kind name Go's decoder uses in "cannot unmarshal X into ..."."""
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "null"


def _bad(message: str) -> errors.StatusError:
    return errors.bad_request(message)


def _unprocessable() -> errors.StatusError:
    """``NewGenericServerResponse(422, ...)``: reason Invalid, generic text, empty details.

    errors.py has no factory for this shape; it is only produced by patch application.
    """
    return errors.StatusError(422, "Invalid", _GENERIC_422)


def _not_an_object(value: Any) -> errors.StatusError:
    """A patch result that is not an object fails to decode; upstream reports it as 422 on ``patch``."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    detail = f"json: cannot unmarshal {_json_kind(value)} into Go value of type map[string]interface {{}}"
    return errors.invalid("", "", [errors.field_invalid("patch", text, detail)])


def _too_deep() -> errors.StatusError:
    return errors.bad_request("the patch or the object is nested too deeply")
