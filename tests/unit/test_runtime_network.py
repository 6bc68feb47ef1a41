"""Loopback addresses, ClusterIPs, service environment variables, the names file and its resolver."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from vplane.runtime import network, resolver
from vplane.runtime.settings import RuntimeSettings


def _service(
    name: str, ip: str, ports: list[dict[str, Any]], namespace: str = "ns", uid: str = "u"
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {"clusterIP": ip, "ports": ports},
    }


def test_pod_addresses_round_robin_and_skip_used_ones() -> None:
    pool = network.AddressPool("127.10.0.0/30", used=["127.10.0.2"])
    assert pool.allocate() == "127.10.0.1"
    with pytest.raises(RuntimeError, match="no free address"):
        pool.allocate()
    pool.release("127.10.0.1")
    pool.release("127.10.0.2")
    assert pool.allocate() == "127.10.0.2"  # the next one after the last handed out
    assert pool.allocate() == "127.10.0.1"
    assert "127.10.0.1" in pool and "127.11.0.1" not in pool


def test_ranges_must_be_loopback() -> None:
    with pytest.raises(ValueError, match="not a range of 127.0.0.0/8"):
        RuntimeSettings(data_dir=Path("/tmp/x"), pod_cidr="10.0.0.0/16")


def test_cluster_ips_are_deterministic_and_avoid_those_in_use() -> None:
    first = network.cluster_ip_for("uid-1", "127.96.0.0/16", set())
    assert first == "127.96.198.38"  # the same in every process (no per-process hash seed)
    assert network.cluster_ip_for("uid-1", "127.96.0.0/16", {first}) != first
    assert first.startswith("127.96.")


def test_service_environment_as_docker_links() -> None:
    env = network.service_env(
        [
            _service(
                "my-svc",
                "127.96.0.5",
                [
                    {"name": "http", "port": 80, "protocol": "TCP"},
                    {"name": "dns", "port": 53, "protocol": "UDP"},
                ],
            ),
            _service("headless", "None", [{"port": 80}]),
        ]
    )
    assert env["MY_SVC_SERVICE_HOST"] == "127.96.0.5"
    assert env["MY_SVC_SERVICE_PORT"] == "80"
    assert env["MY_SVC_SERVICE_PORT_HTTP"] == "80"
    assert env["MY_SVC_PORT"] == "tcp://127.96.0.5:80"
    assert env["MY_SVC_PORT_53_UDP_PROTO"] == "udp"
    assert env["MY_SVC_PORT_80_TCP_ADDR"] == "127.96.0.5"
    assert not any(k.startswith("HEADLESS") for k in env)
    assert network.api_server_env("127.0.0.1", 6443)["KUBERNETES_SERVICE_PORT"] == "6443"


def test_backends_match_ports_by_name_and_take_ready_addresses() -> None:
    service = _service("web", "127.96.0.9", [{"name": "http", "port": 80}, {"name": "admin", "port": 81}])
    endpoints = {
        "subsets": [
            {
                "addresses": [{"ip": "127.10.0.1"}, {"ip": "127.10.0.2"}],
                "notReadyAddresses": [{"ip": "127.10.0.3"}],
                "ports": [{"name": "http", "port": 8080}, {"name": "admin", "port": 9090}],
            }
        ]
    }
    assert network.backends_for(service, endpoints) == {
        ("127.96.0.9", 80): [("127.10.0.1", 8080), ("127.10.0.2", 8080)],
        ("127.96.0.9", 81): [("127.10.0.1", 9090), ("127.10.0.2", 9090)],
    }
    assert network.backends_for(service, None) == {("127.96.0.9", 80): [], ("127.96.0.9", 81): []}
    assert network.backends_for(_service("h", "None", [{"port": 80}]), endpoints) == {}


def test_names_file_and_the_resolver_with_a_pods_search_list(tmp_path: Path) -> None:
    services = [_service("web", "127.96.0.9", [{"port": 80}]), _service("db", "None", [{"port": 5432}])]
    endpoints = {("ns", "db"): {"subsets": [{"addresses": [{"ip": "127.10.0.7", "hostname": "db-0"}]}]}}
    path = tmp_path / "hosts"
    network.write_hosts(path, network.host_entries(services, endpoints, "cluster.local"))
    table = resolver.HostsTable(str(path), ["ns.svc.cluster.local", "svc.cluster.local", "cluster.local"])
    assert table.lookup("web") == ["127.96.0.9"]  # the pod's own namespace
    assert table.lookup("web.ns") == ["127.96.0.9"]
    assert table.lookup("web.ns.svc.cluster.local.") == ["127.96.0.9"]
    assert table.lookup("db") == ["127.10.0.7"]  # headless: the ready endpoints
    assert table.lookup("db-0.db.ns.svc.cluster.local") == ["127.10.0.7"]
    assert table.lookup("example.com") is None


def test_the_resolver_answers_getaddrinfo_first_and_passes_the_rest_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "hosts"
    path.write_text("127.96.0.9\tweb.ns.svc.cluster.local\n")
    monkeypatch.setattr(resolver, "_table", None)
    monkeypatch.setattr(socket, "getaddrinfo", socket.getaddrinfo)
    monkeypatch.setattr(socket, "gethostbyname", socket.gethostbyname)
    assert resolver.install(str(path), "ns.svc.cluster.local")
    infos = socket.getaddrinfo("web", 80, type=socket.SOCK_STREAM)
    assert infos[0][4] == ("127.96.0.9", 80)
    assert socket.gethostbyname("web.ns.svc.cluster.local") == "127.96.0.9"
    assert socket.getaddrinfo("127.0.0.1", 80, type=socket.SOCK_STREAM)[0][4] == ("127.0.0.1", 80)


def test_a_new_pool_starts_at_a_random_place_and_skips_addresses_in_use_on_the_machine(
    tmp_path: Path,
) -> None:
    """Two clusters' nodes on one machine must not hand out the same loopback addresses."""
    pool = network.AddressPool(
        "127.10.0.0/16", start=lambda low, high: low + 500, busy=lambda: {"127.10.1.246"}
    )
    assert pool.allocate() == "127.10.1.245"  # the 501st address of the range
    assert pool.allocate() == "127.10.1.247"  # the next one is some other process's: skipped
    table = tmp_path / "tcp"
    table.write_text(
        "  sl  local_address rem_address   st tx_queue rx_queue\n"
        "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000\n"  # 127.0.0.1:8080, listening
        "   1: 05000A7F:1F90 00000000:0000 0A 00000000:00000000\n"  # 127.10.0.5:8080, listening
        "   2: 06000A7F:1F90 0100007F:C350 01 00000000:00000000\n"  # 127.10.0.6: a connection, not a listener
    )
    assert network.listening_addresses([str(table), str(tmp_path / "missing")]) == {"127.0.0.1", "127.10.0.5"}
