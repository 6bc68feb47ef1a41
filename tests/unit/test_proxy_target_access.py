"""Which proxy entries of an updated client VirtualClusterInstance need the submitting user's ``use`` of the
target (``vplane.platform.proxyaccess``): those that reach further than before, nothing else."""

from __future__ import annotations

from vplane.kube.proxyconfig import ProxyTarget
from vplane.platform.proxyaccess import _changed


def entry(
    group: str = "example.com", target: str = "target", access: str = "owned", index: int = 0, **kw: object
) -> ProxyTarget:
    return ProxyTarget(group, "v1", target, "default", access, index=index, **kw)  # type: ignore[arg-type]


def test_entries_that_reach_further_need_use() -> None:
    before = [entry(), entry("other.example", access="all")]
    assert _changed([entry(access="all")], before) == [entry(access="all")]  # owned widened to all
    assert _changed([entry(target="elsewhere")], before) == [entry(target="elsewhere")]  # moved
    assert _changed([entry("new.example")], before) == [entry("new.example")]  # added, or enabled
    assert _changed([entry()], []) == [entry()]  # nothing before (a disabled entry is not listed)


def test_changes_that_do_not_widen_need_nothing() -> None:
    before = [entry(), entry("other.example", access="all", index=1)]
    assert _changed([entry(index=1), entry("other.example", index=2)], before) == []  # ports moved, narrowed
    assert _changed([entry(resources=("a", "b"), wildcard=True)], before) == []  # resources renamed
    assert _changed([], before) == []  # removed
