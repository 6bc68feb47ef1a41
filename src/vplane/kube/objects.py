"""Helpers for Kubernetes objects as plain JSON-shaped dicts."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]
"""A Kubernetes object (or any JSON object) decoded from the wire."""


def meta(obj: Obj) -> Obj:
    """The object's ``metadata`` dict, created if missing."""
    m = obj.get("metadata")
    if not isinstance(m, dict):
        m = {}
        obj["metadata"] = m
    return m


def labels_of(obj: Obj) -> dict[str, str]:
    m = obj.get("metadata")
    if isinstance(m, dict):
        labels = m.get("labels")
        if isinstance(labels, dict):
            return labels
    return {}


def split_api_version(api_version: str) -> tuple[str, str]:
    """``apps/v1`` -> ``("apps", "v1")``; ``v1`` -> ``("", "v1")``."""
    group, _, version = api_version.rpartition("/")
    return group, version


def join_api_version(group: str, version: str) -> str:
    return f"{group}/{version}" if group else version
