"""Bodies that decode into far more than they are: YAML aliases, deep nesting, objects past the stored
limit, review kinds echoing unknown fields, and out-of-range ``timeoutSeconds``. Each gets a Status error
(no traceback in the answer or the log) and the server stays up with its memory flat."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness import APIServerProcess

pytestmark = pytest.mark.integration

JSON = {"Content-Type": "application/json"}
YAML = {"Content-Type": "application/yaml"}
MERGE = {"Content-Type": "application/merge-patch+json"}
JSON_PATCH = {"Content-Type": "application/json-patch+json"}
SMP = {"Content-Type": "application/strategic-merge-patch+json"}
APPLY = {"Content-Type": "application/apply-patch+yaml"}
SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
GROUP = "decode.example.com"
BLOBS = f"/apis/{GROUP}/v1/namespaces/default/blobs"


def status_of(raw: bytes) -> dict[str, Any]:
    doc: dict[str, Any] = orjson.loads(raw)
    assert doc["kind"] == "Status", doc
    return doc


def rss_kib(server: APIServerProcess) -> int:
    assert server.proc is not None
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def assert_no_traceback(server: APIServerProcess) -> None:
    log = server.log()
    assert "Traceback" not in log, log[-5000:]


def alias_bomb(levels: int = 9, width: int = 9) -> bytes:
    """An SSAR whose spec holds ``levels`` lists of ``width`` aliases of the list before: ``width**levels``
    strings once expanded (9 x 9: 387 million) from about 600 bytes."""
    lines = [
        "apiVersion: authorization.k8s.io/v1",
        "kind: SelfSubjectAccessReview",
        "spec:",
        "  resourceAttributes: {verb: get, resource: pods}",
        "  a0: &a0 [" + ",".join(["lol"] * width) + "]",
    ]
    for i in range(1, levels):
        lines.append(f"  a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]")
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture
def small_limits(apiserver: APIServerProcess) -> Iterator[APIServerProcess]:
    """A fresh server whose per-object limit is 64 KiB, with a custom resource that keeps any field."""
    apiserver.start(max_object_bytes=64 * 1024)
    install_blobs(apiserver)
    yield apiserver
    assert_no_traceback(apiserver)


def install_blobs(server: APIServerProcess) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"blobs.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": "blobs", "singular": "blob", "kind": "Blob", "listKind": "BlobList"},
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
                                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            },
                        }
                    },
                }
            ],
        },
    }
    code, _, raw = server.request(
        "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", orjson.dumps(crd), JSON
    )
    assert code == 201, raw
    deadline = time.monotonic() + 15
    while server.request("GET", BLOBS)[0] != 200:
        assert time.monotonic() < deadline, "the CRD was not served"
        time.sleep(0.05)


def blob(name: str, spec: Any) -> bytes:
    return orjson.dumps(
        {"apiVersion": f"{GROUP}/v1", "kind": "Blob", "metadata": {"name": name}, "spec": spec}
    )


def deep_blob(name: str, depth: int) -> bytes:
    """A Blob body nested ``depth`` levels in all (written as bytes: orjson cannot write it past 254)."""
    levels = depth - 1  # the body's root is one level
    inner = b'{"a":' * (levels - 1) + b"{}" + b"}" * (levels - 1)
    return blob(name, "SPEC").replace(b'"SPEC"', inner)


def nested(depth: int) -> Any:
    """A value of ``depth`` nested objects (``{"a": {"a": ... {}}}``)."""
    value: Any = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


# -- YAML aliases --------------------------------------------------------------------------------------


def test_alias_bomb_is_refused_without_expanding(apiserver: APIServerProcess) -> None:
    """The 9 x 9 alias bomb sent to SSAR (allowed to every user) gets 400 naming the alias, and the
    server's memory stays where it was (the old server expanded it to gigabytes and was killed)."""
    apiserver.start()
    code, _, _ = apiserver.request("GET", "/version")
    assert code == 200
    body = alias_bomb()
    assert len(body) < 700
    before = rss_kib(apiserver)
    for _ in range(5):
        code, _, raw = apiserver.request("POST", SSAR, body, YAML)
        assert code == 400, raw[:300]
        doc = status_of(raw)
        assert doc["reason"] == "BadRequest"
        assert (
            doc["message"]
            == "yaml: line 6: aliases are not supported (found *a0); write the value out in full"
        )
    after = rss_kib(apiserver)
    assert after - before < 20 * 1024, (before, after)
    code, _, _ = apiserver.request("GET", "/version")
    assert code == 200
    assert_no_traceback(apiserver)


def test_alias_in_apply_patch_is_refused(shared_apiserver: APIServerProcess, namespace: str) -> None:
    """Server-side apply bodies are YAML too: an alias (here a merge key) is refused and nothing is created."""
    body = (
        b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: aliased}\n"
        b"base: &base {k: v}\ndata:\n  <<: *base\n"
    )
    path = f"/api/v1/namespaces/{namespace}/configmaps/aliased?fieldManager=test"
    code, _, raw = shared_apiserver.request("PATCH", path, body, APPLY)
    assert code == 400, raw
    assert "aliases are not supported (found *base)" in status_of(raw)["message"]
    code, _, _ = shared_apiserver.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/aliased")
    assert code == 404


def test_anchor_without_alias_is_accepted(shared_apiserver: APIServerProcess, namespace: str) -> None:
    """An anchor that nothing refers to copies nothing: the body decodes as if it were not there."""
    body = (
        b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: anchored}\n"
        b"data: &d {k: 'v*'}\n"  # a '*' inside a string is no alias either
    )
    code, _, raw = shared_apiserver.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", body, YAML)
    assert code == 201, raw
    assert orjson.loads(raw)["data"] == {"k": "v*"}


def test_yaml_values_json_cannot_hold_are_400(shared_apiserver: APIServerProcess, namespace: str) -> None:
    """Binary, sets and integers past 64 bits are 400, not a 500 when the object is stored; timestamps and
    non-string keys decode as upstream's YAML-to-JSON conversion does (strings)."""
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    for body in (
        b"metadata: {name: b}\nbinaryData: {a: !!binary aGVsbG8=}\n",
        b"metadata: {name: s}\ndata: !!set {a, b}\n",
        b"metadata: {name: i}\ndata: {a: 99999999999999999999999}\n",
    ):
        code, _, raw = shared_apiserver.request("POST", path, body, YAML)
        assert code == 400, raw
        assert status_of(raw)["message"].startswith("the request body cannot be represented as JSON: ")
    body = b"metadata: {name: t}\ndata: {day: 2024-01-01, 1: one}\n"
    code, _, raw = shared_apiserver.request("POST", path, body, YAML)
    assert code == 201, raw
    assert orjson.loads(raw)["data"] == {"day": "2024-01-01", "1": "one"}


# -- the stored limit ------------------------------------------------------------------------------------


def test_object_over_the_stored_limit_is_413(apiserver: APIServerProcess) -> None:
    """With the default 1.5 MiB limit, a custom resource with preserved unknown fields and a 2 MiB body
    (under the 3 MiB body limit) is refused with etcd's words, and nothing is stored."""
    apiserver.start()
    install_blobs(apiserver)
    big = blob("big", {"data": "x" * (2 * 1024 * 1024)})
    assert 1536 * 1024 < len(big) < 3 * 1024 * 1024
    code, _, raw = apiserver.request("POST", BLOBS, big, JSON)
    assert code == 413, raw[:300]
    doc = status_of(raw)
    assert (doc["reason"], doc["message"]) == ("RequestEntityTooLarge", "etcdserver: request is too large")
    assert apiserver.request("GET", f"{BLOBS}/big")[0] == 404
    code, _, raw = apiserver.request("POST", BLOBS, blob("fits", {"data": "x" * (1024 * 1024)}), JSON)
    assert code == 201, raw[:300]
    assert_no_traceback(apiserver)


def test_every_write_path_checks_the_stored_limit(small_limits: APIServerProcess) -> None:
    """Update, every patch type, server-side apply and the status subresource, for a custom resource and
    a built-in kind, are refused with 413 once the object would pass the (shrunk) limit; the object
    keeps its old content."""
    server = small_limits
    over = "x" * (80 * 1024)
    code, _, raw = server.request("POST", BLOBS, blob("b", {"n": 1}), JSON)
    assert code == 201, raw
    replaced = orjson.loads(blob("b", {"data": over}))
    replaced["metadata"]["resourceVersion"] = orjson.loads(raw)["metadata"]["resourceVersion"]
    cm_path = "/api/v1/namespaces/default/configmaps"
    code, _, raw = server.request(
        "POST", cm_path, orjson.dumps({"metadata": {"name": "c"}, "data": {"k": "v"}}), JSON
    )
    assert code == 201, raw
    big_cm = orjson.dumps({"metadata": {"name": "c2"}, "data": {"k": over}})
    attempts: list[tuple[str, str, bytes, dict[str, str]]] = [
        ("POST", cm_path, big_cm, JSON),
        ("PUT", f"{BLOBS}/b", orjson.dumps(replaced), JSON),
        ("PATCH", f"{BLOBS}/b", orjson.dumps({"spec": {"data": over}}), MERGE),
        (
            "PATCH",
            f"{BLOBS}/b",
            orjson.dumps([{"op": "add", "path": "/spec/data", "value": over}]),
            JSON_PATCH,
        ),
        ("PATCH", f"{BLOBS}/b?fieldManager=t", blob("b", {"data": over}), APPLY),
        ("PATCH", f"{BLOBS}/b/status", orjson.dumps({"status": {"data": over}}), MERGE),
        ("PUT", f"{cm_path}/c", orjson.dumps({"metadata": {"name": "c"}, "data": {"k": over}}), JSON),
        ("PATCH", f"{cm_path}/c", orjson.dumps({"data": {"k": over}}), SMP),
        ("PATCH", f"{cm_path}/c?fieldManager=t&force=true", big_cm.replace(b"c2", b"c"), APPLY),
        ("PATCH", f"{cm_path}/new?fieldManager=t", big_cm.replace(b"c2", b"new"), APPLY),
    ]
    for method, path, body, headers in attempts:
        code, _, raw = server.request(method, path, body, headers)
        assert code == 413, (method, path, raw[:300])
        assert status_of(raw)["message"] == "etcdserver: request is too large"
    assert orjson.loads(server.request("GET", f"{BLOBS}/b")[2])["spec"] == {"n": 1}
    assert "status" not in orjson.loads(server.request("GET", f"{BLOBS}/b")[2])
    assert orjson.loads(server.request("GET", f"{cm_path}/c")[2])["data"] == {"k": "v"}
    assert server.request("GET", f"{cm_path}/c2")[0] == 404
    assert server.request("GET", f"{cm_path}/new")[0] == 404
    # Dry run never reaches storage, as upstream (etcd is not asked).
    code, _, raw = server.request("POST", cm_path + "?dryRun=All", big_cm, JSON)
    assert code == 201, raw[:300]


def test_object_over_a_lowered_limit_can_shrink_and_be_deleted(apiserver: APIServerProcess) -> None:
    """An object stored under a larger limit may still be trimmed (writes that do not grow it pass) and
    deleted, even through finalizers; growing it is refused."""
    apiserver.start()
    install_blobs(apiserver)
    body = orjson.loads(blob("old", {"data": "x" * (100 * 1024), "keep": 1}))
    body["metadata"]["finalizers"] = ["example.com/hold"]
    code, _, raw = apiserver.request("POST", BLOBS, orjson.dumps(body), JSON)
    assert code == 201, raw[:300]
    apiserver.restart(max_object_bytes=64 * 1024)
    code, _, raw = apiserver.request("PATCH", f"{BLOBS}/old", orjson.dumps({"spec": {"more": 1}}), MERGE)
    assert code == 413, raw[:300]
    code, _, raw = apiserver.request("DELETE", f"{BLOBS}/old")
    assert code == 200, raw[:300]
    code, _, raw = apiserver.request(
        "PATCH", f"{BLOBS}/old", orjson.dumps({"spec": {"data": "short"}}), MERGE
    )
    assert code == 200, raw[:300]
    patch = orjson.dumps({"metadata": {"finalizers": None}})
    code, _, raw = apiserver.request("PATCH", f"{BLOBS}/old", patch, MERGE)
    assert code == 200, raw[:300]
    assert apiserver.request("GET", f"{BLOBS}/old")[0] == 404
    assert_no_traceback(apiserver)


# -- nesting depth -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [247, 254, 300, 1000])
def test_json_nested_past_the_limit_is_400(small_limits: APIServerProcess, depth: int) -> None:
    """JSON nested deeper than 246 levels (up to the decoder's own 1024) is 400 at decode time; the old
    server decoded it and failed with 500 when encoding it."""
    code, _, raw = small_limits.request("POST", BLOBS, deep_blob("deep", depth), JSON)
    assert code == 400, raw[:300]
    message = status_of(raw)["message"]
    assert message == "exceeded max depth: objects and arrays may be nested at most 246 levels deep"
    assert small_limits.request("GET", f"{BLOBS}/deep")[0] == 404


def test_yaml_nested_past_the_limit_is_400(small_limits: APIServerProcess) -> None:
    """The same for YAML, which libyaml reads up to 1000 levels deep."""
    body = b"apiVersion: decode.example.com/v1\nkind: Blob\nmetadata: {name: deep}\nspec: {a: " + (
        b"[" * 300 + b"]" * 300 + b"}\n"
    )
    code, _, raw = small_limits.request("POST", BLOBS, body, YAML)
    assert code == 400, raw[:300]
    assert "exceeded max depth" in status_of(raw)["message"]


def test_objects_at_the_depth_limit_work_everywhere(small_limits: APIServerProcess) -> None:
    """An object as deep as its managed fields allow (241 levels of its own, 246 with
    ``metadata.managedFields``) can be created, patched, applied, read back and sent back whole with PUT,
    read as YAML and as a Table, listed and watched: every answer that wraps it still encodes. One level
    more is refused when stored."""
    server = small_limits
    code, _, raw = server.request("POST", BLOBS, deep_blob("edge", 242), JSON)
    assert code == 201, raw[:300]
    deep = nested(239)
    code, _, raw = server.request("PATCH", f"{BLOBS}/edge", orjson.dumps({"spec": {"b": deep}}), MERGE)
    assert code == 200, raw[:300]
    code, _, raw = server.request("PATCH", f"{BLOBS}/edge?fieldManager=t", blob("edge", {"c": deep}), APPLY)
    assert code == 200, raw[:300]
    code, _, raw = server.request(
        "PATCH", f"{BLOBS}/edge/status", orjson.dumps({"status": {"s": deep}}), MERGE
    )
    assert code == 200, raw[:300]
    current = orjson.loads(server.request("GET", f"{BLOBS}/edge")[2])
    current["spec"]["d"] = 1
    code, _, raw = server.request("PUT", f"{BLOBS}/edge", orjson.dumps(current), JSON)
    assert code == 200, raw[:300]
    table = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
    for path, headers in (
        (f"{BLOBS}/edge", {"Accept": "application/yaml"}),
        (f"{BLOBS}/edge?includeObject=Object", table),
        (BLOBS, {"Accept": "application/yaml"}),
        (f"{BLOBS}?includeObject=Object", table),
        (f"{BLOBS}?watch=1&timeoutSeconds=1", {}),
        (f"{BLOBS}?watch=1&timeoutSeconds=1&includeObject=Object", table),
    ):
        code, _, raw = server.request("GET", path, headers=headers)
        assert code == 200, (path, raw[:300])
    code, _, raw = server.request("POST", BLOBS, deep_blob("over", 243), JSON)
    assert code == 400, raw[:300]
    assert status_of(raw)["message"] == (
        "exceeded max depth: the object to store, with its metadata.managedFields, may be nested at most "
        "246 levels deep"
    )


def test_json_patch_cannot_build_an_object_too_deep(small_limits: APIServerProcess) -> None:
    """A JSON patch may add a deep value at a deep path, so the stored object, not only the body, has a
    depth limit: past it the patch is 400 and the object is unchanged (the old server answered 500)."""
    server = small_limits
    code, _, raw = server.request("POST", BLOBS, blob("grow", nested(200)), JSON)
    assert code == 201, raw[:300]
    path = "/spec" + "/a" * 198
    patch = orjson.dumps([{"op": "add", "path": path + "/more", "value": nested(100)}])
    code, _, raw = server.request("PATCH", f"{BLOBS}/grow", patch, JSON_PATCH)
    assert code == 400, raw[:300]
    assert "exceeded max depth" in status_of(raw)["message"]
    assert "more" not in orjson.dumps(orjson.loads(server.request("GET", f"{BLOBS}/grow")[2])).decode()


# -- review kinds ------------------------------------------------------------------------------------------


def test_review_unknown_fields_are_not_echoed(shared_apiserver: APIServerProcess) -> None:
    """An SSAR decodes into its schema: unknown fields are dropped from the answer (with a warning under
    the default Warn) and refused under Strict, as upstream."""
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "metadata": {"bogus": "m"},
        "spec": {
            "resourceAttributes": {"verb": "get", "resource": "pods", "bogus": "r"},
            "bogus": "s" * 1000,
        },
        "bogus": ["x"] * 100,
    }
    code, headers, raw = shared_apiserver.request("POST", SSAR, orjson.dumps(body), JSON)
    assert code == 201, raw
    doc = orjson.loads(raw)
    assert b"bogus" not in raw, doc
    assert doc["spec"] == {"resourceAttributes": {"verb": "get", "resource": "pods"}}
    assert doc["status"]["allowed"] is True
    assert "unknown field" in headers.get("Warning", "")
    code, _, raw = shared_apiserver.request(
        "POST", SSAR + "?fieldValidation=Strict", orjson.dumps(body), JSON
    )
    assert code == 400, raw
    message = status_of(raw)["message"]
    assert message.startswith(
        'SelfSubjectAccessReview in version "v1" cannot be handled as a SelfSubjectAccessReview: '
        "strict decoding error: "
    ), message
    assert 'unknown field "spec.bogus"' in message


def test_review_fields_of_the_wrong_type_are_400(shared_apiserver: APIServerProcess) -> None:
    """A SubjectAccessReview whose ``extra`` is a string is 400 (the old server answered 500)."""
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": "someone", "extra": "not-a-map", "resourceAttributes": {"verb": "get"}},
    }
    path = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
    code, _, raw = shared_apiserver.request("POST", path, orjson.dumps(body), JSON)
    assert code == 400, raw
    assert "spec.extra" in status_of(raw)["message"]


def test_token_request_unknown_fields_are_not_echoed(
    shared_apiserver: APIServerProcess, namespace: str
) -> None:
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"bogus": "x" * 100}}
    accounts = f"/api/v1/namespaces/{namespace}/serviceaccounts"
    code, _, raw = shared_apiserver.request(
        "POST", accounts, orjson.dumps({"metadata": {"name": "sa"}}), JSON
    )
    assert code == 201, raw
    path = f"{accounts}/sa/token"
    code, _, raw = shared_apiserver.request("POST", path, orjson.dumps(body), JSON)
    assert code == 201, raw
    assert b"bogus" not in raw


# -- timeoutSeconds ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("abc", 'strconv.ParseInt: parsing "abc": invalid syntax'),
        ("1.5", 'strconv.ParseInt: parsing "1.5": invalid syntax'),
        ("-1", "timeoutSeconds: Invalid value: -1: must be greater than or equal to 0"),
        ("9" * 30, f'strconv.ParseInt: parsing "{"9" * 30}": value out of range'),
        ("9223372036854775808", 'strconv.ParseInt: parsing "9223372036854775808": value out of range'),
    ],
)
@pytest.mark.parametrize("watch", [False, True])
def test_timeout_seconds_out_of_range_is_400(
    shared_apiserver: APIServerProcess, value: str, message: str, watch: bool
) -> None:
    """On lists and watches alike (the old server ignored it on lists and failed mid-stream on a watch
    with a huge value)."""
    query = f"timeoutSeconds={value}" + ("&watch=1" if watch else "")
    code, _, raw = shared_apiserver.request("GET", f"/api/v1/namespaces/default/configmaps?{query}")
    assert code == 400, raw
    doc = status_of(raw)
    assert (doc["reason"], doc["message"]) == ("BadRequest", message)


def test_largest_timeout_seconds_is_accepted(shared_apiserver: APIServerProcess) -> None:
    """The largest 64-bit value is a valid (very long) watch; a list ignores it."""
    code, _, _ = shared_apiserver.request(
        "GET", "/api/v1/namespaces/default/configmaps?timeoutSeconds=9223372036854775807"
    )
    assert code == 200
