"""Smaller differences from a real kube-apiserver 1.36 (issue 9 item 4), against a real ``vplane apiserver``:
the bookmark 2 s before a watch's timeout, 405 for PUT and PATCH on a collection with upstream's whole
Status body, and Go's words for a JSON body that is not JSON. Raw HTTP where the exact body is the point,
kubectl and the kubernetes client where that is what users see."""

from __future__ import annotations

import json
import os
import urllib.parse
import urllib.request
from typing import Any

import pytest
from kubernetes import client, config, watch

from harness import APIServerProcess, Kubectl

pytestmark = pytest.mark.integration

JSON = {"Content-Type": "application/json"}
TRUNCATED_CONFIGMAP = b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cut"'


def status(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> list[tuple[str, Any]]:
    """A Status body as upstream writes it, as (key, value) pairs in its order."""
    doc: list[tuple[str, Any]] = [
        ("kind", "Status"),
        ("apiVersion", "v1"),
        ("metadata", {}),
        ("status", "Failure"),
        ("message", message),
        ("reason", reason),
    ]
    if details is not None:
        doc.append(("details", details))
    return [*doc, ("code", code)]


def answer(
    server: APIServerProcess, method: str, path: str, body: bytes | None, headers: dict[str, str]
) -> tuple[int, list[tuple[str, Any]]]:
    code, got_headers, raw = server.request(method, path, body, headers)
    assert got_headers["Content-Type"] == "application/json", raw
    return code, list(json.loads(raw).items())


def configmap_names(server: APIServerProcess, namespace: str) -> list[str]:
    code, _, raw = server.request("GET", f"/api/v1/namespaces/{namespace}/configmaps")
    assert code == 200, raw
    return [item["metadata"]["name"] for item in json.loads(raw)["items"]]


# -- the bookmark before a watch's timeout ----------------------------------------------------------------


def _fresh_revision(server: APIServerProcess, namespace: str) -> tuple[str, int]:
    """The namespace's list revision, then a write elsewhere: a watch of the namespace from that revision
    sees no event, and only a fresh bookmark tells it the store has moved on."""
    code, _, raw = server.request("GET", f"/api/v1/namespaces/{namespace}/configmaps")
    assert code == 200, raw
    listed = json.loads(raw)["metadata"]["resourceVersion"]
    body = json.dumps({"metadata": {"name": "elsewhere-" + os.urandom(3).hex()}}).encode()
    code, _, raw = server.request("POST", "/api/v1/namespaces/default/configmaps", body, JSON)
    assert code == 201, raw
    return listed, int(json.loads(raw)["metadata"]["resourceVersion"])


def test_watch_gets_a_bookmark_before_its_timeout(shared_apiserver: APIServerProcess, namespace: str) -> None:
    """With allowWatchBookmarks, a 3 s watch (the periodic bookmark is a minute away) gets one BOOKMARK
    before it ends, carrying a revision at least as new as the last write anywhere."""
    listed, written = _fresh_revision(shared_apiserver, namespace)
    query = urllib.parse.urlencode(
        {"watch": "true", "resourceVersion": listed, "allowWatchBookmarks": "true", "timeoutSeconds": "3"}
    )
    request = urllib.request.Request(
        f"{shared_apiserver.url}/api/v1/namespaces/{namespace}/configmaps?{query}",
        headers={"Authorization": f"Bearer {shared_apiserver.token}"},
    )
    with urllib.request.urlopen(request, context=shared_apiserver.ssl_context(), timeout=30) as stream:
        events = [json.loads(line) for line in stream]  # until the server ends the watch
    assert [event["type"] for event in events] == ["BOOKMARK"], events
    bookmark = events[0]["object"]
    assert bookmark == {
        "kind": "ConfigMap",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": bookmark["metadata"]["resourceVersion"]},
    }
    assert int(bookmark["metadata"]["resourceVersion"]) >= written


def test_python_client_watch_resumes_from_the_bookmark(
    shared_apiserver: APIServerProcess, namespace: str
) -> None:
    """The kubernetes client's watch takes the bookmark's revision as the one to resume from."""
    listed, written = _fresh_revision(shared_apiserver, namespace)
    api_client = config.new_client_from_config(config_file=str(shared_apiserver.kubeconfig))
    try:
        watcher = watch.Watch()
        events = list(
            watcher.stream(
                client.CoreV1Api(api_client).list_namespaced_config_map,
                namespace,
                resource_version=listed,
                allow_watch_bookmarks=True,
                timeout_seconds=3,
            )
        )
    finally:
        api_client.close()
    assert [event["type"] for event in events] == ["BOOKMARK"]
    assert int(watcher.resource_version) >= written


# -- 405 ------------------------------------------------------------------------------------------------

METHOD_NOT_ALLOWED = status(
    405, "MethodNotAllowed", "the server does not allow this method on the requested resource", {}
)


@pytest.mark.parametrize(
    ("method", "content_type"),
    [
        ("PUT", "application/json"),
        ("PATCH", "application/merge-patch+json"),
        ("PATCH", "application/strategic-merge-patch+json"),
        ("PATCH", "application/json-patch+json"),
        ("PATCH", "application/apply-patch+yaml"),
    ],
)
def test_put_and_patch_on_a_collection_are_405(
    shared_apiserver: APIServerProcess, namespace: str, method: str, content_type: str
) -> None:
    """Upstream routes no PUT or PATCH to a collection: 405 with its whole Status body, and nothing changes."""
    body = (
        b'[{"op":"add","path":"/data","value":{}}]'
        if "json-patch" in content_type
        else (json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}).encode())
    )
    headers = {"Content-Type": content_type}
    for path in (
        f"/api/v1/namespaces/{namespace}/configmaps",
        "/api/v1/namespaces",
        f"/apis/apps/v1/namespaces/{namespace}/deployments",
    ):
        assert answer(shared_apiserver, method, f"{path}?fieldManager=t", body, headers) == (
            405,
            METHOD_NOT_ALLOWED,
        ), path
    assert configmap_names(shared_apiserver, namespace) == []


def test_post_to_an_object_is_405_with_empty_details(
    shared_apiserver: APIServerProcess, namespace: str
) -> None:
    path = f"/api/v1/namespaces/{namespace}/configmaps/x"
    assert answer(shared_apiserver, "POST", path, b'{"metadata":{"name":"x"}}', JSON) == (
        405,
        METHOD_NOT_ALLOWED,
    )


def test_unknown_path_is_404_with_empty_details(shared_apiserver: APIServerProcess) -> None:
    assert answer(shared_apiserver, "GET", "/api/v1/nosuchthings", None, {}) == (
        404,
        status(404, "NotFound", "the server could not find the requested resource", {}),
    )


@pytest.mark.parametrize("version", ["kubectl", "kubectl132"])
def test_kubectl_replace_raw_on_a_collection_is_method_not_allowed(
    version: str, request: pytest.FixtureRequest, namespace: str, tmp_path: Any
) -> None:
    kubectl: Kubectl = request.getfixturevalue(version)
    manifest = tmp_path / "cm.json"
    manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}))
    result = kubectl.fails(
        "replace", "--raw", f"/api/v1/namespaces/{namespace}/configmaps", "-f", str(manifest)
    )
    assert result.stderr == (
        "Error from server (MethodNotAllowed): the server does not allow this method on the requested resource\n"
    )


# -- bodies that are not JSON -----------------------------------------------------------------------------


def unrecognized(kind: str, detail: str, summary: str) -> list[tuple[str, Any]]:
    return status(
        400,
        "BadRequest",
        f"the object provided is unrecognized (must be of type {kind}): couldn't get version/kind; "
        f"json parse error: {detail} ({summary})",
    )


CUT_SUMMARY = '{"apiVersion":"v1","kind":"Con ...'


def test_truncated_create_and_update_get_upstreams_message(
    shared_apiserver: APIServerProcess, namespace: str
) -> None:
    """Create and update (PUT) bodies cut short, and other bodies that are not JSON: 400 BadRequest with
    upstream's message, the body summarized as upstream does (text, hex, or <empty>)."""
    server = shared_apiserver
    collection = f"/api/v1/namespaces/{namespace}/configmaps"
    cases = [
        (collection, TRUNCATED_CONFIGMAP, "unexpected end of JSON input", CUT_SUMMARY),
        (f"{collection}/cut", TRUNCATED_CONFIGMAP, "unexpected end of JSON input", CUT_SUMMARY),
        (collection, b"", "unexpected end of JSON input", "<empty>"),
        (collection, b"[1, 2", "unexpected end of JSON input", "5b312c2032"),
        (
            collection,
            b'{"data":{"a":tru',
            "invalid character ' ' in literal true (expecting 'e')",
            '{"data":{"a":tru',
        ),
        (
            collection,
            b'{"metadata":{"name":"x"},}',
            "invalid character '}' looking for beginning of object key string",
            '{"metadata":{"name":"x"},}',
        ),
    ]
    for path, body, detail, summary in cases:
        method = "PUT" if path.endswith("/cut") else "POST"
        assert answer(server, method, path, body, JSON) == (
            400,
            unrecognized("ConfigMap", detail, summary),
        ), body
    assert configmap_names(server, namespace) == []


def test_truncated_subresource_and_review_bodies_name_their_kind(
    shared_apiserver: APIServerProcess, namespace: str
) -> None:
    """The kind named is the one the request creates or updates: Scale for a deployment's scale, TokenReview
    for a review."""
    server = shared_apiserver
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "selector": {"matchLabels": {"app": "d"}},
            "template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }
    code, _, raw = server.request(
        "POST", f"/apis/apps/v1/namespaces/{namespace}/deployments", json.dumps(deployment).encode(), JSON
    )
    assert code == 201, raw
    scale = f"/apis/apps/v1/namespaces/{namespace}/deployments/d/scale"
    assert answer(server, "PUT", scale, b'{"spec":{"replicas":3', JSON) == (
        400,
        unrecognized("Scale", "unexpected end of JSON input", '{"spec":{"replicas":3'),
    )
    review = "/apis/authentication.k8s.io/v1/tokenreviews"
    assert answer(server, "POST", review, b'{"spec":{"token":"abc', JSON) == (
        400,
        unrecognized("TokenReview", "unexpected end of JSON input", '{"spec":{"token":"abc'),
    )


@pytest.mark.parametrize(
    ("content_type", "query", "message"),
    [
        ("application/merge-patch+json", "", "error decoding patch: unexpected end of JSON input"),
        ("application/json-patch+json", "", "error decoding patch: unexpected end of JSON input"),
        ("application/strategic-merge-patch+json", "", "unexpected end of JSON input"),
        ("application/merge-patch+json", "?fieldValidation=Ignore", "Invalid JSON Patch"),
    ],
)
def test_truncated_patches_get_upstreams_message(
    shared_apiserver: APIServerProcess, namespace: str, content_type: str, query: str, message: str
) -> None:
    """Patches are decoded by upstream's patchers, each with words of its own."""
    server = shared_apiserver
    code, _, raw = server.request(
        "POST", f"/api/v1/namespaces/{namespace}/configmaps", b'{"metadata":{"name":"p"}}', JSON
    )
    assert code == 201, raw
    path = f"/api/v1/namespaces/{namespace}/configmaps/p{query}"
    assert answer(server, "PATCH", path, b'{"data":', {"Content-Type": content_type}) == (
        400,
        status(400, "BadRequest", message),
    )


def test_truncated_delete_options_are_the_serializers_error(
    shared_apiserver: APIServerProcess, namespace: str
) -> None:
    """A DeleteOptions body cut short: the serializer's words (upstream answers them 500; we keep 400)."""
    path = f"/api/v1/namespaces/{namespace}/configmaps/x"
    assert answer(shared_apiserver, "DELETE", path, b'{"kind":"DeleteOptions"', JSON) == (
        400,
        status(
            400, "BadRequest", "couldn't get version/kind; json parse error: unexpected end of JSON input"
        ),
    )


@pytest.mark.parametrize("version", ["kubectl", "kubectl132"])
def test_kubectl_create_raw_with_a_truncated_body(
    version: str, request: pytest.FixtureRequest, namespace: str, tmp_path: Any
) -> None:
    kubectl: Kubectl = request.getfixturevalue(version)
    manifest = tmp_path / "cut.json"
    manifest.write_bytes(TRUNCATED_CONFIGMAP)
    result = kubectl.fails(
        "create", "--raw", f"/api/v1/namespaces/{namespace}/configmaps", "-f", str(manifest)
    )
    assert result.stderr == (
        "Error from server (BadRequest): the object provided is unrecognized (must be of type ConfigMap): "
        f"couldn't get version/kind; json parse error: unexpected end of JSON input ({CUT_SUMMARY})\n"
    )
