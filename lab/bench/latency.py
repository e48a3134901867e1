"""Benchmark of the latency under load: submit to confirmation (not a unit test).

Submissions are posted at a steady open-loop rate (each at its own moment, whether
or not the ones before have been answered) to Onefold's `POST /api/v1/submissions/`
on its real gunicorn, and run by one real `qcluster` against the sandbox (its own
process, HTTP and SMTP on loopback). A submission's latency is from the moment it
was due to be sent to the moment the sandbox's SMTP sink stored its confirmation
(the sink stamps each message it stores: `received_at`). The messages are read once
the run is over: asking the sandbox during the run would take its store's one lock,
which Onefold's own calls would then wait behind.

The baseline is measured in the same run, at the same rate: the bare path, a bare
DRF endpoint that inserts one row (`lab/bench/bare_endpoint.py`, served by the same
gunicorn settings) and then the same three effects (record, task, SMTP message) sent
straight into the sandbox by the client, with no queue, no claim, no attempt record.

Where Onefold's time goes is read from its own records: the event's `received_at`,
each attempt's `started_at` and `finished_at`, and the sink's stamp. The stages of a
submission add up to its latency: ingest (due to sent, then the event row written),
queue wait (the event to the first step's claim), each step and the gap before the
next one's claim, and the confirmation's step to the sink's stamp. The breakdown
gives each stage's median over all submissions of the rate and its mean over the
slowest twentieth (those at or above the p95): the stage where the tail's time goes.

It refuses a database whose name does not contain "bench": it empties the tables.
`manage.py bench_latency` runs it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import smtplib
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings

from idempotency_core.models import Attempt, Event
from idempotency_core.platform.env import database_url_of
from lab.bench.bare_endpoint import BARE_PATH, BARE_TABLE
from lab.bench.cpu import BackendsWatch, own_backend, tree_cpu
from lab.bench.ingest import INGEST_PATH, bare_table_create, post, start_server
from lab.bench.ingest import bench_source as api_source
from lab.bench.pipeline import (
    BenchmarkError,
    Sandbox,
    bare_effects,
    bench_source,
    clusters_running,
    effects_wait,
    payload_for,
    sandbox_running,
)
from lab.bench.tables import bench_tables_empty

Out = Callable[[str], None]
# The bound for submit-to-confirmation at 50 submissions a second.
TARGET_P95_MS = 250.0
TARGET_RATE = 50.0
_THREADS = 32
_STAMP = "%Y-%m-%dT%H:%M:%S.%fZ"  # the sandbox's received_at (lab/sandbox/store.py)


@dataclass
class Sent:
    """A run's submissions: when each was due (wall clock, seconds), by index."""

    run: str
    due: dict[int, float] = field(default_factory=dict)
    answered: dict[int, float] = field(default_factory=dict)
    received: dict[str, float] = field(default_factory=dict)  # the sink's, by recipient


@dataclass(frozen=True)
class LatencyRun:
    label: str
    rate: float
    latencies: list[float]  # seconds, due to the sink's stamp
    lost: int  # submissions whose confirmation never reached the sink
    load: float  # the machine's 1-minute load average at the run's end
    # CPU ms a submission of the worker cluster and of PostgreSQL's backends (Onefold)
    cpu_ms: tuple[float, float] | None = None

    def percentile(self, share: float) -> float:
        return _percentile(self.latencies, share) if self.latencies else math.nan

    @property
    def p50(self) -> float:
        return self.percentile(0.5)

    @property
    def p95(self) -> float:
        return self.percentile(0.95)


def open_loop(rate: float, count: int, send: Callable[[int], None], sent: Sent) -> None:
    """Calls `send(i)` for i in range(count), each due at the start plus i / rate, from a
    pool of threads: a slow answer does not delay the next submission, and one sent late
    (every thread busy) is timed from when it was due."""
    failures: list[BaseException] = []

    def one(index: int) -> None:
        send(index)
        sent.answered[index] = time.time()

    with ThreadPoolExecutor(max_workers=_THREADS) as pool:
        start = time.time() + 0.05
        futures: list[Future[None]] = []
        for index in range(count):
            due = start + index / rate
            time.sleep(max(0.0, due - time.time()))
            sent.due[index] = due
            futures.append(pool.submit(one, index))
        for future in futures:
            failure = future.exception()
            if failure is not None:
                failures.append(failure)
    if failures:
        raise BenchmarkError(f"{len(failures)} submissions failed: {failures[0]!r}")


def stamps(sandbox: Sandbox, *, count: int) -> dict[str, float]:
    """The sink's stamp of each message stored, by recipient, once `count` are there (or
    after 30 s, whatever is there)."""
    with contextlib.suppress(BenchmarkError):  # a message missing is reported as lost
        effects_wait(sandbox, count=count, timeout=30, every=0.2)
    response = sandbox.client.get("/_sandbox/messages")
    response.raise_for_status()
    return {
        message["rcpt_to"][0]: datetime.strptime(message["received_at"], _STAMP)
        .replace(tzinfo=UTC)
        .timestamp()
        for message in response.json()["results"]
    }


def latencies_of(sent: Sent) -> tuple[list[float], int]:
    """Each submission's latency (seconds), and how many never reached the sink."""
    latencies, lost = [], 0
    for index, due in sent.due.items():
        stamp = sent.received.get(payload_for(sent.run, index)["contact"]["email"])
        if stamp is None:
            lost += 1
        else:
            latencies.append(stamp - due)
    return latencies, lost


# -- Onefold ----------------------------------------------------------------------


@dataclass(frozen=True)
class Onefold:
    """Onefold's web server, and the API key its source's submissions carry."""

    port: int
    api_key: str

    def submit(self, run: str, index: int) -> None:
        key = f"{run}-{index}"
        status, body = post(
            self.port,
            INGEST_PATH,
            json.dumps(payload_for(run, index)).encode(),
            {"Authorization": f"Api-Key {self.api_key}", "Idempotency-Key": key},
        )
        if status != 202:
            raise BenchmarkError(f"submission {key}: {status} {body[:200]!r}")


def onefold_run(
    sandbox: Sandbox, servers: Servers, *, rate: float, count: int
) -> tuple[LatencyRun, Sent]:
    """`count` submissions at `rate` a second through Onefold's API and one cluster."""
    bench_tables_empty()
    sandbox.reset()
    source = bench_source(sandbox)
    _, api_key = api_source(source.name)
    onefold = Onefold(servers.onefold, api_key)
    with clusters_running(1) as roots:
        warm = Sent(run=uuid.uuid4().hex[:8])  # imports, connections, caches
        open_loop(5, 6, lambda index: onefold.submit(warm.run, index), warm)
        stamps(sandbox, count=6)
        sandbox.reset()
        sent = Sent(run=uuid.uuid4().hex[:8])
        cluster = tree_cpu(roots)
        with BackendsWatch(exclude=[own_backend()]) as database:
            open_loop(rate, count, lambda index: onefold.submit(sent.run, index), sent)
            sent.received = stamps(sandbox, count=count)
        cpu = ((tree_cpu(roots) - cluster) * 1000 / count, database.spent * 1000 / count)
    latencies, lost = latencies_of(sent)
    return LatencyRun("Onefold", rate, latencies, lost, os.getloadavg()[0], cpu), sent


# -- the bare path ------------------------------------------------------------------


def bare_run(sandbox: Sandbox, servers: Servers, *, rate: float, count: int) -> LatencyRun:
    """The same rate through the bare endpoint, then the three effects from the client."""
    bench_tables_empty(BARE_TABLE)
    sandbox.reset()
    local = threading.local()
    with ExitStack() as stack:
        client = stack.enter_context(httpx.Client(base_url=sandbox.http_url, timeout=60))
        mails: list[smtplib.SMTP] = []
        stack.callback(lambda: [mail.quit() for mail in mails])

        def send(run: str, index: int) -> None:
            if not hasattr(local, "mail"):  # smtplib's client is one thread's
                local.mail = smtplib.SMTP("127.0.0.1", sandbox.smtp_port, timeout=60)
                mails.append(local.mail)
            key = f"bare-{run}-{index}"
            body = json.dumps(payload_for(run, index)).encode()
            status, _ = post(servers.bare, BARE_PATH, body, {"Idempotency-Key": key})
            if status != 201:
                raise BenchmarkError(f"bare endpoint answered {status}")
            bare_effects(client, local.mail, run=run, index=index)

        warm = Sent(run=uuid.uuid4().hex[:8])
        open_loop(5, 6, lambda index: send(warm.run, index), warm)
        sandbox.reset()
        sent = Sent(run=uuid.uuid4().hex[:8])
        open_loop(rate, count, lambda index: send(sent.run, index), sent)
    sent.received = stamps(sandbox, count=count)
    latencies, lost = latencies_of(sent)
    return LatencyRun("bare path", rate, latencies, lost, os.getloadavg()[0])


@dataclass(frozen=True)
class Servers:
    onefold: int  # ports
    bare: int


@contextmanager
def servers_running() -> Iterator[Servers]:
    """Onefold's gunicorn and the bare endpoint's, as `bench_ingest` starts them, on this
    database."""
    bare_table_create()
    log_dir = Path(tempfile.mkdtemp(prefix="bench_latency_"))
    env = {"DATABASE_URL": database_url_of(settings.DATABASES["default"])}
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, log_dir, ignore_errors=True)
        ports = []
        for name, app in (("onefold", "config.wsgi"), ("bare", "lab.bench.bare_wsgi")):
            server = start_server(name, app, log_dir, env=env)
            stack.callback(server.stop)
            ports.append(server.port)
        yield Servers(*ports)


# -- where the time goes ------------------------------------------------------------


def stages_of(sent: Sent) -> dict[int, dict[str, float]]:
    """Each submission's stages (seconds, in order; they add up to its latency), from
    the event's row, its attempts and the sink's stamp. An operation attempted more
    than once counts from its first claim to its last outcome."""
    prefix = f"{sent.run}-"
    received = dict(Event.objects.filter(key__startswith=prefix).values_list("key", "received_at"))
    steps: dict[str, dict[int, list[Any]]] = {}
    attempts = Attempt.objects.filter(operation__event__key__startswith=prefix).order_by(
        "operation__position", "number"
    )
    for key, position, step, started, finished in attempts.values_list(
        "operation__event__key",
        "operation__position",
        "operation__step",
        "started_at",
        "finished_at",
    ):
        span = steps.setdefault(key, {}).setdefault(position, [step, started, finished])
        span[2] = finished
    stages = {}
    for index, due in sent.due.items():
        key = f"{prefix}{index}"
        stamp = sent.received.get(payload_for(sent.run, index)["contact"]["email"])
        if key not in received or stamp is None or key not in steps:
            continue
        stages[index] = _stages(due, received[key].timestamp(), steps[key], stamp)
    return stages


def _stages(
    due: float, event_at: float, spans: dict[int, list[Any]], stamp: float
) -> dict[str, float]:
    stages = {"ingest (due to the event's row)": event_at - due}
    ordered = [spans[position] for position in sorted(spans)]
    before = event_at
    for number, (step, started, finished) in enumerate(ordered):
        gap = "queue wait (event to first claim)" if number == 0 else "gap before " + step
        stages[gap] = started.timestamp() - before
        if number == len(ordered) - 1:
            stages[f"{step} (claim to the sink's stamp)"] = stamp - started.timestamp()
        else:
            stages[step] = (finished or started).timestamp() - started.timestamp()
            before = (finished or started).timestamp()
    return stages


def breakdown(run: LatencyRun, sent: Sent, out: Out) -> None:
    """Each stage's median over the run and its mean over the slowest twentieth."""
    stages = stages_of(sent)
    if not stages:
        out("no submission has a full record: no breakdown")
        return
    latency = {index: sent.received[_recipient(sent, index)] - sent.due[index] for index in stages}
    slowest = [index for index, value in latency.items() if value >= run.p95]
    out(
        f"Where the time goes at {run.rate:g}/s: {len(stages)} submissions, the slowest "
        f"{len(slowest)} at or above the p95 ({run.p95 * 1000:.0f} ms)"
    )
    out("| stage | median, all (ms) | p95, all (ms) | mean of the slowest (ms) |")
    out("| --- | ---: | ---: | ---: |")
    names = list(next(iter(stages.values())))
    for name in names:
        values = [stage[name] for stage in stages.values() if name in stage]
        tail = [stages[index][name] for index in slowest if name in stages[index]]
        out(
            f"| {name} | {statistics.median(values) * 1000:.1f} "
            f"| {_ms(values, 0.95)} | {statistics.fmean(tail) * 1000 if tail else 0:.1f} |"
        )
    answers = [sent.answered[i] - sent.due[i] for i in stages if i in sent.answered]
    out(
        f"| (API's answer: due to the 202 read, not added) "
        f"| {statistics.median(answers) * 1000:.1f} | {_ms(answers, 0.95)} | |"
    )


def _recipient(sent: Sent, index: int) -> str:
    email: str = payload_for(sent.run, index)["contact"]["email"]
    return email


def _percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)]


def _ms(values: list[float], share: float) -> str:
    return f"{_percentile(values, share) * 1000:.1f}"


# -- the report -----------------------------------------------------------------------


def bench_latency_measure(*, rates: list[float], seconds: float, out: Out) -> list[LatencyRun]:
    """Per rate, the bare path then Onefold; the table; the breakdown at the top rate."""
    workers = int(settings.Q_CLUSTER["workers"])
    out(
        f"open loop, {seconds:g} s a rate; Onefold: gunicorn, one cluster of {workers} "
        f"workers, poll {settings.Q_CLUSTER['poll']} s; load average at the start "
        f"{os.getloadavg()[0]:.2f}"
    )
    runs: list[tuple[LatencyRun, LatencyRun, Sent]] = []
    with sandbox_running() as sandbox, servers_running() as servers:
        for rate in rates:
            count = max(1, round(rate * seconds))
            bare = bare_run(sandbox, servers, rate=rate, count=count)
            onefold, sent = onefold_run(sandbox, servers, rate=rate, count=count)
            runs.append((bare, onefold, sent))
    out(
        "| rate (/s) | path | submissions | p50 (ms) | p95 (ms) | max (ms) | lost | load "
        "| CPU ms a submission: cluster + PostgreSQL |"
    )
    out("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for bare, onefold, _ in runs:
        for run in (bare, onefold):
            out(_row(run))
    for bare, onefold, _ in runs:
        out(
            f"{onefold.rate:g}/s: Onefold's p95 {onefold.p95 * 1000:.0f} ms, the bare path's "
            f"{bare.p95 * 1000:.0f} ms ({onefold.p95 / bare.p95:.1f}x)"
            + (_verdict(onefold) if onefold.rate == TARGET_RATE else "")
        )
    bare, onefold, sent = runs[-1]
    breakdown(onefold, sent, out)
    return [run for bare, onefold, _ in runs for run in (bare, onefold)]


def _row(run: LatencyRun) -> str:
    cpu = f"{run.cpu_ms[0]:.1f} + {run.cpu_ms[1]:.1f}" if run.cpu_ms else ""
    if not run.latencies:
        return f"| {run.rate:g} | {run.label} | 0 | | | | {run.lost} | {run.load:.2f} | {cpu} |"
    return (
        f"| {run.rate:g} | {run.label} | {len(run.latencies) + run.lost} "
        f"| {run.p50 * 1000:.0f} | {run.p95 * 1000:.0f} | {max(run.latencies) * 1000:.0f} "
        f"| {run.lost} | {run.load:.2f} | {cpu} |"
    )


def _verdict(run: LatencyRun) -> str:
    met = run.p95 * 1000 < TARGET_P95_MS and not run.lost
    return f"; {'meets' if met else 'MISSES'} the target (p95 < {TARGET_P95_MS:.0f} ms, none lost)"
