"""Ownership in ``accessResources: owned`` mode (spec §4): which client tenant cluster created an object.

Two plain labels on the target's objects name the client: ``vcluster.com/owner-vcluster`` (the client's
name) and ``vcluster.com/owner-project`` (its platform project *name*, not the project namespace). The
proxy writes them into every write body and filters reads by them. Pure functions over bytes.

Decisions recorded (docs/resource-proxy.md):
- Labels are injected in ``owned`` mode only; ``all`` mode forwards bodies untouched, so it is a plain
  pass-through governed by the target's RBAC.
- POST and PUT bodies, merge and strategic-merge patches get ``metadata.labels`` merged in; an apply patch
  (YAML or JSON) is decoded and re-encoded as JSON (JSON is YAML) with the labels set, so the applier's
  field manager owns them; a JSON patch gets two ``add`` operations appended (the ownership GET has shown
  the object already carries ``metadata.labels``).
- Bodies the proxy cannot parse (protobuf, CBOR, malformed JSON or YAML, a non-object) are forwarded
  unchanged: the caller gets the target's own answer, and the write is logged.
- A caller's label selector is ANDed with the ownership requirements, so a caller asking for another
  owner gets an empty list, never someone else's objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import yaml

from vplane.kube import yamlsafe

OWNER_VCLUSTER = "vcluster.com/owner-vcluster"
OWNER_PROJECT = "vcluster.com/owner-project"

JSON = "application/json"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH_YAML = "application/apply-patch+yaml"
APPLY_PATCH_JSON = "application/apply-patch+json"
YAML = "application/yaml"


@dataclass(frozen=True, slots=True)
class Owner:
    vcluster: str
    project: str

    @property
    def labels(self) -> dict[str, str]:
        return {OWNER_VCLUSTER: self.vcluster, OWNER_PROJECT: self.project}

    @property
    def selector(self) -> str:
        return f"{OWNER_VCLUSTER}={self.vcluster},{OWNER_PROJECT}={self.project}"

    def owns(self, obj: Any) -> bool:
        """Both labels present with this client's values."""
        if not isinstance(obj, Mapping):
            return False
        metadata = obj.get("metadata")
        labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
        if not isinstance(labels, Mapping):
            return False
        return labels.get(OWNER_VCLUSTER) == self.vcluster and labels.get(OWNER_PROJECT) == self.project


class NotInjectable(ValueError):
    """The body could not be parsed for labelling; it is forwarded as it came."""


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def inject(
    body: bytes, content_type: str | None, owner: Owner, current: Mapping[str, str] | None = None
) -> tuple[bytes, str]:
    """The body with both ownership labels, and the content type to send it with. ``current``: the object's
    labels now (a mutation's ownership GET read them), so a merge patch that clears the labels (``null``)
    clears every other one and keeps the owner's.

    Raises :class:`NotInjectable` when the body cannot be labelled (the caller forwards it unchanged)."""
    kind = media_type(content_type)
    if kind == JSON_PATCH:
        ops = _load_json(body)
        if not isinstance(ops, list):
            raise NotInjectable("a JSON patch must be a list of operations")
        return _dumps(_label_json_patch(ops, owner)), JSON_PATCH
    if kind in (JSON, MERGE_PATCH, STRATEGIC_PATCH, APPLY_PATCH_JSON, ""):
        doc = _load_json(body)
        out_type = kind or JSON
    elif kind in (YAML, APPLY_PATCH_YAML):
        # kubectl sends apply bodies as JSON: read JSON as JSON (YAML 1.1 would read 1e-07 as a string).
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            doc = _load_yaml(body)
        out_type = JSON if kind == YAML else APPLY_PATCH_YAML
    else:
        raise NotInjectable(f"cannot label a {kind} body")
    if not isinstance(doc, dict):
        raise NotInjectable("the body is not an object")
    patch = kind in (MERGE_PATCH, STRATEGIC_PATCH)
    metadata = doc.get("metadata")
    if metadata is None:
        if patch and "metadata" in doc:  # metadata: null clears the labels too
            doc["metadata"] = {"labels": _cleared(current, owner)}
            return _dumps(doc), out_type
        metadata = doc["metadata"] = {}
    if not isinstance(metadata, dict):
        raise NotInjectable("metadata is not an object")
    labels = metadata.get("labels")
    if labels is None:
        if patch and "labels" in metadata:  # labels: null: every label but the owner's goes
            metadata["labels"] = _cleared(current, owner)
            return _dumps(doc), out_type
        labels = metadata["labels"] = {}
    if not isinstance(labels, dict):
        raise NotInjectable("metadata.labels is not an object")
    labels.update(owner.labels)
    return _dumps(doc), out_type


def _cleared(current: Mapping[str, str] | None, owner: Owner) -> dict[str, str | None]:
    """A merge patch's labels that remove every current label but the owner's, and keep those."""
    cleared: dict[str, str | None] = {k: None for k in current or {} if k not in owner.labels}
    cleared.update(owner.labels)
    return cleared


def _label_json_patch(ops: list[Any], owner: Owner) -> list[Any]:
    """The operations with the owner labels kept: written into any value that replaces the labels or the
    metadata, and added at the end where the labels (or the metadata) were removed, or key by key."""
    state = "present"
    for op in ops:
        if not isinstance(op, dict):
            continue
        path, verb, value = op.get("path"), op.get("op"), op.get("value")
        if path == "/metadata/labels":
            if verb in ("add", "replace") and isinstance(value, dict):
                value.update(owner.labels)
                state = "present"
            elif verb == "remove":
                state = "labels_gone"
        elif path == "/metadata":
            if verb in ("add", "replace") and isinstance(value, dict):
                labels = value.get("labels")
                if not isinstance(labels, dict):
                    labels = value["labels"] = {}
                labels.update(owner.labels)
                state = "present"
            elif verb == "remove":
                state = "metadata_gone"
    if state == "metadata_gone":
        return [*ops, {"op": "add", "path": "/metadata", "value": {"labels": dict(owner.labels)}}]
    if state == "labels_gone":
        return [*ops, {"op": "add", "path": "/metadata/labels", "value": dict(owner.labels)}]
    # The object is owned (its ownership GET said so), so its labels exist for these to land in.
    adds = [
        {"op": "add", "path": "/metadata/labels/" + _pointer_escape(k), "value": v}
        for k, v in owner.labels.items()
    ]
    return [*ops, *adds]


def _dumps(doc: Any) -> bytes:
    try:
        return orjson.dumps(doc)
    except (TypeError, orjson.JSONEncodeError) as exc:
        # YAML can hold what JSON cannot (non-string keys such as YAML 1.1's on:, integers past 64 bits).
        raise NotInjectable(f"not expressible as JSON: {exc}") from exc


def merge_selector(caller: str | None, owner: Owner) -> str:
    """The caller's label selector ANDed with the ownership requirements."""
    caller = (caller or "").strip()
    return f"{caller},{owner.selector}" if caller else owner.selector


def _load_json(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise NotInjectable(f"invalid JSON: {exc}") from exc


def _load_yaml(body: bytes) -> Any:
    try:
        return yamlsafe.load(body)
    except yaml.YAMLError as exc:
        raise NotInjectable(f"invalid YAML: {exc}") from exc


def _pointer_escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")
