"""Helpers for the policy controllers' integration tests (quota, limits, slices, disruption budgets,
autoscalers, storage, CSRs): raw API calls, bounded polling, and a stand-in kubelet that reports pod
status through ``pods/status`` (no node runtime is involved)."""

from __future__ import annotations

import datetime
import itertools
import time
from collections.abc import Callable
from typing import Any

import orjson

from harness import APIServerProcess

JSON = {"Content-Type": "application/json"}
MERGE = {"Content-Type": "application/merge-patch+json"}
_ips = itertools.count(1)


def wait_for(check: Callable[[], Any], what: str, within: float = 30.0) -> Any:
    """Poll state another process owns until ``check`` returns something truthy (bounded, never asserted
    on timing)."""
    deadline = time.monotonic() + within
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within}s: {what}")
        time.sleep(0.1)


def call(
    server: APIServerProcess, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    data = orjson.dumps(body) if body is not None else None
    code, _, raw = server.request(method, path, data, headers or (JSON if data else None))
    return code, orjson.loads(raw) if raw else None


def api(
    server: APIServerProcess, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> Any:
    code, answer = call(server, method, path, body, headers)
    assert code < 300, (method, path, code, answer)
    return answer


def items(server: APIServerProcess, path: str) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = api(server, "GET", path)["items"]
    return result


def now(ago: float = 0) -> str:
    moment = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=ago)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def set_pod_status(
    server: APIServerProcess,
    namespace: str,
    pod: dict[str, Any],
    *,
    ready: bool,
    ip: str | None = None,
    phase: str = "Running",
    age: float = 0,
) -> None:
    """What a kubelet reports: phase, IPs, start time and the Ready condition (``age`` seconds ago)."""
    n = next(_ips)
    address = ip or (pod.get("status") or {}).get("podIP") or f"10.245.{n // 250 % 250}.{n % 250 + 1}"
    status = {
        "phase": phase,
        "podIP": address,
        "podIPs": [{"ip": address}],
        "startTime": now(age),
        "conditions": [
            {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": now(age)}
        ],
    }
    name = pod["metadata"]["name"]
    code, answer = call(
        server, "PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status", {"status": status}, MERGE
    )
    assert code in (200, 404), answer


def events_for(server: APIServerProcess, namespace: str, name: str) -> list[dict[str, Any]]:
    return items(server, f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name%3D{name}")


def reasons(server: APIServerProcess, namespace: str, name: str) -> dict[str, str]:
    """Event reason -> message (the latest) for one object."""
    return {e["reason"]: e["message"] for e in events_for(server, namespace, name)}


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)
