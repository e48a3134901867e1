"""The window's count (intake/rate.py): one cache call a request once it is open, and the
count right when the key is missing, evicted or opened by a racing request."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from idempotency_core.intake import rate


@pytest.fixture(autouse=True)
def _empty_cache():
    cache.clear()
    yield
    cache.clear()


def test_the_first_request_opens_the_count_and_the_next_ones_add_to_it():
    assert [rate._count_one("rate:test") for _ in range(3)] == [1, 2, 3]


def test_a_count_evicted_within_its_window_opens_again_at_one():
    rate._count_one("rate:test")
    cache.delete("rate:test")
    assert rate._count_one("rate:test") == 1


def test_a_count_a_racing_request_opened_is_added_to_not_reset(monkeypatch):
    real_add = cache.add

    def racer_first(key, value, timeout=None):
        real_add(key, 5, timeout=timeout)  # another process opened it, and counted 5
        return real_add(key, value, timeout=timeout)

    monkeypatch.setattr(rate.cache, "add", racer_first)
    assert rate._count_one("rate:test") == 6


def test_over_the_limit_the_wait_runs_to_the_windows_end():
    now = 10 * rate.WINDOW_SECONDS + 15.0
    key = lambda window: f"rate:limit:{window}"  # noqa: E731
    assert [rate._counted_wait(key, 2, now) for _ in range(2)] == [None, None]
    assert rate._counted_wait(key, 2, now) == pytest.approx(rate.WINDOW_SECONDS - 15.0)
