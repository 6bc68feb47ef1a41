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


class Management:
    """The management API with an access key (urllib: the CLI's calls are few and blocking)."""

    def __init__(self, url: str, access_key: str, ca_pem: bytes) -> None:
        self.url = url.rstrip("/")
        self.access_key = access_key
        self.ctx = ssl.create_default_context(cadata=ca_pem.decode())

    def request(
        self, method: str, path: str, body: Any = None, *, token: str | None = None
    ) -> tuple[int, bytes]:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {token or self.access_key}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=30) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise click.ClickException(f"cannot reach the platform at {self.url}: {reason}") from None

    def json(self, method: str, path: str, body: Any = None, *, ok: tuple[int, ...] = (200, 201)) -> Any:
        code, raw = self.request(method, path, body)
        if code not in ok:
            raise click.ClickException(f"the platform answered {code}: {message_of(raw)}")
        return json.loads(raw) if raw else None


def message_of(raw: bytes) -> str:
    """The message of a refusal's Status (its body as text when it is none)."""
    try:
        return str(json.loads(raw).get("message") or raw.decode(errors="replace"))
    except ValueError:
        return raw.decode(errors="replace").strip()


def request(
    login: PlatformLogin, method: str, path: str, body: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """A call to the management API with the saved key: the answer, or None for a GET's 404. A GET's 403
    raises ``_Forbidden``; other refusals become one line with the platform's own message (a 422 names the
    field)."""
    code, raw = Management(login.url, login.access_key, login.ca_pem).request(method, path, body)
    if method == "GET" and code == 404:
        return None
    if method == "GET" and code == 403:
        raise _Forbidden
    if code >= 300:
        raise click.ClickException(f"the platform at {login.url} answered {code}: {message_of(raw)}")
    doc: dict[str, Any] = json.loads(raw)
    return doc


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
