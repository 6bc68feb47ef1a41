"""The tenant's cache of the platform's answers about access keys (pure logic behind its transport seam)."""

from __future__ import annotations

import asyncio

import pytest

from vplane.apiserver.context import UserInfo
from vplane.kube.errors import StatusError
from vplane.tenant.identity import AUTH_FAILED, PlatformTokenReviewer


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def reviewer(
    answers: dict[str, UserInfo | None], clock: FakeClock, gate: asyncio.Event | None = None
) -> PlatformTokenReviewer:
    async def review(token: str) -> UserInfo | None:
        if gate is not None:
            await gate.wait()
        return answers.get(token)

    return PlatformTokenReviewer("https://platform", b"", "reviewer", ttl=10.0, clock=clock, review=review)


CLIENT = UserInfo("loft:vcluster:p-default:client", "k1", ("loft:vclusters",))


async def test_a_burst_shares_one_review() -> None:
    """Concurrent requests with the same key wait for one review instead of queueing behind many."""
    gate = asyncio.Event()
    r = reviewer({"good": CLIENT}, FakeClock(), gate)
    tasks = [asyncio.create_task(r.authenticate_token("good")) for _ in range(50)]
    await asyncio.sleep(0)
    gate.set()
    users = await asyncio.gather(*tasks)
    assert users == [CLIENT] * 50
    assert r.reviews == 1


async def test_answers_are_cached_for_the_ttl_then_reviewed_again() -> None:
    """A key disabled on the platform stops working here once the cached answer is older than the TTL."""
    clock = FakeClock()
    answers: dict[str, UserInfo | None] = {"key": CLIENT}
    r = reviewer(answers, clock)
    assert await r.authenticate_token("key") == CLIENT
    answers["key"] = None  # disabled on the platform
    clock.now += 9.9
    assert await r.authenticate_token("key") == CLIENT
    assert r.reviews == 1
    clock.now += 0.2
    with pytest.raises(StatusError) as err:
        await r.authenticate_token("key")
    assert (err.value.code, err.value.message) == (401, AUTH_FAILED)
    assert r.reviews == 2


async def test_invalid_key_is_401_auth_failed_and_the_rejection_is_cached() -> None:
    """The platform's 'not authenticated' becomes 401 ``auth failed``; repeated tries do not re-ask."""
    r = reviewer({}, FakeClock())
    for _ in range(3):
        with pytest.raises(StatusError) as err:
            await r.authenticate_token("bogus")
        assert err.value.code == 401
        assert err.value.message == "auth failed"
        assert err.value.reason == "Unauthorized"
    assert r.reviews == 1


async def test_a_failed_review_is_not_cached() -> None:
    """If the platform cannot be asked, the error surfaces and the next request asks again."""
    calls = 0

    async def flaky(token: str) -> UserInfo | None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise StatusError(503, "ServiceUnavailable", "the platform could not be reached")
        return CLIENT

    r = PlatformTokenReviewer("https://platform", b"", "reviewer", clock=FakeClock(), review=flaky)
    with pytest.raises(StatusError):
        await r.authenticate_token("key")
    assert await r.authenticate_token("key") == CLIENT


def test_a_refused_reviewer_key_is_401_and_a_platform_failure_503() -> None:
    """The platform refusing this tenant's own key will not pass with a retry: callers get the runbook's 401
    `auth failed` with why; any other failure of the platform is passing: 503 with Retry-After."""
    from vplane.tenant.identity import review_refused

    for status in (401, 403):
        refused = review_refused(status)
        assert refused.code == 401
        assert refused.message == (
            f"auth failed: the platform refuses this tenant cluster's access key (token review: {status})"
        )
    failing = review_refused(500)
    assert failing.code == 503 and failing.headers == {"Retry-After": "1"}
