"""kopf end to end, and the finalizer and Event semantics it relies on (checklist M22, M23, M30; spec §9, §10)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from harness import APIServerProcess, Kubectl

pytestmark = pytest.mark.integration

GROUP = "kopftest.example.com"
CRD_NAME = f"widgets.{GROUP}"
FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"
T = TypeVar("T")

WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": CRD_NAME},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["kwd"]},
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
                            "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    }
                },
            }
        ],
    },
}

OPERATOR = textwrap.dedent(
    f'''
    """A small operator: status from the create handler's result, an Event, and a delete handler."""
    import json
    import os
    import pathlib

    import kopf

    MARKERS = pathlib.Path(os.environ["OP_MARKERS"])


    @kopf.on.startup()
    def configure(settings: kopf.OperatorSettings, **_):
        settings.watching.server_timeout = 30
        settings.posting.level = 20  # logging.INFO: kopf.info() events are posted


    @kopf.on.create("{GROUP}", "v1", "widgets")
    def created(spec, name, body, **_):
        kopf.info(body, reason="Created", message=f"widget {{name}} has size {{spec.get('size')}}")
        return {{"size": spec.get("size", 0) * 2}}


    @kopf.on.delete("{GROUP}", "v1", "widgets")
    def deleted(name, namespace, meta, **_):
        record = {{
            "deletionTimestamp": meta.get("deletionTimestamp"),
            "finalizers": list(meta.get("finalizers") or []),
        }}
        (MARKERS / f"{{namespace}}.{{name}}.deleted").write_text(json.dumps(record))
    '''
)


# -- helpers ---------------------------------------------------------------------------------------


def eventually(
    check: Callable[[], T | None], what: str, timeout: float = 15.0, log: Callable[[], str] | None = None
) -> T:
    """Poll ``check`` until it returns something truthy (short polling with a deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out waiting for {what}" + (f"\n--- operator log ---\n{log()}" if log else "")
            )
        time.sleep(0.1)


def request_json(
    server: APIServerProcess, method: str, path: str, body: Any = None, content_type: str = "application/json"
) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    status, _, raw = server.request(method, path, data, {"Content-Type": content_type} if data else {})
    return status, json.loads(raw) if raw else None


@pytest.fixture
def widget_crd(kubectl: Kubectl) -> str:
    kubectl.apply(json.dumps(WIDGET_CRD))
    kubectl.run("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=10s")
    return GROUP


@pytest.fixture
def operator(shared_apiserver: APIServerProcess, widget_crd: str, tmp_path: Path) -> Iterator[Operator]:
    op = Operator(shared_apiserver, tmp_path)
    op.start()
    try:
        op.wait_watching()
        yield op
    finally:
        op.stop()


class Operator:
    """``kopf run --standalone -A op.py`` in a subprocess, pointed at the server by KUBECONFIG."""

    def __init__(self, server: APIServerProcess, workdir: Path) -> None:
        self.server = server
        self.script = workdir / "op.py"
        self.markers = workdir / "markers"
        self.log_path = workdir / "kopf.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.script.write_text(OPERATOR)
        self.markers.mkdir()
        kopf = Path(sys.executable).parent / "kopf"
        env = {**os.environ, "KUBECONFIG": str(self.server.kubeconfig), "OP_MARKERS": str(self.markers)}
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [str(kopf), "run", "--standalone", "-A", "--verbose", str(self.script)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.script.parent,
            )

    def wait_watching(self) -> None:
        """Until kopf has started its widgets watch (its start-up is slow on a loaded machine)."""
        eventually(
            lambda: f"Starting the watch-stream for widgets.v1.{GROUP}" in self.full_log() or self._exited(),
            "kopf to start watching widgets",
            timeout=60,
            log=self.log,
        )
        assert not self._exited(), self.log()

    def _exited(self) -> bool:
        return self.proc is None or self.proc.poll() is not None

    def full_log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log(self) -> str:
        return self.full_log()[-15000:]

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


# -- M30 + M22 + M23: kopf end to end --------------------------------------------------------------


def test_kopf_operator_status_event_and_delete_handler(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str, operator: Operator
) -> None:
    """kopf writes the create handler's result to status, posts its Event, and runs on.delete before the object goes."""
    server = shared_apiserver
    kubectl.apply(
        json.dumps(
            {
                "apiVersion": f"{GROUP}/v1",
                "kind": "Widget",
                "metadata": {"name": "w1", "namespace": namespace},
                "spec": {"size": 3},
            }
        )
    )
    path = f"/apis/{GROUP}/v1/namespaces/{namespace}/widgets/w1"

    def handled() -> dict[str, Any] | None:
        status, obj = request_json(server, "GET", path)
        assert status == 200, obj
        created = (obj.get("status") or {}).get("created")
        return obj if created else None

    obj = eventually(handled, "the create handler's status", log=operator.log)
    assert obj["status"]["created"] == {"size": 6}
    assert FINALIZER in obj["metadata"]["finalizers"]
    assert "kopf.zalando.org/last-handled-configuration" in obj["metadata"]["annotations"]
    assert obj["metadata"]["generation"] == 1  # status and metadata writes leave generation alone
    out = kubectl.run(
        "get", f"widgets.{GROUP}", "w1", "-n", namespace, "-o", "jsonpath={.status.created.size}"
    ).stdout
    assert out == "6"

    # M23: the Event posted by kopf.info, found by field selector on involvedObject
    def our_event() -> dict[str, Any] | None:
        result = kubectl.run(
            "get", "events", "-n", namespace, "--field-selector", "involvedObject.name=w1", "-o", "json"
        )
        items = json.loads(result.stdout)["items"]
        return next((e for e in items if e.get("reason") == "Created"), None)

    event = eventually(our_event, "the kopf.info Event", log=operator.log)
    assert event["message"] == "widget w1 has size 3"
    assert event["type"] == "Normal"
    assert event["involvedObject"]["kind"] == "Widget"
    assert event["involvedObject"]["apiVersion"] == f"{GROUP}/v1"
    assert event["involvedObject"]["name"] == "w1"
    assert event["involvedObject"]["uid"] == obj["metadata"]["uid"]
    assert event["metadata"]["name"].startswith("kopf-event-")  # kopf posts with generateName
    assert event["source"]["component"] == "kopf"
    table = kubectl.run("get", "events", "-n", namespace, "--field-selector", "involvedObject.name=w1").stdout
    assert "widget w1 has size 3" in table
    assert "widget/w1" in table
    others = kubectl.run(
        "get", "events", "-n", namespace, "--field-selector", "involvedObject.name=nope", "-o", "name"
    )
    assert others.stdout == ""

    # M22: deletion waits for the kopf finalizer; the delete handler sees deletionTimestamp; then NotFound
    result = kubectl.run("delete", f"widgets.{GROUP}", "w1", "-n", namespace, "--timeout=15s")
    assert result.stdout == f'widget.{GROUP} "w1" deleted from {namespace} namespace\n'
    marker = operator.markers / f"{namespace}.w1.deleted"
    assert marker.exists(), operator.log()
    record = json.loads(marker.read_text())
    assert record["deletionTimestamp"]
    assert FINALIZER in record["finalizers"]
    result = kubectl.fails("get", f"widgets.{GROUP}", "w1", "-n", namespace)
    assert result.stderr.strip() == f'Error from server (NotFound): widgets.{GROUP} "w1" not found'
    assert operator.proc is not None and operator.proc.poll() is None, operator.log()
    # kopf logs a warning when a response does not reflect its patch, and an error on unexpected statuses
    problems = [line for line in operator.log().splitlines() if "[WARNING " in line or "[ERROR " in line]
    assert problems == []


def test_kopf_handles_widgets_created_before_it_started(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str, widget_crd: str, tmp_path: Path
) -> None:
    """kopf lists existing widgets at start-up (list RV, then watch) and handles them."""
    kubectl.apply(
        json.dumps(
            {
                "apiVersion": f"{GROUP}/v1",
                "kind": "Widget",
                "metadata": {"name": "early", "namespace": namespace},
                "spec": {"size": 5},
            }
        )
    )
    op = Operator(shared_apiserver, tmp_path)
    op.start()
    try:
        op.wait_watching()
        path = f"/apis/{GROUP}/v1/namespaces/{namespace}/widgets/early"
        obj = eventually(
            lambda: (lambda o: o if (o.get("status") or {}).get("created") else None)(
                request_json(shared_apiserver, "GET", path)[1]
            ),
            "status of a pre-existing widget",
            log=op.log,
        )
        assert obj["status"]["created"] == {"size": 10}
        kubectl.run("delete", f"widgets.{GROUP}", "early", "-n", namespace, "--timeout=15s")
        assert (op.markers / f"{namespace}.early.deleted").exists(), op.log()
    finally:
        op.stop()


# -- M22 without kopf: finalizers and deletionTimestamp --------------------------------------------


def test_finalizer_holds_deletion_until_removed(shared_apiserver: APIServerProcess, namespace: str) -> None:
    """DELETE with a finalizer answers 200 with deletionTimestamp set (MODIFIED); removing it emits DELETED."""
    server = shared_apiserver
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    status, created = request_json(
        server,
        "POST",
        base,
        {"metadata": {"name": "held", "finalizers": ["example.com/hold"]}, "data": {"a": "1"}},
    )
    assert status == 201, created
    start = created["metadata"]["resourceVersion"]
    status, deleting = request_json(server, "DELETE", f"{base}/held")
    assert status == 200, deleting
    assert deleting["kind"] == "ConfigMap"
    assert deleting["metadata"]["deletionTimestamp"]
    assert deleting["metadata"]["deletionGracePeriodSeconds"] == 0
    assert deleting["metadata"]["finalizers"] == ["example.com/hold"]
    status, still = request_json(server, "GET", f"{base}/held")
    assert (
        status == 200 and still["metadata"]["deletionTimestamp"] == deleting["metadata"]["deletionTimestamp"]
    )
    # updates other than finalizer removal are still allowed; a second DELETE changes nothing
    status, again = request_json(server, "DELETE", f"{base}/held")
    assert status == 200
    assert again["metadata"]["resourceVersion"] == deleting["metadata"]["resourceVersion"]
    status, released = request_json(
        server, "PATCH", f"{base}/held", {"metadata": {"finalizers": None}}, "application/merge-patch+json"
    )
    assert status == 200, released
    status, gone = request_json(server, "GET", f"{base}/held")
    assert status == 404, gone
    assert gone["message"] == 'configmaps "held" not found'
    query = urllib.parse.urlencode({"watch": "true", "resourceVersion": start, "timeoutSeconds": "1"})
    status, _, raw = server.request("GET", f"{base}?{query}")
    events = [json.loads(line) for line in raw.splitlines()]
    assert [e["type"] for e in events] == ["MODIFIED", "DELETED"]
    assert events[0]["object"]["metadata"]["deletionTimestamp"]
    assert int(events[1]["object"]["metadata"]["resourceVersion"]) > int(
        events[0]["object"]["metadata"]["resourceVersion"]
    )


def test_event_with_microtime_and_offset_timestamps(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str
) -> None:
    """A core/v1 Event posted the way kopf does (generateName, isoformat +00:00 times) is stored and listed."""
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": "kopf-event-", "namespace": namespace},
        "involvedObject": {
            "apiVersion": f"{GROUP}/v1",
            "kind": "Widget",
            "name": "w9",
            "namespace": namespace,
            "uid": "u-1",
        },
        "reason": "Testing",
        "message": "hello from a test",
        "type": "Normal",
        "source": {"component": "kopf"},
        "firstTimestamp": "2026-01-02T10:40:00.123456+00:00",
        "lastTimestamp": "2026-01-02T10:40:00.123456+00:00",
        "eventTime": "2026-01-02T10:40:00.123456+00:00",
        "action": "Action",
        "reportingComponent": "kopf",
        "reportingInstance": "dev",
    }
    status, created = request_json(shared_apiserver, "POST", f"/api/v1/namespaces/{namespace}/events", body)
    assert status == 201, created
    name = created["metadata"]["name"]
    assert name.startswith("kopf-event-") and len(name) == len("kopf-event-") + 5
    result = kubectl.run(
        "get", "events", "-n", namespace, "--field-selector", "involvedObject.name=w9", "-o", "name"
    )
    assert result.stdout == f"event/{name}\n"
    result = kubectl.run(
        "get",
        "events",
        "-n",
        namespace,
        "--field-selector",
        "reason=Testing,involvedObject.kind=Widget",
        "-o",
        "name",
    )
    assert result.stdout == f"event/{name}\n"
    assert created["firstTimestamp"] == "2026-01-02T10:40:00Z"
    assert created["lastTimestamp"] == "2026-01-02T10:40:00Z"
    assert created["eventTime"] == "2026-01-02T10:40:00.123456Z"
