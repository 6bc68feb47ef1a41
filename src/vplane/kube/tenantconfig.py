"""The tenant cluster's configuration: a vcluster.yaml-style document, validated with pydantic.

The platform reads it from a VirtualClusterInstance's ``spec.template.helmRelease.values``. Sections
vplane acts on are modelled strictly (an unknown or misspelt key is an error that names its path);
other top-level sections of a vcluster.yaml are accepted and ignored, so upstream files load unchanged.
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from vplane.kube import errors
from vplane.kube.errors import Cause


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class HighAvailability(_Strict):
    replicas: int = Field(default=1, ge=1, le=7, description="Control-plane replicas sharing one store.")


class StatefulSet(_Strict):
    high_availability: HighAvailability = Field(default_factory=HighAvailability, alias="highAvailability")


class ControlPlane(_Strict):
    stateful_set: StatefulSet = Field(default_factory=StatefulSet, alias="statefulSet")


class TenantConfig(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    control_plane: ControlPlane = Field(default_factory=ControlPlane, alias="controlPlane")
    experimental: dict[str, Any] = Field(default_factory=dict)

    @property
    def replicas(self) -> int:
        return self.control_plane.stateful_set.high_availability.replicas


def parse(values: str | None, field: str = "spec.template.helmRelease.values") -> TenantConfig:
    """Parse and validate; errors become a list of causes under ``field`` (raised as a 422 by callers)."""
    causes = validate(values, field)
    if causes:
        raise ConfigInvalid(causes)
    doc = yaml.safe_load(values or "") or {}
    return TenantConfig.model_validate(doc)


class ConfigInvalid(Exception):
    def __init__(self, causes: list[Cause]) -> None:
        super().__init__("; ".join(c.get("message", "") for c in causes))
        self.causes = causes


def validate(values: str | None, field: str = "spec.template.helmRelease.values") -> list[Cause]:
    try:
        doc = yaml.safe_load(values or "") or {}
    except yaml.YAMLError as exc:
        return [errors.field_invalid(field, "<yaml>", f"not valid YAML: {exc}")]
    if not isinstance(doc, dict):
        return [errors.field_invalid(field, "<yaml>", "must be a YAML mapping")]
    try:
        TenantConfig.model_validate(doc)
    except ValidationError as exc:
        causes: list[Cause] = []
        for err in exc.errors():
            path = ".".join(str(p) for p in err["loc"])
            causes.append(errors.field_invalid(f"{field}[{path}]", _short(err.get("input")), err["msg"]))
        return causes
    return []


def _short(value: Any) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return type(value).__name__
