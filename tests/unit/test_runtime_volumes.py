"""Volumes as files (the atomic writer), the downward API, the container environment, and the rules the
kubelet and the API server apply to log requests."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from vplane.apiserver.kubeletclient import kubelet_port, node_address, validate_log_options
from vplane.kube.errors import StatusError
from vplane.runtime.images import expand
from vplane.runtime.kubelet import LogError
from vplane.runtime.node import log_status_error
from vplane.runtime.volumes import (
    ConfigError,
    MountError,
    PodVolumes,
    container_env,
    field_value,
    resource_value,
    write_payload,
)

POD: dict[str, Any] = {
    "metadata": {
        "name": "p",
        "namespace": "ns",
        "uid": "u1",
        "labels": {"app": "web"},
        "annotations": {"a": "1"},
    },
    "spec": {
        "nodeName": "node1",
        "containers": [{"name": "main", "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}}}],
    },
}


class Sources:
    def __init__(self) -> None:
        self.configmaps = {"cfg": {"data": {"greeting": "hello", "bad=key": "x"}}}
        self.secrets = {"sec": {"data": {"password": base64.b64encode(b"s3cret").decode()}}}

    async def configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.configmaps.get(name)

    async def secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.secrets.get(name)

    async def token(
        self, namespace: str, sa: str, audiences: list[str], seconds: int, pod: Any
    ) -> tuple[str, float]:
        if sa != "default":
            raise RuntimeError(f'serviceaccounts "{sa}" not found')
        return "token-" + sa, 4_000_000_000.0


def test_the_atomic_writer_replaces_all_files_at_once(tmp_path: Path) -> None:
    assert write_payload(tmp_path, {"a": (b"1", 0o644), "dir/b": (b"2", 0o600)})
    assert (tmp_path / "a").read_text() == "1"
    assert (tmp_path / "dir" / "b").read_text() == "2"
    assert (tmp_path / "a").is_symlink() and (tmp_path / "..data").is_symlink()
    assert not write_payload(tmp_path, {"a": (b"1", 0o644), "dir/b": (b"2", 0o600)})  # unchanged
    assert write_payload(tmp_path, {"a": (b"3", 0o644)})
    assert (tmp_path / "a").read_text() == "3"
    assert not (tmp_path / "dir").exists()
    assert len([p for p in tmp_path.iterdir() if p.name.startswith("..") and not p.is_symlink()]) == 1


def test_downward_api_fields_and_resources() -> None:
    assert field_value(POD, "metadata.labels['app']", "127.0.0.1", "127.10.0.2") == "web"
    assert field_value(POD, "status.podIP", "127.0.0.1", "127.10.0.2") == "127.10.0.2"
    assert field_value(POD, "spec.serviceAccountName", "", "") == "default"
    assert field_value(POD, "metadata.labels", "", "") == 'app="web"'
    with pytest.raises(ConfigError, match="unsupported fieldPath"):
        field_value(POD, "spec.nothing", "", "")
    allocatable = {"cpu": "2", "memory": "1Gi"}
    assert resource_value(POD, {"resource": "limits.cpu"}, "main", allocatable) == "1"  # 500m rounds up
    assert resource_value(POD, {"resource": "limits.cpu", "divisor": "1m"}, "main", allocatable) == "500"
    assert resource_value(POD, {"resource": "limits.memory", "divisor": "1Mi"}, "main", allocatable) == "64"
    assert resource_value(POD, {"resource": "requests.memory"}, "main", allocatable) == "0"


async def test_environment_in_the_kubelets_order() -> None:
    container = {
        "name": "main",
        "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "CFG_"}],
        "env": [
            {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "greeting"}}},
            {"name": "MESSAGE", "value": "$(GREETING) from $(POD_NAME) on $(SVC_SERVICE_HOST)"},
            {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "password"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {
                "name": "OPTIONAL",
                "valueFrom": {"secretKeyRef": {"name": "missing", "key": "k", "optional": True}},
            },
        ],
    }
    skipped: list[str] = []
    env = await container_env(
        POD,
        container,
        Sources(),
        {"SVC_SERVICE_HOST": "127.96.0.1"},
        "127.0.0.1",
        "127.10.0.2",
        {},
        expand,
        skipped.append,
    )
    assert env["CFG_greeting"] == "hello"
    assert env["MESSAGE"] == "hello from $(POD_NAME) on 127.96.0.1"  # POD_NAME is defined after MESSAGE
    assert env["PASSWORD"] == "s3cret"
    assert "OPTIONAL" not in env
    assert skipped == [
        "Keys [bad=key] from the EnvFrom configMap ns/cfg were skipped since they are considered invalid "
        "environment variable names."
    ]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k"}}}],
            'configmap "nope" not found',
        ),
        (
            [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}],
            "couldn't find key k in ConfigMap ns/cfg",
        ),
        (
            [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k"}}}],
            'secret "nope" not found',
        ),
    ],
)
async def test_missing_references_are_create_container_config_errors(env: list[Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        await container_env(POD, {"name": "main", "env": env}, Sources(), {}, "", "", {}, expand)
    assert str(caught.value) == message


async def test_volumes_materialize_and_name_their_mounts(tmp_path: Path) -> None:
    pod = {
        **POD,
        "spec": {
            **POD["spec"],
            "volumes": [
                {
                    "name": "config",
                    "configMap": {"name": "cfg", "items": [{"key": "greeting", "path": "hello.txt"}]},
                },
                {"name": "creds", "secret": {"secretName": "sec"}},
                {"name": "scratch", "emptyDir": {}},
                {
                    "name": "info",
                    "downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]},
                },
            ],
        },
    }
    volumes = PodVolumes(
        tmp_path / "pod", tmp_path / "claims", Sources(), b"CA", "https://127.0.0.1:6443", 3607, {}
    )
    await volumes.setup(pod)
    assert (volumes.paths["config"] / "hello.txt").read_text() == "hello"
    assert (volumes.paths["creds"] / "password").read_text() == "s3cret"
    assert (volumes.paths["info"] / "name").read_text() == "p"
    assert (volumes.root / "kube-api-access" / "token").read_text() == "token-default"
    assert volumes.kubeconfig is not None and "tokenFile" in volumes.kubeconfig.read_text()
    container = {
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/app"},
            {"name": "scratch", "mountPath": "/data"},
        ]
    }
    root = tmp_path / "root"
    env = volumes.container_mounts(container, root)
    assert env["VPLANE_MOUNT_CONFIG"] == str(volumes.paths["config"])
    assert (root / "etc" / "app" / "hello.txt").read_text() == "hello"
    assert (
        volumes.working_dir({**container, "workingDir": "/data/sub"}, root, "")
        == volumes.paths["scratch"] / "sub"
    )
    assert volumes.working_dir(container, root, "") == root


async def test_a_missing_configmap_fails_the_mount_with_upstreams_words(tmp_path: Path) -> None:
    pod = {**POD, "spec": {**POD["spec"], "volumes": [{"name": "config", "configMap": {"name": "gone"}}]}}
    volumes = PodVolumes(tmp_path, tmp_path / "claims", Sources(), b"", "", 3607, {})
    with pytest.raises(MountError) as caught:
        await volumes.setup(pod)
    assert str(caught.value) == 'MountVolume.SetUp failed for volume "config" : configmap "gone" not found'


def _status(state: dict[str, Any], last: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "containerStatuses": [
            {
                "name": "main",
                "state": state,
                "lastState": {"terminated": last} if last else {},
                "containerID": "c2",
            }
        ]
    }


@pytest.mark.parametrize(
    ("state", "last", "previous", "answer"),
    [
        ({"running": {}}, None, False, "c2"),
        ({"waiting": {"reason": "CrashLoopBackOff"}}, {"containerID": "c1"}, False, "c1"),
        ({"running": {}}, {"containerID": "c1"}, True, "c1"),
        (
            {"waiting": {"reason": "ContainerCreating"}},
            None,
            False,
            'container "main" in pod "p" is waiting to start: ContainerCreating',
        ),
        (
            {"waiting": {"reason": "ErrImagePull"}},
            None,
            False,
            'container "main" in pod "p" is waiting to start: image can\'t be pulled',
        ),
        (
            {"waiting": {"reason": "ImagePullBackOff"}},
            None,
            False,
            'container "main" in pod "p" is waiting to start: trying and failing to pull image',
        ),
        ({"running": {}}, None, True, 'previous terminated container "main" in pod "p" not found'),
    ],
)
def test_which_log_the_kubelet_serves(
    state: dict[str, Any], last: dict[str, Any] | None, previous: bool, answer: str
) -> None:
    try:
        assert log_status_error("p", _status(state, last), "main", previous) == answer
    except LogError as exc:
        assert (exc.code, exc.message) == (400, answer)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (
            {"tailLines": "-1"},
            'PodLogOptions "p" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0',
        ),
        (
            {"limitBytes": "0"},
            'PodLogOptions "p" is invalid: limitBytes: Invalid value: 0: must be greater than 0',
        ),
        (
            {"sinceSeconds": "0"},
            'PodLogOptions "p" is invalid: sinceSeconds: Invalid value: 0: must be greater than 0',
        ),
    ],
)
def test_log_options_are_validated_as_upstream(query: dict[str, str], message: str) -> None:
    with pytest.raises(StatusError) as caught:
        validate_log_options("p", query)
    assert (caught.value.code, caught.value.message) == (422, message)
    validate_log_options("p", {"tailLines": "0", "limitBytes": "1", "sinceSeconds": "1"})


def test_the_api_server_finds_the_kubelet_by_preferred_address_and_port() -> None:
    node = {
        "status": {
            "addresses": [
                {"type": "Hostname", "address": "h"},
                {"type": "InternalIP", "address": "127.0.0.1"},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 41000}},
        }
    }
    assert node_address(node, ["InternalIP", "Hostname"]) == "127.0.0.1"
    assert kubelet_port(node) == 41000
    assert kubelet_port({"status": {}}) == 10250
    with pytest.raises(StatusError, match=r"no preferred addresses found; known addresses: \[\]"):
        node_address({"status": {}}, ["InternalIP"])
