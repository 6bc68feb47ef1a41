"""Benchmark the scheduler: how fast it binds pending pods against a real ``vplane apiserver``.

    .venv/bin/python bench/scheduler/run.py [--pods 500] [--nodes 10] [--runs 3]

Two scenarios, each on a fresh server with ``--nodes`` nodes (8 CPU, 32 GiB, 110 pods each):

- *backlog*: ``--pods`` pending pods (100m CPU, 128 MiB each) exist before the scheduler starts; measured
  from the scheduler's caches being synced to the last binding acknowledged;
- *stream*: the scheduler runs first and the pods are created by 32 concurrent clients; measured from
  the first create to the last binding.

Every binding is a ``pods/binding`` POST and every pod also gets its ``Scheduled`` event, so each pod
costs the API server two durable writes. The server is pinned to CPU 1 and this process (the scheduler
and the pod creators) to CPU 0, as in the API server benchmark. Absolute figures depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from vplane.controllers.client import KubeClient  # noqa: E402
from vplane.controllers.scheduler import Scheduler, SchedulerSettings  # noqa: E402
from vplane.controllers.scheduler.scheduler import NODES, PODS  # noqa: E402
from vplane.support import logging as vlogging  # noqa: E402

CPU_SERVER = "1"
CPU_BENCH = 0


def start_server(data: Path) -> tuple[subprocess.Popen[bytes], Path]:
    ready = data / "ready"
    cmd = [sys.executable, "-m", "vplane.cli.main", "apiserver", "--data-dir", str(data / "api")]
    cmd += ["--listen", "127.0.0.1:0", "--ready-file", str(ready)]
    if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        cmd = ["taskset", "-c", CPU_SERVER, *cmd]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "VPLANE_LOG_LEVEL": "warning"}
    log = (data / "apiserver.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the API server did not start; see {data / 'apiserver.log'}")
        time.sleep(0.05)
    return proc, data / "api" / "kubeconfig.yaml"


def node(name: str) -> dict[str, object]:
    allocatable = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"capacity": allocatable, "allocatable": allocatable},
    }


def pod(name: str) -> dict[str, object]:
    container = {
        "name": "app",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
    }
    return {"metadata": {"name": name, "namespace": "default"}, "spec": {"containers": [container]}}


async def create_pods(client: KubeClient, count: int, prefix: str) -> None:
    names = iter(range(count))

    async def creator() -> None:
        for i in names:
            await client.create(PODS, pod(f"{prefix}-{i}"), namespace="default")

    async with asyncio.TaskGroup() as tasks:
        for _ in range(32):
            tasks.create_task(creator())


async def until(check: Callable[[], bool], within: float) -> None:
    try:
        async with asyncio.timeout(within):
            while True:
                if check():
                    return
                await asyncio.sleep(0.002)
    except TimeoutError:
        raise SystemExit(f"not done within {within}s") from None


async def spread_of(client: KubeClient, count: int) -> tuple[int, int]:
    pods = (await client.list(PODS, namespace="default")).items
    bound = Counter(p["spec"].get("nodeName") for p in pods if p["spec"].get("nodeName"))
    if sum(bound.values()) != count:
        raise SystemExit(f"{sum(bound.values())} of {count} pods are bound")
    return min(bound.values()), max(bound.values())


async def scenario(
    kubeconfig: Path, nodes: int, pods: int, stream: bool, bind_concurrency: int, server_pid: int
) -> dict[str, float]:
    client = KubeClient.from_kubeconfig(kubeconfig, field_manager="bench", timeout=60)
    for i in range(nodes):
        await client.create(NODES, node(f"node-{i}"))
    if not stream:
        await create_pods(client, pods, "backlog")
    scheduler = Scheduler(client, SchedulerSettings(bind_concurrency=bind_concurrency))
    task = asyncio.create_task(scheduler.run())
    try:
        await until(lambda: scheduler.pods.has_synced and scheduler.nodes.has_synced, 60)
        cpu0 = _own_cpu()
        server0 = _process_cpu(server_pid)
        start = time.perf_counter()
        if stream:
            await create_pods(client, pods, "stream")
        await until(lambda: scheduler.scheduled >= pods, 600)
        elapsed = time.perf_counter() - start
        cpu = _own_cpu() - cpu0
        server_cpu = _process_cpu(server_pid) - server0
        low, high = await spread_of(client, pods)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.close()
    return {
        "seconds": elapsed,
        "pods_per_second": pods / elapsed,
        "cpu_seconds": cpu,
        "server_cpu_seconds": server_cpu,
        "attempts": float(scheduler.attempts),
        "per_node_min": float(low),
        "per_node_max": float(high),
    }


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _process_cpu(pid: int) -> float:
    """User plus system CPU seconds of another process (Linux ``/proc``; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_once(nodes: int, pods: int, stream: bool, bind_concurrency: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="vplane-bench-scheduler-") as tmp:
        data = Path(tmp)
        (data / "api").mkdir(mode=0o700)
        proc, kubeconfig = start_server(data)
        try:
            return asyncio.run(scenario(kubeconfig, nodes, pods, stream, bind_concurrency, proc.pid))
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=500)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--bind-concurrency", type=int, default=SchedulerSettings().bind_concurrency)
    args = parser.parse_args()
    vlogging.configure("warning")
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {CPU_BENCH})
    print(
        f"{args.pods} pods on {args.nodes} nodes, bind concurrency {args.bind_concurrency}, "
        f"{args.runs} run(s) per scenario (median shown)"
    )
    header = f"{'scenario':<10} {'pods/s':>8} {'seconds':>8} {'scheduler CPU s':>16} {'server CPU s':>13}"
    print(f"{header} {'attempts':>9} {'per node':>9}")
    for name, stream in (("backlog", False), ("stream", True)):
        results = [run_once(args.nodes, args.pods, stream, args.bind_concurrency) for _ in range(args.runs)]
        median = {k: statistics.median(r[k] for r in results) for k in results[0]}
        spread = f"{int(median['per_node_min'])}-{int(median['per_node_max'])}"
        print(
            f"{name:<10} {median['pods_per_second']:>8.1f} {median['seconds']:>8.2f} "
            f"{median['cpu_seconds']:>16.2f} {median['server_cpu_seconds']:>13.2f} "
            f"{int(median['attempts']):>9} {spread:>9}"
        )


if __name__ == "__main__":
    main()
