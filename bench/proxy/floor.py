"""The floor under the resource proxy's GET ratio: the cheapest aiohttp forwarder against the server it forwards to.

    .venv/bin/python bench/proxy/floor.py [--duration 5] [--rounds 3] [--out docs/benchmarks.md]

No vplane server code runs here (only its certificate helper). A backend (an aiohttp server answering every GET with the same ~600-byte JSON
object over TLS) is measured directly and through a forwarder: an aiohttp server over TLS whose handler
sends the request on a kept-alive TLS connection to the backend and answers with what came back, with no
authentication, authorization, routing, metrics or ownership check (the exchange is aiohttp's response
protocol driven directly, as the proxy's own ``HostPool`` does). Both run under uvloop in processes of
their own, like tenant replicas. Reported: throughput of each path, the ratio, and each process's CPU
time per request.

Whatever the resource proxy does beyond this forwarder only lowers its ratio, so the ratio here is an
upper bound for a proxy of this shape (one Python process serving and forwarding) on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from common import wrk  # noqa: E402

BEGIN, END = "<!-- proxyfloor:begin -->", "<!-- proxyfloor:end -->"
BODY = (
    b'{"apiVersion":"example.com/v1","kind":"MyResource","metadata":{"name":"o-0","namespace":"bench",'
    b'"uid":"6c1f0d5e-4f8a-4d2b-9a57-0c7c1f6a2b11","resourceVersion":"1042","generation":1,'
    b'"creationTimestamp":"2026-12-03T10:00:00Z","labels":{"vcluster.com/owner-vcluster":"client",'
    b'"vcluster.com/owner-project":"default"},"managedFields":[{"manager":"kubectl","operation":"Update",'
    b'"apiVersion":"example.com/v1","time":"2026-12-03T10:00:00Z","fieldsType":"FieldsV1",'
    b'"fieldsV1":{"f:spec":{".":{},"f:size":{}}}}]},"spec":{"size":7,"color":"blue","replicas":3}}'
)


def certificate(directory: Path) -> None:
    """A serving certificate for 127.0.0.1 (both servers use it; the forwarder does not verify it)."""
    from vplane.support import tls

    tls.issue_serving(tls.make_ca("floor"), ["127.0.0.1"]).write(directory / "tls.crt", directory / "tls.key")


def serve(role: str, port: int, upstream: int, directory: Path) -> None:
    """Run one server (``backend`` or ``forwarder``) until killed."""
    import uvloop
    from aiohttp import web
    from aiohttp.client_proto import ResponseHandler

    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(directory / "tls.crt", directory / "tls.key")
    dial_ctx = ssl.create_default_context()
    dial_ctx.check_hostname = False
    dial_ctx.verify_mode = ssl.CERT_NONE
    idle: list[ResponseHandler] = []
    head = f"GET /x HTTP/1.1\r\nHost: 127.0.0.1:{upstream}\r\nAccept: application/json\r\n\r\n".encode()

    async def backend(request: web.Request) -> web.Response:
        return web.Response(body=BODY, content_type="application/json")

    async def forwarder(request: web.Request) -> web.Response:
        loop = asyncio.get_running_loop()
        protocol = idle.pop() if idle else None
        if protocol is None or not protocol.is_connected():
            _, protocol = await loop.create_connection(
                lambda: ResponseHandler(loop), "127.0.0.1", upstream, ssl=dial_ctx
            )
        protocol.set_response_params(read_until_eof=True, auto_decompress=False)
        assert protocol.transport is not None
        protocol.transport.write(head)
        message, payload = await protocol.read()
        data = payload.read_nowait() if payload.is_eof() else await payload.read()
        idle.append(protocol)
        return web.Response(body=data, status=message.code, content_type="application/json")

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/x", backend if role == "backend" else forwarder)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port, ssl_context=ctx).start()
        await asyncio.Event().wait()

    uvloop.run(main())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(role: str, port: int, upstream: int, directory: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, __file__, "--serve", role, str(port), str(upstream), str(directory)]
    proc = subprocess.Popen(cmd)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"{role} did not start") from None
            time.sleep(0.05)


def measure(url: str, duration: int, pids: dict[str, int]) -> dict[str, float]:
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    started = time.monotonic()
    result: dict[str, float] = wrk(url, None, duration, 16)
    elapsed = time.monotonic() - started
    requests = result["rps"] * elapsed
    for name, pid in pids.items():
        result[f"{name}_us"] = 1e6 * (cpu_seconds(pid) - before[name]) / requests
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="write the table into this markdown file")
    parser.add_argument(
        "--serve", nargs=4, metavar=("ROLE", "PORT", "UPSTREAM", "DIR"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.serve:
        role, port, upstream, directory = args.serve
        serve(role, int(port), int(upstream), Path(directory))
        return
    with tempfile.TemporaryDirectory(prefix="floor-") as tmp:
        directory = Path(tmp)
        certificate(directory)
        backend_port, forwarder_port = free_port(), free_port()
        backend = start("backend", backend_port, 0, directory)
        forwarder = start("forwarder", forwarder_port, backend_port, directory)
        try:
            pids = {"backend": backend.pid, "forwarder": forwarder.pid}
            rounds = []
            for _ in range(args.rounds):
                direct = measure(f"https://127.0.0.1:{backend_port}/x", args.duration, pids)
                forwarded = measure(f"https://127.0.0.1:{forwarder_port}/x", args.duration, pids)
                rounds.append((direct, forwarded))
        finally:
            for proc in (forwarder, backend):
                proc.kill()
                proc.wait()
    report(rounds, args)


def report(rounds: list[tuple[dict[str, float], dict[str, float]]], args: argparse.Namespace) -> None:
    ratios = [f["rps"] / d["rps"] for d, f in rounds]

    def med(values: list[float]) -> float:
        return statistics.median(values)

    direct_rps, forwarded_rps = med([d["rps"] for d, _ in rounds]), med([f["rps"] for _, f in rounds])
    load = os.getloadavg()[0]
    lines = [
        f"Run: `bench/proxy/floor.py --duration {args.duration} --rounds {args.rounds}` "
        f"({os.cpu_count()} cores, {datetime.date.today()}, 1-minute load average {load:.1f} at the end).",
        "",
        "| path | req/s | backend CPU per request | forwarder CPU per request |",
        "|---|---|---|---|",
        f"| direct to the backend | {direct_rps:.0f} | {med([d['backend_us'] for d, _ in rounds]):.0f} µs | |",
        f"| through the forwarder | {forwarded_rps:.0f} | {med([f['backend_us'] for _, f in rounds]):.0f} µs "
        f"| {med([f['forwarder_us'] for _, f in rounds]):.0f} µs |",
        "",
        f"Forwarded / direct: **{med(ratios):.2f}** [{min(ratios):.2f}-{max(ratios):.2f}] (median of per-round "
        "ratios, range).",
    ]
    table = "\n".join(lines)
    print(table)
    if args.out is not None:
        text = args.out.read_text()
        if BEGIN in text and END in text:
            head, rest = text.split(BEGIN, 1)
            text = head + BEGIN + "\n" + table + "\n" + END + rest.split(END, 1)[1]
            args.out.write_text(text)


if __name__ == "__main__":
    main()
