"""Node selectors, node affinity and tolerations (component-helpers ``scheduling/corev1``).

A ``NodeSelectorTerm`` ANDs its ``matchExpressions`` (on labels) and ``matchFields`` (only
``metadata.name``); terms are ORed; an empty term matches nothing and a term that does not parse is
ignored, as upstream ignores it. A pod's required node affinity is its ``nodeSelector`` AND its
required terms.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from vplane.kube import labels
from vplane.kube.errors import StatusError

NAME_FIELD = "metadata.name"
_OPERATORS = {
    "In": labels.Operator.IN,
    "NotIn": labels.Operator.NOT_IN,
    "Exists": labels.Operator.EXISTS,
    "DoesNotExist": labels.Operator.DOES_NOT_EXIST,
    "Gt": labels.Operator.GREATER_THAN,
    "Lt": labels.Operator.LESS_THAN,
}


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


class _Invalid(Exception):
    pass


def _requirement(expr: Mapping[str, Any]) -> labels.Requirement:
    op = _OPERATORS.get(str(expr.get("operator")))
    if op is None:
        raise _Invalid(f"{expr.get('operator')!r} is not a valid label selector operator")
    values = tuple(str(v) for v in _l(expr.get("values")))
    try:
        return labels.Requirement(str(expr.get("key") or ""), op, values)
    except StatusError as exc:
        raise _Invalid(exc.message) from None


@dataclass(frozen=True, slots=True)
class _FieldRequirement:
    key: str
    operator: str
    values: frozenset[str]

    def matches(self, node_name: str) -> bool:
        if self.operator == "In":
            return node_name in self.values
        return node_name not in self.values


def _field(expr: Mapping[str, Any]) -> _FieldRequirement:
    key, op = str(expr.get("key") or ""), str(expr.get("operator") or "")
    values = frozenset(str(v) for v in _l(expr.get("values")))
    if key != NAME_FIELD or op not in ("In", "NotIn") or len(values) != 1:
        raise _Invalid(f"not a valid field selector requirement: {key} {op}")
    return _FieldRequirement(key, op, values)


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    expressions: tuple[labels.Requirement, ...]
    fields: tuple[_FieldRequirement, ...]

    @classmethod
    def parse(cls, term: Any) -> NodeSelectorTerm:
        """Raises ``_Invalid`` for a term upstream would not parse."""
        term = _d(term)
        return cls(
            tuple(_requirement(_d(e)) for e in _l(term.get("matchExpressions"))),
            tuple(_field(_d(f)) for f in _l(term.get("matchFields"))),
        )

    def matches(self, node_labels: Mapping[str, str], node_name: str) -> bool:
        if not self.expressions and not self.fields:
            return False
        return all(r.matches(node_labels) for r in self.expressions) and all(
            f.matches(node_name) for f in self.fields
        )


def parse_terms(raw: Any) -> tuple[NodeSelectorTerm, ...]:
    """The terms of a ``NodeSelector`` that parse (the others never match)."""
    out = []
    for term in _l(raw):
        try:
            out.append(NodeSelectorTerm.parse(term))
        except _Invalid:
            continue
    return tuple(out)


@dataclass(frozen=True, slots=True)
class RequiredNodeAffinity:
    """``nodeaffinity.RequiredNodeAffinity``: ``nodeSelector`` AND the required node-affinity terms."""

    node_selector: Mapping[str, str] | None
    terms: tuple[NodeSelectorTerm, ...] | None
    """None when the pod has no required node affinity (then only the node selector counts)."""

    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> RequiredNodeAffinity:
        selector = spec.get("nodeSelector")
        required = _d(_d(_d(spec.get("affinity")).get("nodeAffinity"))).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        return cls(
            {str(k): str(v) for k, v in selector.items()} if isinstance(selector, dict) else None,
            parse_terms(_d(required).get("nodeSelectorTerms")) if isinstance(required, dict) else None,
        )

    @property
    def empty(self) -> bool:
        return self.node_selector is None and self.terms is None

    def matches(self, node_labels: Mapping[str, str], node_name: str) -> bool:
        if self.node_selector and any(node_labels.get(k) != v for k, v in self.node_selector.items()):
            return False
        if self.terms is None:
            return True
        return any(t.matches(node_labels, node_name) for t in self.terms)


def required_node_names(spec: Mapping[str, Any]) -> set[str] | None:
    """NodeAffinity's PreFilter result: the only node names the required terms can match when each term pins
    ``metadata.name In``; None when any term leaves all nodes possible (an empty set: none can match)."""
    required = _d(_d(_d(spec.get("affinity")).get("nodeAffinity"))).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    terms = _l(_d(required).get("nodeSelectorTerms"))
    if not terms:
        return None
    names: set[str] | None = None
    for term in terms:
        term_names: set[str] | None = None
        for expr in _l(_d(term).get("matchFields")):
            expr = _d(expr)
            if expr.get("key") == NAME_FIELD and expr.get("operator") == "In":
                values = {str(v) for v in _l(expr.get("values"))}
                term_names = values if term_names is None else term_names & values
        if term_names is None:
            return None
        names = term_names if names is None else names | term_names
    return names


@dataclass(frozen=True, slots=True)
class PreferredTerm:
    weight: int
    term: NodeSelectorTerm


def preferred_terms(spec: Mapping[str, Any]) -> tuple[PreferredTerm, ...]:
    """``preferredDuringSchedulingIgnoredDuringExecution`` terms with a weight (zero weights are dropped)."""
    raw = _d(_d(_d(spec.get("affinity")).get("nodeAffinity"))).get(
        "preferredDuringSchedulingIgnoredDuringExecution"
    )
    out = []
    for item in _l(raw):
        item = _d(item)
        weight = item.get("weight")
        if not isinstance(weight, int) or weight == 0:
            continue
        try:
            out.append(PreferredTerm(weight, NodeSelectorTerm.parse(item.get("preference"))))
        except _Invalid:
            continue
    return tuple(out)


# -- taints and tolerations ----------------------------------------------------------------------------


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """``Toleration.ToleratesTaint``: an empty effect or key matches any; ``Exists`` ignores the value."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def tolerated(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    return any(tolerates(t, taint) for t in tolerations)


def untolerated_taint(
    taints: Iterable[Mapping[str, Any]],
    tolerations: list[Mapping[str, Any]],
    wanted: Callable[[Mapping[str, Any]], bool],
) -> Mapping[str, Any] | None:
    """``FindMatchingUntoleratedTaint``: the first taint ``wanted`` selects that no toleration tolerates."""
    for taint in taints:
        if wanted(taint) and not tolerated(tolerations, taint):
            return taint
    return None


def do_not_schedule(taint: Mapping[str, Any]) -> bool:
    """The taints the filter cares about (``helper.DoNotScheduleTaintsFilterFunc``)."""
    return taint.get("effect") in ("NoSchedule", "NoExecute")


def pod_tolerations(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [t for t in _l(spec.get("tolerations")) if isinstance(t, dict)]
