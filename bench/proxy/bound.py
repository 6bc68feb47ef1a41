"""Where the resource proxy's GET ratio is bounded: CPU per request of every process on each path.

    .venv/bin/python bench/proxy/bound.py [--duration 6] [--rounds 2] [--out docs/benchmarks.md]

The same platform as ``run.py`` (a ``client`` tenant proxying ``myresources.example.com/v1`` to ``target``).
Four wrk windows per round (16 connections), each with the CPU time (user + system, from ``/proc`` and
``getrusage``) that the client replica, the target replica and wrk itself spent per request:

- ``direct``: GET of one proxied object on the target's own API server (the ratio's baseline);
- ``target local``: GET of a ConfigMap on the target, an object its own store holds;
- ``client local``: GET of a ConfigMap on the client, an object the client's own store holds: what the client
  replica pays to serve a request at all (TLS, HTTP, authentication, authorization, routing, the answer);
- ``proxied``: GET of the same object as ``direct`` through the client (served, then forwarded).

Each replica is one event loop on one thread, so each path's throughput is capped by its busiest process:
the target's CPU per direct GET on the direct path, the client replica's CPU per proxied GET on the proxied
one. Their quotient (``estimate``) tracks the measured ratio. ``client local`` splits the client's proxied
cost into serving the request and forwarding it, and the report gives what forwarding may cost for a
ratio of 0.7 (the ``budget``), next to what it costs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import run  # noqa: E402

from common import wrk  # noqa: E402

BEGIN, END = "<!-- proxybound:begin -->", "<!-- proxybound:end -->"
TICK = os.sysconf("SC_CLK_TCK")
OBJECT = f"/apis/{run.GV}/namespaces/bench/myresources/o-0"
CONFIGMAP = "/api/v1/namespaces/bench/configmaps/cm-0"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def children_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measured(url: str, token: str, duration: int, pids: dict[str, int]) -> dict[str, float]:
    """One wrk window: requests per second and each process's CPU microseconds per request."""
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    wrk_before = children_seconds()
    result = wrk(url, token, duration, 16)
    wrk_cpu = children_seconds() - wrk_before
    after = {name: cpu_seconds(pid) for name, pid in pids.items()}
    if result["errors"] or not result["rps"]:
        # A window of error answers measures the cost of refusing, not of serving: nothing to compare.
        raise SystemExit(f"{url}: {result['errors']:.0f} non-2xx answers, {result['rps']} req/s")
    requests = result["rps"] * duration
    row = {"rps": result["rps"], "wrk": 1e6 * wrk_cpu / requests}
    row.update({name: 1e6 * (after[name] - before[name]) / requests for name in pids})
    return row


def configmap(url: str, token: str) -> None:
    body = json.dumps({"metadata": {"name": "cm-0"}, "data": {"size": "7"}}).encode()
    request = urllib.request.Request(
        f"{url}/api/v1/namespaces/bench/configmaps",
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, context=run.insecure()) as response:
        response.read()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vplane-bench-bound-"))
    work.chmod(0o700)
    platform = run.Platform(work / "platform")
    rows: dict[str, list[dict[str, float]]] = {
        "direct": [],
        "target local": [],
        "client local": [],
        "proxied": [],
    }
    try:
        target_url, client_url, _, _ = run.setup(platform)
        token = platform.token
        asyncio.run(run.populate(client_url, token, "bench", 10))
        configmap(client_url, token)  # namespace bench: created on the client, mirrored to the target
        configmap(target_url, token)
        pids = {"client": platform.replica_pid("client"), "target": platform.replica_pid("target")}
        paths = {
            "direct": target_url + OBJECT,
            "target local": target_url + CONFIGMAP,
            "client local": client_url + CONFIGMAP,
            "proxied": client_url + OBJECT,
        }
        for r in range(args.rounds):
            for name, url in paths.items():
                rows[name].append(measured(url, token, args.duration, pids))
            print(f"round {r + 1}: " + json.dumps({k: round(v[-1]["rps"]) for k, v in rows.items()}))
    finally:
        platform.stop()
    medians = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in rows.items()}
    print(json.dumps(medians, indent=2))
    report(medians, args)


def report(m: dict[str, dict[str, float]], args: argparse.Namespace) -> None:
    direct, proxied, local = m["direct"], m["proxied"], m["client local"]
    budget = direct["target"] / 0.7 - local["client"]
    lines = [
        BEGIN,
        f"Run: `bench/proxy/bound.py --duration {args.duration} --rounds {args.rounds}` ({run.machine()}, "
        f"{time.strftime('%Y-%m-%d')}; 1-minute load average {os.getloadavg()[0]:.1f} at the end). CPU time "
        "per request (user + system), medians over rounds.",
        "",
        "| path | req/s | client replica | target replica | wrk |",
        "|---|---|---|---|---|",
    ]
    for name, row in m.items():
        lines.append(
            f"| {name} | {row['rps']:.0f} | {row['client']:.0f} µs | {row['target']:.0f} µs | {row['wrk']:.0f} µs |"
        )
    lines += [
        "",
        f"Proxied / direct: measured **{proxied['rps'] / direct['rps']:.2f}**, estimated from the busiest "
        f"process on each path {direct['target'] / proxied['client']:.2f}. Forwarding costs the client replica "
        f"{proxied['client'] - local['client']:.0f} µs per GET on top of serving it ({local['client']:.0f} µs); "
        f"a ratio of 0.7 leaves it {budget:.0f} µs.",
        END,
    ]
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        doc = args.out.read_text()
        if BEGIN in doc:
            head, rest = doc.split(BEGIN, 1)
            doc = head + text + rest.split(END, 1)[1]
        else:
            doc += "\n" + text + "\n"
        args.out.write_text(doc)


if __name__ == "__main__":
    main()
