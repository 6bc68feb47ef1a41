"""Kubeconfig files: one context per (name, server, CA, token), written atomically and privately."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import yaml

from vplane.support.files import write_private


def kubeconfig_doc(entries: list[tuple[str, str, bytes, str]], current: str) -> dict[str, Any]:
    """A kubeconfig with one context per (name, server, CA, token)."""
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [],
        "users": [],
        "contexts": [],
        "current-context": current,
        "preferences": {},
    }
    for name, server, ca, token in entries:
        doc["clusters"].append(
            {
                "name": name,
                "cluster": {"server": server, "certificate-authority-data": base64.b64encode(ca).decode()},
            }
        )
        doc["users"].append({"name": name, "user": {"token": token}})
        doc["contexts"].append({"name": name, "context": {"cluster": name, "user": name}})
    return doc


def write_kubeconfig(path: Path, doc: dict[str, Any]) -> None:
    """It holds bearer tokens: mode 0600 from creation, replaced atomically."""
    write_private(path, yaml.safe_dump(doc, sort_keys=False))


def current_context(path: Path) -> str | None:
    """The current context of a kubeconfig file, if it exists and names one."""
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    name = doc.get("current-context") if isinstance(doc, dict) else None
    return name if isinstance(name, str) and name else None


def default_kubeconfig() -> Path:
    first = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    return Path(first).expanduser() if first else Path("~/.kube/config").expanduser()


def merge_context(path: Path, name: str, server: str, ca: bytes, token: str, switch: bool = True) -> None:
    """Add or replace one context (and its cluster and user) in an existing kubeconfig file."""
    doc: dict[str, Any] = yaml.safe_load(path.read_text()) if path.exists() else None or {}
    if not doc:
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [],
            "users": [],
            "contexts": [],
            "preferences": {},
        }
    fresh = kubeconfig_doc([(name, server, ca, token)], name)
    for section in ("clusters", "users", "contexts"):
        items = [i for i in doc.get(section) or [] if i.get("name") != name]
        items.extend(fresh[section])
        doc[section] = items
    if switch or not doc.get("current-context"):
        doc["current-context"] = name
    write_kubeconfig(path, doc)
