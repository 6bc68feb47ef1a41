"""The API server's memo of stored objects' labels, which label-selected lists filter on."""

from __future__ import annotations

from typing import Any

import pytest

from vplane.apiserver import codec
from vplane.apiserver.handlers import LabelMemo, _label_selector
from vplane.kube import errors
from vplane.storage.interface import KeyValue

OWNED = {"vcluster.com/owner-vcluster": "client", "vcluster.com/owner-project": "default"}


def kv(name: str, revision: int, labels: Any) -> KeyValue:
    metadata: dict[str, Any] = {"name": name, "namespace": "ns"}
    if labels is not None:
        metadata["labels"] = labels
    value = codec.stored_bytes({"apiVersion": "example.com/v1", "kind": "MyResource", "metadata": metadata})
    return KeyValue(f"/example.com/myresources/ns/{name}", value, revision, revision)


def test_with_labels_keeps_order_and_needs_every_pair() -> None:
    values = [
        kv("a", 1, {**OWNED, "app": "x"}),
        kv("b", 2, {"vcluster.com/owner-vcluster": "client"}),
        kv("c", 3, None),
        kv("d", 4, {**OWNED, "vcluster.com/owner-vcluster": "other"}),
        kv("e", 5, OWNED),
    ]
    memo = LabelMemo()
    assert [v.key.rsplit("/", 1)[1] for v in memo.with_labels(values, frozenset(OWNED.items()))] == ["a", "e"]
    assert memo.with_labels(values, frozenset()) == values


def test_a_value_is_read_once_per_revision() -> None:
    memo = LabelMemo()
    first = kv("a", 1, OWNED)
    assert memo.of(first) == frozenset(OWNED.items())
    # Same key and revision: the memo answers, not the (here different) bytes.
    same = KeyValue(first.key, kv("a", 1, {}).value, 1, 1)
    assert memo.of(same) == frozenset(OWNED.items())
    # A new revision is read again.
    assert memo.of(kv("a", 2, {"app": "y"})) == frozenset({("app", "y")})


def test_labels_that_are_not_strings_match_nothing() -> None:
    memo = LabelMemo()
    odd = kv("a", 1, {"app": {"nested": "x"}, "tier": "web"})
    assert memo.of(odd) == frozenset({("tier", "web")})
    assert memo.of(kv("b", 1, ["not", "a", "map"])) == frozenset()


def test_the_memo_is_bounded() -> None:
    memo = LabelMemo(capacity=3)
    for i in range(10):
        memo.of(kv(f"o{i}", i, OWNED))
    assert len(memo._labels) == 3
    assert set(memo._labels) == {(f"/example.com/myresources/ns/o{i}", i) for i in (7, 8, 9)}


def test_selectors_are_parsed_once_and_errors_still_raise() -> None:
    text = "vcluster.com/owner-vcluster=client,vcluster.com/owner-project=default"
    assert _label_selector(text) is _label_selector(text)
    assert _label_selector(text).required_labels() == OWNED
    for _ in range(2):
        with pytest.raises(errors.StatusError):
            _label_selector("a in (")
