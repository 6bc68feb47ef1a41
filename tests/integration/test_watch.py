"""Watch protocol conformance (spec §6, checklist M10-M13): RV semantics, 410, bookmarks, WatchList, ordering."""

from __future__ import annotations

import http.client
import json
import os
import queue
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from harness import APIServerProcess, Kubectl

pytestmark = pytest.mark.integration

# -- helpers ---------------------------------------------------------------------------------------


def _uid() -> str:
    return os.urandom(3).hex()


def open_stream(server: APIServerProcess, path: str, read_timeout: float = 15.0) -> http.client.HTTPResponse:
    """A raw GET whose body is read line by line (the status is checked by the caller)."""
    req = urllib.request.Request(server.url + path, headers={"Authorization": f"Bearer {server.token}"})
    try:
        resp: http.client.HTTPResponse = urllib.request.urlopen(
            req, context=server.ssl_context(), timeout=read_timeout
        )
    except urllib.error.HTTPError as exc:
        return exc  # type: ignore[return-value]
    return resp


def next_event(resp: http.client.HTTPResponse) -> dict[str, Any] | None:
    """The next watch event, or None when the server closed the stream."""
    line = resp.readline()
    if not line:
        return None
    assert line.endswith(b"\n"), line
    event: dict[str, Any] = json.loads(line)
    return event


def rest_of_stream(resp: http.client.HTTPResponse) -> list[dict[str, Any]]:
    events = []
    while (event := next_event(resp)) is not None:
        events.append(event)
    resp.close()
    return events


def cm_path(ns: str, query: dict[str, str] | None = None, name: str = "") -> str:
    path = f"/api/v1/namespaces/{ns}/configmaps" + (f"/{name}" if name else "")
    if query:
        path += "?" + urllib.parse.urlencode(query)
    return path


def watch_path(ns: str, **query: str) -> str:
    return cm_path(ns, {"watch": "true", **query})


def summary(event: dict[str, Any]) -> tuple[str, str]:
    return event["type"], event["object"]["metadata"].get("name", "")


def list_rv(server: APIServerProcess, ns: str) -> str:
    status, _, body = server.request("GET", cm_path(ns))
    assert status == 200, body
    rv: str = json.loads(body)["metadata"]["resourceVersion"]
    return rv


def put_cm(
    server: APIServerProcess, ns: str, name: str, data: dict[str, str], labels: dict[str, str] | None = None
) -> dict[str, Any]:
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels or {}},
        "data": data,
    }
    status, _, raw = server.request(
        "POST", cm_path(ns), json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    assert status == 201, raw
    obj: dict[str, Any] = json.loads(raw)
    return obj


def merge_patch(server: APIServerProcess, ns: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
    status, _, raw = server.request(
        "PATCH",
        cm_path(ns, name=name),
        json.dumps(patch).encode(),
        {"Content-Type": "application/merge-patch+json"},
    )
    assert status == 200, raw
    obj: dict[str, Any] = json.loads(raw)
    return obj


def delete_cm(server: APIServerProcess, ns: str, name: str) -> None:
    status, _, raw = server.request("DELETE", cm_path(ns, name=name))
    assert status == 200, raw


@pytest.fixture
def api(shared_apiserver: APIServerProcess) -> Iterator[client.ApiClient]:
    api_client = config.new_client_from_config(config_file=str(shared_apiserver.kubeconfig))
    yield api_client
    api_client.close()


@pytest.fixture(scope="module")
def small_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[APIServerProcess]:
    """A server that forgets history fast and sends bookmarks often (M11, M12)."""
    server = APIServerProcess(
        tmp_path_factory.mktemp("small") / "apiserver",
        {"history_window": 5, "compact_interval_seconds": 0.2, "bookmark_interval_seconds": 0.5},
    )
    server.start()
    yield server
    server.stop()


def make_namespace(server: APIServerProcess) -> str:
    name = "w-" + _uid()
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    status, _, raw = server.request(
        "POST", "/api/v1/namespaces", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    assert status == 201, raw
    return name


# -- M10: watch basics -----------------------------------------------------------------------------


@pytest.mark.parametrize("rv", ["", "0"])
def test_watch_without_resource_version_lists_then_streams_changes(
    shared_apiserver: APIServerProcess, namespace: str, rv: str
) -> None:
    """RV unset or "0": ADDED for every existing object, then live ADDED, MODIFIED and DELETED."""
    server = shared_apiserver
    put_cm(server, namespace, "a", {"k": "1"})
    put_cm(server, namespace, "b", {"k": "1"})
    query = {"timeoutSeconds": "10"} | ({"resourceVersion": rv} if rv else {})
    resp = open_stream(server, watch_path(namespace, **query))
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "application/json"
    initial = [next_event(resp), next_event(resp)]
    assert sorted(summary(e) for e in initial if e) == [("ADDED", "a"), ("ADDED", "b")]
    created = put_cm(server, namespace, "c", {"k": "1"})
    modified = merge_patch(server, namespace, "c", {"data": {"k": "2"}})
    delete_cm(server, namespace, "c")
    events = [next_event(resp) for _ in range(3)]
    resp.close()
    assert [summary(e) for e in events if e] == [("ADDED", "c"), ("MODIFIED", "c"), ("DELETED", "c")]
    added, mod, deleted = (e for e in events if e)
    assert added["object"]["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert mod["object"]["metadata"]["resourceVersion"] == modified["metadata"]["resourceVersion"]
    assert mod["object"]["data"] == {"k": "2"}


def test_deleted_event_carries_last_state_with_deletion_resource_version(
    shared_apiserver: APIServerProcess, namespace: str
) -> None:
    """DELETED carries the object's last state, stamped with the deletion's (newer) resourceVersion."""
    server = shared_apiserver
    put_cm(server, namespace, "gone", {"k": "1"}, labels={"app": "x"})
    last = merge_patch(server, namespace, "gone", {"data": {"k": "final"}})
    start = last["metadata"]["resourceVersion"]
    resp = open_stream(server, watch_path(namespace, resourceVersion=start, timeoutSeconds="10"))
    delete_cm(server, namespace, "gone")
    after_delete = list_rv(server, namespace)
    event = next_event(resp)
    resp.close()
    assert event is not None and event["type"] == "DELETED"
    obj = event["object"]
    assert obj["data"] == {"k": "final"}
    assert obj["metadata"]["uid"] == last["metadata"]["uid"]
    assert obj["metadata"]["labels"] == {"app": "x"}
    assert int(start) < int(obj["metadata"]["resourceVersion"]) <= int(after_delete)


def test_watch_from_resource_version_sends_only_later_changes(
    shared_apiserver: APIServerProcess, namespace: str
) -> None:
    """RV=N: no synthetic ADDED for existing objects, only the changes after N, in order."""
    server = shared_apiserver
    put_cm(server, namespace, "a", {"k": "1"})
    put_cm(server, namespace, "b", {"k": "1"})
    rv = list_rv(server, namespace)
    merge_patch(server, namespace, "a", {"data": {"k": "2"}})
    resp = open_stream(server, watch_path(namespace, resourceVersion=rv, timeoutSeconds="10"))
    assert resp.status == 200
    first = next_event(resp)
    assert first is not None and summary(first) == ("MODIFIED", "a")
    assert first["object"]["data"] == {"k": "2"}
    put_cm(server, namespace, "c", {"k": "1"})
    second = next_event(resp)
    resp.close()
    assert second is not None and summary(second) == ("ADDED", "c")
    assert int(second["object"]["metadata"]["resourceVersion"]) > int(
        first["object"]["metadata"]["resourceVersion"]
    )


def test_watch_timeout_seconds_closes_the_stream_cleanly(
    shared_apiserver: APIServerProcess, namespace: str, api: client.ApiClient
) -> None:
    """timeoutSeconds ends the stream with a clean end of body; the python client's stream just stops."""
    server = shared_apiserver
    put_cm(server, namespace, "a", {"k": "1"})
    resp = open_stream(server, watch_path(namespace, timeoutSeconds="1"))
    events = rest_of_stream(resp)  # http.client raises IncompleteRead on an unclean chunked close
    assert [summary(e) for e in events] == [("ADDED", "a")]
    v1 = client.CoreV1Api(api)
    seen = [
        (e["type"], e["object"].metadata.name)
        for e in watch.Watch().stream(v1.list_namespaced_config_map, namespace, timeout_seconds=1)
    ]
    assert seen == [("ADDED", "a")]


def test_python_client_watch_streams_typed_events(
    shared_apiserver: APIServerProcess, namespace: str, api: client.ApiClient
) -> None:
    """The kubernetes client's Watch yields typed V1ConfigMap objects for later changes from a list RV."""
    v1 = client.CoreV1Api(api)
    v1.create_namespaced_config_map(namespace, {"metadata": {"name": "p1"}, "data": {"a": "1"}})
    rv = v1.list_namespaced_config_map(namespace).metadata.resource_version
    v1.patch_namespaced_config_map("p1", namespace, {"data": {"a": "2"}})
    v1.delete_namespaced_config_map("p1", namespace)
    seen = []
    w = watch.Watch()
    for event in w.stream(v1.list_namespaced_config_map, namespace, resource_version=rv, timeout_seconds=5):
        seen.append((event["type"], event["object"].metadata.name, (event["object"].data or {}).get("a")))
        if event["type"] == "DELETED":
            w.stop()
    assert seen == [("MODIFIED", "p1", "2"), ("DELETED", "p1", "2")]


# -- M11: 410 after compaction ---------------------------------------------------------------------


def _wait_compacted(server: APIServerProcess, ns: str) -> None:
    """Write past the history window, then poll until revision 1 is gone (Exact list answers 410)."""
    for i in range(12):
        put_cm(server, ns, f"fill-{i}", {"i": str(i)})
    deadline = time.monotonic() + 10
    while True:
        status, _, _ = server.request(
            "GET", cm_path(ns, {"resourceVersion": "1", "resourceVersionMatch": "Exact"})
        )
        if status == 410:
            return
        assert time.monotonic() < deadline, f"revision 1 was never compacted (last list status {status})"
        time.sleep(0.1)


def test_watch_too_old_resource_version_python_client_raises_410(small_server: APIServerProcess) -> None:
    """After compaction, watching from RV 1 with the python client raises ApiException(410)."""
    ns = make_namespace(small_server)
    _wait_compacted(small_server, ns)
    api_client = config.new_client_from_config(config_file=str(small_server.kubeconfig))
    try:
        v1 = client.CoreV1Api(api_client)
        with pytest.raises(ApiException) as info:
            list(
                watch.Watch().stream(
                    v1.list_namespaced_config_map, ns, resource_version="1", timeout_seconds=2
                )
            )
    finally:
        api_client.close()
    assert info.value.status == 410
    assert "Expired" in str(info.value.reason)


def test_watch_too_old_resource_version_raw_is_200_with_one_error_event(
    small_server: APIServerProcess,
) -> None:
    """Too-old RV: HTTP 200, exactly one ERROR event (Status code 410, reason Expired), then the stream ends."""
    ns = make_namespace(small_server)
    _wait_compacted(small_server, ns)
    resp = open_stream(small_server, watch_path(ns, resourceVersion="1", timeoutSeconds="5"))
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "application/json"
    events = rest_of_stream(resp)
    assert len(events) == 1, events
    assert events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert status["kind"] == "Status"
    assert status["apiVersion"] == "v1"
    assert status["status"] == "Failure"
    assert status["code"] == 410
    assert status["reason"] == "Expired"
    assert status["message"].startswith("too old resource version: 1 (")


# -- M12: bookmarks --------------------------------------------------------------------------------


def test_no_bookmarks_unless_requested(small_server: APIServerProcess) -> None:
    """Without allowWatchBookmarks no BOOKMARK is sent, even across several bookmark intervals."""
    ns = make_namespace(small_server)
    put_cm(small_server, ns, "a", {"k": "1"})
    rv = list_rv(small_server, ns)
    resp = open_stream(small_server, watch_path(ns, resourceVersion=rv, timeoutSeconds="2"))
    assert rest_of_stream(resp) == []
    resp = open_stream(small_server, watch_path(ns, timeoutSeconds="2"))
    assert [e["type"] for e in rest_of_stream(resp)] == ["ADDED"]


def test_bookmark_with_allow_watch_bookmarks_has_only_rv(small_server: APIServerProcess) -> None:
    """With allowWatchBookmarks=true a BOOKMARK arrives holding only kind, apiVersion and metadata.resourceVersion."""
    ns = make_namespace(small_server)
    put_cm(small_server, ns, "a", {"k": "1"})
    rv = list_rv(small_server, ns)
    resp = open_stream(
        small_server, watch_path(ns, resourceVersion=rv, allowWatchBookmarks="true", timeoutSeconds="3")
    )
    events = rest_of_stream(resp)
    bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
    assert bookmarks, events
    assert {e["type"] for e in events} == {"BOOKMARK"}
    for bookmark in bookmarks:
        obj = bookmark["object"]
        assert set(obj) == {"kind", "apiVersion", "metadata"}
        assert obj["kind"] == "ConfigMap"
        assert obj["apiVersion"] == "v1"
        assert set(obj["metadata"]) == {"resourceVersion"}
        assert int(obj["metadata"]["resourceVersion"]) >= int(rv)


class KubectlStream:
    """A long-running kubectl whose stdout lines are collected by a thread, so tests can wait for rows."""

    def __init__(self, kubectl: Kubectl, *args: str) -> None:
        self.proc = kubectl.popen(*args)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self.pumper = threading.Thread(target=self._pump, daemon=True)
        self.pumper.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, prefix: str, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while not any(line.startswith(prefix) for line in self.seen):
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line starting {prefix!r} in {self.seen}") from None
            if line is None:
                self.close()
                err = self.proc.stderr.read() if self.proc.stderr else ""
                raise AssertionError(f"kubectl exited before {prefix!r}: {self.seen} {err}")
            self.seen.append(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(10)
        self.pumper.join(10)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.proc.stdout.close()
        self.proc.stderr.close()


def _bookmark_intervals_pass(server: APIServerProcess, ns: str, count: int) -> None:
    """Wait until a bookmark-enabled watch has received ``count`` periodic BOOKMARKs (intervals really passed)."""
    rv = list_rv(server, ns)
    resp = open_stream(
        server, watch_path(ns, resourceVersion=rv, allowWatchBookmarks="true", timeoutSeconds="10")
    )
    got = 0
    while got < count:
        event = next_event(resp)
        assert event is not None, "watch ended before the bookmarks arrived"
        got += event["type"] == "BOOKMARK"
    resp.close()


def test_kubectl_get_watch_prints_rows_without_blank_bookmark_rows(
    small_server: APIServerProcess, kubectl_path: str, tmp_path: Path
) -> None:
    """`kubectl get cm -w` prints a row per change and never a blank row (no unrequested bookmarks)."""
    ns = make_namespace(small_server)
    put_cm(small_server, ns, "first", {"k": "1"})
    stream = KubectlStream(
        Kubectl(kubectl_path, small_server.kubeconfig, tmp_path / "cache"), "get", "cm", "-n", ns, "-w"
    )
    try:
        stream.wait_for("first ")
        put_cm(small_server, ns, "second", {"k": "1", "j": "2"})
        stream.wait_for("second ")
        _bookmark_intervals_pass(small_server, ns, 2)
        put_cm(small_server, ns, "third", {})  # flushes anything kubectl printed meanwhile
        stream.wait_for("third ")
    finally:
        stream.close()
    seen = stream.seen
    assert seen[0].split() == ["NAME", "DATA", "AGE"]
    assert [line for line in seen if not line.strip()] == []
    rows = [line.split()[:2] for line in seen[1:]]
    assert rows == [["first", "1"], ["second", "2"], ["third", "0"]]


def test_kubectl_get_single_object_watch_with_event_types(kubectl: Kubectl, namespace: str) -> None:
    """`kubectl get cm x -w --output-watch-events` prints ADDED, MODIFIED and DELETED rows for that object only."""
    kubectl.run("create", "configmap", "x", "-n", namespace, "--from-literal=a=1")
    kubectl.run("create", "configmap", "y", "-n", namespace)
    stream = KubectlStream(kubectl, "get", "cm", "x", "-n", namespace, "-w", "--output-watch-events")
    try:
        stream.wait_for("ADDED ")
        kubectl.run("patch", "cm", "y", "-n", namespace, "--type=merge", "-p", '{"data":{"b":"2"}}')
        kubectl.run("patch", "cm", "x", "-n", namespace, "--type=merge", "-p", '{"data":{"b":"2"}}')
        stream.wait_for("MODIFIED ")
        kubectl.run("delete", "cm", "x", "-n", namespace)
        stream.wait_for("DELETED ")
    finally:
        stream.close()
    rows = [line.split()[:3] for line in stream.seen]
    assert rows == [
        ["EVENT", "NAME", "DATA"],
        ["ADDED", "x", "1"],
        ["MODIFIED", "x", "2"],
        ["DELETED", "x", "2"],
    ]


# -- M13: WatchList --------------------------------------------------------------------------------


def test_watchlist_sends_initial_events_then_end_bookmark(
    shared_apiserver: APIServerProcess, namespace: str
) -> None:
    """sendInitialEvents=true: ADDED per object, a BOOKMARK annotated initial-events-end, then live events."""
    server = shared_apiserver
    put_cm(server, namespace, "a", {"k": "1"})
    put_cm(server, namespace, "b", {"k": "1"})
    resp = open_stream(
        server,
        watch_path(
            namespace,
            sendInitialEvents="true",
            resourceVersionMatch="NotOlderThan",
            allowWatchBookmarks="true",
            timeoutSeconds="10",
        ),
    )
    assert resp.status == 200
    first, second, end = next_event(resp), next_event(resp), next_event(resp)
    assert first is not None and second is not None and end is not None
    assert sorted([summary(first), summary(second)]) == [("ADDED", "a"), ("ADDED", "b")]
    assert end["type"] == "BOOKMARK"
    assert end["object"]["kind"] == "ConfigMap"
    assert end["object"]["apiVersion"] == "v1"
    assert end["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    end_rv = int(end["object"]["metadata"]["resourceVersion"])
    assert end_rv >= max(int(e["object"]["metadata"]["resourceVersion"]) for e in (first, second))
    put_cm(server, namespace, "c", {"k": "1"})
    live = next_event(resp)
    while live is not None and live["type"] == "BOOKMARK":
        live = next_event(resp)
    resp.close()
    assert live is not None and summary(live) == ("ADDED", "c")
    assert int(live["object"]["metadata"]["resourceVersion"]) > end_rv


def test_watch_with_send_initial_events_false_starts_now(
    shared_apiserver: APIServerProcess, namespace: str
) -> None:
    """sendInitialEvents=false with resourceVersion unset starts at the most recent RV: no replay of history."""
    server = shared_apiserver
    put_cm(server, namespace, "before", {"k": "1"})
    merge_patch(server, namespace, "before", {"data": {"k": "2"}})
    resp = open_stream(
        server,
        watch_path(
            namespace,
            sendInitialEvents="false",
            resourceVersionMatch="NotOlderThan",
            allowWatchBookmarks="true",
            timeoutSeconds="10",
        ),
    )
    assert resp.status == 200
    put_cm(server, namespace, "after", {"k": "1"})
    first = next_event(resp)
    while first is not None and first["type"] == "BOOKMARK":
        first = next_event(resp)
    resp.close()
    assert first is not None and summary(first) == ("ADDED", "after")


@pytest.mark.parametrize(
    "query",
    [
        {"sendInitialEvents": "true", "allowWatchBookmarks": "true"},
        {"sendInitialEvents": "true", "allowWatchBookmarks": "true", "resourceVersionMatch": "Exact"},
    ],
    ids=["missing-match", "exact-match"],
)
def test_watchlist_without_not_older_than_is_rejected(
    shared_apiserver: APIServerProcess, namespace: str, query: dict[str, str]
) -> None:
    """sendInitialEvents without resourceVersionMatch=NotOlderThan is a 4xx Status (422 Invalid upstream)."""
    status, headers, body = shared_apiserver.request(
        "GET", watch_path(namespace, timeoutSeconds="5", **query)
    )
    assert 400 <= status < 500, body
    assert headers["Content-Type"] == "application/json"
    doc = json.loads(body)
    assert doc["kind"] == "Status"
    assert doc["code"] == status
    assert "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan" in doc["message"]


def _wait_for_watch_started(proc: subprocess.Popen[str]) -> list[str]:
    """Read kubectl -v=6 stderr until its watch request got its response headers."""
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if "watch=true" in line and 'status="200 OK"' in line:
            return lines
    raise AssertionError("kubectl never started watching:\n" + "".join(lines))


def test_kubectl_wait_for_delete_returns_after_delete(kubectl: Kubectl, namespace: str) -> None:
    """`kubectl wait --for=delete` (WatchList) reports `condition met` once the object is deleted."""
    kubectl.run("create", "configmap", "x", "-n", namespace, "--from-literal=a=b")
    proc = kubectl.popen("wait", "--for=delete", "cm/x", "-n", namespace, "--timeout=10s", "-v=6")
    try:
        _wait_for_watch_started(proc)
        kubectl.run("delete", "cm", "x", "-n", namespace, "--wait=false")
        out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    assert out == "configmap/x condition met\n"


def test_kubectl_wait_for_jsonpath(kubectl: Kubectl, namespace: str) -> None:
    """`kubectl wait --for=jsonpath='{.data.k}'=v2` returns `condition met` after the value changes."""
    kubectl.run("create", "configmap", "j", "-n", namespace, "--from-literal=k=v1")
    proc = kubectl.popen(
        "wait", "--for=jsonpath={.data.k}=v2", "cm/j", "-n", namespace, "--timeout=10s", "-v=6"
    )
    try:
        _wait_for_watch_started(proc)
        kubectl.run("patch", "cm", "j", "-n", namespace, "--type=merge", "-p", '{"data":{"k":"v2"}}')
        out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    assert out == "configmap/j condition met\n"


# -- selector transitions --------------------------------------------------------------------------


def test_label_selector_transitions_become_added_and_deleted(
    shared_apiserver: APIServerProcess, namespace: str
) -> None:
    """An update that makes an object start matching is ADDED; one that makes it stop matching is DELETED."""
    server = shared_apiserver
    put_cm(server, namespace, "t", {"k": "1"}, labels={"app": "other"})
    rv = list_rv(server, namespace)
    resp = open_stream(
        server, watch_path(namespace, resourceVersion=rv, labelSelector="app=x", timeoutSeconds="10")
    )
    merge_patch(server, namespace, "t", {"metadata": {"labels": {"app": "x"}}})  # starts matching
    merge_patch(server, namespace, "t", {"data": {"k": "2"}})  # still matching
    last = merge_patch(server, namespace, "t", {"metadata": {"labels": {"app": "gone"}}})  # stops matching
    merge_patch(server, namespace, "t", {"data": {"k": "3"}})  # not matching: nothing
    put_cm(server, namespace, "u", {"k": "1"}, labels={"app": "x"})
    events = [next_event(resp) for _ in range(4)]
    resp.close()
    assert [summary(e) for e in events if e] == [
        ("ADDED", "t"),
        ("MODIFIED", "t"),
        ("DELETED", "t"),
        ("ADDED", "u"),
    ]
    deleted = events[2]
    assert deleted is not None
    assert deleted["object"]["metadata"]["resourceVersion"] == last["metadata"]["resourceVersion"]
    assert deleted["object"]["metadata"]["labels"] == {"app": "gone"}


def test_field_selector_watch_on_one_name(shared_apiserver: APIServerProcess, namespace: str) -> None:
    """fieldSelector=metadata.name=x streams only that object's events."""
    server = shared_apiserver
    put_cm(server, namespace, "x", {"k": "1"})
    put_cm(server, namespace, "y", {"k": "1"})
    resp = open_stream(server, watch_path(namespace, fieldSelector="metadata.name=x", timeoutSeconds="10"))
    first = next_event(resp)
    merge_patch(server, namespace, "y", {"data": {"k": "2"}})
    merge_patch(server, namespace, "x", {"data": {"k": "2"}})
    second = next_event(resp)
    resp.close()
    assert first is not None and summary(first) == ("ADDED", "x")
    assert second is not None and summary(second) == ("MODIFIED", "x")


# -- concurrency -----------------------------------------------------------------------------------

WRITERS = 20
WATCHERS = 10
OBJECTS = 5
INCREMENTS = 5


def test_concurrent_writers_and_watchers_lose_nothing(
    shared_apiserver: APIServerProcess, namespace: str
) -> None:
    """20 writers with optimistic concurrency and 10 watchers: no lost update; each watcher sees every later event once, in order."""
    server = shared_apiserver
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(server.kubeconfig), client_configuration=cfg)
    cfg.connection_pool_maxsize = WRITERS + 4
    api_client = client.ApiClient(cfg)
    v1 = client.CoreV1Api(api_client)
    names = [f"counter-{i}" for i in range(OBJECTS)]
    for name in names:
        put_cm(server, namespace, name, {"n": "0"})

    # every committed write, as (rv, name, n), reported by the writers from the server's answers
    writes: list[tuple[int, str, int]] = []
    writes_lock = threading.Lock()

    def writer(index: int) -> int:
        # writers 0-9 share counter-0 and counter-1; the others spread over all objects
        done = 0
        for step in range(INCREMENTS):
            name = names[index % 2] if index < 10 else names[(index + step) % OBJECTS]
            while True:
                current = v1.read_namespaced_config_map(name, namespace)
                n = int(current.data["n"]) + 1
                current.data["n"] = str(n)
                try:
                    updated = v1.replace_namespaced_config_map(name, namespace, current)
                except ApiException as exc:
                    assert exc.status == 409, exc
                    continue
                with writes_lock:
                    writes.append((int(updated.metadata.resource_version), name, n))
                done += 1
                break
        return done

    sentinel = "zz-done"
    results: list[list[dict[str, Any]]] = [[] for _ in range(WATCHERS)]
    start_rvs: list[int] = [0] * WATCHERS
    started = [threading.Event() for _ in range(WATCHERS)]

    def watcher(index: int) -> None:
        rv = list_rv(server, namespace)
        start_rvs[index] = int(rv)
        resp = open_stream(
            server, watch_path(namespace, resourceVersion=rv, timeoutSeconds="60"), read_timeout=30
        )
        assert resp.status == 200
        started[index].set()
        while (event := next_event(resp)) is not None:
            results[index].append(event)
            if event["object"]["metadata"]["name"] == sentinel:
                break
        resp.close()

    with ThreadPoolExecutor(WRITERS + WATCHERS) as pool:
        # half the watchers start before any write, half while the writers run
        watch_futures = [pool.submit(watcher, i) for i in range(WATCHERS // 2)]
        for ev in started[: WATCHERS // 2]:
            assert ev.wait(10)
        write_futures = [pool.submit(writer, i) for i in range(WRITERS)]
        deadline = time.monotonic() + 10
        while len(writes) < WRITERS * INCREMENTS // 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        watch_futures += [pool.submit(watcher, i) for i in range(WATCHERS // 2, WATCHERS)]
        for ev in started:
            assert ev.wait(10)
        successes = sum(f.result(timeout=60) for f in write_futures)
        sentinel_obj = put_cm(server, namespace, sentinel, {})
        for f in watch_futures:
            f.result(timeout=30)
    api_client.close()

    # no lost update: each counter equals the number of successful increments on it
    assert successes == WRITERS * INCREMENTS == len(writes)
    for name in names:
        final = json.loads(server.request("GET", cm_path(namespace, name=name))[2])
        assert int(final["data"]["n"]) == sum(1 for _, w, _ in writes if w == name), name
    assert len({rv for rv, _, _ in writes}) == len(writes)

    sentinel_rv = int(sentinel_obj["metadata"]["resourceVersion"])
    for index, events in enumerate(results):
        start = start_rvs[index]
        got = [
            (int(e["object"]["metadata"]["resourceVersion"]), e["object"]["metadata"]["name"], e["type"])
            for e in events
        ]
        rvs = [rv for rv, _, _ in got]
        assert rvs == sorted(set(rvs)), f"watcher {index}: duplicated or reordered events"
        want = sorted((rv, name, "MODIFIED") for rv, name, _ in writes if rv > start) + [
            (sentinel_rv, sentinel, "ADDED")
        ]
        assert got == want, f"watcher {index} from RV {start}: missing or extra events"
        values = {
            (int(e["object"]["metadata"]["resourceVersion"])): e["object"]["data"].get("n") for e in events
        }
        for rv, _name, n in writes:
            if rv > start:
                assert values[rv] == str(n)


def test_open_watches_end_when_the_server_stops(apiserver: APIServerProcess) -> None:
    """SIGTERM ends open watch streams with a clean end of body, and the process exits 0 (no kill needed)."""
    apiserver.start()
    ns = make_namespace(apiserver)
    put_cm(apiserver, ns, "a", {"k": "1"})
    connected = open_stream(apiserver, watch_path(ns))
    assert next_event(connected) is not None
    abandoned = open_stream(apiserver, watch_path(ns))  # a client that went away without reading
    abandoned.close()
    assert apiserver.proc is not None
    apiserver.proc.send_signal(signal.SIGTERM)
    assert rest_of_stream(connected) == []
    assert apiserver.proc.wait(timeout=15) == 0


def test_watchlist_without_bookmarks_is_rejected(shared_apiserver: APIServerProcess, namespace: str) -> None:
    """sendInitialEvents=true needs allowWatchBookmarks=true (the end of the initial events is a bookmark)."""
    status, _, body = shared_apiserver.request(
        "GET",
        watch_path(
            namespace, timeoutSeconds="5", sendInitialEvents="true", resourceVersionMatch="NotOlderThan"
        ),
    )
    assert status == 422, body
    doc = json.loads(body)
    assert doc["reason"] == "Invalid"
    assert "sendInitialEvents requires setting allowWatchBookmarks to true" in doc["message"]
