"""Access keys bound to what they name: key names, reuse decisions, instance binding (pure rules)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vplane.kube import accesskeys, validation
from vplane.kube.accesskeys import KeyRejected

LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True)
SUBDOMAIN = st.lists(LABEL, min_size=1, max_size=3).map(".".join)
UID = st.uuids().map(str)


def _parse(key_name: str) -> tuple[str, str, str]:
    rest = key_name.removeprefix("vcluster-")
    namespace, _, tail = rest.partition(".")
    name, _, uid = tail.rpartition(".")
    return namespace, name, uid


def test_the_colliding_pair_of_the_issue_gets_two_names() -> None:
    """`p-x`/`y-z` and `p-x-y`/`z` were one key name (`vcluster-p-x-y-z`); now they are two."""
    uid = "0b6a4a4e-8f38-4d43-9d2c-5d2f2b8c9a10"
    a = accesskeys.vci_key_name("p-x", "y-z", uid)
    b = accesskeys.vci_key_name("p-x-y", "z", uid)
    assert a != b
    assert a == f"vcluster-p-x.y-z.{uid}"
    assert accesskeys.legacy_vci_key_name("p-x", "y-z") == accesskeys.legacy_vci_key_name("p-x-y", "z")


@given(LABEL, SUBDOMAIN, UID)
def test_key_names_are_valid_and_give_back_what_they_name(namespace: str, name: str, uid: str) -> None:
    """Every key name is a DNS-1123 subdomain, and (when it fits) splits back into its exact parts."""
    key_name = accesskeys.vci_key_name(namespace, name, uid)
    assert validation.dns1123_subdomain(key_name) == []
    assert _parse(key_name) == (namespace, name, uid)


@given(st.tuples(LABEL, SUBDOMAIN, UID), st.tuples(LABEL, SUBDOMAIN, UID))
def test_different_instances_never_share_a_key_name(a: tuple[str, str, str], b: tuple[str, str, str]) -> None:
    if a != b:
        assert accesskeys.vci_key_name(*a) != accesskeys.vci_key_name(*b)


def test_an_overlong_instance_name_is_shortened_but_stays_valid_and_unique() -> None:
    namespace = "p-" + "a" * 61
    long_name = ".".join(["b" * 63] * 3) + ".c"
    uid = "0b6a4a4e-8f38-4d43-9d2c-5d2f2b8c9a10"
    key_name = accesskeys.vci_key_name(namespace, long_name, uid)
    assert len(key_name) <= 253
    assert validation.dns1123_subdomain(key_name) == []
    assert key_name.endswith("." + uid)
    assert key_name != accesskeys.vci_key_name(namespace, long_name[:-1] + "d", uid)


def test_a_uid_of_unexpected_shape_is_digested_into_a_valid_name() -> None:
    key_name = accesskeys.vci_key_name("p-a", "b", "Not A/UID")
    assert validation.dns1123_subdomain(key_name) == []


def _vci_key(namespace: str = "p-a", name: str = "b", uid: str = "u1") -> dict[str, object]:
    return accesskeys.vci_key_object(namespace, name, uid)


def test_a_vci_key_records_its_instance_and_uid() -> None:
    key = _vci_key()
    assert accesskeys.bound_instance(key) == ("p-a", "b", "u1")
    assert key["spec"]["subject"] == "loft:vcluster:p-a:b"  # type: ignore[index]
    assert key["metadata"]["labels"] == {  # type: ignore[index]
        "loft.sh/virtualcluster-instance": "b",
        "loft.sh/project-namespace": "p-a",
    }


def test_a_name_too_long_for_a_label_value_goes_without_the_label() -> None:
    key = _vci_key(name="x" * 70)
    assert "loft.sh/virtualcluster-instance" not in key["metadata"]["labels"]  # type: ignore[index]
    assert accesskeys.bound_instance(key) == ("p-a", "x" * 70, "u1")


def _never(value: str) -> float | None:
    return None


def test_a_key_works_only_while_its_instance_with_that_uid_lives() -> None:
    """Deleted, or deleted and created again under the same name: the old key is refused as not found."""
    key = _vci_key()
    accesskeys.check(key, 0.0, _never, lambda ns, name: "u1")
    for live in (None, "u2"):
        with pytest.raises(KeyRejected, match="not found"):
            accesskeys.check(key, 0.0, _never, lambda ns, name, live=live: live)  # type: ignore[misc]


def test_keys_bound_to_no_instance_are_checked_as_before() -> None:
    key = accesskeys.key_object("alice", accesskeys.TYPE_USER, user="alice")
    accesskeys.check(key, 0.0, _never, lambda ns, name: None)  # usable: no exception
    disabled = {**key, "spec": {**key["spec"], "disabled": True}}
    with pytest.raises(KeyRejected, match="disabled"):
        accesskeys.check(disabled, 0.0, _never, lambda ns, name: None)
    expiring = {
        **key,
        "metadata": {**key["metadata"], "creationTimestamp": "T"},
        "spec": {**key["spec"], "ttl": 60},
    }
    accesskeys.check(expiring, 59.0, lambda text: 0.0, lambda ns, name: None)
    with pytest.raises(KeyRejected, match="expired"):
        accesskeys.check(expiring, 60.0, lambda text: 0.0, lambda ns, name: None)


def test_reuse_decision_never_takes_over_another_subjects_key() -> None:
    mine = _vci_key(uid="u1")
    subject = "loft:vcluster:p-a:b"
    roles = (accesskeys.ROLE_VCLUSTER,)
    assert accesskeys.reuse_decision(mine, subject, roles, "u1") == "reuse"
    assert accesskeys.reuse_decision(mine, "loft:vcluster:p-a-b:c", roles, "u1") == "conflict"
    assert accesskeys.reuse_decision(mine, subject, roles, "u2") == "conflict"
    mine["spec"]["scope"] = {}  # type: ignore[index]
    assert accesskeys.reuse_decision(mine, subject, roles, "u1") == "replace"
    agent = accesskeys.key_object(
        "cluster-edge", accesskeys.TYPE_AGENT, subject="loft:cluster:edge", roles=(accesskeys.ROLE_AGENT,)
    )
    assert accesskeys.reuse_decision(agent, "loft:cluster:edge", (accesskeys.ROLE_AGENT,)) == "reuse"
    assert accesskeys.reuse_decision(agent, "loft:cluster:other", (accesskeys.ROLE_AGENT,)) == "conflict"


def test_stale_keys_are_the_instances_own_and_nobody_elses() -> None:
    old = _vci_key("p-x", "y-z", "u-old")
    live = _vci_key("p-x", "y-z", "u-new")
    other = _vci_key("p-x-y", "z", "u-other")
    legacy = accesskeys.key_object(
        "vcluster-p-x-y-z", accesskeys.TYPE_VCLUSTER, subject="loft:vcluster:p-x:y-z", roles=("vcluster",)
    )
    legacy_of_other = accesskeys.key_object(
        "vcluster-p-x-y-z", accesskeys.TYPE_VCLUSTER, subject="loft:vcluster:p-x-y:z", roles=("vcluster",)
    )
    keys = [old, live, other, legacy]
    names = lambda *ks: [k["metadata"]["name"] for k in ks]  # noqa: E731
    assert accesskeys.stale_vci_keys(keys, "p-x", "y-z", "u-new") == names(old, legacy)
    assert accesskeys.stale_vci_keys(keys, "p-x", "y-z", None) == names(old, live, legacy)
    assert accesskeys.stale_vci_keys([legacy_of_other, other], "p-x", "y-z", None) == []


def test_cluster_keys_name_the_cluster_object_they_were_made_for() -> None:
    key = accesskeys.cluster_key_object("edge", "uid-1")
    assert key["metadata"]["name"] == "cluster-edge"
    assert key["metadata"]["labels"] == {"loft.sh/cluster": "edge", "vplane.io/cluster-object-uid": "uid-1"}
    assert key["spec"]["subject"] == "loft:cluster:edge" and accesskeys.roles_of(key) == ("agent",)
    assert not accesskeys.cluster_key_stale(key, "uid-1")
    assert accesskeys.cluster_key_stale(key, "uid-2")  # an earlier Cluster's key
    assert not accesskeys.cluster_key_stale(key, "")  # no UID to compare: keep it
    unlabelled = accesskeys.cluster_key_object("edge", "")
    assert "vplane.io/cluster-object-uid" not in unlabelled["metadata"]["labels"]
    assert not accesskeys.cluster_key_stale(unlabelled, "uid-2")  # adopted: made before keys carried it
    assert accesskeys.cluster_key_unlabelled(unlabelled, "edge")  # ... and labelled then
    assert not accesskeys.cluster_key_unlabelled(key, "edge")
    assert not accesskeys.cluster_key_unlabelled(unlabelled, "other")  # another cluster's subject
