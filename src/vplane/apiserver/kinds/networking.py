"""networking.k8s.io/v1: Ingresses, IngressClasses, NetworkPolicies, IPAddresses and ServiceCIDRs."""

from __future__ import annotations

import ipaddress
from typing import Any

from vplane.apiserver.kinds.common import GenerationStrategy, d, dns_name_causes, immutable, lst, rt
from vplane.apiserver.registry import ResourceType, Strategy
from vplane.kube import errors, podspec, validation
from vplane.kube.errors import Cause
from vplane.kube.objects import Obj

PATH_TYPES = ["Exact", "ImplementationSpecific", "Prefix"]
POLICY_TYPES = ["Ingress", "Egress"]
CIDR_MESSAGE = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"
IP_MESSAGE = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"


def _backend(backend: Obj, path: str) -> list[Cause]:
    service, resource = backend.get("service"), backend.get("resource")
    if service is not None and resource is not None:
        return [errors.field_invalid(path, "", "cannot set both service and resource backends")]
    if service is None and resource is None:
        return [errors.field_invalid(path, "", "resource or service backend is required")]
    if service is None:
        return []
    service = d(service)
    causes: list[Cause] = []
    name = service.get("name")
    if not name:
        causes.append(errors.field_required(f"{path}.service.name"))
    else:
        causes += dns_name_causes(name, f"{path}.service.name", validation.dns1035_label)
    port = d(service.get("port"))
    if port.get("name") and port.get("number"):
        causes.append(
            errors.field_invalid(f"{path}.service.port", port, "cannot set both port name & port number")
        )
    elif not port.get("name") and not port.get("number"):
        causes.append(errors.field_invalid(f"{path}.service.port", port, "port name or number is required"))
    number = port.get("number")
    if isinstance(number, int) and not 0 < number < 65536:
        causes.append(
            errors.field_invalid(
                f"{path}.service.port.number", number, "must be between 1 and 65535, inclusive"
            )
        )
    return causes


def _host(host: Any, path: str) -> list[Cause]:
    if not isinstance(host, str) or not host:
        return []
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return [errors.field_invalid(path, host, "must be a DNS name, not an IP address")]
    check = host[2:] if host.startswith("*.") else host
    return [errors.field_invalid(path, host, m) for m in validation.dns1123_subdomain(check)]


class IngressStrategy(GenerationStrategy):
    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = d(obj.get("spec"))
        causes: list[Cause] = []
        rules = lst(spec.get("rules"))
        if spec.get("defaultBackend") is None and not rules:
            causes.append(
                errors.field_invalid("spec", "", "either `defaultBackend` or `rules` must be specified")
            )
        if spec.get("defaultBackend") is not None:
            causes += _backend(d(spec.get("defaultBackend")), "spec.defaultBackend")
        causes += dns_name_causes(spec.get("ingressClassName"), "spec.ingressClassName")
        for i, rule in enumerate(rules):
            rule = d(rule)
            causes += _host(rule.get("host"), f"spec.rules[{i}].host")
            http = rule.get("http")
            if http is None:
                continue
            paths = lst(d(http).get("paths"))
            if not paths:
                causes.append(errors.field_required(f"spec.rules[{i}].http.paths"))
            for j, entry in enumerate(paths):
                entry = d(entry)
                base = f"spec.rules[{i}].http.paths[{j}]"
                path_type = entry.get("pathType")
                if not path_type:
                    causes.append(errors.field_required(f"{base}.pathType", "pathType must be specified"))
                elif path_type not in PATH_TYPES:
                    causes.append(errors.field_not_supported(f"{base}.pathType", path_type, PATH_TYPES))
                elif path_type in ("Exact", "Prefix"):
                    value = entry.get("path")
                    if not isinstance(value, str) or not value.startswith("/"):
                        causes.append(errors.field_invalid(f"{base}.path", value, "must be an absolute path"))
                    elif "//" in value:
                        causes.append(errors.field_invalid(f"{base}.path", value, "must not contain '//'"))
                causes += _backend(d(entry.get("backend")), f"{base}.backend")
        for i, tls in enumerate(lst(spec.get("tls"))):
            for j, host in enumerate(lst(d(tls).get("hosts"))):
                causes += _host(host, f"spec.tls[{i}].hosts[{j}]")
        return causes


class IngressClassStrategy(GenerationStrategy):
    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = d(obj.get("spec"))
        causes: list[Cause] = []
        controller = spec.get("controller")
        if not controller:
            causes.append(errors.field_required("spec.controller"))
        elif isinstance(controller, str):
            domain, _, rest = controller.partition("/")
            if not rest or validation.dns1123_subdomain(domain):
                causes.append(
                    errors.field_invalid(
                        "spec.controller",
                        controller,
                        'must be a domain-prefixed path (such as "acme.io/foo")',
                    )
                )
        params = spec.get("parameters")
        if isinstance(params, dict):
            scope = params.get("scope")
            if scope is not None and scope not in ("Cluster", "Namespace"):
                causes.append(
                    errors.field_not_supported("spec.parameters.scope", scope, ["Cluster", "Namespace"])
                )
            if scope == "Namespace" and not params.get("namespace"):
                causes.append(
                    errors.field_required(
                        "spec.parameters.namespace", "`parameters.scope` is set to 'Namespace'"
                    )
                )
            for field in ("kind", "name"):
                if not params.get(field):
                    causes.append(errors.field_required(f"spec.parameters.{field}"))
        return causes + immutable(obj, old, "spec.controller")


def _cidr(value: Any, path: str) -> list[Cause]:
    try:
        network = ipaddress.ip_network(str(value), strict=False)
    except ValueError:
        return [errors.field_invalid(path, value, CIDR_MESSAGE)]
    if str(value) != f"{network.network_address}/{network.prefixlen}" and str(value) != str(network):
        return [errors.field_invalid(path, value, f'must be in canonical form ("{network}")')]
    return []


def _peers(peers: Any, path: str) -> list[Cause]:
    causes: list[Cause] = []
    for i, peer in enumerate(lst(peers)):
        peer = d(peer)
        ppath = f"{path}[{i}]"
        present = [k for k in ("podSelector", "namespaceSelector", "ipBlock") if peer.get(k) is not None]
        if not present:
            causes.append(errors.field_required(ppath, "must specify a peer"))
        if "ipBlock" in present and len(present) > 1:
            causes.append(errors.field_forbidden(ppath, "may not specify both ipBlock and another peer"))
        for key in ("podSelector", "namespaceSelector"):
            causes += validation.validate_label_selector(peer.get(key), f"{ppath}.{key}")
        block = peer.get("ipBlock")
        if isinstance(block, dict):
            if not block.get("cidr"):
                causes.append(errors.field_required(f"{ppath}.ipBlock.cidr"))
            else:
                causes += _cidr(block["cidr"], f"{ppath}.ipBlock.cidr")
            for j, exception in enumerate(lst(block.get("except"))):
                causes += _cidr(exception, f"{ppath}.ipBlock.except[{j}]")
    return causes


def _ports(ports: Any, path: str) -> list[Cause]:
    causes: list[Cause] = []
    for i, port in enumerate(lst(ports)):
        port = d(port)
        protocol = port.get("protocol")
        if protocol is not None and protocol not in podspec.PROTOCOLS:
            causes.append(errors.field_not_supported(f"{path}[{i}].protocol", protocol, podspec.PROTOCOLS))
        number = port.get("port")
        if isinstance(number, int) and not 0 < number < 65536:
            causes.append(
                errors.field_invalid(f"{path}[{i}].port", number, "must be between 1 and 65535, inclusive")
            )
        end = port.get("endPort")
        if isinstance(end, int):
            if not isinstance(number, int):
                causes.append(errors.field_required(f"{path}[{i}].port", "when endPort is specified"))
            elif end < number:
                causes.append(
                    errors.field_invalid(
                        f"{path}[{i}].endPort", end, "must be greater than or equal to `port`"
                    )
                )
    return causes


class NetworkPolicyStrategy(GenerationStrategy):
    def default(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        if not spec.get("policyTypes"):
            types_ = ["Ingress"]
            if spec.get("egress"):
                types_.append("Egress")
            spec["policyTypes"] = types_
        for direction in ("ingress", "egress"):
            for rule in lst(spec.get(direction)):
                for port in lst(d(rule).get("ports")):
                    if isinstance(port, dict):
                        port.setdefault("protocol", "TCP")

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [errors.field_required("spec")]
        causes = validation.validate_label_selector(spec.get("podSelector"), "spec.podSelector")
        types_ = lst(spec.get("policyTypes"))
        for i, kind in enumerate(types_):
            if kind not in POLICY_TYPES:
                causes.append(errors.field_not_supported(f"spec.policyTypes[{i}]", kind, POLICY_TYPES))
        if len(types_) > 2:
            causes.append(
                errors.field_invalid("spec.policyTypes", types_, "may not have more than 2 policyTypes")
            )
        for i, rule in enumerate(lst(spec.get("ingress"))):
            causes += _ports(d(rule).get("ports"), f"spec.ingress[{i}].ports")
            causes += _peers(d(rule).get("from"), f"spec.ingress[{i}].from")
        for i, rule in enumerate(lst(spec.get("egress"))):
            causes += _ports(d(rule).get("ports"), f"spec.egress[{i}].ports")
            causes += _peers(d(rule).get("to"), f"spec.egress[{i}].to")
        return causes


def ip_address_name(name: str) -> list[str]:
    """IPAddress objects are named by the address, in canonical form."""
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return [IP_MESSAGE]
    if str(address) != name:
        return [f'must be in canonical form ("{address}")']
    return []


class IPAddressStrategy(Strategy):
    name_validator = staticmethod(ip_address_name)

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = obj.get("spec")
        ref = d(spec).get("parentRef") if isinstance(spec, dict) else None
        if not isinstance(ref, dict):
            return [errors.field_required("spec.parentRef")]
        causes: list[Cause] = []
        for field in ("resource", "name"):
            if not ref.get(field):
                causes.append(errors.field_required(f"spec.parentRef.{field}"))
        return causes + immutable(obj, old, "spec.parentRef")


class ServiceCIDRStrategy(Strategy):
    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        cidrs = lst(d(obj.get("spec")).get("cidrs"))
        if not cidrs:
            return [errors.field_required("spec.cidrs", "at least one CIDR required")]
        if len(cidrs) > 2:
            return [errors.field_too_many("spec.cidrs", len(cidrs), 2)]
        causes: list[Cause] = []
        families: set[int] = set()
        for i, cidr in enumerate(cidrs):
            found = _cidr(cidr, f"spec.cidrs[{i}]")
            causes += found
            if not found:
                families.add(ipaddress.ip_network(str(cidr), strict=False).version)
        if len(cidrs) == 2 and len(families) == 1 and not causes:
            causes.append(
                errors.field_invalid(
                    "spec.cidrs",
                    cidrs,
                    "may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64",
                )
            )
        if (
            old is not None
            and lst(d(old.get("spec")).get("cidrs"))
            and cidrs[: len(lst(d(old.get("spec")).get("cidrs")))] != lst(d(old.get("spec")).get("cidrs"))
        ):
            causes.append(errors.field_invalid("spec.cidrs", cidrs, "field is immutable"))
        return causes


def types() -> list[ResourceType]:
    return [
        rt(
            "networking.k8s.io",
            "v1",
            "ingressclasses",
            "IngressClass",
            False,
            strategy=IngressClassStrategy(),
        ),
        rt(
            "networking.k8s.io",
            "v1",
            "ingresses",
            "Ingress",
            True,
            short_names=("ing",),
            strategy=IngressStrategy(),
            status=True,
        ),
        rt(
            "networking.k8s.io",
            "v1",
            "ipaddresses",
            "IPAddress",
            False,
            short_names=("ip",),
            strategy=IPAddressStrategy(),
        ),
        rt(
            "networking.k8s.io",
            "v1",
            "networkpolicies",
            "NetworkPolicy",
            True,
            short_names=("netpol",),
            strategy=NetworkPolicyStrategy(),
        ),
        rt(
            "networking.k8s.io",
            "v1",
            "servicecidrs",
            "ServiceCIDR",
            False,
            strategy=ServiceCIDRStrategy(),
            status=True,
        ),
    ]
