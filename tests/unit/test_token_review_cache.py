"""The tenant's token-review cache is bounded: random tokens cannot grow it or push out real answers."""

from __future__ import annotations

import secrets

import pytest

from vplane.apiserver.context import UserInfo
from vplane.kube.errors import StatusError
from vplane.tenant.identity import PlatformTokenReviewer

CLIENT = UserInfo("loft:vcluster:p-default:client", "k1", ("loft:vclusters",))


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def reviewer(clock: Clock, max_entries: int = 8, max_token_bytes: int = 64) -> PlatformTokenReviewer:
    async def review(token: str) -> UserInfo | None:
        return CLIENT if token == "good" else None

    return PlatformTokenReviewer(
        "https://platform",
        b"",
        "reviewer",
        ttl=10.0,
        max_entries=max_entries,
        max_token_bytes=max_token_bytes,
        clock=clock,
        review=review,
    )


async def test_many_random_tokens_leave_the_cache_within_its_bound() -> None:
    r = reviewer(Clock())
    assert await r.authenticate_token("good") == CLIENT
    for _ in range(1000):
        with pytest.raises(StatusError):
            await r.authenticate_token(secrets.token_urlsafe(24))
    assert r.cached <= 2 * 8
    assert r.evicted == 1000 - 8
    reviews = r.reviews
    assert await r.authenticate_token("good") == CLIENT
    assert r.reviews == reviews, "refused answers never pushed out the accepted one"


async def test_least_recently_used_answers_go_first() -> None:
    r = reviewer(Clock(), max_entries=2)
    for token in ("a", "b"):
        with pytest.raises(StatusError):
            await r.authenticate_token(token)
    with pytest.raises(StatusError):
        await r.authenticate_token("a")  # used again: now "b" is the oldest
    with pytest.raises(StatusError):
        await r.authenticate_token("c")
    reviews = r.reviews
    with pytest.raises(StatusError):
        await r.authenticate_token("a")
    assert r.reviews == reviews
    with pytest.raises(StatusError):
        await r.authenticate_token("b")
    assert r.reviews == reviews + 1


async def test_expired_answers_are_dropped_when_met() -> None:
    clock = Clock()
    r = reviewer(clock)
    await r.authenticate_token("good")
    clock.now += 10.0
    assert await r.authenticate_token("good") == CLIENT
    assert r.reviews == 2 and r.cached == 1


async def test_overlong_tokens_are_401_before_anything_is_asked_or_kept() -> None:
    r = reviewer(Clock(), max_token_bytes=64)
    with pytest.raises(StatusError) as err:
        await r.authenticate_token("x" * 65)
    assert (err.value.code, err.value.message) == (401, "the bearer token is longer than 64 bytes")
    with pytest.raises(StatusError):
        await r.authenticate_token("é" * 33)  # 66 bytes in 33 characters
    assert r.reviews == 0 and r.cached == 0
    with pytest.raises(StatusError) as err:
        await r.authenticate_token("x" * 64)
    assert err.value.message == "auth failed"
