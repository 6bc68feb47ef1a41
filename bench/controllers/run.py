"""Benchmark the controller manager: how fast workloads act, and what the controllers cost.

    .venv/bin/python bench/controllers/run.py [--scale 500] [--rollout 100] [--watched 10000]
        [--statefulset 100] [--daemonset-nodes 100]

Runs ``vplane apiserver`` (without its built-in controller manager) and ``vplane controller-manager`` as
two processes, and plays the kubelet itself: every pod it sees created gets a status with an IP and
``Ready=True`` through ``pods/status``, as a node would report once containers run (no runtime exists yet).

1. scale a Deployment from 0 to ``--scale`` replicas: time until every pod exists, and until the
   Deployment reports them all available;
2. roll a ``--rollout``-replica Deployment to a new template (default maxSurge/maxUnavailable 25%): time
   until the rollout is complete (``kubectl rollout status`` would return);
3. a Parallel StatefulSet of ``--statefulset`` replicas: time until all are ready, then until a rolling update
   (one pod at a time, highest ordinal first) is complete; a DaemonSet on ``--daemonset-nodes`` Node objects:
   time until every node has an available pod, then until a rolling update with ``maxUnavailable: 10%`` is
   complete;
4. with ``--watched`` pods (spread over namespaces, a Service per 100 of them) in the store: a fresh
   controller manager's time to list and sync, its memory (RSS) once synced, and its CPU when idle.

The controller manager's CPU time (user + system, from /proc) is reported for each phase.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from vplane.controllers.client import KubeClient  # noqa: E402
from vplane.controllers.kcm.daemonsetutil import DAEMONSETS, NODES  # noqa: E402
from vplane.controllers.kcm.resources import DEPLOYMENTS, NAMESPACES, PODS, SERVICES  # noqa: E402
from vplane.controllers.kcm.statefulsetutil import STATEFULSETS  # noqa: E402
from vplane.kube.errors import StatusError  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def now_text() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Proc:
    """A vplane command in a subprocess, with its CPU time and memory read from /proc."""

    def __init__(self, args: list[str], ready: Path, log: Path) -> None:
        self.ready = ready
        self.log = log.open("wb")
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "VPLANE_LOG_LEVEL": "warning"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "vplane.cli.main", *args, "--ready-file", str(ready)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
        )

    def wait_ready(self, timeout: float = 120.0) -> float:
        start = time.monotonic()
        while not self.ready.exists():
            if self.proc.poll() is not None:
                raise SystemExit(f"process exited: see {self.log.name}")
            if time.monotonic() - start > timeout:
                raise SystemExit("process did not become ready")
            time.sleep(0.02)
        return time.monotonic() - start

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS

    def memory_mib(self) -> tuple[float, float]:
        """(RSS now, peak RSS) in MiB."""
        values: dict[str, float] = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) / 1024
        return values["VmRSS"], values["VmHWM"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class Kubelet:
    """Reports every new pod Running and Ready with an IP (the bench's stand-in for nodes)."""

    def __init__(self, client: KubeClient, concurrency: int = 32) -> None:
        self.client = client
        self.limit = asyncio.Semaphore(concurrency)
        self.marked = 0
        self._next_ip = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def _ip(self) -> str:
        self._next_ip += 1
        return f"10.{self._next_ip // 65536 % 256}.{self._next_ip // 256 % 256}.{self._next_ip % 256}"

    async def run(self, namespace: str) -> None:
        async for event in self.client.watch(PODS, namespace=namespace):
            if event.type != "ADDED":
                continue
            task = asyncio.create_task(self._ready(event.object))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _ready(self, pod: dict[str, Any]) -> None:
        ip = self._ip()
        status = {
            "phase": "Running",
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now_text()}],
        }
        meta = pod["metadata"]
        async with self.limit:
            with contextlib.suppress(StatusError):  # deleted meanwhile
                await self.client.patch(
                    PODS, meta["name"], {"status": status}, namespace=meta["namespace"], subresource="status"
                )
                self.marked += 1


def deployment(name: str, replicas: int, image: str = "nginx:1.27") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": image}]},
            },
        },
    }


async def until(check: Callable[[], Awaitable[bool]], every: float = 0.05) -> float:
    start = time.monotonic()
    async with asyncio.timeout(600):
        while not await check():  # noqa: ASYNC110 - the state is in another process
            await asyncio.sleep(every)
    return time.monotonic() - start


def complete(d: dict[str, Any], replicas: int) -> bool:
    status = d.get("status") or {}
    return (
        status.get("observedGeneration", 0) >= d["metadata"].get("generation", 0)
        and status.get("updatedReplicas") == replicas
        and status.get("replicas") == replicas
        and status.get("availableReplicas") == replicas
    )


async def scale_and_roll(client: KubeClient, kcm: Proc, scale: int, rollout: int) -> dict[str, float]:
    results: dict[str, float] = {}
    await client.create(NAMESPACES, {"metadata": {"name": "bench"}})
    kubelet = Kubelet(client)
    node = asyncio.create_task(kubelet.run("bench"))
    try:
        await client.create(DEPLOYMENTS, deployment("scale", 0), namespace="bench")
        await asyncio.sleep(1)
        cpu0 = kcm.cpu_seconds()
        start = time.monotonic()
        await client.patch(DEPLOYMENTS, "scale", {"spec": {"replicas": scale}}, namespace="bench")

        async def pods_exist() -> bool:
            listed = await client.list(PODS, namespace="bench", label_selector={"app": "scale"})
            return len(listed.items) >= scale

        async def scaled() -> bool:
            return complete(await client.get(DEPLOYMENTS, "scale", namespace="bench"), scale)

        await until(pods_exist, every=0.2)
        results["scale_pods_created_s"] = time.monotonic() - start
        await until(scaled, every=0.1)
        results["scale_available_s"] = time.monotonic() - start
        results["scale_kcm_cpu_s"] = kcm.cpu_seconds() - cpu0
        await client.patch(DEPLOYMENTS, "scale", {"spec": {"replicas": 0}}, namespace="bench")

        async def emptied() -> bool:
            return not (await client.list(PODS, namespace="bench", label_selector={"app": "scale"})).items

        await until(emptied, every=0.2)

        await client.create(DEPLOYMENTS, deployment("roll", rollout), namespace="bench")

        async def rolled_out() -> bool:
            return complete(await client.get(DEPLOYMENTS, "roll", namespace="bench"), rollout)

        await until(rolled_out, every=0.1)
        await asyncio.sleep(1)
        cpu0 = kcm.cpu_seconds()
        start = time.monotonic()
        await client.patch(
            DEPLOYMENTS,
            "roll",
            {"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:1.28"}]}}}},
            namespace="bench",
            patch_type="strategic",
        )
        await until(rolled_out, every=0.1)
        results["rollout_s"] = time.monotonic() - start
        results["rollout_kcm_cpu_s"] = kcm.cpu_seconds() - cpu0
        results["pods_marked_ready"] = float(kubelet.marked)
    finally:
        node.cancel()
        with contextlib.suppress(BaseException):
            await node
    return results


def workload(name: str, image: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": image}]},
            },
            **spec,
        },
    }


async def statefulsets_and_daemonsets(
    client: KubeClient, kcm: Proc, replicas: int, nodes: int
) -> dict[str, float]:
    """Issue 9 item 2's controllers: a Parallel StatefulSet and a DaemonSet, created and rolled."""
    results: dict[str, float] = {}
    await client.create(NAMESPACES, {"metadata": {"name": "apps"}})
    kubelet = Kubelet(client)
    node = asyncio.create_task(kubelet.run("apps"))
    image = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:1.28"}]}}}}
    try:

        async def sts_done() -> bool:
            s = await client.get(STATEFULSETS, "db", namespace="apps")
            status = s.get("status") or {}
            return (
                status.get("observedGeneration", 0) >= s["metadata"].get("generation", 0)
                and status.get("readyReplicas") == replicas
                and status.get("updatedReplicas") == replicas
                and status.get("currentRevision") == status.get("updateRevision")
            )

        cpu0 = kcm.cpu_seconds()
        start = time.monotonic()
        await client.create(
            STATEFULSETS,
            workload("db", "nginx:1.27", replicas=replicas, serviceName="db", podManagementPolicy="Parallel"),
            namespace="apps",
        )
        await until(sts_done, every=0.1)
        results["sts_ready_s"] = time.monotonic() - start
        results["sts_ready_kcm_cpu_s"] = kcm.cpu_seconds() - cpu0
        cpu0 = kcm.cpu_seconds()
        start = time.monotonic()
        await client.patch(STATEFULSETS, "db", image, namespace="apps", patch_type="strategic")
        await until(sts_done, every=0.1)
        results["sts_rollout_s"] = time.monotonic() - start
        results["sts_rollout_kcm_cpu_s"] = kcm.cpu_seconds() - cpu0

        limit = asyncio.Semaphore(32)

        async def add_node(n: int) -> None:
            async with limit:
                await client.create(
                    NODES, {"metadata": {"name": f"bench-node-{n}", "labels": {"bench": "1"}}}
                )

        await asyncio.gather(*(add_node(n) for n in range(nodes)))

        async def ds_done() -> bool:
            d = await client.get(DAEMONSETS, "agent", namespace="apps")
            status = d.get("status") or {}
            return (
                status.get("observedGeneration", 0) >= d["metadata"].get("generation", 0)
                and status.get("desiredNumberScheduled") == nodes
                and status.get("updatedNumberScheduled") == nodes
                and status.get("numberAvailable") == nodes
            )

        cpu0 = kcm.cpu_seconds()
        start = time.monotonic()
        strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%", "maxSurge": 0}}
        await client.create(
            DAEMONSETS, workload("agent", "nginx:1.27", updateStrategy=strategy), namespace="apps"
        )
        await until(ds_done, every=0.1)
        results["ds_available_s"] = time.monotonic() - start
        results["ds_available_kcm_cpu_s"] = kcm.cpu_seconds() - cpu0
        cpu0 = kcm.cpu_seconds()
        start = time.monotonic()
        await client.patch(DAEMONSETS, "agent", image, namespace="apps", patch_type="strategic")
        await until(ds_done, every=0.1)
        results["ds_rollout_s"] = time.monotonic() - start
        results["ds_rollout_kcm_cpu_s"] = kcm.cpu_seconds() - cpu0
    finally:
        node.cancel()
        with contextlib.suppress(BaseException):
            await node
    return results


async def fill(client: KubeClient, watched: int, per_namespace: int = 1000) -> None:
    """``watched`` bare pods with IPs, in namespaces of ``per_namespace``, and a Service per 100 pods."""
    limit = asyncio.Semaphore(64)

    async def pod(namespace: str, n: int) -> None:
        body = {
            "metadata": {"name": f"p-{n}", "labels": {"group": f"g{n // 100}"}},
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "image": "registry.k8s.io/pause:3.10",
                        "ports": [{"name": "http", "containerPort": 8080}],
                    }
                ]
            },
        }
        async with limit:
            await client.create(PODS, body, namespace=namespace)

    for start in range(0, watched, per_namespace):
        namespace = f"bulk-{start // per_namespace}"
        await client.create(NAMESPACES, {"metadata": {"name": namespace}})
        count = min(per_namespace, watched - start)
        await asyncio.gather(*(pod(namespace, start + n) for n in range(count)))
        for group in range(start // 100, (start + count + 99) // 100):
            await client.create(
                SERVICES,
                {
                    "metadata": {"name": f"g{group}"},
                    "spec": {
                        "selector": {"group": f"g{group}"},
                        "ports": [{"port": 80, "targetPort": "http"}],
                    },
                },
                namespace=namespace,
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", type=int, default=500, help="replicas of the 0 -> N scale-up")
    parser.add_argument("--rollout", type=int, default=100, help="replicas of the Deployment rolled out")
    parser.add_argument("--watched", type=int, default=10_000, help="pods in the store for the cost phase")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="how long idle CPU is sampled")
    parser.add_argument("--statefulset", type=int, default=100, help="replicas of the StatefulSet (0: skip)")
    parser.add_argument("--daemonset-nodes", type=int, default=100, help="nodes of the DaemonSet (0: skip)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="vplane-bench-kcm-"))
    work.chmod(0o700)
    api = Proc(
        [
            "apiserver",
            "--data-dir",
            str(work / "api"),
            "--listen",
            "127.0.0.1:0",
            "--set",
            "controller_manager=false",
        ],
        work / "api.ready",
        work / "api.log",
    )
    api.wait_ready()
    kubeconfig = work / "api" / "kubeconfig.yaml"
    kcm = Proc(["controller-manager", "--kubeconfig", str(kubeconfig)], work / "kcm.ready", work / "kcm.log")
    results: dict[str, float] = {}
    try:
        results["kcm_start_s"] = kcm.wait_ready()

        async def phases() -> None:
            client = KubeClient.from_kubeconfig(kubeconfig, field_manager="bench", timeout=60)
            try:
                results.update(await scale_and_roll(client, kcm, args.scale, args.rollout))
                if args.statefulset and args.daemonset_nodes:
                    results.update(
                        await statefulsets_and_daemonsets(client, kcm, args.statefulset, args.daemonset_nodes)
                    )
                fill_start = time.monotonic()
                await fill(client, args.watched)
                results["fill_s"] = time.monotonic() - fill_start
            finally:
                await client.close()

        asyncio.run(phases())
        results["kcm_rss_after_workloads_mib"], _ = kcm.memory_mib()
        kcm.stop()
        fresh = Proc(
            ["controller-manager", "--kubeconfig", str(kubeconfig)], work / "kcm2.ready", work / "kcm2.log"
        )
        try:
            results["watched_sync_s"] = fresh.wait_ready(timeout=600)
            results["watched_sync_cpu_s"] = fresh.cpu_seconds()
            time.sleep(2)  # let the first round of syncs (endpoints of every Service) finish
            cpu0 = fresh.cpu_seconds()
            time.sleep(args.idle_seconds)
            results["watched_idle_cpu_percent"] = 100 * (fresh.cpu_seconds() - cpu0) / args.idle_seconds
            results["watched_rss_mib"], results["watched_peak_rss_mib"] = fresh.memory_mib()
        finally:
            fresh.stop()
    finally:
        kcm.stop()
        api.stop()
    print(
        f"controller manager benchmark (scale 0->{args.scale}, rollout of {args.rollout}, {args.watched} pods watched)"
    )
    for key, value in results.items():
        print(f"  {key:32} {value:10.2f}")
    print(f"  logs and data in {work}")


if __name__ == "__main__":
    main()
