"""Service spec rules that the API server applies around ClusterIP and NodePort allocation (pure).

Upstream spreads them over ``pkg/apis/core/v1/defaults.go`` (``SetDefaults_Service``),
``pkg/api/service/util`` (``NormalizeClusterIPs``), the Service REST storage (``patchAllocatedValues``,
``initIPFamilyFields``), its strategy (``dropTypeDependentFields``) and ``pkg/apis/core/validation``
(``ValidateServiceClusterIPsRelatedFields``, ``validateUpgradeDowngradeClusterIPs``); the messages are
theirs. A vplane cluster is single-stack: one IP family, the family of ``service_cluster_ip_range``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Any

from vplane.kube import errors
from vplane.kube.errors import Cause
from vplane.kube.objects import Obj
from vplane.kube.serviceip import family_of

CLUSTER_IP, NODE_PORT, LOAD_BALANCER, EXTERNAL_NAME = "ClusterIP", "NodePort", "LoadBalancer", "ExternalName"
SINGLE_STACK, PREFER_DUAL_STACK, REQUIRE_DUAL_STACK = "SingleStack", "PreferDualStack", "RequireDualStack"
POLICIES = [PREFER_DUAL_STACK, REQUIRE_DUAL_STACK, SINGLE_STACK]
FAMILIES = ["IPv4", "IPv6"]
NONE = "None"
CLIENT_IP_TIMEOUT_SECONDS = 10800
"""``DefaultClientIPServiceAffinitySeconds`` (3 hours)."""
IP_MESSAGE = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"


def _d(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def needs_cluster_ip(spec: Obj) -> bool:
    """Every type but ExternalName has a ``clusterIP`` (``None`` counts as one)."""
    return spec.get("type") != EXTERNAL_NAME


def needs_node_port(spec: Obj) -> bool:
    return spec.get("type") in (NODE_PORT, LOAD_BALANCER)


def is_headless(spec: Obj) -> bool:
    return spec.get("clusterIP") == NONE or (_l(spec.get("clusterIPs")) or [None])[0] == NONE


def needs_health_check(spec: Obj) -> bool:
    """A LoadBalancer with ``externalTrafficPolicy: Local`` gets a health check node port."""
    return spec.get("type") == LOAD_BALANCER and spec.get("externalTrafficPolicy") == "Local"


def _externally_accessible(spec: Obj) -> bool:
    return needs_node_port(spec) or (spec.get("type") == CLUSTER_IP and bool(spec.get("externalIPs")))


def cluster_ips(spec: Obj) -> list[str]:
    """The allocated addresses of a Service: its ``clusterIPs`` without ``None``."""
    if not needs_cluster_ip(spec):
        return []
    ips = [str(ip) for ip in _l(spec.get("clusterIPs")) if ip]
    if not ips and spec.get("clusterIP"):
        ips = [str(spec["clusterIP"])]
    return [ip for ip in ips if ip != NONE]


def node_ports(spec: Obj) -> list[int]:
    """Every node port a Service holds: its ports' ``nodePort`` values and its health check port."""
    out = [
        p["nodePort"]
        for p in map(_d, _l(spec.get("ports")))
        if isinstance(p.get("nodePort"), int) and p["nodePort"]
    ]
    health = spec.get("healthCheckNodePort")
    if isinstance(health, int) and health and needs_health_check(spec):
        out.append(health)
    return sorted(set(out))


# -- defaults and normalization ---------------------------------------------------------------------


def apply_defaults(spec: Obj) -> None:
    """``SetDefaults_Service``: type, session affinity, port protocol and target port, traffic policies."""
    spec.setdefault("type", CLUSTER_IP)
    affinity = spec.setdefault("sessionAffinity", "None")
    if affinity == "None":
        spec.pop("sessionAffinityConfig", None)
    elif affinity == "ClientIP":
        config = spec.get("sessionAffinityConfig")
        client_ip = _d(config).get("clientIP") if isinstance(config, dict) else None
        if not isinstance(client_ip, dict) or client_ip.get("timeoutSeconds") is None:
            spec["sessionAffinityConfig"] = {"clientIP": {"timeoutSeconds": CLIENT_IP_TIMEOUT_SECONDS}}
    for port in _l(spec.get("ports")):
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if "port" in port and port.get("targetPort") in (None, 0, ""):
                port["targetPort"] = port["port"]
    if _externally_accessible(spec) and not spec.get("externalTrafficPolicy"):
        spec["externalTrafficPolicy"] = "Cluster"
    if spec.get("internalTrafficPolicy") is None and spec["type"] in (CLUSTER_IP, NODE_PORT, LOAD_BALANCER):
        spec["internalTrafficPolicy"] = "Cluster"
    if spec["type"] == LOAD_BALANCER and spec.get("allocateLoadBalancerNodePorts") is None:
        spec["allocateLoadBalancerNodePorts"] = True


def _same(a: Obj, b: Obj, key: str) -> bool:
    return (a.get(key) or None) == (b.get(key) or None)


def normalize_cluster_ips(spec: Obj, old: Obj | None) -> None:
    """``NormalizeClusterIPs``: keep ``clusterIP`` and ``clusterIPs`` in step for clients that set one."""
    if old is not None and old.get("clusterIP") != spec.get("clusterIP") and _same(old, spec, "clusterIPs"):
        if not spec.get("clusterIP"):
            spec.pop("clusterIPs", None)  # cleared clusterIP, untouched clusterIPs: clear both
            return
        ips = list(_l(spec.get("clusterIPs")))
        if ips:
            ips[0] = spec["clusterIP"]  # changed clusterIP: clusterIPs follow (and validation refuses it)
            spec["clusterIPs"] = ips
            return
    if spec.get("clusterIP") and not spec.get("clusterIPs"):
        spec["clusterIPs"] = [spec["clusterIP"]]


def patch_allocated_values(spec: Obj, old: Obj) -> None:
    """``patchAllocatedValues``: an update that leaves out what the server allocated keeps it, so a PUT of
    the manifest a Service was created from (or ``kubectl replace``) works."""
    if needs_cluster_ip(old) and needs_cluster_ip(spec):
        if not spec.get("clusterIP") and old.get("clusterIP"):
            spec["clusterIP"] = old["clusterIP"]
        if not spec.get("clusterIPs") and old.get("clusterIPs"):
            spec["clusterIPs"] = list(old["clusterIPs"])
    if needs_node_port(old) and needs_node_port(spec):
        old_ports = [_d(p) for p in _l(old.get("ports"))]
        new_ports = [p for p in _l(spec.get("ports")) if isinstance(p, dict)]
        used = {p.get("nodePort") for p in old_ports if p.get("nodePort")} & {
            p.get("nodePort") for p in new_ports if p.get("nodePort")
        }
        by_name = {str(p.get("name") or ""): p.get("nodePort") for p in old_ports}
        for port in new_ports:
            if not port.get("nodePort"):
                value = by_name.get(str(port.get("name") or ""))
                if value and value not in used:
                    port["nodePort"] = value
    if needs_health_check(old) and needs_health_check(spec) and not spec.get("healthCheckNodePort"):
        if old.get("healthCheckNodePort"):
            spec["healthCheckNodePort"] = old["healthCheckNodePort"]


def _same_node_ports(a: Obj, b: Obj) -> bool:
    ports_a, ports_b = _l(a.get("ports")), _l(b.get("ports"))
    return len(ports_a) == len(ports_b) and all(
        _d(x).get("nodePort") == _d(y).get("nodePort") for x, y in zip(ports_a, ports_b, strict=True)
    )


def drop_type_dependent_fields(spec: Obj, old: Obj) -> None:
    """``dropTypeDependentFields``: a type change wipes what the old type had and the new one does not
    use, when the user left it as it was (a changed value is theirs, and validation judges it)."""
    if needs_cluster_ip(old) and not needs_cluster_ip(spec):
        if _same(old, spec, "clusterIPs") and old.get("clusterIP") == spec.get("clusterIP"):
            spec.pop("clusterIP", None)
            spec.pop("clusterIPs", None)
        if _same(old, spec, "ipFamilies"):
            spec.pop("ipFamilies", None)
        if old.get("ipFamilyPolicy") == spec.get("ipFamilyPolicy"):
            spec.pop("ipFamilyPolicy", None)
    if needs_node_port(old) and not needs_node_port(spec) and _same_node_ports(old, spec):
        for port in _l(spec.get("ports")):
            if isinstance(port, dict):
                port.pop("nodePort", None)
    if needs_health_check(old) and not needs_health_check(spec):
        if old.get("healthCheckNodePort") == spec.get("healthCheckNodePort"):
            spec.pop("healthCheckNodePort", None)
    if old.get("type") == LOAD_BALANCER and spec.get("type") != LOAD_BALANCER:
        if old.get("allocateLoadBalancerNodePorts") == spec.get("allocateLoadBalancerNodePorts"):
            spec.pop("allocateLoadBalancerNodePorts", None)
    if needs_cluster_ip(old) and not needs_cluster_ip(spec):
        if old.get("internalTrafficPolicy") == spec.get("internalTrafficPolicy"):
            spec.pop("internalTrafficPolicy", None)
    if _externally_accessible(old) and not _externally_accessible(spec):
        if old.get("externalTrafficPolicy") == spec.get("externalTrafficPolicy"):
            spec.pop("externalTrafficPolicy", None)


def init_ip_families(spec: Obj, old: Obj | None, cluster_families: Sequence[str]) -> list[Cause]:
    """``initIPFamilyFields``: ``ipFamilyPolicy`` and ``ipFamilies`` from the request and the cluster's
    families (the first is the default); the causes refuse the request."""
    if spec.get("type") == EXTERNAL_NAME:
        return []
    headless_selectorless = spec.get("clusterIP") == NONE and not spec.get("selector")
    if spec.get("ipFamilyPolicy") is None:
        if old is not None and old.get("ipFamilyPolicy"):
            spec["ipFamilyPolicy"] = old["ipFamilyPolicy"]
        elif headless_selectorless:
            spec["ipFamilyPolicy"] = REQUIRE_DUAL_STACK
        else:
            spec["ipFamilyPolicy"] = SINGLE_STACK
    causes = validate_cluster_ip_fields(spec)
    if causes:
        return causes
    policy = spec["ipFamilyPolicy"]
    ips = [str(ip) for ip in _l(spec.get("clusterIPs"))]
    families = [str(f) for f in _l(spec.get("ipFamilies"))]
    if old is not None:
        if policy == SINGLE_STACK:
            if _same(old, spec, "clusterIPs") and len(ips) > 1:
                ips = ips[:1]
            if _same(old, spec, "ipFamilies") and len(families) > 1:
                families = families[:1]
        else:
            if len(_l(old.get("clusterIPs"))) > len(ips) > 0:
                causes.append(
                    errors.field_invalid(
                        "spec.ipFamilyPolicy",
                        policy,
                        "must be 'SingleStack' to release the secondary cluster IP",
                    )
                )
            if len(_l(old.get("ipFamilies"))) > len(families) > 0:
                causes.append(
                    errors.field_invalid(
                        "spec.ipFamilyPolicy",
                        policy,
                        "must be 'SingleStack' to release the secondary IP family",
                    )
                )
    if policy == SINGLE_STACK:
        if len(ips) == 2:
            causes.append(
                errors.field_invalid(
                    "spec.ipFamilyPolicy",
                    policy,
                    "must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified",
                )
            )
        if len(families) == 2:
            causes.append(
                errors.field_invalid(
                    "spec.ipFamilyPolicy",
                    policy,
                    "must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified",
                )
            )
    for i, ip in enumerate(ips):
        if ip == NONE:
            break
        family = family_of(ip)
        if i >= len(families):
            if family not in cluster_families:
                causes.append(
                    errors.field_invalid(
                        f"spec.clusterIPs[{i}]", ips, f"{family} is not configured on this cluster"
                    )
                )
            else:
                families.append(family)
    if causes:
        return causes
    if headless_selectorless:
        if not families:
            families = [cluster_families[0]]
        if len(families) < 2 and policy != SINGLE_STACK:
            families.append("IPv6" if families[0] == "IPv4" else "IPv4")
        _set_lists(spec, ips, families)
        return []
    if policy == REQUIRE_DUAL_STACK and len(cluster_families) < 2:
        causes.append(
            errors.field_invalid(
                "spec.ipFamilyPolicy", policy, "this cluster is not configured for dual-stack services"
            )
        )
    for i, family in enumerate(families):
        if family not in cluster_families:
            causes.append(
                errors.field_invalid(f"spec.ipFamilies[{i}]", family, "not configured on this cluster")
            )
    if causes:
        return causes
    if not families:
        families = [cluster_families[0]]
    if policy != SINGLE_STACK and len(families) == 1 and len(cluster_families) == 2:
        families.append(cluster_families[1] if families[0] == cluster_families[0] else cluster_families[0])
    _set_lists(spec, ips, families)
    return []


def _set_lists(spec: Obj, ips: list[str], families: list[str]) -> None:
    if ips:
        spec["clusterIPs"] = ips
    spec["ipFamilies"] = families


# -- validation -------------------------------------------------------------------------------------


def validate_cluster_ip_fields(spec: Obj) -> list[Cause]:
    """``ValidateServiceClusterIPsRelatedFields`` (and the ExternalName checks before it)."""
    causes: list[Cause] = []
    if spec.get("type") == EXTERNAL_NAME:
        if spec.get("clusterIP") or spec.get("clusterIPs"):
            causes.append(
                errors.field_forbidden("spec.clusterIPs", "may not be set for ExternalName services")
            )
        if spec.get("ipFamilyPolicy") is not None:
            causes.append(
                errors.field_forbidden("spec.ipFamilyPolicy", "may not be set for ExternalName services")
            )
        if spec.get("ipFamilies"):
            causes.append(
                errors.field_forbidden("spec.ipFamilies", "may not be set for ExternalName services")
            )
        return causes
    cluster_ip = spec.get("clusterIP")
    ips = _l(spec.get("clusterIPs"))
    if cluster_ip:
        if not ips:
            causes.append(errors.field_required("spec.clusterIPs"))
        elif ips[0] != cluster_ip:
            causes.append(errors.field_invalid("spec.clusterIPs", ips, "first value must match `clusterIP`"))
    elif ips:
        causes.append(
            errors.field_invalid("spec.clusterIPs", ips, "must be empty when `clusterIP` is not specified")
        )
    seen: set[Any] = set()
    for i, family in enumerate(_l(spec.get("ipFamilies"))):
        if family not in FAMILIES:
            causes.append(errors.field_not_supported(f"spec.ipFamilies[{i}]", family, FAMILIES))
        if family in seen:
            causes.append(errors.field_duplicate(f"spec.ipFamilies[{i}]", family))
        seen.add(family)
    policy = spec.get("ipFamilyPolicy")
    if policy is not None and policy not in POLICIES:
        causes.append(errors.field_not_supported("spec.ipFamilyPolicy", policy, POLICIES))
    invalid_ips = False
    for i, ip in enumerate(ips):
        if i == 0 and ip == NONE:
            if len(ips) > 1:
                invalid_ips = True
                causes.append(
                    errors.field_invalid("spec.clusterIPs", ips, "'None' must be the first and only value")
                )
            continue
        if not _is_ip(ip):
            invalid_ips = True
            causes.append(errors.field_invalid(f"spec.clusterIPs[{i}]", ip, IP_MESSAGE))
    if len(ips) > 2:
        causes.append(errors.field_invalid("spec.clusterIPs", ips, "may only hold up to 2 values"))
    if ips and ips[0] == NONE and spec.get("type") in (NODE_PORT, LOAD_BALANCER):
        causes.append(
            errors.field_invalid(
                "spec.clusterIPs[0]", NONE, f"may not be set to 'None' for {spec['type']} services"
            )
        )
    if invalid_ips:
        return causes
    if len(ips) > 1 and len({family_of(str(ip)) for ip in ips}) != len(ips):
        causes.append(
            errors.field_invalid("spec.clusterIPs", ips, "may specify no more than one IP for each IP family")
        )
    families = _l(spec.get("ipFamilies"))
    if ips and not is_headless(spec):
        for i, ip in enumerate(ips[: len(families)]):
            want = families[i]
            if want in FAMILIES and family_of(str(ip)) != want:
                causes.append(
                    errors.field_invalid(
                        f"spec.clusterIPs[{i}]",
                        ip,
                        f"expected an {want} value as indicated by `ipFamilies[{i}]`",
                    )
                )
    return causes


def _is_ip(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def validate_node_ports(spec: Obj) -> list[Cause]:
    """Node ports where a type has none, outside 1-65535, or twice for one protocol."""
    causes: list[Cause] = []
    seen: set[tuple[str, int]] = set()
    for i, port in enumerate(map(_d, _l(spec.get("ports")))):
        value = port.get("nodePort")
        if not value:
            continue
        path = f"spec.ports[{i}].nodePort"
        if spec.get("type") == CLUSTER_IP:
            causes.append(errors.field_forbidden(path, "may not be used when `type` is 'ClusterIP'"))
            continue
        if not isinstance(value, int) or not 0 < value < 65536:
            causes.append(errors.field_invalid(path, value, "must be between 1 and 65535, inclusive"))
            continue
        key = (str(port.get("protocol") or "TCP"), value)
        if key in seen:
            causes.append(errors.field_duplicate(path, value))
        seen.add(key)
    return causes


def validate_update(spec: Obj, old: Obj) -> list[Cause]:
    """``validateUpgradeDowngradeClusterIPs``: an address, once set, stays (except on and off ExternalName)."""
    if spec.get("type") == EXTERNAL_NAME or old.get("type") == EXTERNAL_NAME:
        return []
    if is_headless(spec) and is_headless(old):
        return []
    old_ips, ips = (
        [str(ip) for ip in _l(old.get("clusterIPs"))],
        [str(ip) for ip in _l(spec.get("clusterIPs"))],
    )
    causes: list[Cause] = []
    if len(old_ips) == len(ips):
        for i, ip in enumerate(old_ips):
            if ip != ips[i]:
                causes.append(errors.field_invalid(f"spec.clusterIPs[{i}]", ips, "may not change once set"))
    elif len(old_ips) > len(ips):
        if not ips:
            causes.append(
                errors.field_invalid("spec.clusterIPs[0]", ips, "primary clusterIP can not be unset")
            )
        elif ips[0] != old_ips[0]:
            causes.append(errors.field_invalid("spec.clusterIPs[0]", ips, "may not change once set"))
        if len(ips) == 1 and spec.get("ipFamilyPolicy") != SINGLE_STACK:
            causes.append(
                errors.field_invalid(
                    "spec.ipFamilyPolicy",
                    spec.get("ipFamilyPolicy"),
                    "must be set to 'SingleStack' when releasing the secondary clusterIP",
                )
            )
    elif old_ips and ips[0] != old_ips[0]:
        causes.append(errors.field_invalid("spec.clusterIPs[0]", ips, "may not change once set"))
    return causes


# -- what an update allocates and releases ----------------------------------------------------------


def ip_wanted_on_update(spec: Obj, old: Obj) -> tuple[bool, list[str]]:
    """Whether an update needs a ClusterIP allocated (a type change from ExternalName, or a Service stored
    before the API server allocated them), and the old addresses to release when it succeeds."""
    if not needs_cluster_ip(spec):
        return False, cluster_ips(old)
    if is_headless(spec):
        return False, []
    return not cluster_ips(old) and not is_headless(old), []


# -- the `kubernetes` Service, its endpoints and the default ServiceCIDR ----------------------------

KUBERNETES = "kubernetes"
DEFAULT_NAMESPACE = "default"
HTTPS_PORT = 443
SKIP_MIRROR_LABEL = "endpointslice.kubernetes.io/skip-mirror"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
SERVICE_CIDR_READY_MESSAGE = "Kubernetes default Service CIDR is ready"


def kubernetes_service(cluster_ip: str, target_port: int) -> Obj:
    """The ``default/kubernetes`` Service the API server creates (``CreateOrUpdateMasterServiceIfNeeded``):
    no selector, its Endpoints are the API server's own."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": KUBERNETES,
            "namespace": DEFAULT_NAMESPACE,
            "labels": {"component": "apiserver", "provider": "kubernetes"},
        },
        "spec": {
            "ports": [kubernetes_service_port(target_port)],
            "clusterIP": cluster_ip,
            "ipFamilyPolicy": SINGLE_STACK,
            "sessionAffinity": "None",
            "type": CLUSTER_IP,
        },
    }


def kubernetes_service_port(target_port: int) -> Obj:
    return {"name": "https", "protocol": "TCP", "port": HTTPS_PORT, "targetPort": target_port}


def _endpoint_port(port: int) -> Obj:
    return {"name": "https", "port": port, "protocol": "TCP"}


def master_endpoints(address: str, port: int) -> Obj:
    """The ``kubernetes`` Endpoints (the lease reconciler's): this API server's address, port ``https``,
    and ``skip-mirror`` so no mirroring controller makes slices of it (the server writes its own)."""
    return {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {
            "name": KUBERNETES,
            "namespace": DEFAULT_NAMESPACE,
            "labels": {SKIP_MIRROR_LABEL: "true"},
        },
        "subsets": [{"addresses": [{"ip": address}], "ports": [_endpoint_port(port)]}],
    }


def master_endpoint_slice(address: str, port: int) -> Obj:
    """The ``kubernetes`` EndpointSlice, as upstream's ``endpointSliceFromEndpoints`` makes it."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": KUBERNETES,
            "namespace": DEFAULT_NAMESPACE,
            "labels": {SERVICE_NAME_LABEL: KUBERNETES},
        },
        "addressType": family_of(address) or "IPv4",
        "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
        "ports": [_endpoint_port(port)],
    }


def endpoints_differ(current: Obj, desired: Obj) -> bool:
    """Whether the stored ``kubernetes`` Endpoints need rewriting (addresses, ports or the label)."""
    labels = _d(_d(current.get("metadata")).get("labels"))
    return current.get("subsets") != desired["subsets"] or labels.get(SKIP_MIRROR_LABEL) != "true"


def endpoint_slice_differs(current: Obj, desired: Obj) -> bool:
    labels = _d(_d(current.get("metadata")).get("labels"))
    return bool(
        current.get("endpoints") != desired["endpoints"]
        or current.get("ports") != desired["ports"]
        or any(labels.get(k) != v for k, v in desired["metadata"]["labels"].items())
    )


def default_service_cidr(cidr: str) -> Obj:
    """The ``kubernetes`` ServiceCIDR (upstream's default ServiceCIDR controller)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "ServiceCIDR",
        "metadata": {"name": KUBERNETES},
        "spec": {"cidrs": [cidr]},
    }


def service_cidr_ready(now: str) -> Obj:
    """The condition that controller applies (with no reason, as it does)."""
    return {
        "type": "Ready",
        "status": "True",
        "lastTransitionTime": now,
        "reason": "",
        "message": SERVICE_CIDR_READY_MESSAGE,
    }


def serving_names(service_ip: str, domain: str = "cluster.local") -> list[str]:
    """What kube-apiserver adds to its serving certificate so in-cluster clients can reach it through the
    ``kubernetes`` Service: the Service's ClusterIP and names."""
    return [
        service_ip,
        KUBERNETES,
        "kubernetes.default",
        "kubernetes.default.svc",
        f"kubernetes.default.svc.{domain}",
    ]
