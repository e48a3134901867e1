"""Benchmark of the console's queue page at production scale (not a unit test).

Seeds, once, 1,000,000 events (`--events`) with one operation each, a tenth of
them as open review cases (100,000; plus half as many resolved or closed ones)
and an attempt per case operation, generated inside PostgreSQL with
`INSERT ... SELECT generate_series` (no rows travel through Python, so the seed
takes about a minute on two cores). Then renders console pages in-process
through the site's own WSGI application (an httpx client with a WSGI transport:
no socket, no server, a staff session made the way a login makes one), several
rounds each, and prints p50/p95 in milliseconds next to a baseline page (the
login form: same middleware and template engine, no queries) measured in the
same run, so a noisy machine shows as a higher baseline rather than as a slower
queue.

Only the first pipeline step gets an operation: the queue joins a case to at most
one operation, so two million more operation rows would lengthen the seed
without changing the queue's plans (their indexes are by primary key).

It refuses to run on a database whose name does not contain "bench": the seed is
bulk and the reseed truncates. `manage.py bench_console` runs it.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from importlib import import_module
from typing import Any

import httpx
from django.conf import settings
from django.contrib.auth import (
    BACKEND_SESSION_KEY,
    HASH_SESSION_KEY,
    SESSION_KEY,
    get_user_model,
    load_backend,
)
from django.core.cache import cache
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections, connection
from django.db.models import QuerySet
from django.http.request import validate_host

from idempotency_core.intake.sources import source_get_or_create
from idempotency_core.models import Destination, Event, ReviewCase

EVENTS = 1_000_000
KINDS = [
    "ambiguous_outcome",
    "permanent_failure",
    "retries_exhausted",
    "interrupted_send",
    "recon_missing",
    "suspected_duplicate",
]
# The host the in-process client names; the site must allow it (ALLOWED_HOSTS).
CONSOLE_HOST = "127.0.0.1"
BASELINE_URL = "/accounts/login/"
# How deep the keyset-cursor page is (page 41), where the seed has that many pages.
DEEP_PAGES = 40
# The queue's "Next" link. Not the first "after=" on the page: from page 2 on, the
# "take ownership" form's hidden "next" field carries the page's own cursor first.
NEXT_LINK = re.compile(r'href="\?(?:[^"]*&amp;)?after=([A-Za-z0-9_-]+)">Next')
SAMPLE_CASE = 5000


class BenchmarkError(Exception):
    """The benchmark cannot run here, or the console did not answer as it should."""


def open_cases_for(events: int) -> int:
    return events // 10


def done_cases_for(events: int) -> int:
    return events // 20


def bench_console_database_check() -> None:
    """Refuses a database not named for benchmarks."""
    name = settings.DATABASES["default"]["NAME"]
    if "bench" not in str(name):
        raise BenchmarkError(
            f"refusing to seed {name!r}: use a PostgreSQL database named like "
            "onefold_bench_console (DATABASE_URL)"
        )
    allowed = settings.ALLOWED_HOSTS or ([CONSOLE_HOST] if settings.DEBUG else [])
    if not validate_host(CONSOLE_HOST, allowed):
        raise BenchmarkError(
            f"the benchmark renders pages for host {CONSOLE_HOST}: add it to ALLOWED_HOSTS"
        )


# -- seed -----------------------------------------------------------------------


def bench_console_seed(
    *, events: int = EVENTS, reseed: bool = False, out: Callable[[str], None]
) -> None:
    """Seeds `events` events and their cases unless the database already holds
    exactly that seed (`reseed` truncates and seeds again in any case)."""
    if reseed:
        _truncate()
    seeded = ReviewCase.objects.filter(status__in=ReviewCase.OPEN_STATUSES).count()
    if seeded != open_cases_for(events) or Event.objects.count() != events:
        _truncate()
        _seed(events, out)


def _truncate() -> None:
    with connection.cursor() as cursor:
        # The audit trail's guard refuses TRUNCATE (and a CASCADE reaching it) to any
        # session but one that says so: this is the bench's own reset.
        cursor.execute("SELECT set_config('onefold.audit_truncate', 'allowed', false)")
        cursor.execute(
            "TRUNCATE review_console_bulkreplayitem, review_console_bulkreplayjob, "
            "idempotency_core_attempt, idempotency_core_delivery, "
            "idempotency_core_reviewcase, idempotency_core_operation, "
            "idempotency_core_event CASCADE"
        )
        cursor.execute("TRUNCATE idempotency_core_auditentry")


def _step(label: str, sql: str, params: list[Any], out: Callable[[str], None]) -> None:
    started = time.monotonic()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        count = cursor.rowcount
    out(f"  {label}: {count:,} rows in {time.monotonic() - started:.1f} s")


# The seed's statements: every row is generated inside PostgreSQL.
SEED_EVENTS = """
INSERT INTO idempotency_core_event
    (id, source_id, key, fingerprint, payload, form, contact_digest,
     submitted_at, received_at)
SELECT md5('event' || i)::uuid,
       (%s::bigint[])[1 + i %% 4],
       'bench-' || i,
       md5('fp' || i),
       jsonb_build_object(
           'form', 'contact',
           'contact', jsonb_build_object(
               'name', 'Person ' || (i %% 300000),
               'email', 'p' || (i %% 300000) || '@example.com',
               'phone', '+44 20 7946 ' || lpad((i %% 10000)::text, 4, '0')),
           'message', 'Please quote for a kitchen refit.'),
       'contact',
       md5('contact' || (i %% 300000)),
       now() - (i || ' seconds')::interval,
       now() - (i || ' seconds')::interval
FROM generate_series(1, %s) AS i
"""

SEED_OPERATIONS = """
INSERT INTO idempotency_core_operation
    (event_id, step, position, destination_id, key, status, recovery,
     attempt_count, destination_ref, last_error, created_at, updated_at,
     completed_at, first_presented_at, next_attempt_at)
SELECT md5('event' || i)::uuid, 'create_enquiry', 0, %s,
       'opk_bench_' || md5('op' || i),
       CASE WHEN i <= %s THEN 'needs_review' ELSE 'succeeded' END,
       CASE WHEN i <= %s THEN 'review' ELSE '' END,
       1,
       CASE WHEN i <= %s THEN '' ELSE 'rec_' || i END,
       '',
       now() - (i || ' seconds')::interval,
       now() - (i || ' seconds')::interval,
       CASE WHEN i <= %s THEN NULL ELSE now() - (i || ' seconds')::interval END,
       now() - (i || ' seconds')::interval,
       NULL
FROM generate_series(1, %s) AS i
"""

SEED_ATTEMPTS = """
INSERT INTO idempotency_core_attempt
    (operation_id, number, claim_token, trigger, recovery, started_at,
     finished_at, outcome, error_class, error_message, destination_ref, adopted)
SELECT o.id, 1, md5('claim' || o.id)::uuid, 'worker', '',
       o.created_at, o.created_at, 'ambiguous', 'RemoteProtocolError',
       'Server disconnected without sending a response.', '', false
FROM idempotency_core_operation o
WHERE o.status = 'needs_review'
"""

# One open case per needs-review operation, ages spread over 60 days, a tenth owned.
SEED_OPEN_CASES = """
INSERT INTO idempotency_core_reviewcase
    (kind, status, subject, event_id, operation_id, summary, evidence,
     owner_id, resolution_code, resolution_note, created_at, updated_at)
SELECT (%s::text[])[1 + o.id %% 6],
       CASE WHEN o.id %% 10 = 0 THEN 'in_progress' ELSE 'open' END,
       'operation:' || o.id, o.event_id, o.id,
       'create_enquiry may have been applied and the destination cannot tell.',
       '{}'::jsonb,
       CASE WHEN o.id %% 10 = 0 THEN %s ELSE NULL END,
       '', '',
       now() - ((o.id * 51) %% 5184000 || ' seconds')::interval,
       now()
FROM idempotency_core_operation o
WHERE o.status = 'needs_review'
"""

# Resolved and closed cases on succeeded operations.
SEED_DONE_CASES = """
INSERT INTO idempotency_core_reviewcase
    (kind, status, subject, event_id, operation_id, summary, evidence,
     owner_id, resolution_code, resolution_note, created_at, updated_at,
     resolved_at)
SELECT (%s::text[])[1 + o.id %% 6],
       CASE WHEN o.id %% 2 = 0 THEN 'resolved' ELSE 'closed' END,
       'operation:' || o.id, o.event_id, o.id, 'Handled.', '{}'::jsonb,
       %s, 'other', 'bench', o.created_at, now(), now()
FROM idempotency_core_operation o
WHERE o.status = 'succeeded'
ORDER BY o.id
LIMIT %s
"""


def _seed(events: int, out: Callable[[str], None]) -> None:
    out("Seeding (generated inside PostgreSQL)…")
    open_cases, done_cases = open_cases_for(events), done_cases_for(events)
    started = time.monotonic()
    sources = [source_get_or_create(name=f"bench-site-{n}")[0].pk for n in range(4)]
    crm = Destination.objects.get(name="crm").pk
    user_model = get_user_model()
    owner, _ = user_model.objects.get_or_create(
        username="bench-reviewer", defaults={"is_staff": True}
    )
    _step("events", SEED_EVENTS, [sources, events], out)
    _step("operations", SEED_OPERATIONS, [crm, *[open_cases] * 4, events], out)
    _step("attempts", SEED_ATTEMPTS, [], out)
    _step("open cases", SEED_OPEN_CASES, [KINDS, owner.pk], out)
    _step("resolved and closed cases", SEED_DONE_CASES, [KINDS, owner.pk, done_cases], out)
    with connection.cursor() as cursor:
        # What autovacuum does for a live table: statistics, and the visibility
        # map that lets counts by status use index-only scans.
        cursor.execute("VACUUM ANALYZE")
    out(f"Seeded in {time.monotonic() - started:.0f} s.")


# -- measure --------------------------------------------------------------------


class QueryCounter:
    """Counts the statements a connection runs (installed with `execute_wrapper`)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        self.count += 1
        return execute(sql, params, many, context)


@contextmanager
def console_client(user: Any) -> Iterator[httpx.Client]:
    """An httpx client that renders the site in this process, signed in as `user`.

    The session is made as `login()` makes it (what the test client's
    `force_login` does): user id, backend and session hash in a fresh session,
    its key in the session cookie. While the client is open, a request does not
    close this thread's database connection at its end (as it would with
    CONN_MAX_AGE=0): the figures are the page's own, not a reconnect's, as they
    were when measured with the test client, which does the same.
    """
    backend = next(
        path for path in settings.AUTHENTICATION_BACKENDS if hasattr(load_backend(path), "get_user")
    )
    session = import_module(settings.SESSION_ENGINE).SessionStore()
    session[SESSION_KEY] = user._meta.pk.value_to_string(user)
    session[BACKEND_SESSION_KEY] = backend
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    client = httpx.Client(
        transport=httpx.WSGITransport(app=get_wsgi_application()),
        base_url=f"http://{CONSOLE_HOST}",
    )
    client.cookies.set(settings.SESSION_COOKIE_NAME, session.session_key, domain=CONSOLE_HOST)
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        with client:
            yield client
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def bench_console_measure(*, rounds: int, out: Callable[[str], None]) -> None:
    """Renders each console page `rounds` times after 3 warm-up renders, alternating
    with the baseline page, and writes a line per page as it is measured."""
    user_model = get_user_model()
    admin, _ = user_model.objects.get_or_create(
        username="bench-admin", defaults={"is_staff": True, "is_superuser": True}
    )
    open_cases = ReviewCase.objects.filter(status__in=ReviewCase.OPEN_STATUSES)
    open_count = open_cases.count()
    if open_count == 0:
        raise BenchmarkError("no open cases to render: seed first")
    sample, sample_event, sample_operation = _sample_case(open_cases, open_count)
    sample_event_id = Event.objects.filter(key=sample_event).values_list("pk", flat=True)[0]
    with console_client(admin) as client:
        deep_cursor, depth = _cursor_at_depth(client, pages=DEEP_PAGES)
        pages = _pages(
            depth=depth,
            deep_cursor=deep_cursor,
            sample=sample,
            sample_event=sample_event,
            sample_operation=sample_operation,
            sample_event_id=sample_event_id,
        )
        out(
            f"\n{Event.objects.count():,} events, {open_count:,} open cases, "
            f"{ReviewCase.objects.count():,} cases in all. {rounds} rounds per page after 3 "
            "warm-up renders; the site's WSGI application in-process (httpx, no socket), "
            f"PostgreSQL on the same {os.cpu_count()}-core machine.\n"
        )
        out(
            f"{'page':<40} {'p50 ms':>7} {'p95 ms':>7} {'max ms':>7} {'queries':>7} "
            f"{'base p50':>8} {'ratio':>6}"
        )
        # The dashboard reuses its counted history for a minute (review_console/
        # selectors.py, dashboard_history): this row clears the cache before every
        # render, so it is what the first view of each minute costs.
        cold = ("dashboard, history recounted", "/console/")
        for label, url in [*pages, cold]:
            # The baseline is rendered alternately with the page, round by round,
            # so both see the same machine load; the ratio is the figure to compare.
            render = partial(client.get, url)
            if (label, url) == cold:
                render = partial(_uncached_get, client, url)
            timings, queries, base = _time(render, partial(client.get, BASELINE_URL), rounds)
            p50 = statistics.median(timings)
            base_p50 = statistics.median(base)
            out(
                f"{label:<40} {p50:>7.1f} {_percentile(timings, 95):>7.1f} "
                f"{max(timings):>7.1f} {queries:>7} {base_p50:>8.1f} {p50 / base_p50:>5.0f}x"
            )


def _pages(
    *,
    depth: int,
    deep_cursor: str,
    sample: int,
    sample_event: str,
    sample_operation: str,
    sample_event_id: Any,
) -> list[tuple[str, str]]:
    """The console pages measured, each as (label, URL)."""
    return [
        ("queue, default (open, oldest first)", "/console/cases/"),
        (f"queue, page {depth + 1} (keyset cursor)", f"/console/cases/?after={deep_cursor}"),
        ("queue, newest first", "/console/cases/?sort=newest"),
        ("queue, kind=ambiguous_outcome", "/console/cases/?kind=ambiguous_outcome"),
        ("queue, owner=nobody, step", "/console/cases/?owner=nobody&step=create_enquiry"),
        ("queue, sorted by kind", "/console/cases/?sort=kind"),
        ("queue, opened in a 7-day range", "/console/cases/?opened_after=2026-10-01"),
        ("queue, search exact event key", f"/console/cases/?q={sample_event}"),
        ("queue, search operation key", f"/console/cases/?q={sample_operation}"),
        ("case page", f"/console/cases/{sample}/"),
        ("dashboard", "/console/"),
        # The queue's chips (counted, capped) under two filters.
        ("queue, chip owner=me", "/console/cases/?owner=me"),
        ("queue, chip kind + owner=nobody", "/console/cases/?kind=recon_missing&owner=nobody"),
        # A submission's page, and the customer search (see
        # review_console/submissions.py for how each kind is answered).
        ("submission page", f"/console/submissions/{sample_event_id}/"),
        ("search, email (digest)", "/console/search/?q=p123%40example.com"),
        # No match: the whole bounded scan (NAME_SEARCH_SCOPE newest submissions).
        ("search, name, no match", "/console/search/?q=Nobody%20Known"),
    ]


def _uncached_get(client: httpx.Client, url: str) -> httpx.Response:
    cache.clear()
    return client.get(url)


def _cursor_at_depth(client: httpx.Client, *, pages: int) -> tuple[str, int]:
    """Follows the queue's own "Next" link, as a reviewer would, up to `pages` times
    (fewer on a small seed); returns the cursor and how many links were followed."""
    cursor = ""
    followed = 0
    for _ in range(pages):
        response = client.get("/console/cases/", params={"after": cursor} if cursor else {})
        _ok(response)
        found = NEXT_LINK.search(response.text)
        if found is None:
            break
        cursor = found.group(1)
        followed += 1
    if not followed:
        raise BenchmarkError("the queue page has no Next link")
    return cursor, followed


def _sample_case(open_cases: QuerySet[ReviewCase], open_count: int) -> tuple[int, str, str]:
    """A case well inside the queue (the 5,001st oldest at full scale): its id, and the
    event and operation keys the search pages look for."""
    sample = open_cases.select_related("event", "operation").order_by("created_at", "id")[
        min(SAMPLE_CASE, open_count // 2)
    ]
    if sample.event is None or sample.operation is None:
        raise BenchmarkError(f"case {sample.pk} has no event or operation: seed again")
    return sample.pk, sample.event.key, sample.operation.key


def _time(
    render: Callable[[], httpx.Response], baseline: Callable[[], httpx.Response], rounds: int
) -> tuple[list[float], int, list[float]]:
    for _ in range(3):
        _ok(render())
        _ok(baseline())
    timings: list[float] = []
    base: list[float] = []
    queries = 0
    for _ in range(rounds):
        started = time.perf_counter()
        _ok(baseline())
        base.append((time.perf_counter() - started) * 1000)
        counter = QueryCounter()
        with connection.execute_wrapper(counter):
            started = time.perf_counter()
            _ok(render())
            timings.append((time.perf_counter() - started) * 1000)
        queries = counter.count
    return timings, queries, base


def _ok(response: httpx.Response) -> None:
    if response.status_code != 200:
        raise BenchmarkError(f"{response.request.url.path} answered {response.status_code}")


def _percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1, round(pct / 100 * len(ordered)) - 1))
    return ordered[index]
