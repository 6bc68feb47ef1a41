"""CEL for Kubernetes admission policies: compile once, evaluate many times, with Kubernetes' libraries.

:func:`compile` turns an expression and the names of the variables it may use into a :class:`Program`;
``Program.evaluate`` takes an :class:`Activation` (or a plain mapping) of JSON-shaped Python values and
returns a JSON-shaped Python value, or raises :class:`CELError`. Compiled programs are cached (LRU by
expression and declared variables), so callers compile on every request without paying for it.

The engine is ``cel-expr-python`` (Google's cel-cpp). It provides the core language (macros, ``has``,
``matches`` with RE2, timestamps and durations, heterogeneous numeric comparisons), the strings extension
(``charAt``, ``indexOf``, ``lastIndexOf``, ``lowerAscii``, ``upperAscii``, ``replace``, ``split``,
``substring``, ``trim``, ``join``, ``format``, ``strings.quote``, ``reverse``) and optional types
(``.?``, ``[?``, ``optional.of/none/ofNonZeroValue``, ``hasValue``, ``value``, ``orValue``, ``or``).

Implemented here, as Python functions registered with the engine, following k8s.io/apiserver
``pkg/cel/library`` (messages included):

* lists: ``isSorted``, ``sum``, ``min``, ``max``, ``indexOf``, ``lastIndexOf`` on lists, and cel-go's
  lists extension v3 as enabled since Kubernetes 1.34 (``distinct``, ``flatten``, ``reverse``, ``slice``,
  ``sort``, ``lists.range``; not ``sortBy``, ``first``, ``last``);
* regex: ``find``, ``findAll`` (Python ``re``; the engine's ``matches`` is RE2);
* sets: ``sets.contains``, ``sets.intersects``, ``sets.equivalent``;
* quantity: ``quantity``, ``isQuantity``, ``sign``, ``isGreaterThan``, ``isLessThan``, ``compareTo``,
  ``add``, ``sub``, ``asInteger``, ``isInteger``, ``asApproximateFloat`` (``resource.ParseQuantity`` ported);
* url: ``url``, ``isURL``, ``getScheme``, ``getHost``, ``getHostname``, ``getPort``, ``getEscapedPath``,
  ``getQuery`` (Go ``net/url`` parsing rules, the common cases);
* ip and cidr: ``ip``, ``isIP``, ``ip.isCanonical``, ``family``, ``isUnspecified``, ``isLoopback``,
  ``isLinkLocalMulticast``, ``isLinkLocalUnicast``, ``isGlobalUnicast``, ``cidr``, ``isCIDR``,
  ``containsIP``, ``containsCIDR``, ``ip()`` of a CIDR, ``prefixLength``, ``masked``, ``string()``;
* semver: ``semver``, ``isSemver`` (with the normalize flag), ``major``, ``minor``, ``patch``,
  ``compareTo``, ``isGreaterThan``, ``isLessThan``;
* authorizer: ``authorizer.path(p)``, ``.group(g).resource(r).subresource(s).namespace(ns).name(n)``,
  ``.fieldSelector``, ``.labelSelector``, ``.serviceAccount(ns, name)``, ``.check(verb)`` and the
  decision's ``allowed()``, ``reason()``, ``errored()``, ``error()``; ``authorizer.requestResource``.
  Checks call the :data:`AuthzCallback` of the :class:`Authorizer` in the activation.

Not available: timestamps and durations as results of the Python-implemented functions
(``[duration('1s')].sum()``; the engine cannot take them back from Python), the format library
(``format.dns1123Label()...`` returns optionals, which Python functions cannot build), cel-go's
two-variable comprehensions (the engine lacks them), type-checking against OpenAPI schemas (every
variable is ``dyn``) and cost budgets. There is no fallback engine: ``cel-python`` (celpy) cannot parse
``.?`` and would need every library rewritten against its own value types.

Engine limits handled here:

* Kubernetes' opaque types (Quantity, URL, IP, CIDR, Semver, the authorizer's values) are CEL maps with
  one marker key, because Python functions can only exchange plain values with the engine. ``==``
  therefore compares canonical forms (``quantity('1k') == quantity('1000')`` holds, as upstream), and
  ``type()`` of such a value is ``map``.
* cel-expr-python 0.1.3 hands ``None`` to Python without taking a reference; on CPython before 3.12 that
  would eventually free ``None`` and abort the process, so ``None`` is made immortal at import (as 3.12 does).
* It crashes converting an optional value nested in a map. Results are therefore converted lazily with a
  type check per element, and expressions that could put an optional inside a list or map *and* pass
  containers to a Python-implemented function are rejected at compile time.
* No cost budget or timeout: the engine exposes neither and evaluation cannot be interrupted. CEL has no
  unbounded loops, so cost is bounded by the expression and its input; policies are written by admins.
"""

from __future__ import annotations

import contextvars
import ctypes
import datetime
import decimal
import functools
import ipaddress
import re
import sys
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NoReturn

from cel_expr_python import cel as _cel
from cel_expr_python.ext import ext_optional, ext_strings

from vplane.kube.validation import dns1123_label, dns1123_subdomain, go_quote

# cel-expr-python returns Py_None without Py_INCREF (py_cel_value.cc, kNull); make None immortal as
# CPython 3.12 does, so the missing references can never bring its count to zero.
if sys.implementation.name == "cpython" and sys.version_info < (3, 12):  # pragma: no branch
    ctypes.c_ssize_t.from_address(id(None)).value += 1 << 60


class CELError(Exception):
    """A compile or evaluation error, with upstream-style text in :attr:`message`."""

    def __init__(self, message: str, *, expression: str, phase: Literal["compile", "runtime"]) -> None:
        super().__init__(message)
        self.message = message
        self.expression = expression
        self.phase = phase


class UnsupportedResult(CELError):
    """The value is fine inside CEL but cannot become a Python value (an optional, a CEL type)."""


# --- the authorizer -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AuthzCheck:
    """One ``check(verb)`` from a policy, in authorizer terms (upstream ``AttributesRecord``)."""

    verb: str
    resource_request: bool
    path: str = ""
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    field_selector: str = ""
    label_selector: str = ""
    service_account: tuple[str, str] | None = None
    """``(namespace, name)`` when the policy asked ``authorizer.serviceAccount(ns, name)``."""


@dataclass(frozen=True, slots=True)
class AuthzDecision:
    allowed: bool
    reason: str = ""
    error: str = ""


AuthzCallback = Callable[[AuthzCheck], AuthzDecision]


@dataclass(frozen=True, slots=True)
class RequestResource:
    """The request's own resource, for ``authorizer.requestResource``."""

    group: str
    resource: str
    subresource: str = ""
    namespace: str = ""
    name: str = ""


@dataclass(frozen=True, slots=True)
class Authorizer:
    """Value of the ``authorizer`` variable: checks go to ``check`` for the requesting user."""

    check: AuthzCallback
    request_resource: RequestResource | None = None


_CURRENT_AUTHZ: contextvars.ContextVar[AuthzCallback | None] = contextvars.ContextVar(
    "vplane_cel_authorizer", default=None
)

# --- helpers for the Python-implemented functions ----------------------------------------------------


class _Fail(Exception):
    """Raised by a library function; the engine turns it into a CEL error value with this text."""


def _no_overload() -> NoReturn:
    raise _Fail("no such overload")


_Q = "@kubernetes.Quantity"
_URL = "@kubernetes.URL"
_IP = "@net.IP"
_CIDR = "@net.CIDR"
_SEMVER = "@kubernetes.Semver"
_AUTHZ = "@kubernetes.authorization.Authorizer"
_GROUP = "@kubernetes.authorization.GroupCheck"
_RESOURCE = "@kubernetes.authorization.ResourceCheck"
_PATH = "@kubernetes.authorization.PathCheck"
_DECISION = "@kubernetes.authorization.Decision"


def _opaque(marker: str, payload: Any) -> dict[str, Any]:
    return {marker: payload}


def _payload(marker: str, value: Any) -> Any:
    if isinstance(value, dict) and marker in value:
        return value[marker]
    _no_overload()


def _kind_of(value: Any) -> str | None:
    if isinstance(value, dict) and len(value) <= 2:
        for key in value:
            if isinstance(key, str) and key.startswith("@"):
                return key
    return None


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _cel_equal(a: Any, b: Any) -> bool:
    """CEL equality: no bool/int mixing, numbers compare across int and double, deep for containers."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_cel_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return len(a) == len(b) and all(k in b and _cel_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, bytes | bytearray) and isinstance(b, bytes | bytearray):
        return bytes(a) == bytes(b)
    if type(a) is not type(b):
        return False
    return bool(a == b)


def _comparable_kind(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if _is_number(v):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, bytes | bytearray):
        return "bytes"
    if isinstance(v, datetime.timedelta):
        return "duration"
    if isinstance(v, datetime.datetime):
        return "timestamp"
    _no_overload()


def _cel_compare(a: Any, b: Any) -> int:
    if _comparable_kind(a) != _comparable_kind(b):
        _no_overload()
    if isinstance(a, bytes | bytearray):
        a, b = bytes(a), bytes(b)
    return -1 if a < b else (1 if a > b else 0)


# --- lists (k8s library lists.go, cel-go ext lists v3) ---------------------------------------------------


def _is_sorted(items: list[Any]) -> bool:
    return all(_cel_compare(items[i], items[i + 1]) <= 0 for i in range(len(items) - 1))


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _sum(items: list[Any]) -> Any:
    if not items:
        return 0
    first = items[0]
    if all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        total = sum(items)
        if not _INT64_MIN <= total <= _INT64_MAX:
            raise _Fail("integer overflow")
        return total
    if all(isinstance(v, float) for v in items):
        return sum(items)  # left to right, as cel-go adds
    if isinstance(first, datetime.timedelta) and all(isinstance(v, datetime.timedelta) for v in items):
        return sum(items, datetime.timedelta())
    _no_overload()


def _extreme(name: str, items: list[Any], sign: int) -> Any:
    if not items:
        raise _Fail(f"{name} called on empty list")
    best = items[0]
    for item in items[1:]:
        if _cel_compare(item, best) * sign > 0:
            best = item
    return best


def _index_of(items: list[Any], value: Any) -> int:
    for i, item in enumerate(items):
        if _cel_equal(item, value):
            return i
    return -1


def _last_index_of(items: list[Any], value: Any) -> int:
    for i in range(len(items) - 1, -1, -1):
        if _cel_equal(items[i], value):
            return i
    return -1


def _distinct(items: list[Any]) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if not any(_cel_equal(item, seen) for seen in out):
            out.append(item)
    return out


def _flatten(items: list[Any], depth: int = 1) -> list[Any]:
    if depth < 0:
        raise _Fail("level must be non-negative")
    out: list[Any] = []
    for item in items:
        if isinstance(item, list) and depth > 0:
            out.extend(_flatten(item, depth - 1))
        else:
            out.append(item)
    return out


def _slice(items: list[Any], start: int, end: int) -> list[Any]:
    if start < 0 or end < 0:
        raise _Fail(f"cannot slice({start}, {end}), negative indexes not supported")
    if start > end:
        raise _Fail(f"cannot slice({start}, {end}), start index must be less than or equal to end index")
    if end > len(items):
        raise _Fail(f"cannot slice({start}, {end}), list is length {len(items)}")
    return items[start:end]


def _sort(items: list[Any]) -> list[Any]:
    if items and len({_comparable_kind(v) for v in items}) > 1:
        raise _Fail("list elements must have the same type")
    return sorted(items, key=functools.cmp_to_key(_cel_compare))


def _range(n: int) -> list[int]:
    return list(range(n))


# --- regex (regex.go) ----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    try:
        # RE2's \z is Python's \Z; everything else in common use means the same in both.
        return re.compile(pattern.replace(r"\z", r"\Z"))
    except re.error as exc:
        raise _Fail(f"Illegal regex: {exc}") from None


def _find(text: str, pattern: str) -> str:
    match = _regex(pattern).search(text)
    return match.group(0) if match else ""


def _find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    if limit == 0:
        return []
    out: list[str] = []
    for match in _regex(pattern).finditer(text):
        out.append(match.group(0))
        if 0 < limit <= len(out):
            break
    return out


# --- sets (cel-go ext sets) ----------------------------------------------------------------------------


def _sets_contains(a: list[Any], b: list[Any]) -> bool:
    return all(any(_cel_equal(x, y) for y in a) for x in b)


def _sets_equivalent(a: list[Any], b: list[Any]) -> bool:
    return _sets_contains(a, b) and _sets_contains(b, a)


def _sets_intersects(a: list[Any], b: list[Any]) -> bool:
    return any(any(_cel_equal(x, y) for y in a) for x in b)


# --- quantity (apimachinery resource.ParseQuantity, quantity.go) ----------------------------------------

_QUANTITY_FORMAT = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
_QUANTITY_NUMERIC = "unable to parse numeric part of quantity"
_QUANTITY_SUFFIX = "unable to parse quantity's suffix"
_DEC_SUFFIXES = {"": 0, "n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BIN_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DIGITS = "0123456789"
_QCTX = decimal.Context(
    prec=4000, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN, traps=[decimal.InvalidOperation]
)
_NANO = decimal.Decimal("1e-9")


def _split_quantity(s: str) -> tuple[str, str, str, str]:
    """Upstream ``parseQuantityString``: (value, num, denom, suffix); raises on a malformed string."""
    pos, end = 0, len(s)
    if s[0] in "+-":
        pos += 1
    i = pos
    while True:  # leading zeroes
        if i >= end:
            return "0", "0", "", ""
        if s[i] != "0":
            break
        i += 1
        pos += 1
    i = pos
    while True:
        if i >= end:
            return s, s[pos:], "", ""
        if s[i] not in _DIGITS:
            break
        i += 1
    num, pos = s[pos:i] or "0", i
    denom = ""
    if pos < end and s[pos] == ".":
        pos += 1
        i = pos
        while True:
            if i >= end:
                return s, num, s[pos:], ""
            if s[i] not in _DIGITS:
                break
            i += 1
        denom, pos = s[pos:i], i
    value = s[:pos]
    suffix_start = i = pos
    while i < end and s[i] in "eEinumkKMGTP":
        i += 1
    if i >= end:
        return value, num, denom, s[suffix_start:]
    if s[i] in "-+":
        i += 1
    while i < end and s[i] in _DIGITS:
        i += 1
    if i >= end:
        return value, num, denom, s[suffix_start:]
    raise _Fail(_QUANTITY_FORMAT)


def parse_quantity(s: str) -> decimal.Decimal:
    """The exact value of a Kubernetes quantity string, rounded up to nano precision as upstream."""
    if not s:
        raise _Fail(_QUANTITY_FORMAT)
    if s == "0":
        return decimal.Decimal(0)
    value, _num, _denom, suffix = _split_quantity(s)
    binary = False
    if suffix in _DEC_SUFFIXES:
        base, exponent = 10, _DEC_SUFFIXES[suffix]
    elif suffix in _BIN_SUFFIXES:
        base, exponent, binary = 2, _BIN_SUFFIXES[suffix], True
    elif len(suffix) > 1 and suffix[0] in "eE" and re.fullmatch(r"[+-]?[0-9]+", suffix[1:]):
        parsed = int(suffix[1:])
        if not _INT64_MIN <= parsed <= _INT64_MAX:
            raise _Fail(_QUANTITY_SUFFIX)
        base, exponent = 10, (parsed + 2**31) % 2**32 - 2**31  # Go's int32(parsed)
    else:
        raise _Fail(_QUANTITY_SUFFIX)
    try:
        amount = decimal.Decimal(value)
        if base == 10:
            amount = amount.scaleb(exponent, _QCTX)
        else:
            amount = _QCTX.multiply(amount, decimal.Decimal(2**exponent))
    except (decimal.InvalidOperation, ArithmeticError):
        raise _Fail(_QUANTITY_NUMERIC) from None
    negative = amount < 0
    amount = abs(amount)
    exp = amount.as_tuple().exponent
    if amount != 0 and isinstance(exp, int) and exp < -9:
        amount = amount.quantize(_NANO, rounding=decimal.ROUND_UP, context=_QCTX)
    if binary and amount > _INT64_MAX:
        amount = decimal.Decimal(_INT64_MAX)
    return -amount if negative else amount


def _quantity_text(d: decimal.Decimal) -> str:
    if d == 0:
        return "0"
    return format(d.normalize(_QCTX), "f")


def _qval(v: Any) -> decimal.Decimal:
    return decimal.Decimal(_payload(_Q, v))


def _to_quantity(s: str) -> dict[str, Any]:
    return _opaque(_Q, _quantity_text(parse_quantity(s)))


def _is_quantity(s: str) -> bool:
    try:
        parse_quantity(s)
    except _Fail:
        return False
    return True


def _quantity_as_int(v: Any) -> int:
    d = _qval(v)
    if d != d.to_integral_value() or not _INT64_MIN <= d <= _INT64_MAX:
        raise _Fail("cannot convert value to integer")
    return int(d)


def _quantity_is_int(v: Any) -> bool:
    d = _qval(v)
    return d == d.to_integral_value() and _INT64_MIN <= d <= _INT64_MAX


def _quantity_add(a: Any, b: Any, sign: int = 1) -> dict[str, Any]:
    other = decimal.Decimal(b) if isinstance(b, int) and not isinstance(b, bool) else _qval(b)
    return _opaque(_Q, _quantity_text(_QCTX.add(_qval(a), other * sign)))


def _sign(v: Any) -> int:
    d = _qval(v)
    return (d > 0) - (d < 0)


# --- semver (semverlib.go, blang/semver v4 Parse) ---------------------------------------------------


def _parse_semver(s: str) -> tuple[int, int, int, tuple[str, ...]]:
    if not s:
        raise _Fail("Version string empty")
    parts = s.split(".", 2)
    if len(parts) != 3:
        raise _Fail("No Major.Minor.Patch elements found")
    build_idx = parts[2].find("+")
    patch = parts[2] if build_idx < 0 else parts[2][:build_idx]
    build = [] if build_idx < 0 else parts[2][build_idx + 1 :].split(".")
    pre_idx = patch.find("-")
    pre = [] if pre_idx < 0 else patch[pre_idx + 1 :].split(".")
    patch = patch if pre_idx < 0 else patch[:pre_idx]
    numbers = []
    for label, text in (("major", parts[0]), ("minor", parts[1]), ("patch", patch)):
        if not text or any(c not in _DIGITS for c in text):
            raise _Fail(f"Invalid character(s) found in {label} number {go_quote(text)}")
        if len(text) > 1 and text[0] == "0":
            raise _Fail(f"{label.capitalize()} number must not contain leading zeroes {go_quote(text)}")
        numbers.append(int(text))
    for p in pre:
        if not p:
            raise _Fail("Prerelease is empty")
        if not re.fullmatch(r"[0-9A-Za-z-]+", p):
            raise _Fail(f"Invalid character(s) found in prerelease {go_quote(p)}")
        if p.isdigit() and len(p) > 1 and p[0] == "0":
            raise _Fail(f"Numeric PreRelease version must not contain leading zeroes {go_quote(p)}")
    for b in build:
        if not b:
            raise _Fail("Build meta data is empty")
        if not re.fullmatch(r"[0-9A-Za-z-]+", b):
            raise _Fail(f"Invalid character(s) found in build meta data {go_quote(b)}")
    return numbers[0], numbers[1], numbers[2], tuple(pre)


def _normalize_semver(s: str) -> str:
    s = s.removeprefix("v")
    parts = s.split(".", 2)
    for i, p in enumerate(parts):
        if len(p) > 1:
            p = p.lstrip("0")
            if not p or p[0] not in _DIGITS:
                p = "0" + p
            parts[i] = p
    if len(parts) < 3:
        if any(c in parts[-1] for c in "+-"):
            raise _Fail("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


def _to_semver(s: str, normalize: bool = False) -> dict[str, Any]:
    major, minor, patch, pre = _parse_semver(_normalize_semver(s) if normalize else s)
    return _opaque(_SEMVER, [major, minor, patch, list(pre)])


def _is_semver(s: str, normalize: bool = False) -> bool:
    try:
        _to_semver(s, normalize)
    except _Fail:
        return False
    return True


def _semver_cmp(a: Any, b: Any) -> int:
    x, y = _payload(_SEMVER, a), _payload(_SEMVER, b)
    for i in range(3):
        if x[i] != y[i]:
            return -1 if x[i] < y[i] else 1
    pa, pb = x[3], y[3]
    if not pa or not pb:
        return (len(pa) == 0) - (len(pb) == 0)  # a version without prerelease is the greater
    for p, q in zip(pa, pb):
        if p == q:
            continue
        if p.isdigit() and q.isdigit():
            return -1 if int(p) < int(q) else 1
        if p.isdigit() != q.isdigit():
            return -1 if p.isdigit() else 1
        return -1 if p < q else 1
    return (len(pa) > len(pb)) - (len(pa) < len(pb))


def _compare(a: Any, b: Any) -> int:
    """``compareTo`` for quantities and semvers (the same function name in both libraries)."""
    kind = _kind_of(a)
    if kind == _Q and _kind_of(b) == _Q:
        x, y = _qval(a), _qval(b)
        return (x > y) - (x < y)
    if kind == _SEMVER and _kind_of(b) == _SEMVER:
        return _semver_cmp(a, b)
    _no_overload()


def _semver_part(index: int) -> Callable[[Any], int]:
    def part(v: Any) -> int:
        value: int = _payload(_SEMVER, v)[index]
        return value

    return part


# --- url (urls.go over Go net/url) -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _URLParts:
    scheme: str = ""
    opaque: str = ""
    host: str = ""
    path: str = ""
    raw_path: str = ""
    raw_query: str = ""


_HOST_OK = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:[]<>\"")
_PATH_KEEP = "-_.~$&+,/:;=@"
_USERINFO_OK = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._:~!$&'()*+,;=%@")
_VALID_ENCODED = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~!$&'()*+,;=:@[]%/")


def _unescape(s: str, host: bool = False) -> str:
    for i, ch in enumerate(s):
        if ch == "%":
            seg = s[i : i + 3]
            if len(seg) < 3 or not all(c in "0123456789abcdefABCDEF" for c in seg[1:]):
                raise ValueError(f"invalid URL escape {go_quote(seg)}")
        elif host and ord(ch) < 0x80 and ch not in _HOST_OK:
            raise ValueError(f"invalid character {go_quote(ch)} in host name")
    return urllib.parse.unquote(s, errors="surrogateescape")


def _valid_port(colon_port: str) -> bool:
    return colon_port == "" or (colon_port[0] == ":" and all(c in _DIGITS for c in colon_port[1:]))


def _parse_host(host: str) -> str:
    if host.startswith("["):
        i = host.rfind("]")
        if i < 0:
            raise ValueError("missing ']' in host")
        if not _valid_port(host[i + 1 :]):
            raise ValueError(f"invalid port {go_quote(host[i + 1 :])} after host")
    else:
        i = host.rfind(":")
        if i >= 0 and not _valid_port(host[i:]):
            raise ValueError(f"invalid port {go_quote(host[i:])} after host")
    return _unescape(host, host=True)


def _go_parse_url(raw: str, via_request: bool) -> _URLParts:
    """Go ``url.parse``: scheme, opaque or authority + path, query; errors with Go's texts."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in raw):
        raise ValueError("net/url: invalid control character in URL")
    if raw == "" and via_request:
        raise ValueError("empty url")
    if raw == "*":
        return _URLParts(path="*")
    scheme, rest = "", raw
    for i, c in enumerate(raw):
        if c.isascii() and c.isalpha():
            continue
        if c in "0123456789+-.":
            if i == 0:
                break
            continue
        if c == ":":
            if i == 0:
                raise ValueError("missing protocol scheme")
            scheme, rest = raw[:i].lower(), raw[i + 1 :]
        break
    query = ""
    if rest.endswith("?") and rest.count("?") == 1:
        rest = rest[:-1]
    elif "?" in rest:
        rest, query = rest.split("?", 1)
    if not rest.startswith("/"):
        if scheme:
            return _URLParts(scheme=scheme, opaque=rest, raw_query=query)
        if via_request:
            raise ValueError("invalid URI for request")
        if ":" in rest.split("/", 1)[0]:
            raise ValueError("first path segment in URL cannot contain colon")
    host = ""
    if (scheme or (not via_request and not rest.startswith("///"))) and rest.startswith("//"):
        authority, slash, tail = rest[2:].partition("/")
        rest = slash + tail
        at = authority.rfind("@")
        if at >= 0:
            userinfo = authority[:at]
            if any(c not in _USERINFO_OK for c in userinfo):
                raise ValueError("net/url: invalid userinfo")
            _unescape(userinfo)
        host = _parse_host(authority[at + 1 :])
    path = _unescape(rest)
    raw_path = rest if urllib.parse.quote(path, safe=_PATH_KEEP, errors="surrogateescape") != rest else ""
    return _URLParts(scheme=scheme, host=host, path=path, raw_path=raw_path, raw_query=query)


def _parse_url(raw: str) -> _URLParts:
    try:
        _go_parse_url(raw, via_request=True)
        without_fragment = raw.split("#", 1)[0]
        return _go_parse_url(without_fragment, via_request=False)
    except ValueError as exc:
        raise _Fail(f"URL parse error during conversion from string: parse {go_quote(raw)}: {exc}") from None


def _to_url(s: str) -> dict[str, Any]:
    _parse_url(s)
    return _opaque(_URL, s)


def _is_url(s: str) -> bool:
    try:
        _go_parse_url(s, via_request=True)
    except ValueError:
        return False
    return True


def _url(v: Any) -> _URLParts:
    return _parse_url(_payload(_URL, v))


def _split_host_port(host: str) -> tuple[str, str]:
    colon = host.rfind(":")
    name, port = host, ""
    if colon >= 0 and _valid_port(host[colon:]):
        name, port = host[:colon], host[colon + 1 :]
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    return name, port


def _escaped_path(parts: _URLParts) -> str:
    raw = parts.raw_path
    if raw and all(c in _VALID_ENCODED for c in raw):
        try:
            if _unescape(raw) == parts.path:
                return raw
        except ValueError:
            pass
    if parts.path == "*":
        return "*"
    return urllib.parse.quote(parts.path, safe=_PATH_KEEP, errors="surrogateescape")


def _query(parts: _URLParts) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for pair in parts.raw_query.split("&"):
        if ";" in pair or not pair:
            continue
        key, _, value = pair.partition("=")
        try:
            key, value = _unescape(key.replace("+", " ")), _unescape(value.replace("+", " "))
        except ValueError:
            continue
        out.setdefault(key, []).append(value)
    return out


# --- ip and cidr (ip.go, cidr.go over Go net/netip) --------------------------------------------------

_IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_IPInterface = ipaddress.IPv4Interface | ipaddress.IPv6Interface


def _netip_addr(raw: str) -> _IPAddress:
    try:
        addr = ipaddress.ip_address(raw)
    except ValueError:
        raise ValueError(f"ParseAddr({go_quote(raw)}): unable to parse IP") from None
    return addr


def _parse_ip(raw: str) -> _IPAddress:
    try:
        addr = _netip_addr(raw)
    except ValueError as exc:
        raise _Fail(f"IP Address {go_quote(raw)} parse error during conversion from string: {exc}") from None
    if isinstance(addr, ipaddress.IPv6Address) and addr.scope_id is not None:
        raise _Fail(f"IP address {go_quote(raw)} with zone value is not allowed")
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        raise _Fail(f"IPv4-mapped IPv6 address {go_quote(raw)} is not allowed")
    return addr


def _addr_text(addr: _IPAddress) -> str:
    return str(addr)


def _parse_cidr(raw: str) -> _IPInterface:
    prefix = "network address parse error during conversion from string: "
    where = f"netip.ParsePrefix({go_quote(raw)})"
    addr_text, slash, bits = raw.rpartition("/")
    if not slash:
        raise _Fail(f"{prefix}{prefix}{where}: no '/'")
    if "%" in addr_text:
        raise _Fail(f"{prefix}{prefix}{where}: IPv6 zones cannot be present in a prefix")
    try:
        addr = _netip_addr(addr_text)
    except ValueError as exc:
        raise _Fail(f"{prefix}{prefix}{where}: {exc}") from None
    limit = 32 if addr.version == 4 else 128
    if (
        not bits
        or any(c not in _DIGITS for c in bits)
        or (len(bits) > 1 and bits[0] == "0")
        or int(bits) > limit
    ):
        raise _Fail(f"{prefix}{prefix}{where}: bad bits after slash: {go_quote(bits)}")
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        raise _Fail(f"{prefix}IPv4-mapped IPv6 address {go_quote(raw)} is not allowed")
    return ipaddress.ip_interface(f"{addr}/{bits}")


def _to_ip(s: str) -> dict[str, Any]:
    return _opaque(_IP, _addr_text(_parse_ip(s)))


def _is_ip(s: str) -> bool:
    try:
        _parse_ip(s)
    except _Fail:
        return False
    return True


def _ip_is_canonical(s: str) -> bool:
    return _addr_text(_parse_ip(s)) == s


def _ip(v: Any) -> _IPAddress:
    return ipaddress.ip_address(_payload(_IP, v))


def _to_cidr(s: str) -> dict[str, Any]:
    return _opaque(_CIDR, _cidr_text(_parse_cidr(s)))


def _cidr_text(iface: _IPInterface) -> str:
    return f"{iface.ip}/{iface.network.prefixlen}"


def _is_cidr(s: str) -> bool:
    try:
        _parse_cidr(s)
    except _Fail:
        return False
    return True


def _cidr(v: Any) -> _IPInterface:
    return ipaddress.ip_interface(_payload(_CIDR, v))


def _family(v: Any) -> int:
    return _ip(v).version


def _is_link_local_multicast(addr: _IPAddress) -> bool:
    if addr.version == 4:
        return addr in ipaddress.ip_network("224.0.0.0/24")
    return (int(addr) >> 112) & 0xFF0F == 0xFF02


def _is_global_unicast(addr: _IPAddress) -> bool:
    if addr.version == 4 and str(addr) in ("0.0.0.0", "255.255.255.255"):
        return False
    return not (addr.is_unspecified or addr.is_loopback or addr.is_multicast or addr.is_link_local)


def _cidr_contains_ip(c: Any, other: Any) -> bool:
    if isinstance(other, str):
        try:
            other = _to_ip(other)
        except _Fail:
            _no_overload()  # upstream passes the parse error where an IP is expected
    addr = _ip(other)
    network = _cidr(c).network
    return addr.version == network.version and addr in network


def _cidr_contains_cidr(c: Any, other: Any) -> bool:
    if isinstance(other, str):
        other = _to_cidr(other)
    outer, inner = _cidr(c).network, _cidr(other).network
    return (
        outer.version == inner.version
        and outer.prefixlen <= inner.prefixlen
        and inner.network_address in outer
    )


def _string_of(v: Any) -> str:
    kind = _kind_of(v)
    if kind in (_IP, _CIDR):
        text: str = v[kind]
        return text
    _no_overload()


# --- authorizer (authz.go) --------------------------------------------------------------------------


def _authz_state(v: Any, marker: str) -> dict[str, Any]:
    state = _payload(marker, v)
    if not isinstance(state, dict):
        _no_overload()
    return state


def _authz_path(a: Any, path: str) -> dict[str, Any]:
    state = _authz_state(a, _AUTHZ)
    if not path.strip():
        raise _Fail("path must not be empty")
    return _opaque(_PATH, {"sa": state.get("sa"), "path": path})


def _authz_group(a: Any, group: str) -> dict[str, Any]:
    return _opaque(_GROUP, {"sa": _authz_state(a, _AUTHZ).get("sa"), "group": group})


def _authz_service_account(a: Any, namespace: str, name: str) -> dict[str, Any]:
    _authz_state(a, _AUTHZ)
    if dns1123_subdomain(name):
        raise _Fail("Invalid service account name")
    if dns1123_label(namespace):
        raise _Fail("Invalid service account namespace")
    return _opaque(_AUTHZ, {"sa": [namespace, name]})


def _authz_resource(g: Any, resource: str) -> dict[str, Any]:
    state = _authz_state(g, _GROUP)
    if not resource.strip():
        raise _Fail("resource must not be empty")
    return _opaque(_RESOURCE, {"sa": state.get("sa"), "group": state.get("group", ""), "resource": resource})


def _resource_with(field: str) -> Callable[[Any, str], dict[str, Any]]:
    def setter(r: Any, value: str) -> dict[str, Any]:
        state = dict(_authz_state(r, _RESOURCE))
        state[field] = value
        return _opaque(_RESOURCE, state)

    return setter


def _authz_check(target: Any, verb: str) -> dict[str, Any]:
    kind = _kind_of(target)
    if kind not in (_PATH, _RESOURCE):
        _no_overload()
    state = _authz_state(target, kind)
    sa = state.get("sa")
    account = (str(sa[0]), str(sa[1])) if isinstance(sa, list) and len(sa) == 2 else None
    if kind == _PATH:
        check = AuthzCheck(
            verb=verb, resource_request=False, path=state.get("path", ""), service_account=account
        )
    else:
        check = AuthzCheck(
            verb=verb,
            resource_request=True,
            group=state.get("group", ""),
            resource=state.get("resource", ""),
            subresource=state.get("subresource", ""),
            namespace=state.get("namespace", ""),
            name=state.get("name", ""),
            field_selector=state.get("fieldSelector", ""),
            label_selector=state.get("labelSelector", ""),
            service_account=account,
        )
    callback = _CURRENT_AUTHZ.get()
    if callback is None:
        decision = AuthzDecision(False, error="no authorizer is available")
    else:
        try:
            decision = callback(check)
        except Exception as exc:  # an authorizer failure is the decision's error, as upstream
            decision = AuthzDecision(False, error=str(exc) or type(exc).__name__)
    return _opaque(
        _DECISION, {"allowed": decision.allowed, "reason": decision.reason, "error": decision.error}
    )


def _decision_field(field: str) -> Callable[[Any], Any]:
    def getter(d: Any) -> Any:
        return _authz_state(d, _DECISION).get(field)

    return getter


def _decision_errored(d: Any) -> bool:
    return bool(_authz_state(d, _DECISION).get("error"))


def _authorizer_value(authz: Authorizer) -> dict[str, Any]:
    value: dict[str, Any] = _opaque(_AUTHZ, {"sa": None})
    rr = authz.request_resource
    if rr is not None:
        value["requestResource"] = _opaque(
            _RESOURCE,
            {
                "sa": None,
                "group": rr.group,
                "resource": rr.resource,
                "subresource": rr.subresource,
                "namespace": rr.namespace,
                "name": rr.name,
            },
        )
    return value


# --- declarations --------------------------------------------------------------------------------

_T = _cel.Type
_DYN, _STR, _INT, _BOOL, _DBL = _T.DYN, _T.STRING, _T.INT, _T.BOOL, _T.DOUBLE
_LIST = _T.List(_T.DYN)
_MAP = _T.Map(_T.DYN, _T.DYN)
_STR_LIST = _T.List(_T.STRING)

# name -> [(overload id, return type, parameter types, is_member, implementation)]
_FUNCTIONS: dict[str, list[tuple[str, Any, list[Any], bool, Callable[..., Any]]]] = {
    # lists
    "isSorted": [("list_is_sorted", _BOOL, [_LIST], True, _is_sorted)],
    "sum": [("list_sum", _DYN, [_LIST], True, _sum)],
    "min": [("list_min", _DYN, [_LIST], True, lambda items: _extreme("min", items, -1))],
    "max": [("list_max", _DYN, [_LIST], True, lambda items: _extreme("max", items, 1))],
    "indexOf": [
        ("list_index_of_string", _INT, [_LIST, _STR], True, _index_of),
        ("list_index_of_int", _INT, [_LIST, _INT], True, _index_of),
        ("list_index_of_double", _INT, [_LIST, _DBL], True, _index_of),
        ("list_index_of_bool", _INT, [_LIST, _BOOL], True, _index_of),
        ("list_index_of_list", _INT, [_LIST, _LIST], True, _index_of),
        ("list_index_of_map", _INT, [_LIST, _MAP], True, _index_of),
    ],
    "lastIndexOf": [
        ("list_last_index_of_string", _INT, [_LIST, _STR], True, _last_index_of),
        ("list_last_index_of_int", _INT, [_LIST, _INT], True, _last_index_of),
        ("list_last_index_of_double", _INT, [_LIST, _DBL], True, _last_index_of),
        ("list_last_index_of_bool", _INT, [_LIST, _BOOL], True, _last_index_of),
        ("list_last_index_of_list", _INT, [_LIST, _LIST], True, _last_index_of),
        ("list_last_index_of_map", _INT, [_LIST, _MAP], True, _last_index_of),
    ],
    "distinct": [("list_distinct", _LIST, [_LIST], True, _distinct)],
    "flatten": [
        ("list_flatten", _LIST, [_LIST], True, _flatten),
        ("list_flatten_int", _LIST, [_LIST, _INT], True, _flatten),
    ],
    "reverse": [("list_reverse", _LIST, [_LIST], True, lambda items: items[::-1])],
    "slice": [("list_slice", _LIST, [_LIST, _INT, _INT], True, _slice)],
    "sort": [("list_sort", _LIST, [_LIST], True, _sort)],
    "lists.range": [("lists_range", _T.List(_INT), [_INT], False, _range)],
    # regex
    "find": [("string_find_string", _STR, [_STR, _STR], True, _find)],
    "findAll": [
        ("string_find_all_string", _STR_LIST, [_STR, _STR], True, _find_all),
        ("string_find_all_string_int", _STR_LIST, [_STR, _STR, _INT], True, _find_all),
    ],
    # sets
    "sets.contains": [("list_sets_contains_list", _BOOL, [_LIST, _LIST], False, _sets_contains)],
    "sets.equivalent": [("list_sets_equivalent_list", _BOOL, [_LIST, _LIST], False, _sets_equivalent)],
    "sets.intersects": [("list_sets_intersects_list", _BOOL, [_LIST, _LIST], False, _sets_intersects)],
    # quantity
    "quantity": [("string_to_quantity", _MAP, [_STR], False, _to_quantity)],
    "isQuantity": [("is_quantity_string", _BOOL, [_STR], False, _is_quantity)],
    "sign": [
        ("quantity_sign", _INT, [_MAP], False, _sign),
        ("quantity_sign_member", _INT, [_MAP], True, _sign),
    ],
    "isGreaterThan": [("opaque_is_greater_than", _BOOL, [_MAP, _MAP], True, lambda a, b: _compare(a, b) > 0)],
    "isLessThan": [("opaque_is_less_than", _BOOL, [_MAP, _MAP], True, lambda a, b: _compare(a, b) < 0)],
    "compareTo": [("opaque_compare_to", _INT, [_MAP, _MAP], True, _compare)],
    "asApproximateFloat": [("quantity_get_float", _DBL, [_MAP], True, lambda q: float(_qval(q)))],
    "asInteger": [("quantity_get_int", _INT, [_MAP], True, _quantity_as_int)],
    "isInteger": [("quantity_is_integer", _BOOL, [_MAP], True, _quantity_is_int)],
    "add": [
        ("quantity_add", _MAP, [_MAP, _MAP], True, _quantity_add),
        ("quantity_add_int", _MAP, [_MAP, _INT], True, _quantity_add),
    ],
    "sub": [
        ("quantity_sub", _MAP, [_MAP, _MAP], True, lambda a, b: _quantity_add(a, b, -1)),
        ("quantity_sub_int", _MAP, [_MAP, _INT], True, lambda a, b: _quantity_add(a, b, -1)),
    ],
    # semver
    "semver": [
        ("string_to_semver", _MAP, [_STR], False, _to_semver),
        ("string_bool_to_semver", _MAP, [_STR, _BOOL], False, _to_semver),
    ],
    "isSemver": [
        ("is_semver_string", _BOOL, [_STR], False, _is_semver),
        ("is_semver_string_bool", _BOOL, [_STR, _BOOL], False, _is_semver),
    ],
    "major": [("semver_major", _INT, [_MAP], True, _semver_part(0))],
    "minor": [("semver_minor", _INT, [_MAP], True, _semver_part(1))],
    "patch": [("semver_patch", _INT, [_MAP], True, _semver_part(2))],
    # url
    "url": [("string_to_url", _MAP, [_STR], False, _to_url)],
    "isURL": [("is_url_string", _BOOL, [_STR], False, _is_url)],
    "getScheme": [("url_get_scheme", _STR, [_MAP], True, lambda u: _url(u).scheme)],
    "getHost": [("url_get_host", _STR, [_MAP], True, lambda u: _url(u).host)],
    "getHostname": [("url_get_hostname", _STR, [_MAP], True, lambda u: _split_host_port(_url(u).host)[0])],
    "getPort": [("url_get_port", _STR, [_MAP], True, lambda u: _split_host_port(_url(u).host)[1])],
    "getEscapedPath": [("url_get_escaped_path", _STR, [_MAP], True, lambda u: _escaped_path(_url(u)))],
    "getQuery": [("url_get_query", _T.Map(_STR, _STR_LIST), [_MAP], True, lambda u: _query(_url(u)))],
    # ip
    "ip": [
        ("string_to_ip", _MAP, [_STR], False, _to_ip),
        ("cidr_ip", _MAP, [_MAP], True, lambda c: _opaque(_IP, str(_cidr(c).ip))),
    ],
    "isIP": [("is_ip", _BOOL, [_STR], False, _is_ip)],
    "ip.isCanonical": [("ip_is_canonical", _BOOL, [_STR], False, _ip_is_canonical)],
    "family": [("ip_family", _INT, [_MAP], True, _family)],
    "isUnspecified": [("ip_is_unspecified", _BOOL, [_MAP], True, lambda v: _ip(v).is_unspecified)],
    "isLoopback": [("ip_is_loopback", _BOOL, [_MAP], True, lambda v: _ip(v).is_loopback)],
    "isLinkLocalMulticast": [
        ("ip_is_link_local_multicast", _BOOL, [_MAP], True, lambda v: _is_link_local_multicast(_ip(v)))
    ],
    "isLinkLocalUnicast": [("ip_is_link_local_unicast", _BOOL, [_MAP], True, lambda v: _ip(v).is_link_local)],
    "isGlobalUnicast": [("ip_is_global_unicast", _BOOL, [_MAP], True, lambda v: _is_global_unicast(_ip(v)))],
    "string": [("opaque_to_string", _STR, [_MAP], False, _string_of)],
    # cidr
    "cidr": [("string_to_cidr", _MAP, [_STR], False, _to_cidr)],
    "isCIDR": [("is_cidr", _BOOL, [_STR], False, _is_cidr)],
    "containsIP": [
        ("cidr_contains_ip_string", _BOOL, [_MAP, _STR], True, _cidr_contains_ip),
        ("cidr_contains_ip_ip", _BOOL, [_MAP, _MAP], True, _cidr_contains_ip),
    ],
    "containsCIDR": [
        ("cidr_contains_cidr_string", _BOOL, [_MAP, _STR], True, _cidr_contains_cidr),
        ("cidr_contains_cidr", _BOOL, [_MAP, _MAP], True, _cidr_contains_cidr),
    ],
    "prefixLength": [("cidr_prefix_length", _INT, [_MAP], True, lambda c: _cidr(c).network.prefixlen)],
    "masked": [("cidr_masked", _MAP, [_MAP], True, lambda c: _opaque(_CIDR, str(_cidr(c).network)))],
    # authorizer
    "path": [("authorizer_path", _MAP, [_MAP, _STR], True, _authz_path)],
    "group": [("authorizer_group", _MAP, [_MAP, _STR], True, _authz_group)],
    "serviceAccount": [("authorizer_serviceaccount", _MAP, [_MAP, _STR, _STR], True, _authz_service_account)],
    "resource": [("groupcheck_resource", _MAP, [_MAP, _STR], True, _authz_resource)],
    "subresource": [("resourcecheck_subresource", _MAP, [_MAP, _STR], True, _resource_with("subresource"))],
    "namespace": [("resourcecheck_namespace", _MAP, [_MAP, _STR], True, _resource_with("namespace"))],
    "name": [("resourcecheck_name", _MAP, [_MAP, _STR], True, _resource_with("name"))],
    "fieldSelector": [
        ("authorizer_fieldselector", _MAP, [_MAP, _STR], True, _resource_with("fieldSelector"))
    ],
    "labelSelector": [
        ("authorizer_labelselector", _MAP, [_MAP, _STR], True, _resource_with("labelSelector"))
    ],
    "check": [("authorizer_check", _MAP, [_MAP, _STR], True, _authz_check)],
    "allowed": [("decision_allowed", _BOOL, [_MAP], True, _decision_field("allowed"))],
    "reason": [("decision_reason", _STR, [_MAP], True, _decision_field("reason"))],
    "error": [("decision_error", _STR, [_MAP], True, _decision_field("error"))],
    "errored": [("decision_errored", _BOOL, [_MAP], True, _decision_errored)],
}

# Functions whose Python implementation receives a list or map argument (see _check_optional_safety).
_CONTAINER_FUNCTIONS = frozenset(
    name
    for name, overloads in _FUNCTIONS.items()
    if any(any(p in (_LIST, _MAP) for p in params) for _id, _ret, params, _m, _f in overloads)
)


_TIME_TYPES = (datetime.datetime, datetime.timedelta)


def _guarded(name: str, impl: Callable[..., Any]) -> Callable[..., Any]:
    """Library errors become CEL errors with upstream's text; anything else is an internal error."""

    def call(*args: Any) -> Any:
        try:
            result = impl(*args)
        except _Fail:
            raise
        except (TypeError, KeyError, IndexError, AttributeError):
            raise _Fail("no such overload") from None
        except (ValueError, ArithmeticError) as exc:
            raise _Fail(str(exc)) from None
        # cel-expr-python cannot take timestamps or durations back from a Python function.
        if isinstance(result, _TIME_TYPES) or (
            isinstance(result, list) and any(isinstance(v, _TIME_TYPES) for v in result)
        ):
            raise _Fail(f"{name}() cannot return timestamps or durations in this evaluator")
        return result

    return call


def _extension() -> Any:
    decls = [
        _cel.FunctionDecl(
            name,
            [
                _cel.Overload(oid, ret, params, is_member=member, impl=_guarded(name, impl))
                for oid, ret, params, member, impl in overloads
            ],
        )
        for name, overloads in _FUNCTIONS.items()
    ]
    return _cel.CelExtension("vplane.kubernetes", decls)


_EXTENSION = _extension()
_ENVS: dict[frozenset[str], Any] = {}


def _env(variables: frozenset[str]) -> Any:
    env = _ENVS.get(variables)
    if env is None:
        env = _cel.NewEnv(
            variables={name: _DYN for name in sorted(variables)},
            extensions=[ext_strings.ExtStrings(), ext_optional.ExtOptional(), _EXTENSION],
        )
        _ENVS[variables] = env
    return env


# --- expression text: tokens, optional-safety, variable references -----------------------------------

_TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+|//[^\n]*)
  | (?P<str>(?:[bB]?[rR][bB]?)(?:'[^'\n]*'|"[^"\n]*")
      |[bB]?(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"))
  | (?P<num>0[xX][0-9a-fA-F]+[uU]?|[0-9]+\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+|[0-9]+[uU]?)
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>==|!=|<=|>=|&&|\|\||[-+*/%<>!?:.,()\[\]{}])
  | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True, slots=True)
class Token:
    kind: str
    text: str
    start: int

    @property
    def end(self) -> int:
        return self.start + len(self.text)


def tokenize(expression: str) -> list[Token]:
    """CEL tokens without whitespace and comments (literals kept whole, so names inside them are not seen)."""
    out: list[Token] = []
    for m in _TOKEN_RE.finditer(expression):
        kind = m.lastgroup or "other"
        if kind != "ws":
            out.append(Token(kind, m.group(), m.start()))
    return out


def variable_references(expression: str, root: str = "variables") -> tuple[dict[str, int], bool]:
    """Fields of ``root`` the expression selects (``root.x`` -> offset of the dot), and whether it uses
    ``root`` any other way (``root[...]``, ``root`` alone)."""
    found, whole = _variable_references(expression, root)
    return dict(found), whole


@functools.lru_cache(maxsize=4096)
def _variable_references(expression: str, root: str) -> tuple[tuple[tuple[str, int], ...], bool]:
    toks = tokenize(expression)
    names: dict[str, int] = {}
    whole = False
    for i, tok in enumerate(toks):
        if tok.kind != "id" or tok.text != root or (i > 0 and toks[i - 1].text == "."):
            continue
        if i + 2 < len(toks) and toks[i + 1].text == "." and toks[i + 2].kind == "id":
            names.setdefault(toks[i + 2].text, toks[i + 1].start)
        else:
            whole = True
    return tuple(names.items()), whole


def substitute_field(expression: str, root: str, field: str, replacement: str) -> str:
    """Replace every ``root.field`` with ``(replacement)``, leaving string literals alone."""
    toks = tokenize(expression)
    out: list[str] = []
    last = 0
    for i, tok in enumerate(toks):
        if (
            tok.kind == "id"
            and tok.text == root
            and not (i > 0 and toks[i - 1].text == ".")
            and i + 2 < len(toks)
            and toks[i + 1].text == "."
            and toks[i + 2].text == field
        ):
            out.append(expression[last : tok.start])
            out.append(f"({replacement})")
            last = toks[i + 2].end
    out.append(expression[last:])
    return "".join(out)


_OPERAND_END = frozenset({")", "]", "}"})
_UNWRAP = frozenset({"orValue", "value", "hasValue"})
_REWRAP = frozenset({"or", "optMap", "optFlatMap"})
_OPTIONAL_CTORS = frozenset({"of", "none", "ofNonZeroValue"})


def _ends_operand(tok: Token) -> bool:
    return tok.kind in ("id", "num", "str") or tok.text in _OPERAND_END


def _match_forward(toks: list[Token], i: int) -> int:
    """Index of the bracket closing the one at ``i`` (or len(toks))."""
    depth = 0
    for j in range(i, len(toks)):
        if toks[j].text in "([{":
            depth += 1
        elif toks[j].text in ")]}":
            depth -= 1
            if depth == 0:
                return j
    return len(toks)


def _match_backward(toks: list[Token], i: int) -> int:
    depth = 0
    for j in range(i, -1, -1):
        if toks[j].text in ")]}":
            depth += 1
        elif toks[j].text in "([{":
            depth -= 1
            if depth == 0:
                return j
    return -1


def _chain_start(toks: list[Token], i: int) -> int:
    """Walk back from token ``i`` over selections, calls and indexes to where the operand starts."""
    j = i
    while j > 0:
        prev = toks[j - 1]
        optional_mark = prev.text == "?" and j >= 2 and toks[j - 2].text == "."
        if prev.text == "." or optional_mark or (prev.kind == "id" and toks[j].text in (".", "(", "[")):
            j -= 1
        elif prev.text in (")", "]") and toks[j].text in (".", "[", "("):
            opened = _match_backward(toks, j - 1)
            if opened < 0:
                break
            j = opened
            if j > 0 and toks[j].text == "[" and not _ends_operand(toks[j - 1]):
                break  # a list literal starts the operand
        else:
            break
    return j


def _chain_end(toks: list[Token], i: int, optional: bool) -> tuple[int, bool]:
    """Follow postfix operations from ``i``; return the end index and whether the value is optional."""
    while i < len(toks):
        t = toks[i].text
        if t == "." and i + 1 < len(toks):
            j = i + 1
            opt_select = toks[j].text == "?"
            if opt_select:
                j += 1
            if j >= len(toks) or toks[j].kind != "id":
                return i, optional
            name = toks[j].text
            if j + 1 < len(toks) and toks[j + 1].text == "(":
                # orValue/value/hasValue unwrap; or/optMap/optFlatMap keep an optional; other methods
                # cannot take an optional receiver, so their result is a plain value.
                optional = name in _REWRAP
                i = _match_forward(toks, j + 1) + 1
            else:
                optional = optional or opt_select
                i = j + 1
        elif t == "[":
            close = _match_forward(toks, i)
            if i + 1 < len(toks) and toks[i + 1].text == "?":
                optional = True
            i = close + 1
        else:
            return i, optional
    return i, optional


def _consumed(toks: list[Token], start: int, end: int) -> bool:
    """Whether an optional operand spanning toks[start:end] is used where an optional belongs."""
    before = toks[start - 1].text if start > 0 else ""
    after = toks[end].text if end < len(toks) else ""
    if start == 0 and end >= len(toks):
        return True  # the result itself
    if before in ("==", "!=") or after in ("==", "!="):
        return True
    if before == "?" and start >= 2 and toks[start - 2].text in ("[", ",", "{"):
        return True  # [?x] and [a, ?x]
    if before == ":":
        # {?key: value}: the entry started with '?'
        j = start - 2
        depth = 0
        while j >= 0:
            t = toks[j].text
            if t in ")]}":
                depth += 1
            elif t in "([{":
                if depth == 0:
                    break
                depth -= 1
            elif t == "," and depth == 0:
                break
            j -= 1
        return j + 1 < len(toks) and toks[j + 1].text == "?"
    if before == "(" and after == ")" and start >= 3 and toks[start - 3].text == ".":
        return toks[start - 2].text in _UNWRAP | _REWRAP
    return False


def _optional_source(toks: list[Token], i: int) -> bool:
    """Whether token ``i`` starts making an optional: ``.?f``, ``x[?k]`` or ``optional.of(...)``/``none()``."""
    tok = toks[i]
    nxt = toks[i + 1].text if i + 1 < len(toks) else ""
    if tok.text == "." and nxt == "?":
        return True
    if tok.text == "[" and nxt == "?" and i > 0 and _ends_operand(toks[i - 1]):
        return True
    return (
        tok.text == "optional"
        and i + 3 < len(toks)
        and nxt == "."
        and toks[i + 2].text in _OPTIONAL_CTORS
        and toks[i + 3].text == "("
    )


def _escaping_optional(toks: list[Token]) -> Token | None:
    """An optional value that may end up inside a list or map, or None when every optional is unwrapped."""
    for i, tok in enumerate(toks):
        if not _optional_source(toks, i):
            continue
        if tok.text == "optional":
            start = i
            end, optional = _chain_end(toks, _match_forward(toks, i + 3) + 1, True)
        else:
            start = _chain_start(toks, i)
            end, optional = _chain_end(toks, i, False)
        while optional and start > 0 and end < len(toks):
            # (optional-chain).more: a grouping parenthesis continues the chain
            grouping = toks[start - 1].text == "(" and not (start >= 2 and _ends_operand(toks[start - 2]))
            if not grouping or toks[end].text != ")":
                break
            start -= 1
            end, optional = _chain_end(toks, end + 1, optional)
        if optional and not _consumed(toks, start, end):
            return tok
    return None


def _container_call(toks: list[Token]) -> str | None:
    for i, tok in enumerate(toks):
        if tok.kind != "id" or i + 1 >= len(toks):
            continue
        name = tok.text
        if name in ("sets", "lists") and i + 3 < len(toks) and toks[i + 1].text == ".":
            name = f"{name}.{toks[i + 2].text}"
            if toks[i + 3].text == "(" and name in _CONTAINER_FUNCTIONS:
                return name
        elif toks[i + 1].text == "(" and name in _CONTAINER_FUNCTIONS:
            return name
    return None


def _check_optional_safety(expression: str) -> None:
    """cel-expr-python crashes handing Python a map that holds an optional; refuse such expressions."""
    toks = tokenize(expression)
    escaping = _escaping_optional(toks)
    if escaping is None:
        return
    function = _container_call(toks)
    if function is None:
        return
    line, col = _position(expression, escaping.start)
    raise CELError(
        f"ERROR: <input>:{line}:{col}: an optional value here may end up inside a list or map passed to "
        f"{function}(), which this evaluator cannot do; unwrap it with orValue() or value() first"
        + _caret(expression, escaping.start),
        expression=expression,
        phase="compile",
    )


def _position(expression: str, offset: int) -> tuple[int, int]:
    line = expression.count("\n", 0, offset) + 1
    col = offset - (expression.rfind("\n", 0, offset) + 1) + 1
    return line, col


def _caret(expression: str, offset: int) -> str:
    """cel-go's snippet under an error: the line, then dots up to a caret."""
    line_start = expression.rfind("\n", 0, offset) + 1
    line_end = expression.find("\n", offset)
    text = expression[line_start : line_end if line_end >= 0 else len(expression)]
    return f"\n | {text}\n | {'.' * (offset - line_start)}^"


def compile_error(expression: str, offset: int, detail: str) -> CELError:
    """A compile error located at ``offset``, formatted like cel-go's issues."""
    line, col = _position(expression, offset)
    return CELError(
        f"ERROR: <input>:{line}:{col}: {detail}" + _caret(expression, offset),
        expression=expression,
        phase="compile",
    )


# --- errors from the engine ------------------------------------------------------------------------

_STATUS_PREFIX = re.compile(r"^[A-Z_]+: ")
_ENGINE_MESSAGES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r'^Key not found in map : "(.*)"$', re.DOTALL), r"no such key: \1"),
    (re.compile(r"^divide by zero$"), "division by zero"),
    (re.compile(r"^No matching overloads found : .*$", re.DOTALL), "no such overload"),
    (re.compile(r"^Index error: index=(-?\d+) size=(\d+)$"), r"index '\1' out of range in list size '\2'"),
    (re.compile(r'^No value with name "(.*)" found in Activation$'), r"no such attribute(s): \1"),
]


def _runtime_message(text: str) -> str:
    """cel-cpp's status text in cel-go's words where they differ (policies' messages quote them)."""
    text = _STATUS_PREFIX.sub("", text, count=1)
    for pattern, replacement in _ENGINE_MESSAGES:
        if pattern.match(text):
            return pattern.sub(replacement, text, count=1)
    return text


def _compile_message(text: str) -> str:
    text = _STATUS_PREFIX.sub("", text, count=1)
    return re.sub(r" \[[A-Z_]+\]$", "", text)


# --- values ----------------------------------------------------------------------------------------


def _from_cel(value: Any, expression: str) -> Any:
    """A result as plain Python, element by element, so an optional inside is an error, not a crash."""
    kind = value.type().name()
    if kind == "NULL":
        return None
    if kind in ("BOOL", "INT", "UINT", "DOUBLE", "STRING", "TIMESTAMP", "DURATION"):
        return value.value()
    if kind == "BYTES":
        return bytes(value.value())
    if kind.startswith("LIST"):
        return [_from_cel(item, expression) for item in value.value()]
    if kind.startswith("MAP"):
        return {key: _from_cel(item, expression) for key, item in value.value().items()}
    if kind.startswith("TYPE"):
        return str(value.value().name()).lower()
    raise UnsupportedResult(
        "the result holds an optional (or another value without a JSON form)",
        expression=expression,
        phase="runtime",
    )


def _to_cel(value: Any) -> tuple[Any, AuthzCallback | None]:
    if isinstance(value, Authorizer):
        return _authorizer_value(value), value.check
    return value, None


class Activation:
    """Variable values converted to CEL once, shared by every program evaluated against them."""

    __slots__ = ("_activation", "authz")

    def __init__(self, values: Mapping[str, Any]) -> None:
        data: dict[str, Any] = {}
        self.authz: AuthzCallback | None = None
        for name, value in values.items():
            converted, authz = _to_cel(value)
            data[name] = converted
            if authz is not None:
                self.authz = authz
        try:
            self._activation = _env(frozenset()).Activation(data)
        except Exception as exc:
            raise CELError(f"cannot bind variables: {exc}", expression="", phase="runtime") from None


class Program:
    """A compiled expression."""

    __slots__ = ("_compiled", "expression", "output_type", "variables")

    def __init__(self, expression: str, variables: frozenset[str], compiled: Any) -> None:
        self.expression = expression
        self.variables = variables
        self._compiled = compiled
        self.output_type = _type_name(str(compiled.return_type()))
        """The checked result type in cel-go's spelling: ``bool``, ``string``, ``dyn``, ``list(int)``..."""

    def evaluate(self, activation: Activation | Mapping[str, Any]) -> Any:
        """The result as a JSON-shaped value; raises :class:`CELError` (or :class:`UnsupportedResult`)."""
        if not isinstance(activation, Activation):
            activation = Activation({k: v for k, v in activation.items() if k in self.variables})
        token = _CURRENT_AUTHZ.set(activation.authz)
        try:
            result = self._compiled.eval(activation._activation)
            kind = result.type().name()
            if kind == "ERROR":
                try:
                    text = result.value()
                except TypeError:  # an optional at the top: cel-expr-python cannot hand it over
                    raise UnsupportedResult(
                        "the result is an optional value", expression=self.expression, phase="runtime"
                    ) from None
                raise CELError(_runtime_message(str(text)), expression=self.expression, phase="runtime")
            return _from_cel(result, self.expression)
        except CELError:
            raise
        except Exception as exc:
            raise CELError(_runtime_message(str(exc)), expression=self.expression, phase="runtime") from None
        finally:
            _CURRENT_AUTHZ.reset(token)


def _type_name(engine_name: str) -> str:
    name = engine_name.lower().replace("<", "(").replace(">", ")")
    return "null_type" if name == "null" else name


@functools.lru_cache(maxsize=4096)
def _compile(expression: str, variables: frozenset[str]) -> Program | CELError:
    try:
        _check_optional_safety(expression)
        compiled = _env(variables).compile(expression)
    except CELError as exc:
        return exc
    except Exception as exc:
        return CELError(_compile_message(str(exc)), expression=expression, phase="compile")
    return Program(expression, variables, compiled)


def compile(expression: str, variables: Iterable[str]) -> Program:
    """Compile ``expression`` with ``variables`` declared (all ``dyn``); raises :class:`CELError`."""
    result = _compile(expression, frozenset(variables))
    if isinstance(result, CELError):
        raise result
    return result
