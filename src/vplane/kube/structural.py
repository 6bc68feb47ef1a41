"""Structural-schema semantics: validation, pruning, defaulting and strict-decoding messages.

Custom resources are checked against their CRD's ``openAPIV3Schema`` and built-in kinds against their OpenAPI v3
component schemas. Clients match on the resulting messages (kubectl prints them verbatim), so this module is a
port of the upstream behaviour rather than a generic JSON-Schema validator:

* value validation and its messages: ``k8s.io/kube-openapi/pkg/validation/validate`` + ``.../errors/schema.go``,
  converted to causes like ``kubeOpenAPIResultToFieldErrors`` in
  ``k8s.io/apiextensions-apiserver/pkg/apiserver/validation/validation.go``;
* pruning, defaulting, embedded ``ObjectMeta`` coercion, list-type uniqueness and structural checks:
  ``k8s.io/apiextensions-apiserver/pkg/apiserver/schema/{pruning,defaulting,objectmeta,listtype}`` and
  ``schema/validation.go``;
* strict decoding: ``k8s.io/apimachinery/pkg/runtime`` ``strictDecodingError``, ``sigs.k8s.io/json`` and
  ``k8s.io/apiserver/pkg/endpoints/handlers/rest.go`` ``transformDecodeError``.

Values are rendered the way Go renders them (``%q``, ``%v`` for floats, ``encoding/json``), because that text
ends up in ``Status`` messages.

Known differences from upstream (kept small on purpose):

* ``pattern`` uses Python ``re`` (with ``re.ASCII`` so ``\\d``/``\\w``/``\\s``/``\\b`` are ASCII like RE2) after
  translating the RE2-only bits (``\\z``, ``\\Q..\\E``, ``\\x{..}``, ``(?<name>``, ``[[:alpha:]]``, ``$`` meaning
  end-of-text). Unicode classes (``\\p{..}``), ``(?U)`` and mid-pattern global flags do not compile; Perl-only
  syntax that RE2 rejects (look-around, back-references, atomic groups) is rejected too. ``(?i)`` folds ASCII only.
  Compile errors carry Python's wording.
* Formats: ``date``, ``date-time``, ``byte``, ``uuid*``, ``ipv4``, ``ipv6``, ``cidr``, ``mac``, ``hostname``,
  ``hexcolor``, ``rgbcolor``, ``ssn``, ``bsonobjectid``, ``k8s-short-name``, ``k8s-long-name`` are checked;
  ``uri``, ``email``, ``isbn*``, ``creditcard``, ``duration`` are accepted as is (lenient).
* ``enum`` compares numbers across int/float like Go's reflect conversion, but not Go's int-to-rune-string quirk.
* Errors that upstream attaches to a nil field path (``<nil>``) use the ``path`` prefix (``""`` by default).
* Embedded ``ObjectMeta`` is checked for being an object and for top-level field names/types only; the name,
  label and annotation syntax rules of ``ValidateObjectMeta`` are not applied inside embedded resources.
"""

from __future__ import annotations

import copy
import functools
import ipaddress
import math
import re
import unicodedata
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, NamedTuple

import orjson

from vplane.kube import errors
from vplane.kube.errors import Cause

Schema = Mapping[str, Any]
Components = Mapping[str, Mapping[str, Any]]

# -- Go rendering ---------------------------------------------------------------------------------------------

_GO_SHORT_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}


def _go_quote(s: str) -> str:
    """Go ``strconv.Quote`` (``%q``): used wherever upstream formats a string with ``%q``."""
    out = ['"']
    for ch in s:
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        elif ch in _GO_SHORT_ESCAPES:
            out.append(_GO_SHORT_ESCAPES[ch])
        else:
            o = ord(ch)
            if o < 0x20 or o == 0x7F:
                out.append(f"\\x{o:02x}")
            elif o < 0x10000:
                out.append(f"\\u{o:04x}")
            else:
                out.append(f"\\U{o:08x}")
    out.append('"')
    return "".join(out)


def _float_digits(f: float) -> tuple[bool, str, int]:
    """Shortest round-trip digits of a non-zero finite ``f`` (Go ``strconv`` precision -1).

    Returns (negative, digits without trailing zeros, dp) with ``f == 0.digits * 10**dp``."""
    sign, digits, exp = Decimal(repr(f)).as_tuple()
    assert isinstance(exp, int)
    text = "".join(map(str, digits))
    dp = len(text) + exp
    return bool(sign), text.rstrip("0"), dp


def _format_float(f: float, exponent_if: Callable[[int], bool], trim_exp_zero: bool) -> str:
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    if math.isnan(f):
        return "NaN"
    if f == 0:
        return "-0" if math.copysign(1.0, f) < 0 else "0"
    neg, digits, dp = _float_digits(f)
    x = dp - 1
    if exponent_if(x):
        mant = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        sign = "-" if x < 0 else "+"
        exp = f"{abs(x)}" if trim_exp_zero and abs(x) < 10 else f"{abs(x):02d}"
        out = f"{mant}e{sign}{exp}"
    elif dp <= 0:
        out = "0." + "0" * (-dp) + digits
    elif dp >= len(digits):
        out = digits + "0" * (dp - len(digits))
    else:
        out = digits[:dp] + "." + digits[dp:]
    return ("-" if neg else "") + out


def _go_float(f: float) -> str:
    """Go ``%v`` of a float64 (``%g``, shortest): exponent form below 1e-4 or from 1e6, so 1e6 is ``1e+06``."""
    return _format_float(f, lambda x: x < -4 or x >= 6, trim_exp_zero=False)


def _go_json_float(f: float) -> str:
    """``encoding/json`` float64: exponent form below 1e-6 or from 1e21, ``e-7`` not ``e-07``."""
    a = abs(f)
    return _format_float(f, lambda x: a != 0 and (a < 1e-6 or a >= 1e21), trim_exp_zero=True)


def _go_json_string(s: str) -> str:
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif ch in "\n\r\t\b\f":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}[ch])
        elif o < 0x20 or ch in "<>&" or o in (0x2028, 0x2029):
            out.append(f"\\u{o:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _go_json(v: Any) -> str:
    """``encoding/json.Marshal`` of a decoded JSON value (map keys sorted, HTML characters escaped)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _go_json_float(v)
    if isinstance(v, str):
        return _go_json_string(v)
    if isinstance(v, Mapping):
        items = sorted(((str(k), val) for k, val in v.items()), key=lambda kv: kv[0])
        return "{" + ",".join(_go_json_string(k) + ":" + _go_json(val) for k, val in items) + "}"
    if isinstance(v, list | tuple):
        return "[" + ",".join(_go_json(x) for x in v) + "]"
    return _go_json_string(str(v))


def _go_value(v: Any) -> str:
    """How ``field.Error.ErrorBody`` renders a bad value: ``%v`` for numbers and bools, ``%q`` for strings,
    JSON otherwise."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _go_float(v)
    if isinstance(v, str):
        return _go_quote(v)
    return _go_json(v)


# -- causes ---------------------------------------------------------------------------------------------------


def _plain(s: str) -> bool:
    """True when ``errors``' simple rendering of ``s`` equals Go's ``%q``."""
    return _go_quote(s) == '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _renders_like_go(v: Any) -> bool:
    if v is None or isinstance(v, bool | int):
        return True
    if isinstance(v, float):
        return str(v) == _go_float(v)
    if isinstance(v, str):
        return _plain(v)
    return False


def _invalid(field: str, value: Any, detail: str) -> Cause:
    if _renders_like_go(value):
        return errors.field_invalid(field, value, detail)
    return {
        "reason": "FieldValueInvalid",
        "message": f"Invalid value: {_go_value(value)}: {detail}",
        "field": field,
    }


def _type_invalid(field: str, value: Any, detail: str) -> Cause:
    if _renders_like_go(value):
        return errors.field_type_invalid(field, value, detail)
    return {
        "reason": "FieldValueTypeInvalid",
        "message": f"Invalid value: {_go_value(value)}: {detail}",
        "field": field,
    }


def _not_supported(field: str, value: Any, supported: Sequence[str]) -> Cause:
    if supported and _renders_like_go(value) and all(_plain(s) for s in supported):
        return errors.field_not_supported(field, value, supported)
    detail = "supported values: " + ", ".join(_go_quote(s) for s in supported) if supported else ""
    body = f"Unsupported value: {_go_value(value)}" + (f": {detail}" if detail else "")
    return {"reason": "FieldValueNotSupported", "message": body, "field": field}


def _duplicate(field: str, value: Any) -> Cause:
    if _renders_like_go(value):
        return errors.field_duplicate(field, value)
    return {
        "reason": "FieldValueDuplicate",
        "message": f"Duplicate value: {_go_value(value)}",
        "field": field,
    }


def _too_long(field: str, limit: int) -> Cause:
    if limit != 1:
        return errors.field_too_long(field, limit)
    return {"reason": "FieldValueTooLong", "message": "Too long: may not be more than 1 byte", "field": field}


def _too_many(field: str, actual: int, limit: int) -> Cause:
    """``field.TooMany`` (no helper in ``errors``: only schema validation produces it)."""
    what = "item" if limit == 1 else "items"
    head = f"Too many: {actual}" if actual >= 0 else "Too many"
    return {
        "reason": "FieldValueTooMany",
        "message": f"{head}: must have at most {limit} {what}",
        "field": field,
    }


def _child(path: str, name: str) -> str:
    """``field.Path.Child``."""
    return f"{path}.{name}" if path else name


def _key(path: str, key: str) -> str:
    """``field.Path.Key``/``Index``: subscripts attach without a dot."""
    return f"{path}[{key}]"


# -- schema access --------------------------------------------------------------------------------------------

# Formats a CRD may use (apiextensions ``supportedVersionedFormats``, dashes removed as go-openapi normalises).
_STRING_FORMATS = frozenset(
    [
        "bsonobjectid",
        "uri",
        "email",
        "hostname",
        "ipv4",
        "ipv6",
        "cidr",
        "mac",
        "uuid",
        "uuid3",
        "uuid4",
        "uuid5",
        "isbn",
        "isbn10",
        "isbn13",
        "creditcard",
        "ssn",
        "hexcolor",
        "rgbcolor",
        "byte",
        "password",
        "date",
        "duration",
        "datetime",
        "k8sshortname",
        "k8slongname",
    ]
)


def _strip_format(fmt: Any, types: tuple[str, ...]) -> str:
    """``StripUnsupportedFormatsPostProcessorForVersion``: unknown formats are ignored, not errors."""
    if not isinstance(fmt, str) or not fmt:
        return ""
    single = types[0] if len(types) == 1 else ""
    if single in ("", "string"):
        return fmt if fmt.replace("-", "") in _STRING_FORMATS else ""
    if single == "integer":
        return fmt if fmt in ("int32", "int64") else ""
    if single == "number":
        return fmt if fmt in ("float", "double") else ""
    return ""


def _number(v: Any) -> int | float | None:
    return v if isinstance(v, int | float) and not isinstance(v, bool) else None


def _count(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


def _schemas(v: Any) -> tuple[Schema, ...]:
    return tuple(m for m in v if isinstance(m, Mapping)) if isinstance(v, list | tuple) else ()


class _Node:
    """One schema level with ``$ref``/``allOf: [{$ref}]`` resolved and keywords parsed once."""

    __slots__ = (
        "additional_false",
        "additional_schema",
        "additional_set",
        "all_of",
        "any_of",
        "default",
        "embedded",
        "enum",
        "exclusive_maximum",
        "exclusive_minimum",
        "format",
        "int_or_string",
        "items",
        "list_map_keys",
        "list_type",
        "max_items",
        "max_length",
        "max_props",
        "maximum",
        "min_items",
        "min_length",
        "min_props",
        "minimum",
        "multiple_of",
        "not_",
        "nullable",
        "one_of",
        "pattern",
        "preserve",
        "properties",
        "raw",
        "required",
        "types",
        "unique_items",
    )

    def __init__(self, s: Schema) -> None:
        self.raw = s
        self.int_or_string = s.get("x-kubernetes-int-or-string") is True
        t = s.get("type")
        if self.int_or_string:
            # ConvertJSONSchemaProps: int-or-string becomes type [integer, string].
            types: tuple[str, ...] = ("integer", "string")
        elif isinstance(t, str) and t:
            types = (t,)
        elif isinstance(t, list):
            types = tuple(x for x in t if isinstance(x, str))
        else:
            types = ()
        self.types = types
        self.nullable = s.get("nullable") is True
        self.format = _strip_format(s.get("format"), types)
        props = s.get("properties")
        self.properties: Mapping[str, Schema] = (
            {str(k): v for k, v in props.items() if isinstance(v, Mapping)}
            if isinstance(props, Mapping)
            else {}
        )
        ap = s.get("additionalProperties")
        self.additional_set = isinstance(ap, bool | Mapping)
        self.additional_false = ap is False
        self.additional_schema: Schema | None = ap if isinstance(ap, Mapping) else None
        items = s.get("items")
        self.items: Schema | None = items if isinstance(items, Mapping) else None
        req = s.get("required")
        self.required = tuple(str(r) for r in req) if isinstance(req, list) else ()
        enum = s.get("enum")
        self.enum: list[Any] | None = list(enum) if isinstance(enum, list) and enum else None
        self.minimum = _number(s.get("minimum"))
        self.maximum = _number(s.get("maximum"))
        self.exclusive_minimum = s.get("exclusiveMinimum") is True
        self.exclusive_maximum = s.get("exclusiveMaximum") is True
        self.multiple_of = _number(s.get("multipleOf"))
        self.min_length = _count(s.get("minLength"))
        self.max_length = _count(s.get("maxLength"))
        self.min_items = _count(s.get("minItems"))
        self.max_items = _count(s.get("maxItems"))
        self.min_props = _count(s.get("minProperties"))
        self.max_props = _count(s.get("maxProperties"))
        pattern = s.get("pattern")
        self.pattern = pattern if isinstance(pattern, str) else ""
        self.unique_items = s.get("uniqueItems") is True
        self.all_of = _schemas(s.get("allOf"))
        self.any_of = _schemas(s.get("anyOf"))
        self.one_of = _schemas(s.get("oneOf"))
        not_ = s.get("not")
        self.not_: Schema | None = not_ if isinstance(not_, Mapping) else None
        self.preserve = s.get("x-kubernetes-preserve-unknown-fields") is True
        self.embedded = s.get("x-kubernetes-embedded-resource") is True
        lt = s.get("x-kubernetes-list-type")
        self.list_type = lt if isinstance(lt, str) else None
        keys = s.get("x-kubernetes-list-map-keys")
        self.list_map_keys = tuple(str(k) for k in keys) if isinstance(keys, list) else ()
        self.default = s.get("default")


_REF_PREFIXES = ("#/components/schemas/", "#/definitions/")

_SHARED: dict[int, tuple[Components, _Ctx]] = {}


def _context(components: Components | None) -> _Ctx:
    """A node cache shared across calls for a long-lived components map (the built-in schemas).

    Resolving a schema into a node costs more than walking a small object, so the server must not rebuild
    the nodes on every request. A schema without components (a CRD version's) gets a fresh cache: CRDs
    change at run time and their nodes must not outlive them.
    """
    if components is None:
        return _Ctx(None)
    hit = _SHARED.get(id(components))
    if hit is not None and hit[0] is components:
        return hit[1]
    ctx = _Ctx(components)
    _SHARED[id(components)] = (components, ctx)
    return ctx


class _Ctx:
    """Per-call schema cache; ``components`` resolves the ``$ref`` used by built-in kinds' schemas."""

    def __init__(self, components: Components | None) -> None:
        self.components = components
        self._cache: dict[int, tuple[Schema, _Node]] = {}

    def node(self, schema: Schema) -> _Node:
        hit = self._cache.get(id(schema))
        if hit is not None and hit[0] is schema:
            return hit[1]
        node = _Node(self._resolve(schema, 0))
        self._cache[id(schema)] = (schema, node)  # keeps ``schema`` alive so its id stays unique
        return node

    def _lookup(self, ref: str) -> Schema | None:
        if self.components is None:
            return None
        for prefix in _REF_PREFIXES:
            if ref.startswith(prefix):
                target = self.components.get(ref[len(prefix) :])
                return target if isinstance(target, Mapping) else None
        return None

    def _resolve(self, s: Schema, depth: int) -> Schema:
        if self.components is None or depth > 32:
            return s
        while isinstance(s.get("$ref"), str) and depth <= 32:
            target = self._lookup(s["$ref"])
            rest = {k: v for k, v in s.items() if k != "$ref"}
            if target is None:
                return rest
            s = {**target, **rest} if rest else target
            depth += 1
        all_of = s.get("allOf")
        if isinstance(all_of, list) and any(isinstance(m, Mapping) and "$ref" in m for m in all_of):
            # OpenAPI v3 for built-ins wraps refs as ``allOf: [{$ref}]`` to add siblings (default, description):
            # that is structure, not a validation junctor.
            merged: dict[str, Any] = {}
            remaining: list[Any] = []
            for member in all_of:
                if isinstance(member, Mapping) and "$ref" in member:
                    merged.update(self._resolve(member, depth + 1))
                else:
                    remaining.append(member)
            out = {**merged, **{k: v for k, v in s.items() if k != "allOf"}}
            if remaining:
                out["allOf"] = remaining
            return out
        return s


# -- value validation (kube-openapi) --------------------------------------------------------------------------


class _OErr(NamedTuple):
    """A kube-openapi error before conversion to a cause; ``kind`` stands for its error code."""

    kind: str  # type | required | enum | too_long | too_many | invalid | plain
    name: str
    message: str
    value: Any = None
    valid: int = -1
    values: tuple[Any, ...] = ()


class _Result:
    """``validate.Result``: errors de-duplicated by message, and the match count anyOf/oneOf rank by."""

    __slots__ = ("_seen", "errors", "match")

    def __init__(self) -> None:
        self.errors: list[_OErr] = []
        self._seen: set[str] = set()
        self.match = 0

    @classmethod
    def of(cls, err: _OErr) -> _Result:
        r = cls()
        r.add(err)
        return r

    def add(self, err: _OErr | None) -> None:
        if err is not None and err.message not in self._seen:
            self._seen.add(err.message)
            self.errors.append(err)

    def merge(self, other: _Result | None) -> None:
        if other is not None:
            for e in other.errors:
                self.add(e)
            self.match += other.match

    @property
    def valid(self) -> bool:
        return not self.errors


_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_FLOAT32_MAX = 3.4028234663852886e38


def _kind(v: Any) -> str:
    """The Go ``reflect.Kind`` family of a decoded JSON value."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, str):
        return "string"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, list | tuple):
        return "slice"
    if isinstance(v, Mapping):
        return "map"
    return "other"


_SCHEMA_TYPE = {
    "bool": ("boolean", ""),
    "string": ("string", ""),
    "int": ("integer", "int64"),
    "float": ("number", "float64"),
    "slice": ("array", ""),
    "map": ("object", ""),
    "other": ("", ""),
}


def _is_json_integer(f: float) -> bool:
    """go-openapi ``conv.IsFloat64AJSONInteger``: integral within ±(2^53-1), with a 1e-9 relative tolerance."""
    if math.isnan(f) or math.isinf(f) or abs(f) > 2**53 - 1:
        return False
    rounded = math.copysign(math.floor(abs(f) + 0.5), f)
    if f == rounded:
        return True
    if rounded == 0:
        return False
    return abs(f - rounded) < 1e-9 * abs(rounded)


def _in(path: str) -> str:
    return f"{path} in body"


def _type_error(path: str, type_name: str, value: str) -> _OErr:
    return _OErr("type", path, f"{_in(path)} must be of type {type_name}: {_go_quote(value)}", value)


def _range_error(val: int | float, type_name: str, fmt: str, prefix: str, path: str) -> _OErr | None:
    """``IsValueValidAgainstRange``: whether a value (or a schema bound) fits the declared type and format."""
    ok = True
    if type_name == "integer":
        lo, hi = _INT32 if fmt == "int32" else _INT64
        if isinstance(val, float):
            ok = val.is_integer() and lo <= int(val) <= hi
        else:
            ok = lo <= val <= hi
    elif fmt == "float":
        ok = abs(val) <= _FLOAT32_MAX
    if ok:
        return None
    if fmt:
        msg = f"{prefix} value must be of type {type_name} with format {fmt} in {path}"
    else:
        msg = f"{prefix} value must be of type {type_name} (default format) in {path}"
    return _OErr("plain", path, msg)


def _bound_message(path: str, bound: int | float, exclusive: bool, upper: bool) -> str:
    shown = str(bound) if isinstance(bound, int) else _go_float(bound)
    if upper:
        rel = "less than" if exclusive else "less than or equal to"
    else:
        rel = "greater than" if exclusive else "greater than or equal to"
    return f"{_in(path)} should be {rel} {shown}"


def _deep_equal(a: Any, b: Any) -> bool:
    """``reflect.DeepEqual`` on decoded JSON: types must match (1 != 1.0, true != 1)."""
    both_maps = isinstance(a, Mapping) and isinstance(b, Mapping)
    both_lists = isinstance(a, list | tuple) and isinstance(b, list | tuple)
    if type(a) is not type(b) and not (both_maps or both_lists):
        return False
    if isinstance(a, Mapping):
        return len(a) == len(b) and all(k in b and _deep_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_deep_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _enum_match(data: Any, allowed: Any) -> bool:
    """kube-openapi converts the value to the enum entry's type first, so numbers compare across int/float."""
    if allowed is None or data is None:
        return False
    dk, ak = _kind(data), _kind(allowed)
    if dk in ("int", "float") and ak in ("int", "float"):
        try:
            converted = int(data) if ak == "int" else float(data)
        except (OverflowError, ValueError):
            return False
        return bool(converted == allowed)
    return _deep_equal(data, allowed)


class _Validator:
    """The kube-openapi ``SchemaValidator`` chain: type, junctors, string, format, number, slice, enum, object."""

    def __init__(self, ctx: _Ctx) -> None:
        self.ctx = ctx

    def value(self, data: Any, schema: Schema, path: str) -> _Result:
        n = self.ctx.node(schema)
        res = _Result()
        if data is None:
            res.merge(self._type(n, None, path))
            res.merge(self._enum(n, None, path))
            return res
        kind = _kind(data)
        if n.types or n.format:
            res.merge(self._type(n, data, path))
            res.match += 1
        res.merge(self._junctors(n, data, path))
        res.match += 1
        if kind == "string":
            res.merge(self._string(n, data, path))
            res.match += 1
            if n.format.replace("-", "") in _FORMAT_CHECKS:
                res.merge(self._format(n, data, path))
                res.match += 1
        if kind in ("int", "float"):
            res.merge(self._number(n, data, path))
            res.match += 1
        if kind == "slice":
            res.merge(self._slice(n, data, path))
            res.match += 1
        res.merge(self._enum(n, data, path))
        res.match += 1
        if kind == "map":
            res.merge(self._object(n, data, path))
            res.match += 1
        res.match += 1
        return res

    def _type(self, n: _Node, data: Any, path: str) -> _Result:
        ok = _Result()
        ok.match = 1
        if data is None:
            if n.types and "null" not in n.types and not n.nullable:
                return _Result.of(_type_error(path, ",".join(n.types), "null"))
            return ok
        kind = _kind(data)
        sch, fmt = _SCHEMA_TYPE[kind]
        is_float_int = sch == "number" and "integer" in n.types and _is_json_integer(data)
        is_int_float = sch == "integer" and "number" in n.types
        if (
            kind not in ("string", "slice")
            and n.format
            and not (sch in n.types or fmt == n.format or is_float_int or is_int_float)
        ):
            return _Result.of(_type_error(path, n.format, fmt))
        if not ("number" in n.types or "integer" in n.types) and n.format and kind in ("string", "slice"):
            return ok
        if not (sch in n.types or is_float_int or is_int_float):
            return _Result.of(_type_error(path, ",".join(n.types), sch))
        return ok

    def _junctors(self, n: _Node, data: Any, path: str) -> _Result:
        main = _Result()
        quoted = _go_quote(path)
        if n.any_of:
            best: _Result | None = None
            first_success: _Result | None = None
            for sub in n.any_of:
                r = self.value(data, sub, path)
                if r.valid:
                    best = None
                    first_success = r
                    break
                if best is None or r.match > best.match:
                    best = r
            if first_success is None:
                main.add(_OErr("plain", path, f"{quoted} must validate at least one schema (anyOf)"))
            main.merge(best if best is not None else first_success)
        if n.one_of:
            best = None
            first_success = None
            validated = 0
            for sub in n.one_of:
                r = self.value(data, sub, path)
                if r.valid:
                    validated += 1
                    best = None
                    first_success = first_success or r
                    continue
                if validated == 0 and (best is None or r.match > best.match):
                    best = r
            if validated != 1:
                extra = "Found none valid" if validated == 0 else f"Found {validated} valid alternatives"
                main.add(
                    _OErr("plain", path, f"{quoted} must validate one and only one schema (oneOf). {extra}")
                )
                main.merge(best)
            else:
                main.merge(first_success)
        if n.all_of:
            validated = 0
            for sub in n.all_of:
                r = self.value(data, sub, path)
                if r.valid:
                    validated += 1
                main.merge(r)
            if validated != len(n.all_of):
                extra = ". None validated" if validated == 0 else ""
                main.add(_OErr("plain", path, f"{quoted} must validate all the schemas (allOf){extra}"))
        if n.not_ is not None and self.value(data, n.not_, path).valid:
            main.add(_OErr("plain", path, f"{quoted} must not validate the schema (not)"))
        main.match += 1
        return main

    def _string(self, n: _Node, data: str, path: str) -> _Result | None:
        if n.max_length is not None and len(data) > n.max_length:
            msg = f"{_in(path)} should be at most {n.max_length} chars long"
            return _Result.of(_OErr("too_long", path, msg, data, n.max_length))
        if n.min_length is not None and len(data) < n.min_length:
            msg = f"{_in(path)} should be at least {n.min_length} chars long"
            return _Result.of(_OErr("invalid", path, msg, data))
        if n.pattern:
            compiled = _compile_go_regex(n.pattern)
            if isinstance(compiled, str):
                msg = f"{_in(path)} should match '{n.pattern}, but pattern is invalid: {compiled}'"
                return _Result.of(_OErr("invalid", path, msg, data))
            if compiled.search(data) is None:
                return _Result.of(_OErr("invalid", path, f"{_in(path)} should match '{n.pattern}'", data))
        return None

    def _format(self, n: _Node, data: str, path: str) -> _Result | None:
        if _FORMAT_CHECKS[n.format.replace("-", "")](data):
            return None
        return _Result.of(_type_error(path, n.format, data))

    def _number(self, n: _Node, data: int | float, path: str) -> _Result:
        res = _Result()
        type_name = fmt = ""
        if len(n.types) == 1 and n.types[0] in ("integer", "number"):
            type_name = n.types[0]
            if n.format in (("int32", "int64") if type_name == "integer" else ("float", "double")):
                fmt = n.format
        res.add(_range_error(data, type_name, fmt, "Checked", path))
        multiple, minimum, maximum = _Result(), _Result(), _Result()
        if n.multiple_of is not None:
            factor = float(n.multiple_of)
            bound_err = _range_error(factor, type_name, fmt, "MultipleOf", path)
            multiple.add(bound_err)
            multiple.add(self._multiple_of(path, data, factor, native=bound_err is None))
        if n.minimum is not None:
            bound = float(n.minimum)
            bound_err = _range_error(bound, type_name, fmt, "Minimum boundary", path)
            minimum.add(bound_err)
            minimum.add(self._bound(path, data, bound, n.exclusive_minimum, False, bound_err is None))
        if n.maximum is not None:
            bound = float(n.maximum)
            bound_err = _range_error(bound, type_name, fmt, "Maximum boundary", path)
            maximum.add(bound_err)
            maximum.add(self._bound(path, data, bound, n.exclusive_maximum, True, bound_err is None))
        res.merge(multiple)
        res.merge(minimum)
        res.merge(maximum)
        res.match += 1
        return res

    @staticmethod
    def _multiple_of(path: str, data: int | float, factor: float, native: bool) -> _OErr | None:
        if native and isinstance(data, int):
            ifactor = int(factor)
            if ifactor <= 0:
                msg = f"factor MultipleOf declared for {path} must be positive: {ifactor}"
                return _OErr("invalid", path, msg, ifactor)
            if data % ifactor != 0:
                return _OErr("invalid", path, f"{_in(path)} should be a multiple of {ifactor}", data)
            return None
        if factor <= 0:
            msg = f"factor MultipleOf declared for {path} must be positive: {_go_float(factor)}"
            return _OErr("invalid", path, msg, factor)
        fdata = float(data)
        try:
            mult = (1 / factor * fdata) if factor < 1 else (fdata / factor)
        except (OverflowError, ZeroDivisionError):
            mult = math.inf
        if not _is_json_integer(mult):
            return _OErr("invalid", path, f"{_in(path)} should be a multiple of {_go_float(factor)}", fdata)
        return None

    @staticmethod
    def _bound(
        path: str, data: int | float, bound: float, exclusive: bool, upper: bool, native: bool
    ) -> _OErr | None:
        """Integers compare with the bound truncated to int64, like ``MaximumNativeType``/``MinimumNativeType``."""
        as_int = native and isinstance(data, int) and math.isfinite(bound)
        limit: int | float = int(bound) if as_int else bound
        if not as_int:
            data = float(data)  # the float path reports the value as a float64 too
        if upper:
            failed = data >= limit if exclusive else data > limit
        else:
            failed = data <= limit if exclusive else data < limit
        if not failed:
            return None
        return _OErr("invalid", path, _bound_message(path, limit, exclusive, upper), data)

    def _slice(self, n: _Node, data: Sequence[Any], path: str) -> _Result:
        res = _Result()
        if n.items is not None:
            for i, item in enumerate(data):
                res.merge(self.value(item, n.items, f"{path}[{i}]"))
        size = len(data)
        if n.min_items is not None and size < n.min_items:
            res.add(_OErr("invalid", path, f"{_in(path)} should have at least {n.min_items} items", size))
        if n.max_items is not None and size > n.max_items:
            msg = f"{_in(path)} should have at most {n.max_items} items"
            res.add(_OErr("too_many", path, msg, size, n.max_items))
        if n.unique_items:
            seen: list[Any] = []
            for item in data:
                if any(_deep_equal(item, u) for u in seen):
                    res.add(_OErr("invalid", path, f"{_in(path)} shouldn't contain duplicates"))
                    break
                seen.append(item)
        res.match += 1
        return res

    def _enum(self, n: _Node, data: Any, path: str) -> _Result | None:
        if n.enum is None or any(_enum_match(data, allowed) for allowed in n.enum):
            return None
        msg = f"{_in(path)} should be one of {_go_json(n.enum)}"
        return _Result.of(_OErr("enum", path, msg, data, values=tuple(n.enum)))

    def _object(self, n: _Node, data: Mapping[str, Any], path: str) -> _Result:
        res = _Result()
        size = len(data)
        if n.min_props is not None and size < n.min_props:
            res.add(
                _OErr("invalid", path, f"{_in(path)} should have at least {n.min_props} properties", size)
            )
        if n.max_props is not None and size > n.max_props:
            msg = f"{_in(path)} should have at most {n.max_props} properties"
            res.add(_OErr("too_many", path, msg, size, n.max_props))
        keys = sorted(data, key=str)
        if n.additional_false:
            for k in keys:
                if k not in n.properties:
                    res.add(_OErr("invalid", path, f"{path}.{k} in body is a forbidden property", k))
        elif n.additional_schema is not None:
            for k in keys:
                if k not in n.properties:
                    res.merge(self.value(data[k], n.additional_schema, f"{path}.{k}"))
        for name in sorted(n.properties):
            if name in data:
                res.merge(self.value(data[name], n.properties[name], f"{path}.{name}" if path else name))
        for name in n.required:
            if name not in data:
                res.add(_OErr("required", f"{path}.{name}", f"{path}.{name} in body is required"))
        return res


def _to_cause(err: _OErr, prefix: str) -> Cause:
    """``kubeOpenAPIResultToFieldErrors``: the error code picks the cause reason."""
    if err.kind == "plain":
        return _invalid(prefix, "", err.message)
    field = prefix
    if err.name and err.name != ".":
        field = _child(prefix, err.name[1:] if err.name.startswith(".") else err.name)
    if err.kind == "required":
        return errors.field_required(field)
    if err.kind == "enum":
        supported = [v if isinstance(v, str) else _go_json(v) for v in err.values]
        return _not_supported(field, err.value, supported)
    if err.kind == "too_long":
        return _too_long(field, err.valid)
    if err.kind == "too_many":
        return _too_many(field, err.value if isinstance(err.value, int) else -1, err.valid)
    value = "" if err.value is None else err.value
    if err.kind == "type":
        return _type_invalid(field, value, err.message)
    return _invalid(field, value, err.message)


# -- Go regular expressions -----------------------------------------------------------------------------------

_POSIX_CLASSES = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "ascii": "\\x00-\\x7f",
    "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ",
    "upper": "A-Z",
    "word": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}
_MULTILINE_FLAG = re.compile(r"\(\?[a-zA-Z]*m")
_PERL_ONLY_GROUPS = ("(?=", "(?!", "(?<=", "(?<!", "(?>", "(?#", "(?P=", "(?P>")


def _translate_go_regex(pattern: str) -> str:
    """Rewrite RE2 syntax into Python ``re`` syntax; raises ``re.error`` where RE2 and ``re`` cannot agree."""
    out: list[str] = []
    multiline = _MULTILINE_FLAG.search(pattern) is not None
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n:
                raise re.error("trailing backslash at end of expression")
            d = pattern[i + 1]
            if d == "z":
                out.append("\\Z")
                i += 2
            elif d == "Q" and not in_class:
                end = pattern.find("\\E", i + 2)
                literal = pattern[i + 2 :] if end < 0 else pattern[i + 2 : end]
                out.append(re.escape(literal))
                i = n if end < 0 else end + 2
            elif d == "x" and i + 2 < n and pattern[i + 2] == "{":
                end = pattern.find("}", i + 3)
                if end < 0:
                    raise re.error("invalid escape sequence")
                try:
                    out.append(f"\\U{int(pattern[i + 3 : end], 16):08x}")
                except ValueError:
                    raise re.error("invalid escape sequence") from None
                i = end + 1
            elif d in "01234567":
                # RE2: octal escapes; a lone non-zero digit would be a back-reference, which RE2 lacks
                j = i + 2
                while j < n and j < i + 4 and pattern[j] in "01234567":
                    j += 1
                if d != "0" and j == i + 2:
                    raise re.error(f"invalid escape sequence: \\{d}")
                out.append(f"\\u{int(pattern[i + 1 : j], 8):04x}")
                i = j
            elif d in "pPZ89":
                raise re.error(f"invalid escape sequence: \\{d}")
            else:
                out.append(pattern[i : i + 2])
                i += 2
            continue
        if in_class:
            if c == "[" and pattern.startswith("[:", i):
                end = pattern.find(":]", i + 2)
                name = pattern[i + 2 : end] if end > 0 else ""
                if name not in _POSIX_CLASSES:
                    raise re.error("invalid character class range")
                out.append(_POSIX_CLASSES[name])
                i = end + 2
                continue
            if c == "]":
                in_class = False
                out.append(c)
            else:
                # literal in RE2 classes; Python reserves them for future set operations
                out.append("\\" + c if c in "[&~|" else c)
            i += 1
            continue
        if c == "[":
            in_class = True
            out.append(c)
            i += 1
            if i < n and pattern[i] == "^":
                out.append("^")
                i += 1
            if i < n and pattern[i] == "]":
                out.append("\\]")
                i += 1
            continue
        if c == "(" and pattern.startswith("(?", i):
            if any(pattern.startswith(g, i) for g in _PERL_ONLY_GROUPS):
                raise re.error("invalid or unsupported Perl syntax")
            if pattern.startswith("(?<", i):
                out.append("(?P<")
                i += 3
                continue
        if c == "$" and not multiline:
            out.append("\\Z")
            i += 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


@functools.lru_cache(maxsize=512)
def _compile_go_regex(pattern: str) -> re.Pattern[str] | str:
    """A compiled pattern, or the compile error text (kube-openapi reports it instead of failing)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # FutureWarning about set syntax RE2 does not have
            return re.compile(_translate_go_regex(pattern), re.ASCII)
    except (re.error, OverflowError, RecursionError) as exc:
        return f"error parsing regexp: {exc}"


# -- formats (kube-openapi strfmt) ----------------------------------------------------------------------------


def _fullmatch(rx: str, flags: int = 0) -> Callable[[str], bool]:
    compiled = re.compile(rx, flags | re.ASCII)
    return lambda s: compiled.fullmatch(s) is not None


_DATE_RX = re.compile(r"(\d{4})-(\d{2})-(\d{2})", re.ASCII)
_TIME_RX = re.compile(r"([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))", re.ASCII)


def _is_date(s: str) -> bool:
    """Go ``time.Parse("2006-01-02")``: the day must exist in that month."""
    m = _DATE_RX.fullmatch(s)
    if m is None:
        return False
    year, month, day = int(m[1]), int(m[2]), int(m[3])
    if not 1 <= month <= 12:
        return False
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    days = [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1]
    return 1 <= day <= days


def _is_datetime(s: str) -> bool:
    """strfmt ``IsDateTime``: a date, a ``t``, then ``hh:mm:ss[.frac](z|±hh:mm)``, case-insensitively."""
    if len(s) < 4:
        return False
    parts = s.lower().split("t")
    if len(parts) < 2 or not _is_date(parts[0]):
        return False
    m = _TIME_RX.fullmatch(parts[1])
    return m is not None and m[1] <= "23" and m[2] <= "59" and m[3] <= "59"


def _ipv4_sloppy(s: str) -> bool:
    """``netutils.ParseIPSloppy`` for dotted quads: leading zeros are tolerated."""
    parts = s.split(".")
    return len(parts) == 4 and all(p.isascii() and p.isdigit() and int(p) <= 255 for p in parts)


def _ipv6(s: str) -> bool:
    if "%" in s:
        return False
    try:
        ipaddress.IPv6Address(s)
    except ValueError:
        return False
    return True


def _is_ipv4(s: str) -> bool:
    return (_ipv6(s) if ":" in s else _ipv4_sloppy(s)) and "." in s


def _is_ipv6(s: str) -> bool:
    return ":" in s and _ipv6(s)


def _is_cidr(s: str) -> bool:
    addr, slash, mask = s.partition("/")
    if not slash or not mask.isascii() or not mask.isdigit():
        return False
    if ":" in addr:
        return _ipv6(addr) and int(mask) <= 128
    return _ipv4_sloppy(addr) and int(mask) <= 32


def _is_mac(s: str) -> bool:
    """``net.ParseMAC``: 6, 8 or 20 octets as ``xx:xx``/``xx-xx`` or ``xxxx.xxxx``."""
    hexdigits = "0123456789abcdefABCDEF"
    if len(s) < 14:
        return False
    if s[2] in ":-":
        groups = s.split(s[2])
        return len(groups) in (6, 8, 20) and all(
            len(g) == 2 and all(c in hexdigits for c in g) for g in groups
        )
    if s[4] == ".":
        groups = s.split(".")
        return len(groups) * 2 in (6, 8, 20) and all(
            len(g) == 4 and all(c in hexdigits for c in g) for g in groups
        )
    return False


_HOSTNAME_RX = re.compile(
    r"([a-zA-Z0-9]((-?[a-zA-Z0-9]{0,62})?)|([a-zA-Z0-9](([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)(\.)){1,}([a-zA-Z]){2,63})",
    re.ASCII,
)


def _is_hostname(s: str) -> bool:
    """strfmt ``IsHostname``; Unicode letters and symbols (``\\p{L}``, ``\\p{S}``) are mapped onto ASCII
    stand-ins because ``re`` has no property classes."""
    mapped = []
    for ch in s:
        if ch.isascii() and (ch.isalnum() or ch in "-."):
            mapped.append(ch)
            continue
        cat = unicodedata.category(ch)
        mapped.append("a" if cat.startswith("L") else "0" if cat.startswith("S") else ch)
    if _HOSTNAME_RX.fullmatch("".join(mapped)) is None:
        return False
    return len(s.encode()) <= 255 and all(len(p.encode()) <= 63 for p in s.split("."))


def _accept(_: str) -> bool:
    return True


_SSN = _fullmatch(r"\d{3}[- ]?\d{2}[- ]?\d{4}")
_SHORT_NAME = _fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_LONG_NAME = _fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


_FORMAT_CHECKS: dict[str, Callable[[str], bool]] = {
    "date": _is_date,
    "datetime": _is_datetime,
    "byte": _fullmatch(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})"),
    "uuid": _fullmatch(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}", re.I),
    "uuid3": _fullmatch(r"[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}", re.I),
    "uuid4": _fullmatch(r"[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}", re.I),
    "uuid5": _fullmatch(r"[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}", re.I),
    "ipv4": _is_ipv4,
    "ipv6": _is_ipv6,
    "cidr": _is_cidr,
    "mac": _is_mac,
    "hostname": _is_hostname,
    "hexcolor": _fullmatch(r"#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})"),
    "rgbcolor": _fullmatch(
        r"rgb\(\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*,\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*,"
        r"\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*\)"
    ),
    "ssn": lambda s: len(s) == 11 and _SSN(s),
    "bsonobjectid": _fullmatch(r"[0-9a-fA-F]{24}"),
    "k8sshortname": lambda s: len(s.encode()) <= 63 and _SHORT_NAME(s),
    "k8slongname": lambda s: len(s.encode()) <= 253 and _LONG_NAME(s),
    "password": _accept,
    "uri": _accept,
    "email": _accept,
    "isbn": _accept,
    "isbn10": _accept,
    "isbn13": _accept,
    "creditcard": _accept,
    "duration": _accept,
}


# -- embedded resources and list types ------------------------------------------------------------------------

# metav1.ObjectMeta's JSON fields (clusterName is a tombstone upstream, so it is unknown).
_OBJECT_META_FIELDS = frozenset(
    [
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    ]
)
_META_STRINGS = frozenset(["name", "generateName", "namespace", "selfLink", "uid", "resourceVersion"])
_META_KEYS = frozenset(("apiVersion", "kind", "metadata"))
_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?", re.ASCII)
_DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (e.g. 'my-name' or 'abc-123', regex used for "
    "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)


def _go_json_kind(v: Any) -> str:
    """The JSON kind ``encoding/json`` names in an ``UnmarshalTypeError``."""
    return {"bool": "bool", "int": "number", "float": "number", "string": "string", "slice": "array"}.get(
        _kind(v), "object"
    )


def _embedded_errors(path: str, obj: Mapping[str, Any]) -> list[Cause]:
    """``objectmeta.validateEmbeddedResource``: apiVersion and kind required, metadata decodable."""
    out: list[Cause] = []
    if "apiVersion" not in obj:
        out.append(errors.field_required(_child(path, "apiVersion")))
    if "kind" not in obj:
        out.append(errors.field_required(_child(path, "kind")))
    if "apiVersion" in obj:
        v = obj["apiVersion"]
        field = _child(path, "apiVersion")
        if not isinstance(v, str):
            out.append(_invalid(field, v, "must be a string"))
        elif not v:
            out.append(_invalid(field, v, "must not be empty"))
        elif v != "/" and v.count("/") > 1:
            out.append(_invalid(field, v, f"unexpected GroupVersion string: {v}"))
    if "kind" in obj:
        v = obj["kind"]
        field = _child(path, "kind")
        if not isinstance(v, str):
            out.append(_invalid(field, v, "must be a string"))
        elif not v:
            out.append(_invalid(field, v, "must not be empty"))
        else:
            problems = []
            if len(v.lower().encode()) > 63:
                problems.append("must be no more than 63 characters")
            if _DNS1035.fullmatch(v.lower()) is None:
                problems.append(_DNS1035_MSG)
            if problems:
                out.append(
                    _invalid(
                        field, v, "may have mixed case, but should otherwise match: " + ",".join(problems)
                    )
                )
    if "metadata" in obj:
        meta = obj["metadata"]
        field = _child(path, "metadata")
        if meta is not None and not isinstance(meta, Mapping):
            kind = _go_json_kind(meta)
            out.append(
                _invalid(field, meta, f"json: cannot unmarshal {kind} into Go value of type v1.ObjectMeta")
            )
        elif isinstance(meta, Mapping):
            for name in sorted(_META_STRINGS & set(meta)):
                val = meta[name]
                if val is not None and not isinstance(val, str):
                    detail = (
                        f"json: cannot unmarshal {_go_json_kind(val)} into Go struct field ObjectMeta.{name} "
                        "of type string"
                    )
                    out.append(_invalid(field, meta, detail))
                    break
    return out


class _Walker:
    """Structural traversals that follow properties, additionalProperties and items only."""

    def __init__(self, ctx: _Ctx) -> None:
        self.ctx = ctx

    def embedded(self, x: Any, schema: Schema | None, path: str, out: list[Cause]) -> None:
        """``objectmeta.Validate`` with ``isResourceRoot=false``."""
        if schema is None:
            return
        n = self.ctx.node(schema)
        if isinstance(x, Mapping):
            if n.embedded:
                out.extend(_embedded_errors(path, x))
            for k in sorted(x, key=str):
                if k in n.properties:
                    self.embedded(x[k], n.properties[k], _child(path, k), out)
                elif n.additional_schema is not None:
                    self.embedded(x[k], n.additional_schema, _key(path, str(k)), out)
        elif isinstance(x, list | tuple):
            for i, item in enumerate(x):
                self.embedded(item, n.items, _key(path, str(i)), out)

    def list_types(self, x: Any, schema: Schema | None, path: str, out: list[Cause]) -> None:
        """``listtype.ValidateListSetsAndMaps``: set items and map keys must be unique."""
        if schema is None:
            return
        n = self.ctx.node(schema)
        if isinstance(x, Mapping):
            keys = sorted(x, key=str)
            if n.additional_schema is not None:
                for k in keys:
                    self.list_types(x[k], n.additional_schema, _key(path, str(k)), out)
            for k in keys:
                if k in n.properties:
                    self.list_types(x[k], n.properties[k], _child(path, k), out)
        elif isinstance(x, list | tuple):
            if n.list_type == "set":
                out.extend(_duplicate(_key(path, str(i)), x[i]) for i in _non_unique(x))
            elif n.list_type == "map":
                out.extend(_list_map_errors(path, n.list_map_keys, x))
            if n.items is not None:
                for i, item in enumerate(x):
                    self.list_types(item, n.items, _key(path, str(i)), out)


_UNSPECIFIED = object()


def _set_key(v: Any) -> Any:
    """Go map-key identity for scalars (type-sensitive), JSON text for compound values."""
    if v is _UNSPECIFIED:
        return ("unspecified",)
    if isinstance(v, Mapping | list | tuple):
        return ("json", _go_json(v))
    return (_kind(v), v) if v is not None else ("null",)


def _non_unique(items: Sequence[Any]) -> list[int]:
    """Indices of the second occurrence of each repeated value (``validateListSet``)."""
    seen: dict[Any, int] = {}
    out: list[int] = []
    for i, v in enumerate(items):
        key = _set_key(v)
        times = seen.get(key, 0)
        seen[key] = times + 1
        if times == 1:
            out.append(i)
    return out


def _list_map_errors(path: str, key_fields: tuple[str, ...], items: Sequence[Any]) -> list[Cause]:
    for i, x in enumerate(items):
        if x is not None and not isinstance(x, Mapping):
            return [_invalid(_key(path, str(i)), x, "must be an object for an array of list-type map")]
    if len(items) <= 1:
        return []
    if len(key_fields) == 1:
        field = key_fields[0]
        single = [x[field] if isinstance(x, Mapping) and field in x else _UNSPECIFIED for x in items]
        return [
            _duplicate(_key(path, str(i)), {} if single[i] is _UNSPECIFIED else {field: single[i]})
            for i in _non_unique(single)
        ]
    composite = [{f: x[f] for f in key_fields if f in x} if isinstance(x, Mapping) else {} for x in items]
    return [_duplicate(_key(path, str(i)), composite[i]) for i in _non_unique(composite)]


# -- pruning --------------------------------------------------------------------------------------------------


class _Pruner:
    """``pruning.PruneWithOptions`` plus ``objectmeta.Coerce``'s dropping of unknown ObjectMeta fields.

    With ``mutate=False`` it only records what it would remove (``fieldValidation=Strict|Warn``)."""

    def __init__(self, ctx: _Ctx, mutate: bool) -> None:
        self.ctx = ctx
        self.mutate = mutate
        self.paths: list[str] = []
        self.root_meta_paths: list[str] = []
        self.meta_paths: list[str] = []
        self.changed = False

    def prune(self, x: Any, schema: Schema | None, path: str, embedded: bool = False) -> None:
        n = self.ctx.node(schema) if schema is not None else None
        if n is not None and n.preserve:
            self._skip(x, n, path, embedded)
            return
        if isinstance(x, dict):
            if n is None:
                for k in list(x):
                    self._unknown(x, k, path)
                return
            for k in list(x):
                if (embedded or n.embedded) and k in _META_KEYS:
                    continue
                if k in n.properties:
                    self.prune(x[k], n.properties[k], _child(path, k))
                elif n.additional_set:
                    self.prune(x[k], n.additional_schema, _child(path, k))
                elif k not in _META_KEYS or path:
                    self._unknown(x, k, path)
                elif self.mutate:
                    del x[k]
                    self.changed = True
        elif isinstance(x, list):
            items = n.items if n is not None else None
            for i, item in enumerate(x):
                self.prune(item, items, f"{path}[{i}]")

    def _skip(self, x: Any, n: _Node, path: str, embedded: bool) -> None:
        """Under ``x-kubernetes-preserve-unknown-fields`` unknown keys stay; known ones are still pruned."""
        if isinstance(x, dict):
            for k in list(x):
                if (embedded or n.embedded) and k in _META_KEYS:
                    continue
                if k in n.properties:
                    self.prune(x[k], n.properties[k], _child(path, k))
                elif n.additional_set:
                    self.prune(x[k], n.additional_schema, _child(path, k))
        elif isinstance(x, list) and n.items is not None:
            # upstream applies skipPrune (not prune) to the items, whatever the items schema says
            items = self.ctx.node(n.items)
            for i, item in enumerate(x):
                self._skip(item, items, f"{path}[{i}]", False)

    def _unknown(self, x: dict[str, Any], k: str, path: str) -> None:
        self.paths.append(_child(path, str(k)))
        if self.mutate:
            del x[k]
            self.changed = True

    def object_meta(self, meta: Any, path: str, clean_nulls: bool, into: list[str]) -> None:
        """Unknown top-level ObjectMeta keys go (the JSON round trip through ``metav1.ObjectMeta``)."""
        if not isinstance(meta, dict):
            return
        prefix = _child(path, "metadata")
        for k in sorted(meta, key=str):
            if k not in _OBJECT_META_FIELDS:
                into.append(f"{prefix}.{k}")
                if self.mutate:
                    del meta[k]
                    self.changed = True
            elif clean_nulls and self.mutate and meta[k] is None:
                del meta[k]
                self.changed = True

    def coerce(self, x: Any, schema: Schema | None, path: str) -> None:
        """``objectmeta.CoerceWithOptions`` with ``isResourceRoot=false``: metadata of embedded resources."""
        if schema is None:
            return
        n = self.ctx.node(schema)
        if isinstance(x, dict):
            for k in sorted(x, key=str):
                if k not in x:
                    continue
                if n.embedded and k == "metadata":
                    if x[k] is None and self.mutate:
                        x[k] = {}
                        self.changed = True
                    self.object_meta(x[k], path, clean_nulls=True, into=self.meta_paths)
                if k in n.properties:
                    self.coerce(x[k], n.properties[k], _child(path, k))
                elif n.additional_set:
                    self.coerce(x[k], n.additional_schema, _key(path, str(k)))
        elif isinstance(x, list):
            for i, item in enumerate(x):
                self.coerce(item, n.items, _key(path, str(i)))

    def prune_nulls(self, x: Any, schema: Schema | None) -> None:
        """``PruneNonNullableNullsWithoutDefaults``: a null that could not be valid and has no default goes."""
        n = self.ctx.node(schema) if schema is not None else None
        if isinstance(x, dict):
            for k in list(x):
                sub = None
                if n is not None:
                    sub = n.properties.get(k) if k in n.properties else n.additional_schema
                if x[k] is None and sub is not None:
                    sn = self.ctx.node(sub)
                    if not sn.nullable and sn.default is None:
                        del x[k]
                        self.changed = True
                        continue
                self.prune_nulls(x[k], sub)
        elif isinstance(x, list):
            items = n.items if n is not None else None
            for item in x:
                self.prune_nulls(item, items)


_EMBEDDED: dict[int, tuple[Schema, bool]] = {}


def _has_embedded(ctx: _Ctx, schema: Schema) -> bool:
    """Whether ``x-kubernetes-embedded-resource`` occurs anywhere below ``schema`` (memoized per schema).

    Only then can metadata coercion change anything, and it is a full walk of the object; no built-in
    kind and few CRDs have embedded resources, so most writes skip it.
    """
    hit = _EMBEDDED.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    seen: set[int] = set()

    def walk(sub: Schema) -> bool:
        if id(sub) in seen:
            return False
        seen.add(id(sub))
        n = ctx.node(sub)
        if n.embedded:
            return True
        children = [*n.properties.values(), *n.all_of, *n.any_of, *n.one_of]
        children += [c for c in (n.additional_schema, n.items, n.not_) if c is not None]
        return any(walk(c) for c in children)

    found = walk(schema)
    if len(_EMBEDDED) > 4096:
        _EMBEDDED.clear()
    _EMBEDDED[id(schema)] = (schema, found)
    return found


def _may_hold_null(obj: Any) -> bool:
    """A cheap pre-check before walking for nulls: compact JSON shows a null value as ``:null``,
    ``[null`` or ``,null`` (a string containing those only costs the walk)."""
    try:
        text = orjson.dumps(obj)
    except (TypeError, orjson.JSONEncodeError):
        return True  # e.g. an integer beyond 64 bits: walk the slow way
    return b":null" in text or b"[null" in text or b",null" in text


def _run_pruner(pruner: _Pruner, obj: Any, schema: Schema, is_resource_root: bool) -> None:
    if is_resource_root and isinstance(obj, dict) and "metadata" in obj:
        pruner.object_meta(obj["metadata"], "", clean_nulls=False, into=pruner.root_meta_paths)
    pruner.prune(obj, schema, "", embedded=is_resource_root)
    if _has_embedded(pruner.ctx, schema):
        pruner.coerce(obj, schema, "")


# -- public API -----------------------------------------------------------------------------------------------


def validate(
    obj: Any, schema: Schema, *, components: Components | None = None, path: str = ""
) -> list[Cause]:
    """Validate ``obj`` against ``schema`` the way a CR is validated upstream.

    Returns kube-openapi's errors first, then embedded-resource errors (``apiVersion``/``kind`` required), then
    ``x-kubernetes-list-type`` duplicates. ``path`` prefixes every cause's field (``status`` when validating the
    status subresource against the status schema); messages keep the schema-relative name, as upstream does.
    Map entries read ``spec.m.key`` in kube-openapi errors but ``spec.m[key]`` in list-type errors, as upstream.
    """
    ctx = _context(components)
    result = _Validator(ctx).value(obj, schema, "")
    causes = [_to_cause(e, path) for e in result.errors]
    walker = _Walker(ctx)
    walker.embedded(obj, schema, path, causes)
    walker.list_types(obj, schema, path, causes)
    return causes


def prune(
    obj: Any, schema: Schema, *, components: Components | None = None, is_resource_root: bool = True
) -> list[str]:
    """Remove, in place, fields the schema does not specify; return their paths as ``.spec.foo``.

    At the resource root and in embedded resources ``apiVersion``, ``kind`` and ``metadata`` are kept and only
    unknown ObjectMeta keys are dropped from ``metadata``. Nulls that a non-nullable field without a default
    could never accept are dropped too (not listed), as upstream does right after pruning. Paths come sorted:
    root metadata, then schema fields, then embedded metadata.
    """
    ctx = _context(components)
    memo_key: tuple[Any, ...] | None = None
    if not _has_embedded(ctx, schema):
        try:
            memo_key = (id(schema), id(components), is_resource_root, _prune_shape(obj))
        except RecursionError:
            memo_key = None
        if memo_key is not None:
            hit = _CLEAN_SHAPES.get(memo_key)
            if hit is not None and hit[0] is schema and hit[1] is components:
                return []
    pruner = _Pruner(ctx, mutate=True)
    _run_pruner(pruner, obj, schema, is_resource_root)
    if _may_hold_null(obj):
        pruner.prune_nulls(obj, schema)
    if memo_key is not None and not pruner.changed:
        if len(_CLEAN_SHAPES) >= _CLEAN_SHAPES_MAX:
            _CLEAN_SHAPES.clear()
        _CLEAN_SHAPES[memo_key] = (schema, components)
    return ["." + p for p in _ordered(pruner)]


# Whether pruning removes anything depends only on an object's shape: its keys, which containers it
# has, and where its nulls are (never on other scalar values). Shapes seen to prune to nothing skip the
# walk; the values keep the schemas alive so their ids stay unique. Embedded resources are left out:
# their metadata coercion is not worth modelling here.
_CLEAN_SHAPES: dict[tuple[Any, ...], tuple[Schema, Components | None]] = {}
_CLEAN_SHAPES_MAX = 4096


def _prune_shape(value: Any) -> Any:
    """Keys and containers of ``value``, with nulls marked; maps start with ``{`` and lists with ``[``."""
    if isinstance(value, dict):
        parts: list[Any] = ["{"]
        for k, v in value.items():
            if isinstance(v, dict | list):
                parts.append((k, _prune_shape(v)))
            elif v is None:
                parts.append((k, None))
            else:
                parts.append(k)
        return tuple(parts)
    if isinstance(value, list):
        return ("[", *(_prune_shape(v) for v in value))
    return None if value is None else "s"


def unknown_fields(
    obj: Any, schema: Schema, *, components: Components | None = None, is_resource_root: bool = True
) -> list[str]:
    """Paths :func:`prune` would remove, without the leading dot (``spec.foo``), for strict decoding."""
    pruner = _Pruner(_context(components), mutate=False)
    _run_pruner(pruner, obj, schema, is_resource_root)
    return _ordered(pruner)


def _ordered(pruner: _Pruner) -> list[str]:
    return sorted(pruner.root_meta_paths) + sorted(pruner.paths) + sorted(pruner.meta_paths)


def apply_defaults(obj: Any, schema: Schema, *, components: Components | None = None) -> None:
    """Fill ``default`` values into present objects and arrays (``defaulting.Default``).

    A missing property, or a null one that is not nullable, gets a deep copy of its default; array items and
    map values that are non-nullable nulls get their schema's default. Defaults are pruned against their own
    schema first, as upstream prunes them when the CRD is stored. Defaulted values are defaulted further.
    """
    ctx = _context(components)
    _default(ctx, obj, schema, {})


def _pruned_default(ctx: _Ctx, schema: Schema, cache: dict[int, Any]) -> Any:
    key = id(schema)
    if key not in cache:
        value = copy.deepcopy(ctx.node(schema).default)
        pruner = _Pruner(ctx, mutate=True)
        pruner.prune(value, schema, "")
        pruner.coerce(value, schema, "")
        cache[key] = value
    return copy.deepcopy(cache[key])


def _default(ctx: _Ctx, x: Any, schema: Schema | None, cache: dict[int, Any]) -> None:
    if schema is None:
        return
    n = ctx.node(schema)
    if isinstance(x, dict):
        for k, sub in n.properties.items():
            sn = ctx.node(sub)
            if sn.default is None:
                continue
            if k not in x or (x[k] is None and not sn.nullable):
                if n.embedded and k in _META_KEYS:
                    x[k] = copy.deepcopy(sn.default)
                else:
                    x[k] = _pruned_default(ctx, sub, cache)
        for k in list(x):
            if k in n.properties:
                _default(ctx, x[k], n.properties[k], cache)
            elif n.additional_schema is not None:
                sub = n.additional_schema
                if x[k] is None and not ctx.node(sub).nullable:
                    x[k] = _pruned_default(ctx, sub, cache)
                _default(ctx, x[k], sub, cache)
    elif isinstance(x, list) and n.items is not None:
        for i in range(len(x)):
            if x[i] is None and not ctx.node(n.items).nullable:
                x[i] = _pruned_default(ctx, n.items, cache)
            _default(ctx, x[i], n.items, cache)


# -- structural schema checks ---------------------------------------------------------------------------------

_ROOT, _ITEM, _FIELD = "root", "item", "field"
_EMPTY_TYPE = {
    _ROOT: "must not be empty at the root",
    _ITEM: "must not be empty for specified array items",
    _FIELD: "must not be empty for specified object fields",
}
_OPENAPI_V3_TYPES = ("array", "boolean", "integer", "number", "object", "string")
_INT_OR_STRING_ANY_OF = [{"type": "integer"}, {"type": "string"}]


def check_structural(schema: Schema, *, path: str = "") -> list[Cause]:
    """Structural-schema and CRD-schema checks with upstream wording, sorted like ``ValidateStructural``.

    ``path`` is where the schema sits, e.g. ``spec.versions[0].schema.openAPIV3Schema``. Covers: ``type`` on
    every specified level (unless int-or-string or preserve-unknown-fields), no ``$ref`` and other unsupported
    keywords, root ``metadata`` restricted to ``name``/``generateName``, junctors (allOf/anyOf/oneOf/not) free
    of structure, embedded-resource and list-type rules, and regular expressions that compile.
    """
    out: list[Cause] = []
    _invariants(schema, _ROOT, path, out)
    _completeness(schema, schema, path, path, out)
    _crd_checks(schema, path, out)
    if schema.get("nullable") is True:
        out.append(errors.field_forbidden(_child(path, "nullable"), "nullable cannot be true at the root"))
    unique: dict[tuple[str, str, str], Cause] = {}
    for c in out:
        unique.setdefault((c.get("field", ""), c.get("reason", ""), c.get("message", "")), c)
    return sorted(unique.values(), key=lambda c: f"{c.get('field', '')}: {c.get('message', '')}")


def _props(s: Schema) -> Mapping[str, Any]:
    p = s.get("properties")
    return p if isinstance(p, Mapping) else {}


def _type_of(s: Any) -> str:
    t = s.get("type") if isinstance(s, Mapping) else None
    return t if isinstance(t, str) else ""


def _invariants(s: Schema, level: str, path: str, out: list[Cause]) -> None:
    """``validateStructuralInvariants`` over the structural part (properties, items, additionalProperties)."""
    t = _type_of(s)
    props = _props(s)
    items = s.get("items")
    if t == "array" and not isinstance(items, Mapping):
        out.append(errors.field_required(_child(path, "items"), "must be specified"))
    if isinstance(items, Mapping):
        _invariants(items, _ITEM, _child(path, "items"), out)
    for k, v in props.items():
        if isinstance(v, Mapping):
            _invariants(v, _FIELD, _key(_child(path, "properties"), str(k)), out)
    additional = s.get("additionalProperties")
    if isinstance(additional, bool | Mapping):
        if level == _ROOT:
            out.append(
                errors.field_forbidden(_child(path, "additionalProperties"), "must not be used at the root")
            )
        if isinstance(additional, Mapping):
            _invariants(additional, _FIELD, _child(path, "additionalProperties"), out)
    int_or_string = s.get("x-kubernetes-int-or-string") is True
    preserve = s.get("x-kubernetes-preserve-unknown-fields") is True
    embedded = s.get("x-kubernetes-embedded-resource") is True
    if int_or_string and preserve:
        field = _child(path, "x-kubernetes-preserve-unknown-fields")
        out.append(_invalid(field, True, "must be false if x-kubernetes-int-or-string is true"))
    if int_or_string and embedded:
        field = _child(path, "x-kubernetes-embedded-resource")
        out.append(_invalid(field, True, "must be false if x-kubernetes-int-or-string is true"))
    all_of = s.get("allOf")
    skip_first = (
        isinstance(all_of, list)
        and bool(all_of)
        and isinstance(all_of[0], Mapping)
        and all_of[0].get("anyOf") == _INT_OR_STRING_ANY_OF
    )
    _value_validation(s, s.get("anyOf") == _INT_OR_STRING_ANY_OF, skip_first, level, path, out)
    if embedded and t != "object":
        detail = "must be object if x-kubernetes-embedded-resource is true"
        field = _child(path, "type")
        out.append(errors.field_required(field, detail) if not t else _invalid(field, t, detail))
    elif not t and not int_or_string and not preserve:
        out.append(errors.field_required(_child(path, "type"), _EMPTY_TYPE[level]))
    if embedded and isinstance(additional, bool | Mapping):
        field = _child(path, "additionalProperties")
        out.append(errors.field_forbidden(field, "must not be used if x-kubernetes-embedded-resource is set"))
    if level == _ROOT and t and t != "object":
        out.append(_invalid(_child(path, "type"), t, "must be object at the root"))
    check_meta = level == _ROOT or embedded
    if check_meta:
        for name in ("kind", "apiVersion"):
            if name in props and _type_of(props[name]) != "string":
                field = _child(_key(_child(path, "properties"), name), "type")
                out.append(_invalid(field, _type_of(props[name]), "must be string"))
    if isinstance(props.get("metadata"), Mapping):
        _metadata_invariants(
            props["metadata"], check_meta, level, _key(_child(path, "properties"), "metadata"), out
        )
    if embedded and not preserve and not props:
        detail = "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields"
        out.append(errors.field_required(_child(path, "properties"), detail))


def _metadata_invariants(m: Schema, check_meta: bool, level: str, path: str, out: list[Cause]) -> None:
    t = _type_of(m)
    if check_meta and t != "object":
        out.append(_invalid(_child(path, "type"), t, "must be object"))
    if level != _ROOT:
        return
    rest = {k: v for k, v in m.items() if k not in ("type", "default") and v not in (None, False, "", [], {})}
    names = set(_props(m))
    if names and names <= {"name", "generateName"}:
        rest.pop("properties", None)
    if rest:
        detail = (
            "must not specify anything other than name and generateName, but metadata is implicitly specified"
        )
        out.append(errors.field_forbidden(path, detail))


def _value_validation(
    v: Schema, skip_any_of: bool, skip_first_all_of_any_of: bool, level: str, path: str, out: list[Cause]
) -> None:
    if not skip_any_of:
        for i, sub in enumerate(_schemas(v.get("anyOf"))):
            _nested(sub, False, False, level, _key(_child(path, "anyOf"), str(i)), out)
    for i, sub in enumerate(_schemas(v.get("allOf"))):
        _nested(
            sub, skip_first_all_of_any_of and i == 0, False, level, _key(_child(path, "allOf"), str(i)), out
        )
    for i, sub in enumerate(_schemas(v.get("oneOf"))):
        _nested(sub, False, False, level, _key(_child(path, "oneOf"), str(i)), out)
    if isinstance(v.get("not"), Mapping):
        _nested(v["not"], False, False, level, _child(path, "not"), out)
    pattern = v.get("pattern")
    if isinstance(pattern, str) and pattern:
        compiled = _compile_go_regex(pattern)
        if isinstance(compiled, str):
            detail = f"must be a valid regular expression, but isn't: {compiled}"
            out.append(_invalid(_child(path, "pattern"), pattern, detail))


_NESTED_FORBIDDEN: tuple[tuple[str, str], ...] = (
    ("default", "must be undefined to be structural"),
    ("title", "must be empty to be structural"),
    ("description", "must be empty to be structural"),
    ("nullable", "must be false to be structural"),
    ("x-kubernetes-preserve-unknown-fields", "must be false to be structural"),
    ("x-kubernetes-embedded-resource", "must be false to be structural"),
    ("x-kubernetes-int-or-string", "must be false to be structural"),
    ("x-kubernetes-list-map-keys", "must be empty to be structural"),
    ("x-kubernetes-list-type", "must be undefined to be structural"),
    ("x-kubernetes-map-type", "must be undefined to be structural"),
    ("x-kubernetes-validations", "must be empty to be structural"),
)


def _nested(
    v: Schema, skip_any_of: bool, skip_all_of_any_of: bool, level: str, path: str, out: list[Cause]
) -> None:
    """``validateNestedValueValidation``: junctor branches may only hold value validations."""
    _value_validation(v, skip_any_of, skip_all_of_any_of, level, path, out)
    if isinstance(v.get("items"), Mapping):
        _nested(v["items"], False, False, level, _child(path, "items"), out)
    for k, sub in _props(v).items():
        if isinstance(sub, Mapping):
            _nested(sub, False, False, _FIELD, _key(_child(path, "properties"), str(k)), out)
    if _type_of(v):
        out.append(errors.field_forbidden(_child(path, "type"), "must be empty to be structural"))
    additional = v.get("additionalProperties")
    if isinstance(additional, Mapping) or additional is True:
        out.append(
            errors.field_forbidden(_child(path, "additionalProperties"), "must be undefined to be structural")
        )
    for key, detail in _NESTED_FORBIDDEN:
        if v.get(key) not in (None, False, "", [], {}):
            out.append(errors.field_forbidden(_child(path, key), detail))
    if "metadata" in _props(v):
        field = _key(_child(path, "properties"), "metadata")
        out.append(errors.field_forbidden(field, "must not be specified in a nested context"))


def _completeness(v: Schema, s: Schema | None, s_path: str, v_path: str, out: list[Cause]) -> None:
    """``validateValueValidationCompleteness``: junctors may only talk about structurally specified fields."""
    if s is None:
        out.append(errors.field_required(s_path, f"because it is defined in {v_path}"))
        return
    if isinstance(v.get("not"), Mapping):
        _nested_completeness(v["not"], s, s_path, _child(v_path, "not"), out)
    for junctor in ("allOf", "anyOf", "oneOf"):
        for i, sub in enumerate(_schemas(v.get(junctor))):
            _nested_completeness(sub, s, s_path, _key(_child(v_path, junctor), str(i)), out)


def _nested_completeness(v: Schema, s: Schema | None, s_path: str, v_path: str, out: list[Cause]) -> None:
    if s is None:
        out.append(errors.field_required(s_path, f"because it is defined in {v_path}"))
        return
    _completeness(v, s, s_path, v_path, out)
    if isinstance(v.get("items"), Mapping):
        items = s.get("items")
        s_items = items if isinstance(items, Mapping) else None
        _nested_completeness(v["items"], s_items, _child(s_path, "items"), _child(v_path, "items"), out)
    s_props = _props(s)
    for k, sub in _props(v).items():
        if not isinstance(sub, Mapping):
            continue
        s_field = _key(_child(s_path, "properties"), str(k))
        v_field = _key(_child(v_path, "properties"), str(k))
        if k not in s_props or not isinstance(s_props[k], Mapping):
            out.append(errors.field_required(s_field, f"because it is defined in {v_field}"))
        else:
            _nested_completeness(sub, s_props[k], s_field, v_field, out)


def _crd_checks(s: Schema, path: str, out: list[Cause]) -> None:
    """The keyword checks of ``ValidateCustomResourceDefinitionOpenAPISchema`` that apply to any level."""
    t = s.get("type")
    if isinstance(t, str) and t and t not in _OPENAPI_V3_TYPES:
        out.append(_not_supported(_child(path, "type"), t, _OPENAPI_V3_TYPES))
    for key, detail in (
        ("id", "id is not supported"),
        ("additionalItems", "additionalItems is not supported"),
        ("patternProperties", "patternProperties is not supported"),
        ("definitions", "definitions is not supported"),
        ("dependencies", "dependencies is not supported"),
        ("$ref", "$ref is not supported"),
    ):
        if s.get(key) not in (None, "", {}):
            out.append(errors.field_forbidden(_child(path, key), detail))
    if t == "null":
        detail = "type cannot be set to null, use nullable as an alternative"
        out.append(errors.field_forbidden(_child(path, "type"), detail))
    items = s.get("items")
    if isinstance(items, list) and items:
        out.append(
            errors.field_forbidden(_child(path, "items"), "items must be a schema object and not an array")
        )
    if s.get("uniqueItems") is True:
        detail = "uniqueItems cannot be set to true since the runtime complexity becomes quadratic"
        out.append(errors.field_forbidden(_child(path, "uniqueItems"), detail))
    props = _props(s)
    additional = s.get("additionalProperties")
    if props and (additional is False or isinstance(additional, Mapping)):
        detail = "additionalProperties and properties are mutual exclusive"
        out.append(errors.field_forbidden(_child(path, "additionalProperties"), detail))
    if isinstance(additional, Mapping):
        _crd_checks(additional, _child(path, "additionalProperties"), out)
    for k, sub in props.items():
        if isinstance(sub, Mapping):
            _crd_checks(sub, _key(_child(path, "properties"), str(k)), out)
    if isinstance(s.get("not"), Mapping):
        _crd_checks(s["not"], _child(path, "not"), out)
    for junctor in ("allOf", "oneOf", "anyOf"):
        for i, sub in enumerate(_schemas(s.get(junctor))):
            _crd_checks(sub, _key(_child(path, junctor), str(i)), out)
    if isinstance(items, Mapping):
        _crd_checks(items, _child(path, "items"), out)
    if s.get("x-kubernetes-preserve-unknown-fields") is False:
        field = _child(path, "x-kubernetes-preserve-unknown-fields")
        out.append(_invalid(field, False, "must be true or undefined"))
    _list_and_map_type_checks(s, path, out)


def _list_and_map_type_checks(s: Schema, path: str, out: list[Cause]) -> None:
    t = _type_of(s)
    type_field = _child(path, "type")
    map_type = s.get("x-kubernetes-map-type")
    if map_type is not None:
        if t != "object":
            detail = "must be object if x-kubernetes-map-type is specified"
            out.append(
                errors.field_required(type_field, detail) if not t else _invalid(type_field, t, detail)
            )
        if map_type not in ("atomic", "granular"):
            out.append(
                _not_supported(_child(path, "x-kubernetes-map-type"), map_type, ["atomic", "granular"])
            )
    list_type = s.get("x-kubernetes-list-type")
    if list_type is not None:
        if t != "array":
            detail = "must be array if x-kubernetes-list-type is specified"
            out.append(
                errors.field_required(type_field, detail) if not t else _invalid(type_field, t, detail)
            )
        if list_type not in ("atomic", "set", "map"):
            field = _child(path, "x-kubernetes-list-type")
            out.append(_not_supported(field, list_type, ["atomic", "set", "map"]))
    keys_raw = s.get("x-kubernetes-list-map-keys")
    keys = [str(k) for k in keys_raw] if isinstance(keys_raw, list) else []
    keys_field = _child(path, "x-kubernetes-list-map-keys")
    if keys:
        detail = "must be map if x-kubernetes-list-map-keys is non-empty"
        field = _child(path, "x-kubernetes-list-type")
        if list_type is None:
            out.append(errors.field_required(field, detail))
        elif list_type != "map":
            out.append(_invalid(field, list_type, detail))
    if list_type != "map":
        return
    if not keys:
        out.append(errors.field_required(keys_field, "must not be empty if x-kubernetes-list-type is map"))
    items = s.get("items")
    if items is None:
        out.append(
            errors.field_required(
                _child(path, "items"), "must have a schema if x-kubernetes-list-type is map"
            )
        )
        return
    if not isinstance(items, Mapping):
        return
    items_type = _type_of(items)
    if items_type != "object":
        detail = "must be object if parent array's x-kubernetes-list-type is map"
        out.append(_invalid(_child(_child(path, "items"), "type"), items_type, detail))
        return
    item_props = _props(items)
    seen: set[str] = set()
    for k in keys:
        if k in item_props:
            if _type_of(item_props[k]) in ("array", "object"):
                field = _child(_key(_child(_child(path, "items"), "properties"), k), "type")
                # upstream reports the items' type here, not the key property's
                detail = "must be a scalar type if parent array's x-kubernetes-list-type is map"
                out.append(_invalid(field, items_type, detail))
        else:
            out.append(_invalid(keys_field, keys, "entries must all be names of item properties"))
        if k in seen:
            out.append(_invalid(keys_field, keys, "must not contain duplicate entries"))
        seen.add(k)


# -- strict decoding ------------------------------------------------------------------------------------------


def strict_errors(unknown: Iterable[str], duplicates: Iterable[str] = ()) -> list[str]:
    """``sigs.k8s.io/json`` strict errors (duplicates first, as the decoder reports them before the schema
    pass): also the text of each ``fieldValidation=Warn`` warning."""
    return [f"duplicate field {_go_quote(d)}" for d in duplicates] + [
        f"unknown field {_go_quote(u)}" for u in unknown
    ]


def strict_decoding_message(
    kind: str, version: str, unknown: Sequence[str], duplicates: Sequence[str] = ()
) -> str:
    """``Widget in version "v1" cannot be handled as a Widget: strict decoding error: unknown field "spec.foo"``."""
    joined = ", ".join(strict_errors(unknown, duplicates))
    return f"{kind} in version {_go_quote(version)} cannot be handled as a {kind}: strict decoding error: {joined}"


def strict_decoding_error(
    kind: str, version: str, unknown: Sequence[str], duplicates: Sequence[str] = ()
) -> errors.StatusError:
    """The 400 BadRequest that ``fieldValidation=Strict`` answers with."""
    return errors.bad_request(strict_decoding_message(kind, version, unknown, duplicates))
