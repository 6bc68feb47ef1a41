"""Benchmark the node runtime: pod start latency, ``kubectl logs`` throughput, cost of an idle pod.

    .venv/bin/python bench/runtime/run.py [--pods 100] [--singles 10] [--log-mb 50] [--idle-seconds 20]

Two processes as a real node has them: ``vplane apiserver`` and ``vplane kubelet`` (so the runtime's own
CPU and memory can be read apart from the API server's), plus this process as the client (lightkube for
the pods, kubectl for the logs). Measured:

- pod start latency, create to Ready (the pod's ``Ready`` condition seen by a watch): ``--singles`` pods
  one after another, then ``--pods`` pods created at once (each pod's latency, and the time until all
  are Ready). Pods are bound with ``spec.nodeName`` (no scheduler) and run busybox's ``sleep``.
- ``kubectl logs`` throughput: a pod writes ``--log-mb`` MB of 100-byte lines; ``kubectl logs -f`` reads
  them as they are written (API server proxying the kubelet), then ``kubectl logs`` reads the finished log.
- an idle pod's cost: the runtime's RSS with no pods and with ``--pods`` idle pods (the difference per
  pod), its CPU over ``--idle-seconds`` with them, and the shims' memory (one small process per container,
  proportional set size).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from vplane.controllers.client import KubeClient, Resource
from vplane.support import tls

PODS = Resource("v1", "Pod", "pods", namespaced=True)
NODE = "bench-node"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def start(cmd: list[str], ready: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{' '.join(cmd[:4])} did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)
    return proc


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def pss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def shim_pids(node_dir: Path) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (
                    b"shim.py" in (entry / "cmdline").read_bytes()
                    and str(node_dir).encode() in (entry / "cmdline").read_bytes()
                ):
                    out.append(int(entry.name))
    return out


def pod(name: str, command: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"bench": "yes"}},
        "spec": {
            "nodeName": NODE,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sh", "-c", command]}],
        },
    }


def is_ready(obj: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


async def start_pods(client: KubeClient, names: list[str]) -> tuple[list[float], float]:
    """Create the pods at once; each one's create-to-Ready latency, and the time until all are Ready."""
    created: dict[str, float] = {}
    latency: dict[str, float] = {}
    listed = await client.list(PODS, namespace="default")
    begin = time.monotonic()

    async def watch() -> None:
        async for event in client.watch(PODS, namespace="default", resource_version=listed.resource_version):
            name = event.object["metadata"]["name"]
            if name in created and name not in latency and is_ready(event.object):
                latency[name] = time.monotonic() - created[name]
                if len(latency) == len(names):
                    return

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(0.1)

    async def create(name: str) -> None:
        created[name] = time.monotonic()
        await client.create(PODS, pod(name, "sleep 100000"))

    await asyncio.gather(*(create(n) for n in names))
    await asyncio.wait_for(watcher, 600)
    return [latency[n] for n in names], time.monotonic() - begin


async def delete_all(client: KubeClient) -> None:
    for item in (await client.list(PODS, namespace="default")).items:
        with contextlib.suppress(Exception):
            await client.delete(PODS, item["metadata"]["name"], namespace="default")
    for _ in range(600):
        if not (await client.list(PODS, namespace="default")).items:
            return
        await asyncio.sleep(0.2)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def bench(
    args: argparse.Namespace, kubeconfig: Path, kubelet_pid: int, node_dir: Path, kubectl: str
) -> dict[str, Any]:
    client = KubeClient.from_kubeconfig(kubeconfig, field_manager="bench")
    results: dict[str, Any] = {}
    try:
        await asyncio.sleep(1)
        idle_rss = rss_kb(kubelet_pid)
        singles = []
        for i in range(args.singles):
            lat, _ = await start_pods(client, [f"single-{i}"])
            singles += lat
        results["single"] = singles
        await delete_all(client)
        names = [f"many-{i}" for i in range(args.pods)]
        many, total = await start_pods(client, names)
        results["many"] = many
        results["many_total"] = total
        await asyncio.sleep(3)
        loaded_rss = rss_kb(kubelet_pid)
        cpu_before = cpu_seconds(kubelet_pid)
        await asyncio.sleep(args.idle_seconds)
        cpu_after = cpu_seconds(kubelet_pid)
        shims = shim_pids(node_dir)
        results["rss_idle_kb"] = idle_rss
        results["rss_loaded_kb"] = loaded_rss
        results["cpu_percent"] = 100 * (cpu_after - cpu_before) / args.idle_seconds
        results["shim_pss_kb"] = statistics.mean(pss_kb(p) for p in shims) if shims else 0
        results["shim_rss_kb"] = statistics.mean(rss_kb(p) for p in shims) if shims else 0
        results["shims"] = len(shims)
        await delete_all(client)
        # logs
        lines = args.log_mb * 10_000
        writer = pod("writer", f"yes '{'x' * 99}' | head -n {lines}")
        writer["spec"]["restartPolicy"] = "Never"
        await client.create(PODS, writer)
        cmd = [kubectl, "--kubeconfig", str(kubeconfig), "logs", "-f", "writer"]
        for _ in range(200):
            current = await client.get(PODS, "writer", namespace="default")
            states = (current.get("status") or {}).get("containerStatuses") or [{}]
            if "waiting" not in (states[0].get("state") or {"waiting": 1}):
                break
            await asyncio.sleep(0.05)
        begin = time.monotonic()
        proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE)
        assert proc.stdout is not None
        received = 0
        while chunk := await proc.stdout.read(1 << 20):
            received += len(chunk)
        await proc.wait()
        results["follow_mb_s"] = received / 1e6 / (time.monotonic() - begin)
        results["follow_bytes"] = received
        begin = time.monotonic()
        done = await asyncio.to_thread(
            subprocess.run,
            [kubectl, "--kubeconfig", str(kubeconfig), "logs", "writer"],
            capture_output=True,
            check=True,
        )
        results["read_mb_s"] = len(done.stdout) / 1e6 / (time.monotonic() - begin)
        results["read_bytes"] = len(done.stdout)
        await delete_all(client)
    finally:
        await client.close()
    return results


def report(r: dict[str, Any], args: argparse.Namespace) -> str:
    single, many = r["single"], r["many"]
    per_pod_kb = (r["rss_loaded_kb"] - r["rss_idle_kb"]) / args.pods
    return "\n".join(
        [
            "| measurement | result |",
            "|---|---|",
            f"| pod start, create → Ready, one at a time ({len(single)} pods) | p50 {statistics.median(single) * 1000:.0f} ms, max {max(single) * 1000:.0f} ms |",
            f"| pod start, {args.pods} pods created at once | p50 {statistics.median(many):.2f} s, p95 {pct(many, 0.95):.2f} s; all Ready after {r['many_total']:.2f} s |",
            f"| `kubectl logs -f` while the pod writes {args.log_mb} MB | {r['follow_mb_s']:.1f} MB/s ({r['follow_bytes'] / 1e6:.0f} MB received) |",
            f"| `kubectl logs` of the finished {args.log_mb} MB log | {r['read_mb_s']:.1f} MB/s |",
            f"| runtime RSS, no pods → {args.pods} idle pods | {r['rss_idle_kb'] / 1024:.0f} MiB → {r['rss_loaded_kb'] / 1024:.0f} MiB ({per_pod_kb:.0f} KiB per pod) |",
            f"| runtime CPU with {args.pods} idle pods | {r['cpu_percent']:.1f}% of a core ({r['cpu_percent'] / args.pods * 1000:.1f} m-core per pod) |",
            f"| a container's shim (keeper process), each of {r['shims']} | PSS {r['shim_pss_kb'] / 1024:.1f} MiB, RSS {r['shim_rss_kb'] / 1024:.1f} MiB |",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--singles", type=int, default=10)
    parser.add_argument("--log-mb", type=int, default=50)
    parser.add_argument("--idle-seconds", type=float, default=20)
    parser.add_argument(
        "--kubectl", default=str(Path(__file__).resolve().parents[2] / ".tools" / "bin" / "kubectl")
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vplane-bench-runtime-") as tmp:
        root = Path(tmp)
        api_dir, node_dir = root / "api", root / "node"
        api_dir.mkdir(mode=0o700)
        api = start(
            [
                sys.executable,
                "-m",
                "vplane.cli.main",
                "apiserver",
                "--data-dir",
                str(api_dir),
                "--listen",
                "127.0.0.1:0",
                "--ready-file",
                str(root / "api.ready"),
                "--set",
                "durable=false",
            ],
            root / "api.ready",
            root / "api.log",
        )
        kubelet = None
        try:
            kubeconfig = api_dir / "kubeconfig.yaml"
            node_dir.mkdir(mode=0o700)
            # The kubelet's serving certificate from the cluster's CA, as `vplane cluster start` issues it.
            ca = tls.CertPair.read(api_dir / "pki" / "ca.crt", api_dir / "pki" / "ca.key")
            cert, key = root / "kubelet.crt", root / "kubelet.key"
            tls.issue_serving(ca, ["127.0.0.1", NODE]).write(cert, key)
            kubelet = start(
                [
                    sys.executable,
                    "-m",
                    "vplane.cli.main",
                    "kubelet",
                    "--kubeconfig",
                    str(kubeconfig),
                    "--data-dir",
                    str(node_dir),
                    "--ready-file",
                    str(root / "node.ready"),
                    "--set",
                    f"node_name={NODE}",
                    "--set",
                    f"tls_cert_file={cert}",
                    "--set",
                    f"tls_key_file={key}",
                ],
                root / "node.ready",
                root / "node.log",
            )
            results = asyncio.run(bench(args, kubeconfig, kubelet.pid, node_dir, args.kubectl))
        finally:
            for proc in (kubelet, api):
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    try:
                        proc.wait(30)
                    except subprocess.TimeoutExpired:
                        proc.kill()
    print(report(results, args))
    print(json.dumps({k: v for k, v in results.items() if not isinstance(v, list)}, indent=1))


if __name__ == "__main__":
    main()
