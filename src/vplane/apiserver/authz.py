"""Authorization: RBAC (Role, ClusterRole, RoleBinding, ClusterRoleBinding) and the messages it denies with.

The evaluator is pure: it reads an :class:`RBACIndex` of decoded objects, which the server keeps current
from watch events on the four RBAC resources. Members of ``system:masters`` are allowed everything, as
upstream's superuser authorizer does, so a broken RBAC setup never locks the administrator out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vplane.apiserver.context import UserInfo
from vplane.kube import errors
from vplane.kube.labels import from_label_selector
from vplane.kube.objects import Obj
from vplane.kube.validation import go_quote

SUPERUSER_GROUP = "system:masters"
RBAC_GROUP = "rbac.authorization.k8s.io"


@dataclass(frozen=True, slots=True)
class Attributes:
    """What a request does, in authorization terms (upstream ``authorizer.Attributes``)."""

    user: UserInfo
    verb: str
    resource_request: bool
    namespace: str = ""
    group: str = ""
    version: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    path: str = ""


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str = ""


@dataclass
class RBACIndex:
    """Decoded RBAC objects by key; rebuilt incrementally from watch events."""

    roles: dict[tuple[str, str], Obj] = field(default_factory=dict)
    cluster_roles: dict[str, Obj] = field(default_factory=dict)
    role_bindings: dict[tuple[str, str], Obj] = field(default_factory=dict)
    cluster_role_bindings: dict[str, Obj] = field(default_factory=dict)
    generation: int = 0
    """Bumped by every :meth:`put`: what the authorizer's caches are valid for."""

    def put(self, resource: str, obj: Obj | None, namespace: str, name: str) -> None:
        self.generation += 1
        table: dict[Any, Obj]
        key: Any
        if resource == "roles":
            table, key = self.roles, (namespace, name)
        elif resource == "clusterroles":
            table, key = self.cluster_roles, name
        elif resource == "rolebindings":
            table, key = self.role_bindings, (namespace, name)
        elif resource == "clusterrolebindings":
            table, key = self.cluster_role_bindings, name
        else:
            return
        if obj is None:
            table.pop(key, None)
        else:
            table[key] = obj


def _subject_matches(subject: Obj, user: UserInfo, binding_namespace: str) -> bool:
    kind = subject.get("kind")
    name = subject.get("name", "")
    if kind == "User":
        return bool(name == user.name)
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or binding_namespace
        return user.name == f"system:serviceaccount:{ns}:{name}"
    return False


def _match(values: list[str] | None, wanted: str) -> bool:
    return bool(values) and ("*" in values or wanted in values)  # type: ignore[operator]


def rule_allows(rule: Obj, attrs: Attributes) -> bool:
    verbs = rule.get("verbs") or []
    if not _match(verbs, attrs.verb):
        return False
    if not attrs.resource_request:
        for url in rule.get("nonResourceURLs") or []:
            # upstream trims every trailing "*" (NonResourceURLMatches), as the escalation check does
            if (
                url == "*"
                or url == attrs.path
                or (url.endswith("*") and attrs.path.startswith(url.rstrip("*")))
            ):
                return True
        return False
    if not _match(rule.get("apiGroups"), attrs.group):
        return False
    resources = rule.get("resources") or []
    combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    if not (
        "*" in resources
        or combined in resources
        or (attrs.subresource and f"*/{attrs.subresource}" in resources)
    ):
        return False
    names = rule.get("resourceNames") or []
    return not names or attrs.name in names


RULES_CACHE_ENTRIES = 4096
"""Distinct (user, groups, namespace) rule lists kept between RBAC changes; past it the cache starts over."""


class RBACAuthorizer:
    def __init__(self, index: RBACIndex) -> None:
        self.index = index
        # Resolving a user's rules scans every binding (and expands aggregated roles); on the request path
        # that was the larger part of authorization. The rules only change with an RBAC object, so they are
        # kept per (user, groups, namespace) until the index's generation moves.
        self._rules: dict[tuple[str, tuple[str, ...], str], tuple[Obj, ...]] = {}
        self._rules_generation = -1

    def cluster_role_rules(self, name: str) -> list[Obj]:
        """The ClusterRole's rules plus, through its ``aggregationRule``, those of every ClusterRole its
        selectors match, transitively: upstream's aggregation controller writes aggregated rules into the
        role, so ``admin`` picks up ``edit``'s aggregated rules, and ``edit`` those of ``view``."""
        role = self.index.cluster_roles.get(name)
        if role is None:
            return []
        rules: list[Obj] = []
        self._aggregate(role, rules, {name})
        return rules

    def _aggregate(self, role: Obj, rules: list[Obj], seen: set[str]) -> None:
        rules.extend(role.get("rules") or [])
        aggregation = role.get("aggregationRule") or {}
        for selector in aggregation.get("clusterRoleSelectors") or []:
            sel = from_label_selector(selector)
            for other_name, other in self.index.cluster_roles.items():
                if other_name not in seen and sel.matches((other.get("metadata") or {}).get("labels") or {}):
                    seen.add(other_name)
                    self._aggregate(other, rules, seen)

    def _role_rules(self, ref: Obj, namespace: str) -> list[Obj]:
        kind = ref.get("kind")
        if kind == "ClusterRole":
            return self.cluster_role_rules(str(ref.get("name", "")))
        if kind == "Role":
            role = self.index.roles.get((namespace, str(ref.get("name", ""))))
            return list((role or {}).get("rules") or [])
        return []

    def role_ref_rules(self, ref: Obj, namespace: str) -> list[Obj]:
        """The rules a binding's ``roleRef`` grants in ``namespace``; 404 when the role does not exist, as
        upstream's ``GetRoleReferenceRules`` (its roles come from the registry, hence the plural resource)."""
        kind = ref.get("kind")
        name = str(ref.get("name", ""))
        if kind == "ClusterRole":
            if name not in self.index.cluster_roles:
                raise errors.not_found("clusterroles", name, RBAC_GROUP)
            return self.cluster_role_rules(name)
        if kind == "Role":
            role = self.index.roles.get((namespace, name))
            if role is None:
                raise errors.not_found("roles", name, RBAC_GROUP)
            return list(role.get("rules") or [])
        # Unreachable through the API: validation refuses other kinds before admission runs.
        raise errors.internal_error(f"unsupported role reference kind: {go_quote(str(kind or ''))}")

    def rules_with_errors(self, user: UserInfo, namespace: str) -> tuple[list[Obj], list[str]]:
        """:meth:`rules_for` with what upstream's rule resolver reports besides the rules: the bindings of
        ``user`` whose role is missing, in the registry's (name) order. Only escalation checks need this,
        so :meth:`rules_for` on the request path stays as it is."""
        rules: list[Obj] = []
        problems: list[str] = []

        def visit(ref: Obj, ns: str) -> None:
            kind = ref.get("kind")
            if kind not in ("ClusterRole", "Role"):
                problems.append(f"unsupported role reference kind: {go_quote(str(kind or ''))}")
                return
            try:
                rules.extend(self.role_ref_rules(ref, ns))
            except errors.StatusError as exc:
                problems.append(exc.message)

        for _name, binding in sorted(self.index.cluster_role_bindings.items()):
            if any(_subject_matches(s, user, "") for s in binding.get("subjects") or []):
                visit(binding.get("roleRef") or {}, "")
        if namespace:
            for (ns, _name), binding in sorted(self.index.role_bindings.items()):
                if ns == namespace and any(
                    _subject_matches(s, user, ns) for s in binding.get("subjects") or []
                ):
                    visit(binding.get("roleRef") or {}, ns)
        return rules, problems

    def rules_for(self, user: UserInfo, namespace: str) -> list[Obj]:
        """Every rule that applies to ``user`` in ``namespace`` (cluster-wide rules included)."""
        return list(self._cached_rules(user, namespace))

    def _cached_rules(self, user: UserInfo, namespace: str) -> tuple[Obj, ...]:
        if self._rules_generation != self.index.generation:
            self._rules.clear()
            self._rules_generation = self.index.generation
        key = (user.name, user.groups, namespace)
        rules = self._rules.get(key)
        if rules is None:
            if len(self._rules) >= RULES_CACHE_ENTRIES:
                self._rules.clear()
            rules = self._rules[key] = tuple(self._resolve_rules(user, namespace))
        return rules

    def _resolve_rules(self, user: UserInfo, namespace: str) -> list[Obj]:
        rules: list[Obj] = []
        for binding in self.index.cluster_role_bindings.values():
            if any(_subject_matches(s, user, "") for s in binding.get("subjects") or []):
                rules.extend(self._role_rules(binding.get("roleRef") or {}, ""))
        if namespace:
            for (ns, _name), binding in self.index.role_bindings.items():
                if ns != namespace:
                    continue
                if any(_subject_matches(s, user, ns) for s in binding.get("subjects") or []):
                    rules.extend(self._role_rules(binding.get("roleRef") or {}, ns))
        return rules

    def authorize(self, attrs: Attributes) -> Decision:
        if SUPERUSER_GROUP in attrs.user.groups:
            return Decision(True, "superuser")
        for rule in self._cached_rules(attrs.user, attrs.namespace if attrs.resource_request else ""):
            if rule_allows(rule, attrs):
                return Decision(True, "RBAC")
        return Decision(False, "")


def forbidden_reason(attrs: Attributes) -> str:
    """Upstream's denial text: ``User "alice" cannot list resource "configmaps" in API group "" ...``."""
    who = f'User "{attrs.user.name}"'
    if not attrs.resource_request:
        return f'{who} cannot {attrs.verb} path "{attrs.path}"'
    resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    scope = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    return f'{who} cannot {attrs.verb} resource "{resource}" in API group "{attrs.group}" {scope}'
