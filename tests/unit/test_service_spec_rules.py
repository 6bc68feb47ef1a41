"""Service spec rules around allocation: defaults, clusterIP/clusterIPs normalization, what an update keeps
and drops, IP families, and upstream's validation messages (vplane.kube.services)."""

from __future__ import annotations

from typing import Any

from vplane.kube import errors, services

V4 = ["IPv4"]


def messages(causes: list[errors.Cause]) -> list[str]:
    return [f"{c.get('field')}: {c.get('message')}" for c in causes]


def test_defaults_as_set_defaults_service() -> None:
    spec: dict[str, Any] = {"ports": [{"port": 80}]}
    services.apply_defaults(spec)
    assert spec == {
        "type": "ClusterIP",
        "sessionAffinity": "None",
        "internalTrafficPolicy": "Cluster",
        "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}],
    }
    lb: dict[str, Any] = {"type": "LoadBalancer", "sessionAffinity": "ClientIP"}
    services.apply_defaults(lb)
    assert lb["externalTrafficPolicy"] == "Cluster" and lb["allocateLoadBalancerNodePorts"] is True
    assert lb["sessionAffinityConfig"] == {"clientIP": {"timeoutSeconds": 10800}}
    ext: dict[str, Any] = {"type": "ExternalName", "externalName": "x", "ports": [{"port": 80}]}
    services.apply_defaults(ext)
    assert "internalTrafficPolicy" not in ext and ext["sessionAffinity"] == "None"
    assert ext["ports"][0]["targetPort"] == 80


def test_cluster_ip_alone_fills_cluster_ips_and_a_changed_one_moves_them() -> None:
    spec: dict[str, Any] = {"clusterIP": "127.96.0.5"}
    services.normalize_cluster_ips(spec, None)
    assert spec["clusterIPs"] == ["127.96.0.5"]
    old = {"clusterIP": "127.96.0.5", "clusterIPs": ["127.96.0.5"]}
    changed = {"clusterIP": "127.96.0.9", "clusterIPs": ["127.96.0.5"]}
    services.normalize_cluster_ips(changed, old)
    assert changed["clusterIPs"] == ["127.96.0.9"]
    assert messages(services.validate_update(changed, old)) == [
        'spec.clusterIPs[0]: Invalid value: []string{"127.96.0.9"}: may not change once set'
    ]


def test_an_update_without_allocated_values_keeps_them() -> None:
    old = {
        "type": "NodePort",
        "clusterIP": "127.96.0.5",
        "clusterIPs": ["127.96.0.5"],
        "ports": [
            {"name": "http", "port": 80, "nodePort": 30080},
            {"name": "b", "port": 81, "nodePort": 30081},
        ],
    }
    new: dict[str, Any] = {
        "type": "NodePort",
        "ports": [
            {"name": "http", "port": 80},
            {"name": "c", "port": 82},
            {"name": "b", "port": 81, "nodePort": 30080},
        ],
    }
    services.patch_allocated_values(new, old)
    assert new["clusterIP"] == "127.96.0.5" and new["clusterIPs"] == ["127.96.0.5"]
    # 30080 is now asked for by another port: not patched in twice; "c" is new; "b" keeps its request
    assert [p.get("nodePort") for p in new["ports"]] == [None, None, 30080]
    assert services.validate_update(new, old) == []


def test_a_type_change_drops_what_the_old_type_allocated() -> None:
    old = {
        "type": "NodePort",
        "clusterIP": "127.96.0.5",
        "clusterIPs": ["127.96.0.5"],
        "ipFamilies": V4,
        "ipFamilyPolicy": "SingleStack",
        "internalTrafficPolicy": "Cluster",
        "externalTrafficPolicy": "Cluster",
        "ports": [{"port": 80, "nodePort": 30080}],
    }
    to_cluster_ip = {**old, "type": "ClusterIP", "ports": [{"port": 80, "nodePort": 30080}]}
    services.drop_type_dependent_fields(to_cluster_ip, old)
    assert "nodePort" not in to_cluster_ip["ports"][0] and "externalTrafficPolicy" not in to_cluster_ip
    assert to_cluster_ip["clusterIP"] == "127.96.0.5"
    to_external = {
        **old,
        "type": "ExternalName",
        "externalName": "x",
        "ports": [{"port": 80, "nodePort": 30080}],
    }
    services.drop_type_dependent_fields(to_external, old)
    for gone in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy", "internalTrafficPolicy"):
        assert gone not in to_external
    assert services.ip_wanted_on_update(to_external, old) == (False, ["127.96.0.5"])
    assert services.ip_wanted_on_update(old, to_external) == (True, [])
    assert services.validate_update(to_external, old) == []


def test_ip_families_default_to_the_clusters_single_stack() -> None:
    spec: dict[str, Any] = {"type": "ClusterIP", "selector": {"a": "b"}}
    assert services.init_ip_families(spec, None, V4) == []
    assert spec["ipFamilyPolicy"] == "SingleStack" and spec["ipFamilies"] == ["IPv4"]
    headless: dict[str, Any] = {"type": "ClusterIP", "clusterIP": "None", "clusterIPs": ["None"]}
    assert services.init_ip_families(headless, None, V4) == []
    assert headless["ipFamilyPolicy"] == "RequireDualStack" and headless["ipFamilies"] == ["IPv4", "IPv6"]
    v6: dict[str, Any] = {
        "type": "ClusterIP",
        "clusterIP": "fd00::1",
        "clusterIPs": ["fd00::1"],
        "selector": {},
    }
    assert messages(services.init_ip_families(v6, None, V4)) == [
        'spec.clusterIPs[0]: Invalid value: []string{"fd00::1"}: IPv6 is not configured on this cluster'
    ]
    dual: dict[str, Any] = {"type": "ClusterIP", "ipFamilyPolicy": "RequireDualStack", "selector": {"a": "b"}}
    assert messages(services.init_ip_families(dual, None, V4)) == [
        'spec.ipFamilyPolicy: Invalid value: "RequireDualStack": this cluster is not configured for dual-stack services'
    ]
    external: dict[str, Any] = {"type": "ExternalName"}
    assert services.init_ip_families(external, None, V4) == [] and "ipFamilies" not in external


def test_cluster_ip_fields_are_validated_with_upstreams_words() -> None:
    def check(**spec: Any) -> list[str]:
        return messages(services.validate_cluster_ip_fields({"type": "ClusterIP", **spec}))

    assert check(clusterIP="127.96.0.5", clusterIPs=["127.96.0.5"]) == []
    assert check(clusterIP="nope", clusterIPs=["nope"]) == [
        'spec.clusterIPs[0]: Invalid value: "nope": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)'
    ]
    assert check(clusterIPs=["127.96.0.5"]) == [
        'spec.clusterIPs: Invalid value: []string{"127.96.0.5"}: must be empty when `clusterIP` is not specified'
    ]
    assert check(clusterIP="127.96.0.5", clusterIPs=["127.96.0.6"]) == [
        'spec.clusterIPs: Invalid value: []string{"127.96.0.6"}: first value must match `clusterIP`'
    ]
    assert check(clusterIP="None", clusterIPs=["None", "127.96.0.6"]) == [
        'spec.clusterIPs: Invalid value: []string{"None", "127.96.0.6"}: \'None\' must be the first and only value'
    ]
    assert check(ipFamilyPolicy="Both") == [
        'spec.ipFamilyPolicy: Unsupported value: "Both": supported values: "PreferDualStack", "RequireDualStack", "SingleStack"'
    ]
    assert messages(
        services.validate_cluster_ip_fields({"type": "ExternalName", "clusterIP": "127.96.0.5"})
    ) == ["spec.clusterIPs: Forbidden: may not be set for ExternalName services"]
    assert check(type="NodePort", clusterIP="None", clusterIPs=["None"]) == [
        "spec.clusterIPs[0]: Invalid value: \"None\": may not be set to 'None' for NodePort services"
    ]


def test_node_ports_are_validated_where_a_type_has_none() -> None:
    assert messages(
        services.validate_node_ports({"type": "ClusterIP", "ports": [{"port": 80, "nodePort": 30080}]})
    ) == ["spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"]
    twice = {"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}, {"port": 81, "nodePort": 30080}]}
    assert messages(services.validate_node_ports(twice)) == ["spec.ports[1].nodePort: Duplicate value: 30080"]
    udp = {
        "type": "NodePort",
        "ports": [{"port": 80, "nodePort": 30080}, {"port": 80, "protocol": "UDP", "nodePort": 30080}],
    }
    assert services.validate_node_ports(udp) == []


def test_an_address_once_set_stays() -> None:
    old = {"type": "ClusterIP", "clusterIP": "127.96.0.5", "clusterIPs": ["127.96.0.5"]}
    assert messages(services.validate_update({"type": "ClusterIP"}, old)) == [
        "spec.clusterIPs[0]: Invalid value: []string{}: primary clusterIP can not be unset"
    ]
    headless = {"type": "ClusterIP", "clusterIP": "None", "clusterIPs": ["None"]}
    assert messages(services.validate_update(headless, old)) == [
        'spec.clusterIPs[0]: Invalid value: []string{"None"}: may not change once set'
    ]
    assert services.validate_update(headless, headless) == []
    # A Service stored before the API server allocated may get its first address.
    assert services.validate_update(old, {"type": "ClusterIP"}) == []


def test_the_kubernetes_service_and_its_endpoints() -> None:
    svc = services.kubernetes_service("127.96.0.1", 6443)
    assert svc["spec"]["ports"] == [{"name": "https", "protocol": "TCP", "port": 443, "targetPort": 6443}]
    assert svc["metadata"]["labels"] == {"component": "apiserver", "provider": "kubernetes"}
    endpoints = services.master_endpoints("127.0.0.1", 6443)
    assert endpoints["subsets"] == [
        {"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}
    ]
    assert not services.endpoints_differ(endpoints, endpoints)
    assert services.endpoints_differ(endpoints, services.master_endpoints("127.0.0.1", 6444))
    unlabelled = {**endpoints, "metadata": {"name": "kubernetes"}}
    assert services.endpoints_differ(unlabelled, endpoints)
    sliced = services.master_endpoint_slice("::1", 6443)
    assert sliced["addressType"] == "IPv6" and sliced["endpoints"][0]["conditions"] == {"ready": True}
    relabelled = {
        **sliced,
        "metadata": {"labels": {"kubernetes.io/service-name": "kubernetes", "extra": "x"}},
    }
    assert not services.endpoint_slice_differs(relabelled, sliced)
    assert services.serving_names("127.96.0.1")[-1] == "kubernetes.default.svc.cluster.local"
