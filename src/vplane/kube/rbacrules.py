"""RBAC rule coverage: does one set of PolicyRules grant everything another does?

This is the arithmetic behind escalation prevention: a user may create a role, or bind one, only when the
rules they already hold cover its rules. It follows upstream ``pkg/registry/rbac/validation``
(``Covers``, ``BreakdownRule``, ``ruleCovers``, ``CompactRules``) and ``CompactString`` from
``pkg/apis/rbac/v1/helpers``, because the denial lists the missing rules in exactly that notation and
people (and tools) read it.

Coverage is decided on the smallest pieces: every rule is broken down into one verb × one API group ×
one resource (× one resource name), or one verb × one non-resource URL, so each piece is either covered
by a single held rule or not at all. Wildcards are those of upstream's comparator, which is stricter than
the authorizer in one place: a held ``pods/*`` is the literal resource ``pods/*``, while ``*/scale``
covers every resource's ``scale`` subresource, and a non-resource URL ending in ``*`` covers every URL
with that prefix.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from vplane.kube.validation import go_quote

ALL = "*"


@dataclass(frozen=True, slots=True)
class PolicyRule:
    """One ``rbac.authorization.k8s.io/v1`` PolicyRule; fields in the order ``CompactString`` prints them."""

    api_groups: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ()

    @classmethod
    def from_obj(cls, rule: Any) -> PolicyRule:
        """From a decoded rule; anything that is not a list of strings counts as empty."""
        if not isinstance(rule, dict):
            return cls()
        return cls(
            api_groups=_strings(rule.get("apiGroups")),
            resources=_strings(rule.get("resources")),
            non_resource_urls=_strings(rule.get("nonResourceURLs")),
            resource_names=_strings(rule.get("resourceNames")),
            verbs=_strings(rule.get("verbs")),
        )


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if isinstance(v, str))


def rules_from(objs: Iterable[Any]) -> list[PolicyRule]:
    return [PolicyRule.from_obj(r) for r in objs]


FULL_AUTHORITY = (
    PolicyRule(api_groups=(ALL,), resources=(ALL,), verbs=(ALL,)),
    PolicyRule(non_resource_urls=(ALL,), verbs=(ALL,)),
)
"""What ``cluster-admin`` holds; upstream asks for it before anyone may set an ``aggregationRule``."""


# -- coverage ------------------------------------------------------------------------------------------


def breakdown(rule: PolicyRule) -> list[PolicyRule]:
    """The rule as pieces with at most one verb, group, resource and resource name (upstream order)."""
    pieces: list[PolicyRule] = []
    for group in rule.api_groups:
        for resource in rule.resources:
            for verb in rule.verbs:
                if rule.resource_names:
                    pieces.extend(
                        PolicyRule(
                            api_groups=(group,), resources=(resource,), resource_names=(n,), verbs=(verb,)
                        )
                        for n in rule.resource_names
                    )
                else:
                    pieces.append(PolicyRule(api_groups=(group,), resources=(resource,), verbs=(verb,)))
    for url in rule.non_resource_urls:
        for verb in rule.verbs:
            pieces.append(PolicyRule(non_resource_urls=(url,), verbs=(verb,)))
    return pieces


def _resources_cover(held: Sequence[str], wanted: Sequence[str]) -> bool:
    if ALL in held:
        return True
    for resource in wanted:
        if resource in held:
            continue
        _parent, slash, sub = resource.partition("/")
        if not slash or f"*/{sub}" not in held:
            return False
    return True


def _url_covers(held: str, wanted: str) -> bool:
    return held == wanted or (held.endswith(ALL) and wanted.startswith(held.rstrip(ALL)))


def rule_covers(owner: PolicyRule, piece: PolicyRule) -> bool:
    """Whether ``owner`` grants everything ``piece`` does (upstream ``ruleCovers``; exact for pieces from
    :func:`breakdown`, conservative for bigger rules)."""
    if not (ALL in owner.verbs or all(v in owner.verbs for v in piece.verbs)):
        return False
    if not (ALL in owner.api_groups or all(g in owner.api_groups for g in piece.api_groups)):
        return False
    if not _resources_cover(owner.resources, piece.resources):
        return False
    if not all(any(_url_covers(h, u) for h in owner.non_resource_urls) for u in piece.non_resource_urls):
        return False
    if not owner.resource_names:
        return True
    return bool(piece.resource_names) and all(n in owner.resource_names for n in piece.resource_names)


def covers(owner_rules: Sequence[PolicyRule], servant_rules: Iterable[PolicyRule]) -> list[PolicyRule]:
    """The pieces of ``servant_rules`` that no rule in ``owner_rules`` covers (empty: fully covered)."""
    missing: list[PolicyRule] = []
    for rule in servant_rules:
        for piece in breakdown(rule):
            if not any(rule_covers(owner, piece) for owner in owner_rules):
                missing.append(piece)
    return missing


# -- describing what is missing ------------------------------------------------------------------------


def compact_rules(rules: Sequence[PolicyRule]) -> list[PolicyRule]:
    """Merge rules that name one group and one resource (and at most one resource name) and differ only in
    verbs, as upstream ``CompactRules``: verbs are appended in order, repeats kept."""
    compacted: list[PolicyRule] = []
    simple: dict[tuple[str, str, bool, str], PolicyRule] = {}
    for rule in rules:
        key = _simple_key(rule)
        if key is None:
            compacted.append(rule)
        elif key in simple:
            simple[key] = replace(simple[key], verbs=simple[key].verbs + rule.verbs)
        else:
            simple[key] = rule
    compacted.extend(simple.values())
    return compacted


def _simple_key(rule: PolicyRule) -> tuple[str, str, bool, str] | None:
    if len(rule.resource_names) > 1 or rule.non_resource_urls:
        return None
    if len(rule.api_groups) != 1 or len(rule.resources) != 1:
        return None
    name = rule.resource_names[0] if rule.resource_names else ""
    return (rule.api_groups[0], rule.resources[0], bool(rule.resource_names), name)


def go_quote_list(values: Sequence[str]) -> str:
    """Go's ``%q`` of a ``[]string``: ``["a" "b"]``."""
    return "[" + " ".join(go_quote(v) for v in values) + "]"


def compact_string(rule: PolicyRule) -> str:
    """``{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}``: upstream ``CompactString``, empty
    fields left out."""
    parts = [
        f"{label}:{go_quote_list(values)}"
        for label, values in (
            ("APIGroups", rule.api_groups),
            ("Resources", rule.resources),
            ("NonResourceURLs", rule.non_resource_urls),
            ("ResourceNames", rule.resource_names),
            ("Verbs", rule.verbs),
        )
        if values
    ]
    return "{" + ", ".join(parts) + "}"


def describe_missing(missing: Sequence[PolicyRule]) -> list[str]:
    """The lines of the denial: compacted, one per rule, de-duplicated and sorted (a Go string set)."""
    return sorted({compact_string(rule) for rule in compact_rules(missing)})


# -- updates that only the garbage collector makes -----------------------------------------------------

_GC_METADATA = ("ownerReferences", "finalizers", "selfLink", "managedFields", "resourceVersion")


def only_gc_fields_change(new: Any, old: Any) -> bool:
    """Whether ``new`` differs from ``old`` only in owner references and finalizers (upstream
    ``IsOnlyMutatingGCFields``), so an update that just lets an object be deleted needs no coverage.
    ``resourceVersion`` and ``managedFields`` are bookkeeping here, not content."""
    if not isinstance(new, dict) or not isinstance(old, dict):
        return False

    def stripped(obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            return obj
        return {**obj, "metadata": {k: v for k, v in meta.items() if k not in _GC_METADATA}}

    return stripped(new) == stripped(old)
