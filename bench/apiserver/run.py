"""Benchmark the API server against baselines measured in the same run.

    .venv/bin/python bench/apiserver/run.py [--duration 10] [--out docs/benchmarks.md]

Measures single-object GET, LIST of 1,000 and 10,000 objects, durable create and update throughput,
and watch fan-out (100 watchers x 1,000 events), plus two baselines: a bare aiohttp HTTPS handler
returning the same JSON (the framework ceiling) and a raw durable SQLite insert loop (the storage
ceiling). Load comes from wrk (installed with apt if missing) pinned to CPU 0, servers to CPU 1, as in
the reference figures. Results are ratios against the baselines; absolute numbers vary with the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sqlite3
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from common import lua, pinned, wrk  # noqa: E402

HERE = Path(__file__).resolve().parent
WATCH_OBJECTS = 10
CPU_SERVER = "1"


class Server:
    def __init__(self, cmd: list[str], ready: Path | None = None) -> None:
        self.proc = subprocess.Popen(
            pinned(CPU_SERVER, cmd), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 30
        while ready is not None and not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"server did not start: {cmd}")
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def storage_ceiling(path: Path, seconds: float) -> float:
    """Inserts per second, one durable commit each (WAL, synchronous=FULL), like one writer without batching."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE log (rev INTEGER PRIMARY KEY, key TEXT, value BLOB)")
    value = b"x" * 300
    n = 0
    end = time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < end:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO log (key, value) VALUES (?, ?)", (f"/k/{n}", value))
        conn.execute("COMMIT")
        n += 1
    elapsed = time.perf_counter() - start
    conn.close()
    return n / elapsed


CREATE_LUA = """
counter = 0
request = function()
  counter = counter + 1
  local body = '{"metadata":{"name":"c-ROUND-' .. math.random(1, 1000000000) .. '-' .. counter .. '"},"data":{"a":"b"}}'
  return wrk.format("POST", "/api/v1/namespaces/bench-create/configmaps", {["Content-Type"]="application/json", ["Authorization"]="Bearer TOKEN"}, body)
end
"""

UPDATE_LUA = """
counter = 0
request = function()
  counter = counter + 1
  local i = counter % 200
  local body = '{"metadata":{"name":"u' .. i .. '","namespace":"bench-update"},"data":{"v":"' .. counter .. '"}}'
  return wrk.format("PUT", "/api/v1/namespaces/bench-update/configmaps/u" .. i, {["Content-Type"]="application/json", ["Authorization"]="Bearer TOKEN"}, body)
end
"""


async def populate(url: str, token: str, ctx: ssl.SSLContext, namespace: str, count: int) -> None:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    async with aiohttp.ClientSession(headers=headers, connector=aiohttp.TCPConnector(ssl=ctx, limit=64)) as s:
        async with s.post(
            f"{url}/api/v1/namespaces", data=orjson.dumps({"metadata": {"name": namespace}})
        ) as r:
            await r.read()
        sem = asyncio.Semaphore(64)

        async def one(i: int) -> None:
            async with sem:
                body = orjson.dumps(
                    {
                        "metadata": {"name": f"o{i:05d}", "labels": {"app": "bench"}},
                        "data": {"key": "value" * 10},
                    }
                )
                async with s.post(f"{url}/api/v1/namespaces/{namespace}/configmaps", data=body) as r:
                    await r.read()
                    if r.status != 201:
                        raise SystemExit(f"populate failed: {r.status}")

        await asyncio.gather(*(one(i) for i in range(count)))


async def watch_fanout(
    url: str, token: str, ctx: ssl.SSLContext, watchers: int, events: int
) -> dict[str, float]:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    ns = "bench-watch"
    async with aiohttp.ClientSession(headers=headers, connector=aiohttp.TCPConnector(ssl=ctx, limit=0)) as s:
        async with s.post(f"{url}/api/v1/namespaces", data=orjson.dumps({"metadata": {"name": ns}})) as r:
            await r.read()
        for k in range(WATCH_OBJECTS):
            body = orjson.dumps({"metadata": {"name": f"w{k}"}, "data": {"n": "0"}})
            async with s.post(f"{url}/api/v1/namespaces/{ns}/configmaps", data=body) as r:
                start_rv = (await r.json())["metadata"]["resourceVersion"]
        counts = [0] * watchers
        rvs: list[list[int]] = [[] for _ in range(watchers)]
        done = asyncio.Event()
        finished = 0

        async def watch(i: int) -> None:
            nonlocal finished
            async with s.get(
                f"{url}/api/v1/namespaces/{ns}/configmaps?watch=true&resourceVersion={start_rv}&timeoutSeconds=300",
                timeout=aiohttp.ClientTimeout(total=None),
            ) as r:
                async for line in r.content:
                    ev = orjson.loads(line)
                    counts[i] += 1
                    rvs[i].append(int(ev["object"]["metadata"]["resourceVersion"]))
                    if counts[i] == events:
                        finished += 1
                        if finished == watchers:
                            done.set()
                        return

        tasks = [asyncio.create_task(watch(i)) for i in range(watchers)]
        await asyncio.sleep(1.0)
        t0 = time.perf_counter()

        async def writer(k: int) -> None:
            # One sequential writer per object: concurrent unconditional writes to one object would
            # measure compare-and-swap retries, not fan-out.
            for i in range(k, events, WATCH_OBJECTS):
                body = orjson.dumps(
                    {"metadata": {"name": f"w{k}"}, "data": {"n": str(i + 1)}}
                )  # n=0 is a no-op
                async with s.put(f"{url}/api/v1/namespaces/{ns}/configmaps/w{k}", data=body) as r:
                    await r.read()

        writes_done_at = 0.0
        await asyncio.gather(*(writer(k) for k in range(WATCH_OBJECTS)))
        writes_done_at = time.perf_counter() - t0
        try:
            await asyncio.wait_for(done.wait(), 120)
        except TimeoutError:
            pass
        elapsed = time.perf_counter() - t0
        for t in tasks:
            t.cancel()
        ordered = all(r == sorted(r) and len(set(r)) == len(r) for r in rvs)
        complete = sum(1 for c in counts if c == events)
        return {
            "watchers": watchers,
            "events_per_watcher": events,
            "watchers_complete": complete,
            "in_order_no_duplicates": float(ordered),
            "delivered_per_s": sum(counts) / elapsed,
            "elapsed_s": elapsed,
            "writes_s": writes_done_at,
        }


def rounds_of(windows: list[dict[str, float]]) -> dict[str, float]:
    """Sum a measurement's windows into one result (requests/s averaged, latencies of the worst window)."""
    return {
        "rps": sum(w["rps"] for w in windows) / len(windows),
        "errors": sum(w["errors"] for w in windows),
        "p50_ms": max(w["p50_ms"] for w in windows),
        "p99_ms": max(w["p99_ms"] for w in windows),
        "rounds": [w["rps"] for w in windows],  # type: ignore[dict-item]
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=5, help="seconds per measurement window")
    parser.add_argument(
        "--rounds", type=int, default=3, help="windows per measurement, each next to its baseline"
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    d, rounds = args.duration, args.rounds
    work = Path(tempfile.mkdtemp(prefix="vplane-bench-"))
    results: dict[str, object] = {"cpus": os.cpu_count(), "duration_s": d, "rounds": rounds}

    data = work / "apiserver"
    ready = data / "ready"
    data.mkdir(mode=0o700)  # vplane refuses a data directory others can read
    server = Server(
        [
            sys.executable,
            "-m",
            "vplane.cli.main",
            "--log-level",
            "warning",
            "apiserver",
            "--data-dir",
            str(data),
            "--listen",
            "127.0.0.1:0",
            "--ready-file",
            str(ready),
            "--set",
            "write_queue_limit=100000",
            "--set",
            "controller_manager=false",  # the API server alone (its namespaces hold only what the bench makes)
        ],
        ready,
    )
    baseline: Server | None = None
    try:
        url = ready.read_text().strip()
        cfg = yaml.safe_load((data / "kubeconfig.yaml").read_text())
        token = cfg["users"][0]["user"]["token"]
        ctx = ssl.create_default_context(cafile=str(data / "pki" / "ca.crt"))
        asyncio.run(populate(url, token, ctx, "bench-get", 1))
        get_path = "/api/v1/namespaces/bench-get/configmaps/o00000"
        body_file = work / "body.json"
        body_file.write_bytes(urllib_get(url + get_path, token, ctx))
        # Both servers run for the whole GET measurement (pinned to the same CPU, loaded in turn): this
        # VM's speed drifts by a third within minutes, so each window sits next to its baseline window.
        baseline = Server(
            [
                sys.executable,
                str(HERE / "baseline_server.py"),
                "18999",
                str(data / "pki" / "serving.crt"),
                str(data / "pki" / "serving.key"),
                str(body_file),
            ]
        )
        time.sleep(1.0)
        framework, gets = [], []
        for _ in range(rounds):
            framework.append(wrk("https://127.0.0.1:18999/x", None, d, 64))
            gets.append(wrk(url + get_path, token, d, 64))
        baseline.stop()
        baseline = None
        results["framework_ceiling"] = rounds_of(framework)
        results["get"] = rounds_of(gets)
        asyncio.run(populate(url, token, ctx, "bench-list1k", 1000))
        asyncio.run(populate(url, token, ctx, "bench-list10k", 10_000))
        n1k = count_items(url + "/api/v1/namespaces/bench-list1k/configmaps", token, ctx)
        n10k = count_items(url + "/api/v1/namespaces/bench-list10k/configmaps", token, ctx)
        assert n1k == 1000 and n10k == 10_000, (n1k, n10k)
        results["list_1000"] = wrk(url + "/api/v1/namespaces/bench-list1k/configmaps", token, d, 4)
        results["list_10000"] = wrk(url + "/api/v1/namespaces/bench-list10k/configmaps", token, d, 4)
        asyncio.run(populate(url, token, ctx, "bench-create", 0))
        asyncio.run(populate(url, token, ctx, "bench-update", 0))
        asyncio.run(populate_named(url, token, ctx, "bench-update", 200))
        update_lua = lua(work / "update.lua", UPDATE_LUA.replace("TOKEN", token))
        ceilings, creates, updates = [], [], []
        for i in range(rounds):
            ceilings.append(storage_ceiling(work / f"raw{i}.sqlite", d))
            script = CREATE_LUA.replace("TOKEN", token).replace("ROUND", str(i))
            creates.append(wrk(url + "/", token, d, 64, lua(work / f"create{i}.lua", script)))
            updates.append(wrk(url + "/", token, d, 64, update_lua))
        results["storage_ceiling_rounds"] = ceilings
        results["storage_ceiling_inserts_per_s"] = sum(ceilings) / len(ceilings)
        results["create"] = rounds_of(creates)
        results["update"] = rounds_of(updates)
        results["watch"] = asyncio.run(watch_fanout(url, token, ctx, 100, 1000))
    finally:
        server.stop()
        if baseline is not None:
            baseline.stop()
    report(results, args.out)


async def populate_named(url: str, token: str, ctx: ssl.SSLContext, namespace: str, count: int) -> None:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    async with aiohttp.ClientSession(headers=headers, connector=aiohttp.TCPConnector(ssl=ctx)) as s:
        for i in range(count):
            body = orjson.dumps({"metadata": {"name": f"u{i}"}, "data": {"v": "0"}})
            async with s.post(f"{url}/api/v1/namespaces/{namespace}/configmaps", data=body) as r:
                await r.read()


def count_items(url: str, token: str, ctx: ssl.SSLContext) -> int:
    return len(orjson.loads(urllib_get(url, token, ctx))["items"])


def urllib_get(url: str, token: str, ctx: ssl.SSLContext) -> bytes:
    import urllib.request

    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, context=ctx) as resp:
        body: bytes = resp.read()
        return body


def report(r: dict[str, object], out: Path | None) -> None:
    print(json.dumps(r, indent=2))
    get = r["get"]
    base = r["framework_ceiling"]
    create = r["create"]
    update = r["update"]
    assert (
        isinstance(get, dict)
        and isinstance(base, dict)
        and isinstance(create, dict)
        and isinstance(update, dict)
    )
    ceiling = float(r["storage_ceiling_inserts_per_s"])  # type: ignore[arg-type]
    watch = r["watch"]
    list1k, list10k = r["list_1000"], r["list_10000"]
    assert isinstance(watch, dict) and isinstance(list1k, dict) and isinstance(list10k, dict)
    ceilings = [float(c) for c in r["storage_ceiling_rounds"]]  # type: ignore[attr-defined]

    def ratios(measured: dict[str, object], baselines: list[float]) -> str:
        """The median of the per-round ratios (each window over the baseline window beside it) and their range."""
        per = sorted(m / b for m, b in zip(measured["rounds"], baselines, strict=True))  # type: ignore[call-overload]
        return f"**{statistics.median(per):.2f}** ({per[0]:.2f}-{per[-1]:.2f})"

    framework = [float(x) for x in base["rounds"]]
    lines = [
        "| measurement | vplane | baseline (same rounds) | ratio: median (range) of rounds | reference: kube-apiserver + etcd, 2 cores |",
        "|---|---|---|---|---|",
        f"| single-object GET (wrk, 64 conns) | {get['rps']:,.0f}/s (p50 {get['p50_ms']:.1f} ms, p99 {get['p99_ms']:.1f} ms) | "
        f"{base['rps']:,.0f}/s bare aiohttp handler | {ratios(get, framework)} | about 2,500/s |",
        f"| LIST 1,000 ConfigMaps (wrk, 4 conns) | {list1k['rps']:,.1f}/s (p50 {list1k['p50_ms']:.0f} ms) | | | about 84/s |",
        f"| LIST 10,000 ConfigMaps (wrk, 4 conns) | {list10k['rps']:,.1f}/s (p50 {list10k['p50_ms']:.0f} ms) | | | |",
        f"| durable create (wrk, 64 conns) | {create['rps']:,.0f}/s (p99 {create['p99_ms']:.1f} ms) | "
        f"{ceiling:,.0f}/s raw SQLite insert+fsync loop | {ratios(create, ceilings)} | about 1,100/s |",
        f"| durable update, unconditional PUT (wrk, 64 conns) | {update['rps']:,.0f}/s | {ceiling:,.0f}/s | "
        f"{ratios(update, ceilings)} | |",
        f"| watch fan-out: {watch['watchers']} watchers x {watch['events_per_watcher']} events | "
        f"{watch['delivered_per_s']:,.0f} events/s delivered; {watch['watchers_complete']}/{watch['watchers']} watchers "
        f"got every event, in order, no duplicates: {'yes' if watch['in_order_no_duplicates'] else 'NO'} | | | |",
    ]
    errors = get["errors"] + create["errors"] + update["errors"]
    lines.append("")
    lines.append(f"Non-2xx responses during the wrk runs: {errors:.0f}.")
    table = "\n".join(lines)
    print(table)
    if out is not None:
        text = out.read_text() if out.exists() else ""
        begin, end = "<!-- apiserver:begin -->", "<!-- apiserver:end -->"
        block = f"{begin}\n{table}\n{end}"
        if begin in text:
            text = text[: text.index(begin)] + block + text[text.index(end) + len(end) :]
        else:
            text += "\n" + block + "\n"
        out.write_text(text)


if __name__ == "__main__":
    main()
