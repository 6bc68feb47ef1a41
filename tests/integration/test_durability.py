"""Durability and concurrency of the API server over its SQLite store, with real processes."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import aiohttp
import orjson
import pytest

from harness import APIServerProcess

pytestmark = pytest.mark.integration


def _session(server: APIServerProcess) -> tuple[aiohttp.ClientSession, ssl.SSLContext]:
    ctx = server.ssl_context()
    session = aiohttp.ClientSession(
        headers={"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"},
        connector=aiohttp.TCPConnector(ssl=ctx, limit=64),
    )
    return session, ctx


async def _create_until_failure(
    server: APIServerProcess, acked: list[str], stop: asyncio.Event, enough: asyncio.Event, worker: int
) -> None:
    session, _ = _session(server)
    async with session:
        i = 0
        while not stop.is_set():
            name = f"w{worker}-{i}"
            body = orjson.dumps(
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"i": str(i)}}
            )
            try:
                async with session.post(
                    f"{server.url}/api/v1/namespaces/default/configmaps", data=body
                ) as resp:
                    await resp.read()
                    if resp.status == 201:
                        acked.append(name)
                        if len(acked) >= 300:
                            enough.set()
            except (aiohttp.ClientError, OSError):
                return
            i += 1


async def test_sigkill_mid_write_keeps_every_acknowledged_write(apiserver: APIServerProcess) -> None:
    """Writes acknowledged before a SIGKILL are all present after a restart (fsync before ack)."""
    apiserver.start()
    acked: list[str] = []
    stop, enough = asyncio.Event(), asyncio.Event()
    workers = [
        asyncio.create_task(_create_until_failure(apiserver, acked, stop, enough, w)) for w in range(16)
    ]
    await asyncio.wait_for(enough.wait(), 30)
    await asyncio.to_thread(apiserver.kill)  # mid-load: the workers still have requests in flight
    stop.set()
    await asyncio.gather(*workers)
    assert len(acked) >= 300, "the load did not get going"
    apiserver.start()
    status, _, body = apiserver.request("GET", "/api/v1/namespaces/default/configmaps")
    assert status == 200
    present = {item["metadata"]["name"] for item in orjson.loads(body)["items"]}
    missing = sorted(set(acked) - present)
    assert missing == [], f"{len(missing)} acknowledged writes lost, e.g. {missing[:5]}"


async def test_restart_keeps_objects_and_resource_versions(apiserver: APIServerProcess) -> None:
    """A clean restart serves the same objects with the same resourceVersions, and the revision keeps growing."""
    apiserver.start()
    body = orjson.dumps({"metadata": {"name": "keep"}, "data": {"a": "1"}})
    status, _, created = apiserver.request(
        "POST", "/api/v1/namespaces/default/configmaps", body, {"Content-Type": "application/json"}
    )
    assert status == 201
    before = orjson.loads(created)
    apiserver.restart()
    status, _, got = apiserver.request("GET", "/api/v1/namespaces/default/configmaps/keep")
    assert status == 200
    after = orjson.loads(got)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    status, _, again = apiserver.request(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        orjson.dumps({"metadata": {"name": "next"}}),
        {"Content-Type": "application/json"},
    )
    assert status == 201
    assert int(orjson.loads(again)["metadata"]["resourceVersion"]) > int(
        before["metadata"]["resourceVersion"]
    )


async def test_concurrent_updates_lose_nothing(shared_apiserver: APIServerProcess, tmp_path: Path) -> None:
    """Many writers incrementing one counter with optimistic concurrency: every successful write counts."""
    server = shared_apiserver
    session, _ = _session(server)
    name = f"counter-{tmp_path.name[-8:]}".lower().replace("_", "-")
    url = f"{server.url}/api/v1/namespaces/default/configmaps"
    async with session:
        async with session.post(
            url, data=orjson.dumps({"metadata": {"name": name}, "data": {"n": "0"}})
        ) as resp:
            assert resp.status == 201

        async def increment(times: int) -> int:
            done = 0
            while done < times:
                async with session.get(f"{url}/{name}") as resp:
                    obj = await resp.json()
                obj["data"]["n"] = str(int(obj["data"]["n"]) + 1)
                async with session.put(f"{url}/{name}", data=orjson.dumps(obj)) as resp:
                    await resp.read()
                    if resp.status == 200:
                        done += 1
                    else:
                        assert resp.status == 409, resp.status
            return done

        results = await asyncio.gather(*(increment(10) for _ in range(12)))
        async with session.get(f"{url}/{name}") as resp:
            final = await resp.json()
    assert sum(results) == 120
    assert final["data"]["n"] == "120"
