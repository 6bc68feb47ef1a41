"""How the agent reaches its own cluster's API server: the one seam between the tunnel and the cluster.

:class:`ClusterAPI` is an address, a TLS context and a way to get the ``Authorization`` header. Two
sources: the pod's service account (``in_cluster``: ``$KUBERNETES_SERVICE_HOST``/``PORT``, the token
and CA under ``/var/run/secrets/kubernetes.io/serviceaccount``, the token re-read periodically as kubelet
rotates it; under vplane's node runtime the kubeconfig it points ``KUBECONFIG`` at, see ``pod_credentials``)
or a kubeconfig (``from_kubeconfig``). Either way the platform acts in the cluster with
exactly the agent's permissions.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vplane.kube import yamlsafe


class UpstreamConfigError(Exception):
    """The cluster's API cannot be configured (missing environment, unreadable kubeconfig)."""


@dataclass
class ClusterAPI:
    base_url: str
    ssl_context: ssl.SSLContext
    token_source: Callable[[], str] | None = None
    """Returns the current bearer token (None: client certificates or no credentials)."""
    description: str = ""

    def authorization(self) -> str | None:
        if self.token_source is None:
            return None
        token = self.token_source()
        return f"Bearer {token}" if token else None


class _TokenFile:
    """A token file re-read at most every ``reload_seconds``; the last good value survives a bad read."""

    def __init__(
        self, path: Path, reload_seconds: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.path = path
        self.reload_seconds = reload_seconds
        self.clock = clock
        self.value = ""
        self.read_at: float | None = None

    def __call__(self) -> str:
        now = self.clock()
        if self.read_at is None or now - self.read_at >= self.reload_seconds:
            try:
                self.value = self.path.read_text().strip()
            except OSError:
                pass
            self.read_at = now
        return self.value


def in_cluster(
    service_account_dir: Path, reload_seconds: float = 60.0, environ: Mapping[str, str] | None = None
) -> ClusterAPI:
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise UpstreamConfigError(
            "not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set "
            "(give --kubeconfig to use a kubeconfig)"
        )
    token = service_account_dir / "token"
    ca = service_account_dir / "ca.crt"
    if not token.exists():
        raise UpstreamConfigError(f"no service account token at {token}")
    ctx = ssl.create_default_context(cafile=str(ca)) if ca.exists() else ssl.create_default_context()
    host = f"[{host}]" if ":" in host else host
    return ClusterAPI(
        f"https://{host}:{port}",
        ctx,
        _TokenFile(token, reload_seconds),
        description=f"in-cluster service account ({service_account_dir})",
    )


def pod_credentials(
    service_account_dir: Path, reload_seconds: float = 60.0, environ: Mapping[str, str] | None = None
) -> ClusterAPI:
    """A pod's credentials: the service-account directory when it holds a token, else ``$KUBECONFIG``.

    vplane's node runtime cannot create ``/var/run/secrets/kubernetes.io/serviceaccount`` (no mount
    namespace, no root); it writes the same token and CA elsewhere and points ``KUBECONFIG`` at a
    kubeconfig that reads them (docs/runtime.md), so the agent chart's pod works there unchanged."""
    env = os.environ if environ is None else environ
    kubeconfig = env.get("KUBECONFIG", "")
    if not (service_account_dir / "token").exists() and kubeconfig:
        path = Path(kubeconfig.split(os.pathsep)[0])
        api = from_kubeconfig(path, None, reload_seconds)
        api.description = f"the pod's service account (kubeconfig {path})"
        return api
    return in_cluster(service_account_dir, reload_seconds, env)


def _data(entry: Mapping[str, Any], data_key: str, file_key: str, base: Path) -> bytes | None:
    if entry.get(data_key):
        return base64.b64decode(str(entry[data_key]))
    if entry.get(file_key):
        return (base / str(entry[file_key])).read_bytes()
    return None


def from_kubeconfig(path: Path, context: str | None = None, reload_seconds: float = 60.0) -> ClusterAPI:
    """The operator's kubeconfig (trusted: file references are allowed, exec plugins are not supported)."""
    try:
        doc = yamlsafe.load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise UpstreamConfigError(f"cannot read kubeconfig {path}: {exc}") from None
    if not isinstance(doc, dict):
        raise UpstreamConfigError(f"kubeconfig {path} is not a YAML mapping")
    name = context or doc.get("current-context")
    contexts = {c.get("name"): c.get("context") or {} for c in doc.get("contexts") or []}
    if name not in contexts:
        raise UpstreamConfigError(f"kubeconfig {path} has no context {name!r}")
    ctx_entry = contexts[name]
    cluster = next(
        (
            c.get("cluster") or {}
            for c in doc.get("clusters") or []
            if c.get("name") == ctx_entry.get("cluster")
        ),
        {},
    )
    user = next(
        (u.get("user") or {} for u in doc.get("users") or [] if u.get("name") == ctx_entry.get("user")), {}
    )
    server = str(cluster.get("server") or "")
    if not server:
        raise UpstreamConfigError(f"context {name!r} of {path} names no server")
    base = path.parent
    ca = _data(cluster, "certificate-authority-data", "certificate-authority", base)
    ssl_ctx = ssl.create_default_context(cadata=ca.decode()) if ca else ssl.create_default_context()
    if cluster.get("insecure-skip-verify"):
        ssl_ctx.check_hostname = False
        ssl_ctx.verify_mode = ssl.CERT_NONE
    cert = _data(user, "client-certificate-data", "client-certificate", base)
    key = _data(user, "client-key-data", "client-key", base)
    if cert and key:
        with tempfile.TemporaryDirectory(prefix="vplane-agent-") as tmp:
            cert_path, key_path = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
            cert_path.write_bytes(cert)
            key_path.touch(mode=0o600)
            key_path.write_bytes(key)
            ssl_ctx.load_cert_chain(cert_path, key_path)
    token_source: Callable[[], str] | None = None
    if user.get("token"):
        static = str(user["token"])
        token_source = lambda: static  # noqa: E731
    elif user.get("tokenFile"):
        token_source = _TokenFile(base / str(user["tokenFile"]), reload_seconds)
    return ClusterAPI(server.rstrip("/"), ssl_ctx, token_source, description=f"kubeconfig {path} ({name})")
