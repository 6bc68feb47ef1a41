"""Readiness, liveness and startup probes (the kubelet's prober and probe workers).

:class:`ProbeTracker` is the pure part: a probe's result changes only after ``successThreshold``
consecutive successes or ``failureThreshold`` consecutive failures, starting from upstream's initial
results (readiness: failure, liveness: success, startup: not yet). :func:`probe_once` runs one check:
``exec`` (a command in the container's environment, success on exit 0), ``httpGet`` (a 2xx or 3xx
answer; the host defaults to the pod IP), ``tcpSocket`` (a connection opens). The messages are the
kubelet's (``HTTP probe failed with statuscode: 500``, Go's dial errors); gRPC probes are not supported
and fail saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from vplane.kube.objects import Obj

PROBE_USER_AGENT = "kube-probe/1.36"
MAX_OUTPUT = 10 * 1024
"""Probe output kept for the event and the log (the kubelet keeps 10 KiB)."""

ExecRunner = Callable[[Sequence[str], float], Awaitable[tuple[int | None, str]]]
"""Runs a command in the container's environment with a timeout: (exit code or None on timeout, output)."""


@dataclass
class ProbeTracker:
    kind: str
    """``Readiness``, ``Liveness`` or ``Startup`` (as the kubelet spells them in events)."""
    success_threshold: int = 1
    failure_threshold: int = 3
    result: bool | None = None
    _last: bool | None = None
    _run: int = 0

    def __post_init__(self) -> None:
        if self.result is None:
            self.result = self.kind == "Liveness"  # liveness starts healthy, readiness and startup not

    @classmethod
    def from_spec(cls, kind: str, probe: Obj) -> ProbeTracker:
        success = int(probe.get("successThreshold") or 1)
        failure = int(probe.get("failureThreshold") or 3)
        return cls(kind, max(success, 1), max(failure, 1))

    def observe(self, ok: bool) -> bool:
        """Record one check; True when the probe's result changed."""
        if self._last == ok:
            self._run += 1
        else:
            self._last, self._run = ok, 1
        threshold = self.success_threshold if ok else self.failure_threshold
        if self._run >= threshold and self.result != ok:
            self.result = ok
            return True
        return False

    def reset(self) -> None:
        self.result = self.kind == "Liveness"
        self._last, self._run = None, 0


def _port(value: Any, container: Obj) -> int:
    if isinstance(value, int):
        return value
    text = str(value)
    if text.isdigit():
        return int(text)
    for port in container.get("ports") or []:
        if isinstance(port, dict) and port.get("name") == text:
            return int(port.get("containerPort") or 0)
    raise ValueError(f"unable to find port {text!r} in container spec")


def _dial_error(host: str, port: int, exc: BaseException) -> str:
    target = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
    if isinstance(exc, TimeoutError):
        return f"dial tcp {target}: i/o timeout"
    if isinstance(exc, ConnectionRefusedError) or getattr(exc, "errno", None) == errno.ECONNREFUSED:
        return f"dial tcp {target}: connect: connection refused"
    if isinstance(exc, OSError) and exc.strerror:
        return f"dial tcp {target}: connect: {exc.strerror.lower()}"
    return f"dial tcp {target}: {exc}"


async def probe_tcp(host: str, port: int, limit: float) -> tuple[bool, str]:
    try:
        async with asyncio.timeout(limit):
            _reader, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError) as exc:
        return False, _dial_error(host, port, exc)
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()
    return True, ""


async def probe_http(action: Obj, default_host: str, container: Obj, limit: float) -> tuple[bool, str]:
    host = str(action.get("host") or default_host)
    port = _port(action.get("port"), container)
    scheme = str(action.get("scheme") or "HTTP").upper()
    path = str(action.get("path") or "/")
    if not path.startswith("/"):
        path = "/" + path
    host_port = f"{host}:{port}"
    url = f"{scheme.lower()}://{host_port}{path}"
    headers = {"Host": host_port, "User-Agent": PROBE_USER_AGENT, "Accept": "*/*", "Connection": "close"}
    for header in action.get("httpHeaders") or []:
        if isinstance(header, dict) and header.get("name"):
            name = str(header["name"])
            headers = {k: v for k, v in headers.items() if k.lower() != name.lower()}
            headers[name] = str(header.get("value", ""))
    context: ssl.SSLContext | None = None
    if scheme == "HTTPS":
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # the kubelet does not verify probe targets either
    try:
        async with asyncio.timeout(limit):
            try:
                reader, writer = await asyncio.open_connection(host, port, ssl=context)
            except OSError as exc:
                return False, f'Get "{url}": {_dial_error(host, port, exc)}'
            try:
                request = (
                    f"GET {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
                )
                writer.write(request.encode("latin-1"))
                await writer.drain()
                status_line = await reader.readline()
            finally:
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()
    except TimeoutError:
        return (
            False,
            f'Get "{url}": context deadline exceeded (Client.Timeout exceeded while awaiting headers)',
        )
    except OSError as exc:
        return False, f'Get "{url}": {exc.strerror or exc}'
    parts = status_line.decode("latin-1").split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        return False, f'Get "{url}": malformed HTTP response {status_line[:64]!r}'
    code = int(parts[1])
    if 200 <= code < 400:
        return True, ""
    return False, f"HTTP probe failed with statuscode: {code}"


async def probe_once(probe: Obj, container: Obj, pod_ip: str, run_exec: ExecRunner) -> tuple[bool, str]:
    """One check of ``probe`` (a container's probe spec): (success, message when it failed)."""
    timeout = float(probe.get("timeoutSeconds") or 1)
    try:
        if isinstance(probe.get("exec"), dict):
            command = [str(a) for a in probe["exec"].get("command") or []]
            code, output = await run_exec(command, timeout)
            if code is None:
                return False, f"command {' '.join(command)!r} timed out"
            return code == 0, output[:MAX_OUTPUT]
        if isinstance(probe.get("httpGet"), dict):
            return await probe_http(probe["httpGet"], pod_ip, container, timeout)
        if isinstance(probe.get("tcpSocket"), dict):
            action = probe["tcpSocket"]
            return await probe_tcp(
                str(action.get("host") or pod_ip), _port(action.get("port"), container), timeout
            )
        if isinstance(probe.get("grpc"), dict):
            return False, "gRPC probes are not supported by the vplane node runtime"
    except ValueError as exc:
        return False, str(exc)
    return False, "missing probe handler"
