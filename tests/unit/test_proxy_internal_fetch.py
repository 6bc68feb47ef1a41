"""The API server's own discovery check of a proxied group/version (``ResourceProxy.fetch``) waits for the
replica's first peer list within the discovery budget, so a check made right after the APIService is
registered reads the target instead of counting a ``no_peer`` fallback; with no list in time, it falls back
as before once the budget is spent."""

from __future__ import annotations

import asyncio

from test_proxy_upstream import FakeTarget, ok

from vplane.kube.proxyconfig import ProxyTarget
from vplane.proxy.handler import ResourceProxy
from vplane.proxy.metrics import ProxyMetrics
from vplane.proxy.peers import Host
from vplane.proxy.settings import ProxySettings

TARGET = ProxyTarget("example.com", "v1", "target", "default", "owned", ("myresources",))
PEER = Host(peer_id="n-t0", name="target-0", key="n-t0|1|127.0.0.1:1")
LIVE = (
    b'{"kind":"APIResourceList","groupVersion":"example.com/v1","resources":[{"name":"myresources",'
    b'"singularName":"myresource","namespaced":true,"kind":"MyResource","verbs":["get","list"]}]}'
)


def make(
    target: FakeTarget, budget: float, *, cap: float = 60.0, proxied: ProxyTarget = TARGET
) -> tuple[ResourceProxy, ProxyMetrics]:
    async def namespace_exists(namespace: str) -> bool:
        return True

    metrics = ProxyMetrics(list)
    proxy = ResourceProxy(
        proxied,
        client_name="client",
        client_project="default",
        access_key=lambda: "k" * 64,
        dial=target.dial,
        namespace_exists=namespace_exists,
        metrics=metrics,
        settings=ProxySettings(discovery_timeout_seconds=budget, request_timeout_seconds=cap),
    )
    return proxy, metrics


def fallbacks(metrics: ProxyMetrics) -> str:
    return "\n".join(
        line
        for line in metrics.render().decode().splitlines()
        if line.startswith("vcluster_proxy_discovery_fallbacks_total{")
    )


async def test_the_check_waits_for_the_first_peer_list() -> None:
    target = FakeTarget(ok(LIVE, "Content-Type: application/json"))
    proxy, metrics = make(target, budget=5.0)
    check = asyncio.create_task(proxy.fetch("/apis/example.com/v1"))
    await asyncio.sleep(0.05)
    assert not check.done()  # no peer list yet: waiting, not answered with the fallback
    proxy.publish([PEER])
    status, body = await check
    assert (status, body) == (200, LIVE)
    assert target.dials == 1
    assert fallbacks(metrics) == ""


async def test_without_a_peer_list_the_check_falls_back_once_the_budget_is_spent() -> None:
    target = FakeTarget()
    proxy, metrics = make(target, budget=0.2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    status, body = await proxy.fetch("/apis/example.com/v1")
    assert loop.time() - started >= 0.19  # the budget was waited out, not skipped
    assert status == 200 and b"myresources" in body  # the synthetic document
    assert target.dials == 0
    assert 'reason="no_peer"' in fallbacks(metrics)


async def test_a_discovery_answer_past_its_budget_falls_back_as_upstream_error() -> None:
    """A target that takes the discovery request and never answers: the fallback after the discovery budget,
    counted with the fallback's reason on both series, not as the request deadline (no termination)."""
    target = FakeTarget(b"HTTP/1.1 200 OK\r\n")  # and then nothing
    proxy, metrics = make(target, budget=0.2)
    proxy.publish([PEER])
    status, body = await asyncio.wait_for(proxy.fetch("/apis/example.com/v1"), 5)
    assert status == 200 and b"myresources" in body  # the synthetic document
    assert 'reason="upstream_error"' in fallbacks(metrics)
    text = metrics.render().decode()
    requests = [line for line in text.splitlines() if line.startswith("vcluster_proxy_request_total{")]
    assert len(requests) == 1 and 'reason="upstream_error"' in requests[0] and 'code="200"' in requests[0]
    assert "vcluster_proxy_request_terminations_total{" not in text


async def test_the_startup_probe_of_a_target_that_never_answers_fails_at_the_cap() -> None:
    """The startup probe is capped as requests are: a target that takes the connection and never answers
    fails it (the runbook's "initial probe of proxy target failed" follows) instead of holding it."""
    target = FakeTarget(b"HTTP/1.1 200 OK\r\n")  # and then nothing, not even the end of its headers
    proxy, _ = make(target, budget=5.0, cap=0.2)
    proxy.publish([PEER])
    assert await asyncio.wait_for(proxy.probe(), 5) is False
