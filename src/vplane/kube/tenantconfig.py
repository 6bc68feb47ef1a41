"""The tenant cluster's configuration: a vcluster.yaml-style document, validated with pydantic.

The platform reads it from a VirtualClusterInstance's ``spec.template.helmRelease.values``. Sections
vplane acts on are modelled strictly (an unknown or misspelt key is an error that names its path);
other top-level sections of a vcluster.yaml are accepted and ignored, so upstream files load unchanged.
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from vplane.kube import errors, proxyconfig, yamlsafe
from vplane.kube.errors import Cause
from vplane.kube.proxyconfig import Proxy


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class HighAvailability(_Strict):
    replicas: int = Field(default=1, ge=1, le=7, description="Control-plane replicas sharing one store.")


CONTROL_PLANE_ENV = ("TS_DEBUG_DIAL_DIRECT", "LOFT_LOG_TSNET_AGENT", "DEBUG")
"""The names ``controlPlane.statefulSet.env`` may set: the switches the control plane reads (direct dialing,
verbose mesh logs, and upstream's ``DEBUG=true`` for the control plane's verbose log, which the runbook's
``Connected to target`` needs). The control plane is vplane's own process on the platform's machine, not an
image the user chose, so other names do nothing but harm there (``LD_PRELOAD``, ``PYTHON*``, ``BROWSER`` with
``PYTHONWARNINGS``, the runtime's own ``VPLANE_*`` all choose what a platform-started process runs)."""


class EnvVar(_Strict):
    """One entry of ``controlPlane.statefulSet.env``: a literal value (``valueFrom`` has no source here)."""

    name: str = Field(pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$", max_length=253)
    value: str = ""

    @model_validator(mode="before")
    @classmethod
    def _literal_only(cls, data: Any) -> Any:
        if isinstance(data, dict) and "valueFrom" in data:
            raise ValueError("valueFrom is not supported for the control plane's environment; give value")
        return data

    @model_validator(mode="after")
    def _allowed(self) -> EnvVar:
        if self.name not in CONTROL_PLANE_ENV:
            raise ValueError(
                f"{self.name} is not an environment variable the control plane reads; allowed: "
                + ", ".join(CONTROL_PLANE_ENV)
            )
        return self


class StatefulSet(_Strict):
    high_availability: HighAvailability = Field(default_factory=HighAvailability, alias="highAvailability")
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=100,
        description="Environment of the control-plane containers (upstream's key), e.g. the mesh switches "
        "TS_DEBUG_DIAL_DIRECT and LOFT_LOG_TSNET_AGENT.",
    )


class ControlPlane(_Strict):
    stateful_set: StatefulSet = Field(default_factory=StatefulSet, alias="statefulSet")


class Experimental(BaseModel):
    """``experimental``: the proxy section is modelled; upstream's other experimental keys pass through."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    proxy: Proxy = Field(default_factory=Proxy)


class TenantConfig(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    control_plane: ControlPlane = Field(default_factory=ControlPlane, alias="controlPlane")
    experimental: Experimental = Field(default_factory=Experimental)
    sync: dict[str, Any] = Field(default_factory=dict)

    @property
    def replicas(self) -> int:
        return self.control_plane.stateful_set.high_availability.replicas

    @property
    def env(self) -> list[tuple[str, str]]:
        """``controlPlane.statefulSet.env`` as pairs, in order (a later duplicate wins, as in a pod)."""
        return [(e.name, e.value) for e in self.control_plane.stateful_set.env]

    def proxy_targets(self, client_project: str) -> list[proxyconfig.ProxyTarget]:
        """The enabled proxied group/versions (empty: no resource proxy runs)."""
        return proxyconfig.proxy_targets(self.experimental.proxy, client_project)


def parse(values: str | None, field: str = "spec.template.helmRelease.values") -> TenantConfig:
    """Parse and validate; errors become a list of causes under ``field`` (raised as a 422 by callers)."""
    causes = validate(values, field)
    if causes:
        raise ConfigInvalid(causes)
    doc = yamlsafe.load(values or "") or {}
    return TenantConfig.model_validate(doc)


class ConfigInvalid(Exception):
    def __init__(self, causes: list[Cause]) -> None:
        super().__init__("; ".join(c.get("message", "") for c in causes))
        self.causes = causes


def validate(values: str | None, field: str = "spec.template.helmRelease.values") -> list[Cause]:
    try:
        doc = yamlsafe.load(values or "") or {}
    except yaml.YAMLError as exc:
        return [errors.field_invalid(field, "<yaml>", f"not valid YAML: {exc}")]
    if not isinstance(doc, dict):
        return [errors.field_invalid(field, "<yaml>", "must be a YAML mapping")]
    try:
        config = TenantConfig.model_validate(doc)
    except ValidationError as exc:
        causes: list[Cause] = []
        for err in exc.errors():
            path = ".".join(str(p) for p in err["loc"])
            causes.append(errors.field_invalid(f"{field}[{path}]", _short(err.get("input")), err["msg"]))
        return causes
    messages = proxyconfig.validate(config.experimental.proxy)
    if not messages:
        messages = proxyconfig.validate_sync_conflicts(config.sync, config.experimental.proxy)
    # The messages are upstream's and already name their path inside the values (spec §1.2).
    return [{"reason": "FieldValueInvalid", "message": m, "field": field} for m in messages]


def _short(value: Any) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return type(value).__name__
