"""kubectl 1.36 against vplane: the core commands of spec §14 (M1-M29, S1-S20) with the output of §2 and §8."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from harness import APIServerProcess, Kubectl

pytestmark = pytest.mark.integration

# -- helpers ---------------------------------------------------------------------------------------

# kubectl 1.36 logs each response at -v=6 as: "Response" verb="GET" url="https://…" status="200 OK"
RESPONSE_LOG = re.compile(r'"Response" verb="(?P<verb>[A-Z]+)" url="(?P<url>[^"]+)" status="(?P<status>\d+)')


def _uid() -> str:
    return os.urandom(3).hex()


def logged_requests(stderr: str) -> list[tuple[str, str, dict[str, list[str]], int]]:
    """(verb, path, query, status) of every request kubectl logged at -v=6."""
    found = []
    for m in RESPONSE_LOG.finditer(stderr):
        url = urlsplit(m["url"])
        found.append((m["verb"], url.path, parse_qs(url.query), int(m["status"])))
    return found


def configmap(name: str, namespace: str, data: dict[str, str], **extra: Any) -> str:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    }
    obj.update(extra)
    return yaml.safe_dump(obj)


def get_json(kubectl: Kubectl, *args: str) -> Any:
    """The object as `kubectl get -o json` prints it, managedFields included."""
    return json.loads(kubectl.run("get", *args, "-o", "json", "--show-managed-fields").out)


def table(out: str) -> list[list[str]]:
    """kubectl's human-readable output split into cells (columns are separated by 2+ spaces)."""
    return [re.split(r"\s{2,}", line.strip()) for line in out.strip().splitlines()]


WIDGET_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList, shortNames: [wd]}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Color, type: string, jsonPath: .spec.color, priority: 1}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
              color: {type: string}
          status:
            type: object
            properties:
              ok: {type: boolean}
"""


def widget(name: str, namespace: str, size: int = 3, color: str = "red") -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"size": size, "color": color},
        }
    )


@pytest.fixture(scope="module")
def widget_server(tmp_path_factory: pytest.TempPathFactory, kubectl_path: str) -> Iterator[APIServerProcess]:
    """A server of this module's own with widgets.example.com, so the spec's exact group appears in messages."""
    server = APIServerProcess(tmp_path_factory.mktemp("widget-apiserver"))
    server.start()
    k = Kubectl(kubectl_path, server.kubeconfig, server.data_dir.parent / "widget-kubecache")
    k.apply(WIDGET_CRD)
    k.run("wait", "--for=condition=Established", "crd/widgets.example.com", "--timeout=30s")
    yield server
    server.stop()


@pytest.fixture
def wk(widget_server: APIServerProcess, kubectl_path: str, tmp_path: Path) -> Kubectl:
    return Kubectl(kubectl_path, widget_server.kubeconfig, tmp_path / "wkcache")


@pytest.fixture
def wns(wk: Kubectl) -> str:
    name = "w-" + _uid()
    wk.run("create", "namespace", name)
    return name


# -- M1 version ------------------------------------------------------------------------------------


def test_version_reports_server_without_skew_warning(kubectl: Kubectl) -> None:
    """`kubectl version` (1.36) prints `Server Version: v1.3x.y` and no version-skew warning."""
    result = kubectl.run("version")
    assert re.search(r"^Server Version: v1\.3\d\.\d+$", result.out, re.M), result.out
    assert "Client Version: v1.36" in result.out
    assert "WARNING" not in result.stderr
    assert "version difference" not in result.stderr


# -- M3 aggregated discovery -----------------------------------------------------------------------


def test_api_resources_uses_only_aggregated_discovery(kubectl: Kubectl) -> None:
    """`kubectl api-resources -v=6` on a cold cache makes exactly two GETs: /api and /apis."""
    result = kubectl.run("api-resources", "-v=6")
    gets = [(path, status) for verb, path, _, status in logged_requests(result.stderr) if verb == "GET"]
    assert sorted(gets) == [("/api", 200), ("/apis", 200)], result.stderr
    assert re.search(r"^configmaps\s+cm\s+v1\s+true\s+ConfigMap$", result.out, re.M), result.out
    assert re.search(r"^namespaces\s+ns\s+v1\s+false\s+Namespace$", result.out, re.M), result.out
    assert re.search(r"^deployments\s+deploy\s+apps/v1\s+true\s+Deployment$", result.out, re.M), result.out


def test_aggregated_discovery_content_type(shared_apiserver: APIServerProcess) -> None:
    """/api and /apis answer the aggregated Accept with the exact APIGroupDiscoveryList Content-Type."""
    accept = (
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
    )
    for path in ("/api", "/apis"):
        status, headers, body = shared_apiserver.request("GET", path, headers={"Accept": accept})
        assert status == 200
        assert (
            headers["Content-Type"] == "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        )
        doc = json.loads(body)
        assert doc["kind"] == "APIGroupDiscoveryList"
        assert doc["apiVersion"] == "apidiscovery.k8s.io/v2"


# -- M4 create -f with default validation ----------------------------------------------------------


def test_create_file_with_default_validation_sends_strict(
    kubectl: Kubectl, namespace: str, tmp_path: Path
) -> None:
    """`kubectl create -f cm.yaml` validates via OpenAPI v3 and POSTs with fieldValidation=Strict."""
    path = tmp_path / "cm.yaml"
    path.write_text(configmap("c1", namespace, {"a": "1"}))
    result = kubectl.run("create", "-f", str(path), "-v=6")
    assert result.out == "configmap/c1 created\n"
    requests = logged_requests(result.stderr)
    assert any(verb == "GET" and p == "/openapi/v3" for verb, p, _, _ in requests), result.stderr
    assert any(verb == "GET" and p == "/openapi/v3/api/v1" and "hash" in q for verb, p, q, _ in requests)
    posts = [(p, q, s) for verb, p, q, s in requests if verb == "POST"]
    assert posts == [
        (
            f"/api/v1/namespaces/{namespace}/configmaps",
            {"fieldManager": ["kubectl-create"], "fieldValidation": ["Strict"]},
            201,
        )
    ]
    assert "failed to download openapi" not in result.stderr


# -- M5 CRUD ---------------------------------------------------------------------------------------


def test_crud_namespaced_configmap(
    kubectl: Kubectl, namespace: str, tmp_path: Path, shared_apiserver: APIServerProcess
) -> None:
    """create -f, get -o yaml and delete a ConfigMap; raw responses are `Content-Type: application/json`."""
    path = tmp_path / "cm.yaml"
    path.write_text(configmap("c1", namespace, {"a": "1"}))
    assert kubectl.run("create", "-f", str(path)).out == "configmap/c1 created\n"
    obj = yaml.safe_load(kubectl.run("get", "cm", "c1", "-n", namespace, "-o", "yaml").out)
    assert obj["apiVersion"] == "v1"
    assert obj["kind"] == "ConfigMap"
    assert obj["data"] == {"a": "1"}
    meta = obj["metadata"]
    assert meta["name"] == "c1"
    assert meta["namespace"] == namespace
    assert re.fullmatch(r"[0-9a-f-]{36}", meta["uid"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", meta["creationTimestamp"])
    assert meta["resourceVersion"].isdigit()

    status, headers, body = shared_apiserver.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/c1")
    assert status == 200
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body)["metadata"]["uid"] == meta["uid"]

    result = kubectl.run("delete", "-f", str(path))
    assert result.out == f'configmap "c1" deleted from {namespace} namespace\n'
    gone = kubectl.fails("get", "cm", "c1", "-n", namespace)
    assert gone.stderr == 'Error from server (NotFound): configmaps "c1" not found\n'


def test_crud_cluster_scoped_kinds(kubectl: Kubectl, tmp_path: Path) -> None:
    """create -f, get -o yaml and delete a Namespace and a ClusterRole (cluster-scoped URLs)."""
    ns, role = "crud-" + _uid(), "crud-" + _uid()
    path = tmp_path / "cluster.yaml"
    path.write_text(
        yaml.safe_dump_all(
            [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"team": "a"}}},
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRole",
                    "metadata": {"name": role},
                    "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
                },
            ]
        )
    )
    result = kubectl.run("create", "-f", str(path))
    assert result.out == f"namespace/{ns} created\nclusterrole.rbac.authorization.k8s.io/{role} created\n"

    got_ns = yaml.safe_load(kubectl.run("get", "namespace", ns, "-o", "yaml").out)
    assert got_ns["kind"] == "Namespace"
    assert "namespace" not in got_ns["metadata"]
    assert got_ns["metadata"]["labels"] == {"team": "a", "kubernetes.io/metadata.name": ns}
    assert got_ns["status"] == {"phase": "Active"}
    got_role = yaml.safe_load(kubectl.run("get", "clusterrole", role, "-o", "yaml").out)
    assert got_role["kind"] == "ClusterRole"
    assert got_role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]
    assert "namespace" not in got_role["metadata"]

    assert kubectl.run("delete", "clusterrole", role).out == (
        f'clusterrole.rbac.authorization.k8s.io "{role}" deleted\n'
    )
    assert kubectl.run("delete", "namespace", ns).out == f'namespace "{ns}" deleted\n'
    assert kubectl.fails("get", "clusterrole", role).stderr == (
        f'Error from server (NotFound): clusterroles.rbac.authorization.k8s.io "{role}" not found\n'
    )
    assert kubectl.fails("get", "namespace", ns).stderr == (
        f'Error from server (NotFound): namespaces "{ns}" not found\n'
    )


# -- M7 chunked lists ------------------------------------------------------------------------------


def test_chunk_size_one_lists_everything(kubectl: Kubectl, namespace: str) -> None:
    """`kubectl get cm --chunk-size=1` follows `continue` and prints every ConfigMap once."""
    names = [f"c{i}" for i in range(5)]
    for name in names:
        kubectl.run("create", "configmap", name, "-n", namespace, "--from-literal=k=v")
    result = kubectl.run("get", "cm", "-n", namespace, "--chunk-size=1", "-v=6")
    rows = table(result.out)
    assert rows[0] == ["NAME", "DATA", "AGE"]
    assert [r[0] for r in rows[1:]] == names
    lists = [q for verb, p, q, _ in logged_requests(result.stderr) if p.endswith("/configmaps")]
    assert len(lists) == 5
    assert all(q["limit"] == ["1"] for q in lists)
    assert "continue" not in lists[0]
    assert all("continue" in q for q in lists[1:])

    named = kubectl.run("get", "cm", "-n", namespace, "--chunk-size=2", "-o", "name").out
    assert named.split() == [f"configmap/{n}" for n in names]


# -- M8 label selectors ----------------------------------------------------------------------------


@pytest.fixture
def labelled(kubectl: Kubectl, namespace: str) -> str:
    labels = {
        "c1": {"env": "a", "legacy": "old"},
        "c2": {"env": "b", "has": "1"},
        "c3": {"env": "c"},
        "c4": {},
    }
    docs = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": lab},
        }
        for name, lab in labels.items()
    ]
    kubectl.apply(yaml.safe_dump_all(docs))
    return namespace


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("env=a", ["c1"]),
        ("env==b", ["c2"]),
        ("env!=a", ["c2", "c3", "c4"]),
        ("env in (a,b)", ["c1", "c2"]),
        ("env in (a,b),!legacy", ["c2"]),
        ("env notin (a,b)", ["c3", "c4"]),
        ("has", ["c2"]),
        ("!env", ["c4"]),
        ("env,!has", ["c1", "c3"]),
        ("env in (c),env notin (a)", ["c3"]),
    ],
)
def test_label_selectors(kubectl: Kubectl, labelled: str, selector: str, expected: list[str]) -> None:
    """`kubectl get cm -l <selector>` returns exactly the matching set (`!=`/`notin` match missing keys)."""
    out = kubectl.run("get", "cm", "-n", labelled, "-l", selector, "-o", "name").out
    assert out.split() == [f"configmap/{n}" for n in expected]


def test_label_selector_parse_error_is_bad_request(kubectl: Kubectl, namespace: str) -> None:
    """A malformed label selector is a 400 BadRequest from the server."""
    result = kubectl.fails("get", "cm", "-n", namespace, "-l", "a in (b")
    assert result.stderr.startswith("Error from server (BadRequest): ")
    assert "unable to parse requirement" in result.stderr


# -- M9 field selectors ----------------------------------------------------------------------------


def test_field_selectors(kubectl: Kubectl, namespace: str) -> None:
    """`--field-selector` on metadata.name and metadata.namespace with `=`, `==`, `!=` and commas."""
    for name in ("c1", "c2", "c3"):
        kubectl.run("create", "configmap", name, "-n", namespace)
    by_name = kubectl.run("get", "cm", "-n", namespace, "--field-selector", "metadata.name=c2", "-o", "name")
    assert by_name.out == "configmap/c2\n"
    eqeq = kubectl.run("get", "cm", "-n", namespace, "--field-selector", "metadata.name==c3", "-o", "name")
    assert eqeq.out == "configmap/c3\n"
    across = kubectl.run(
        "get",
        "cm",
        "-A",
        "--field-selector",
        f"metadata.namespace={namespace},metadata.name!=c1",
        "-o",
        "name",
    )
    assert across.out.split() == ["configmap/c2", "configmap/c3"]


def test_unsupported_field_selector_is_400(
    kubectl: Kubectl, namespace: str, shared_apiserver: APIServerProcess
) -> None:
    """An unsupported field label gives 400 BadRequest `field label not supported: <f>`."""
    result = kubectl.fails("get", "cm", "-n", namespace, "--field-selector", "data.k=v")
    assert result.stderr.startswith("Error from server (BadRequest): ")
    assert result.stderr.rstrip().endswith("field label not supported: data.k")

    status, headers, body = shared_apiserver.request(
        "GET", f"/api/v1/namespaces/{namespace}/configmaps?fieldSelector=data.k%3Dv"
    )
    assert status == 400
    assert headers["Content-Type"] == "application/json"
    doc = json.loads(body)
    assert doc["kind"] == "Status"
    assert doc["reason"] == "BadRequest"
    assert doc["message"] == "field label not supported: data.k"


# -- M14 errors ------------------------------------------------------------------------------------


def test_not_found_message(kubectl: Kubectl, namespace: str) -> None:
    """`kubectl get cm nope` prints exactly `Error from server (NotFound): configmaps "nope" not found`."""
    result = kubectl.fails("get", "cm", "nope", "-n", namespace)
    assert result.stderr == 'Error from server (NotFound): configmaps "nope" not found\n'
    assert result.out == ""
    cluster = kubectl.fails("get", "namespace", "nope-" + _uid())
    assert re.fullmatch(
        r'Error from server \(NotFound\): namespaces "nope-[0-9a-f]+" not found\n', cluster.stderr
    )


def test_not_found_status_body(shared_apiserver: APIServerProcess, namespace: str) -> None:
    """The 404 body is the §8 Status object with details {name, kind: <plural>}."""
    status, headers, body = shared_apiserver.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/nope")
    assert status == 404
    assert headers["Content-Type"] == "application/json"
    doc = json.loads(body)
    assert doc == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'configmaps "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "kind": "configmaps"},
        "code": 404,
    }


def test_already_exists_message(kubectl: Kubectl, namespace: str) -> None:
    """Creating a ConfigMap twice gives `Error from server (AlreadyExists): configmaps "c1" already exists`."""
    kubectl.run("create", "configmap", "c1", "-n", namespace)
    result = kubectl.fails("create", "configmap", "c1", "-n", namespace)
    assert result.stderr == 'error: failed to create configmap: configmaps "c1" already exists\n'


# -- M15 optimistic concurrency --------------------------------------------------------------------


def test_replace_with_stale_resource_version_conflicts(
    kubectl: Kubectl, namespace: str, tmp_path: Path
) -> None:
    """`kubectl replace -f stale.yaml` after another write gives `Error from server (Conflict)`."""
    kubectl.run("create", "configmap", "c1", "-n", namespace, "--from-literal=a=1")
    stale = tmp_path / "stale.yaml"
    stale.write_text(kubectl.run("get", "cm", "c1", "-n", namespace, "-o", "yaml").out)
    kubectl.run("patch", "cm", "c1", "-n", namespace, "--type=merge", "-p", '{"data":{"a":"2"}}')
    result = kubectl.fails("replace", "-f", str(stale))
    assert result.stderr == (
        f'Error from server (Conflict): error when replacing "{stale}": Operation cannot be fulfilled on '
        'configmaps "c1": the object has been modified; please apply your changes to the latest version '
        "and try again\n"
    )
    assert get_json(kubectl, "cm", "c1", "-n", namespace)["data"] == {"a": "2"}

    fresh = tmp_path / "fresh.yaml"
    current = get_json(kubectl, "cm", "c1", "-n", namespace)
    current["data"]["a"] = "3"
    fresh.write_text(yaml.safe_dump(current))
    assert kubectl.run("replace", "-f", str(fresh)).out == "configmap/c1 replaced\n"
    assert get_json(kubectl, "cm", "c1", "-n", namespace)["data"] == {"a": "3"}


# -- M16 JSON and merge patch ----------------------------------------------------------------------


def test_json_patch(kubectl: Kubectl, namespace: str) -> None:
    """`kubectl patch --type=json` applies RFC 6902 operations; a failed `test` is 422 Invalid."""
    kubectl.run("create", "configmap", "c1", "-n", namespace, "--from-literal=a=1")
    result = kubectl.run(
        "patch",
        "cm",
        "c1",
        "-n",
        namespace,
        "--type=json",
        "-p",
        '[{"op":"add","path":"/data/b","value":"2"}]',
    )
    assert result.out == "configmap/c1 patched\n"
    assert get_json(kubectl, "cm", "c1", "-n", namespace)["data"] == {"a": "1", "b": "2"}
    kubectl.run(
        "patch",
        "cm",
        "c1",
        "-n",
        namespace,
        "--type=json",
        "-p",
        '[{"op":"test","path":"/data/a","value":"1"},{"op":"remove","path":"/data/a"}]',
    )
    assert get_json(kubectl, "cm", "c1", "-n", namespace)["data"] == {"b": "2"}
    failed = kubectl.fails(
        "patch",
        "cm",
        "c1",
        "-n",
        namespace,
        "--type=json",
        "-p",
        '[{"op":"test","path":"/data/b","value":"x"}]',
    )
    assert failed.stderr == (
        "The request is invalid: the server rejected our request due to an error in our request\n"
    )
    assert get_json(kubectl, "cm", "c1", "-n", namespace)["data"] == {"b": "2"}


def test_merge_patch(kubectl: Kubectl, namespace: str) -> None:
    """`kubectl patch --type=merge` adds, changes and (with null) removes keys."""
    kubectl.run("create", "configmap", "c1", "-n", namespace, "--from-literal=a=1", "--from-literal=b=2")
    result = kubectl.run(
        "patch", "cm", "c1", "-n", namespace, "--type=merge", "-p", '{"data":{"a":null,"b":"3","c":"4"}}'
    )
    assert result.out == "configmap/c1 patched\n"
    assert get_json(kubectl, "cm", "c1", "-n", namespace)["data"] == {"b": "3", "c": "4"}


# -- M17 strategic merge patch and client-side apply -----------------------------------------------


def test_apply_twice_with_change_is_configured(kubectl: Kubectl, namespace: str) -> None:
    """`kubectl apply` of a changed ConfigMap prints `configured` and the change is stored."""
    assert kubectl.apply(configmap("c1", namespace, {"a": "1"})).out == "configmap/c1 created\n"
    result = kubectl.apply(configmap("c1", namespace, {"a": "2", "b": "3"}))
    assert result.out == "configmap/c1 configured\n"
    obj = get_json(kubectl, "cm", "c1", "-n", namespace)
    assert obj["data"] == {"a": "2", "b": "3"}
    last = json.loads(obj["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"])
    assert last["data"] == {"a": "2", "b": "3"}
    removed = kubectl.apply(configmap("c1", namespace, {"b": "3"}))
    assert removed.out == "configmap/c1 configured\n"
    assert get_json(kubectl, "cm", "c1", "-n", namespace)["data"] == {"b": "3"}


def test_strategic_patch_on_builtin(kubectl: Kubectl, namespace: str) -> None:
    """`kubectl patch` (default strategic) works on a ConfigMap and merges containers by name on a Deployment."""
    kubectl.run("create", "configmap", "c1", "-n", namespace, "--from-literal=a=1")
    assert kubectl.run("patch", "cm", "c1", "-n", namespace, "-p", '{"data":{"b":"2"}}').out == (
        "configmap/c1 patched\n"
    )
    assert get_json(kubectl, "cm", "c1", "-n", namespace)["data"] == {"a": "1", "b": "2"}

    kubectl.run("create", "deployment", "d1", "-n", namespace, "--image=nginx:1.27")
    kubectl.run(
        "patch",
        "deployment",
        "d1",
        "-n",
        namespace,
        "-p",
        '{"spec":{"template":{"spec":{"containers":[{"name":"sidecar","image":"busybox:1"}]}}}}',
    )
    containers = get_json(kubectl, "deployment", "d1", "-n", namespace)["spec"]["template"]["spec"][
        "containers"
    ]
    assert [(c["name"], c["image"]) for c in containers] == [
        ("sidecar", "busybox:1"),
        ("nginx", "nginx:1.27"),
    ]


def test_strategic_patch_on_custom_resource_is_unsupported(wk: Kubectl, wns: str) -> None:
    """`kubectl patch widget w1 -p '{}'` prints `…is not supported by example.com/v1, Kind=Widget` (415)."""
    wk.apply(widget("w1", wns))
    result = wk.fails("patch", "widget", "w1", "-n", wns, "-p", "{}")
    assert result.stderr == (
        "error: application/strategic-merge-patch+json is not supported by example.com/v1, Kind=Widget: "
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml\n"
    )


def test_apply_custom_resource_configured(wk: Kubectl, wns: str) -> None:
    """Client-side apply of a changed custom resource (merge patch) prints `configured`."""
    assert wk.apply(widget("w1", wns, size=3)).out == "widget.example.com/w1 created\n"
    assert wk.apply(widget("w1", wns, size=4)).out == "widget.example.com/w1 configured\n"
    assert get_json(wk, "widget", "w1", "-n", wns)["spec"] == {"size": 4, "color": "red"}


# -- M18 apply unchanged ---------------------------------------------------------------------------


def test_apply_twice_unchanged(kubectl: Kubectl, namespace: str, wk: Kubectl, wns: str) -> None:
    """Applying the same manifest twice prints `unchanged` (ConfigMap and Widget) and writes nothing."""
    manifest = configmap("c1", namespace, {"a": "1"})
    kubectl.apply(manifest)
    rv = get_json(kubectl, "cm", "c1", "-n", namespace)["metadata"]["resourceVersion"]
    assert kubectl.apply(manifest).out == "configmap/c1 unchanged\n"
    assert get_json(kubectl, "cm", "c1", "-n", namespace)["metadata"]["resourceVersion"] == rv

    wk.apply(widget("w1", wns))
    assert wk.apply(widget("w1", wns)).out == "widget.example.com/w1 unchanged\n"


# -- M19 server-side apply -------------------------------------------------------------------------


def test_server_side_apply_conflict_and_force(kubectl: Kubectl, namespace: str) -> None:
    """SSA creates; a second manager changing the same field gets `Apply failed with 1 conflict`; force wins."""
    first = kubectl.run("apply", "--server-side", "-f", "-", input=configmap("s1", namespace, {"a": "1"}))
    assert first.out == "configmap/s1 serverside-applied\n"
    changed = configmap("s1", namespace, {"a": "2"})
    conflict = kubectl.fails("apply", "--server-side", "--field-manager=other", "-f", "-", input=changed)
    assert conflict.stderr.startswith("error: Apply failed with 1 conflict: ")
    assert get_json(kubectl, "cm", "s1", "-n", namespace)["data"] == {"a": "1"}

    forced = kubectl.run(
        "apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", "-", input=changed
    )
    assert forced.out == "configmap/s1 serverside-applied\n"
    obj = get_json(kubectl, "cm", "s1", "-n", namespace)
    assert obj["data"] == {"a": "2"}
    owners = {
        (e["manager"], e["operation"]): e["fieldsV1"]
        for e in obj["metadata"]["managedFields"]
        if "f:a" in (e.get("fieldsV1") or {}).get("f:data", {})
    }
    assert list(owners) == [("other", "Apply")]


def test_server_side_apply_records_apply_operation(kubectl: Kubectl, namespace: str) -> None:
    """An SSA create records managedFields `{manager: kubectl, operation: Apply, f:data: {f:a: {}}}` (§9)."""
    kubectl.run("apply", "--server-side", "-f", "-", input=configmap("s1", namespace, {"a": "1"}))
    entries = get_json(kubectl, "cm", "s1", "-n", namespace)["metadata"]["managedFields"]
    assert [(e["manager"], e["operation"], e["apiVersion"]) for e in entries] == [("kubectl", "Apply", "v1")]
    assert entries[0]["fieldsType"] == "FieldsV1"
    assert entries[0]["fieldsV1"]["f:data"]["f:a"] == {}


def test_server_side_apply_conflict_message_names_applier(kubectl: Kubectl, namespace: str) -> None:
    """The conflict with an Apply manager reads `conflict with "kubectl": .data.a` (no `using v1`, §8)."""
    kubectl.run("apply", "--server-side", "-f", "-", input=configmap("s1", namespace, {"a": "1"}))
    conflict = kubectl.fails(
        "apply",
        "--server-side",
        "--field-manager=other",
        "-f",
        "-",
        input=configmap("s1", namespace, {"a": "2"}),
    )
    assert (
        conflict.stderr.splitlines()[0]
        == 'error: Apply failed with 1 conflict: conflict with "kubectl": .data.a'
    )


def test_server_side_apply_conflict_with_updater(kubectl: Kubectl, namespace: str) -> None:
    """SSA over a field set by `kubectl create` names the updater: `conflict with "kubectl-create" using v1`."""
    kubectl.run("create", "configmap", "s1", "-n", namespace, "--from-literal=a=1")
    conflict = kubectl.fails(
        "apply", "--server-side", "-f", "-", input=configmap("s1", namespace, {"a": "2"})
    )
    assert conflict.stderr.splitlines()[0] == (
        'error: Apply failed with 1 conflict: conflict with "kubectl-create" using v1: .data.a'
    )


# -- M28 dry run -----------------------------------------------------------------------------------


def test_apply_dry_run_server_leaves_no_object(kubectl: Kubectl, namespace: str) -> None:
    """`kubectl apply --dry-run=server` prints `(server dry run)` and `kubectl get` shows no object."""
    result = kubectl.apply(configmap("d1", namespace, {"a": "1"}), "--dry-run=server")
    assert result.out == "configmap/d1 created (server dry run)\n"
    assert kubectl.fails("get", "cm", "d1", "-n", namespace).stderr == (
        'Error from server (NotFound): configmaps "d1" not found\n'
    )
    created = kubectl.run("create", "configmap", "d2", "-n", namespace, "--dry-run=server", "-o", "json")
    assert json.loads(created.out)["metadata"]["name"] == "d2"
    kubectl.fails("get", "cm", "d2", "-n", namespace)


def test_dry_run_update_and_delete_change_nothing(kubectl: Kubectl, namespace: str) -> None:
    """Server dry-run apply, patch and delete of an existing object leave it and its resourceVersion alone."""
    kubectl.apply(configmap("c1", namespace, {"a": "1"}))
    before = get_json(kubectl, "cm", "c1", "-n", namespace)
    rv = before["metadata"]["resourceVersion"]
    applied = kubectl.apply(configmap("c1", namespace, {"a": "2"}), "--dry-run=server")
    assert applied.out == "configmap/c1 configured (server dry run)\n"
    patched = kubectl.run(
        "patch", "cm", "c1", "-n", namespace, "--type=merge", "-p", '{"data":{"a":"3"}}', "--dry-run=server"
    )
    assert patched.out.startswith("configmap/c1 patched")  # kubectl's own wording for a dry-run patch
    deleted = kubectl.run("delete", "cm", "c1", "-n", namespace, "--dry-run=server")
    assert deleted.out == f'configmap "c1" deleted from {namespace} namespace (server dry run)\n'
    after = get_json(kubectl, "cm", "c1", "-n", namespace)
    assert after["data"] == {"a": "1"}
    assert after["metadata"]["resourceVersion"] == rv


def test_dry_run_patch_returns_live_resource_version(kubectl: Kubectl, namespace: str) -> None:
    """A dry-run patch answers the would-be object with the live resourceVersion (upstream dryrun storage)."""
    kubectl.run("create", "configmap", "c1", "-n", namespace, "--from-literal=a=1")
    rv = get_json(kubectl, "cm", "c1", "-n", namespace)["metadata"]["resourceVersion"]
    out = kubectl.run(
        "patch",
        "cm",
        "c1",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"data":{"a":"2"}}',
        "--dry-run=server",
        "-o",
        "json",
    ).out
    obj = json.loads(out)
    assert obj["data"] == {"a": "2"}
    assert obj["metadata"].get("resourceVersion") == rv


# -- M29 get --raw ---------------------------------------------------------------------------------


def test_get_raw_paths(kubectl: Kubectl, namespace: str) -> None:
    """`kubectl get --raw` prints the JSON body of discovery, version, object and list paths as-is."""
    kubectl.run("create", "configmap", "c1", "-n", namespace, "--from-literal=a=1")

    def raw(path: str) -> Any:
        return json.loads(kubectl.run("get", "--raw", path).out)

    api = raw("/api")
    assert api["kind"] == "APIVersions"
    assert api["versions"] == ["v1"]
    apis = raw("/apis")
    assert apis["kind"] == "APIGroupList"
    apps = next(g for g in apis["groups"] if g["name"] == "apps")
    assert apps["preferredVersion"] == {"groupVersion": "apps/v1", "version": "v1"}
    core = raw("/api/v1")
    assert core["kind"] == "APIResourceList"
    assert core["groupVersion"] == "v1"
    cms = next(r for r in core["resources"] if r["name"] == "configmaps")
    assert cms["singularName"] == "configmap"
    assert cms["shortNames"] == ["cm"]
    assert cms["namespaced"] is True
    assert sorted(cms["verbs"]) == [
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    ]
    apps_v1 = raw("/apis/apps/v1")
    assert any(r["name"] == "deployments/status" for r in apps_v1["resources"])
    assert raw("/apis/apps")["kind"] == "APIGroup"
    version = raw("/version")
    assert version["major"] == "1"
    assert re.fullmatch(r"v1\.3\d\.\d+", version["gitVersion"])
    obj = raw(f"/api/v1/namespaces/{namespace}/configmaps/c1")
    assert (obj["kind"], obj["apiVersion"], obj["data"]) == ("ConfigMap", "v1", {"a": "1"})
    lst = raw(f"/api/v1/namespaces/{namespace}/configmaps")
    assert lst["kind"] == "ConfigMapList"
    assert lst["metadata"]["resourceVersion"].isdigit()
    assert [i["metadata"]["name"] for i in lst["items"]] == ["c1"]
    openapi = raw("/openapi/v3")
    assert "api/v1" in openapi["paths"]
    assert "?hash=" in openapi["paths"]["api/v1"]["serverRelativeURL"]


def test_get_raw_missing_path(kubectl: Kubectl) -> None:
    """`kubectl get --raw` of an unknown path reports NotFound."""
    result = kubectl.fails("get", "--raw", "/apis/nosuch.example.com/v1")
    assert result.stderr == "Error from server (NotFound): the server could not find the requested resource\n"


# -- S18 health ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/readyz", "/livez", "/healthz"])
def test_health_endpoints(kubectl: Kubectl, path: str) -> None:
    """`kubectl get --raw /readyz` (and /livez, /healthz) prints `ok`."""
    assert kubectl.run("get", "--raw", path).out == "ok"


def test_health_endpoints_list_their_checks_as_upstream(
    kubectl: Kubectl, shared_apiserver: APIServerProcess
) -> None:
    """`?verbose` lists each check and ends `<endpoint> check passed`; `?exclude=` skips one and warns
    about names that match nothing; `/readyz/<check>` runs one; a check the endpoint lacks is a 404."""
    assert kubectl.run("get", "--raw", "/readyz?verbose").out == (
        "[+]ping ok\n[+]log ok\n[+]etcd ok\n[+]etcd-readiness ok\n[+]informer-sync ok\n[+]shutdown ok\n"
        "readyz check passed\n"
    )
    assert kubectl.run("get", "--raw", "/livez?verbose&exclude=etcd&exclude=nope").out == (
        '[+]ping ok\n[+]log ok\n[+]etcd excluded: ok\nwarn: some health checks cannot be excluded: no matches for "nope"\n'
        "livez check passed\n"
    )
    assert kubectl.run("get", "--raw", "/healthz?verbose").out.endswith("[+]etcd ok\nhealthz check passed\n")
    assert kubectl.run("get", "--raw", "/readyz/etcd").out == "ok"
    assert kubectl.run("get", "--raw", "/livez/ping").out == "ok"
    assert shared_apiserver.request("GET", "/livez/shutdown")[0] == 404  # a readiness check only, as upstream
    status, headers, body = shared_apiserver.request("GET", "/readyz/shutdown")
    assert (status, body, headers["Content-Type"]) == (200, b"ok", "text/plain; charset=utf-8")


# -- S1 tables -------------------------------------------------------------------------------------


def test_configmap_table_has_data_column(kubectl: Kubectl, namespace: str) -> None:
    """`kubectl get cm` shows NAME, DATA and AGE; `--show-labels` adds LABELS; `-o wide` works."""
    kubectl.run("create", "configmap", "c1", "-n", namespace, "--from-literal=a=1", "--from-literal=b=2")
    kubectl.run("create", "configmap", "c2", "-n", namespace)
    kubectl.run("label", "cm", "c1", "-n", namespace, "env=a", "tier=web")
    rows = table(kubectl.run("get", "cm", "-n", namespace).out)
    assert rows[0] == ["NAME", "DATA", "AGE"]
    assert [r[:2] for r in rows[1:]] == [["c1", "2"], ["c2", "0"]]
    assert re.fullmatch(r"\d+s", rows[1][2])

    labelled = table(kubectl.run("get", "cm", "-n", namespace, "--show-labels").out)
    assert labelled[0] == ["NAME", "DATA", "AGE", "LABELS"]
    assert labelled[1][0] == "c1"
    assert labelled[1][3] == "env=a,tier=web"
    assert labelled[2][3] == "<none>"

    wide = table(kubectl.run("get", "cm", "-n", namespace, "-o", "wide").out)
    assert wide[0] == ["NAME", "DATA", "AGE"]


def test_builtin_tables(kubectl: Kubectl, namespace: str) -> None:
    """Server-side Tables carry upstream's columns for namespaces, secrets and deployments (-o wide)."""
    kubectl.run("create", "secret", "generic", "s1", "-n", namespace, "--from-literal=a=1")
    kubectl.run("create", "deployment", "d1", "-n", namespace, "--image=nginx:1.27", "--replicas=2")
    ns_rows = table(kubectl.run("get", "namespace", namespace).out)
    assert ns_rows[0] == ["NAME", "STATUS", "AGE"]
    assert ns_rows[1][:2] == [namespace, "Active"]
    secret_rows = table(kubectl.run("get", "secret", "s1", "-n", namespace).out)
    assert secret_rows[0] == ["NAME", "TYPE", "DATA", "AGE"]
    assert secret_rows[1][:3] == ["s1", "Opaque", "1"]
    deploy_rows = table(kubectl.run("get", "deployment", "d1", "-n", namespace, "-o", "wide").out)
    assert deploy_rows[0] == [
        "NAME",
        "READY",
        "UP-TO-DATE",
        "AVAILABLE",
        "AGE",
        "CONTAINERS",
        "IMAGES",
        "SELECTOR",
    ]
    assert deploy_rows[1][0] == "d1"
    assert deploy_rows[1][1] == "0/2"
    assert deploy_rows[1][5:] == ["nginx", "nginx:1.27", "app=d1"]


def test_custom_resource_printer_columns(wk: Kubectl, wns: str) -> None:
    """`kubectl get widgets` shows the CRD's printer columns; priority-1 columns only with `-o wide`."""
    wk.apply(widget("w1", wns, size=3, color="red"))
    wk.apply(widget("w2", wns, size=5, color="blue"))
    assert table(wk.run("get", "widgets", "-n", wns).out) == [["NAME", "SIZE"], ["w1", "3"], ["w2", "5"]]
    assert table(wk.run("get", "wd", "-n", wns, "-o", "wide").out) == [
        ["NAME", "SIZE", "COLOR"],
        ["w1", "3", "red"],
        ["w2", "5", "blue"],
    ]
    wk.run("label", "widget", "w1", "-n", wns, "x=y")
    labelled = table(wk.run("get", "widgets", "-n", wns, "--show-labels").out)
    assert labelled[0] == ["NAME", "SIZE", "LABELS"]
    assert labelled[1] == ["w1", "3", "x=y"]


# -- S3 OpenAPI-driven client-side apply -----------------------------------------------------------


def test_apply_existing_configmap_without_openapi_warning(kubectl: Kubectl, namespace: str) -> None:
    """Client-side apply on an existing ConfigMap prints no `error calculating patch from openapi v3 spec`."""
    kubectl.apply(configmap("c1", namespace, {"a": "1"}))
    result = kubectl.apply(configmap("c1", namespace, {"a": "2"}), "-v=6")
    assert result.out == "configmap/c1 configured\n"
    assert "error calculating patch from openapi" not in result.stderr
    patches = [(q, s) for verb, p, q, s in logged_requests(result.stderr) if verb == "PATCH"]
    assert patches == [({"fieldManager": ["kubectl-client-side-apply"], "fieldValidation": ["Strict"]}, 200)]
    quiet = kubectl.apply(configmap("c1", namespace, {"a": "3"}))
    assert quiet.stderr == ""


# -- S4 / S16 field validation ---------------------------------------------------------------------


def test_unknown_field_strict_builtin(kubectl: Kubectl, namespace: str) -> None:
    """An unknown top-level field on a ConfigMap is BadRequest `strict decoding error: unknown field "foo"`."""
    result = kubectl.fails("apply", "-f", "-", input=configmap("bad", namespace, {}, foo=1))
    assert result.stderr == (
        'Error from server (BadRequest): error when creating "STDIN": ConfigMap in version "v1" cannot be '
        'handled as a ConfigMap: strict decoding error: unknown field "foo"\n'
    )
    kubectl.fails("get", "cm", "bad", "-n", namespace)


def test_unknown_field_strict_custom_resource(wk: Kubectl, wns: str) -> None:
    """An unknown field in a Widget's spec is BadRequest `strict decoding error: unknown field "spec.foo"`."""
    doc = yaml.safe_load(widget("bad", wns))
    doc["spec"]["foo"] = 1
    result = wk.fails("create", "-f", "-", input=yaml.safe_dump(doc))
    assert result.stderr == (
        'Error from server (BadRequest): error when creating "STDIN": Widget in version "v1" cannot be '
        'handled as a Widget: strict decoding error: unknown field "spec.foo"\n'
    )


def test_validate_warn_prints_warning(kubectl: Kubectl, namespace: str, wk: Kubectl, wns: str) -> None:
    """`--validate=warn` (fieldValidation=Warn) creates the object and prints `Warning: unknown field "…"`."""
    result = kubectl.run("create", "-f", "-", "--validate=warn", input=configmap("w1", namespace, {}, foo=1))
    assert result.out == "configmap/w1 created\n"
    assert result.stderr == 'Warning: unknown field "foo"\n'

    doc = yaml.safe_load(widget("w1", wns))
    doc["spec"]["foo"] = 1
    cr = wk.run("create", "-f", "-", "--validate=warn", input=yaml.safe_dump(doc))
    assert cr.out == "widget.example.com/w1 created\n"
    assert cr.stderr == 'Warning: unknown field "spec.foo"\n'
    assert get_json(wk, "widget", "w1", "-n", wns)["spec"] == {"size": 3, "color": "red"}


def test_unknown_fields_of_builtin_are_dropped(kubectl: Kubectl, namespace: str) -> None:
    """With Warn or Ignore an unknown ConfigMap field is not stored (upstream decodes into the typed struct)."""
    kubectl.run("create", "-f", "-", "--validate=warn", input=configmap("w1", namespace, {"a": "1"}, foo=1))
    ignored = kubectl.run(
        "create", "-f", "-", "--validate=false", input=configmap("w2", namespace, {}, foo=1)
    )
    assert ignored.stderr == ""
    for name in ("w1", "w2"):
        assert "foo" not in get_json(kubectl, "cm", name, "-n", namespace)


def test_field_validation_query_warn(shared_apiserver: APIServerProcess, namespace: str) -> None:
    """POST with `fieldValidation=Warn` answers 201 and a `Warning: 299 - "unknown field \\"foo\\""` header."""
    body = json.dumps(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "q1"}, "foo": 1, "data": {"a": "1"}}
    ).encode()
    status, headers, _ = shared_apiserver.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/configmaps?fieldValidation=Warn",
        body,
        {"Content-Type": "application/json"},
    )
    assert status == 201
    assert headers["Warning"] == '299 - "unknown field \\"foo\\""'


# -- S8 deletecollection ---------------------------------------------------------------------------


def test_delete_all_configmaps(kubectl: Kubectl, namespace: str) -> None:
    """`kubectl delete cm --all` deletes every ConfigMap in the namespace, and only there."""
    for name in ("c1", "c2", "c3"):
        kubectl.run("create", "configmap", name, "-n", namespace)
    kubectl.run("label", "cm", "c3", "-n", namespace, "keep=yes")
    other = "keep-" + _uid()
    kubectl.run("create", "namespace", other)
    kubectl.run("create", "configmap", "c1", "-n", other)

    selected = kubectl.run("delete", "cm", "-n", namespace, "-l", "!keep")
    assert selected.out == (
        f'configmap "c1" deleted from {namespace} namespace\nconfigmap "c2" deleted from {namespace} namespace\n'
    )
    result = kubectl.run("delete", "cm", "--all", "-n", namespace)
    assert result.out == f'configmap "c3" deleted from {namespace} namespace\n'
    empty = kubectl.run("get", "cm", "-n", namespace)
    assert empty.out == ""
    assert empty.stderr == f"No resources found in {namespace} namespace.\n"
    assert kubectl.run("get", "cm", "-n", other, "-o", "name").out == "configmap/c1\n"


def test_deletecollection_raw(shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str) -> None:
    """DELETE on the collection URL with a labelSelector removes only the matching objects."""
    for name, env in (("c1", "a"), ("c2", "b"), ("c3", "a")):
        kubectl.apply(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": namespace, "labels": {"env": env}},
                }
            )
        )
    status, headers, body = shared_apiserver.request(
        "DELETE", f"/api/v1/namespaces/{namespace}/configmaps?labelSelector=env%3Da"
    )
    assert status == 200
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body)["kind"] == "ConfigMapList"
    assert kubectl.run("get", "cm", "-n", namespace, "-o", "name").out == "configmap/c2\n"


# -- describe, explain, diff -----------------------------------------------------------------------


def test_describe_configmap(kubectl: Kubectl, namespace: str) -> None:
    """`kubectl describe cm` prints name, namespace, labels and each data key."""
    kubectl.run("create", "configmap", "c1", "-n", namespace, "--from-literal=a=one", "--from-literal=b=two")
    kubectl.run("label", "cm", "c1", "-n", namespace, "env=a")
    out = kubectl.run("describe", "cm", "c1", "-n", namespace).out
    assert re.search(r"^Name:\s+c1$", out, re.M)
    assert re.search(rf"^Namespace:\s+{namespace}$", out, re.M)
    assert re.search(r"^Labels:\s+env=a$", out, re.M)
    assert re.search(r"^Annotations:\s+<none>$", out, re.M)
    assert "\nData\n====\na:\n----\none\n\nb:\n----\ntwo\n" in out
    assert re.search(r"^Events:\s+<none>$", out, re.M)


def test_describe_namespace(kubectl: Kubectl, namespace: str) -> None:
    """`kubectl describe namespace` prints its name, labels and `Status: Active`."""
    out = kubectl.run("describe", "namespace", namespace).out
    assert re.search(rf"^Name:\s+{namespace}$", out, re.M)
    assert re.search(rf"^Labels:\s+kubernetes.io/metadata.name={namespace}$", out, re.M)
    assert re.search(r"^Status:\s+Active$", out, re.M)


def test_explain_configmaps(kubectl: Kubectl) -> None:
    """`kubectl explain configmaps` reads the v3 schema: kind, version and the fields with their types."""
    out = kubectl.run("explain", "configmaps").out
    assert re.search(r"^KIND:\s+ConfigMap$", out, re.M)
    assert re.search(r"^VERSION:\s+v1$", out, re.M)
    for field, kind in [
        ("apiVersion", "string"),
        ("binaryData", "map[string]string"),
        ("data", "map[string]string"),
        ("immutable", "boolean"),
        ("kind", "string"),
        ("metadata", "ObjectMeta"),
    ]:
        assert re.search(rf"^  {field}\t<{re.escape(kind)}>$", out, re.M), (field, out)


def test_explain_reads_the_v2_document(kubectl: Kubectl) -> None:
    """`kubectl explain --output plaintext-openapiv2` reads /openapi/v2 as gnostic protobuf (client-go's
    OpenAPISchema, as Argo CD and older tools do): the kind and its fields with their types."""
    out = kubectl.run("explain", "configmaps", "--output", "plaintext-openapiv2").out
    assert re.search(r"^KIND:\s+ConfigMap$", out, re.M)
    for field, kind in [
        ("binaryData", "map[string]string"),
        ("immutable", "boolean"),
        ("metadata", "Object"),
    ]:
        assert re.search(rf"^   {field}\t<{re.escape(kind)}>$", out, re.M), (field, out)
    nested = kubectl.run("explain", "deployments.spec.strategy", "--output", "plaintext-openapiv2").out
    assert re.search(r"^   rollingUpdate\t<Object>$", nested, re.M), nested


def test_openapi_v2_negotiates_json_or_protobuf_and_answers_not_modified(
    shared_apiserver: APIServerProcess,
) -> None:
    """/openapi/v2 as kube-openapi serves it: JSON by default, gnostic protobuf when asked, 406 for
    neither, one ETag for both forms and 304 when the client has it."""
    status, headers, body = shared_apiserver.request("GET", "/openapi/v2")
    assert status == 200 and headers["Content-Type"] == "application/json"
    doc = json.loads(body)
    assert doc["swagger"] == "2.0"
    pod = doc["definitions"]["io.k8s.api.core.v1.Pod"]
    assert pod["x-kubernetes-group-version-kind"] == [{"group": "", "kind": "Pod", "version": "v1"}]
    assert (
        pod["properties"]["metadata"]["$ref"]
        == "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    )
    assert "#/components/" not in body.decode()
    assert "/api/v1/namespaces/{namespace}/pods/{name}" in doc["paths"]
    etag = headers["Etag"]
    proto_status, proto_headers, proto = shared_apiserver.request(
        "GET", "/openapi/v2", headers={"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"}
    )
    assert proto_status == 200
    assert proto_headers["Content-Type"] == "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    assert proto_headers["Etag"] == etag and proto[:5] == b"\x0a\x032.0"  # field 1 (swagger): "2.0"
    assert shared_apiserver.request("GET", "/openapi/v2", headers={"Accept": "text/html"})[0] == 406
    assert shared_apiserver.request("GET", "/openapi/v2", headers={"If-None-Match": etag})[0] == 304


def test_diff_shows_change_and_exits_1(kubectl: Kubectl, namespace: str, tmp_path: Path) -> None:
    """`kubectl diff -f` shows only the changed data (exit 1) and changes nothing; no change gives exit 0."""
    path = tmp_path / "cm.yaml"
    path.write_text(configmap("c1", namespace, {"a": "1", "b": "2"}))
    kubectl.run("apply", "-f", str(path))
    same = kubectl.run("diff", "-f", str(path), check=False)
    assert (same.code, same.out) == (0, "")
    path.write_text(configmap("c1", namespace, {"a": "1", "b": "3"}))
    result = kubectl.run("diff", "-f", str(path), check=False)
    assert result.code == 1, result.stderr
    changed = [
        line for line in result.out.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert changed[:2] == ['-  b: "2"', '+  b: "3"']
    assert all("resourceVersion" not in line and "generation" not in line for line in changed), changed
    assert get_json(kubectl, "cm", "c1", "-n", namespace)["data"] == {"a": "1", "b": "2"}
