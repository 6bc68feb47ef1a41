"""YAML as Kubernetes reads it: the safe loader, no aliases, timestamps left as strings.

Every YAML document vplane reads from a user (request bodies, a VirtualClusterInstance's vcluster.yaml,
bodies the resource proxy labels) goes through :func:`load`. Aliases are refused while the document is
still a stream of parser events, so a billion-laughs document costs what its bytes cost: Kubernetes
objects never need aliases (upstream expands them with a budget, ``yaml: document contains excessive
aliasing``; we refuse them outright). Anchors alone name a value and copy nothing, so they stay allowed.
"""

from __future__ import annotations

from typing import Any

import yaml


class AliasRefused(yaml.YAMLError):
    def __init__(self, line: int, anchor: str) -> None:
        super().__init__(
            f"line {line}: aliases are not supported (found *{anchor}); write the value out in full"
        )
        self.line = line
        self.anchor = anchor


class Loader(yaml.CSafeLoader if hasattr(yaml, "CSafeLoader") else yaml.SafeLoader):  # type: ignore[misc]
    """The safe loader (libyaml when available), with timestamps left as the strings they are, as
    upstream's YAML-to-JSON conversion leaves them (``2024-01-01`` is a valid label value, not a date)."""


def _timestamp_as_string(loader: Loader, node: yaml.Node) -> str:
    return str(node.value)


Loader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp_as_string)


def refuse_aliases(text: str | bytes) -> None:
    """Raise :class:`AliasRefused` at the first alias, reading parser events only."""
    # An alias needs a '*' (in UTF-8 and UTF-16 alike): most documents skip the event scan.
    if (b"*" not in text) if isinstance(text, bytes) else ("*" not in text):
        return
    try:
        for event in yaml.parse(text, Loader=Loader):
            if isinstance(event, yaml.AliasEvent):
                mark = event.start_mark
                raise AliasRefused(mark.line + 1 if mark is not None else 0, str(event.anchor))
    except AliasRefused:
        raise
    except yaml.YAMLError:
        return  # malformed before any alias: loading reports it with its position


def load(text: str | bytes) -> Any:
    """One YAML document, aliases refused (:class:`AliasRefused`, a ``yaml.YAMLError``)."""
    refuse_aliases(text)
    return yaml.load(text, Loader=Loader)  # a safe loader
