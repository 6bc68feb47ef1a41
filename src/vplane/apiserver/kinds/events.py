"""events.k8s.io/v1 Events: the same objects as core/v1 Events, stored once (as upstream stores both
under one etcd prefix) and converted field by field between the two shapes."""

from __future__ import annotations

import copy

from vplane.apiserver.kinds.common import rt
from vplane.apiserver.kinds.core import core_event_fields
from vplane.apiserver.registry import ResourceType, Strategy
from vplane.kube import errors, validation
from vplane.kube.errors import Cause
from vplane.kube.objects import Obj

CORE = "v1"
EVENTS = "events.k8s.io/v1"
NOTE_LIMIT = 1024
RENAMED = (
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("reportingController", "reportingComponent"),
)
"""events.k8s.io field -> core field; the others (reason, type, action, eventTime, series, related,
reportingInstance) are spelled the same in both."""
FIELD_LABELS = {
    **{
        f"regarding.{k}": f"involvedObject.{k}"
        for k in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
    },
    "reason": "reason",
    "reportingController": "reportingComponent",
    "type": "type",
}


class EventConverter:
    def to_storage(self, obj: Obj) -> Obj:
        if obj.get("apiVersion") != EVENTS:
            return obj
        out = copy.deepcopy(obj)
        out["apiVersion"] = CORE
        for new, old in RENAMED:
            if new in out:
                out[old] = out.pop(new)
        return out

    def from_storage(self, obj: Obj) -> Obj:
        if obj.get("apiVersion") != CORE:
            return obj
        out = copy.deepcopy(obj)
        out["apiVersion"] = EVENTS
        for new, old in RENAMED:
            if old in out:
                out[new] = out.pop(old)
        if out.get("deprecatedCount") == 0:
            del out["deprecatedCount"]
        return out


class EventsV1Strategy(Strategy):
    supported_field_labels = frozenset(FIELD_LABELS)

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        causes: list[Cause] = []
        if not obj.get("eventTime"):
            causes.append(errors.field_required("eventTime"))
        controller = obj.get("reportingController")
        if not controller:
            causes.append(errors.field_required("reportingController"))
        elif isinstance(controller, str):
            causes += [
                errors.field_invalid("reportingController", controller, m)
                for m in validation.qualified_name(controller)
            ]
        for field in ("reportingInstance", "action", "reason"):
            if not obj.get(field):
                causes.append(errors.field_required(field))
        event_type = obj.get("type")
        if event_type not in ("Normal", "Warning"):
            causes.append(errors.field_not_supported("type", event_type or "", ["Normal", "Warning"]))
        note = obj.get("note")
        if isinstance(note, str) and len(note.encode()) > NOTE_LIMIT:
            causes.append(errors.field_too_long("note", NOTE_LIMIT))
        if old is not None:
            for field in (
                "regarding",
                "reason",
                "action",
                "reportingController",
                "reportingInstance",
                "eventTime",
                "type",
                "note",
            ):
                if obj.get(field) != old.get(field):
                    causes.append(
                        errors.field_invalid(
                            field,
                            obj.get(field) if isinstance(obj.get(field), str) else "",
                            "field is immutable",
                        )
                    )
        return causes

    def field_labels(self, obj: Obj) -> dict[str, str]:
        core = core_event_fields(obj)
        return {label: core.get(source, "") for label, source in FIELD_LABELS.items()}


def types() -> list[ResourceType]:
    return [
        rt(
            "events.k8s.io",
            "v1",
            "events",
            "Event",
            True,
            short_names=("ev",),
            strategy=EventsV1Strategy(),
            storage_group="",
            converter=EventConverter(),
        )
    ]
