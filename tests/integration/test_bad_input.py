"""Bad input gets a Kubernetes Status error with the right code and reason, and changes nothing."""

from __future__ import annotations

import orjson
import pytest

from harness import APIServerProcess

pytestmark = pytest.mark.integration

JSON = {"Content-Type": "application/json"}


def status_of(body: bytes) -> dict[str, object]:
    doc: dict[str, object] = orjson.loads(body)
    assert doc["kind"] == "Status", doc
    return doc


def count_configmaps(server: APIServerProcess, namespace: str) -> int:
    status, _, body = server.request("GET", f"/api/v1/namespaces/{namespace}/configmaps")
    assert status == 200
    return len(orjson.loads(body)["items"])


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/json", b'{"metadata": {"name": "x"'),
        ("application/json", b"[1, 2"),
        ("application/yaml", b"metadata: {name: [unclosed"),
        ("application/vnd.kubernetes.protobuf", b"k8s\x00\x0a\xff\xff"),
        ("application/vnd.kubernetes.protobuf", b"not protobuf at all"),
    ],
)
def test_malformed_bodies_are_400_and_store_nothing(
    shared_apiserver: APIServerProcess, namespace: str, content_type: str, body: bytes
) -> None:
    """Malformed JSON, YAML and protobuf bodies get 400 BadRequest; nothing is created."""
    status, headers, raw = shared_apiserver.request(
        "POST", f"/api/v1/namespaces/{namespace}/configmaps", body, {"Content-Type": content_type}
    )
    assert status == 400, raw
    assert headers["Content-Type"] == "application/json"
    assert status_of(raw)["reason"] == "BadRequest"
    assert count_configmaps(shared_apiserver, namespace) == 0


def test_unsupported_media_type_is_415(shared_apiserver: APIServerProcess, namespace: str) -> None:
    """A body in a media type the server does not decode gets 415 listing the accepted types."""
    status, _, raw = shared_apiserver.request(
        "POST", f"/api/v1/namespaces/{namespace}/configmaps", b"a=b", {"Content-Type": "text/plain"}
    )
    assert status == 415
    doc = status_of(raw)
    assert doc["reason"] == "UnsupportedMediaType"
    assert "application/json, application/yaml, application/vnd.kubernetes.protobuf" in str(doc["message"])


def test_body_over_the_limit_is_413(apiserver: APIServerProcess) -> None:
    """A body larger than max_body_bytes gets 413 RequestEntityTooLarge and is not stored."""
    apiserver.start(max_body_bytes=4096)
    big = orjson.dumps({"metadata": {"name": "big"}, "data": {"k": "x" * 5000}})
    status, _, raw = apiserver.request("POST", "/api/v1/namespaces/default/configmaps", big, JSON)
    assert status == 413
    doc = status_of(raw)
    assert doc["reason"] == "RequestEntityTooLarge"
    assert doc["message"] == "Request entity too large: limit is 4096"
    status, _, _ = apiserver.request("GET", "/api/v1/namespaces/default/configmaps/big")
    assert status == 404
    small = orjson.dumps({"metadata": {"name": "small"}, "data": {"k": "x"}})
    status, _, _ = apiserver.request("POST", "/api/v1/namespaces/default/configmaps", small, JSON)
    assert status == 201


def test_invalid_name_is_422_with_causes(shared_apiserver: APIServerProcess, namespace: str) -> None:
    """An invalid name gets 422 Invalid, with a FieldValueInvalid cause on metadata.name and the Kind in details."""
    body = orjson.dumps({"metadata": {"name": "Bad_Name"}})
    status, _, raw = shared_apiserver.request(
        "POST", f"/api/v1/namespaces/{namespace}/configmaps", body, JSON
    )
    assert status == 422
    doc = status_of(raw)
    assert doc["reason"] == "Invalid"
    assert str(doc["message"]).startswith(
        'ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": '
    )
    details = doc["details"]
    assert isinstance(details, dict)
    assert details["kind"] == "ConfigMap"
    assert details["causes"][0]["field"] == "metadata.name"
    assert details["causes"][0]["reason"] == "FieldValueInvalid"
    assert count_configmaps(shared_apiserver, namespace) == 0


def test_invalid_data_key_is_422(shared_apiserver: APIServerProcess, namespace: str) -> None:
    """A ConfigMap data key that is not a valid config key is rejected with its field path."""
    body = orjson.dumps({"metadata": {"name": "k"}, "data": {"bad key!": "v"}})
    status, _, raw = shared_apiserver.request(
        "POST", f"/api/v1/namespaces/{namespace}/configmaps", body, JSON
    )
    assert status == 422
    causes = status_of(raw)["details"]["causes"]  # type: ignore[index]
    assert causes[0]["field"] == "data[bad key!]"


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("labelSelector=a%20in%20(", "unable to parse requirement"),
        ("labelSelector=!!a", ""),
        ("fieldSelector=spec.foo%3Dbar", "field label not supported: spec.foo"),
        ("limit=abc", "limit"),
        ("resourceVersionMatch=Bogus&resourceVersion=1", "resourceVersionMatch"),
    ],
)
def test_bad_list_parameters_are_400(
    shared_apiserver: APIServerProcess, namespace: str, query: str, message: str
) -> None:
    """Bad label or field selectors and bad list parameters get 400 BadRequest naming the problem."""
    status, _, raw = shared_apiserver.request("GET", f"/api/v1/namespaces/{namespace}/configmaps?{query}")
    assert status == 400, raw
    doc = status_of(raw)
    assert doc["reason"] == "BadRequest"
    assert message in str(doc["message"])


def test_bad_field_validation_value_is_400(shared_apiserver: APIServerProcess, namespace: str) -> None:
    """An unknown fieldValidation value is refused before anything is stored."""
    body = orjson.dumps({"metadata": {"name": "fv"}})
    status, _, raw = shared_apiserver.request(
        "POST", f"/api/v1/namespaces/{namespace}/configmaps?fieldValidation=Sometimes", body, JSON
    )
    assert status == 400
    assert 'fieldValidation: Unsupported value: "Sometimes"' in str(status_of(raw)["message"])
    assert count_configmaps(shared_apiserver, namespace) == 0


def test_unknown_field_under_strict_is_400_and_stores_nothing(
    shared_apiserver: APIServerProcess, namespace: str
) -> None:
    """fieldValidation=Strict rejects unknown and duplicate fields with upstream's strict decoding text."""
    body = b'{"metadata":{"name":"s1"},"data":{},"bogus":1}'
    status, _, raw = shared_apiserver.request(
        "POST", f"/api/v1/namespaces/{namespace}/configmaps?fieldValidation=Strict", body, JSON
    )
    assert status == 400
    assert str(status_of(raw)["message"]) == (
        'ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: unknown field "bogus"'
    )
    dup = b'{"metadata":{"name":"s2"},"data":{"a":"1"},  "data":{"b":"2"}}'
    status, _, raw = shared_apiserver.request(
        "POST", f"/api/v1/namespaces/{namespace}/configmaps?fieldValidation=Strict", dup, JSON
    )
    assert status == 400
    assert 'duplicate field "data"' in str(status_of(raw)["message"])
    assert count_configmaps(shared_apiserver, namespace) == 0


def test_stale_resource_version_is_409_and_keeps_the_newer_write(
    shared_apiserver: APIServerProcess, namespace: str
) -> None:
    """An update carrying an old resourceVersion gets 409 Conflict and does not overwrite the newer value."""
    url = f"/api/v1/namespaces/{namespace}/configmaps"
    status, _, raw = shared_apiserver.request(
        "POST", url, orjson.dumps({"metadata": {"name": "c"}, "data": {"v": "1"}}), JSON
    )
    assert status == 201
    first = orjson.loads(raw)
    newer = dict(first, data={"v": "2"})
    status, _, _ = shared_apiserver.request("PUT", f"{url}/c", orjson.dumps(newer), JSON)
    assert status == 200
    stale = dict(first, data={"v": "stale"})
    status, _, raw = shared_apiserver.request("PUT", f"{url}/c", orjson.dumps(stale), JSON)
    assert status == 409
    doc = status_of(raw)
    assert doc["reason"] == "Conflict"
    assert doc["message"] == (
        'Operation cannot be fulfilled on configmaps "c": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    status, _, raw = shared_apiserver.request("GET", f"{url}/c")
    assert orjson.loads(raw)["data"] == {"v": "2"}


def test_json_patch_failing_test_op_is_422_and_changes_nothing(
    shared_apiserver: APIServerProcess, namespace: str
) -> None:
    """A JSON patch whose test operation fails is rejected whole: no partial application."""
    url = f"/api/v1/namespaces/{namespace}/configmaps"
    shared_apiserver.request("POST", url, orjson.dumps({"metadata": {"name": "p"}, "data": {"a": "1"}}), JSON)
    patch = orjson.dumps(
        [
            {"op": "replace", "path": "/data/a", "value": "2"},
            {"op": "test", "path": "/data/a", "value": "nope"},
        ]
    )
    status, _, raw = shared_apiserver.request(
        "PATCH", f"{url}/p", patch, {"Content-Type": "application/json-patch+json"}
    )
    assert status == 422
    assert status_of(raw)["reason"] == "Invalid"
    _, _, raw = shared_apiserver.request("GET", f"{url}/p")
    assert orjson.loads(raw)["data"] == {"a": "1"}


def test_unknown_paths_and_methods(shared_apiserver: APIServerProcess) -> None:
    """Unknown resources are 404 NotFound; a verb a kind does not serve is 405 MethodNotAllowed."""
    status, _, raw = shared_apiserver.request("GET", "/api/v1/widgets")
    assert status == 404
    assert status_of(raw)["reason"] == "NotFound"
    status, _, raw = shared_apiserver.request("GET", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
    assert status == 405
    assert status_of(raw)["reason"] == "MethodNotAllowed"


def test_create_in_missing_namespace_is_404(shared_apiserver: APIServerProcess) -> None:
    """Creating in a namespace that does not exist is refused with the namespace's NotFound."""
    body = orjson.dumps({"metadata": {"name": "x"}})
    status, _, raw = shared_apiserver.request("POST", "/api/v1/namespaces/no-such-ns/configmaps", body, JSON)
    assert status == 404
    assert status_of(raw)["message"] == 'namespaces "no-such-ns" not found'


def test_write_overload_is_429_with_retry_after(apiserver: APIServerProcess) -> None:
    """Writes beyond write_queue_limit get 429 TooManyRequests with Retry-After (kopf and client-go back off)."""
    apiserver.start(write_queue_limit=0)
    status, headers, raw = apiserver.request(
        "POST", "/api/v1/namespaces/default/configmaps", orjson.dumps({"metadata": {"name": "x"}}), JSON
    )
    assert status == 429
    assert headers["Retry-After"] == "1"
    doc = status_of(raw)
    assert doc["reason"] == "TooManyRequests"
    assert doc["details"] == {"retryAfterSeconds": 1}
