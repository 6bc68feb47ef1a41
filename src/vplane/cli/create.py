"""``vplane create NAME --driver platform --project P -f vcluster.yaml [--upgrade]``: a tenant cluster
from a vcluster.yaml, or (``--upgrade``) an existing one given a new one.

This is how an operator "applies the updated vcluster.yaml" (the resource proxy runbook's decommission
steps, any config change): the values become the VirtualClusterInstance's
``spec.template.helmRelease.values``, which the platform validates at admission (an invalid entry is
refused with its field path, and nothing is applied) and rolls the tenant's pods for. Like upstream's
``vcluster create --upgrade``, the files given replace the previous values; several ``-f`` files are
merged in order as Helm merges values files, later keys winning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import yaml

from vplane.cli import userconfig
from vplane.kube.accesskeys import API_VERSION
from vplane.platform.clusters.values import deep_merge


def values_text(files: tuple[Path, ...]) -> str:
    """The values as stored: one file's text as written (its comments kept), several merged."""
    if len(files) == 1:
        text = files[0].read_text()
        _document(files[0], text)
        return text
    if not files:
        return ""
    merged: dict[str, Any] = {}
    for path in files:
        merged = deep_merge(merged, _document(path, path.read_text()))
    return yaml.safe_dump(merged, sort_keys=False)


def _document(path: Path, text: str) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise click.ClickException(f"{path}: not valid YAML: {exc}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise click.ClickException(f"{path}: a vcluster.yaml is a map of settings, not {type(doc).__name__}")
    return doc


def instance(name: str, namespace: str, project: str, values: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "VirtualClusterInstance",
        "metadata": {"name": name, "namespace": namespace, "labels": {"loft.sh/project": project}},
        "spec": {"displayName": name, "template": {"helmRelease": {"values": values}}, "networkPeer": True},
    }


@click.command()
@click.argument("name")
@click.option("--driver", type=click.Choice(["platform"]), default="platform", show_default=True)
@click.option("--project", default="default", show_default=True)
@click.option(
    "-f",
    "--values",
    "files",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="vcluster.yaml to use (repeatable; later files win).",
)
@click.option("--upgrade", is_flag=True, help="Give an existing tenant cluster these values.")
def create(name: str, driver: str, project: str, files: tuple[Path, ...], upgrade: bool) -> None:
    """Create tenant cluster NAME on the platform from a vcluster.yaml, or with --upgrade apply a new one."""
    try:
        login = userconfig.PlatformLogin.load()
    except FileNotFoundError as exc:
        raise click.ClickException(str(exc)) from None
    values = values_text(files)
    namespace = userconfig.project_namespace(login, project)
    path = f"{userconfig.MANAGEMENT}/namespaces/{namespace}/virtualclusterinstances"
    existing = userconfig.request(login, "GET", f"{path}/{name}")
    if existing is None:
        userconfig.request(login, "POST", path, instance(name, namespace, project, values))
        click.echo(f'tenant cluster "{name}" created in project "{project}"')
    elif not upgrade:
        raise click.ClickException(
            f'tenant cluster "{name}" already exists in project "{project}": use --upgrade to apply new values'
        )
    else:
        spec = existing.setdefault("spec", {})
        spec.setdefault("template", {}).setdefault("helmRelease", {})["values"] = values
        userconfig.request(login, "PUT", f"{path}/{name}", existing)
        click.echo(
            f'tenant cluster "{name}" in project "{project}" upgraded: its pods roll with the new values'
        )
    click.echo(f"connect with: vplane connect {name} --project {project}")
