"""The admission chain: mutating phase first, one reinvocation pass when a mutator asks, warnings kept
with a denial (upstream admission ``reinvoker`` behaviour)."""

from __future__ import annotations

import pytest

from vplane.apiserver.admission import Admission, AdmissionRequest, Reinvocation
from vplane.apiserver.context import RequestContext, UserInfo
from vplane.apiserver.registry import ResourceType
from vplane.kube import errors
from vplane.kube.requestinfo import RequestInfo

CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap", True)


def admission_request() -> AdmissionRequest:
    ctx = RequestContext(UserInfo("alice"), RequestInfo(True, "/api/v1/namespaces/ns/configmaps", "create"))
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"}}
    return AdmissionRequest(ctx, "CREATE", CONFIGMAPS, "", "ns", "cm", obj, None)


class Labeller:
    """Adds its label; asks for reinvocation when it changed the object, as upstream's plug-ins do."""

    def __init__(self, key: str, configured: bool = True) -> None:
        self.key = key
        self.configured = configured
        self.passes: list[bool] = []

    @property
    def active(self) -> bool:
        return self.configured

    async def mutate(self, request: AdmissionRequest, reinvocation: Reinvocation) -> None:
        self.passes.append(reinvocation.is_reinvoke)
        assert request.obj is not None
        labels = dict(request.obj["metadata"].get("labels") or {})
        if labels.get(self.key) != "yes":
            labels[self.key] = "yes"
            request.obj = {**request.obj, "metadata": {**request.obj["metadata"], "labels": labels}}
            reinvocation.should_reinvoke = True


async def test_nothing_configured_skips_the_phase() -> None:
    chain = Admission()
    idle = Labeller("a", configured=False)
    chain.add_mutating(idle)
    request = admission_request()
    before = request.obj
    assert not chain.mutating
    assert await chain.mutate(request) is before
    assert idle.passes == []


async def test_a_change_reinvokes_the_chain_once() -> None:
    chain = Admission()
    first, second = Labeller("a"), Labeller("b")
    chain.add_mutating(first)
    chain.add_mutating(second)
    request = admission_request()
    mutated = await chain.mutate(request)
    assert mutated is not None and mutated["metadata"]["labels"] == {"a": "yes", "b": "yes"}
    assert first.passes == [False, True] and second.passes == [False, True]


async def test_warnings_travel_with_a_denial() -> None:
    class Deny:
        async def admit(self, request: AdmissionRequest) -> None:
            request.ctx.warn('be "careful"')
            raise errors.forbidden("configmaps", "", "cm", "no")

    chain = Admission()
    chain.add(Deny())
    with pytest.raises(errors.StatusError) as exc:
        await chain.admit(admission_request())
    assert exc.value.headers["Warning"] == '299 - "be \\"careful\\""'
