"""Services get their ClusterIP and node ports from the API server, as from kube-apiserver 1.36 (issue 9):
kubectl against a real ``vplane apiserver`` sees the allocation at create, upstream's refusals for a
taken or out-of-range address or port, immutability, release on delete, the IPAddress objects and the
ServiceCIDR that record it, and the ``default/kubernetes`` Service with its endpoints."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from ipaddress import ip_network
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import APIServerProcess, Kubectl, PlatformProcess

pytestmark = pytest.mark.integration


def wait_until(check: Callable[[], Any], what: str, within: float = 20) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def get(k: Kubectl, *args: str) -> Any:
    return json.loads(k.run("get", *args, "-o", "json").out)


def service(name: str, **spec: Any) -> str:
    body = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec}
    return json.dumps(body)


def ipaddress(k: Kubectl, ip: str) -> Any | None:
    result = k.run("get", "ipaddress", ip, "-o", "json", check=False)
    return json.loads(result.out) if result.code == 0 else None


@pytest.fixture
def fresh(apiserver: APIServerProcess, kubectl_path: str, tmp_path: Any) -> Callable[..., Kubectl]:
    def start(**settings: Any) -> Kubectl:
        apiserver.start(**settings)
        return Kubectl(kubectl_path, apiserver.kubeconfig, tmp_path / "kubecache-fresh")

    return start


def test_the_kubernetes_service_its_endpoints_and_the_service_cidr(
    shared_apiserver: APIServerProcess, kubectl: Kubectl
) -> None:
    rows = [line.split() for line in kubectl.run("get", "svc", "-A").out.splitlines()]
    assert rows[0][:6] == ["NAMESPACE", "NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)"]
    assert ["default", "kubernetes", "ClusterIP", "127.96.0.1", "<none>", "443/TCP"] in [r[:6] for r in rows]
    port = int(shared_apiserver.url.rsplit(":", 1)[1])
    svc = get(kubectl, "svc", "kubernetes", "-n", "default")
    assert svc["metadata"]["labels"] == {"component": "apiserver", "provider": "kubernetes"}
    assert svc["spec"]["ports"] == [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}]
    assert "selector" not in svc["spec"]
    endpoints = get(kubectl, "endpoints", "kubernetes", "-n", "default")
    assert endpoints["metadata"]["labels"] == {"endpointslice.kubernetes.io/skip-mirror": "true"}
    assert endpoints["subsets"] == [
        {"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}
    ]
    sliced = get(kubectl, "endpointslice", "kubernetes", "-n", "default")
    assert sliced["metadata"]["labels"] == {"kubernetes.io/service-name": "kubernetes"}
    assert sliced["addressType"] == "IPv4"
    assert sliced["endpoints"] == [{"addresses": ["127.0.0.1"], "conditions": {"ready": True}}]
    assert sliced["ports"] == [{"name": "https", "port": port, "protocol": "TCP"}]
    cidr = get(kubectl, "servicecidr", "kubernetes")
    assert cidr["spec"]["cidrs"] == ["127.96.0.0/16"]
    (ready,) = cidr["status"]["conditions"]
    assert (ready["type"], ready["status"], ready["message"]) == (
        "Ready",
        "True",
        "Kubernetes default Service CIDR is ready",
    )
    record = ipaddress(kubectl, "127.96.0.1")
    assert record is not None
    assert record["spec"]["parentRef"] == {
        "resource": "services",
        "namespace": "default",
        "name": "kubernetes",
    }


def test_create_allocates_a_cluster_ip_recorded_as_an_ipaddress(kubectl: Kubectl, namespace: str) -> None:
    kubectl.apply(
        service("web", selector={"app": "web"}, ports=[{"port": 80, "targetPort": 8080}]), "-n", namespace
    )
    spec = get(kubectl, "svc", "web", "-n", namespace)["spec"]
    ip = spec["clusterIP"]
    assert ip.startswith("127.96.") and ip != "127.96.0.1"
    assert spec["clusterIPs"] == [ip]
    assert spec["ipFamilies"] == ["IPv4"] and spec["ipFamilyPolicy"] == "SingleStack"
    assert spec["internalTrafficPolicy"] == "Cluster" and spec["sessionAffinity"] == "None"
    row = kubectl.run("get", "svc", "web", "-n", namespace, "--no-headers").out.split()
    assert row[:5] == ["web", "ClusterIP", ip, "<none>", "80/TCP"]
    record = ipaddress(kubectl, ip)
    assert record is not None
    assert record["metadata"]["labels"] == {
        "ipaddress.kubernetes.io/ip-family": "IPv4",
        "ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io",
    }
    assert record["spec"]["parentRef"] == {"resource": "services", "namespace": namespace, "name": "web"}
    listed = kubectl.run("get", "ipaddresses", "--no-headers").out
    assert f"{ip} " in listed and f"services/{namespace}/web" in listed
    # kubectl apply again and kubectl replace, without the allocated values, keep them.
    kubectl.apply(
        service("web", selector={"app": "web"}, ports=[{"port": 80, "targetPort": 8080}]), "-n", namespace
    )
    kubectl.run(
        "replace",
        "-n",
        namespace,
        "-f",
        "-",
        input=service("web", selector={"app": "v2"}, ports=[{"port": 80}]),
    )
    assert get(kubectl, "svc", "web", "-n", namespace)["spec"]["clusterIP"] == ip


def test_requested_addresses_taken_or_out_of_range_are_refused(kubectl: Kubectl, namespace: str) -> None:
    ip = "127.96.0.77"  # in the lower part of the range, which dynamic allocation leaves to requests
    kubectl.run("create", "service", "clusterip", "first", "-n", namespace, "--tcp=80", f"--clusterip={ip}")
    assert get(kubectl, "svc", "first", "-n", namespace)["spec"]["clusterIP"] == ip
    taken = kubectl.fails(
        "create", "service", "clusterip", "second", "-n", namespace, "--tcp=80", f"--clusterip={ip}"
    )
    assert (
        f'Service "second" is invalid: spec.clusterIPs: Invalid value: []string{{"{ip}"}}: '
        f"failed to allocate IP {ip}: provided IP is already allocated"
    ) in taken.stderr
    outside = kubectl.fails(
        "create", "service", "clusterip", "third", "-n", namespace, "--tcp=80", "--clusterip=10.0.0.1"
    )
    assert (
        'Service "third" is invalid: spec.clusterIPs: Invalid value: []string{"10.0.0.1"}: failed to allocate IP '
        "10.0.0.1: the provided IP (10.0.0.1) is not in the valid range. The range of valid IPs is 127.96.0.0/16"
    ) in outside.stderr
    bad = kubectl.fails("create", "-n", namespace, "-f", "-", input=service("fourth", clusterIP="nope"))
    assert 'spec.clusterIPs[0]: Invalid value: "nope": must be a valid IP address' in bad.stderr
    # The address is immutable, and freed when its Service goes.
    changed = kubectl.fails(
        "patch",
        "svc",
        "first",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec": {"clusterIP": "127.96.0.78"}}',
    )
    assert (
        'The Service "first" is invalid: spec.clusterIPs[0]: Invalid value: []string{"127.96.0.78"}: '
        "may not change once set"
    ) in changed.stderr
    kubectl.run("delete", "svc", "first", "-n", namespace)
    assert ipaddress(kubectl, ip) is None
    kubectl.run("create", "service", "clusterip", "second", "-n", namespace, "--tcp=80", f"--clusterip={ip}")
    assert ipaddress(kubectl, ip)["spec"]["parentRef"]["name"] == "second"
    kubectl.run("delete", "namespace", namespace, "--wait=false")
    wait_until(
        lambda: ipaddress(kubectl, ip) is None, "the namespace's Services to give their addresses back"
    )


def test_headless_and_external_name_services_get_no_address(kubectl: Kubectl, namespace: str) -> None:
    kubectl.apply(
        service("db", clusterIP="None", selector={"app": "db"}, ports=[{"port": 5432}]), "-n", namespace
    )
    spec = get(kubectl, "svc", "db", "-n", namespace)["spec"]
    assert spec["clusterIP"] == "None" and spec["clusterIPs"] == ["None"]
    assert spec["ipFamilyPolicy"] == "SingleStack" and spec["ipFamilies"] == ["IPv4"]
    kubectl.run("create", "service", "externalname", "ext", "-n", namespace, "--external-name=example.com")
    ext = get(kubectl, "svc", "ext", "-n", namespace)["spec"]
    assert "clusterIP" not in ext and "ipFamilies" not in ext
    # ExternalName to ClusterIP allocates; back to ExternalName gives the address back.
    kubectl.run(
        "patch",
        "svc",
        "ext",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec": {"type": "ClusterIP", "externalName": null}}',
    )
    ip = get(kubectl, "svc", "ext", "-n", namespace)["spec"]["clusterIP"]
    assert ip.startswith("127.96.") and ipaddress(kubectl, ip) is not None
    kubectl.run(
        "patch",
        "svc",
        "ext",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec": {"type": "ExternalName", "externalName": "example.org"}}',
    )
    assert "clusterIP" not in get(kubectl, "svc", "ext", "-n", namespace)["spec"]
    assert ipaddress(kubectl, ip) is None


def test_node_ports_are_allocated_checked_and_freed(kubectl: Kubectl, namespace: str) -> None:
    kubectl.run("create", "service", "nodeport", "np", "-n", namespace, "--tcp=80:8080")
    np = get(kubectl, "svc", "np", "-n", namespace)["spec"]
    node_port = np["ports"][0]["nodePort"]
    assert 30000 <= node_port <= 32767 and np["externalTrafficPolicy"] == "Cluster"
    row = kubectl.run("get", "svc", "np", "-n", namespace, "--no-headers").out.split()
    assert row[1] == "NodePort" and row[4] == f"80:{node_port}/TCP"
    taken = kubectl.fails(
        "create", "service", "nodeport", "np2", "-n", namespace, "--tcp=80:8080", f"--node-port={node_port}"
    )
    assert (
        f'Service "np2" is invalid: spec.ports[0].nodePort: Invalid value: {node_port}: '
        "provided port is already allocated"
    ) in taken.stderr
    outside = kubectl.fails(
        "create", "service", "nodeport", "np3", "-n", namespace, "--tcp=80:8080", "--node-port=80"
    )
    assert (
        'Service "np3" is invalid: spec.ports[0].nodePort: Invalid value: 80: provided port is not in the valid '
        "range. The range of valid ports is 30000-32767"
    ) in outside.stderr
    kubectl.run("create", "service", "loadbalancer", "lb", "-n", namespace, "--tcp=443:8443")
    lb = get(kubectl, "svc", "lb", "-n", namespace)["spec"]
    assert 30000 <= lb["ports"][0]["nodePort"] <= 32767 and lb["allocateLoadBalancerNodePorts"] is True
    # Switching to ClusterIP drops the node port; it can be had again.
    kubectl.run(
        "patch", "svc", "np", "-n", namespace, "--type=merge", "-p", '{"spec": {"type": "ClusterIP"}}'
    )
    assert "nodePort" not in get(kubectl, "svc", "np", "-n", namespace)["spec"]["ports"][0]
    kubectl.run(
        "create", "service", "nodeport", "np2", "-n", namespace, "--tcp=80:8080", f"--node-port={node_port}"
    )
    kubectl.run("delete", "svc", "np2", "-n", namespace)
    kubectl.run(
        "create", "service", "nodeport", "np4", "-n", namespace, "--tcp=80:8080", f"--node-port={node_port}"
    )


def test_a_server_side_dry_run_allocates_nothing(kubectl: Kubectl, namespace: str) -> None:
    out = kubectl.run(
        "create", "service", "clusterip", "dry", "-n", namespace, "--tcp=80", "--dry-run=server", "-o", "json"
    ).out
    spec = json.loads(out)["spec"]
    assert spec["clusterIP"] == "127.96.0.0"  # upstream's dry-run allocator answers the range's own address
    assert spec["ipFamilies"] == ["IPv4"]
    assert ipaddress(kubectl, "127.96.0.0") is None
    assert kubectl.run("get", "svc", "-n", namespace, "--no-headers", check=False).out == ""


def test_a_full_range_and_node_port_range_say_so(fresh: Callable[..., Kubectl]) -> None:
    """A /29 has six usable addresses: the kubernetes Service's and five more; a request refused for want
    of a node port gives its address back."""
    k = fresh(service_cluster_ip_range="127.97.0.0/29", service_node_port_range="30000-30001")
    assert get(k, "svc", "kubernetes", "-n", "default")["spec"]["clusterIP"] == "127.97.0.1"
    assert get(k, "servicecidr", "kubernetes")["spec"]["cidrs"] == ["127.97.0.0/29"]
    k.run("create", "service", "nodeport", "n1", "--tcp=80")
    k.run("create", "service", "nodeport", "n2", "--tcp=80")
    full = k.fails("create", "service", "nodeport", "n3", "--tcp=80")
    assert "Internal error occurred: failed to allocate a nodePort: range is full" in full.stderr
    assert {get(k, "svc", n)["spec"]["ports"][0]["nodePort"] for n in ("n1", "n2")} == {30000, 30001}
    for i in range(3):
        k.run("create", "service", "clusterip", f"s{i}", "--tcp=80")
    ips = {get(k, "svc", name)["spec"]["clusterIP"] for name in ("n1", "n2", "s0", "s1", "s2")}
    assert ips == {f"127.97.0.{i}" for i in range(2, 7)}
    full = k.fails("create", "service", "clusterip", "s3", "--tcp=80")
    assert "Internal error occurred: failed to allocate a serviceIP: range is full" in full.stderr
    k.run("create", "service", "clusterip", "headless", "--clusterip=None")  # needs no address
    k.run("delete", "svc", "s0")
    k.run("create", "service", "clusterip", "s3", "--tcp=80")


def test_records_are_repaired(apiserver: APIServerProcess, fresh: Callable[..., Kubectl]) -> None:
    """A missing IPAddress is written again at start; an orphan one the allocator manages goes once it is
    older than the repair interval."""
    k = fresh()
    k.run("create", "service", "clusterip", "web", "--tcp=80")
    ip = get(k, "svc", "web")["spec"]["clusterIP"]
    k.run("delete", "ipaddress", ip)
    orphan = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IPAddress",
        "metadata": {
            "name": "127.96.0.200",
            "labels": {"ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io"},
        },
        "spec": {"parentRef": {"resource": "services", "namespace": "default", "name": "gone"}},
    }
    k.apply(json.dumps(orphan))
    users = {
        **orphan,
        "metadata": {"name": "127.96.0.201"},
    }  # not the allocator's: kept, and it blocks the IP
    k.apply(json.dumps(users))
    apiserver.restart(service_ip_repair_interval_seconds=1)
    assert ipaddress(k, ip)["spec"]["parentRef"]["name"] == "web"
    wait_until(lambda: ipaddress(k, "127.96.0.200") is None, "the orphan IPAddress to go")
    assert ipaddress(k, "127.96.0.201") is not None
    refused = k.fails("create", "service", "clusterip", "other", "--tcp=80", "--clusterip=127.96.0.201")
    assert "provided IP is already allocated" in refused.stderr


def test_the_kubernetes_service_comes_back_and_follows_the_servers_port(
    apiserver: APIServerProcess, fresh: Callable[..., Kubectl]
) -> None:
    k = fresh(endpoint_reconciler_interval_seconds=0.2, advertise_address="127.0.0.5")
    k.run("delete", "svc", "kubernetes", "-n", "default")
    wait_until(
        lambda: k.run("get", "svc", "kubernetes", "-n", "default", check=False).code == 0, "the Service again"
    )
    assert get(k, "svc", "kubernetes", "-n", "default")["spec"]["clusterIP"] == "127.96.0.1"
    k.run("patch", "endpoints", "kubernetes", "-n", "default", "--type=merge", "-p", '{"subsets": null}')
    wait_until(
        lambda: get(k, "endpoints", "kubernetes", "-n", "default").get("subsets"), "the endpoints again"
    )
    apiserver.restart(port=0)
    port = int(apiserver.url.rsplit(":", 1)[1])
    svc = get(k, "svc", "kubernetes", "-n", "default")
    assert svc["spec"]["ports"][0]["targetPort"] == port
    endpoints = get(k, "endpoints", "kubernetes", "-n", "default")
    assert endpoints["subsets"][0]["ports"][0]["port"] == port
    assert endpoints["subsets"][0]["addresses"] == [{"ip": "127.0.0.5"}]
    assert get(k, "endpointslice", "kubernetes", "-n", "default")["ports"][0]["port"] == port


def test_no_endpoint_reconciler_leaves_the_endpoints_alone(fresh: Callable[..., Kubectl]) -> None:
    k = fresh(endpoint_reconciler_type="none")
    assert get(k, "svc", "kubernetes", "-n", "default")["spec"]["clusterIP"] == "127.96.0.1"
    assert k.run("get", "endpoints", "kubernetes", "-n", "default", check=False).code != 0
    assert k.run("get", "endpointslice", "kubernetes", "-n", "default", check=False).code != 0


def test_tenant_replicas_agree_on_allocations_and_the_kubernetes_endpoints(
    tmp_path: Path, kubectl_path: str
) -> None:
    """Two replicas of a tenant on one store: Services created through both at once get distinct
    addresses, each recorded once; the ``kubernetes`` endpoints name one replica, the leader."""
    platform = PlatformProcess(
        tmp_path / "platform",
        {
            "tenant_restart_backoff_seconds": 0.2,
            "tenant_apiserver": json.dumps(
                {"controller_manager": False, "scheduler": False, "endpoint_reconciler_interval_seconds": 0.5}
            ),
        },
    )
    platform.start()
    try:
        admin = Kubectl(kubectl_path, platform.kubeconfig, tmp_path / "cache")
        admin.apply("apiVersion: management.loft.sh/v1\nkind: Project\nmetadata: {name: default}\n")
        wait_until(lambda: admin.run("get", "namespace", "p-default", check=False).code == 0, "the project")
        values = yaml.safe_dump({"controlPlane": {"statefulSet": {"highAvailability": {"replicas": 2}}}})
        admin.apply(
            json.dumps(
                {
                    "apiVersion": "management.loft.sh/v1",
                    "kind": "VirtualClusterInstance",
                    "metadata": {"name": "ha", "namespace": "p-default"},
                    "spec": {"template": {"helmRelease": {"values": values}}},
                }
            )
        )
        directory = platform.tenant_dir("default", "ha")
        configs = [directory / f"kubeconfig-{i}.yaml" for i in (0, 1)]
        wait_until(lambda: all(c.exists() for c in configs), "both replicas", within=90)
        replicas = [Kubectl(kubectl_path, c, tmp_path / f"cache-{i}") for i, c in enumerate(configs)]
        for k in replicas:
            wait_until(lambda k=k: k.run("get", "svc", "kubernetes", check=False).code == 0, "the Service")
        ports = {
            int(yaml.safe_load(c.read_text())["clusters"][0]["cluster"]["server"].rsplit(":", 1)[1])
            for c in configs
        }
        endpoints = wait_until(
            lambda: (
                json.loads(r.out).get("subsets")
                if (r := replicas[1].run("get", "endpoints", "kubernetes", "-o", "json", check=False)).code
                == 0
                else None
            ),
            "the kubernetes endpoints",
        )
        (subset,) = endpoints
        assert subset["addresses"] == [{"ip": "127.0.0.1"}]
        assert subset["ports"][0]["port"] in ports and len(ports) == 2
        # The tenant's Service range is its own (recorded by the platform); `kubernetes` takes its first address.
        service_cidr = json.loads((directory / "network.json").read_text())["serviceCIDR"]
        first = str(next(ip_network(service_cidr).hosts()))
        for k in replicas:
            assert get(k, "svc", "kubernetes")["spec"]["clusterIP"] == first
        creates = [
            k.popen("create", "service", "clusterip", f"r{i}-{n}", "--tcp=80")
            for n in range(6)
            for i, k in enumerate(replicas)
        ]
        for proc in creates:
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
        listed = get(replicas[0], "svc")["items"]
        ips = [s["spec"]["clusterIP"] for s in listed if s["metadata"]["name"].startswith("r")]
        assert len(ips) == len(set(ips)) == 12
        records = {
            r["metadata"]["name"]: r["spec"]["parentRef"]["name"]
            for r in get(replicas[1], "ipaddresses")["items"]
        }
        for s in listed:
            assert records[s["spec"]["clusterIP"]] == s["metadata"]["name"]
    finally:
        platform.stop()
        platform.kill_tenants()
