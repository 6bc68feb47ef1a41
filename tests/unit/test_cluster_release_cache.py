"""When the Cluster loop asks helm again where the agent release lives (``vplane.platform.clusters.
releasecache``): on the recheck period and a changed desired release, as before, and at once when a pass saw
evidence that the release is not where it was found (the runbook's agent moved by hand without
spec.managementNamespace); never on a pass where nothing looks wrong, and not again for a doubt helm has
already answered. Passes are replayed the way the controller runs them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vplane.platform.clusters import bridge as br
from vplane.platform.clusters import releasecache as rc

NS = "vcluster-platform"
PERIOD = 300.0


@dataclass
class Loop:
    """The controller's use of the module, one pass at a time; ``release_in`` is where helm would find it."""

    release_in: str | None = NS
    entry: rc.Located | None = None
    now: float = 0.0
    helm_asked: int = 0
    fingerprint: str = "f1"

    def run(self, sessions: Sequence[str] = (NS,), pods: int = 1) -> tuple[str, str | None]:
        """One pass: (why helm was asked or "", the namespace the pass used, None when the release is
        missing)."""
        self.now += 0.5
        doubts = rc.session_doubts(self.entry.namespace, sessions) if self.entry else frozenset()
        why = rc.recheck_reason(self.entry, self.fingerprint, self.now, PERIOD, doubts)
        if self.entry is not None and not why:
            namespace, fresh = self.entry.namespace, False
        else:
            self.helm_asked += 1
            if self.release_in is None:
                self.entry = None  # the missing-release error drops it (helm_says_missing)
                return why, None
            namespace, fresh = self.release_in, True
            self.entry = rc.located(
                self.entry, self.fingerprint, self.now, namespace, rc.session_doubts(namespace, sessions)
            )
        seen = rc.session_doubts(namespace, sessions) | rc.pod_doubts(namespace, pods)
        self.entry = rc.observed(self.entry, seen, fresh)
        return why, namespace


def test_a_steady_cluster_asks_helm_once_per_period() -> None:
    loop = Loop()
    assert loop.run() == (rc.NOT_LOOKED_FOR, NS)
    for _ in range(100):
        assert loop.run() == ("", NS)
        assert not rc.recheck_due(loop.entry)
    assert loop.helm_asked == 1
    loop.now += PERIOD
    assert loop.run() == (rc.PERIOD, NS)
    loop.fingerprint = "f2"
    assert loop.run() == (rc.CHANGED, NS)
    assert loop.helm_asked == 3


def test_sessions_from_another_namespace_recheck_on_that_pass() -> None:
    loop = Loop()
    loop.run()
    loop.run()
    loop.release_in = None  # moved by hand to "agents"; spec.managementNamespace not updated
    why, namespace = loop.run(sessions=["agents"], pods=0)
    assert why == "the agent's tunnel sessions run in namespace agents" and namespace is None
    # Until the Cluster names it, every pass asks (the status keeps the release message).
    assert loop.run(sessions=["agents"], pods=0) == (rc.NOT_LOOKED_FOR, None)
    loop.release_in = "agents"
    assert loop.run(sessions=["agents"]) == (rc.NOT_LOOKED_FOR, "agents")
    assert loop.run(sessions=["agents"]) == ("", "agents")


def test_missing_pods_recheck_on_the_next_pass_soon() -> None:
    loop = Loop()
    loop.run()
    loop.run()
    loop.release_in = None
    # The agent's sessions say nothing (no label; or none online): the pods are the evidence.
    assert loop.run(sessions=[""], pods=0) == ("", NS)
    assert rc.recheck_due(loop.entry)
    assert loop.run(sessions=[""], pods=0) == (f"no agent pod in namespace {NS}", None)


def test_an_answered_doubt_is_not_asked_again_while_it_lasts() -> None:
    loop = Loop()
    loop.run()
    # Scaled to zero: one recheck confirms the release is there, then quiet.
    assert loop.run(pods=0) == ("", NS)
    assert loop.run(pods=0) == (f"no agent pod in namespace {NS}", NS)
    for _ in range(20):
        assert loop.run(pods=0) == ("", NS)
        assert not rc.recheck_due(loop.entry)
    # An agent of this cluster run outside the chart, elsewhere: one recheck, then quiet.
    assert loop.run(sessions=[NS, "elsewhere"]) == ("", NS)
    assert loop.run(sessions=["elsewhere"]) == ("the agent's tunnel sessions run in namespace elsewhere", NS)
    for _ in range(20):
        assert loop.run(sessions=["elsewhere"]) == ("", NS)
    assert loop.helm_asked == 3
    # A doubt that went away and comes back is new.
    assert loop.run() == ("", NS)
    assert loop.run(pods=0) == ("", NS)
    assert loop.run(pods=0) == (f"no agent pod in namespace {NS}", NS)


def test_no_pods_right_after_helm_looked_is_no_doubt() -> None:
    loop = Loop()
    assert loop.run(pods=0) == (rc.NOT_LOOKED_FOR, NS)  # just installed: no pod yet
    assert not rc.recheck_due(loop.entry)
    assert loop.run(pods=0) == ("", NS)
    assert loop.run(pods=1) == ("", NS)
    assert loop.helm_asked == 1


def test_session_doubts() -> None:
    assert rc.session_doubts(NS, []) == frozenset()
    assert rc.session_doubts(NS, ["", ""]) == frozenset()  # sessions without the label say nothing
    assert rc.session_doubts(NS, ["agents", NS]) == frozenset()  # one agent there is enough
    assert rc.session_doubts(NS, ["b", "a", "b"]) == {"the agent's tunnel sessions run in namespace a, b"}


def test_helm_errors_that_say_the_release_is_not_there() -> None:
    assert rc.helm_says_missing("release: not found")
    assert rc.helm_says_missing('UPGRADE FAILED: "loft" has no deployed releases')
    assert rc.helm_says_missing(br.missing_release_message([NS, "loft"], ["agents"]))
    assert not rc.helm_says_missing(
        "UPGRADE FAILED: another operation (install/upgrade/rollback) is in progress"
    )
    assert not rc.helm_says_missing("Kubernetes cluster unreachable: context deadline exceeded")
    assert not rc.helm_says_missing('create: failed to create: namespaces "agents" not found')
    assert not rc.helm_says_missing('resource mapping not found for name: "loft" namespace: ""')
