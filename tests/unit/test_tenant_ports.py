"""The process placement's record of each replica's port (``ports.json``)."""

from __future__ import annotations

import json
from pathlib import Path

from vplane.platform.placement import Tenant, TenantSpec
from vplane.platform.settings import PlatformSettings
from vplane.platform.tenants import TenantSupervisor


def supervisor_and_tenant(tmp_path: Path) -> tuple[TenantSupervisor, Tenant]:
    supervisor = TenantSupervisor(
        PlatformSettings(data_dir=tmp_path), "https://127.0.0.1:1", tmp_path / "ca.crt"
    )
    directory = tmp_path / "tenants" / "p-a" / "t"
    directory.mkdir(parents=True)
    return supervisor, Tenant(TenantSpec("a", "p-a", "t", 2, "key"), directory)


def test_ports_are_kept_and_grow_with_the_replicas(tmp_path: Path) -> None:
    supervisor, tenant = supervisor_and_tenant(tmp_path)
    first = supervisor._ports(tenant, 1)
    assert len(first) == 1
    assert supervisor._ports(tenant, 2)[:1] == first
    assert json.loads((tenant.directory / "ports.json").read_text()) == supervisor._ports(tenant, 2)


def test_an_empty_or_broken_record_gives_new_ports_instead_of_failing(tmp_path: Path) -> None:
    """A platform killed while writing the record once left it empty; every later pass then failed."""
    supervisor, tenant = supervisor_and_tenant(tmp_path)
    for broken in ("", "[1, ", '{"a": 1}', '["x"]'):
        (tenant.directory / "ports.json").write_text(broken)
        ports = supervisor._ports(tenant, 2)
        assert len(ports) == 2 and all(isinstance(p, int) and p > 0 for p in ports)
        assert json.loads((tenant.directory / "ports.json").read_text()) == ports
