"""Benchmark the resource proxy against the direct path to the target, measured in the same run.

    .venv/bin/python bench/proxy/run.py [--duration 5] [--rounds 3] [--out docs/benchmarks.md]

A real platform (`vplane platform start`) runs two tenant clusters: `target` stores
`myresources.example.com/v1`; `client` proxies that group/version to it. Each measurement window on the
proxied path (client API server -> aggregator -> resource proxy -> mesh -> target) sits next to the same
window on the direct path (the target's own API server), both with the platform admin key, and the ratio
of each round is reported as the median and range over rounds:

- GET of one object, LIST of 1,000 objects, durable create (wrk, 16 connections);
- watch events: 2,000 objects written on the target while one watch on each path receives them, as
  events per second and the per-event lag;
- fail-fast: the latency of the 503s once every target peer is quarantined (the target's replica is
  stopped with SIGSTOP; tenants keep idle target connections only 1 s here, so requests dial the stopped
  replica and quarantine it, rather than hang on a kept-alive connection until the request cap);
- recovery: the time from a target replica restart (SIGKILL, restarted by the platform) to the first
  successful proxied request.

Absolute numbers depend on the machine and whatever else runs on it; the ratios are the point.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from common import lua, wrk  # noqa: E402

BEGIN, END = "<!-- proxy:begin -->", "<!-- proxy:end -->"
KEEPALIVE_SECONDS = 1.0
PROXY_503 = b"is unavailable"
"""In the proxy's own 503s; the aggregator's (an APIService it found unavailable) read ``service unavailable``."""
GV = "example.com/v1"
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "myresources.example.com"},
    "spec": {
        "group": "example.com",
        "names": {"kind": "MyResource", "plural": "myresources", "singular": "myresource"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                        },
                    }
                },
            }
        ],
    },
}
CLIENT_VALUES = f"""experimental:
  proxy:
    customResources:
      myresources.{GV}:
        enabled: true
        targetVirtualCluster:
          name: target
"""
TARGET_RBAC = """apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: proxy-client}
rules:
- {apiGroups: [example.com], resources: ["*"], verbs: ["*"]}
- {apiGroups: [""], resources: [namespaces], verbs: [get, list, watch, create]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: proxy-client}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: proxy-client}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "loft:vcluster:p-default:client"}]
"""
PLATFORM_RBAC = """apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: proxy-target, namespace: p-default}
rules: [{apiGroups: [management.loft.sh], resources: [virtualclusterinstances], resourceNames: [target], verbs: [use]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: proxy-target, namespace: p-default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: proxy-target}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "loft:vcluster:p-default:client"}]
"""
CREATE_LUA = """
local n = 0
request = function()
  n = n + 1
  local body = '{"apiVersion":"example.com/v1","kind":"MyResource","metadata":{"name":"c-PREFIX-' .. n .. '"},"spec":{"n":' .. n .. '}}'
  return wrk.format("POST", "PATH", {["Content-Type"]="application/json", ["Authorization"]="Bearer TOKEN"}, body)
end
"""


def kubectl() -> str:
    for candidate in (ROOT / ".tools" / "bin" / "kubectl", ROOT / ".venv" / "bin" / "kubectl"):
        if candidate.exists():
            return str(candidate)
    raise SystemExit("kubectl not found: run scripts/bootstrap")


class Platform:
    def __init__(self, data: Path) -> None:
        self.data = data
        ready = data.parent / "platform.ready"
        self.log = (data.parent / "platform.log").open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "vplane.cli.main",
                "platform",
                "start",
                "--data-dir",
                str(data),
                "--listen",
                "127.0.0.1:0",
                "--ready-file",
                str(ready),
                # Idle connections to the target close after a second: once the target is stopped, the
                # fail-fast phase's requests dial (and fail, and quarantine it) instead of waiting on a
                # kept-alive connection to the stopped process until the 60 s request cap.
                "--set",
                f"tenant_proxy={json.dumps({'keepalive_seconds': KEEPALIVE_SECONDS})}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        deadline = time.monotonic() + 60
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the platform did not start; see {data.parent / 'platform.log'}")
            time.sleep(0.1)
        self.kubeconfig = data / "management.yaml"
        config = yaml.safe_load(self.kubeconfig.read_text())
        self.token: str = config["users"][0]["user"]["token"]

    def k(self, *args: str, stdin: str | None = None, kubeconfig: Path | None = None) -> str:
        cmd = [kubectl(), "--kubeconfig", str(kubeconfig or self.kubeconfig), *args]
        return subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=True).stdout

    def tenant_kubeconfig(self, name: str, url: str) -> Path:
        config = yaml.safe_load(self.kubeconfig.read_text())
        config["clusters"][0]["cluster"]["server"] = url
        config["clusters"][0]["cluster"].pop("certificate-authority-data", None)
        config["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True
        path = self.data.parent / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    def tenant_url(self, name: str) -> str:
        deadline = time.monotonic() + 120
        while True:
            out = self.k("get", "virtualclusterinstance", name, "-n", "p-default", "-o", "json")
            status = json.loads(out).get("status") or {}
            if status.get("phase") == "Ready" and status.get("endpoints"):
                return str(status["endpoints"][0])
            if time.monotonic() > deadline:
                raise SystemExit(f"tenant {name} did not become ready: {status}")
            time.sleep(0.5)

    def replica_pid(self, name: str) -> int:
        return int((self.data / "tenants" / "p-default" / name / "replica-0.pid").read_text())

    def stop(self) -> None:
        for name in ("client", "target"):
            try:
                os.kill(self.replica_pid(name), signal.SIGCONT)
            except (OSError, ValueError):
                pass
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def setup(platform: Platform) -> tuple[str, str, Path, Path]:
    p = platform
    p.k(
        "apply",
        "-f",
        "-",
        stdin="apiVersion: management.loft.sh/v1\nkind: Project\nmetadata: {name: default}\n",
    )
    vci = {
        "apiVersion": "management.loft.sh/v1",
        "kind": "VirtualClusterInstance",
        "metadata": {"name": "target", "namespace": "p-default"},
        "spec": {"template": {"helmRelease": {"values": ""}}, "networkPeer": True},
    }
    deadline = time.monotonic() + 30
    while True:
        try:
            p.k("apply", "-f", "-", stdin=json.dumps(vci))
            break
        except subprocess.CalledProcessError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    target_url = p.tenant_url("target")
    target_k = p.tenant_kubeconfig("target", target_url)
    p.k("apply", "-f", "-", stdin=json.dumps(CRD), kubeconfig=target_k)
    p.k("wait", "--for=condition=Established", "crd/myresources.example.com", kubeconfig=target_k)
    p.k("apply", "-f", "-", stdin=TARGET_RBAC, kubeconfig=target_k)
    p.k("apply", "-f", "-", stdin=PLATFORM_RBAC)
    vci["metadata"]["name"] = "client"
    vci["spec"]["template"]["helmRelease"]["values"] = CLIENT_VALUES
    p.k("apply", "-f", "-", stdin=json.dumps(vci))
    client_url = p.tenant_url("client")
    client_k = p.tenant_kubeconfig("client", client_url)
    deadline = time.monotonic() + 60
    while True:
        out = p.k(
            "get",
            "apiservice",
            "v1.example.com",
            "-o",
            "jsonpath={.status.conditions[0].status}",
            kubeconfig=client_k,
        )
        if out == "True":
            break
        if time.monotonic() > deadline:
            raise SystemExit("the proxied APIService did not become available")
        time.sleep(0.5)
    for ns in ("bench", "bench-list", "bench-proxied"):
        p.k("create", "namespace", ns, kubeconfig=client_k)
    # The direct creates write straight to the target, which has only the namespaces the proxy mirrored:
    # without this one every direct create was a 404 and the create ratio compared against errors.
    p.k("create", "namespace", "bench-direct", kubeconfig=target_k)
    return target_url, client_url, target_k, client_k


def insecure() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def obj(name: str, n: int = 0) -> dict[str, Any]:
    return {"apiVersion": GV, "kind": "MyResource", "metadata": {"name": name}, "spec": {"n": n}}


async def populate(url: str, token: str, namespace: str, count: int) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    path = f"{url}/apis/{GV}/namespaces/{namespace}/myresources"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=insecure())) as session:
        sem = asyncio.Semaphore(16)

        async def one(i: int) -> None:
            async with sem, session.post(path, json=obj(f"o-{i}", i), headers=headers) as resp:
                if resp.status != 201:
                    raise SystemExit(f"populate {path}: {resp.status} {await resp.text()}")

        await asyncio.gather(*(one(i) for i in range(count)))


async def watch_race(
    client_url: str, target_url: str, token: str, events: int
) -> dict[str, dict[str, float]]:
    """One watch per path; ``events`` objects created on the target; per path the event rate and lag."""
    headers = {"Authorization": f"Bearer {token}"}
    namespace = "bench"
    created: dict[str, float] = {}
    results: dict[str, dict[str, float]] = {}
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=insecure(), limit=0), timeout=aiohttp.ClientTimeout(total=None)
    ) as session:
        listed = await (
            await session.get(f"{target_url}/apis/{GV}/namespaces/{namespace}/myresources", headers=headers)
        ).json()
        rv = listed["metadata"]["resourceVersion"]

        async def watcher(label: str, url: str) -> None:
            lags: list[float] = []
            first = last = 0.0
            async with session.get(
                f"{url}/apis/{GV}/namespaces/{namespace}/myresources?watch=1&resourceVersion={rv}",
                headers=headers,
            ) as resp:
                async for line in resp.content:
                    event = json.loads(line)
                    name = event["object"]["metadata"]["name"]
                    if not name.startswith("w-"):
                        continue
                    now = time.perf_counter()
                    first = first or now
                    last = now
                    lags.append(now - created.get(name, now))
                    if len(lags) >= events:
                        break
            lags.sort()
            results[label] = {
                "events": float(len(lags)),
                "rate": (len(lags) - 1) / (last - first) if last > first else float("nan"),
                "lag_p50_ms": lags[len(lags) // 2] * 1000,
                "lag_p99_ms": lags[int(len(lags) * 0.99) - 1] * 1000,
            }

        watchers = [
            asyncio.create_task(watcher("direct", target_url)),
            asyncio.create_task(watcher("proxied", client_url)),
        ]
        await asyncio.sleep(1.0)
        sem = asyncio.Semaphore(32)
        path = f"{target_url}/apis/{GV}/namespaces/{namespace}/myresources"
        owner = {"vcluster.com/owner-vcluster": "client", "vcluster.com/owner-project": "default"}

        async def write(i: int) -> None:
            body = obj(f"w-{i}", i)
            body["metadata"]["labels"] = owner
            async with sem:
                created[f"w-{i}"] = time.perf_counter()
                async with session.post(path, json=body, headers=headers) as resp:
                    await resp.read()

        await asyncio.gather(*(write(i) for i in range(events)))
        await asyncio.wait_for(asyncio.gather(*watchers), 120)
    return results


def all_quarantined(metrics: str) -> float:
    """The counter's value (its name alone is in the exposition from the start, on its HELP and TYPE lines:
    reading the name as the event ended the warm-up after one dial, and the measured 503s then included the
    remaining dials' 5 s timeouts and the quarantine's own moment)."""
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith("vcluster_proxy_target_all_peers_quarantined_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def fail_fast(client_url: str, token: str, requests: int) -> dict[str, float]:
    """503 latency once every peer is quarantined (the caller must have stopped the target)."""
    headers = {"Authorization": f"Bearer {token}"}
    url = f"{client_url}/apis/{GV}/namespaces/bench/myresources/o-0"
    timings: list[float] = []
    codes: dict[int, int] = {}
    own = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=insecure())) as session:
        await asyncio.sleep(KEEPALIVE_SECONDS * 1.5)  # the idle connections to the target are gone
        # Reach quarantine first: dials time out (5 s each) until the threshold is met.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            async with session.get(url, headers=headers) as resp:
                await resp.read()
            metrics = await (await session.get(f"{client_url}/metrics/syncer", headers=headers)).text()
            if all_quarantined(metrics) > 0:
                break
        else:
            raise SystemExit("the stopped target was not quarantined within 60 s")
        for _ in range(requests):
            start = time.perf_counter()
            async with session.get(url, headers=headers) as resp:
                body = await resp.read()
                codes[resp.status] = codes.get(resp.status, 0) + 1
                own += resp.status == 503 and PROXY_503 in body
            timings.append(time.perf_counter() - start)
    timings.sort()
    return {
        "p50_ms": timings[len(timings) // 2] * 1000,
        "p99_ms": timings[int(len(timings) * 0.99) - 1] * 1000,
        "share_503": codes.get(503, 0) / len(timings),
        "share_proxy_503": own / len(timings),
    }


async def recovery(platform: Platform, client_url: str, token: str) -> float:
    """Seconds from killing the target's replica to the first successful proxied GET."""
    headers = {"Authorization": f"Bearer {token}"}
    url = f"{client_url}/apis/{GV}/namespaces/bench/myresources/o-0"
    os.kill(platform.replica_pid("target"), signal.SIGKILL)
    start = time.perf_counter()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=insecure())) as session:
        await asyncio.sleep(0.2)
        while time.perf_counter() - start < 120:
            try:
                async with session.get(url, headers=headers) as resp:
                    await resp.read()
                    if resp.status == 200:
                        return time.perf_counter() - start
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    return float("nan")


def window(
    url: str, token: str, duration: int, script: Path | None = None, connections: int = 16
) -> dict[str, float]:
    return wrk(url, token, duration, connections, script)


def summarize(rounds: list[tuple[dict[str, float], dict[str, float]]]) -> dict[str, float]:
    ratios = [p["rps"] / d["rps"] for d, p in rounds if d["rps"]]
    return {
        "direct_rps": statistics.median(d["rps"] for d, _ in rounds),
        "proxied_rps": statistics.median(p["rps"] for _, p in rounds),
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "direct_p99": statistics.median(d["p99_ms"] for d, _ in rounds),
        "proxied_p99": statistics.median(p["p99_ms"] for _, p in rounds),
        "errors": sum(d["errors"] + p["errors"] for d, p in rounds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    args.load_before = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="vplane-bench-proxy-"))
    work.chmod(0o700)
    platform = Platform(work / "platform")
    results: dict[str, Any] = {}
    try:
        target_url, client_url, _, _ = setup(platform)
        token = platform.token
        asyncio.run(populate(client_url, token, "bench", 10))
        asyncio.run(populate(client_url, token, "bench-list", args.objects))
        one = f"/apis/{GV}/namespaces/bench/myresources/o-0"
        many = f"/apis/{GV}/namespaces/bench-list/myresources"
        windows: dict[str, list[tuple[dict[str, float], dict[str, float]]]] = {
            "get": [],
            "list": [],
            "create": [],
        }
        for r in range(args.rounds):
            for name, path in (("get", one), ("list", many)):
                d = window(target_url + path, token, args.duration)
                p = window(client_url + path, token, args.duration)
                windows[name].append((d, p))
            scripts = []
            for label, ns in (("direct", "bench-direct"), ("proxied", "bench-proxied")):
                text = CREATE_LUA.replace("PREFIX", f"{r}{label[0]}").replace("TOKEN", token)
                text = text.replace("PATH", f"/apis/{GV}/namespaces/{ns}/myresources")
                scripts.append(lua(work / f"create-{label}.lua", text))
            d = window(target_url + "/", token, args.duration, scripts[0])
            p = window(client_url + "/", token, args.duration, scripts[1])
            windows["create"].append((d, p))
            print(
                f"round {r + 1}: "
                + ", ".join(f"{k} {v[-1][1]['rps'] / v[-1][0]['rps']:.2f}" for k, v in windows.items())
            )
        for name, rounds in windows.items():
            results[name] = summarize(rounds)
        results["watch"] = asyncio.run(watch_race(client_url, target_url, token, args.events))
        os.kill(platform.replica_pid("target"), signal.SIGSTOP)
        try:
            results["fail_fast"] = asyncio.run(fail_fast(client_url, token, 1000))
        finally:
            os.kill(platform.replica_pid("target"), signal.SIGCONT)
        results["recovery_seconds"] = asyncio.run(recovery(platform, client_url, token))
    finally:
        platform.stop()
    args.load_after = os.getloadavg()[0]
    print(json.dumps(results, indent=2))
    report(results, args, args.out)


def machine() -> str:
    """The CPU model and count: ratios move with the machine (and with whatever else runs on it)."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} x {model}"


def report(r: dict[str, Any], args: argparse.Namespace, out: Path | None) -> None:
    lines = [
        BEGIN,
        f"Run: `bench/proxy/run.py --duration {args.duration} --rounds {args.rounds}` "
        f"({machine()}, {time.strftime('%Y-%m-%d')}; 1-minute load average {args.load_before:.1f} at the start, "
        f"{args.load_after:.1f} at the end). Proxied = client API server, aggregator, "
        "resource proxy, mesh direct path, target; direct = the target's API server. Ratios are the median "
        "of per-round ratios (range in brackets).",
        "",
        "| measurement | direct | proxied | proxied / direct |",
        "|---|---|---|---|",
    ]
    names = {
        "get": "GET one object (req/s)",
        "list": f"LIST {args.objects} (req/s)",
        "create": "durable create (req/s)",
    }
    for key, label in names.items():
        s = r[key]
        lines.append(
            f"| {label} | {s['direct_rps']:.0f} (p99 {s['direct_p99']:.1f} ms) | {s['proxied_rps']:.0f} "
            f"(p99 {s['proxied_p99']:.1f} ms) | {s['ratio']:.2f} [{s['ratio_min']:.2f}-{s['ratio_max']:.2f}]"
            + (f" ({s['errors']:.0f} non-2xx answers: not comparable)" if s["errors"] else "")
            + " |"
        )
    w = r["watch"]
    lines.append(
        f"| watch events ({args.events}; events/s, lag p50/p99) | {w['direct']['rate']:.0f}, "
        f"{w['direct']['lag_p50_ms']:.1f}/{w['direct']['lag_p99_ms']:.1f} ms | {w['proxied']['rate']:.0f}, "
        f"{w['proxied']['lag_p50_ms']:.1f}/{w['proxied']['lag_p99_ms']:.1f} ms | "
        f"{w['proxied']['rate'] / w['direct']['rate']:.2f} |"
    )
    f = r["fail_fast"]
    lines.append(
        f"| 503 once every peer is quarantined | | p50 {f['p50_ms']:.1f} ms, p99 {f['p99_ms']:.1f} ms "
        f"({f['share_503']:.0%} 503, {f['share_proxy_503']:.0%} the proxy's own) | |"
    )
    lines.append(f"| target restart to first proxied success | | {r['recovery_seconds']:.1f} s | |")
    lines.append(END)
    text = "\n".join(lines)
    print(text)
    if out is not None:
        doc = out.read_text() if out.exists() else ""
        if BEGIN in doc and END in doc:
            doc = doc[: doc.index(BEGIN)] + text + doc[doc.index(END) + len(END) :]
        else:
            doc = doc.rstrip() + "\n\n## Resource proxy\n\n" + text + "\n"
        out.write_text(doc)


if __name__ == "__main__":
    main()
