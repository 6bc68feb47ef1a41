"""The helm runner's reads when the release goes away between two helm calls (a `helm uninstall` finishing
while a platform pass looks at it): no release, not an error that would be written on the Cluster."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from vplane.platform.clusters.helm import Helm, HelmError

LISTED = '[{"name":"loft","revision":"3","status":"uninstalling","chart":"vcluster-platform-1.0.0"}]'


def fake_helm(tmp_path: Path, get_values_error: str, history_error: str) -> Helm:
    """A helm that lists the release, then fails ``get values`` and ``history`` with the given errors."""
    script = tmp_path / "helm"
    script.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        f"  list) echo '{LISTED}' ;;\n"
        f"  get) echo 'Error: {get_values_error}' >&2; exit 1 ;;\n"
        f"  history) echo 'Error: {history_error}' >&2; exit 1 ;;\n"
        "esac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return Helm(str(script), tmp_path / "kubeconfig", tmp_path / "home", timeout_seconds=10)


async def test_a_release_gone_between_list_and_values_reads_as_none(tmp_path: Path) -> None:
    helm = fake_helm(tmp_path, "release: not found", "release: not found")
    assert await helm.release("vcluster-platform") is None
    assert await helm.history("vcluster-platform") == []


async def test_other_errors_still_raise(tmp_path: Path) -> None:
    helm = fake_helm(tmp_path, "Kubernetes cluster unreachable", 'namespaces "x" not found')
    with pytest.raises(HelmError, match="Kubernetes cluster unreachable"):
        await helm.release("vcluster-platform")
    with pytest.raises(HelmError, match='namespaces "x" not found'):
        await helm.history("vcluster-platform")
