"""Benchmark agent sessions: how many one platform process holds, what each costs, and how fast a Cluster's
status follows its tunnel.

    .venv/bin/python bench/agents/run.py [--steps 1000,2000,5000] [--per-driver 1000] [--window 30]
        [--settle 20] [--rounds 2] [--out docs/benchmarks.md]

Processes, all as vplane runs them (uvloop, TLS): ``vplane platform start`` with its default settings (agents
heartbeat every 10 s, the agent's liveness period); driver processes (this file, ``--role driver``), each
holding ``--per-driver`` simulated agents: ``vplane.mesh.NodeSession`` with an access key of its own (type
Agent, role agent), i.e. the real protocol (WebSocket over TLS, HELLO with the key, REGISTERED, netmaps,
heartbeats); ``vplane apiserver`` as one real connected cluster with a real ``vplane agent`` for the Cluster
``edge``, whose tunnel goes through a fault-injecting TCP relay in this process.

Measured, with the platform's RSS (``VmRSS``) and CPU (``utime + stime``) read from ``/proc``:

- at 0 sessions and at each step: RSS, CPU% over ``--window`` seconds once the step has settled, and the ramp
  (registration time and CPU spent per registration);
- per session: RSS and CPU% growth divided by the sessions added;
- at 0 sessions and at the largest step: the time from cutting the agent's tunnel (connections reset, or
  silently dropped) until the Cluster reads ``NoOnlinePeers`` (and ``status.online`` false), and from
  restoring it until it reads ``Initialized`` again (``--rounds`` of each).

The simulated agents have no Cluster objects (the Cluster loop's own cost per cluster is not measured here).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
HELM = ROOT / ".tools" / "bin" / "helm"
BEGIN, END = "<!-- agents:begin -->", "<!-- agents:end -->"
CLK_TCK = os.sysconf("SC_CLK_TCK")
KEYS_API = "/apis/management.loft.sh/v1/accesskeys"


# -- the driver: many simulated agents in one process -------------------------------------------------------


async def role_driver(args: argparse.Namespace) -> None:
    from vplane.mesh import MeshSettings, NodeSession
    from vplane.support import tls

    keys: list[str] = json.loads(Path(args.keys).read_text())[args.first : args.first + args.count]
    ctx = tls.client_context(Path(args.ca).read_bytes())
    settings = MeshSettings()  # heartbeat every 10 s, as every agent's session
    nodes = [
        NodeSession(
            args.url,
            key,
            hostname=f"loft-bench-{args.first + i:05d}",
            settings=settings,
            ssl_context=ctx,
            environ={},
        )
        for i, key in enumerate(keys)
    ]
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)

    async def report() -> None:
        while True:
            connected = sum(n.connected for n in nodes)
            registrations = sum(n.registrations for n in nodes)
            failed = sum(n.state == "failed" for n in nodes)
            print(
                json.dumps({"connected": connected, "registrations": registrations, "failed": failed}),
                flush=True,
            )
            await asyncio.sleep(1.0)

    reporter = asyncio.create_task(report())
    # Start in waves so a driver does not open a thousand TLS handshakes at once.
    for start in range(0, len(nodes), args.wave):
        wave = nodes[start : start + args.wave]
        for node in wave:
            await node.start()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(60):
                await asyncio.gather(*(n.wait_ready() for n in wave))
        if stopping.is_set():
            break
    await stopping.wait()
    reporter.cancel()
    await asyncio.gather(*(n.close() for n in nodes), return_exceptions=True)


# -- the fault-injecting relay in front of the platform, for one agent -----------------------------------------


class FaultRelay:
    """TCP relay: ``pass`` forwards, ``reset`` aborts every connection and refuses new ones, ``drop`` keeps
    connections open but forwards nothing (a silent network cut)."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.mode = "pass"
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.port = 0
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def set_mode(self, mode: str) -> None:
        self.mode = mode
        if mode == "drop":
            self.flowing.clear()
        else:
            self.flowing.set()
        if mode == "reset":
            for writer in list(self._conns):
                writer.transport.abort()
            self._conns.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == "reset":
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._conns |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    await self.flowing.wait()
                    if self.mode == "reset":
                        return
                    dst.write(data)
                    await dst.drain()
            except (OSError, ConnectionError):
                pass
            finally:
                dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._conns -= {writer, up_writer}

    async def close(self) -> None:
        self.set_mode("reset")
        if self._server is not None:
            self._server.close()


# -- processes -------------------------------------------------------------------------------------------------


class Proc:
    def __init__(self, cmd: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
            )

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise SystemExit("no VmRSS")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def vplane(*args: str) -> list[str]:
    return [sys.executable, "-m", "vplane.cli.main", *args]


def wait_file(path: Path, proc: Proc, what: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{what} did not start")
        time.sleep(0.05)
    return path.read_text().strip()


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


class Driver:
    def __init__(
        self, args: argparse.Namespace, url: str, ca: Path, keys: Path, first: int, count: int, log: Path
    ) -> None:
        cmd = [
            sys.executable,
            str(HERE),
            "--role",
            "driver",
            "--url",
            url,
            "--ca",
            str(ca),
            "--keys",
            str(keys),
        ]
        cmd += ["--first", str(first), "--count", str(count), "--wave", str(args.wave)]
        self.log = log.open("ab")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.count = count
        self.state = {"connected": 0, "registrations": 0, "failed": 0}
        os.set_blocking(self.proc.stdout.fileno(), False)  # type: ignore[union-attr]

    def poll(self) -> dict[str, int]:
        assert self.proc.stdout is not None
        with contextlib.suppress(TypeError):
            for line in self.proc.stdout.readlines():
                with contextlib.suppress(ValueError):
                    self.state = json.loads(line)
        if self.proc.poll() is not None:
            raise SystemExit(f"a driver exited ({self.proc.returncode})")
        return self.state

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


# -- the platform's API ---------------------------------------------------------------------------------------------


class API:
    def __init__(self, url: str, token: str, ca: Path) -> None:
        self.url = url
        self.headers = {"Authorization": f"Bearer {token}"}
        self.ssl = ssl.create_default_context(cafile=str(ca))
        self.http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self.ssl, limit=32))

    async def request(self, method: str, path: str, body: Any = None) -> Any:
        async with self.http.request(method, self.url + path, json=body, headers=self.headers) as resp:
            data = await resp.json(content_type=None)
            if resp.status >= 300:
                raise SystemExit(f"{method} {path}: {resp.status} {data}")
            return data

    async def close(self) -> None:
        await self.http.close()


async def create_keys(api: API, count: int) -> list[str]:
    from vplane.kube import accesskeys

    sem = asyncio.Semaphore(16)

    async def one(i: int) -> str:
        obj = accesskeys.key_object(
            f"bench-agent-{i:05d}",
            accesskeys.TYPE_AGENT,
            subject=f"bench:agent-{i:05d}",
            roles=(accesskeys.ROLE_AGENT,),
        )
        async with sem:
            created = await api.request("POST", KEYS_API, obj)
        return str(created["spec"]["key"])

    return list(await asyncio.gather(*(one(i) for i in range(count))))


# -- measurements -------------------------------------------------------------------------------------------------------


async def sample(platform: Proc, window: float) -> dict[str, float]:
    cpu0, t0 = platform.cpu_seconds(), time.monotonic()
    await asyncio.sleep(window)
    cpu1, t1 = platform.cpu_seconds(), time.monotonic()
    return {"cpu_pct": 100 * (cpu1 - cpu0) / (t1 - t0), "rss_mib": platform.rss_mib()}


async def ramp_to(
    target: int, drivers: list[Driver], args: argparse.Namespace, start: Any, platform: Proc
) -> dict[str, float]:
    held = sum(d.count for d in drivers)
    cpu0, t0 = platform.cpu_seconds(), time.monotonic()
    while held < target:
        count = min(args.per_driver, target - held)
        drivers.append(start(held, count))
        held += count
    deadline = time.monotonic() + args.ramp_timeout
    while True:
        states = [d.poll() for d in drivers]
        connected = sum(s["connected"] for s in states)
        if connected >= target:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"only {connected} of {target} sessions connected after {args.ramp_timeout}s")
        await asyncio.sleep(0.5)
    elapsed = time.monotonic() - t0
    cpu = platform.cpu_seconds() - cpu0
    return {"ramp_s": elapsed, "ramp_cpu_s": cpu}


async def cluster_status(api: API, name: str) -> tuple[str, str, bool]:
    obj = await api.request("GET", f"/apis/management.loft.sh/v1/clusters/{name}")
    status = obj.get("status") or {}
    return str(status.get("phase") or ""), str(status.get("reason") or ""), bool(status.get("online"))


async def until(api: API, check: Any, limit: float) -> float | None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if check(await cluster_status(api, "edge")):
            return time.monotonic() - t0
        await asyncio.sleep(0.1)
    return None


async def tunnel_latency(api: API, relay: FaultRelay, rounds: int) -> dict[str, list[float | None]]:
    initialized = lambda s: s[0] == "Initialized" and s[2]  # noqa: E731
    out: dict[str, list[float | None]] = {
        k: [] for k in ("reset", "reset_online", "reset_restore", "drop", "drop_online", "drop_restore")
    }
    if await until(api, initialized, 120) is None:
        raise SystemExit(f"cluster edge is not Initialized: {await cluster_status(api, 'edge')}")
    for _ in range(rounds):
        for mode in ("reset", "drop"):
            t0 = time.monotonic()
            relay.set_mode(mode)
            reason = await until(api, lambda s: s[1] == "NoOnlinePeers" and s[0] == "", 200)
            out[mode].append(reason)
            remaining = 200 - (time.monotonic() - t0)
            online = await until(api, lambda s: not s[2], max(remaining, 1))
            out[f"{mode}_online"].append(None if online is None else time.monotonic() - t0)
            relay.set_mode("pass")
            out[f"{mode}_restore"].append(await until(api, initialized, 120))
    return out


# -- the orchestrator --------------------------------------------------------------------------------------------------


async def main(args: argparse.Namespace) -> None:
    steps = [int(s) for s in args.steps.split(",")]
    work = Path(tempfile.mkdtemp(prefix="vplane-bench-agents-"))
    data = work / "platform"
    settings = {"agent_values": json.dumps({"replicas": 0})}
    if HELM.exists():
        settings["helm_binary"] = str(HELM)
    cmd = vplane(
        "platform",
        "start",
        "--data-dir",
        str(data),
        "--listen",
        "127.0.0.1:0",
        "--ready-file",
        str(work / "ready"),
    )
    for key, value in settings.items():
        cmd += ["--set", f"{key}={value}"]
    platform = Proc(cmd, work / "platform.log")
    cluster: Proc | None = None
    agent: Proc | None = None
    drivers: list[Driver] = []
    relay: FaultRelay | None = None
    api: API | None = None
    results: dict[str, Any] = {"steps": [], "latency": {}, "load": []}
    try:
        url = wait_file(work / "ready", platform, "the platform")
        ca = data / "api" / "pki" / "ca.crt"
        token = yaml.safe_load((data / "management.yaml").read_text())["users"][0]["user"]["token"]
        api = API(url, token, ca)
        print(f"platform {url} (pid {platform.proc.pid}); creating {max(steps)} access keys", flush=True)
        keys_file = work / "keys.json"
        keys_file.write_text(json.dumps(await create_keys(api, max(steps))))

        # The connected cluster: a real API server and a real agent, its tunnel through the relay.
        cluster_dir = work / "edge-api"
        cluster = Proc(
            vplane(
                "apiserver",
                "--data-dir",
                str(cluster_dir),
                "--listen",
                "127.0.0.1:0",
                "--ready-file",
                str(work / "edge.ready"),
            )
            + ["--set", "controller_manager=false", "--set", "scheduler=false"],
            work / "edge-api.log",
        )
        wait_file(work / "edge.ready", cluster, "the connected cluster's API server")
        await api.request(
            "POST",
            "/apis/management.loft.sh/v1/clusters",
            {
                "apiVersion": "management.loft.sh/v1",
                "kind": "Cluster",
                "metadata": {"name": "edge"},
                "spec": {"networkPeer": True, "managementNamespace": "vcluster-platform"},
            },
        )
        agent_key = (await api.request("GET", "/apis/management.loft.sh/v1/clusters/edge/accesskey"))[
            "accessKey"
        ]
        host, port = url.removeprefix("https://").rsplit(":", 1)
        relay = FaultRelay(host, int(port))
        await relay.start()
        agent = Proc(
            vplane(
                "agent",
                "--token",
                agent_key,
                "--url",
                f"https://127.0.0.1:{relay.port}",
                "--ca-file",
                str(ca),
                "--kubeconfig",
                str(cluster_dir / "kubeconfig.yaml"),
                "--name",
                "loft-bench-edge",
            ),
            work / "agent.log",
        )

        def start_driver(first: int, count: int) -> Driver:
            return Driver(args, url, ca, keys_file, first, count, work / f"driver-{first}.log")

        print(f"settling {args.settle}s at 0 sessions", flush=True)
        await asyncio.sleep(args.settle)
        base = await sample(platform, args.window)
        results["base"] = base
        results["load"].append(loadavg())
        print(f"0 sessions: {base}  load {loadavg()}", flush=True)
        if args.rounds:
            results["latency"][0] = await tunnel_latency(api, relay, args.rounds)
            print(f"latency at 0: {results['latency'][0]}", flush=True)
        for target in steps:
            ramp = await ramp_to(target, drivers, args, start_driver, platform)
            print(
                f"{target} sessions connected in {ramp['ramp_s']:.1f}s (platform CPU {ramp['ramp_cpu_s']:.1f}s)",
                flush=True,
            )
            await asyncio.sleep(args.settle)
            measured = await sample(platform, args.window)
            states = [d.poll() for d in drivers]
            reconnects = sum(s["registrations"] for s in states) - sum(d.count for d in drivers)
            connected = sum(s["connected"] for s in states)
            entry = {
                "sessions": target,
                **ramp,
                **measured,
                "connected": connected,
                "reconnects": reconnects,
                "load": loadavg(),
            }
            results["steps"].append(entry)
            print(json.dumps(entry), flush=True)
        if args.rounds:
            results["latency"][steps[-1]] = await tunnel_latency(api, relay, args.rounds)
            print(f"latency at {steps[-1]}: {results['latency'][steps[-1]]}", flush=True)
    finally:
        for driver in drivers:
            driver.stop()
        if agent is not None:
            agent.stop()
        if relay is not None:
            await relay.close()
        if api is not None:
            await api.close()
        platform.stop()
        if cluster is not None:
            cluster.stop()
    (work / "results.json").write_text(json.dumps(results, indent=2))
    text = report(results, args)
    print(text)
    if args.out:
        write_out(Path(args.out), text)
    print(f"logs and results in {work}")


def fmt(values: list[float | None]) -> str:
    shown = [f"{v:.1f} s" if v is not None else "not within the timeout" for v in values]
    return ", ".join(shown)


def report(r: dict[str, Any], args: argparse.Namespace) -> str:
    base = r["base"]
    lines = [
        f"Agent sessions ({os.cpu_count()} cores, shared; one `vplane platform start` on uvloop with its default "
        f"settings, agents heartbeating every 10 s, simulated agents in driver processes of {args.per_driver} "
        f"sessions on the same machine; window {args.window:.0f} s after {args.settle:.0f} s settling; "
        f"load average (1/5/15 min) during the steps: {', '.join(r['load'] + [s['load'] for s in r['steps']])}).",
        "",
        "| sessions | platform RSS | platform CPU (one core = 100 %) | ramp: time / platform CPU | reconnects |",
        "|---|---|---|---|---|",
        f"| 0 | {base['rss_mib']:.0f} MiB | {base['cpu_pct']:.1f} % | — | — |",
    ]
    previous = {"sessions": 0, **base}
    for s in r["steps"]:
        added = s["sessions"] - previous["sessions"]
        lines.append(
            f"| {s['sessions']:,} | {s['rss_mib']:.0f} MiB | {s['cpu_pct']:.1f} % | {s['ramp_s']:.1f} s / "
            f"{s['ramp_cpu_s']:.1f} s ({1000 * s['ramp_cpu_s'] / added:.1f} ms per registration) | {s['reconnects']} |"
        )
        previous = s
    last = r["steps"][-1] if r["steps"] else None
    if last is not None:
        n = last["sessions"]
        lines += [
            "",
            f"Per session (0 → {n:,}): {1024 * (last['rss_mib'] - base['rss_mib']) / n:.1f} KiB of platform RSS, "
            f"{1000 * (last['cpu_pct'] - base['cpu_pct']) / n:.2f} milli-% of a core "
            f"({10 * (last['cpu_pct'] - base['cpu_pct']) / n * 1000:.1f} µs of CPU per session per second).",
        ]
    for sessions, lat in r["latency"].items():
        lines += [
            "",
            f"Cluster `edge` (a real `vplane agent` whose tunnel crosses a fault-injecting relay) with {int(sessions):,} "
            "other sessions held, default settings:",
            "",
            "| event | until the Cluster reads it |",
            "|---|---|",
            f"| tunnel reset (connections aborted) → `NoOnlinePeers`, phase empty | {fmt(lat['reset'])} |",
            f"| … → `status.online` false | {fmt(lat['reset_online'])} |",
            f"| … tunnel restored → `Initialized`, online | {fmt(lat['reset_restore'])} |",
            f"| tunnel silently cut (nothing forwarded) → `NoOnlinePeers` | {fmt(lat['drop'])} |",
            f"| … → `status.online` false | {fmt(lat['drop_online'])} |",
            f"| … tunnel restored → `Initialized`, online | {fmt(lat['drop_restore'])} |",
        ]
    return "\n".join(lines)


def write_out(path: Path, text: str) -> None:
    doc = path.read_text()
    block = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in doc and END in doc:
        doc = doc[: doc.index(BEGIN)] + block + doc[doc.index(END) + len(END) :]
    else:
        doc = doc.rstrip("\n") + f"\n\n{block}\n"
    path.write_text(doc)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--role", default="main", choices=["main", "driver"])
    parser.add_argument("--steps", default="1000,2000,5000", help="session counts to measure at")
    parser.add_argument("--per-driver", type=int, default=1000)
    parser.add_argument("--wave", type=int, default=50, help="sessions a driver starts at once")
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--settle", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=2, help="cut/restore rounds per cut kind (0: skip)")
    parser.add_argument("--ramp-timeout", type=float, default=600.0)
    parser.add_argument("--out", default="")
    # driver
    parser.add_argument("--url", default="")
    parser.add_argument("--ca", default="")
    parser.add_argument("--keys", default="")
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--count", type=int, default=0)
    return parser.parse_args()


if __name__ == "__main__":
    import uvloop

    arguments = parse()
    uvloop.run(role_driver(arguments) if arguments.role == "driver" else main(arguments))
