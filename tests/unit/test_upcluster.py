"""`vplane up`'s connected cluster: the decisions (name, status line, what is missing), no servers."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest

from vplane.cli import upcluster


def test_a_cluster_name_must_be_a_label_and_not_one_of_ups_contexts() -> None:
    assert upcluster.check_name("edge") is None
    assert upcluster.check_name("edge-2") is None
    assert "not a valid cluster name" in (upcluster.check_name("Edge") or "")
    assert "not a valid cluster name" in (upcluster.check_name("edge_2") or "")
    assert "is taken" in (upcluster.check_name("host") or "")
    assert "is taken" in (upcluster.check_name("management") or "")


def test_the_status_line_is_done_only_when_initialized_without_a_reason() -> None:
    assert upcluster.verdict(None) == upcluster.Verdict(False, "no Cluster object")
    assert upcluster.verdict({"status": {}}) == upcluster.Verdict(False, "no phase yet")
    assert upcluster.verdict({"status": {"phase": "Initialized"}}) == upcluster.Verdict(True, "Initialized")
    not_ready = {
        "status": {"phase": "Initialized", "reason": "NotReady", "message": "agent pod x is not ready"}
    }
    assert upcluster.verdict(not_ready) == upcluster.Verdict(
        False, "Initialized (NotReady: agent pod x is not ready)"
    )
    offline = {"status": {"reason": "Offline", "message": "no agent yet"}}
    assert upcluster.verdict(offline).text == "no phase yet (Offline: no agent yet)"


def test_the_cluster_gets_ranges_and_a_node_of_its_own(tmp_path: Path) -> None:
    cluster = upcluster.ConnectedCluster("edge", tmp_path / "clusters" / "edge", node_overrides=("a=1",))
    cmd = cluster.command(tmp_path / "ready")
    assert cmd[cmd.index("--data-dir") + 1] == str(tmp_path / "clusters" / "edge")
    assert f"service_cluster_ip_range={upcluster.SERVICE_CIDR}" in cmd
    sets = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--set"]
    assert sets == ["node_name=edge", f"pod_cidr={upcluster.POD_CIDR}", "a=1"]  # the user's last: they win
    assert cluster.context == "vplane_edge"


async def test_without_helm_up_says_how_to_install_it_and_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_helm(configured: str | None = None) -> str:
        raise FileNotFoundError("helm was not found on PATH")

    monkeypatch.setattr("vplane.platform.clusters.helm.find_helm", no_helm)
    cluster = upcluster.ConnectedCluster("edge", tmp_path / "clusters" / "edge")
    printed = asyncio.Event()

    async def status() -> dict[str, Any] | None:
        raise AssertionError("not reached")

    cluster.start(("https://x", "key", b""), status, lambda entry: None, printed)
    await asyncio.sleep(0.05)
    assert capsys.readouterr().out == ""  # nothing before vplane up's own lines
    printed.set()
    assert cluster.task is not None
    await cluster.task
    out = capsys.readouterr().out
    assert out.startswith('Connected cluster "edge": not started: helm was not found: install it')
    assert "--no-connected-cluster" in out
    assert cluster.process is None and not (tmp_path / "clusters").exists()
    await cluster.stop()


def test_the_embedded_cluster_keeps_its_port_across_runs_while_it_is_free(tmp_path: Path) -> None:
    """Pods adopted across a restart of `vplane up` (the agent among them) name the API server's port: the
    next run asks for the same one, or for any port when it is taken or none was recorded."""
    port_file = tmp_path / "edge.port"
    assert upcluster.recorded_listen(port_file) == "127.0.0.1:0"
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        upcluster.record_listen(port_file, f"https://127.0.0.1:{port}")
        assert port_file.read_text().strip() == str(port)
        assert upcluster.recorded_listen(port_file) == "127.0.0.1:0"  # taken: any port
    assert upcluster.recorded_listen(port_file) == f"127.0.0.1:{port}"  # free again: the same one
    port_file.write_text("garbage")
    assert upcluster.recorded_listen(port_file) == "127.0.0.1:0"


def test_the_platform_port_is_reused_on_the_host_it_listens_on(tmp_path: Path) -> None:
    """`vplane up --listen HOST:0` asks for the port of its last run on HOST while it is free (the tenants'
    pod template names the platform's URL: a new port would roll them); 0 for anything unusable."""
    port_file = tmp_path / "platform.port"
    assert upcluster.recorded_port(port_file, "127.0.0.1") == 0
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        upcluster.record_listen(port_file, f"https://127.0.0.1:{port}")
        assert upcluster.recorded_port(port_file, "127.0.0.1") == 0  # taken: any port
    assert upcluster.recorded_port(port_file, "127.0.0.1") == port
    for unusable in ("0", "-1", "65536", "garbage"):
        port_file.write_text(unusable)
        assert upcluster.recorded_port(port_file, "127.0.0.1") == 0
