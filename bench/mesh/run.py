"""Benchmark the mesh: netmap propagation, relayed vs direct requests, coordinator memory per session.

    .venv/bin/python bench/mesh/run.py [--subscribers 100] [--joins 30] [--requests 2000]
        [--duration 5] [--concurrency 16] [--idle 500] [--out docs/benchmarks.md]

Three processes, all on uvloop as ``vplane`` runs them: a coordinator (TLS, ``wss://``), a server node
(an aiohttp app served both on its direct TLS listener and over the relay), and this process, which runs
the client nodes. Measured:

- netmap propagation: the time from a node starting to join (connect, register) until every one of
  ``--subscribers`` sessions holds a netmap with it, p50/p99 over ``--joins`` joins; likewise for leaving.
- the same small HTTP request over a direct dial and over the relay in the same run: sequential latency
  (keep-alive connection) and throughput at ``--concurrency``; the ratio is the relay's cost. Plus an
  8 MiB download per path.
- coordinator memory: RSS growth of a fresh coordinator process per 100 idle sessions (netmaps empty,
  so this is the session's own cost), measured between 10 and 10 + ``--idle`` sessions.

Absolute numbers depend on the machine (and on whatever else runs on it); the ratios are the point.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from vplane.mesh import (
    Coordinator,
    Dialer,
    DirectListener,
    MeshSettings,
    NodeIdentity,
    NodeSession,
    node_id_for,
    same_label,
    tls_server_context,
)
from vplane.support import tls

HERE = Path(__file__).resolve()
BULK_BYTES = 8 * 1024 * 1024
BEGIN, END = "<!-- mesh:begin -->", "<!-- mesh:end -->"


def run_loop(coro: Any) -> Any:
    import uvloop

    return uvloop.run(coro)


# -- roles run in child processes ------------------------------------------------------------------


async def role_coordinator(args: argparse.Namespace) -> None:
    isolated = args.policy == "isolated"

    async def authenticate(key: str) -> NodeIdentity:
        # Every key is accepted; "isolated" puts each node in its own group, so netmaps stay empty.
        return NodeIdentity(key, "bench", {"group": key if isolated else "all"})

    coordinator = Coordinator(authenticate, visible_peers=same_label("group"), environ={})
    app = web.Application()
    coordinator.setup(app)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    ctx = tls_server_context(args.pair)
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    await _serve_until_signalled(args.ready, str(runner.addresses[0][1]), runner.cleanup)


async def role_server_node(args: argparse.Namespace) -> None:
    small = b'{"kind":"Status","status":"Success"}'
    bulk = b"b" * BULK_BYTES

    async def hello(request: web.Request) -> web.Response:
        return web.Response(body=small, content_type="application/json")

    async def download(request: web.Request) -> web.Response:
        return web.Response(body=bulk)

    app = web.Application()
    app.add_routes([web.get("/hello", hello), web.get("/bulk", download)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    listener = DirectListener(runner.server, tls_server_context(args.pair))
    endpoints = await listener.start()
    node = NodeSession(
        args.url,
        "bench-server",
        hostname="server",
        endpoints=endpoints,
        serve=runner.server,
        ssl_context=tls.client_context(args.ca_pem),
        environ={},
    )
    await node.start()
    async with asyncio.timeout(30):
        await node.wait_ready()

    async def stop() -> None:
        await node.close()
        await listener.close()
        await runner.cleanup()

    await _serve_until_signalled(args.ready, node.node_id or "", stop)


def write_ready(ready: str, text: str) -> None:
    tmp = Path(ready + ".tmp")
    tmp.write_text(text)
    tmp.replace(ready)


async def _serve_until_signalled(ready: str, text: str, stop: Any) -> None:
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    write_ready(ready, text)
    await stopping.wait()
    await stop()


# -- the driver --------------------------------------------------------------------------------------


class Child:
    def __init__(self, args: list[str], ready: Path) -> None:
        self.ready = ready
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE), *args, "--ready", str(ready)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"child did not start: {args}")
            time.sleep(0.05)
        self.text = ready.read_text()

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise SystemExit("no VmRSS")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def start_nodes(
    url: str, ctx: Any, names: list[str], key: str, settings: MeshSettings
) -> list[NodeSession]:
    nodes = [NodeSession(url, key, hostname=n, ssl_context=ctx, settings=settings, environ={}) for n in names]
    for node in nodes:
        await node.start()
    async with asyncio.timeout(120):
        await asyncio.gather(*(n.wait_ready() for n in nodes))
    return nodes


async def requests_bench(
    url: str, ctx: Any, ca_pem: str, server_id: str, args: argparse.Namespace
) -> dict[str, dict[str, float]]:
    client = NodeSession(url, "bench-client", hostname="client", ssl_context=ctx, environ={})
    await client.start()
    results: dict[str, dict[str, float]] = {}
    try:
        async with asyncio.timeout(30):
            async with contextlib.aclosing(client.subscribe()) as updates:
                async for netmap in updates:
                    if server_id in netmap.peers:
                        break
        for path in ("direct", "relay"):
            settings = MeshSettings(direct_ca_pem=ca_pem, dial_direct=path == "direct")
            dialer = Dialer(client, settings, environ={})
            async with aiohttp.ClientSession(connector=dialer.connector(limit=args.concurrency)) as http:
                target = f"http://{server_id}"
                for _ in range(50):  # warm up: connections, code paths
                    async with http.get(target + "/hello") as resp:
                        await resp.read()
                latencies: list[float] = []
                for _ in range(args.requests):
                    t0 = time.perf_counter()
                    async with http.get(target + "/hello") as resp:
                        await resp.read()
                    latencies.append(time.perf_counter() - t0)
                done = 0
                end = time.perf_counter() + args.duration

                async def worker(target: str, end: float) -> None:
                    nonlocal done
                    while time.perf_counter() < end:
                        async with http.get(target + "/hello") as resp:
                            await resp.read()
                            if resp.status != 200:
                                raise SystemExit(f"request failed: {resp.status}")
                        done += 1

                start = time.perf_counter()
                await asyncio.gather(*(worker(target, end) for _ in range(args.concurrency)))
                rps = done / (time.perf_counter() - start)
                t0 = time.perf_counter()
                for _ in range(3):
                    async with http.get(target + "/bulk") as resp:
                        assert len(await resp.read()) == BULK_BYTES
                bulk = 3 * BULK_BYTES / (time.perf_counter() - t0) / 1e6
            if set(dialer.paths_used) != {path}:
                raise SystemExit(f"expected only {path} dials, got {dict(dialer.paths_used)}")
            results[path] = {
                "p50_ms": percentile(latencies, 0.5) * 1000,
                "p99_ms": percentile(latencies, 0.99) * 1000,
                "rps": rps,
                "bulk_mb_s": bulk,
            }
    finally:
        await client.close()
    return results


async def propagation_bench(url: str, ctx: Any, args: argparse.Namespace) -> dict[str, float]:
    settings = MeshSettings()
    subscribers = await start_nodes(
        url, ctx, [f"sub-{i}" for i in range(args.subscribers)], "bench-sub", settings
    )
    target: dict[str, Any] = {"id": None, "present": True, "t0": 0.0, "count": 0, "done": asyncio.Event()}
    marked: set[int] = set()

    def check(index: int, peers: Any) -> None:
        if target["id"] is None or index in marked:
            return
        if (target["id"] in peers) == target["present"]:
            marked.add(index)
            if len(marked) == len(subscribers):
                target["elapsed"] = time.perf_counter() - target["t0"]
                target["done"].set()

    async def watch(index: int, node: NodeSession) -> None:
        async with contextlib.aclosing(node.subscribe()) as updates:
            async for netmap in updates:
                check(index, netmap.peers)

    watchers = [asyncio.create_task(watch(i, n)) for i, n in enumerate(subscribers)]
    joins: list[float] = []
    after_registration: list[float] = []
    leaves: list[float] = []

    async def registered_at(node: NodeSession) -> float:
        async with contextlib.aclosing(node.subscribe()) as updates:
            async for _ in updates:
                if node.connected:
                    return time.perf_counter()
        raise SystemExit("the joiner never registered")

    try:
        for j in range(args.joins):
            hostname = f"joiner-{j}"
            node_id = node_id_for("bench-joiner", hostname)
            joiner = NodeSession(url, "bench-joiner", hostname=hostname, ssl_context=ctx, environ={})
            registration = asyncio.create_task(registered_at(joiner))
            for present, samples in ((True, joins), (False, leaves)):
                marked.clear()
                target.update(id=node_id, present=present, done=asyncio.Event())
                target["t0"] = time.perf_counter()
                await (joiner.start() if present else joiner.close())
                for index, node in enumerate(subscribers):
                    check(index, node.peers)
                async with asyncio.timeout(30):
                    await target["done"].wait()
                samples.append(target["elapsed"])
                if present:
                    registered = await registration
                    after_registration.append(target["t0"] + target["elapsed"] - registered)
    finally:
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        await asyncio.gather(*(n.close() for n in subscribers))
    return {
        "join_p50_ms": percentile(joins, 0.5) * 1000,
        "join_p99_ms": percentile(joins, 0.99) * 1000,
        "registered_p50_ms": percentile(after_registration, 0.5) * 1000,
        "registered_p99_ms": percentile(after_registration, 0.99) * 1000,
        "leave_p50_ms": percentile(leaves, 0.5) * 1000,
        "leave_p99_ms": percentile(leaves, 0.99) * 1000,
    }


async def memory_bench(coordinator: Child, url: str, ctx: Any, idle: int) -> dict[str, float]:
    settings = MeshSettings()
    warm = await start_nodes(url, ctx, [f"warm-{i}" for i in range(10)], "warm", settings)
    # Each node has its own key, hence its own group: netmaps stay empty.
    nodes: list[NodeSession] = []
    try:
        await asyncio.sleep(1.0)
        before = coordinator.rss_kib()
        for start in range(0, idle, 100):
            for i in range(start, min(idle, start + 100)):
                nodes.append(NodeSession(url, f"idle-{i}", hostname=f"idle-{i}", ssl_context=ctx, environ={}))
                await nodes[-1].start()
            try:
                async with asyncio.timeout(120):
                    await asyncio.gather(*(n.wait_ready() for n in nodes))
            except TimeoutError:
                states = collections.Counter(n.state for n in nodes)
                raise SystemExit(f"idle sessions did not all register: {dict(states)}") from None
        await asyncio.sleep(1.0)
        after = coordinator.rss_kib()
    finally:
        await asyncio.gather(*(n.close() for n in [*warm, *nodes]))
    return {
        "sessions": float(idle),
        "rss_before_mib": before / 1024,
        "rss_after_mib": after / 1024,
        "per_100_mib": (after - before) / 1024 / (idle / 100),
    }


def table(r: dict[str, Any], args: argparse.Namespace) -> str:
    d, rl, p, m = r["direct"], r["relay"], r["propagation"], r["memory"]
    return "\n".join(
        [
            f"Mesh benchmark ({os.cpu_count()} cores; coordinator, server node and clients in three processes "
            "on this machine, TLS everywhere, uvloop).",
            "",
            "| measurement | result |",
            "|---|---|",
            f"| netmap propagation: a node joins until all {args.subscribers} subscribers have it "
            f"({args.joins} joins) | p50 {p['join_p50_ms']:.1f} ms, p99 {p['join_p99_ms']:.1f} ms |",
            f"| of which after the joiner received REGISTERED (push to {args.subscribers} sessions) "
            f"| p50 {p['registered_p50_ms']:.1f} ms, p99 {p['registered_p99_ms']:.1f} ms |",
            f"| netmap propagation: a node leaves until all {args.subscribers} subscribers dropped it "
            f"| p50 {p['leave_p50_ms']:.1f} ms, p99 {p['leave_p99_ms']:.1f} ms |",
            f"| small GET, direct path, sequential (keep-alive) | p50 {d['p50_ms']:.2f} ms, p99 {d['p99_ms']:.2f} ms |",
            f"| small GET, relayed path, sequential (keep-alive) | p50 {rl['p50_ms']:.2f} ms, p99 {rl['p99_ms']:.2f} ms |",
            f"| relayed / direct latency (p50) | **{rl['p50_ms'] / d['p50_ms']:.2f}x** |",
            f"| small GET throughput, {args.concurrency} concurrent, direct | {d['rps']:,.0f} req/s |",
            f"| small GET throughput, {args.concurrency} concurrent, relayed | {rl['rps']:,.0f} req/s |",
            f"| relayed / direct throughput | **{rl['rps'] / d['rps']:.2f}** |",
            f"| 8 MiB download, direct / relayed | {d['bulk_mb_s']:,.0f} MB/s / {rl['bulk_mb_s']:,.0f} MB/s |",
            f"| coordinator RSS per 100 idle sessions ({m['sessions']:.0f} sessions, "
            f"{m['rss_before_mib']:.0f} -> {m['rss_after_mib']:.0f} MiB) | {m['per_100_mib']:.2f} MiB |",
        ]
    )


def write_out(out: Path, text: str) -> None:
    current = out.read_text() if out.exists() else ""
    block = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in current and END in current:
        current = current[: current.index(BEGIN)] + block + current[current.index(END) + len(END) :]
    else:
        separator = "" if not current else "\n" if current.endswith("\n") else "\n\n"
        current = current + separator + block + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(current)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--role", choices=["driver", "coordinator", "server-node"], default="driver")
    parser.add_argument("--ready", default="")
    parser.add_argument("--cert", default="")
    parser.add_argument("--key", default="")
    parser.add_argument("--ca", default="")
    parser.add_argument("--url", default="")
    parser.add_argument("--policy", choices=["all", "isolated"], default="all")
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--joins", type=int, default=30)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--idle", type=int, default=500)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.role != "driver":
        args.pair = tls.CertPair(Path(args.cert).read_bytes(), Path(args.key).read_bytes())
        args.ca_pem = Path(args.ca).read_bytes() if args.ca else b""
    if args.role == "coordinator":
        run_loop(role_coordinator(args))
        return
    if args.role == "server-node":
        run_loop(role_server_node(args))
        return

    with tempfile.TemporaryDirectory(prefix="vplane-mesh-bench-") as tmp_name:
        tmp = Path(tmp_name)
        ca = tls.make_ca("mesh-bench")
        serving = tls.issue_serving(ca, ["127.0.0.1"])
        (tmp / "ca.crt").write_bytes(ca.cert_pem)
        serving.write(tmp / "tls.crt", tmp / "tls.key")
        cert_args = ["--cert", str(tmp / "tls.crt"), "--key", str(tmp / "tls.key")]
        ctx = tls.client_context(ca.cert_pem)
        results: dict[str, Any] = {}

        coordinator = Child(["--role", "coordinator", *cert_args], tmp / "coordinator.ready")
        url = f"https://127.0.0.1:{coordinator.text}"
        server = None
        try:
            server = Child(
                ["--role", "server-node", "--url", url, "--ca", str(tmp / "ca.crt"), *cert_args],
                tmp / "server.ready",
            )
            paths = run_loop(requests_bench(url, ctx, ca.cert_pem.decode(), server.text, args))
            results.update(paths)
            results["propagation"] = run_loop(propagation_bench(url, ctx, args))
        finally:
            if server is not None:
                server.stop()
            coordinator.stop()

        fresh = Child(["--role", "coordinator", "--policy", "isolated", *cert_args], tmp / "fresh.ready")
        try:
            results["memory"] = run_loop(
                memory_bench(fresh, f"https://127.0.0.1:{fresh.text}", ctx, args.idle)
            )
        finally:
            fresh.stop()

    text = table(results, args)
    print(text)
    if args.out is not None:
        write_out(args.out, text)


if __name__ == "__main__":
    main()
