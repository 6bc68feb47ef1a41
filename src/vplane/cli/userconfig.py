"""Where the CLI remembers the platform it talks to (``$VPLANE_HOME/config.yaml``, default ``~/.vplane``),
and the names of the kubeconfig contexts it writes for the management API and tenant clusters."""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from pathlib import Path

import yaml


def home() -> Path:
    return Path(os.environ.get("VPLANE_HOME", "~/.vplane")).expanduser()


@dataclass
class PlatformLogin:
    url: str
    access_key: str
    ca_pem: bytes

    def save(self) -> Path:
        path = home() / "config.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            yaml.safe_dump(
                {
                    "platform": {
                        "url": self.url,
                        "accessKey": self.access_key,
                        "certificateAuthorityData": base64.b64encode(self.ca_pem).decode(),
                    }
                }
            )
        )
        path.chmod(0o600)
        return path

    @classmethod
    def load(cls) -> PlatformLogin:
        path = home() / "config.yaml"
        if not path.exists():
            raise FileNotFoundError(
                f"no platform login in {path}: run `vplane up` or `vplane platform login <url> --access-key <key>`"
            )
        doc = yaml.safe_load(path.read_text()) or {}
        p = doc.get("platform") or {}
        return cls(p["url"], p["accessKey"], base64.b64decode(p["certificateAuthorityData"]))


def management_context() -> str:
    return "vplane_management"


def tenant_context(name: str, project: str) -> str:
    return f"vplane_{name}_{project}"


def tenant_server(login: PlatformLogin, name: str, project: str) -> str:
    return f"{login.url.rstrip('/')}/kubernetes/project/{project}/virtualcluster/{name}"


from vplane.support.kubeconfig import (  # noqa: E402 - re-exported for the CLI's commands
    default_kubeconfig,
    kubeconfig_doc,
    merge_context,
    write_kubeconfig,
)

__all__ = [
    "PlatformLogin",
    "default_kubeconfig",
    "home",
    "kubeconfig_doc",
    "management_context",
    "merge_context",
    "tenant_context",
    "tenant_server",
    "write_kubeconfig",
]
