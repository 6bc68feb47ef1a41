"""``vplane platform connect cluster <name>``: connect a Kubernetes cluster to the platform.

As upstream's connect flow (spec §10.3): create the Cluster (``spec.networkPeer: true``,
``spec.managementNamespace: vcluster-platform``), get the agent's access key from the Cluster's
``accesskey`` subresource (running the command again reuses it unless its scope is malformed), read the
agent values from ``/clusters/agent-values/<name>``, then install the agent chart with helm into the
cluster ``--context``/``--kubeconfig`` name, or print the ``helm`` command to run there.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from vplane.cli.userconfig import MANAGEMENT, Management, message_of

NAMESPACE = "vcluster-platform"


def ensure_cluster(
    platform: Management, name: str, display_name: str | None, echo: Callable[[str], None] = click.echo
) -> None:
    body = {
        "apiVersion": "management.loft.sh/v1",
        "kind": "Cluster",
        "metadata": {"name": name},
        "spec": {"networkPeer": True, "managementNamespace": NAMESPACE, "displayName": display_name or name},
    }
    code, raw = platform.request("POST", f"{MANAGEMENT}/clusters", body)
    if code in (200, 201):
        echo(f'cluster "{name}" created')
        return
    if code == 409:
        existing = platform.json("GET", f"{MANAGEMENT}/clusters/{name}")
        if not (existing.get("spec") or {}).get("networkPeer"):
            raise click.ClickException(
                f'cluster "{name}" exists and is not connected through an agent (spec.networkPeer is not set)'
            )
        echo(f'cluster "{name}" exists; reusing it')
        return
    raise click.ClickException(f'cannot create cluster "{name}": {message_of(raw)}')


def _key_refusal(platform: Management, cluster: str) -> tuple[str, str] | None:
    """(key name, why) when the cluster's agent key exists but the platform will refuse it (disabled,
    expired); None when it is usable or the caller may not read it (the agent then finds out)."""
    from vplane.apiserver import timeutil
    from vplane.kube import accesskeys

    name = accesskeys.cluster_key_name(cluster)
    code, raw = platform.request("GET", f"{MANAGEMENT}/accesskeys/{urllib.parse.quote(name)}")
    if code != 200:
        return None
    try:
        accesskeys.check(json.loads(raw), time.time(), timeutil.parse_time)
    except accesskeys.KeyRejected as exc:
        return name, str(exc)
    except ValueError:
        return None
    return None


def helm_args(
    chart: Path, values_file: Path | None, connection: dict[str, Any], extra: dict[str, Any]
) -> list[str]:
    """``--set-string`` keeps a token or URL a string whatever it looks like; flags stay booleans."""
    args = ["upgrade", "loft", str(chart), "--install", "--namespace", NAMESPACE, "--create-namespace"]
    if values_file is not None:
        return [*args, "--values", str(values_file)]
    for key, value in connection.items():
        if isinstance(value, bool):
            args += ["--set", f"{key}={str(value).lower()}"]
        else:
            args += ["--set-string", f"{key}={value}"]
    for key, value in extra.items():
        args += ["--set-json", f"{key}={json.dumps(value, separators=(',', ':'))}"]
    return args


@click.command("cluster")
@click.argument("name")
@click.option(
    "--context", "kube_context", default=None, help="Install the agent into this kubeconfig context."
)
@click.option(
    "--kubeconfig",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="Install the agent into the cluster of this kubeconfig (with --context: that context of it).",
)
@click.option("--display-name", default=None, help="The Cluster's spec.displayName.")
@click.option("--helm", "helm_binary", default=None, help="The helm binary (default: helm on PATH).")
def connect_cluster(
    name: str,
    kube_context: str | None,
    kubeconfig: Path | None,
    display_name: str | None,
    helm_binary: str | None,
) -> None:
    """Connect cluster NAME: create it on the platform and install its agent (or print the helm command)."""
    from vplane.cli.main import _login

    login = _login()
    connect(
        login.url,
        login.access_key,
        login.ca_pem,
        name,
        kube_context=kube_context,
        kubeconfig=kubeconfig,
        display_name=display_name,
        helm_binary=helm_binary,
    )


def connect(
    url: str,
    access_key: str,
    ca_pem: bytes,
    name: str,
    *,
    kube_context: str | None = None,
    kubeconfig: Path | None = None,
    display_name: str | None = None,
    helm_binary: str | None = None,
    echo: Callable[[str], None] = click.echo,
) -> None:
    """The connect flow, for the command and for ``vplane up`` (which connects its embedded cluster this
    way, so both take one code path). Blocking (urllib, helm); failures are ``click.ClickException``."""
    import yaml

    from vplane.platform.clusters import values as av
    from vplane.platform.clusters.helm import find_chart, find_helm

    platform = Management(url, access_key, ca_pem)
    ensure_cluster(platform, name, display_name, echo)
    key = platform.json("GET", f"{MANAGEMENT}/clusters/{name}/accesskey")
    refused = _key_refusal(platform, name)
    if refused:
        echo(
            f'warning: the agent\'s access key "{refused[0]}" is {refused[1]}: the platform will refuse the '
            f'agent ("invalid access key: {refused[1]}"). Re-enable the key, or delete it so the next connect '
            "command creates a new one, then run this command again."
        )
    host = str(key.get("loftHost") or "")
    agent_url = host if host.startswith("https://") else f"https://{host}"
    # With the caller's key (an administrator's), else the agent's own: a disabled agent key still gives
    # back the command, unchanged, as the runbook says.
    values_path = f"/clusters/agent-values/{urllib.parse.quote(name)}"
    code, raw = platform.request("GET", values_path)
    if code in (401, 403):
        code, raw = platform.request("GET", values_path, token=str(key["accessKey"]))
    if code != 200:
        raise click.ClickException(f"cannot read the agent values: {message_of(raw)}")
    extra = yaml.safe_load(raw) or {}
    connection = av.connection_values(
        str(key["accessKey"]),
        agent_url,
        str(key.get("caCert") or "").encode() or None,
        bool(key.get("insecure")),
    )
    try:
        chart = find_chart()
    except FileNotFoundError as exc:
        raise click.ClickException(str(exc)) from None
    if kube_context is None and kubeconfig is None:
        args = helm_args(chart, None, connection, extra)
        echo("Run this against the cluster to connect (its kubectl context):")
        echo("helm " + " ".join(shlex.quote(a) for a in args))
        return
    try:
        helm = find_helm(helm_binary)
    except FileNotFoundError as exc:
        raise click.ClickException(str(exc)) from None
    with tempfile.TemporaryDirectory(prefix="vplane-connect-") as tmp:
        values_file = Path(tmp) / "values.yaml"
        values_file.touch(mode=0o600)
        values_file.write_text(yaml.safe_dump(av.desired_values(extra, connection), sort_keys=True))
        cmd = [helm, *helm_args(chart, values_file, {}, {})]
        if kubeconfig is not None:
            cmd += ["--kubeconfig", str(kubeconfig)]
        if kube_context is not None:
            cmd += ["--kube-context", kube_context]
        result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise click.ClickException(f"helm failed: {result.stderr.strip()}")
    echo(f'agent installed: release "loft" in namespace {NAMESPACE}; the cluster connects once it runs')
    echo(f"  helm history -n {NAMESPACE} loft")
    echo(f"  kubectl get cluster.management.loft.sh {name} -o jsonpath='{{.status.phase}}'")
