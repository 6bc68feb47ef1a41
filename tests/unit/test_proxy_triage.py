"""The runbook's verdict table as a pure decision over metrics and log lines."""

from __future__ import annotations

import json

import pytest

from vplane.proxy.triage import Scrape, triage

HEADER = """# TYPE vcluster_proxy_peers gauge
# TYPE vcluster_proxy_peer_cache_synced gauge
# TYPE vcluster_proxy_request_total counter
# TYPE vcluster_proxy_target_all_peers_quarantined_total counter
# TYPE vcluster_proxy_request_terminations_total counter
"""


def scrape(
    healthy: int = 1, quarantined: int = 0, synced: int = 1, requests: str = "", extra: str = ""
) -> Scrape:
    t = 'target="default/target",group_version="example.com/v1"'
    return Scrape.parse(
        HEADER
        + f'vcluster_proxy_peers{{{t},state="healthy"}} {healthy}\n'
        + f'vcluster_proxy_peers{{{t},state="quarantined"}} {quarantined}\n'
        + f'vcluster_proxy_peers{{{t},state="half_open"}} 0\n'
        + f"vcluster_proxy_peer_cache_synced{{{t}}} {synced}\n"
        + requests
        + extra
    )


def test_target_down_wins() -> None:
    verdict = triage(False, scrape(healthy=0), [])
    assert verdict.row.startswith("The target is down.")


def test_no_healthy_peers_is_path_degradation() -> None:
    verdict = triage(True, scrape(healthy=0, quarantined=2), [])
    assert verdict.row.startswith("Proxy-path degradation")
    assert 'vcluster_proxy_peers{state="healthy"} is 0' in verdict.evidence


def test_a_fresh_empty_list_points_at_peer_publication() -> None:
    """The runbook: synced "1 with zero peers means the platform published a fresh list with no target
    endpoint"; the verdict row is still the table's, its evidence says which case it is."""
    verdict = triage(True, scrape(healthy=0, quarantined=0, synced=1), [])
    assert verdict.row.startswith("Proxy-path degradation")
    assert any("published a list without a target endpoint" in e for e in verdict.evidence)
    quarantined = triage(True, scrape(healthy=0, quarantined=2), [])
    assert not any("without a target endpoint" in e for e in quarantined.evidence)


def test_all_quarantined_increase_between_scrapes() -> None:
    counter = 'vcluster_proxy_target_all_peers_quarantined_total{target="default/target"} '
    before = scrape(extra=counter + "1\n")
    assert triage(True, scrape(extra=counter + "1\n"), [], before=before).row.startswith(
        "No proxy degradation"
    )
    assert triage(True, scrape(extra=counter + "2\n"), [], before=before).row.startswith("Proxy-path")


def test_unsynced_cache_names_the_peer_feed() -> None:
    logs = ["... peer cache did not sync in time for the startup probe, requests fail with 503 ..."]
    verdict = triage(True, scrape(healthy=0, synced=0), logs)
    assert verdict.row.startswith("The client has no current peer snapshot")
    assert logs[0] in verdict.evidence


def test_503s_without_quarantine_point_at_the_reason_label() -> None:
    requests = (
        'vcluster_proxy_request_total{target="default/target",group_version="example.com/v1",verb="get",'
        'code="503",reason="upstream"} 4\n'
    )
    verdict = triage(True, scrape(requests=requests), [])
    assert verdict.row == "Check the reason label on vcluster_proxy_request_total."
    assert verdict.reasons == {"upstream": 4.0}
    assert "upstream with code 503 usually means" in verdict.next_action


def test_deadline_terminations_point_at_the_slow_target() -> None:
    extra = 'vcluster_proxy_request_terminations_total{target="default/target",reason="deadline"} 1\n'
    verdict = triage(True, scrape(extra=extra), [])
    assert verdict.row.startswith("The target accepted the connection")


def test_doctor_says_why_metrics_could_not_be_read_and_shows_the_runbook_log_lines() -> None:
    """A client replica whose platform connection is refused cannot serve its metrics through the platform;
    doctor says why, and shows the log lines of the runbook's log reference it found instead."""
    from vplane.cli.doctor import ReplicaReport, render

    facts = {
        "targets": {
            "default/target": {"groupVersion": "g/v1", "ready": True, "readyReplicas": 1, "replicas": 1}
        }
    }
    no_sync = "peer cache did not sync in time for the startup probe, requests fail with 503 until the first netmap arrives"
    report = ReplicaReport(
        0,
        None,
        "its /metrics/syncer could not be read: 401 auth failed: the platform refuses this tenant cluster's access key (token review: 401)",
        [no_sync],
    )
    out = render("client", facts, [report])
    assert (
        "its /metrics/syncer could not be read: 401 auth failed: the platform refuses this tenant cluster's access key (token review: 401)"
        in out
    )
    assert f"    log: {no_sync}" in out
    quiet = render(
        "client", facts, [ReplicaReport(0, None, "its /metrics/syncer could not be read: 503 x", [])]
    )
    assert "log: none of the runbook's log reference messages" in quiet


def test_503s_of_an_outage_that_is_over_are_not_a_verdict() -> None:
    """Doctor scrapes twice: 503s that did not grow between the scrapes (the target is back) leave the
    verdict healthy; growing precheck 503s point at the 503 playbook's precheck causes, not at upstream."""
    old = (
        'vcluster_proxy_request_total{target="default/target",group_version="example.com/v1",verb="get",'
        'code="503",reason="no_peer"} 5\n'
    )
    before = scrape(requests=old)
    assert triage(True, scrape(requests=old), [], before=before).row.startswith("No proxy degradation")
    grown = triage(True, scrape(requests=old.replace("} 5", "} 7")), [], before=before)
    assert grown.row == "Check the reason label on vcluster_proxy_request_total."
    assert grown.evidence == ['2 requests answered 503 with reason="no_peer"']
    assert "peer precheck failed" in grown.next_action
    deadline = 'vcluster_proxy_request_terminations_total{target="default/target",reason="deadline"} 1\n'
    assert triage(True, scrape(extra=deadline), [], before=scrape(extra=deadline)).row.startswith(
        "No proxy degradation"
    )


REVOKED = (
    "2026-12-04T16:53:05.941982Z [error    ] mesh registration rejected     [vplane.mesh.node] "
    "error='access key revoked' url=https://127.0.0.1:10443"
)


def test_a_refused_client_key_is_the_runbooks_401_section() -> None:
    """The client's access key disabled on the platform (replayed under vplane up): every request to the
    client through the platform answers 401 `auth failed: the platform refuses this tenant cluster's access key` and its running mesh session
    logs `mesh registration rejected ... access key revoked`. Doctor named no verdict and no next step (the
    log filter knew only the start-up refusal); it now points at "Requests return 401 auth failed" and what
    fixes it: the key, then a restart of the client's control-plane pods."""
    from vplane.cli.doctor import ReplicaReport, render
    from vplane.proxy.triage import RUNBOOK_LOGS, key_refused

    assert any(m in REVOKED for m in RUNBOOK_LOGS)
    verdict = key_refused(
        "401 auth failed: the platform refuses this tenant cluster's access key (token review: 401)",
        [REVOKED],
        "client",
    )
    assert verdict is not None
    assert verdict.row.startswith("Requests return 401 auth failed")
    assert REVOKED in verdict.evidence
    assert "loft.sh/virtualcluster-instance=client" in verdict.next_action
    assert "delete pod -n vcluster-client -l app=vcluster" in verdict.next_action
    assert (
        key_refused(
            "401 auth failed: the platform refuses this tenant cluster's access key (token review: 401)",
            [],
            "client",
        )
        is not None
    )
    assert key_refused("ClientConnectorError: refused", [], "client") is None
    malformed = "[error    ] mesh registration rejected [vplane.mesh.node] error='hostname is invalid'"
    assert key_refused("ClientConnectorError: refused", [malformed], "client") is None

    facts = {
        "targets": {
            "default/target": {"groupVersion": "g/v1", "ready": True, "readyReplicas": 1, "replicas": 1}
        }
    }
    error = "its /metrics/syncer could not be read: 401 auth failed: the platform refuses this tenant cluster's access key (token review: 401)"
    out = render("client", facts, [ReplicaReport(0, verdict, error, [REVOKED])])
    assert error in out
    assert "    verdict: Requests return 401 auth failed" in out
    assert "    next: Re-enable the client's access key" in out


def test_an_unsynced_cache_after_a_refused_key_says_to_restart_the_client() -> None:
    """The key re-enabled: the client answers again, but its mesh session ended for good with the refusal,
    so the peer feed stays down until its pods restart (the runbook's 401 resolution)."""
    stale = "... peer watch subscription is down and no fresh netmap is available; ... lastNetmapAge=131s"
    verdict = triage(True, scrape(synced=0), [REVOKED, stale], client="client")
    assert verdict.row.startswith("The client has no current peer snapshot")
    assert REVOKED in verdict.evidence and stale in verdict.evidence
    assert "delete pod -n vcluster-client -l app=vcluster" in verdict.next_action
    plain = triage(True, scrape(synced=0), [stale], client="client")
    assert plain.next_action.startswith("Check that the client has platform connectivity")


USE_REFUSED_LINE = (
    "2026-12-08T00:40:35.975413Z [info     ] mesh registration rejected; retrying [vplane.mesh.node] attempt=8 "
    'delay=11.501 error=\'resource proxy target "default/target" of demo.vplane.io/v1 is not allowed: '
    '"loft:vcluster:p-default:c403" cannot use virtualclusterinstances.management.loft.sh "target" in '
    '"p-default"; check with: kubectl auth can-i use virtualclusterinstances.management.loft.sh/target -n '
    'p-default --as="loft:vcluster:p-default:c403"\' url=https://127.0.0.1:46615'
)
USE_REFUSED_JSON = json.dumps(
    {
        "event": "mesh registration rejected; retrying",
        "error": 'resource proxy target "default/target" of demo.vplane.io/v1 is not allowed: '
        '"loft:vcluster:p-default:c403" cannot use virtualclusterinstances.management.loft.sh "target" in '
        '"p-default"; check with: kubectl auth can-i use virtualclusterinstances.management.loft.sh/target -n '
        'p-default --as="loft:vcluster:p-default:c403"',
        "level": "info",
    }
)  # VPLANE_LOG_FORMAT=json: the quotes inside error are escaped


@pytest.mark.parametrize("line", [USE_REFUSED_LINE, USE_REFUSED_JSON], ids=["console", "json"])
def test_an_unsynced_cache_after_a_use_refusal_says_to_run_the_check_and_grant_use(line: str) -> None:
    """Replayed under vplane up: a client whose identity may not use its target keeps retrying its
    registration; doctor read it as a network or platform problem. It now gives the runbook's 403 step: the
    same check as the client identity (taken from the log), the grant, and that no restart is needed."""
    verdict = triage(True, scrape(synced=0), [line], client="c403")
    assert verdict.row.startswith("The client has no current peer snapshot")
    assert line in verdict.evidence
    assert verdict.next_action.startswith("Registration rejects the proxy target")
    assert (
        "kubectl auth can-i use virtualclusterinstances.management.loft.sh/target -n p-default "
        '--as="loft:vcluster:p-default:c403"' in verdict.next_action
    )
    assert "no restart needed" in verdict.next_action


def test_a_refusal_the_replica_registered_after_is_over() -> None:
    """Granted and registered, then the feed went down for another reason: the old refusal line (the tail,
    or a process replica's log of earlier runs) no longer picks the action."""
    registered = "2026-12-08T00:41:26.998809Z [info     ] mesh session registered        [vplane.mesh.node]"
    stale = "... peer watch subscription is down and no fresh netmap is available; ... lastNetmapAge=131s"
    verdict = triage(True, scrape(synced=0), [USE_REFUSED_LINE, registered, stale], client="c403")
    assert verdict.next_action.startswith("Check that the client has platform connectivity")
    revoked_then_registered = triage(True, scrape(synced=0), [REVOKED, registered, stale], client="c403")
    assert revoked_then_registered.next_action.startswith("Check that the client has platform connectivity")


def test_requests_the_targets_rbac_denies_are_the_runbooks_403_section() -> None:
    """Replayed under vplane up: a client whose identity the target's RBAC does not allow got 403s, and
    doctor said "No proxy degradation". Requests denied just now are the 403 row with the runbook's step-1
    check as the client identity for the denied verb; once the binding is fixed (no new 403 between the
    scrapes) the replica reads healthy again, the earlier 403s as evidence."""
    t = 'target="default/target",group_version="demo.vplane.io/v1"'
    denied = f'vcluster_proxy_request_total{{{t},verb="list",code="403",reason="upstream"}} 3\n'
    more = denied.replace("} 3", "} 5")
    identity = "loft:vcluster:p-default:c403"
    verdict = triage(True, scrape(requests=more), [], before=scrape(requests=denied), identity=identity)
    assert verdict.row == "Requests return 403 permission denied"
    assert verdict.evidence == ["2 list requests for demo.vplane.io/v1 answered 403 by default/target"]
    assert (
        "vplane connect target --driver platform --project default -- kubectl auth can-i list "
        '<resource>.demo.vplane.io --as="loft:vcluster:p-default:c403"' in verdict.next_action
    )
    fixed = triage(True, scrape(requests=denied), [], before=scrape(requests=denied), identity=identity)
    assert fixed.row.startswith("No proxy degradation")
    assert any(
        "3 requests answered 403 since the replica started, none just now" in e for e in fixed.evidence
    )
    assert triage(True, scrape(), [], identity=identity).row.startswith("No proxy degradation")
