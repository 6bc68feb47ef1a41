"""``vplane doctor proxy <client> --project <p>``: the resource-proxy runbook's quick triage, run for you.

Step 1, is the target up: the target VirtualClusterInstance's status on the platform. Step 2, what the
proxy metrics say: ``/metrics/syncer`` of every client replica (each replica keeps its own peer cache, so a
symptom can be replica-local), scraped twice a few seconds apart so "increased recently" means what the
runbook means. Step 3, what the logs say: each replica's recent log lines, where this machine has them (its log file, or
its pod's log on the platform's cluster).
Then the verdict row that matches (``vplane.proxy.triage``), the reason labels seen, and the next action.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import click

from vplane.cli import userconfig
from vplane.kube import tenantconfig
from vplane.platform.tenantproxy import REPLICA_HEADER
from vplane.proxy.triage import RUNBOOK_LOGS, Scrape, Verdict, key_refused, triage

LOG_TAIL = 200


@dataclass
class ReplicaReport:
    index: int
    verdict: Verdict | None
    error: str = ""
    log_evidence: list[str] | None = None
    """Without metrics: the replica's log lines that the runbook's log reference names."""


async def _get(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> tuple[int, str]:
    async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=15)) as resp:
        return resp.status, await resp.text()


def _log_lines(data_dir: Path | None, namespace: str, name: str, replica: int) -> list[str]:
    if data_dir is None:
        return []
    path = data_dir / "tenants" / namespace / name / f"replica-{replica}.log"
    try:
        return path.read_text(errors="replace").splitlines()[-LOG_TAIL:]
    except OSError:
        return []


async def _pod_log_lines(
    session: aiohttp.ClientSession, platform: str, headers: dict[str, str], name: str, replica: int
) -> list[str]:
    """The replica's log as its pod's (``tenant_placement: pods``, as ``vplane up`` runs tenants): ``kubectl
    logs -n vcluster-<name> <name>-<replica>`` on the platform's own cluster; nothing if it is no pod."""
    url = f"{platform.rstrip('/')}/api/v1/namespaces/vcluster-{name}/pods/{name}-{replica}/log"
    try:
        code, text = await _get(session, f"{url}?container=syncer&tailLines={LOG_TAIL}", headers)
    except (aiohttp.ClientError, TimeoutError):
        return []
    return text.splitlines() if code == 200 else []


async def diagnose(
    login: userconfig.PlatformLogin, name: str, project: str, interval: float, data_dir: Path | None
) -> tuple[dict[str, Any], list[ReplicaReport]]:
    ctx = ssl.create_default_context(cadata=login.ca_pem.decode())
    headers = {"Authorization": f"Bearer {login.access_key}", "Accept": "application/json"}

    namespaces: dict[str, str] = {}

    async def namespace_of(p: str) -> str:
        """The project's namespace as the platform names it (its prefix is a setting; ``p-`` by default),
        read once per project."""
        if p not in namespaces:
            namespaces[p] = await asyncio.to_thread(userconfig.project_namespace, login, p)
        return namespaces[p]

    namespace = await namespace_of(project)
    base = login.url.rstrip("/") + userconfig.MANAGEMENT
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
        status, body = await _get(
            session, f"{base}/namespaces/{namespace}/virtualclusterinstances/{name}", headers
        )
        if status == 404:
            raise click.ClickException(f'tenant cluster "{name}" not found in project "{project}"')
        if status != 200:
            raise click.ClickException(f"reading tenant cluster {name}: {status} {body[:200]}")
        client = json.loads(body)
        values = ((client.get("spec") or {}).get("template") or {}).get("helmRelease", {}).get("values")
        targets = tenantconfig.parse(values).proxy_targets(project)
        if not targets:
            raise click.ClickException(f'tenant cluster "{name}" has no enabled resource proxy entry')
        facts: dict[str, Any] = {"targets": {}}
        for target in targets:
            t_ns = await namespace_of(target.target_project)
            code, text = await _get(
                session, f"{base}/namespaces/{t_ns}/virtualclusterinstances/{target.target_name}", headers
            )
            t_status = (json.loads(text).get("status") or {}) if code == 200 else {}
            ready = t_status.get("phase") == "Ready"
            facts["targets"][target.target_label] = {
                "groupVersion": target.group_version,
                "ready": ready,
                "phase": t_status.get("phase", "NotFound" if code == 404 else f"unknown ({code})"),
                "readyReplicas": t_status.get("readyReplicas", 0),
                "replicas": t_status.get("replicas", 0),
            }
        all_ready = all(t["ready"] for t in facts["targets"].values())
        replicas = int((client.get("status") or {}).get("replicas") or 1)
        server = userconfig.tenant_server(login, name, project)
        first: dict[int, Scrape | str] = {}
        for index in range(replicas):
            first[index] = await _scrape(session, server, headers, index)
        await asyncio.sleep(interval)
        reports = []
        for index in range(replicas):
            now = await _scrape(session, server, headers, index)
            logs = _log_lines(data_dir, namespace, name, index) or await _pod_log_lines(
                session, login.url, headers, name, index
            )
            if isinstance(now, str):
                # Most often the client's own platform connection (the runbook's "license, network, or
                # platform issue"), which its log lines then name.
                evidence = [ln for ln in logs if any(m in ln for m in RUNBOOK_LOGS)][-5:]
                error = f"its /metrics/syncer could not be read: {now}"
                # A refused client key is the runbook's 401 section, whose action is on the platform.
                reports.append(ReplicaReport(index, key_refused(now, evidence, name), error, evidence))
                continue
            before = first[index]
            reports.append(
                ReplicaReport(
                    index,
                    triage(
                        all_ready,
                        now,
                        logs,
                        before=None if isinstance(before, str) else before,
                        client=name,
                        identity=f"loft:vcluster:{namespace}:{name}",
                    ),
                )
            )
    return facts, reports


async def _scrape(
    session: aiohttp.ClientSession, server: str, headers: dict[str, str], index: int
) -> Scrape | str:
    """The replica's metrics, or why they could not be read."""
    try:
        code, text = await _get(session, server + "/metrics/syncer", {**headers, REPLICA_HEADER: str(index)})
    except (aiohttp.ClientError, TimeoutError) as exc:
        return f"{type(exc).__name__}: {exc}"
    if code == 200:
        return Scrape.parse(text)
    try:
        message = str(json.loads(text).get("message") or text)
    except (ValueError, AttributeError):
        message = text
    return f"{code} {message.strip()[:200]}"


def render(name: str, facts: dict[str, Any], reports: list[ReplicaReport]) -> str:
    lines = [f"Resource proxy of tenant cluster {name}", "", "Step 1: is the target up?"]
    for label, t in facts["targets"].items():
        state = "Ready" if t["ready"] else f"not Ready (phase {t['phase']})"
        lines.append(
            f"  {label} for {t['groupVersion']}: {state}, {t['readyReplicas']}/{t['replicas']} replicas ready"
        )
    lines += ["", "Steps 2 and 3: metrics and logs of every client replica"]
    for report in reports:
        lines.append(f"  replica {report.index}:")
        if report.verdict is None:
            lines.append(f"    {report.error}")
            if report.log_evidence is not None:
                lines += [f"    log: {line}" for line in report.log_evidence] or [
                    "    log: none of the runbook's log reference messages"
                ]
            continue
        v = report.verdict
        if report.error:
            lines.append(f"    {report.error}")
        lines.append(f"    verdict: {v.row}")
        for item in v.evidence:
            lines.append(f"    evidence: {item}")
        if v.reasons:
            seen = ", ".join(f"{r}={n:g}" for r, n in sorted(v.reasons.items()))
            lines.append(f"    reason labels on vcluster_proxy_request_total: {seen}")
        lines.append(f"    next: {v.next_action}")
    return "\n".join(lines)


@click.group()
def doctor() -> None:
    """Diagnose vplane components with their runbooks."""


@doctor.command("proxy")
@click.argument("name")
@click.option("--project", default="default", show_default=True)
@click.option(
    "--interval",
    type=float,
    default=5.0,
    show_default=True,
    help="Seconds between the two metric scrapes that tell what increased recently.",
)
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="The platform's data directory, to read the replicas' logs on this machine (default: vplane up's).",
)
def doctor_proxy(name: str, project: str, interval: float, data_dir: Path | None) -> None:
    """Run the resource proxy runbook's quick triage for client tenant cluster NAME."""
    try:
        login = userconfig.PlatformLogin.load()
    except FileNotFoundError as exc:
        raise click.ClickException(str(exc)) from None
    if data_dir is None:
        default = userconfig.home() / "up" / "platform"
        data_dir = default if default.exists() else None
    facts, reports = asyncio.run(diagnose(login, name, project, interval, data_dir))
    click.echo(render(name, facts, reports))


# -- vplane doctor cluster ---------------------------------------------------------------------------------


async def diagnose_cluster(
    login: userconfig.PlatformLogin, name: str, kubeconfig: Path | None, context: str | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Cluster and its ``diagnostics`` subresource from the management API; with a context of the
    connected cluster, its agent side read there when the platform cannot reach it."""
    ctx = ssl.create_default_context(cadata=login.ca_pem.decode())
    headers = {"Authorization": f"Bearer {login.access_key}", "Accept": "application/json"}
    base = login.url.rstrip("/") + userconfig.MANAGEMENT + f"/clusters/{name}"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
        status, body = await _get(session, base, headers)
        if status == 404:
            raise click.ClickException(f'cluster "{name}" not found')
        if status != 200:
            raise click.ClickException(f"reading cluster {name}: {status} {body[:300]}")
        cluster = json.loads(body)
        status, body = await _get(session, base + "/diagnostics", headers)
        if status != 200:
            raise click.ClickException(f"reading the diagnostics of cluster {name}: {status} {body[:300]}")
        diagnostics = json.loads(body)
    side = diagnostics.get("cluster")
    if (kubeconfig is not None or context is not None) and side is not None and not side.get("reachable"):
        diagnostics["platformCluster"] = side
        namespace = str(
            side.get("namespace") or diagnostics.get("managementNamespace") or "vcluster-platform"
        )
        diagnostics["cluster"] = await _read_directly(kubeconfig, context, namespace)
    return cluster, diagnostics


async def _read_directly(kubeconfig: Path | None, context: str | None, namespace: str) -> dict[str, Any]:
    import os
    import tempfile

    from vplane.controllers.client import KubeClient
    from vplane.platform.clusters import diagnostics as diag
    from vplane.platform.clusters.helm import Helm, find_helm

    path = kubeconfig
    if path is None:
        env = os.environ.get("KUBECONFIG", "")
        path = Path(env.split(os.pathsep)[0]) if env else Path.home() / ".kube" / "config"
    via = f"context {context or '(current)'} of {path}"
    try:
        client = KubeClient.from_kubeconfig(path, context)
    except Exception as exc:
        return {"via": via, "namespace": namespace, "reachable": False, "error": str(exc)}
    try:
        with tempfile.TemporaryDirectory(prefix="vplane-doctor-") as home:
            try:
                helm: Helm | None = Helm(find_helm(), path, Path(home), 30.0, context)
            except FileNotFoundError:
                helm = None
            return await diag.collect(client, helm, namespace, via)
    finally:
        await client.close()


def _pod_lines(pods: list[dict[str, Any]], indent: str) -> list[str]:
    lines = []
    for pod in pods:
        ready = "1/1" if pod.get("ready") else "0/1"
        waiting = (pod.get("waiting") or {}).get("reason") or ""
        state = waiting or ("Terminating" if pod.get("deleting") else str(pod.get("phase") or ""))
        lines.append(f"{indent}{pod.get('name')}  {ready}  {state}  restarts {pod.get('restarts', 0)}")
        health = pod.get("health") or {}
        if health.get("reason"):
            lines.append(f"{indent}  {health.get('reason')}: {health.get('message')}")
        last = pod.get("lastTerminated") or {}
        if last.get("reason"):
            tail = str(last.get("message") or "").strip().splitlines()[-1:]
            lines.append(
                f"{indent}  last terminated: {last.get('reason')} (exit code {last.get('exitCode')})"
                + (f": {tail[0]}" if tail else "")
            )
        for line in (pod.get("log") or [])[-3:]:
            lines.append(f"{indent}  log: {line}")
        if pod.get("logError"):
            lines.append(f"{indent}  log: {pod.get('logError')}")
    return lines


def render_cluster(name: str, cluster: dict[str, Any], diagnostics: dict[str, Any]) -> str:
    from vplane.platform.clusters.triage import triage

    status = cluster.get("status") or {}
    lines = [
        f"Connected cluster {name} ({diagnostics.get('mode') or 'no connection mode'}, "
        f"spec.managementNamespace {diagnostics.get('managementNamespace')})",
        "",
        "Status (management API):",
        f"  phase={status.get('phase', '')!r} reason={status.get('reason', '')!r} online={status.get('online')}",
    ]
    if status.get("message"):
        lines.append(f"  message: {status['message']}")
    sessions = diagnostics.get("sessions") or []
    lines.append(f"Tunnel sessions on the platform: {len(sessions)}")
    for s in sessions:
        state = "online" if s.get("online") else f"offline, last seen {s.get('lastSeen')}"
        lines.append(
            f"  {s.get('hostname')} ({s.get('mode') or 'agent'}, namespace {s.get('namespace')}): {state}"
        )
    side = diagnostics.get("cluster")
    if side is None:
        lines.append("The platform's own cluster: no agent.")
    else:
        if "platformCluster" in diagnostics:
            lines.append(
                f"The platform cannot reach the cluster: {diagnostics['platformCluster'].get('error')}"
            )
        lines.append(f"In the cluster (read by {side.get('via')}), namespace {side.get('namespace')}:")
        if not side.get("reachable"):
            lines.append(f"  cannot be read: {side.get('error')}")
        else:
            pods = side.get("agentPods") or []
            lines.append(f"  agent pods (app=loft): {len(pods) or 'none'}")
            lines += _pod_lines(pods, "    ")
            bridge = side.get("bridge")
            if bridge is None:
                lines.append("  bridge proxy-only-agent: none")
            elif bridge.get("error"):
                lines.append(f"  bridge proxy-only-agent: cannot be read: {bridge['error']}")
            else:
                lines.append(
                    f"  bridge proxy-only-agent: {bridge.get('readyReplicas')}/{bridge.get('replicas')} ready, "
                    f"for {bridge.get('target')}, created {bridge.get('created')}"
                )
                lines += _pod_lines(bridge.get("pods") or [], "    ")
            helm = side.get("helm") or {}
            if helm.get("error"):
                lines.append(f"  helm history: {helm['error']}")
            for rev in (helm.get("history") or [])[-5:]:
                lines.append(
                    f"  helm revision {rev.get('revision')}: {rev.get('status')} {rev.get('chart')} "
                    f"({rev.get('description')})"
                )
    verdicts = triage(cluster, diagnostics)
    for index, v in enumerate(verdicts):
        lines += ["", f"{'Runbook row' if index == 0 else 'Also matches'}: {v.section} / {v.row}"]
        lines += [f"  evidence: {item}" for item in v.evidence]
        lines.append(f"  resolution: {v.resolution}")
    return "\n".join(lines)


@doctor.command("cluster")
@click.argument("name")
@click.option(
    "--context",
    "kube_context",
    default=None,
    help="The connected cluster's own kubeconfig context: read its agent there when the platform cannot.",
)
@click.option(
    "--kubeconfig",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="The kubeconfig of --context (default: $KUBECONFIG, then ~/.kube/config).",
)
def doctor_cluster(name: str, kube_context: str | None, kubeconfig: Path | None) -> None:
    """Match connected cluster NAME to the connected-cluster runbook: its status, agent sessions, agent
    pods and logs, the upgrade bridge and the Helm history, read through the platform."""
    try:
        login = userconfig.PlatformLogin.load()
    except FileNotFoundError as exc:
        raise click.ClickException(str(exc)) from None
    cluster, diagnostics = asyncio.run(diagnose_cluster(login, name, kubeconfig, kube_context))
    click.echo(render_cluster(name, cluster, diagnostics))
