"""The Python clients against vplane (spec §3, §7, §10; checklist M2, M7, S14, S21)."""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.parse
import warnings
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import kr8s.asyncio
import pytest
from kubernetes import client, config, dynamic
from kubernetes.client.rest import ApiException
from kubernetes_asyncio import client as aclient
from kubernetes_asyncio import config as aconfig
from kubernetes_asyncio import watch as awatch
from lightkube import ApiError, Client, KubeConfig
from lightkube.generic_resource import create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap

from harness import APIServerProcess, Kubectl

pytestmark = pytest.mark.integration

T = TypeVar("T")

GROUP = "pyclients.example.com"
CRD_NAME = f"widgets.{GROUP}"
CONTINUE_TOO_OLD = "The provided continue parameter is too old to display a consistent list result."

WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": CRD_NAME},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["pcw"]},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"size": {"type": "integer"}, "color": {"type": "string"}},
                            },
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    }
                },
            }
        ],
    },
}


# -- helpers ---------------------------------------------------------------------------------------


def _json(
    server: APIServerProcess, method: str, path: str, body: Any = None, **headers: str
) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    hdrs = {"Content-Type": "application/json", **headers} if data is not None else dict(headers)
    status, _, raw = server.request(method, path, data, hdrs)
    return status, json.loads(raw) if raw else None


def ensure_widget_crd(server: APIServerProcess) -> None:
    """Create the Widget CRD once per server and wait until its group-version is discovered."""
    status, body = _json(
        server, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", WIDGET_CRD
    )
    assert status in (201, 409), body
    deadline = time.monotonic() + 10
    while True:
        status, crd = _json(
            server, "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"
        )
        conditions = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions", [])}
        served, _ = _json(server, "GET", f"/apis/{GROUP}/v1")
        if conditions.get("Established") == "True" and served == 200:
            return
        assert time.monotonic() < deadline, f"CRD never became Established: {crd}"
        time.sleep(0.05)


def make_cm(server: APIServerProcess, ns: str, name: str, data: dict[str, str]) -> dict[str, Any]:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}
    status, obj = _json(server, "POST", f"/api/v1/namespaces/{ns}/configmaps", body)
    assert status == 201, obj
    result: dict[str, Any] = obj
    return result


@pytest.fixture
def api(shared_apiserver: APIServerProcess) -> Iterator[client.ApiClient]:
    api_client = config.new_client_from_config(config_file=str(shared_apiserver.kubeconfig))
    yield api_client
    api_client.close()


@pytest.fixture
def widgets(shared_apiserver: APIServerProcess) -> str:
    ensure_widget_crd(shared_apiserver)
    return GROUP


# -- M2: discovery ---------------------------------------------------------------------------------


def test_dynamic_client_finds_configmap_and_custom_kind(
    api: client.ApiClient, namespace: str, widgets: str, tmp_path: Path
) -> None:
    """DynamicClient.resources.get resolves ConfigMap and a CRD kind from legacy discovery and can use them."""
    dyn = dynamic.DynamicClient(api, cache_file=str(tmp_path / "discovery.json"))
    cms = dyn.resources.get(api_version="v1", kind="ConfigMap")
    assert cms.name == "configmaps"
    assert cms.namespaced is True
    assert cms.singular_name == "configmap"
    assert "cm" in cms.short_names
    created = cms.create(body={"metadata": {"name": "dyn"}, "data": {"a": "1"}}, namespace=namespace)
    assert created.metadata.name == "dyn"
    assert cms.get(name="dyn", namespace=namespace).data.a == "1"

    wd = dyn.resources.get(api_version=f"{widgets}/v1", kind="Widget")
    assert wd.name == "widgets"
    assert wd.singular_name == "widget"
    assert wd.short_names == ["pcw"]
    assert wd.namespaced is True
    assert wd.subresources["status"].name == "widgets/status"
    wd.create(
        body={
            "apiVersion": f"{widgets}/v1",
            "kind": "Widget",
            "metadata": {"name": "w1"},
            "spec": {"size": 3},
        },
        namespace=namespace,
    )
    listed = wd.get(namespace=namespace)
    assert [item.metadata.name for item in listed.items] == ["w1"]
    assert listed.items[0].spec.size == 3


def test_legacy_discovery_shapes(
    shared_apiserver: APIServerProcess, api: client.ApiClient, widgets: str
) -> None:
    """Every APIResource has singularName; every group's preferredVersion equals one of its versions."""
    status, groups = _json(shared_apiserver, "GET", "/apis")
    assert status == 200
    assert groups["kind"] == "APIGroupList"
    ours = [g for g in groups["groups"] if g["name"] == widgets]
    assert ours == [
        {
            "name": widgets,
            "versions": [{"groupVersion": f"{widgets}/v1", "version": "v1"}],
            "preferredVersion": {"groupVersion": f"{widgets}/v1", "version": "v1"},
        }
    ]

    def vanished(name: str) -> bool:
        """Other tests share this server and delete their CRDs: a group may go between two requests."""
        _, now = _json(shared_apiserver, "GET", "/apis")
        return name not in {g["name"] for g in now["groups"]}

    for group in groups["groups"]:
        assert group["preferredVersion"] in group["versions"], group
        assert set(group["preferredVersion"]) == {"groupVersion", "version"}
        status, single = _json(shared_apiserver, "GET", f"/apis/{group['name']}")
        if status == 404 and vanished(group["name"]):
            continue
        assert status == 200
        assert single["kind"] == "APIGroup"
        assert single["preferredVersion"] in single["versions"]
    status, core = _json(shared_apiserver, "GET", "/api")
    assert status == 200
    assert core["kind"] == "APIVersions"
    assert core["versions"] == ["v1"]
    paths = ["/api/v1"] + [f"/apis/{v['groupVersion']}" for g in groups["groups"] for v in g["versions"]]
    for path in paths:
        status, resources = _json(shared_apiserver, "GET", path)
        if status == 404 and path.startswith("/apis/") and vanished(path.split("/")[2]):
            continue
        assert status == 200, path
        assert resources["kind"] == "APIResourceList"
        for res in resources["resources"]:
            assert "singularName" in res, (path, res)
            assert {"name", "namespaced", "kind", "verbs"} <= set(res), (path, res)
    status, wres = _json(shared_apiserver, "GET", f"/apis/{widgets}/v1")
    by_name = {r["name"]: r for r in wres["resources"]}
    assert by_name["widgets"]["singularName"] == "widget"
    assert by_name["widgets"]["shortNames"] == ["pcw"]
    assert by_name["widgets/status"]["singularName"] == ""
    assert sorted(by_name["widgets/status"]["verbs"]) == ["get", "patch", "update"]
    # the typed models validate these documents (singular_name must not be None)
    core_resources = client.CoreV1Api(api).get_api_resources()
    assert {r.name: r.singular_name for r in core_resources.resources}["configmaps"] == "configmap"
    preferred = {g.name: g.preferred_version.version for g in client.ApisApi(api).get_api_versions().groups}
    assert preferred[widgets] == "v1"


# -- M7: lists and pagination ----------------------------------------------------------------------


def test_list_pagination_with_limit_and_continue(
    shared_apiserver: APIServerProcess, api: client.ApiClient, namespace: str, kubectl: Kubectl
) -> None:
    """limit/_continue pages through a snapshot; remaining_item_count counts what is left; the last page has no token."""
    for name in ("a", "b", "c"):
        make_cm(shared_apiserver, namespace, name, {"n": name})
    v1 = client.CoreV1Api(api)
    first = v1.list_namespaced_config_map(namespace, limit=1)
    assert [i.metadata.name for i in first.items] == ["a"]
    assert first.metadata._continue
    assert first.metadata.remaining_item_count == 2
    # writes after the first page do not show up in later pages (they read the first page's snapshot),
    # and neither do writes elsewhere in the store change the count of what is left
    make_cm(shared_apiserver, namespace, "aa", {"n": "late"})
    kubectl.run("create", "namespace", f"{namespace}-x")
    second = v1.list_namespaced_config_map(namespace, limit=1, _continue=first.metadata._continue)
    assert [i.metadata.name for i in second.items] == ["b"]
    assert second.metadata.resource_version == first.metadata.resource_version
    assert second.metadata._continue
    assert second.metadata.remaining_item_count == 1
    third = v1.list_namespaced_config_map(namespace, limit=1, _continue=second.metadata._continue)
    assert [i.metadata.name for i in third.items] == ["c"]
    assert not third.metadata._continue
    assert third.metadata.remaining_item_count is None
    assert third.metadata.resource_version == first.metadata.resource_version


def test_empty_list_has_items_array(
    shared_apiserver: APIServerProcess, api: client.ApiClient, namespace: str
) -> None:
    """An empty list carries "items": [] (never null or absent) and a resourceVersion."""
    status, _, raw = shared_apiserver.request("GET", f"/api/v1/namespaces/{namespace}/configmaps")
    assert status == 200
    doc = json.loads(raw)
    assert doc["items"] == []
    assert doc["kind"] == "ConfigMapList"
    assert doc["apiVersion"] == "v1"
    assert int(doc["metadata"]["resourceVersion"]) > 0
    result = client.CoreV1Api(api).list_namespaced_config_map(namespace)
    assert result.items == []
    status, _, raw = shared_apiserver.request(
        "GET", f"/api/v1/namespaces/{namespace}/configmaps?labelSelector=nothing%3Dhere&limit=5"
    )
    assert json.loads(raw)["items"] == []


# -- S14: resourceVersionMatch ---------------------------------------------------------------------


def test_list_resource_version_match_exact_returns_old_state(api: client.ApiClient, namespace: str) -> None:
    """resourceVersionMatch=Exact at an older RV lists the objects as they were at that RV."""
    v1 = client.CoreV1Api(api)
    old = v1.create_namespaced_config_map(namespace, {"metadata": {"name": "e"}, "data": {"v": "old"}})
    old_rv = old.metadata.resource_version
    v1.patch_namespaced_config_map("e", namespace, {"data": {"v": "new"}})
    v1.create_namespaced_config_map(namespace, {"metadata": {"name": "later"}, "data": {}})
    exact = v1.list_namespaced_config_map(namespace, resource_version=old_rv, resource_version_match="Exact")
    assert exact.metadata.resource_version == old_rv
    assert [(i.metadata.name, i.data["v"], i.metadata.resource_version) for i in exact.items] == [
        ("e", "old", old_rv)
    ]
    now = v1.list_namespaced_config_map(namespace)
    assert sorted((i.metadata.name, (i.data or {}).get("v")) for i in now.items) == [
        ("e", "new"),
        ("later", None),
    ]


def test_list_resource_version_match_not_older_than(api: client.ApiClient, namespace: str) -> None:
    """resourceVersionMatch=NotOlderThan returns a list at least as new as the given RV."""
    v1 = client.CoreV1Api(api)
    created = v1.create_namespaced_config_map(namespace, {"metadata": {"name": "n"}, "data": {"v": "1"}})
    updated = v1.patch_namespaced_config_map("n", namespace, {"data": {"v": "2"}})
    result = v1.list_namespaced_config_map(
        namespace, resource_version=created.metadata.resource_version, resource_version_match="NotOlderThan"
    )
    assert int(result.metadata.resource_version) >= int(created.metadata.resource_version)
    assert [i.metadata.name for i in result.items] == ["n"]
    assert int(result.items[0].metadata.resource_version) >= int(created.metadata.resource_version)
    latest = v1.list_namespaced_config_map(
        namespace, resource_version=updated.metadata.resource_version, resource_version_match="NotOlderThan"
    )
    assert latest.items[0].data == {"v": "2"}
    assert int(latest.metadata.resource_version) >= int(updated.metadata.resource_version)


def test_stale_continue_token_after_compaction_is_410(apiserver: APIServerProcess) -> None:
    """A continue token whose snapshot RV has been compacted answers 410 Expired (python client: ApiException)."""
    small_server = apiserver.start(history_window=5, compact_interval_seconds=0.2)
    ns = "pg-" + os.urandom(3).hex()
    status, body = _json(small_server, "POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    assert status == 201, body
    for name in ("a", "b", "c"):
        make_cm(small_server, ns, name, {})
    api_client = config.new_client_from_config(config_file=str(small_server.kubeconfig))
    try:
        v1 = client.CoreV1Api(api_client)
        first = v1.list_namespaced_config_map(ns, limit=1)
        token = first.metadata._continue
        assert token
        snapshot = first.metadata.resource_version
        for i in range(10):
            make_cm(small_server, ns, f"more-{i}", {})
        deadline = time.monotonic() + 10
        query = urllib.parse.urlencode({"resourceVersion": snapshot, "resourceVersionMatch": "Exact"})
        while small_server.request("GET", f"/api/v1/namespaces/{ns}/configmaps?{query}")[0] != 410:
            assert time.monotonic() < deadline, "the first page's revision was never compacted"
            time.sleep(0.1)
        status, headers, raw = small_server.request(
            "GET",
            f"/api/v1/namespaces/{ns}/configmaps?"
            + urllib.parse.urlencode({"limit": "1", "continue": token}),
        )
        assert status == 410
        assert headers["Content-Type"] == "application/json"
        doc = json.loads(raw)
        assert (doc["kind"], doc["status"], doc["reason"], doc["code"]) == (
            "Status",
            "Failure",
            "Expired",
            410,
        )
        assert doc["message"].startswith(CONTINUE_TOO_OLD)
        with pytest.raises(ApiException) as info:
            v1.list_namespaced_config_map(ns, limit=1, _continue=token)
        assert info.value.status == 410
    finally:
        api_client.close()


# -- lightkube -------------------------------------------------------------------------------------


@pytest.fixture
def lk(shared_apiserver: APIServerProcess) -> Iterator[Client]:
    lk_client = Client(
        config=KubeConfig.from_file(str(shared_apiserver.kubeconfig)), field_manager="lk-tests"
    )
    yield lk_client
    lk_client.close()


def test_lightkube_apply_get_list_delete(lk: Client, namespace: str) -> None:
    """lightkube: server-side apply with a field manager creates then updates; get, list and delete work."""
    cm = ConfigMap(metadata=ObjectMeta(name="lk", namespace=namespace), data={"a": "1"})
    created = lk.apply(cm, field_manager="t")
    assert created.data == {"a": "1"}
    assert created.metadata.managedFields[0].manager == "t"
    assert created.metadata.managedFields[0].operation == "Apply"
    updated = lk.apply(
        ConfigMap(metadata=ObjectMeta(name="lk", namespace=namespace), data={"a": "2", "b": "3"}),
        field_manager="t",
    )
    assert updated.data == {"a": "2", "b": "3"}
    got = lk.get(ConfigMap, "lk", namespace=namespace)
    assert got.data == {"a": "2", "b": "3"}
    assert got.metadata.resourceVersion == updated.metadata.resourceVersion
    lk.create(ConfigMap(metadata=ObjectMeta(name="lk2", namespace=namespace), data={}))
    names = sorted(obj.metadata.name for obj in lk.list(ConfigMap, namespace=namespace, chunk_size=1))
    assert names == ["lk", "lk2"]
    lk.delete(ConfigMap, "lk", namespace=namespace)
    assert [obj.metadata.name for obj in lk.list(ConfigMap, namespace=namespace)] == ["lk2"]


def test_lightkube_not_found_is_api_error(lk: Client, namespace: str) -> None:
    """A 404 becomes lightkube's ApiError carrying the Status (needs Content-Type exactly application/json)."""
    with pytest.raises(ApiError) as info:
        lk.get(ConfigMap, "nope", namespace=namespace)
    status = info.value.status
    assert status.code == 404
    assert status.reason == "NotFound"
    assert status.message == 'configmaps "nope" not found'
    assert status.details.name == "nope"
    assert status.details.kind == "configmaps"


def test_lightkube_watch_and_conflict_errors(lk: Client, namespace: str) -> None:
    """lightkube watches from a list RV (every event object has a resourceVersion); AlreadyExists is an ApiError."""
    lk.create(ConfigMap(metadata=ObjectMeta(name="lw", namespace=namespace), data={"a": "1"}))
    with pytest.raises(ApiError) as info:
        lk.create(ConfigMap(metadata=ObjectMeta(name="lw", namespace=namespace), data={}))
    assert (info.value.status.code, info.value.status.reason) == (409, "AlreadyExists")
    assert info.value.status.message == 'configmaps "lw" already exists'
    listing = lk.list(ConfigMap, namespace=namespace)
    assert [cm.metadata.name for cm in listing] == ["lw"]
    rv = listing.resourceVersion
    lk.patch(ConfigMap, "lw", {"data": {"a": "2"}}, namespace=namespace)
    lk.delete(ConfigMap, "lw", namespace=namespace)
    seen = []
    for event, obj in lk.watch(ConfigMap, namespace=namespace, resource_version=rv, server_timeout=5):
        seen.append((event, obj.metadata.name, obj.data["a"]))
        assert int(obj.metadata.resourceVersion) > int(rv)
        if event == "DELETED":
            break
    assert seen == [("MODIFIED", "lw", "2"), ("DELETED", "lw", "2")]


def test_lightkube_generic_resource_for_crd(lk: Client, namespace: str, widgets: str) -> None:
    """lightkube generic resources create, apply and list custom objects."""
    Widget = create_namespaced_resource(widgets, "v1", "Widget", "widgets")
    lk.create(Widget(metadata=ObjectMeta(name="g1", namespace=namespace), spec={"size": 1}))
    applied = lk.apply(
        Widget(metadata=ObjectMeta(name="g2", namespace=namespace), spec={"size": 2, "color": "red"}),
        field_manager="t",
    )
    assert applied.spec == {"size": 2, "color": "red"}
    listed = sorted((w.metadata.name, w.spec["size"]) for w in lk.list(Widget, namespace=namespace))
    assert listed == [("g1", 1), ("g2", 2)]


# -- kr8s and kubernetes_asyncio ------------------------------------------------------------------
#
# These drive the async clients in plain tests: each scenario runs with asyncio.run in a worker thread, so
# it owns its loop and closes its clients before that loop ends, and the main thread's loop is untouched.


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result(timeout=60)


async def _kr8s_api(server: APIServerProcess) -> Any:
    # kr8s 0.20 warns about any server newer than 1.35, a real 1.36 one included; the server reports 1.36.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Kubernetes version v1\.36\.\d+ is not supported")
        return await kr8s.asyncio.api(kubeconfig=str(server.kubeconfig))


async def _kr8s_close(api: Any) -> None:
    if api._session is not None:  # kr8s has no public close; its httpx client would outlive the loop
        await api._session.aclose()


def test_kr8s_widgets_get_list_create_patch(
    shared_apiserver: APIServerProcess, namespace: str, widgets: str
) -> None:
    """kr8s resolves a CRD kind through discovery, creates, lists with selectors and patches widgets."""

    async def scenario() -> None:
        api = await _kr8s_api(shared_apiserver)
        try:
            Widget = kr8s.asyncio.objects.new_class(kind="Widget", version=f"{widgets}/v1", namespaced=True)
            for name, color in (("k1", "red"), ("k2", "blue")):
                w = await Widget(
                    {
                        "metadata": {"name": name, "namespace": namespace, "labels": {"color": color}},
                        "spec": {"size": 1},
                    },
                    api=api,
                )
                await w.create()
            got = [w async for w in api.async_get(f"widgets.{widgets}", namespace=namespace)]
            assert sorted(w.name for w in got) == ["k1", "k2"]
            red = [
                w
                async for w in api.async_get(
                    f"widgets.{widgets}", namespace=namespace, label_selector={"color": "red"}
                )
            ]
            assert [w.name for w in red] == ["k1"]
            single = [w async for w in api.async_get(f"widgets.{widgets}", "k2", namespace=namespace)]
            assert [w.name for w in single] == ["k2"]
            k1 = red[0]
            await k1.patch({"spec": {"size": 5}})
            assert k1.spec["size"] == 5
            await k1.patch([{"op": "replace", "path": "/spec/size", "value": 6}], type="json")
            assert k1.spec["size"] == 6
            await k1.refresh()
            assert k1.spec["size"] == 6
            await k1.delete()
            remaining = [w.name async for w in api.async_get(f"widgets.{widgets}", namespace=namespace)]
            assert remaining == ["k2"]
        finally:
            await _kr8s_close(api)

    run_async(scenario())


def test_kr8s_watch_from_resource_version(shared_apiserver: APIServerProcess, namespace: str) -> None:
    """kr8s watches ConfigMaps from a list RV and builds an object from every event (no stray bookmarks)."""
    rv = make_cm(shared_apiserver, namespace, "kw", {"a": "1"})["metadata"]["resourceVersion"]
    status, _ = _json(
        shared_apiserver,
        "PATCH",
        f"/api/v1/namespaces/{namespace}/configmaps/kw",
        {"data": {"a": "2"}},
        **{"Content-Type": "application/merge-patch+json"},
    )
    assert status == 200
    make_cm(shared_apiserver, namespace, "kw2", {"a": "3"})

    async def scenario() -> list[tuple[str, str, str]]:
        api = await _kr8s_api(shared_apiserver)
        seen: list[tuple[str, str, str]] = []
        try:
            async for event, obj in api.async_watch("configmaps", namespace=namespace, since=rv):
                seen.append((event, obj.name, obj.raw["data"]["a"]))
                if len(seen) == 2:
                    break
        finally:
            await _kr8s_close(api)
        return seen

    assert run_async(scenario()) == [("MODIFIED", "kw", "2"), ("ADDED", "kw2", "3")]


def test_kr8s_configmaps_by_short_name(shared_apiserver: APIServerProcess, namespace: str) -> None:
    """kr8s lists ConfigMaps by short name and field selector."""
    make_cm(shared_apiserver, namespace, "s1", {"a": "1"})
    make_cm(shared_apiserver, namespace, "s2", {"a": "2"})

    async def scenario() -> list[str]:
        api = await _kr8s_api(shared_apiserver)
        try:
            return [
                cm.name
                async for cm in api.async_get("cm", namespace=namespace, field_selector="metadata.name=s2")
            ]
        finally:
            await _kr8s_close(api)

    assert run_async(scenario()) == ["s2"]


def test_kubernetes_asyncio_watch(shared_apiserver: APIServerProcess, namespace: str) -> None:
    """kubernetes_asyncio's Watch streams typed ADDED/MODIFIED/DELETED events from a list RV."""

    async def scenario() -> list[tuple[str, str]]:
        api_client = await aconfig.new_client_from_config(config_file=str(shared_apiserver.kubeconfig))
        async with api_client:
            v1 = aclient.CoreV1Api(api_client)
            await v1.create_namespaced_config_map(namespace, {"metadata": {"name": "aw"}, "data": {"a": "1"}})
            listed = await v1.list_namespaced_config_map(namespace)
            assert [i.metadata.name for i in listed.items] == ["aw"]
            rv = listed.metadata.resource_version
            await v1.patch_namespaced_config_map("aw", namespace, {"data": {"a": "2"}})
            await v1.create_namespaced_config_map(namespace, {"metadata": {"name": "aw2"}, "data": {}})
            await v1.delete_namespaced_config_map("aw", namespace)
            seen = []
            w = awatch.Watch()
            async with w.stream(
                v1.list_namespaced_config_map, namespace, resource_version=rv, timeout_seconds=5
            ) as stream:
                async for event in stream:
                    seen.append((event["type"], event["object"].metadata.name))
                    if len(seen) == 3:
                        w.stop()
        # The stopped watch's TLS connection closes after the session does, in the loop's next turns (aiohttp
        # advises a short wait before the loop ends); without it the socket was once left unclosed.
        await asyncio.sleep(0.25)
        return seen

    assert run_async(scenario()) == [("MODIFIED", "aw"), ("ADDED", "aw2"), ("DELETED", "aw")]
