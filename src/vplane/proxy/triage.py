"""The runbook's quick triage as a pure decision: target readiness, one replica's proxy metrics and its
log lines in, the matching verdict row out (``vplane doctor proxy`` prints it for every replica).

The rows and their wording are the runbook's ("Quick triage: proxy degraded or target down"). Where the
runbook asks whether a counter "increased recently", doctor compares two scrapes taken a few seconds
apart; a single scrape counts any non-zero value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from vplane.kube.accesskeys import TENANT_KEY_REFUSED

QUARANTINE_LOG = "quarantining proxy target peer host after consecutive dial failures"
ALL_QUARANTINED_LOG = "all peer hosts for the proxy target are quarantined"
NO_SYNC_LOG = "peer cache did not sync in time for the startup probe"
SUBSCRIPTION_DOWN_LOG = "peer watch subscription is down"
REGISTRATION_REFUSED_LOG = "the platform refused this tenant's registration"
"""At start-up: the platform refused the replica's access key."""
SESSION_REFUSED_LOG = "mesh registration rejected"
"""A running replica's mesh session ended by the platform (``access key revoked`` once its key is disabled or
deleted); the session does not come back by itself, the runbook's "restart the client's control plane pod".
The same words begin ``mesh registration rejected; retrying``, a refusal for now (a proxy target the client
may not use), which names no key and so never reads as the key's row."""
KEY_REFUSED_LOGS = (REGISTRATION_REFUSED_LOG, SESSION_REFUSED_LOG)
KEY_ERRORS = ("access key", "auth key")
"""What those lines' ``error`` says when the key is the cause (``access key revoked``, ``invalid access key:
disabled``, ``no auth key provided``), not a malformed registration."""
TOKEN_REVIEW_REFUSED = TENANT_KEY_REFUSED
"""What a client replica answers every request through the platform while the platform refuses its key: it
can no longer ask the platform who the caller is."""
RUNBOOK_LOGS = (
    QUARANTINE_LOG,
    ALL_QUARANTINED_LOG,
    NO_SYNC_LOG,
    SUBSCRIPTION_DOWN_LOG,
    "initial probe of proxy target failed",
    *KEY_REFUSED_LOGS,
)
"""Log lines worth showing when a replica's metrics cannot be read (its platform connection, mostly)."""
AUTH_FAILED_ROW = (
    "Requests return 401 auth failed: the platform refuses the client's access key, so the target rejects "
    "it too. This is a platform trust issue, not a Kubernetes RBAC issue."
)
PRECHECK = ("no_peer", "stale_peers", "all_quarantined")
CLASSIFIED = (
    "timeout",
    "deadline",
    "peer_departed",
    "ts_server_unavailable",
    "error",
    "ownership_check_failed",
)


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


@dataclass
class Scrape:
    samples: list[Sample] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> Scrape:
        out = cls()
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out.samples.append(Sample(s.name, dict(s.labels), float(s.value)))
        return out

    def total(self, name: str, **labels: str) -> float:
        return sum(
            s.value
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )

    def series(self, name: str) -> list[Sample]:
        return [s for s in self.samples if s.name == name]

    def by(self, name: str, keys: tuple[str, ...], **labels: str) -> dict[tuple[str, ...], float]:
        """The series matching ``labels``, summed by the values of the ``keys`` labels."""
        sums: dict[tuple[str, ...], float] = {}
        for s in self.series(name):
            if all(s.labels.get(k) == v for k, v in labels.items()):
                key = tuple(s.labels.get(k, "") for k in keys)
                sums[key] = sums.get(key, 0.0) + s.value
        return sums


def _requests_grown(
    now: Scrape, before: Scrape | None, code: str, keys: tuple[str, ...]
) -> dict[tuple[str, ...], float]:
    """Requests answered ``code`` by the ``keys`` labels that grew between the two scrapes (all of them
    without a first scrape); only those that grew."""
    grown = now.by("vcluster_proxy_request_total", keys, code=code)
    if before is not None:
        for key, value in before.by("vcluster_proxy_request_total", keys, code=code).items():
            if key in grown:
                grown[key] -= value
    return {k: v for k, v in grown.items() if v > 0}


@dataclass(frozen=True)
class Verdict:
    row: str
    """The runbook's verdict text."""
    evidence: list[str]
    next_action: str
    reasons: dict[str, float]
    """``reason`` label values seen on ``vcluster_proxy_request_total`` with their counts."""


def _increase(now: Scrape, before: Scrape | None, name: str) -> float:
    return now.total(name) - (before.total(name) if before is not None else 0.0)


def key_refused(error: str, logs: Iterable[str], client: str = "<name>") -> Verdict | None:
    """The runbook's "Requests return 401 auth failed" for a replica whose metrics could not be read: the
    platform refuses the client's own access key, which the replica also needs to authenticate whoever
    reaches it through the platform. None when neither the error nor the log says so."""
    lines = [ln for ln in logs if _key_refusal(ln)]
    if TOKEN_REVIEW_REFUSED not in error and not lines:
        return None
    return Verdict(AUTH_FAILED_ROW, [error, *lines[-3:]], key_refused_action(client), {})


def _key_refusal(line: str) -> bool:
    return any(m in line for m in KEY_REFUSED_LOGS) and any(e in line for e in KEY_ERRORS)


USE_REFUSED = "cannot use virtualclusterinstances.management.loft.sh"
"""What a registration refused for the proxy target says: the client identity lacks ``use`` on it."""
_CHECK = re.compile(r"check with: (kubectl auth can-i use [^'\n]*?--as=)\\?\"([^\"\\]+)\\?\"")
"""The check in a refusal line, its quotes as the console shows them or escaped in JSON (``\\"``)."""
REGISTERED_LOG = "mesh session registered"


def since_registered(lines: list[str]) -> list[str]:
    """The lines after the replica's last mesh registration: a refusal before it is over (the log of a
    process replica also keeps earlier runs)."""
    last = max((i for i, ln in enumerate(lines) if REGISTERED_LOG in ln), default=-1)
    return lines[last + 1 :]


def use_refused_action(lines: Iterable[str]) -> str | None:
    """The runbook's 403 section for a registration that rejects the proxy target: the check to run as the
    client identity, and the grant; the client retries by itself. None when no line says so."""
    refusals = [ln for ln in lines if any(m in ln for m in KEY_REFUSED_LOGS) and USE_REFUSED in ln]
    if not refusals:
        return None
    found = _CHECK.search(refusals[-1])
    check = (
        f'{found.group(1)}"{found.group(2)}"'
        if found
        else "kubectl auth can-i use virtualclusterinstances.management.loft.sh/<target> -n <target-project-"
        'namespace> --as="loft:vcluster:<client-project-namespace>:<client>"'
    )
    return (
        "Registration rejects the proxy target: the client identity lacks use on the target "
        f"VirtualClusterInstance. Run the same check as the client identity on the platform ({check}) and "
        "grant use in the target's project namespace (a Role with verb use on virtualclusterinstances, bound "
        "to that user); the client keeps retrying and registers by itself, no restart needed."
    )


def key_refused_action(client: str) -> str:
    return (
        "Re-enable the client's access key on the platform (kubectl get accesskeys -l "
        f"loft.sh/virtualcluster-instance={client}; spec.disabled), then restart the client's control-plane "
        "pods to refresh the platform connection (under vplane up: kubectl --context vplane_host delete pod "
        f"-n vcluster-{client} -l app=vcluster). Confirm both tenant clusters use the same platform and the "
        "project pairing (targetVirtualCluster.project defaults to the client's own project)."
    )


FORBIDDEN_ROW = "Requests return 403 permission denied"


def _forbidden(denied: dict[tuple[str, ...], float], identity: str) -> tuple[str, list[str], str] | None:
    """The runbook's 403 section for proxied requests the target's RBAC denied just now (as for 503s: a
    fixed binding then reads healthy again): step 1's check as the client identity for the denied verb."""
    if not denied:
        return None
    evidence = [
        f"{v:g} {verb} requests for {gv} answered 403 by {t}" for (t, gv, verb), v in sorted(denied.items())
    ]
    (target, group_version, verb), _ = max(denied.items(), key=lambda item: item[1])
    project, _, name = target.partition("/")
    group = group_version.rpartition("/")[0]
    check = (
        f"vplane connect {name} --driver platform --project {project} -- kubectl auth can-i {verb} "
        f'<resource>.{group} --as="{identity}"'
    )
    action = (
        "The target tenant cluster's RBAC denied the client identity. Check it as the runbook's step 1 does, "
        f"with credentials that may impersonate: {check}; then bind the permission to {identity} in the "
        "target tenant cluster."
    )
    return FORBIDDEN_ROW, evidence, action


def triage(
    target_ready: bool,
    now: Scrape,
    logs: Iterable[str],
    before: Scrape | None = None,
    client: str = "<name>",
    identity: str = "",
) -> Verdict:
    lines = list(logs)
    reasons: dict[str, float] = {}
    for s in now.series("vcluster_proxy_request_total"):
        reason = s.labels.get("reason", "")
        reasons[reason] = reasons.get(reason, 0.0) + s.value
    if not target_ready:
        return Verdict(
            "The target is down. Fix the target. The proxy recovers on its own once a peer is dialable.",
            ["target control-plane replicas are not Ready"],
            "Check the target tenant cluster's control plane (its VirtualClusterInstance status and replica "
            "logs).",
            reasons,
        )
    healthy = now.total("vcluster_proxy_peers", state="healthy")
    peers_reported = bool(now.series("vcluster_proxy_peers"))
    all_quarantined = _increase(now, before, "vcluster_proxy_target_all_peers_quarantined_total")
    quarantine_lines = [ln for ln in lines if QUARANTINE_LOG in ln or ALL_QUARANTINED_LOG in ln]
    synced = now.series("vcluster_proxy_peer_cache_synced")
    sync_lines = [
        ln for ln in lines if any(m in ln for m in (NO_SYNC_LOG, SUBSCRIPTION_DOWN_LOG, *KEY_REFUSED_LOGS))
    ]
    if synced and any(s.value == 0 for s in synced):
        current = since_registered(lines)  # a refusal the replica registered after is over
        return Verdict(
            "The client has no current peer snapshot because of a license, network, or platform issue. "
            "Target pod readiness doesn't validate the target API, but restore the client's peer feed first.",
            ["vcluster_proxy_peer_cache_synced is 0", *sync_lines[-3:]],
            key_refused_action(client)
            if any(_key_refusal(ln) for ln in current)
            else use_refused_action(current)
            or "Check that the client has platform connectivity, that the platform is reachable from the "
            "client's replicas, and that the target's control-plane peers are registered.",
            reasons,
        )
    if (peers_reported and healthy == 0) or all_quarantined > 0 or quarantine_lines:
        evidence = []
        if peers_reported and healthy == 0:
            evidence.append('vcluster_proxy_peers{state="healthy"} is 0')
            if now.total("vcluster_proxy_peers") == 0 and synced:
                # The runbook: synced "1 with zero peers means the platform published a fresh list with no
                # target endpoint" (requests read no_peer): the publication side, not the network path.
                evidence.append(
                    "vcluster_proxy_peer_cache_synced is 1 with no peer in any state: the platform published "
                    "a list without a target endpoint (check that the target's control-plane peers are "
                    "registered)"
                )
        if all_quarantined > 0:
            evidence.append(
                f"vcluster_proxy_target_all_peers_quarantined_total increased by {all_quarantined:g}"
            )
        evidence.extend(quarantine_lines[-3:])
        return Verdict(
            "Proxy-path degradation: the endpoints are stale or unreachable from the client. Check peer "
            "publication and the direct and DERP network paths. See 503 errors persist after a target "
            "restart or upgrade.",
            evidence,
            "Check peer publication (kubectl get networkpeers on the platform), client-to-platform "
            'connectivity and DERP reachability; confirm recovery with vcluster_proxy_peers{state="healthy"}.',
            reasons,
        )
    # "Recently": what grew between doctor's two scrapes, not what an outage that is over left behind.
    deadline = now.total("vcluster_proxy_request_terminations_total", reason="deadline") - (
        before.total("vcluster_proxy_request_terminations_total", reason="deadline")
        if before is not None
        else 0.0
    )
    if deadline > 0:
        return Verdict(
            "The target accepted the connection but didn't finish the response before the proxy's request "
            "deadline. See Requests time out after about 60 seconds.",
            [f'vcluster_proxy_request_terminations_total{{reason="deadline"}} is {deadline:g}'],
            "Check the target API server, its backing store and admission webhooks for latency; compare "
            "vcluster_proxy_request_duration_seconds with vcluster_proxy_peer_dial_duration_seconds.",
            reasons,
        )
    unavailable = {key[0]: v for key, v in _requests_grown(now, before, "503", ("reason",)).items()}
    if unavailable:
        classified = sorted(r for r in unavailable if r in CLASSIFIED)
        precheck = sorted(r for r in unavailable if r in PRECHECK)
        evidence = [f'{v:g} requests answered 503 with reason="{r}"' for r, v in sorted(unavailable.items())]
        if classified:
            action = (
                f"Reasons {', '.join(classified)} identify failures classified during proxy handling; see "
                "the outcome reasons reference."
            )
        elif precheck:
            action = (
                f"Reasons {', '.join(precheck)} mean the peer precheck failed before any dial; see Target "
                "tenant cluster returns 503 unavailable, causes 2 to 4."
            )
        else:
            action = (
                "upstream with code 503 usually means the target returned a 5xx response, but upstream is "
                "also the default for failures the proxy didn't classify more specifically. Check the client "
                "proxy logs before attributing it to the target."
            )
        return Verdict("Check the reason label on vcluster_proxy_request_total.", evidence, action, reasons)
    denied = _requests_grown(now, before, "403", ("target", "group_version", "verb"))
    denied_ever = now.total("vcluster_proxy_request_total", code="403")
    forbidden = _forbidden(denied, identity or f"loft:vcluster:<client-project-namespace>:{client}")
    if forbidden is not None:
        return Verdict(*forbidden, reasons)
    earlier = (
        [
            f"{denied_ever:g} requests answered 403 since the replica started, none just now (see {FORBIDDEN_ROW})"
        ]
        if denied_ever
        else []
    )
    return Verdict(
        "No proxy degradation: peers are healthy and no request failed with 503 recently.",
        ([f"{healthy:g} healthy peer host(s)"] if peers_reported else []) + earlier,
        "None.",
        reasons,
    )
