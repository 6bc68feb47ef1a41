"""Integration tests only: garbage is collected after each test's teardown."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _garbage_of_this_test() -> Iterator[None]:
    """An object a test leaves unclosed (a socket, a transport) warns when it is collected, and warnings are
    errors: collected here, the failure names the test that leaked it, not whichever test a later collection
    happened to run in. (Integration tests only: a full collection per test would double the unit tests'
    time, and they open no sockets.)"""
    yield
    gc.collect()
