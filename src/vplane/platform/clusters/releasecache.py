"""Where a cluster's agent Helm release lives, remembered between passes: pure decisions, no I/O.

Finding the release costs helm subprocesses (``helm list`` and ``helm get values`` per namespace looked at),
so a pass reuses the namespace an earlier pass found for ``agent_release_recheck_seconds`` while the desired
release (values, chart version, ``spec.managementNamespace``, connection) is the same. An operator can still
move the agent by hand without touching the Cluster (the runbook's "Keep managementNamespace in sync after
manual namespace changes"); trusting the remembered namespace for the rest of the period would then report
the agent's pods as missing there instead of the runbook's "Helm release that doesn't exist" row.

So each pass weighs evidence against the remembered namespace (a *doubt*): the agent's online tunnel
sessions say they run in other namespaces (known at the pass's start), or the pass found no agent pod there
(known at its end, weighed by the next pass, which comes soon). A doubt that is new makes the pass ask helm
again. A doubt that stood when helm last confirmed the namespace is *answered* (an agent run outside its
chart, pods scaled to zero) and is not asked about again while it lasts, so neither a healthy resync nor a
lasting oddity costs a subprocess per pass. A helm error saying the release is not there drops the entry.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Located:
    """The namespace helm last found the release in, for which desired release, and when."""

    fingerprint: str
    at: float
    namespace: str
    answered: frozenset[str] = field(default_factory=frozenset)
    """Doubts that stood when helm last confirmed ``namespace``: they do not cause another recheck."""
    pending: frozenset[str] = field(default_factory=frozenset)
    """Doubts a pass found after it had used this entry: the next pass asks helm."""


def session_doubts(namespace: str, session_namespaces: Iterable[str]) -> frozenset[str]:
    """The agent's online sessions name where they run (``agent-namespace``); none of them in ``namespace``
    is a doubt. Sessions without the label say nothing."""
    running = sorted({ns for ns in session_namespaces if ns})
    if not running or namespace in running:
        return frozenset()
    return frozenset({f"the agent's tunnel sessions run in namespace {', '.join(running)}"})


def pod_doubts(namespace: str, agent_pods: int) -> frozenset[str]:
    """No agent pod in the release's namespace is a doubt."""
    return frozenset() if agent_pods else frozenset({f"no agent pod in namespace {namespace}"})


def helm_says_missing(error: str) -> bool:
    """Whether a helm error (or the platform's own release error) says the release is not there:
    helm's ``release: not found``, ``has no deployed releases``, the platform's ``does not exist``."""
    text = error.lower()
    # Not any "not found": a missing namespace, kube context or resource mapping says nothing of where the
    # release is.
    return any(
        words in text
        for words in ("release: not found", "does not exist in namespace", "no deployed releases")
    )


NOT_LOOKED_FOR = "not looked for yet"
CHANGED = "the desired release changed"
PERIOD = "the recheck period passed"
ROUTINE = frozenset({NOT_LOOKED_FOR, CHANGED, PERIOD})
"""The reasons to ask helm that are not a doubt."""


def recheck_reason(
    entry: Located | None, fingerprint: str, now: float, recheck_seconds: float, doubts: frozenset[str]
) -> str:
    """Why this pass asks helm where the release lives; empty to use ``entry.namespace``. ``doubts`` are the
    ones known at the pass's start (:func:`session_doubts` against ``entry.namespace``)."""
    if entry is None:
        return NOT_LOOKED_FOR
    if entry.fingerprint != fingerprint:
        return CHANGED
    if now - entry.at >= recheck_seconds:
        return PERIOD
    new = (doubts | entry.pending) - entry.answered
    return "; ".join(sorted(new))


def located(
    previous: Located | None, fingerprint: str, now: float, namespace: str, doubts: frozenset[str]
) -> Located:
    """The entry after helm found the release in ``namespace``: the doubts this pass weighed (``doubts``,
    against ``namespace``, and what the previous pass left pending) are answered."""
    weighed = doubts | (previous.pending if previous is not None else frozenset())
    return Located(fingerprint, now, namespace, answered=weighed)


def observed(entry: Located, doubts: frozenset[str], fresh: bool) -> Located:
    """Fold the doubts standing at a pass's end into the entry. ``fresh``: helm was asked this pass, so they
    are all answered. Otherwise a doubt no longer standing is forgotten (should it come back, it is new) and
    a new one is pending for the next pass."""
    if fresh:
        return replace(entry, answered=doubts, pending=frozenset())
    answered = entry.answered & doubts
    return replace(entry, answered=answered, pending=doubts - answered)


def recheck_due(entry: Located | None) -> bool:
    """A doubt waits for the next pass: requeue it soon rather than at the resync period."""
    return entry is not None and bool(entry.pending - entry.answered)
