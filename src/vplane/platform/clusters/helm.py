"""The real ``helm`` binary, run as a subprocess against one cluster's kubeconfig.

Release records are Helm's own (Secrets ``sh.helm.release.v1.loft.vN`` in the agent namespace), so
``helm history -n vcluster-platform loft`` reads what the platform did (its own revisions say so in their
description). Every run gets private Helm homes (no user's repositories or plugins) and a bounded time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml

import vplane
from vplane.platform.clusters.bridge import UNINSTALLED, Revision
from vplane.platform.clusters.releasecache import helm_says_missing
from vplane.platform.clusters.values import RELEASE_NAME, Release
from vplane.support.files import write_private

CHART_ENV = "VPLANE_AGENT_CHART"
HELM_ENV = "VPLANE_HELM"


def _source_root() -> Path:
    return Path(vplane.__file__).resolve().parent


def find_chart(configured: Path | None = None) -> Path:
    """The agent chart: the setting, ``$VPLANE_AGENT_CHART``, ``charts/vplane-agent`` of the source tree,
    or ``vplane/charts/vplane-agent`` inside an installed package."""
    package = _source_root()
    candidates = [
        configured,
        Path(os.environ[CHART_ENV]) if os.environ.get(CHART_ENV) else None,
        package.parent.parent / "charts" / "vplane-agent",
        package / "charts" / "vplane-agent",
    ]
    for candidate in candidates:
        if candidate is not None and (candidate / "Chart.yaml").is_file():
            return candidate
    raise FileNotFoundError("the vplane-agent chart was not found (set $VPLANE_AGENT_CHART)")


def find_helm(configured: str | None = None) -> str:
    """The helm binary: the setting, ``$VPLANE_HELM``, ``helm`` on PATH, or the repository's ``.tools/bin``."""
    for name in (configured, os.environ.get(HELM_ENV), "helm"):
        if name:
            found = shutil.which(name)
            if found:
                return found
    tools = _source_root().parent.parent / ".tools" / "bin" / "helm"
    if tools.exists():
        return str(tools)
    raise FileNotFoundError("helm was not found on PATH (set $VPLANE_HELM)")


class HelmError(Exception):
    """helm exited non-zero; the message is its last error line."""


def _error_text(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("Error:")]
    return (errors[-1] if errors else lines[-1] if lines else "helm failed").removeprefix("Error: ")


@dataclass
class Helm:
    binary: str
    kubeconfig: Path
    home: Path
    """Where helm's cache, config and data live (private to the caller)."""
    timeout_seconds: float = 120.0
    """helm's own ``--timeout`` for the commands that take one."""
    context: str | None = None
    """A context of the kubeconfig other than its current one."""
    exit_margin_seconds: float = 60.0
    """The process is killed this long after ``timeout_seconds``, so helm, not a kill, ends an operation
    that ran out of time: killed mid-upgrade, it would leave the release ``pending-upgrade`` instead of
    ``failed`` (which can be rolled back at once). The platform's ``helm_exit_margin_seconds``."""

    async def run(self, *args: str) -> str:
        if self.context:
            args = ("--kube-context", self.context, *args)
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.home),
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
            "KUBECONFIG": str(self.kubeconfig),
        }
        proc = await asyncio.create_subprocess_exec(
            self.binary,
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        try:
            async with asyncio.timeout(self.timeout_seconds + self.exit_margin_seconds):
                out, err = await proc.communicate()
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(Exception):
                await proc.wait()
            raise
        if proc.returncode != 0:
            raise HelmError(_error_text(err.decode(errors="replace")))
        return out.decode(errors="replace")

    async def release(self, namespace: str, name: str = RELEASE_NAME) -> Release | None:
        listed = orjson.loads(
            await self.run(
                "list", "--namespace", namespace, "--all", "--filter", f"^{name}$", "--output", "json"
            )
        )
        entry = next((r for r in listed or [] if r.get("name") == name), None)
        if entry is None or entry.get("status") == UNINSTALLED:
            return None  # an uninstalled release kept as history (`--keep-history`) is no release
        try:
            values = orjson.loads(
                await self.run("get", "values", name, "--namespace", namespace, "--output", "json")
            )
        except HelmError as exc:
            if helm_says_missing(str(exc)):
                return None  # uninstalled between the two calls (a `helm uninstall` finishing)
            raise
        return Release(
            revision=int(entry.get("revision") or 0),
            status=str(entry.get("status") or ""),
            chart=str(entry.get("chart") or ""),
            values=values if isinstance(values, dict) else {},
        )

    async def history(self, namespace: str, name: str = RELEASE_NAME) -> list[Revision]:
        listed = orjson.loads(await self.run("history", name, "--namespace", namespace, "--output", "json"))
        return [
            Revision(
                revision=int(r.get("revision") or 0),
                status=str(r.get("status") or ""),
                chart=str(r.get("chart") or ""),
                description=str(r.get("description") or ""),
            )
            for r in listed or []
            if isinstance(r, dict)
        ]

    async def rollback(self, namespace: str, revision: int, name: str = RELEASE_NAME) -> None:
        await self.run(
            "rollback",
            name,
            str(revision),
            "--namespace",
            namespace,
            "--timeout",
            f"{int(self.timeout_seconds)}s",
        )

    async def uninstall(self, namespace: str, name: str = RELEASE_NAME) -> None:
        await self.run(
            "uninstall",
            name,
            "--namespace",
            namespace,
            "--wait",
            "--ignore-not-found",  # whoever started the uninstall may finish it first: done either way
            "--timeout",
            f"{int(self.timeout_seconds)}s",
        )

    async def template(
        self, chart: Path, namespace: str, values: dict[str, Any], name: str = RELEASE_NAME
    ) -> str:
        """The manifests the chart renders with these values (no cluster contacted)."""
        with self._values_file(values) as path:
            return await self.run(
                "template", name, str(chart), "--namespace", namespace, "--values", str(path)
            )

    @contextlib.contextmanager
    def _values_file(self, values: dict[str, Any]) -> Iterator[Path]:
        self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.home) as tmp:
            path = Path(tmp) / "values.yaml"
            write_private(path, yaml.safe_dump(values, sort_keys=True))
            yield path

    async def upgrade_install(
        self,
        chart: Path,
        namespace: str,
        values: dict[str, Any],
        name: str = RELEASE_NAME,
        description: str = "",
        wait: bool = False,
    ) -> None:
        """One values file with everything (token included), so ``helm get values`` reads back exactly the
        platform's desired values and drift is a plain comparison. ``description`` replaces helm's
        "Install complete"/"Upgrade complete" of a successful write (``values.release_description``).
        ``wait``: until the release's workloads are ready (within the timeout), else the release fails."""
        with self._values_file(values) as path:
            await self.run(
                "upgrade",
                name,
                str(chart),
                "--install",
                "--namespace",
                namespace,
                "--values",
                str(path),
                "--timeout",
                f"{int(self.timeout_seconds)}s",
                *(("--wait",) if wait else ()),
                *(("--description", description) if description else ()),
            )
