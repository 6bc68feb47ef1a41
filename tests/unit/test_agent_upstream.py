"""Where the agent finds its cluster's credentials in a pod (``vplane.agent.upstream.pod_credentials``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from vplane.agent import upstream

ENV = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "6443"}


def test_the_service_account_directory_wins(tmp_path: Path) -> None:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("sa-token\n")
    api = upstream.pod_credentials(sa, environ={**ENV, "KUBECONFIG": str(tmp_path / "nope")})
    assert api.base_url == "https://127.0.0.1:6443"
    assert api.authorization() == "Bearer sa-token"


def test_without_it_the_runtimes_kubeconfig_is_used(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("pod-token\n")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {"server": "https://127.0.0.1:7443", "insecure-skip-verify": True},
                    }
                ],
                "users": [{"name": "u", "user": {"tokenFile": str(token)}}],
                "contexts": [{"name": "in-cluster", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "in-cluster",
            }
        )
    )
    api = upstream.pod_credentials(tmp_path / "absent", environ={**ENV, "KUBECONFIG": str(kubeconfig)})
    assert api.base_url == "https://127.0.0.1:7443"
    assert api.authorization() == "Bearer pod-token"
    assert "the pod's service account" in api.description


def test_neither_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(upstream.UpstreamConfigError, match="no service account token"):
        upstream.pod_credentials(tmp_path / "absent", environ=ENV)
