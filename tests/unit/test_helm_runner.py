"""The helm runner's reads of a release that is going or gone: a `helm uninstall` finishing between two helm
calls of a platform pass, or one that kept the release's history. Neither is a release; other errors are
still errors."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from vplane.platform.clusters.helm import Helm, HelmError


def fake_helm(tmp_path: Path, status: str, get_values: str) -> Helm:
    """A helm that lists the release with ``status``, then answers ``get values`` with ``get_values`` (an
    ``Error: ...`` line fails it) and ``history`` with helm's missing-release error."""
    listed = f'[{{"name":"loft","revision":"3","status":"{status}","chart":"vcluster-platform-1.0.0"}}]'
    script = tmp_path / "helm"
    script.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        f"  list) echo '{listed}' ;;\n"
        + (
            f"  get) echo '{get_values}' >&2; exit 1 ;;\n"
            if get_values.startswith("Error:")
            else f"  get) echo '{get_values}' ;;\n"
        )
        + "  history) echo 'Error: release: not found' >&2; exit 1 ;;\n"
        "esac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return Helm(str(script), tmp_path / "kubeconfig", tmp_path / "home", timeout_seconds=10)


async def test_a_release_gone_between_list_and_values_reads_as_none(tmp_path: Path) -> None:
    helm = fake_helm(tmp_path, "uninstalling", "Error: release: not found")
    assert await helm.release("vcluster-platform") is None


async def test_a_release_kept_as_history_reads_as_none(tmp_path: Path) -> None:
    helm = fake_helm(tmp_path, "uninstalled", "{}")
    assert await helm.release("vcluster-platform") is None
    assert await fake_helm(tmp_path, "deployed", "{}").release("vcluster-platform") is not None


async def test_other_errors_still_raise(tmp_path: Path) -> None:
    helm = fake_helm(tmp_path, "deployed", "Error: Kubernetes cluster unreachable")
    with pytest.raises(HelmError, match="Kubernetes cluster unreachable"):
        await helm.release("vcluster-platform")
    # history reports a missing release as helm does (vplane doctor cluster prints it)
    with pytest.raises(HelmError, match="release: not found"):
        await helm.history("vcluster-platform")


async def test_helm_gets_its_own_timeout_and_a_margin_before_it_is_killed(tmp_path: Path) -> None:
    """``--timeout`` is helm's; the process is killed only ``exit_margin_seconds`` later, so a helm that
    ends its own waiting (and marks the release failed) is never cut short, and one that hangs still ends."""
    script = tmp_path / "helm"
    # Exits by itself just after its --timeout (as helm does when --wait runs out); hangs for "hang".
    script.write_text(
        '#!/bin/sh\ncase "$1" in\n  hang) exec sleep 30 ;;\n'
        "  *) sleep 0.3; echo 'Error: UPGRADE FAILED: context deadline exceeded' >&2; exit 1 ;;\nesac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    helm = Helm(str(script), tmp_path / "kubeconfig", tmp_path / "home", timeout_seconds=0.2)
    helm.exit_margin_seconds = 5.0
    with pytest.raises(HelmError, match="context deadline exceeded"):
        await helm.upgrade_install(tmp_path, "ns", {}, wait=True)  # past 0.2 s, within the margin
    helm.exit_margin_seconds = 0.3
    with pytest.raises(TimeoutError):
        await helm.run("hang")
