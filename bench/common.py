"""Helpers shared by the benchmarks: wrk as the load generator, CPU pinning."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

CPU_LOAD = "0"


def ensure_wrk() -> str:
    found = shutil.which("wrk")
    if found:
        return found
    subprocess.run(["apt-get", "install", "-y", "-q", "wrk"], check=True, capture_output=True)
    found = shutil.which("wrk")
    if not found:
        raise SystemExit("wrk is not available")
    return found


def pinned(cpu: str, cmd: list[str]) -> list[str]:
    if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        return ["taskset", "-c", cpu, *cmd]
    return cmd


def wrk(
    url: str, token: str | None, duration: int, connections: int, script: Path | None = None
) -> dict[str, float]:
    cmd = [ensure_wrk(), "-t1", f"-c{connections}", f"-d{duration}s", "--latency"]
    if token:
        cmd += ["-H", f"Authorization: Bearer {token}"]
    if script:
        cmd += ["-s", str(script)]
    out = subprocess.run(pinned(CPU_LOAD, [*cmd, url]), capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    p50 = re.search(r"50%\s+([\d.]+)(us|ms|s)", out)
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)

    def ms(m: re.Match[str] | None) -> float:
        if m is None:
            return float("nan")
        value, unit = float(m.group(1)), m.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value

    return {
        "rps": rps,
        "errors": float(non2xx.group(1)) if non2xx else 0.0,
        "p50_ms": ms(p50),
        "p99_ms": ms(p99),
    }


def lua(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
