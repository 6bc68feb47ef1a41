"""``vplane up``: the whole system on this machine.

Starts the platform, makes sure project ``default`` and the tenant clusters ``target`` and then ``client``
(whose resource proxy needs the target's sample CRD served) exist, waits until they serve through the
platform (the path their kubeconfig contexts use), writes one kubeconfig with a context for the management
API, one per tenant cluster and one for the platform's own cluster (keeping the context the user had
selected in it), remembers the platform for ``vplane connect``, and prints how to use it all.

The tenants' control planes run as pods of the platform's own cluster (``tenant_placement: pods``, a
StatefulSet in ``vcluster-<name>``), so the runbooks' ``kubectl --context vplane_host get pods -n
vcluster-target`` and ``kubectl logs -n vcluster-client -l app=vcluster --prefix`` work;
``--set tenant_placement=process`` runs them as the platform's child processes instead.

It also starts one embedded cluster (``vplane cluster start``, default name ``edge``) and connects it as an
operator would (``vplane platform connect cluster``), in the background (``vplane.cli.upcluster``): its
context ``vplane_<name>`` joins the kubeconfig once its API serves, and its Cluster phase is printed once
``Initialized``. ``--no-connected-cluster`` skips it.

``--listen HOST:0`` picks a free port once: the next ``vplane up`` of the data directory listens on the same
one while it is free (``platform.port``). The tenants' pod template names the platform's URL, so a new port
would make every restart a rollout of their StatefulSets, which ``OrderedReady`` holds behind the restarted
old pods until they turn Ready, unable to reach the platform they name, after ``mesh_ready_timeout_seconds``.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import click

from vplane.cli import create, upcluster, upsample, userconfig
from vplane.cli.hostnode import platform_node
from vplane.cli.options import build_settings
from vplane.controllers.client import KubeClient, Resource
from vplane.kube import errors
from vplane.kube.accesskeys import API_VERSION, project_namespace, vcluster_subject
from vplane.platform.server import Platform
from vplane.platform.settings import PlatformSettings

PROJECTS = Resource(API_VERSION, "Project", "projects", False)
VCIS = Resource(API_VERSION, "VirtualClusterInstance", "virtualclusterinstances", True)
PROJECT = "default"
TENANTS = ("client", "target")
READY_TIMEOUT_SECONDS = 120.0


class Up:
    def __init__(
        self,
        data_dir: Path,
        host: str,
        port: int,
        overrides: tuple[str, ...],
        connected_cluster: str | None = upcluster.DEFAULT_NAME,
        cluster_overrides: tuple[str, ...] = (),
    ) -> None:
        self.port_file = data_dir / "platform.port"
        if port == 0:
            port = upcluster.recorded_port(self.port_file, host)
        settings = build_settings(
            PlatformSettings,
            {
                "data_dir": data_dir / "platform",
                "listen_host": host,
                "listen_port": port,
                "tenant_placement": "pods",
            },
            overrides,
        )
        self.platform = Platform(settings, platform_node(settings))
        self.data_dir = data_dir
        self.kubeconfig = data_dir / "kubeconfig.yaml"
        self.edge = (
            upcluster.ConnectedCluster(
                connected_cluster,
                data_dir / "clusters" / connected_cluster,
                node_overrides=cluster_overrides,
                helm_binary=settings.helm_binary,
            )
            if connected_cluster
            else None
        )
        self._entries: list[tuple[str, str, bytes, str]] = []
        self._edge_entry: tuple[str, str, bytes, str] | None = None
        self._printed = asyncio.Event()

    async def start(self) -> None:
        platform = self.platform
        await platform.start()
        upcluster.record_listen(self.port_file, platform.url)
        client = platform.client
        assert client is not None
        if self.edge is not None:
            # Beside the tenants: it only needs the platform's API, and never holds up what follows.
            self.edge.start(
                (platform.url, platform.admin_key, platform.ca_path.read_bytes()),
                self._cluster_status,
                self._add_edge_context,
                self._printed,
            )
        await _ensure(
            client,
            PROJECTS,
            {
                "apiVersion": API_VERSION,
                "kind": "Project",
                "metadata": {"name": PROJECT},
                "spec": {"displayName": "Default"},
            },
        )
        namespace = project_namespace(PROJECT, platform.settings.project_namespace_prefix)
        await _wait_namespace(client, namespace)
        # The client proxies the sample group from the target, so the target comes first, as the runbook
        # orders it: `use` of the target for the client's identity, the target serving, the sample CRD
        # Established there with the client's rights on it, and only then the client with its proxy entry.
        # A client started beside the target checked its proxy's discovery before the target was on the mesh
        # or served the group: the checks fell back (`no_peer`, `upstream_error`), and the runbook reads
        # those counters as a symptom on a system nobody has used yet.
        client_identity = vcluster_subject(namespace, "client")
        await upsample.grant_use(client, namespace, "target", client_identity)
        await _ensure(client, VCIS, create.instance("target", namespace, PROJECT, ""), namespace)
        await _wait_ready(client, namespace, ("target",))
        login = userconfig.PlatformLogin(platform.url, platform.admin_key, platform.ca_path.read_bytes())
        await _wait_reachable(login, ("target",))
        login.save()
        entries = [(userconfig.management_context(), platform.url, login.ca_pem, login.access_key)]
        entries += [
            (
                userconfig.tenant_context(n, PROJECT),
                userconfig.tenant_server(login, n, PROJECT),
                login.ca_pem,
                login.access_key,
            )
            for n in TENANTS
        ]
        pods = platform.settings.tenant_placement == "pods"
        if pods:
            # The same server and key as the management context: the platform's API server is its cluster's.
            entries.append((userconfig.host_context(), platform.url, login.ca_pem, login.access_key))
        # Written now, with every context (the client's answers once it serves): the target's side of the
        # sample is prepared through its context.
        self._entries = entries
        self._write_kubeconfig()
        await self._prepare_target(client_identity)
        values = upsample.client_values("target")
        await _ensure(client, VCIS, create.instance("client", namespace, PROJECT, values), namespace)
        await _wait_ready(client, namespace, ("client",))
        await _wait_reachable(login, ("client",))
        await self._sample_proxy(login)
        _print_usage(platform.url, self.kubeconfig, pods, self.edge)
        self._printed.set()

    def _write_kubeconfig(self) -> None:
        """The platform's contexts, and the connected cluster's once its API serves (whichever comes last
        writes both)."""
        if not self._entries:
            return
        entries = self._entries + ([self._edge_entry] if self._edge_entry else [])
        current = keep_context(userconfig.current_context(self.kubeconfig), [e[0] for e in entries])
        userconfig.write_kubeconfig(self.kubeconfig, userconfig.kubeconfig_doc(entries, current))

    def _add_edge_context(self, entry: tuple[str, str, bytes, str]) -> None:
        self._edge_entry = entry
        self._write_kubeconfig()

    async def _cluster_status(self) -> dict[str, Any] | None:
        from vplane.platform.clusters.controller import CLUSTERS

        client = self.platform.client
        assert client is not None and self.edge is not None
        try:
            return await client.get(CLUSTERS, self.edge.name)
        except errors.StatusError as exc:
            if exc.code == 404:
                return None
            raise

    async def _prepare_target(self, client_identity: str) -> None:
        """The target's side of the sample: its CRD, Established, and the client's rights there."""
        target = KubeClient.from_kubeconfig(self.kubeconfig, userconfig.tenant_context("target", PROJECT))
        try:
            await upsample.prepare_target(target, client_identity)
            deadline = asyncio.get_running_loop().time() + READY_TIMEOUT_SECONDS
            while not await upsample.established(target):
                if asyncio.get_running_loop().time() > deadline:
                    raise click.ClickException(
                        f"the sample CustomResourceDefinition {upsample.PLURAL}.{upsample.GROUP} is not "
                        "Established in tenant cluster target"
                    )
                await asyncio.sleep(0.1)
        finally:
            await target.close()

    async def _sample_proxy(self, login: userconfig.PlatformLogin) -> None:
        """Wait until the client serves the group (the proxy's APIService is available and its schema
        merged, so kubectl validates a widget)."""
        tenant = KubeClient.from_kubeconfig(self.kubeconfig, userconfig.tenant_context("client", PROJECT))
        try:
            deadline = asyncio.get_running_loop().time() + READY_TIMEOUT_SECONDS
            name = f"{upsample.VERSION}.{upsample.GROUP}"
            while True:
                try:
                    api = await tenant.get(upsample.APISERVICES, name)
                    conditions = (api.get("status") or {}).get("conditions") or []
                    if any(
                        c.get("type") == "Available" and c.get("status") == "True" for c in conditions
                    ) and await _serves_schema(login, f"apis/{upsample.GROUP}/{upsample.VERSION}"):
                        return
                except errors.StatusError:
                    pass
                if asyncio.get_running_loop().time() > deadline:
                    click.echo(f"warning: the sample resource proxy ({name}) is not available yet", err=True)
                    return
                await asyncio.sleep(0.2)
        finally:
            await tenant.close()

    async def stop(self) -> None:
        if self.edge is not None:
            await asyncio.gather(self.edge.stop(), self.platform.stop())
        else:
            await self.platform.stop()

    def force_stop(self) -> None:
        if self.edge is not None:
            self.edge.force_stop()
        self.platform.force_stop()


def keep_context(previous: str | None, names: list[str]) -> str:
    """The context a restart leaves selected: the user's choice if it is still one of ours, else the
    first tenant cluster's."""
    return previous if previous in names else names[1]


async def _wait_reachable(login: userconfig.PlatformLogin, names: tuple[str, ...]) -> None:
    """Until each tenant answers an authenticated request through the platform, as kubectl will reach it
    (the replica serves, the platform relays, and the tenant accepts the platform's access key)."""
    deadline = asyncio.get_running_loop().time() + READY_TIMEOUT_SECONDS
    ctx = ssl.create_default_context(cadata=login.ca_pem.decode())
    headers = {"Authorization": f"Bearer {login.access_key}"}
    pending = list(names)
    last = ""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
        while pending:
            name = pending[0]
            url = userconfig.tenant_server(login, name, PROJECT) + "/api"  # needs an authenticated user
            try:
                async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=10)) as resp:
                    if resp.status == 200:
                        pending.pop(0)
                        continue
                    last = f"{resp.status} {resp.reason}"
            except (aiohttp.ClientError, TimeoutError) as exc:
                last = str(exc) or type(exc).__name__
            if asyncio.get_running_loop().time() > deadline:
                raise click.ClickException(
                    f"tenant cluster {name} is not reachable through the platform: {last}"
                )
            await asyncio.sleep(0.2)


async def _serves_schema(login: userconfig.PlatformLogin, path: str) -> bool:
    """Whether the client's ``/openapi/v3`` lists ``path`` (kubectl's client-side validation needs it)."""
    ctx = ssl.create_default_context(cadata=login.ca_pem.decode())
    url = userconfig.tenant_server(login, "client", PROJECT) + "/openapi/v3"
    headers = {"Authorization": f"Bearer {login.access_key}"}
    try:
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session,
            session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=10)) as resp,
        ):
            return resp.status == 200 and path in ((await resp.json()).get("paths") or {})
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return False


async def _ensure(
    client: KubeClient, resource: Resource, obj: dict[str, object], namespace: str | None = None
) -> None:
    try:
        await client.create(resource, obj, namespace=namespace)
    except errors.StatusError as exc:
        if exc.code != 409:
            raise


async def _wait_namespace(client: KubeClient, namespace: str) -> None:
    from vplane.controllers.client import NAMESPACES

    deadline = asyncio.get_running_loop().time() + READY_TIMEOUT_SECONDS
    while True:
        try:
            await client.get(NAMESPACES, namespace)
            return
        except errors.StatusError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.1)


async def _wait_ready(client: KubeClient, namespace: str, names: tuple[str, ...]) -> None:
    deadline = asyncio.get_running_loop().time() + READY_TIMEOUT_SECONDS
    pending = set(names)
    while pending:
        for name in sorted(pending):
            vci = await client.get(VCIS, name, namespace=namespace)
            phase = (vci.get("status") or {}).get("phase")
            if phase == "Ready":
                pending.discard(name)
            elif phase == "Failed":
                raise click.ClickException(
                    f"tenant cluster {name} failed: {(vci.get('status') or {}).get('message')}"
                )
        if pending:
            if asyncio.get_running_loop().time() > deadline:
                raise click.ClickException(f"tenant clusters not ready in time: {', '.join(sorted(pending))}")
            await asyncio.sleep(0.2)


def _print_usage(url: str, kubeconfig: Path, pods: bool, edge: upcluster.ConnectedCluster | None) -> None:
    echo = click.echo
    echo("")
    echo(f"vplane is up. Platform: {url}")
    echo(f"Kubeconfig with a context for each part: {kubeconfig}")
    echo(f"  export KUBECONFIG={kubeconfig}")
    echo(f"  kubectl --context {userconfig.management_context()} get virtualclusterinstances -A")
    for name in TENANTS:
        echo(f"  kubectl --context {userconfig.tenant_context(name, PROJECT)} get namespaces")
    if pods:
        echo("The tenants' control planes run as pods of the platform's own cluster:")
        echo(f"  kubectl --context {userconfig.host_context()} get pods -n vcluster-{TENANTS[1]}")
        echo(
            f"  kubectl --context {userconfig.host_context()} logs -n vcluster-{TENANTS[0]} -l app=vcluster "
            "--tail=100 --prefix"
        )
    echo("The client tenant serves widgets.demo.vplane.io/v1, stored in the target (the resource proxy):")
    echo(
        "  "
        + upsample.example(
            userconfig.tenant_context("client", PROJECT), userconfig.tenant_context("target", PROJECT)
        )
    )
    echo("Or through the platform, as in the runbooks:")
    echo(f"  vplane connect target --driver platform --project {PROJECT} -- kubectl get namespaces")
    echo("  vplane platform connect management")
    if edge is not None:
        echo(
            f'Connected cluster "{edge.name}" (vplane cluster start --data-dir {edge.directory}) comes up in the '
            f"background; its context {edge.context} and its Cluster phase follow here once it is Initialized."
        )
    echo("Stop with Ctrl-C.")
