"""``experimental.proxy.customResources`` of a tenant cluster's vcluster.yaml: model and validation.

The messages are upstream's, verbatim (spec §1.2; loft-sh/vcluster ``pkg/config/validation.go``), because
the runbook tells operators to search for them. Upstream stops at the first error in Go's random map
order; we report every error, in key order, so one round trip shows them all.

Validation works on the raw values: two entries of one group/version must agree on
``targetVirtualCluster`` and ``accessResources`` *as written* (an omitted ``accessResources`` and an
explicit ``owned`` conflict, spec §1.2 rule 7), so defaulting happens only afterwards, in
:func:`proxy_targets`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

BASE = "experimental.proxy.customResources"
WILDCARD = "*"
ACCESS_OWNED = "owned"
ACCESS_ALL = "all"
FIRST_PORT = 9100
"""Proxy ``n`` (the n-th group/version in alphabetical order) listens on ``FIRST_PORT + n`` (spec §2.1)."""

_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"

AccessMode = Literal["owned", "all"]


class VirtualClusterRef(BaseModel):
    """``targetVirtualCluster``: the schema's own rules (``additionalProperties: false``, DNS labels)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="", pattern=f"({_DNS_LABEL})|^$")
    project: str = Field(default="", pattern=f"({_DNS_LABEL})|^$")


class CustomResourceProxy(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    enabled: bool = False
    target_virtual_cluster: VirtualClusterRef = Field(
        default_factory=VirtualClusterRef, alias="targetVirtualCluster"
    )
    access_resources: str = Field(default="", alias="accessResources")


class Proxy(BaseModel):
    """``experimental.proxy`` (``$defs.Proxy``, additionalProperties false)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    custom_resources: dict[str, CustomResourceProxy] = Field(default_factory=dict, alias="customResources")


def split_key(key: str) -> tuple[str, str, str] | None:
    """``widgets.example.com/v1`` -> (``widgets``, ``example.com``, ``v1``); None when malformed.

    Upstream splits on ``/`` (exactly two parts) and parses ``resource.group`` at the first dot
    (``schema.ParseGroupResource``); both resource and group must be non-empty.
    """
    parts = key.split("/")
    if len(parts) != 2:
        return None
    resource, dot, group = parts[0].partition(".")
    if not dot or not resource or not group:
        return None
    return resource, group, parts[1]


def validate(proxy: Proxy) -> list[str]:
    """Every error of ``experimental.proxy.customResources``, upstream's wording, in key order."""
    errors: list[str] = []
    entries = proxy.custom_resources
    for key in sorted(entries):
        entry = entries[key]
        base = f"{BASE}['{key}']"
        if split_key(key) is None:
            errors.append(
                f"{base}: invalid resource path {_quote(key)}, expected format 'resource.group/version' or "
                "'*.group/version' (e.g., 'resource.my-org.com/v1' or '*.my-org.com/v1')"
            )
            continue
        if entry.target_virtual_cluster.name == "":
            errors.append(f"{base}.targetVirtualCluster is required")
        if entry.access_resources not in ("", ACCESS_OWNED, ACCESS_ALL):
            errors.append(
                f"{base}.accessResources: invalid value {_quote(entry.access_resources)}, "
                "must be 'owned' or 'all'"
            )
    if errors:
        return errors
    by_gv: dict[str, list[str]] = {}
    for key in sorted(k for k, e in entries.items() if e.enabled):
        parsed = split_key(key)
        assert parsed is not None
        by_gv.setdefault(f"{parsed[1]}/{parsed[2]}", []).append(key)
    for gv, keys in by_gv.items():
        wildcards = [k for k in keys if k.startswith(WILDCARD + ".")]
        explicit = [k for k in keys if not k.startswith(WILDCARD + ".")]
        if wildcards and explicit:
            errors.append(
                f"{BASE}: wildcard entry {_quote(wildcards[0])} cannot be combined with explicit entry "
                f"{_quote(explicit[0])} for the same group/version"
            )
            continue
        first = keys[0]
        for other in keys[1:]:
            a, b = entries[first], entries[other]
            if a.target_virtual_cluster != b.target_virtual_cluster:
                errors.append(
                    f"{BASE}: entries {_quote(first)} and {_quote(other)} share group/version "
                    f"{_quote(gv)} but set different targetVirtualCluster"
                )
            elif a.access_resources != b.access_resources:
                errors.append(
                    f"{BASE}: entries {_quote(first)} and {_quote(other)} share group/version "
                    f"{_quote(gv)} but set different accessResources"
                )
    return errors


def validate_sync_conflicts(sync: Mapping[str, Any], proxy: Proxy) -> list[str]:
    """``ValidateCustomResourceSyncProxyConflicts`` (spec §1.2): a group is either synced or proxied."""
    to_host = _enabled_keys(sync, "toHost")
    from_host = _enabled_keys(sync, "fromHost")
    errors: list[str] = []
    for key in sorted(set(to_host) & set(from_host)):
        errors.append(
            f"custom resource {key} exists in sync.toHost.customResources and "
            "sync.fromHost.customResources. Syncing is only supported one way"
        )
    proxy_groups: dict[str, str] = {}
    for key in sorted(k for k, e in proxy.custom_resources.items() if e.enabled):
        proxy_groups.setdefault(_group_of(key), key)
    for direction, keys in (("toHost", to_host), ("fromHost", from_host)):
        groups: dict[str, str] = {}
        for key in sorted(keys):
            groups.setdefault(_group_of(key), key)
        for group in sorted(set(groups) & set(proxy_groups)):
            errors.append(
                f"custom resource group {_quote(group)} is used in both sync.{direction}.customResources "
                f"({groups[group]}) and proxy.customResources ({proxy_groups[group]}). Resources from the "
                "same group cannot be used in both sync and proxy"
            )
    return errors


@dataclass(frozen=True)
class ProxyTarget:
    """One proxied group/version: what every replica of the client runs (one proxy server each)."""

    group: str
    version: str
    target_name: str
    target_project: str
    """The target's platform project (defaulted to the client's own)."""
    access: AccessMode
    resources: tuple[str, ...] = field(default=())
    """Explicitly configured resources (plural names), used only by the fallback discovery document."""
    wildcard: bool = False
    index: int = 0
    """Position among the client's proxied group/versions in alphabetical order: port ``9100 + index``."""

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def port(self) -> int:
        return FIRST_PORT + self.index

    @property
    def target_label(self) -> str:
        """The ``target`` label of every metric series: ``<project>/<name>`` (the project name)."""
        return f"{self.target_project}/{self.target_name}"


def proxy_targets(proxy: Proxy, client_project: str) -> list[ProxyTarget]:
    """The enabled group/versions of a validated config, in port order (alphabetical by group/version,
    so every replica computes the same ports). Empty when every entry is disabled: no proxy starts."""
    grouped: dict[tuple[str, str], list[tuple[str, CustomResourceProxy]]] = {}
    for key, entry in proxy.custom_resources.items():
        if not entry.enabled:
            continue
        parsed = split_key(key)
        if parsed is None:
            continue
        grouped.setdefault((parsed[1], parsed[2]), []).append((parsed[0], entry))
    targets: list[ProxyTarget] = []
    for index, (gv, items) in enumerate(sorted(grouped.items(), key=lambda kv: f"{kv[0][0]}/{kv[0][1]}")):
        entry = items[0][1]
        ref = entry.target_virtual_cluster
        resources = tuple(sorted({r for r, _ in items if r != WILDCARD}))
        access: AccessMode = "all" if entry.access_resources == ACCESS_ALL else "owned"
        targets.append(
            ProxyTarget(
                group=gv[0],
                version=gv[1],
                target_name=ref.name,
                target_project=ref.project or client_project,
                access=access,
                resources=resources,
                wildcard=any(r == WILDCARD for r, _ in items),
                index=index,
            )
        )
    return targets


def _enabled_keys(sync: Mapping[str, Any], direction: str) -> list[str]:
    section = sync.get(direction) if isinstance(sync, Mapping) else None
    resources = section.get("customResources") if isinstance(section, Mapping) else None
    if not isinstance(resources, Mapping):
        return []
    return [k for k, v in resources.items() if isinstance(v, Mapping) and v.get("enabled")]


def _group_of(key: str) -> str:
    return key.split("/", 1)[0].partition(".")[2]


def _quote(value: str) -> str:
    """Go's ``%q`` for the strings that occur here (backslash and quote escaped)."""
    return '"' + re.sub(r'(["\\])', r"\\\1", value) + '"'
