"""Object lifecycle: namespaces terminate with their content, finalizers hold deletion, owners take
dependents with them (ownerReferences garbage collection, Background/Foreground/Orphan)."""

from __future__ import annotations

import time
from collections.abc import Callable

import orjson
import pytest

from harness import Kubectl

pytestmark = pytest.mark.integration


def eventually(check: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.1)


def exists(kubectl: Kubectl, *args: str) -> bool:
    return kubectl.run("get", *args, check=False).code == 0


def test_namespace_deletion_removes_everything_inside(kubectl: Kubectl) -> None:
    """M24: deleting a namespace deletes its objects, then the namespace itself (NotFound afterwards)."""
    ns = f"gone-{time.monotonic_ns() % 100000}"
    kubectl.run("create", "namespace", ns)
    kubectl.run("-n", ns, "create", "configmap", "c1", "--from-literal=a=b")
    kubectl.run("-n", ns, "create", "secret", "generic", "s1", "--from-literal=a=b")
    kubectl.run("-n", ns, "create", "serviceaccount", "sa1")
    kubectl.run("delete", "namespace", ns, "--timeout=30s")
    result = kubectl.run("get", "namespace", ns, check=False)
    assert result.code != 0
    assert f'namespaces "{ns}" not found' in result.stderr
    assert "No resources found" in kubectl.run("get", "configmaps", "-n", ns).stderr


def test_terminating_namespace_refuses_new_content(kubectl: Kubectl) -> None:
    """While a namespace terminates (an object there has a finalizer), creates in it are Forbidden."""
    ns = f"term-{time.monotonic_ns() % 100000}"
    kubectl.run("create", "namespace", ns)
    kubectl.apply(
        f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: held, namespace: {ns}, finalizers: [example.com/hold]}}\n"
    )
    kubectl.run("delete", "namespace", ns, "--wait=false")
    phase = kubectl.run("get", "namespace", ns, "-o", "jsonpath={.status.phase}").stdout
    assert phase == "Terminating"
    result = kubectl.fails("-n", ns, "create", "configmap", "late")
    assert f"unable to create new content in namespace {ns} because it is being terminated" in result.stderr
    kubectl.run(
        "-n",
        ns,
        "patch",
        "configmap",
        "held",
        "--type=json",
        "-p",
        '[{"op":"remove","path":"/metadata/finalizers"}]',
    )
    eventually(lambda: not exists(kubectl, "namespace", ns))


def test_finalizers_hold_deletion_until_removed(kubectl: Kubectl, namespace: str) -> None:
    """A delete sets deletionTimestamp while finalizers remain; removing the last one deletes the object."""
    kubectl.apply(
        f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: fin, namespace: {namespace}, finalizers: [example.com/a]}}\n"
    )
    kubectl.run("-n", namespace, "delete", "configmap", "fin", "--wait=false")
    obj = orjson.loads(kubectl.run("-n", namespace, "get", "configmap", "fin", "-o", "json").stdout)
    assert obj["metadata"]["deletionTimestamp"]
    assert obj["metadata"]["deletionGracePeriodSeconds"] == 0
    result = kubectl.fails(
        "-n",
        namespace,
        "patch",
        "configmap",
        "fin",
        "--type=merge",
        "-p",
        '{"metadata":{"finalizers":["example.com/a","example.com/b"]}}',
    )
    assert "no new finalizers can be added if the object is being deleted" in result.stderr
    kubectl.run(
        "-n", namespace, "patch", "configmap", "fin", "--type=merge", "-p", '{"metadata":{"finalizers":null}}'
    )
    assert not exists(kubectl, "-n", namespace, "configmap", "fin")


def test_emptied_metadata_lists_and_maps_are_left_out(kubectl: Kubectl, namespace: str) -> None:
    """ObjectMeta's lists and maps are omitempty on a real server: a strategic-merge patch that removes the
    last finalizer and the last label leaves no `finalizers: []` or `labels: {}` behind."""
    kubectl.apply(
        f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: trim, namespace: {namespace}, labels: {{a: b}},"
        " finalizers: [example.com/a]}\n"
    )
    kubectl.run(
        "-n",
        namespace,
        "patch",
        "configmap",
        "trim",
        "-p",
        '{"metadata":{"labels":{"a":null},"$deleteFromPrimitiveList/finalizers":["example.com/a"]}}',
    )
    meta = orjson.loads(kubectl.run("-n", namespace, "get", "configmap", "trim", "-o", "json").stdout)[
        "metadata"
    ]
    assert "finalizers" not in meta and "labels" not in meta, meta


def _owner_and_dependent(kubectl: Kubectl, namespace: str) -> str:
    kubectl.run("-n", namespace, "create", "configmap", "owner")
    uid = kubectl.run("-n", namespace, "get", "configmap", "owner", "-o", "jsonpath={.metadata.uid}").stdout
    kubectl.apply(
        f"""apiVersion: v1
kind: ConfigMap
metadata:
  name: dependent
  namespace: {namespace}
  ownerReferences: [{{apiVersion: v1, kind: ConfigMap, name: owner, uid: {uid}}}]
"""
    )
    return uid


def test_background_deletion_collects_dependents(kubectl: Kubectl, namespace: str) -> None:
    """S9: deleting the owner (Background, kubectl's default) garbage-collects the dependent."""
    _owner_and_dependent(kubectl, namespace)
    kubectl.run("-n", namespace, "delete", "configmap", "owner")
    eventually(lambda: not exists(kubectl, "-n", namespace, "configmap", "dependent"))


def test_foreground_deletion_waits_for_dependents(kubectl: Kubectl, namespace: str) -> None:
    """S9: Foreground deletion removes dependents first, then the owner."""
    _owner_and_dependent(kubectl, namespace)
    kubectl.run("-n", namespace, "delete", "configmap", "owner", "--cascade=foreground")
    assert not exists(kubectl, "-n", namespace, "configmap", "dependent")
    eventually(lambda: not exists(kubectl, "-n", namespace, "configmap", "owner"))


def test_orphan_deletion_keeps_dependents_without_the_reference(kubectl: Kubectl, namespace: str) -> None:
    """S9: Orphan deletion removes the owner and strips its ownerReference from the dependent."""
    _owner_and_dependent(kubectl, namespace)
    kubectl.run("-n", namespace, "delete", "configmap", "owner", "--cascade=orphan")
    eventually(lambda: not exists(kubectl, "-n", namespace, "configmap", "owner"))
    refs = kubectl.run(
        "-n", namespace, "get", "configmap", "dependent", "-o", "jsonpath={.metadata.ownerReferences}"
    ).stdout
    assert refs == ""


def test_dependent_of_a_missing_owner_is_collected(kubectl: Kubectl, namespace: str) -> None:
    """An object whose only owner does not exist (no object with that uid) is garbage-collected."""
    kubectl.apply(
        f"""apiVersion: v1
kind: ConfigMap
metadata:
  name: orphaned
  namespace: {namespace}
  ownerReferences: [{{apiVersion: v1, kind: ConfigMap, name: ghost, uid: 00000000-0000-4000-8000-000000000000}}]
"""
    )
    eventually(lambda: not exists(kubectl, "-n", namespace, "configmap", "orphaned"))
