"""Who is asking and what they asked for, passed to handlers, admission and authorization."""

from __future__ import annotations

from dataclasses import dataclass, field

from vplane.kube.requestinfo import RequestInfo


@dataclass(frozen=True, slots=True)
class UserInfo:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"username": self.name}
        if self.uid:
            out["uid"] = self.uid
        if self.groups:
            out["groups"] = list(self.groups)
        if self.extra:
            out["extra"] = {k: list(v) for k, v in self.extra.items()}
        return out


ANONYMOUS = UserInfo("system:anonymous", groups=("system:unauthenticated",))
SYSTEM = UserInfo("system:apiserver", groups=("system:masters",))
"""The server's own identity for internal writes (garbage collection, namespace cleanup)."""


@dataclass(slots=True)
class RequestContext:
    user: UserInfo
    info: RequestInfo
    dry_run: bool = False
    field_manager: str = ""
    field_validation: str = "Strict"
    user_agent: str = ""
    warnings: list[str] = field(default_factory=list)
    duplicate_fields: list[str] = field(default_factory=list)
    """Keys the request body repeated (checked with unknown fields under ``fieldValidation``)."""
    audit_annotations: dict[str, str] = field(default_factory=dict)

    def warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)
