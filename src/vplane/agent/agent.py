"""The agent process: configuration checks, the pre-tunnel probe, the tunnel session and the liveness loop.

Startup, in the runbook's order: ``token is empty`` / ``url is empty`` end the process (the Helm values
never reached it); ``GET <platform>/derp/probe`` must answer 200 before the tunnel starts, and each
failure logs ``Failed to reach the coordinator server. Make sure that the agent can reach the
control-plane`` and is retried; then the mesh session registers with the cluster's access key. A
refused key (``no auth key provided``, ``invalid access key: ...``) ends the process with that message:
kubelet restarts it, as upstream's agent pod restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl

import structlog
from aiohttp import web

from vplane.agent import upstream
from vplane.agent.liveness import CANNOT_REACH, REACHED_AGAIN, Liveness
from vplane.agent.relay import Relay
from vplane.agent.settings import AgentSettings
from vplane.mesh.session import NodeSession, RegistrationError
from vplane.mesh.settings import AGENT_LOG_ENV, MeshSettings, verbose
from vplane.support import tls
from vplane.support.tasks import cancel_and_wait

log = structlog.get_logger("vplane.agent")

MODE_LABEL = "agent-mode"
"""The session label that tells the platform an agent session from the upgrade bridge's (self-declared:
both hold the same key, so nothing is gained by lying; keys under ``vplane.io/`` are the platform's)."""
MODE_PROXY_ONLY = "proxy-only"
MODE_AGENT = "agent"
NAMESPACE_LABEL = "agent-namespace"
"""The agent's own namespace (``POD_NAMESPACE``), so the platform can say where an agent runs when its
Helm release is not where the Cluster's ``spec.managementNamespace`` says."""

TOKEN_EMPTY = "token is empty"
URL_EMPTY = "url is empty"


class ConfigError(Exception):
    """The agent cannot start; the message is what it logs."""


def check_config(settings: AgentSettings) -> None:
    if not settings.token.strip():
        raise ConfigError(TOKEN_EMPTY)
    if not settings.url.strip():
        raise ConfigError(URL_EMPTY)
    if not settings.url.startswith(("https://", "http://")):
        raise ConfigError(f"url {settings.url!r} is not an http(s) URL")


class Agent:
    def __init__(self, settings: AgentSettings) -> None:
        check_config(settings)
        self.settings = settings
        self.mesh_settings = MeshSettings.model_validate(settings.mesh)
        if settings.kubeconfig is not None:
            self.api = upstream.from_kubeconfig(
                settings.kubeconfig, settings.kube_context, settings.token_reload_seconds
            )
        else:
            self.api = upstream.pod_credentials(settings.service_account_dir, settings.token_reload_seconds)
        self.verbose = verbose(self.mesh_settings, AGENT_LOG_ENV)
        self.relay = Relay(self.api, settings.upstream_timeout_seconds, self.verbose)
        self.session: NodeSession | None = None
        self.liveness = Liveness()
        self._tasks: list[asyncio.Task[None]] = []
        self._health: web.AppRunner | None = None

    def _ssl(self) -> ssl.SSLContext | None:
        pem = self.settings.ca_pem.strip()
        return tls.client_context(pem.encode()) if pem else None

    async def run(self) -> None:
        """Until the session is refused (raises RegistrationError) or the task is cancelled."""
        s = self.settings
        mode = MODE_PROXY_ONLY if s.proxy_only else MODE_AGENT
        log.info("agent starting", url=s.url, name=s.name, mode=mode, cluster_api=self.api.description)
        labels = {MODE_LABEL: mode}
        if s.namespace:
            labels[NAMESPACE_LABEL] = s.namespace
        self.session = session = NodeSession(
            s.url,
            s.token,
            hostname=s.name,
            labels=labels,
            settings=self.mesh_settings,
            ssl_context=self._ssl(),
            serve=self.relay.server(),
        )
        if s.health_port:
            await self._serve_health()
        # NodeSession.probe logs the runbook's line on every failure (spec §10.3).
        while True:
            if await session.probe():
                break
            await asyncio.sleep(s.probe_retry_seconds)
        log.info("coordinator reachable; starting the tunnel", url=s.url)
        await session.start()
        if not s.proxy_only:  # the bridge only holds its tunnel; the primary agent reports liveness
            self._tasks.append(asyncio.create_task(self._liveness_loop(), name="agent-liveness"))
        async for _ in session.subscribe():
            pass  # ends when the session is closed or its key refused
        if session.failure is not None:
            raise session.failure

    async def _serve_health(self) -> None:
        """``/healthz``: the process serves; ``/readyz``: its tunnel session is registered. The chart's
        readiness probe reads ``/readyz``, so a rolling update keeps the old agent until the new one holds
        a tunnel, and ``kubectl get deploy proxy-only-agent`` shows the bridge ready once it can carry
        the upgrade."""

        async def healthz(request: web.Request) -> web.Response:
            return web.Response(text="ok")

        async def readyz(request: web.Request) -> web.Response:
            session = self.session
            if session is not None and session.connected:
                return web.Response(text="ok")
            state = session.state if session is not None else "starting"
            return web.Response(status=503, text=f"the tunnel session is not registered ({state})")

        app = web.Application()
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/readyz", readyz)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        self._health = runner
        host, port = self.settings.health_host, self.settings.health_port
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as exc:
            raise ConfigError(f"cannot serve the health endpoints on {host}:{port}: {exc}") from None
        log.info("health endpoints", host=self.settings.health_host, port=self.settings.health_port)

    async def _liveness_loop(self) -> None:
        """Every ``liveness_interval_seconds``: is the tunnel session to the platform up? The session
        reconnects by itself (backoff); this loop is what an operator reads (spec §10.4)."""
        assert self.session is not None
        while True:
            await asyncio.sleep(self.settings.liveness_interval_seconds)
            event = self.liveness.observe(self.session.connected)
            if event is None:
                continue
            if event.kind == "failed":
                log.warning(
                    CANNOT_REACH, failures=event.failures, url=self.settings.url, state=self.session.state
                )
            else:
                log.info(REACHED_AGAIN, failures=event.failures, url=self.settings.url)

    async def close(self) -> None:
        await cancel_and_wait(self._tasks)
        if self.session is not None:
            await self.session.close()
        await self.relay.close()
        if self._health is not None:
            await self._health.cleanup()


async def run_agent(settings: AgentSettings) -> int:
    """The process body: 0 when stopped, 1 when the platform refused the key."""
    agent = Agent(settings)
    try:
        await agent.run()
    except RegistrationError as exc:
        log.error("the platform refused the agent's registration", error=str(exc))
        return 1
    except ConfigError as exc:
        log.error(str(exc))
        return 1
    finally:
        with contextlib.suppress(Exception):
            await agent.close()
    return 0
