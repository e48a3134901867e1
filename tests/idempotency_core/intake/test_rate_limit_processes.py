"""A source's rate across web processes: one count when the cache is shared (Redis).

Two separate gunicorn servers stand for two hosts behind a load balancer; the
requests are split between them and sent at once. With `CACHE_URL` on Redis the
limit holds exactly (an atomic increment per request); with the default local
memory each process admits the limit for itself, which the second test pins
down so the README's warning stays true.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import redis

from idempotency_core.intake.api.throttling import WINDOW_SECONDS
from idempotency_core.intake.sources import source_create_with_key
from idempotency_core.models import Event, Source
from tests.factories import submission
from tests.support.processes import WebServer, start_web

REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
LIMIT = 10

# Two gunicorns, and the limit counts within a one-minute window.
pytestmark = [pytest.mark.serial, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture
def redis_url() -> str:
    try:
        redis.Redis.from_url(REDIS_URL, socket_timeout=2).ping()
    except redis.RedisError as error:
        message = f"Redis is not reachable at {REDIS_URL}: {error}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)  # the machine starts Redis before CI: this is a real failure
        pytest.skip(message)
    return REDIS_URL


@pytest.fixture
def two_servers(tmp_path, request):
    servers: list[WebServer] = []

    def start(**env: str) -> list[WebServer]:
        for name in ("web-a", "web-b"):
            servers.append(start_web(tmp_path, workers=1, name=name, env=env))
        return servers

    yield start
    for server in servers:
        server.child.stop()


def limited_source() -> str:
    source, _, key = source_create_with_key(name=f"limited-{uuid.uuid4().hex[:8]}")
    Source.objects.filter(pk=source.pk).update(rate_per_minute=LIMIT)
    return key


def start_of_a_window() -> None:
    """A window boundary inside the test would reset the count: begin well inside one."""
    into = time.time() % WINDOW_SECONDS
    if into > WINDOW_SECONDS - 15:
        time.sleep(WINDOW_SECONDS - into + 0.5)


def send_at_once(servers: list[WebServer], api_key: str, count: int) -> list[int]:
    """`count` submissions with distinct keys, alternately to each server, all at once."""
    barrier = threading.Barrier(count)

    def send(i: int) -> int:
        server = servers[i % len(servers)]
        with httpx.Client(timeout=60) as client:
            barrier.wait()
            return client.post(
                f"{server.url}/api/v1/submissions/",
                json=submission(message=f"Enquiry number {i}"),
                headers={"Authorization": f"Api-Key {api_key}", "Idempotency-Key": f"k-{i}"},
            ).status_code

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(send, range(count)))


def test_with_a_shared_cache_the_rate_holds_across_processes(redis_url, two_servers):
    servers = two_servers(CACHE_URL=redis_url, CACHE_KEY_PREFIX=f"test-{uuid.uuid4().hex}")
    api_key = limited_source()
    start_of_a_window()
    codes = send_at_once(servers, api_key, 4 * LIMIT)
    assert (codes.count(202), codes.count(429)) == (LIMIT, 3 * LIMIT), codes
    assert Event.objects.count() == LIMIT  # a refused request stores nothing


def test_with_local_memory_each_process_counts_for_itself(two_servers):
    servers = two_servers()
    api_key = limited_source()
    start_of_a_window()
    codes = send_at_once(servers, api_key, 4 * LIMIT)
    # Two processes, each admitting the limit: why production sets CACHE_URL.
    assert (codes.count(202), codes.count(429)) == (2 * LIMIT, 2 * LIMIT), codes
