"""Where the CLI remembers the platform it talks to (``$VPLANE_HOME/config.yaml``, default ``~/.vplane``),
and the names of the kubeconfig contexts it writes for the management API and tenant clusters."""

from __future__ import annotations

import base64
import json
import os
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import yaml

from vplane.support.files import write_private


def home() -> Path:
    return Path(os.environ.get("VPLANE_HOME", "~/.vplane")).expanduser()


@dataclass
class PlatformLogin:
    url: str
    access_key: str
    ca_pem: bytes

    def save(self) -> Path:
        """The access key is a credential: the file is created 0600 (its directory 0700)."""
        path = home() / "config.yaml"
        write_private(
            path,
            yaml.safe_dump(
                {
                    "platform": {
                        "url": self.url,
                        "accessKey": self.access_key,
                        "certificateAuthorityData": base64.b64encode(self.ca_pem).decode(),
                    }
                }
            ),
        )
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


def host_context() -> str:
    """The platform's own cluster, where tenant control planes run as pods (``vplane up``)."""
    return "vplane_host"


def tenant_context(name: str, project: str) -> str:
    return f"vplane_{name}_{project}"


def tenant_server(login: PlatformLogin, name: str, project: str) -> str:
    return f"{login.url.rstrip('/')}/kubernetes/project/{project}/virtualcluster/{name}"


MANAGEMENT = "/apis/management.loft.sh/v1"
DEFAULT_NAMESPACE_PREFIX = "p-"


class _Forbidden(Exception):
    pass


def request(
    login: PlatformLogin, method: str, path: str, body: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """A call to the management API with the saved key: the answer, or None for a 404. A 403 raises
    ``_Forbidden``; other refusals become one line with the platform's own message (a 422 names the field)."""
    ctx = ssl.create_default_context(cadata=login.ca_pem.decode())
    headers = {"Authorization": f"Bearer {login.access_key}", "Accept": "application/json"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(login.url.rstrip("/") + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            doc: dict[str, Any] = json.load(resp)
            return doc
    except urllib.error.HTTPError as exc:
        if exc.code == 404 and method == "GET":
            return None
        if exc.code == 403 and method == "GET":
            raise _Forbidden from None
        try:
            message = json.loads(exc.read()).get("message") or exc.reason
        except ValueError:
            message = exc.reason
        raise click.ClickException(f"the platform at {login.url} answered {exc.code}: {message}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise click.ClickException(f"cannot reach the platform at {login.url}: {reason}") from None


def _get(login: PlatformLogin, path: str) -> dict[str, Any] | None:
    return request(login, "GET", path)


def project_namespace(login: PlatformLogin, project: str) -> str:
    """The project's namespace from its status (``p-<project>`` by default, or when the key may not read
    projects); a project the platform does not have is refused in one line."""
    try:
        proj = _get(login, f"{MANAGEMENT}/projects/{project}")
    except _Forbidden:
        return DEFAULT_NAMESPACE_PREFIX + project
    if proj is None:
        raise click.ClickException(f'project "{project}" not found')
    return str((proj.get("status") or {}).get("namespace") or DEFAULT_NAMESPACE_PREFIX + project)


def check_tenant(login: PlatformLogin, name: str, project: str) -> None:
    """Refuse, in one line, a tenant cluster the platform does not have, before writing anything.

    The project's namespace comes from its status (``p-<project>`` by default). A key that may not read
    projects or tenant clusters (403) is not refused here: it may still be allowed to use the tenant,
    which then answers for itself."""
    try:
        proj = _get(login, f"{MANAGEMENT}/projects/{project}")
        if proj is None:
            raise click.ClickException(
                f'tenant cluster "{name}" not found in project "{project}": no such project'
            )
        namespace = (proj.get("status") or {}).get("namespace") or DEFAULT_NAMESPACE_PREFIX + project
        if _get(login, f"{MANAGEMENT}/namespaces/{namespace}/virtualclusterinstances/{name}") is None:
            raise click.ClickException(f'tenant cluster "{name}" not found in project "{project}"')
    except _Forbidden:
        return


from vplane.support.kubeconfig import (  # noqa: E402 - re-exported for the CLI's commands
    current_context,
    default_kubeconfig,
    kubeconfig_doc,
    merge_context,
    write_kubeconfig,
)

__all__ = [
    "PlatformLogin",
    "check_tenant",
    "current_context",
    "default_kubeconfig",
    "home",
    "kubeconfig_doc",
    "management_context",
    "merge_context",
    "project_namespace",
    "request",
    "tenant_context",
    "tenant_server",
    "write_kubeconfig",
]
