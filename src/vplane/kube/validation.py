"""Name and metadata validation with upstream's exact wording.

Clients (kubectl, kopf, the Python clients) show these messages verbatim and tests in the wild match on
them, so every string here follows apimachinery v0.36: ``pkg/api/validate/content`` (``dns.go``,
``kube.go``, ``path.go``, ``errors.go``), ``pkg/api/validation/objectmeta.go`` and ``generic.go``, and
``pkg/apis/meta/v1/validation/validation.go``. The string checks return plain messages (like upstream's
``Is*`` functions) so callers can attach them to whatever field path they validate; the object-level
checks return :class:`~vplane.kube.errors.Cause` lists ready for ``errors.invalid``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from vplane.kube import errors

# --- message builders (content/errors.go) --------------------------------------------------------------


def max_len_error(length: int) -> str:
    """Upstream ``MaxLenError``."""
    return f"must be no more than {length} bytes"


def empty_error() -> str:
    return "must be non-empty"


def regex_error(msg: str, regex: str, *examples: str) -> str:
    """Upstream ``RegexError``: the message, examples, then the regex that was used."""
    if not examples:
        return f"{msg} (regex used for validation is '{regex}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{regex}')"


def byte_len(value: str) -> int:
    """Length as Go's ``len``: limits upstream are in UTF-8 bytes, not characters."""
    return len(value.encode("utf-8", "surrogatepass"))


def go_quote(value: str) -> str:
    """Render a string as Go's ``%q`` does, for messages that embed a bad value."""
    out = ['"']
    for ch in value:
        code = ord(ch)
        if ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ch.isprintable() and not 0xD800 <= code <= 0xDFFF:
            out.append(ch)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


_GO_ESCAPES = {
    "\\": "\\\\",
    '"': '\\"',
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}

# --- string formats -------------------------------------------------------------------------------------

DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_LABEL_MAX_LENGTH = 63
_DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)

DNS1123_SUBDOMAIN_FMT = DNS1123_LABEL_FMT + "(\\." + DNS1123_LABEL_FMT + ")*"
DNS1123_SUBDOMAIN_MAX_LENGTH = 253
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)

DNS1035_LABEL_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
DNS1035_LABEL_MAX_LENGTH = 63
_DNS1035_LABEL_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
    "start with an alphabetic character, and end with an alphanumeric character"
)

QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
QUALIFIED_NAME_MAX_LENGTH = 63
_QUALIFIED_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)

LABEL_VALUE_FMT = "(" + QUALIFIED_NAME_FMT + ")?"
LABEL_VALUE_MAX_LENGTH = 63
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)

# Go's regexp has no ``$``-before-newline quirk; ``fullmatch`` gives the same anchoring.
_DNS1123_LABEL_RE = re.compile(DNS1123_LABEL_FMT)
_DNS1123_SUBDOMAIN_RE = re.compile(DNS1123_SUBDOMAIN_FMT)
_DNS1035_LABEL_RE = re.compile(DNS1035_LABEL_FMT)
_QUALIFIED_NAME_RE = re.compile(QUALIFIED_NAME_FMT)
_LABEL_VALUE_RE = re.compile(LABEL_VALUE_FMT)


def dns1123_label(value: str) -> list[str]:
    """Upstream ``IsDNS1123Label`` (namespace names, many object names)."""
    errs: list[str] = []
    if byte_len(value) > DNS1123_LABEL_MAX_LENGTH:
        errs.append(max_len_error(DNS1123_LABEL_MAX_LENGTH))
    if not _DNS1123_LABEL_RE.fullmatch(value):
        if _DNS1123_SUBDOMAIN_RE.fullmatch(value):
            # A valid subdomain that is not a valid label can only be failing on its dots.
            errs.append("must not contain dots")
        else:
            errs.append(regex_error(_DNS1123_LABEL_MSG, DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def dns1123_subdomain(value: str) -> list[str]:
    """Upstream ``IsDNS1123Subdomain``: the default rule for object names."""
    errs: list[str] = []
    if byte_len(value) > DNS1123_SUBDOMAIN_MAX_LENGTH:
        errs.append(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH))
    if not _DNS1123_SUBDOMAIN_RE.fullmatch(value):
        errs.append(regex_error(_DNS1123_SUBDOMAIN_MSG, DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def dns1035_label(value: str) -> list[str]:
    """Upstream ``IsDNS1035Label`` (Service names)."""
    errs: list[str] = []
    if byte_len(value) > DNS1035_LABEL_MAX_LENGTH:
        errs.append(max_len_error(DNS1035_LABEL_MAX_LENGTH))
    if not _DNS1035_LABEL_RE.fullmatch(value):
        errs.append(regex_error(_DNS1035_LABEL_MSG, DNS1035_LABEL_FMT, "my-name", "abc-123"))
    return errs


def qualified_name(value: str) -> list[str]:
    """Upstream ``IsQualifiedName`` / ``IsLabelKey``: ``[prefix/]name`` for label keys and finalizers."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part " + empty_error())
        else:
            errs.extend("prefix part " + msg for msg in dns1123_subdomain(prefix))
    else:
        return [
            "a valid label key "
            + regex_error(_QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part " + empty_error())
    elif byte_len(name) > QUALIFIED_NAME_MAX_LENGTH:
        errs.append("name part " + max_len_error(QUALIFIED_NAME_MAX_LENGTH))
    if not _QUALIFIED_NAME_RE.fullmatch(name):
        errs.append(
            "name part "
            + regex_error(_QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errs


def label_value(value: str) -> list[str]:
    """Upstream ``IsValidLabelValue``; the empty string is a valid value."""
    errs: list[str] = []
    if byte_len(value) > LABEL_VALUE_MAX_LENGTH:
        errs.append(max_len_error(LABEL_VALUE_MAX_LENGTH))
    if not _LABEL_VALUE_RE.fullmatch(value):
        errs.append(regex_error(_LABEL_VALUE_MSG, LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def path_segment_name(name: str) -> list[str]:
    """Upstream ``IsPathSegmentName``: the only rule for kinds whose names just go into URLs (RBAC).

    Like upstream it checks neither emptiness nor length.
    """
    if name in (".", ".."):
        return [f"may not be '{name}'"]
    return path_segment_prefix(name)


def path_segment_prefix(name: str) -> list[str]:
    """Upstream ``IsPathSegmentPrefix``: a ``generateName`` may be '.' since a suffix follows it."""
    return [f"may not contain '{bad}'" for bad in ("/", "%") if bad in name]


# --- object metadata ------------------------------------------------------------------------------------

TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024
"""Upstream ``TotalAnnotationSizeLimitB``: keys plus values, in bytes."""

FINALIZER_ORPHAN_DEPENDENTS = "orphan"
FINALIZER_DELETE_DEPENDENTS = "foregroundDeletion"

NameValidator = Callable[[str], list[str]]

# A generateName is a prefix, so the kinds whose rule forbids exact names ('.', '..') check it with the
# prefix variant, as upstream's ``ValidateNameFunc(name, prefix=true)`` does.
_PREFIX_VALIDATORS: dict[NameValidator, NameValidator] = {path_segment_name: path_segment_prefix}


def _mask_trailing_dash(name: str) -> str:
    """Upstream ``maskTrailingDash``, bug included.

    It drops the last *two* characters before appending 'a'; reproduced so the same generateNames pass.
    """
    if len(name) > 1 and name.endswith("-"):
        return name[:-2] + "a"
    return name


def _go_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _invalid_json(field: str, value: Any, detail: str) -> errors.Cause:
    """``field.Invalid`` for a structured value, which upstream renders as compact JSON."""
    return {
        "reason": "FieldValueInvalid",
        "message": f"Invalid value: {_go_json(value)}: {detail}",
        "field": field,
    }


def _type_invalid(field: str, value: Any, type_name: str) -> errors.Cause:
    # Upstream rejects these while decoding; we validate JSON-shaped dicts, so say what was expected.
    return errors.field_type_invalid(field, value, f"must be of type {type_name}")


def validate_label_key(key: str, field: str) -> list[errors.Cause]:
    return [errors.field_invalid(field, key, msg) for msg in qualified_name(key)]


def validate_labels(labels: Any, field: str) -> list[errors.Cause]:
    """Upstream ``ValidateLabels``: keys are qualified names, values label values, all reported at ``field``."""
    if labels is None:
        return []
    if not isinstance(labels, Mapping):
        return [_type_invalid(field, labels, "object")]
    causes: list[errors.Cause] = []
    for key, value in labels.items():
        causes.extend(validate_label_key(str(key), field))
        if not isinstance(value, str):
            causes.append(_type_invalid(field, value, "string"))
            continue
        causes.extend(errors.field_invalid(field, value, msg) for msg in label_value(value))
    return causes


def validate_annotations(annotations: Any, field: str) -> list[errors.Cause]:
    """Upstream ``ValidateAnnotations``: keys checked case-insensitively, 256 KiB in total."""
    if annotations is None:
        return []
    if not isinstance(annotations, Mapping):
        return [_type_invalid(field, annotations, "object")]
    causes: list[errors.Cause] = []
    total = 0
    for key, value in annotations.items():
        key = str(key)
        causes.extend(errors.field_invalid(field, key, msg) for msg in qualified_name(key.lower()))
        if not isinstance(value, str):
            causes.append(_type_invalid(field, value, "string"))
            continue
        total += byte_len(key) + byte_len(value)
    if total > TOTAL_ANNOTATION_SIZE_LIMIT:
        causes.append(errors.field_too_long(field, TOTAL_ANNOTATION_SIZE_LIMIT))
    return causes


def validate_finalizers(finalizers: Any, field: str) -> list[errors.Cause]:
    """Upstream ``ValidateFinalizers``: qualified names, and not both orphan and foreground deletion."""
    if finalizers is None:
        return []
    if not isinstance(finalizers, list):
        return [_type_invalid(field, finalizers, "array")]
    causes: list[errors.Cause] = []
    for finalizer in finalizers:
        if not isinstance(finalizer, str):
            causes.append(_type_invalid(field, finalizer, "string"))
            continue
        causes.extend(errors.field_invalid(field, finalizer, msg) for msg in qualified_name(finalizer))
    if FINALIZER_ORPHAN_DEPENDENTS in finalizers and FINALIZER_DELETE_DEPENDENTS in finalizers:
        causes.append(
            _invalid_json(
                field,
                finalizers,
                f"finalizer {FINALIZER_ORPHAN_DEPENDENTS} and {FINALIZER_DELETE_DEPENDENTS} cannot be both set",
            )
        )
    return causes


def _owner_reference_json(ref: Mapping[str, Any]) -> dict[str, Any]:
    """An ownerReference in the field order of the Go struct, as upstream's error message prints it."""
    out: dict[str, Any] = {
        "apiVersion": ref.get("apiVersion") or "",
        "kind": ref.get("kind") or "",
        "name": ref.get("name") or "",
        "uid": ref.get("uid") or "",
    }
    for optional in ("controller", "blockOwnerDeletion"):
        if ref.get(optional) is not None:
            out[optional] = ref[optional]
    return out


def _api_version_parts(api_version: str) -> tuple[str, str]:
    """Group and version as ``schema.FromAPIVersionAndKind`` sees them (unparseable -> both empty)."""
    if not api_version or api_version == "/":
        return "", ""
    if api_version.count("/") > 1:
        return "", ""
    group, _, version = api_version.rpartition("/")
    return group, version


def validate_owner_references(refs: Any, field: str) -> list[errors.Cause]:
    """Upstream ``ValidateOwnerReferences``; note upstream's paths carry no list index."""
    if refs is None:
        return []
    if not isinstance(refs, list):
        return [_type_invalid(field, refs, "array")]
    causes: list[errors.Cause] = []
    first_controller = ""
    for ref in refs:
        if not isinstance(ref, Mapping):
            causes.append(_type_invalid(field, ref, "object"))
            continue
        strings: dict[str, str] = {}
        for key in ("apiVersion", "kind", "name", "uid"):
            value = ref.get(key)
            if value is not None and not isinstance(value, str):
                causes.append(_type_invalid(f"{field}.{key}", value, "string"))
                value = None
            strings[key] = value or ""
        group, version = _api_version_parts(strings["apiVersion"])
        if not version:
            causes.append(
                errors.field_invalid(
                    f"{field}.apiVersion", strings["apiVersion"], "version must not be empty"
                )
            )
        if not strings["kind"]:
            causes.append(errors.field_invalid(f"{field}.kind", "", "must not be empty"))
        if not strings["name"]:
            causes.append(errors.field_invalid(f"{field}.name", "", "must not be empty"))
        if not strings["uid"]:
            causes.append(errors.field_invalid(f"{field}.uid", "", "must not be empty"))
        if (group, version, strings["kind"]) == ("", "v1", "Event"):
            causes.append(
                _invalid_json(
                    field, _owner_reference_json(ref), "/v1, Kind=Event is disallowed from being an owner"
                )
            )
        if ref.get("controller") is True:
            current = f"{strings['kind']}/{strings['name']}"
            if first_controller:
                causes.append(
                    _invalid_json(
                        field,
                        [_owner_reference_json(r) if isinstance(r, Mapping) else r for r in refs],
                        "Only one reference can have Controller set to true. "
                        f'Found "true" in references for {first_controller} and {current}',
                    )
                )
            else:
                first_controller = current
    return causes


def validate_label_selector(selector: Any, field: str) -> list[errors.Cause]:
    """Upstream ``ValidateLabelSelector`` (for specs that embed a ``metav1.LabelSelector``)."""
    if selector is None:
        return []
    if not isinstance(selector, Mapping):
        return [_type_invalid(field, selector, "object")]
    causes = validate_labels(selector.get("matchLabels"), f"{field}.matchLabels")
    expressions = selector.get("matchExpressions")
    if expressions is None:
        return causes
    if not isinstance(expressions, list):
        return [*causes, _type_invalid(f"{field}.matchExpressions", expressions, "array")]
    for i, expr in enumerate(expressions):
        path = f"{field}.matchExpressions[{i}]"
        if not isinstance(expr, Mapping):
            causes.append(_type_invalid(path, expr, "object"))
            continue
        operator = expr.get("operator")
        values = expr.get("values") or []
        if not isinstance(values, list):
            causes.append(_type_invalid(f"{path}.values", values, "array"))
            values = []
        if operator in ("In", "NotIn"):
            if not values:
                causes.append(
                    errors.field_required(
                        f"{path}.values", "must be specified when `operator` is 'In' or 'NotIn'"
                    )
                )
        elif operator in ("Exists", "DoesNotExist"):
            if values:
                causes.append(
                    errors.field_forbidden(
                        f"{path}.values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
                    )
                )
        else:
            causes.append(errors.field_invalid(f"{path}.operator", operator, "not a valid selector operator"))
        key = expr.get("key")
        if not isinstance(key, str):
            causes.append(_type_invalid(f"{path}.key", key, "string"))
        else:
            causes.extend(validate_label_key(key, f"{path}.key"))
        for j, value in enumerate(values):
            if not isinstance(value, str):
                causes.append(_type_invalid(f"{path}.values[{j}]", value, "string"))
                continue
            causes.extend(
                errors.field_invalid(f"{path}.values[{j}]", value, msg) for msg in label_value(value)
            )
    return causes


def _string_field(meta: Mapping[str, Any], key: str, path: str, causes: list[errors.Cause]) -> str | None:
    """The string at ``key`` ("" when absent), or None after recording a type error."""
    value = meta.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        causes.append(_type_invalid(path, value, "string"))
        return None
    return value


def validate_object_meta(
    meta: Mapping[str, Any],
    *,
    namespaced: bool,
    name_validator: NameValidator = dns1123_subdomain,
    field_prefix: str = "metadata",
) -> list[errors.Cause]:
    """Validate ``metadata`` on create, like upstream ``ValidateObjectMetaAccessor``.

    Differs from upstream in one way on purpose: a missing ``name`` is accepted when ``generateName`` is
    set, so callers may validate before generating the name (they must then validate the result too).
    ``managedFields`` are not checked here; the field manager owns their shape.
    """
    causes: list[errors.Cause] = []
    name = _string_field(meta, "name", f"{field_prefix}.name", causes)
    generate_name = _string_field(meta, "generateName", f"{field_prefix}.generateName", causes)
    namespace = _string_field(meta, "namespace", f"{field_prefix}.namespace", causes)

    if generate_name:
        prefix_validator = _PREFIX_VALIDATORS.get(name_validator)
        if prefix_validator is not None:
            messages = prefix_validator(generate_name)
        else:
            messages = name_validator(_mask_trailing_dash(generate_name))
        causes.extend(
            errors.field_invalid(f"{field_prefix}.generateName", generate_name, m) for m in messages
        )
    if name:
        causes.extend(errors.field_invalid(f"{field_prefix}.name", name, m) for m in name_validator(name))
    elif name == "" and not generate_name:
        causes.append(errors.field_required(f"{field_prefix}.name", "name or generateName is required"))

    if namespaced:
        if namespace == "":
            causes.append(errors.field_required(f"{field_prefix}.namespace"))
        elif namespace is not None:
            causes.extend(
                errors.field_invalid(f"{field_prefix}.namespace", namespace, m)
                for m in dns1123_label(namespace)
            )
    elif namespace:
        causes.append(errors.field_forbidden(f"{field_prefix}.namespace", "not allowed on this type"))

    generation = meta.get("generation")
    if isinstance(generation, int) and not isinstance(generation, bool) and generation < 0:
        causes.append(
            errors.field_invalid(
                f"{field_prefix}.generation", generation, "must be greater than or equal to 0"
            )
        )

    causes.extend(validate_labels(meta.get("labels"), f"{field_prefix}.labels"))
    causes.extend(validate_annotations(meta.get("annotations"), f"{field_prefix}.annotations"))
    causes.extend(validate_owner_references(meta.get("ownerReferences"), f"{field_prefix}.ownerReferences"))
    causes.extend(validate_finalizers(meta.get("finalizers"), f"{field_prefix}.finalizers"))
    return causes
