"""Bytes in, bytes out: how objects are stored, served and decoded from request bodies.

Stored values are an object's JSON with ``kind``, ``apiVersion`` and ``metadata`` as the first keys, in
that order (as upstream serializes), and *without* ``metadata.resourceVersion``: the revision a backend
assigns is not known until commit (etcd assigns it), so it is spliced in when the bytes are served. Because
the prefix up to ``metadata``'s opening brace is fixed for a kind, the splice is one concatenation, and a
list of built-in kinds (whose items upstream sends without ``kind`` and ``apiVersion``) cuts that prefix
off each item at no extra cost. The read path never decodes an object it only relays.

Values written before this layout have ``metadata`` first; every reader here accepts both.

Decoding bounds what a body can become. YAML aliases are refused while the document is still a stream
of parser events, so an alias bomb never grows into objects. Every decoded body is re-encoded once
(the JSON path did that already, to spot duplicate keys cheaply), which checks in C that it is JSON,
that it is not nested deeper than the encoder can write, and how large it really is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson
import yaml

from vplane.kube import errors, gojson, protobuf, yamlsafe
from vplane.kube.objects import Obj
from vplane.storage.interface import KeyValue

_STORED_PREFIX = b'{"metadata":{'
_WIRE_PREFIX = b'{"metadata":{"resourceVersion":"'
_METADATA_OPEN = b'"metadata":{'
_RV_KEY = b'"resourceVersion":"'

JSON = "application/json"
YAML = "application/yaml"
PROTOBUF = protobuf.MEDIA_TYPE
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

BODY_TYPES = (JSON, YAML, PROTOBUF)
"""Media types accepted for create and update bodies (upstream lists them in this order)."""

ENCODER_MAX_DEPTH = 254
"""The deepest nesting orjson writes: 254 nested arrays or objects encode, 255 raise "Recursion limit
reached" (orjson 3.x; pinned by a unit test). Upstream's JSON decoder allows 10000 levels, but what we
cannot encode we can neither store nor answer with, so the limit below derives from this one."""
RESPONSE_HEADROOM = 8
"""Levels an answer may wrap around a stored object: a list's ``items`` (2), a Table row's ``object`` (3)
inside a watch event (1); 8 leaves room to spare."""
MAX_DEPTH = ENCODER_MAX_DEPTH - RESPONSE_HEADROOM
"""Deepest request body and deepest stored object (246 levels of objects and arrays), so that every answer
embedding a stored object still encodes and any stored object can be sent back as it was read. A stored
object's ``metadata.managedFields[i].fieldsV1`` mirrors its fields four levels down (five at scalar
leaves), so objects whose own fields nest deeper than about 241 levels are refused when they are stored."""


_WRAP = ENCODER_MAX_DEPTH - MAX_DEPTH
"""Bytes of wrapping at each end of :func:`_encode`'s answer (one ``[`` or ``]`` per level)."""
assert _WRAP == 8, "_encode spells the wrapping out: keep it in step with the limits"


def _encode(value: Any, option: int = 0, *, stored: bool = False) -> bytes:
    """``value`` as JSON inside ``_WRAP`` extra arrays, so that orjson itself refuses a value nested deeper
    than :data:`MAX_DEPTH` (no walk in Python, about 0.1 us on a typical object); the caller strips
    ``_WRAP`` bytes from each end."""
    try:
        return orjson.dumps([[[[[[[[value]]]]]]]], option=option)
    except orjson.JSONEncodeError as exc:
        if str(exc) == "Recursion limit reached":
            raise errors.nested_too_deeply(MAX_DEPTH, stored=stored) from None
        raise errors.not_representable_in_json(str(exc)) from None


def stored_bytes(obj: Obj) -> bytes:
    """Serialize ``obj`` for storage: kind, apiVersion, metadata first, no resourceVersion.

    An object nested deeper than :data:`MAX_DEPTH` with its managed fields (or built deeper by a JSON
    patch from bodies that each pass) is refused with 400 rather than stored unservable."""
    metadata = dict(obj.get("metadata") or {})
    metadata.pop("resourceVersion", None)
    if not metadata:
        raise ValueError("stored objects need non-empty metadata")
    ordered: dict[str, Any] = {}
    if "kind" in obj:
        ordered["kind"] = obj["kind"]
    if "apiVersion" in obj:
        ordered["apiVersion"] = obj["apiVersion"]
    ordered["metadata"] = metadata
    for key, value in obj.items():
        if key not in ordered:
            ordered[key] = value
    encoded = _encode(ordered, stored=True)
    return encoded[_WRAP : len(encoded) - _WRAP]


def typed_prefix(kind: str, api_version: str) -> bytes:
    """How a stored value of this kind begins, up to and including metadata's opening brace."""
    return (
        b'{"kind":'
        + orjson.dumps(kind)
        + b',"apiVersion":'
        + orjson.dumps(api_version)
        + b","
        + _METADATA_OPEN
    )


def _metadata_body(kv: KeyValue) -> int:
    """Offset just past metadata's opening brace (the first ``"metadata":{``: kind and apiVersion values
    cannot contain a quote, so nothing before it can look like it)."""
    value = kv.value
    at = value.find(_METADATA_OPEN, 0, 400)
    if at < 0 or not value.startswith(b"{"):
        raise ValueError(f"stored value of {kv.key} is not in canonical form")
    return at + len(_METADATA_OPEN)


def wire_bytes(kv: KeyValue) -> bytes:
    """The stored value with ``metadata.resourceVersion`` set to the value's revision."""
    value = kv.value
    cut = value.find(_METADATA_OPEN, 0, 400) + len(_METADATA_OPEN)
    if cut < len(_METADATA_OPEN) or value[0] != 0x7B:  # "{"
        raise ValueError(f"stored value of {kv.key} is not in canonical form")
    return b"".join((value[:cut], _RV_KEY, str(kv.mod_revision).encode(), b'",', value[cut:]))


def wire_pieces(kv: KeyValue) -> tuple[bytes, memoryview]:
    """:func:`wire_bytes` as a short head and a view of the rest of the stored value, without copying the
    value (a watch writes a large object in slices, so an unread stream holds a slice, not a copy)."""
    value = kv.value
    cut = _metadata_body(kv)
    head = b"".join((value[:cut], _RV_KEY, str(kv.mod_revision).encode(), b'",'))
    return head, memoryview(value)[cut:]


def join_wire(kvs: list[KeyValue], separator: bytes = b",", untyped: bytes | None = None) -> bytes:
    """Many objects' wire bytes joined, without copying each stored value first (list responses).

    ``untyped`` is the kind's :func:`typed_prefix`: items are then served without ``kind`` and
    ``apiVersion`` by cutting that prefix off (a value stored in the older metadata-first layout is
    re-encoded without them). Items of one list share their prefix, so it is found once and each item
    costs a ``startswith``."""
    parts: list[bytes | memoryview] = []
    prefix = untyped if untyped is not None else b"\x00"
    head = _WIRE_PREFIX if untyped is not None else b""
    for kv in kvs:
        value = kv.value
        if not value.startswith(prefix):
            if untyped is not None:
                obj = orjson.loads(wire_bytes(kv))
                obj.pop("kind", None)
                obj.pop("apiVersion", None)
                parts += (separator, orjson.dumps(obj))
                continue
            prefix = value[: _metadata_body(kv)]
            head = prefix + _RV_KEY
        parts += (separator, head, str(kv.mod_revision).encode(), b'",', memoryview(value)[len(prefix) :])
    return b"".join(parts[1:])


def decode_kv(kv: KeyValue) -> Obj:
    obj: Obj = orjson.loads(wire_bytes(kv))
    return obj


def dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


def media_type(content_type: str | None) -> str:
    if not content_type:
        return ""
    return content_type.split(";", 1)[0].strip().lower()


def decode_body(
    body: bytes,
    content_type: str,
    *,
    allowed: tuple[str, ...] = BODY_TYPES,
    want_duplicates: bool = False,
    max_bytes: int | None = None,
    kind: str = "",
    field_validation: str = "Warn",
) -> tuple[Any, list[str]]:
    """Decode a request body; returns the value and the duplicate JSON keys seen (when asked for).

    Whatever the media type, the value is plain JSON data (string keys, no YAML timestamps or binary),
    nested at most :data:`MAX_DEPTH` deep, and re-encodes to at most ``max_bytes`` (413 past it).

    A JSON body that is not JSON is answered as upstream's handler for it would: with ``kind`` (the
    create or update of that kind) ``the object provided is unrecognized (must be of type <kind>)``, for
    patches per patch type and ``field_validation``, otherwise as its serializer words it."""
    mtype = media_type(content_type) or JSON
    if mtype not in allowed:
        raise errors.unsupported_media_type(mtype, allowed)
    if mtype == PROTOBUF:
        value = protobuf.decode(body)
        _check_size(_encode(value), max_bytes)
        return value, []
    if mtype in (YAML, APPLY_PATCH):
        return _yaml(body, max_bytes), []
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise _not_json(body, exc, mtype, kind, field_validation) from None
    return _json(body, value, want_duplicates, max_bytes)


def _check_size(encoded: bytes, max_bytes: int | None) -> None:
    if max_bytes is not None and len(encoded) - 2 * _WRAP > max_bytes:
        raise errors.decoded_body_too_large(max_bytes)


def _not_json(
    body: bytes, exc: orjson.JSONDecodeError, mtype: str, kind: str, field_validation: str
) -> errors.StatusError:
    """The answer to a JSON body orjson refused: Go's syntax error in the words of the upstream handler the
    request stands for (only here, off the decoding path, is the body looked at again)."""
    if not body.strip() or (exc.doc and exc.pos >= len(exc.doc)):
        detail: str | None = gojson.end_of_input(body)  # orjson read it all: the body was cut short
    else:
        detail = gojson.syntax_error(body)
    if detail is None:  # JSON to Go (nested past orjson's 1024 levels, strings not UTF-8) or too long to tell
        if exc.msg == "depth limit exceeded":
            return errors.nested_too_deeply(MAX_DEPTH)
        return errors.bad_request(f"json parse error: {exc}")
    if mtype == STRATEGIC_MERGE_PATCH:
        return errors.bad_request(detail)  # strategicPatchObject: the decoder's error as it is
    if mtype in (JSON_PATCH, MERGE_PATCH):
        if field_validation in ("Warn", "Strict"):
            return errors.error_decoding_patch(detail)
        return errors.invalid_json_patch() if mtype == MERGE_PATCH else errors.bad_request(detail)
    if kind:
        return errors.unrecognized_object(kind, detail, body)
    return errors.json_parse_error(detail)


def _json(body: bytes, value: Any, want_duplicates: bool, max_bytes: int | None) -> tuple[Any, list[str]]:
    encoded = _encode(value)
    size = len(encoded) - 2 * _WRAP
    if max_bytes is not None and size > max_bytes:
        raise errors.decoded_body_too_large(max_bytes)
    # A body that re-encodes to itself byte for byte has no duplicate keys (the re-encoding keeps one of
    # each). Compact JSON, which kubectl and the client libraries send, mostly takes this fast path;
    # anything else gets the exact, slower check.
    if not want_duplicates or (size == len(body) and encoded.startswith(body, _WRAP)):
        return value, []
    duplicates: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out and key not in duplicates:
                duplicates.append(key)
            out[key] = value
        return out

    try:
        return json.loads(body, object_pairs_hook=pairs), duplicates
    except (ValueError, RecursionError) as exc:
        raise errors.bad_request(f"json parse error: {exc}") from None


def _yaml(body: bytes, max_bytes: int | None) -> Any:
    try:
        value = yamlsafe.load(body)
    except yamlsafe.AliasRefused as exc:
        raise errors.yaml_alias(exc.line, exc.anchor) from None
    except yaml.YAMLError as exc:
        raise errors.bad_request(f"yaml parse error: {exc}") from None
    except RecursionError:
        raise errors.bad_request("yaml parse error: document nested too deeply") from None
    # Through JSON and back: non-string keys become strings (``1: x`` is ``"1": x``, as upstream), and what
    # JSON cannot hold (binary, sets, integers over 64 bits) is a 400 here rather than a 500 at storage.
    encoded = _encode(value, orjson.OPT_NON_STR_KEYS)
    _check_size(encoded, max_bytes)
    return orjson.loads(memoryview(encoded)[_WRAP : len(encoded) - _WRAP])


def require_object(value: Any, what: str = "object") -> Obj:
    if not isinstance(value, Mapping):
        raise errors.bad_request(f"the request body must be a JSON {what}")
    return dict(value)
