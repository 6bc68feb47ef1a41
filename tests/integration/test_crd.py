"""CustomResourceDefinitions through kubectl (checklist M20, M21, S5): serving, status, schemas, versions."""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from harness import APIServerProcess, Kubectl

pytestmark = pytest.mark.integration

# -- helpers ---------------------------------------------------------------------------------------

WIDGET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "properties": {
                "size": {"type": "integer", "default": 1, "description": "How many parts the widget has."},
                "color": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
        },
        "status": {"type": "object", "properties": {"ok": {"type": "boolean"}, "phase": {"type": "string"}}},
    },
}


@dataclass
class CRD:
    group: str
    kind: str
    plural: str
    singular: str
    short: str
    scope: str

    @property
    def name(self) -> str:
        return f"{self.plural}.{self.group}"

    def resource(self, version: str = "") -> str:
        """The `plural.version.group` form kubectl accepts, or `plural.group`."""
        return f"{self.plural}.{version}.{self.group}" if version else self.name


def _uid() -> str:
    return os.urandom(3).hex()


def crd_manifest(crd: CRD, versions: list[dict[str, Any]]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": crd.name},
            "spec": {
                "group": crd.group,
                "names": {
                    "kind": crd.kind,
                    "plural": crd.plural,
                    "singular": crd.singular,
                    "listKind": crd.kind + "List",
                    "shortNames": [crd.short],
                },
                "scope": crd.scope,
                "versions": versions,
            },
        }
    )


def version(
    name: str,
    *,
    storage: bool = True,
    schema: dict[str, Any] | None = None,
    status: bool = True,
) -> dict[str, Any]:
    v: dict[str, Any] = {
        "name": name,
        "served": True,
        "storage": storage,
        "schema": {"openAPIV3Schema": schema if schema is not None else WIDGET_SCHEMA},
    }
    if status:
        v["subresources"] = {"status": {}}
    return v


def install(kubectl: Kubectl, crd: CRD, versions: list[dict[str, Any]]) -> None:
    result = kubectl.apply(crd_manifest(crd, versions))
    assert result.out == f"customresourcedefinition.apiextensions.k8s.io/{crd.name} created\n"
    waited = kubectl.run("wait", "--for=condition=Established", f"crd/{crd.name}", "--timeout=30s")
    assert waited.out == f"customresourcedefinition.apiextensions.k8s.io/{crd.name} condition met\n"


def new_crd(scope: str = "Namespaced") -> CRD:
    """Names of a CRD of this test's own (the shared server is shared by many tests)."""
    suffix = _uid()
    return CRD(
        group=f"t{suffix}.example.com",
        kind="Widget",
        plural="widgets",
        singular="widget",
        short=f"wd{suffix}",
        scope=scope,
    )


@pytest.fixture
def widgets(kubectl: Kubectl) -> CRD:
    """A namespaced Widget CRD with a status subresource, served at v1."""
    crd = new_crd()
    install(kubectl, crd, [version("v1")])
    return crd


def cr(crd: CRD, name: str, namespace: str | None, spec: dict[str, Any], api_version: str = "v1") -> str:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    return yaml.safe_dump(
        {"apiVersion": f"{crd.group}/{api_version}", "kind": crd.kind, "metadata": meta, "spec": spec}
    )


def get_json(kubectl: Kubectl, *args: str) -> Any:
    return json.loads(kubectl.run("get", *args, "-o", "json").out)


def wait_until_gone(server: APIServerProcess, path: str, deadline: float = 15.0) -> None:
    """Poll a raw path until it answers 404 (a CRD's resources disappear after its deletion completes)."""
    end = time.monotonic() + deadline
    while True:
        status, _, body = server.request("GET", path)
        if status == 404:
            return
        assert time.monotonic() < end, f"{path} still answers {status}: {body[:300]!r}"
        time.sleep(0.1)


# -- M20 serving -----------------------------------------------------------------------------------


def test_crd_established_and_served(kubectl: Kubectl, namespace: str, widgets: CRD) -> None:
    """After `wait --for=condition=Established`, instances are served by plural, singular, shortName and kind."""
    crd_obj = get_json(kubectl, "crd", widgets.name)
    conditions = {c["type"]: c["status"] for c in crd_obj["status"]["conditions"]}
    assert conditions["Established"] == "True"
    assert conditions["NamesAccepted"] == "True"
    assert crd_obj["status"]["acceptedNames"]["kind"] == "Widget"
    assert crd_obj["status"]["acceptedNames"]["shortNames"] == [widgets.short]
    assert crd_obj["status"]["storedVersions"] == ["v1"]

    created = kubectl.apply(cr(widgets, "w1", namespace, {"size": 3}))
    assert created.out == f"widget.{widgets.group}/w1 created\n"
    kubectl.apply(cr(widgets, "w2", namespace, {"size": 4}))
    for ref in (widgets.resource(), f"widget.{widgets.group}", widgets.short, f"Widget.v1.{widgets.group}"):
        out = kubectl.run("get", ref, "-n", namespace, "-o", "name").out
        assert out == f"widget.{widgets.group}/w1\nwidget.{widgets.group}/w2\n", ref
    one = get_json(kubectl, widgets.short, "w1", "-n", namespace)
    assert one["apiVersion"] == f"{widgets.group}/v1"
    assert one["kind"] == "Widget"
    assert one["spec"] == {"size": 3}
    assert one["metadata"]["generation"] == 1

    listed = get_json(kubectl, widgets.resource(), "-n", namespace)
    assert listed["kind"] == "List"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["w1", "w2"]
    raw = json.loads(
        kubectl.run("get", "--raw", f"/apis/{widgets.group}/v1/namespaces/{namespace}/widgets").out
    )
    assert raw["kind"] == "WidgetList"
    assert raw["apiVersion"] == f"{widgets.group}/v1"

    missing = kubectl.fails("get", widgets.resource(), "nope", "-n", namespace)
    assert missing.stderr == f'Error from server (NotFound): widgets.{widgets.group} "nope" not found\n'


def test_custom_resource_default_age_column(kubectl: Kubectl, namespace: str, widgets: CRD) -> None:
    """Without additionalPrinterColumns, `kubectl get` shows NAME and AGE (apiextensions' default column)."""
    kubectl.apply(cr(widgets, "w1", namespace, {"size": 3}))
    table = kubectl.run("get", widgets.resource(), "-n", namespace).out.splitlines()
    assert re.fullmatch(r"NAME\s+AGE", table[0]), table
    assert re.fullmatch(r"w1\s+\d+s", table[1]), table


def test_crd_discovery(kubectl: Kubectl, widgets: CRD) -> None:
    """The new group appears in /apis, /apis/<g>/v1 (with the status subresource) and in `api-resources`."""
    apis = json.loads(kubectl.run("get", "--raw", "/apis").out)
    group = next(g for g in apis["groups"] if g["name"] == widgets.group)
    assert group["preferredVersion"] == {"groupVersion": f"{widgets.group}/v1", "version": "v1"}
    resources = json.loads(kubectl.run("get", "--raw", f"/apis/{widgets.group}/v1").out)["resources"]
    by_name = {r["name"]: r for r in resources}
    assert by_name["widgets"]["kind"] == "Widget"
    assert by_name["widgets"]["singularName"] == "widget"
    assert by_name["widgets"]["namespaced"] is True
    assert by_name["widgets"]["shortNames"] == [widgets.short]
    assert sorted(by_name["widgets/status"]["verbs"]) == ["get", "patch", "update"]
    out = kubectl.run("api-resources", f"--api-group={widgets.group}").out.splitlines()
    assert re.fullmatch(rf"widgets\s+{widgets.short}\s+{re.escape(widgets.group)}/v1\s+true\s+Widget", out[1])


def test_cluster_scoped_crd(kubectl: Kubectl, shared_apiserver: APIServerProcess) -> None:
    """A Cluster-scoped CRD serves instances without a namespace at /apis/<g>/<v>/<plural>/<name>."""
    crd = new_crd(scope="Cluster")
    crd.kind, crd.plural, crd.singular = "Gadget", "gadgets", "gadget"
    install(kubectl, crd, [version("v1")])
    assert kubectl.apply(cr(crd, "g1", None, {"size": 2})).out == f"gadget.{crd.group}/g1 created\n"
    obj = get_json(kubectl, crd.short, "g1")
    assert "namespace" not in obj["metadata"]
    assert obj["spec"] == {"size": 2}
    raw = json.loads(kubectl.run("get", "--raw", f"/apis/{crd.group}/v1/gadgets/g1").out)
    assert raw["metadata"]["uid"] == obj["metadata"]["uid"]
    discovery = json.loads(kubectl.run("get", "--raw", f"/apis/{crd.group}/v1").out)
    assert next(r for r in discovery["resources"] if r["name"] == "gadgets")["namespaced"] is False
    status, _, _ = shared_apiserver.request("GET", f"/apis/{crd.group}/v1/namespaces/default/gadgets")
    assert status == 404
    assert kubectl.run("delete", crd.short, "g1").out == f'gadget.{crd.group} "g1" deleted\n'


def test_crd_deletion_removes_instances(
    kubectl: Kubectl, namespace: str, shared_apiserver: APIServerProcess
) -> None:
    """Deleting a CRD deletes its instances: recreated, the CRD serves an empty list."""
    crd = new_crd()
    install(kubectl, crd, [version("v1")])
    kubectl.apply(cr(crd, "w1", namespace, {"size": 1}))
    kubectl.apply(cr(crd, "w2", namespace, {"size": 2}))
    result = kubectl.run("delete", "crd", crd.name)
    assert result.out == f'customresourcedefinition.apiextensions.k8s.io "{crd.name}" deleted\n'
    wait_until_gone(shared_apiserver, f"/apis/{crd.group}/v1/namespaces/{namespace}/widgets")
    assert kubectl.fails("get", "crd", crd.name).stderr == (
        f'Error from server (NotFound): customresourcedefinitions.apiextensions.k8s.io "{crd.name}" not found\n'
    )

    install(kubectl, crd, [version("v1")])
    listed = kubectl.run("get", crd.resource(), "-n", namespace)
    assert listed.out == ""
    assert listed.stderr == f"No resources found in {namespace} namespace.\n"
    status, _, body = shared_apiserver.request("GET", f"/apis/{crd.group}/v1/widgets")
    assert status == 200
    assert json.loads(body)["items"] == []


# -- M21 status subresource ------------------------------------------------------------------------


def test_status_patch_keeps_generation(kubectl: Kubectl, namespace: str, widgets: CRD) -> None:
    """`patch --subresource=status` changes status only and leaves metadata.generation unchanged."""
    kubectl.apply(cr(widgets, "w1", namespace, {"size": 3}))
    result = kubectl.run(
        "patch",
        widgets.resource(),
        "w1",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"ok":true}}',
    )
    assert result.out == f"widget.{widgets.group}/w1 patched\n"
    obj = get_json(kubectl, widgets.resource(), "w1", "-n", namespace)
    assert obj["status"] == {"ok": True}
    assert obj["metadata"]["generation"] == 1
    status = json.loads(
        kubectl.run("get", "--raw", f"/apis/{widgets.group}/v1/namespaces/{namespace}/widgets/w1/status").out
    )
    assert status["status"] == {"ok": True}


def test_spec_change_bumps_generation(kubectl: Kubectl, namespace: str, widgets: CRD) -> None:
    """A spec change increments generation; label/annotation changes do not."""
    kubectl.apply(cr(widgets, "w1", namespace, {"size": 3}))
    kubectl.run(
        "patch", widgets.resource(), "w1", "-n", namespace, "--type=merge", "-p", '{"spec":{"size":4}}'
    )
    assert get_json(kubectl, widgets.resource(), "w1", "-n", namespace)["metadata"]["generation"] == 2
    kubectl.run("label", widgets.resource(), "w1", "-n", namespace, "a=b")
    kubectl.run("annotate", widgets.resource(), "w1", "-n", namespace, "note=x")
    obj = get_json(kubectl, widgets.resource(), "w1", "-n", namespace)
    assert obj["metadata"]["generation"] == 2
    assert obj["metadata"]["labels"] == {"a": "b"}
    kubectl.apply(cr(widgets, "w1", namespace, {"size": 5}))
    assert get_json(kubectl, widgets.resource(), "w1", "-n", namespace)["metadata"]["generation"] == 3


def test_main_resource_writes_ignore_status(kubectl: Kubectl, namespace: str, widgets: CRD) -> None:
    """With a status subresource, patch/replace of the main resource ignore `.status`."""
    kubectl.apply(cr(widgets, "w1", namespace, {"size": 3}))
    kubectl.run(
        "patch", widgets.resource(), "w1", "-n", namespace, "--subresource=status", "--type=merge",
        "-p", '{"status":{"phase":"Ready"}}',
    )  # fmt: skip
    kubectl.run(
        "patch", widgets.resource(), "w1", "-n", namespace, "--type=merge",
        "-p", '{"spec":{"size":9},"status":{"phase":"Hacked"}}',
    )  # fmt: skip
    obj = get_json(kubectl, widgets.resource(), "w1", "-n", namespace)
    assert obj["spec"]["size"] == 9
    assert obj["status"] == {"phase": "Ready"}

    obj["status"] = {"phase": "Replaced"}
    obj["spec"]["size"] = 10
    replaced = kubectl.run("replace", "-f", "-", input=json.dumps(obj))
    assert replaced.out == f"widget.{widgets.group}/w1 replaced\n"
    after = get_json(kubectl, widgets.resource(), "w1", "-n", namespace)
    assert after["spec"]["size"] == 10
    assert after["status"] == {"phase": "Ready"}

    created = cr(widgets, "w2", namespace, {"size": 1})
    doc = yaml.safe_load(created)
    doc["status"] = {"phase": "Born"}
    kubectl.run("create", "-f", "-", input=yaml.safe_dump(doc))
    assert "status" not in get_json(kubectl, widgets.resource(), "w2", "-n", namespace)


def test_status_writes_ignore_spec(kubectl: Kubectl, namespace: str, widgets: CRD) -> None:
    """A write to /status ignores spec changes (and so leaves generation alone)."""
    kubectl.apply(cr(widgets, "w1", namespace, {"size": 3}))
    kubectl.run(
        "patch", widgets.resource(), "w1", "-n", namespace, "--subresource=status", "--type=merge",
        "-p", '{"spec":{"size":99},"status":{"ok":false}}',
    )  # fmt: skip
    obj = get_json(kubectl, widgets.resource(), "w1", "-n", namespace)
    assert obj["spec"] == {"size": 3}
    assert obj["status"] == {"ok": False}
    assert obj["metadata"]["generation"] == 1


# -- S5 structural schemas -------------------------------------------------------------------------


def test_wrong_type_is_invalid(kubectl: Kubectl, namespace: str, widgets: CRD) -> None:
    """A string where the schema says integer is 422: `Invalid value: "string": spec.size in body must be of type integer`."""
    result = kubectl.fails("apply", "-f", "-", input=cr(widgets, "bad", namespace, {"size": "string"}))
    assert result.stderr == (
        'The Widget "bad" is invalid: spec.size: Invalid value: "string": '
        'spec.size in body must be of type integer: "string"\n'
    )
    kubectl.fails("get", widgets.resource(), "bad", "-n", namespace)


def test_wrong_type_status_body(shared_apiserver: APIServerProcess, namespace: str, widgets: CRD) -> None:
    """The 422 body is Invalid with details.kind the Kind and a FieldValueInvalid cause on spec.size."""
    body = json.dumps(yaml.safe_load(cr(widgets, "bad", namespace, {"size": "string"}))).encode()
    status, headers, raw = shared_apiserver.request(
        "POST",
        f"/apis/{widgets.group}/v1/namespaces/{namespace}/widgets",
        body,
        {"Content-Type": "application/json"},
    )
    assert status == 422
    assert headers["Content-Type"] == "application/json"
    doc = json.loads(raw)
    assert doc["reason"] == "Invalid"
    assert doc["details"]["kind"] == "Widget"
    assert doc["details"]["group"] == widgets.group
    assert doc["details"]["name"] == "bad"
    assert doc["details"]["causes"] == [
        {
            "reason": "FieldValueTypeInvalid",
            "message": 'Invalid value: "string": spec.size in body must be of type integer: "string"',
            "field": "spec.size",
        }
    ]


def test_defaults_applied(kubectl: Kubectl, namespace: str, widgets: CRD) -> None:
    """Schema defaults are applied on create (spec.size defaults to 1)."""
    kubectl.apply(cr(widgets, "w1", namespace, {"color": "blue"}))
    assert get_json(kubectl, widgets.resource(), "w1", "-n", namespace)["spec"] == {
        "color": "blue",
        "size": 1,
    }


def test_unknown_field_strict_is_bad_request(kubectl: Kubectl, namespace: str, widgets: CRD) -> None:
    """With default (Strict) validation an unknown field is 400 `strict decoding error: unknown field "spec.foo"`."""
    result = kubectl.fails("create", "-f", "-", input=cr(widgets, "w1", namespace, {"size": 1, "foo": 1}))
    assert result.stderr == (
        'Error from server (BadRequest): error when creating "STDIN": Widget in version "v1" cannot be '
        'handled as a Widget: strict decoding error: unknown field "spec.foo"\n'
    )


def test_unknown_field_ignore_prunes_silently(kubectl: Kubectl, namespace: str, widgets: CRD) -> None:
    """With `--validate=false` (Ignore) unknown fields are pruned without a warning."""
    result = kubectl.run(
        "create", "-f", "-", "--validate=false", input=cr(widgets, "w1", namespace, {"size": 1, "foo": 1})
    )
    assert result.out == f"widget.{widgets.group}/w1 created\n"
    assert result.stderr == ""
    assert get_json(kubectl, widgets.resource(), "w1", "-n", namespace)["spec"] == {"size": 1}


def test_unknown_field_warn_prunes_with_warning(kubectl: Kubectl, namespace: str, widgets: CRD) -> None:
    """With `--validate=warn` unknown fields are pruned and reported as `Warning: unknown field "spec.foo"`."""
    result = kubectl.run(
        "create", "-f", "-", "--validate=warn", input=cr(widgets, "w1", namespace, {"size": 1, "foo": 1})
    )
    assert result.stderr == 'Warning: unknown field "spec.foo"\n'
    assert get_json(kubectl, widgets.resource(), "w1", "-n", namespace)["spec"] == {"size": 1}


def test_explain_custom_resource(kubectl: Kubectl, widgets: CRD) -> None:
    """`kubectl explain widgets.spec` lists the schema's fields with types and descriptions (S2)."""
    out = kubectl.run("explain", "widgets.spec", f"--api-version={widgets.group}/v1").out
    assert re.search(rf"^GROUP:\s+{re.escape(widgets.group)}$", out, re.M)
    assert re.search(r"^KIND:\s+Widget$", out, re.M)
    assert re.search(r"^  size\t<integer>$", out, re.M)
    assert re.search(r"^  tags\t<\[\]string>$", out, re.M)
    assert "How many parts the widget has." in out
    v2 = kubectl.run(
        "explain", "widgets.spec", f"--api-version={widgets.group}/v1", "--output", "plaintext-openapiv2"
    ).out
    assert re.search(r"^   size\t<integer>", v2, re.M), v2
    assert "How many parts the widget has." in v2


# -- multiple versions -----------------------------------------------------------------------------


@pytest.fixture
def two_versions(kubectl: Kubectl) -> CRD:
    """A CRD serving v1alpha1 and v1 (storage v1) with conversion strategy None."""
    crd = new_crd()
    install(kubectl, crd, [version("v1alpha1", storage=False), version("v1")])
    return crd


def test_multiple_versions_discovery(kubectl: Kubectl, two_versions: CRD) -> None:
    """Both versions are served; v1 is preferred and the only stored version."""
    crd = two_versions
    apis = json.loads(kubectl.run("get", "--raw", "/apis").out)
    group = next(g for g in apis["groups"] if g["name"] == crd.group)
    assert sorted(v["version"] for v in group["versions"]) == ["v1", "v1alpha1"]
    assert group["preferredVersion"] == {"groupVersion": f"{crd.group}/v1", "version": "v1"}
    assert get_json(kubectl, "crd", crd.name)["status"]["storedVersions"] == ["v1"]


def test_object_created_in_storage_version_served_in_both(
    kubectl: Kubectl, namespace: str, two_versions: CRD
) -> None:
    """An object created at v1 reads back with apiVersion rewritten to whichever version was requested."""
    crd = two_versions
    kubectl.apply(cr(crd, "w1", namespace, {"size": 2}, api_version="v1"))
    assert get_json(kubectl, crd.resource("v1"), "w1", "-n", namespace)["apiVersion"] == f"{crd.group}/v1"
    old = get_json(kubectl, crd.resource("v1alpha1"), "w1", "-n", namespace)
    assert old["apiVersion"] == f"{crd.group}/v1alpha1"
    assert old["spec"] == {"size": 2}
    listed = json.loads(
        kubectl.run("get", "--raw", f"/apis/{crd.group}/v1alpha1/namespaces/{namespace}/widgets").out
    )
    assert listed["apiVersion"] == f"{crd.group}/v1alpha1"
    assert [i["apiVersion"] for i in listed["items"]] == [f"{crd.group}/v1alpha1"]


def test_object_created_in_other_version_served_in_both(
    kubectl: Kubectl, namespace: str, two_versions: CRD
) -> None:
    """An object created at v1alpha1 is stored at v1 and reads back as v1 from v1 (get, raw get and list)."""
    crd = two_versions
    created = kubectl.apply(cr(crd, "w1", namespace, {"size": 2}, api_version="v1alpha1"))
    assert created.out == f"widget.{crd.group}/w1 created\n"
    assert get_json(kubectl, crd.resource("v1alpha1"), "w1", "-n", namespace)["apiVersion"] == (
        f"{crd.group}/v1alpha1"
    )
    assert get_json(kubectl, crd.resource("v1"), "w1", "-n", namespace)["apiVersion"] == f"{crd.group}/v1"
    raw = json.loads(
        kubectl.run("get", "--raw", f"/apis/{crd.group}/v1/namespaces/{namespace}/widgets/w1").out
    )
    assert raw["apiVersion"] == f"{crd.group}/v1"
    listed = json.loads(
        kubectl.run("get", "--raw", f"/apis/{crd.group}/v1/namespaces/{namespace}/widgets").out
    )
    assert [i["apiVersion"] for i in listed["items"]] == [f"{crd.group}/v1"]
    # The write's own answer is in the version the request used (the stored bytes are the storage version).
    answered = json.loads(
        kubectl.run(
            "create",
            "-f",
            "-",
            "-o",
            "json",
            input=cr(crd, "w2", namespace, {"size": 3}, api_version="v1alpha1"),
        ).out
    )
    assert answered["apiVersion"] == f"{crd.group}/v1alpha1"
    assert answered["spec"] == {"size": 3}
